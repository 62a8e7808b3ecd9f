"""Synthetic /metrics traces built from the field figures: seeded, reproducible, as JSON lines
exactly like ``sparkwarden record`` writes them.

The model (FIELD-NOTES): each prompt class has its own position-0 acceptance and per-request
throughput (math 78 % at 77.7 tok/s, code 75 %, mixed 52 % at 31.9 tok/s, prose 30 % at 25.7
tok/s); later positions follow a law of depth (``LAWS``: the shape model's own geometric one,
or one whose deeper positions are conditionally easier, like the field's mixed-traffic curve);
the class mix and the load change by hour, nights are idle, some hours run long contexts
(acceptance x 0.8, and the KV cache per request ~25x fuller unless ``kv_signal`` is off); the
engine restarts reset its counters; and an optional decay (``DECAYS``: whole drafts spoilt,
acceptance lowered per token, or only on the high-volume prompts) leaves a share of the
acceptance falling linearly from 1 to ``1 - decay_drop`` over ``decay_hours`` from
``decay_onset`` (hours after the trace starts). :func:`canary_round` is the drafting canary the
daemon would take at a given moment of such a day.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from devtools.standin.vllm_model.drafting import conditional, prompt_class
from devtools.standin.vllm_model.exposition import Counters, exposition
from sparkwarden.evidence.canary_reading import Reading, Round

K = 5
#: tokens the KV cache holds (vllm:kv_cache_usage_perc = tokens held / this)
KV_TOKENS = 600_000.0
#: context per request: ordinary chat, and a long-context phase
CHAT_CONTEXT = 4_000.0
LONG_CONTEXT = 100_000.0
MODEL = "AEON-7/Qwen3.6-35B-A3B-heretic-NVFP4"
#: position-0 acceptance and tokens/s per running request, by prompt class
CLASSES: dict[str, tuple[float, float]] = {
    "math": (0.78, 77.7),
    "code": (0.75, 70.0),
    "mixed": (0.52, 31.9),
    "prose": (0.30, 25.7),
}


#: how acceptance falls with depth: ``geometric`` is the shape model's own assumption;
#: ``deeper-easier`` (the stand-in's) has a text's deeper positions, once reached, accepted more
#: often than its first, as the field's mixed-traffic curve 51.8, 32.3, 20.4, 12.4, 8.1 % does
Law = str
LAWS: tuple[Law, ...] = ("geometric", "deeper-easier")
#: how a decay acts: spoiling a share of the drafts whole, lowering every position's
#: acceptance, or only on the high-volume prompts (prefix-cache related: never the canary's)
DECAYS = ("whole", "per-token", "hot")
#: the share of the users' traffic the high-volume prompts make up
HOT_SHARE = 0.5


def profile(alpha0: float, law: Law = "geometric") -> list[float]:
    """Acceptance of positions 0..K-1 for one class: the share of drafts reaching each."""
    reached, out = 1.0, []
    for c in conditional(alpha0, K, law):
        reached *= c
        out.append(reached)
    return out


def decayed(alpha0: float, law: Law, kind: str, left: float, single: bool = False) -> list[float]:
    """A class's per-position acceptance when the decay has left ``left`` of its acceptance
    (``single``: one request, such as a canary, which is never a high-volume prompt)."""
    healthy = profile(alpha0, law)
    if left >= 1.0:
        return healthy
    if kind == "per-token":  # each position's conditional acceptance times f, f chosen so that
        lo, hi = 0.0, 1.0  # the class's acceptance is ``left`` of what it was
        for _ in range(40):
            f = (lo + hi) / 2
            kept = sum(p * f ** (i + 1) for i, p in enumerate(healthy)) / sum(healthy)
            lo, hi = (f, hi) if kept < left else (lo, f)
        return [p * lo ** (i + 1) for i, p in enumerate(healthy)]
    if kind == "hot":  # whole drafts spoilt, on the high-volume share only
        return healthy if single else [p * (1 - HOT_SHARE + HOT_SHARE * left) for p in healthy]
    return [p * left for p in healthy]


#: an idle spell long enough for a canary: ``canary_idle`` (20 s) and a tick to see it
IDLE_SPELL = 25.0
#: a request lasts about this long (a few hundred tokens at 25-80 tok/s)
REQUEST_S = 20.0


def idle_rate(load: float, spell: float = IDLE_SPELL) -> float:
    """Idle spells of at least ``spell`` seconds per second, with ``load`` requests running on
    average: Poisson arrivals (rate load/REQUEST_S), the engine idle a share exp(-load) of the
    time, and a spell outlasting ``spell`` with probability exp(-rate x spell)."""
    arrivals = load / REQUEST_S
    return arrivals * math.exp(-load) * math.exp(-arrivals * spell)


@dataclass
class Scenario:
    """A day of traffic; ``mix[h]`` and ``load[h]`` are per hour of the day (0-23)."""

    seed: int
    hours: float = 24.0
    interval: float = 30.0
    start: float = 1_796_000_000.0 + 4.5 * 3600  # 04:30 UTC, just after the nightly restart
    mix: dict[int, dict[str, float]] = field(default_factory=dict)
    load: dict[int, float] = field(default_factory=dict)
    #: context per request by hour (default ``CHAT_CONTEXT``), outside long-context phases
    context: dict[int, float] = field(default_factory=dict)
    long_context: list[tuple[float, float]] = field(default_factory=list)
    restarts: list[float] = field(default_factory=list)
    decay_onset: float | None = None
    decay_drop: float = 0.6
    decay_hours: float = 6.0
    law: Law = "geometric"
    decay_kind: str = "whole"
    #: False: long-context phases leave the KV-cache gauge as in ordinary chat (no signal)
    kv_signal: bool = True
    #: True: idle spells long enough for a canary come at ``idle_rate(load)``; each shows as
    #: two idle scrapes ``IDLE_SPELL`` apart; False: the gauges follow the load
    idle_gaps: bool = False
    idle_spell: float = IDLE_SPELL

    def decay(self, hours_in: float) -> float:
        if self.decay_onset is None or hours_in < self.decay_onset:
            return 1.0
        done = min(1.0, (hours_in - self.decay_onset) / max(self.decay_hours, 1e-9))
        return 1.0 - self.decay_drop * done

    def hours_to_drop(self, fraction: float) -> float | None:
        """Hours after the start when the decay has taken ``fraction`` of the acceptance."""
        if self.decay_onset is None or fraction > self.decay_drop:
            return None
        return self.decay_onset + self.decay_hours * fraction / self.decay_drop


def _count(rng: random.Random, mean: float) -> float:
    """A Poisson draw (counting noise without the bias a clipped normal has at small means)."""
    if mean > 50:
        return max(0.0, rng.gauss(mean, math.sqrt(mean)))
    n, threshold, product = 0, math.exp(-mean), rng.random()
    while product > threshold:
        n += 1
        product *= rng.random()
    return float(n)


def lines(s: Scenario) -> Iterator[dict[str, object]]:
    rng = random.Random(s.seed)
    gaps = random.Random(s.seed + 7)  # its own stream: the traffic is the same either way
    drafts = draft_tokens = accepted = generation = 0.0
    per_pos = [0.0] * K
    created = s.start
    restarts = sorted(s.restarts)
    steps = int(s.hours * 3600 / s.interval)
    for n in range(steps + 1):
        t = s.start + n * s.interval
        hours_in = n * s.interval / 3600
        if restarts and hours_in >= restarts[0]:
            restarts.pop(0)
            drafts = draft_tokens = accepted = generation = 0.0
            per_pos = [0.0] * K
            created = t
        hour = int((t % 86400) / 3600) % 24
        running = max(0.0, rng.gauss(s.load.get(hour, 0.0), 0.5)) if s.load.get(hour) else 0.0
        left, long_factor = s.decay(hours_in), 1.0
        context = s.context.get(hour, CHAT_CONTEXT)
        if any(a <= hours_in < b for a, b in s.long_context):
            long_factor = 0.8
            context = LONG_CONTEXT if s.kv_signal else context
        if n and running:
            for name, weight in s.mix.get(hour, {"mixed": 1.0}).items():
                alpha0, tps = CLASSES[name]
                probs = [p * long_factor for p in decayed(alpha0, s.law, s.decay_kind, left)]
                healthy_gain = 1 + sum(profile(alpha0, s.law))
                # Steps per second are set by compute; each step drafts once per request.
                step_rate = tps / healthy_gain * math.exp(rng.gauss(0, 0.1))
                d = running * weight * step_rate * s.interval
                # Counting noise: each position's accepted tokens are a binomial draw.
                hits = [_count(rng, d * p) for p in probs]
                drafts += d
                draft_tokens += d * K
                for i, hit in enumerate(hits):
                    per_pos[i] += hit
                accepted += sum(hits)
                generation += d + sum(hits)
        kv_cache = min(1.0, round(running) * context * rng.uniform(0.8, 1.2) / KV_TOKENS)
        load = s.load.get(hour, 0.0)
        spell = (
            s.idle_gaps and load > 0 and gaps.random() < -math.expm1(-idle_rate(load) * s.interval)
        )
        if spell:
            running = kv_cache = 0.0
        counters = Counters(
            drafts,
            draft_tokens,
            accepted,
            tuple(per_pos),
            generation,
            round(running),
            0.0,
            created,
            kv_cache,
        )
        text = exposition(counters, MODEL)
        if spell:  # the daemon, wanting a canary, looks every few seconds: it saw the spell begin
            yield {"t": t - s.idle_spell, "metrics": text}
        yield {"t": t, "metrics": text}


def canary_round(
    s: Scenario,
    t: float,
    created: float | None,
    prompts: dict[str, str],
    max_tokens: int,
    own: bool = False,
    fresh: bool = False,
) -> Round:
    """The drafting canary the daemon would take at ``t``: greedy, so each prompt draws the
    same numbers every time (deterministic on an idle engine); a decay moves the thresholds.
    Its own short context: long-context phases do not touch it. ``own``: the engine reports
    each request's own stats, so a user arriving does not spoil it (drafts are never trimmed
    in this corpus: an engine that trims under load would discard some). ``fresh``: greedy is
    not reproducible (batch-variant kernels flip a token, and the text goes elsewhere): each
    canary drafts a new sample of its prompt's class, the worst case for a canary's noise."""
    left = s.decay((t - s.start) / 3600)
    readings = []
    for name, text in prompts.items():
        alpha0, tps = CLASSES[prompt_class(text)]
        marginal = decayed(alpha0, s.law, s.decay_kind, left, single=True)
        cond = [p / (marginal[i - 1] if i else 1.0) for i, p in enumerate(marginal)]
        rng = random.Random(f"{s.seed}|{text}|{t}" if fresh else text)  # each day its own draws
        drafts, hits, made = 0, [0] * K, 0
        while made < max_tokens:
            drafts += 1
            accepted = 0
            for i, c in enumerate(cond):
                if rng.random() >= c or made + accepted + 1 >= max_tokens:
                    break
                hits[i] += 1
                accepted += 1
            made += accepted + 1
        step_s = (1 + sum(profile(alpha0, s.law))) / tps  # one request's pace, from the field
        readings.append(
            Reading(
                name,
                True,
                "valid",
                drafts=float(drafts),
                draft_tokens=float(drafts * K),
                accepted=float(sum(hits)),
                per_pos=tuple(h / drafts for h in hits),
                seconds=drafts * step_s,
                source="own" if own else "counters",
            )
        )
    if own:
        return Round(t, tuple(readings), created, own_stats=True)
    # a user who arrives while it runs spoils it (the daemon discards it and tries again)
    hour = int((t % 86400) / 3600) % 24
    arrivals = s.load.get(hour, 0.0) / REQUEST_S
    if random.Random(f"{s.seed}|{t}").random() > math.exp(
        -arrivals * sum(r.seconds for r in readings)
    ):
        spoilt = replace(
            readings[-1], valid=False, why="other requests running or waiting after it"
        )
        readings[-1] = spoilt
    return Round(t, tuple(readings), created, own_stats=False)


def write(s: Scenario, path: Path) -> Path:
    with path.open("w") as out:
        for line in lines(s):
            out.write(json.dumps(line) + "\n")
    return path


# --- the named days --------------------------------------------------------------------------

DAY_LOAD = {h: 3.0 for h in range(8, 23)} | {h: 1.0 for h in (7, 23)}


def day(seed: int, evening: str = "mixed", **extra: object) -> Scenario:
    """Idle night, a code-heavy morning, a mixed afternoon, an evening of ``evening``."""
    mix = {h: {"code": 0.6, "mixed": 0.4} for h in range(7, 12)}
    mix |= {h: {"mixed": 0.7, "math": 0.3} for h in range(12, 18)}
    mix |= {h: {evening: 0.8, "mixed": 0.2} for h in range(18, 24)}
    return Scenario(seed=seed, mix=mix, load=dict(DAY_LOAD), **extra)  # type: ignore[arg-type]


def random_day(
    seed: int,
    decay: bool,
    law: Law = "geometric",
    decay_kind: str = "whole",
    kv_signal: bool = True,
) -> Scenario:
    """The scoring corpus: a different mix and load every day; decay from a random hour; the
    engine idle now and then (``idle_gaps``), so a canary can be taken."""
    rng = random.Random(seed)
    names = list(CLASSES)
    mix: dict[int, dict[str, float]] = {}
    load: dict[int, float] = {}
    context: dict[int, float] = {}
    for hour in range(24):
        if 1 <= hour < 7 and rng.random() < 0.8:
            continue  # most nights are idle
        weights = {name: rng.random() ** 2 for name in rng.sample(names, rng.randint(1, 3))}
        total = sum(weights.values())
        mix[hour] = {name: w / total for name, w in weights.items()}
        load[hour] = rng.uniform(0.5, 6.0)
        context[hour] = rng.uniform(0.5, 2.0) * CHAT_CONTEXT
    long_context = []
    if rng.random() < 0.5:
        begin = rng.uniform(6, 20)
        long_context.append((begin, begin + rng.uniform(0.5, 2.0)))
    scenario = Scenario(
        seed=seed,
        mix=mix,
        load=load,
        context=context,
        long_context=long_context,
        law=law,
        decay_kind=decay_kind,
        kv_signal=kv_signal,
        idle_gaps=True,
    )
    if decay:
        scenario.decay_onset = rng.uniform(2.0, 18.0)
        scenario.decay_drop = rng.uniform(0.4, 0.8)
        scenario.decay_hours = rng.uniform(1.0, 6.0)
    return scenario
