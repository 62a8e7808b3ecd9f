"""The CLI as its own process, exactly as an operator runs it, and what tests read back from it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tests.kits.signals import AS_TYPED

ROOT = Path(__file__).resolve().parents[2]


def docs_text() -> str:
    """What an operator reads: README and its chapters in docs/ (the lead splits README)."""
    chapters = sorted((ROOT / "docs").glob("*.md")) if (ROOT / "docs").is_dir() else []
    chapters = [c for c in chapters if not c.name.startswith("notes-")]  # helpers' notes
    return "\n".join(path.read_text() for path in [ROOT / "README.md", *chapters])


def socket_of(config: Path) -> Path:
    from sparkwarden.config.schema import load

    return load(config).control.socket


#: The most columns each command's text may take on an operator's terminal (issue 26).
COLUMNS = {"status": 80, "history": 100, "doctor": 100, "restart": 100}


def too_wide(args: Sequence[str], out: str, err: str = "") -> list[str]:
    """The lines of a ``status``/``history``/``doctor``/``restart`` text that do not fit its
    width (log lines, JSON, are the journal's, not the terminal's; a refusal on stderr is one
    line by design: it names paths of any length and operators grep for it)."""
    named = [i for i, a in enumerate(args) if a.endswith("sparkwarden")]  # not systemctl's
    after = args[named[0] + 1 :] if named else []
    command = next((a for a in after if a in COLUMNS), None)
    if command is None or "--json" in args:
        return []
    lines = out.splitlines() + [
        line for line in err.splitlines() if not line.startswith("sparkwarden: ")
    ]
    return [line for line in lines if len(line) > COLUMNS[command] and not line.startswith("{")]


def run_cli(
    config: Path | None,
    *args: str,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``sparkwarden ARGS`` as its own process, exactly as an operator runs it; every text it
    prints for a person fits the terminal, whatever state the test made."""
    command = [sys.executable, "-m", "sparkwarden"]
    if config is not None:
        command += ["--config", str(config)]
    result = subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        check=False,
    )
    wide = too_wide(["sparkwarden", *args], result.stdout, result.stderr)
    assert wide == [], f"sparkwarden {' '.join(args)}: lines too wide: {wide}"
    return result


def history(config: Path) -> list[dict[str, Any]]:
    """``sparkwarden history --json``'s runs, newest first, read in-process through the code
    that prints them (a poll every 0.1 s as a new process kept a core busy); the command itself
    is run as a process by the tests of its text."""
    from sparkwarden.actions import history as history_action
    from sparkwarden.config.schema import load

    return history_action.as_json(load(config), 50)


def status(config: Path) -> dict[str, Any]:
    """``sparkwarden status --json``'s snapshot, read in-process as :func:`history` is, with
    the command's exit code under ``_exit``."""
    from sparkwarden.actions import status as status_action
    from sparkwarden.config import locate
    from sparkwarden.config.schema import load
    from sparkwarden.surfaces.status_text import exit_code

    where = locate.places(config)
    snapshot = status_action.view(where, load(config) if where.cluster else None)
    return {**snapshot, "_exit": exit_code(snapshot)}


def running_step(config: Path) -> str | None:
    """The step the newest run is in right now, if it is running."""
    runs = history(config)
    steps = runs[0]["steps"] if runs else []
    return next((s["name"] for s in steps if s["result"] == "running"), None)


class _Checked(subprocess.Popen[str]):
    """A background ``sparkwarden``: what it printed is checked for width when read."""

    args_given: tuple[str, ...] = ()

    def communicate(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out, err = super().communicate(*args, **kwargs)
        wide = too_wide(["sparkwarden", *self.args_given], out or "", err or "")
        assert wide == [], f"sparkwarden {' '.join(self.args_given)}: lines too wide: {wide}"
        return out, err


def start_cli(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``sparkwarden ARGS`` in the background (the caller waits for it or kills it), with the
    signals of a command typed at a terminal (:data:`~tests.kits.signals.AS_TYPED`)."""
    proc = _Checked(
        [*AS_TYPED, sys.executable, "-m", "sparkwarden", "--config", str(config), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    proc.args_given = args
    return proc


P = TypeVar("P", bound="subprocess.Popen[Any]")


@contextlib.contextmanager
def killed_at_exit(proc: P) -> Iterator[P]:
    """``proc`` for the block, killed by its handle if it still runs when the block ends: a
    failed wait leaves no process behind."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
