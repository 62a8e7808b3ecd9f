"""``sparkwarden why``: one run's story from the journal, as an operator types it. The runs a
real daemon makes are told in tests/daemon/test_daemon_docker.py (a crash, a drained schedule);
here the journal is written as runs write it, for the endings a daemon makes rarely."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkwarden.config import schema as cfg
from sparkwarden.restart.journal import Journal
from sparkwarden.surfaces.status_text import STATUS_FILE
from tests.kits.commands import run_cli


def words(text: str) -> str:
    return " ".join(text.split())


def a_run(journal: Journal, reason: str, result: str, **plan: Any) -> int:
    run = journal.begin_run(reason)
    journal.remember(run, **plan)
    detect = journal.begin_step(run, "detect")
    journal.end_step(detect, "ok", {"summary": "active LLM container: vllm"})
    if result == "failed":
        drop = journal.begin_step(run, "drop_caches")
        journal.end_step(drop, "failed", {"summary": "memory did not come back: 12 GiB"})
        journal.end_run(run, "failed", "memory did not come back: 12 GiB after 120s")
    else:
        journal.end_run(run, result)  # type: ignore[arg-type]
    return run


def test_why_tells_the_newest_automatic_run_and_what_is_pending(
    make_config: Any, tmp_path: Path
) -> None:
    config = make_config(["vllm"], 9, [])
    state = cfg.load(config).state.dir
    assert "no automatic run recorded yet" in run_cli(config, "why").stdout
    journal = Journal(state)
    try:
        gates = {
            "hold": "none",
            "budget": "1 of 3 automatic runs used before it",
            "drain": "quiet for 30s",
        }
        failed = a_run(journal, "uptime", "failed", why="vllm up 20.0 h, limit 20 h", gates=gates)
        a_run(journal, "manual:kernel update", "ok", why="run by root in the foreground")
    finally:
        journal.close()
    # a restart pending now, as the daemon's last snapshot says
    snapshot = {"daemon": {"pending": "acceptance", "drain": "2 requests running"}}
    (state / STATUS_FILE).write_text(json.dumps(snapshot))

    told = run_cli(config, "why")
    assert told.returncode == 0, told.stderr
    text = words(told.stdout)
    assert "pending: a restart for acceptance; it waits for 2 requests running" in text, text
    assert f"run #{failed}: uptime" in text  # the operator's newer run is not the default
    assert "fired: the uptime trigger: vllm up 20.0 h, limit 20 h" in text
    assert "gates: hold: none; budget: 1 of 3 automatic runs used before it; drain: quiet" in text
    assert "ended: failed at drop_caches: memory did not come back: 12 GiB after 120s" in text

    typed = words(run_cli(config, "why", str(failed + 1)).stdout)
    assert "fired: an operator's restart (manual:kernel update)" in typed and "gates" not in typed

    missing = run_cli(config, "why", "99")
    assert missing.returncode == 2 and "no run #99 in the journal" in missing.stderr


def test_why_of_an_observed_run_says_nothing_was_touched(make_config: Any) -> None:
    config = make_config(["vllm"], 9, [])
    journal = Journal(cfg.load(config).state.dir)
    try:
        a_run(journal, "crash", "observed", why="vllm is exited (exit code 137)")
    finally:
        journal.close()
    text = words(run_cli(config, "why").stdout)
    assert "fired: the crash trigger: vllm is exited (exit code 137)" in text
    assert "ended: observed only (watch.mode = observe): nothing was touched" in text


def test_history_and_why_keep_a_space_after_the_longest_host_step(make_config: Any) -> None:
    """history's own column rule glued "gateway_probeskipped" (13 characters in 13 columns);
    both now use restart's rule (step_names.name_width)."""
    from sparkwarden.actions.history import format_run

    config = make_config(["vllm"], 9, [])
    journal = Journal(cfg.load(config).state.dir)
    try:
        run = journal.begin_run("crash")
        journal.end_step(journal.begin_step(run, "gateway_probe"), "skipped", {"summary": "-"})
        journal.end_run(run, "ok")
        record = journal.run(run)
    finally:
        journal.close()
    assert record is not None
    assert "gateway_probe skipped" in format_run(record)
    assert "gateway_probe skipped" in run_cli(config, "why").stdout
