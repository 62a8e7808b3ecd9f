"""An operator acts while sparkwarden is down (killed -9 mid-run): the repair and the daemon
after it never stop or restart a container the run did not leave so, and voice comes back at once
(issue 25, cases 5 and 6, and a kill-point fuzz over the operator's moves)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from devtools.standin.stage import Stage, free_port, wait_healthy
from tests.kits.commands import history
from tests.kits.daemonkit import stalling, wait_for
from tests.kits.soundness import no_overlap
from tests.restart.test_fault_matrix import events_since, kill_mid_run

pytestmark = pytest.mark.docker


def started_at(stage: Stage, name: str) -> str:
    return str(stage.attrs(name)["State"]["StartedAt"])


def test_case_5_a_second_candidate_started_while_down_voice_comes_back_at_once(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    """Killed while waiting for memory after stop_llm; the operator starts another candidate,
    which boots slowly: the repair resumes voice without waiting on it, and leaves both alone."""
    port = free_port()
    llm_a, _ = stage.llm("a", port=port, network_mode="host")
    llm_b, _ = stage.llm("b", "--boot-delay", "40", port=port, network_mode="host", start=False)
    stt = stage.voice("stt")
    wait_healthy(port)
    config = make_daemon_config([llm_a, llm_b], port, [stt])
    kill_mid_run(daemons(config, stall_at="drop_caches"), config, "drop_caches")
    assert stage.status(llm_a) == "exited" and stage.status(stt) == "paused"
    stage.client.containers.get(llm_b).start()  # the operator, while sparkwarden is down
    theirs = started_at(stage, llm_b)
    since = time.time()

    repairing = daemons(config, ready=False)
    wait_for("voice resumed", lambda: stage.status(stt) == "running", timeout=15)
    repairing.after_looks(6)
    assert started_at(stage, llm_b) == theirs and stage.status(llm_b) == "running"
    assert events_since(stage, llm_a, "start", since) == []
    assert events_since(stage, llm_b, "kill", since) == []
    no_overlap(history(config))


def test_case_6_the_repair_never_stops_an_engine_started_by_hand_after_the_runs_stop(
    stage: Stage, make_daemon_config: Any, daemons: Any
) -> None:
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    config = make_daemon_config([llm], port, [stt])
    kill_mid_run(daemons(config, stall_at="stop_llm"), config, "stop_llm")
    assert stage.status(llm) == "exited"
    stage.client.containers.get(llm).start()  # the operator brings it back by hand
    wait_healthy(port)
    theirs = started_at(stage, llm)
    since = time.time()

    repairing = daemons(config, ready=False)
    wait_for("voice resumed", lambda: stage.status(stt) == "running", timeout=30)
    repairing.after_looks(6)
    assert started_at(stage, llm) == theirs and stage.status(llm) == "running"
    assert events_since(stage, llm, "kill", since) == []
    repair = next(r for r in history(config) if r["reason"] == "repair")
    steps = {s["name"]: s["result"] for s in repair["steps"]}
    assert steps["stop_llm"] == "skipped" and steps["start_llm"] == "skipped", steps


MOVES = ("start", "stop", "replace", "second")
KILL_AT = ("pause_voice", "stop_llm", "drop_caches", "start_llm")


# Every kill point with every move (16 cases), not a sample: the sampled fuzz found two real
# defects only by chance (killed before any Docker event, the next daemon replayed nothing; a run
# cut short claimed an operator's stop made just before its own stop, or after its own start).
@pytest.mark.parametrize("move", MOVES)
@pytest.mark.parametrize("step", KILL_AT)
def test_kill_point_fuzz_the_operators_move_while_down_is_respected(
    step: str, move: str, docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Killed at ``step``; while sparkwarden is down the operator makes ``move``. Whatever the
    operator started or stopped stays so (no kill, stop or start of it by sparkwarden), voice is
    resumed, and no two runs overlap."""
    from tests.kits.daemonkit import Daemons

    stage = Stage(docker_client)
    tmp = tmp_path_factory.mktemp("fuzz")
    pool = Daemons(tmp)
    try:
        port = free_port()
        llm, _ = stage.llm("a", port=port, network_mode="host")
        other, _ = stage.llm("b", port=port, network_mode="host", start=False)
        stt = stage.voice("stt")
        wait_healthy(port)
        from devtools.standin.stage import write_config

        ctl = tmp / "ctl"
        ctl.mkdir()
        config = write_config(
            tmp / "c.toml",
            tmp / "state",
            [llm, other],
            port,
            [stt],
            schedule={"cron": ""},
            watch={"interval": "0.5s", "boot_grace": "30s"},
            budget={"backoff": "1s"},
            control={"socket": str(ctl / "control.sock"), "group": ""},
        )
        kill_mid_run(pool.start(config, stalling(step, tmp)), config, step)
        client = stage.client
        theirs: set[str] = set()  # what the operator started, stopped or made
        if move == "start" and stage.status(llm) != "running":
            client.containers.get(llm).start()
            theirs.add(llm)
        elif move == "stop" and stage.status(llm) == "running":
            client.containers.get(llm).stop(timeout=10)
            theirs.add(llm)
        elif move == "replace":
            client.containers.get(llm).remove(force=True)
            stage.llm("a", port=port, network_mode="host")
            theirs.add(llm)
        elif move == "second":
            if stage.status(llm) == "running":
                client.containers.get(llm).stop(timeout=10)
                theirs.add(llm)
            client.containers.get(other).start()
            theirs.add(other)
        time.sleep(0.5)
        after = {n: (stage.status(n), started_at(stage, n)) for n in (llm, other)}
        since = time.time()

        repairing = pool.start(config, ready=False)
        wait_for("voice resumed", lambda: stage.status(stt) == "running", timeout=30)
        repairing.after_looks(8)  # what the repair would do wrong, it has done by now
        for name, (status, started) in after.items():
            said = (step, move, name, status)
            if name in theirs:  # left exactly as the operator left it
                assert (stage.status(name), started_at(stage, name)) == (status, started), said
                for action in ("kill", "stop", "start"):
                    assert events_since(stage, name, action, since) == [], said
            elif status == "running":  # up (the run's own, verified): never stopped
                assert events_since(stage, name, "kill", since) == [], said
        no_overlap(history(config))
    finally:
        pool.stop_all()
        stage.cleanup()


def test_whose_engine_a_repair_finds_up() -> None:
    """Pure: the interrupted run's own engine, or the operator's (another candidate, a
    replacement, or a start after the run's stop)."""
    from datetime import UTC, datetime

    from sparkwarden.base.containers import ContainerState
    from sparkwarden.restart.parts import Resume
    from sparkwarden.restart.steps import theirs

    stop = datetime(2026, 12, 1, 3, 0, tzinfo=UTC).timestamp()
    resume = Resume("a", ["stt"], llm_stopped=True, stopped_at=stop, container_id="A")

    def up(name: str = "a", cid: str = "A", started: float = stop - 3600) -> ContainerState:
        when = datetime.fromtimestamp(started, UTC)
        return ContainerState(name, cid, "running", when, None, 0, False)

    assert theirs(up(), resume) is None  # still going down from the run's own stop
    assert theirs(up(started=stop + 30), resume) == "a was started by hand after the run's stop"
    assert "replaced by hand" in (theirs(up(cid="B"), resume) or "")
    assert "another candidate" in (theirs(up(name="b", cid="C"), resume) or "")
    assert theirs(replace(up(), status="exited"), resume) is None
    # the run had sent the start itself: a later StartedAt is its own
    started = Resume.from_plan(
        "a", {"llm_stopped": True, "llm_stopped_at": stop, "llm_started": True}, "A"
    )
    assert started is not None and theirs(up(started=stop + 30), started) is None
