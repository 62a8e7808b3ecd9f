"""``sparkwarden restart`` against a bare script doing the same steps (bare_restart.py), in turn.

    .venv/bin/python benchmarks/restart_overhead.py [--pairs 10]

Target: median overhead <= 1.5 s and a ratio of medians <= 1.10.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

if __package__ in (None, ""):
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, Bench, Line, main_one, spread
from devtools.standin.stage import wait_healthy

POLL_S = 0.2
BOOT_DELAY_S = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pairs", type=int, default=10, help="restart pairs (10)")


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    llm, port = bench.stage.llm("seq-llm", "--boot-delay", str(BOOT_DELAY_S))
    stt, tts = bench.stage.voice("stt"), bench.stage.voice("tts")
    wait_healthy(port)
    config = bench.config(
        "overhead",
        llm,
        port,
        [stt, tts],
        llm={"poll_interval": f"{POLL_S}s", "health_timeout": "60s"},
    )
    bare_argv = [
        sys.executable,
        "benchmarks/bare_restart.py",
        llm,
        str(port),
        str(POLL_S),
        stt,
        tts,
    ]
    ours_argv = [sys.executable, "-m", "sparkwarden", "--config", str(config), "restart"]

    def timed(argv: list[str]) -> float:
        t = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
        return time.perf_counter() - t

    ours, bare = [], []
    for _ in range(args.pairs):
        bare.append(timed(bare_argv))
        ours.append(timed(ours_argv))
    diffs = [o - b for o, b in zip(ours, bare, strict=True)]
    return {
        "sparkwarden": spread(ours),
        "bare": spread(bare),
        "overhead": spread(diffs),
        "ratio_of_medians": statistics.median(ours) / statistics.median(bare),
        "boot_delay_s": BOOT_DELAY_S,
        "poll_s": POLL_S,
    }


def lines(r: dict[str, Any]) -> list[Line]:
    return [
        Line(
            f"restart overhead ({r['overhead']['n']} pairs), s",
            r["overhead"]["median"],
            f"ratio {r['ratio_of_medians']:.3f}; bare {r['bare']['median']:.2f}s",
            "<= 1.5, ratio <= 1.10",
            r["overhead"]["median"] <= 1.5 and r["ratio_of_medians"] <= 1.10,
        )
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
