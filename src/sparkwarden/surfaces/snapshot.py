"""The status snapshot: one typed value that every reporter renders.

``status`` and ``status --json`` (over the socket, or from the file the daemon writes), the
Prometheus exporter and systemd's ``STATUS=`` line all show this value, so they can never disagree;
:mod:`sparkwarden.daemon.loop.publish` builds it from what the daemon believes and saw.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal, get_args

from sparkwarden.restart.docker_policy import PolicyView
from sparkwarden.vllm.metrics import EngineMetrics

State = Literal[
    "starting",
    "idle",
    "observing",
    "waiting",
    "draining",
    "restarting",
    "held",
    "gave up",
    "reboot required",
]
STATES: Final[tuple[State, ...]] = get_args(State)


@dataclass(frozen=True)
class DaemonView:
    running: bool
    pid: int | None
    state: str  # a State, with the step while restarting ("restarting: step 3 of 9: stop_llm")
    pending: str | None
    drain: str | None = None  # what a drain waits for, and why (no request gauges: its deadline)
    version: str = ""  # the code this daemon runs (an upgrade not restarted onto shows here)
    #: what keeps the LLM from serving, and the command that ends the wait
    waiting: str | None = None
    command: str | None = None
    #: looks at the box done since the daemon started: what a script (or a test) waits on to
    #: know that the daemon has seen a change, rather than a guessed number of seconds
    looks: int = 0
    #: ``watch.mode``: "act", or "observe" (decides and tells, touches nothing)
    mode: str = "act"


@dataclass(frozen=True)
class LlmView:
    container: str | None
    status: str
    uptime_s: float | None
    health: str
    last_probe: str
    note: str
    operator_stopped: str | None
    #: the daemon's health chat in flight, unanswered this long (None: none is); while it is,
    #: ``health`` says so rather than "ok"
    unanswered_s: float | None = None


@dataclass(frozen=True)
class MemoryView:
    available_gib: float
    total_gib: float
    below_floor: bool
    #: of the rest, what processes and containers hold (their cgroups), and what nobody holds
    #: (the driver's: only this counts toward reboot_required); None when unknown
    held_gib: float | None = None
    unheld_gib: float | None = None


@dataclass(frozen=True)
class AcceptanceView:
    current: float | None
    baseline: float | None
    health: float | None
    method: str | None
    available: bool
    note: str
    enabled: bool
    #: the drafting canary (:func:`sparkwarden.evidence.canary.snapshot`)
    canary: dict[str, Any]


@dataclass(frozen=True)
class NextRestart:
    at: str
    reason: str


@dataclass(frozen=True)
class BudgetView:
    used: int
    limit: int
    why: str


@dataclass(frozen=True)
class GatewayView:
    url: str
    watch: bool
    ok: bool | None
    last: str
    failing_since: float | None


@dataclass(frozen=True)
class EngineView:
    """What the engine says of itself: its release (``GET /version``), whether it was put to
    sleep (it then answers ``/health`` and is not restarted), and the users its queue limits
    turned away (``--max-num-queued-reqs/-tokens``, vLLM 0.33.0 on), with why requests wait."""

    release: str | None
    sleeping: bool
    sleep_level: int | None
    rejections: dict[str, float]
    waiting_by_reason: dict[str, float]


def engine_view(release: str | None, metrics: EngineMetrics | None) -> EngineView:
    return EngineView(
        release,
        bool(metrics and metrics.sleeping),
        metrics.sleep_level if metrics else None,
        dict(metrics.rejections) if metrics else {},
        dict(metrics.waiting_by_reason) if metrics else {},
    )


@dataclass(frozen=True)
class Snapshot:
    written_at: str
    daemon: DaemonView
    llm: LlmView
    memory: MemoryView
    acceptance: AcceptanceView
    metrics: str
    restart_policy: PolicyView
    next_restart: NextRestart | None
    budget: BudgetView
    hold: dict[str, str] | None
    gave_up: dict[str, str] | None
    last_run: dict[str, Any] | None
    run_counts: list[dict[str, Any]] = field(default_factory=list)
    #: each trigger or safeguard that cannot act now, and why (triggers.off)
    off: dict[str, str] = field(default_factory=dict)
    reboot_required: bool = False
    memory_trend: dict[str, Any] | None = None  # the figures behind reboot_required
    gateway: GatewayView | None = None  # the users' path, with a [gateway]
    #: a run waiting for the started engine: run, reason, why, waited_s, health_timeout_s
    booting: dict[str, Any] | None = None
    engine: EngineView | None = None  # what the engine says of itself (release, sleep, queue)
    #: a cluster's head: the daemon's last look at every node (state, summary, at, streak)
    cluster_watch: dict[str, Any] | None = None
    #: observe mode: the newest restart it would have made (``history --json``'s record)
    observed: dict[str, Any] | None = None
    #: a replica: what its planned restart waits for among its peers, and its last look at
    #: them and the turn (self, waits_for, at, peers, turn, turn_error)
    replicas: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``status --json`` contract (README lists its fields)."""
        return asdict(self)
