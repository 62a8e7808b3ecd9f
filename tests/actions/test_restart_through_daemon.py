"""``restart --dry-run`` and a typed ``restart`` ask the daemon from a light path (issue 34's
speed target): the daemon makes the plan and keeps it in history, the command prints it as a
plan made in-process reads, and imports no schema, logger or Docker SDK; with the daemon down,
the command makes the plan itself, as before."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devtools.standin.stage import Stage, wait_healthy
from sparkwarden.config.schema import load
from sparkwarden.restart.journal import Journal, RunRecord
from tests.kits.commands import ROOT, run_cli
from tests.kits.daemonkit import DaemonProcess

#: What a whole process may not import on the light path: each costs tens of milliseconds of a
#: command whose target is 0.3 s (``requests``: the Docker SDK's transport).
HEAVY = ("pydantic", "structlog", "httpx", "docker", "requests")

#: A plan's line's figures that move between two looks a moment apart: memory available now.
MOVING = re.compile(r"\(now [\d.]+ of [\d.]+ GiB\)")


def runs(config: Path) -> list[RunRecord]:
    """The journal's runs, newest first, with the pid of the process that wrote each."""
    journal = Journal(load(config).state.dir)
    try:
        return journal.runs(50)
    finally:
        journal.close()


def plan_of(out: str) -> str:
    """A dry run's text with its one moving figure (live memory) blanked, and its lines joined
    back (a long line wraps at 100 columns, where depends on the figure)."""
    return MOVING.sub("(now N of N GiB)", " ".join(out.split()))


def imported(config: Path, *args: str) -> tuple[list[str], str, int]:
    """``sparkwarden ARGS`` run through ``cli.main`` in a fresh interpreter: the heavy modules
    it imported, what it printed, its exit status."""
    code = (
        "import sys\n"
        "from sparkwarden.cli import main\n"
        f"code = main(['--config', {str(config)!r}, *{list(args)!r}])\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "raise SystemExit(code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )
    *said, modules = out.stdout.strip().splitlines()
    return ast.literal_eval(modules), "\n".join(said) + out.stderr, out.returncode


def test_dry_run_through_the_daemon_is_the_plan_made_in_process_and_kept(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm("llm")
    stt = stage.voice("stt")
    wait_healthy(port)
    config = make_daemon_config([llm], port, [stt])
    alone = run_cli(config, "restart", "--dry-run", "--reason", "look first")  # no daemon
    assert alone.returncode == 0, alone.stderr
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        asked = run_cli(config, "restart", "--dry-run", "--reason", "look first")
        modules, said, code = imported(config, "restart", "--dry-run")
    finally:
        daemon.stop()
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert plan_of(asked.stdout) == plan_of(alone.stdout), (asked.stdout, alone.stdout)
    assert asked.stdout.startswith("sparkwarden restart --dry-run: nothing will be touched.")
    assert f"pause {stt}" in asked.stdout and f"docker stop {llm}" in asked.stdout
    # the daemon made it: its log says so, and it is kept in history as the one made here was
    assert daemon.text().count('"cmd": "dry-run"') == 2, daemon.text()
    dry = [r for r in runs(config) if r.result == "dry-run"]
    assert [r.reason for r in dry] == ["manual", "manual:look first", "manual:look first"]
    assert [r.pid == daemon.pid for r in dry] == [True, True, False], dry
    # and the command that asked imported nothing heavy, and printed the plan all the same
    assert code == 0 and "The plan:" in said and f"docker stop {llm}" in said, said
    assert modules == [], modules


def test_a_typed_restart_through_the_daemon_imports_nothing_heavy_and_says_it_observes(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    """The daemon says its ``watch.mode`` in its first answer: the command reads no ``[watch]``."""
    llm, port = stage.llm("llm")
    wait_healthy(port)
    config = make_daemon_config([llm], port, [], watch={"mode": "observe"})
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        modules, said, code = imported(config, "restart", "--reason", "light")
    finally:
        daemon.stop()
    assert code == 0, said
    assert "the daemon only observes (watch.mode = observe)" in " ".join(said.split()), said
    assert re.search(r"run #\d+ by the daemon", said) and "answered a chat request" in said
    assert modules == [], modules
    (run,) = [r for r in runs(config) if r.reason == "manual:light"]
    assert run.result == "ok" and run.pid == daemon.pid


def test_with_the_daemon_down_the_dry_run_is_made_here(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    """The fallback: a socket left by a daemon gone (nobody listens) and none at all."""
    llm, port = stage.llm("llm")
    wait_healthy(port)
    config = make_daemon_config([llm], port, [])
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    daemon.stop()
    since = time.time()
    modules, said, code = imported(config, "restart", "--dry-run")
    assert code == 0, said
    assert "The plan:" in said and f"docker start {llm}" in said, said
    assert "docker" in modules  # made here, with the Docker SDK
    (dry,) = [r for r in runs(config) if r.result == "dry-run"]
    assert dry.pid != daemon.pid and dry.started_at >= since
