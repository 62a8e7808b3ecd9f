"""Every reason to restart, each a pure function of observations, its own state and a clock.

The reason names are a contract (journal, status, metrics, alerts): :data:`REASONS`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Literal, get_args

from sparkwarden.adapters.vllm import ChatOutcome, Health
from sparkwarden.config import BudgetConfig, DrainConfig, HealthConfig, MemoryConfig
from sparkwarden.containers import ContainerState
from sparkwarden.metrics import EngineMetrics

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

#: Signal numbers in Docker's ``kill`` events.
_SIGTERM = "15"


@dataclass(frozen=True)
class ExitWatch:
    """Tells a crash from an operator's ``docker stop`` by the events before ``die``.

    ``docker stop`` sends a ``kill`` event with signal 15 before ``die``; a crash of the engine
    dies with no ``kill`` at all, and ``docker kill`` (signal 9) is treated as a crash too.
    """

    term_at: float | None = None

    def on_event(self, action: str, signal: str | None, t: float) -> ExitWatch:
        if action == "kill" and signal == _SIGTERM:
            return replace(self, term_at=t)
        if action == "start":
            return ExitWatch()
        return self

    def classify_die(self, t: float, stop_window: float) -> Literal["crash", "operator-stop"]:
        if self.term_at is not None and t - self.term_at <= stop_window:
            return "operator-stop"
        return "crash"


# --- unhealthy -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthState:
    failures: int = 0
    last: str = "not checked yet"
    generation: float | None = None
    generation_since: float | None = None


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
) -> tuple[HealthState, str | None]:
    """One health check: count failures in a row; a busy engine's slow answer is not one."""
    if uptime_s is None:
        return HealthState(last="container not running"), None
    if uptime_s < boot_grace:
        return HealthState(last=f"booting ({uptime_s:.0f}s < grace {boot_grace:g}s)"), None

    generation_since = state.generation_since
    generation = metrics.generation_tokens if metrics else None
    if generation is not None and generation != state.generation:
        generation_since = t
    stalled = (
        metrics is not None
        and bool(metrics.running)
        and generation_since is not None
        and t - generation_since >= cfg.stall_after
    )
    state = replace(state, generation=generation, generation_since=generation_since)
    if stalled:
        why = (
            f"stalled: generation_tokens frozen for {t - (generation_since or t):.0f}s "
            f"with {metrics.running if metrics else 0:g} requests running"
        )
        return replace(state, last=why, failures=0), why

    busy = metrics is not None and metrics.busy
    failure: str | None = None
    if health is not None and health.status in ("dead", "loading"):
        failure = f"/health: {health.detail}"
    elif health is not None and health.status == "no-answer" and not busy:
        failure = f"/health: {health.detail} while idle"
    elif canary is not None and not canary.ok:
        failure = f"chat canary: {canary.detail}"
    if failure is None:
        note = "busy: a slow /health is not counted" if health and health.status != "up" else "ok"
        return replace(state, failures=0, last=note), None
    failures = state.failures + 1
    state = replace(state, failures=failures, last=failure)
    if failures >= cfg.failures:
        return replace(state, failures=0), f"{failure} ({failures} checks in a row)"
    return state, None


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


# --- drain ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrainState:
    started: float
    quiet_since: float | None = None


def drain_observe(
    state: DrainState, metrics: EngineMetrics | None, t: float, cfg: DrainConfig
) -> tuple[DrainState, str | None]:
    """Go when no request has run or waited for ``quiet``, or at ``deadline`` regardless."""
    if metrics is None or metrics.running is None:
        return state, "no request gauges to wait on"
    quiet_since = state.quiet_since
    if metrics.busy:
        quiet_since = None
    elif quiet_since is None:
        quiet_since = t
    state = replace(state, quiet_since=quiet_since)
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


# --- budget --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PastRun:
    reason: str
    result: str
    started_at: float
    ended_at: float | None


@dataclass(frozen=True)
class Budget:
    used: int
    limit: int
    allowed: bool
    not_before: float | None
    why: str


def budget(runs: list[PastRun], now: float, reset_at: float, cfg: BudgetConfig) -> Budget:
    """Automatic runs in the window since the last reset, and the backoff after failures."""
    counted = [
        r for r in runs if r.reason in AUTOMATIC and r.started_at >= max(reset_at, now - cfg.window)
    ]
    used = len(counted)
    if used >= cfg.max_runs:
        return Budget(used, cfg.max_runs, False, None, f"{used} automatic runs in the window")
    failures = 0
    for run in sorted(counted, key=lambda r: r.started_at, reverse=True):
        if run.result not in ("failed", "interrupted"):
            break
        failures += 1
    if failures:
        last_end = max(r.ended_at or r.started_at for r in counted)
        wait = min(cfg.backoff * 2 ** (failures - 1), cfg.backoff_max)
        if now < last_end + wait:
            why = f"backing off {wait:g}s after {failures} failed run(s)"
            return Budget(used, cfg.max_runs, False, last_end + wait, why)
    return Budget(used, cfg.max_runs, True, None, "ok")
