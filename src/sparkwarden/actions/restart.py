"""``sparkwarden restart``: the sequence in the foreground, one line per step as it goes.

When the daemon runs, the command asks it from a light path before any of this is imported
(:mod:`sparkwarden.actions.through_daemon`): the daemon runs the restart (so two sequences can
never overlap) or makes the dry run's plan. This is the path when none answers: it loads the
config, asks the daemon once more (one may have started meanwhile), and otherwise runs the
sequence itself under the same lock, or makes the plan itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkwarden.actions import through_daemon
from sparkwarden.actions.foreground import say, uncut
from sparkwarden.actions.run_lines import PLAN_TITLE, print_plan, print_step
from sparkwarden.actions.through_daemon import OBSERVING_TYPED, verdict
from sparkwarden.config.schema import Config
from sparkwarden.config.secrets import require_secrets
from sparkwarden.daemon.plans import host_plan
from sparkwarden.restart import sequence
from sparkwarden.restart.events import StepEvent
from sparkwarden.restart.lock import RunLock
from sparkwarden.restart.parts import Parts
from sparkwarden.surfaces import control
from sparkwarden.surfaces.reasons import manual_reason

__all__ = ["OBSERVING_TYPED", "run"]


def run(config: Config, source: Path, reason: str, dry_run: bool) -> int:
    """A typed restart, recorded as ``manual:REASON`` whoever runs it (the daemon or this
    process): an operator's run never spends the automatic budget, and its text is no label."""
    reason = manual_reason(reason)
    if dry_run and config.cluster is not None:  # a cluster's head: the cluster's plan
        from sparkwarden.actions import cluster

        return cluster.dry_run(config, reason)
    if not dry_run:
        if config.watch.mode == "observe":
            say(OBSERVING_TYPED)
        try:
            return through_daemon.restart(config.control.socket, reason, notice=False)
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
        return verdict(outcome.run_id, outcome.ok, outcome.container, outcome.error)
    finally:
        parts.close()


def _dry_run(config: Config, parts: Parts, reason: str) -> int:
    print_plan(PLAN_TITLE, host_plan(config, parts, reason))
    return 0
