"""The config schema: the one source of every default and every check.

A bad file must stop sparkwarden before it touches a container, with a message that names the
key and says what is wrong, so every field is validated here and nowhere else.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from sparkwarden.base import logs
from sparkwarden.base.errors import ConfigError
from sparkwarden.base.notices import EVENTS, Notice
from sparkwarden.config.locate import DEFAULT_PATH as DEFAULT_PATH
from sparkwarden.config.locate import DEFAULT_SOCKET, DEFAULT_STATE_DIR, read_toml
from sparkwarden.config.locate import ENV_PATH as ENV_PATH
from sparkwarden.config.locate import resolve_path as resolve_path
from sparkwarden.config.secretfiles import read_key

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(value: object) -> float:
    """Seconds from ``"90s"``, ``"20m"``, ``"1h30m"``, ``"20h"`` or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError(
            "expected a duration such as '90s', '20m', '20h' or seconds, got a boolean"
        )
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        elif text and re.fullmatch(f"(?:{_DURATION.pattern})+", text):
            seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))
        else:
            raise ValueError(
                f"invalid duration {value!r}: use '90s', '20m', '20h', '1h30m' or seconds"
            )
    else:
        raise ValueError(
            f"expected a duration such as '90s' or seconds, got {type(value).__name__}"
        )
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"invalid duration {value!r}")
    if seconds < 0:
        raise ValueError(f"duration {value!r} is negative")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact spelling, so ``check-config`` prints what an operator would write."""
    if seconds == 0:
        return "0s"
    for unit in ("d", "h", "m", "s"):
        count = seconds / _UNITS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
PositiveDuration = Annotated[Duration, Field(gt=0)]
ContainerName = Annotated[str, Field(min_length=1, pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LlmConfig(_Section):
    """The vLLM containers, of which exactly one is active at a time."""

    containers: Annotated[list[ContainerName], Field(min_length=1)]
    base_url: str
    stop_timeout: PositiveDuration = 120.0
    health_timeout: PositiveDuration = 1200.0
    probe_timeout: PositiveDuration = 180.0
    #: /health's poll while the engine loads: a ready engine is noticed within it
    poll_interval: PositiveDuration = 0.2
    api_key_file: Path | None = None
    model: str | None = None
    restart_policy: Literal["take-over", "leave"] = "take-over"

    @field_validator("containers")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"listed more than once: {', '.join(duplicated)}")
        return names

    @field_validator("base_url")
    @classmethod
    def _url(cls, url: str) -> str:
        return _http_url(url)

    def api_key(self) -> str | None:
        """The Bearer token, read when needed so it never sits in a printed config."""
        return read_key(self.api_key_file, API_KEY_ENV, "llm.api_key_file")

    @property
    def stop_window(self) -> float:
        """How long after a ``docker stop``'s SIGTERM the engine's exit still belongs to that
        stop (the stop's own timeout, and a margin): an operator's stop, not a crash."""
        return self.stop_timeout + 15


#: Where the key comes from when no ``api_key_file`` is set.
API_KEY_ENV = "SPARKWARDEN_LLM_API_KEY"
#: Where the gateway's key comes from when no ``gateway.api_key_file`` is set.
GATEWAY_KEY_ENV = "SPARKWARDEN_GATEWAY_API_KEY"


def _http_url(url: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(:\d+)?(/\S*)?", url):
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    return url.rstrip("/")


class GatewayConfig(_Section):
    """The users' path (e.g. LiteLLM -> Nginx -> vLLM): proven after each run, and watched when
    asked; a failing gateway is reported, never "fixed" by restarting the engine."""

    url: str
    model: str = Field(min_length=1)
    api_key_file: Path | None = None
    timeout: PositiveDuration = 120.0
    watch: bool = False

    @field_validator("url")
    @classmethod
    def _base(cls, url: str) -> str:
        """The base URL users give their OpenAI client ends in ``/v1``; requests add it back."""
        return _http_url(url).removesuffix("/v1")

    def api_key(self) -> str | None:
        """The gateway's key (e.g. a LiteLLM virtual key), read when needed, never printed."""
        return read_key(self.api_key_file, GATEWAY_KEY_ENV, "gateway.api_key_file")


class VoiceConfig(_Section):
    """Speech containers that share unified memory and must be quiet while the LLM reloads."""

    containers: list[ContainerName] = []
    mode: Literal["pause", "stop"] = "pause"
    stop_timeout: PositiveDuration = 30.0


class MemoryConfig(_Section):
    """The gate before ``docker start`` (a start into ghost memory kills the new engine), and
    the floor below which the OS itself starts to starve (SSH hangs past ~0.85 in use)."""

    start_min_available_gib: Annotated[float, Field(gt=0)] = 60.0
    start_wait: PositiveDuration = 180.0
    drop_interval: PositiveDuration = 5.0
    floor_gib: Annotated[float, Field(ge=0)] = 8.0
    floor_for: Duration = 120.0
    floor_action: Literal["warn", "pause_voice", "restart"] = "warn"
    #: what MemAvailable returns to after each stop and drop: when it falls at every one of the
    #: last ``trend_runs`` runs, by more than ``trend_fall_gib`` in all (0: off), memory is
    #: leaking that only a reboot returns (spark-vllm-docker #257): no more automatic restarts
    trend_runs: Annotated[int, Field(ge=2)] = 4
    trend_fall_gib: Annotated[float, Field(ge=0)] = 8.0


class StateConfig(_Section):
    dir: Path = DEFAULT_STATE_DIR


class DockerConfig(_Section):
    """How long one Docker API call may take, and how long to retry while dockerd is away."""

    timeout: PositiveDuration = 60.0
    retry_for: Duration = 60.0


class ScheduleConfig(_Section):
    """The nightly restart, in crontab syntax (Sunday is 0 or 7, as in crontab)."""

    cron: str | None = "30 4 * * *"
    timezone: str | None = None
    missed_grace: Duration = 1800.0
    min_uptime: Duration = 3600.0

    @field_validator("cron")
    @classmethod
    def _crontab(cls, expr: str | None) -> str | None:
        if expr:
            from sparkwarden.base.cron import crontab_trigger

            crontab_trigger(expr, "UTC")  # raises ValueError naming the field
        return expr or None

    @field_validator("timezone")
    @classmethod
    def _zone(cls, zone: str | None) -> str | None:
        if zone:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(zone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {zone!r}") from None
        return zone or None


class WatchConfig(_Section):
    """How often the daemon looks, and the uptime limit that beats DFlash's ~23 h crash."""

    interval: PositiveDuration = 5.0
    max_uptime: Duration = 72000.0
    boot_grace: Duration = 300.0
    #: "observe": every look, trigger, gate and notification as in "act", but nothing touched;
    #: each restart it would make is recorded as an ``observed`` run (an operator's first week)
    mode: Literal["act", "observe"] = "act"


class HealthConfig(_Section):
    """When a running container counts as a dead engine."""

    #: /health, and the 1-token health chat while no token moves (idle, or wedged)
    interval: PositiveDuration = 15.0
    timeout: PositiveDuration = 10.0
    #: the health chat also this often whatever moves (behind a queue it waits its turn); 0:
    #: never, and no wedge is judged
    chat_interval: Duration = 600.0
    failures: Annotated[int, Field(ge=1)] = 3
    stall_after: PositiveDuration = 300.0
    #: the health chat unanswered and no progress evidence (tokens, KV cache) for this long: a
    #: wedged engine behind a 200; above a long prefill's frozen tokens (30 s at 32k on a 27B
    #: dense), within 90 s of a wedge at the defaults; 0: off
    wedge_after: Duration = 45.0


#: The drafting canary's shipped prompts: math, code and prose, each long enough to draft a
#: hundred tokens greedily.
CANARY_PROMPTS: dict[str, str] = {
    "math": "Compute 37 * 43 step by step, then check the result by long division.",
    "code": "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "prose": "Describe a walk along a quiet harbour at dawn in one paragraph.",
}


class AcceptanceConfig(_Section):
    """Drafting health against the baseline learnt after each restart (see acceptance.py);
    defaults scored in benchmarks/score_acceptance.py."""

    enabled: bool = True
    window: PositiveDuration = 600.0
    min_draft_tokens: Annotated[int, Field(ge=1)] = 2000
    warmup: Duration = 600.0
    learn_windows: Annotated[int, Field(ge=1)] = 6
    fraction: Annotated[float, Field(gt=0, lt=1)] = 0.75
    recover_fraction: Annotated[float, Field(gt=0, le=1)] = 0.9
    consecutive: Annotated[int, Field(ge=1)] = 2
    long_context: Annotated[float, Field(gt=1)] = 4.0
    #: what a low passive estimate needs before it restarts: "canary" (a greedy canary on fixed
    #: prompts, taken when it can count, must confirm it) or "none" (act on the passive
    #: estimate alone: a workload whose deeper positions behave unlike the model can fire it)
    confirm: Literal["canary", "none"] = "canary"
    #: the engine must have had nothing running or waiting this long before a canary is sent...
    canary_idle: PositiveDuration = 20.0
    #: ...unless its answers carry their own spec-decode stats (vLLM's
    #: --per-request-spec-decode-metrics): then also while nobody waits and at most this many
    #: requests run (0: only when idle)
    canary_max_running: Annotated[int, Field(ge=0)] = 8
    #: at most one canary this often...
    canary_interval: PositiveDuration = 1800.0
    #: ...or this often while the passive estimate is suspicious
    canary_soon: PositiveDuration = 300.0
    #: suspicious this long without one valid canary: said in status, still not acted on
    canary_max_wait: PositiveDuration = 7200.0
    #: each prompt's baseline pooled over its first this many valid canaries after a start
    canary_learn: Annotated[int, Field(ge=1, le=20)] = 3
    #: valid canaries in a row below ``fraction`` that restart (a canary is one sample of text:
    #: under load greedy may not reproduce, so it is noisier than a passive window)
    canary_consecutive: Annotated[int, Field(ge=1)] = 3
    canary_max_tokens: Annotated[int, Field(ge=16, le=4096)] = 256
    canary_seed: int = 0
    #: one request per prompt per canary, greedy; a few classes so one odd prompt cannot decide
    canary_prompts: Annotated[dict[str, str], Field(min_length=1)] = Field(
        default_factory=lambda: dict(CANARY_PROMPTS)
    )

    @model_validator(mode="after")
    def _hysteresis(self) -> AcceptanceConfig:
        self._ordered("fraction", "recover_fraction", "it is the hysteresis")
        self._ordered("canary_soon", "canary_interval", "canary_soon is the sooner one")
        if any(not text.strip() for text in self.canary_prompts.values()):
            raise ValueError("canary_prompts: every prompt needs some text")
        return self

    def _ordered(self, low: str, high: str, why: str) -> None:
        """``low`` <= ``high``. A default never makes a user's valid choice an error: the one
        left at its default moves to the value set (canary_interval = "60s" alone brings
        canary_soon down to 60s); only two values both set against each other are refused."""
        if getattr(self, low) <= getattr(self, high):
            return
        given = self.model_fields_set
        if low not in given:
            object.__setattr__(self, low, getattr(self, high))  # frozen: set once, while built
        elif high not in given:
            object.__setattr__(self, high, getattr(self, low))
        else:
            raise ValueError(f"{low} must be at most {high} ({why})")


class DrainConfig(_Section):
    """Before a planned restart, wait for the engine to be idle, but not for ever."""

    quiet: Duration = 30.0
    deadline: Duration = 600.0


class BudgetConfig(_Section):
    """At most ``max_runs`` automatic runs per ``window``: a restart loop can hang the box."""

    max_runs: Annotated[int, Field(ge=1)] = 3
    window: PositiveDuration = 21600.0
    backoff: Duration = 120.0
    backoff_max: Duration = 3600.0


class ControlConfig(_Section):
    """The daemon's Unix socket: root-owned, mode 0660, this group may talk to it."""

    socket: Path = DEFAULT_SOCKET
    group: str | None = "sparkwarden"


class NotifyTarget(_Section):
    """A webhook. The URL often holds a token: give it in a file or the environment."""

    kind: Literal["webhook", "ntfy", "slack"] = "webhook"
    url_file: Path | None = None
    url_env: str | None = None
    events: list[Notice] = list(EVENTS)
    min_interval: Duration = 600.0

    @model_validator(mode="after")
    def _one_source(self) -> NotifyTarget:
        if (self.url_file is None) == (self.url_env is None):
            raise ValueError("give exactly one of url_file or url_env")
        return self

    def url(self) -> str:
        if self.url_file is not None:
            return self.url_file.read_text().strip()
        return os.environ.get(self.url_env or "", "").strip()


class MetricsConfig(_Section):
    """sparkwarden's own Prometheus metrics. Off unless given a loopback address."""

    listen: str = ""

    @field_validator("listen")
    @classmethod
    def _loopback(cls, listen: str) -> str:
        if not listen:
            return listen
        host, _, port = listen.rpartition(":")
        if host not in ("127.0.0.1", "::1", "[::1]", "localhost") or not port.isdigit():
            raise ValueError(f"{listen!r}: give a loopback address and port, e.g. 127.0.0.1:9464")
        return listen


def ssh_destination(target: str) -> str:
    if target.startswith("-") or any(c.isspace() for c in target):
        raise ValueError(f"{target!r} is not an ssh destination (user@host or a Host name)")
    return target


class ClusterNode(_Section):
    """One Spark of a cluster: how the head reaches its sparkwarden, and its engine there."""

    name: ContainerName
    #: an ssh destination (``user@host``, or a Host of ``ssh_config``); empty: this host
    ssh: str = ""
    #: the engine's containers on this node (rank 0 on the head, headless ranks elsewhere)
    engine: Annotated[list[ContainerName], Field(min_length=1)]
    voice: list[ContainerName] = []
    #: the command that runs sparkwarden on that node (installed the same way on every node)
    sparkwarden: str = Field(default="sparkwarden", min_length=1)

    @field_validator("ssh")
    @classmethod
    def _destination(cls, target: str) -> str:
        return ssh_destination(target)


class ClusterConfig(_Section):
    """Several Sparks serving one engine, restarted and watched as one from the head (the first
    node, where this sparkwarden runs)."""

    #: "native": vLLM's own --nnodes/--node-rank/--headless, the same containers started again;
    #: "ray": Ray head and workers (``ray start --head`` / ``--address``, ``vllm serve
    #: --distributed-executor-backend ray`` in the head's container), the same containers
    #: started again, the head's first; "launcher": eugr's launch-cluster.sh: ``--rm``
    #: containers, a stop removes them and the start is ``launcher`` run on the head
    setup: Literal["native", "ray", "launcher"] = "native"
    nodes: Annotated[list[ClusterNode], Field(min_length=2)]
    #: an ssh_config file for ``ssh -F`` (default: the user's own)
    ssh_config: Path | None = None
    connect_timeout: PositiveDuration = 10.0
    #: the launcher's start command (``bash -c``, on the head); it must return once launched
    launcher: str = ""
    launcher_timeout: PositiveDuration = 600.0
    #: how often the daemon on the head looks at every node (SSH, in parallel)
    watch_interval: PositiveDuration = 30.0
    #: looks in a row that must see a dead rank before the cluster is restarted (one look can
    #: catch a rank mid-restart)
    confirm: Annotated[int, Field(ge=1)] = 2

    @property
    def containers_launched(self) -> bool:
        """The launcher's containers: ``--rm`` (absent while the cluster is down) and idling,
        the ranks exec'd into them (a running container may hold a dead rank)."""
        return self.setup == "launcher"

    @model_validator(mode="after")
    def _launcher(self) -> ClusterConfig:
        if self.setup == "launcher" and not self.launcher.strip():
            raise ValueError('setup = "launcher" needs launcher = "<the command that starts it>"')
        if self.setup != "launcher" and self.launcher:
            raise ValueError('launcher is only read with setup = "launcher"')
        return self

    @field_validator("nodes")
    @classmethod
    def _unique(cls, nodes: list[ClusterNode]) -> list[ClusterNode]:
        names = [n.name for n in nodes]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"node names listed more than once: {', '.join(duplicated)}")
        # an empty ssh means "this host": a worker without one would be the head again
        if nodes[0].ssh:
            raise ValueError(
                f"the first node ({nodes[0].name}) is the head, where this runs: no ssh"
            )
        if bare := [n.name for n in nodes[1:] if not n.ssh]:
            raise ValueError(
                f"every node but the head needs ssh (how to reach it): {', '.join(bare)}"
            )
        targets = [n.ssh for n in nodes[1:]]
        if twice := sorted({t for t in targets if targets.count(t) > 1}):
            raise ValueError(f"two nodes reached at the same ssh destination: {', '.join(twice)}")
        if both := [n.name for n in nodes if set(n.engine) & set(n.voice)]:
            raise ValueError(f"a container listed as both engine and voice on {', '.join(both)}")
        return nodes


class ReplicaNode(_Section):
    """One Spark of a replica set: how the others reach its sparkwarden."""

    name: ContainerName
    #: an ssh destination (``user@host``, or a Host of ``ssh_config``); empty: this host
    ssh: str = ""
    #: the command that runs sparkwarden on that Spark
    sparkwarden: str = Field(default="sparkwarden", min_length=1)

    @field_validator("ssh")
    @classmethod
    def _destination(cls, target: str) -> str:
        return ssh_destination(target)


#: Where the daemon writes the rotation flag: its runtime directory (world-readable, so Nginx's
#: workers see it), kept across a restart of sparkwarden (RuntimeDirectoryPreserve=restart).
ROTATION_FLAG = Path("/run/sparkwarden/out-of-rotation")


class RotationConfig(_Section):
    """How this Spark leaves the gateway's rotation before a restart and rejoins it after: a flag
    file its Nginx reads (``if (-f FLAG) { return 503; }``), so LiteLLM's router sends new
    requests to a peer while the requests in flight finish."""

    #: the file whose presence makes this Spark's Nginx answer 503
    flag: Path = ROTATION_FLAG
    #: this Spark's own gateway path (its Nginx) as an OpenAI base URL: proven before it rejoins
    url: str

    @field_validator("url")
    @classmethod
    def _base(cls, url: str) -> str:
        return _http_url(url).removesuffix("/v1")

    @field_validator("flag")
    @classmethod
    def _absolute(cls, flag: Path) -> Path:
        if not flag.is_absolute():
            raise ValueError(f"flag must be an absolute path, not {str(flag)!r}")
        return flag


#: How long a turn lasts unless its holder renews it: a whole run's worst case on the defaults
#: (stop 2m, drop until memory is back 3m, a cold boot's llm.health_timeout 20m, the chat probe
#: 3m, the gateway 2m), so that a holder whose renewals cannot reach the first node (SSH down
#: mid-run) still keeps its turn while it boots; a killed daemon's turn is free after it.
TURN_TTL = 1800.0


class ReplicasConfig(_Section):
    """Several Sparks each serving its own copy of the model behind one gateway: planned
    restarts take turns (a lease in the journal of the set's first node), never two at once."""

    #: the replica set: the same list, in the same order, on every Spark
    nodes: Annotated[list[ReplicaNode], Field(min_length=2)]
    #: this Spark's name in ``nodes``
    self: ContainerName
    turn_ttl: PositiveDuration = TURN_TTL
    #: how often the daemon looks at its peers (and renews a turn it holds)
    check_interval: PositiveDuration = 30.0
    #: an ssh_config file for ``ssh -F`` (default: the user's own)
    ssh_config: Path | None = None
    connect_timeout: PositiveDuration = 10.0
    #: out of the gateway's rotation for every run, back once it serves (None: always in)
    rotation: RotationConfig | None = None

    @model_validator(mode="after")
    def _set(self) -> ReplicasConfig:
        names = [n.name for n in self.nodes]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"node names listed more than once: {', '.join(twice)}")
        if self.self not in names:
            raise ValueError(f"self = {self.self!r} is not one of nodes ({', '.join(names)})")
        if bare := [n.name for n in self.nodes if not n.ssh and n.name != self.self]:
            raise ValueError(f"every node but this one ({self.self}) needs ssh: {', '.join(bare)}")
        if self.turn_ttl < 3 * self.check_interval:
            raise ValueError(
                "turn_ttl must be at least 3 check_interval: a turn is renewed at each check"
            )
        return self

    @property
    def first(self) -> ReplicaNode:
        """Where the turn is kept: the set's first node, the same on every Spark."""
        return self.nodes[0]

    @property
    def me(self) -> ReplicaNode:
        return next(n for n in self.nodes if n.name == self.self)

    @property
    def peers(self) -> list[ReplicaNode]:
        return [n for n in self.nodes if n.name != self.self]

    def reached(self, node: ReplicaNode) -> ReplicaNode:
        """``node`` as this Spark reaches it: itself with no ssh (the turn kept in-process)."""
        return node.model_copy(update={"ssh": ""}) if node.name == self.self else node


class Config(_Section):
    llm: LlmConfig
    voice: VoiceConfig = VoiceConfig()
    memory: MemoryConfig = MemoryConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    watch: WatchConfig = WatchConfig()
    health: HealthConfig = HealthConfig()
    acceptance: AcceptanceConfig = AcceptanceConfig()
    drain: DrainConfig = DrainConfig()
    budget: BudgetConfig = BudgetConfig()
    state: StateConfig = StateConfig()
    control: ControlConfig = ControlConfig()
    docker: DockerConfig = DockerConfig()
    notify: list[NotifyTarget] = []
    metrics: MetricsConfig = MetricsConfig()
    gateway: GatewayConfig | None = None
    cluster: ClusterConfig | None = None
    replicas: ReplicasConfig | None = None

    @property
    def rotation(self) -> RotationConfig | None:
        """A replica's gateway rotation, when it leaves it for its runs."""
        return self.replicas.rotation if self.replicas is not None else None

    @model_validator(mode="after")
    def _disjoint(self) -> Config:
        if self.cluster is not None and self.replicas is not None:
            raise ValueError(
                "[cluster] and [replicas] cannot both be set: a cluster is one engine across "
                "Sparks, replicas are one engine per Spark"
            )
        both = sorted(set(self.llm.containers) & set(self.voice.containers))
        if both:
            raise ValueError(f"containers listed as both llm and voice: {', '.join(both)}")
        head = self.cluster.nodes[0] if self.cluster else None
        if head is not None and (
            unwatched := [e for e in head.engine if e not in self.llm.containers]
        ):
            raise ValueError(
                f"cluster.nodes.0.engine: the head's engine ({', '.join(unwatched)}) must be in "
                "llm.containers: the daemon on the head watches it"
            )
        return self


def load(explicit: str | Path | None = None) -> Config:
    """Read, parse and validate the config, or raise :class:`ConfigError` naming the problem."""
    path = resolve_path(explicit)
    return parse(read_toml(path), source=str(path))


#: Keys renamed, (table, old) -> new: the old spelling is still read, with a warning naming the
#: new one. ``health.canary_interval`` named the health chat like the drafting canary.
RENAMED: dict[tuple[str, str], str] = {("health", "canary_interval"): "chat_interval"}


def renamed(data: dict[str, Any], source: str = "config") -> tuple[dict[str, Any], list[str]]:
    """The data with each old key under its new name, and a warning for each."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    said: list[str] = []
    for (table, old), new in RENAMED.items():
        section = out.get(table)
        if not isinstance(section, dict) or old not in section:
            continue
        if new in section:
            raise ConfigError(
                f"{source}: {table}.{old} is the old name of {table}.{new}: keep only {new}"
            )
        section[new] = section.pop(old)
        said.append(f"{table}.{old} is now {table}.{new}: read as that; rename it in {source}")
    return out, said


def parse(data: dict[str, Any], source: str = "config") -> Config:
    data, said = renamed(data, source)
    for warning in said:
        logs.get("sparkwarden.config").warning("config_key_renamed", why=warning)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: " + "; ".join(_describe(e) for e in exc.errors())) from None


def _describe(error: Any) -> str:
    key = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown key"
    if error["type"] == "missing":
        return f"{key}: required key is missing"
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{key}: {message}"


def effective(config: Config) -> dict[str, Any]:
    """The config with every default filled in, in TOML-ready types. TOML has no null: an unset
    value is left out, except ``cron``, whose ``""`` (no nightly restart) is a value in force."""
    data = config.model_dump(mode="json", exclude_none=True)
    data["schedule"].setdefault("cron", "")
    return data
