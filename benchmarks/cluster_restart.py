"""A two-node cluster (tests/kits/clusterkit.py: namespaces, dockerds, sshds, real SSH):
``sparkwarden cluster preflight`` time, ``sparkwarden cluster restart`` against a bare script
doing the same steps over SSH, in turn, ``sparkwarden status`` on the head (every node), and how
soon ``cluster status`` names a killed worker.

    .venv/bin/python benchmarks/cluster_restart.py [--cluster-pairs 5]

Targets: preflight median <= 3 s; restart overhead median <= 6 s over the bare script (it
preflights and confirms every node over SSH, which the bare script never does); a dead worker
named by the first status look after the kill, within 3 s; status on the head median <= 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one, median_at_most, spread
from tests.kits.clusterkit import ClusterKit, Engine

#: The same steps with no checks, as an operator's script over SSH: stop the head then the
#: worker, drop caches on both, start the worker then the head, poll /health, one chat.
BARE = """set -e
SSH="ssh -F {ssh_config} -o BatchMode=yes -o ConnectTimeout=3"
docker stop -t 10 {head} >/dev/null
$SSH w1 docker stop -t 10 {worker} >/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches &
$SSH w1 'sync; echo 3 > /proc/sys/vm/drop_caches'
wait
$SSH w1 docker start {worker} >/dev/null
docker start {head} >/dev/null
URL=http://127.0.0.1:{port}
until curl -fs $URL/health >/dev/null; do sleep 0.2; done
first='import json, sys; print(json.load(sys.stdin)["data"][0]["id"])'
model=$(curl -fs $URL/v1/models | python3 -c "$first")
ask='[{{"role": "user", "content": "ready?"}}]'
body='{{"model": "'$model'", "messages": '$ask', "max_tokens": 8}}'
curl -fs $URL/v1/chat/completions -H 'Content-Type: application/json' -d "$body" >/dev/null
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster-pairs", type=int, default=5, help="cluster restart pairs (5)")


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    kit = ClusterKit(("head", "w1"))
    scratch = Path(tempfile.mkdtemp(prefix="sw-bench-cluster-", dir=bench.dir))
    engine = Engine(kit, scratch)
    try:
        engine.wait_serving()
        bare = BARE.format(
            head=engine.head, worker=engine.worker, port=engine.port, ssh_config=kit.ssh_config
        )

        def timed(*argv: str, code: int = 0) -> float:
            began = time.perf_counter()
            result = kit.head.docker.run(*argv, timeout=300)
            assert isinstance(result, subprocess.CompletedProcess)
            assert result.returncode == code, result.stdout + result.stderr
            return time.perf_counter() - began

        preflight = [timed(*engine.argv("cluster", "preflight")) for _ in range(5)]
        ours, plain = [], []
        for _ in range(args.cluster_pairs):
            plain.append(timed("bash", "-c", bare))
            engine.wait_serving()
            ours.append(timed(*engine.argv("cluster", "restart")))
            engine.wait_serving()
        runs = json.loads(engine.cli("history", "--json", "--limit", "50").stdout)
        inside = [
            float(step["detail"]["seconds"])
            for run in runs
            for step in run["steps"]
            if step["name"] == "preflight" and "seconds" in step["detail"]
        ]
        # where a restart's seconds go: each step as the journal timed it, and what the
        # process spends outside the run (start-up, lock, journal, closing the SSH links)
        restarts = [run for run in runs if run["result"] == "ok" and run["duration_s"]]
        took: dict[str, list[float]] = {}
        for run in restarts:
            for step in run["steps"]:
                took.setdefault(step["name"], []).append(step["duration_s"])
        steps = {name: spread(seconds) for name, seconds in took.items()}
        outside = [o - run["duration_s"] for o, run in zip(ours, reversed(restarts), strict=False)]
        look = [timed(*engine.argv("cluster", "status")) for _ in range(5)]
        # the everyday status with [cluster]: every node too (1: no daemon on the bench's head)
        status = [timed(*engine.argv("status"), code=1) for _ in range(5)]
        engine.stages["w1"].client.containers.get(engine.worker).kill()
        killed = time.perf_counter()
        while engine.status()["state"] != "crashed":
            pass
        detection = time.perf_counter() - killed
    finally:
        engine.close()
        kit.close()
    diffs = [o - b for o, b in zip(ours, plain, strict=True)]
    print("a cluster restart's seconds, median (max) of each step as the journal timed it:")
    for name, figures in steps.items():
        print(f"  {name:<16} {figures['median']:6.2f} ({figures['max']:.2f})")
    if outside:
        print(f"  outside the run  {statistics.median(outside):6.2f} ({max(outside):.2f})")
    return {
        "preflight": spread(preflight),
        "preflight_in_run": spread(inside),
        "load_1m": os.getloadavg()[0],
        "sparkwarden": spread(ours),
        "bare": spread(plain),
        "overhead": spread(diffs),
        "ratio_of_medians": statistics.median(ours) / statistics.median(plain),
        "steps": steps,
        "outside_run": spread(outside) if outside else {},
        "status_look": spread(look),
        "status_on_head": spread(status),
        "dead_worker_detected_s": detection,
    }


def lines(r: dict[str, Any]) -> list[Line]:
    return [
        median_at_most(
            "cluster preflight, s", r["preflight"], f"max {r['preflight']['max']:.2f}", 3.0
        ),
        Line(
            f"cluster restart overhead ({r['overhead']['n']} pairs), s",
            r["overhead"]["median"],
            f"ratio {r['ratio_of_medians']:.2f}; bare {r['bare']['median']:.2f}s, "
            f"ours {r['sparkwarden']['median']:.2f}s",
            "<= 6",
            r["overhead"]["median"] <= 6.0,
        ),
        median_at_most(
            "preflight step inside a run, s",
            r["preflight_in_run"],
            f"load {r['load_1m']:.1f} on {os.cpu_count()} cores",
            3.0,
        ),
        median_at_most(
            "cluster status look, s", r["status_look"], f"max {r['status_look']['max']:.2f}", 3.0
        ),
        median_at_most(
            "status on the head, every node, s",
            r["status_on_head"],
            f"max {r['status_on_head']['max']:.2f}",
            3.0,
        ),
        Line(
            "dead worker named after the kill, s",
            r["dead_worker_detected_s"],
            "one look",
            "<= 3",
            r["dead_worker_detected_s"] <= 3.0,
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
