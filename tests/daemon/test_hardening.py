"""Hardening promises: no shell, private state, secrets never written anywhere."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

import pytest

from devtools.standin.stage import Stage, wait_healthy
from tests.kits.commands import ROOT, run_cli
from tests.kits.daemonkit import DaemonProcess, wait_for

SOURCE = ROOT / "src" / "sparkwarden"


def test_no_shell_anywhere() -> None:
    """No shell=True, os.system or os.popen: every command is an argument list."""
    offenders = []
    for path in SOURCE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "shell":
                offenders.append(f"{path.name}:{node.value.lineno} shell=")
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("system", "popen")
                and (isinstance(node.value, ast.Name) and node.value.id == "os")
            ):
                offenders.append(f"{path.name}:{node.lineno} os.{node.attr}")
    assert offenders == []


@pytest.mark.docker
def test_state_is_private_and_secrets_are_never_written(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    secret = "sk-hardening-test-5a4b3c2d1e"
    llm, port = stage.llm("llm", "--api-key", secret)
    wait_healthy(port)
    key = tmp_path / "key"
    key.write_text(secret)
    config = make_daemon_config(
        [llm],
        port,
        [],
        llm={"api_key_file": str(key)},
        watch={"interval": "0.5s", "boot_grace": "0s"},
        health={"interval": "1s", "chat_interval": "1s"},
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        wait_for("a canary", lambda: "ok" in (daemon.status()["llm"]["last_probe"] or ""))
        stage.client.containers.get(llm).kill()
        wait_for("the crash run", lambda: daemon.runs_with("crash"))
        results = [
            run_cli(config, *cmd)
            for cmd in (
                ["status"],
                ["status", "--json"],
                ["history", "--json"],
                ["check-config"],
                ["restart", "--dry-run"],
            )
        ]
        outputs = [r.stdout + r.stderr for r in results]
        time.sleep(1)
    finally:
        daemon.stop()
    state = tmp_path / "state"
    assert oct(state.stat().st_mode & 0o777) == "0o750"
    for name in ("journal.sqlite3", "status.json"):
        assert oct((state / name).stat().st_mode & 0o777) == "0o640"
    written = [*outputs, daemon.text()]
    written += [p.read_bytes().decode(errors="replace") for p in state.iterdir() if p.is_file()]
    assert all(secret not in text for text in written)
    assert daemon.runs_with("crash")[0]["result"] == "ok"  # the key was used, just never shown


def test_the_journal_runs_in_wal_mode_with_synchronous_full(tmp_path: Path) -> None:
    """A power cut must not lose the line written before an action (the repair needs it)."""
    from sparkwarden.restart.journal import Journal

    journal = Journal(tmp_path / "state")
    try:
        assert journal._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert journal._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        journal.close()


def test_the_status_file_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    """A write that fails half-way leaves the previous snapshot, and no stray temp file."""
    from sparkwarden.surfaces import status_text

    path = tmp_path / "status.json"
    status_text.write_atomic(path, {"daemon": {"state": "idle"}})

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("cut short mid-write")

    with pytest.raises(RuntimeError):
        status_text.write_atomic(path, {"daemon": {"state": "restarting"}, "x": Unprintable()})
    assert status_text.read(path) == {"daemon": {"state": "idle"}}
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]
    assert oct(path.stat().st_mode & 0o777) == "0o640"
