"""A cluster of two simulated Sparks restarted and watched from its head, on real parts: each
node a network namespace with its own dockerd and sshd, reached over real SSH, running the
multi-node stand-in (rank 0 on the head, a headless rank on the worker)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from devtools.standin.stage import free_port, skeleton
from sparkwarden.base import faults
from sparkwarden.cluster.link import CONTROL_PREFIX
from sparkwarden.restart.step_names import CLUSTER_STEPS, RAY_STEPS
from tests.kits.clusterkit import (
    ClusterKit,
    Engine,
    LauncherEngine,
    Node,
    RayEngine,
    end_shared_ssh,
)
from tests.kits.commands import ROOT, killed_at_exit

DOCS = ROOT / "docs" / "clusters.md"


@pytest.fixture(scope="module")
def kit() -> Iterator[ClusterKit]:
    kit = ClusterKit(("head", "w1"))
    yield kit
    kit.close()


@pytest.fixture
def engine(kit: ClusterKit, tmp_path: Path) -> Iterator[Engine]:
    engine = Engine(kit, tmp_path)
    engine.wait_serving()
    yield engine
    engine.close()


class HeadDaemon:
    """``sparkwarden run`` on the head, its output in a file (a pipe nobody reads would fill
    and block it)."""

    def __init__(self, kit: ClusterKit, engine: Engine, log: Path) -> None:
        self.engine, self.log = engine, log
        redirect = 'exec "$@" >"$0" 2>&1'
        proc = kit.head.docker.run(
            "sh", "-c", redirect, str(log), *engine.argv("run"), background=True
        )
        assert isinstance(proc, subprocess.Popen)
        self.proc = proc

    def alive(self) -> bool:
        return self.proc.poll() is None

    def said(self) -> str:
        """Its log so far (nothing before its shell made the file)."""
        return self.log.read_text() if self.log.exists() else ""

    def wait_said(self, event: str, timeout: float = 60) -> None:
        """Until its log has said ``event`` (e.g. it adopted the engine it watches)."""
        deadline = time.monotonic() + timeout
        while f'"event": "{event}"' not in self.said():
            assert time.monotonic() < deadline and self.alive(), self.said()[-3000:]
            time.sleep(0.3)

    def wait_restarted(self, node: str, name: str, before: str) -> None:
        """Until ``name`` on ``node`` has started again (it started at ``before``) and the
        cluster serves, its run a crash's, ended ok."""
        deadline = time.monotonic() + 120
        while self.engine.started_at(node, name) == before:
            assert time.monotonic() < deadline and self.alive(), self.said()[-3000:]
            time.sleep(0.5)
        assert self.engine.wait_serving(timeout=60)["state"] == "serving"
        run = self.runs_ended()[0]
        assert run["reason"] == "crash" and run["result"] == "ok", run

    def runs_ended(self, timeout: float = 60) -> list[dict[str, Any]]:
        """``history`` once its newest run has ended: a cluster serves, and voice is resumed,
        a moment before the run that did it is recorded as ended."""
        deadline = time.monotonic() + timeout
        while not (runs := json.loads(self.engine.cli("history", "--json").stdout))[0]["ended_at"]:
            assert time.monotonic() < deadline and self.alive(), self.said()[-3000:]
            time.sleep(1.0)  # each read is a Python of its own on the head
        return list(runs)

    def stop(self) -> str:
        """Ended by its pid; no shared SSH connection of its own outlives it. Its log."""
        self.proc.terminate()
        self.proc.communicate(timeout=60)
        assert not list(Path(tempfile.gettempdir()).glob(f"{CONTROL_PREFIX}{self.proc.pid}-*"))
        return self.said()


def finish(daemon: HeadDaemon | None, engine: Engine) -> str:
    """A daemon test's end: the daemon it started stopped (stopping one already ended is
    harmless), its log returned, and its engine removed even when stopping fails."""
    try:
        return daemon.stop() if daemon is not None else ""
    finally:
        engine.close()


def cut_after_stop_workers(kit: ClusterKit, engine: Engine) -> None:
    """A ``cluster restart`` on the head killed (-9, by its pid) once every rank is stopped and
    the worker's voice paused, before its stop_workers step is recorded."""
    faults = {"SPARKWARDEN_ENABLE_FAULTS": "1", "SPARKWARDEN_FAULT_STALL_AT": "stop_workers"}
    run = kit.head.docker.run(*engine.argv("cluster", "restart"), env=faults, background=True)
    assert isinstance(run, subprocess.Popen)
    worker = engine.stages["w1"]
    deadline = time.monotonic() + 60
    while not (
        worker.status(engine.worker) == "exited" and worker.status(engine.voice[0]) == "paused"
    ):
        assert time.monotonic() < deadline and run.poll() is None
        time.sleep(0.2)
    time.sleep(0.5)  # held after stop_workers acted, before it is recorded
    run.kill()
    run.communicate()
    end_shared_ssh(kit, run.pid)


def every_step_ok(printed: str, order: tuple[str, ...]) -> None:
    """Each step's line says ok, in ``order``; the users' path is not probed (no [gateway])."""
    said = re.findall(r"\] (\w+)\s+(ok|skipped|failed)", printed)
    assert said == [(name, "ok") for name in order[:-1]] + [("gateway_probe", "skipped")], printed


def test_healthy_cluster_restarted_as_one_over_ssh(engine: Engine) -> None:
    ids = {
        n: engine.stages[n].attrs(c)["Id"]
        for n, c in (("head", engine.head), ("w1", engine.worker))
    }
    before = {n: engine.started_at(n, c) for n, c in (("head", engine.head), ("w1", engine.worker))}
    # the head's plan is the cluster's (it printed a lone host's 9 steps), touching nothing
    dry = engine.cli("restart", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert re.findall(r"^\[ ?\d+/13\] (\w+) ", dry.stdout, re.M) == list(CLUSTER_STEPS), dry.stdout
    assert engine.worker in dry.stdout and "no [gateway] configured" in dry.stdout, dry.stdout
    assert before == {
        n: engine.started_at(n, c) for n, c in (("head", engine.head), ("w1", engine.worker))
    }
    result = engine.cli("cluster", "restart")
    assert result.returncode == 0, result.stdout + result.stderr
    every_step_ok(result.stdout, CLUSTER_STEPS)  # every step ok, in the one order
    for node, name in (("head", engine.head), ("w1", engine.worker)):
        attrs = engine.stages[node].attrs(name)
        assert attrs["Id"] == ids[node]  # the same containers
        assert attrs["State"]["StartedAt"] != before[node] and attrs["State"]["Status"] == "running"
    logs = engine.stages["head"].client.containers.get(engine.head).logs().decode()
    assert logs.count("rank 1 joined") == 2  # the worker's fresh rank joined the fresh head
    assert engine.wait_serving()["state"] == "serving"
    history = json.loads(engine.cli("history", "--json").stdout)
    drop = next(s for s in history[0]["steps"] if s["name"] == "drop_caches")
    assert set(drop["detail"]["nodes"]) == {"head", "w1"}
    assert all("available_after_gib" in f for f in drop["detail"]["nodes"].values())


def test_dead_worker_is_a_crash_while_head_health_says_200(engine: Engine) -> None:
    engine.stages["w1"].client.containers.get(engine.worker).kill()
    state = engine.status()
    assert state["state"] == "crashed", state
    assert state["head_health"] == "up"  # what a head-only watchdog would believe
    assert "w1" in state["summary"]
    assert engine.cli("cluster", "status").returncode == 1
    # and restarting the cluster as one brings the rank back
    result = engine.cli("cluster", "restart")
    assert result.returncode == 0, result.stdout + result.stderr
    assert engine.wait_serving()["state"] == "serving"


def test_the_daemon_on_the_head_repairs_a_cut_run_and_restarts_a_dead_rank(
    kit: ClusterKit, tmp_path: Path
) -> None:
    """``sparkwarden run`` on the head: a cluster run cut short (killed -9 after stopping every
    rank, the worker's voice paused) is repaired at its start, the whole cluster restarted as
    one; then a worker's rank killed while the head's /health says 200 is seen on two looks in
    a row and the cluster restarted as one again."""
    engine = Engine(
        kit,
        tmp_path,
        worker_voice=True,
        # vLLM's own VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS: the kit's 2 s let a health chat that
        # came after the kill end the head's engine before the head's second look over SSH (a
        # loaded box), and the cluster was restarted for that crash instead: the two looks
        # this test is about were never said
        head_args=("--collective-timeout", "300"),
        cluster={"watch_interval": "1s"},
        watch={"interval": "1s"},
        control={"socket": str(tmp_path / "control.sock"), "group": ""},
        metrics={"listen": f"127.0.0.1:{free_port()}"},
    )
    daemon = None
    try:
        engine.wait_serving()
        stages = engine.stages
        cut_after_stop_workers(kit, engine)

        daemon = HeadDaemon(kit, engine, tmp_path / "daemon.log")
        assert engine.wait_serving(timeout=120)["state"] == "serving"
        deadline = time.monotonic() + 60  # the repair run's last step: the cut run's pause undone
        while stages["w1"].status(engine.voice[0]) != "running":
            assert time.monotonic() < deadline and daemon.alive()
            time.sleep(0.3)
        runs = daemon.runs_ended()
        assert [(r["reason"], r["result"]) for r in runs[:2]] == [
            ("repair", "ok"),
            ("manual", "interrupted"),
        ], runs[:2]
        # the head's plan asked of its daemon (made there, from a look at every node): the
        # cluster's 13 steps, as the command prints it made by itself, and kept as a dry run
        dry = engine.cli("restart", "--dry-run")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert dry.stdout.startswith(
            "sparkwarden restart --dry-run: nothing will be touched. The cluster's plan:"
        )
        assert re.findall(r"^\[ ?\d+/13\] (\w+) ", dry.stdout, re.M) == list(CLUSTER_STEPS)
        assert '"cmd": "dry-run"' in daemon.said(), daemon.said()[-3000:]
        assert daemon.runs_ended()[0]["result"] == "dry-run"

        before = engine.started_at("w1", engine.worker)
        stages["w1"].client.containers.get(engine.worker).kill()
        deadline = time.monotonic() + 120
        daemon.wait_restarted("w1", engine.worker, before)
        runs = json.loads(engine.cli("history", "--json").stdout)
        assert [s["name"] for s in runs[0]["steps"]] == list(CLUSTER_STEPS)
        status = json.loads(engine.cli("status", "--json").stdout)
        assert status["cluster_watch"]["state"] in ("serving", "crashed"), status
        # the alert ClusterNodeDown reads each node's gauge from the head's exporter
        scrape = (
            "import httpx, sys; from prometheus_client.parser import text_string_to_metric_families"
            " as read; text = httpx.get(sys.argv[1]).text;"
            " print({s.labels['node']: s.value for f in read(text)"
            " if f.name == 'sparkwarden_cluster_node_up' for s in f.samples})"
        )
        url = f"http://{engine.metrics_listen}/metrics"
        deadline = time.monotonic() + 30
        while True:
            result = kit.head.docker.run(sys.executable, "-c", scrape, url)
            assert isinstance(result, subprocess.CompletedProcess), result
            if result.stdout.strip() == "{'head': 1.0, 'w1': 1.0}":
                break
            assert time.monotonic() < deadline, result.stdout + result.stderr
            time.sleep(0.5)
    finally:
        said = finish(daemon, engine)
    assert "cluster crashed on 2 checks in a row: the engine on w1 is down" in said, said[-3000:]


def test_stopped_mid_boot_the_daemon_hands_the_cluster_boot_over_to_the_next(
    kit: ClusterKit, tmp_path: Path
) -> None:
    """``systemctl stop`` (SIGTERM) while a cluster run waits for the head's boot: the run stays
    open with the worker's voice still paused (never beside an unproven engine). The next
    daemon proves that boot without restarting anything; stopped in its turn during that wait,
    the one after proves it again; only then is the voice resumed."""
    engine = Engine(
        kit,
        tmp_path,
        worker_voice=True,
        # long enough that two daemons in turn, each stopped, find it still booting on a
        # machine busy with the rest of the suite
        head_args=("--boot-delay", "40"),
        cluster={"watch_interval": "1s"},
        watch={"interval": "1s"},
        control={"socket": str(tmp_path / "control.sock"), "group": ""},
    )
    daemon = None
    voice = engine.stages["w1"]

    def history() -> list[dict[str, Any]]:
        return list(json.loads(engine.cli("history", "--json").stdout))

    def stopped_in_boot_wait(reason: str) -> None:
        """Once the newest run (``reason``) waits for /health: the daemon stopped, the run
        left open, the voice still paused."""
        assert daemon is not None
        deadline = time.monotonic() + 60
        while not (
            (runs := history())
            and runs[0]["reason"] == reason
            and any(s["name"] == "wait_health" for s in runs[0]["steps"])
        ):
            assert time.monotonic() < deadline and daemon.alive(), daemon.said()[-3000:]
            time.sleep(0.2)
        daemon.stop()
        assert history()[0]["result"] == "running", history()[0]
        assert voice.status(engine.voice[0]) == "paused"

    try:
        engine.wait_serving(timeout=120)
        daemon = HeadDaemon(kit, engine, tmp_path / "daemon.log")
        daemon.wait_said("engine_adopted")
        asked = kit.head.docker.run(*engine.argv("restart", "--reason", "test"), background=True)
        assert isinstance(asked, subprocess.Popen)
        stopped_in_boot_wait("manual:test")
        asked.communicate(timeout=30)
        booted_at = engine.started_at("head", engine.head)

        daemon = HeadDaemon(kit, engine, tmp_path / "daemon2.log")  # proves, and is stopped
        stopped_in_boot_wait("repair")

        daemon = HeadDaemon(kit, engine, tmp_path / "daemon3.log")  # proves it again
        deadline = time.monotonic() + 90
        while voice.status(engine.voice[0]) != "running":
            assert time.monotonic() < deadline and daemon.alive(), daemon.said()[-3000:]
            time.sleep(0.3)
        runs = daemon.runs_ended()
        assert [(r["reason"], r["result"]) for r in runs[:3]] == [
            ("repair", "ok"),
            ("repair", "interrupted"),
            ("manual:test", "interrupted"),
        ], runs[:3]
        taken = {s["name"]: s["result"] for s in runs[0]["steps"]}
        assert taken["chat_probe"] == taken["workers_running"] == "ok", taken
        assert taken["stop_head"] == taken["start_head"] == "skipped", taken
        assert engine.started_at("head", engine.head) == booted_at  # proven, not restarted
    finally:
        finish(daemon, engine)


def test_cluster_removed_while_a_cut_run_waited_resumes_the_head_s_own_voice(
    kit: ClusterKit, tmp_path: Path
) -> None:
    """A cluster run killed mid-way, then ``[cluster]`` removed from the head's config before
    the daemon starts again: it cannot reach the nodes, so it resumes the voice the run paused
    on the head itself and names what stays paused elsewhere."""
    engine = Engine(
        kit,
        tmp_path,
        worker_voice=True,
        head_voice=True,
        control={"socket": str(tmp_path / "control.sock"), "group": ""},
    )
    daemon = None
    try:
        engine.wait_serving()
        cut_after_stop_workers(kit, engine)
        assert engine.stages["head"].status(engine.head_voice[0]) == "paused"
        config = tomllib.loads(engine.config.read_text())
        del config["cluster"]
        engine.config.write_text(tomli_w.dumps(config))
        daemon = HeadDaemon(kit, engine, tmp_path / "daemon.log")
        daemon.wait_said("cluster_run_not_repaired")
        assert engine.stages["head"].status(engine.head_voice[0]) == "running"
        said = daemon.said()
        assert "only this host's voice is resumed" in said and engine.voice[0] in said, said
        assert engine.stages["w1"].status(engine.voice[0]) == "paused"  # out of reach: named
    finally:
        finish(daemon, engine)


def test_three_nodes_a_lost_rank_named_and_the_three_restarted_as_one(tmp_path: Path) -> None:
    """Three Sparks (rank 0 on the head, headless ranks 1 and 2): the second worker's rank
    killed is named, not guessed about the others, and one cluster restart brings all three
    back with the same containers, every node's figures in the journal."""
    kit3 = ClusterKit(("head", "w1", "w2"))
    engine = None
    try:
        engine = Engine(kit3, tmp_path)
        engine.wait_serving(timeout=60)
        ids = {n: engine.stages[n].attrs(c)["Id"] for n, c in engine.workers.items()}
        engine.stages["w2"].client.containers.get(engine.workers["w2"]).kill()
        state = engine.status()
        assert state["state"] == "crashed" and "w2" in state["summary"], state
        assert "w1" not in state["summary"], state
        result = engine.cli("cluster", "restart")
        assert result.returncode == 0, result.stdout + result.stderr
        every_step_ok(result.stdout, CLUSTER_STEPS)
        assert engine.wait_serving()["state"] == "serving"
        assert {n: engine.stages[n].attrs(c)["Id"] for n, c in engine.workers.items()} == ids
        logs = engine.stages["head"].client.containers.get(engine.head).logs().decode()
        assert logs.count("rank 1 joined") == logs.count("rank 2 joined") == 2, logs[-2000:]
        history = json.loads(engine.cli("history", "--json").stdout)
        drop = next(s for s in history[0]["steps"] if s["name"] == "drop_caches")
        assert set(drop["detail"]["nodes"]) == {"head", "w1", "w2"}
    finally:
        if engine is not None:
            engine.close()
        kit3.close()


def test_status_on_the_head_shows_every_node_over_ssh(kit: ClusterKit, engine: Engine) -> None:
    """``ssh spark sparkwarden status`` stays the one command: typed into the head over SSH, it
    shows every node; a dead worker and then an unreachable one are named."""

    def status(*args: str) -> subprocess.CompletedProcess[str]:
        return kit.ssh(kit.head, "head", *engine.argv("status", *args))

    cluster = json.loads(status("--json").stdout)["cluster"]
    assert cluster["problems"] == [] and cluster["state"] == "serving", cluster
    assert {n: v["reachable"] for n, v in cluster["nodes"].items()} == {"head": True, "w1": True}
    text = status().stdout
    assert re.search(
        rf"^  w1 +worker +reachable +{engine.worker} running, [\d.]+/[\d.]+ GiB", text, re.M
    ), text
    assert re.search(rf"^  head +head +reachable +{engine.head} running", text, re.M), text
    engine.stages["w1"].client.containers.get(engine.worker).kill()
    dead = status("--json")
    assert dead.returncode == 1
    assert json.loads(dead.stdout)["cluster"]["problems"] == [f"w1: {engine.worker} is exited"]
    kit.stop_sshd(kit.node("w1"))
    try:
        gone = status()
    finally:
        kit.start_sshd(kit.node("w1"))
    assert gone.returncode == 1
    assert re.search(
        r"^  w1 +worker +UNREACHABLE +node w1 is unreachable: ssh", gone.stdout, re.M
    ), gone.stdout


def test_doctor_on_the_head_sees_the_native_set_up_on_every_node(engine: Engine) -> None:
    """Read from the rank containers' own command lines, on each node, over SSH."""
    result = engine.cli("doctor")
    assert "INFO    cluster: sees the native set-up on every node (2 nodes)" in result.stdout
    assert "cluster: native ranks complete: head rank 0, w1 rank 1" in result.stdout, result.stdout


def test_ssh_down_at_preflight_touches_nothing(kit: ClusterKit, engine: Engine) -> None:
    worker = kit.node("w1")
    before = {n: engine.started_at(n, c) for n, c in (("head", engine.head), ("w1", engine.worker))}
    kit.stop_sshd(worker)
    try:
        result = engine.cli("cluster", "restart")
        status = engine.status()
    finally:
        kit.start_sshd(worker)
    assert result.returncode == 1
    assert "preflight" in result.stderr and "w1 is unreachable" in result.stderr, result.stderr
    assert status["state"] == "unknown" and not status["nodes"]["w1"]["reachable"]
    after = {n: engine.started_at(n, c) for n, c in (("head", engine.head), ("w1", engine.worker))}
    assert after == before
    assert engine.wait_serving()["state"] == "serving"


def other_image(node: Node) -> str:
    """The stand-in's skeleton again with one more folder: the same files, another image ID."""
    tag = f"swt-other-{uuid.uuid4().hex[:6]}"
    node.client().api.import_image_from_data(
        skeleton("other"), repository="sparkwarden-other", tag=tag
    )
    return f"sparkwarden-other:{tag}"


def test_mismatched_images_refused_before_anything_moves(kit: ClusterKit, tmp_path: Path) -> None:
    image = other_image(kit.node("w1"))
    engine = Engine(kit, tmp_path, worker_image=image)
    try:
        engine.wait_serving()
        before = engine.started_at("head", engine.head)
        result = engine.cli("cluster", "restart")
        assert result.returncode == 1
        assert "image differs between nodes" in result.stderr, result.stderr
        assert engine.started_at("head", engine.head) == before
        preflight = engine.cli("cluster", "preflight", "--json")
        assert preflight.returncode == 1 and "image differs" in preflight.stdout
    finally:
        engine.close()
        kit.node("w1").client().images.remove(image, force=True)


def test_memory_never_back_on_a_node_starts_nothing_and_resumes_voice(
    kit: ClusterKit, tmp_path: Path
) -> None:
    gate = {"start_min_available_gib": 100000, "start_wait": "2s", "drop_interval": "1s"}
    engine = Engine(kit, tmp_path, worker_voice=True, memory=gate)
    try:
        engine.wait_serving()
        result = engine.cli("cluster", "restart")
        assert result.returncode == 1
        assert (
            "failed at drop_caches" in result.stderr and "memory did not come back" in result.stderr
        )
        assert re.search(r"pause_voice\s+ok .*w1: swt-\w+-stt", result.stdout), result.stdout
        assert re.search(r"start_workers\s+skipped", result.stdout)
        assert engine.stages["w1"].status(engine.worker) == "exited"  # left down...
        assert engine.stages["head"].status(engine.head) == "exited"
        assert engine.stages["w1"].status(engine.voice[0]) == "running"  # ...voice resumed
        assert engine.status()["state"] == "down"
    finally:
        engine.close()


def test_killed_mid_run_the_next_run_puts_every_node_back(kit: ClusterKit, tmp_path: Path) -> None:
    engine = Engine(kit, tmp_path, worker_voice=True)
    try:
        engine.wait_serving()
        cut_after_stop_workers(kit, engine)
        stages = engine.stages
        assert engine.status()["state"] == "down"
        result = engine.cli("cluster", "restart")
        assert result.returncode == 0, result.stdout + result.stderr
        assert stages["w1"].status(engine.voice[0]) == "running"  # the dead run's pause undone
        assert engine.wait_serving()["state"] == "serving"
        runs = json.loads(engine.cli("history", "--json").stdout)
        assert [r["result"] for r in runs[:2]] == ["ok", "interrupted"]
    finally:
        engine.close()


def test_ctrl_c_mid_run_reaches_no_ssh_call_and_the_run_goes_on(
    kit: ClusterKit, tmp_path: Path
) -> None:
    """Ctrl-C at the terminal goes to the whole process group: the ``ssh`` calls of a
    ``cluster restart`` typed by hand must not die of it (a node would look unreachable and
    keep its voice paused). Sent while a call is in flight, after the worker's voice is
    paused: the run goes on to its end, every node serving, voice resumed."""
    engine = Engine(kit, tmp_path, worker_voice=True)
    try:
        engine.wait_serving()
        run = kit.head.docker.run(*engine.argv("cluster", "restart"), background=True, job=True)
        assert isinstance(run, subprocess.Popen)
        with killed_at_exit(run):
            deadline = time.monotonic() + 60
            while not (
                engine.stages["w1"].status(engine.voice[0]) == "paused" and _ssh_children(run.pid)
            ):
                assert time.monotonic() < deadline and run.poll() is None
                time.sleep(0.05)
            os.killpg(run.pid, signal.SIGINT)
            out, err = run.communicate(timeout=240)
        end_shared_ssh(kit, run.pid)
        assert run.returncode == 0, out + err
        assert "SIGINT: the cluster restart goes on to its end" in err, err
        assert engine.stages["w1"].status(engine.voice[0]) == "running"
        assert engine.wait_serving()["state"] == "serving"
    finally:
        engine.close()


def _ssh_children(pid: int) -> list[int]:
    """The ``ssh`` processes ``pid`` runs now."""
    found = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(pid)], capture_output=True)
    rows = [line.split() for line in found.stdout.decode().splitlines()]
    return [int(row[0]) for row in rows if row[1:] == ["ssh"]]


def test_node_lost_mid_run_is_not_touched_again_and_named(kit: ClusterKit, tmp_path: Path) -> None:
    """w1 drops off the LAN after preflight and pause_voice: the run fails at stop_workers
    naming it, starts nothing, resumes the head's voice, names w1's voice left paused; once w1
    is back, the next cluster restart resumes that voice and the cluster serves again."""
    engine = Engine(kit, tmp_path, worker_voice=True, head_voice=True)
    worker, release = kit.node("w1"), tmp_path / "release"
    stages = engine.stages
    try:
        engine.wait_serving()
        env = {faults.ENABLE: "1", faults.STALL_AT: "pause_voice", faults.RELEASE: str(release)}
        run = kit.head.docker.run(*engine.argv("cluster", "restart"), env=env, background=True)
        assert isinstance(run, subprocess.Popen)
        deadline = time.monotonic() + 60
        while not (tmp_path / "release.held").exists():  # pause_voice acted, the run holds
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.2)
        assert stages["w1"].status(engine.voice[0]) == "paused"
        kit.cut(worker)
        try:
            release.touch()
            out, err = run.communicate(timeout=120)
        finally:
            kit.cut(worker, up=True)
        assert run.returncode == 1, out + err
        assert "failed at stop_workers: node w1 is unreachable" in err, err
        assert "left paused on w1 (" + engine.voice[0] + ")" in err, err
        assert re.search(r"start_workers\s+skipped", out) and re.search(
            r"start_head\s+skipped", out
        )
        assert stages["head"].status(engine.head) == "exited"  # stopped, nothing started
        assert stages["head"].status(engine.head_voice[0]) == "running"  # resumed where it could
        assert stages["w1"].status(engine.voice[0]) == "paused"  # not touched again
        history = engine.cli("history", "--limit", "1").stdout
        assert "node w1 is unreachable" in history, history
        runs = json.loads(engine.cli("history", "--json").stdout)
        resume = next(s for s in runs[0]["steps"] if s["name"] == "resume_voice")
        assert resume["detail"]["left_paused"] == {"w1": engine.voice}
        result = engine.cli("cluster", "restart")  # w1 back: the next run puts it right
        assert result.returncode == 0, result.stdout + result.stderr
        assert stages["w1"].status(engine.voice[0]) == "running"
        assert engine.wait_serving()["state"] == "serving"
    finally:
        engine.close()


def test_launcher_set_up_restarted_with_its_own_launcher(kit: ClusterKit, tmp_path: Path) -> None:
    """eugr's set-up: ``--rm`` containers that a stop removes; the start is the launcher
    command the config records, run on the head; doctor names the set-up."""
    engine = LauncherEngine(kit, tmp_path)
    try:
        first = kit.head.docker.run(str(engine.script))  # the operator's own launch
        assert isinstance(first, subprocess.CompletedProcess) and first.returncode == 0, first
        engine.wait_serving(timeout=60)
        before = {
            n: engine.started_id(n, c) for n, c in (("head", engine.head), ("w1", engine.worker))
        }
        doctor = engine.cli("doctor").stdout
        assert "cluster: sees the launcher set-up on every node (2 nodes)" in doctor, doctor
        assert "ERROR   cluster" not in doctor, doctor
        result = engine.cli("cluster", "restart")
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(r"start_workers\s+ok .*the launcher ran:\s", result.stdout), result.stdout
        assert re.search(
            r"start_head\s+ok .*the launcher's containers run on head, w1", result.stdout
        )
        after = {
            n: engine.started_id(n, c) for n, c in (("head", engine.head), ("w1", engine.worker))
        }
        assert all(after[n] != before[n] for n in after)  # new --rm containers, by the launcher
        assert engine.wait_serving()["state"] == "serving"

        # the worker's rank dies inside its idling container (eugr#257): the container runs on
        top = kit.node("w1").client().containers.get(engine.worker).top(ps_args="-ww -eo pid,args")
        pid, cmd = top["Titles"].index("PID"), top["Titles"].index("COMMAND")
        (rank,) = [int(row[pid]) for row in top["Processes"] if "/standin/vllm serve" in row[cmd]]
        os.kill(rank, signal.SIGKILL)  # the rank the test's launcher started, by its pid
        state = engine.status()
        assert state["state"] == "crashed" and state["head_health"] == "up", state
        assert state["problems"] == [f"w1: {engine.worker} is idle"], state
        assert engine.cli("cluster", "restart").returncode == 0
        assert engine.wait_serving()["state"] == "serving"
    finally:
        engine.close()


def test_ray_set_up_restarted_head_first_and_a_dead_worker_restarts_all(
    kit: ClusterKit, tmp_path: Path
) -> None:
    """A Ray cluster of containers: doctor names it; a restart starts the head's container
    (Ray's GCS and the engine) before the worker's, which joins it, the same containers. Then
    the daemon: a worker's container killed ends the engine on the head at once (vLLM's Ray
    executor), and the whole cluster is restarted as one, head first again."""
    engine = RayEngine(
        kit,
        tmp_path,
        cluster={"watch_interval": "1s"},
        watch={"interval": "1s"},
        control={"socket": str(tmp_path / "control.sock"), "group": ""},
    )
    daemon = None
    nodes = (("head", engine.head), ("w1", engine.worker))
    try:
        engine.wait_serving(timeout=60)
        doctor = engine.cli("doctor").stdout
        assert "cluster: sees the ray set-up on every node (2 nodes)" in doctor, doctor
        assert "cluster: Ray set-up complete on 2 nodes" in doctor, doctor
        assert "ERROR   cluster" not in doctor, doctor
        ids = {n: engine.stages[n].attrs(c)["Id"] for n, c in nodes}
        result = engine.cli("cluster", "restart")
        assert result.returncode == 0, result.stdout + result.stderr
        every_step_ok(result.stdout, RAY_STEPS)
        assert {n: engine.stages[n].attrs(c)["Id"] for n, c in nodes} == ids
        started = {n: engine.started_at(n, c) for n, c in nodes}
        assert started["head"] < started["w1"], started  # ISO times of one clock: the GCS first
        head_log = engine.stages["head"].client.containers.get(engine.head).logs().decode()
        assert head_log.count("joined (2 alive)") == 2, head_log[-2000:]  # the fresh worker, too
        assert engine.wait_serving()["state"] == "serving"

        daemon = HeadDaemon(kit, engine, tmp_path / "daemon.log")
        daemon.wait_said("engine_adopted")  # it has seen the engine serving: a death is a crash
        engine.stages["w1"].client.containers.get(engine.worker).kill()
        daemon.wait_restarted("w1", engine.worker, started["w1"])
        runs = json.loads(engine.cli("history", "--json").stdout)
        assert [s["name"] for s in runs[0]["steps"]] == list(RAY_STEPS)
        assert {n: engine.stages[n].attrs(c)["Id"] for n, c in nodes} == ids
        head_log = engine.stages["head"].client.containers.get(engine.head).logs().decode()
        assert "RayWorkerProc rank=[1] died unexpectedly" in head_log, head_log[-2000:]
    finally:
        finish(daemon, engine)


def test_docs_commands_run_as_written(engine: Engine) -> None:
    """Every ``$ `` line of docs/clusters.md, typed on the head with its config."""
    text = DOCS.read_text()
    commands = re.findall(r"^\$ (.+)$", text, re.MULTILINE)
    assert commands
    env = {
        "SPARKWARDEN_CONFIG": str(engine.config),
        "PATH": f"{ROOT / '.venv' / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    # No daemon runs on the test's head: status reads its LLM as unknown and exits 1 for that.
    codes = {"sparkwarden status": 1}
    for command in commands:
        result = engine.kit.head.docker.run("bash", "-c", command, env=env, timeout=180)
        assert isinstance(result, subprocess.CompletedProcess)
        said = f"{command}: {result.stdout}{result.stderr}"
        assert result.returncode == codes.get(command, 0), said
        if command == "sparkwarden status":
            assert re.search(r"^  w1 +worker +reachable .* running", result.stdout, re.M), said


# --- a rank that runs is not a rank that joined (#38) --------------------------------------------

#: A head daemon that looks every second, each look of every node too, and sends no chat of its
#: own: a rank lost is then seen only by its start (a chat would hang on it until the head
#: died, as users' requests do, and the head's crash would restart the cluster anyway).
WATCHING: dict[str, dict[str, Any]] = {
    "cluster": {"watch_interval": "1s"},
    "watch": {"interval": "1s"},
    "health": {"chat_interval": "0s"},
    "acceptance": {"enabled": False},
}


def watched(kit: ClusterKit, tmp_path: Path, **engine: Any) -> tuple[Engine, HeadDaemon]:
    """A serving cluster and its head's daemon, once that daemon has adopted the ranks' starts
    (no run of its own made them: the first serving look says which they are)."""
    sections = {**WATCHING, "control": {"socket": str(tmp_path / "control.sock"), "group": ""}}
    made = Engine(kit, tmp_path, **engine, **sections)
    made.wait_serving(timeout=60)
    daemon = HeadDaemon(kit, made, tmp_path / "daemon.log")
    daemon.wait_said("cluster_starts_adopted")
    return made, daemon


def restarted_as_one(daemon: HeadDaemon, engine: Engine, ids: dict[str, str]) -> dict[str, Any]:
    """The daemon's run that mended a stale rank: a crash's, ended ok, the cluster serving
    again from the same containers. The run."""
    deadline = time.monotonic() + 120
    while not has_runs(engine):
        assert time.monotonic() < deadline and daemon.alive(), daemon.said()[-3000:]
        time.sleep(1.0)  # each read is a Python of its own on the head
    run = daemon.runs_ended(timeout=120)[0]
    assert run["reason"] == "crash" and run["result"] == "ok", run
    assert engine.wait_serving(timeout=60)["state"] == "serving"
    assert {n: engine.stages[n].attrs(c)["Id"] for n, c in engine.workers.items()} == ids
    return run


def has_runs(engine: Engine) -> bool:
    return bool(json.loads(engine.cli("history", "--json").stdout))


def test_a_worker_rank_dockers_policy_brought_back_is_seen_and_the_cluster_restarted(
    tmp_path: Path,
) -> None:
    """The rank dies (exit 1) and Docker's on-failure policy starts it again: it can never
    rejoin the head, whose /health stays 200 (vllm#32136). Seen within two looks as a rank
    started behind the head's back, and the cluster is restarted as one."""
    kit2 = ClusterKit(("head", "w1"))
    engine, daemon = None, None
    try:
        engine, daemon = watched(kit2, tmp_path, worker_policy={"Name": "on-failure"})
        ids = {n: engine.stages[n].attrs(c)["Id"] for n, c in engine.workers.items()}
        worker = engine.stages["w1"]
        os.kill(worker.attrs(engine.worker)["State"]["Pid"], signal.SIGKILL)  # the rank dies
        deadline = time.monotonic() + 60
        while worker.attrs(engine.worker)["RestartCount"] != 1:
            assert time.monotonic() < deadline, worker.attrs(engine.worker)["State"]
            time.sleep(0.3)
        restarted_as_one(daemon, engine, ids)
        said = daemon.said()
        assert '"why": "cluster stale on 2 checks in a row: w1: ' in said, said[-3000:]
        assert "a rank started behind the head's back never joins it" in said
        doctor = engine.cli("doctor").stdout
        assert "has Docker's restart policy 'on-failure'" in doctor, doctor
    finally:
        if engine is not None:
            finish(daemon, engine)
        kit2.close()


def test_an_operators_docker_restart_of_a_worker_restarts_the_cluster_as_one(
    tmp_path: Path,
) -> None:
    kit2 = ClusterKit(("head", "w1"))
    engine, daemon = None, None
    try:
        engine, daemon = watched(kit2, tmp_path)
        ids = {n: engine.stages[n].attrs(c)["Id"] for n, c in engine.workers.items()}
        engine.stages["w1"].client.containers.get(engine.worker).restart(timeout=5)
        restarted_as_one(daemon, engine, ids)
        assert "started again at" in daemon.said(), daemon.said()[-3000:]
        # an operator's cluster restart typed meanwhile: the daemon never wants its own over it
        triggers = daemon.said().count('"event": "trigger"')
        typed = engine.cli("cluster", "restart")
        assert typed.returncode == 0, typed.stdout + typed.stderr
        engine.wait_serving(timeout=60)
        assert daemon.said().count('"event": "trigger"') == triggers, daemon.said()[-3000:]
    finally:
        if engine is not None:
            finish(daemon, engine)
        kit2.close()


def test_an_operators_stop_of_a_worker_is_left_alone_then_their_start_mends_the_cluster(
    tmp_path: Path,
) -> None:
    """``docker stop`` on a worker (told by the node's own events) is never overridden: status
    and cluster status exit 1 naming it, stopped by hand, with what ends the wait. The
    operator's start brings a rank that cannot rejoin: the cluster is restarted as one."""
    kit2 = ClusterKit(("head", "w1"))
    engine, daemon = None, None
    try:
        engine, daemon = watched(kit2, tmp_path)
        ids = {n: engine.stages[n].attrs(c)["Id"] for n, c in engine.workers.items()}
        worker = engine.stages["w1"]
        worker.client.containers.get(engine.worker).stop(timeout=5)

        def looks() -> int:
            return int(json.loads(engine.cli("status", "--json").stdout)["daemon"]["looks"])

        start = looks()
        deadline = time.monotonic() + 60
        while looks() < start + 8:  # 8 looks of the daemon, each with a look at every node
            assert time.monotonic() < deadline and daemon.alive(), daemon.said()[-3000:]
            time.sleep(2.0)  # each status here is a Python on every node
        assert worker.status(engine.worker) == "exited" and not has_runs(engine)
        cluster = engine.cli("cluster", "status")
        assert cluster.returncode == 1, cluster.stdout
        assert "cluster: stopped: stopped by hand: " in cluster.stdout, cluster.stdout
        status = engine.cli("status")
        assert status.returncode != 0 and "stopped by hand" in status.stdout, status.stdout
        problems = json.loads(engine.cli("status", "--json").stdout)["cluster"]["problems"]
        assert f"stopped by hand (on w1: docker start {engine.worker})" in " ".join(problems)

        worker.client.containers.get(engine.worker).start()
        restarted_as_one(daemon, engine, ids)
        assert "started again at" in daemon.said(), daemon.said()[-3000:]
    finally:
        if engine is not None:
            finish(daemon, engine)
        kit2.close()
