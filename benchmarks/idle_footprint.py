"""``sparkwarden run`` watching one container at the default intervals: memory and CPU.

    .venv/bin/python benchmarks/idle_footprint.py [--idle-seconds 300]

Targets: RSS <= 40 MiB; CPU <= 0.2 % of one core.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one
from devtools.standin.stage import wait_healthy

RSS_MIB = 40.0
CPU_PERCENT = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--idle-seconds", type=int, default=300, help="how long to watch (300)")


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    llm, port = bench.stage.llm("idle-llm")
    wait_healthy(port)
    config = bench.config(
        "idle", llm, port, [], llm={"poll_interval": "1s"}, memory={"start_min_available_gib": 1}
    )
    daemon = bench.daemon(config)
    ps = psutil.Process(daemon.pid)
    time.sleep(5)
    cpu0, t0 = sum(ps.cpu_times()[:2]), time.monotonic()
    rss, anon = [], []
    end = t0 + args.idle_seconds
    while time.monotonic() < end:
        rollup = smaps_rollup(daemon.pid)
        rss.append(rollup["Rss"] / 1024)
        anon.append(rollup["Anonymous"] / 1024)
        time.sleep(min(10.0, max(0.0, end - time.monotonic())))
    cpu = (sum(ps.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0) * 100
    rollup = smaps_rollup(daemon.pid)
    threads = ps.num_threads()
    daemon.stop()
    return {
        "seconds": args.idle_seconds,
        "cpu_percent": cpu,
        "rss_mib_max": max(rss),
        "anon_mib_max": max(anon),
        "pss_mib": rollup["Pss"] / 1024,
        "threads": threads,
    }


def smaps_rollup(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0])
    return out


def lines(r: dict[str, Any]) -> list[Line]:
    return [
        Line(
            f"idle RSS over {r['seconds']}s, MiB",
            r["rss_mib_max"],
            f"anon {r['anon_mib_max']:.1f}, PSS {r['pss_mib']:.1f}",
            f"<= {RSS_MIB:g}",
            r["rss_mib_max"] <= RSS_MIB,
        ),
        Line(
            "idle CPU, % of one core",
            r["cpu_percent"],
            "",
            f"<= {CPU_PERCENT:g}",
            r["cpu_percent"] <= CPU_PERCENT,
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
