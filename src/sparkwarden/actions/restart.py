"""``sparkwarden restart``: the sequence in the foreground, one line per step as it goes."""

from __future__ import annotations

import sys

from sparkwarden import sequence
from sparkwarden.config import Config
from sparkwarden.lock import RunLock
from sparkwarden.sequence import STEPS, Parts, StepEvent


def _print_step(event: StepEvent) -> None:
    prefix = f"[{event.index}/{len(STEPS)}] {event.name:<13}"
    if event.phase == "begin":
        if event.summary:  # progress during a long wait
            print(f"{prefix}...     {event.summary}", flush=True)
        return
    print(f"{prefix}{event.result:<8}{event.duration_s:6.1f}s  {event.summary}", flush=True)


def run(config: Config, reason: str, dry_run: bool) -> int:
    parts = Parts.from_config(config)
    try:
        if dry_run:
            return _dry_run(config, parts, reason)
        with RunLock(config.state.dir) as lock:
            lock.acquire(reason)
            print(f"sparkwarden restart (reason {reason})", flush=True)
            outcome = sequence.restart(config, reason, parts, observer=_print_step)
        if outcome.ok:
            print(f"run #{outcome.run_id} ok: {outcome.container} answered a chat request")
            return 0
        print(f"run #{outcome.run_id} FAILED: {outcome.error}", file=sys.stderr)
        return 1
    finally:
        parts.close()


def _dry_run(config: Config, parts: Parts, reason: str) -> int:
    steps = sequence.plan(config, parts)
    run_id = parts.journal.begin_run(reason, result="dry-run")
    parts.journal.end_run(run_id, "dry-run")
    print("sparkwarden restart --dry-run: nothing will be touched. The plan:")
    for index, (name, what) in enumerate(steps, start=1):
        print(f"[{index}/{len(STEPS)}] {name:<13}{what}")
    return 0
