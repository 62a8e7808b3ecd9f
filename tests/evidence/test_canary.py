"""The drafting canary on scripted counters: when it runs, what counts, what it decides."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from sparkwarden.config.schema import AcceptanceConfig
from sparkwarden.evidence.acceptance import AcceptanceState
from sparkwarden.evidence.canary import (
    WORKLOAD_NOT_DRAFTER,
    CanaryState,
    judge,
    light,
    observe,
    snapshot,
    status_note,
    tell,
    waiting_too_long,
    wanted,
)
from sparkwarden.evidence.canary_reading import Answer, OwnStats, Round, measure, take
from sparkwarden.vllm.metrics import EngineMetrics, SpecDecode

#: one canary learns the baseline here (pooling has its own test)
CFG = AcceptanceConfig(
    canary_idle=20,
    canary_interval=1800,
    canary_soon=300,
    canary_max_wait=7200,
    canary_consecutive=2,
    canary_learn=1,
)
K = 5
#: greedy acceptance of each shipped prompt on a healthy engine
HEALTHY = {"math": 0.78, "code": 0.75, "prose": 0.30}
CALM = AcceptanceState(health=1.0, method="shape")
LOW = AcceptanceState(health=0.5, method="shape")
#: an engine whose answers are known to carry no stats of their own: canaries only when idle
COUNTERS_ONLY = CanaryState(own_stats=False)


class Engine:
    """Counters moved by greedy canary requests (deterministic per prompt) and by traffic."""

    def __init__(self, created: float = 1000.0) -> None:
        self.created = created
        self.drafts = self.draft_tokens = self.accepted = self.generation = 0.0
        self.per_pos = [0.0] * K
        self.running = self.waiting = 0.0
        self.scale = 1.0  # a decay: every accepted token kept with this probability

    def draft(self, drafts: float, alpha: float) -> int:
        hits = [drafts * self.scale * alpha * (0.8 * alpha) ** i for i in range(K)]
        self.drafts += drafts
        self.draft_tokens += drafts * K
        self.accepted += sum(hits)
        for i, h in enumerate(hits):
            self.per_pos[i] += h
        made = round(drafts + sum(hits))
        self.generation += made
        return made

    def metrics(self) -> EngineMetrics:
        spec = SpecDecode(
            self.drafts, self.draft_tokens, self.accepted, tuple(self.per_pos), self.created
        )
        return EngineMetrics(spec, self.running, self.waiting, self.generation)

    def ask(self, prompt: str) -> Answer:
        alpha = next(a for name, a in HEALTHY.items() if name in prompt)
        return Answer(True, self.draft(40, alpha), 1.5)


PROMPTS = {name: f"a {name} prompt" for name in HEALTHY}


def canary(engine: Engine, t: float) -> Round:
    return take(PROMPTS, engine.metrics, engine.ask, t)


def test_a_canary_waits_for_the_engine_to_idle_and_for_its_interval() -> None:
    engine, state = Engine(), COUNTERS_ONLY
    engine.running = 2
    state, due = observe(state, engine.metrics(), CALM, 0.0, CFG)
    assert not due
    engine.running = 0
    state, due = observe(state, engine.metrics(), CALM, 5.0, CFG)
    assert not due  # idle only since 5 s
    state, due = observe(state, engine.metrics(), CALM, 25.0, CFG)
    assert due
    state, _ = judge(state, canary(engine, 25.0), CFG)
    state, due = observe(state, engine.metrics(), CALM, 600.0, CFG)
    assert not due  # healthy passive estimate: the full interval
    state, due = observe(state, engine.metrics(), CALM, 1830.0, CFG)
    assert due


def test_an_engine_asleep_is_never_idle_for_a_canary() -> None:
    """Asleep, vLLM takes a chat and leaves it unanswered until it wakes (core.py 0.33.0:
    993-1029): a canary sent then hung the daemon's loop for its timeout and was discarded."""
    engine, state = Engine(), COUNTERS_ONLY
    asleep = replace(engine.metrics(), sleeping=True, sleep_level=1)
    for t in (0.0, 25.0, 2000.0):
        state, due = observe(state, asleep, CALM, t, CFG)
        assert not due, t
    assert not light(state, asleep, CFG)
    state, due = observe(state, engine.metrics(), CALM, 2010.0, CFG)
    assert not due  # woken: idle only since now
    state, due = observe(state, engine.metrics(), CALM, 2040.0, CFG)
    assert due


def test_a_suspicious_passive_estimate_brings_the_canary_sooner_still_only_when_idle() -> None:
    engine, state = Engine(), COUNTERS_ONLY
    state, _ = observe(state, engine.metrics(), CALM, 0.0, CFG)
    state, _ = judge(state, canary(engine, 30.0), CFG)
    state, due = observe(state, engine.metrics(), LOW, 400.0, CFG)
    assert due and state.suspicious_since == 400.0
    engine.waiting = 1
    state, due = observe(state, engine.metrics(), LOW, 410.0, CFG)
    assert not due
    state, _ = observe(state, engine.metrics(), CALM, 420.0, CFG)
    assert state.suspicious_since is None  # back at recover_fraction


def test_foreign_traffic_during_a_canary_discards_it_and_it_is_retried() -> None:
    engine, state = Engine(), COUNTERS_ONLY

    def ask_with_company(prompt: str) -> Answer:
        engine.draft(300, 0.3)  # a user's request slipped in between our scrapes
        return engine.ask(prompt)

    spoilt = take(PROMPTS, engine.metrics, ask_with_company, 25.0)
    assert not spoilt.valid and "other traffic" in spoilt.why
    assert len(spoilt.readings) == 1  # the rest would not count either
    state, _ = observe(state, engine.metrics(), CALM, 0.0, CFG)
    state, fire = judge(state, spoilt, CFG)
    assert fire is None and state.discarded == 1 and state.baseline == ()
    state, due = observe(state, engine.metrics(), CALM, 30.0, CFG)
    assert not due  # not straight away: after one more idle spell
    state, due = observe(state, engine.metrics(), CALM, 46.0, CFG)
    assert due


def test_gauges_must_be_zero_before_and_after() -> None:
    engine = Engine()
    before = engine.metrics()
    answer = engine.ask("a math prompt")
    engine.running = 1
    reading = measure("math", before, engine.metrics(), answer)
    assert not reading.valid and "running or waiting after" in reading.why


def test_a_counter_reset_or_restart_between_scrapes_discards_the_reading() -> None:
    engine = Engine()
    engine.draft(1000, 0.5)
    before = engine.metrics()
    restarted = Engine(created=2000.0)
    answer = restarted.ask("a math prompt")
    reading = measure("math", before, restarted.metrics(), answer)
    assert not reading.valid and "reset" in reading.why


def test_no_usage_in_the_response_does_not_count() -> None:
    engine = Engine()
    before = engine.metrics()
    engine.ask("a math prompt")
    reading = measure("math", before, engine.metrics(), Answer(True, None, 1.0))
    assert not reading.valid and "usage" in reading.why


def test_per_position_acceptance_is_read_from_the_deltas() -> None:
    engine = Engine()
    engine.draft(5000, 0.5)  # history before the canary does not leak into it
    reading = canary(engine, 25.0).readings[0]
    assert reading.valid and reading.drafts == 40
    assert abs(reading.per_pos[0] - 0.78) < 1e-9
    assert abs(reading.per_pos[1] - 0.78 * 0.8 * 0.78) < 1e-9
    assert abs(reading.acceptance - sum(reading.per_pos) / K) < 1e-9


def test_the_canary_learns_then_fires_only_after_consecutive_low_canaries() -> None:
    engine, state = Engine(), COUNTERS_ONLY
    state, fire = judge(state, canary(engine, 0.0), CFG)
    assert fire is None and state.baseline_of("math") == canary(Engine(), 0).readings[0].acceptance
    state, fire = judge(state, canary(engine, 1800.0), CFG)
    assert fire is None and state.low_streak == 0 and abs((state.health or 0) - 1.0) < 1e-9
    engine.scale = 0.6
    state, fire = judge(state, canary(engine, 3600.0), CFG)
    assert fire is None and state.low_streak == 1
    state, fire = judge(state, canary(engine, 3900.0), CFG)
    assert fire is not None and abs(fire.health - 0.6) < 1e-9
    assert "math 22.5% (0.60)" in fire.why


def test_one_canary_back_at_recover_fraction_clears_the_streak() -> None:
    engine, state = Engine(), COUNTERS_ONLY
    state, _ = judge(state, canary(engine, 0.0), CFG)
    engine.scale = 0.6
    state, _ = judge(state, canary(engine, 1.0), CFG)
    engine.scale = 0.95
    state, _ = judge(state, canary(engine, 2.0), CFG)
    engine.scale = 0.6
    state, fire = judge(state, canary(engine, 3.0), CFG)
    assert fire is None and state.low_streak == 1


def test_an_engine_restart_between_canaries_learns_a_new_baseline() -> None:
    engine, state = Engine(), COUNTERS_ONLY
    state, _ = observe(state, engine.metrics(), CALM, 0.0, CFG)
    state, _ = judge(state, canary(engine, 30.0), CFG)
    engine.scale = 0.6
    state, _ = judge(state, canary(engine, 60.0), CFG)
    assert state.low_streak == 1
    fresh = Engine(created=5000.0)
    fresh.scale = 0.9  # a new engine on its own footing: a new baseline, not a low canary
    state, _ = observe(state, fresh.metrics(), CALM, 90.0, CFG)
    assert state.baseline == () and state.low_streak == 0
    state, fire = judge(state, canary(fresh, 120.0), CFG)
    assert fire is None and "baseline learnt" in state.note
    state, _ = judge(state, canary(fresh, 150.0), CFG)
    assert state.health is not None and abs(state.health - 1.0) < 1e-9


def test_low_passive_estimate_with_a_normal_canary_says_the_workload_not_the_drafter() -> None:
    engine, state = Engine(), COUNTERS_ONLY
    state, _ = judge(state, canary(engine, 0.0), CFG)
    state, _ = observe(state, engine.metrics(), LOW, 400.0, CFG)
    state, said = tell(state, CFG)
    assert said is None  # the only valid canary predates the suspicion
    state, fire = judge(state, canary(engine, 420.0), CFG)
    assert fire is None and state.note.startswith(WORKLOAD_NOT_DRAFTER)
    state, said = tell(state, CFG)
    assert said is not None and said.startswith(WORKLOAD_NOT_DRAFTER)
    state, said = tell(state, CFG)
    assert said is None  # once per suspicious spell
    shown = snapshot(state, 430.0, CFG)
    assert shown["suspicious"] and shown["confirm"] == "canary"
    assert shown["round"]["readings"][0]["prompt"] == "math"


def test_a_box_that_never_idles_is_reported_not_acted_on() -> None:
    engine, state = Engine(), COUNTERS_ONLY
    engine.running = 3
    state, _ = observe(state, engine.metrics(), LOW, 0.0, CFG)
    state, due = observe(state, engine.metrics(), LOW, 7300.0, CFG)
    assert not due and waiting_too_long(state, 7300.0, CFG)
    assert "no valid canary" in status_note(state, 7300.0, CFG)
    assert not waiting_too_long(replace(state, last_valid=100.0), 7300.0, CFG)


def test_a_round_survives_json() -> None:
    engine = Engine()
    taken = canary(engine, 25.0)
    assert Round.from_json(taken.to_json()) == taken


def test_a_canary_is_owed_while_busy_so_the_daemon_looks_every_tick() -> None:
    engine, state = Engine(), COUNTERS_ONLY
    state, _ = judge(state, canary(engine, 0.0), CFG)
    assert not wanted(state, 600.0, CFG)
    assert wanted(state, 1800.0, CFG)  # owed, though the engine may be busy
    state, _ = observe(state, engine.metrics(), LOW, 900.0, CFG)
    assert wanted(state, 900.0, CFG)  # suspicious: canary_soon
    assert not wanted(state, 900.0, CFG.model_copy(update={"confirm": "none"}))
    engine.scale = 0.6
    state, _ = observe(state, engine.metrics(), CALM, 1000.0, CFG)
    state, _ = judge(state, canary(engine, 1000.0), CFG)
    assert state.low_streak == 1 and state.suspicious_since is None
    assert wanted(state, 1300.0, CFG)  # a low canary is reason enough to look again soon


# --- a canary reading its own stats (vLLM --per-request-spec-decode-metrics) ----------------


def own_stats(alpha: float, scale: float = 1.0, steps: int = 40, trimmed: int = 0) -> OwnStats:
    """What vLLM 0.33 reports for one greedy request: a histogram of draft tokens accepted per
    verify step (bonus excluded), ``trimmed`` steps proposing one token fewer than K."""
    reached = [round(steps * scale * alpha * (0.8 * alpha) ** i) for i in range(K)]
    histogram = [steps - reached[0]]
    histogram += [reached[i - 1] - reached[i] for i in range(1, K)] + [reached[-1]]
    return OwnStats(
        acceptance_histogram=tuple(histogram),
        num_spec_steps=steps,
        num_draft_tokens=steps * K - trimmed,
        num_spec_tokens=K,
    )


def ask_own(engine: Engine, prompt: str) -> Answer:
    """A busy engine: users draft around the request, which reports its own stats."""
    engine.draft(500, 0.3)
    alpha = next(a for name, a in HEALTHY.items() if name in prompt)
    made = engine.draft(40, alpha)
    return Answer(True, made, 1.5, own=own_stats(alpha, engine.scale))


def test_own_stats_count_under_load_and_give_acceptance_per_position() -> None:
    engine = Engine()
    engine.running = 3  # never idle: the counters' way could not count this
    taken = take(PROMPTS, engine.metrics, lambda p: ask_own(engine, p), 25.0)
    assert taken.valid and taken.own_stats is True
    math = taken.readings[0]
    assert math.source == "own" and math.drafts == 40 and math.draft_tokens == 40 * K
    expected = [round(40 * 0.78 * (0.8 * 0.78) ** i) / 40 for i in range(K)]
    assert math.per_pos == pytest.approx(expected)
    assert math.acceptance == pytest.approx(sum(expected) / K)


def test_own_stats_with_trimmed_drafts_do_not_count_unless_detailed_shows_the_full_steps() -> None:
    stats = own_stats(0.78, trimmed=3)
    reading = measure("math", None, None, Answer(True, 60, 1.0, own=stats))
    assert not reading.valid and "trimmed" in reading.why

    # detailed: the per-step arrays tell which steps proposed all K; only those are read
    def detailed(accepted: tuple[int, ...], drafted: tuple[int, ...]) -> OwnStats:
        histogram = [0] * (K + 1)
        for a in accepted:
            histogram[a] += 1
        return OwnStats(
            acceptance_histogram=tuple(histogram),
            num_spec_steps=len(accepted),
            num_draft_tokens=sum(drafted),
            num_spec_tokens=K,
            per_step_accepted=accepted,
            per_step_drafted=drafted,
        )

    stats = detailed((5, 0, 1, 2, 5, 3) * 4, (5, 5, 2, 5, 5, 4) * 4)
    reading = measure("math", None, None, Answer(True, 80, 1.0, own=stats))
    assert reading.valid and reading.drafts == 16  # steps 0, 1, 3, 4 of each six
    assert reading.per_pos == pytest.approx((3 / 4, 3 / 4, 2 / 4, 2 / 4, 2 / 4))
    # one full step among thirty (alone in the batch a moment): too few to read, not health 0
    few = detailed((0,) + (2,) * 29, (5,) + (3,) * 29)
    reading = measure("math", None, None, Answer(True, 90, 1.0, own=few))
    assert not reading.valid and "trimmed" in reading.why


def test_short_drafts_of_a_canary_alone_are_the_drafters_own_and_count_on_their_rate() -> None:
    """ngram and suffix propose fewer than K where they find no match (vLLM 0.32.0, measured
    on the real engine: 2.91 of 3 per step on an idle engine); with nothing else running that
    is the drafter, not the scheduler's trim, and a greedy prompt drafts the same way each
    time: the reading counts on accepted over proposed. Under load it still does not."""
    stats = own_stats(0.78, trimmed=4)
    idle = EngineMetrics(None, running=0.0, waiting=0.0, generation_tokens=10.0)
    busy = EngineMetrics(None, running=2.0, waiting=0.0, generation_tokens=10.0)
    answer = Answer(True, 60, 1.0, own=stats)

    reading = measure("math", idle, idle, answer)

    accepted = sum(j * n for j, n in enumerate(stats.acceptance_histogram))
    assert reading.valid, reading.why
    assert reading.draft_tokens == 40 * K - 4 and reading.accepted == accepted
    assert reading.acceptance == pytest.approx(accepted / (40 * K - 4))
    for before, after in ((idle, busy), (busy, idle), (None, idle)):
        reading = measure("math", before, after, answer)
        assert not reading.valid and "trimmed under load" in reading.why


def test_unreadable_own_stats_name_what_is_wrong() -> None:
    bad = OwnStats.parse(
        {
            "acceptance_histogram": [1, 2],
            "num_spec_steps": 3,
            "num_draft_tokens": 15,
            "num_spec_tokens": 5,
        }
    )
    assert isinstance(bad, str) and "2 buckets" in bad and "num_spec_tokens 5" in bad
    missing = OwnStats.parse({"acceptance_histogram": [3, 0], "num_spec_steps": 3})
    assert isinstance(missing, str) and "num_draft_tokens" in missing
    huge = 10**400  # not vLLM's: would overflow a float and crash the loop
    big = OwnStats.parse(
        {
            "acceptance_histogram": [0, huge],
            "num_spec_steps": huge,
            "num_draft_tokens": huge,
            "num_spec_tokens": 1,
        }
    )
    assert isinstance(big, str) and "acceptance_histogram" in big
    reading = measure("math", None, None, Answer(True, 10, 1.0, own=bad))
    assert not reading.valid and reading.why == bad


def test_with_own_stats_a_canary_goes_under_light_load_not_while_users_wait() -> None:
    engine, state = Engine(), CanaryState()
    engine.running = 3
    state, due = observe(state, engine.metrics(), CALM, 0.0, CFG)
    assert due and state.own_stats is None  # not known yet: one canary under load finds out
    state, _ = judge(state, take(PROMPTS, engine.metrics, lambda p: ask_own(engine, p), 5.0), CFG)
    assert state.own_stats and state.valid_count == 1
    state, due = observe(state, engine.metrics(), LOW, 400.0, CFG)
    assert due  # suspicious, busy, yet a canary can count: it goes now
    engine.waiting = 1
    state, due = observe(state, engine.metrics(), LOW, 410.0, CFG)
    assert not due  # it would take a waiting user's place
    engine.waiting, engine.running = 0, 9
    state, due = observe(state, engine.metrics(), LOW, 420.0, CFG)
    assert not due  # above canary_max_running (8)
    idle_only = CFG.model_copy(update={"canary_max_running": 0})
    engine.running = 1
    state, due = observe(state, engine.metrics(), LOW, 430.0, idle_only)
    assert not due


def test_the_first_canary_finds_out_whether_answers_carry_their_own_stats() -> None:
    engine, state = Engine(), CanaryState()
    engine.running = 2
    state, due = observe(state, engine.metrics(), CALM, 0.0, CFG)
    assert due  # unknown: one canary under load finds out
    state, _ = judge(state, take(PROMPTS, engine.metrics, engine.ask, 1.0), CFG)
    assert state.own_stats is False and state.discarded == 1  # counters, and others ran
    assert "other" in state.note
    state, due = observe(state, engine.metrics(), LOW, 600.0, CFG)
    assert not due


def test_own_stats_outlive_an_engine_restart_and_go_when_answers_lack_them() -> None:
    engine, state = Engine(), CanaryState()
    state, _ = observe(state, engine.metrics(), CALM, 0.0, CFG)
    state, _ = judge(state, take(PROMPTS, engine.metrics, lambda p: ask_own(engine, p), 5.0), CFG)
    fresh = Engine(created=5000.0)
    state, _ = observe(state, fresh.metrics(), CALM, 100.0, CFG)
    assert state.baseline == () and state.own_stats  # new baseline, same engine flags
    fresh.running = 2  # recreated without the flag: the answer says so, and idle rules again
    state, _ = judge(state, take(PROMPTS, fresh.metrics, fresh.ask, 200.0), CFG)
    assert state.own_stats is False and state.discarded == 1
    state, due = observe(state, fresh.metrics(), LOW, 600.0, CFG)
    assert not due  # busy, and a canary here could not count


def test_a_decay_seen_through_own_stats_fires_under_load() -> None:
    engine, state = Engine(), CanaryState()
    engine.running = 4
    state, _ = observe(state, engine.metrics(), CALM, 0.0, CFG)
    fires = []
    for n, scale in enumerate((1.0, 1.0, 0.5, 0.5)):
        engine.scale = scale
        taken = take(PROMPTS, engine.metrics, lambda p: ask_own(engine, p), 10.0 + 400 * n)
        state, fire = judge(state, taken, CFG)
        fires.append(fire)
    assert fires[:3] == [None, None, None] and fires[3] is not None
    assert fires[3].health == pytest.approx(0.5, abs=0.02)  # rounding to whole steps
    assert "2 valid canaries in a row" in fires[3].why


def test_a_round_with_own_stats_survives_record_and_replay() -> None:
    engine = Engine()
    engine.running = 2
    taken = take(PROMPTS, engine.metrics, lambda p: ask_own(engine, p), 25.0)
    again = Round.from_json(taken.to_json())
    assert again == taken and again.readings[0].source == "own"


def test_a_canary_short_of_recover_fraction_brings_the_next_one_sooner() -> None:
    state = replace(COUNTERS_ONLY, last_valid=0.0, last_try=0.0, health=0.85)
    assert wanted(state, 301.0, CFG)  # 0.85: not low yet, but on its way
    assert not wanted(replace(state, health=0.95), 301.0, CFG)
    assert wanted(replace(state, health=0.95), 1801.0, CFG)


def test_a_prompt_drafting_nothing_accepted_is_judged_not_a_crash() -> None:
    """Health 0 for one prompt (nothing accepted): the fire says what the baseline was."""
    engine, state = Engine(), COUNTERS_ONLY
    state, _ = judge(state, canary(engine, 25.0), CFG)
    engine.scale = 0.0
    fire = None
    for t in (400.0, 800.0):
        state, fire = judge(state, canary(engine, t), CFG)
    assert fire is not None and fire.health == 0.0 and fire.acceptance == 0.0
    assert fire.baseline == pytest.approx(statistics.mean(dict(state.baseline).values()))


def test_the_baseline_is_pooled_over_the_first_canaries_which_come_soon() -> None:
    pooled = CFG.model_copy(update={"canary_learn": 3})
    engine, state = Engine(), COUNTERS_ONLY
    for n, scale in enumerate((1.2, 0.8, 1.0)):  # greedy not reproducible: samples vary
        engine.scale = scale
        state, fire = judge(state, canary(engine, 25.0 + 300 * n), pooled)
        assert fire is None and state.health is None  # nothing judged while learning
        if n < 2:
            assert state.baseline == () and f"{n + 1} of 3 canaries" in state.note
            assert wanted(state, 25.0 + 300 * n + 301, pooled)  # the next soon, not in 30 min
    assert dict(state.baseline)["math"] == pytest.approx(
        sum(0.78 * (0.8 * 0.78) ** i for i in range(K)) / K
    )  # the pooled mean, not the first
    assert "learnt over 3 canaries" in state.note and len(state.baseline_rounds) == 3
    assert not wanted(state, 25.0 + 600 + 301, pooled)  # learnt: back to the interval
    engine.scale = 1.0
    state, _ = judge(state, canary(engine, 2500.0), pooled)
    assert state.health == pytest.approx(1.0)


def test_retries_slow_down_after_three_discards_in_a_row() -> None:
    state = COUNTERS_ONLY
    spoilt = Round(0.0, (measure("math", None, None, Answer(False, None, 1.0, "503")),), 1.0)
    for n in range(3):
        state, _ = judge(state, replace(spoilt, t=100.0 * n), CFG)
    assert state.misses == 3
    assert not wanted(state, 200.0 + CFG.canary_idle, CFG)  # not every 20 s forever
    assert wanted(state, 200.0 + CFG.canary_soon, CFG)


def test_non_finite_counters_and_an_empty_valid_trace_are_refused_not_crashed() -> None:
    engine = Engine()
    before = engine.metrics()
    answer = engine.ask("a math prompt")
    nan = replace(engine.metrics(), spec=replace(engine.metrics().spec, accepted=float("nan")))
    reading = measure("math", before, nan, answer)
    assert not reading.valid and "not finite" in reading.why
    state, _ = judge(COUNTERS_ONLY, canary(engine, 25.0), CFG)
    empty = canary_round_with_nothing_drafted(400.0)
    state, fire = judge(state, empty, CFG)  # a hand-made trace: "valid", nothing drafted
    assert fire is None and "drafted nothing" in state.note


def canary_round_with_nothing_drafted(t: float) -> Round:
    from sparkwarden.evidence.canary_reading import Reading

    readings = tuple(Reading(p, True, "valid") for p in PROMPTS)
    return Round(t, readings, 1000.0)
