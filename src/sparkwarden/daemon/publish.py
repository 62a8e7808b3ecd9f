"""Publishing the daemon's state: the status snapshot built from what it believes and saw, the
status file, and systemd's ``STATUS=`` line.

The snapshot (:mod:`sparkwarden.surfaces.snapshot`) is the one value every reporter renders. The
state name is derived here, never stored, so it cannot disagree with what is pending or running.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from sparkwarden.adapters.systemd import SdNotify
from sparkwarden.base import logs
from sparkwarden.base.version import version
from sparkwarden.cluster import replicas
from sparkwarden.config.schema import Config
from sparkwarden.daemon.decide import Mind
from sparkwarden.daemon.gates import budget, stale_after
from sparkwarden.daemon.kept import FirstSight
from sparkwarden.daemon.observe import Observation, Observer, Recorded
from sparkwarden.evidence import canary, triggers
from sparkwarden.restart import docker_policy
from sparkwarden.surfaces import status_text as status_mod
from sparkwarden.surfaces.snapshot import (
    AcceptanceView,
    BudgetView,
    DaemonView,
    GatewayView,
    LlmView,
    MemoryView,
    NextRestart,
    Snapshot,
    State,
    engine_view,
)

log = logs.get("sparkwarden.daemon")


def state_name(
    step: str | None,
    ready: bool,
    mind: Mind,
    gave_up: bool,
    held: bool,
    reboot: bool = False,
    observing: bool = False,
) -> str:
    """Derived from what runs and what is pending: a drain with nothing pending cannot show.
    An operator's typed run shows as restarting in observe mode too."""
    if step is not None:
        return f"restarting: {step}" if step else "restarting"
    idle: State = "observing" if observing else "idle"
    name: State = idle if mind.waiting is None else "waiting"
    if not ready:
        name = "starting"
    elif reboot:
        name = "reboot required"
    elif gave_up:
        name = "gave up"
    elif mind.pending is not None and mind.pending.drain is not None:
        name = "draining"
    elif held:
        name = "held"
    return name


def next_restart(
    mind: Mind,
    seen: Observation | None,
    now: datetime,
    cfg: Config,
    first: FirstSight | None = None,
) -> NextRestart | None:
    """The soonest planned restart: the schedule's or uptime's, never before the notice of an
    engine first seen past ``max_uptime`` (``first``)."""
    options: list[tuple[datetime, str]] = []
    if mind.next_schedule is not None:
        options.append((mind.next_schedule.astimezone(UTC), "schedule"))
    active, limit = seen.active if seen else None, cfg.watch.max_uptime
    if active is not None and active.status == "running" and active.started_at and limit > 0:
        options.append((active.started_at + timedelta(seconds=limit), "uptime"))
    if not options:
        return None
    if active is not None and first is not None and first.spares(active.id, now.timestamp()):
        notice = datetime.fromtimestamp(first.until, UTC)
        seen_at = datetime.fromtimestamp(first.at, UTC).astimezone().strftime("%Y-%m-%d %H:%M")
        spared = f"; {active.name} first seen {seen_at} past watch.max_uptime: not before then"
        options = [(max(at, notice), reason + spared) for at, reason in options]
    at, reason = min(options)
    return NextRestart(at.isoformat(timespec="seconds"), reason)


def health_said(
    health: triggers.HealthState, sent: float | None, t: float
) -> tuple[str, float | None]:
    """The health line, and how long the daemon's chat has been unanswered: never "ok" while
    the engine has not answered the daemon's last request, whatever ``/health`` said (the
    prober's own clock: the decider's view is a look old)."""
    if sent is None:
        said = health.last
        if health.failures:
            said += f" ({health.failures} failure(s) in a row)"
        return said, None
    age = max(0.0, t - sent)
    moved = health.moved_at
    if moved is not None and moved > sent:
        since = f"tokens moved {max(0.0, t - moved):.0f}s ago"
    else:
        since = "nothing moved since"
    return f"chat unanswered for {age:.0f}s; {since}", round(age, 1)


def build(
    cfg: Config,
    mind: Mind,
    seen: Observation | None,
    observer: Observer,
    facts: Recorded,
    step: str | None,
    ready: bool,
    running: bool,
    booting: dict[str, Any] | None = None,
) -> Snapshot:
    now = datetime.now(UTC)
    t = now.timestamp()
    active = seen.active if seen else None
    hold = facts.hold if facts.hold is not None and not facts.hold.over(t) else None
    spent = budget(facts, t, cfg)
    health, unanswered = health_said(mind.health, observer.prober.in_flight, t)
    last_probe = observer.last_probe
    if active is None or active.status != "running":  # what it said before it went down
        health, last_probe, unanswered = "-: not running", "", None
    stopped = facts.operator_stopped.name if facts.operator_stopped else None
    note = (seen.error if seen else "") or (
        f"{stopped} stopped by hand: not restarting it" if stopped else ""
    )
    waiting = mind.waiting
    acc, memory = mind.acc, seen.memory if seen else None
    return Snapshot(
        written_at=now.isoformat(timespec="seconds"),
        daemon=DaemonView(
            running=running,
            pid=os.getpid(),
            state=state_name(
                step,
                ready,
                mind,
                facts.gave_up is not None,
                hold is not None,
                facts.reboot_required is not None,
                cfg.watch.mode == "observe",
            ),
            pending=mind.pending.reason if mind.pending else None,
            drain=mind.pending.drain.note if mind.pending and mind.pending.drain else None,
            version=version(),
            waiting=waiting.what if waiting else None,
            command=waiting.command if waiting else None,
            looks=observer.looks,
            mode=cfg.watch.mode,
        ),
        llm=LlmView(
            container=active.name if active else None,
            status=active.status if active else "unknown",
            uptime_s=active.uptime_s(now) if active else None,
            health=health,
            last_probe=last_probe,
            note=note,
            operator_stopped=stopped,
            unanswered_s=unanswered,
        ),
        memory=MemoryView(
            available_gib=round(memory.available_gib, 2) if memory else 0.0,
            total_gib=round(memory.total_gib, 2) if memory else 0.0,
            below_floor=mind.memory.below_since is not None,
            held_gib=_gib(memory.held_gib) if memory else None,
            unheld_gib=_gib(memory.unheld_gib) if memory else None,
        ),
        acceptance=AcceptanceView(
            current=acc.current,
            baseline=acc.baseline,
            health=acc.health,
            method=acc.method,
            available=acc.available,
            note=acc.note,
            enabled=cfg.acceptance.enabled,
            canary=canary.snapshot(mind.canary, t, cfg.acceptance),
        ),
        metrics=observer.last_scrape.note,
        restart_policy=docker_policy.report(
            "leave" if cfg.watch.mode == "observe" else cfg.llm.restart_policy,
            seen.states if seen else (),
            facts.policies_taken,
        ),
        next_restart=next_restart(mind, seen, now, cfg, facts.first_sight),
        budget=BudgetView(used=spent.used, limit=spent.limit, why=spent.why),
        hold=hold.to_json() if hold else None,
        gave_up=facts.gave_up.to_json() if facts.gave_up else None,
        last_run=facts.last_run,
        run_counts=facts.run_counts,
        off=triggers.off(
            cfg,
            observer.last_scrape.engine,
            observer.last_scrape.note,
            None if acc.method is None else acc.method == "shape",
        ),
        reboot_required=facts.reboot_required is not None,
        memory_trend=facts.reboot_required.to_json() if facts.reboot_required else None,
        gateway=(
            GatewayView(cfg.gateway.url, cfg.gateway.watch, **asdict(mind.gateway))
            if cfg.gateway
            else None
        ),
        booting=booting if running else None,
        engine=engine_view(observer.release, observer.last_scrape.engine),
        cluster_watch=_cluster_watch(mind),
        observed=facts.last_observed if cfg.watch.mode == "observe" else None,
        replicas=_replicas(mind, cfg, seen, observer.last_health, step, t),
    )


def _replicas(
    mind: Mind,
    cfg: Config,
    seen: Observation | None,
    health: str,
    step: str | None,
    t: float,
) -> dict[str, Any] | None:
    """A replica's peers and the turn, as last looked at, what a planned restart waits for,
    whether this Spark serves its users, and how many of the set do."""
    if cfg.replicas is None:
        return None
    look, pending = mind.peers, mind.pending
    active, out = (seen.active, seen.rotation) if seen else (None, None)
    up = [active.name] if active is not None and active.status == "running" else []
    run = f"run at {step or 'its start'}" if step is not None else None
    serving, why = replicas.serving_of(up, health, run, out.why if out else None)
    fresh = look is not None and t - look.at <= stale_after(cfg)
    peers = sum(p.serving for p in look.peers) if look is not None and fresh else 0
    return {
        "self": cfg.replicas.self,
        "serving": serving,
        "why": why,
        "rotation": out.to_json() if out else None,
        "serving_count": peers + serving,
        "count": len(cfg.replicas.nodes),
        "waits_for": pending.peers if pending is not None else None,
        "at": datetime.fromtimestamp(look.at, UTC).isoformat(timespec="seconds") if look else None,
        "peers": [p.to_json() for p in look.peers] if look else [],
        "turn": look.turn.to_json() if look and look.turn else None,
        "turn_error": look.turn_error if look else "",
    }


def _cluster_watch(mind: Mind) -> dict[str, Any] | None:
    last = mind.cluster.last
    if last is None:
        return None
    return {
        "state": last.verdict.state,
        "summary": last.verdict.summary,
        "at": datetime.fromtimestamp(last.t, UTC).isoformat(timespec="seconds"),
        "dead_rank_looks": mind.cluster.streak,
        "unreachable": list(last.unreachable),
        "nodes": {
            name: {"reachable": name not in last.unreachable, "engine_up": name in last.engines_up}
            for name in last.verdict.nodes
        },
    }


def status_line(s: Snapshot) -> str:
    """systemd's ``STATUS=``: one line, minutes only so it changes rarely."""
    llm, acc, mem = s.llm, s.acceptance, s.memory
    parts = [s.daemon.state]
    if not llm.container:  # e.g. the shipped example config's names: say so where systemd shows
        parts.append(f"no LLM container: {llm.note or 'none of llm.containers found'}")
    if s.daemon.waiting:  # the LLM is down: what for, and what ends the wait
        command = status_mod.ends_with(s.daemon.command)
        parts.append(f"waiting for {s.daemon.waiting}" + (f" ('{command}')" if command else ""))
    if llm.container:
        up = llm.uptime_s
        parts.append(
            f"{llm.container} {llm.status}"
            + (f" up {status_mod.duration(up // 60 * 60)}" if up is not None else "")
        )
    if acc.current is not None:
        base = f"{acc.baseline:.0%}" if acc.baseline is not None else "learning"
        parts.append(f"acc {acc.current:.0%}/{base}")
    parts.append(f"mem {mem.available_gib:.0f}/{mem.total_gib:.0f} GiB")
    if s.cluster_watch:
        parts.append(f"cluster {s.cluster_watch['state']}")
    if s.next_restart:
        at = datetime.fromisoformat(s.next_restart.at).astimezone()
        parts.append(f"next {at:%a %H:%M} ({s.next_restart.reason})")
    return " | ".join(parts)


class Publisher:
    """Keeps the snapshot current for the socket and the exporter; writes the status file when
    it says something new (or every 30 s): an fsync every tick would be most of an idle
    daemon's work."""

    def __init__(self, cfg: Config, sd: SdNotify) -> None:
        self.path = cfg.state.dir / status_mod.STATUS_FILE
        self.sd = sd
        self._lock = threading.Lock()
        self._current: Snapshot | None = None
        self._json: dict[str, Any] = {}
        self._written = (0.0, "")

    def current(self) -> Snapshot | None:
        with self._lock:
            return self._current

    def as_json(self) -> dict[str, Any]:
        with self._lock:
            return self._json

    def publish(self, snapshot: Snapshot) -> str:
        as_json = snapshot.to_json()
        with self._lock:
            self._current, self._json = snapshot, as_json
        line = status_line(snapshot)
        self.sd.status(line)
        t = time.time()
        last_t, last_said = self._written
        # a new drafting canary is news too: ``record`` keeps each one from this file
        said = f"{line}|{snapshot.acceptance.canary.get('round')}"
        if said == last_said and t - last_t < 30 and snapshot.daemon.running:
            return line
        try:
            status_mod.write_atomic(self.path, as_json)
            self._written = (t, said)
        except OSError as exc:
            log.error("status_write_failed", error=str(exc))
        return line


def _gib(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
