"""The nightly restart with *crontab* semantics on top of APScheduler 3.x.

Three traps live here. APScheduler numbers weekdays from Monday = 0, so its own
``CronTrigger.from_crontab("0 4 * * 0")`` fires on Mondays; crontab fires when *either*
day-of-month or day-of-week matches when both are restricted, where APScheduler needs both; and
across DST APScheduler may skip a night or fire twice. Weekdays are therefore translated to
names, the two day fields become an ``OrTrigger``, and fields are matched on the wall clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_FIELDS = ("minute", "hour", "day", "month", "day_of_week")


def _weekday(token: str) -> int:
    token = token.strip().lower()
    if token[:3] in _DAY_NAMES and not token.isdigit():
        return _DAY_NAMES.index(token[:3])
    if not token.isdigit() or not 0 <= int(token) <= 7:
        raise ValueError(f"day-of-week {token!r} is not 0-7 or a day name")
    return int(token) % 7  # crontab: 0 and 7 are both Sunday


def crontab_weekdays(field: str) -> str:
    """A crontab day-of-week field as APScheduler day names (``"1-5"`` -> ``"mon,...,fri"``)."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"day-of-week step in {part!r} must be 1 or more")
        if base == "*":
            first, last = 0, 6
        elif "-" in base:
            low, high = base.split("-", 1)
            first, last = _weekday(low), _weekday(high)
            if high.strip() == "7":
                last = 7
            if last < first:
                raise ValueError(f"day-of-week range {base!r} runs backwards")
        else:
            first = last = _weekday(base)
        days.update(d % 7 for d in range(first, last + 1, step))
    return ",".join(_DAY_NAMES[d] for d in sorted(days))


class WallClockCron(BaseTrigger):  # type: ignore[misc]
    """Crontab fields matched against the zone's wall clock, as cron does across DST.

    The fields are evaluated on naive local time, then placed in the zone: a time the spring
    change skips runs right after the change (the same length of time later), and a time the
    autumn change repeats runs once, at its first occurrence. One restart a night, every night.
    """

    def __init__(self, fields: BaseTrigger, zone: ZoneInfo) -> None:
        self.fields = fields  # evaluated in UTC, standing for naive wall time
        self.zone = zone

    def get_next_fire_time(self, previous: datetime | None, now: datetime) -> datetime | None:
        wall = now.astimezone(self.zone).replace(tzinfo=None)
        if previous is not None:
            after_previous = previous.astimezone(self.zone).replace(tzinfo=None)
            wall = max(wall, after_previous + timedelta(microseconds=1))
        naive: datetime | None = self.fields.get_next_fire_time(None, wall.replace(tzinfo=UTC))
        if naive is None:
            return None
        return naive.replace(tzinfo=None).replace(tzinfo=self.zone, fold=0)

    def __str__(self) -> str:
        return f"wall-clock {self.fields} in {self.zone}"


def crontab_trigger(expr: str, timezone: str | None) -> BaseTrigger:
    """Five crontab fields in a zone (None: the host's), as a trigger APScheduler can run."""
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"cron {expr!r} needs 5 fields (minute hour day month weekday)")
    minute, hour, day, month, weekday = fields
    zone = ZoneInfo(timezone) if timezone else _host_zone()
    try:
        names = crontab_weekdays(weekday)
        common = {"minute": minute, "hour": hour, "month": month, "timezone": UTC}
        matcher: BaseTrigger
        if day != "*" and names != "*":
            matcher = OrTrigger(
                [CronTrigger(day=day, **common), CronTrigger(day_of_week=names, **common)]
            )
        else:
            matcher = CronTrigger(day=day, day_of_week=names, **common)
        return WallClockCron(matcher, zone)
    except ValueError as exc:
        raise ValueError(f"cron {expr!r}: {exc}") from None


def _host_zone() -> ZoneInfo:
    from tzlocal import get_localzone  # APScheduler's own dependency

    zone = get_localzone()
    return zone if isinstance(zone, ZoneInfo) else ZoneInfo(str(zone))


def next_fire(trigger: BaseTrigger, after: datetime) -> datetime | None:
    fire: datetime | None = trigger.get_next_fire_time(None, after)
    return fire


def last_fire(trigger: BaseTrigger, now: datetime, horizon: timedelta) -> datetime | None:
    """The latest fire time in (now - horizon, now]: what a box that was off has missed."""
    fire = next_fire(trigger, now - horizon)
    latest = None
    while fire is not None and fire <= now:
        latest = fire
        fire = next_fire(trigger, fire.astimezone(UTC) + timedelta(seconds=1))
    return latest


def missed_run_due(
    trigger: BaseTrigger, now: datetime, grace: timedelta, last_scheduled_run: datetime | None
) -> datetime | None:
    """The fire time to make up at boot, if it was missed by no more than ``grace``."""
    if grace <= timedelta(0):
        return None
    missed = last_fire(trigger, now, grace)
    if missed is None or (last_scheduled_run is not None and last_scheduled_run >= missed):
        return None
    return missed
