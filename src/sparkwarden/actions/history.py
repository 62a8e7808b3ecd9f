"""``sparkwarden history``: past runs from the journal, newest first."""

from __future__ import annotations

import json
from typing import Any

from sparkwarden.base.columns import fit_all
from sparkwarden.config.schema import Config
from sparkwarden.daemon.kept import GaveUp, Kept
from sparkwarden.restart.journal import Journal, RunRecord, StepRecord, iso
from sparkwarden.restart.step_names import NAME_WIDTH, name_width
from sparkwarden.surfaces.status_text import inert


def run(config: Config, as_json: bool, limit: int) -> int:
    runs, gave_up = _read(config, limit)
    if as_json:
        print(json.dumps([r.to_json() for r in runs], indent=2))
        return 0
    if gave_up is not None:  # no run of its own: the budget refused one; status says it too
        print(fit_all([inert(line) for line in gave_up_lines(gave_up)]))
    if not runs:
        print("no runs recorded yet")
    for record in runs:
        print(format_run(record))
    return 0


def as_json(config: Config, limit: int) -> list[dict[str, Any]]:
    """What ``history --json`` prints, as data: the tests read state through it in-process."""
    return [r.to_json() for r in _read(config, limit)[0]]


def _read(config: Config, limit: int) -> tuple[list[RunRecord], GaveUp | None]:
    journal = Journal(config.state.dir)
    try:
        return journal.runs(limit), Kept(journal).gave_up()
    finally:
        journal.close()


def gave_up_lines(gave_up: GaveUp) -> list[str]:
    return [
        f"GAVE UP {gave_up.at}: {gave_up.why} (reason {gave_up.reason})",
        "    no automatic restart until 'sparkwarden reset'",
    ]


def format_run(record: RunRecord) -> str:
    """A run in a few lines within 100 columns, for terminals and SSH sessions."""
    took = f" in {record.duration_s:.1f}s" if record.duration_s is not None else ""
    head = (
        f"#{record.id} {iso(record.started_at)} {record.reason:<10} {record.result}{took}"
        f" {record.container or '-'}"
    )
    lines = [head]
    if record.plan.get("why"):
        lines.append(f"    why: {record.plan['why']}")
    if record.plan.get("version"):
        lines.append(f"    by sparkwarden {record.plan['version']}")
    if record.error:
        lines.append(f"    error: {record.error}")
    width, rows = step_rows(record.steps)
    lines += [f"    {row}" for row in rows]
    return fit_all([inert(line) for line in lines], indent=" " * (4 + width + 2))


def step_rows(steps: list[StepRecord]) -> tuple[int, list[str]]:
    """Each step as a row (name, result, seconds, summary) and the name column's width: the
    one rule of ``restart``'s lines (``step_names.name_width``), wider for a cluster's names;
    ``history`` and ``why`` print them."""
    width = max(NAME_WIDTH, name_width(tuple(s.name for s in steps))) if steps else NAME_WIDTH
    rows = []
    for step in steps:
        seconds = f"{step.duration_s:7.1f}s" if step.duration_s is not None else " " * 8
        summary = str(step.detail.get("summary") or step.detail.get("error") or "")
        rows.append(f"{step.name:<{width}}{step.result:<8}{seconds}  {summary}")
    return width, rows
