"""What the daemon does next: pure functions of what it believes, what it sees, the journal's facts
and a clock.

No I/O here. Each function takes a :class:`Mind` and returns the next one with the intents
(:mod:`sparkwarden.daemon.intents`) the hands carry out (:mod:`sparkwarden.daemon.act`); a run's
result comes back in through :func:`after_run`.
A trigger becomes a :class:`Pending` restart, which :func:`sparkwarden.daemon.gates.gate` lets
through past the hold, a "gave up", a container stopped by hand, the freshness of the engine, the
budget and its backoff, and (for a planned reason) a drain of the requests in flight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from apscheduler.triggers.base import BaseTrigger

from sparkwarden.base.containers import ExitWatch
from sparkwarden.base.cron import missed_run_due, next_fire
from sparkwarden.cluster import watch as cluster_watch
from sparkwarden.cluster.replicas import PeersLook
from sparkwarden.config.schema import Config
from sparkwarden.daemon.intents import (
    AdoptClusterStarts,
    ClearGaveUp,
    EventsSeen,
    Intent,
    KeepRetry,
    NoteOperatorStop,
    Notify,
    QuietVoiceForMemory,
    RequireReboot,
    ResumeVoiceAfterMemory,
    RunEnded,
    Say,
    TakeCanary,
    TakeOverPolicy,
)
from sparkwarden.daemon.kept import OperatorStop, RebootRequired, Retry
from sparkwarden.daemon.observe import EventSeen, Observation, Recorded, Scrape
from sparkwarden.evidence import acceptance, canary, canary_reading, triggers
from sparkwarden.evidence.triggers import (
    AUTOMATIC,
    PLANNED,
    HealthState,
    Reason,
    automatic,
)
from sparkwarden.restart import docker_policy
from sparkwarden.restart.journal import RunRecord

# --- what the daemon believes ------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """A restart some trigger asked for, waiting on hold, budget, backoff or drain."""

    reason: Reason
    why: str
    since: float
    drain: triggers.DrainState | None = None  # set while a planned restart drains
    #: the one container (ID) the restart may touch; None: the active one at the time
    target: str | None = None
    #: a replica's planned restart: what among its peers it waits for (status says it), since
    #: when, and whether an unreachable peer was notified
    peers: str | None = None
    peers_since: float | None = None
    peers_told: bool = False


@dataclass(frozen=True)
class Waiting:
    """What keeps the LLM from serving, and the command that ends the wait (for status)."""

    what: str
    command: str


@dataclass(frozen=True)
class Mind:
    """What the daemon believes between inputs: all the state its decisions carry forward."""

    pending: Pending | None = None
    exits: Mapping[str, ExitWatch] = field(default_factory=dict)
    health: HealthState = field(default_factory=HealthState)
    memory: triggers.MemoryState = field(default_factory=triggers.MemoryState)
    acc: acceptance.AcceptanceState = field(default_factory=acceptance.AcceptanceState)
    canary: canary.CanaryState = field(default_factory=canary.CanaryState)
    gateway: triggers.GatewayWatch = field(default_factory=triggers.GatewayWatch)
    last_run_end: float = 0.0  # Docker events before this were our own stop and start
    next_schedule: datetime | None = None  # the nightly fire time; the loop itself fires it
    left_at_risk: tuple[str, ...] = ()  # candidates whose restart policy ``leave`` keeps
    waiting: Waiting | None = None  # what the last reconcile found the LLM waiting for
    cluster: cluster_watch.Watch = field(default_factory=cluster_watch.Watch)  # a head's looks
    peers: PeersLook | None = None  # a replica's last look at its peers and the turn


Transition = tuple[Mind, list[Intent]]


# --- triggers ----------------------------------------------------------------------------------


def want(mind: Mind, reason: Reason, why: str, t: float, target: str | None = None) -> Transition:
    """Note a trigger; an urgent one replaces a planned one still waiting."""
    pending = mind.pending
    if pending is not None and (reason in PLANNED or pending.reason not in PLANNED):
        return mind, []
    return replace(mind, pending=Pending(reason, why, t, target=target)), [
        Say("info", "trigger", {"reason": reason, "why": why})
    ]


#: How long after a run's recorded ``docker start`` its ``start`` event may come.
_START_WINDOW = 5.0


def ours(name: str, action: str, t: float, runs: Sequence[RunRecord], stop_window: float) -> bool:
    """Whether a run (this daemon's, a ``sparkwarden restart`` of its own, or one a crash of
    sparkwarden cut short) made event ``action`` of container ``name`` at ``t``: its stop and
    start are not an operator's. A run cut short or still going acted only through the acts it
    recorded before making them: an operator's stop before the run's own, or just after the
    run's start, is the operator's."""
    for run in runs:
        if run.container != name or t < run.started_at:
            continue
        if run.result in ("interrupted", "running"):
            stopped, started = run.plan.get("llm_stopped_at"), run.plan.get("llm_started_at")
            if stopped is not None and action in ("kill", "die", "stop"):
                # its stop brings these for up to the stop window, and never after its start
                # (the run starts only once its stop has returned)
                end = float(stopped) + stop_window
                if started is not None:
                    end = min(end, float(started))
                if float(stopped) <= t <= end:
                    return True
            if (
                action == "start"
                and started is not None
                and float(started) <= t <= float(started) + _START_WINDOW
            ):
                return True
        elif t <= (run.ended_at or run.started_at):
            return True
    return False


def on_event(
    mind: Mind, seen: EventSeen, cfg: Config, runs: Sequence[RunRecord] = ()
) -> Transition:
    """A Docker event only tells who did what: an operator's ``docker stop`` (a ``kill`` with
    SIGTERM before the ``die``) is noted in the journal. Whether the engine is down, and what to
    do about it, is :mod:`~sparkwarden.daemon.reconcile`'s to say at the look the event hastens."""
    event = seen.event
    intents: list[Intent] = [EventsSeen(event.t)]
    window = cfg.llm.stop_window
    if event.t <= mind.last_run_end or ours(event.name, event.action, event.t, runs, window):
        return mind, intents  # our own stop and start
    watch = mind.exits.get(event.name, ExitWatch()).on_event(event.action, event.signal, event.t)
    mind = replace(mind, exits={**mind.exits, event.name: watch})
    said = {
        "container": event.name,
        "action": event.action,
        "exit_code": event.exit_code,
        "signal": event.signal,
    }
    intents.append(Say("info", "container_event", said))
    if event.action == "start":
        mind = replace(mind, health=HealthState())
    if event.action != "die":
        return mind, intents
    if watch.classify_die(event.t, cfg.llm.stop_window) == "operator-stop":
        cid = event.id or (seen.now.id if seen.now else "")
        stop = OperatorStop(event.name, cid, event.t)
        said = {"container": event.name, "exit_code": event.exit_code}
        return mind, [*intents, NoteOperatorStop(stop), Say("warning", "operator_stopped", said)]
    return mind, intents


def on_look(mind: Mind, seen: Observation, cfg: Config) -> Transition:
    """What Docker and the host said: restart policies, the memory floor and uptime. The loop acts
    on this before it reads the engine, so a floor pauses voice without waiting on slow HTTP
    reads."""
    t = seen.t
    stepped: list[Intent] = []
    if mind.last_run_end > t:  # the wall clock stepped back (NTP fixing a bad RTC)
        said = {"by_s": round(mind.last_run_end - t, 3)}
        mind, stepped = replace(mind, last_run_end=t), [Say("warning", "clock_stepped_back", said)]
    mind, intents = on_policies(mind, seen, cfg)
    intents = [*stepped, *intents]
    memory, alert = triggers.memory_observe(mind.memory, seen.memory.available_gib, t, cfg.memory)
    mind = replace(mind, memory=memory)
    if alert == "alert":
        mind, more = _memory_floor(mind, seen.memory.available_gib, t, cfg, seen.fills_memory)
        intents += more
    elif alert == "recovered":
        available = round(seen.memory.available_gib, 1)
        intents += [
            Say("info", "memory_recovered", {"available_gib": available}),
            ResumeVoiceAfterMemory(),
        ]
    now = datetime.fromtimestamp(t, UTC)
    if why := triggers.uptime_due(seen.active if seen.running else None, now, cfg.watch.max_uptime):
        mind, more = want(mind, "uptime", why, t)
        intents += more
    return mind, intents


def on_engine(mind: Mind, seen: Observation, cfg: Config) -> Transition:
    """What the engine said, when its reads were due: acceptance and health."""
    t = seen.t
    intents: list[Intent] = []
    now = datetime.fromtimestamp(t, UTC)
    if seen.scrape is not None:
        mind, more = on_scrape(mind, seen.scrape, t, cfg)
        intents += more
    if seen.check is not None and seen.active is not None:
        before = mind.health
        uptime = seen.active.uptime_s(now)
        health, why = triggers.health_observe(
            mind.health,
            t=t,
            uptime_s=uptime,
            boot_grace=cfg.watch.boot_grace,
            health=seen.check.health,
            canary=seen.check.canary,
            metrics=seen.check.engine,
            cfg=cfg.health,
            unanswered=seen.check.unanswered,
            canary_sent=seen.check.canary_sent,
            readings=seen.check.readings,
        )
        mind = replace(mind, health=health)
        if health.suspect and not before.suspect:
            intents.append(Say("warning", "stall_suspected", {"why": health.suspect}))
        if health.stuck_gauge and not before.stuck_gauge:
            intents.append(Say("warning", "stuck_gauge", {"why": health.stuck_gauge}))
        if health.proven and not before.proven and (uptime or 0.0) < cfg.watch.boot_grace:
            said = {"uptime_s": round(uptime or 0.0), "why": "it answered the daemon's chat"}
            intents.append(Say("info", "boot_grace_ended", said))
        if why:
            mind, more = want(mind, "unhealthy", why, t)
            intents += more
    if seen.check is not None and seen.check.gateway is not None and cfg.gateway is not None:
        gateway, why = triggers.gateway_observe(mind.gateway, seen.check.gateway, t)
        mind = replace(mind, gateway=gateway)
        if why:  # reported, never a restart: a new engine would not fix a gateway
            intents += [
                Say("warning", "gateway_failed", {"url": cfg.gateway.url, "why": why}),
                Notify("gateway_failed", "gateway", f"{cfg.gateway.url}: {why}"),
            ]
    return mind, intents


def on_cluster(mind: Mind, look: cluster_watch.Look, cfg: Config) -> Transition:
    """On a cluster's head, a look at every node: a dead rank seen ``cluster.confirm`` looks in
    a row wants the cluster restarted (as one: the hands run the cluster sequence); a node that
    stops answering is said and notified once, never acted on."""
    if cfg.cluster is None or look.t <= mind.last_run_end:
        return mind, []  # taken before a run ended: it says nothing of the cluster it left
    seen = cluster_watch.observe(mind.cluster, look, cfg.cluster.confirm)
    mind = replace(mind, cluster=seen.watch)
    intents: list[Intent] = []
    for node in seen.lost:
        problem = look.verdict.nodes.get(node, "")
        intents += [
            Say("warning", "cluster_node_unreachable", {"node": node, "problem": problem}),
            Notify("node_unreachable", node, f"{node} does not answer the head: {problem}"),
        ]
    for node in seen.back:
        intents.append(Say("info", "cluster_node_back", {"node": node}))
    if look.adopt is not None:
        intents += [
            AdoptClusterStarts(look.adopt, look.t),
            Say("info", "cluster_starts_adopted", {"starts": look.adopt}),
        ]
    if seen.restart:
        mind, more = want(mind, "crash", seen.restart, look.t)
        intents += more
    return mind, intents


def on_policies(mind: Mind, seen: Observation, cfg: Config) -> Transition:
    """Take a Docker restart policy that fights ours (``take-over``), or say, whenever the set
    changes, which ones ``leave`` keeps (observe mode takes none: as ``leave``)."""
    mode = "leave" if cfg.watch.mode == "observe" else cfg.llm.restart_policy
    if not seen.states:
        return mind, []  # the candidates could not be read: nothing new to say
    intents: list[Intent] = [
        TakeOverPolicy(s) for s in docker_policy.to_take_over(seen.states, mode)
    ]
    left = tuple(s.name for s in seen.states if mode == "leave" and docker_policy.fights(s))
    if left and left != mind.left_at_risk:
        policies = {s.name: s.restart_policy for s in seen.states if s.name in left}
        intents.append(Say("warning", "restart_policy_left_at_risk", {"containers": policies}))
    return replace(mind, left_at_risk=left), intents


#: What a floor breach is when the engine's own defaults took the memory (vLLM 0.34).
ENGINES_OWN = (
    "the engine's own KV cache: it takes the memory free at its start, and a restart would "
    "take it again; run 'sparkwarden doctor' and set --gpu-memory-utilization"
)


def _memory_floor(
    mind: Mind, available: float, t: float, cfg: Config, fills_memory: str = ""
) -> Transition:
    """A floor breach: said, and acted on as ``floor_action`` says, except that an engine whose
    own defaults take the memory free at its start (``fills_memory``: vLLM 0.34 with no
    ``--gpu-memory-utilization``) is not restarted for it: that is the engine's own cache, and
    doctor's error is the fix."""
    mem = cfg.memory
    action = "warn" if fills_memory and mem.floor_action == "restart" else mem.floor_action
    said: dict[str, object] = {
        "available_gib": round(available, 1),
        "floor_gib": mem.floor_gib,
        "action": action,
    }
    would = ""
    if action == "pause_voice" and cfg.watch.mode == "observe":  # touches nothing: told only
        said["would"], action = action, "warn"
        said["action"] = action
        would = " (would pause voice: watch.mode = observe)"
    cause = ""
    if fills_memory:
        said["cause"] = f"{ENGINES_OWN} ({fills_memory})"
        cause = f"; {ENGINES_OWN} ({fills_memory})"
    intents: list[Intent] = [
        Say("warning", "memory_floor", said),
        Notify(
            "memory_floor",
            "host",
            f"MemAvailable {available:.1f} GiB, under the floor of {mem.floor_gib:g} GiB for "
            f"{mem.floor_for:g}s; action: {action}{would}{cause}",
        ),
    ]
    if action == "restart":
        why = f"MemAvailable {available:.1f} GiB below the floor of {mem.floor_gib:g} GiB"
        mind, more = want(mind, "memory", why, t)
        return mind, intents + more
    if action == "pause_voice":
        intents.append(QuietVoiceForMemory())
    return mind, intents


def on_scrape(mind: Mind, scrape: Scrape, t: float, cfg: Config) -> Transition:
    """A /metrics read: one more look for the acceptance trigger. With a canary to confirm
    (the default), a low passive estimate only makes the canary come sooner."""
    if not cfg.acceptance.enabled:
        return mind, []
    decided = canary.on_scrape(mind.acc, mind.canary, scrape.engine, t, cfg.acceptance)
    intents: list[Intent] = []
    if mind.acc.available and not decided.passive.available:
        why = scrape.note if scrape.engine is None else "no spec-decode series"
        intents.append(Say("warning", "acceptance_trigger_off", {"why": why}))
    if decided.suspect:
        intents.append(Say("warning", "drafting_suspect", {"why": decided.suspect}))
    mind = replace(mind, acc=decided.passive, canary=decided.canary)
    if decided.due:
        intents.append(TakeCanary(t))
    if decided.fire:
        mind, more = want(mind, "acceptance", decided.fire, t)
        intents += more
    return mind, intents


def on_canary(mind: Mind, taken: canary_reading.Round, subject: str, cfg: Config) -> Transition:
    """A drafting canary's outcome: the only thing that restarts for ``acceptance`` by default."""
    decided = canary.on_canary(mind.acc, mind.canary, taken, cfg.acceptance)
    state, tell = canary.tell(decided.canary, cfg.acceptance)
    mind = replace(mind, canary=state)
    said = {"t": taken.t, "valid": taken.valid, "own_stats": taken.own_stats, "note": state.note}
    intents: list[Intent] = [Say("info", "drafting_canary", said)]
    if tell:
        intents.append(Notify("drafting_suspect", subject, tell))
    if decided.fire:
        mind, more = want(mind, "acceptance", decided.fire, taken.t)
        intents += more
    return mind, intents


def probe_wanted(mind: Mind, t: float, cfg: Config) -> bool:
    """The health chat is due now (:func:`triggers.probe_due`)."""
    return triggers.probe_due(mind.health, t, cfg.health)


def canary_owed(mind: Mind, t: float, cfg: Config) -> bool:
    """A drafting canary is owed: the observer reads /metrics every tick until it finds the
    engine idle."""
    return cfg.acceptance.enabled and canary.wanted(mind.canary, t, cfg.acceptance)


def on_clock(mind: Mind, now: datetime, crontab: BaseTrigger | None, cfg: Config) -> Transition:
    """Fire the nightly restart when its time has come; late by more than the grace (the loop
    was busy in a long sequence), it is skipped rather than run at a surprising hour."""
    due = mind.next_schedule
    if crontab is None or due is None or now < due:
        return mind, []
    late = (now - due).total_seconds()
    mind = replace(mind, next_schedule=next_fire(crontab, max(now, due) + timedelta(seconds=1)))
    if late <= max(cfg.schedule.missed_grace, 2 * cfg.watch.interval):
        return want(mind, "schedule", f"nightly schedule, due {due.isoformat()}", now.timestamp())
    said = {"due": due.isoformat(), "late_s": round(late)}
    return mind, [Say("warning", "schedule_missed", said)]


def catch_up(
    mind: Mind,
    now: datetime,
    crontab: BaseTrigger | None,
    last_scheduled_run: datetime | None,
    cfg: Config,
) -> Transition:
    """At start-up: the next fire time, and a run to make up if one was missed within grace."""
    if crontab is None:
        return mind, []
    mind = replace(mind, next_schedule=next_fire(crontab, now))
    grace = timedelta(seconds=cfg.schedule.missed_grace)
    missed = missed_run_due(crontab, now, grace, last_scheduled_run)
    if missed is None:
        return mind, []
    return want(mind, "schedule", f"making up the run due at {missed.isoformat()}", now.timestamp())


# --- after a run -------------------------------------------------------------------------------


def memory_trend(mind: Mind, facts: Recorded, ended: RunEnded, cfg: Config) -> Transition:
    """After each run: has what memory returns to after stop and drop kept falling, on this
    host or on any node of its cluster? (A cluster restarts as one: a node that leaks holds
    back every automatic restart, and the flag names it.)"""
    if facts.reboot_required is not None:
        return mind, []
    leaks = [
        (machine, leak)
        for machine, readings in sorted(facts.after_drops.items())
        if (leak := triggers.memory_trend(list(readings), cfg.memory)) is not None
    ]
    if not leaks:
        return mind, []
    machine, leak = leaks[0]
    at = datetime.fromtimestamp(ended.at, UTC).isoformat(timespec="seconds")
    why = f"on {machine}: {leak.why}" if machine else leak.why
    flag = RebootRequired(why, leak.readings, leak.fall_gib, at)
    subject = machine or ended.outcome.container or "llm"
    return mind, [
        RequireReboot(flag),
        Say("error", "reboot_required", flag.to_json()),
        Notify("reboot_required", subject, f"reboot required: {why}", flag.to_json()),
    ]


def after_run(mind: Mind, ended: RunEnded, stopping: bool) -> Transition:
    """Notify how it went; an automatic run that failed owes a retry (budget permitting)."""
    outcome, reason = ended.outcome, ended.reason
    watch = cluster_watch.after_run(mind.cluster)
    # the run's chat probe answered: this start has proven itself, the boot grace is over
    proven = (
        HealthState(proven=True, proven_by=outcome.container_id, probed_at=ended.at)
        if outcome.ok
        else HealthState()
    )
    mind = replace(mind, health=proven, last_run_end=ended.at, cluster=watch)
    intents: list[Intent] = []
    if outcome.ok and reason not in AUTOMATIC:  # an operator's run clears it all
        intents.append(ClearGaveUp(ended.at))
    subject = ", ".join(outcome.nodes) or outcome.container or "llm"
    gateway_failed = outcome.failed_step == triggers.GATEWAY_STEP
    if gateway_failed:
        failing = triggers.GatewayWatch(False, f"FAILED {outcome.error}", ended.at)
        mind = replace(mind, gateway=failing)
        summary = f"run #{outcome.run_id} ({reason}): {outcome.error}"
        intents.append(Notify("gateway_failed", "gateway", summary, {"run": outcome.run_id}))
    elif not outcome.ok:
        summary = f"run #{outcome.run_id} ({reason}) failed: {outcome.error}"
        intents.append(
            Notify("run_failed", subject, summary, {"run": outcome.run_id, "reason": reason})
        )
    else:
        intents.append(KeepRetry(None))
        mind = replace(mind, gateway=triggers.GatewayWatch(True, "ok (the run's gateway probe)"))
        if reason == "crash":
            summary = (
                f"{ended.why}; run #{outcome.run_id} brought it back and it answered a chat request"
            )
            intents.append(Notify("crash_recovered", subject, summary, {"run": outcome.run_id}))
    # Only the gateway failed: the engine answered, and restarting it would not fix a gateway.
    # Kept in the journal: the next look (of this daemon or the next one) asks for it again.
    if not outcome.ok and not gateway_failed and (retry := automatic(reason)) and not stopping:
        why = f"retry after failed run #{outcome.run_id}: {outcome.error}"
        intents.append(KeepRetry(Retry(retry, why, outcome.container_id, ended.at)))
    return mind, intents
