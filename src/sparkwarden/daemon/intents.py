"""What the decider asks of the hands (:mod:`sparkwarden.daemon.act`), and what a run hands back.

Values, not calls: a decision can be tested by reading its intents, and carried out in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sparkwarden.base.containers import ContainerState
from sparkwarden.base.notices import Notice
from sparkwarden.cluster.verdict import Starts
from sparkwarden.daemon.kept import (
    FirstSight,
    GaveUp,
    Identity,
    OperatorStop,
    RebootRequired,
    Retry,
)
from sparkwarden.evidence.triggers import Reason
from sparkwarden.restart.parts import Outcome

# --- what it asks the hands to do --------------------------------------------------------------


@dataclass(frozen=True)
class Say:
    """A log line: what was decided, and why."""

    level: Literal["info", "warning", "error"]
    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Restart:
    """Run the sequence now, under the run lock; ``target`` (a container ID) is the only
    container the run may stop or start: another one, or a replaced one, fails it untouched."""

    reason: Reason
    why: str
    target: str | None = None
    #: the gates it passed, by name, as said to the operator (``sparkwarden why``): a record
    #: of the decision, not part of it (two Restarts that differ only here are the same act)
    gates: tuple[tuple[str, str], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Adopt:
    """The LLM serving now is this container (an operator's start, replacement or other
    candidate, or a run's own start): written to the journal as what "serving" means."""

    engine: Identity
    why: str


@dataclass(frozen=True)
class NoteOperatorStop:
    """An operator stopped this container: it stays down until someone starts it."""

    stop: OperatorStop


@dataclass(frozen=True)
class AdoptClusterStarts:
    """A cluster serves from engine starts no run of sparkwarden's made: a rank is measured
    against these from now on."""

    starts: Starts
    t: float


@dataclass(frozen=True)
class Observe:
    """Observe mode's restart: record it as an ``observed`` run with the plan it would have run,
    notify, touch nothing. ``key``: what it was for, so that it is noted once."""

    reason: Reason
    why: str
    target: str | None
    key: str
    #: the gates it passed, as for a Restart (``sparkwarden why``)
    gates: tuple[tuple[str, str], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class SpareFirstSight:
    """Write the notice an engine first seen past ``max_uptime`` gets before a planned restart."""

    first: FirstSight


@dataclass(frozen=True)
class KeepRetry:
    """Write (or, with None, clear) the retry a failed automatic run owes."""

    retry: Retry | None


@dataclass(frozen=True)
class GiveUp:
    gave_up: GaveUp


@dataclass(frozen=True)
class RequireReboot:
    """Memory leaks across restarts: no automatic restart until an operator resets."""

    flag: RebootRequired


@dataclass(frozen=True)
class ExpireHold:
    """Remove a hold whose time is over from the journal."""


@dataclass(frozen=True)
class ClearGaveUp:
    """An operator's run succeeded: "gave up" and the budget start afresh."""

    t: float


@dataclass(frozen=True)
class Notify:
    kind: Notice
    subject: str
    summary: str
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class QuietVoiceForMemory:
    """The memory floor's ``pause_voice``: pause the voice containers that run."""


@dataclass(frozen=True)
class ResumeVoiceAfterMemory:
    """Memory is back: unpause exactly what the memory floor paused."""


@dataclass(frozen=True)
class TakeCanary:
    """Send the drafting canary now (the engine has idled long enough); its outcome comes back
    to :func:`~sparkwarden.daemon.decide.on_canary`."""

    t: float


@dataclass(frozen=True)
class TakeOverPolicy:
    """Set the container's Docker restart policy to ``no``, its original recorded first."""

    container: ContainerState


@dataclass(frozen=True)
class LeaveRotation:
    """A replica's planned restart begins its drain: out of the gateway's rotation first, so
    new requests go to a peer while the ones in flight finish."""

    why: str


@dataclass(frozen=True)
class RejoinRotation:
    """Out of rotation for a drain whose restart no longer comes, and serving: prove the
    replica's own gateway path, then back in."""

    why: str


@dataclass(frozen=True)
class RotationTold:
    """A failed run's rotation flag was notified: noted in the flag itself."""


@dataclass(frozen=True)
class EventsSeen:
    """Docker events up to ``until`` were handled: a new daemon replays from there."""

    until: float


Intent = (
    Say
    | Restart
    | GiveUp
    | RequireReboot
    | ExpireHold
    | ClearGaveUp
    | Notify
    | QuietVoiceForMemory
    | ResumeVoiceAfterMemory
    | EventsSeen
    | TakeCanary
    | TakeOverPolicy
    | Adopt
    | NoteOperatorStop
    | AdoptClusterStarts
    | KeepRetry
    | SpareFirstSight
    | Observe
    | LeaveRotation
    | RejoinRotation
    | RotationTold
)


@dataclass(frozen=True)
class RunEnded:
    """A sequence's result, fed back to :func:`after_run`."""

    reason: str
    why: str
    outcome: Outcome
    at: float
