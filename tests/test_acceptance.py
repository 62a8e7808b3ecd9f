"""The acceptance trigger on scripted counter series: learn, judge, reset, stay quiet."""

from __future__ import annotations

from collections.abc import Iterable

from sparkwarden.acceptance import AcceptanceState, Fire, observe
from sparkwarden.config import AcceptanceConfig
from sparkwarden.metrics import SpecDecode

CFG = AcceptanceConfig(
    window=600,
    min_draft_tokens=2000,
    warmup=600,
    learn_windows=3,
    fraction=0.6,
    recover_fraction=0.75,
    consecutive=3,
)


class Engine:
    """Counters that grow by (drafted tokens, acceptance) per 10-minute window."""

    def __init__(self, created: float = 1000.0) -> None:
        self.tokens = self.accepted = 0.0
        self.created = created

    def window(self, drafted: float, rate: float) -> SpecDecode:
        self.tokens += drafted
        self.accepted += drafted * rate
        return SpecDecode(self.tokens / 5, self.tokens, self.accepted, (), self.created)


def feed(
    windows: Iterable[tuple[float, float]],
    state: AcceptanceState | None = None,
    engine: Engine | None = None,
    t0: float = 1000.0,
) -> tuple[AcceptanceState, list[Fire]]:
    engine = engine or Engine(created=t0)
    state = state or AcceptanceState()
    fires = []
    state, _ = observe(state, engine.window(0, 0), t0, CFG)
    for i, (drafted, rate) in enumerate(windows, start=1):
        state, fire = observe(state, engine.window(drafted, rate), t0 + i * 600, CFG)
        if fire:
            fires.append(fire)
    return state, fires


def test_baseline_is_learnt_after_warmup_and_decay_fires() -> None:
    healthy = [(10_000, 0.55)] * 5
    decayed = [(10_000, 0.25)] * 3
    state, fires = feed(healthy + decayed)
    assert state.baseline is not None and abs(state.baseline - 0.55) < 1e-9
    assert len(fires) == 1
    assert fires[0].acceptance < 0.6 * fires[0].baseline
    assert "for 3 windows" in fires[0].why


def test_quiet_windows_are_not_judged() -> None:
    windows = [(10_000, 0.55)] * 5 + [(300, 0.05)] * 20  # a quiet night, tiny samples
    state, fires = feed(windows)
    assert fires == [] and "quiet window" in state.note


def test_hysteresis_keeps_the_streak_between_the_bounds() -> None:
    base = [(10_000, 0.5)] * 5
    # 0.25 is low (< 0.30); 0.33 is between 0.30 and 0.375: neither low nor recovered.
    _, fires = feed([*base, (10_000, 0.25), (10_000, 0.33), (10_000, 0.25), (10_000, 0.25)])
    assert len(fires) == 1
    _, fires = feed([*base, (10_000, 0.25), (10_000, 0.45), (10_000, 0.25), (10_000, 0.25)])
    assert fires == []  # 0.45 recovered: the streak started over


def test_counter_reset_relearns_the_baseline() -> None:
    state, _ = feed([(10_000, 0.55)] * 5)
    assert state.baseline is not None
    fresh = Engine(created=9999.0)
    state, fire = observe(state, fresh.window(100, 0.3), 9999.0, CFG)
    assert fire is None and state.baseline is None and "counters reset" in state.note


def test_negative_delta_is_a_reset_too() -> None:
    state, _ = feed([(10_000, 0.55)] * 5)
    shrunk = SpecDecode(1.0, 10.0, 5.0, (), None if state.anchor is None else state.anchor.created)
    state, _ = observe(state, shrunk, 99_999.0, CFG)
    assert state.baseline is None


def test_no_spec_decode_turns_the_trigger_off() -> None:
    state, fire = observe(AcceptanceState(), None, 0.0, CFG)
    assert fire is None and not state.available and "trigger off" in state.note


def test_a_prose_hour_against_a_mixed_baseline_does_not_fire() -> None:
    mixed, prose = (10_000, 0.52), (8_000, 0.30)  # FIELD-NOTES: mixed ~52 %, prose ~30 %
    default = AcceptanceConfig()  # the shipped fraction, not the tighter one above
    engine, state, fires = Engine(), AcceptanceState(), []
    state, _ = observe(state, engine.window(0, 0), 0.0, default)
    for i, (drafted, rate) in enumerate([mixed] * 7 + [prose] * 6 + [mixed] * 3, start=1):
        state, fire = observe(state, engine.window(drafted, rate), i * 600.0, default)
        fires += [fire] if fire else []
    assert state.baseline is not None
    assert fires == []
