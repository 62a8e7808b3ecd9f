"""Everything the daemon reads: Docker, its events, /health, /metrics, memory and the journal.

Each read comes back as a typed value for the decider (:mod:`sparkwarden.daemon.decide`); nothing
here decides what to do about it. The observer keeps only its own cadence (when /health, /metrics
and the health chat are next due) and the last of each reading, for the status snapshot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sparkwarden.adapters.docker_events import ContainerEvent
from sparkwarden.adapters.host import Memory
from sparkwarden.base import logs
from sparkwarden.base.containers import ContainerState, choose_active
from sparkwarden.base.errors import NoSuchContainer, SparkwardenError
from sparkwarden.config.schema import Config
from sparkwarden.daemon.kept import (
    FirstSight,
    GaveUp,
    Hold,
    Identity,
    Kept,
    OperatorStop,
    RebootRequired,
    Retry,
)
from sparkwarden.evidence import canary_reading
from sparkwarden.evidence.canary_reading import Round
from sparkwarden.evidence.triggers import PastRun
from sparkwarden.restart import rotation as rotation_flag
from sparkwarden.restart.parts import Parts
from sparkwarden.vllm import doctor_rules, metrics
from sparkwarden.vllm.client import ChatOutcome, Health
from sparkwarden.vllm.spec_payload import Answer

log = logs.get("sparkwarden.observe")

#: Slack on every watchdog lease, for scheduling noise on a loaded box.
MARGIN = 5.0


@dataclass(frozen=True)
class Scrape:
    """One read of the engine's /metrics: parsed, or why not."""

    engine: metrics.EngineMetrics | None
    note: str


@dataclass(frozen=True)
class HealthCheck:
    health: Health
    #: the daemon's health chat that ended since the last check (None: none did)
    canary: ChatOutcome | None
    engine: metrics.EngineMetrics | None  # the latest /metrics: a busy engine answers slowly
    gateway: ChatOutcome | None = None  # the users' path, after a good canary (gateway.watch)
    #: when the health chat still in flight was sent (None: none is)
    unanswered: float | None = None
    #: when the one that ended (``canary``) was sent
    canary_sent: float | None = None
    #: every /metrics read since the last check, with its time (the drafting canary's too):
    #: when the engine last moved is known to the read, not to the check
    readings: tuple[tuple[float, metrics.EngineMetrics], ...] = ()


@dataclass(frozen=True)
class Answered:
    """A health chat that ended: when it was sent, what the engine said, and the users' path."""

    sent: float
    outcome: ChatOutcome
    gateway: ChatOutcome | None = None


class Prober:
    """The daemon's health chat, in a thread of its own.

    The loop never waits on it: a request that neither answers nor errors is then a fact the
    decider reads (unanswered since when) while the loop goes on reading the counters that say
    whether the engine works on anything. At most one is in flight; one sent to an engine that
    was since restarted or replaced is forgotten (its answer says nothing of the new one)."""

    def __init__(self, ask: Callable[[], Answered]) -> None:
        """``ask``: the chat (and the users' path after it), blocking up to its own timeout;
        its ``sent`` is replaced by the time the prober sent it."""
        self._ask = ask
        self._lock = threading.Lock()
        self._sent: float | None = None
        self._done: Answered | None = None
        self._round = 0

    def send(self, t: float) -> None:
        with self._lock:
            if self._sent is not None:
                return
            self._sent, this = t, self._round
        threading.Thread(target=self._run, args=(this, t), name="health-chat", daemon=True).start()

    def _run(self, this: int, t: float) -> None:
        try:
            answered = replace(self._ask(), sent=t)
        except Exception as exc:  # a bug in a read must not leave it "in flight" for ever
            log.error("health_chat_failed", error=repr(exc))
            answered = Answered(t, ChatOutcome(False, f"internal error: {type(exc).__name__}"))
        with self._lock:
            if this == self._round:
                self._sent, self._done = None, answered

    @property
    def in_flight(self) -> float | None:
        """When the chat still unanswered was sent; None when none is."""
        with self._lock:
            return self._sent

    @property
    def untold(self) -> bool:
        """A chat in flight, or one that ended and is not yet told to the decider."""
        with self._lock:
            return self._sent is not None or self._done is not None

    def take(self) -> tuple[float | None, Answered | None]:
        """(when the one in flight was sent, the one that ended since the last take)."""
        with self._lock:
            done, self._done = self._done, None
            return self._sent, done

    def forget(self) -> None:
        with self._lock:
            self._round += 1
            self._sent = self._done = None


@dataclass(frozen=True)
class Observation:
    """One tick's look at the box; ``scrape`` and ``check`` only when they were due."""

    t: float
    active: ContainerState | None
    error: str  # why the LLM containers could not be read; "" when they could
    memory: Memory
    scrape: Scrape | None = None
    check: HealthCheck | None = None
    states: tuple[ContainerState, ...] = ()  # every LLM candidate, also when none is active
    unreadable: bool = False  # Docker could not be read: ``error`` says why
    #: why the active engine takes the memory free at its start (vLLM 0.34's defaults), as read
    #: at this start of it; "" when it does not, or is not known yet
    fills_memory: str = ""
    #: a replica out of the gateway's rotation: its flag as read now (None: in, or no rotation)
    rotation: rotation_flag.Out | None = None

    @property
    def running(self) -> bool:
        return self.active is not None and self.active.status == "running"


@dataclass(frozen=True)
class EventSeen:
    """A Docker event, and after a ``die`` what ``docker inspect`` says now."""

    event: ContainerEvent
    now: ContainerState | None = None
    error: str = ""


@dataclass(frozen=True)
class Recorded:
    """What the journal says, read again only when it can have changed (and every minute):
    the loop must cost next to nothing between events."""

    hold: Hold | None
    gave_up: GaveUp | None
    runs: tuple[PastRun, ...]  # the budget window's runs, as of ``read_at``
    reset_at: float
    last_run: dict[str, object] | None
    last_container: str | None
    run_counts: list[dict[str, object]]
    read_at: float
    reboot_required: RebootRequired | None = None
    #: memory left free (GiB) after each run's stop and drop since the trend was last reset,
    #: per machine: "" this host, a cluster node by its name
    after_drops: dict[str, tuple[float, ...]] = field(default_factory=dict)
    policies_taken: dict[str, Any] = field(default_factory=dict)
    #: the LLM container last seen serving, by ID and StartedAt
    engine: Identity | None = None
    operator_stopped: OperatorStop | None = None
    retry: Retry | None = None
    first_sight: FirstSight | None = None
    #: observe mode: what it already noted it would restart, and its newest such run
    observed: frozenset[str] = frozenset()
    last_observed: dict[str, object] | None = None


def read_journal(kept: Kept, t: float, window: float) -> Recorded:
    journal = kept.journal
    runs = journal.runs(1, observed=False)
    observed = journal.last_observed()
    return Recorded(
        hold=kept.hold(),
        gave_up=kept.gave_up(),
        runs=tuple(PastRun(*r) for r in journal.past_runs(t - window, kept.reset_after_run())),
        reset_at=kept.reset_at(),
        last_run=runs[0].to_json() if runs else None,
        last_container=journal.last_container(),
        run_counts=journal.run_counts(),
        read_at=t,
        reboot_required=kept.reboot_required(),
        after_drops={k: tuple(v) for k, v in kept.memory_after_drops().items()},
        policies_taken=kept.policies_taken(),
        engine=kept.engine(),
        operator_stopped=kept.operator_stopped(),
        retry=kept.retry(),
        first_sight=kept.first_sight(),
        observed=journal.observed_keys(),
        last_observed=observed.to_json() if observed else None,
    )


class Observer:
    def __init__(
        self,
        config: Config,
        parts: Parts,
        lease: Callable[[float], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: what each reading is timed by (a test's simulated one)."""
        self.config = config
        self.clock = clock
        self.parts = parts
        self.lease = lease
        self.due = {"health": 0.0, "metrics": 0.0}
        self.last_scrape = Scrape(None, "not scraped yet")
        self.last_probe = ""
        #: /health's last answer ("up", "loading", "dead"; "-" before any)
        self.last_health = "-"
        #: the engine's release (GET /version), read once per container start
        self.release: str | None = None
        #: whether that engine's defaults take the memory free at its start (doctor's reading)
        self.fills_memory: str | None = None
        self._release_of: tuple[str, object] | None = None
        #: looks begun since the daemon started; a snapshot is published after its look ends
        self.looks = 0
        self.prober = Prober(self._health_chat)
        #: a drafting canary's request that went unanswered (it ran in the loop): told to the
        #: next health check as the daemon's request it is
        self._canary_hung: Answered | None = None
        self._readings: list[tuple[float, metrics.EngineMetrics]] = []

    def look(self, t: float, last_container: str | None) -> Observation:
        """Docker and memory, every tick: quick reads, acted on before the engine's slow ones."""
        cfg = self.config
        self.looks += 1
        self.lease(cfg.docker.timeout * (len(cfg.llm.containers) + 1) + MARGIN)
        active, error, states, unreadable = None, "", list[ContainerState](), False
        missing: list[str] = []  # removed by hand, or a name no container has: not there now
        try:
            for name in cfg.llm.containers:
                try:
                    states.append(self.parts.docker.inspect(name))
                except NoSuchContainer as exc:
                    missing.append(str(exc))
        except SparkwardenError as exc:
            error, unreadable, states = str(exc), True, []
        if not unreadable:
            try:
                active = choose_active(states, last_container)
            except SparkwardenError as exc:
                error = "; ".join(missing) if missing and not states else str(exc)
        memory = self.parts.host.memory()
        same = active is not None and (active.id, active.started_at) == self._release_of
        return Observation(
            t,
            active,
            error,
            memory,
            states=tuple(states),
            unreadable=unreadable,
            fills_memory=(self.fills_memory or "") if same else "",
            rotation=rotation_flag.read(cfg.rotation.flag) if cfg.rotation else None,
        )

    def engine(self, seen: Observation, eager: bool = False, probe: bool = False) -> Observation:
        """The look, with /metrics and /health added when they are due and the LLM runs
        (/metrics every tick when ``eager``: a drafting canary waits for an idle spell).
        ``probe``: the decider wants the health chat sent now (:func:`triggers.probe_due`);
        while one is in flight both are read at every look, so a wedge is judged on fresh
        counters."""
        cfg, t = self.config, seen.t
        if not seen.running:
            return seen
        scrape = check = None
        probing = probe or self.prober.untold or self._canary_hung is not None
        if t >= self.due["metrics"] or eager or probing:
            self.due["metrics"] = t + min(cfg.health.interval, 30.0)
            scrape = self.scrape()
            self._read_release(seen.active, scrape)
        if t >= self.due["health"] or probing:
            self.due["health"] = t + cfg.health.interval
            check = self._check_health(t, probe)
        return replace(seen, scrape=scrape, check=check)

    def scrape(self) -> Scrape:
        self.lease(self.config.health.timeout + MARGIN)
        text = self.parts.vllm.metrics(timeout=self.config.health.timeout)
        if text is None:
            scrape = Scrape(None, "/metrics did not answer")
        else:
            try:
                scrape = Scrape(metrics.parse(text), "ok")
            except metrics.MetricsError as exc:
                scrape = Scrape(None, str(exc))
        if scrape.engine is None:
            log.warning("metrics_unusable", note=scrape.note)
        else:
            self._read(scrape.engine)
        self.last_scrape = scrape
        return scrape

    def _read(self, engine: metrics.EngineMetrics) -> None:
        """A reading kept for the next health check (bounded: a few minutes of looks)."""
        self._readings = [*self._readings[-63:], (self.clock(), engine)]

    def _read_release(self, active: ContainerState | None, scrape: Scrape) -> None:
        """``GET /version`` once the engine serves its page, once per container start."""
        started = (active.id, active.started_at) if active else None
        if scrape.engine is not None and started != self._release_of and active is not None:
            self.release = self.parts.vllm.version(timeout=self.config.health.timeout)
            self._release_of = started if self.release else None
            try:
                attrs = self.parts.docker.attrs(active.name)
            except SparkwardenError:
                attrs = None
            self.fills_memory = (
                doctor_rules.fills_free_memory(attrs, self.release) if attrs else None
            )

    def _check_health(self, t: float, probe: bool) -> HealthCheck:
        """/health, what the health chat in flight or ended says, and the chat sent when the
        decider wants it and /health answers (a failing /health is counted on its own)."""
        cfg = self.config
        self.lease(cfg.health.timeout + MARGIN)
        health = self.parts.vllm.health(timeout=cfg.health.timeout)
        self.last_health = health.status
        unanswered, done = self.prober.take()
        if self._canary_hung is not None:  # sent after any chat that ended: the latest word
            done, self._canary_hung = self._canary_hung, None
        # this look's scrape (read just before) may say asleep where the decider's last check
        # could not yet: a chat to a sleeping engine queues unanswered and takes a user's place
        asleep = self.last_scrape.engine is not None and self.last_scrape.engine.sleeping
        if probe and unanswered is None and health.status == "up" and not asleep:
            self.prober.send(t)
            unanswered = t
        if done is not None:
            # the detail is bounded where it is made (40 characters of the answer); status
            # wraps it
            self.last_probe = f"{'ok' if done.outcome.ok else 'FAILED'} {done.outcome.detail}"[:200]
        readings, self._readings = tuple(self._readings), []
        return HealthCheck(
            health,
            done.outcome if done else None,
            self.last_scrape.engine,
            done.gateway if done else None,
            unanswered=unanswered,
            canary_sent=done.sent if done else None,
            readings=readings,
        )

    def _health_chat(self) -> Answered:
        """The health chat itself (in the prober's thread): one short real chat, then the
        users' path when the engine answered and ``gateway.watch`` says so."""
        cfg, vllm = self.config, self.parts.vllm
        model = cfg.llm.model or vllm.served_model()
        outcome = (
            vllm.chat(model, timeout=cfg.llm.probe_timeout)
            if model
            else ChatOutcome(False, "/v1/models names no model")
        )
        watched = self.parts.gateway if cfg.gateway is not None and cfg.gateway.watch else None
        gateway = None
        if outcome.ok and watched is not None and cfg.gateway is not None:
            gateway = watched.chat(cfg.gateway.model, timeout=cfg.llm.probe_timeout)
        return Answered(0.0, outcome, gateway)

    def drafting_canary(self, t: float) -> Round | None:
        """The drafting canary's requests and the scrapes around them (None: no model named,
        or the health chat is in flight: its tokens would spoil the canary's; owed still, it is
        taken at a later look)."""
        cfg, vllm = self.config, self.parts.vllm
        if self.prober.in_flight is not None:
            return None
        model = cfg.llm.model or vllm.served_model()
        if not model:
            return None
        # it blocks the loop: on an engine that wedges meanwhile, no longer than a wedge takes
        # to be judged (its unanswered request is then judged as one)
        wedge = cfg.health.wedge_after
        timeout = min(cfg.llm.probe_timeout, wedge) if wedge > 0 else cfg.llm.probe_timeout
        scrapes = 2 * cfg.health.timeout
        self.lease(len(cfg.acceptance.canary_prompts) * (timeout + scrapes) + MARGIN)
        canary = cfg.acceptance

        def scrape() -> metrics.EngineMetrics | None:
            text = vllm.metrics(timeout=min(timeout, 10.0))
            try:
                engine = metrics.parse(text) if text is not None else None
            except metrics.MetricsError:
                return None
            if engine is not None:
                self._read(engine)
            return engine

        def ask(prompt: str) -> Answer:
            sent = self.clock()
            answer = vllm.canary(
                model, prompt, canary.canary_max_tokens, canary.canary_seed, timeout
            )
            if answer.timed_out:
                said = ChatOutcome(False, f"drafting canary: {answer.detail}", timed_out=True)
                self._canary_hung = Answered(sent, said)
            return answer

        # the answers' own stats make the scrapes a cross-check only
        return canary_reading.take(canary.canary_prompts, scrape, ask, t)

    def event(self, event: ContainerEvent) -> EventSeen:
        """After a ``die``, the container now: up again or not, and by whose start."""
        if event.action != "die":
            return EventSeen(event)
        try:
            return EventSeen(event, now=self.parts.docker.inspect(event.name))
        except SparkwardenError as exc:
            return EventSeen(event, error=str(exc))

    def after_run(self, t: float, ok: bool) -> None:
        """A fresh engine: check it at once; a health chat sent to the old one is forgotten."""
        self.due = {"health": 0.0, "metrics": 0.0}
        self.prober.forget()
        self.last_health = "up" if ok else "-"
        if ok:
            self.last_probe = "ok (the run's chat probe)"

    def adopted(self, t: float) -> None:
        """Another engine is watched now: check it at once; nothing its predecessor answered
        (the last probe) is said of it."""
        self.after_run(t, ok=False)
        self.last_probe = ""
