"""``sparkwarden why [RUN]``: the story of one run, by default the newest automatic one, and of
the restart now pending: what fired and on what evidence, the gates it passed, each step with
its time, how it ended. The answer to "why did it restart at 3 a.m.?" in one place."""

from __future__ import annotations

import sys
from typing import Any

from sparkwarden.actions import status as status_action
from sparkwarden.actions.history import step_rows
from sparkwarden.base.columns import fit_all
from sparkwarden.base.exits import Exit
from sparkwarden.config.locate import Places
from sparkwarden.restart.journal import Journal, RunRecord, iso
from sparkwarden.surfaces.status_text import duration, inert, local_time

#: The label column of every line.
LABEL = 9
#: A run an operator typed; every other reason is a trigger's (or a repair's).
TYPED = "manual"


def run(where: Places, run_id: int | None) -> int:
    journal = Journal(where.state_dir)
    try:
        record = journal.run(run_id) if run_id is not None else newest_automatic(journal)
    finally:
        journal.close()
    if run_id is not None and record is None:  # a wrong argument: a usage error
        print(
            f"sparkwarden: no run #{run_id} in the journal: 'sparkwarden history' lists them",
            file=sys.stderr,
        )
        return Exit.USAGE
    lines = now_lines(status_action.gather(where))
    if record is None:
        lines.append("no automatic run recorded yet ('sparkwarden history' lists every run)")
    else:
        lines += story(record)
    print(fit_all([inert(line) for line in lines], indent=" " * LABEL))
    return 0


def newest_automatic(journal: Journal, scan: int = 500) -> RunRecord | None:
    """The newest run a trigger or a repair made (an observed one too); never a dry run or an
    operator's typed one."""
    return next(
        (
            r
            for r in journal.runs(scan)
            if r.result != "dry-run" and r.reason.split(":")[0] != TYPED
        ),
        None,
    )


def _label(name: str, text: str) -> str:
    return f"{name + ':':<{LABEL}}{text}"


def now_lines(snapshot: dict[str, Any]) -> list[str]:
    """The restart pending now and what it waits for, from the daemon's snapshot; nothing when
    none is pending."""
    daemon = snapshot.get("daemon") or {}
    lines: list[str] = []
    if daemon.get("pending"):
        waits = daemon.get("drain") or daemon.get("waiting") or "its gates, at the next check"
        lines.append(_label("pending", f"a restart for {daemon['pending']}; it waits for {waits}"))
    elif daemon.get("waiting"):
        lines.append(
            _label("now", f"waiting for {daemon['waiting']}; ends with '{daemon.get('command')}'")
        )
    nxt = snapshot.get("next_restart")
    if nxt:
        lines.append(_label("next", f"{local_time(nxt.get('at'))} ({nxt.get('reason')})"))
    return lines


def story(record: RunRecord) -> list[str]:
    """One run, top to bottom: what fired, the gates, the steps, the end."""
    plan = record.plan
    started = local_time(iso(record.started_at))
    took = f" in {duration(record.duration_s)}" if record.duration_s is not None else ""
    by = f", by sparkwarden {plan['version']}" if plan.get("version") else ""
    lines = [f"run #{record.id}: {record.reason}, {started}, {record.result}{took}{by}"]
    kind = record.reason.split(":")[0]
    if kind == TYPED:
        fired = f"an operator's restart ({record.reason})"
    elif kind == "repair":
        fired = "the repair of a run a stop or crash of sparkwarden cut short"
    else:
        fired = f"the {kind} trigger"
    lines.append(_label("fired", f"{fired}: {plan.get('why') or 'no evidence recorded'}"))
    gates = plan.get("gates")
    if gates:
        lines.append(_label("gates", "; ".join(f"{k}: {v}" for k, v in gates.items())))
    elif kind not in (TYPED, "repair"):
        lines.append(_label("gates", "not recorded (a run before sparkwarden kept them)"))
    _, rows = step_rows(record.steps)
    for i, row in enumerate(rows):
        lines.append(_label("steps", row) if i == 0 else " " * LABEL + row)
    lines.append(_label("ended", ending(record)))
    return lines


def ending(record: RunRecord) -> str:
    failed = next((s.name for s in record.steps if s.result == "failed"), None)
    match record.result:
        case "ok":
            return f"ok: {record.container or 'the engine'} answered a chat request"
        case "observed":
            return "observed only (watch.mode = observe): nothing was touched"
        case "running":
            return "still running ('sparkwarden status' shows its step)"
        case "interrupted":
            return f"cut short: {record.error or 'sparkwarden stopped'}; the next start repairs it"
        case _:
            where = f" at {failed}" if failed else ""
            return f"{record.result}{where}: {record.error or '-'}"
