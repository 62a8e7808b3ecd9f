"""Wall time of the whole ``sparkwarden status`` process, daemon up and daemon down.

    .venv/bin/python benchmarks/status_speed.py [--repeat 15]

Target (issue 12): median <= 120 ms either way. ``status`` reads only the state dir and socket
from the config (tomllib) and renders the daemon's snapshot: no config schema, no logger.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from typing import Any

if __package__ in (None, ""):
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, Bench, Line, main_one, median_at_most, spread
from devtools.standin.stage import wait_healthy

TARGET_MS = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=15, help="runs each way (15)")


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    llm, port = bench.stage.llm("status-llm")
    wait_healthy(port)
    config = bench.config("status", llm, port, [])

    def timed() -> float:
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "sparkwarden", "--config", str(config), "status"],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        return (time.perf_counter() - t) * 1000

    daemon = bench.daemon(config)
    up = [timed() for _ in range(args.repeat)]
    daemon.stop()
    down = [timed() for _ in range(args.repeat)]
    return {"daemon_up": spread(up), "daemon_down": spread(down)}


def lines(result: dict[str, Any]) -> list[Line]:
    return [
        median_at_most(
            f"sparkwarden status, {key.replace('_', ' ')}, ms", r, f"p90 {r['p90']:.0f}", TARGET_MS
        )
        for key, r in result.items()
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
