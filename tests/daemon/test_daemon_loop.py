"""The loop's order of reads and acts: the real daemon's wiring over recording adapters.

What the pure decider decides is tested in ``test_decide``; these check when the loop reads and
acts, which a decider of its inputs cannot see: the journal read at the gate's moment, and the
memory floor acted on before the engine's slow HTTP reads.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkwarden.adapters.host import Memory
from sparkwarden.base.containers import ContainerState
from sparkwarden.config.schema import parse
from sparkwarden.daemon import handlers as handlers_module
from sparkwarden.daemon import loop as loop_module
from sparkwarden.daemon.handlers import STARTING, WAKE, Handlers, apply_admin
from sparkwarden.daemon.intents import RunEnded
from sparkwarden.daemon.kept import Identity
from sparkwarden.daemon.loop import Daemon
from sparkwarden.restart.journal import Journal
from sparkwarden.restart.parts import Outcome
from sparkwarden.surfaces.control import Peer
from sparkwarden.surfaces.control_schema import HoldRequest, RestartRequest, StatusRequest
from sparkwarden.vllm.client import ChatOutcome, Health


class Recorder:
    """Docker, vLLM and the host in one, noting each call in order."""

    def __init__(self, llm_status: str = "running", available_gib: float = 100.0) -> None:
        self.calls: list[str] = []
        self.llm_status = llm_status
        self.available_gib = available_gib

    def inspect(self, name: str) -> ContainerState:
        self.calls.append(f"inspect {name}")
        status = self.llm_status if name == "vllm" else "running"
        started = datetime.now(UTC) - timedelta(hours=2)
        return ContainerState(name, "id", status, started, None, 0, False)

    def pause(self, name: str) -> None:
        self.calls.append(f"pause {name}")

    def unpause(self, name: str) -> None:
        self.calls.append(f"unpause {name}")

    def metrics(self, timeout: float) -> str | None:
        self.calls.append("GET /metrics")
        return None

    def health(self, timeout: float) -> Health:
        self.calls.append("GET /health")
        return Health("up", "ok")

    def served_model(self) -> str:
        return "m"

    def chat(self, model: str, timeout: float) -> ChatOutcome:
        self.calls.append("POST chat")
        return ChatOutcome(True, "ok")

    def close(self) -> None:
        self.calls.append("close")

    def memory(self) -> Memory:
        self.calls.append("memory")
        return Memory(self.available_gib, 128.0)


def make_daemon(tmp_path: Path, rec: Recorder, **sections: dict[str, object]) -> Daemon:
    raw: dict[str, dict[str, object]] = {
        "llm": {"containers": ["vllm"], "base_url": "http://127.0.0.1:9"},
        "schedule": {"cron": ""},
        "state": {"dir": str(tmp_path / "state")},
        "control": {"socket": str(tmp_path / "s.sock"), "group": ""},
    }
    for key, values in sections.items():
        raw.setdefault(key, {}).update(values)
    daemon = Daemon(parse(raw))
    daemon.parts.docker.close()
    daemon.parts.docker = rec  # type: ignore[assignment]
    daemon.parts.vllm = rec  # type: ignore[assignment]
    daemon.parts.host = rec  # type: ignore[assignment]
    return daemon


@pytest.fixture
def closing() -> Iterator[list[Daemon]]:
    made: list[Daemon] = []
    yield made
    for daemon in made:
        daemon.parts.close()


def test_a_hold_written_behind_a_queued_crash_stops_its_restart(
    tmp_path: Path, closing: list[Daemon]
) -> None:
    """The crash is seen in the look before the WAKE: the gate must read the hold itself."""
    daemon = make_daemon(tmp_path, Recorder(llm_status="exited"))
    closing.append(daemon)
    ran: list[str] = []
    daemon.hands.sequence = lambda reason, why, call=None, target=None, gates=None: ran.append(
        reason
    )  # type: ignore[assignment,method-assign,misc,return-value]
    daemon.kept.put_engine(Identity("vllm", "id", "2026-12-01T00:00:00+00:00"))  # seen serving
    daemon.facts = daemon._read_journal()
    daemon._tick(time.time())  # one look: the engine is down
    operator = Journal(daemon.config.state.dir)  # `sparkwarden hold`, from another process
    try:
        assert apply_admin(operator, HoldRequest(cmd="hold", seconds=3600, reason="maint"))["ok"]
    finally:
        operator.close()
    daemon.queue.put(WAKE)
    assert daemon.mind.pending is not None and daemon.mind.pending.reason == "crash"
    daemon._gate(time.time())
    assert ran == []
    assert daemon.mind.pending is None  # refused for the hold, not left waiting


def test_the_memory_floor_pauses_voice_before_the_engine_is_read(
    tmp_path: Path, closing: list[Daemon]
) -> None:
    rec = Recorder(available_gib=1.0)
    daemon = make_daemon(
        tmp_path,
        rec,
        voice={"containers": ["tts"]},
        memory={"floor_gib": 8, "floor_for": "0s", "floor_action": "pause_voice"},
    )
    closing.append(daemon)
    daemon._tick(time.time())
    assert "pause tts" in rec.calls and "GET /metrics" in rec.calls
    assert rec.calls.index("pause tts") < rec.calls.index("GET /metrics")


def test_a_runs_end_is_judged_after_its_transition_never_inside_it(
    tmp_path: Path, closing: list[Daemon]
) -> None:
    """``_decide`` re-entered itself: a run's end was judged, and the box looked at again
    (which decides again), from inside the transition that ran the run. Now each transition is
    applied whole before what it leads to is taken up."""
    daemon = make_daemon(tmp_path, Recorder(llm_status="exited"))
    closing.append(daemon)
    outcome = Outcome(7, True, "vllm", None, container_id="id")

    def sequence(
        reason: str, why: str, call: object = None, target: str | None = None, gates: object = None
    ) -> RunEnded:
        return RunEnded(reason, why, outcome, time.time())

    daemon.hands.sequence = sequence  # type: ignore[assignment,method-assign]
    applying: list[int] = [0]
    deepest: list[int] = [0]
    applied: list[str] = []
    apply = daemon._apply

    def one_at_a_time(decision: Any) -> None:
        applying[0] += 1
        deepest[0] = max(deepest[0], applying[0])
        try:
            apply(decision)
            applied.append(type(decision[1][-1]).__name__ if decision[1] else "-")
        finally:
            applying[0] -= 1

    daemon._apply = one_at_a_time  # type: ignore[method-assign]
    daemon.kept.put_engine(Identity("vllm", "id", "2026-12-01T00:00:00+00:00"))  # seen serving
    daemon.facts = daemon._read_journal()
    daemon._tick(time.time())  # the engine is down: a crash restart is wanted
    before = len(applied)
    daemon._gate(time.time())  # through the gates: the run, its end judged, a look again
    assert deepest[0] == 1, "a transition was applied inside another"
    assert applied[before] == "Restart" and len(applied) > before + 3, applied
    assert daemon.mind.last_run_end > 0  # the end was judged


def test_status_before_the_first_look_is_starting_never_an_empty_snapshot(
    tmp_path: Path,
) -> None:
    """The socket may answer before the first snapshot is published: an empty status read as
    "not running" (and a test's wait on ``daemon.looks`` found no key, in CI)."""
    published: dict[str, Any] = {}
    config = parse(
        {"llm": {"containers": ["v"], "base_url": "http://127.0.0.1:9"}, "state": {"dir": tmp_path}}
    )
    handlers = Handlers(config, queue.Queue(), lambda: published, lambda: None, lambda: None)
    asked = StatusRequest(cmd="status")
    assert handlers(asked, Peer(1, 0, 0)) == {"ok": False, "error": STARTING}
    published.update({"daemon": {"running": True, "looks": 1}})
    assert handlers(asked, Peer(1, 0, 0)) == {"ok": True, "status": published}


UNNAMED = "reason schedule, pid 7, since T"


@pytest.mark.parametrize(
    ("holders", "said"),
    [
        # the lock taken a moment before the run's first step names the run in it
        ([UNNAMED, UNNAMED, f"run #3, {UNNAMED}"], f"run #3, {UNNAMED}"),
        ([UNNAMED, None], UNNAMED),  # the run ended before it had a number: said as it was
    ],
)
def test_a_request_refused_for_a_run_under_the_lock_names_its_number(
    tmp_path: Path, holders: list[str | None], said: str
) -> None:
    """Issue 45: a restart asked between the daemon's run taking the lock and its first step
    was refused naming no run ("reason schedule, pid ..."), where every refusal names the run
    that won (test_two_restarts_and_a_schedule_at_once_make_one_sequence, in CI)."""
    config = parse(
        {"llm": {"containers": ["v"], "base_url": "http://127.0.0.1:9"}, "state": {"dir": tmp_path}}
    )

    def busy() -> str | None:  # the lock as each look finds it, the last one from then on
        return holders.pop(0) if len(holders) > 1 else holders[0]

    handlers = Handlers(config, queue.Queue(), dict, busy, lambda: None)
    answers = handlers(RestartRequest(cmd="restart"), Peer(1, 0, 0))
    assert isinstance(answers, Iterator)
    first = next(answers)
    assert first == {
        "ok": False,
        "error": f"another sequence is running: {said}",
        "watch_mode": "act",
    }, first


def test_requests_queued_behind_a_run_that_took_the_lock_first_name_that_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45: an operator's request queued for the loop, then a schedule's run taking the
    lock first (the loop is in it): a second request was refused naming the queued call ("an
    operator's (manual)", a run that never was), and the first, not taken up within its wait,
    was told "the daemon is busy". Both name the run that holds the lock."""
    monkeypatch.setattr(handlers_module, "CLAIM_WAIT", 2.0, raising=False)
    config = parse(
        {"llm": {"containers": ["v"], "base_url": "http://127.0.0.1:9"}, "state": {"dir": tmp_path}}
    )
    lock: list[str | None] = [None]
    handlers = Handlers(config, queue.Queue(), dict, lambda: lock[0], lambda: None)
    first: list[dict[str, Any]] = []

    def ask() -> None:
        answers = handlers(RestartRequest(cmd="restart"), Peer(1, 0, 0))
        assert isinstance(answers, Iterator)
        first.append(next(answers))

    asker = threading.Thread(target=ask)
    asker.start()
    wait_until(lambda: handlers.manual_call is not None)  # queued: the loop has not taken it
    lock[0] = f"run #1, {UNNAMED}"  # the loop runs the schedule's restart instead
    answers = handlers(RestartRequest(cmd="restart"), Peer(2, 0, 0))
    assert isinstance(answers, Iterator)
    second = next(answers)
    asker.join(timeout=30)
    refused = {"ok": False, "error": f"another sequence is running: run #1, {UNNAMED}"}
    assert second == {**refused, "watch_mode": "act"}
    assert first == [{**refused, "watch_mode": "act"}]


def wait_until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_an_engine_named_past_max_uptime_is_not_restarted_before_its_notice(
    tmp_path: Path, closing: list[Daemon]
) -> None:
    """Issue 36 item 2, through the daemon's own loop and journal: the install's reload names an
    engine up 2 h past a 90 min limit. No restart within the hour, status says when, and a
    restart of sparkwarden meanwhile keeps the notice (it lives in the journal)."""
    ran: list[str] = []
    named = time.time()
    for _ in range(2):  # the daemon, then the next one on the same journal
        daemon = make_daemon(tmp_path, Recorder(), watch={"max_uptime": "90m"})
        closing.append(daemon)
        daemon.hands.sequence = lambda reason, why, call=None, target=None, gates=None: ran.append(
            reason
        )  # type: ignore[assignment,method-assign,misc,return-value]
        t = time.time()
        daemon._tick(t)
        daemon._gate(t + 1)
        assert daemon.mind.pending is not None and daemon.mind.pending.reason == "uptime"
        daemon._gate(t + 3000)
        assert ran == [] and daemon.mind.pending is not None  # waiting, not dropped
        daemon._publish()
        upcoming = daemon.reporter.as_json()["next_restart"]
        notice = daemon.facts.first_sight
        assert notice is not None and notice.until >= named + 3600
        assert "first seen" in upcoming["reason"] and "not before then" in upcoming["reason"]
        assert datetime.fromisoformat(upcoming["at"]).timestamp() == int(notice.until)


def test_signal_handlers_only_set_fields_the_main_thread_says_the_rest(
    tmp_path: Path, closing: list[Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler runs between any two bytecodes of the main thread, maybe inside the lock of a
    log line being written or a systemd message being sent: logging or notifying there hung a
    daemon forever (a CI run: SIGHUP mid-run, the run never ended). The handlers may only set
    fields and wake the loop; the main thread logs and tells systemd, once."""
    daemon = make_daemon(tmp_path, Recorder())
    closing.append(daemon)
    sent: list[str] = []

    def forbidden(*_args: object, **_kw: object) -> None:
        raise AssertionError("a signal handler took a lock: it logged or notified")

    monkeypatch.setattr(daemon.sd, "send", forbidden)
    monkeypatch.setattr(loop_module, "log", SimpleNamespace(info=forbidden))
    daemon._on_hangup(signal.SIGHUP, None)
    daemon._on_signal(signal.SIGTERM, None)
    daemon._on_signal(signal.SIGINT, None)  # a second signal changes nothing
    assert daemon.stopping and daemon.reload_wanted and daemon.signalled == "SIGTERM"
    monkeypatch.setattr(daemon.sd, "send", lambda *lines: sent.extend(lines))
    said: list[str] = []
    monkeypatch.setattr(loop_module, "log", SimpleNamespace(info=lambda *a, **k: said.append(a[0])))
    assert daemon._should_stop() and daemon._should_stop()
    assert said == ["stop_requested"] and sent == ["STOPPING=1"]
