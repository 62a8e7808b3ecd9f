"""The healthy share of one window (the acceptance trigger's fit), k = 5 and k = 15 positions.

    .venv/bin/python benchmarks/drafting_shape.py [--fits 200]

Target: median <= 5 ms each (one fit per closed window).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

if __package__ in (None, ""):
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one, median_at_most, spread

TARGET_MS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fits", type=int, default=200, help="fits per k (200)")


def measure(_bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    from sparkwarden.evidence.draft_shape import healthy_share

    drafts = 50_000.0
    result = {}
    for k in (5, 15):
        # A prose/math evening, a fifth of the drafts spoilt: a hard case for the fit.
        accepted = [
            drafts * 0.8 * sum(w * a * (0.8 * a) ** i for a, w in ((0.3, 0.6), (0.78, 0.4)))
            for i in range(k)
        ]
        times = []
        for _ in range(args.fits):
            t = time.perf_counter()
            healthy_share(accepted, drafts)
            times.append((time.perf_counter() - t) * 1000)
        result[f"k{k}"] = spread(times)
    return result


def lines(result: dict[str, Any]) -> list[Line]:
    return [
        median_at_most(
            f"drafting health of a window, {k.replace('k', 'k=')}, ms",
            r,
            f"p95 {r['p95']:.3g}",
            TARGET_MS,
        )
        for k, r in result.items()
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
