"""The level-triggered reconcile over tables of (the journal's facts, the world), with an
injected clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from sparkwarden.adapters.docker_events import ContainerEvent
from sparkwarden.base.containers import ContainerState
from sparkwarden.daemon import decide, gates
from sparkwarden.daemon import intents as do
from sparkwarden.daemon.decide import Mind, Pending
from sparkwarden.daemon.kept import GaveUp, Hold, Identity, OperatorStop, RebootRequired, Retry
from sparkwarden.daemon.observe import EventSeen, Recorded
from sparkwarden.daemon.reconcile import SETTLE, Reconciled, World, apply, reconcile
from sparkwarden.evidence.triggers import PastRun
from sparkwarden.restart.journal import RunRecord
from sparkwarden.surfaces.status_text import BY_ITSELF
from tests.daemon.test_decide import cfg

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
T = T0.timestamp()
CFG = cfg(llm={"containers": ["vllm", "other"], "base_url": "http://127.0.0.1:9"})
BOOTED = T0 - timedelta(hours=5)


def box(
    status: str = "running",
    *,
    name: str = "vllm",
    cid: str = "A",
    started: datetime | None = BOOTED,
    finished_ago: float | None = 60.0,
    restarts: int = 0,
) -> ContainerState:
    up = status in ("running", "paused", "restarting")
    finished = None if up or finished_ago is None else T0 - timedelta(seconds=finished_ago)
    return ContainerState(name, cid, status, started, finished, 137, False, restart_count=restarts)


SERVING = Identity("vllm", "A", BOOTED.isoformat())


def recorded(**kw: object) -> Recorded:
    known = Recorded(None, None, (), 0.0, None, None, [], T, engine=SERVING)
    return replace(known, **kw)  # type: ignore[arg-type]


def wanted(v: Reconciled) -> tuple[str, str] | None:
    return None if v.want is None else (v.want.reason, v.want.target)


STOPPED = OperatorStop("vllm", "A", T - 60)
HOLD = Hold(T0 + timedelta(hours=1), "maintenance")
GAVE_UP = GaveUp("crash", "restart budget spent", T0.isoformat())
REBOOT = RebootRequired("leak", (100.0, 90.0, 80.0), 20.0, T0.isoformat())
FAILED_NOW = (PastRun("crash", "failed", T - 30, T - 5),)

# (name, the journal's facts, world, wanted (reason, target) or None, the command the wait ends
# with or None)
TABLE = [
    ("serving: nothing to do", recorded(), (box(),), None, None),
    (
        "the engine believed in is no longer in llm.containers: not waited for, not started",
        recorded(engine=Identity("old-llm", "Z", BOOTED.isoformat())),
        (),
        None,
        "sparkwarden restart",
    ),
    (
        "down, not stopped by hand: recover that ID",
        recorded(),
        (box("exited"),),
        ("crash", "A"),
        None,
    ),
    (
        "down a moment ago: the events settle first",
        recorded(),
        (box("exited", finished_ago=SETTLE / 2),),
        None,
        BY_ITSELF,
    ),
    (
        "being removed (docker rm -f on a slow disk, past the settle time): never restarted",
        recorded(),
        (box("removing", finished_ago=SETTLE * 5),),
        None,
        BY_ITSELF,
    ),
    (
        "dead (a removal failed half-way; Docker refuses to start it): never restarted",
        recorded(),
        (box("dead"),),
        None,
        "docker rm -f vllm",
    ),
    (
        "stopped by hand",
        recorded(operator_stopped=STOPPED),
        (box("exited"),),
        None,
        "docker start vllm",
    ),
    (
        "stopped by hand, since replaced and that one down: recover nothing of theirs",
        recorded(operator_stopped=STOPPED),
        (box("exited", cid="B"),),
        None,
        "docker start vllm",
    ),
    (
        "replaced by hand, not started",
        recorded(),
        (box("created", cid="B", started=None),),
        None,
        "docker start vllm",
    ),
    (
        "removed by hand",
        recorded(),
        (box("exited", name="other", cid="C"),),
        None,
        "docker start vllm",
    ),
    ("held", recorded(hold=HOLD), (box("exited"),), None, "sparkwarden release"),
    (
        "gave up: reset ends it",
        recorded(gave_up=GAVE_UP),
        (box("exited"),),
        None,
        "sparkwarden reset",
    ),
    (
        "reboot required",
        recorded(reboot_required=REBOOT),
        (box("exited"),),
        None,
        "reboot, then sparkwarden reset",
    ),
    (
        "backing off: still wanted, and said when",
        recorded(runs=FAILED_NOW),
        (box("exited"),),
        ("crash", "A"),
        "sparkwarden restart",
    ),
    (
        "a run failed only at the gateway: the engine came back, no backoff",
        recorded(runs=(PastRun("crash", "failed", T - 30, T - 5, "gateway_probe"),)),
        (box("exited"),),
        ("crash", "A"),
        None,
    ),
    (
        "a durable retry keeps its reason",
        recorded(retry=Retry("unhealthy", "why", "A", T - 9)),
        (box("exited"),),
        ("unhealthy", "A"),
        None,
    ),
    (
        "a retry owed to an engine up again (a zombie): asked again",
        recorded(retry=Retry("unhealthy", "chat failed", "A", T - 9)),
        (box(),),
        ("unhealthy", "A"),
        None,
    ),
    (
        "Docker's policy restarted it after a crash",
        recorded(),
        (box(started=T0 - timedelta(seconds=5), restarts=1),),
        ("crash", "A"),
        None,
    ),
    (
        "Docker's policy restarted it while nobody watched: still the sequence",
        recorded(engine=None),
        (box(restarts=1),),
        ("crash", "A"),
        None,
    ),
    (
        "an operator's docker start of it: adopted",
        recorded(),
        (box(started=T0 - timedelta(seconds=5)),),
        None,
        None,
    ),
    (
        "an operator's new container under the name: adopted",
        recorded(),
        (box(cid="B", started=T0 - timedelta(seconds=5)),),
        None,
        None,
    ),
    (
        "a second candidate up, the first dead: adopted, nobody restarted",
        recorded(),
        (box("exited"), box(name="other", cid="C")),
        None,
        None,
    ),
    ("two candidates up", recorded(), (box(), box(name="other", cid="C")), None, "docker stop …"),
    (
        "nothing believed, nothing up: wait for an operator",
        recorded(engine=None),
        (box("exited"),),
        None,
        "sparkwarden restart",
    ),
]


@pytest.mark.parametrize(
    ("name", "known", "states", "want", "command"), TABLE, ids=[row[0] for row in TABLE]
)
def test_reconcile_table(
    name: str,
    known: Recorded,
    states: tuple[ContainerState, ...],
    want: tuple[str, str] | None,
    command: str | None,
) -> None:
    verdict = reconcile(known, World(states), T, CFG)
    assert wanted(verdict) == want, name
    assert (verdict.waiting.command if verdict.waiting else None) == command, name


def test_an_engine_up_in_another_identity_is_adopted_and_a_retry_for_the_old_one_dropped() -> None:
    known = recorded(retry=Retry("crash", "drop_caches failed", "A", T - 30))
    theirs = box(cid="B", started=T0 - timedelta(seconds=5))
    verdict = reconcile(known, World((theirs,)), T, CFG)
    adopted = [i for i in verdict.intents if isinstance(i, do.Adopt)]
    assert adopted and adopted[0].engine == Identity.of(theirs)
    assert do.KeepRetry(None) in verdict.intents and verdict.want is None


def test_a_run_s_own_start_keeps_the_retry_it_owes() -> None:
    """The failed run started A before it ended: its retry stands (a zombie engine)."""
    ours = box(started=datetime.fromtimestamp(T - 40, UTC))
    known = recorded(retry=Retry("unhealthy", "chat failed", "A", T - 30))
    verdict = reconcile(known, World((ours,)), T, CFG)
    assert do.KeepRetry(None) not in verdict.intents
    assert wanted(verdict) == ("unhealthy", "A")
    # started by hand after the failed run: nothing owed
    later = box(started=datetime.fromtimestamp(T - 10, UTC))
    verdict = reconcile(known, World((later,)), T, CFG)
    assert do.KeepRetry(None) in verdict.intents and verdict.want is None


def test_a_reset_means_the_next_look_recovers() -> None:
    down = World((box("exited"),))
    assert reconcile(recorded(gave_up=GAVE_UP), down, T, CFG).want is None
    assert wanted(reconcile(recorded(), down, T + 1, CFG)) == ("crash", "A")


def test_docker_unreadable_is_waited_for() -> None:
    verdict = reconcile(recorded(), World((), "connection refused"), T, CFG)
    assert verdict.want is None and verdict.waiting is not None
    assert "connection refused" in verdict.waiting.what


def test_apply_makes_a_want_pending_once_and_says_a_wait_once() -> None:
    verdict = reconcile(recorded(), World((box("exited"),)), T, CFG)
    mind, said = apply(Mind(), verdict, T)
    assert mind.pending == Pending("crash", mind.pending.why if mind.pending else "", T, target="A")
    again, said = apply(mind, verdict, T + 1)
    assert again.pending == mind.pending and said == []
    # the engine is back (an operator's start): the pending restart is forgotten
    back = reconcile(recorded(), World((box(started=T0),)), T + 2, CFG)
    mind, _ = apply(again, back, T + 2)
    assert mind.pending is None
    waiting = reconcile(recorded(gave_up=GAVE_UP), World((box("exited"),)), T, CFG)
    mind, said = apply(Mind(), waiting, T)
    assert [i.event for i in said if isinstance(i, do.Say)] == ["waiting"]
    _, said = apply(mind, waiting, T + 1)
    assert said == []


def run_record(result: str, started: float, ended: float | None, **plan: float) -> RunRecord:
    return RunRecord(1, "manual", result, started, ended, "vllm", "A", None, 1, dict(plan))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("runs", "action", "t", "theirs"),
    [
        ((run_record("ok", T, T + 60),), "die", T + 30, False),  # within a finished run: ours
        ((run_record("ok", T, T + 60),), "die", T + 61, True),
        # cut short by a kill: its docker stop goes on for the stop window, no longer
        ((run_record("interrupted", T, T + 900, llm_stopped_at=T + 5),), "die", T + 20, False),
        ((run_record("interrupted", T, T + 900, llm_stopped_at=T + 5),), "die", T + 300, True),
        ((run_record("interrupted", T, T + 900, llm_started_at=T + 200),), "start", T + 203, False),
        # an operator's stop before the run's own (killed at pause_voice): theirs
        ((run_record("interrupted", T, T + 900),), "kill", T + 2, True),
        ((run_record("interrupted", T, T + 900, llm_stopped_at=T + 5),), "kill", T + 3, True),
        ((run_record("running", T, None, llm_stopped_at=T + 5),), "kill", T + 3, True),
        ((run_record("running", T, None, llm_stopped_at=T + 5),), "kill", T + 6, False),
        # ... or just after the run's start (a start brings no kill), or a start during its stop
        ((run_record("interrupted", T, T + 900, llm_started_at=T + 200),), "kill", T + 201, True),
        ((run_record("interrupted", T, T + 900, llm_stopped_at=T + 5),), "start", T + 6, True),
        # an operator's stop after the run's own stop returned and it started the engine again
        # (killed at start_llm): theirs, though within the stop window of the run's stop
        (
            (run_record("interrupted", T, T + 900, llm_stopped_at=T + 5, llm_started_at=T + 6),),
            "kill",
            T + 7,
            True,
        ),
        (
            (run_record("interrupted", T, T + 900, llm_stopped_at=T + 5, llm_started_at=T + 6),),
            "die",
            T + 5.5,
            False,
        ),
        ((), "die", T, True),
    ],
)
def test_a_runs_own_stop_and_start_are_told_by_its_journal_window(
    runs: tuple[RunRecord, ...], action: str, t: float, theirs: bool
) -> None:
    assert decide.ours("vllm", action, t, runs, stop_window=25.0) is not theirs
    assert not decide.ours("other", action, t, runs, stop_window=25.0)


def test_an_event_in_a_runs_window_is_not_an_operators_stop() -> None:
    kill = EventSeen(ContainerEvent("vllm", "kill", T + 6, signal="15", id="A"))
    die = EventSeen(ContainerEvent("vllm", "die", T + 8, exit_code=0, id="A"))
    runs = (run_record("interrupted", T, T + 900, llm_stopped_at=T + 5),)
    mind, said = decide.on_event(Mind(), kill, CFG, runs)
    mind, said = decide.on_event(mind, die, CFG, runs)
    assert said == [do.EventsSeen(T + 8)]
    # the same stop with no run behind it: the operator's, kept in the journal by ID
    mind, said = decide.on_event(Mind(), kill, CFG)
    _, said = decide.on_event(mind, die, CFG)
    assert do.NoteOperatorStop(OperatorStop("vllm", "A", T + 8)) in said


def test_a_run_another_process_holds_the_lock_for_is_waited_for_never_restarted_over() -> None:
    """A ``cluster restart`` typed while the daemon runs stops the head's engine: its own stop,
    not a crash to want (each want was refused by the lock, look after look, in the log)."""
    busy = World((box("exited"),), running="reason cluster:manual, pid 4242")
    verdict = reconcile(recorded(), busy, T, CFG)
    assert verdict.want is None and verdict.waiting is not None
    assert "the run under way to end (reason cluster:manual, pid 4242)" in verdict.waiting.what
    assert wanted(reconcile(recorded(), World((box("exited"),)), T, CFG)) == ("crash", "A")


def test_the_restart_reconcile_wants_reaches_the_run_with_its_target() -> None:
    """The ID reconcile wants restarted is the only container the run may touch: the gates
    dropped it, so a container replaced between the decision and the act was restarted."""
    verdict = reconcile(recorded(), World((box("exited"),)), T, CFG)
    mind, _ = apply(Mind(), verdict, T)
    _, intents = gates.gate(mind, replace(recorded(), read_at=T), None, None, T, CFG)
    (restart,) = [i for i in intents if isinstance(i, do.Restart)]
    assert restart == do.Restart("crash", restart.why, target="A")


OLD = T0 - timedelta(hours=30)  # past any max_uptime


def spared(v: Reconciled) -> list[do.SpareFirstSight]:
    return [i for i in v.intents if isinstance(i, do.SpareFirstSight)]


@pytest.mark.parametrize(
    ("cron", "now", "until"),
    [
        ("", T0, T0 + timedelta(hours=1)),
        # the first window at least an hour off: today's at 03:00, tomorrow's at 04:00
        ("30 4 * * *", T0, datetime(2026, 12, 1, 4, 30, tzinfo=UTC)),
        ("30 4 * * *", T0 + timedelta(hours=1), datetime(2026, 12, 2, 4, 30, tzinfo=UTC)),
    ],
)
def test_an_engine_first_seen_past_max_uptime_gets_notice_before_a_planned_restart(
    cron: str, now: datetime, until: datetime
) -> None:
    """Issue 36 item 2: an install names an engine up for days; naming it must not restart it
    minutes later. Its planned restart waits for the notice; then it goes through the drain."""
    config = cfg(
        llm={"containers": ["vllm"], "base_url": "http://127.0.0.1:9"},
        schedule={"cron": cron, "timezone": "UTC"},
    )
    t = now.timestamp()
    verdict = reconcile(recorded(engine=None), World((box(started=OLD),)), t, config)
    (spare,) = spared(verdict)
    assert (spare.first.id, spare.first.until) == ("A", until.timestamp())
    mind, said = apply(Mind(), verdict, t)
    assert "planned_restart_deferred" in [s.event for s in said if isinstance(s, do.Say)]
    known = recorded(engine=Identity.of(box(started=OLD)), first_sight=spare.first, read_at=t)
    mind, _ = decide.want(mind, "uptime", "vllm up 30.0 h", t)
    for later in (t, until.timestamp() - 1):
        held, intents = gates.gate(
            mind, replace(known, read_at=later), box(started=OLD), None, later, config
        )
        assert held.pending is not None and not [i for i in intents if isinstance(i, do.Say)]
    end = until.timestamp()
    _, intents = gates.gate(mind, replace(known, read_at=end), box(started=OLD), None, end, config)
    assert "draining" in [i.event for i in intents if isinstance(i, do.Say)]
    # a crash of the same engine is not planned: it goes at once
    crashed, _ = decide.want(Mind(), "crash", "vllm exited", t)
    _, intents = gates.gate(crashed, known, box(started=OLD), None, t, config)
    assert [i for i in intents if isinstance(i, do.Restart)]


def test_no_notice_for_an_engine_known_before_or_young_enough() -> None:
    """Only a container never watched, whose uptime would restart it within the notice."""
    restarted = box(started=OLD)  # same ID as the engine believed in, started again
    assert not spared(reconcile(recorded(), World((restarted,)), T, CFG))
    young = box(started=T0 - timedelta(hours=2))
    assert not spared(reconcile(recorded(engine=None), World((young,)), T, CFG))
    # just started, with a short limit (the tests' engines): its limit holds as configured
    brief = cfg(watch={"max_uptime": "15m"})
    just = box(started=T0 - timedelta(minutes=10))
    assert not spared(reconcile(recorded(engine=None), World((just,)), T, brief))
    assert spared(reconcile(recorded(engine=None), World((box(started=OLD),)), T, brief))
    replaced = box(cid="B", started=OLD)  # an operator's new container: never watched
    assert spared(reconcile(recorded(), World((replaced,)), T, CFG))


def test_observe_mode_turns_a_restart_into_one_observed_run_per_cause() -> None:
    """The gates run as in act mode; what would be a Restart is an Observe, and the same cause
    (reason, engine start) seen again is dropped, not noted look after look."""
    watching = cfg(watch={"mode": "observe"})
    down = box("exited")
    mind, _ = decide.want(Mind(), "crash", "vllm exited", T, target="A")
    known = recorded(read_at=T)
    after, intents = gates.gate(mind, known, down, None, T, watching)
    (noted,) = [i for i in intents if isinstance(i, do.Observe)]
    assert after.pending is None and not [i for i in intents if isinstance(i, do.Restart)]
    assert noted.key == gates.observed_key(mind.pending, down)  # type: ignore[arg-type]
    again, intents = gates.gate(
        mind, replace(known, observed=frozenset({noted.key})), down, None, T, watching
    )
    assert again.pending is None and intents == []
    restarted = replace(down, started_at=T0)  # the operator started it, and it died again
    _, intents = gates.gate(
        mind, replace(known, observed=frozenset({noted.key})), restarted, None, T, watching
    )
    assert [i for i in intents if isinstance(i, do.Observe)]
    _, intents = gates.gate(mind, known, down, None, T, CFG)  # act mode: the run itself
    assert [i for i in intents if isinstance(i, do.Restart)]


def test_in_observe_mode_a_noted_restart_never_swallows_the_triggers_after_it() -> None:
    """An adversary's find: Docker's own policy brought a crashed engine back (observe mode
    leaves the policy), so every check wants "crash"; noted once, it stayed pending each check,
    and the schedule and the drafting canary's verdict after it were dropped unheard."""
    watching = cfg(watch={"mode": "observe"})
    back = box(restarts=1)
    verdict = reconcile(recorded(), World((back,)), T, watching)
    mind, _ = apply(Mind(), verdict, T)
    assert mind.pending is not None and mind.pending.reason == "crash"
    key = gates.observed_key(mind.pending, back)
    noted = replace(recorded(read_at=T), observed=frozenset({key}))
    mind = gates.forget_noted(mind, noted, back, watching)
    assert mind.pending is None  # let go at once: the next trigger is heard
    mind, said = decide.want(mind, "schedule", "nightly schedule, due 04:30", T)
    assert mind.pending is not None and mind.pending.reason == "schedule" and said
    # a cause not noted yet stays pending, and act mode never lets one go
    fresh, _ = apply(Mind(), verdict, T)
    assert gates.forget_noted(fresh, recorded(read_at=T), back, watching).pending is not None
    assert gates.forget_noted(fresh, noted, back, CFG).pending is not None


def _carried_out(known: Recorded, intents: list[do.Intent], t: float) -> Recorded:
    """The journal's facts after the hands carried ``intents`` out (as ``act.Hands`` does)."""
    for intent in intents:
        if isinstance(intent, do.Adopt):
            known = replace(known, engine=intent.engine, operator_stopped=None)
        elif isinstance(intent, do.NoteOperatorStop):
            known = replace(known, operator_stopped=intent.stop)
    return replace(known, read_at=t)


@pytest.mark.parametrize("burst", ["before the look", "after the look"])
def test_an_operators_docker_restart_is_over_whenever_its_burst_of_events_comes(
    burst: str,
) -> None:
    """Issue 45 item 1: a stand-in exits at once, so ``docker restart``'s kill, die, stop and
    start reach the daemon in one burst, which may come after the look that saw the engine up
    again. The stop it tells of was then noted after the adoption and stayed: status said
    ``operator_stopped`` over a serving engine and every later automatic restart was refused."""
    again = T0 + timedelta(seconds=0.3)  # Docker's start, 0.3 s after the operator's kill
    burst_events = [
        ContainerEvent("vllm", "kill", T, signal="15", id="A"),
        ContainerEvent("vllm", "die", T + 0.1, exit_code=0, id="A"),
        ContainerEvent("vllm", "stop", T + 0.1, id="A"),
        ContainerEvent("vllm", "start", T + 0.3, id="A"),
    ]
    world = World((box(started=again),))
    mind, known = Mind(), recorded()

    def look(t: float) -> None:
        nonlocal mind, known
        mind, intents = apply(mind, reconcile(known, world, t, CFG), t)
        known = _carried_out(known, intents, t)

    def deliver() -> None:  # all at once, each seeing the engine up again
        nonlocal mind, known
        for event in burst_events:
            mind, intents = decide.on_event(mind, EventSeen(event, now=world.states[0]), CFG)
            known = _carried_out(known, intents, T + 0.5)

    if burst == "before the look":
        deliver()
        assert known.operator_stopped == OperatorStop("vllm", "A", T + 0.1)
        look(T + 0.6)
    else:
        look(T + 0.4)
        deliver()
        assert known.operator_stopped == OperatorStop("vllm", "A", T + 0.1)
        look(T + 0.9)  # the next look: the stop is over
    assert known.operator_stopped is None
    assert known.engine == Identity.of(world.states[0])
    # nothing holds a later automatic restart back
    mind, _ = decide.want(mind, "uptime", "vllm up too long", T + 1)
    _, said = gates.gate(mind, replace(known, read_at=T + 1), world.states[0], None, T + 1, CFG)
    assert "trigger_refused" not in [i.event for i in said if isinstance(i, do.Say)]
    # the engine believed in, looked at again: nothing more to adopt or say
    verdict = reconcile(known, world, T + 2, CFG)
    assert verdict.intents == [] and verdict.want is None


def test_a_stop_by_hand_after_the_engine_started_stays() -> None:
    """Only a stop older than the engine's start is over: the candidate stopped later stays
    stopped by hand."""
    later = OperatorStop("vllm", "A", BOOTED.timestamp() + 60)
    verdict = reconcile(recorded(operator_stopped=later), World((box(),)), T, CFG)
    assert verdict.intents == []
