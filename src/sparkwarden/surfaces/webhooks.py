"""Notifications: webhooks (generic JSON, ntfy, Slack-compatible) on the events that matter.

Sent from a thread of their own through a bounded queue, so a slow or failing webhook never
blocks or breaks a sequence; the same event for the same subject is sent at most once per
``min_interval``; target URLs (they often carry tokens) are never logged, only their kind and
position in the config.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from sparkwarden.base import logs
from sparkwarden.base.notices import TITLES, Notice
from sparkwarden.config.schema import NotifyTarget

log = logs.get("sparkwarden.notify")


#: ``notify --test``'s kind: no config can subscribe to it, so no receiver's filter takes it for
#: an alert, and every target gets it.
TEST: Literal["test"] = "test"
TEST_TITLE = "sparkwarden: a test notification (notify --test), nothing happened"


@dataclass(frozen=True)
class Event:
    kind: Notice | Literal["test"]
    subject: str
    summary: str
    detail: dict[str, Any]
    at: float


def payload(target: NotifyTarget, event: Event, host: str) -> dict[str, Any]:
    """The request for one target: keyword arguments for ``httpx.Client.post``."""
    title = TEST_TITLE if event.kind == TEST else TITLES[event.kind]
    if target.kind == "ntfy":
        priority = "urgent" if event.kind in ("gave_up", "reboot_required") else "high"
        tags = "sparkwarden"
        if event.kind == TEST:
            priority, tags = "low", "sparkwarden,test"
        return {
            "content": f"{host}: {event.summary}".encode(),
            "headers": {"Title": title, "Priority": priority, "Tags": tags},
        }
    if target.kind == "slack":
        return {"json": {"text": f"*{title}* on `{host}`: {event.summary}"}}
    return {
        "json": {
            "event": event.kind,
            "host": host,
            "subject": event.subject,
            "summary": event.summary,
            "detail": event.detail,
            "at": event.at,
        }
    }


class Webhooks:
    """Notifications to the configured webhooks, from a thread of their own."""

    def __init__(self, targets: list[NotifyTarget], clock: Any = time.monotonic) -> None:
        self.targets = targets
        self._clock = clock
        self._last: dict[tuple[int, str, str], float] = {}
        self._queue: queue.Queue[Event | None] = queue.Queue(maxsize=100)
        self._thread: threading.Thread | None = None
        self._host = socket.gethostname()

    def start(self) -> None:
        if self.targets and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
            self._thread.start()

    def emit(self, kind: Notice, subject: str, summary: str, **detail: Any) -> None:
        """Queue an event; never blocks (a full queue drops it, with a log line)."""
        if not self.targets:
            return
        try:
            self._queue.put_nowait(Event(kind, subject, summary, detail, time.time()))
        except queue.Full:
            log.warning("notify_dropped", notice=kind, why="queue full")

    def due(self, index: int, target: NotifyTarget, event: Event) -> bool:
        """Wanted by this target, and not the same event for the same subject too soon."""
        if event.kind not in target.events:
            return False
        key, now = (index, event.kind, event.subject), self._clock()
        last = self._last.get(key)
        if last is not None and now - last < target.min_interval:
            return False
        self._last[key] = now
        return True

    def _run(self) -> None:
        with httpx.Client(timeout=httpx.Timeout(5.0)) as client:
            while (event := self._queue.get()) is not None:
                for index, target in enumerate(self.targets):
                    if not self.due(index, target, event):
                        continue
                    try:
                        self._send(client, index, target, event)
                    except Exception:  # a bug here must not silence every later notification
                        log.exception("notify_crashed", target=f"notify[{index}]")

    def _send(self, client: httpx.Client, index: int, target: NotifyTarget, event: Event) -> None:
        name = target_name(index, target)
        error = deliver(client, target, event, self._host)
        if error is None:
            log.info("notified", target=name, notice=event.kind)
        else:
            log.warning("notify_failed", target=name, notice=event.kind, error=error)

    def stop(self) -> None:
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)
            self._thread.join(timeout=6)


def target_name(index: int, target: NotifyTarget) -> str:
    """How a target is named in logs and output: its URL may hold a token, so never that."""
    return f"notify[{index}] ({target.kind})"


def deliver(client: httpx.Client, target: NotifyTarget, event: Event, host: str) -> str | None:
    """One POST; None when the target answered 2xx, else what went wrong (no URL in it)."""
    try:
        response = client.post(target.url(), **payload(target, event, host))
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return f"HTTP {exc.response.status_code}"
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return None


def send_test(targets: list[NotifyTarget]) -> list[tuple[str, str | None]]:
    """``notify --test``: the test event to every target now, whatever its ``events`` and
    ``min_interval``; each target's name and its error (None: it answered)."""
    host = socket.gethostname()
    event = Event(TEST, "sparkwarden", f"a test notification from {host}", {}, time.time())
    with httpx.Client(timeout=httpx.Timeout(5.0)) as client:
        return [
            (target_name(i, target), deliver(client, target, event, host))
            for i, target in enumerate(targets)
        ]
