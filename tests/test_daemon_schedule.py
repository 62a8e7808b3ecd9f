"""The loop fires the nightly schedule itself: on time, once, and not at a surprising hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sparkwarden.config import parse
from sparkwarden.daemon import Daemon


def daemon(tmp_path: Path) -> Daemon:
    config = parse(
        {
            "llm": {"containers": ["vllm-a"], "base_url": "http://127.0.0.1:9"},
            "schedule": {"cron": "30 4 * * *", "timezone": "UTC", "missed_grace": "10m"},
            "state": {"dir": str(tmp_path / "state")},
            "control": {"socket": str(tmp_path / "s"), "group": ""},
        }
    )
    return Daemon(config)


def test_fires_once_when_due(tmp_path: Path) -> None:
    d = daemon(tmp_path)
    due = datetime(2026, 12, 1, 4, 30, tzinfo=UTC)
    d.next_schedule = due
    d._check_schedule(due - timedelta(seconds=1))
    assert d.pending is None
    d._check_schedule(due + timedelta(seconds=3))
    assert d.pending is not None and d.pending.reason == "schedule"
    assert d.next_schedule == due + timedelta(days=1)
    d.pending = None
    d._check_schedule(due + timedelta(seconds=8))
    assert d.pending is None  # not twice


def test_too_late_is_skipped_not_run(tmp_path: Path) -> None:
    d = daemon(tmp_path)
    due = datetime(2026, 12, 1, 4, 30, tzinfo=UTC)
    d.next_schedule = due
    d._check_schedule(due + timedelta(hours=2))  # the loop was busy in a 2 h sequence
    assert d.pending is None
    assert d.next_schedule == due + timedelta(days=1)
    assert d._next_restart(due)["reason"] == "schedule"  # type: ignore[index]
