"""Docker's event stream for the LLM candidates, reconnecting when dockerd restarts.

A crash is noticed when Docker says ``die``, within milliseconds, not at the next poll. After a
reconnect the stream resumes from the last event seen, so nothing in between is lost.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import requests.exceptions

from sparkwarden.base import logs

log = logs.get("sparkwarden.events")

#: ``destroy``, ``create`` and ``rename`` too: an operator's replacement is told from a crash.
ACTIONS = ("die", "kill", "start", "stop", "oom", "pause", "unpause", "destroy", "create", "rename")


@dataclass(frozen=True)
class ContainerEvent:
    name: str
    action: str
    t: float
    signal: str | None = None
    exit_code: int | None = None
    id: str = ""  # the container's ID: a name outlives the container it named

    @classmethod
    def from_docker(cls, raw: dict[str, Any]) -> ContainerEvent | None:
        attributes = raw.get("Actor", {}).get("Attributes", {})
        name = attributes.get("name")
        action = str(raw.get("Action") or raw.get("status") or "")
        if not name or action not in ACTIONS:
            return None
        nanos = raw.get("timeNano")
        t = nanos / 1e9 if isinstance(nanos, int) else float(raw.get("time", time.time()))
        exit_code = attributes.get("exitCode")
        return cls(
            name=str(name),
            action=action,
            t=t,
            signal=attributes.get("signal"),
            exit_code=int(exit_code) if exit_code is not None else None,
            id=str(raw.get("id") or raw.get("Actor", {}).get("ID") or ""),
        )


class EventStream:
    """A thread that hands each event of the named containers to ``sink``."""

    def __init__(
        self,
        names: list[str],
        sink: Callable[[ContainerEvent], None],
        since: float | None = None,
    ) -> None:
        self._names = names
        self._sink = sink
        self._since = since  # replay what happened while no sparkwarden was listening
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name="docker-events", daemon=True)
        self.reconnects = 0

    def start(self) -> None:
        self._thread.start()

    def replay(self, until: float) -> list[ContainerEvent]:
        """The events since the last one seen, up to ``until``, read at once (before the first
        look); the stream then starts after ``until``. Docker not answering: nothing, and the
        stream replays them itself."""
        since = self._since
        if since is None:
            return []
        events: list[ContainerEvent] = []
        client = None
        try:
            client = docker.from_env(timeout=30)
            for raw in client.events(
                decode=True,
                since=int(since),
                until=int(until) + 1,
                filters={"type": "container", "container": self._names},
            ):
                event = ContainerEvent.from_docker(raw)
                if event is not None and since < event.t <= until:
                    events.append(event)
        except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
            log.warning("docker_events_replay_failed", error=str(exc))
            return []
        finally:
            if client is not None:
                client.close()
        self._since = until
        return events

    def _run(self) -> None:
        since = self._since
        delay = 0.5
        while not self._stop.is_set():
            client = None
            try:
                client = docker.from_env(timeout=30)
                self._stream = client.events(
                    decode=True,
                    since=None if since is None else int(since),
                    filters={"type": "container", "container": self._names},
                )
                if self.reconnects:
                    log.info("docker_events_reconnected", reconnects=self.reconnects, since=since)
                delay = 0.5
                for raw in self._stream:
                    event = ContainerEvent.from_docker(raw)
                    # ``since`` has whole seconds: skip what a reconnect delivers again.
                    if event is not None and (since is None or event.t > since):
                        since = event.t
                        self._sink(event)
                if not self._stop.is_set():
                    log.warning("docker_events_lost", error="the engine closed the stream")
            except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
                if not self._stop.is_set():
                    log.warning("docker_events_lost", error=str(exc), retry_in=delay)
            finally:
                if client is not None:
                    client.close()
            if self._stop.wait(delay):
                break
            self.reconnects += 1
            delay = min(delay * 2, 10.0)

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(OSError, AttributeError):
                stream.close()
