"""The gates a pending restart passes, in order: pure functions of what the daemon believes, the
journal's facts and a clock.

:mod:`sparkwarden.daemon.decide` turns a trigger into a :class:`~sparkwarden.daemon.decide.Pending`
restart;
:func:`gate` lets it through past the hold, a "gave up", a container stopped by hand, the
freshness of the engine, the budget and its backoff, and (for a planned reason) on a replica its
peers serving and its turn (:mod:`sparkwarden.cluster.replicas`), then a drain of the requests
in flight. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from sparkwarden.base.containers import ContainerState
from sparkwarden.cluster import replicas
from sparkwarden.cluster import watch as cluster_watch
from sparkwarden.config.schema import Config
from sparkwarden.daemon.decide import Mind, Pending, Transition, on_scrape
from sparkwarden.daemon.intents import (
    ExpireHold,
    GiveUp,
    Intent,
    LeaveRotation,
    Notify,
    Observe,
    Restart,
    Say,
)
from sparkwarden.daemon.kept import GaveUp
from sparkwarden.daemon.observe import Recorded, Scrape
from sparkwarden.evidence import triggers
from sparkwarden.evidence.triggers import PLANNED
from sparkwarden.restart.turn import Answer
from sparkwarden.surfaces.status_text import local_time


def budget(facts: Recorded, t: float, cfg: Config) -> triggers.Budget:
    return triggers.budget(list(facts.runs), t, facts.reset_at, cfg.budget)


def fresh(active: ContainerState | None, t: float, cfg: Config) -> str | None:
    """Why a nightly restart is pointless now: the engine was (re)started minutes ago."""
    least = cfg.schedule.min_uptime
    uptime = active.uptime_s(datetime.fromtimestamp(t, UTC)) if active else None
    if active is None or uptime is None or uptime >= least:
        return None
    return f"{active.name} up only {uptime:.0f}s (schedule.min_uptime {least:g}s)"


def observed_key(pending: Pending, active: ContainerState | None) -> str:
    """What an observed restart was for: this reason on this engine (by ID and start), and for
    the schedule this night. Observe mode notes each once, however many looks still want it."""
    target = pending.target or (active.id if active else "-")
    started = active.started_at.isoformat() if active and active.started_at else "-"
    night = pending.why if pending.reason == "schedule" else ""
    return f"{pending.reason}|{target}|{started}|{night}"


def forget_noted(mind: Mind, facts: Recorded, active: ContainerState | None, cfg: Config) -> Mind:
    """Observe mode: a pending restart already noted is let go as soon as it is wanted again, so
    that the triggers after it in the same check are each heard. (In act mode the run would
    have ended its cause; here the cause stays, and a restart left pending would swallow every
    later trigger: a schedule, a drafting canary's verdict.)"""
    pending = mind.pending
    if cfg.watch.mode != "observe" or pending is None:
        return mind
    if observed_key(pending, active) not in facts.observed:
        return mind
    return replace(mind, pending=None)


#: What a trigger says when its restart becomes pending: quiet for one observe mode has noted.
TRIGGER_EVENTS = ("trigger", "died_and_restarted_by_docker")


def tells_trigger(intent: Intent) -> bool:
    return isinstance(intent, Say) and intent.event in TRIGGER_EVENTS


Admission = Literal["none", "dropped", "wait", "go"]
#: what a planned restart waits for while the engine sleeps (status shows it as the drain's note)
ASLEEP = "the engine sleeps (put to sleep on purpose): a planned restart waits for it to wake"


def _admit(
    mind: Mind, facts: Recorded, active: ContainerState | None, t: float, cfg: Config
) -> tuple[Mind, list[Intent], Admission]:
    """Every gate before the drain, in order: hold, gave up, stopped by hand, freshness, budget.

    It decides only on journal facts read at its own moment (``facts.read_at >= t``); older
    ones keep the restart waiting, so a loop that forgot to read them again restarts nothing."""
    pending = mind.pending
    if pending is None:
        return mind, [], "none"
    if facts.read_at < t:  # an operator's hold written a moment ago must stop it: read again
        return mind, [], "wait"
    if cfg.watch.mode == "observe" and observed_key(pending, active) in facts.observed:
        return replace(mind, pending=None), [], "dropped"  # noted already: once is the news
    intents: list[Intent] = []
    hold = facts.hold
    if hold is not None and hold.over(t):
        intents += [ExpireHold(), Say("info", "hold_expired")]
        hold = None
    refuse = None
    if hold is not None:
        refuse = f"held until {local_time(hold.to_json()['until'])}: {hold.reason}"
    elif facts.gave_up:
        refuse = "gave up earlier: waiting for an operator ('sparkwarden reset')"
    elif facts.reboot_required:
        refuse = "reboot required: memory leaks across restarts ('sparkwarden reset' after it)"
    elif facts.operator_stopped:
        refuse = f"{facts.operator_stopped.name} was stopped by hand"
    elif stopped := cluster_watch.stopped_by_hand(mind.cluster):
        refuse = stopped
    dropped = replace(mind, pending=None)
    if pending.reason == "schedule" and (why := fresh(active, t, cfg)):
        return dropped, [*intents, Say("info", "schedule_skipped", {"why": why})], "dropped"
    if refuse:
        said = {"reason": pending.reason, "why": pending.why, "refused": refuse}
        return dropped, [*intents, Say("warning", "trigger_refused", said)], "dropped"
    first = facts.first_sight
    if (
        pending.reason in PLANNED
        and first is not None
        and first.spares(active.id if active else None, t)
    ):
        return mind, intents, "wait"  # an engine just named: its notice first (status says)
    verdict = budget(facts, t, cfg)
    if verdict.allowed:
        return mind, intents, "go"
    if verdict.not_before is not None:
        return mind, intents, "wait"  # backing off: keep it pending
    why = f"restart budget spent: {verdict.why}; last trigger {pending.reason}: {pending.why}"
    gave_up = GaveUp(pending.reason, why, datetime.fromtimestamp(t, UTC).isoformat())
    subject = active.name if active else "llm"
    intents += [
        GiveUp(gave_up),
        Say("error", "gave_up", {"reason": pending.reason, "why": why}),
        Notify("gave_up", subject, why),
    ]
    return dropped, intents, "dropped"


def wants_drain_sample(
    mind: Mind, facts: Recorded, active: ContainerState | None, t: float, cfg: Config
) -> bool:
    """A planned restart past every other gate waits on the requests in flight: read them."""
    pending = mind.pending
    if pending is None or pending.reason not in PLANNED or active is None:
        return False
    return _admit(mind, facts, active, t, cfg)[2] == "go"


@dataclass(frozen=True)
class Turn:
    """A replica's turn as the hands know it this pass: whether it holds it (taken, and not
    lost at a renewal), and the first node's answer if it asked for it just now."""

    holding: bool = False
    asked: Answer | None = None


def stale_after(cfg: Config) -> float:
    """A look at the peers older than this is no evidence that they serve."""
    assert cfg.replicas is not None
    return 3 * cfg.replicas.check_interval + 60


def peers_wait(mind: Mind, t: float, cfg: Config, turn: Turn) -> str | None:
    """What a replica's planned restart still waits for among its peers, or None. In observe
    mode it waits for its peers to serve (as it would in act mode) but takes no turn."""
    pending = mind.pending
    if cfg.replicas is None or pending is None or pending.reason not in PLANNED:
        return None
    if turn.holding:  # a peer that went down meanwhile is waited for (the turn given back)
        return replicas.peer_waits(mind.peers, t, stale_after(cfg))
    why = replicas.waits_for(mind.peers, cfg.replicas.self, t, stale_after(cfg))
    if cfg.watch.mode == "observe":
        return why if why is not None and not why.startswith(replicas.TURN_WAITS) else None
    if why is not None:
        return why
    if turn.asked is None:
        return "the turn (not asked yet)"
    if not turn.asked.granted:
        return f"the turn: {turn.asked.why}"
    return None


def wants_turn(
    mind: Mind, facts: Recorded, active: ContainerState | None, t: float, cfg: Config, held: bool
) -> bool:
    """A replica's planned restart past every gate before the drain, with every peer serving
    and the turn free as last read: ask the first node for it now."""
    pending = mind.pending
    if cfg.replicas is None or cfg.watch.mode == "observe" or held or pending is None:
        return False
    if pending.reason not in PLANNED or _admit(mind, facts, active, t, cfg)[2] != "go":
        return False
    return replicas.waits_for(mind.peers, cfg.replicas.self, t, stale_after(cfg)) is None


#: How long a planned restart waits on an unreachable peer before it is notified: a look or two
#: lost is a blip, this long is a Spark down or cut off (the restart keeps waiting after it).
PEER_NOTICE = 600.0


def _waiting_for_peers(mind: Mind, waits: str, t: float) -> Transition:
    """The planned restart waits among its peers: said when what it waits for changes, and an
    unreachable peer notified once, past :data:`PEER_NOTICE` of waiting."""
    pending = mind.pending
    assert pending is not None
    intents: list[Intent] = []
    if waits != pending.peers:
        said = {"reason": pending.reason, "for": waits}
        intents.append(Say("info", "restart_waits_for_peers", said))
    since = pending.peers_since if pending.peers_since is not None else t
    told = pending.peers_told
    gone = replicas.unreachable(mind.peers)
    if gone and not told and t - since >= PEER_NOTICE:
        told = True
        for name in gone:
            summary = f"planned {pending.reason} restart waits: peer {name} unreachable ({waits})"
            intents.append(Notify("node_unreachable", name, summary))
    # A drain begun holding the turn stops: back in the gateway's rotation while it waits (the
    # peer is out: this Spark may be all users have), the turn given back by the loop; it
    # drains again, out again, once every peer serves and the turn is its own again.
    if pending.drain is not None and pending.drain.note != ASLEEP:
        intents.append(Say("info", "drain_stopped", {"reason": pending.reason, "for": waits}))
    waiting = replace(pending, peers=waits, peers_since=since, peers_told=told, drain=None)
    return replace(mind, pending=waiting), intents


def typed_why(by: str, mind: Mind, cfg: Config) -> tuple[str, list[str]]:
    """An operator's typed restart goes at once; on a replica its ``why`` names each peer last
    seen not serving (and the peers, for the log)."""
    why = f"requested by {by}"
    out = replicas.peers_out(mind.peers) if cfg.replicas is not None else []
    return (f"{why}; peer out: {'; '.join(out)}" if out else why), out


def on_peers(mind: Mind, look: replicas.PeersLook) -> Transition:
    """A replica's look at its peers and the turn, kept for the gate and status."""
    return replace(mind, peers=look), []


def gate(
    mind: Mind,
    facts: Recorded,
    active: ContainerState | None,
    sample: Scrape | None,
    t: float,
    cfg: Config,
    turn: Turn | None = None,
) -> Transition:
    """Let the pending restart through, drop it, or keep it waiting (backoff, peers, drain)."""
    mind, intents, verdict = _admit(mind, facts, active, t, cfg)
    if verdict != "go":
        return mind, intents
    pending = mind.pending
    assert pending is not None
    spent = budget(facts, t, cfg)
    hold = "expired" if any(isinstance(i, ExpireHold) for i in intents) else "none"
    passed = [
        ("hold", hold),
        ("budget", f"{spent.used} of {spent.limit} automatic runs used before it"),
        ("drain", f"none: {pending.reason} is not planned, it goes at once"),
    ]
    if cfg.replicas is not None and pending.reason in PLANNED:
        turn = turn or Turn()
        waits = peers_wait(mind, t, cfg, turn)
        if waits is not None:
            mind, more = _waiting_for_peers(mind, waits, t)
            return mind, [*intents, *more]
        if pending.peers is not None or turn.asked is not None:
            said = {"reason": pending.reason, "turn": "taken" if turn.asked else "not taken"}
            intents.append(Say("info", "peers_serving", said))
        pending = replace(pending, peers=None, peers_since=None, peers_told=False)
        mind = replace(mind, pending=pending)
        taken = "taken" if turn.holding or turn.asked else "none taken (watch.mode = observe)"
        passed.insert(2, ("peers", f"every peer serving; the turn: {taken}"))
    if pending.reason in PLANNED:
        drain = pending.drain
        if sample is not None and sample.engine is not None and sample.engine.sleeping:
            # put to sleep on purpose (its memory lent elsewhere): a planned restart would wake
            # it; it waits, and its drain starts afresh once the engine is awake again
            if drain is None or drain.note != ASLEEP:
                intents.append(Say("info", "restart_waits_for_wake", {"reason": pending.reason}))
            asleep = triggers.DrainState(started=t, note=ASLEEP)
            return replace(mind, pending=replace(pending, drain=asleep)), intents
        if drain is None or drain.note == ASLEEP:
            drain = triggers.DrainState(started=t)
            intents.append(Say("info", "draining", {"reason": pending.reason}))
            if cfg.rotation is not None and cfg.watch.mode != "observe":
                intents.append(LeaveRotation(f"planned {pending.reason} restart: draining"))
        if sample is not None:
            mind, more = on_scrape(mind, sample, t, cfg)
            intents += more
        if sample is None:  # no reading this pass (Docker did not answer): not known quiet
            drain, go = triggers.drain_blind(drain, t, cfg.drain)
        else:
            stuck = mind.health.stuck_gauge is not None
            drain, go = triggers.drain_observe(
                drain, sample.engine, t, cfg.drain, stuck_gauge=stuck
            )
        mind = replace(mind, pending=replace(pending, drain=drain))
        if go is None:
            return mind, intents
        intents.append(Say("info", "drained", {"reason": pending.reason, "why": go}))
        passed[-1] = ("drain", go)
    if cfg.watch.mode == "observe":
        key = observed_key(pending, active)
        return replace(mind, pending=None), [
            *intents,
            Observe(pending.reason, pending.why, pending.target, key, tuple(passed)),
        ]
    return replace(mind, pending=None), [
        *intents,
        Restart(pending.reason, pending.why, pending.target, tuple(passed)),
    ]
