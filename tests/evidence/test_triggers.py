"""Each trigger, pure, with a fake clock and recorded observations."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sparkwarden.base.containers import ContainerState, ExitWatch
from sparkwarden.config.schema import BudgetConfig, Config, DrainConfig, HealthConfig, MemoryConfig
from sparkwarden.evidence.triggers import (
    AUTOMATIC,
    REASONS,
    DrainState,
    HealthState,
    MemoryState,
    PastRun,
    budget,
    drain_observe,
    health_observe,
    memory_observe,
    memory_trend,
    off,
    probe_due,
    uptime_due,
)
from sparkwarden.vllm.client import QUEUE_FULL, ChatOutcome, Health, interpret_chat
from sparkwarden.vllm.metrics import EngineMetrics, NoStats, parse

T0 = datetime(2026, 11, 30, 4, 30, tzinfo=UTC)
UP = Health("up", "HTTP 200")
DEAD = Health("dead", "HTTP 503")
SLOW = Health("no-answer", "no answer within 10s")
IDLE = EngineMetrics(None, 0.0, 0.0, 100.0)
BUSY = EngineMetrics(None, 4.0, 2.0, 100.0)
HEALTH = HealthConfig(failures=3, stall_after=300)  # wedge_after at its default, 45 s


def running(started: datetime) -> ContainerState:
    return ContainerState("vllm", "id", "running", started, None, 0, False)


def test_reason_names_are_the_contract() -> None:
    assert REASONS == (
        "schedule",
        "uptime",
        "acceptance",
        "crash",
        "unhealthy",
        "memory",
        "manual",
        "repair",
    )
    assert "manual" not in AUTOMATIC


def test_uptime() -> None:
    assert uptime_due(running(T0), T0 + timedelta(hours=19, minutes=59), 72000) is None
    why = uptime_due(running(T0), T0 + timedelta(hours=20, minutes=1), 72000)
    assert why is not None and "up 20.0 h, limit 20 h" in why
    assert uptime_due(None, T0, 72000) is None
    assert uptime_due(running(T0), T0 + timedelta(days=9), 0) is None  # 0 turns it off


def test_operator_stop_is_not_a_crash() -> None:
    watch = ExitWatch().on_event("kill", "15", 100.0)
    assert watch.classify_die(100.4, stop_window=135) == "operator-stop"
    escalated = watch.on_event("kill", "9", 220.0)  # docker stop ran out of patience
    assert escalated.classify_die(220.1, stop_window=135) == "operator-stop"


def test_crash_and_docker_kill_are_crashes() -> None:
    assert ExitWatch().classify_die(50.0, stop_window=135) == "crash"
    assert ExitWatch().on_event("kill", "9", 50.0).classify_die(50.01, 135) == "crash"
    old_term = ExitWatch().on_event("kill", "15", 0.0)
    assert old_term.classify_die(1000.0, stop_window=135) == "crash"
    assert old_term.on_event("start", None, 1.0).classify_die(2.0, 135) == "crash"


def check(
    state: HealthState,
    t: float,
    health: Health | None = UP,
    canary: ChatOutcome | None = None,
    metrics: EngineMetrics | None = IDLE,
    uptime: float | None = 3600.0,
    unanswered: float | None = None,
    canary_sent: float | None = None,
) -> tuple[HealthState, str | None]:
    return health_observe(
        state,
        t=t,
        uptime_s=uptime,
        boot_grace=300,
        health=health,
        canary=canary,
        metrics=metrics,
        cfg=HEALTH,
        unanswered=unanswered,
        canary_sent=canary_sent,
    )


def test_dead_engine_fires_after_n_in_a_row() -> None:
    state, why = check(HealthState(), 0, DEAD)
    state, why = check(state, 30, DEAD)
    assert why is None and state.failures == 2
    state, why = check(state, 60, DEAD)
    assert why is not None and "HTTP 503" in why and "3 checks in a row" in why


def test_a_good_check_clears_the_count() -> None:
    state, _ = check(HealthState(), 0, DEAD)
    state, _ = check(state, 30, DEAD)
    state, why = check(state, 60, UP)
    assert why is None and state.failures == 0


def test_boot_grace_ignores_a_loading_engine() -> None:
    state = HealthState()
    for t in range(0, 300, 30):
        state, why = check(state, t, Health("loading", "connection refused"), uptime=t)
        assert why is None
    assert "booting" in state.last


def test_busy_engine_is_not_dead() -> None:
    state = HealthState()
    for t in range(0, 600, 30):
        state, why = check(state, t, SLOW, metrics=EngineMetrics(None, 4.0, 2.0, 100.0 + t))
        assert why is None, why
    assert "busy" in state.last


def test_slow_health_while_idle_counts() -> None:
    state = HealthState()
    whys = []
    for t in (0, 30, 60):
        state, why = check(state, t, SLOW, metrics=IDLE)
        whys.append(why)
    assert whys[-1] is not None and "while idle" in whys[-1]


def test_failing_canary_behind_a_200_counts() -> None:
    bad = ChatOutcome(False, "HTTP 500: EngineCore died")
    state = HealthState()
    for t in (0, 30):
        state, why = check(state, t, UP, canary=bad)
        assert why is None
    state, why = check(state, 60, UP, canary=bad)
    assert why is not None and "health chat" in why


def test_a_sleeping_engine_is_reported_sleeping_never_restarted() -> None:
    """Asleep (``/sleep``): /health 200, a chat that fails meanwhile (queued past its timeout, or
    refused with 503 while generation is paused) is no failure, requests kept frozen."""
    paused = ChatOutcome(False, "HTTP 503: Generation is paused. Please retry after it resumes.")
    asleep = EngineMetrics(
        None, 2.0, 0.0, 5000.0, prompt_tokens=9000.0, sleeping=True, sleep_level=1
    )
    state = HealthState()
    for t in range(0, 1200, 30):
        state, why = check(state, t, UP, canary=paused, metrics=asleep)
        assert why is None and state.failures == 0 and state.suspect is None
    assert state.last == "sleeping (level 1): put to sleep, not restarted"
    # a /health that fails is still a failure, asleep or not
    for t in (1200, 1230):
        state, why = check(state, t, DEAD, metrics=asleep)
    state, why = check(state, 1260, DEAD, metrics=asleep)
    assert why is not None and "HTTP 503" in why


def frozen(
    running: float = 4.0, generation: float = 5000.0, prompt: float = 9000.0
) -> EngineMetrics:
    return EngineMetrics(None, running, 0.0, generation, prompt_tokens=prompt)


def test_a_stall_is_confirmed_by_a_failed_chat_before_it_fires() -> None:
    state = HealthState()
    for t in range(0, 330, 30):  # tokens frozen while 4 requests "run"
        state, why = check(state, t, UP, metrics=frozen())
        assert why is None
    assert state.suspect is not None and "confirming with a chat request" in state.last
    hung = ChatOutcome(False, "no answer within 60s")
    state, why = check(state, 360, UP, metrics=frozen(), canary=hung)
    assert why is not None and why.startswith("stalled: generation and prompt tokens frozen")
    assert "a chat request failed too: no answer within 60s" in why


def test_a_stuck_gauge_with_a_working_engine_is_reported_not_restarted() -> None:
    state = HealthState()
    for t in range(0, 330, 30):
        state, why = check(state, t, UP, metrics=frozen())
    answered = ChatOutcome(True, "answered in 0.4s")
    state, why = check(state, 360, UP, metrics=frozen(), canary=answered)
    assert why is None and state.suspect is None
    assert state.stuck_gauge is not None and "stuck gauge" in state.last
    # the chat moved the counters; the gauge stays stuck: still reported, never a restart
    for t in range(390, 1500, 30):
        state, why = check(state, t, UP, metrics=frozen(generation=5001.0, prompt=9012.0))
        if state.suspect:
            state, why = check(state, t, UP, metrics=frozen(5001.0, 9012.0), canary=answered)
        assert why is None
    assert state.stuck_gauge is not None
    state, _ = check(state, 1530, UP, metrics=frozen(running=0.0))
    assert state.stuck_gauge is None  # the gauge came back to 0


def test_prompt_tokens_moving_is_not_a_stall() -> None:
    """A long prefill: no token generated for minutes, but prompt tokens are processed."""
    state = HealthState()
    for t in range(0, 600, 30):
        state, why = check(state, t, UP, metrics=frozen(prompt=9000.0 + 100 * t))
        assert why is None and state.suspect is None


def test_busy_engine_is_not_stalled() -> None:
    state = HealthState()
    for t in range(0, 330, 30):  # tokens flowing: just busy
        state, why = check(state, t, UP, metrics=frozen(generation=5000.0 + t))
        assert why is None and state.suspect is None


def test_memory_floor_alerts_once_per_episode() -> None:
    cfg = MemoryConfig(floor_gib=8, floor_for=120)
    state, alert = memory_observe(MemoryState(), 5.0, 0, cfg)
    assert alert is None
    state, alert = memory_observe(state, 5.0, 119, cfg)
    assert alert is None
    state, alert = memory_observe(state, 5.0, 121, cfg)
    assert alert == "alert"
    state, alert = memory_observe(state, 4.0, 500, cfg)
    assert alert is None
    state, alert = memory_observe(state, 30.0, 501, cfg)
    assert alert == "recovered" and state == MemoryState()


def test_drain_waits_for_quiet_then_goes() -> None:
    cfg = DrainConfig(quiet=30, deadline=600)
    state = DrainState(started=0)
    state, go = drain_observe(state, BUSY, 0, cfg)
    assert go is None
    state, go = drain_observe(state, IDLE, 10, cfg)
    state, go = drain_observe(state, BUSY, 20, cfg)  # a request came in: start over
    state, go = drain_observe(state, IDLE, 30, cfg)
    assert go is None
    state, go = drain_observe(state, IDLE, 61, cfg)
    assert go is not None and "idle for 31s" in go


def test_drain_deadline_and_no_gauges() -> None:
    cfg = DrainConfig(quiet=30, deadline=600)
    state = DrainState(started=0)
    state, go = drain_observe(state, BUSY, 599, cfg)
    assert go is None
    _, go = drain_observe(state, BUSY, 600, cfg)
    assert go is not None and "deadline" in go


def test_drain_without_request_gauges_waits_the_whole_deadline() -> None:
    """--disable-log-stats: nothing says the engine is quiet, so running chats are not cut."""
    cfg = DrainConfig(quiet=30, deadline=600)
    no_gauges = EngineMetrics(None, None, None, None)
    state, go = drain_observe(DrainState(started=0), None, 0, cfg)
    assert go is None and "waiting the whole drain deadline (600s left)" in state.note
    state, go = drain_observe(state, no_gauges, 590, cfg)
    assert go is None and "(10s left)" in state.note
    state, go = drain_observe(state, None, 600, cfg)
    assert go == "no request gauges: waited the whole drain deadline of 600s"


LLM = {"containers": ["vllm"], "base_url": "http://127.0.0.1:8000"}


def test_off_says_which_triggers_are_off_and_why() -> None:
    cfg = Config.model_validate(
        {
            "llm": LLM,
            "watch": {"max_uptime": 0},
            "health": {"chat_interval": 0},
        }
    )
    page = (Path(__file__).parents[1] / "fixtures/vllm/0.33.0/no-stats.prom").read_text()
    with pytest.raises(NoStats) as caught:
        parse(page)
    out = off(cfg, None, str(caught.value), None)
    assert set(out) == {"uptime", "acceptance", "stall", "drain", "health chat", "wedge"}
    chatting = Config.model_validate({"llm": LLM})
    assert "a queue cannot be told from a wedge" in off(chatting, None, "no stats", None)["wedge"]
    assert "--disable-log-stats" in out["acceptance"] and "--disable-log-stats" in out["stall"]
    assert (
        out["drain"] == "no request gauges: a planned restart waits the whole drain deadline (600s)"
    )
    assert off(Config.model_validate({"llm": LLM}), BUSY, "ok", None) == {
        "acceptance": "no spec-decode counters (no --speculative-config)"
    }
    with_spec = parse((Path(__file__).parents[1] / "fixtures/vllm/0.12.0/k5.prom").read_text())
    assert off(Config.model_validate({"llm": LLM}), with_spec, "ok", True) == {}


BUDGET = BudgetConfig(max_runs=3, window=6 * 3600, backoff=120, backoff_max=3600)


def test_budget_counts_automatic_runs_in_the_window_since_reset() -> None:
    now = 100_000.0
    runs = [
        PastRun("crash", "ok", now - 7 * 3600, None),  # outside the window
        PastRun("manual", "ok", now - 3600, None),  # an operator's: never counted
        PastRun("uptime", "ok", now - 1800, now - 1700),
        PastRun("crash", "ok", now - 900, now - 800),
    ]
    verdict = budget(runs, now, 0.0, BUDGET)
    assert (verdict.used, verdict.limit, verdict.allowed) == (2, 3, True)
    runs.append(PastRun("crash", "ok", now - 60, now - 50))
    verdict = budget(runs, now, 0.0, BUDGET)
    assert not verdict.allowed and verdict.not_before is None  # spent: give up
    assert budget(runs, now, now - 100, BUDGET).allowed  # after 'sparkwarden reset'


def test_backoff_doubles_after_each_failure() -> None:
    now = 100_000.0
    one = [PastRun("unhealthy", "failed", now - 100, now - 100)]
    verdict = budget(one, now, 0.0, BUDGET)
    assert not verdict.allowed and verdict.not_before == now - 100 + 120
    assert budget(one, now + 21, 0.0, BUDGET).allowed
    two = [*one, PastRun("unhealthy", "failed", now - 50, now - 50)]
    assert budget(two, now, 0.0, BUDGET).not_before == now - 50 + 240


def test_runs_dated_in_the_future_count_but_set_no_backoff() -> None:
    """After the wall clock stepped back an hour, runs recorded before the step are dated in
    the future: they still count against the budget, but no backoff is measured from them."""
    from sparkwarden.config.schema import BudgetConfig
    from sparkwarden.evidence.triggers import PastRun, budget

    cfg = BudgetConfig(max_runs=3, window=3600, backoff=60, backoff_max=600)
    now = 1_000_000.0
    future = [PastRun("crash", "failed", now + 3600, now + 3605)]
    verdict = budget(future, now, 0.0, cfg)
    assert verdict.allowed and verdict.used == 1  # not backing off until now + 3665
    assert not budget(future * 3, now, 0.0, cfg).allowed  # three of them spend the budget


def test_a_failing_gateway_is_reported_once_per_episode_and_never_restarts() -> None:
    from sparkwarden.evidence.triggers import GATEWAY_STEP, GatewayWatch, gateway_observe
    from sparkwarden.restart.step_names import STEPS

    assert GATEWAY_STEP in STEPS
    bad = ChatOutcome(False, "HTTP 502: Bad Gateway")
    state, why = gateway_observe(GatewayWatch(), bad, t=10.0)
    assert why is not None and "the engine answers" in why and "502" in why
    assert state.ok is False and state.failing_since == 10.0
    state, why = gateway_observe(state, ChatOutcome(False, "HTTP 429: cooldown"), t=20.0)
    assert why is None and state.failing_since == 10.0 and "429" in state.last
    state, why = gateway_observe(state, ChatOutcome(True, "answered 'ready'"), t=30.0)
    assert why is None and state.ok is True and state.failing_since is None
    assert gateway_observe(state, bad, t=40.0)[1] is not None  # a new episode is told again


TREND = MemoryConfig(trend_runs=3, trend_fall_gib=2.0)


def test_memory_that_keeps_falling_after_stop_and_drop_means_reboot() -> None:
    leak = memory_trend([100.0, 99.0, 97.5, 95.0], TREND)  # the last 3: 99 -> 97.5 -> 95
    assert leak is not None and leak.readings == (99.0, 97.5, 95.0) and leak.fall_gib == 4.0
    assert "held by no process or container grew at each of the last 3 runs" in leak.why
    assert "fell 99.0 -> 95.0 GiB (4.0 GiB, more than 2)" in leak.why


def test_memory_trend_needs_every_run_falling_and_enough_of_a_fall() -> None:
    assert memory_trend([99.0, 97.5], TREND) is None  # too few runs
    assert memory_trend([99.0, 99.5, 95.0], TREND) is None  # one run got memory back
    assert memory_trend([99.0, 98.5, 97.5], TREND) is None  # 1.5 GiB: within the noise
    assert memory_trend([99.0, 97.0, 94.0], MemoryConfig(trend_runs=3, trend_fall_gib=0)) is None


def test_drain_with_a_stuck_gauge_reads_idle_from_the_tokens() -> None:
    """num_requests_running stuck above 0 (vLLM #22545): without this the drain would wait
    its whole deadline every time; idle is then no token moving for ``quiet``."""
    cfg = DrainConfig(quiet=30, deadline=600)
    state = DrainState(started=0)
    for t in range(0, 100, 10):  # tokens moving: real work behind the stuck gauge
        state, go = drain_observe(state, frozen(generation=5000.0 + t), t, cfg, stuck_gauge=True)
        assert go is None
    assert "request gauge stuck" in state.note
    for t in range(100, 140, 10):  # nothing moves
        state, go = drain_observe(state, frozen(generation=5090.0), t, cfg, stuck_gauge=True)
    assert go == "idle for 30s"
    # the same gauges, not known to be stuck: a busy engine, wait to the deadline
    state = DrainState(started=0)
    for t in range(0, 600, 10):
        state, go = drain_observe(state, frozen(), t, cfg)
        assert go is None


# --- a wedge: the daemon's own request unanswered while nothing moves ------------------------


def still(
    running: float = 0.0,
    waiting: float = 0.0,
    generation: float = 5000.0,
    prompt: float = 9000.0,
    kv: float = 0.07,
) -> EngineMetrics:
    return EngineMetrics(None, running, waiting, generation, kv, prompt)


def look(
    state: HealthState,
    t: float,
    metrics: EngineMetrics,
    unanswered: float | None = None,
    canary: ChatOutcome | None = None,
    canary_sent: float | None = None,
    uptime: float = 3600.0,
) -> tuple[HealthState, str | None]:
    """:func:`check` of an engine whose /health says 200, with the daemon's chat in flight."""
    return check(state, t, UP, canary, metrics, uptime, unanswered, canary_sent)


@pytest.mark.parametrize("running", [0.0, 4.0], ids=["idle", "busy"])
def test_a_wedge_behind_a_200_fires_after_wedge_after_of_no_progress(running: float) -> None:
    """A stopped worker (vLLM 0.32, SIGSTOP): /health 200, gauges and counters frozen, the
    daemon's chat unanswered: a wedge once nothing moved for ``wedge_after`` since it was sent."""
    state, _ = look(HealthState(), 0, still(running))
    fired = None
    for t in range(5, 120, 5):
        state, why = look(state, t, still(running), unanswered=10.0)
        if why is not None:
            fired = (t, why)
            break
    assert fired is not None and fired[0] == 55  # sent at 10, 45 s of nothing
    assert fired[1].startswith("wedged: no progress for 45s")
    assert f"({running:g} running, 0 waiting)" in fired[1]


def test_a_probe_behind_a_queue_that_moves_is_never_a_wedge() -> None:
    """A full engine: the daemon's chat waits behind 64 streams for ten minutes; tokens move."""
    state = HealthState()
    for t in range(0, 600, 5):
        busy = still(running=64, waiting=30, generation=5000.0 + 40 * t)
        state, why = look(state, t, busy, unanswered=1.0)
        assert why is None and state.failures == 0, why


def test_a_long_prefill_moves_only_the_kv_cache_and_is_not_a_wedge() -> None:
    """A 262k prompt's chunked prefill: no token counted for minutes, the KV cache filling."""
    state = HealthState()
    for t in range(0, 300, 5):
        prefill = still(running=1, waiting=1, kv=0.05 + t / 1000)
        state, why = look(state, t, prefill, unanswered=2.0)
        assert why is None, why


def test_a_prefill_of_30s_with_nothing_moving_then_the_answer_is_not_a_wedge() -> None:
    """The worst case the bound allows: a 32k prompt on a 27B dense (30 s of prefill) that
    moves nothing (no KV cache gauge), the daemon's chat queued behind it from its start."""
    state, _ = look(HealthState(), 0, still(running=1))
    for t in range(5, 35, 5):
        state, why = look(state, t, still(running=1, kv=0.07), unanswered=0.0)
        assert why is None
    # the prefill ends: its prompt tokens are counted, the chat answers
    state, why = look(state, 35, still(running=1, prompt=41768.0), unanswered=0.0)
    state, why = look(state, 40, still(prompt=41768.0, generation=5001.0), None, OK, 0.0)
    assert why is None and state.proven and state.unanswered_since is None


OK = ChatOutcome(True, "answered 'ready' (finish_reason stop)")


def test_a_chat_timed_out_behind_a_moving_queue_is_no_failure() -> None:
    late = ChatOutcome(False, "no answer within 180s", timed_out=True)
    state, _ = look(HealthState(), 0, still(running=64))
    state, _ = look(state, 100, still(running=64, generation=9000.0), unanswered=0.0)
    state, why = look(state, 180, still(running=64, generation=9900.0), None, late, 0.0)
    assert why is None and state.failures == 0


def test_a_chat_turned_away_by_the_queue_limits_is_busy_never_a_failure() -> None:
    """vLLM's ``--max-num-queued-reqs`` answers 503 "The engine is currently busy...": the
    daemon's chat turned away at every look is a full queue, not a dead engine (the suite saw
    three such 503s restart a busy engine under load)."""
    body = json.dumps({"error": {"message": f"{QUEUE_FULL} Please try again.", "code": 503}})
    full = interpret_chat(503, body)
    assert full.turned_away and not full.ok
    state = HealthState()
    for t in range(0, 50, 5):
        state, why = look(state, t, still(running=2, generation=100.0 + t), None, full, t - 1.0)
        assert why is None and state.failures == 0, (t, state)
    # any other 503 (the dev-mode /pause's) or a 500 still counts
    other = interpret_chat(503, '{"error": {"message": "Generation is paused.", "code": 503}}')
    assert not other.turned_away


def test_a_request_of_the_daemons_that_timed_out_with_nothing_moving_is_a_wedge() -> None:
    """A drafting canary runs in the loop, bounded by ``wedge_after``: one sent as the engine
    wedged comes back timed out, and is judged as the daemon's request unanswered that long."""
    hung = ChatOutcome(False, "drafting canary: no answer within 45s", timed_out=True)
    state, _ = look(HealthState(), 0, still())
    state, why = look(state, 50, still(), None, hung, 5.0)
    assert why is not None and why.startswith("wedged: no progress for 45s"), why
    # the same, with the health chat sent in the check that reads the canary's end
    state, _ = look(HealthState(), 0, still())
    state, why = look(state, 50, still(), 50.0, hung, 5.0)
    assert why is not None and why.startswith("wedged: no progress for 45s"), why
    # one that timed out on a slow engine that moved meanwhile (its own tokens) is not
    state, _ = look(HealthState(), 0, still())
    state, why = look(state, 50, still(generation=5256.0), None, hung, 5.0)
    assert why is None


def test_a_sleeping_engine_queues_the_chat_and_is_not_wedged() -> None:
    asleep = EngineMetrics(None, 0.0, 1.0, 5000.0, prompt_tokens=9.0, sleeping=True)
    state = HealthState()
    for t in range(0, 600, 5):
        state, why = look(state, t, asleep, unanswered=0.0)
        assert why is None
    assert not probe_due(state, 600, HEALTH)


def test_the_chat_answered_ends_the_boot_grace() -> None:
    """Started outside sparkwarden: in the grace its silence is not judged; the first chat it
    answers ends the grace, and a wedge after it is caught, whatever the uptime."""
    state, why = look(HealthState(), 0, still(), unanswered=0.0, uptime=10)
    state, why = look(state, 100, still(), unanswered=0.0, uptime=110)
    assert why is None and "booting" in state.last and not state.proven
    state, why = look(state, 105, still(generation=5001.0), None, OK, 0.0, uptime=115)
    assert state.proven
    state, why = look(state, 120, still(generation=5001.0), unanswered=120.0, uptime=130)
    state, why = look(state, 165, still(generation=5001.0), unanswered=120.0, uptime=175)
    assert why is not None and why.startswith("wedged")
    # the run's chat probe proves a start of sparkwarden's own (decide.after_run)
    state, why = look(HealthState(proven=True), 0, still(), unanswered=0.0, uptime=5)
    state, why = look(state, 45, still(), unanswered=0.0, uptime=50)
    assert why is not None and why.startswith("wedged")


def test_when_the_health_chat_is_sent() -> None:
    cfg = HealthConfig()  # interval 15 s, chat_interval 10 min
    assert probe_due(HealthState(), 0, cfg)  # none sent yet
    state = HealthState(probed_at=100.0, moved_at=100.0)
    assert not probe_due(state, 110, cfg)
    assert probe_due(state, 115, cfg)  # nothing moved for an interval: idle, or wedged
    moving = replace(state, moved_at=114.0)
    assert not probe_due(moving, 115, cfg)  # tokens move: the engine proves itself
    assert probe_due(replace(moving, moved_at=699.0), 700, cfg)  # chat_interval, whatever moves
    assert probe_due(replace(moving, failures=1), 101, cfg)  # a quicker second look
    assert not probe_due(replace(state, unanswered_since=110.0), 200, cfg)  # one at a time
    assert not probe_due(state, 200, HealthConfig(chat_interval=0))
    assert probe_due(replace(state, suspect="frozen"), 101, HealthConfig(chat_interval=0))


def test_failed_health_chats_count_in_a_row_across_checks_that_send_none() -> None:
    """The chat is answered a check after it is sent: the checks between say nothing of it."""
    bad = ChatOutcome(False, "HTTP 500: EngineCore died")
    state, why = check(HealthState(), 0, UP, canary=bad)
    for t in (1, 2, 3):
        state, why = check(state, t, UP)
        assert why is None and state.failures == 1
    state, why = check(state, 4, UP, canary=bad)
    state, why = check(state, 5, UP, canary=bad)
    assert why is not None and "3 checks in a row" in why
    answered = ChatOutcome(True, "answered 'ready'")
    state, _ = check(HealthState(), 0, UP, canary=bad)
    state, _ = check(state, 1, UP, canary=answered)
    assert state.failures == 0 and not state.chat_failed
