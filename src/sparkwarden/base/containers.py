"""What sparkwarden knows of a container, and the pure choice of which LLM is the active one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, Literal

from sparkwarden.base.errors import ContainerError

# Docker's zero time: a container that never started or never stopped.
_NEVER = "0001-01-01T00:00:00Z"

#: Docker statuses in which a container holds its memory and counts as "up".
UP_STATUSES = frozenset({"running", "paused", "restarting"})

#: Policies under which Docker restarts a container that exits by itself.
FIGHTING: Final = ("always", "unless-stopped", "on-failure")


def command_line(attrs: dict[str, Any]) -> list[str]:
    """A container's command as ``docker inspect`` has it: entrypoint, then its arguments."""
    config = attrs.get("Config") or {}
    return [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]


@dataclass(frozen=True)
class ContainerState:
    """The fields of ``docker inspect`` that decisions need, and nothing else."""

    name: str
    id: str
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int
    oom_killed: bool
    #: Docker's restart policy ("no", "always", "unless-stopped", "on-failure") and its retries.
    restart_policy: str = "no"
    restart_retries: int = 0
    #: Restarts by that policy since the last start through the API (which sets it to 0).
    restart_count: int = 0

    @property
    def up(self) -> bool:
        return self.status in UP_STATUSES

    @classmethod
    def from_inspect(cls, attrs: dict[str, Any]) -> ContainerState:
        state = attrs.get("State", {})
        policy = attrs.get("HostConfig", {}).get("RestartPolicy") or {}
        return cls(
            name=str(attrs.get("Name", "")).lstrip("/"),
            id=str(attrs.get("Id", "")),
            status=str(state.get("Status", "unknown")),
            started_at=parse_docker_time(state.get("StartedAt")),
            finished_at=parse_docker_time(state.get("FinishedAt")),
            exit_code=int(state.get("ExitCode") or 0),
            oom_killed=bool(state.get("OOMKilled")),
            restart_policy=str(policy.get("Name") or "no"),
            restart_retries=int(policy.get("MaximumRetryCount") or 0),
            restart_count=int(attrs.get("RestartCount") or 0),
        )

    def uptime_s(self, now: datetime) -> float | None:
        if self.status != "running" or self.started_at is None:
            return None
        return max(0.0, (now - self.started_at).total_seconds())


def parse_docker_time(value: object) -> datetime | None:
    """Docker's RFC 3339 time with nanoseconds, or None for its zero time."""
    if not isinstance(value, str) or not value or value.startswith(_NEVER[:10]):
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def choose_active(states: list[ContainerState], remembered: str | None) -> ContainerState:
    """The candidate that is up; after a crash, the one that ran last.

    Two up at once is an error, not a guess: restarting the wrong one could leave two engines
    fighting for unified memory.
    """
    up = [s for s in states if s.up]
    if len(up) > 1:
        names = ", ".join(f"{s.name} ({s.status})" for s in up)
        raise ContainerError(f"several LLM candidates are up at once: {names}; stop all but one")
    if up:
        return up[0]
    ran = [s for s in states if s.finished_at is not None]
    if ran:
        return max(ran, key=lambda s: s.finished_at or datetime.min)
    for state in states:
        if state.name == remembered:
            return state
    names = ", ".join(s.name for s in states)
    raise ContainerError(f"no LLM candidate is running and none has run before: {names}")


def voice_to_quiet(states: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The voice containers to quiet (the running ones) and those left as they were, by status.

    The one rule for the sequence, its dry-run plan, the memory floor's ``pause_voice`` and
    each cluster node's ``node pause``.
    """
    to_quiet = [name for name, status in states.items() if status == "running"]
    return to_quiet, {name: status for name, status in states.items() if status != "running"}


#: The signal number in the ``kill`` event of a ``docker stop``.
SIGTERM = "15"


@dataclass(frozen=True)
class ExitWatch:
    """Tells a crash from an operator's ``docker stop`` by the events before ``die``.

    ``docker stop`` sends a ``kill`` event with signal 15 before ``die``; a crash of the engine
    dies with no ``kill`` at all, and ``docker kill`` (signal 9) is treated as a crash too.
    """

    term_at: float | None = None

    def on_event(self, action: str, signal: str | None, t: float) -> ExitWatch:
        if action == "kill" and signal == SIGTERM:
            return replace(self, term_at=t)
        if action == "start":
            return ExitWatch()
        return self

    def classify_die(self, t: float, stop_window: float) -> Literal["crash", "operator-stop"]:
        if self.term_at is not None and t - self.term_at <= stop_window:
            return "operator-stop"
        return "crash"
