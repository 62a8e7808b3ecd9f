"""Every benchmark, on the real Docker engine with the stand-in vLLM: one table, one JSON.

Each benchmark is a file of its own (run it alone for just that one); this runs them in turn,
prints each measurement with its target beside it, and writes benchmarks/results/latest.json.
It never fails on a missed target: the machines are shared and noisy, so it reports.

    .venv/bin/python benchmarks/run.py                 # everything (about 10 minutes)
    .venv/bin/python benchmarks/run.py --only metrics_parse,status_speed --idle-seconds 60
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, machine, save, table

ALL = (
    "metrics_parse",
    "drafting_shape",
    "status_speed",
    "crash_detection",
    "wedge_detection",
    "restart_overhead",
    "idle_footprint",
    "gateway",
    "cluster_restart",
    "replicas",
    "real_engine",
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", default=",".join(ALL), help="comma-separated benchmark files")
    modules = [importlib.import_module(f"benchmarks.{name}") for name in ALL]
    for module in modules:
        module.add_arguments(parser)
    args = parser.parse_args()
    chosen = [m for m in modules if m.__name__.rsplit(".", 1)[-1] in args.only.split(",")]
    results: dict[str, object] = {"machine": machine(), "when": time.strftime("%F %T")}
    lines: list[Line] = []
    bench = Bench()
    try:
        for module in chosen:
            name = module.__name__.rsplit(".", 1)[-1]
            print(f"benchmark: {name} ...", file=sys.stderr, flush=True)
            result = module.measure(bench, args)
            results[name] = result
            lines += module.lines(result)
    finally:
        bench.close()
    path = save(results, "latest.json")
    m = results["machine"]
    assert isinstance(m, dict)
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, Python {m['python']}")
    print(table(lines))
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
