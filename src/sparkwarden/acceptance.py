"""The acceptance trigger: draft acceptance against a baseline learnt after each restart.

Acceptance swings 2.5x with what users ask (math ~78 %, prose ~30 %) and quiet nights draft
nothing, so a raw threshold misfires. Here a window is judged only when it drafted enough tokens;
the baseline is the median of the first judged windows after the warm-up of each engine start;
and the trigger fires only after several consecutive windows below ``fraction`` of it, a streak
that only a window back above ``recover_fraction`` clears (hysteresis). Pure: the daemon and
``sparkwarden replay`` feed it the same way, with the time of each scrape.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from sparkwarden.config import AcceptanceConfig
from sparkwarden.metrics import SpecDecode


@dataclass(frozen=True)
class Fire:
    t: float
    acceptance: float
    baseline: float
    why: str


@dataclass(frozen=True)
class AcceptanceState:
    anchor_t: float | None = None
    anchor: SpecDecode | None = None
    engine_since: float | None = None
    learnt: tuple[float, ...] = ()
    baseline: float | None = None
    low_streak: int = 0
    current: float | None = None
    windows: int = 0
    available: bool = True
    note: str = "no metrics yet"


def _reset(old: SpecDecode, new: SpecDecode) -> bool:
    """A restarted engine: new ``_created`` time, or counters that went backwards."""
    if old.created is not None and new.created is not None and old.created != new.created:
        return True
    return new.draft_tokens < old.draft_tokens or new.accepted < old.accepted


def observe(
    state: AcceptanceState, spec: SpecDecode | None, t: float, cfg: AcceptanceConfig
) -> tuple[AcceptanceState, Fire | None]:
    """Take one scrape at time ``t``; close a window when one is due and judge it."""
    if spec is None:
        return replace(state, available=False, note="no spec-decode metrics: trigger off"), None
    if state.anchor is None or state.anchor_t is None or _reset(state.anchor, spec):
        restarted = state.anchor is not None
        return AcceptanceState(
            anchor_t=t,
            anchor=spec,
            engine_since=spec.created if spec.created is not None else t,
            note="counters reset: learning a new baseline" if restarted else "first window open",
        ), None
    if t - state.anchor_t < cfg.window:
        return replace(state, available=True), None

    drafted = spec.draft_tokens - state.anchor.draft_tokens
    accepted = spec.accepted - state.anchor.accepted
    state = replace(state, anchor_t=t, anchor=spec, available=True)
    if drafted < cfg.min_draft_tokens:
        return replace(state, note=f"quiet window ({drafted:.0f} drafted tokens): not judged"), None
    rate = accepted / drafted
    state = replace(state, current=rate, windows=state.windows + 1)
    if state.engine_since is not None and t - state.engine_since < cfg.warmup:
        return replace(state, note="warming up after a start"), None
    if state.baseline is None:
        learnt = (*state.learnt, rate)
        if len(learnt) < cfg.learn_windows:
            note = f"learning the baseline ({len(learnt)}/{cfg.learn_windows} windows)"
            return replace(state, learnt=learnt, note=note), None
        baseline = statistics.median(learnt)
        return replace(state, learnt=learnt, baseline=baseline, note="baseline learnt"), None

    baseline = state.baseline
    if rate < cfg.fraction * baseline:
        streak = state.low_streak + 1
    elif rate >= cfg.recover_fraction * baseline:
        streak = 0
    else:
        streak = state.low_streak
    state = replace(
        state,
        low_streak=streak,
        note=f"{rate:.1%} vs baseline {baseline:.1%}, {streak} low window(s) in a row",
    )
    if streak >= cfg.consecutive:
        why = (
            f"acceptance {rate:.1%} below {cfg.fraction:.0%} of the baseline {baseline:.1%} "
            f"for {streak} windows of {cfg.window:g}s"
        )
        return replace(state, low_streak=0), Fire(t, rate, baseline, why)
    return state, None


@dataclass(frozen=True)
class Decision:
    """One scrape's outcome in a replay: a judged window (``judged``) and/or a fire."""

    t: float
    state: AcceptanceState
    judged: bool
    fire: Fire | None


def replay(
    samples: Iterable[tuple[float, SpecDecode | None]], cfg: AcceptanceConfig
) -> Iterator[Decision]:
    """Feed recorded scrapes through :func:`observe`, exactly as the daemon does, on the trace's
    own clock; yields a decision per scrape that judged a window, fired, or changed the note."""
    state = AcceptanceState()
    for t, spec in samples:
        before = state
        state, fire = observe(state, spec, t, cfg)
        judged = state.windows != before.windows
        if judged or fire or state.note != before.note:
            yield Decision(t, state, judged, fire)
