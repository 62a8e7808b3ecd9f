"""A replica's rotation with the daemon as systemd runs it (issue 37), on a stand-in engine behind
the shipped Nginx example: a ``kill -9`` mid-run leaves the replica out, and the next daemon's
repair puts it back once it serves; a flag a killed drain left is taken back once the engine
serves; a run that fails leaves the replica out, notified, and status and /metrics say so. Its
only peer does not answer (crashes and typed restarts need none)."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.standin.stage import Stage, free_port, wait_healthy
from sparkwarden.restart import rotation
from tests.actions.test_operator_tools import REPLICA_ONLY, Receiver
from tests.kits.commands import history, run_cli
from tests.kits.daemonkit import DaemonProcess, stalling, wait_for
from tests.kits.gatewaykit import Nginx
from tests.restart.test_fault_matrix import kill_mid_run, repairs

#: An address nothing answers on (TEST-NET-3, RFC 5737): the peer is unreachable.
NOWHERE = "root@203.0.113.1"
PEERS = [{"name": "spark1", "ssh": NOWHERE}, {"name": "spark2", "ssh": "root@spark2"}]


@pytest.fixture
def replica(stage: Stage, tmp_path: Path) -> Iterator[tuple[str, int, Nginx]]:
    """A stand-in engine and its Nginx (the example, its flag in tmp_path)."""
    llm, port = stage.llm("llm", "--boot-delay", "1")
    wait_healthy(port)
    with flag_folder() as flags:
        nginx = Nginx(tmp_path / "nginx", port, flag=flags / "out-of-rotation").start()
        try:
            yield llm, port, nginx
        finally:
            nginx.stop()


@contextlib.contextmanager
def flag_folder() -> Iterator[Path]:
    """Where the flag goes: a folder Nginx's workers (nobody) may look in, which pytest's
    (root's alone) are not."""
    folder = Path(tempfile.mkdtemp(prefix="sw-rotation-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def config_of(
    make_daemon_config: Any, llm: str, port: int, nginx: Nginx, **more: Any
) -> tuple[Path, Path]:
    flag = nginx.flag
    assert flag is not None
    replicas = {
        "self": "spark2",
        "check_interval": "1s",
        "turn_ttl": "1m",
        "connect_timeout": "1s",
        "nodes": PEERS,
        "rotation": {"url": f"http://127.0.0.1:{nginx.port}/v1", "flag": str(flag)},
    }
    return make_daemon_config([llm], port, [], replicas=replicas, **more), flag


def users_answered(nginx: Nginx) -> int:
    """What a user's request through this Spark's Nginx gets (no probe header)."""
    body = {
        "model": "standin/Qwen3.6-35B-A3B-NVFP4",
        "messages": [{"role": "user", "content": "hi"}],
    }
    url = f"http://127.0.0.1:{nginx.port}/v1/chat/completions"
    return httpx.post(url, json=body, timeout=10).status_code


@pytest.mark.docker
@pytest.mark.timeout(180)
@pytest.mark.parametrize("step", ["leave_rotation", "stop_llm", "chat_probe", "rejoin_rotation"])
def test_a_kill_9_mid_run_is_repaired_and_the_replica_back_in_rotation_once_it_serves(
    make_daemon_config: Any, replica: tuple[str, int, Nginx], tmp_path: Path, step: str
) -> None:
    llm, port, nginx = replica
    config, flag = config_of(make_daemon_config, llm, port, nginx)
    stalled = DaemonProcess(config, tmp_path / "stalled.log", stalling(step, tmp_path)).start()

    def cut_short() -> None:
        if step != "rejoin_rotation":  # out while the run is cut short: users go to the peer
            assert flag.exists() and users_answered(nginx) == 503

    kill_mid_run(stalled, config, step, cut_short)
    repairer = DaemonProcess(config, tmp_path / "repair.log").start()
    try:
        [repair] = repairs(config)
        assert repair["result"] == "ok", repair
        steps = {s["name"]: s for s in repair["steps"]}
        assert steps["rejoin_rotation"]["result"] == "ok", steps["rejoin_rotation"]
        assert not flag.exists() and users_answered(nginx) == 200
    finally:
        repairer.stop()


@pytest.mark.docker
@pytest.mark.timeout(120)
def test_a_flag_a_killed_drain_left_is_taken_back_once_the_engine_serves(
    make_daemon_config: Any, replica: tuple[str, int, Nginx], tmp_path: Path
) -> None:
    llm, port, nginx = replica
    config, flag = config_of(
        make_daemon_config, llm, port, nginx, health={"interval": "0.5s", "chat_interval": "1s"}
    )
    rotation.take_out(flag, "planned schedule restart: draining")  # the killed daemon's
    assert users_answered(nginx) == 503
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        wait_for("back in rotation", lambda: not flag.exists(), timeout=60)
        assert users_answered(nginx) == 200
        assert "rejoined_rotation" in daemon.text()
        assert history(config) == []  # no run: nothing was restarted
    finally:
        daemon.stop()


@pytest.mark.docker
@pytest.mark.timeout(150)
def test_a_failed_run_leaves_the_replica_out_notified_and_status_and_metrics_say_so(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm("llm", "--mode", "chat-fails")
    wait_healthy(port)
    with flag_folder() as flags:
        nginx = Nginx(tmp_path / "nginx", port, flag=flags / "out-of-rotation").start()
        try:
            failed_run_stays_out(make_daemon_config, llm, port, nginx, tmp_path)
        finally:
            nginx.stop()


def failed_run_stays_out(
    make_daemon_config: Any, llm: str, port: int, nginx: Nginx, tmp_path: Path
) -> None:
    hook = Receiver()
    hook_file = tmp_path / "hook-url"
    hook_file.write_text(hook.url("/hook"))
    metrics = free_port()
    config, flag = config_of(
        make_daemon_config,
        llm,
        port,
        nginx,
        health={"chat_interval": "0s"},  # the failing chat is the run's, not the health check's
        budget={"max_runs": 1},
        metrics={"listen": f"127.0.0.1:{metrics}"},
        notify=[{"kind": "webhook", "url_file": str(hook_file), "min_interval": "1s"}],
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        done = run_cli(config, "restart")
        assert done.returncode != 0, done.stdout
        said = rotation.read(flag)
        assert said is not None and said.run == history(config)[0]["id"]
        assert users_answered(nginx) == 503
        told = wait_for(
            "the out_of_rotation notification",
            lambda: [g for g in hook.got if json.loads(g["body"])["event"] == "out_of_rotation"],
        )
        body = json.loads(told[0]["body"])
        assert (
            body["subject"] == "spark2" and "stays out of the gateway's rotation" in body["summary"]
        )
        status = run_cli(config, "status").stdout
        assert "rotation:    OUT since" in status and f"run #{said.run}" in status, status
        scrape = httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=5).text
        families = {f.name for f in text_string_to_metric_families(scrape)}
        assert families >= REPLICA_ONLY, REPLICA_ONLY - families
        assert "sparkwarden_replicas 2.0" in scrape
        assert "sparkwarden_replicas_turn_taken 0.0" in scrape  # the first node unreachable
        assert "sparkwarden_replica_in_rotation 0.0" in scrape
        assert "sparkwarden_replicas_serving 0.0" in scrape  # itself out, its peer unreachable
        later = daemon.after_looks(6)
        assert later["replicas"]["rotation"]["run"] == said.run  # still out: not taken back
        assert len([g for g in hook.got if "out_of_rotation" in g["body"]]) == 1  # said once
    finally:
        daemon.stop()
        hook.server.shutdown()
