"""Issue 25's cases on real containers: the daemon acts on what the box is, not on what it
recalls (a retry lost to SIGHUP, a reset that recovers nothing, an operator's replacement or
second candidate taken for a crash)."""

from __future__ import annotations

import signal
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from devtools.standin.stage import Stage, free_port, wait_healthy
from tests.kits.commands import run_cli, running_step
from tests.kits.daemonkit import DaemonProcess, wait_for
from tests.kits.soundness import answers_chat, no_overlap

pytestmark = pytest.mark.docker

#: A start gate no box meets: the crash run fails at drop_caches, as when the driver is slow.
NEVER = {"start_min_available_gib": 100000, "start_wait": "1s", "drop_interval": "1s"}


def edit_config(daemon: DaemonProcess, section: str, **values: Any) -> None:
    data = tomllib.loads(daemon.config.read_text())
    data.setdefault(section, {}).update(values)
    daemon.config.write_text(tomli_w.dumps(data))


def started_at(stage: Stage, name: str) -> str:
    return str(stage.attrs(name)["State"]["StartedAt"])


def first_line(daemon: DaemonProcess) -> str:
    """status's first line, with what wraps under it (an indented continuation)."""
    first, *rest = run_cli(daemon.config, "status").stdout.splitlines()
    for line in rest:
        if not line.startswith(" " * 13):
            break
        first += " " + line.strip()
    return first


def test_a_failed_crash_runs_retry_survives_a_reload(stage: Stage, start_daemon: Any) -> None:
    """Case 1: the crash run fails at drop_caches; memory comes back and the operator reloads
    (SIGHUP): the retry is in the journal, and the next look recovers the engine."""
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [stt], memory=NEVER, budget={"backoff": "6s"})
    stage.client.containers.get(llm).kill()
    (failed,) = wait_for("the failed crash run", lambda: daemon.runs_with("crash"), timeout=40)
    assert failed["result"] == "failed" and "memory did not come back" in failed["error"]
    assert "sparkwarden restart" in first_line(daemon) and "idle" not in first_line(daemon)
    edit_config(daemon, "memory", start_min_available_gib=1)
    daemon.signal(signal.SIGHUP)
    ok = wait_for(
        "the retry after the reload",
        lambda: [r for r in daemon.runs_with("crash") if r["result"] == "ok"],
        timeout=60,
    )
    assert ok[0]["container"] == llm
    assert stage.status(llm) == "running" and answers_chat(port)
    assert stage.status(stt) == "running"
    no_overlap(daemon.history())


def test_after_the_budget_is_spent_reset_brings_the_engine_back(
    stage: Stage, start_daemon: Any
) -> None:
    """Case 2: two failed crash runs spend the budget; the cause is fixed (reload) and the
    operator runs ``sparkwarden reset``: the next look recovers the engine."""
    llm, port = stage.llm("llm")
    wait_healthy(port)
    daemon = start_daemon(
        [llm], port, [], memory=NEVER, budget={"max_runs": 2, "window": "1h", "backoff": "0s"}
    )
    stage.client.containers.get(llm).kill()
    wait_for("gave up", lambda: daemon.status()["gave_up"], timeout=60)
    line = wait_for(
        "status to say what ends it", lambda: "reset" in (x := first_line(daemon)) and x
    )
    assert "gave up" in line and "'sparkwarden reset'" in line and "idle" not in line, line
    edit_config(daemon, "memory", start_min_available_gib=1)
    daemon.signal(signal.SIGHUP)
    daemon.after_looks(6)
    assert stage.status(llm) == "exited"  # gave up: nothing automatic until the reset
    assert run_cli(daemon.config, "reset").returncode == 0
    # the engine answers a moment before its run is recorded as ended: wait for the record
    ok = wait_for(
        "a crash run after the reset to end ok",
        lambda: [r for r in daemon.runs_with("crash") if r["result"] == "ok"],
        timeout=60,
    )
    assert ok[0] == daemon.history()[0], daemon.history()  # the last run, the one reset allowed
    assert stage.status(llm) == "running" and answers_chat(port)
    status = daemon.status()
    assert status["gave_up"] is None and status["daemon"]["waiting"] is None


def test_an_operators_replacement_is_not_a_crash(stage: Stage, start_daemon: Any) -> None:
    """Case 3: ``docker rm -f`` then ``docker run`` under the same name: nothing is restarted,
    voice is never paused, and the new container is the one watched."""
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [stt])
    stage.client.containers.get(llm).remove(force=True)
    time.sleep(1.0)  # the operator types the next command
    stage.llm("llm", "--drafts-per-s", "50", port=port)  # new flags, same name
    wait_healthy(port)
    theirs = started_at(stage, llm)
    new_id = stage.attrs(llm)["Id"]
    daemon.after_looks(16)  # a backoff and more: run 2 of the old code stopped theirs by now
    assert daemon.history() == [], daemon.history()
    assert started_at(stage, llm) == theirs and stage.status(stt) == "running"
    wait_for(
        "the new container adopted",
        lambda: '"engine_adopted"' in daemon.text() and new_id[:12] in daemon.text(),
    )
    assert daemon.status()["llm"]["status"] == "running"


def test_a_second_candidate_the_operator_started_is_left_alone_when_the_first_dies(
    stage: Stage, start_daemon: Any
) -> None:
    """Case 4: the operator starts another candidate while the active one serves; the active
    one then dies: nothing restarts the operator's candidate."""
    llm, port = stage.llm("llm")
    other, other_port = stage.llm("other", start=False)
    wait_healthy(port)
    # theirs boots (port elsewhere here: the stand-ins cannot share one): within boot_grace
    daemon = start_daemon([llm, other], port, [], watch={"boot_grace": "60s"})
    stage.client.containers.get(other).start()
    wait_healthy(other_port)
    theirs = started_at(stage, other)
    time.sleep(1)
    stage.client.containers.get(llm).kill()
    daemon.after_looks(16)
    assert [r for r in daemon.history() if r["container"] == other] == []
    assert started_at(stage, other) == theirs and stage.status(other) == "running"
    assert daemon.history() == []
    wait_for("the other candidate adopted", lambda: daemon.status()["llm"]["container"] == other)


def test_case_9_a_gateway_that_is_down_neither_holds_voice_nor_backs_the_engine_off(
    stage: Stage, start_daemon: Any, tmp_path: Path
) -> None:
    """The gateway's failure is the gateway's: voice comes back once the engine answers (before
    the gateway probe), and the next crash is recovered at once, with no backoff."""
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    key = tmp_path / "gateway-key"
    key.write_text("sk-test\n")
    down = {"url": f"http://127.0.0.1:{free_port()}/v1", "model": "m", "api_key_file": str(key)}
    daemon = start_daemon(
        [llm], port, [stt], gateway={**down, "timeout": "6s"}, budget={"backoff": "5m"}
    )
    stage.client.containers.get(llm).kill()
    wait_for("the gateway probe", lambda: running_step(daemon.config) == "gateway_probe", 40)
    assert stage.status(stt) == "running"  # voice back while the gateway is probed
    (first,) = wait_for("the first crash run", lambda: daemon.runs_with("crash"), timeout=30)
    assert first["result"] == "failed" and "gateway" in first["error"]
    stage.client.containers.get(llm).kill()
    runs = wait_for(
        "the second crash run", lambda: len(daemon.runs_with("crash")) >= 2 and True, timeout=30
    )
    assert runs
    assert stage.status(llm) == "running" and answers_chat(port)


def test_case_7_the_canary_baseline_survives_a_reload_mid_decay(
    stage: Stage, start_daemon: Any
) -> None:
    """The baseline is learnt on this engine (ID and StartedAt) and kept in the journal: a
    SIGHUP as the decay begins does not relearn it from the decayed engine."""
    from tests.daemon.test_daemon_docker import (
        CANARY_FAST,
        DECAY_ON_CUE,
        SWINGING,
        baseline_then_decay,
    )

    llm, port = stage.llm("llm", *SWINGING, *DECAY_ON_CUE)
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], acceptance=CANARY_FAST)
    baseline_then_decay(stage, llm, daemon)
    daemon.signal(signal.SIGHUP)  # an upgrade, a watchdog restart or a reload: all alike
    (run,) = wait_for("an acceptance run", lambda: daemon.runs_with("acceptance"), timeout=120)
    assert run["result"] == "ok" and run["plan"]["why"].startswith("drafting canary at ")
    assert '"canary_baseline_kept"' in daemon.text()


def test_case_8_a_voice_container_growing_its_shm_is_no_leak(
    stage: Stage, start_daemon: Any
) -> None:
    """A voice container's /dev/shm grows 0.6 GiB before each run: MemAvailable falls after
    every stop and drop, but that memory is held (its cgroup), so no reboot is required, and
    status says who holds it."""
    llm, port = stage.llm("llm")
    stt = stage.voice("stt", shm_size="3g")
    wait_healthy(port)
    daemon = start_daemon([llm], port, [stt], memory={"trend_runs": 3, "trend_fall_gib": 0.8})
    for run in range(3):
        if run:
            grow = f"head -c 640M /dev/zero > /dev/shm/cache-{run}"
            assert stage.client.containers.get(stt).exec_run(["sh", "-c", grow]).exit_code == 0
        done = run_cli(daemon.config, "restart")
        assert done.returncode == 0, done.stdout + done.stderr
    status = daemon.after_looks(4)
    assert status["reboot_required"] is False, status["memory_trend"]
    assert status["memory"]["held_gib"] >= 1.2
    assert "held by processes and containers" in run_cli(daemon.config, "status").stdout
