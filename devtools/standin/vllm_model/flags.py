"""The command line, as vLLM reads it: the stand-in's flags (fault modes, traffic, nodes), vLLM's
spellings of them (``--a_b`` for ``--a-b``), and every real vLLM flag accepted and ignored.

So a test can give a stand-in the command line of a real server.
"""

from __future__ import annotations

import argparse
import os

from . import __doc__ as OVERVIEW
from .traffic import contention_law


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=OVERVIEW)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="0.0.0.0", help="as vLLM's; 127.0.0.1 outside a container")
    p.add_argument("--model", default="standin/Qwen3.6-35B-A3B-NVFP4")
    p.add_argument(
        "--role",
        choices=["llm", "voice"],
        default="llm",
        help="voice: only sleep and exit on SIGTERM, like a speech container",
    )
    p.add_argument("--boot-delay", type=float, default=0.0, help="port closed this long")
    p.add_argument("--mode", default="ok", choices=["ok", "never-healthy", "chat-fails", "zombie"])
    p.add_argument("--error-shape", default="nested", choices=["nested", "flat"])
    p.add_argument(
        "--crash-after",
        type=float,
        default=None,
        help="the engine core dies this long after the process starts: exit 1 while loading; "
        "serving, /health 503 for --dying-for, then exit 0 (as vLLM 0.32.0 does)",
    )
    p.add_argument(
        "--dying-for",
        type=float,
        default=0.5,
        help="a serving engine's death: /health 503 this long before the server exits 0",
    )
    p.add_argument(
        "--crash-once",
        action="store_true",
        help="--crash-after only on the container's first start (a mark in its own /tmp)",
    )
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--stop-delay", type=float, default=0.0, help="teardown time after SIGTERM")
    p.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"))
    p.add_argument("--spec-decode", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--metrics", default="ok", choices=["ok", "missing", "garbage", "no-stats"])
    p.add_argument("--k", type=int, default=5, help="draft tokens per draft")
    p.add_argument("--drafts-per-s", type=float, default=40.0)
    p.add_argument("--acceptance", type=float, default=0.6)
    p.add_argument("--decay-to", type=float, default=None)
    p.add_argument(
        "--decay-after", type=float, default=0.0, help="seconds before a decay (SIGUSR2: at once)"
    )
    p.add_argument("--decay-over", type=float, default=60.0)
    p.add_argument("--running", type=float, default=0.0)
    p.add_argument("--waiting", type=float, default=0.0)
    p.add_argument(
        "--stall", action="store_true", help="tokens frozen, requests running, chats hang"
    )
    p.add_argument(
        "--stuck-gauge",
        action="store_true",
        help="no traffic but num_requests_running stuck at --running; chats are answered",
    )
    p.add_argument("--token-delay", type=float, default=0.0, help="seconds per generated token")
    p.add_argument(
        "--wedge-after",
        type=float,
        default=None,
        help="wedge this long after serving, as a SIGSTOPped worker (SIGUSR1: at once): /health "
        "and /v1/models 200, every chat hangs, every counter and gauge frozen",
    )
    p.add_argument(
        "--prefill-tokens-per-s",
        type=float,
        default=0.0,
        help="a request's prompt (a token a word) is prefilled at this pace before its first "
        "token, nothing counted meanwhile (1092: a 27B dense's 30 s at 32k on a Spark); 0: at once",
    )
    p.add_argument("--vllm-version", default="0.33.0", help="what GET /version says")
    p.add_argument("--sleep-level", type=int, choices=[0, 1, 2], default=None, help="start asleep")
    p.add_argument(
        "--max-num-queued-reqs", type=int, default=None, help="as vLLM 0.33: 503 past this many"
    )
    p.add_argument("--tool-call-parser", default=None, help="adds the parser's vllm: counter")
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=0.0,
        help="as vLLM 0.27.0 on: 0 cuts running requests at SIGTERM, more lets them finish "
        "and refuses new ones with HTTP 500 (vllm/renderers/base.py 0.32.0:94)",
    )
    traffic = p.add_argument_group("per-request drafting (--traffic; the drafting canary)")
    traffic.add_argument(
        "--traffic", default="", help="classes the users' traffic swings through, e.g. math,prose"
    )
    traffic.add_argument("--law", default="geometric", choices=["geometric", "deeper-easier"])
    traffic.add_argument("--swing-every", type=float, default=30.0, help="seconds per class")
    traffic.add_argument("--busy-for", type=float, default=20.0, help="users this long...")
    traffic.add_argument("--idle-for", type=float, default=0.0, help="...then nobody this long")
    traffic.add_argument("--users", type=float, default=3.0, help="requests running when busy")
    traffic.add_argument("--long-context-every", type=float, default=0.0)
    traffic.add_argument("--long-context-for", type=float, default=0.0)
    traffic.add_argument("--long-context-factor", type=float, default=0.8)
    traffic.add_argument("--steps-per-s", type=float, default=200.0, help="a request's pace")
    traffic.add_argument(
        "--decay-kind", default="none", choices=["none", "whole", "per-token", "hot"]
    )
    traffic.add_argument("--decay-depth", type=float, default=0.6)
    traffic.add_argument("--hot-class", default="math", help="--decay-kind hot hits only this")
    traffic.add_argument(
        "--decay-once", default="", help="a marker file: once it exists, restarts are healthy"
    )
    traffic.add_argument(
        "--per-request-spec-decode-metrics",
        choices=["detailed", "none", "summary"],
        default="none",
        help="vLLM 0.29.0 on: the request's own spec-decode stats in its answer's metrics",
    )
    traffic.add_argument(
        "--trim-above", type=float, default=None, help="while more than this many run..."
    )
    traffic.add_argument(
        "--trim-to", type=int, default=2, help="...each verify step drafts this many tokens"
    )
    traffic.add_argument(
        "--contention",
        type=contention_law,
        default="none",
        help="how concurrent requests share the engine: none, serial or batched:SLOPE",
    )
    nodes = p.add_argument_group("several nodes as one engine (vLLM's own, no Ray)")
    nodes.add_argument("--nnodes", type=int, default=1, help="nodes in the engine")
    nodes.add_argument("--node-rank", type=int, default=0)
    nodes.add_argument("--master-addr", default="127.0.0.1", help="rank 0's address")
    nodes.add_argument("--master-port", type=int, default=29501, help="rank 0's rendezvous")
    nodes.add_argument("--headless", action="store_true", help="a rank without the API")
    nodes.add_argument(
        "--collective-timeout",
        type=float,
        default=300.0,
        help="VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS: a lost rank hangs requests this long, then kills",
    )
    ray = p.add_argument_group("a Ray cluster (--distributed-executor-backend ray)")
    ray.add_argument("--distributed-executor-backend", default=None)
    ray.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    ray.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    ray.add_argument(
        "--pg-timeout", type=float, default=1800.0, help="vLLM's PG_WAIT_TIMEOUT (a constant)"
    )
    p.add_argument("--verbose", action="store_true")
    # Real vLLM flags (--gpu-memory-utilization, --speculative-config, ...) are accepted and
    # ignored, so doctor's tests can give a stand-in the command line of a real server.
    args, _vllm_flags = p.parse_known_args(vllm_spelling(argv))
    if not 0 <= args.trim_to <= args.k:
        p.error(f"--trim-to must be 0..--k ({args.k}), got {args.trim_to}")
    return args


def vllm_spelling(argv: list[str]) -> list[str]:
    """Flags as vLLM's ``FlexibleArgumentParser`` reads them: underscores in a ``--name`` (up
    to ``=`` or the first ``.``) are dashes, so ``--per_request_spec_decode_metrics=summary``
    is ``--per-request-spec-decode-metrics=summary``."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            name, dot, rest = key[2:].partition(".")
            arg = f"--{name.replace('_', '-')}{dot}{rest}{eq}{value}"
        out.append(arg)
    return out
