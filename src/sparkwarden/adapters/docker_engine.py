"""The Docker engine, through docker-py: inspect, pause, stop, start. Nothing clever.

Every call has a timeout, and a call that cannot reach dockerd (it is being restarted) is retried
with backoff for ``retry_for`` seconds: a sequence must not be abandoned half-way because the
socket blinked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import docker
import docker.errors
import requests.exceptions

from sparkwarden.base.containers import ContainerState
from sparkwarden.base.errors import ContainerError, NoSuchContainer, scrub

if TYPE_CHECKING:
    from sparkwarden.adapters.docker_events import ContainerEvent

T = TypeVar("T")

#: Any transport failure (a refused socket, a response cut short when dockerd dies mid-answer).
_UNREACHABLE = (requests.exceptions.RequestException, docker.errors.DockerException)


class DockerEngine:
    def __init__(self, timeout: float = 60.0, retry_for: float = 60.0) -> None:
        self._timeout = timeout
        self._retry_for = retry_for
        self._client: docker.DockerClient | None = None

    @property
    def client(self) -> docker.DockerClient:
        """Connect lazily: docker-py asks the daemon its API version when it is built."""
        if self._client is None:
            self._client = docker.from_env(timeout=int(self._timeout))
        return self._client

    def _call(
        self, what: str, fn: Callable[[], T], reached: Callable[[], T | None] | None = None
    ) -> T:
        """``fn``, retried while dockerd is unreachable. ``reached`` (state changes) says whether
        the state ``fn`` wanted holds: a retry after a blink may find the first try had landed
        (dockerd then answers 409 "already paused"), which is success, not failure."""
        deadline = time.monotonic() + self._retry_for
        delay = 0.5
        retried = False
        while True:
            try:
                return fn()
            except docker.errors.NotFound:
                raise NoSuchContainer(f"{what}: no such container") from None
            except docker.errors.APIError as exc:
                if retried and reached is not None and (landed := reached()) is not None:
                    return landed
                raise ContainerError(scrub(f"{what}: {exc.explanation or exc}")) from None
            except requests.exceptions.ReadTimeout:
                raise ContainerError(f"{what}: Docker did not answer in time") from None
            except _UNREACHABLE as exc:
                if time.monotonic() + delay > deadline:
                    raise ContainerError(
                        scrub(f"{what}: Docker engine unreachable: {exc}")
                    ) from None
                self._client = None
                retried = True
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _container(self, name: str) -> Any:
        return self.client.containers.get(name)

    def inspect(self, name: str) -> ContainerState:
        return self._call(
            f"inspect {name}", lambda: ContainerState.from_inspect(self._container(name).attrs)
        )

    def attrs(self, name: str) -> dict[str, Any]:
        """The whole ``docker inspect`` of a container (for doctor's checks)."""
        return self._call(f"inspect {name}", lambda: dict(self._container(name).attrs))

    def processes(self, name: str) -> list[str]:
        """The command lines of the processes in a running container (``docker top``), whole:
        dockerd's plain ``ps -ef`` cuts them at its terminal width (80 columns without one)."""

        def top() -> list[str]:
            listing = self._container(name).top(ps_args="-ww -eo pid,args")
            column = list(listing.get("Titles") or []).index("COMMAND")
            return [str(row[column]) for row in listing.get("Processes") or []]

        return self._call(f"top {name}", top)

    def events(self, container_id: str, since: float, until: float) -> list[ContainerEvent]:
        """The container's events between ``since`` and ``until``, as dockerd still keeps them
        (its latest ones): who stopped it, for a node the head asks after the fact."""

        # here: its module brings the logger, which a node's verb (a fresh Python) goes without
        from sparkwarden.adapters.docker_events import ContainerEvent

        def read() -> list[ContainerEvent]:
            found = [
                ContainerEvent.from_docker(raw)
                for raw in self.client.events(
                    decode=True,
                    since=int(since),
                    until=int(until) + 1,
                    filters={"type": "container", "container": container_id},
                )
            ]
            return [e for e in found if e is not None and since <= e.t <= until]

        return self._call(f"events of {container_id[:12]}", read)

    def _change(self, verb: str, name: str, fn: Callable[[Any], None], wanted: str) -> None:
        """A state change; after a retry, finding the container already ``wanted`` is done."""

        def reached() -> bool | None:
            try:
                status = self._container(name).attrs["State"]["Status"]
            except (docker.errors.DockerException, requests.exceptions.RequestException):
                return None
            return True if status == wanted else None

        self._call(f"{verb} {name}", lambda: fn(self._container(name)), reached)

    def pause(self, name: str) -> None:
        self._change("pause", name, lambda c: c.pause(), "paused")

    def unpause(self, name: str) -> None:
        self._change("unpause", name, lambda c: c.unpause(), "running")

    def stop(self, name: str, timeout: float) -> None:
        """``docker stop`` with SIGTERM, then SIGKILL after ``timeout`` seconds."""
        self._change("stop", name, lambda c: c.stop(timeout=int(timeout)), "exited")

    def set_restart_policy(self, name: str, policy: dict[str, Any]) -> None:
        """``docker update --restart``: ``policy`` is Docker's ``RestartPolicy`` object."""
        self._call(
            f"update {name} --restart={policy['Name']}",
            lambda: self._container(name).update(restart_policy=policy),
        )

    def start(self, name: str) -> None:
        self._change("start", name, lambda c: c.start(), "running")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
