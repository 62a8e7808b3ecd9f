"""Issue 44 on the real engine: a worker stopped behind /health's 200 (``kill -STOP``, vLLM's own
``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` out of reach) is restarted as wedged at the shipped
[health] defaults (only the look, ``watch.interval``, quicker); an engine at its limits, the
daemon's chat queued behind users, never is. Outcomes and reasons only: the bound is
``benchmarks/wedge_detection.py --engine real``'s to measure."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.realvllm import engine
from devtools.standin.stage import Stage
from tests.kits.daemonkit import Daemons, restarted_as_wedged, wait_for
from tests.kits.users import REAL_AT_ITS_LIMITS, REAL_AT_ITS_LIMITS_FLAGS, Users

#: vLLM's own guard out of reach, as operators who raise it for long steps have it
NO_TIMEOUT = engine.NO_EXECUTE_TIMEOUT


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Daemons]:
    pool = Daemons(tmp_path)
    yield pool
    pool.stop_all()


def config_at_the_defaults(real_config: Any, llm: str, port: int, control_dir: Path) -> Path:
    """The shipped [health] and boot grace; the look every second, no schedule."""
    path: Path = real_config(
        [llm],
        port,
        [],
        watch={"interval": "1s"},
        schedule={"cron": ""},
        control={"socket": str(control_dir / "control.sock"), "group": ""},
    )
    return path


@pytest.mark.timeout(600)
def test_a_wedged_real_engine_behind_a_200_is_restarted_as_wedged(
    stage: Stage, real_llm: Any, real_config: Any, control_dir: Path, daemons: Daemons
) -> None:
    llm, port, _ = real_llm(env=NO_TIMEOUT)
    daemon = daemons.start(config_at_the_defaults(real_config, llm, port, control_dir))
    wait_for("the grace ended by a chat", lambda: '"boot_grace_ended"' in daemon.text(), 120)
    before = stage.attrs(llm)

    engine.signal_engine(stage.client, llm, signal.SIGSTOP)

    restarted_as_wedged(daemon, timeout=400)
    after = stage.attrs(llm)
    assert after["Id"] == before["Id"]
    assert after["State"]["StartedAt"] > before["State"]["StartedAt"]
    assert engine.chat(port).status == 200


@pytest.mark.timeout(600)
def test_a_real_engine_at_its_limits_is_never_restarted(
    stage: Stage, real_llm: Any, real_config: Any, control_dir: Path, daemons: Daemons
) -> None:
    """Five users on two sequences: long prompts, long answers; the daemon's chat waits behind
    them, the tokens move, and nothing is restarted."""
    llm, port, _ = real_llm(*REAL_AT_ITS_LIMITS_FLAGS)
    load = Users(f"http://127.0.0.1:{port}", "tiny").start(REAL_AT_ITS_LIMITS)
    try:
        daemon = daemons.start(config_at_the_defaults(real_config, llm, port, control_dir))
        waited: list[float] = []
        lock = threading.Lock()

        def queued_then_answered_thrice() -> bool:
            status = daemon.status()["llm"]
            with lock:
                if status["unanswered_s"]:
                    waited.append(status["unanswered_s"])
                elif waited and waited[-1] != 0.0:
                    waited.append(0.0)  # answered: a queued chat came through
            return waited.count(0.0) >= 3

        wait_for("the chat queued and answered three times", queued_then_answered_thrice, 420, 1)
    finally:
        load.stop.set()
    assert load.done >= 5, load.done  # the users were served meanwhile
    assert daemon.history() == [], daemon.history()
    assert "wedged" not in daemon.text()
    assert max(waited) > 0, waited
