"""The daemon's durable facts in the journal's key-value table, with typed accessors.

The one place that names the keys: a hold, a "gave up", the last budget reset, the voice the
memory floor paused, the last Docker event seen, the restart policies taken over from Docker,
and what the daemon must still believe after SIGHUP, a crash or an upgrade (issue 25): the engine
serving (by ID and StartedAt), an operator's stop, a retry owed, the canary's baseline.
Each survives a restart of sparkwarden, and each may be changed by an operator with no daemon
running (``hold``, ``release``, ``reset``, ``uninstall-service``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from sparkwarden.base.containers import ContainerState
from sparkwarden.cluster.verdict import Proof, Starts
from sparkwarden.restart.journal import Journal


class Key(StrEnum):
    HOLD = "hold"
    GAVE_UP = "gave_up"
    RESET_AT = "reset_at"
    RESET_AFTER_RUN = "reset_after_run"
    MEMORY_PAUSED = "memory_paused"
    EVENTS_SEEN = "events_seen_until"
    REBOOT_REQUIRED = "reboot_required"
    MEMORY_TREND_FROM = "memory_trend_from"
    POLICIES_TAKEN = "restart_policies_taken"
    ENGINE = "engine"
    OPERATOR_STOPPED = "operator_stopped"
    RETRY = "retry"
    CANARY_BASELINE = "canary_baseline"
    CLUSTER_STARTS = "cluster_starts"
    FIRST_SIGHT = "first_sight"


@dataclass(frozen=True)
class Hold:
    """No automatic restart until ``until``: an operator's maintenance window."""

    until: datetime
    reason: str = ""

    @classmethod
    def starting(cls, t: float, seconds: float, reason: str) -> Hold:
        return cls(datetime.fromtimestamp(t, UTC) + timedelta(seconds=seconds), reason)

    def over(self, t: float) -> bool:
        """The one rule for hold expiry: over from the second it names."""
        return self.until.timestamp() <= t

    def to_json(self) -> dict[str, str]:
        return {"until": self.until.isoformat(timespec="seconds"), "reason": self.reason}


@dataclass(frozen=True)
class GaveUp:
    """The budget was spent: nothing automatic happens until an operator resets it."""

    reason: str
    why: str
    at: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "why": self.why, "at": self.at}


@dataclass(frozen=True)
class RebootRequired:
    """Memory nobody holds kept growing across stops and drops: no automatic restart until a
    reset."""

    why: str
    available_after_drop_gib: tuple[float, ...]
    fall_gib: float
    at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "why": self.why,
            "available_after_drop_gib": list(self.available_after_drop_gib),
            "fall_gib": self.fall_gib,
            "at": self.at,
        }


@dataclass(frozen=True)
class Identity:
    """A container as Docker knows it: a replaced container is a new ID, a restarted one a new
    ``StartedAt``. Names are how operators speak; identity is how sparkwarden decides."""

    name: str
    id: str
    started_at: str | None  # Docker's StartedAt, ISO; None for a container never started

    @classmethod
    def of(cls, state: ContainerState) -> Identity:
        started = state.started_at.isoformat() if state.started_at else None
        return cls(state.name, state.id, started)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "id": self.id, "started_at": self.started_at}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Identity:
        return cls(str(raw["name"]), str(raw["id"]), raw.get("started_at"))


@dataclass(frozen=True)
class FirstSight:
    """An engine first seen already past ``watch.max_uptime`` (an install, a reload naming it):
    no planned restart of it (by ID) before ``until``, so that naming an engine never restarts
    it minutes later. Crashes and failed checks still act at once."""

    name: str
    id: str
    at: float  # when it was first seen
    until: float

    def spares(self, container_id: str | None, t: float) -> bool:
        return container_id == self.id and t < self.until

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "id": self.id, "at": self.at, "until": self.until}


@dataclass(frozen=True)
class OperatorStop:
    """An operator's ``docker stop`` of this container (by ID): it stays down until someone
    starts it."""

    name: str
    id: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "id": self.id, "at": self.at}


@dataclass(frozen=True)
class Retry:
    """A failed automatic run, to be run again (the budget's backoff says when): kept in the
    journal so a SIGHUP, a crash or an upgrade of sparkwarden cannot forget it."""

    reason: str
    why: str
    container_id: str | None
    at: float  # when the failed run ended: a start of the container after this is not ours

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "why": self.why,
            "container_id": self.container_id,
            "at": self.at,
        }


class Kept:
    """Typed reads and writes of the durable facts, over one journal."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def hold(self) -> Hold | None:
        raw: dict[str, Any] | None = self.journal.get(Key.HOLD)
        if not raw:
            return None
        return Hold(datetime.fromisoformat(raw["until"]), raw.get("reason") or "")

    def put_hold(self, hold: Hold) -> None:
        self.journal.put(Key.HOLD, hold.to_json())

    def release(self) -> None:
        self.journal.delete(Key.HOLD)

    def gave_up(self) -> GaveUp | None:
        raw: dict[str, Any] | None = self.journal.get(Key.GAVE_UP)
        return GaveUp(raw["reason"], raw["why"], raw["at"]) if raw else None

    def give_up(self, gave_up: GaveUp) -> None:
        self.journal.put(Key.GAVE_UP, gave_up.to_json())

    def reset(self, t: float) -> None:
        """Clear "gave up" and start the budget afresh: an operator's reset or successful run.
        It counts from the newest run by id: after the wall clock stepped back, the runs before
        the reset are dated after it."""
        runs = self.journal.runs(1)
        self.journal.delete(Key.GAVE_UP)
        self.journal.put(Key.RESET_AT, t)
        self.journal.put(Key.RESET_AFTER_RUN, runs[0].id if runs else 0)

    def reboot_required(self) -> RebootRequired | None:
        raw: dict[str, Any] | None = self.journal.get(Key.REBOOT_REQUIRED)
        if not raw:
            return None
        after = tuple(raw["available_after_drop_gib"])
        return RebootRequired(raw["why"], after, raw["fall_gib"], raw["at"])

    def require_reboot(self, flag: RebootRequired) -> None:
        self.journal.put(Key.REBOOT_REQUIRED, flag.to_json())

    def clear_reboot(self, t: float) -> None:
        """An operator's reset (after the reboot): the memory trend starts afresh."""
        self.journal.delete(Key.REBOOT_REQUIRED)
        self.journal.put(Key.MEMORY_TREND_FROM, t)

    def memory_after_drops(self) -> dict[str, list[float]]:
        """Memory left free after each run's stop and drop since the last reset of the trend,
        per machine ("" this host; a cluster node by name)."""
        since = float(self.journal.get(Key.MEMORY_TREND_FROM) or 0.0)
        return self.journal.memory_after_drops(since)

    def reset_at(self) -> float:
        """The time of the last reset, for journals written before resets named a run."""
        return 0.0 if self.reset_after_run() else float(self.journal.get(Key.RESET_AT) or 0.0)

    def reset_after_run(self) -> int:
        return int(self.journal.get(Key.RESET_AFTER_RUN) or 0)

    def memory_paused(self) -> list[str]:
        return list(self.journal.get(Key.MEMORY_PAUSED) or [])

    def put_memory_paused(self, names: list[str]) -> None:
        self.journal.put(Key.MEMORY_PAUSED, names)

    def clear_memory_paused(self) -> None:
        self.journal.delete(Key.MEMORY_PAUSED)

    def events_seen(self) -> float | None:
        seen = self.journal.get(Key.EVENTS_SEEN)
        return None if seen is None else float(seen)

    def see_events(self, until: float) -> None:
        self.journal.put(Key.EVENTS_SEEN, until)

    def policies_taken(self) -> dict[str, Any]:
        """Docker restart policies the daemon set to ``no``: container to its original."""
        return dict(self.journal.get(Key.POLICIES_TAKEN) or {})

    def put_policies_taken(self, taken: dict[str, Any]) -> None:
        if taken:
            self.journal.put(Key.POLICIES_TAKEN, taken)
        else:
            self.journal.delete(Key.POLICIES_TAKEN)

    def engine(self) -> Identity | None:
        """The LLM container last seen serving: what "the LLM serving" means now."""
        raw: dict[str, Any] | None = self.journal.get(Key.ENGINE)
        return Identity.from_json(raw) if raw else None

    def put_engine(self, engine: Identity) -> None:
        self.journal.put(Key.ENGINE, engine.to_json())

    def first_sight(self) -> FirstSight | None:
        raw: dict[str, Any] | None = self.journal.get(Key.FIRST_SIGHT)
        if not raw:
            return None
        return FirstSight(raw["name"], raw["id"], float(raw["at"]), float(raw["until"]))

    def put_first_sight(self, first: FirstSight) -> None:
        self.journal.put(Key.FIRST_SIGHT, first.to_json())

    def operator_stopped(self) -> OperatorStop | None:
        raw: dict[str, Any] | None = self.journal.get(Key.OPERATOR_STOPPED)
        return OperatorStop(raw["name"], raw["id"], float(raw["at"])) if raw else None

    def put_operator_stopped(self, stop: OperatorStop | None) -> None:
        if stop is None:
            self.journal.delete(Key.OPERATOR_STOPPED)
        else:
            self.journal.put(Key.OPERATOR_STOPPED, stop.to_json())

    def retry(self) -> Retry | None:
        raw: dict[str, Any] | None = self.journal.get(Key.RETRY)
        if not raw:
            return None
        return Retry(raw["reason"], raw["why"], raw.get("container_id"), float(raw["at"]))

    def put_retry(self, retry: Retry | None) -> None:
        if retry is None:
            self.journal.delete(Key.RETRY)
        else:
            self.journal.put(Key.RETRY, retry.to_json())

    def canary_baseline(self) -> tuple[Identity, tuple[tuple[str, float], ...]] | None:
        """The drafting canary's baseline, and the engine (ID and StartedAt) it was learnt on:
        a restart of sparkwarden mid-decay must not relearn it from the decayed engine."""
        raw: dict[str, Any] | None = self.journal.get(Key.CANARY_BASELINE)
        if not raw:
            return None
        baseline = tuple((str(k), float(v)) for k, v in raw["baseline"].items())
        return Identity.from_json(raw["engine"]), baseline

    def put_canary_baseline(
        self, engine: Identity, baseline: tuple[tuple[str, float], ...]
    ) -> None:
        self.journal.put(
            Key.CANARY_BASELINE, {"engine": engine.to_json(), "baseline": dict(baseline)}
        )

    def cluster_proof(self, stop_window: float) -> Proof:
        """What a cluster's head knows of the cluster it judges: the engine starts it last
        served from (the newest of a cluster run that ended ok and the first serving look
        adopted), and when its cluster runs went (a stop within one was the run's own)."""
        runs = [r for r in self.journal.runs(50) if "cluster" in r.plan]
        spans = tuple((r.started_at, r.ended_at or float("inf")) for r in runs)
        proven = next((r for r in runs if r.result == "ok" and r.plan.get("cluster_started")), None)
        adopted: dict[str, Any] | None = self.journal.get(Key.CLUSTER_STARTS)
        starts: Starts | None = None
        if proven is not None:
            starts = dict(proven.plan["cluster_started"])
        if adopted and (proven is None or float(adopted["at"]) > (proven.ended_at or 0.0)):
            starts = dict(adopted["starts"])
        return Proof(starts, spans, stop_window)

    def adopt_cluster_starts(self, starts: Starts, t: float) -> None:
        """A cluster seen serving from starts no run of sparkwarden's made (started by hand, or
        before sparkwarden watched): the ones a rank is measured against from now on."""
        self.journal.put(Key.CLUSTER_STARTS, {"at": t, "starts": starts})
