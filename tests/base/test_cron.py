"""The nightly schedule keeps crontab's meaning, across weekdays and DST."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from sparkwarden.base.cron import (
    crontab_trigger,
    crontab_weekdays,
    last_fire,
    missed_run_due,
    next_fire,
)
from sparkwarden.config.schema import ConfigError, parse

BERLIN = ZoneInfo("Europe/Berlin")
UTC = ZoneInfo("UTC")


def fires(expr: str, zone: str, start: datetime, count: int) -> list[datetime]:
    trigger = crontab_trigger(expr, zone)
    out, t = [], start
    for _ in range(count):
        fire = next_fire(trigger, t)
        assert fire is not None
        out.append(fire)
        t = fire.astimezone(UTC) + timedelta(seconds=1)
    return out


def test_sunday_is_zero_and_seven_as_in_crontab() -> None:
    start = datetime(2026, 11, 30, tzinfo=UTC)  # a Monday
    for expr in ("0 4 * * 0", "0 4 * * 7", "0 4 * * sun"):
        assert [f.strftime("%A") for f in fires(expr, "UTC", start, 2)] == ["Sunday", "Sunday"]


@pytest.mark.parametrize(
    ("field", "names"),
    [
        ("1-5", "mon,tue,wed,thu,fri"),
        ("5-7", "sun,fri,sat"),
        ("*/2", "sun,tue,thu,sat"),
        ("0,3", "sun,wed"),
        ("*", "*"),
        ("mon-wed", "mon,tue,wed"),
    ],
)
def test_weekday_fields(field: str, names: str) -> None:
    assert crontab_weekdays(field) == names


def test_weekdays_only() -> None:
    days = {
        f.strftime("%a")
        for f in fires("30 4 * * 1-5", "UTC", datetime(2026, 11, 30, tzinfo=UTC), 10)
    }
    assert days == {"Mon", "Tue", "Wed", "Thu", "Fri"}


def test_day_of_month_or_weekday_as_crontab_does() -> None:
    got = fires("0 4 1 * 1", "UTC", datetime(2026, 11, 30, 5, tzinfo=UTC), 3)
    assert [f.strftime("%a %d") for f in got] == ["Tue 01", "Mon 07", "Mon 14"]


def test_once_a_night_across_both_dst_changes() -> None:
    for start in (datetime(2026, 3, 27, tzinfo=BERLIN), datetime(2026, 10, 23, tzinfo=BERLIN)):
        got = fires("30 2 * * *", "Europe/Berlin", start, 5)
        assert len({f.astimezone(BERLIN).date() for f in got}) == 5  # one fire per local day
        gaps = [(b - a).total_seconds() / 3600 for a, b in itertools.pairwise(got)]
        assert all(22 <= g <= 26 for g in gaps), gaps


def test_local_time_is_kept_in_the_zone() -> None:
    (fire,) = fires("30 4 * * *", "Europe/Berlin", datetime(2026, 7, 1, tzinfo=UTC), 1)
    assert fire.astimezone(BERLIN).strftime("%H:%M") == "04:30"
    assert fire.astimezone(UTC).strftime("%H:%M") == "02:30"


def test_missed_run_is_made_up_only_within_grace() -> None:
    trigger = crontab_trigger("30 4 * * *", "UTC")
    boot = datetime(2026, 11, 30, 4, 50, tzinfo=UTC)
    due = missed_run_due(trigger, boot, timedelta(minutes=30), None)
    assert due == datetime(2026, 11, 30, 4, 30, tzinfo=UTC)
    assert missed_run_due(trigger, boot, timedelta(minutes=10), None) is None
    assert missed_run_due(trigger, boot, timedelta(minutes=30), due) is None  # already ran
    assert missed_run_due(trigger, boot, timedelta(0), None) is None
    assert last_fire(trigger, boot, timedelta(hours=30)) == due


@pytest.mark.parametrize(
    ("cron", "says"),
    [
        ("30 4 * *", "needs 5 fields"),
        ("61 4 * * *", "schedule.cron"),
        ("0 4 * * 8", "0-7"),
        ("0 4 * * 5-2", "backwards"),
    ],
)
def test_bad_cron_is_a_config_error(cron: str, says: str) -> None:
    data = {
        "llm": {"containers": ["a"], "base_url": "http://127.0.0.1:8000"},
        "schedule": {"cron": cron},
    }
    with pytest.raises(ConfigError, match=says):
        parse(data)


def test_unknown_zone_is_a_config_error() -> None:
    data = {
        "llm": {"containers": ["a"], "base_url": "http://127.0.0.1:8000"},
        "schedule": {"timezone": "Mars/Olympus"},
    }
    with pytest.raises(ConfigError, match=r"schedule\.timezone: unknown time zone"):
        parse(data)
