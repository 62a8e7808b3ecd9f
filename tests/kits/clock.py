"""Schedules a test makes from the time it runs, so that no time of day changes what it sees.

A cron line the test writes as a constant ("30 4 * * *", "* * * * *") fires whenever the clock
says: at 04:30 in a test that meant no restart, or again a minute later in a test that counted
one. These say exactly when the schedule fires (UTC), relative to now.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any


def cron_at(at: datetime) -> str:
    """The daily cron line for ``at``'s minute (UTC)."""
    at = at.astimezone(UTC)
    return f"{at.minute} {at.hour} * * *"


def next_minute(lead: float = 25.0) -> tuple[str, datetime]:
    """A cron line for the first whole minute at least ``lead`` seconds away (UTC)."""
    at = (datetime.now(UTC) + timedelta(seconds=lead + 60)).replace(second=0, microsecond=0)
    return cron_at(at), at


def missed_a_minute_ago(**more: Any) -> dict[str, Any]:
    """A ``[schedule]`` whose run fell due in the minute before now: a daemon started now makes
    it up at boot (within the 5 min grace), and the next one is a day away."""
    due = datetime.now(UTC) - timedelta(minutes=1)
    return {"cron": cron_at(due), "timezone": "UTC", "missed_grace": "5m", **more}


def nightly_far_from_now(**more: Any) -> dict[str, Any]:
    """A nightly ``[schedule]`` twelve hours from now: never due while a test runs."""
    return {"cron": cron_at(datetime.now(UTC) + timedelta(hours=12)), "timezone": "UTC", **more}
