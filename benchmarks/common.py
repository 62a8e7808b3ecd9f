"""What every benchmark shares: spreads, the machine, a stage of stand-in containers, the real
daemon (``tests/kits/daemonkit.py``, the same wrapper the tests use) and report lines that print
each target beside its measurement.

Each benchmark is a file of its own with ``measure(bench, args)`` and ``lines(result)``; run one
alone (``.venv/bin/python benchmarks/status_speed.py``) or all of them with ``benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import docker
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from devtools.standin.stage import Stage, write_config  # noqa: E402
from tests.kits.daemonkit import DaemonProcess  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {
        "n": len(values),
        "median": statistics.median(values),
        "p90": pct(0.9),
        "p95": pct(0.95),
        "min": ordered[0],
        "max": ordered[-1],
    }


def machine() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "arch": platform.machine(),
        "mem_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_1m": round(os.getloadavg()[0], 2),
    }


@dataclass(frozen=True)
class Line:
    """One measurement with its target beside it."""

    what: str
    median: float
    spread: str
    target: str
    met: bool


def median_at_most(what: str, r: dict[str, Any], spread_text: str, limit: float) -> Line:
    return Line(what, r["median"], spread_text, f"<= {limit:g}", r["median"] <= limit)


def table(lines: list[Line]) -> str:
    rows = [("what", "median", "spread", "target", "met")]
    rows += [
        (x.what, f"{x.median:.3g}", x.spread, x.target, "yes" if x.met else "NO") for x in lines
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
    )


class Bench:
    """Stand-in containers and configs in a scratch dir; everything made is removed by close()."""

    def __init__(self) -> None:
        self.stage = Stage(docker.from_env())
        self.dir = Path(tempfile.mkdtemp(prefix="sparkwarden-bench-"))
        self.daemons: list[DaemonProcess] = []

    def config(
        self,
        name: str,
        llm_name: str,
        port: int,
        voice_names: list[str],
        **sections: dict[str, Any],
    ) -> Path:
        base = self.dir / name
        base.mkdir()
        merged: dict[str, dict[str, Any]] = {
            "control": {"socket": str(base / "control.sock"), "group": ""}
        }
        for key, values in sections.items():
            merged.setdefault(key, {}).update(values)
        return write_config(
            base / "sparkwarden.toml", base / "state", [llm_name], port, voice_names, **merged
        )

    def daemon(self, config: Path) -> DaemonProcess:
        """``sparkwarden run`` as a process, answering on its socket when this returns."""
        daemon = DaemonProcess(config, config.parent / "daemon.log")
        self.daemons.append(daemon)  # before it starts: one that never answers is ended too
        return daemon.start()

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.stop()
        self.stage.cleanup()


Measure = Callable[[Bench, argparse.Namespace], dict[str, Any]]


def main_one(module: ModuleType, argv: list[str] | None = None) -> int:
    """Run one benchmark file alone: its arguments, its lines, its JSON."""
    parser = argparse.ArgumentParser(
        description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    bench = Bench()
    try:
        result = module.measure(bench, args)
    finally:
        bench.close()
    name = Path(str(module.__file__)).stem  # run as a script, the module is "__main__"
    save({"machine": machine(), "when": time.strftime("%F %T"), name: result}, f"{name}.json")
    print(table(module.lines(result)))
    return 0


def save(results: dict[str, Any], file_name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / file_name
    path.write_text(json.dumps(results, indent=2))
    return path
