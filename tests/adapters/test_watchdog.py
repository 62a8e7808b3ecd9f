"""The watchdog pings on the loop's progress only, and a loop that was only slow is not killed.

On an injected clock: the pinger's looks are the clock's steps, the loop's beats a script.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparkwarden.adapters.systemd import Watchdog

#: The unit's WatchdogSec=60s, and the daemon's idle lease (watch.interval 5 s + MARGIN 5 s).
WATCHDOG_S, LEASE_S, LOOP_S = 60.0, 10.0, 5.0


class Timeline:
    """A clock the pinger's waits move on, with the loop beating every ``LOOP_S`` except while
    ``stalled(t)``; records the pings."""

    def __init__(self, stalled: Callable[[float], bool], until: float) -> None:
        self.now, self.until, self.stalled = 0.0, until, stalled
        self.pings: list[float] = []
        self.next_beat = 0.0
        self.dog: Watchdog | None = None

    def wait(self, seconds: float) -> bool:
        assert self.dog is not None
        end = self.now + seconds
        while self.next_beat <= end:  # the loop's beats that fall within this wait
            self.now = self.next_beat
            if not self.stalled(self.now):
                self.dog.beat(LEASE_S)
            self.next_beat += 0.1 if self.stalled(self.now) else LOOP_S
        self.now = end
        return self.now >= self.until

    def send(self, *lines: str) -> None:
        assert lines == ("WATCHDOG=1",)
        self.pings.append(self.now)


def run(stalled: Callable[[float], bool], until: float = 600.0) -> list[float]:
    """The pings' times over ``until`` seconds of a daemon under WatchdogSec=60s."""
    timeline = Timeline(stalled, until)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WATCHDOG_USEC", str(int(WATCHDOG_S * 1e6)))
        mp.delenv("WATCHDOG_PID", raising=False)
        dog = Watchdog(timeline, clock=lambda: timeline.now, wait=timeline.wait)  # type: ignore[arg-type]
    timeline.dog = dog
    dog.run()
    return timeline.pings


def gaps(pings: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *pings], pings, strict=False)]


def test_a_steady_loop_is_pinged_about_every_half_of_watchdogsec() -> None:
    pings = run(lambda t: False)
    assert pings and max(gaps(pings)) <= WATCHDOG_S / 2 + 1
    assert len(pings) >= 600 / (WATCHDOG_S / 2 + 1) - 1  # none skipped


def test_a_loop_slow_for_seconds_at_a_half_is_not_killed() -> None:
    """The loop stalls 8 s across the pinger's look at 60 s (its lease lapsed at 60 for a
    moment): the ping goes as soon as the loop beats again. Before, that look skipped its ping
    and the next was 60 s after the last: systemd's deadline, a healthy daemon killed."""
    for start in (52.0, 55.0, 57.0):
        pings = run(lambda t, s=start: s <= t < s + 8)  # type: ignore[misc]
        assert max(gaps(pings)) < WATCHDOG_S / 2 + 10, (start, pings[:4])


def test_a_loop_that_hangs_is_killed_within_watchdogsec_and_its_lease() -> None:
    """No progress from 100 s on: the last ping is within the lease of the last beat, so
    systemd's deadline falls at most WatchdogSec after the lease ran out."""
    pings = run(lambda t: t >= 100.0)
    last_beat = 95.0
    assert pings[-1] <= last_beat + LEASE_S
    assert all(p <= last_beat + LEASE_S for p in pings)
