"""The drafting canary: acceptance measured where the workload cannot move it.

Why: the passive estimate (:mod:`sparkwarden.evidence.acceptance`) reads drafting health out of live
traffic through a model of how acceptance falls with depth, per class of text. Nobody has
measured that law; a workload that breaks it, or long conversations without a KV-cache signal,
look like decay. So the passive estimate only raises *suspicion*; what restarts the engine is a
canary: the same fixed prompts, sent greedy (same tokens every time), their acceptance per
position measured request by request (:mod:`sparkwarden.evidence.canary_reading`).

When a canary is sent: once its interval has passed (``canary_soon`` instead while the passive
estimate is suspicious or a canary was low), and only while it can count. With the engine's
counters that means idle (nothing running or waiting for ``canary_idle``): a user arriving
spoils it, and a busy box rarely idles. An engine that reports each request's own spec-decode
stats (``--per-request-spec-decode-metrics``, learnt from the answers) lets it count under load,
so it is also sent while no request waits and at most ``canary_max_running`` run. A discarded
canary is tried again at the next chance. The baseline is each prompt's acceptance pooled over
its first ``canary_learn`` valid canaries after an engine start; a canary's health is the tokens
it accepted over what the baseline's rates expected on the same drafts (each prompt weighs by
what it drafts and accepts: a prompt the drafter rarely gets right is mostly noise). ``reason =
acceptance`` fires after ``canary_consecutive`` valid canaries in a row below ``fraction`` (one
at or above it ends the streak); one below ``recover_fraction`` brings the next sooner.

Pure: observations, the passive state and the clock come in; the daemon's shell sends the
requests (:func:`sparkwarden.evidence.canary_reading.take` with injected I/O) and ``sparkwarden
replay`` feeds recorded outcomes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

from sparkwarden.config.schema import AcceptanceConfig
from sparkwarden.evidence import acceptance
from sparkwarden.evidence.acceptance import AcceptanceState
from sparkwarden.evidence.canary_reading import Round, restarted
from sparkwarden.vllm.metrics import EngineMetrics, SpecDecode

#: what operators read when the live traffic looks bad and the canary does not
WORKLOAD_NOT_DRAFTER = "drafting looks low; canary normal: the workload, not the drafter"


@dataclass(frozen=True)
class CanaryState:
    #: the engine start (counters' ``_created``) the baseline belongs to, and the last counters
    #: seen, to tell a restarted engine
    created: float | None = None
    last_spec: SpecDecode | None = None
    idle_since: float | None = None
    last_try: float | None = None
    last_valid: float | None = None
    #: acceptance of each prompt in the first valid canary after the engine started
    baseline: tuple[tuple[str, float], ...] = ()
    #: per prompt still being learnt: (prompt, accepted, drafted tokens, canaries so far)
    learning: tuple[tuple[str, float, float, int], ...] = ()
    health: float | None = None
    #: per prompt in the last valid canary: (acceptance, health)
    last: tuple[tuple[str, float, float], ...] = ()
    low_streak: int = 0
    valid_count: int = 0
    discarded: int = 0
    #: canaries discarded since the last valid one: the retries slow down after a few
    misses: int = 0
    suspicious_since: float | None = None
    #: the note told once per suspicious spell, so a notifier says it once
    told: bool = False
    note: str = "no canary yet"
    #: the last canary taken, valid or not: status shows it and ``record`` keeps it
    last_round: Round | None = None
    #: the canaries the baseline was learnt from: ``record``, started later, still writes them
    baseline_rounds: tuple[Round, ...] = ()
    #: the engine's answers carry their own spec-decode stats, so a canary counts under load
    #: (learnt from the last canary that got an answer; kept across engine restarts; None: not
    #: known yet, so the first canary may go under load to find out)
    own_stats: bool | None = None

    @property
    def suspicious(self) -> bool:
        return self.suspicious_since is not None

    def baseline_of(self, prompt: str) -> float | None:
        return dict(self.baseline).get(prompt)


def observe(
    state: CanaryState,
    engine: EngineMetrics | None,
    passive: AcceptanceState,
    t: float,
    cfg: AcceptanceConfig,
) -> tuple[CanaryState, bool]:
    """Take one scrape; say whether a canary is due now: its interval (shorter while the passive
    estimate is suspicious) has passed, and the engine has idled ``canary_idle`` or, when its
    answers carry their own stats, is :func:`light`."""
    spec = engine.spec if engine is not None else None
    if spec is not None and restarted(state.last_spec, spec):
        note = "engine restarted: the next valid canaries are the new baseline"
        state = CanaryState(note=note, own_stats=state.own_stats)
    if spec is not None:
        state = replace(state, last_spec=spec)
    state = _suspicion(state, passive, t, cfg)
    # asleep, vLLM queues a request unanswered until it wakes: no spell of sleep is idle
    idle = (
        engine is not None and engine.running == 0 and engine.waiting == 0 and not engine.sleeping
    )
    if not idle or spec is None:
        state = replace(state, idle_since=None)
    elif state.idle_since is None:
        state = replace(state, idle_since=t)
    if spec is None:
        return state, False
    idled = state.idle_since is not None and t - state.idle_since >= cfg.canary_idle
    return state, (idled or light(state, engine, cfg)) and wanted(state, t, cfg)


def light(state: CanaryState, engine: EngineMetrics | None, cfg: AcceptanceConfig) -> bool:
    """Busy, but a canary reading its own stats still counts: nobody waits (it takes no user's
    place) and at most ``canary_max_running`` run. Also while it is not known yet whether the
    answers carry their own stats: one canary finds out (discarded if they do not)."""
    if state.own_stats is False or engine is None or engine.running is None or engine.sleeping:
        return False
    return engine.waiting == 0 and engine.running <= cfg.canary_max_running


def wanted(state: CanaryState, t: float, cfg: AcceptanceConfig) -> bool:
    """A canary is owed (its interval, ``canary_soon`` while in doubt, has passed), idle or not:
    the daemon then looks every tick, so a short idle spell is not missed."""
    if cfg.confirm != "canary":
        return False
    # a low passive estimate, or a canary short of recover_fraction (a streak begun, or on
    # its way there): the next one sooner
    below = state.health is not None and state.health < cfg.recover_fraction
    learning = bool(state.learning)  # a baseline half learnt: finish it soon
    doubt = state.suspicious_since is not None or state.low_streak > 0 or below or learning
    gap = cfg.canary_soon if doubt else cfg.canary_interval
    if state.last_valid is not None and t - state.last_valid < gap:
        return False
    # a discarded canary is retried, but not at once
    # ... and after 3 in a row (an engine whose drafts are always trimmed, say), canary_soon
    retry = cfg.canary_idle if state.misses < 3 else cfg.canary_soon
    return state.last_try is None or t - state.last_try >= retry


def _suspicion(
    state: CanaryState, passive: AcceptanceState, t: float, cfg: AcceptanceConfig
) -> CanaryState:
    """Suspicious from the first low passive window until one is back at ``recover_fraction``."""
    health = passive.health
    if health is None or passive.method != "shape":
        return state
    if state.suspicious_since is None and health < cfg.fraction:
        return replace(state, suspicious_since=t, told=False)
    if state.suspicious_since is not None and health >= cfg.recover_fraction:
        return replace(state, suspicious_since=None, told=False)
    return state


def waiting_too_long(state: CanaryState, t: float, cfg: AcceptanceConfig) -> bool:
    """Suspicious for ``canary_max_wait`` without a valid canary since the suspicion began."""
    since = state.suspicious_since
    if since is None:
        return False
    return (state.last_valid is None or state.last_valid < since) and t - since >= (
        cfg.canary_max_wait
    )


def status_note(state: CanaryState, t: float, cfg: AcceptanceConfig) -> str:
    """What status says about the canary right now."""
    if waiting_too_long(state, t, cfg):
        hours = (t - (state.suspicious_since or t)) / 3600
        return (
            f"drafting looks low for {hours:.1f} h and no valid canary could be taken (never "
            "idle enough): not acting on it; max_uptime and the schedule still cover it"
        )
    return state.note


def judge(
    state: CanaryState, canary: Round, cfg: AcceptanceConfig
) -> tuple[CanaryState, acceptance.Fire | None]:
    """One canary's verdict: discarded, learnt as the baseline, or judged against it."""
    t = canary.t
    own = state.own_stats if canary.own_stats is None else canary.own_stats
    state = replace(state, last_try=t, last_round=canary, own_stats=own)
    if not canary.valid:
        note = f"canary discarded ({canary.why}); tried again at the next chance"
        state = replace(state, discarded=state.discarded + 1, misses=state.misses + 1)
        return replace(state, note=note), None
    if canary.created is not None and state.created not in (None, canary.created):
        state = CanaryState(
            last_spec=state.last_spec, last_try=t, last_round=canary, own_stats=state.own_stats
        )
    state = replace(
        state, last_valid=t, valid_count=state.valid_count + 1, created=canary.created, misses=0
    )
    against = [(r, base) for r in canary.readings if (base := state.baseline_of(r.prompt))]
    judged = [(r.prompt, r.acceptance, r.acceptance / base) for r, base in against]
    state, learnt = _learn(state, canary, cfg)
    if not judged:
        return replace(state, note=learnt), None
    drafted = sum(r.draft_tokens for r, _ in against)
    if drafted <= 0:  # only a hand-made trace can say "valid" with nothing drafted
        return replace(state, note="canary drafted nothing: not judged"), None
    now = sum(r.accepted for r, _ in against) / drafted
    then = sum(base * r.draft_tokens for r, base in against) / drafted
    health = now / then
    # in a row means in a row: one canary at fraction or above ends the streak (a canary is a
    # sample, not a smoothed estimate; recover_fraction only sets how soon the next one comes)
    streak = state.low_streak + 1 if health < cfg.fraction else 0
    shown = ", ".join(f"{p} {a:.1%} ({h:.2f})" for p, a, h in judged)
    note = f"canary health {health:.2f} of its baseline: {shown}; {streak} low in a row"
    if state.suspicious_since is not None and health >= cfg.recover_fraction:
        note = f"{WORKLOAD_NOT_DRAFTER} (canary health {health:.2f}: {shown})"
    state = replace(state, health=health, last=tuple(judged), low_streak=streak, note=note)
    if streak < cfg.canary_consecutive:
        return state, None
    why = (
        f"drafting canary at {health:.2f} of its baseline, below {cfg.fraction:g}, for "
        f"{streak} valid canaries in a row; greedy on fixed prompts: {shown}"
    )
    return replace(state, low_streak=0), acceptance.Fire(t, now, then, health, why)


def _learn(state: CanaryState, canary: Round, cfg: AcceptanceConfig) -> tuple[CanaryState, str]:
    """Pool each prompt without a baseline over its first ``canary_learn`` valid canaries: one
    greedy sample may sit high or low by chance (when greedy is not reproducible), and every
    later canary is judged against it."""
    pooled = {p: (a, d, n) for p, a, d, n in state.learning}
    done: list[tuple[str, float]] = []
    for r in canary.readings:
        if state.baseline_of(r.prompt) is not None:
            continue
        a, d, n = pooled.get(r.prompt, (0.0, 0.0, 0))
        a, d, n = a + r.accepted, d + r.draft_tokens, n + 1
        if n >= cfg.canary_learn:
            done.append((r.prompt, a / d if d else 0.0))
            pooled.pop(r.prompt, None)
        else:
            pooled[r.prompt] = (a, d, n)
    if len(state.baseline_rounds) < cfg.canary_learn and (pooled or done):
        state = replace(state, baseline_rounds=(*state.baseline_rounds, canary))
    learning = tuple((p, a, d, n) for p, (a, d, n) in pooled.items())
    state = replace(state, baseline=state.baseline + tuple(done), learning=learning)
    if done:
        shown = ", ".join(f"{p} {a:.1%}" for p, a in done)
        return state, f"canary baseline learnt over {cfg.canary_learn} canaries: {shown}"
    count = max((n for *_, n in learning), default=0)
    return state, f"learning the canary baseline: {count} of {cfg.canary_learn} canaries"


def tell(state: CanaryState, cfg: AcceptanceConfig) -> tuple[CanaryState, str | None]:
    """Once per suspicious spell, the sentence for a notification when a valid canary found
    the drafter healthy while the passive estimate looked low."""
    cleared = state.health is not None and state.health >= cfg.recover_fraction
    if not state.suspicious or state.told or not cleared or state.last_valid is None:
        return state, None
    if state.suspicious_since is not None and state.last_valid < state.suspicious_since:
        return state, None
    return replace(state, told=True), state.note


def snapshot(state: CanaryState, t: float, cfg: AcceptanceConfig) -> dict[str, Any]:
    """The canary's part of the status snapshot: status, ``--json``, metrics and ``record``
    all read this one value."""
    return {
        "confirm": cfg.confirm,
        "own_stats": state.own_stats,
        "health": state.health,
        "baseline": dict(state.baseline),
        "last": {prompt: {"acceptance": a, "health": h} for prompt, a, h in state.last},
        "suspicious": state.suspicious,
        "waiting_too_long": waiting_too_long(state, t, cfg),
        "low_streak": state.low_streak,
        "valid": state.valid_count,
        "discarded": state.discarded,
        "last_valid": state.last_valid,
        "note": status_note(state, t, cfg),
        "round": state.last_round.to_json() if state.last_round is not None else None,
        "baseline_rounds": [r.to_json() for r in state.baseline_rounds],
    }


@dataclass(frozen=True)
class Decided:
    """What one scrape or one canary decided: the daemon acts on ``fire``; replay prints it."""

    t: float
    passive: AcceptanceState
    canary: CanaryState
    judged: bool
    #: the canary to send now (the daemon sends it; a replay has its recorded outcome instead)
    due: bool = False
    fire: str | None = None
    by: Literal["passive", "canary"] | None = None
    #: what the passive estimate alone would have fired on (confirm = "canary": not acted on)
    suspect: str | None = None


def on_scrape(
    passive: AcceptanceState,
    state: CanaryState,
    engine: EngineMetrics | None,
    t: float,
    cfg: AcceptanceConfig,
) -> Decided:
    """One scrape through the passive estimate and, unless ``confirm = "none"``, the canary's
    schedule: with a canary to confirm, the passive estimate never fires by itself."""
    before = passive.windows
    passive, fire = acceptance.observe(passive, engine, t, cfg)
    judged = passive.windows != before
    if cfg.confirm == "none":
        return Decided(t, passive, state, judged, fire=fire.why if fire else None, by="passive")
    state, due = observe(state, engine, passive, t, cfg)
    return Decided(t, passive, state, judged, due=due, suspect=fire.why if fire else None)


def on_canary(
    passive: AcceptanceState, state: CanaryState, taken: Round, cfg: AcceptanceConfig
) -> Decided:
    """A canary's outcome, sent now or recorded."""
    state, fire = judge(state, taken, cfg)
    return Decided(taken.t, passive, state, False, fire=fire.why if fire else None, by="canary")


def replay(
    items: Iterable[tuple[float, EngineMetrics | Round | None]], cfg: AcceptanceConfig
) -> Iterator[Decided]:
    """Recorded scrapes and canary outcomes, in order, through the daemon's own decisions."""
    passive, state = AcceptanceState(), CanaryState()
    for t, item in items:
        if isinstance(item, Round):
            if cfg.confirm == "none":
                continue
            decided = on_canary(passive, state, item, cfg)
        else:
            decided = on_scrape(passive, state, item, t, cfg)
        passive, state = decided.passive, decided.canary
        yield decided
