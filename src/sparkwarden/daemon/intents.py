"""What the decider asks of the hands (:mod:`sparkwarden.daemon.act`), and what a run hands back.

Values, not calls: a decision can be tested by reading its intents, and carried out in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sparkwarden.base.containers import ContainerState
from sparkwarden.base.notices import Notice
from sparkwarden.daemon.beliefs import GaveUp, RebootRequired
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
    """Run the sequence now, under the run lock."""

    reason: Reason
    why: str


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
)


@dataclass(frozen=True)
class RunEnded:
    """A sequence's result, fed back to :func:`after_run`."""

    reason: str
    why: str
    outcome: Outcome
    at: float
