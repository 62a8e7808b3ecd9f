"""The CLI as its own process, exactly as an operator runs it, and what tests read back from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def socket_of(config: Path) -> Path:
    from sparkwarden.config.schema import load

    return load(config).control.socket


def run_cli(
    config: Path | None,
    *args: str,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``sparkwarden ARGS`` as its own process, exactly as an operator runs it."""
    command = [sys.executable, "-m", "sparkwarden"]
    if config is not None:
        command += ["--config", str(config)]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        check=False,
    )


def history(config: Path) -> list[dict[str, Any]]:
    """``sparkwarden history --json``: the runs, newest first."""
    result = run_cli(config, "history", "--json", "--limit", "50")
    assert result.returncode == 0, result.stderr
    runs: list[dict[str, Any]] = json.loads(result.stdout)
    return runs


def running_step(config: Path) -> str | None:
    """The step the newest run is in right now, if it is running."""
    runs = history(config)
    steps = runs[0]["steps"] if runs else []
    return next((s["name"] for s in steps if s["result"] == "running"), None)


def start_cli(config: Path, *args: str) -> subprocess.Popen[str]:
    """``sparkwarden ARGS`` in the background (the caller waits for it or kills it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sparkwarden", "--config", str(config), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
