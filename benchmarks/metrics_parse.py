"""Parse of a realistic /metrics page (histograms and all), as the daemon does it.

    .venv/bin/python benchmarks/metrics_parse.py [--parses 300]

Target: median <= 5 ms (the daemon parses one page per scrape); prometheus_client's full parser
is timed beside it for scale.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

if __package__ in (None, ""):
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one, median_at_most, spread

TARGET_MS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--parses", type=int, default=300, help="parses (300)")


def measure(_bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    from benchmarks.realistic_metrics import page
    from sparkwarden.vllm import metrics

    text = page()
    ours, full = [], []
    for _ in range(args.parses):
        t = time.perf_counter()
        metrics.parse(text)
        ours.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        list(text_string_to_metric_families(text))
        full.append((time.perf_counter() - t) * 1000)
    return {
        **spread(ours),
        "page_lines": text.count("\n"),
        "unfiltered_median_ms": statistics.median(full),
    }


def lines(r: dict[str, Any]) -> list[Line]:
    unfiltered = f"unfiltered {r['unfiltered_median_ms']:.3g}"
    what = f"parse /metrics ({r['page_lines']} lines), ms"
    return [median_at_most(what, r, f"p95 {r['p95']:.3g}; {unfiltered}", TARGET_MS)]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
