"""systemd's notify protocol (sdnotify), and a watchdog that pings only on real progress.

A ping from a free-running thread proves nothing. Here the supervision loop grants *leases*:
"I made progress, and will again within N seconds". The pinger thread sends ``WATCHDOG=1`` only
while a lease is current, so a loop wedged in a hung call stops the pings and systemd kills it.
Before a call that may legitimately block (``docker stop`` with a 120 s grace), the loop grants a
lease as long as that call's own timeout, and no longer.
"""

from __future__ import annotations

import os
import threading
import time

import sdnotify


class SdNotify:
    """``READY=1``, ``STATUS=``, ``STOPPING=1``; silent without ``NOTIFY_SOCKET``."""

    def __init__(self) -> None:
        self._sd = sdnotify.SystemdNotifier()
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        self._last_status = ""
        self._lock = threading.Lock()

    def send(self, *lines: str) -> None:
        if self.enabled:
            with self._lock:
                self._sd.notify("\n".join(lines))

    def ready(self, status: str) -> None:
        self.send("READY=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        if text != self._last_status:
            self._last_status = text
            self.send(f"STATUS={text}")

    def stopping(self, extend_s: float | None = None) -> None:
        lines = ["STOPPING=1"]
        if extend_s:
            lines.append(f"EXTEND_TIMEOUT_USEC={int(extend_s * 1_000_000)}")
        self.send(*lines)


class Watchdog:
    """Pings every half of ``WATCHDOG_USEC`` while the loop's lease is current."""

    def __init__(self, notifier: SdNotify) -> None:
        self._notifier = notifier
        usec = os.environ.get("WATCHDOG_USEC")
        watchdog_pid = os.environ.get("WATCHDOG_PID")
        mine = watchdog_pid is None or watchdog_pid == str(os.getpid())
        self.interval = int(usec) / 2_000_000 if usec and usec.isdigit() and mine else None
        self._lease_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frozen = False  # fault injection: the loop pretends to hang (tests only)

    def beat(self, lease_s: float) -> None:
        """The loop made progress and will again within ``lease_s`` seconds."""
        if not self.frozen:
            self._lease_until = max(self._lease_until, time.monotonic() + lease_s)

    def start(self) -> None:
        if self.interval is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self.interval is not None
        while not self._stop.wait(self.interval):
            if time.monotonic() < self._lease_until:
                self._notifier.send("WATCHDOG=1")

    def stop(self) -> None:
        self._stop.set()
