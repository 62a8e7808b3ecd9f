"""What else runs on the engine (``--traffic``): background users whose prompt class swings, with
long-context phases and a decay of one kind, and how concurrent requests share the engine
(``--contention``, and drafts trimmed while many run).

Apart from the per-request laws (``drafting``) because this is the load around a request, the
part a benchmark varies to see what a loaded engine does to a canary.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
from typing import TYPE_CHECKING

from .drafting import CLASS_ALPHA, Request, conditional, prompt_class

if TYPE_CHECKING:
    from .engine import Engine


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

    def begin_decay(self) -> None:
        """SIGUSR2: the decay begins now, whatever ``--decay-after`` said, so that a test starts
        it on the state the daemon reports (a baseline learnt) instead of racing a timer that a
        loaded machine's late looks can lose."""
        self.args.decay_after = self.clock()

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
