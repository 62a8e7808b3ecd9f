"""``sparkwarden history``: past runs from the journal, newest first."""

from __future__ import annotations

import json
import textwrap

from sparkwarden.config.schema import Config
from sparkwarden.restart.journal import Journal, RunRecord, iso
from sparkwarden.surfaces.status_text import inert


def run(config: Config, as_json: bool, limit: int) -> int:
    journal = Journal(config.state.dir)
    try:
        runs = journal.runs(limit)
    finally:
        journal.close()
    if as_json:
        print(json.dumps([r.to_json() for r in runs], indent=2))
        return 0
    if not runs:
        print("no runs recorded yet")
    for record in runs:
        print(format_run(record))
    return 0


def format_run(record: RunRecord) -> str:
    """A run in a few lines under 80 columns, for terminals and SSH sessions."""
    took = f" in {record.duration_s:.1f}s" if record.duration_s is not None else ""
    head = (
        f"#{record.id} {iso(record.started_at)} {record.reason:<10} {record.result}{took}"
        f" {record.container or '-'}"
    )
    lines = [head]
    if record.plan.get("why"):
        lines += textwrap.wrap(
            f"why: {record.plan['why']}", 78, initial_indent="    ", subsequent_indent="      "
        )
    if record.error:
        lines.append(f"    error: {record.error}")
    # A cluster's step names are longer; a single host's keep their columns.
    width = max([13, *(len(s.name) + 1 for s in record.steps if len(s.name) > 13)])
    for step in record.steps:
        seconds = f"{step.duration_s:7.1f}s" if step.duration_s is not None else "        "
        summary = str(step.detail.get("summary") or step.detail.get("error") or "")
        lines.append(f"    {step.name:<{width}}{step.result:<8}{seconds}  {summary}"[:200])
    return "\n".join(inert(line) for line in lines)
