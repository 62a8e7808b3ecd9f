"""What the control socket's requests do; :mod:`~sparkwarden.surfaces.control` only carries them.

These run on the control thread. They never touch the box: a status request reads the published
snapshot, a restart is queued for the main thread and its steps streamed back, a dry run only
reads the box, with adapters of its own (:func:`sparkwarden.daemon.plans.answer` says why it is
safe there), and ``hold``, ``release`` and ``reset`` write the journal's durable facts, then wake
the loop to read them.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkwarden.base import faults, logs
from sparkwarden.base.errors import SparkwardenError, scrub
from sparkwarden.config.schema import Config
from sparkwarden.daemon import plans
from sparkwarden.daemon.kept import Hold, Kept
from sparkwarden.restart.journal import Journal
from sparkwarden.restart.parts import Outcome
from sparkwarden.surfaces.control import Answer, Peer
from sparkwarden.surfaces.control_schema import (
    DryRunRequest,
    FaultRequest,
    HoldRequest,
    ReleaseRequest,
    ResetRequest,
    RestartRequest,
    StatusRequest,
)

log = logs.get("sparkwarden.daemon")

#: Put on the loop's queue: the journal's facts changed (hold, release, reset).
WAKE = ("wake", None)


@dataclass
class ManualCall:
    """An operator's restart through the socket: its steps are streamed back to the caller."""

    reason: str
    #: who asked, for history ("alice (uid 1001, pid 4242)")
    by: str = "an operator"
    requested_at: float = field(default_factory=time.time)
    started: threading.Event = field(default_factory=threading.Event)
    run_id: int | None = None
    refused: str | None = None
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)

    def claim(self) -> bool:
        with self.lock:
            return not self.cancelled

    def cancel(self) -> bool:
        with self.lock:
            if self.run_id is None and self.refused is None:
                self.cancelled = True
            return self.cancelled

    def refuse(self, why: str) -> None:
        self.refused = why
        self.started.set()

    def begin(self, run_id: int) -> None:
        self.run_id = run_id
        self.started.set()

    def done(self, outcome: Outcome | None) -> None:
        self.events.put(
            {
                "event": "done",
                "ok": bool(outcome and outcome.ok),
                "run": self.run_id,
                "container": outcome.container if outcome else None,
                "error": outcome.error
                if outcome
                else "sparkwarden stopped mid-run; the next sparkwarden finishes it "
                "(see 'sparkwarden history')",
            }
        )


def apply_admin(journal: Journal, request: Any) -> dict[str, Any]:
    """hold / release / reset: durable state the daemon reads, with or without a daemon."""
    kept = Kept(journal)
    if isinstance(request, HoldRequest):
        hold = Hold.starting(time.time(), request.seconds, request.reason)
        kept.put_hold(hold)
        log.info("hold", **hold.to_json())
        return {"ok": True, "hold": hold.to_json()}
    if isinstance(request, ReleaseRequest):
        kept.release()
        log.info("released")
        return {"ok": True}
    if isinstance(request, ResetRequest):
        kept.reset(time.time())
        kept.clear_reboot(time.time())
        log.info("budget_reset")
        return {"ok": True}
    raise SparkwardenError(f"unknown request {request!r}")


#: A queued call the loop did not take up, with no run to name.
BUSY = "the daemon is busy; try again"
#: What every refusal of an operator's restart begins with.
REFUSED = "another sequence is running: "
#: How long a queued operator's call waits for the loop to take it up.
CLAIM_WAIT = 10.0
#: How long a refusal waits for the run it lost to to have a number: the run lock is taken a
#: moment before the journal's run begins (and the lock names it).
NAMING_WAIT = 10.0


def _named(busy: Callable[[], str | None], holder: str) -> str:
    """The run under the lock that refused a request, by its run number once the lock names
    it (a request that came between the lock and the run's first step was refused naming none:
    "reason schedule, pid ..." where the operator was promised "run #N"). Said as it was if the
    run ended first, or no number comes within :data:`NAMING_WAIT`."""
    deadline = time.monotonic() + NAMING_WAIT
    while "run #" not in holder and time.monotonic() < deadline:
        time.sleep(0.05)
        now = busy()
        if now is None:
            break
        holder = now
    return holder


def _naming(call: ManualCall, busy: Callable[[], str | None]) -> str:
    """The sequence a request refused behind a queued operator's call lost to: the run under
    the lock when one takes it first (the queued call waits behind it, and is refused in its
    turn: naming the queued call named a run that never was), else the queued call's own run,
    by its number once it has one."""
    deadline = time.monotonic() + NAMING_WAIT
    while not call.started.wait(timeout=0.05):
        if (holder := busy()) is not None:
            return _named(busy, holder)
        if time.monotonic() > deadline:
            break
    if call.refused is not None:  # it lost, in its turn, to a run that ended meanwhile
        return call.refused.removeprefix(REFUSED)
    run = f"run #{call.run_id}, " if call.run_id is not None else ""
    return f"{run}an operator's ({call.reason})"


#: the answer to ``status`` before the daemon's first look is published
STARTING = "starting: its first check of the box is not done yet"


class Handlers:
    """The control socket's handler: one call per request, on the control thread."""

    def __init__(
        self,
        config: Config,
        loop_queue: queue.SimpleQueue[Any],
        snapshot: Callable[[], dict[str, Any]],
        busy: Callable[[], str | None],
        freeze: Callable[[], None],
    ) -> None:
        self.config = config
        self.journal_dir: Path = config.state.dir
        self.queue = loop_queue
        self.snapshot = snapshot
        self.busy = busy
        self.freeze = freeze
        self.faults = faults.enabled()
        self.manual_lock = threading.Lock()
        self.manual_call: ManualCall | None = None

    def __call__(self, request: Any, peer: Peer) -> Answer:
        # status is routine (a watch loop asks every few seconds): debug, not the journal's info
        routine = log.debug if isinstance(request, StatusRequest) else log.info
        routine("control_request", cmd=request.cmd, uid=peer.uid, pid=peer.pid)
        if isinstance(request, StatusRequest):
            snapshot = self.snapshot()
            if not snapshot:  # a status of nothing would read as "not running"
                return {"ok": False, "error": STARTING}
            return {"ok": True, "status": snapshot}
        if isinstance(request, RestartRequest):
            return self._manual(request.reason, peer)
        if isinstance(request, DryRunRequest):
            return self._dry_run(request.reason)
        if isinstance(request, FaultRequest):
            if not self.faults:
                return {"ok": False, "error": f"fault injection is off (set {faults.ENABLE}=1)"}
            self.freeze()
            log.warning("fault_injected", fault=request.name)
            return {"ok": True}
        journal = Journal(self.journal_dir)
        try:
            return apply_admin(journal, request)
        finally:
            journal.close()
            self.queue.put(WAKE)

    def _dry_run(self, reason: str) -> dict[str, Any]:
        """The plan of the restart this daemon would run now, made here on the control thread
        (:func:`~sparkwarden.daemon.plans.answer`), and kept in history as a dry run."""
        try:
            return plans.answer(self.config, reason)
        except SparkwardenError:
            raise  # answered as its message, as the command's own dry run says it
        except Exception as exc:  # never a listener thread gone with no answer
            log.exception("dry_run_failed", reason=reason)
            return {"ok": False, "error": scrub(f"the dry run failed: {type(exc).__name__}: {exc}")}

    def _manual(self, reason: str, peer: Peer) -> Iterator[dict[str, Any]]:
        """Queue the run for the main thread, then stream its steps until it is done.

        One operator request at a time: a second one, while the first is queued or running,
        is refused at once rather than run after it. Each first answer says the daemon's
        ``watch.mode``, so the command says "the daemon only observes" from the one source of
        it, without reading the config itself.
        """
        call = ManualCall(reason, by=peer.who())
        with self.manual_lock:
            queued = self.manual_call
            busy = self.busy() if queued is None else None
            if queued is None and not busy:
                self.manual_call = call
        if queued is not None:  # waits, outside the lock, for what it lost to to have a number
            busy = _naming(queued, self.busy)
        elif busy:
            busy = _named(self.busy, busy)  # the same for a run the lock holds
        mode = {"watch_mode": self.config.watch.mode}
        if busy:
            yield {"ok": False, "error": f"{REFUSED}{busy}", **mode}
            return
        try:
            self.queue.put(call)
            if not call.started.wait(timeout=CLAIM_WAIT) and call.cancel():
                # the loop is in a run that took the lock first (a schedule's): that one
                holder = self.busy()
                error = f"{REFUSED}{_named(self.busy, holder)}" if holder else BUSY
                yield {"ok": False, "error": error, **mode}
                return
            call.started.wait()
            if call.refused:
                yield {"ok": False, "error": call.refused, **mode}
                return
            log.info("manual_run", run=call.run_id, reason=reason, uid=peer.uid, pid=peer.pid)
            yield {"ok": True, "run": call.run_id, **mode}
            while True:
                event = call.events.get()
                yield event
                if event["event"] == "done":
                    return
        finally:
            with self.manual_lock:
                self.manual_call = None
