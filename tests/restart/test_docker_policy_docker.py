"""Docker's restart policy on real containers: what Docker's events say, the take-over, and a
crash that Docker already restarted still running the safe sequence."""

# The daemon fixtures are imported from test_daemon_docker, and tests name them as arguments.
# ruff: noqa: F811

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from devtools.standin.stage import Stage, free_port, wait_healthy
from tests.actions.test_operator_tools import Receiver, receiver  # noqa: F401
from tests.daemon.test_daemon_docker import start_daemon  # noqa: F401
from tests.kits.commands import run_cli
from tests.kits.daemonkit import DaemonProcess, wait_for
from tests.kits.soundness import assert_sound

pytestmark = pytest.mark.docker

UNLESS_STOPPED = {"Name": "unless-stopped", "MaximumRetryCount": 0}


def policy_of(stage: Stage, name: str) -> str:
    return str(stage.attrs(name)["HostConfig"]["RestartPolicy"]["Name"] or "no")


def restarts(stage: Stage, name: str) -> int:
    return int(stage.attrs(name)["RestartCount"])


def events(client: docker.DockerClient, name: str, since: float) -> list[tuple[str, str | None]]:
    """(action, signal) of the container's life-cycle events from ``since`` to now."""
    raw = client.events(
        since=since,
        until=time.time() + 0.5,
        decode=True,
        filters={"type": "container", "container": name},
    )
    life = ("kill", "die", "stop", "start", "restart")
    return [
        (e["Action"], e["Actor"]["Attributes"].get("signal")) for e in raw if e["Action"] in life
    ]


def handled(daemon: DaemonProcess, action: str) -> int:
    """How many of the container's events with this action the daemon has handled."""
    lines = [json.loads(x) for x in daemon.text().splitlines() if x.startswith("{")]
    return sum(1 for x in lines if x.get("event") == "container_event" and x["action"] == action)


def test_docker_events_and_restart_count_for_each_way_down_and_up(stage: Stage) -> None:
    """The facts README's crash rule rests on, pinned on this engine."""
    client = stage.client
    t0 = time.time() - 1
    llm, port = stage.llm(
        "llm", "--crash-after", "2", "--crash-once", restart_policy=UNLESS_STOPPED
    )

    # the engine exits by itself under a policy: die, then Docker's start; no kill, no restart
    wait_for("Docker's restart", lambda: restarts(stage, llm) == 1, timeout=30)
    wait_healthy(port)
    assert events(client, llm, t0) == [("start", None), ("die", None), ("start", None)]

    # docker restart: a SIGTERM kill first, then its own "restart"; RestartCount back to 0
    t1 = time.time()
    client.containers.get(llm).restart(timeout=10)
    assert events(client, llm, t1) == [
        ("kill", "15"),
        ("die", None),
        ("stop", None),
        ("start", None),
        ("restart", None),
    ]
    assert restarts(stage, llm) == 0

    # docker kill: a SIGKILL kill, and Docker's policy does not bring it back
    t2 = time.time()
    client.containers.get(llm).kill()
    time.sleep(2)  # Docker's first policy restart comes within a second: none must come
    assert events(client, llm, t2) == [("kill", "9"), ("die", None)]
    assert stage.status(llm) == "exited"

    # docker start: a bare "start", the same event as the policy's; only RestartCount differs
    t3 = time.time()
    client.containers.get(llm).start()
    assert events(client, llm, t3) == [("start", None)]
    assert restarts(stage, llm) == 0


def test_take_over_sets_no_at_start_a_crash_runs_the_sequence_uninstall_restores(
    stage: Stage, start_daemon: Any, tmp_path: Path, receiver: Receiver
) -> None:
    llm, port = stage.llm(
        "llm", "--crash-after", "3", "--crash-once", start=False, restart_policy=UNLESS_STOPPED
    )
    stt = stage.voice("stt")
    hook = tmp_path / "hook-url"
    hook.write_text(receiver.url("/hook"))
    # llm.restart_policy: take-over, the default
    daemon = start_daemon([llm], port, [stt], notify=[{"kind": "webhook", "url_file": str(hook)}])
    assert policy_of(stage, llm) == "no"  # before the daemon said it was ready
    log = daemon.text()
    assert '"restart_policy_taken_over"' in log and '"was": "unless-stopped"' in log
    wait_for("the notification", lambda: receiver.got)
    sent = json.loads(receiver.got[0]["body"])
    assert sent["event"] == "policy_taken_over" and sent["subject"] == llm
    assert sent["detail"] == {"was": "unless-stopped"}
    status = daemon.status()
    assert status["restart_policy"]["taken"] == {llm: "unless-stopped"}
    assert status["restart_policy"]["at_risk"] == {}
    text = run_cli(daemon.config, "status").stdout
    assert f"policy:      {llm}: Docker's 'unless-stopped' taken over, now 'no'" in text

    stage.client.containers.get(llm).start()  # crashes once, 3 s after its start
    (run,) = wait_for("a crash run", lambda: daemon.runs_with("crash"), timeout=60)
    assert run["result"] == "ok", run
    steps = {s["name"]: s["result"] for s in run["steps"]}
    assert steps["stop_llm"] == "skipped"  # nobody restarted it: it was still down
    assert steps["chat_probe"] == "ok"
    assert restarts(stage, llm) == 0  # Docker never restarted it
    assert_sound(stage, daemon.history(), llm=llm, port=port, voice={stt: "running"})

    daemon.stop()
    root = tmp_path / "root"
    root.mkdir()
    out = run_cli(daemon.config, "uninstall-service", "--root", str(root))
    assert out.returncode == 0, out.stderr
    assert f"restoring {llm}'s restart policy 'unless-stopped'" in out.stdout
    assert policy_of(stage, llm) == "unless-stopped"
    again = run_cli(daemon.config, "uninstall-service", "--root", str(root))
    assert "restoring" not in again.stdout  # the record is gone once restored


def test_leave_docker_restarts_it_and_the_sequence_still_runs(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm(
        "llm", "--crash-after", "3", "--crash-once", start=False, restart_policy=UNLESS_STOPPED
    )
    stt = stage.voice("stt")
    listen = f"127.0.0.1:{free_port()}"
    daemon = start_daemon(
        [llm], port, [stt], llm={"restart_policy": "leave"}, metrics={"listen": listen}
    )
    assert policy_of(stage, llm) == "unless-stopped"
    assert '"restart_policy_left_at_risk"' in daemon.text()
    exported = httpx.get(f"http://{listen}/metrics", timeout=5).text
    assert "sparkwarden_restart_policies_at_risk 1.0" in exported
    status = daemon.status()
    assert status["restart_policy"] == {
        "mode": "leave",
        "taken": {},
        "at_risk": {llm: "unless-stopped"},
    }
    text = run_cli(daemon.config, "status").stdout
    assert f"RISK:        {llm}: Docker restart policy 'unless-stopped'" in text

    stage.client.containers.get(llm).start()
    (run,) = wait_for("a crash run", lambda: daemon.runs_with("crash"), timeout=60)
    assert run["result"] == "ok", run
    assert '"died_and_restarted_by_docker"' in daemon.text()
    steps = {s["name"]: s for s in run["steps"]}
    # the engine Docker restarted into the ghost memory was stopped, then started safely
    assert steps["stop_llm"]["result"] == "ok", steps["stop_llm"]
    assert steps["drop_caches"]["result"] == "ok" and steps["chat_probe"]["result"] == "ok"
    assert restarts(stage, llm) == 0  # our own docker start, after Docker's
    assert policy_of(stage, llm) == "unless-stopped"  # left, as asked
    assert_sound(stage, daemon.history(), llm=llm, port=port, voice={stt: "running"})
    assert "RISK:" in run_cli(daemon.config, "status").stdout  # still, every time


def test_an_operators_docker_restart_is_not_a_crash(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm", restart_policy=UNLESS_STOPPED)
    wait_healthy(port)
    daemon = start_daemon([llm], port, [])
    stage.client.containers.get(llm).restart(timeout=10)
    wait_for("the daemon to see the start", lambda: handled(daemon, "start") >= 1)
    assert daemon.history() == []
    assert '"operator_stopped"' in daemon.text()
    # The burst may come before or after the look that sees the engine up again: the look after
    # both says the stop is over (tests/daemon/test_reconcile.py pins either order).
    status = wait_for(
        "status to say the stop is over",
        lambda: (s := daemon.status())["llm"]["operator_stopped"] is None and s,
    )
    assert status["_exit"] == 0 and status["llm"]["status"] == "running", status


def test_an_operators_docker_start_after_a_crash_is_left_alone(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm("llm", "--crash-after", "2", "--crash-once", start=False)
    start_daemon([llm], port, []).stop()  # remembers where Docker's events were
    stage.client.containers.get(llm).start()  # crashes 2 s later, while nobody watches
    wait_for("the crash", lambda: stage.status(llm) == "exited", timeout=30)
    stage.client.containers.get(llm).start()  # the operator's own hands, while nobody watched
    wait_healthy(port)

    second = start_daemon([llm], port, [])  # the look: up, started through the API
    wait_for("the engine watched", lambda: '"engine_adopted"' in second.text())
    second.after_looks(4)
    assert second.history() == []


def test_a_crash_docker_restarted_while_sparkwarden_was_down_still_runs_the_sequence(
    stage: Stage, start_daemon: Any
) -> None:
    llm, port = stage.llm(
        "llm", "--crash-after", "3", "--crash-once", start=False, restart_policy=UNLESS_STOPPED
    )
    start_daemon([llm], port, [], llm={"restart_policy": "leave"}).stop()
    stage.client.containers.get(llm).start()  # crashes while nobody watches; Docker restarts it
    wait_for("Docker's restart", lambda: restarts(stage, llm) == 1, timeout=30)
    wait_healthy(port)

    second = start_daemon([llm], port, [], llm={"restart_policy": "leave"})  # replays the die
    (run,) = wait_for("the crash run", lambda: second.runs_with("crash"), timeout=60)
    assert run["result"] == "ok", run
    assert {s["name"]: s["result"] for s in run["steps"]}["stop_llm"] == "ok"
    assert restarts(stage, llm) == 0


def test_the_budget_still_bounds_dockers_loop_under_leave(stage: Stage, start_daemon: Any) -> None:
    llm, port = stage.llm("llm", "--crash-after", "3", restart_policy=UNLESS_STOPPED)
    daemon = start_daemon(
        [llm],
        port,
        [],
        llm={"restart_policy": "leave"},
        budget={"max_runs": 2, "window": "1h", "backoff": "0s"},
    )
    status = wait_for("gave up", lambda: (s := daemon.status())["gave_up"] and s, timeout=90)
    assert "restart budget spent" in status["gave_up"]["why"]
    assert [r["reason"] for r in daemon.history()] == ["crash", "crash"]
