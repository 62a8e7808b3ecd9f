"""``status`` as text: long lines wrapped inside 80 columns, never cut; a boot shows what for."""

from __future__ import annotations

import re
from typing import Any

from sparkwarden.base.version import version
from sparkwarden.surfaces import status_text as status_mod
from tests.kits.commands import run_cli

CAUSE = "last trigger crash: swt-llm exited with code 137 (OOM-killed) while loading"


def unwrapped(text: str) -> str:
    """The text with each continuation row joined back to its line."""
    return re.sub(r"\n {13}", " ", text)


def test_long_lines_wrap_under_the_values_and_keep_their_ends() -> None:
    """What 79-column cuts hid: the end of a line is often its cause."""
    why = f"restart budget spent: 3 automatic runs in 6h00m; {CAUSE}"
    error = "memory did not come back: 12.0 GiB available after 60s, the start gate is 90 GiB"
    snapshot: dict[str, Any] = {
        "daemon": {"running": True, "pid": 7, "state": "gave up", "version": version()},
        "llm": {"container": "vllm-35b", "status": "exited", "note": "x" * 120},
        "gave_up": {"why": why, "reason": "crash"},
        "last_run": {
            "id": 4,
            "reason": "crash",
            "result": "failed",
            "error": error + "; not starting the LLM into ghost memory",
            "steps": [],
        },
    }
    text = status_mod.format_text(snapshot)
    assert all(len(line) <= 79 for line in text.splitlines()), text
    whole = unwrapped(text)
    assert f"GAVE UP:     {why} (reason crash)" in whole
    assert "not starting the LLM into ghost memory" in whole
    assert "x" * 66 in text  # a word longer than a row is broken, not dropped
    assert whole.count("x") >= 120


def test_a_booting_engine_shows_its_trigger_and_its_wait_against_health_timeout() -> None:
    snapshot: dict[str, Any] = {
        "daemon": {"running": True, "pid": 7, "state": "restarting: step 6 of 9: wait_health"},
        "llm": {"container": "vllm-35b", "status": "running"},
        "booting": {
            "run": 12,
            "reason": "crash",
            "why": "vllm-35b died (exit code 137)",
            "waited_s": 754.2,
            "health_timeout_s": 1200.0,
        },
    }
    text = status_mod.format_text(snapshot)
    assert all(len(line) <= 79 for line in text.splitlines()), text
    assert (
        "booting:     run #12 (crash: vllm-35b died (exit code 137)) waits for the engine: "
        "12m34s of health_timeout 20m00s"
    ) in unwrapped(text)


def test_the_version_line_says_when_the_daemon_runs_other_code_than_installed() -> None:
    same = status_mod.format_text({"daemon": {"running": True, "version": version()}})
    assert f"version:     {version()}" in same.splitlines()
    old = status_mod.format_text({"daemon": {"running": True, "version": "0.1.0"}})
    assert f"0.1.0 runs; {version()} is installed" in unwrapped(old)
    assert "install-service" in unwrapped(old)


def test_with_no_snapshot_at_all_status_says_unknown_never_defaults(
    make_config: Any,
) -> None:
    """Issue 36 item 5.5: with no snapshot, status said "canary: off (acceptance.confirm =
    none...)" and "budget: 0 of ?": defaults that read as facts."""
    shown = run_cli(make_config(["vllm"], 9, []), "status")
    assert shown.returncode == 1  # README: 1 when there is no snapshot
    assert "unknown: no snapshot yet" in shown.stdout and "GiB available" in shown.stdout
    for false in ("canary:", "budget:", "acceptance:", "0 of ?"):
        assert false not in shown.stdout, shown.stdout


def test_a_wait_that_ends_by_itself_names_no_command() -> None:
    """An engine down a moment ago (its exit not yet told: crash or by hand) is never shown
    idle, and its wait names no command, where an operator's does."""
    base = {"running": True, "pid": 7, "state": "waiting"}
    settling = {**base, "waiting": "vllm's exit to be told: crash or by hand"}
    by_itself = {**settling, "command": status_mod.BY_ITSELF}
    first = status_mod.format_text({"daemon": by_itself}).splitlines()[0]
    assert "waiting for vllm's exit" in first and "ends with" not in first and "idle" not in first
    theirs = {**base, "waiting": "vllm to start (stopped by hand)", "command": "docker start vllm"}
    said = " ".join(status_mod.format_text({"daemon": theirs}).split())
    assert "ends with 'docker start vllm'" in said
