"""systemd's notify protocol (sdnotify), and a watchdog that pings only on real progress.

A ping from a free-running thread proves nothing. Here the supervision loop grants *leases*:
"I made progress, and will again within N seconds". The pinger thread sends ``WATCHDOG=1`` only
while a lease is current, so a loop wedged in a hung call stops the pings and systemd kills it.
Before a call that may legitimately block (``docker stop`` with a 120 s grace), the loop grants a
lease as long as that call's own timeout, and no longer.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable

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
    """Pings every half of ``WATCHDOG_USEC`` while the loop's lease is current.

    The lease is looked at every second (an eighth of ``WatchdogSec`` when that is shorter), not
    only at each half: a lease that lapsed for a moment (a loop slowed past its margin on a loaded
    box) at a half's look skipped that ping, the next came a whole ``WatchdogSec`` after the
    last, and systemd killed a daemon that had only been slow. Now the ping goes at the first
    look the lease is current again: only a loop without progress for about ``WatchdogSec`` is
    killed.
    """

    def __init__(
        self,
        notifier: SdNotify,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        """``clock`` and ``wait`` (True: stop) are injected by the tests; the thread's own
        stop event otherwise."""
        self._notifier = notifier
        usec = os.environ.get("WATCHDOG_USEC")
        watchdog_pid = os.environ.get("WATCHDOG_PID")
        mine = watchdog_pid is None or watchdog_pid == str(os.getpid())
        self.interval = int(usec) / 2_000_000 if usec and usec.isdigit() and mine else None
        self.look = None if self.interval is None else min(1.0, self.interval / 4)
        self._clock = clock
        self._lease_until = 0.0
        self._pinged = -math.inf
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._thread: threading.Thread | None = None
        self.frozen = False  # fault injection: the loop pretends to hang (tests only)

    def beat(self, lease_s: float) -> None:
        """The loop made progress and will again within ``lease_s`` seconds."""
        if not self.frozen:
            self._lease_until = max(self._lease_until, self._clock() + lease_s)

    def start(self) -> None:
        if self.interval is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self.run, name="watchdog", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """The pinger's loop, until stopped."""
        assert self.interval is not None and self.look is not None
        while not self._wait(self.look):
            now = self._clock()
            if now < self._lease_until and now - self._pinged >= self.interval:
                self._notifier.send("WATCHDOG=1")
                self._pinged = now

    def stop(self) -> None:
        self._stop.set()
