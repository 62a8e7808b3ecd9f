"""The process's life: boot (slow, crashing, waiting for its nodes), serving, and SIGTERM as
vLLM 0.33's ``--shutdown-timeout`` (drain, abort, teardown), plus the voice role's idle life.

``main`` is what ``vllm_standin.py`` and the image's ``vllm`` console script run.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path

from .api import Handler
from .engine import Engine
from .flags import parse_args
from .nodes import Ranks, RayPlacement, headless


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.per_request_spec_decode_metrics != "none" and not args.spec_decode:
        raise SystemExit(  # vLLM's VllmConfig (0.29.0 on) refuses to start, with these words
            "ValueError: --per-request-spec-decode-metrics requires speculative decoding "
            "to be enabled (via --speculative-config)."
        )
    engine: Engine | None = None

    def shut_down() -> None:
        if engine is not None:
            # 0: no drain at all, the engine core is killed at once (nothing is refused: unanswered)
            engine.stopping = args.shutdown_timeout > 0
            deadline = time.monotonic() + args.shutdown_timeout
            while engine.extra_running and time.monotonic() < deadline:
                time.sleep(0.05)
            print(f"SIGTERM: {engine.extra_running} running request(s) aborted", flush=True)
            engine.aborting = True
            engine.tearing_down = True
        print("SIGTERM: tearing down", flush=True)
        time.sleep(args.stop_delay)
        os._exit(0)

    def on_term(_sig: int, _frame: object) -> None:
        # A thread of its own: the server keeps refusing new requests fast while running ones end.
        threading.Thread(target=shut_down, daemon=True).start()

    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_sigterm else on_term)
    if args.role == "voice":
        print("voice stand-in ready", flush=True)
        while True:
            time.sleep(3600)
    crashed_before = Path("/tmp/standin-crashed")  # the container's own layer: kept across starts
    if args.crash_after is not None and not (args.crash_once and crashed_before.exists()):

        def crash() -> None:
            time.sleep(args.crash_after)
            print("EngineCore died", flush=True)
            crashed_before.touch()
            if engine is None:  # while loading: the start fails, exit 1
                os._exit(1)
            # serving: /health says 503 until the API server's watchdog (every 5 s, or at
            # once on a request) ends the server, which exits 0 (vllm/entrypoints/launcher.py
            # 0.32.0:312-332; measured on the real 0.32.0: 0.4 to 4 s, exit code 0)
            engine.dead = True
            time.sleep(args.dying_for)
            os._exit(0)

        threading.Thread(target=crash, daemon=True).start()
    if args.headless:
        headless(args)
    print(f"loading for {args.boot_delay}s (port closed)", flush=True)
    time.sleep(args.boot_delay)
    ranks = Ranks(args) if args.nnodes > 1 else None
    if ranks is not None:
        ranks.gather()
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    if args.distributed_executor_backend == "ray":
        RayPlacement(args, world).gather()
    elif world > 1 and args.nnodes == 1:  # vllm/config/parallel.py 0.33.0:1066 (0.12 on)
        raise SystemExit(
            f"ValueError: World size ({world}) is larger than the number of available GPUs (1) "
            "in this node. If this is intentional and you are using:\n- ray, set "
            "'--distributed-executor-backend ray'.\n- multiprocessing, set '--nnodes' "
            "appropriately."
        )
    engine = Engine(args)
    engine.ranks = ranks
    if ranks is not None:
        ranks.on_lost = engine.wedge
    signal.signal(signal.SIGUSR1, lambda _sig, _frame: _wedge(engine))
    if (traffic := engine.traffic) is not None:
        signal.signal(signal.SIGUSR2, lambda _sig, _frame: traffic.begin_decay())
    if args.wedge_after is not None:
        threading.Timer(args.wedge_after, _wedge, (engine,)).start()
    server = ThreadingHTTPServer((args.host, args.port), partial(Handler, engine, args))
    server.daemon_threads = True
    print(f"serving {args.model} on :{args.port} mode={args.mode}", flush=True)
    server.serve_forever()


def _wedge(engine: Engine) -> None:
    """The worker stops (``--wedge-after``, or SIGUSR1: what ``kill -STOP`` of vLLM's worker
    does); in a thread, since a signal handler may interrupt the lock it takes."""

    def wedge() -> None:
        engine.wedge()
        print("wedged: the worker makes no progress (health 200, chats hang)", flush=True)

    threading.Thread(target=wedge, daemon=True).start()
