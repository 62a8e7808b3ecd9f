"""A rolling nightly restart of two replicas, as users see it through real LiteLLM and Nginx.

Two simulated Sparks on this machine (tests/kits/replicaskit.py): each its own stand-in engine in
a container, its own Nginx running the shipped example, its own sparkwarden daemon; one LiteLLM
running the shipped replica example (one alias, a deployment per Spark). Both Sparks are
scheduled at the same minute while users stream answers through LiteLLM from before the first
restart to after the last. Measured twice: today's behaviour (each daemon on its own, no
``[replicas]``), and the replica set (planned restarts in turn, each Spark out of the gateway's
rotation before its drain and back after its probes). A watch looks every 0.1 s at who is out
(its flag up, or its engine not answering /health).

    .venv/bin/python benchmarks/replicas.py [--replica-users 3] [--nights 1] [--boot 15]

The stand-in engine takes ``--boot`` seconds to load after each start (a Spark's warm restart
takes about two minutes): the window in which a Spark restarting alone is out.

Targets, for the replica set: 0 failed and 0 empty answers, never both out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one
from tests.kits.replicaskit import Night, ReplicaSet, night, replica_set

#: The stand-in answers as a small engine does; its drain lets running answers finish.
STANDIN = ("--token-delay", "0.02", "--shutdown-timeout", "30")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # named for this benchmark: benchmarks/run.py takes every benchmark's options at once
    parser.add_argument("--replica-users", type=int, default=3, help="users streaming (3)")
    parser.add_argument("--nights", type=int, default=1, help="nights per behaviour (1)")
    parser.add_argument(
        "--boot", type=float, default=15.0, help="the engine's load time, s (15; a Spark's ~120)"
    )


def summary(seen: Night) -> dict[str, Any]:
    kinds = [r.kind for r in seen.results]
    runs = {name: [r["result"] for r in done] for name, done in seen.runs.items()}
    return {
        "sent": len(kinds),
        "failed": sum(k in ("refused", "cut") for k in kinds),
        "cut": kinds.count("cut"),
        "empty": kinds.count("empty"),
        "longest_one_out_s": round(seen.watch.longest_out, 1),
        "both_out_s": round(len(seen.watch.both_out) * 0.1, 1),
        "runs": runs,
        "seconds": round(seen.seconds, 1),
    }


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "clients": args.replica_users,
        "boot_s": args.boot,
        "today": [],
        "in_turn": [],
    }
    with replica_set(bench.dir / "path") as two:
        nights(bench, args, two, result)
    return result


def nights(bench: Bench, args: argparse.Namespace, two: ReplicaSet, result: dict[str, Any]) -> None:
    """Each night on the one users' path: today's behaviour, then the replica set's."""
    for _ in range(args.nights):
        for key, replicas in (("today", False), ("in_turn", True)):
            standin = (*STANDIN, "--boot-delay", f"{args.boot:g}")
            home = bench.dir / f"{key}-{len(result[key])}"
            home.mkdir()
            with two.night_in(bench.stage, home, standin):
                result[key].append(summary(night(two, replicas, args.replica_users)))
            bench.stage.cleanup()  # the next night's Sparks take the same names and ports


def lines(r: dict[str, Any]) -> list[Line]:
    out: list[Line] = []
    for key, label in (("today", "today (each on its own)"), ("in_turn", "replica set (in turn)")):
        nights = r[key]
        failed = sum(n["failed"] for n in nights)
        empty = sum(n["empty"] for n in nights)
        both = max(n["both_out_s"] for n in nights)
        longest = max(n["longest_one_out_s"] for n in nights)
        sent = sum(n["sent"] for n in nights)
        cut = sum(n["cut"] for n in nights)
        target = key == "in_turn"
        out += [
            Line(
                f"{label}: requests failed of {sent} sent",
                failed,
                f"cut mid-answer {cut}; runs {[n['runs'] for n in nights]}",
                "0" if target else "counted",
                failed == 0 or not target,
            ),
            Line(
                f"{label}: empty answers",
                empty,
                "",
                "0" if target else "counted",
                empty == 0 or not target,
            ),
            Line(
                f"{label}: both replicas out, s",
                both,
                f"longest one out {longest:.1f} s",
                "0" if target else "counted",
                both == 0 or not target,
            ),
        ]
    return out


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
