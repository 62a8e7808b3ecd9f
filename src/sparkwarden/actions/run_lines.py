"""A run's lines on a terminal: each step as it ends (a lone host's run or a cluster's, run here
or streamed from the daemon), a ``--dry-run``'s plan, the verdict; each within 100 columns.

Light: ``restart`` through the daemon prints with these, importing no schema, logger or Docker
SDK (``tests/config/test_locate.py`` keeps them out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from sparkwarden.actions.foreground import say
from sparkwarden.base.columns import fit_all
from sparkwarden.restart.step_names import CLUSTER_STEPS, NAME_WIDTH, STEPS, name_width

if TYPE_CHECKING:
    from sparkwarden.restart.events import StepEvent

#: ``--dry-run``'s first line: a lone host's plan, or a cluster head's.
PLAN_TITLE = "sparkwarden restart --dry-run: nothing will be touched. The plan:"
CLUSTER_PLAN_TITLE = "sparkwarden restart --dry-run: nothing will be touched. The cluster's plan:"


def _head(index: int, total: int, name: str) -> str:
    """A step line's start ("[6/9] wait_health   "): a cluster's run has more, longer names
    ("[ 6/13] wait_health     ")."""
    width = NAME_WIDTH if total <= len(STEPS) else name_width(CLUSTER_STEPS)
    return f"[{index:>{len(str(total))}}/{total}] {name:<{width}}"


def _say(line: str, total: int = len(STEPS), file: TextIO | None = None) -> None:
    """One line, wrapped within 100 columns (an SSH terminal), never cut; a step line's
    continuation starts under the step's words."""
    say(fit_all([line], indent=" " * len(_head(total, total, ""))), file)


def verdict_line(line: str, file: TextIO | None = None) -> None:
    say(fit_all([line], indent="    "), file)


def print_step(event: StepEvent) -> None:
    """A step's line as it ends (and a long wait's progress): a lone host's run or a
    cluster's, here or streamed from the daemon."""
    head = _head(event.index, event.total, event.name)
    if event.phase == "begin":
        if event.summary:  # progress during a long wait
            _say(f"{head}...     {event.summary}", event.total)
        return
    said = f"{head}{event.result:<8}{event.duration_s:6.1f}s  {event.summary}"
    _say(said, event.total)  # a terminal gone never fails a step: see say()


def print_plan(title: str, steps: list[tuple[str, str]]) -> None:
    """``--dry-run``'s plan: each step and what it would do now."""
    print(title)
    for index, (name, what) in enumerate(steps, start=1):
        _say(f"{_head(index, len(steps), name)}{what}", len(steps))
