"""Every reason to restart, each a pure function of observations, its own state and a clock.

The reason names are a contract (journal, status, metrics, alerts): :data:`REASONS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise
from typing import Final, Literal, get_args

from sparkwarden.base.containers import ContainerState
from sparkwarden.config.schema import BudgetConfig, Config, DrainConfig, HealthConfig, MemoryConfig
from sparkwarden.vllm.client import ChatOutcome, Health
from sparkwarden.vllm.metrics import EngineMetrics

Reason = Literal[
    "schedule", "uptime", "acceptance", "crash", "unhealthy", "memory", "manual", "repair"
]
REASONS: Final[tuple[Reason, ...]] = get_args(Reason)
#: Reasons that are planned: the engine is drained of requests first.
PLANNED: Final[frozenset[Reason]] = frozenset({"schedule", "uptime", "acceptance"})
#: Reasons that spend the restart budget (an operator's ``manual`` never does).
AUTOMATIC: Final[frozenset[Reason]] = frozenset(REASONS) - {"manual"}


def automatic(reason: str) -> Reason | None:
    """The reason, typed, when it is one that spends the budget (and is retried after failing)."""
    return next((r for r in AUTOMATIC if r == reason), None)


# --- uptime --------------------------------------------------------------------------------------


def uptime_due(container: ContainerState | None, now: datetime, max_uptime: float) -> str | None:
    """Up longer than ``max_uptime``: restart before DFlash's crash at about hour 23."""
    if max_uptime <= 0 or container is None:
        return None
    uptime = container.uptime_s(now)
    if uptime is None or uptime < max_uptime:
        return None
    return f"{container.name} up {uptime / 3600:.1f} h, limit {max_uptime / 3600:g} h"


# --- crash ---------------------------------------------------------------------------------------

# ExitWatch (a crash told from an operator's stop) is in base/containers.py: the cluster's
# nodes tell it too.


# --- unhealthy -----------------------------------------------------------------------------------


#: how a failed health chat is told (and known again)
CHAT_FAILED: Final = "health chat: "


@dataclass(frozen=True)
class HealthState:
    failures: int = 0
    last: str = "not checked yet"
    #: generation and prompt tokens at the last scrape, and since when they have not moved
    progress: tuple[float | None, float | None] | None = None
    progress_since: float | None = None
    #: why a stall is suspected: the daemon then sends one chat request, even while "busy"
    suspect: str | None = None
    #: a request gauge stuck above 0 on an engine that answers (vLLM #22545, #29928)
    stuck_gauge: str | None = None
    #: progress evidence (generation and prompt tokens, the KV cache's use) at the last scrape,
    #: and when it last moved: a worker that stops (SIGSTOP, a stuck collective) freezes it all
    evidence: tuple[float | None, ...] | None = None
    moved_at: float | None = None
    #: the daemon's own chat request still unanswered: when it was sent (None: none is)
    unanswered_since: float | None = None
    #: when the daemon last sent its chat request, answered or not
    probed_at: float | None = None
    #: this start of the engine answered a chat (the run's probe, or the daemon's): boot grace
    #: is over, whatever the uptime; ``proven_by``: the container (ID) a run proved
    proven: bool = False
    proven_by: str | None = None
    #: put to sleep at the last check: no chat is sent (it would queue unanswered)
    asleep: bool = False
    #: the last failure counted was the health chat's: a check with no chat ended since (the
    #: next one in flight) does not clear the count
    chat_failed: bool = False


def health_observe(
    state: HealthState,
    *,
    t: float,
    uptime_s: float | None,
    boot_grace: float,
    health: Health | None,
    canary: ChatOutcome | None,
    metrics: EngineMetrics | None,
    cfg: HealthConfig,
    unanswered: float | None = None,
    canary_sent: float | None = None,
    readings: Sequence[tuple[float, EngineMetrics]] = (),
) -> tuple[HealthState, str | None]:
    """One health check: count failures in a row; a busy engine's slow answer is not one.

    ``canary`` is the daemon's chat request that ended since the last check (sent at
    ``canary_sent``); ``unanswered`` when the one still in flight was sent. A **wedge** is that
    request unanswered for ``wedge_after`` with no progress evidence anywhere since it was
    sent (:func:`wedged`): a busy engine moves its tokens or its KV cache, a stopped worker
    moves nothing while ``/health`` answers 200.

    A stall is generation *and* prompt tokens frozen for ``stall_after`` while requests run,
    confirmed by one real chat request: vLLM's ``num_requests_running`` can stay above 0 after
    every request was aborted (#22545, #29928), and an engine with a stuck gauge still answers.
    So a suspected stall sets ``suspect`` (the daemon sends the chat at the next check, busy or
    not); a failed chat restarts, an answered one is reported as a stuck gauge, not restarted.

    An engine put to sleep (``vllm:engine_sleep_state`` awake 0) answers ``/health`` 200 and
    queues chats unanswered until it wakes (vLLM's ``sleep`` pauses the scheduler): it is
    reported as sleeping; its hanging chats and frozen tokens are no failures, only ``/health``
    failing still is."""
    if uptime_s is None:
        return HealthState(last="container not running"), None
    seen = readings or ([(t, metrics)] if metrics is not None else [])
    state = _moved(state, seen, unanswered, canary, canary_sent)
    if uptime_s < boot_grace and not state.proven:
        note = f"booting ({uptime_s:.0f}s < grace {boot_grace:g}s, no chat answered yet)"
        return replace(state, failures=0, suspect=None, last=note), None
    if (why := wedged(state, t, metrics, cfg)) is not None:
        return replace(state, failures=0, suspect=None, last=why), why

    progress = (
        (metrics.generation_tokens, metrics.prompt_tokens)
        if metrics and metrics.generation_tokens is not None
        else None
    )
    if state.suspect is not None and canary is not None and canary.ok:
        # the confirming chat was answered (its own tokens moved the counters since)
        note = (
            f"stuck gauge: {state.suspect}, yet a chat request was answered: the engine works "
            "(vLLM #22545), not restarting"
        )
        state = replace(state, suspect=None, stuck_gauge=note, progress=progress, last=note)
        return replace(state, progress_since=t), None
    since = state.progress_since
    if progress is not None and progress != state.progress:
        since = t
        state = replace(state, suspect=None)
    if metrics is not None and metrics.running == 0:
        state = replace(state, stuck_gauge=None)
    state = replace(state, progress=progress, progress_since=since)
    asleep = metrics is not None and metrics.sleeping
    frozen = (
        metrics is not None
        and not asleep
        and bool(metrics.running)
        and since is not None
        and t - since >= cfg.stall_after
    )
    if frozen:
        running = metrics.running if metrics else 0
        why = (
            f"generation and prompt tokens frozen for {t - (since or t):.0f}s "
            f"with {running:g} requests running"
        )
        if state.suspect is None or canary is None:
            note = f"suspected stall ({why}): confirming with a chat request"
            return replace(state, suspect=why, last=note, failures=0), None
        if not canary.ok:
            return HealthState(last=f"stalled: {why}"), (
                f"stalled: {why}; a chat request failed too: {canary.detail}"
            )
        note = (
            f"stuck gauge: {why}, yet a chat request was answered: the engine works "
            "(vLLM #22545), not restarting"
        )
        return replace(state, suspect=None, stuck_gauge=note, progress_since=t, last=note), None

    busy = metrics is not None and metrics.busy and state.stuck_gauge is None
    failure: str | None = None
    if health is not None and health.status in ("dead", "loading"):
        failure = f"/health: {health.detail}"
    elif health is not None and health.status == "no-answer" and not busy:
        failure = f"/health: {health.detail} while idle"
    elif (
        canary is not None
        and not canary.ok
        and not asleep
        # timed out behind a queue that was served meanwhile: busy, not dead
        and not (canary.timed_out and _moved_since(state, canary_sent))
        # turned away by the engine's queue limits: busy, not dead
        and not canary.turned_away
    ):
        failure = f"{CHAT_FAILED}{canary.detail}"
    if failure is None and asleep and metrics is not None:
        note = f"sleeping (level {metrics.sleep_level}): put to sleep, not restarted"
        return replace(state, failures=0, chat_failed=False, last=note), None
    if failure is None and canary is None and state.chat_failed:
        return state, None  # no chat ended since the one that failed: its count stands
    if failure is None:
        note = "busy: a slow /health is not counted" if health and health.status != "up" else "ok"
        return replace(state, failures=0, chat_failed=False, last=state.stuck_gauge or note), None
    failures = state.failures + 1
    chat_failed = failure.startswith(CHAT_FAILED)
    state = replace(state, failures=failures, chat_failed=chat_failed, last=failure)
    if failures >= cfg.failures:
        return replace(state, failures=0), f"{failure} ({failures} checks in a row)"
    return state, None


def _moved(
    state: HealthState,
    readings: Sequence[tuple[float, EngineMetrics]],
    unanswered: float | None,
    canary: ChatOutcome | None,
    canary_sent: float | None,
) -> HealthState:
    """Fold one check's evidence in: what moved and when (each /metrics read since the last
    check, at its own time), the daemon's request in flight, and whether this start of the
    engine has answered a chat yet."""
    evidence, moved_at = state.evidence, state.moved_at
    for at, metrics in readings:
        if metrics.generation_tokens is None:
            continue
        now = (metrics.generation_tokens, metrics.prompt_tokens, metrics.kv_cache)
        if now != evidence:
            moved_at = at
        evidence = now
    sent = [s for s in (state.probed_at, unanswered, canary_sent) if s is not None]
    if canary is not None and canary.timed_out and canary_sent is not None:
        # unanswered all that time: the daemon has waited since the earlier of it and the one
        # sent since (a chat sent in the same check)
        unanswered = canary_sent if unanswered is None else min(unanswered, canary_sent)
    last = readings[-1][1] if readings else None
    return replace(
        state,
        evidence=evidence,
        moved_at=moved_at,
        unanswered_since=unanswered,
        probed_at=max(sent) if sent else None,
        proven=state.proven or (canary is not None and canary.ok),
        asleep=last is not None and last.sleeping,
    )


def _moved_since(state: HealthState, sent: float | None) -> bool:
    """Progress evidence moved after the daemon's request was sent: a queue ahead of it that
    is being served, so its timing out is no failure of the engine's."""
    return sent is not None and state.moved_at is not None and state.moved_at > sent


def wedged(
    state: HealthState, t: float, metrics: EngineMetrics | None, cfg: HealthConfig
) -> str | None:
    """The daemon's own request unanswered, and nothing moved, for ``wedge_after``: a wedged
    engine, whatever ``/health`` says.

    The evidence is what only a working engine can make: generation and prompt tokens counted,
    the KV cache's use changing (a long prefill fills it chunk by chunk), and the daemon's own
    answer. A user's queue ahead of the request moves them, so a busy engine never fires this;
    a stopped worker or a stuck collective freezes them all (vLLM 0.32, SIGSTOP: the gauges
    freeze at their last values). Without those counters (``--disable-log-stats``) nothing can
    tell a queue from a wedge: not judged (``off`` says so), the request's timeout counts as a
    failure instead. Asleep, a request queues by design."""
    sent = state.unanswered_since
    if sent is None or state.evidence is None or state.asleep or cfg.wedge_after <= 0:
        return None
    still_from = max(sent, state.moved_at if state.moved_at is not None else sent)
    if t - still_from < cfg.wedge_after:
        return None
    running = metrics.running if metrics is not None and metrics.running is not None else 0.0
    waiting = metrics.waiting if metrics is not None and metrics.waiting is not None else 0.0
    return (
        f"wedged: no progress for {t - still_from:.0f}s: the daemon's chat request sent "
        f"{t - sent:.0f}s ago has no answer, and generation and prompt tokens and the KV cache "
        f"are frozen ({running:g} running, {waiting:g} waiting); /health says nothing of it"
    )


def probe_due(state: HealthState, t: float, cfg: HealthConfig) -> bool:
    """Whether the daemon sends its 1-token chat now: never a second while one is in flight,
    nor to a sleeping engine (it would queue by design); at once when none was sent yet, after
    a failure (a quicker second look) or a suspected stall; every ``interval`` while nothing
    moves (idle, or wedged: only a request can tell); and every ``chat_interval`` whatever
    moves (the API server's own path)."""
    if state.unanswered_since is not None or state.asleep:
        return False
    if state.suspect:  # a stall to confirm: sent even with the health chat off
        return True
    if cfg.chat_interval <= 0:
        return False
    last = state.probed_at
    if last is None or state.failures:
        return True
    if t - last >= cfg.chat_interval:
        return True
    still = state.moved_at is None or t - state.moved_at >= cfg.interval
    return still and t - last >= cfg.interval


# --- memory --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryState:
    below_since: float | None = None
    alerted: bool = False


def memory_observe(
    state: MemoryState, available_gib: float, t: float, cfg: MemoryConfig
) -> tuple[MemoryState, Literal["alert", "recovered"] | None]:
    """``MemAvailable`` under the floor for ``floor_for``: alert once per episode."""
    if cfg.floor_gib <= 0 or available_gib >= cfg.floor_gib:
        return MemoryState(), ("recovered" if state.alerted else None)
    since = state.below_since if state.below_since is not None else t
    if not state.alerted and t - since >= cfg.floor_for:
        return MemoryState(since, True), "alert"
    return MemoryState(since, state.alerted), None


# --- the users' gateway ---------------------------------------------------------------------------

#: The step whose failure leaves the engine answering: no reason to restart it again.
GATEWAY_STEP: Final = "gateway_probe"


@dataclass(frozen=True)
class GatewayWatch:
    """What the users' path last said: ``ok`` None until first checked."""

    ok: bool | None = None
    last: str = "not checked yet"
    failing_since: float | None = None


def gateway_observe(
    state: GatewayWatch, outcome: ChatOutcome, t: float
) -> tuple[GatewayWatch, str | None]:
    """Checked only once the engine itself answered, so a failure here is the gateway's: report
    it once when it starts failing (never a restart: a new engine would not fix a gateway)."""
    if outcome.ok:
        return GatewayWatch(True, f"ok {outcome.detail}"), None
    if state.ok is False:
        return replace(state, last=f"FAILED {outcome.detail}"), None
    why = f"the engine answers but the users' gateway does not: {outcome.detail}"
    return GatewayWatch(False, f"FAILED {outcome.detail}", t), why


# --- memory trend --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leak:
    """MemAvailable after the stop and drop of the last runs (GiB, oldest first), falling."""

    readings: tuple[float, ...]
    fall_gib: float
    why: str


def memory_trend(readings: list[float], cfg: MemoryConfig) -> Leak | None:
    """What memory nobody holds left free after each stop and drop (what cgroups and processes
    hold, a voice container's cache or ``/dev/shm``, is not counted): falling at every one of the
    last ``trend_runs`` runs, and by more than ``trend_fall_gib`` in all, is memory the driver
    never gives back (on GB10 only a reboot returns it; restarting on walks the box into a
    lock-up). One run that got memory back ends the trend."""
    if cfg.trend_fall_gib <= 0 or len(readings) < cfg.trend_runs:
        return None
    last = readings[-cfg.trend_runs :]
    falling = all(b < a for a, b in pairwise(last))
    fall = last[0] - last[-1]
    if not falling or fall <= cfg.trend_fall_gib:
        return None
    why = (
        f"memory held by no process or container grew at each of the last {len(last)} runs: "
        "what it leaves free after stop and drop fell "
        f"{last[0]:.1f} -> {last[-1]:.1f} GiB ({fall:.1f} GiB, more than "
        f"{cfg.trend_fall_gib:g}): memory that only a reboot returns"
    )
    return Leak(tuple(round(r, 2) for r in last), round(fall, 2), why)


# --- drain ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrainState:
    started: float
    quiet_since: float | None = None
    note: str = "waiting for the engine to go idle"
    progress: tuple[float | None, float | None] | None = None


def drain_observe(
    state: DrainState,
    metrics: EngineMetrics | None,
    t: float,
    cfg: DrainConfig,
    stuck_gauge: bool = False,
) -> tuple[DrainState, str | None]:
    """Go when no request has run or waited for ``quiet``, or at ``deadline`` regardless.

    Without request gauges (``--disable-log-stats``, or a ``/metrics`` that does not answer)
    nothing says the engine is quiet, so the drain waits its whole deadline rather than cut
    running chats at once; ``note`` says why, for status. With ``num_requests_running`` known
    to be stuck (:class:`HealthState`), idle is read from the tokens instead: none moving."""
    if metrics is None or metrics.running is None:
        left = cfg.deadline - (t - state.started)
        state = replace(
            state,
            quiet_since=None,
            note=f"no request gauges, cannot see the engine idle: waiting the whole drain "
            f"deadline ({max(left, 0.0):.0f}s left)",
        )
        if left <= 0:
            return state, f"no request gauges: waited the whole drain deadline of {cfg.deadline:g}s"
        return state, None
    quiet_since = state.quiet_since
    progress = (metrics.generation_tokens, metrics.prompt_tokens)
    note = "waiting for the engine to go idle"
    busy = metrics.busy
    if stuck_gauge and metrics.generation_tokens is not None:
        moved = state.progress is None or progress != state.progress
        busy = bool(metrics.waiting) or moved
        note = "request gauge stuck: waiting for the tokens to stop moving"
    if busy:
        quiet_since = None
    elif quiet_since is None:
        quiet_since = t
    state = replace(state, quiet_since=quiet_since, note=note, progress=progress)
    if quiet_since is not None and t - quiet_since >= cfg.quiet:
        return state, f"idle for {t - quiet_since:.0f}s"
    return state, _drain_deadline(state, t, cfg)


def drain_blind(state: DrainState, t: float, cfg: DrainConfig) -> tuple[DrainState, str | None]:
    """No reading at all (the container could not be inspected): unknown is not quiet, so the
    quiet period starts again and only the deadline lets the restart go."""
    state = replace(state, quiet_since=None)
    return state, _drain_deadline(state, t, cfg)


def _drain_deadline(state: DrainState, t: float, cfg: DrainConfig) -> str | None:
    if t - state.started >= cfg.deadline:
        return f"drain deadline of {cfg.deadline:g}s reached, going ahead"
    return None


# --- what is off ---------------------------------------------------------------------------------


def off(
    cfg: Config, metrics: EngineMetrics | None, metrics_note: str, per_position: bool | None
) -> dict[str, str]:
    """Each trigger or safeguard that cannot act right now, and why, for status: the ones the
    config turns off, and the ones the engine's ``/metrics`` leaves blind (``per_position``:
    whether the acceptance trigger reads per-position counters; None before it knows)."""
    out: dict[str, str] = {}
    blind = metrics_note if metrics is None else None
    if cfg.watch.max_uptime <= 0:
        out["uptime"] = "watch.max_uptime is 0"
    if not cfg.acceptance.enabled:
        out["acceptance"] = "acceptance.enabled is false"
    elif blind:
        out["acceptance"] = f"no metrics: {blind}"
    elif metrics is not None and metrics.spec is None:
        out["acceptance"] = "no spec-decode counters (no --speculative-config)"
    elif per_position is False:
        out["acceptance"] = "watched, not acted on: no per-position counters"
    if blind or (metrics is not None and metrics.running is None):
        out["stall"] = f"no request gauges: {blind or 'vllm:num_requests_running missing'}"
        out["drain"] = (
            f"no request gauges: a planned restart waits the whole drain deadline "
            f"({cfg.drain.deadline:g}s)"
        )
    if cfg.health.chat_interval <= 0:
        out["health chat"] = "health.chat_interval is 0"
        out["wedge"] = "health.chat_interval is 0: no request of the daemon's to wait on"
    elif cfg.health.wedge_after <= 0:
        out["wedge"] = "health.wedge_after is 0"
    elif blind or (metrics is not None and metrics.generation_tokens is None):
        out["wedge"] = (
            f"no token counters: {blind or 'vllm:generation_tokens_total missing'}: a queue "
            "cannot be told from a wedge"
        )
    if cfg.memory.floor_gib <= 0:
        out["memory"] = "memory.floor_gib is 0"
    return out


# --- budget --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PastRun:
    reason: str
    result: str
    started_at: float
    ended_at: float | None
    #: the step that failed first: a run that failed only at the gateway brought the engine
    #: back, so it is no failure of the engine's (no backoff)
    failed_step: str | None = None


@dataclass(frozen=True)
class Budget:
    used: int
    limit: int
    allowed: bool
    not_before: float | None
    why: str


def budget(runs: list[PastRun], now: float, reset_at: float, cfg: BudgetConfig) -> Budget:
    """Automatic runs in the window since the last reset, and the backoff after failures.

    A run dated after ``now`` was recorded before the wall clock stepped back (NTP fixing the
    RTC): it counts against the budget (the safe side) but cannot be placed in time, so no
    backoff is measured from it; ``reset`` clears it by run id, not by time."""
    counted = [
        r
        for r in runs
        if r.reason in AUTOMATIC
        and (r.started_at > now or r.started_at >= max(reset_at, now - cfg.window))
    ]
    used = len(counted)
    if used >= cfg.max_runs:
        return Budget(used, cfg.max_runs, False, None, f"{used} automatic runs in the window")
    placed = [r for r in counted if r.started_at <= now]
    failures = 0
    for run in sorted(placed, key=lambda r: r.started_at, reverse=True):
        if run.result not in ("failed", "interrupted") or run.failed_step == GATEWAY_STEP:
            break
        failures += 1
    if failures:
        last_end = max(r.ended_at or r.started_at for r in placed)
        wait = min(cfg.backoff * 2 ** (failures - 1), cfg.backoff_max)
        if now < last_end + wait:
            why = f"backing off {wait:g}s after {failures} failed run(s)"
            return Budget(used, cfg.max_runs, False, last_end + wait, why)
    return Budget(used, cfg.max_runs, True, None, "ok")
