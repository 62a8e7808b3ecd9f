"""The acceptance trigger on scripted counters: learn, judge, reset, tell workload from decay."""

from __future__ import annotations

from collections.abc import Iterable

from sparkwarden.config.schema import AcceptanceConfig
from sparkwarden.evidence.acceptance import AcceptanceState, Fire, observe
from sparkwarden.vllm.metrics import EngineMetrics, SpecDecode

CFG = AcceptanceConfig(
    window=600,
    min_draft_tokens=2000,
    warmup=600,
    learn_windows=3,
    fraction=0.75,
    recover_fraction=0.9,
    consecutive=3,
)
K = 5
MIXED, PROSE, MATH = 0.52, 0.30, 0.78  # position-0 acceptance by class (FIELD-NOTES)


class Engine:
    """Counters that grow by one window of drafting: ``mix`` maps position-0 acceptance to its
    share of the drafts, ``decay`` spoils that share of all drafts, and the KV cache holds
    ``context`` tokens per running request."""

    def __init__(self, created: float = 1000.0, per_position: bool = True) -> None:
        self.drafts = self.accepted = 0.0
        self.per_pos = [0.0] * K
        self.created = created
        self.per_position = per_position

    def window(
        self,
        drafts: float,
        mix: dict[float, float],
        decay: float = 1.0,
        context: float = 4_000.0,
    ) -> EngineMetrics:
        self.drafts += drafts
        for alpha, weight in mix.items():
            for i in range(K):
                hits = drafts * weight * (1 - decay) * alpha * (0.8 * alpha) ** i
                self.per_pos[i] += hits
                self.accepted += hits
        per_pos = tuple(self.per_pos) if self.per_position else ()
        spec = SpecDecode(self.drafts, self.drafts * K, self.accepted, per_pos, self.created)
        return EngineMetrics(spec, 4.0, 0.0, None, 4 * context / 600_000)


Window = tuple[float, dict[float, float], float, float]  # drafts, mix, decay, context


def w(mix: dict[float, float], decay: float = 0.0, context: float = 4_000.0) -> Window:
    return (10_000, mix, decay, context)


def feed(
    windows: Iterable[Window],
    engine: Engine | None = None,
    cfg: AcceptanceConfig = CFG,
) -> tuple[AcceptanceState, list[Fire]]:
    engine = engine or Engine()
    state, fires = AcceptanceState(), []
    state, _ = observe(state, engine.window(0, {}), 1000.0, cfg)
    for i, (drafts, mix, decay, context) in enumerate(windows, start=1):
        state, fire = observe(
            state, engine.window(drafts, mix, decay, context), 1000 + i * 600, cfg
        )
        fires += [fire] if fire else []
    return state, fires


HEALTHY = [w({MIXED: 1.0})] * 5  # warm-up, 3 to learn, 1 judged


def test_the_baseline_is_learnt_after_the_warmup_and_a_decay_fires() -> None:
    state, fires = feed([*HEALTHY, *[w({MIXED: 1.0}, decay=0.4)] * 3])
    assert state.baseline is not None and abs(state.baseline - 0.879 / K) < 0.001
    assert state.baseline_score is not None and abs(state.baseline_score - 1) < 0.02
    assert len(fires) == 1
    assert abs(fires[0].health - 0.6) < 0.02 and fires[0].acceptance < fires[0].baseline
    assert "per-position shape" in fires[0].why and "for 3 windows" in fires[0].why


def test_a_prose_evening_does_not_fire_but_a_decay_as_deep_does() -> None:
    """The point of the shape: prose drops aggregate acceptance further than a 40 % decay of
    the mixed traffic does, yet only the decay fires."""
    prose_evening = [w({PROSE: 1.0})] * 6
    decayed = [w({MIXED: 1.0}, decay=0.4)] * 6
    state, fires = feed([*HEALTHY, *prose_evening])
    assert fires == [] and state.health is not None and state.health > 0.95
    prose_rate = state.current
    state, fires = feed([*HEALTHY, *decayed])
    assert fires and state.current is not None and prose_rate is not None
    assert prose_rate < state.current  # prose accepted less than the decayed engine did


def test_any_mix_of_classes_is_healthy() -> None:
    mixes = [{MATH: 0.5, PROSE: 0.5}, {MATH: 0.2, MIXED: 0.3, PROSE: 0.5}, {MATH: 1.0}]
    state, fires = feed([*HEALTHY, *[w(mix) for mix in mixes for _ in range(3)]])
    assert fires == [] and state.health is not None and abs(state.health - 1) < 0.03


def test_a_quiet_night_is_one_long_window() -> None:
    night = [(300, {MIXED: 1.0}, 0.0, 4_000.0)] * 5  # 1500 tokens per 10 min: below 2000
    state, fires = feed([*HEALTHY, *night])
    assert fires == [] and "window open" in state.note
    judged = state.windows
    state, _ = feed([*HEALTHY, *night, w({MIXED: 1.0})])
    assert state.windows == judged + 1  # the night's tokens joined the next busy window


def test_hysteresis_keeps_the_streak_between_the_bounds() -> None:
    low, between, recovered = (w({MIXED: 1.0}, decay=d) for d in (0.4, 0.2, 0.05))
    _, fires = feed([*HEALTHY, low, between, low, low])
    assert len(fires) == 1  # 0.8 is neither low (< 0.75) nor recovered (>= 0.9)
    _, fires = feed([*HEALTHY, low, recovered, low, low])
    assert fires == []  # 0.95 recovered: the streak started over


def test_long_context_windows_neither_start_nor_lengthen_a_streak() -> None:
    long_low = w({MIXED: 1.0}, decay=0.3, context=100_000)
    state, fires = feed([*HEALTHY, *[long_low] * 6])
    assert fires == [] and "long contexts (25x" in state.note
    _, fires = feed([*HEALTHY, *[w({MIXED: 1.0}, decay=0.3)] * 3])
    assert len(fires) == 1  # the same windows at ordinary context lengths fire


def test_counter_reset_relearns_the_baseline() -> None:
    engine = Engine()
    state, _ = feed(HEALTHY, engine=engine)
    assert state.baseline is not None
    fresh = Engine(created=9999.0)
    state, fire = observe(state, fresh.window(100, {PROSE: 1.0}), 99_999.0, CFG)
    assert fire is None and state.baseline is None and "counters reset" in state.note


def test_negative_delta_is_a_reset_too() -> None:
    state, _ = feed(HEALTHY)
    created = None if state.anchor is None else state.anchor.created
    shrunk = EngineMetrics(SpecDecode(1.0, 10.0, 5.0, (), created), 1.0, 0.0, None)
    state, _ = observe(state, shrunk, 99_999.0, CFG)
    assert state.baseline is None


def test_no_spec_decode_turns_the_trigger_off() -> None:
    state, fire = observe(AcceptanceState(), EngineMetrics(None, 1.0, 0.0, None), 0.0, CFG)
    assert fire is None and not state.available and "trigger off" in state.note
    state, fire = observe(AcceptanceState(), None, 0.0, CFG)
    assert fire is None and not state.available


def test_without_per_position_counters_acceptance_is_watched_not_acted_on() -> None:
    engine = Engine(per_position=False)
    state, fires = feed([*HEALTHY, *[w({MIXED: 1.0}, decay=0.7)] * 6], engine=engine)
    assert fires == [] and state.method == "rate"
    assert state.health is not None and state.health < 0.4  # seen, and shown
    assert "not acted on" in state.note
