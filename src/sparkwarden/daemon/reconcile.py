"""Level-triggered reconciliation: what should be against what is, on every look.

What should be: the LLM serving, unless an operator stopped or replaced it, the budget allows, no
reboot is required and no hold is on. What is: the candidates as Docker shows them now, known by
ID and ``StartedAt``, never by name. The action comes from the difference, so a Docker event that
was missed or replayed changes nothing (events only make the next look come sooner), and a
restart of sparkwarden loses nothing: what it must still know is in the journal
(:class:`~sparkwarden.daemon.observe.Recorded`). Pure: no I/O, the clock is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from sparkwarden.base.containers import ContainerState
from sparkwarden.base.cron import crontab_trigger, next_fire
from sparkwarden.cluster import watch as cluster_watch
from sparkwarden.config.schema import Config
from sparkwarden.daemon.decide import Mind, Transition, Waiting, want
from sparkwarden.daemon.intents import Adopt, Intent, KeepRetry, Say, SpareFirstSight
from sparkwarden.daemon.kept import FirstSight, Identity
from sparkwarden.daemon.observe import Recorded
from sparkwarden.evidence import triggers
from sparkwarden.surfaces.status_text import BY_ITSELF

#: How long an engine must have been down before it counts as down: ``docker rm -f`` removes
#: the container a moment after it dies, and an operator's stop is told by the events around
#: its exit; both have arrived by then.
SETTLE = 2.0

#: The least notice an engine first seen past ``watch.max_uptime`` gets before a planned restart:
#: the first nightly window at least this far off, or (``cron = ""``) this long.
FIRST_SIGHT_NOTICE = 3600.0


@dataclass(frozen=True)
class World:
    """What Docker says now: every LLM candidate there is (one removed by hand is absent), or
    why they could not be read."""

    states: tuple[ContainerState, ...]
    error: str = ""
    #: a run another process holds the run lock for (a typed ``cluster restart``): the stops
    #: it makes are its own, and nothing is wanted over it
    running: str = ""


@dataclass(frozen=True)
class Want:
    """A restart of exactly this container (its ID) for this reason."""

    reason: triggers.Reason
    why: str
    target: str
    said: str | None = None  # a warning logged once, when the restart becomes pending


@dataclass(frozen=True)
class Reconciled:
    intents: list[Intent] = field(default_factory=list)
    want: Want | None = None
    waiting: Waiting | None = None


def _ts(iso: str | None) -> float | None:
    return None if iso is None else datetime.fromisoformat(iso).timestamp()


def blocked(b: Recorded, now: float) -> Waiting | None:
    """What keeps every automatic restart back now, and the command that ends it."""
    if b.hold is not None and not b.hold.over(now):
        until = b.hold.until.astimezone().strftime("%H:%M %Z")
        return Waiting(f"the hold to end at {until}", "sparkwarden release")
    if b.gave_up is not None:
        return Waiting("an operator (restart budget spent)", "sparkwarden reset")
    if b.reboot_required is not None:
        return Waiting("a reboot (memory leaks across restarts)", "reboot, then sparkwarden reset")
    return None


def reconcile(b: Recorded, world: World, now: float, cfg: Config) -> Reconciled:
    """Compare the engine sparkwarden believes serves (``b.engine``) with the candidates now."""
    if world.error:
        return Reconciled(waiting=Waiting(f"Docker to answer ({world.error})", "docker info"))
    if world.running:
        what = f"the run under way to end ({world.running})"
        return Reconciled(waiting=Waiting(what, BY_ITSELF))
    up = [s for s in world.states if s.up]
    if len(up) > 1:
        names = ", ".join(s.name for s in up)
        return Reconciled(
            waiting=Waiting(f"one LLM candidate up, not {len(up)} ({names})", "docker stop …")
        )
    # an engine believed in that the config no longer names is the operator's business now
    engine = b.engine if b.engine and b.engine.name in cfg.llm.containers else None
    if up:
        return _up(b, engine, up[0], now, cfg)
    if engine is None:
        return Reconciled(
            waiting=Waiting("an LLM container to watch (none seen serving)", "sparkwarden restart")
        )
    mine = next((s for s in world.states if s.id == engine.id), None)
    if mine is None:
        named = next((s for s in world.states if s.name == engine.name), None)
        if named is not None:
            what = f"{engine.name} to start (replaced by hand, {named.status})"
        else:
            what = f"{engine.name} to start (removed by hand)"
        return Reconciled(waiting=Waiting(what, f"docker start {engine.name}"))
    if mine.status == "removing":  # ``docker rm -f`` under way, past SETTLE on a slow disk:
        # the next look finds it gone (removed by hand); never "idle" over a dead engine
        return Reconciled(waiting=Waiting(f"{mine.name}'s removal to end (docker rm)", BY_ITSELF))
    if mine.status == "dead":  # a removal that failed half-way: Docker refuses to start it
        what = f"{mine.name} to be removed (Docker marks it dead: a removal failed)"
        return Reconciled(waiting=Waiting(what, f"docker rm -f {mine.name}"))
    stop = b.operator_stopped
    if stop is not None and stop.id == mine.id:
        return Reconciled(
            waiting=Waiting(f"{mine.name} to start (stopped by hand)", f"docker start {mine.name}")
        )
    finished = mine.finished_at.timestamp() if mine.finished_at else None
    if finished is not None and now - finished < SETTLE:
        # The events around its exit say next look whose it was; meanwhile status says so,
        # never "idle" over a dead engine (no seconds in it: each new text is a journal line).
        what = f"{mine.name}'s exit to be told: crash or by hand"
        return Reconciled(waiting=Waiting(what, BY_ITSELF))
    if (held := blocked(b, now)) is not None:
        return Reconciled(waiting=held)
    why = f"{mine.name} is {mine.status} (exit code {mine.exit_code}"
    why += ", OOM-killed)" if mine.oom_killed else ")"
    retry = b.retry
    reason: triggers.Reason = "crash"
    if retry is not None and retry.container_id in (None, mine.id):
        reason = triggers.automatic(retry.reason) or "crash"
        why = f"{why}; {retry.why}"
    return Reconciled(want=Want(reason, why, mine.id), waiting=_backoff(b, now, cfg, mine.name))


def first_sight(running: ContainerState, now: float, cfg: Config) -> FirstSight | None:
    """The notice an engine seen for the first time gets when it has served an hour or more and
    ``max_uptime`` would restart it within :data:`FIRST_SIGHT_NOTICE` (an install or a reload
    naming an engine up for days): no planned restart before the first nightly window at least
    that far off (``cron = ""``: that long). None otherwise: a young engine was just started by
    someone who expects its limits to hold."""
    limit = cfg.watch.max_uptime
    if limit <= 0 or running.started_at is None:
        return None
    started = running.started_at.timestamp()
    earliest = now + FIRST_SIGHT_NOTICE
    if started + limit >= earliest or now - started < FIRST_SIGHT_NOTICE:
        return None
    until = earliest
    if cfg.schedule.cron:
        crontab = crontab_trigger(cfg.schedule.cron, cfg.schedule.timezone)
        fire = next_fire(crontab, datetime.fromtimestamp(earliest, UTC) - timedelta(seconds=1))
        until = fire.timestamp() if fire is not None else earliest
    return FirstSight(running.name, running.id, now, until)


def _up(
    b: Recorded, engine: Identity | None, running: ContainerState, now: float, cfg: Config
) -> Reconciled:
    """One candidate up: adopt it when it is not the engine believed in, or owe it a retry.
    ``engine``: the one believed in, when the config still names it."""
    seen = Identity.of(running)
    if running.restart_count > 0:
        # Docker's restart policy brought a crashed engine back into the ghost memory, whether
        # sparkwarden watched or not: the safe sequence must still run (any start through the
        # API, an operator's or a run's, sets RestartCount to 0).
        if (held := blocked(b, now)) is not None:
            return Reconciled(waiting=held)
        why = f"{running.name} died and Docker's restart policy started it again"
        return Reconciled(want=Want("crash", why, running.id, said="died_and_restarted_by_docker"))
    intents: list[Intent] = []
    retry = b.retry
    # An operator's stop Docker told of after this start (``docker restart``: its die, stop and
    # start come in one burst, maybe after the look that saw the start): over, not kept, or it
    # would refuse every later automatic restart.
    stop, started = b.operator_stopped, _ts(seen.started_at)
    stop_over = stop is not None and started is not None and stop.at < started
    if seen != engine or stop_over:
        why = _adopt_why(engine, seen)
        intents.append(Adopt(seen, why))
        first = first_sight(running, now, cfg) if engine is None or engine.id != seen.id else None
        if first is not None:
            intents.append(SpareFirstSight(first))
        if retry is not None and (
            retry.container_id != seen.id or (started is not None and started > retry.at)
        ):
            intents.append(KeepRetry(None))  # someone else brought it back: nothing owed
            retry = None
    if retry is not None and (retry.container_id or seen.id) == seen.id:
        if (held := blocked(b, now)) is not None:
            return Reconciled(intents, waiting=held)
        reason = triggers.automatic(retry.reason) or "crash"
        return Reconciled(intents, want=Want(reason, retry.why, seen.id))
    return Reconciled(intents)


def _adopt_why(engine: Identity | None, seen: Identity) -> str:
    if engine is None:
        return f"{seen.name} is up: the engine to watch"
    if engine.id != seen.id:
        return f"{seen.name} (id {seen.id[:12]}) is up in place of {engine.name} ({engine.id[:12]})"
    return f"{seen.name} was started again (StartedAt {seen.started_at})"


def _backoff(b: Recorded, now: float, cfg: Config, name: str) -> Waiting | None:
    spent = triggers.budget(list(b.runs), now, b.reset_at, cfg.budget)
    if spent.not_before is None:
        return None
    at = datetime.fromtimestamp(spent.not_before, UTC).astimezone().strftime("%H:%M:%S")
    return Waiting(f"a retry of {name} at {at} ({spent.why})", "sparkwarden restart")


def apply(mind: Mind, verdict: Reconciled, t: float) -> Transition:
    """Fold a verdict into what the daemon believes: a wanted restart becomes pending (the gates
    still let it through), and what it waits for is said once, when it changes."""
    stopped = cluster_watch.stopped_by_hand(mind.cluster)
    if verdict.want is not None and stopped is not None:  # a cluster's rank the operator's
        verdict = replace(
            verdict, want=None, waiting=Waiting(stopped, "docker start (on its node)")
        )
    intents = list(verdict.intents)
    for adopt in [i for i in intents if isinstance(i, Adopt)]:
        # nothing it said is known yet, but the chat probe of the run that started it
        mind = replace(mind, health=_proven_by_the_run(mind, adopt.engine))
        intents.append(
            Say(
                "info",
                "engine_adopted",
                {"container": adopt.engine.name, "id": adopt.engine.id[:12], "why": adopt.why},
            )
        )
    for spare in [i for i in intents if isinstance(i, SpareFirstSight)]:
        first = spare.first
        said = {
            "container": first.name,
            "id": first.id[:12],
            "until": datetime.fromtimestamp(first.until, UTC).isoformat(timespec="seconds"),
            "why": "first seen past watch.max_uptime: no planned restart before then "
            "(a crash or failed checks still act at once)",
        }
        intents.append(Say("warning", "planned_restart_deferred", said))
    if verdict.waiting != mind.waiting and verdict.waiting is not None:
        intents.append(
            Say("info", "waiting", {"for": verdict.waiting.what, "ends": verdict.waiting.command})
        )
    mind = replace(mind, waiting=verdict.waiting)
    wanted = verdict.want
    if wanted is None:
        if mind.pending is not None and mind.pending.target is not None:
            # the engine it was for is up again, or not ours to start now: forget it
            mind = replace(mind, pending=None)
        return mind, intents
    if mind.pending is not None and mind.pending.target == wanted.target:
        return mind, intents
    mind, more = want(mind, wanted.reason, wanted.why, t, target=wanted.target)
    if wanted.said is not None:
        more.insert(0, Say("warning", wanted.said, {"why": wanted.why}))
    return mind, intents + more


def _proven_by_the_run(mind: Mind, engine: Identity) -> triggers.HealthState:
    """The engine this daemon's last run started, and proven with its chat probe (its boot
    grace over: ``decide.after_run``), stays proven when adopted; any other starts afresh."""
    health = mind.health
    started = datetime.fromisoformat(engine.started_at) if engine.started_at else None
    if (
        health.proven
        and health.proven_by == engine.id
        and started is not None
        and started.timestamp() <= mind.last_run_end
    ):
        return triggers.HealthState(proven=True, proven_by=engine.id, probed_at=health.probed_at)
    return triggers.HealthState()
