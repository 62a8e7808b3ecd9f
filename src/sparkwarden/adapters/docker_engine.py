"""The Docker engine, through docker-py: inspect, pause, stop, start. Nothing clever.

Every call has a timeout, and a call that cannot reach dockerd (it is being restarted) is retried
with backoff for ``retry_for`` seconds: a sequence must not be abandoned half-way because the
socket blinked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions

from sparkwarden.containers import ContainerState
from sparkwarden.errors import ContainerError, NoSuchContainer

T = TypeVar("T")

_UNREACHABLE = (requests.exceptions.ConnectionError, docker.errors.DockerException)


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

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        deadline = time.monotonic() + self._retry_for
        delay = 0.5
        while True:
            try:
                return fn()
            except docker.errors.NotFound:
                raise NoSuchContainer(f"{what}: no such container") from None
            except docker.errors.APIError as exc:
                raise ContainerError(f"{what}: {exc.explanation or exc}") from None
            except requests.exceptions.ReadTimeout:
                raise ContainerError(f"{what}: Docker did not answer in time") from None
            except _UNREACHABLE as exc:
                if time.monotonic() + delay > deadline:
                    raise ContainerError(f"{what}: Docker engine unreachable: {exc}") from None
                self._client = None
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

    def pause(self, name: str) -> None:
        self._call(f"pause {name}", lambda: self._container(name).pause())

    def unpause(self, name: str) -> None:
        self._call(f"unpause {name}", lambda: self._container(name).unpause())

    def stop(self, name: str, timeout: float) -> None:
        """``docker stop`` with SIGTERM, then SIGKILL after ``timeout`` seconds."""
        self._call(f"stop {name}", lambda: self._container(name).stop(timeout=int(timeout)))

    def set_restart_policy(self, name: str, policy: dict[str, Any]) -> None:
        """``docker update --restart``: ``policy`` is Docker's ``RestartPolicy`` object."""
        self._call(
            f"update {name} --restart={policy['Name']}",
            lambda: self._container(name).update(restart_policy=policy),
        )

    def start(self, name: str) -> None:
        self._call(f"start {name}", lambda: self._container(name).start())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
