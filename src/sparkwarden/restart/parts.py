"""What a restart run is handed and hands back: its adapters and clock, the events an observer
is told, its outcome, and where a repair resumes. Kept apart from :mod:`sequence` so the step
bodies can name these without importing the sequence that calls them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.adapters.host import Host
from sparkwarden.base import faults
from sparkwarden.config.schema import Config
from sparkwarden.restart.events import StepEvent
from sparkwarden.restart.journal import Journal, Plan
from sparkwarden.restart.rotation import PROBE_HEADER
from sparkwarden.vllm.client import VllmClient
from sparkwarden.vllm.keyguard import KeyGuard, docker_engines


@dataclass
class Parts:
    """The adapters a sequence drives, and the clock it waits on (fakes in unit tests)."""

    docker: DockerEngine
    vllm: VllmClient
    host: Host
    journal: Journal
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    #: Told "progress made; the next within N s" (the daemon's watchdog lease).
    heartbeat: Callable[[float], None] = lambda _lease: None
    #: True when sparkwarden must stop: a boot wait is cut short (the LLM keeps loading).
    should_abort: Callable[[], bool] = lambda: False
    #: Called once a step has acted, before it is recorded (tests: see
    #: :mod:`sparkwarden.base.faults`).
    after_action: Callable[[str], None] = lambda _name: None
    #: The users' path (``[gateway]``): the same chat code, through the gateway's URL and key.
    gateway: VllmClient | None = None
    #: A replica's own gateway path (``[replicas.rotation]``, its Nginx), proven before it
    #: rejoins the rotation: the engine's key, and the header its Nginx lets through while out.
    own_path: VllmClient | None = None

    @classmethod
    def from_config(
        cls,
        config: Config,
        heartbeat: Callable[[float], None] = lambda _lease: None,
        should_abort: Callable[[], bool] = lambda: False,
    ) -> Parts:
        """The real adapters; a daemon hands in its watchdog's beat and its stop."""
        docker = DockerEngine(timeout=config.docker.timeout, retry_for=config.docker.retry_for)
        engines = docker_engines(docker, config.llm.containers)
        return cls(
            docker=docker,
            vllm=VllmClient(
                config.llm.base_url, config.llm.api_key(), KeyGuard(config.llm.base_url, engines)
            ),
            host=Host(),
            journal=Journal(config.state.dir),
            heartbeat=heartbeat,
            should_abort=should_abort,
            after_action=faults.stall_after_action(),
            # The gateway's listener is proven by root's ownership or a privileged port only.
            gateway=(
                VllmClient(config.gateway.url, config.gateway.api_key()) if config.gateway else None
            ),
            own_path=own_path(config),
        )

    def close(self) -> None:
        self.docker.close()
        self.vllm.close()
        for client in (self.gateway, self.own_path):
            if client is not None:
                client.close()
        self.journal.close()


def own_path(config: Config) -> VllmClient | None:
    """A replica's client of its own gateway path (its Nginx), when it leaves the rotation."""
    if config.rotation is None:
        return None
    return VllmClient(config.rotation.url, config.llm.api_key(), headers={PROBE_HEADER: "1"})


StepObserver = Callable[[StepEvent], None]


@dataclass(frozen=True)
class Outcome:
    run_id: int
    ok: bool
    container: str | None
    error: str | None
    #: The step that failed first: a ``gateway_probe`` failure is no reason to restart again.
    failed_step: str | None = None
    #: The ID of the container the run chose (None when it failed before choosing).
    container_id: str | None = None
    #: On a cluster's head: the nodes the run failed on, named in its notification.
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resume:
    """Where a repair picks up an interrupted run: what it had paused and stopped.

    ``container`` is None when the run was cut short before it chose one (the repair detects
    afresh); ``llm_stopped`` says a ``docker stop`` was sent, so a container still "running" may
    be on its way down and must not be trusted.
    """

    container: str | None
    voice_paused: list[str]
    llm_stopped: bool = False
    #: when the run sent ``docker stop`` (wall clock): a container started after it is not ours
    stopped_at: float | None = None
    #: the ID of the container the run chose: another ID under the name is a replacement
    container_id: str | None = None
    #: the run had sent ``docker start``: a container down now went down after it
    llm_started: bool = False

    @classmethod
    def from_plan(
        cls, container: str | None, plan: Plan, container_id: str | None = None
    ) -> Resume | None:
        """What an interrupted run left to finish; None when it had touched nothing."""
        stopped_at = plan.get("llm_stopped_at")
        resume = cls(
            container or plan.get("container"),
            list(plan.get("voice_paused", [])),
            # Once the start was sent, a running LLM is the one the run started.
            bool(plan.get("llm_stopped")) and not plan.get("llm_started"),
            None if stopped_at is None or plan.get("llm_started") else float(stopped_at),
            container_id,
            bool(plan.get("llm_started")),
        )
        return resume if resume.container or resume.voice_paused else None
