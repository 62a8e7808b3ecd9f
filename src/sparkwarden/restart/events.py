"""What an observer of a run is told of each step: kept apart from :mod:`parts` (which names it
too) so ``restart`` through the daemon prints the steps it streams without importing the
adapters a run drives (the Docker SDK, the config schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sparkwarden.restart.step_names import STEPS

if TYPE_CHECKING:
    from sparkwarden.restart.journal import StepResult


@dataclass(frozen=True)
class StepEvent:
    """What an observer (the CLI's progress lines, the daemon's STATUS=) is told of a step."""

    phase: Literal["begin", "end"]
    name: str
    index: int
    run_id: int
    result: StepResult = "running"
    summary: str = ""
    duration_s: float = 0.0
    #: how many steps the run has (a cluster's run has more than a host's)
    total: int = len(STEPS)
