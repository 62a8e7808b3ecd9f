"""Issue 44's bound at the default intervals, on an injected clock: a wedge behind /health's 200
starts a restart within 90 s, idle or busy, and an engine at its limits is never restarted.

The daemon's own cadence (the observer: when it scrapes, checks and sends its health chat) and
its decisions (the pure decider and gate) run as the loop runs them, every ``watch.interval``;
only the engine is simulated: its counters, and whether it answers the health chat.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from devtools.standin.vllm_model.exposition import Counters, exposition
from sparkwarden.adapters.host import Memory
from sparkwarden.base.containers import ContainerState
from sparkwarden.config.schema import Config, parse
from sparkwarden.daemon import decide, gates
from sparkwarden.daemon import intents as do
from sparkwarden.daemon.observe import Answered, Observation, Observer, Recorded
from sparkwarden.vllm.client import ChatOutcome, Health
from sparkwarden.vllm.spec_payload import Answer

T0 = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
ORIGIN = T0.timestamp()  # the simulated engine counts seconds from here
#: what a restart may take to begin after a wedge (issue 44)
BOUND = 90.0
ANSWER = ChatOutcome(True, "answered 'ready' (finish_reason stop)")


def defaults(cluster: bool = False, canary: bool = False) -> Config:
    """The shipped defaults; only what names the engine and the state is given (and, for a
    cluster's head, its nodes: rank 0's container is the engine its daemon watches); the
    drafting canary on when ``canary`` (it then runs in the loop, as the daemon's does)."""
    raw: dict[str, Any] = {
        "llm": {"containers": ["vllm"], "base_url": "http://127.0.0.1:9"},
        "acceptance": {"enabled": canary},
        "state": {"dir": "/nonexistent/state"},
        "control": {"socket": "/nonexistent/s", "group": ""},
    }
    if cluster:
        head = {"name": "head", "engine": ["vllm"]}
        raw["cluster"] = {"nodes": [head, {"name": "w1", "ssh": "root@w1", "engine": ["w"]}]}
    return parse(raw)


@dataclass
class Engine:
    """A simulated engine. ``load(t)``: (running, waiting, tokens generated per second, KV
    cache use) while it works; from ``wedged_at`` on nothing moves and no chat is answered.
    ``answers_after``: how long the health chat waits for its turn while it works."""

    load: Callable[[float], tuple[float, float, float, float]]
    wedged_at: float = float("inf")
    answers_after: float = 0.0
    generation: float = 1000.0
    at: float = 0.0

    def advance(self, t: float) -> None:
        if self.at < self.wedged_at:
            _, _, rate, _ = self.load(self.at)
            self.generation += rate * (min(t, self.wedged_at) - self.at)
        self.at = t

    def page(self) -> str:
        t = min(self.at, self.wedged_at)
        running, waiting, _, kv = self.load(t)
        per_pos = (10.0, 5.0, 2.0)
        counters = Counters(40, 120, 17, per_pos, self.generation, running, waiting, 0.0, kv, 4e3)
        return exposition(counters, model="m")


class Prober:
    """The observer's prober on the simulated clock: an answer comes ``answers_after`` after
    the chat was sent, if the engine was not wedged by then; never after the wedge."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sent: float | None = None

    @property
    def in_flight(self) -> float | None:
        """Sent and not answered yet (an answer waits to be taken, as the real one's does)."""
        if self.sent is None or self._answer_at(self.sent) <= self.engine.at:
            return None
        return self.sent

    @property
    def untold(self) -> bool:
        return self.sent is not None

    def _answer_at(self, sent: float) -> float:
        engine = self.engine
        answer_at = sent - ORIGIN + engine.answers_after  # the engine's clock
        return float("inf") if answer_at >= engine.wedged_at else answer_at

    def send(self, t: float) -> None:
        self.sent = t

    def take(self) -> tuple[float | None, Answered | None]:
        sent, engine = self.sent, self.engine
        if sent is None:
            return None, None
        if engine.at < self._answer_at(sent):
            return sent, None
        self.sent = None
        engine.generation += 1
        return None, Answered(sent, ANSWER)

    def forget(self) -> None:
        self.sent = None


class Daemon:
    """The daemon's looks as its loop makes them: the observer (its cadence, its health chat on
    the simulated engine), the pure decider and the gate."""

    def __init__(self, engine: Engine, cluster: bool = False, canary: bool = False) -> None:
        self.engine = engine
        self.cfg = cfg = defaults(cluster, canary)
        vllm = SimpleNamespace(
            health=lambda timeout: Health("up", "HTTP 200"),
            metrics=lambda timeout: engine.page(),
            version=lambda timeout: "0.32.0",
            served_model=lambda: "m",
            canary=self._canary,
        )
        docker = SimpleNamespace(attrs=lambda name: {})
        parts: Any = SimpleNamespace(vllm=vllm, docker=docker, gateway=None)
        self.observer = Observer(cfg, parts, lambda _lease: None, lambda: ORIGIN + engine.at)
        self.observer.prober = Prober(engine)  # type: ignore[assignment]
        started = T0 - timedelta(hours=2)
        self.active = ContainerState("vllm", "id", "running", started, None, 0, False)
        self.mind = decide.Mind()

    def _canary(self, model: str, prompt: str, tokens: int, seed: int, timeout: float) -> Answer:
        """A drafting canary's request: it holds the loop; on a wedged engine, its timeout."""
        if self.engine.at < self.engine.wedged_at:
            return Answer(True, tokens, 1.0)
        self.engine.advance(self.engine.at + timeout)
        return Answer(False, None, timeout, f"no answer within {timeout:g}s", timed_out=True)

    def look(self, t: float) -> do.Restart | None:
        """One look at ``t``; the restart the gate lets through, if any."""
        self.engine.advance(t)
        cfg, now = self.cfg, ORIGIN + t
        memory = Memory(available_gib=60.0, total_gib=121.0)
        seen = Observation(now, self.active, "", memory, states=(self.active,))
        seen = self.observer.engine(seen, False, decide.probe_wanted(self.mind, now, cfg))
        self.mind, intents = decide.on_engine(self.mind, seen, cfg)
        for take in [i for i in intents if isinstance(i, do.TakeCanary)]:  # as the loop's follow
            taken = self.observer.drafting_canary(take.t)
            if taken is not None:
                self.mind, _ = decide.on_canary(self.mind, taken, "vllm", cfg)
        now = ORIGIN + self.engine.at  # a canary holds the loop
        facts = Recorded(None, None, (), 0.0, None, None, [], now)  # as read at this look
        self.mind, intents = gates.gate(self.mind, facts, self.active, None, now, cfg)
        restarts = [i for i in intents if isinstance(i, do.Restart)]
        assert not restarts or self.mind.pending is None
        return restarts[0] if restarts else None


def simulate(
    engine: Engine, until: float, phase: float = 0.0, cluster: bool = False, canary: bool = False
) -> tuple[float, str] | None:
    """Run the daemon's looks every ``watch.interval`` from ``phase`` until ``until``; the
    time a restart begins (the gate lets it through) and its reason's words, or None."""
    daemon = Daemon(engine, cluster, canary)
    t = phase
    while t <= until:
        if (restart := daemon.look(t)) is not None:
            return engine.at, restart.why
        t = engine.at + daemon.cfg.watch.interval  # the next tick: an interval after this one
    return None


def idle(_t: float) -> tuple[float, float, float, float]:
    return 0.0, 0.0, 0.0, 0.07


def streams(_t: float) -> tuple[float, float, float, float]:
    """64 streams (max-num-seqs) and 30 more waiting, decoding 40 tokens a second."""
    return 64.0, 30.0, 40.0, 0.9


def test_the_defaults_are_what_the_bound_is_shown_for() -> None:
    cfg = defaults()
    assert (cfg.watch.interval, cfg.health.interval, cfg.health.wedge_after) == (5, 15, 45)
    assert cfg.health.chat_interval == 600 and cfg.watch.boot_grace == 300


@pytest.mark.parametrize("canary", [False, True], ids=["", "canary"])
@pytest.mark.parametrize("load", [idle, streams], ids=["idle", "busy"])
def test_a_wedge_begins_a_restart_within_90s_at_the_defaults_whenever_it_happens(
    load: Callable[[float], tuple[float, float, float, float]], canary: bool
) -> None:
    """Every moment of the daemon's cycles (each second of the probe's and the look's phase),
    with the drafting canary off and on (on an idle engine it is owed and sent in the loop,
    and one sent as the engine wedges holds the loop): the worst case is the bound."""
    worst = 0.0
    for second in range(40):
        for phase in (0.0, 2.5):
            wedged_at = 300.0 + second
            found = simulate(Engine(load, wedged_at=wedged_at), 600.0, phase, canary=canary)
            assert found is not None, f"wedged at {wedged_at}: never restarted"
            began, why = found
            assert why.startswith("wedged: no progress for"), why
            worst = max(worst, began - wedged_at)
    assert worst <= BOUND, worst
    assert worst >= 45.0  # a test that can fail: never sooner than the wedge_after itself


def test_an_engine_at_its_limits_is_never_restarted() -> None:
    """64 streams and a queue ahead of the health chat for an hour: it answers after 5 min
    behind them, the tokens moving all the while."""
    engine = Engine(streams, answers_after=300.0)
    assert simulate(engine, 3600.0) is None


def test_a_lone_long_prefill_that_moves_nothing_for_30s_is_not_a_wedge() -> None:
    """A 32k prompt on a 27B dense: 30 s of prefill with no counter moving (KV cache unread),
    every few minutes, the health chat queued behind it each time."""

    def prefills(t: float) -> tuple[float, float, float, float]:
        in_prefill = (t % 120.0) < 30.0
        return (1.0, 1.0, 0.0, 0.07) if in_prefill else (1.0, 0.0, 30.0, 0.07)

    engine = Engine(prefills, answers_after=30.0)
    assert simulate(engine, 3600.0) is None


def test_a_cluster_head_whose_ranks_stop_is_judged_by_the_same_rule() -> None:
    """A stuck collective (a rank lost without Ray: vllm#36451, #46611) freezes every series
    while the head's /health says 200: the head's daemon watches rank 0's container with the
    same looks and rule, and its hands run every restart as the cluster's (``act.sequence``)."""
    for second in (0, 7, 14):
        found = simulate(Engine(streams, wedged_at=300.0 + second), 600.0, cluster=True)
        assert found is not None and found[1].startswith("wedged: no progress for")
        assert found[0] - (300.0 + second) <= BOUND
    assert simulate(Engine(streams, answers_after=300.0), 1800.0, cluster=True) is None


def test_a_drafting_canary_sent_as_the_engine_wedges_is_judged_at_the_next_look() -> None:
    """The drafting canary runs in the loop: on an engine wedged as it is sent, it holds the
    loop for its timeout (``wedge_after``, not the chat's 3 min), and its unanswered request is
    the daemon's: the next look restarts, within the bound."""
    engine = Engine(idle, wedged_at=100.0)
    daemon = Daemon(engine)
    for t in range(0, 100, 5):
        assert daemon.look(float(t)) is None
    engine.advance(100.0)
    assert daemon.observer.drafting_canary(ORIGIN + 100.0) is not None  # hangs 45 s
    assert engine.at == 145.0
    restart = daemon.look(150.0)
    assert restart is not None and restart.why.startswith("wedged: no progress for"), restart


def test_a_canary_hung_after_a_chat_answered_but_not_yet_told_is_judged_at_the_next_look() -> None:
    """The health chat answers, the engine wedges before the next look, and a drafting canary
    sent then hangs: the next look tells both, and the hung canary, the later, is judged (the
    benchmark once saw the answered chat told instead, and the wedge caught 100 s later)."""
    engine = Engine(idle)
    daemon = Daemon(engine)
    t = 0.0
    while daemon.look(t) is None and daemon.observer.prober.sent is None:
        t += 5.0
    engine.wedged_at = t + 0.5  # the chat just sent is answered (at once), then the wedge
    engine.advance(t + 1.0)
    assert daemon.observer.drafting_canary(ORIGIN + t + 1.0) is not None  # hangs 45 s
    restart = daemon.look(engine.at + 5.0)
    assert restart is not None and restart.why.startswith("wedged: no progress for"), restart
