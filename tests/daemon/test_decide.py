"""Every gate of the pure decider, with an injected clock: no Docker, no journal, no threads."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sparkwarden.adapters.docker_events import ContainerEvent
from sparkwarden.adapters.host import Memory
from sparkwarden.base.containers import ContainerState
from sparkwarden.config.schema import Config, parse
from sparkwarden.daemon import decide, gates, publish, reconcile
from sparkwarden.daemon import intents as do
from sparkwarden.daemon.decide import Mind, Pending
from sparkwarden.daemon.kept import GaveUp, Hold, Identity, OperatorStop
from sparkwarden.daemon.observe import EventSeen, HealthCheck, Observation, Recorded, Scrape
from sparkwarden.evidence import triggers
from sparkwarden.evidence.triggers import PastRun, Reason
from sparkwarden.restart.parts import Outcome
from sparkwarden.surfaces import snapshot
from sparkwarden.vllm.client import ChatOutcome, Health
from sparkwarden.vllm.metrics import EngineMetrics

T0 = datetime(2026, 11, 30, 4, 30, tzinfo=UTC)
T = T0.timestamp()
IDLE = Scrape(EngineMetrics(None, 0.0, 0.0, 100.0), "ok")
BUSY = Scrape(EngineMetrics(None, 3.0, 1.0, 100.0), "ok")
ASLEEP = Scrape(EngineMetrics(None, 0.0, 0.0, 100.0, sleeping=True, sleep_level=1), "ok")


def cfg(**sections: Any) -> Config:
    raw: dict[str, Any] = {
        "llm": {"containers": ["vllm"], "base_url": "http://127.0.0.1:9"},
        "schedule": {"cron": "", "min_uptime": "1h"},
        "drain": {"quiet": "30s", "deadline": "10m"},
        "acceptance": {"enabled": False},
        "budget": {"max_runs": 3, "window": "6h", "backoff": "2m", "backoff_max": "1h"},
        "state": {"dir": "/nonexistent/state"},
        "control": {"socket": "/nonexistent/s", "group": ""},
    }
    for key, values in sections.items():
        raw.setdefault(key, {}).update(values)
    return parse(raw)


CFG = cfg()


def up_since(seconds: float) -> ContainerState:
    started = T0 - timedelta(seconds=seconds)
    return ContainerState("vllm", "id", "running", started, None, 0, False)


def facts(
    hold: Hold | None = None,
    gave_up: GaveUp | None = None,
    runs: tuple[PastRun, ...] = (),
    reset_at: float = 0.0,
    at: float = T,
) -> Recorded:
    """The journal's facts as read at ``at``: the gate at ``t`` admits only on ones read then."""
    return Recorded(hold, gave_up, runs, reset_at, None, None, [], at)


def now(known: Recorded, t: float) -> Recorded:
    """The same facts, read again at ``t``."""
    return replace(known, read_at=t)


def pending(reason: Reason, t: float = T) -> Mind:
    return Mind(pending=Pending(reason, f"{reason} wanted", t))


def events(intents: list[do.Intent]) -> list[str]:
    return [i.event for i in intents if isinstance(i, do.Say)]


def restarts(intents: list[do.Intent]) -> list[do.Restart]:
    return [i for i in intents if isinstance(i, do.Restart)]


def state(mind: Mind, known: Recorded, t: float = T) -> str:
    held = known.hold is not None and not known.hold.over(t)
    reboot = known.reboot_required is not None
    return publish.state_name(None, True, mind, known.gave_up is not None, held, reboot)


# --- triggers ------------------------------------------------------------------------------------


def test_an_urgent_trigger_replaces_a_planned_one_never_the_other_way() -> None:
    mind, said = decide.want(Mind(), "uptime", "up 20 h", T)
    assert mind.pending is not None and mind.pending.reason == "uptime"
    assert events(said) == ["trigger"]
    mind, _ = decide.want(mind, "acceptance", "decayed", T + 1)
    assert mind.pending is not None and mind.pending.reason == "uptime"
    mind, _ = decide.want(mind, "crash", "died", T + 2)
    assert mind.pending is not None and mind.pending.reason == "crash"
    mind, said = decide.want(mind, "schedule", "nightly", T + 3)
    assert mind.pending is not None and mind.pending.reason == "crash" and said == []


def die(t: float, exit_code: int = 137, up_again: bool = False) -> EventSeen:
    status = "running" if up_again else "exited"
    now = ContainerState("vllm", "id", status, T0, None, exit_code, False)
    return EventSeen(ContainerEvent("vllm", "die", t, exit_code=exit_code), now=now)


def test_a_die_is_only_noted_the_look_decides() -> None:
    """A die no longer restarts by itself: it hastens the look, which reconciles."""
    mind, intents = decide.on_event(Mind(), die(T + 5), CFG)
    assert mind.pending is None and intents[0] == do.EventsSeen(T + 5)
    assert events(intents) == ["container_event"]


def test_a_die_after_sigterm_is_stopped_by_hand_in_the_journal() -> None:
    kill = EventSeen(ContainerEvent("vllm", "kill", T, signal="15", id="id"))
    mind, _ = decide.on_event(Mind(), kill, CFG)
    mind, said = decide.on_event(mind, die(T + 3, exit_code=0), CFG)
    assert mind.pending is None and "operator_stopped" in events(said)
    (note,) = [i for i in said if isinstance(i, do.NoteOperatorStop)]
    assert note.stop == OperatorStop("vllm", "id", T + 3)
    # a trigger meanwhile is refused, and says why
    mind, _ = decide.want(mind, "unhealthy", "no answer", T + 4)
    stopped = replace(facts(at=T + 4), operator_stopped=note.stop)
    mind, said = gates.gate(mind, stopped, None, None, T + 4, CFG)
    assert mind.pending is None and restarts(said) == []
    refused = [i for i in said if isinstance(i, do.Say) and i.event == "trigger_refused"]
    assert refused[0].fields["refused"] == "vllm was stopped by hand"


def test_our_own_stop_and_start_are_not_events_to_act_on() -> None:
    mind, intents = decide.on_event(Mind(last_run_end=T + 10), die(T + 5), CFG)
    assert mind.pending is None and intents == [do.EventsSeen(T + 5)]


def test_after_the_clock_stepped_back_a_real_die_is_a_crash_again() -> None:
    """A run ended at T + 3600 by a clock an hour fast; NTP steps it back: the next look at the
    box notices, and Docker's real-time ``die`` is no longer taken for our own."""
    seen = Observation(T, up_since(7200), "", Memory(90.0, 128.0))
    mind, said = decide.on_look(Mind(last_run_end=T + 3600), seen, CFG)
    assert mind.last_run_end == T and "clock_stepped_back" in events(said)
    _, said = decide.on_event(mind, die(T + 5), CFG)
    assert "container_event" in events(said)  # no longer taken for our own


def test_a_daemon_restarted_after_the_floor_paused_voice_resumes_it_when_memory_is_back() -> None:
    low = cfg(memory={"floor_gib": 8, "floor_for": "60s", "floor_action": "pause_voice"})
    seen = Observation(T, up_since(7200), "", Memory(30.0, 128.0))
    fresh = Mind(memory=triggers.MemoryState(alerted=True))  # the journal still lists them
    _, intents = decide.on_look(fresh, seen, low)
    assert do.ResumeVoiceAfterMemory() in intents


def test_fighting_restart_policies_are_taken_over_or_said_once_under_leave() -> None:
    fights = ContainerState("vllm", "id", "running", T0, None, 0, False, "unless-stopped")
    seen = Observation(T, fights, "", Memory(100.0, 121.0), states=(fights,))
    _, intents = decide.on_look(Mind(), seen, CFG)
    assert [i for i in intents if isinstance(i, do.TakeOverPolicy)] == [do.TakeOverPolicy(fights)]

    # not started yet, so none is active: still taken before it can crash
    never_ran = replace(fights, status="created", started_at=None)
    idle = Observation(T, None, "no LLM candidate is running", seen.memory, states=(never_ran,))
    assert do.TakeOverPolicy(never_ran) in decide.on_look(Mind(), idle, CFG)[1]

    leave = cfg(llm={"restart_policy": "leave"})
    mind, intents = decide.on_look(Mind(), seen, leave)
    assert not any(isinstance(i, do.TakeOverPolicy) for i in intents)
    assert "restart_policy_left_at_risk" in events(intents)
    mind, intents = decide.on_look(mind, replace(seen, t=T + 5), leave)
    assert "restart_policy_left_at_risk" not in events(intents)  # once, not every tick


def test_memory_floor_pause_voice_pauses_then_resumes() -> None:
    low = cfg(memory={"floor_gib": 8, "floor_for": "60s", "floor_action": "pause_voice"})
    seen = Observation(T, up_since(7200), "", Memory(4.0, 128.0))
    mind, intents = decide.on_look(Mind(), seen, low)
    assert not any(isinstance(i, do.QuietVoiceForMemory) for i in intents)
    mind, intents = decide.on_look(mind, replace(seen, t=T + 61), low)
    assert do.QuietVoiceForMemory() in intents
    assert [i.kind for i in intents if isinstance(i, do.Notify)] == ["memory_floor"]
    mind, intents = decide.on_look(mind, replace(seen, t=T + 62, memory=Memory(30, 128)), low)
    assert do.ResumeVoiceAfterMemory() in intents and mind.pending is None


def test_a_floor_breach_that_is_the_engines_own_cache_restarts_nothing() -> None:
    """vLLM 0.34 with no --gpu-memory-utilization sizes its KV cache to the memory free at its
    start: under the floor is then its own cache, and a restart would take it again (until the
    budget gave up). The breach is said with its cause and doctor's fix; nothing restarts."""
    restart = cfg(memory={"floor_gib": 8, "floor_for": "60s", "floor_action": "restart"})
    why = "no --gpu-memory-utilization: vLLM 0.34.0's default 1 with the extensible KV cache"
    seen = Observation(T, up_since(7200), "", Memory(1.0, 128.0), fills_memory=why)
    mind, _ = decide.on_look(Mind(), seen, restart)
    mind, intents = decide.on_look(mind, replace(seen, t=T + 61), restart)
    assert mind.pending is None, mind.pending
    (said,) = [i for i in intents if isinstance(i, do.Say) and i.event == "memory_floor"]
    assert said.fields["action"] == "warn" and "sparkwarden doctor" in str(said.fields["cause"])
    (told,) = [i for i in intents if isinstance(i, do.Notify)]
    assert "the engine's own KV cache" in told.summary and why in told.summary
    # an engine that leaves room: the same breach restarts it, as the operator asked
    mind, _ = decide.on_look(Mind(), replace(seen, fills_memory=""), restart)
    mind, _ = decide.on_look(mind, replace(seen, t=T + 61, fills_memory=""), restart)
    assert mind.pending is not None and mind.pending.reason == "memory"


def test_a_drafting_canary_is_taken_when_idle_and_only_its_verdict_restarts() -> None:
    from sparkwarden.evidence import canary_reading
    from sparkwarden.vllm.metrics import SpecDecode

    on = cfg(
        acceptance={
            "enabled": True,
            "canary_idle": "20s",
            "canary_learn": 1,
            "canary_consecutive": 2,
        }
    )
    spec = SpecDecode(100.0, 500.0, 200.0, (80.0, 50.0, 40.0, 20.0, 10.0), 1.0)
    idle = Scrape(EngineMetrics(spec, 0.0, 0.0, 300.0), "ok")
    assert decide.canary_owed(Mind(), T, on)  # the observer reads /metrics every tick
    mind, intents = decide.on_scrape(Mind(), idle, T, on)
    mind, intents = decide.on_scrape(mind, idle, T + 25, on)
    assert do.TakeCanary(T + 25) in intents

    def taken(t: float, accepted: float) -> canary_reading.Round:
        reading = canary_reading.Reading("math", True, "valid", 40.0, 200.0, accepted, (0.5,), 1.0)
        return canary_reading.Round(t, (reading,), 1.0)

    mind, intents = decide.on_canary(mind, taken(T + 25, 100.0), "vllm", on)
    assert "drafting_canary" in events(intents) and mind.canary.baseline == (("math", 0.5),)
    mind, _ = decide.on_canary(mind, taken(T + 400, 40.0), "vllm", on)
    assert mind.pending is None  # one low canary is not enough
    mind, intents = decide.on_canary(mind, taken(T + 800, 40.0), "vllm", on)
    assert mind.pending is not None and mind.pending.reason == "acceptance"
    assert mind.pending.why.startswith("drafting canary at 0.40")


# --- the gates -----------------------------------------------------------------------------------


def test_hold_refuses_and_drops_the_trigger() -> None:
    hold = Hold(T0 + timedelta(hours=1), "swapping fans")
    mind, said = gates.gate(pending("crash"), facts(hold=hold), up_since(7200), None, T, CFG)
    assert mind.pending is None and restarts(said) == []
    assert "trigger_refused" in events(said)


def test_a_hold_whose_time_is_over_is_removed_and_lets_it_through() -> None:
    hold = Hold(T0 - timedelta(seconds=1), "")
    mind, intents = gates.gate(pending("crash"), facts(hold=hold), up_since(7200), None, T, CFG)
    assert do.ExpireHold() in intents
    assert restarts(intents) == [do.Restart("crash", "crash wanted")]
    assert mind.pending is None


def test_gave_up_refuses_until_an_operator_resets() -> None:
    given = GaveUp("crash", "budget spent", T0.isoformat())
    mind, said = gates.gate(pending("crash"), facts(gave_up=given), None, None, T, CFG)
    assert mind.pending is None and restarts(said) == [] and "trigger_refused" in events(said)


def test_a_nightly_restart_of_a_fresh_engine_is_skipped() -> None:
    mind, said = gates.gate(pending("schedule"), facts(), up_since(600), None, T, CFG)
    assert mind.pending is None and events(said) == ["schedule_skipped"]
    # an old engine drains as usual; other reasons never look at freshness
    mind, said = gates.gate(pending("schedule"), facts(), up_since(7200), IDLE, T, CFG)
    assert mind.pending is not None and events(said) == ["draining"]
    mind, said = gates.gate(pending("crash"), facts(), up_since(600), None, T, CFG)
    assert restarts(said) == [do.Restart("crash", "crash wanted")]


def test_a_spent_budget_gives_up_once_and_says_so() -> None:
    runs = tuple(PastRun("crash", "ok", T - 600 * i, T - 600 * i + 60) for i in (1, 2, 3))
    mind, intents = gates.gate(pending("crash"), facts(runs=runs), up_since(60), None, T, CFG)
    assert mind.pending is None and restarts(intents) == []
    (gave_up,) = [i.gave_up for i in intents if isinstance(i, do.GiveUp)]
    assert gave_up.reason == "crash" and "3 automatic runs in the window" in gave_up.why
    assert [i.kind for i in intents if isinstance(i, do.Notify)] == ["gave_up"]
    # a reset since those runs gives the budget back
    _, intents = gates.gate(pending("crash"), facts(runs=runs, reset_at=T - 1), None, None, T, CFG)
    assert restarts(intents) == [do.Restart("crash", "crash wanted")]


def test_backoff_after_a_failed_run_keeps_it_pending_then_lets_it_through() -> None:
    runs = (PastRun("crash", "failed", T - 100, T - 60),)
    mind, intents = gates.gate(pending("crash"), facts(runs=runs), None, None, T, CFG)
    assert mind.pending is not None and intents == []  # 60 s into a 120 s backoff
    mind, intents = gates.gate(mind, facts(runs=runs, at=T + 61), None, None, T + 61, CFG)
    assert mind.pending is None and len(restarts(intents)) == 1


def test_drain_waits_for_quiet_then_goes() -> None:
    known, active = facts(), up_since(7200)
    mind = pending("uptime")
    assert gates.wants_drain_sample(mind, known, active, T, CFG)
    mind, said = gates.gate(mind, known, active, BUSY, T, CFG)
    assert events(said) == ["draining"] and state(mind, known) == "draining"
    mind, said = gates.gate(mind, now(known, T + 10), active, IDLE, T + 10, CFG)
    mind, said = gates.gate(mind, now(known, T + 39), active, IDLE, T + 39, CFG)
    assert restarts(said) == [] and mind.pending is not None
    mind, said = gates.gate(mind, now(known, T + 40), active, IDLE, T + 40, CFG)
    assert restarts(said) == [do.Restart("uptime", "uptime wanted")]
    assert mind.pending is None and state(mind, known) == "idle"


def test_a_planned_restart_waits_while_the_engine_sleeps_then_drains_once_awake() -> None:
    """A sleeping engine is idle (nothing runs), but restarting it would wake it on purpose put
    to sleep: the restart waits, past its drain deadline too, and drains afresh once awake."""
    known, active = facts(), up_since(7200)
    mind, said = gates.gate(pending("uptime"), known, active, ASLEEP, T, CFG)
    assert events(said) == ["restart_waits_for_wake"] and mind.pending is not None
    assert mind.pending.drain is not None and "sleeps" in mind.pending.drain.note
    end = T + CFG.drain.deadline + 60
    mind, said = gates.gate(mind, now(known, end), active, ASLEEP, end, CFG)
    assert restarts(said) == [] and events(said) == []  # said once, not at every look
    mind, said = gates.gate(mind, now(known, end + 1), active, IDLE, end + 1, CFG)
    assert events(said) == ["draining"] and restarts(said) == []  # awake: a fresh drain
    mind, said = gates.gate(mind, now(known, end + 31), active, IDLE, end + 31, CFG)
    assert restarts(said) == [do.Restart("uptime", "uptime wanted")]


def test_drain_goes_at_its_deadline_however_busy() -> None:
    known, active = facts(), up_since(7200)
    mind, _ = gates.gate(pending("acceptance"), known, active, BUSY, T, CFG)
    mind, said = gates.gate(mind, now(known, T + 599), active, BUSY, T + 599, CFG)
    assert restarts(said) == []
    mind, said = gates.gate(mind, now(known, T + 600), active, BUSY, T + 600, CFG)
    assert len(restarts(said)) == 1 and "drain deadline" in str(said)


def test_drain_without_request_gauges_waits_the_whole_deadline() -> None:
    """--disable-log-stats: nothing says the engine is quiet, so running chats are not cut."""
    active, no_gauges = up_since(7200), Scrape(None, "no vllm:num_requests_running")
    mind, said = gates.gate(pending("uptime"), facts(), active, no_gauges, T, CFG)
    assert restarts(said) == [] and mind.pending is not None
    assert state(mind, facts()) == "draining"
    end = T + CFG.drain.deadline
    mind, said = gates.gate(mind, now(facts(), end), active, no_gauges, end, CFG)
    assert len(restarts(said)) == 1 and mind.pending is None
    assert "waited the whole drain deadline" in str(said)


def test_drain_with_no_reading_at_all_waits_for_its_deadline() -> None:
    """Docker could not be inspected mid-drain, so nothing was read: unknown is not quiet."""
    known, active = facts(), up_since(7200)
    mind, _ = gates.gate(pending("uptime"), known, active, IDLE, T, CFG)
    assert not gates.wants_drain_sample(mind, now(known, T + 31), None, T + 31, CFG)
    mind, said = gates.gate(mind, now(known, T + 31), None, None, T + 31, CFG)
    assert restarts(said) == [] and state(mind, known) == "draining"
    mind, said = gates.gate(mind, now(known, T + 599), None, None, T + 599, CFG)
    assert restarts(said) == []
    mind, said = gates.gate(mind, now(known, T + 600), None, None, T + 600, CFG)
    assert len(restarts(said)) == 1 and "drain deadline" in str(said)


def test_the_gate_admits_only_on_facts_read_at_its_moment() -> None:
    """A die queued ahead of an operator's hold (and its WAKE): the journal read before the hold
    was written must not let the crash restart through."""
    mind, _ = decide.want(Mind(), "crash", "vllm is exited", T + 5, target="id")
    stale = facts()  # read at T, before the operator's hold
    assert not gates.wants_drain_sample(mind, stale, None, T + 6, CFG)
    kept, said = gates.gate(mind, stale, None, None, T + 6, CFG)
    assert restarts(said) == [] and kept.pending == mind.pending
    held = facts(hold=Hold(T0 + timedelta(hours=1), "maintenance"), at=T + 6)
    mind, said = gates.gate(mind, held, None, None, T + 6, CFG)
    assert mind.pending is None and restarts(said) == []
    assert "trigger_refused" in events(said)


def test_a_hold_arriving_mid_drain_ends_the_drain_and_shows_held() -> None:
    """The bug of issue 12: the state said "draining", with nothing pending, for ever."""
    active = up_since(7200)
    mind, _ = gates.gate(pending("uptime"), facts(), active, BUSY, T, CFG)
    assert state(mind, facts()) == "draining"
    held = facts(hold=Hold(T0 + timedelta(hours=1), "maintenance"), at=T + 5)
    assert not gates.wants_drain_sample(mind, held, active, T + 5, CFG)
    mind, said = gates.gate(mind, held, active, None, T + 5, CFG)
    assert mind.pending is None and restarts(said) == []
    assert state(mind, held, T + 5) == "held"


def test_an_urgent_trigger_mid_drain_goes_without_draining() -> None:
    active = up_since(7200)
    mind, _ = gates.gate(pending("uptime"), facts(), active, BUSY, T, CFG)
    mind, _ = decide.want(mind, "crash", "died", T + 1)
    assert not gates.wants_drain_sample(mind, facts(at=T + 1), active, T + 1, CFG)
    mind, said = gates.gate(mind, facts(at=T + 1), active, None, T + 1, CFG)
    assert restarts(said) == [do.Restart("crash", "died")]


# --- after a run ---------------------------------------------------------------------------------


def ended(reason: Reason, ok: bool, at: float = T) -> do.RunEnded:
    outcome = Outcome(7, ok, "vllm", None if ok else "wait_health: timed out")
    return do.RunEnded(reason, f"{reason} wanted", outcome, at)


@pytest.mark.parametrize("reason", ["crash", "unhealthy", "uptime"])
def test_a_failed_automatic_run_owes_a_retry_kept_in_the_journal(reason: Reason) -> None:
    mind, intents = decide.after_run(Mind(), ended(reason, ok=False), stopping=False)
    (keep,) = [i for i in intents if isinstance(i, do.KeepRetry)]
    assert keep.retry is not None and keep.retry.reason == reason and keep.retry.at == T
    assert keep.retry.why.startswith("retry after failed run #7")
    assert [i.kind for i in intents if isinstance(i, do.Notify)] == ["run_failed"]
    assert mind.last_run_end == T and mind.pending is None  # the next look asks for it
    # stopping, it is not owed
    _, intents = decide.after_run(Mind(), ended(reason, ok=False), stopping=True)
    assert not any(isinstance(i, do.KeepRetry) for i in intents)


def test_a_failed_operator_run_owes_no_retry_a_good_run_clears_one() -> None:
    _, intents = decide.after_run(Mind(), ended("manual", ok=False), stopping=False)
    assert not any(isinstance(i, do.KeepRetry) for i in intents)
    _, intents = decide.after_run(Mind(), ended("manual", ok=True), stopping=False)
    assert do.KeepRetry(None) in intents


def test_an_operators_good_run_clears_gave_up_a_crash_run_says_recovered() -> None:
    _, intents = decide.after_run(Mind(), ended("manual", ok=True), stopping=False)
    assert do.ClearGaveUp(T) in intents
    _, intents = decide.after_run(Mind(), ended("crash", ok=True), stopping=False)
    assert not any(isinstance(i, do.ClearGaveUp) for i in intents)
    assert [i.kind for i in intents if isinstance(i, do.Notify)] == ["crash_recovered"]


def test_a_run_failing_only_at_the_gateway_notifies_it_and_is_not_retried() -> None:
    error = (
        "the gateway http://127.0.0.1:4000 did not answer ..., though the engine itself answered"
    )
    outcome = Outcome(7, False, "vllm", error, failed_step="gateway_probe")
    mind, intents = decide.after_run(
        Mind(), do.RunEnded("crash", "crash wanted", outcome, T), stopping=False
    )
    assert mind.pending is None  # a new engine would not fix a gateway
    assert [i.kind for i in intents if isinstance(i, do.Notify)] == ["gateway_failed"]
    assert mind.gateway.ok is False and mind.gateway.failing_since == T


def test_a_watched_gateway_failing_while_the_engine_answers_is_told_never_restarted() -> None:
    watched = cfg(gateway={"url": "http://127.0.0.1:4000/v1", "model": "qwen", "watch": True})
    engine = ChatOutcome(True, "answered 'ready'")

    def look(gateway: ChatOutcome, t: float) -> Observation:
        check = HealthCheck(Health("up", "HTTP 200"), engine, IDLE.engine, gateway)
        return Observation(t, up_since(3600), "", Memory(100.0, 121.0), None, check)

    mind, intents = decide.on_engine(
        Mind(), look(ChatOutcome(False, "HTTP 502: Bad Gateway"), T), watched
    )
    assert mind.pending is None and not restarts(intents)
    assert events(intents) == ["gateway_failed"]
    assert [i.kind for i in intents if isinstance(i, do.Notify)] == ["gateway_failed"]
    mind, intents = decide.on_engine(mind, look(ChatOutcome(False, "HTTP 502"), T + 600), watched)
    assert intents == [] and mind.gateway.failing_since == T  # told once per episode
    mind, _ = decide.on_engine(mind, look(ChatOutcome(True, "answered 'ready'"), T + 1200), watched)
    assert mind.gateway.ok is True


def test_state_names_are_derived_in_order() -> None:
    known = facts(gave_up=GaveUp("crash", "spent", T0.isoformat()))
    assert publish.state_name("step 3 of 8: stop_llm", True, Mind(), True, True).startswith(
        "restarting: step 3"
    )
    assert publish.state_name(None, False, Mind(), False, False) == "starting"
    assert state(Mind(), known) == "gave up"
    assert publish.state_name(None, True, Mind(), True, False, reboot=True) == "reboot required"
    assert publish.state_name(None, True, Mind(), False, False, observing=True) == "observing"
    assert set(snapshot.STATES) == {
        "starting",
        "idle",
        "observing",
        "waiting",
        "draining",
        "restarting",
        "held",
        "gave up",
        "reboot required",
    }


def test_memory_falling_after_every_stop_and_drop_requires_a_reboot_and_refuses_restarts() -> None:
    trend = cfg(memory={"trend_runs": 3, "trend_fall_gib": 2.0})
    known = replace(facts(), after_drops={"": (100.0, 98.5, 96.0)})
    mind, said = decide.memory_trend(Mind(), known, ended("manual", ok=True), trend)
    (flag,) = [i.flag for i in said if isinstance(i, do.RequireReboot)]
    assert flag.available_after_drop_gib == (100.0, 98.5, 96.0) and flag.fall_gib == 4.0
    assert [i.kind for i in said if isinstance(i, do.Notify)] == ["reboot_required"]
    # once flagged: no second flag, and an automatic restart is refused
    flagged = replace(known, reboot_required=flag)
    assert decide.memory_trend(Mind(), flagged, ended("crash", ok=True), trend)[1] == []
    mind, said = gates.gate(pending("crash"), flagged, up_since(7200), None, T, trend)
    assert mind.pending is None and restarts(said) == []
    assert "reboot required" in str(said)
    assert state(Mind(), flagged) == "reboot required"
    # memory that came back at one run: no flag
    back = replace(facts(), after_drops={"": (100.0, 101.0, 96.0)})
    assert decide.memory_trend(Mind(), back, ended("manual", ok=True), trend)[1] == []


def test_a_cluster_node_whose_memory_keeps_falling_requires_a_reboot_naming_it() -> None:
    trend = cfg(memory={"trend_runs": 3, "trend_fall_gib": 2.0})
    nodes = {"spark1": (100.0, 100.5, 99.8), "spark2": (100.0, 97.0, 93.0)}
    _mind, said = decide.memory_trend(
        Mind(), replace(facts(), after_drops=nodes), ended("crash", ok=True), trend
    )
    (flag,) = [i.flag for i in said if isinstance(i, do.RequireReboot)]
    assert flag.why.startswith("on spark2: ") and flag.fall_gib == 7.0
    (note,) = [i for i in said if isinstance(i, do.Notify)]
    assert note.subject == "spark2" and "on spark2" in note.summary


def test_the_run_that_started_the_engine_ends_its_boot_grace_another_start_does_not() -> None:
    """After sparkwarden's own restart, the run's chat probe proved the engine: the look that
    then adopts the start it made keeps it proven (a wedge right after it is not hidden by the
    boot grace); a start of anything else is known by nothing yet."""
    outcome = Outcome(7, True, "vllm", None, container_id="id")
    mind, _ = decide.after_run(Mind(), do.RunEnded("unhealthy", "wedged", outcome, T), False)
    assert mind.health.proven and mind.health.proven_by == "id"
    ours = Identity("vllm", "id", (T0 - timedelta(seconds=5)).isoformat())
    adopted, _ = reconcile.apply(mind, reconcile.Reconciled([do.Adopt(ours, "started")]), T + 1)
    assert adopted.health.proven
    for other in (Identity("vllm", "other", ours.started_at), replace(ours, started_at=None)):
        fresh, _ = reconcile.apply(mind, reconcile.Reconciled([do.Adopt(other, "started")]), T)
        assert not fresh.health.proven
    later = replace(ours, started_at=(T0 + timedelta(seconds=60)).isoformat())  # started since
    fresh, _ = reconcile.apply(mind, reconcile.Reconciled([do.Adopt(later, "by hand")]), T + 61)
    assert not fresh.health.proven


def test_status_never_says_ok_while_the_daemons_chat_is_unanswered() -> None:
    state = triggers.HealthState(last="ok", moved_at=T - 30)
    said, age = publish.health_said(state, T - 23, T)
    assert (said, age) == ("chat unanswered for 23s; nothing moved since", 23.0)
    said, _ = publish.health_said(replace(state, moved_at=T - 2), T - 23, T)
    assert said == "chat unanswered for 23s; tokens moved 2s ago"
    assert publish.health_said(state, None, T) == ("ok", None)
    longest, _ = publish.health_said(replace(state, moved_at=T - 1), T - 99999, T)
    assert len(f"health:      {longest}") <= 80
