"""Issue 44 on real containers: a stand-in wedged behind /health's 200 is restarted as wedged, at
the defaults (but ``watch.interval``, shortened: the bound at the default intervals is
``test_wedge_bound.py``'s); an engine at its limits, its health chat queued behind long prefills
and long answers, never is. Outcomes and reasons only: no timed assertion on a loaded box."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devtools.standin.stage import Stage, wait_healthy
from tests.kits.daemonkit import restarted_as_wedged, wait_for
from tests.kits.users import STANDIN_AT_ITS_LIMITS, Users

pytestmark = pytest.mark.docker

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"
#: the shipped [health] and boot grace, and the shipped chat timeout (the tests' kit shortens
#: them); only the look is quicker
DEFAULTS: dict[str, Any] = {
    "watch": {"interval": "1s", "boot_grace": "5m"},
    "health": {"interval": "15s", "timeout": "10s", "chat_interval": "10m", "failures": 3},
    "llm": {"probe_timeout": "3m"},
}
#: no background drafting: only real requests move the counters
STILL = ("--drafts-per-s", "0")


@pytest.mark.timeout(420)
def test_a_wedged_engine_behind_a_200_is_restarted_as_wedged(
    stage: Stage, start_daemon: Any
) -> None:
    """Started outside sparkwarden (inside the boot grace), the engine answers the daemon's
    chat, which ends the grace; then its worker stops: /health 200, chats hang, every series
    frozen. Status says the chat is unanswered, never "ok"; the restart says wedged."""
    llm, port = stage.llm("llm", *STILL)
    wait_healthy(port)
    daemon = start_daemon([llm], port, [], **DEFAULTS)
    wait_for("the grace ended by a chat", lambda: '"boot_grace_ended"' in daemon.text(), 60)
    stage.client.containers.get(llm).kill(signal="SIGUSR1")  # as kill -STOP of the worker
    restarted_as_wedged(daemon, timeout=240)
    assert '"trigger"' in daemon.text() and "wedged: no progress" in daemon.text()


@pytest.fixture
def users() -> Iterator[list[Users]]:
    made: list[Users] = []
    yield made
    for each in made:
        each.stop.set()


@pytest.mark.timeout(480)
def test_an_engine_at_its_limits_is_never_restarted(
    stage: Stage, start_daemon: Any, users: list[Users]
) -> None:
    """One request generates at a time (``--contention serial``, the worst case: the health
    chat waits behind every user), long prompts prefill for 30 s with nothing counted, long
    answers take 30 s: the chat waits minutes, the engine is busy, never dead."""
    llm, port = stage.llm("llm", *STANDIN_AT_ITS_LIMITS)
    wait_healthy(port)
    load = Users(f"http://127.0.0.1:{port}", MODEL).start()  # long prompts, long answers
    users.append(load)
    daemon = start_daemon([llm], port, [], **DEFAULTS)
    waited: list[float] = []

    def queued_and_answered() -> bool:
        status = daemon.status()["llm"]
        if status["unanswered_s"]:
            waited.append(status["unanswered_s"])
        return bool(waited) and max(waited) >= 60 and status["unanswered_s"] is None

    wait_for("the chat queued a minute, then answered", queued_and_answered, 300, every=1.0)
    assert load.done >= 2  # the users were served meanwhile
    assert daemon.runs_with("unhealthy", finished=False) == []
    assert "wedged" not in daemon.text()
