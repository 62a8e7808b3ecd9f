"""From Docker's ``die`` of a killed LLM to the crash run's start in the journal.

    .venv/bin/python benchmarks/crash_detection.py [--kills 20]

Target: median <= 0.5 s, p95 <= 1 s.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one, spread
from devtools.standin.stage import wait_healthy
from tests.kits.commands import history
from tests.kits.daemonkit import wait_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kills", type=int, default=20, help="docker kills (20)")


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    llm, port = bench.stage.llm("crash-llm", "--boot-delay", "0.2")
    wait_healthy(port)
    config = bench.config(
        "crash", llm, port, [], budget={"max_runs": 1000, "backoff": "0s"}, schedule={"cron": ""}
    )
    daemon = bench.daemon(config)
    died: list[float] = []
    listener = bench.stage.client.events(
        decode=True, filters={"type": "container", "container": [llm], "event": ["die"]}
    )
    threading.Thread(
        target=lambda: [died.append(e["timeNano"] / 1e9) for e in listener], daemon=True
    ).start()
    latencies, from_kill = [], []
    try:
        for i in range(1, args.kills + 1):
            container = bench.stage.client.containers.get(llm)
            asked = time.time()
            container.kill()
            run = wait_for(f"crash run {i}", lambda n=i: _finished_crash_run(config, n), 60)
            started = datetime.fromisoformat(run["started_at"]).timestamp()
            latencies.append(started - died[i - 1])
            from_kill.append(started - asked)
            time.sleep(0.5)
    finally:
        listener.close()
        daemon.stop()
    return {**spread(latencies), "from_kill_call": spread(from_kill)}


def _finished_crash_run(config: Path, count: int) -> dict[str, Any] | None:
    runs = [r for r in history(config) if r["reason"] == "crash"]
    if len(runs) >= count and runs[0]["result"] != "running":
        assert runs[0]["result"] == "ok", runs[0]
        return runs[0]
    return None


def lines(r: dict[str, Any]) -> list[Line]:
    return [
        Line(
            f"crash detection ({r['n']} kills), s",
            r["median"],
            f"p95 {r['p95']:.3f}; from the kill call {r['from_kill_call']['median']:.3f}",
            "p50 <= 0.5, p95 <= 1",
            r["median"] <= 0.5 and r["p95"] <= 1,
        )
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
