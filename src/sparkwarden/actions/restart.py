"""``sparkwarden restart``: the sequence in the foreground, one line per step as it goes.

When the daemon runs, the request goes through its socket (so two sequences can never overlap)
and this command follows the run in the journal; otherwise it runs the sequence itself under the
same lock.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkwarden.actions.foreground import say, uncut
from sparkwarden.actions.run_lines import print_plan, print_step, record_dry_run, verdict_line
from sparkwarden.base.errors import SparkwardenError
from sparkwarden.base.exits import Exit
from sparkwarden.config.schema import Config
from sparkwarden.config.secrets import require_secrets
from sparkwarden.restart import sequence
from sparkwarden.restart.lock import RunLock
from sparkwarden.restart.parts import Parts, StepEvent
from sparkwarden.restart.step_names import STEPS
from sparkwarden.surfaces import control, control_schema

#: What a typed restart says first in observe mode: it acts, the daemon only observes.
OBSERVING_TYPED = "the daemon only observes (watch.mode = observe); a typed restart acts"


def run(config: Config, source: Path, reason: str, dry_run: bool) -> int:
    """A typed restart, recorded as ``manual:REASON`` whoever runs it (the daemon or this
    process): an operator's run never spends the automatic budget, and its text is no label."""
    reason = control_schema.manual_reason(reason)
    if dry_run and config.cluster is not None:  # a cluster's head: the cluster's plan
        from sparkwarden.actions import cluster

        return cluster.dry_run(config, reason)
    if not dry_run:
        if config.watch.mode == "observe":
            say(OBSERVING_TYPED)
        try:
            return _through_daemon(config, reason)
        except control.DaemonUnavailable:
            pass
        if config.cluster is not None:  # a cluster's head: never one rank alone
            from sparkwarden.actions import cluster

            return cluster.restart(config, reason)
    # run here, the sequence reads the API key itself; it sends no notification
    require_secrets(config, source, notify=False)
    parts = Parts.from_config(config)
    try:
        if dry_run:
            return _dry_run(config, parts, reason)
        with RunLock(config.state.dir) as lock, uncut("the restart"):
            lock.acquire(reason)
            say(f"sparkwarden restart (reason {reason})")

            def observe(event: StepEvent) -> None:
                if event.phase == "begin" and event.index == 1:
                    lock.set_run(event.run_id, reason)
                print_step(event)

            by = control.Peer(os.getpid(), os.getuid(), os.getgid()).who()
            why = f"run by {by} in the foreground (no daemon)"
            outcome = sequence.restart(config, reason, parts, observer=observe, why=why)
        return _verdict(outcome.run_id, outcome.ok, outcome.container, outcome.error)
    finally:
        parts.close()


def _through_daemon(config: Config, reason: str) -> int:
    """The daemon runs it (single flight) and streams each step back over its socket."""
    answers = control.stream(
        config.control.socket,
        {"cmd": "restart", "reason": control_schema.manual_reason(reason)},
        timeout=None,
    )
    first: dict[str, Any] | None = None
    try:
        first = next(answers, None)
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
    for answer in answers:
        if answer.get("event") == "step":
            fields = {
                k: answer[k]
                for k in ("phase", "name", "index", "run_id", "result", "summary", "duration_s")
            }
            fields["total"] = answer.get("total", len(STEPS))  # an older daemon: a host's run
            print_step(StepEvent(**fields))
        elif answer.get("event") == "done":
            return _verdict(
                run_id, bool(answer["ok"]), answer.get("container"), answer.get("error")
            )
    raise SparkwardenError(f"lost the daemon during run #{run_id}: see 'sparkwarden history'")


def _verdict(run_id: int, ok: bool, container: str | None, error: str | None) -> int:
    if ok:
        verdict_line(f"run #{run_id} ok: {container} answered a chat request")
        return 0
    verdict_line(f"run #{run_id} FAILED: {error}", sys.stderr)
    return 1


def _dry_run(config: Config, parts: Parts, reason: str) -> int:
    steps = sequence.plan(config, parts)
    record_dry_run(parts.journal, reason)
    print_plan("sparkwarden restart --dry-run: nothing will be touched. The plan:", steps)
    return 0
