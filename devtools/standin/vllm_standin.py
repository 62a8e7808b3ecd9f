#!/usr/bin/env python3
"""A stand-in for vLLM's OpenAI server, faithful to the surface sparkwarden reads.

Runs on the host's Python with the standard library only, so it works inside a bare test
container that bind-mounts ``/usr``. Endpoints and exposition follow a real server:

- ``GET /health``: empty 200; 503 when the engine is dead; the port is closed while "loading".
- ``GET /version``: ``{"version": "0.33.0"}`` (``--vllm-version``).
- ``GET /v1/models``: ``{"object": "list", "data": [{"id": MODEL, ...}]}``.
- ``POST /v1/chat/completions``: a chat completion, or vLLM's error shapes.
- ``GET /metrics``: Prometheus text as ``prometheus_client`` writes it, with the spec-decode
  counters (``_total`` + ``_created``), request gauges, ``prompt_tokens`` and ``generation_tokens``.

Fault modes (flags): slow boot, never healthy, chat fails, zombie (healthy, dies on the first
chat), crash after N seconds (on every start, or once), acceptance decay, stalled engine (chats
hang), stuck request gauge (chats answered), ignore SIGTERM, broken metrics, --disable-log-stats.

Several nodes as one engine (``--nnodes``, vLLM's own multi-node mode): rank 0 keeps its port
closed until every other rank joined; a rank lost later makes requests hang, then the engine
die, while ``/health`` stays 200; a ``--headless`` rank outlives its head and never rejoins.

With ``--distributed-executor-backend ray`` (a Ray cluster, see ``ray_standin.py``) the engine
finds its cluster as ``ray.init()`` does and keeps its port closed until the cluster has one GPU
(one Spark) per rank of ``--tensor-parallel-size`` x ``--pipeline-parallel-size``, logging vLLM's
"Waiting for creating a placement group" (and failing after 1800 s, ``PG_WAIT_TIMEOUT``); a node
of its placement group dying ends the engine at once ("RayWorkerProc rank=... died unexpectedly,
shutting down executor.", vllm/v1/executor/ray_executor_v2.py 0.33.0), and so does its GCS going.

Answers take ``--token-delay`` per token and stream (``"stream": true``) as vLLM's SSE chunks, so
requests are really in flight and counted in ``num_requests_running``.

SIGTERM is vLLM 0.33's ``--shutdown-timeout`` (0.27.0 on; vllm/entrypoints/launchers/launcher.py
``handle_shutdown``, vllm/v1/engine/core.py ``_handle_shutdown``): with 0, its default, the running
requests are cut mid-stream and the engine core killed at once (vllm/v1/utils.py ``shutdown``:
terminate, then kill when the timeout is 0). With more, the running requests may finish for up to
that long, and a request arriving meanwhile is answered at once, HTTP 200 with no token and
``finish_reason`` "abort" (``EngineCore._reject_add_in_shutdown``, core.py 0.33.0:1785), while
``/health`` still says 200: the HTTP server serves until the engine client has stopped. Then the
teardown (``--stop-delay``), during which a new request gets no answer until the process exits.

``--sleep-level N`` starts it asleep as after vLLM's ``POST /sleep?level=N`` (``POST /sleep`` and
``POST /wake_up`` work too): ``vllm:engine_sleep_state`` awake 0, ``/health`` 200, and a chat is
taken and queued, unanswered, until the engine wakes (core.py 0.33.0:993-1029, ``sleep`` pauses
the scheduler: "Requests are still accepted but not processed"; 0.34.0 the same). Only the
dev-mode ``POST /pause`` (``pause_generation``, ``POST /resume`` ends it) refuses chats with 503
(core.py 0.33.0 ``_reject_add_while_paused``; 0.34.0:2456-2461: "Other pauses (e.g. sleep) leave
this policy unchanged"). ``--max-num-queued-reqs N``
turns away a request that finds N unfinished with 503, counted in
``vllm:admission_rejections_total`` (0.33.0). ``--tool-call-parser`` adds the parser's
``vllm:tool_call_parser_invocations_total`` to the page, also under ``--metrics no-stats``.

With ``--traffic`` each chat is drafted step by step at ``--steps-per-s``, and three options
make concurrent requests behave like a loaded engine:

- ``--per-request-spec-decode-metrics {none,summary,detailed}`` (vLLM 0.29.0 on; not in 0.28.0):
  the request's own spec-decode stats in ``metrics.speculative_decoding`` of the answer,
  or of the final usage chunk of a stream that asks ``stream_options.include_usage``; null for
  ``n > 1``. The same steps the /metrics counters count.
- ``--trim-above N --trim-to M``: while more than N requests run, each verify step drafts M
  tokens: vLLM 0.33's scheduler cuts a request's spec tokens to what is left of its token budget
  (``max_num_batched_tokens``, spent in order over the running requests, prefill chunks too)
  and to ``max_model_len``, and its dynamic speculative decoding
  (``num_speculative_tokens_per_batch_size``: K by batch-size range) does exactly this (0.12
  and 0.10 accept ``disable_by_batch_size`` but nothing reads it). A step drafting 0 counts no
  draft.
- ``--contention none|serial|batched:SLOPE``: ``none`` each request at its own pace whatever
  else runs; ``serial`` one request generates at a time, first come first served, the rest
  show in ``num_requests_waiting``; ``batched:SLOPE`` every decode step takes (1 + SLOPE (n-1))
  times as long with n requests running (continuous batching).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LABELS = 'engine="0",model_name="{model}"'


def go_float(value: float) -> str:
    """Numbers as prometheus_client writes them (``floatToGoString``): a faithful text."""
    value = float(value)
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


class Engine:
    """Simulated counters: traffic drafts tokens every second, acceptance follows the schedule."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ready_at = time.time()
        self.created_at = time.time()  # the counters' _created: new at every start
        self.drafts = 0.0
        self.draft_tokens = 0.0
        self.accepted = 0.0
        self.per_pos = [0.0] * args.k
        self.generation = 0.0
        self.prompt = 0.0
        self.running = args.running
        self.extra_running = 0  # chat requests being generated now
        self.lock = threading.Lock()
        self.chats = 0
        self.stopping = False  # SIGTERM seen: new requests are answered "abort"
        self.aborting = False  # running requests are cut
        self.tearing_down = False  # the engine core is gone: new requests get no answer
        self.sleep_level: int | None = args.sleep_level  # None: awake; asleep, requests queue
        self.paused = False  # POST /pause (pause_generation): new requests refused with 503
        self.slept = args.sleep_level is not None  # sleep was asked for: the gauge is shown
        self.rejected = dict.fromkeys(ADMISSION_REASONS, 0)
        self._last = time.monotonic()
        self._started = time.monotonic()
        self.traffic = Traffic(args) if args.traffic else None
        self.contention = Contention(args.contention)
        self.cond = threading.Condition(self.lock)
        self.queue: list[object] = []  # requests arrived and not finished, first come first
        self.work = 0.0  # the work clock: seconds of full pace each running request has had
        self.clock = time.monotonic
        self._work_at = self.clock()
        #: the other ranks, when this is rank 0 of several nodes (--nnodes)
        self.ranks: Ranks | None = None

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """A request being generated: the request gauge shows it, a graceful SIGTERM waits on it.
        Under ``--contention serial`` it first waits its turn (shown as waiting)."""
        ticket = object()
        with self.cond:
            self.queue.append(ticket)
            while (
                self.queue.index(ticket) >= self.contention.limit or self.sleep_level is not None
            ) and not self.aborting:  # its turn, and an engine awake: asleep, requests queue
                self.cond.wait(0.1)
            self._settle()
            self.extra_running += 1
        try:
            yield
        finally:
            with self.cond:
                self._settle()
                self.extra_running -= 1
                self.queue.remove(ticket)
                self.cond.notify_all()

    def load(self) -> float:
        """Requests running, as ``num_requests_running`` shows them (the caller holds the lock)."""
        return float(self.running + self.extra_running)

    def _settle(self) -> float:
        """Move the work clock to now at the pace the load allowed since (lock held): every
        running request has been slowed alike, so one clock serves them all."""
        now = self.clock()
        self.work += (now - self._work_at) / self.contention.slowdown(self.load())
        self._work_at = now
        return self.work

    def draft_length(self) -> int:
        """Tokens one verify step drafts now: K, or ``--trim-to`` while more than
        ``--trim-above`` requests run (lock held)."""
        a = self.args
        return int(a.trim_to) if trimming(a, self.load()) else int(a.k)

    def count_step(self, drafted: int, accepted: int) -> None:
        """One verify step of a request into the counters, as vLLM's ``observe_draft``."""
        with self.lock:
            if drafted:
                self.drafts += 1
                self.draft_tokens += drafted
                self.accepted += accepted
                for pos in range(accepted):
                    self.per_pos[pos] += 1
            self.generation += 1 + accepted

    def play(self, request: Request, emit: Callable[[int], None] | None = None) -> bool:
        """Generate ``request`` step by step at ``--steps-per-s`` slowed by the contention law,
        each step counted as it completes; ``emit(tokens)`` after each. False if aborted."""
        pace = float(self.args.steps_per_s)
        with self.generating():
            with self.lock:
                begun = self._settle()
            done = 0
            while not request.done:
                if self.aborting:
                    return False
                with self.lock:
                    had = (self._settle() - begun) * pace
                    drafted = self.draft_length()
                    slow = self.contention.slowdown(self.load())
                if had >= done + 1:
                    accepted = request.step(drafted)
                    self.count_step(drafted, accepted)
                    done += 1
                    if emit is not None:
                        emit(1 + accepted)
                    continue
                time.sleep(max(0.001, min(TICK, (done + 1 - had) / pace * slow)))
        return True

    def acceptance(self) -> float:
        """Acceptance now: flat, then a linear fall from ``decay_after`` over ``decay_over``."""
        a = self.args
        elapsed = time.monotonic() - self._started
        if a.decay_to is None or elapsed < a.decay_after:
            return float(a.acceptance)
        frac = min(1.0, (elapsed - a.decay_after) / max(a.decay_over, 1e-9))
        return float(a.acceptance + (a.decay_to - a.acceptance) * frac)

    def advance(self) -> None:
        with self.lock:
            now = time.monotonic()
            dt, self._last = now - self._last, now
            if self.args.stall or self.args.stuck_gauge:
                return
            if self.traffic is not None:
                self.traffic.background(self, self.traffic.clock(), dt)
                return
            drafts = self.args.drafts_per_s * dt
            rate = self.acceptance()
            self.drafts += drafts
            self.draft_tokens += drafts * self.args.k
            accepted_total = 0.0
            kept = rate / self.args.acceptance if self.args.acceptance else 0.0
            for pos in range(self.args.k):
                # Later positions accept less: position i is reached only if i-1 was accepted.
                # A decay spoils a share of the drafts outright: every position scales alike.
                got = drafts * kept * self.args.acceptance ** (pos + 1)
                self.per_pos[pos] += got
                accepted_total += got
            self.accepted += accepted_total
            self.generation += drafts + accepted_total
            self.prompt += 4 * drafts

    def exposition(self) -> str:
        self.advance()
        with self.lock:
            queued = len(self.queue) - self.extra_running
            return exposition(
                Counters(
                    self.drafts,
                    self.draft_tokens,
                    self.accepted,
                    tuple(self.per_pos),
                    self.generation,
                    self.running + self.extra_running,
                    self.args.waiting + queued,
                    self.created_at,
                    prompt=self.prompt,
                    sleep_level=self.sleep_gauge(),
                    rejected=dict(self.rejected) if self.args.max_num_queued_reqs else None,
                ),
                model=self.args.model,
                spec_decode=self.args.spec_decode,
            ) + (
                tool_parser_series(self.args.model, self.created_at)
                if self.args.tool_call_parser
                else ""
            )

    def sleep_gauge(self) -> int | None:
        """The sleep gauge once sleep was asked for (``--sleep-level``, ``/sleep``); else None."""
        if self.sleep_level is None and not self.slept:
            return None
        return AWAKE if self.sleep_level is None else self.sleep_level


# --- per-request drafting, swinging traffic and three kinds of decay (--traffic) -------------
#
# Drafting is counted per request, draft by draft: a greedy request (temperature 0) draws from a
# generator seeded by its prompt and seed, so the same prompt drafts the same tokens every time.
# The law of depth is deliberately *not* sparkwarden's a*(0.8a)^i: with --law deeper-easier, a
# hard text's deeper positions, once reached, are accepted more often than its first (the
# field's mixed-traffic curve 51.8, 32.3, 20.4, 12.4, 8.1 % has conditional ratios 0.62..0.67).

#: position-0 acceptance by prompt class (FIELD-NOTES)
CLASS_ALPHA = {"math": 0.78, "code": 0.75, "mixed": 0.52, "prose": 0.30}


#: --law deeper-easier: position i >= 1, once reached, is accepted at a + (CEILING - a) * w[i-1]:
#: for mixed text (a = 0.518) the ratios 0.62, 0.63, 0.65, 0.67 of the field's curve; prose
#: (0.30) 0.47..0.55, easier than its position 0
CEILING = 0.85
DEEPER = (0.30, 0.35, 0.40, 0.45)


def conditional(alpha0: float, k: int, law: str) -> list[float]:
    """Acceptance of each position given the one before was accepted."""
    if law == "geometric":
        return [alpha0] + [0.8 * alpha0] * (k - 1)
    deeper = [alpha0 + (CEILING - alpha0) * DEEPER[min(i, len(DEEPER) - 1)] for i in range(k - 1)]
    return [alpha0, *deeper]


def prompt_class(text: str) -> str:
    """The class a prompt belongs to, by a word in it (the shipped canary prompts have one)."""
    lowered = text.lower()
    if any(w in lowered for w in ("compute", "math", "sum", "divide")):
        return "math"
    if any(w in lowered for w in ("python", "function", "code")):
        return "code"
    if any(w in lowered for w in ("describe", "story", "prose", "paragraph")):
        return "prose"
    return "mixed"


class Traffic:
    """Background users whose class swings, long-context phases, and a decay of one kind."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.classes = args.traffic.split(",")
        #: --decay-once: a restart cures the decay (the marker survives a container restart)
        self.cured = bool(args.decay_once) and os.path.exists(args.decay_once)
        #: the users' day begins at the first /metrics scrape: a supervisor's first look sees
        #: the first phase, however long the container took to be watched
        self.began: float | None = None

    def clock(self) -> float:
        now = time.monotonic()
        if self.began is None:
            self.began = now
        return now - self.began

    def phase(self, elapsed: float) -> tuple[bool, str, bool]:
        """(busy, class of the traffic now, in a long-context phase)."""
        a = self.args
        cycle = a.busy_for + a.idle_for
        busy = (elapsed % cycle) < a.busy_for if cycle else True
        klass = self.classes[int(elapsed // a.swing_every) % len(self.classes)]
        long_ctx = bool(a.long_context_every) and (elapsed % a.long_context_every) < (
            a.long_context_for
        )
        return busy, klass, long_ctx

    def decay_level(self, elapsed: float) -> float:
        """0 (healthy) .. ``decay_depth``: how far the decay has gone now."""
        a = self.args
        if a.decay_kind == "none" or elapsed < a.decay_after or self.cured:
            return 0.0
        if a.decay_once and not os.path.exists(a.decay_once):
            with open(a.decay_once, "w") as marker:
                marker.write("decayed once\n")
        return float(a.decay_depth * min(1.0, (elapsed - a.decay_after) / max(a.decay_over, 1e-9)))

    def odds(
        self, klass: str, elapsed: float, long_ctx: bool, single: bool = False
    ) -> tuple[float, list[float]]:
        """(share of drafts spoilt whole, conditional acceptance per position) for a class."""
        a = self.args
        cond = conditional(CLASS_ALPHA[klass], a.k, a.law)
        level = self.decay_level(elapsed)
        # hot: only the high-volume prompts (the users' --hot-class traffic); a single request,
        # such as a canary, is never one of them
        hit = a.decay_kind != "hot" or (klass == a.hot_class and not single)
        spoil = level if a.decay_kind == "whole" else 0.0
        if a.decay_kind in ("per-token", "hot") and hit:
            cond = [c * (1 - level) for c in cond]
        if long_ctx:  # long conversations: every position a little harder, no KV-cache signal
            cond = [c * a.long_context_factor for c in cond]
        return spoil, cond

    def background(self, engine: Engine, elapsed: float, dt: float) -> None:
        """Expected counts of the users' drafting over ``dt`` (the caller holds the lock)."""
        busy, klass, long_ctx = self.phase(elapsed)
        engine.running = self.args.users if busy else 0.0
        if not busy:
            return
        spoil, cond = self.odds(klass, elapsed, long_ctx)
        drafts = self.args.drafts_per_s * dt
        drafted = engine.draft_length()  # trimmed while more than --trim-above run
        reached = 1.0 - spoil
        accepted = 0.0
        for pos, c in enumerate(cond[:drafted]):
            reached *= c
            engine.per_pos[pos] += drafts * reached
            accepted += drafts * reached
        engine.drafts += drafts if drafted else 0.0
        engine.draft_tokens += drafts * drafted
        engine.accepted += accepted
        engine.generation += drafts + accepted

    def start(self, prompt: str, max_tokens: int, seed: int, greedy: bool) -> Request:
        """A request arriving now: its odds are those of its class at this moment."""
        elapsed = self.clock()
        busy, _, long_ctx = self.phase(elapsed)
        spoil, cond = self.odds(prompt_class(prompt), elapsed, long_ctx and busy, single=True)
        rng = random.Random(f"{prompt}|{seed}") if greedy else random.Random()
        return Request(rng, spoil, cond, max_tokens, self.args.k)

    def request(
        self, engine: Engine, prompt: str, max_tokens: int, seed: int, greedy: bool
    ) -> tuple[int, float]:
        """Draft one whole request at once, K tokens a step, no pace; returns (tokens made,
        seconds it takes alone)."""
        request = self.start(prompt, max_tokens, seed, greedy)
        while not request.done:
            engine.count_step(self.args.k, request.step(self.args.k))
        return request.made, request.drafting.steps / self.args.steps_per_s


class Request:
    """One request's drafting, step by step: greedy requests draw from a generator seeded by
    their prompt and seed, so the same prompt drafts the same tokens every time."""

    def __init__(
        self, rng: random.Random, spoil: float, cond: list[float], max_tokens: int, k: int
    ) -> None:
        self.rng, self.spoil, self.cond, self.max_tokens = rng, spoil, cond, max_tokens
        self.made = 0
        self.drafting = Drafting(k)

    @property
    def done(self) -> bool:
        return self.made >= self.max_tokens

    def step(self, drafted: int) -> int:
        """One verify step of ``drafted`` draft tokens: how many were accepted (the bonus
        token comes on top). A step that drafts nothing makes one token and counts no draft."""
        accepted = 0
        if drafted:
            spoilt = self.rng.random() < self.spoil
            for c in self.cond[:drafted]:
                if spoilt or self.rng.random() >= c or self.made + accepted + 1 >= self.max_tokens:
                    break
                accepted += 1
            self.drafting.observe(drafted, accepted)
        self.made += accepted + 1
        return accepted


class Drafting:
    """A request's own spec-decode stats, as vLLM's ``RequestSpecDecodeMetrics`` (0.29.0 on)
    (vllm/v1/metrics/stats.py): a dense histogram of accepted draft tokens per verify step
    (index j: steps that accepted exactly j, bonus token excluded, length K+1) and the draft
    tokens proposed; per-step lists kept for ``detailed``."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.histogram = [0] * (k + 1)
        self.draft_tokens = 0
        self.per_step_accepted: list[int] = []
        self.per_step_drafted: list[int] = []

    @property
    def steps(self) -> int:
        return sum(self.histogram)

    def observe(self, drafted: int, accepted: int) -> None:
        self.histogram[accepted] += 1
        self.draft_tokens += drafted
        self.per_step_accepted.append(accepted)
        self.per_step_drafted.append(drafted)

    def payload(self, level: str, stream: bool = False) -> dict[str, object]:
        """``metrics.speculative_decoding`` as vLLM serialises it: the answer (``model_dump``)
        carries the per-step fields as null unless ``detailed``; the stream's usage chunk
        (``exclude_none``) leaves them out."""
        steps = self.steps
        accepted = sum(j * count for j, count in enumerate(self.histogram))
        out: dict[str, object] = {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / self.draft_tokens if self.draft_tokens else 0.0,
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": self.draft_tokens,
            "num_spec_tokens": self.k,
            "per_step_accepted": None,
            "per_step_drafted": None,
        }
        if level == "detailed" and steps:
            out["per_step_accepted"] = list(self.per_step_accepted)
            out["per_step_drafted"] = list(self.per_step_drafted)
        return {k: v for k, v in out.items() if v is not None} if stream else out


def per_request_metrics(
    drafting: Drafting | None, level: str, n: object, stream: bool
) -> dict[str, object] | None:
    """The response's ``metrics`` (vLLM 0.29.0 on ``PerRequestMetrics``, timing off): None when
    off, for ``n > 1`` (the stats are one sequence's of n), or without drafting."""
    if level == "none" or n != 1 or drafting is None:
        return None
    spec = drafting.payload(level, stream)
    if stream:
        return {"speculative_decoding": spec}
    timing = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms")
    return {**dict.fromkeys((*timing, "tokens_per_second")), "speculative_decoding": spec}


#: a running request re-reads the pace at least this often (seconds)
TICK = 0.01


class Contention:
    """How real concurrent requests share the engine (``--contention``).

    ``none``: each at its own pace whatever else runs (what the stand-in always did).
    ``serial``: one generates at a time, first come first served (the worst plausible case).
    ``batched:SLOPE``: continuous batching, every decode step (1 + SLOPE (n-1)) times as long
    with n running. n counts what ``num_requests_running`` shows (real requests and the
    background ``--users``); only ``--traffic`` requests are paced by it."""

    def __init__(self, law: str) -> None:
        self.law, _, slope = law.partition(":")
        self.slope = float(slope) if self.law == "batched" else 0.0
        self.limit = 1 if self.law == "serial" else math.inf

    def slowdown(self, n: float) -> float:
        return 1.0 + self.slope * max(0.0, n - 1.0)


def contention_law(text: str) -> str:
    """``--contention``'s value, checked: none, serial or batched:SLOPE (SLOPE >= 0)."""
    law, colon, slope = text.partition(":")
    if (law in ("none", "serial") and not colon) or (law == "batched" and _slope(slope)):
        return text
    raise argparse.ArgumentTypeError(
        f"expected none, serial or batched:SLOPE with SLOPE a number >= 0, got {text!r}"
    )


def _slope(text: str) -> bool:
    try:
        return float(text) >= 0
    except ValueError:
        return False


def trimming(args: argparse.Namespace, load: float) -> bool:
    """Drafts are cut now: more than ``--trim-above`` requests running."""
    return args.trim_above is not None and load > args.trim_above


@dataclass(frozen=True)
class Counters:
    """What a vLLM engine counts, at one instant (``created``: when its counters started)."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_pos: tuple[float, ...]
    generation: float
    running: float
    waiting: float
    created: float
    kv_cache: float = 0.0734
    prompt: float = 0.0
    #: ``vllm:engine_sleep_state``: None leaves it out (the shared fixture has none), -1 awake,
    #: else the sleep level (0: KV cache released, 1: weights offloaded, 2: discarded)
    sleep_level: int | None = None
    #: ``vllm:admission_rejections_total`` by reason (0.33.0); None leaves it out
    rejected: dict[str, int] | None = None


#: 0.33's reasons for turning a request away at admission (vllm/v1/metrics/loggers.py:47)
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
AWAKE = -1


def exposition(c: Counters, model: str, spec_decode: bool = True) -> str:
    """The /metrics text as vLLM's prometheus_client writes it: ``_total`` counters with a
    ``_created`` gauge each, then the request gauges (shared by the server and trace generator)."""
    labels = LABELS.format(model=model)
    out: list[str] = []

    def counter(
        name: str, help_text: str, series: list[tuple[str, float]], at: str = labels
    ) -> None:
        out.append(f"# HELP vllm:{name}_total {help_text}")
        out.append(f"# TYPE vllm:{name}_total counter")
        for extra, value in series:
            out.append(f"vllm:{name}_total{{{at}{extra}}} {go_float(math.floor(value))}")
        out.append(f"# HELP vllm:{name}_created {help_text}")
        out.append(f"# TYPE vllm:{name}_created gauge")
        for extra, _ in series:
            out.append(f"vllm:{name}_created{{{at}{extra}}} {go_float(c.created)}")

    def gauge(name: str, help_text: str, value: float) -> None:
        out.append(f"# HELP vllm:{name} {help_text}")
        out.append(f"# TYPE vllm:{name} gauge")
        out.append(f"vllm:{name}{{{labels}}} {go_float(value)}")

    if spec_decode:
        counter("spec_decode_num_drafts", "Number of spec decoding drafts.", [("", c.drafts)])
        counter("spec_decode_num_draft_tokens", "Number of draft tokens.", [("", c.draft_tokens)])
        counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.", [("", c.accepted)])
        counter(
            "spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [(f',position="{i}"', v) for i, v in enumerate(c.per_pos)],
        )
    gauge("num_requests_running", "Number of requests in model execution batches.", c.running)
    gauge("num_requests_waiting", "Number of requests waiting to be processed.", c.waiting)
    gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", c.kv_cache)
    counter("prompt_tokens", "Number of prefill tokens processed.", [("", c.prompt)])
    counter("generation_tokens", "Number of generation tokens processed.", [("", c.generation)])
    if c.sleep_level is not None:
        level = c.sleep_level
        states = {
            "awake": level == AWAKE,
            "weights_offloaded": level == 1,
            "discard_all": level == 2,
        }
        out.append("# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means sleeping.")
        out.append("# TYPE vllm:engine_sleep_state gauge")
        for state, on in states.items():
            out.append(f'vllm:engine_sleep_state{{{labels},sleep_state="{state}"}} {float(on)}')
    if c.rejected is not None:
        counter(
            "admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            [(f',reason="{r}"', float(n)) for r, n in c.rejected.items()],
            at=f'model_name="{model}"',  # no engine label: the API server counts them
        )
    return "\n".join(out) + "\n"


def tool_parser_series(model: str, created: float) -> str:
    """What ``--tool-call-parser`` registers, stat logger or not (vllm/parser/metrics.py, 0.27.0
    on): ``vllm:tool_call_parser_invocations_total`` for each mode, outcome and request type."""
    name = "vllm:tool_call_parser_invocations"
    about = "Total number of ToolParser invocations."
    keys = [
        f'mode="{mode}",model_name="{model}",outcome="{outcome}",request_type="{kind}"'
        for mode in ("streaming", "non_streaming")
        for outcome in ("tool_call", "no_tool_call")
        for kind in ("chat_completions", "responses", "other")
    ]
    out = [f"# HELP {name}_total {about}", f"# TYPE {name}_total counter"]
    out += [f"{name}_total{{{key}}} 0.0" for key in keys]
    out += [f"# HELP {name}_created {about}", f"# TYPE {name}_created gauge"]
    out += [f"{name}_created{{{key}}} {go_float(created)}" for key in keys]
    return "\n".join(out) + "\n"


#: What vLLM's /metrics answers under --disable-log-stats: process series, no vllm: ones.
NO_STATS = (
    b"# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
    b"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"
    b"# HELP process_open_fds Number of open file descriptors.\n"
    b"# TYPE process_open_fds gauge\nprocess_open_fds 61.0\n"
)


#: vLLM 0.33's words for a request refused by ``--max-num-queued-reqs`` (vllm/exceptions.py:171)
QUEUE_FULL = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)
#: ... and for one arriving while generation is paused (``POST /pause``, core.py 0.33.0:1806)
PAUSED = "Generation is paused. Please retry after it resumes."


def chat_request(engine: Engine, body: dict[str, object], max_tokens: int) -> Request:
    """A chat body as a drafted request: its last message's class, greedy at temperature 0."""
    assert engine.traffic is not None
    messages = body.get("messages")
    prompt = ""
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        prompt = str(messages[-1].get("content", ""))
    seed = body.get("seed")
    greedy = body.get("temperature") == 0
    return engine.traffic.start(prompt, max_tokens, seed if isinstance(seed, int) else 0, greedy)


def usage_info(completion: int, prompt: int = 12) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


def make_handler(engine: Engine, args: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *params: object) -> None:
            if args.verbose:
                super().log_message(fmt, *params)

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, code: int, payload: object) -> None:
            self._send(code, json.dumps(payload).encode())

        def _error(self, code: int, message: str, kind: str = "BadRequestError") -> None:
            if args.error_shape == "flat":
                self._json(
                    code,
                    {
                        "object": "error",
                        "message": message,
                        "type": kind,
                        "param": None,
                        "code": code,
                    },
                )
            else:
                self._json(
                    code, {"error": {"message": message, "type": kind, "param": None, "code": code}}
                )

        def _authorised(self) -> bool:
            if not args.api_key:
                return True
            if self.headers.get("Authorization") == f"Bearer {args.api_key}":
                return True
            self._json(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            if self.path == "/health":  # 200 while it drains, asleep or not (engine not dead)
                self._send(503 if args.mode == "never-healthy" else 200, b"")
            elif self.path == "/version":
                self._json(200, {"version": args.vllm_version})
            elif self.path == "/metrics":
                if args.metrics == "missing":
                    self._send(404, b'{"detail":"Not Found"}')
                elif args.metrics == "garbage":
                    self._send(200, b"<html>\x00 this is not prometheus {{{\n", "text/html")
                elif args.metrics == "no-stats":  # --disable-log-stats: no stat logger at all
                    page = NO_STATS
                    if args.tool_call_parser:  # the API server's own counter is there all the same
                        page += tool_parser_series(args.model, engine.created_at).encode()
                    self._send(200, page, "text/plain; version=0.0.4; charset=utf-8")
                else:
                    self._send(
                        200,
                        engine.exposition().encode(),
                        "text/plain; version=0.0.4; charset=utf-8",
                    )
            elif self.path == "/v1/models":
                if self._authorised():
                    self._json(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": args.model,
                                    "object": "model",
                                    "created": int(engine.ready_at),
                                    "owned_by": "vllm",
                                    "root": args.model,
                                    "parent": None,
                                    "max_model_len": 262144,
                                }
                            ],
                        },
                    )
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            path, _, query = self.path.partition("?")
            if path in ("/sleep", "/wake_up"):  # vLLM's dev endpoints (VLLM_SERVER_DEV_MODE=1)
                level = query.removeprefix("level=") if query.startswith("level=") else "1"
                with engine.cond:
                    engine.slept = True
                    engine.sleep_level = (
                        int(level) if path == "/sleep" and level.isdigit() else None
                    )
                    engine.cond.notify_all()  # woken: what queued goes on
                self._send(200, b"")
                return
            if path in ("/pause", "/resume"):  # pause_generation (rl/online/api_router.py)
                engine.paused = path == "/pause"
                self._send(200, b"")
                return
            if self.path != "/v1/chat/completions":
                self._json(404, {"detail": "Not Found"})
                return
            if not self._authorised():
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._error(400, "invalid JSON body")
                return
            if body.get("model") != args.model:
                self._error(
                    404, f"The model `{body.get('model')}` does not exist.", "NotFoundError"
                )
                return
            if engine.tearing_down:  # the engine core is gone: no answer until the server exits
                time.sleep(3600)
                return
            limit = args.max_num_queued_reqs
            if limit and len(engine.queue) + 1 > limit:  # vllm/v1/engine/async_llm.py:325
                with engine.lock:
                    engine.rejected["max_num_queued_reqs"] += 1
                self._error(503, QUEUE_FULL, "ServiceUnavailableError")
                return
            engine.chats += 1
            if engine.stopping:  # draining after SIGTERM: answered at once, nothing generated
                self._aborted(bool(body.get("stream")), body.get("stream_options"))
                return
            if engine.paused:  # pause_generation: new requests refused (asleep, they queue)
                self._error(503, PAUSED, "ServiceUnavailableError")
                return
            if engine.ranks is not None:
                engine.ranks.collective()  # hangs, then dies, while a rank is lost
            if args.mode in ("chat-fails", "zombie"):
                self._error(
                    500, "EngineCore encountered an issue. See stack trace.", "InternalServerError"
                )
                if args.mode == "zombie":
                    self.wfile.flush()
                    os._exit(1)  # the engine dies on its first message
                return
            if args.stall:  # a hung scheduler: the request is taken and never answered
                time.sleep(3600)
                return
            max_tokens = int(body.get("max_tokens") or 16)
            request = chat_request(engine, body, max_tokens) if engine.traffic else None
            n = body.get("n") or 1
            if body.get("stream"):
                options = body.get("stream_options")
                usage = isinstance(options, dict) and bool(options.get("include_usage"))
                self._stream(max_tokens, request, usage, n)
            else:
                self._answer(max_tokens, request, n)

        def _stream(self, max_tokens: int, request: Request | None, usage: bool, n: object) -> None:
            """vLLM's SSE: a role chunk, one chunk per token (per verify step with --traffic), a
            finish chunk, the usage chunk if ``stream_options.include_usage`` (where vLLM 0.33
            puts ``metrics``), ``[DONE]``."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chat_id, created = f"chatcmpl-{engine.chats}", int(time.time())

            def send(chunk: dict[str, object]) -> None:
                head = {"id": chat_id, "object": "chat.completion.chunk", "created": created}
                self._chunk(
                    f"data: {json.dumps({**head, 'model': args.model, **chunk})}\n\n".encode()
                )

            def event(delta: dict[str, object], finish: str | None = None) -> None:
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                send({"choices": [choice]})

            event({"role": "assistant", "content": ""})
            made = 0
            if request is not None:
                if not engine.play(request, lambda tokens: event({"content": "ready " * tokens})):
                    self.close_connection = True  # cut mid-generation: no finish, no [DONE]
                    return
                made = request.made
            else:
                with engine.generating():
                    for i in range(max_tokens):
                        time.sleep(args.token_delay)
                        if engine.aborting:  # cut mid-generation: no finish chunk, no [DONE]
                            self.close_connection = True
                            return
                        with engine.lock:
                            engine.generation += 1
                        made += 1
                        event({"content": f"tok{i} "})
            event({}, "length")
            if usage:
                final: dict[str, object] = {"choices": [], "usage": usage_info(made)}
                level = args.per_request_spec_decode_metrics
                drafting = request.drafting if request is not None else None
                metrics = per_request_metrics(drafting, level, n, stream=True)
                if metrics is not None:
                    final["metrics"] = metrics
                send(final)
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _aborted(self, stream: bool, options: object) -> None:
            """What vLLM 0.33 answers a request arriving while it drains: HTTP 200, no token,
            ``finish_reason`` "abort" (a role chunk and a finish chunk when streamed)."""
            chat_id, created = f"chatcmpl-{engine.chats}", int(time.time())
            head = {"id": chat_id, "created": created, "model": args.model}
            if not stream:
                message = {"role": "assistant", "content": "", "reasoning_content": None}
                choice = {"index": 0, "message": {**message, "tool_calls": []}, "logprobs": None}
                choice |= {"finish_reason": "abort", "stop_reason": None}
                body = {**head, "object": "chat.completion", "choices": [choice]}
                self._json(200, {**body, "usage": usage_info(0)})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunks: list[dict[str, object]] = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]},
            ]
            if isinstance(options, dict) and options.get("include_usage"):
                chunks.append({"choices": [], "usage": usage_info(0)})
            for chunk in chunks:
                data = {**head, "object": "chat.completion.chunk", **chunk}
                self._chunk(f"data: {json.dumps(data)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _answer(self, max_tokens: int, request: Request | None, n: object) -> None:
            text = "ready"
            made = min(1, max_tokens)
            extra: dict[str, object] = {}
            if request is not None:
                if not engine.play(request):
                    self.close_connection = True  # aborted: no answer
                    return
                made = request.made
                text = "ready " * made
                if args.per_request_spec_decode_metrics != "none":
                    level = args.per_request_spec_decode_metrics
                    extra["metrics"] = per_request_metrics(request.drafting, level, n, False)
            else:
                with engine.generating():
                    time.sleep(args.token_delay)
                with engine.lock:
                    engine.generation += 1
                    engine.prompt += 12
            self._json(
                200,
                {
                    "id": f"chatcmpl-{engine.chats}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": args.model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": text,
                                "reasoning_content": None,
                                "tool_calls": [],
                            },
                            "logprobs": None,
                            "finish_reason": "stop" if made < max_tokens else "length",
                            "stop_reason": None,
                        }
                    ],
                    "usage": usage_info(made),
                    **extra,
                },
            )

    return Handler


# --- several nodes as one engine (--nnodes) ------------------------------------------------
#
# vLLM's own multi-node mode (no Ray): rank 0 serves the API and, before its port opens, waits at
# its rendezvous ("Init torch distributed begin") until every other rank has joined on
# --master-port; the other ranks run --headless. A rank that vanishes is seen only by the next
# collective: requests hang, /health stays 200, and after VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS
# (--collective-timeout) the engine dies (vllm#36451). A headless rank whose head died logs
# TCPStore errors for ever and never rejoins a new head (vllm#32136), so a head restarted
# against it waits at its rendezvous for ever.


class Ranks:
    """Rank 0's view of the other ranks: who joined, and who has vanished since."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lost: set[int] = set()

    def gather(self) -> None:
        """Block until every other rank said hello (the API port stays closed meanwhile)."""
        a = self.args
        print(f"Init torch distributed begin (waiting for {a.nnodes - 1} rank(s))", flush=True)
        joined: dict[int, socket.socket] = {}
        with socket.create_server(("0.0.0.0", a.master_port)) as server:
            while len(joined) < a.nnodes - 1:
                conn, peer = server.accept()
                words = conn.makefile("r").readline().split()
                if len(words) != 2 or words[0] != "rank" or not words[1].isdigit():
                    conn.close()
                    continue
                rank = int(words[1])
                conn.sendall(b"ok\n")
                joined[rank] = conn
                print(f"rank {rank} joined from {peer[0]}", flush=True)
        print("Init torch distributed end", flush=True)
        for rank, conn in joined.items():
            threading.Thread(target=self._watch, args=(rank, conn), daemon=True).start()

    def _watch(self, rank: int, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while conn.recv(1024):
                pass
        self.lost.add(rank)  # nothing said: only the next collective notices
        print(f"rank {rank}: connection gone", flush=True)

    def collective(self) -> None:
        """A step that needs every rank: with one lost it hangs, then the engine dies."""
        if not self.lost:
            return
        time.sleep(self.args.collective_timeout)
        print(
            f"EngineCore died: collective timed out after {self.args.collective_timeout:g}s "
            f"waiting for rank(s) {sorted(self.lost)}",
            flush=True,
        )
        os._exit(1)


# --- a Ray cluster (--distributed-executor-backend ray) -----------------------------------
#
# vLLM 0.33 (vllm/v1/executor/ray_utils.py ``initialize_ray_cluster``): ``ray.init(address=None)``
# joins the cluster ``ray start`` left on this node (else it starts a lone local one), then
# waits for a placement group of one GPU bundle per rank, up to PG_WAIT_TIMEOUT (1800 s), logging
# every 10, 20, 40... s. Once serving, ray_executor_v2's RayWorkerMonitor shuts the executor down
# as soon as a worker's actor dies (its node gone), and the API server exits with it.


class RayPlacement:
    """The engine's placement group on a Ray cluster: one node per rank, watched for deaths."""

    def __init__(self, args: argparse.Namespace, world: int) -> None:
        self.args, self.world = args, world
        self.placed: list[str] = []

    def gather(self) -> None:
        """Block until the cluster has a node per rank (the API port stays closed meanwhile)."""
        address = ray_address()
        if address is None:
            print("No existing Ray instance: started a local one (this node's GPU)", flush=True)
            self._wait(lambda: ["local"])
            return
        host, _, port = address.rpartition(":")
        conn = socket.create_connection((host, int(port)), timeout=10)
        conn.settimeout(None)
        conn.sendall(b"watch\n")
        lines = conn.makefile("r")
        nodes: list[str] = []

        def latest() -> list[str]:
            return nodes

        def read() -> None:
            for line in lines:
                words = line.split()
                if words and words[0] == "nodes":
                    nodes[:] = words[1:]
                elif words and words[0] == "dead" and words[1] in self.placed:
                    rank = self.placed.index(words[1])
                    self._die(
                        f"RayWorkerProc rank=[{rank}] died unexpectedly, shutting down executor."
                    )
            self._die("Ray's GCS is gone (its head stopped): the engine cannot run")

        print(f"Connecting to existing Ray cluster at address: {address}", flush=True)
        threading.Thread(target=read, daemon=True).start()
        self._wait(latest)

    def _wait(self, nodes: Callable[[], list[str]]) -> None:
        began, report = time.monotonic(), 10.0
        while len(nodes()) < self.world:
            waited = time.monotonic() - began
            if waited >= self.args.pg_timeout:
                self._die(
                    f"ValueError: Cannot provide a placement group requiring {self.world} GPUs "
                    f"within {self.args.pg_timeout:g} seconds."
                )
            if waited >= report:
                report *= 2
                print(
                    f"Waiting for creating a placement group of specs for {int(waited)} seconds. "
                    f"specs={[{'GPU': 1.0}] * self.world}. Check `ray status`",
                    flush=True,
                )
            time.sleep(0.1)
        self.placed = nodes()[: self.world]
        print(f"placement group ready: ranks on {', '.join(self.placed)}", flush=True)

    @staticmethod
    def _die(said: str) -> None:
        print(said, flush=True)
        print("EngineCore died; the API server exits", flush=True)
        os._exit(1)


def ray_address() -> str | None:
    """Where ``ray.init()`` without an address connects: RAY_ADDRESS, then the file ``ray start``
    wrote on this node."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    with contextlib.suppress(OSError):
        folder = Path(os.environ.get("RAY_TMPDIR", "/tmp/ray"))
        return (folder / "ray_current_cluster").read_text().strip() or None
    return None


def headless(args: argparse.Namespace) -> None:
    """A rank without an API: joins its head, then outlives it, never rejoining."""
    where = (args.master_addr, args.master_port)
    print(f"headless rank {args.node_rank}: joining {where[0]}:{where[1]}", flush=True)
    while True:
        try:
            conn = socket.create_connection(where, timeout=2)
            conn.sendall(f"rank {args.node_rank}\n".encode())
            if conn.makefile("r").readline().strip() == "ok":
                break
            conn.close()
        except OSError:
            pass
        time.sleep(0.5)
    conn.settimeout(None)
    print(f"headless rank {args.node_rank}: joined", flush=True)
    with contextlib.suppress(OSError):
        while conn.recv(1024):
            pass
    while True:
        print("TCPStore error: connection to the head lost (this rank will not rejoin)", flush=True)
        time.sleep(5)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
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
        "--crash-after", type=float, default=None, help="exit 1 this long after the process starts"
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
    p.add_argument("--decay-after", type=float, default=0.0)
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
        "and answers new ones with finish_reason abort",
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
            # 0: no drain at all, the engine core is killed at once (nothing is answered "abort")
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
            os._exit(1)

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
    server = ThreadingHTTPServer((args.host, args.port), make_handler(engine, args))
    server.daemon_threads = True
    print(f"serving {args.model} on :{args.port} mode={args.mode}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
