"""The loop fires the nightly schedule itself: on time, once, and not at a surprising hour."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sparkwarden.base.cron import crontab_trigger
from sparkwarden.config.schema import Config, parse
from sparkwarden.daemon import decide, publish
from sparkwarden.daemon.intents import Say


def config(tmp_path: Path) -> Config:
    return parse(
        {
            "llm": {"containers": ["vllm-a"], "base_url": "http://127.0.0.1:9"},
            "schedule": {"cron": "30 4 * * *", "timezone": "UTC", "missed_grace": "10m"},
            "state": {"dir": str(tmp_path / "state")},
            "control": {"socket": str(tmp_path / "s"), "group": ""},
        }
    )


def test_fires_once_when_due(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    crontab = crontab_trigger(cfg.schedule.cron, cfg.schedule.timezone)
    due = datetime(2026, 12, 1, 4, 30, tzinfo=UTC)
    mind = decide.Mind(next_schedule=due)
    mind, _ = decide.on_clock(mind, due - timedelta(seconds=1), crontab, cfg)
    assert mind.pending is None
    mind, _ = decide.on_clock(mind, due + timedelta(seconds=3), crontab, cfg)
    assert mind.pending is not None and mind.pending.reason == "schedule"
    assert mind.next_schedule == due + timedelta(days=1)
    mind = replace(mind, pending=None)
    mind, _ = decide.on_clock(mind, due + timedelta(seconds=8), crontab, cfg)
    assert mind.pending is None  # not twice


def test_too_late_is_skipped_not_run(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    crontab = crontab_trigger(cfg.schedule.cron, cfg.schedule.timezone)
    due = datetime(2026, 12, 1, 4, 30, tzinfo=UTC)
    mind = decide.Mind(next_schedule=due)
    # the loop was busy in a 2 h sequence
    mind, said = decide.on_clock(mind, due + timedelta(hours=2), crontab, cfg)
    assert mind.pending is None
    assert [s.event for s in said if isinstance(s, Say)] == ["schedule_missed"]
    assert mind.next_schedule == due + timedelta(days=1)
    nxt = publish.next_restart(mind, None, due, cfg)
    assert nxt is not None and nxt.reason == "schedule"
