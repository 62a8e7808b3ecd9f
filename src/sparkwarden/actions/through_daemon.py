"""``sparkwarden restart`` and ``restart --dry-run`` when the daemon runs (the normal case on a
box): asked over its control socket, answered by the daemon, printed here.

Light, as ``status`` is: the command finds the socket with :mod:`sparkwarden.config.locate` and
imports no config schema, logger or Docker SDK (``tests/config/test_locate.py`` keeps them out),
so it starts in a fraction of the time a run of its own needs. The daemon runs the restart
(single flight) and streams each step; it makes a dry run's plan itself and keeps it in history.
When no daemon listens (:class:`~sparkwarden.surfaces.control.DaemonUnavailable`), the caller
falls back to :mod:`sparkwarden.actions.restart`, which loads the config and acts on its own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkwarden.actions.foreground import say
from sparkwarden.actions.run_lines import (
    CLUSTER_PLAN_TITLE,
    PLAN_TITLE,
    print_plan,
    print_step,
    verdict_line,
)
from sparkwarden.base.errors import SparkwardenError
from sparkwarden.base.exits import Exit
from sparkwarden.restart.step_names import STEPS
from sparkwarden.surfaces import control
from sparkwarden.surfaces.reasons import manual_reason

#: What a typed restart says first in observe mode: it acts, the daemon only observes.
OBSERVING_TYPED = "the daemon only observes (watch.mode = observe); a typed restart acts"

#: Seconds a dry run's plan may take in the daemon: past its own bounds on the plan's Docker
#: calls at the defaults (each 60 s, retried 60 s while dockerd is away) and a cluster's looks.
PLAN_WAIT = 300.0


def dry_run(socket: Path, reason: str) -> int:
    """The plan of the restart the daemon would run now, which it also keeps in history."""
    request = {"cmd": "dry-run", "reason": manual_reason(reason)}
    answer = control.call(socket, request, timeout=PLAN_WAIT)
    if not answer.get("ok"):
        said = str(answer.get("error"))
        if said.startswith("malformed request") and "dry-run" in said:
            # a daemon older than the verb (upgraded, not yet restarted): plan it here
            raise control.DaemonUnavailable(f"the daemon on {socket} makes no dry run")
        raise SparkwardenError(said)
    steps = [(str(name), str(what)) for name, what in answer["steps"]]
    print_plan(CLUSTER_PLAN_TITLE if answer.get("cluster") else PLAN_TITLE, steps)
    return Exit.OK


def restart(socket: Path, reason: str, notice: bool = True) -> int:
    """The daemon runs it (single flight) and streams each step back over its socket.

    ``notice``: say :data:`OBSERVING_TYPED` when the daemon's first answer says it only
    observes (its ``watch.mode``: the one source of it); the caller that read the config and
    said it already passes False.
    """
    reason = manual_reason(reason)
    answers = control.stream(socket, {"cmd": "restart", "reason": reason}, timeout=None)
    first: dict[str, Any] | None = None
    try:
        first = next(answers, None)
        if notice and first is not None and first.get("watch_mode") == "observe":
            say(OBSERVING_TYPED)
        if first is None or not first.get("ok"):
            said = first.get("error") if first else "no answer from the daemon"
            raise SparkwardenError(str(said))
        run_id = int(first["run"])
        say(f"sparkwarden restart (reason {reason}): run #{run_id} by the daemon")
        return _follow(run_id, answers)
    except KeyboardInterrupt:  # only this view ends: the daemon's run goes on
        if first is not None and first.get("ok"):
            verdict_line(f"run #{first['run']} goes on in the daemon: see 'sparkwarden history'")
        else:
            verdict_line("the daemon may have taken the restart: see 'sparkwarden history'")
        return Exit.INTERRUPTED


def _follow(run_id: int, answers: Iterator[dict[str, Any]]) -> int:
    """Each step as the daemon streams it, then the verdict."""
    from sparkwarden.restart.events import StepEvent  # dataclasses: not for a dry run's start

    for answer in answers:
        if answer.get("event") == "step":
            fields = {
                k: answer[k]
                for k in ("phase", "name", "index", "run_id", "result", "summary", "duration_s")
            }
            fields["total"] = answer.get("total", len(STEPS))  # an older daemon: a host's run
            print_step(StepEvent(**fields))
        elif answer.get("event") == "done":
            return verdict(run_id, bool(answer["ok"]), answer.get("container"), answer.get("error"))
    raise SparkwardenError(f"lost the daemon during run #{run_id}: see 'sparkwarden history'")


def verdict(run_id: int, ok: bool, container: str | None, error: str | None) -> int:
    """A run's last line, here or the daemon's, and the command's exit status."""
    if ok:
        verdict_line(f"run #{run_id} ok: {container} answered a chat request")
        return Exit.OK
    verdict_line(f"run #{run_id} FAILED: {error}", sys.stderr)
    return Exit.FAILED
