"""The one step recorder of every run, a lone host's or a cluster's: each step journaled before
and after it acts, told to the observer (the CLI's lines, the daemon's ``STATUS=``, an operator's
stream) and logged, with its figures. A step that raises is recorded as failed and re-raised; a
step cut by :class:`HandedOver` stays ``running`` for the run that finishes it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sparkwarden.base import logs
from sparkwarden.base.errors import RECORDED, HandedOver, SparkwardenError, StepFailed, scrub
from sparkwarden.restart.events import StepEvent
from sparkwarden.restart.journal import Journal, StepResult
from sparkwarden.restart.parts import StepObserver

log = logs.get("sparkwarden.sequence")

#: What a journal that cannot be written raises (a full or read-only state dir).
UNRECORDABLE = (sqlite3.Error, OSError)


@dataclass(frozen=True)
class Done:
    """What a step did: the line history shows, and the figures the journal keeps."""

    summary: str
    detail: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False


#: A step a run takes: its name and its body.
Step = tuple[str, Callable[[], Done]]


@dataclass
class Recorder:
    """One run's steps, in ``order`` (its names: :mod:`sparkwarden.restart.step_names`)."""

    journal: Journal
    run_id: int
    order: tuple[str, ...]
    observer: StepObserver
    #: Called once a step has acted, before it is recorded (tests: ``base/faults.py``).
    after_action: Callable[[str], None] = lambda _name: None
    #: Called as a step begins (the daemon's watchdog lease for that step).
    beat: Callable[[str], None] = lambda _name: None
    #: Steps begun, and steps whose action has run (``resume_voice`` runs once, recorded or not).
    taken: set[str] = field(default_factory=set)
    acted: set[str] = field(default_factory=set)

    def index(self, name: str) -> int:
        return self.order.index(name) + 1

    def progress(self, name: str, summary: str) -> None:
        """A long step is still going (a boot wait): told, not recorded."""
        self.observer(self._event("begin", name, summary=summary))

    def step(self, name: str, action: Callable[[], Done | tuple[Any, Done]]) -> Any:
        """Journal a step before and after it runs, and tell the observer. Returns the value
        the action produced with its :class:`Done`, if any."""
        self.taken.add(name)
        self.beat(name)
        step_id = self.journal.begin_step(self.run_id, name)
        self.observer(self._event("begin", name))
        log.info("step_started", run=self.run_id, step=name)
        value: Any = None
        try:
            try:
                produced = action()
            finally:
                self.acted.add(name)
            value, done = produced if isinstance(produced, tuple) else (None, produced)
            self.after_action(name)
        except HandedOver:
            raise  # the step stays "running": the run that finishes this one closes it
        except Exception as exc:
            detail = exc.detail if isinstance(exc, StepFailed) else {}
            said = scrub(str(exc), keep=RECORDED)
            detail = {**detail, "error": said}
            try:
                duration = self.journal.end_step(step_id, "failed", detail)
            except UNRECORDABLE as journal_exc:  # the step's own error is the one to report
                log.error("step_not_recorded", run=self.run_id, step=name, error=str(journal_exc))
                duration = 0.0
            self.observer(self._event("end", name, "failed", said, duration))
            log.error("step_failed", run=self.run_id, step=name, error=said, **_flat(detail))
            raise
        result: StepResult = "skipped" if done.skipped else "ok"
        duration = self.journal.end_step(step_id, result, {"summary": done.summary, **done.detail})
        self.observer(self._event("end", name, result, done.summary, duration))
        log.info(
            "step_ended",
            run=self.run_id,
            step=name,
            result=result,
            seconds=round(duration, 3),
            summary=done.summary,
        )
        return value

    def skip(self, name: str, why: str) -> None:
        """A step not taken, recorded as skipped with why: history shows the whole plan."""
        self.step(name, lambda: Done(why, skipped=True))

    def _event(
        self,
        phase: Literal["begin", "end"],
        name: str,
        result: StepResult = "running",
        summary: str = "",
        seconds: float = 0.0,
    ) -> StepEvent:
        return StepEvent(
            phase,
            name,
            self.index(name),
            self.run_id,
            result,
            summary,
            seconds,
            len(self.order),
        )


def _flat(detail: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in detail.items() if k != "error"}


def failure(exc: Exception, run_id: int) -> tuple[str, str | None]:
    """What a run records of the exception that ended its steps: (error, the step that failed).
    The one catch for every run: a bug still ends with voice resumed and the run recorded, and
    a journal that cannot be written (a full state dir) is said as such. Call it in the
    ``except`` block (an internal error's traceback is logged from there)."""
    if isinstance(exc, SparkwardenError):
        return scrub(str(exc), keep=RECORDED), exc.step if isinstance(exc, StepFailed) else None
    if isinstance(exc, UNRECORDABLE):
        log.error("journal_unwritable", run=run_id, error=str(exc))
        return f"the journal could not be written: {exc}", None
    log.exception("run_internal_error", run=run_id)
    return f"internal error: {type(exc).__name__}: {scrub(str(exc), keep=RECORDED)}", None
