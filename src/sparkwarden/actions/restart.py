"""``sparkwarden restart``: the sequence in the foreground, one line per step as it goes.

When the daemon runs, the request goes through its socket (so two sequences can never overlap)
and this command follows the run in the journal; otherwise it runs the sequence itself under the
same lock.
"""

from __future__ import annotations

import sys
import time

from sparkwarden import control, sequence
from sparkwarden.config import Config
from sparkwarden.errors import SparkwardenError
from sparkwarden.journal import Journal
from sparkwarden.lock import RunLock
from sparkwarden.sequence import STEPS, Parts, StepEvent


def _line(index: int, name: str, result: str, seconds: float, summary: str) -> str:
    return f"[{index}/{len(STEPS)}] {name:<13}{result:<8}{seconds:6.1f}s  {summary}"


def _print_step(event: StepEvent) -> None:
    if event.phase == "begin":
        if event.summary:  # progress during a long wait
            print(
                f"[{event.index}/{len(STEPS)}] {event.name:<13}...     {event.summary}", flush=True
            )
        return
    print(_line(event.index, event.name, event.result, event.duration_s, event.summary), flush=True)


def run(config: Config, reason: str, dry_run: bool) -> int:
    if not dry_run:
        try:
            answer = control.call(
                config.control.socket, {"cmd": "restart", "reason": reason}, timeout=20.0
            )
        except control.DaemonUnavailable:
            pass
        else:
            if not answer.get("ok"):
                raise SparkwardenError(str(answer.get("error")))
            print(
                f"sparkwarden restart (reason {reason}): run #{answer['run']} by the daemon",
                flush=True,
            )
            return _follow(config, int(answer["run"]))
    parts = Parts.from_config(config)
    try:
        if dry_run:
            return _dry_run(config, parts, reason)
        with RunLock(config.state.dir) as lock:
            lock.acquire(reason)
            print(f"sparkwarden restart (reason {reason})", flush=True)

            def observe(event: StepEvent) -> None:
                if event.phase == "begin" and event.index == 1:
                    lock.set_run(event.run_id, reason)
                _print_step(event)

            outcome = sequence.restart(config, reason, parts, observer=observe)
        return _verdict(outcome.run_id, outcome.ok, outcome.container, outcome.error)
    finally:
        parts.close()


def _follow(config: Config, run_id: int) -> int:
    """Print the daemon's run step by step from the journal until it ends."""
    journal = Journal(config.state.dir)
    shown = 0
    try:
        while True:
            record = journal.run(run_id)
            if record is None:
                raise SparkwardenError(f"run #{run_id} is not in the journal")
            ended = [s for s in record.steps if s.result != "running"]
            for step in ended[shown:]:
                summary = str(step.detail.get("summary") or step.detail.get("error") or "")
                print(
                    _line(
                        STEPS.index(step.name) + 1,
                        step.name,
                        step.result,
                        step.duration_s or 0.0,
                        summary,
                    ),
                    flush=True,
                )
            shown = len(ended)
            if record.result != "running":
                return _verdict(run_id, record.result == "ok", record.container, record.error)
            time.sleep(0.2)
    finally:
        journal.close()


def _verdict(run_id: int, ok: bool, container: str | None, error: str | None) -> int:
    if ok:
        print(f"run #{run_id} ok: {container} answered a chat request")
        return 0
    print(f"run #{run_id} FAILED: {error}", file=sys.stderr)
    return 1


def _dry_run(config: Config, parts: Parts, reason: str) -> int:
    steps = sequence.plan(config, parts)
    run_id = parts.journal.begin_run(reason, result="dry-run")
    parts.journal.end_run(run_id, "dry-run")
    print("sparkwarden restart --dry-run: nothing will be touched. The plan:")
    for index, (name, what) in enumerate(steps, start=1):
        print(f"[{index}/{len(STEPS)}] {name:<13}{what}")
    return 0
