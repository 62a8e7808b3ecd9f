"""The run journal in SQLite: every run and step written before and after it acts.

A run still marked ``running`` when nobody holds the lock was cut short by a crash; what it wrote
before each action (which voice containers it paused, whether it stopped the LLM) is exactly what
a repair needs to put the box back.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack, cast

from sparkwarden.base.errors import MEMBERS_ONLY, SparkwardenError
from sparkwarden.restart.turn import Action, Answer, Lease, settle

RunResult = Literal["ok", "failed", "interrupted", "running", "dry-run", "observed"]
# Runs that touched nothing ("dry-run", "observed") spend no budget, give no memory figures
# and hold no lock: the queries below leave them out by name.
StepResult = Literal["ok", "failed", "skipped", "running"]


class Plan(TypedDict, total=False):
    """What a run writes of itself before it acts (``remember``): what a repair, the daemon's
    reading of its own moves, and ``history`` read back. Each key is written only when true."""

    #: which code ran it, and what the trigger measured
    version: str
    why: str
    #: an observed run (``watch.mode = "observe"``): what it would have restarted, once
    observed_key: str
    #: the daemon's gates it passed, by name (hold, budget, drain): ``sparkwarden why``
    gates: dict[str, str]
    #: a lone host's run: the container it chose, the voice it paused (and how), its moves
    container: str | None
    voice_paused: list[str]
    voice_mode: str
    llm_stopped: bool
    llm_stopped_at: float
    llm_started: bool
    llm_started_at: float
    #: the run was cut mid-boot by sparkwarden stopping: the next one proves the boot
    handed_over: float
    #: a cluster's run: its nodes, the voice it paused per node (and what it could not resume),
    #: each engine container's start it made, and which of its stops and starts were sent
    cluster: list[str]
    cluster_voice: dict[str, list[str]]
    cluster_voice_left: dict[str, list[str]]
    cluster_started: dict[str, dict[str, Any]]
    stop_head_sent: bool
    stop_workers_sent: bool
    start_head_sent: bool
    start_workers_sent: bool


_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    reason TEXT NOT NULL,
    result TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL,
    container TEXT,
    container_id TEXT,
    error TEXT,
    pid INTEGER,
    plan TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    result TEXT NOT NULL,
    started_at REAL NOT NULL,
    duration_s REAL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS steps_by_run ON steps(run_id);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS turn (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT NOT NULL,
    taken_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
"""


def iso(ts: float | None) -> str | None:
    return (
        None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    )


@dataclass
class StepRecord:
    name: str
    result: StepResult
    started_at: float
    duration_s: float | None
    detail: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "result": self.result,
            "started_at": iso(self.started_at),
            "duration_s": None if self.duration_s is None else round(self.duration_s, 3),
            "detail": self.detail,
        }


@dataclass
class RunRecord:
    id: int
    reason: str
    result: RunResult
    started_at: float
    ended_at: float | None
    container: str | None
    container_id: str | None
    error: str | None
    pid: int | None
    plan: Plan
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.started_at

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "reason": self.reason,
            "result": self.result,
            "started_at": iso(self.started_at),
            "ended_at": iso(self.ended_at),
            "duration_s": None if self.duration_s is None else round(self.duration_s, 3),
            "container": self.container,
            "container_id": self.container_id,
            "error": self.error,
            "plan": self.plan,
            "steps": [s.to_json() for s in self.steps],
        }


#: The journal's file in ``state.dir``.
JOURNAL_FILE = "journal.sqlite3"


class Journal:
    def __init__(self, state_dir: Path, clock: Callable[[], float] = time.time) -> None:
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
            if state_dir.stat().st_uid == os.geteuid():
                state_dir.chmod(0o750)  # the journal names containers and errors: not for all
        except PermissionError:
            raise SparkwardenError(f"cannot create the state dir {state_dir}") from None
        self.path = state_dir / JOURNAL_FILE
        self._clock = clock
        if self._theirs():
            # A member of the control group reading root's journal (history): read only.
            try:
                self._db = self._read_only()
            except sqlite3.Error as exc:
                raise SparkwardenError(
                    f"cannot read the journal {self.path}: {exc} ({MEMBERS_ONLY})"
                ) from None
            return
        try:
            # The mode first: SQLite gives its -wal and -shm files the journal's own mode and
            # owner. Only a new file: closing a descriptor of a journal this process already has
            # open would drop that connection's POSIX locks (SQLite's one trap).
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640))
            self._private(self.path, state_dir)
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            for side in ("-wal", "-shm"):  # left by an older sparkwarden with a laxer mode
                self._private(self.path.with_name(self.path.name + side), state_dir)
        except (sqlite3.Error, PermissionError) as exc:
            raise SparkwardenError(
                f"cannot open the journal {self.path}: {exc} (it is root's: run as root)"
            ) from None

    @staticmethod
    def _private(path: Path, state_dir: Path) -> None:
        """0640 and the state dir's group: members read the journal (history), no one else."""
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path, 0o640)
            os.chown(path, -1, state_dir.stat().st_gid)

    def _read_only(self) -> sqlite3.Connection:
        """Root's journal, for a member: with the daemon down SQLite has removed the WAL's
        shared-memory file and a reader may not create it in root's dir ("attempt to write a
        readonly database"). With no WAL left, the file is the whole journal and no writer is
        running: read it as an immutable file."""
        uri = f"file:{self.path}?mode=ro"
        try:
            return self._open(uri)
        except sqlite3.OperationalError:
            if Path(f"{self.path}-wal").exists():
                raise  # a writer's log not yet in the file: an immutable read would miss it
            return self._open(uri + "&immutable=1")

    def _open(self, uri: str) -> sqlite3.Connection:
        db = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        try:
            db.execute("SELECT 1 FROM runs LIMIT 1")
        except sqlite3.Error:
            db.close()
            raise
        return db

    def _theirs(self) -> bool:
        try:
            return self.path.stat().st_uid != os.geteuid()
        except FileNotFoundError:
            return False
        except PermissionError:
            raise SparkwardenError(
                f"cannot read the journal {self.path}: permission denied ({MEMBERS_ONLY})"
            ) from None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # --- writing -------------------------------------------------------------------------------

    def begin_run(self, reason: str, result: RunResult = "running") -> int:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO runs (reason, result, started_at, pid) VALUES (?, ?, ?, ?)",
                (reason, result, self._clock(), os.getpid()),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def record_observed(self, reason: str, plan: Plan, steps: list[tuple[str, str]]) -> int:
        """An observed run, whole, in one transaction: what each step would do now (skipped).
        Never seen half-written, and never ``running`` (which a repair would finish)."""
        now = self._clock()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO runs (reason, result, started_at, ended_at, pid, plan)"
                " VALUES (?, 'observed', ?, ?, ?, ?)",
                (reason, now, now, os.getpid(), json.dumps(plan)),
            )
            assert cur.lastrowid is not None
            db.executemany(
                "INSERT INTO steps (run_id, name, result, started_at, duration_s, detail)"
                " VALUES (?, ?, 'skipped', ?, 0, ?)",
                [(cur.lastrowid, name, now, json.dumps({"summary": text})) for name, text in steps],
            )
        return cur.lastrowid

    def set_container(self, run_id: int, name: str, container_id: str | None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET container = ?, container_id = ? WHERE id = ?",
                (name, container_id, run_id),
            )

    def remember(self, run_id: int, **facts: Unpack[Plan]) -> None:
        """Merge facts into the run's plan: written *before* the action they describe."""
        with self._tx() as db:
            row = db.execute("SELECT plan FROM runs WHERE id = ?", (run_id,)).fetchone()
            plan = json.loads(row["plan"]) if row else {}
            plan.update(facts)
            db.execute("UPDATE runs SET plan = ? WHERE id = ?", (json.dumps(plan), run_id))

    def begin_step(self, run_id: int, name: str) -> int:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO steps (run_id, name, result, started_at) VALUES (?, ?, 'running', ?)",
                (run_id, name, self._clock()),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def end_step(self, step_id: int, result: StepResult, detail: dict[str, Any]) -> float:
        """Close a step; returns its duration in seconds."""
        with self._tx() as db:
            row = db.execute("SELECT started_at FROM steps WHERE id = ?", (step_id,)).fetchone()
            duration = self._clock() - float(row["started_at"])
            db.execute(
                "UPDATE steps SET result = ?, duration_s = ?, detail = ? WHERE id = ?",
                (result, duration, json.dumps(detail, default=str), step_id),
            )
        return duration

    def end_run(self, run_id: int, result: RunResult, error: str | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE runs SET result = ?, ended_at = ?, error = ? WHERE id = ?",
                (result, self._clock(), error, run_id),
            )

    def mark_interrupted(self, run_id: int, note: str, at: float | None = None) -> None:
        """Close a run a crash cut short, and the step it was in, as found at ``at`` (now), or
        as the next run began if one did since: runs hold the lock one at a time, so a run cut
        short had ended by then (a repair itself cut short, found later with the run it was
        repairing, must not make the two overlap)."""
        with self._tx() as db:
            now = self._clock() if at is None else at
            later = db.execute(
                "SELECT MIN(started_at) AS at FROM runs WHERE id > ?"
                " AND result NOT IN ('dry-run', 'observed')",
                (run_id,),
            ).fetchone()
            if later is not None and later["at"] is not None:
                now = min(now, float(later["at"]))
            db.execute(
                "UPDATE steps SET result = 'failed', duration_s = ? - started_at,"
                " detail = json_set(detail, '$.interrupted', json('true'))"
                " WHERE run_id = ? AND result = 'running'",
                (now, run_id),
            )
            db.execute(
                "UPDATE runs SET result = 'interrupted', ended_at = ?, error = ? WHERE id = ?",
                (now, note, run_id),
            )

    def put(self, key: str, value: Any) -> None:
        """Durable daemon state (hold, budget reset, gave-up), kept across restarts."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, json.dumps(value)),
            )

    def turn(self, action: Action, holder: str, ttl: float) -> Answer:
        """A replica set's turn, kept here on its first node (one row): read, checked and set
        in one ``BEGIN IMMEDIATE`` transaction, so of two asking at once one waits for the
        other's answer to be written; expiry by this journal's clock alone."""
        with self._tx() as db:
            row = db.execute("SELECT holder, taken_at, expires_at FROM turn").fetchone()
            lease = None if row is None else Lease(row[0], float(row[1]), float(row[2]))
            new, answer = settle(lease, action, holder, ttl, self._clock())
            if new is None:
                db.execute("DELETE FROM turn WHERE id = 1")
            elif new != lease:
                db.execute(
                    "INSERT INTO turn (id, holder, taken_at, expires_at) VALUES (1, ?, ?, ?)"
                    " ON CONFLICT(id) DO UPDATE SET holder = excluded.holder,"
                    " taken_at = excluded.taken_at, expires_at = excluded.expires_at",
                    (new.holder, new.taken_at, new.expires_at),
                )
        return answer

    def delete(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM kv WHERE key = ?", (key,))

    # --- reading -------------------------------------------------------------------------------

    def get(self, key: str) -> Any:
        row = self._db.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row["value"])

    def past_runs(
        self, since: float, after_run: int = 0
    ) -> list[tuple[str, str, float, float | None, str | None]]:
        """(reason, result, started_at, ended_at, first failed step) of the runs since a time
        and after run ``after_run`` (ids do not step back with the clock), oldest first."""
        rows = self._db.execute(
            "SELECT reason, result, started_at, ended_at, (SELECT name FROM steps s"
            " WHERE s.run_id = runs.id AND s.result = 'failed' ORDER BY s.id LIMIT 1) AS failed"
            " FROM runs WHERE started_at >= ? AND id > ?"
            " AND result NOT IN ('dry-run', 'observed') ORDER BY id",
            (since, after_run),
        ).fetchall()
        return [
            (r["reason"], r["result"], r["started_at"], r["ended_at"], r["failed"]) for r in rows
        ]

    def memory_after_drops(self, since: float) -> dict[str, list[float]]:
        """What memory nobody holds leaves free (GiB) after the stop and drop of each run since
        a time, oldest first, per machine: ``""`` this host's own runs, a node's name for its
        part of a cluster run. The total less what no process or cgroup holds (older records:
        ``MemAvailable``), the drop_caches step's own figures, ok or failed."""
        rows = self._db.execute(
            "SELECT s.detail FROM steps s JOIN runs r ON r.id = s.run_id"
            " WHERE s.name = 'drop_caches' AND r.started_at >= ?"
            " AND r.result NOT IN ('dry-run', 'observed')"
            " ORDER BY s.id",
            (since,),
        ).fetchall()
        series: dict[str, list[float]] = {}
        for row in rows:
            detail = json.loads(row["detail"] or "{}")
            nodes = detail.get("nodes") if isinstance(detail.get("nodes"), dict) else {}
            for name, figures in [("", detail), *nodes.items()]:
                if isinstance(figures, dict) and (free := _free_after(figures)) is not None:
                    series.setdefault(name, []).append(free)
        return series

    def run_counts(self) -> list[dict[str, Any]]:
        """How many runs ended how, by kind of reason, and when the newest of each ended (for
        sparkwarden's own metrics: the counters, and which outcome came last). An operator's
        ``manual:TEXT`` counts as ``manual``: free text never becomes a label value."""
        rows = self._db.execute(
            "SELECT CASE WHEN instr(reason, ':') > 0"
            " THEN substr(reason, 1, instr(reason, ':') - 1) ELSE reason END AS kind,"
            " result, COUNT(*) AS n, MAX(ended_at) AS last_ended"
            " FROM runs GROUP BY kind, result"
        ).fetchall()
        return [
            {
                "reason": r["kind"],
                "result": r["result"],
                "count": r["n"],
                "last_ended_at": r["last_ended"],
            }
            for r in rows
        ]

    def last_run_of(self, reason: str) -> RunRecord | None:
        row = self._db.execute(
            "SELECT * FROM runs WHERE reason = ? ORDER BY id DESC LIMIT 1", (reason,)
        ).fetchone()
        return self._with_steps(row) if row else None

    def runs(self, limit: int = 20, observed: bool = True) -> list[RunRecord]:
        """The newest runs; ``observed=False`` leaves out the restarts observe mode only noted."""
        rows = self._db.execute(
            "SELECT * FROM runs WHERE (? OR result != 'observed') ORDER BY id DESC LIMIT ?",
            (observed, limit),
        ).fetchall()
        return [self._with_steps(row) for row in rows]

    def last_observed(self) -> RunRecord | None:
        row = self._db.execute(
            "SELECT * FROM runs WHERE result = 'observed' ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return self._with_steps(row) if row else None

    def observed_keys(self, limit: int = 200) -> frozenset[str]:
        """What observe mode has already noted it would restart (the newest ``limit``)."""
        rows = self._db.execute(
            "SELECT plan FROM runs WHERE result = 'observed' ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
        keys = (json.loads(r["plan"] or "{}").get("observed_key") for r in rows)
        return frozenset(k for k in keys if k)

    def run(self, run_id: int) -> RunRecord | None:
        row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return self._with_steps(row) if row else None

    def unfinished(self) -> list[RunRecord]:
        rows = self._db.execute(
            "SELECT * FROM runs WHERE result = 'running' ORDER BY id"
        ).fetchall()
        return [self._with_steps(row) for row in rows]

    def last_container(self) -> str | None:
        row = self._db.execute(
            "SELECT container FROM runs WHERE container IS NOT NULL ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else str(row["container"])

    def _with_steps(self, row: sqlite3.Row) -> RunRecord:
        steps = [
            StepRecord(
                name=s["name"],
                result=s["result"],
                started_at=s["started_at"],
                duration_s=s["duration_s"],
                detail=json.loads(s["detail"]),
            )
            for s in self._db.execute(
                "SELECT * FROM steps WHERE run_id = ? ORDER BY id", (row["id"],)
            )
        ]
        return RunRecord(
            id=row["id"],
            reason=row["reason"],
            result=row["result"],
            started_at=row["started_at"],
            ended_at=row["ended_at"],
            container=row["container"],
            container_id=row["container_id"],
            error=row["error"],
            pid=row["pid"],
            plan=cast(Plan, json.loads(row["plan"])),
            steps=steps,
        )

    def close(self) -> None:
        self._db.close()


def _free_after(figures: dict[str, Any]) -> float | None:
    """What a drop left free of memory nobody holds (see :meth:`Journal.memory_after_drops`)."""
    total, unheld = figures.get("total_gib"), figures.get("unheld_after_gib")
    if isinstance(total, int | float) and isinstance(unheld, int | float):
        return float(total - unheld)
    after = figures.get("available_after_gib")
    return float(after) if isinstance(after, int | float) else None
