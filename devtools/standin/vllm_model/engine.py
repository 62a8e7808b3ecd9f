"""The engine's state: its counters, the requests queued and running, and the pace they go at.

One object the HTTP surface, the signal handler and the ``/metrics`` page all read, under one
lock: what a scrape shows is what the requests did. Without ``--traffic`` the counters follow a
flat rate whose acceptance may decay linearly (``--decay-to``); with it, the traffic's users
and each request's own drafting move them.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from .drafting import Request
from .exposition import ADMISSION_REASONS, AWAKE, Counters, exposition, tool_parser_series
from .nodes import Ranks
from .traffic import Contention, Traffic, trimming

#: a running request re-reads the pace at least this often (seconds)
TICK = 0.01


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
        self.stopping = False  # SIGTERM seen: new requests are refused (HTTP 500)
        self.aborting = False  # running requests are cut
        self.dead = False  # the engine core died: /health 503 until the server exits
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
        #: the page as it was when the engine wedged: a stopped worker moves nothing
        self.frozen: str | None = None

    def wedge(self) -> None:
        """Stop making progress, as a SIGSTOPped ``VLLM::Worker`` does on vLLM 0.32: the API
        server still answers ``/health`` and ``/v1/models``, every request hangs, and the
        gauges and counters freeze at their last values."""
        page = self.exposition()
        with self.lock:
            self.frozen = page

    def hold_if_wedged(self) -> None:
        """A request in flight when the engine wedged never moves again."""
        while self.frozen is not None:
            time.sleep(0.5)

    def prefill(self, tokens: int) -> None:
        """The prompt's prefill at ``--prefill-tokens-per-s`` (a request holding its place):
        nothing is counted until it ends, then its prompt tokens at once."""
        pace = float(self.args.prefill_tokens_per_s)
        if pace <= 0:
            return
        end = time.monotonic() + tokens / pace
        while time.monotonic() < end and not self.aborting:
            self.hold_if_wedged()
            time.sleep(min(TICK * 10, max(0.0, end - time.monotonic())))
        with self.lock:
            self.prompt += tokens

    @contextlib.contextmanager
    def generating(self, prompt_tokens: int = 0) -> Iterator[None]:
        """A request being generated: the request gauge shows it, a graceful SIGTERM waits on it.
        Under ``--contention serial`` it first waits its turn (shown as waiting), then its
        prompt is prefilled (``--prefill-tokens-per-s``)."""
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
            self.prefill(prompt_tokens)
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

    def play(
        self, request: Request, emit: Callable[[int], None] | None = None, prompt_tokens: int = 0
    ) -> bool:
        """Generate ``request`` step by step at ``--steps-per-s`` slowed by the contention law,
        each step counted as it completes; ``emit(tokens)`` after each. False if aborted."""
        pace = float(self.args.steps_per_s)
        with self.generating(prompt_tokens):
            with self.lock:
                begun = self._settle()
            done = 0
            while not request.done:
                self.hold_if_wedged()
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
        if self.frozen is not None:
            return self.frozen
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
