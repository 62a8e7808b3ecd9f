"""The acceptance trigger: is the drafter decaying, or are users just asking harder things?

Acceptance swings 2.5x with what users ask (math ~78 %, prose ~30 %) and quiet nights draft
nothing, so a raw threshold misfires. A window lasts ``window`` and then until it holds
``min_draft_tokens`` drafted tokens (a quiet night is one long window). Each gets a score: the
healthy share of its drafting, from the shape of its per-position acceptance
(:mod:`sparkwarden.evidence.draft_shape`), which a change of workload leaves at 1 and a decay
lowers. An engine without per-position counters gets the raw acceptance rate, shown but never acted
on: there a prose evening and a decay look the same, and ``max_uptime`` still caps the engine's age.

The baseline is the score of the first ``learn_windows`` windows after the warm-up of each
engine start, taken together; *health* is a window's score over it. The trigger fires after
``consecutive`` windows with health below ``fraction``, a streak that only a window back at
``recover_fraction`` clears (hysteresis). Long conversations lower acceptance too, evenly, as
decay does; so a window whose KV cache per running request is ``long_context`` times the
baseline's neither starts nor lengthens a streak. Pure: the daemon and ``sparkwarden replay``
feed it the same way, with the time of each scrape.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Literal

from sparkwarden.config.schema import AcceptanceConfig
from sparkwarden.evidence import draft_shape
from sparkwarden.evidence.draft_shape import healthy_share
from sparkwarden.vllm.metrics import EngineMetrics, SpecDecode

Method = Literal["shape", "rate"]


@dataclass(frozen=True)
class Fire:
    t: float
    acceptance: float
    baseline: float
    health: float
    why: str


@dataclass(frozen=True)
class AcceptanceState:
    anchor_t: float | None = None
    anchor: SpecDecode | None = None
    engine_since: float | None = None
    #: counters when learning began, and the windows judged since: the baseline is one score
    #: over all their tokens, steadier than a median of small windows
    learn_from: SpecDecode | None = None
    learnt: int = 0
    learnt_contexts: tuple[float, ...] = ()
    baseline_context: float | None = None
    #: KV cache per running request, summed over the open window's scrapes
    context_sum: float = 0.0
    context_n: int = 0
    baseline: float | None = None
    baseline_score: float | None = None
    low_streak: int = 0
    current: float | None = None
    health: float | None = None
    method: Method | None = None
    windows: int = 0
    available: bool = True
    note: str = "no metrics yet"


def _reset(old: SpecDecode, new: SpecDecode) -> bool:
    """A restarted engine: new ``_created`` time, or counters that went backwards."""
    if old.created is not None and new.created is not None and old.created != new.created:
        return True
    return new.draft_tokens < old.draft_tokens or new.accepted < old.accepted


def _rate(old: SpecDecode, new: SpecDecode) -> float:
    """Acceptance between two scrapes: accepted over drafted tokens."""
    return (new.accepted - old.accepted) / (new.draft_tokens - old.draft_tokens)


def trimmed_share(old: SpecDecode, new: SpecDecode) -> float:
    """The share of draft slots (drafts x K) the scheduler trimmed between two scrapes."""
    slots = (new.drafts - old.drafts) * len(new.per_pos)
    return 1 - (new.draft_tokens - old.draft_tokens) / slots if slots > 0 else 0.0


def score(old: SpecDecode, new: SpecDecode) -> tuple[float, Method] | None:
    """A window's score: the healthy share of its drafting when the engine counts per position
    (None while too few drafts to read the shape), else its acceptance rate (``"rate"``: not
    enough to act on)."""
    drafts = new.drafts - old.drafts
    if len(new.per_pos) >= 2 and len(old.per_pos) == len(new.per_pos):
        accepted = [b - a for a, b in zip(old.per_pos, new.per_pos, strict=True)]
        share = healthy_share(accepted, drafts, new.draft_tokens - old.draft_tokens)
        return None if share is None else (share, "shape")
    return _rate(old, new), "rate"


def observe(
    state: AcceptanceState, engine: EngineMetrics | None, t: float, cfg: AcceptanceConfig
) -> tuple[AcceptanceState, Fire | None]:
    """Take one scrape at time ``t``; close a window when one is due and judge it."""
    spec = engine.spec if engine is not None else None
    if engine is None or spec is None:
        return replace(state, available=False, note="no spec-decode metrics: trigger off"), None
    if state.anchor is None or state.anchor_t is None or _reset(state.anchor, spec):
        restarted = state.anchor is not None
        return AcceptanceState(
            anchor_t=t,
            anchor=spec,
            engine_since=spec.created if spec.created is not None else t,
            note="counters reset: learning a new baseline" if restarted else "first window open",
        ), None
    anchor, anchor_t = state.anchor, state.anchor_t
    if engine.context is not None:  # every scrape's reading goes into the open window
        state = replace(
            state, context_sum=state.context_sum + engine.context, context_n=state.context_n + 1
        )
    if t - anchor_t < cfg.window:
        return replace(state, available=True), None

    drafted = spec.draft_tokens - anchor.draft_tokens
    scored = score(anchor, spec) if drafted >= cfg.min_draft_tokens else None
    if scored is None:  # too few tokens (or too trimmed) to judge: the window stays open
        note = f"window open: {drafted:.0f} drafted tokens so far, too few to judge"
        drafts = spec.drafts - anchor.drafts
        if draft_shape.too_trimmed(drafts, drafted, len(spec.per_pos)):
            note = (
                f"window open: {trimmed_share(anchor, spec):.0%} of draft slots trimmed under "
                "load: which drafts reached the deeper positions is not known, no shape to read"
            )
        return replace(state, available=True, note=note), None
    value, method = scored
    context = state.context_sum / state.context_n if state.context_n else None
    state = replace(state, anchor_t=t, anchor=spec, available=True, context_sum=0.0, context_n=0)
    rate = _rate(anchor, spec)
    state = replace(state, current=rate, method=method, windows=state.windows + 1)
    if state.engine_since is not None and t - state.engine_since < cfg.warmup:
        return replace(state, note="warming up after a start"), None
    if state.baseline_score is None:
        return _learn(state, anchor, spec, context, method, cfg), None

    health = value / state.baseline_score
    baseline = state.baseline
    assert baseline is not None  # learnt together with baseline_score
    if method == "rate":
        note = "watched, not acted on: without per-position counters prose looks like decay"
        return replace(state, health=health, low_streak=0, note=note), None
    longer = (
        context / state.baseline_context if context is not None and state.baseline_context else None
    )
    long_context = longer is not None and longer >= cfg.long_context
    if health < cfg.fraction:
        streak = state.low_streak if long_context else state.low_streak + 1
    elif health >= cfg.recover_fraction:
        streak = 0
    else:
        streak = state.low_streak
    note = f"{streak} low window(s) in a row"
    if long_context:
        note += f"; long contexts ({longer:.0f}x the baseline's KV cache per request): not counted"
    state = replace(state, health=health, low_streak=streak, note=note)
    if streak >= cfg.consecutive:
        why = (
            f"healthy share of drafting (per-position shape) at {health:.2f} of the baseline, "
            f"below {cfg.fraction:g}, for {streak} windows of {cfg.window:g}s "
            f"(acceptance {rate:.1%}, {baseline:.1%} at baseline)"
        )
        return replace(state, low_streak=0), Fire(t, rate, baseline, health, why)
    return state, None


def _learn(
    state: AcceptanceState,
    anchor: SpecDecode,
    spec: SpecDecode,
    context: float | None,
    method: Method,
    cfg: AcceptanceConfig,
) -> AcceptanceState:
    """One more window towards the baseline: a score over all the learning windows' tokens
    (steadier than a median of small windows) and their median context."""
    learn_from = state.learn_from or anchor
    learnt = state.learnt + 1
    contexts = state.learnt_contexts + ((context,) if context is not None else ())
    state = replace(state, learn_from=learn_from, learnt=learnt, learnt_contexts=contexts)
    if learnt < cfg.learn_windows:
        return replace(state, note=f"learning the baseline ({learnt}/{cfg.learn_windows} windows)")
    pooled = score(learn_from, spec)
    if pooled is None:  # each window read, but pooled with trimmed ones the shape cannot be
        return replace(state, learnt=learnt - 1, note="learning the baseline: drafts trimmed")
    return replace(
        state,
        baseline=_rate(learn_from, spec),
        baseline_score=pooled[0],
        baseline_context=statistics.median(contexts) if contexts else None,
        note=f"baseline learnt over {learnt} windows ({method})",
    )


@dataclass(frozen=True)
class ReplayStep:
    """One scrape's outcome in a replay: a judged window (``judged``) and/or a fire."""

    t: float
    state: AcceptanceState
    judged: bool
    fire: Fire | None


def replay(
    samples: Iterable[tuple[float, EngineMetrics | None]], cfg: AcceptanceConfig
) -> Iterator[ReplayStep]:
    """Feed recorded scrapes through :func:`observe`, exactly as the daemon does, on the trace's
    own clock; yields a decision per scrape that judged a window, fired, or changed the note."""
    state = AcceptanceState()
    for t, engine in samples:
        before = state
        state, fire = observe(state, engine, t, cfg)
        judged = state.windows != before.windows
        if judged or fire or state.note != before.note:
            yield ReplayStep(t, state, judged, fire)
