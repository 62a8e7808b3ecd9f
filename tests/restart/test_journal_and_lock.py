"""The journal records before and after; the lock lets one sequence run and survives kill -9."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkwarden.base.errors import LockBusy
from sparkwarden.restart.journal import Journal
from sparkwarden.restart.lock import RunLock


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_796_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_run_and_its_steps_in_the_contract_shape(tmp_path: Path) -> None:
    clock = FakeClock()
    journal = Journal(tmp_path, clock=clock)
    run = journal.begin_run("manual")
    journal.set_container(run, "vllm-35b", "abc123")
    step = journal.begin_step(run, "detect")
    clock.now += 1.5
    assert journal.end_step(step, "ok", {"summary": "found"}) == 1.5
    journal.end_run(run, "ok")
    (record,) = journal.runs()
    as_json = record.to_json()
    assert set(as_json) >= {
        "id",
        "reason",
        "result",
        "started_at",
        "ended_at",
        "container",
        "error",
        "steps",
    }
    assert as_json["result"] == "ok" and as_json["container"] == "vllm-35b"
    assert as_json["started_at"].startswith("2026-")
    assert as_json["steps"] == [
        {
            "name": "detect",
            "result": "ok",
            "started_at": as_json["started_at"],
            "duration_s": 1.5,
            "detail": {"summary": "found"},
        }
    ]


def test_memory_left_after_drops_per_machine_host_runs_and_cluster_nodes(tmp_path: Path) -> None:
    """The memory trend's readings: a lone host's drop figures under "", a cluster run's under
    each node (its own drop's figures), held memory subtracted when the figures have it."""
    journal = Journal(tmp_path, clock=FakeClock())

    def run(detail: dict[str, object]) -> None:
        run_id = journal.begin_run("manual")
        journal.end_step(journal.begin_step(run_id, "drop_caches"), "ok", detail)
        journal.end_run(run_id, "ok")

    run({"available_after_gib": 100.0})
    run({"available_after_gib": 99.0, "total_gib": 121.0, "unheld_after_gib": 23.0})
    node = {"available_after_gib": 90.0, "total_gib": 121.0, "unheld_after_gib": 30.0}
    run({"summary": "...", "nodes": {"spark1": {"available_after_gib": 95.0}, "spark2": node}})
    run({"error": "memory did not come back", "nodes": {"spark2": {"available_after_gib": 80.0}}})
    assert journal.memory_after_drops(0.0) == {
        "": [100.0, 98.0],
        "spark1": [95.0],
        "spark2": [91.0, 80.0],
    }
    assert journal.memory_after_drops(FakeClock().now + 1) == {}


def test_written_before_acting_survives_for_repair(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    run = journal.begin_run("uptime")
    journal.remember(run, voice_paused=["stt"], voice_mode="pause")
    journal.remember(run, llm_stopped=True)
    journal.begin_step(run, "stop_llm")
    journal.close()

    reopened = Journal(tmp_path)
    (unfinished,) = reopened.unfinished()
    assert unfinished.plan == {"voice_paused": ["stt"], "voice_mode": "pause", "llm_stopped": True}
    reopened.mark_interrupted(unfinished.id, "sparkwarden died")
    record = reopened.run(unfinished.id)
    assert record is not None and record.result == "interrupted"
    assert record.steps[0].result == "failed" and record.steps[0].detail["interrupted"] is True
    assert reopened.unfinished() == []


def test_journal_is_wal_and_private(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "state")
    mode = journal._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    assert oct(journal.path.stat().st_mode & 0o777) == "0o640"


def test_second_holder_is_refused_with_the_first_named(tmp_path: Path) -> None:
    first = RunLock(tmp_path)
    first.acquire("manual")
    first.set_run(7, "manual")
    with pytest.raises(LockBusy, match=r"run #7, reason manual, pid \d+"):
        RunLock(tmp_path).acquire("schedule")
    assert "run #7" in (RunLock(tmp_path).held_by_other() or "")
    first.release()
    again = RunLock(tmp_path)
    again.acquire("schedule")
    again.release()


def test_lock_of_a_killed_holder_is_free(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from sparkwarden.restart.lock import RunLock; "
        f"RunLock(Path({str(tmp_path)!r})).acquire('manual'); print('held', flush=True); "
        "time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockBusy):
            RunLock(tmp_path).acquire("manual")
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 5
    lock = RunLock(tmp_path)
    while True:
        try:
            lock.acquire("manual")
            break
        except LockBusy:
            assert time.monotonic() < deadline, "the kernel did not drop a dead holder's lock"
            time.sleep(0.05)
    lock.release()


def test_the_journal_side_files_have_the_journals_mode(tmp_path: Path) -> None:
    """Issue 29: -wal and -shm were 0644 beside a 0640 journal (a common umask, as in tests);
    they hold the same rows, so they get the journal's mode, and a laxer leftover is fixed."""
    import sqlite3

    state = tmp_path / "state"
    old = os.umask(0o022)
    try:
        journal = Journal(state)
        journal.begin_run("manual")
        sides = [state / f"journal.sqlite3{suffix}" for suffix in ("-wal", "-shm")]
        modes = {p.name: oct(p.stat().st_mode & 0o777) for p in [state / "journal.sqlite3", *sides]}
        assert set(modes.values()) == {"0o640"}, modes
        for side in sides:
            side.chmod(0o644)  # as an older sparkwarden left them
        with sqlite3.connect(state / "journal.sqlite3"):
            again = Journal(state)
        assert {oct(p.stat().st_mode & 0o777) for p in sides} == {"0o640"}
        again.close()
        journal.close()
    finally:
        os.umask(old)


def test_a_run_cut_short_ended_by_the_time_the_next_run_began(tmp_path: Path) -> None:
    """The kill fuzz found runs #23 and #24 overlapping: a repair (#24) was itself killed before
    it closed the run it repaired (#23); the next daemon closed #23 as found then, after #24 had
    begun. Runs hold the lock one at a time: #23 had ended by then."""
    clock = itertools.count(100.0, 100.0)  # each write of the journal 100 s after the last
    journal = Journal(tmp_path, clock=lambda: next(clock))
    cut = journal.begin_run("uptime")  # 100
    journal.begin_step(cut, "stop_llm")  # 200
    repair = journal.begin_run("repair")  # 300: killed before it closed the run it repairs
    dry = journal.begin_run("manual", result="dry-run")  # 400: no lock, bounds nothing
    journal.end_run(dry, "dry-run")
    journal.mark_interrupted(cut, "sparkwarden died", at=900.0)  # found by the next daemon
    journal.mark_interrupted(repair, "sparkwarden died", at=900.0)
    first, second = journal.run(cut), journal.run(repair)
    assert first is not None and second is not None
    assert first.ended_at == 300.0 and first.steps[0].duration_s == 100.0
    assert second.ended_at == 900.0  # the last run (a dry run bounds nothing): as found
