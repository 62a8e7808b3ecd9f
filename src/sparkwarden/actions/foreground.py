"""A restart run in the foreground (no daemon to hand it to) is never cut by the terminal.

Ctrl-C, a ``kill`` or the SSH session dropping (SIGHUP) mid-run would leave voice paused or the
engine stopped until the next daemon start repairs it. So while the run goes, these signals only
say that it goes on to its end; once the terminal is gone, what it prints goes nowhere instead of
failing a step. ``kill -9`` still cuts it, and the next daemon start repairs that run.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType

#: The signals a terminal or an operator's ``kill`` sends; SIGKILL is left to cut the run.
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def uncut(what: str) -> Iterator[list[str]]:
    """While the block runs, :data:`HELD` signals do not end the process; yields the names of
    the ones that came, in order. ``what`` names the run in the line that says so."""
    came: list[str] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        came.append(name)
        if signum == signal.SIGHUP:  # the terminal is gone: a write to it would fail a step
            _to_nowhere()
        _tell(
            f"sparkwarden: {name}: {what} goes on to its end; cut, it would leave voice paused\n"
            f"  or the engine down (kill -9 {os.getpid()} cuts it; the next daemon start repairs"
            " that)\n"
        )

    before = {signum: signal.signal(signum, hold) for signum in HELD}
    try:
        yield came
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def _to_nowhere() -> None:
    """stdout and stderr to /dev/null, so printing goes on without an error."""
    nowhere = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            os.dup2(nowhere, fd)
    finally:
        os.close(nowhere)


def _tell(text: str) -> None:
    """Straight to fd 2: a signal handler must not re-enter a ``print`` it interrupted."""
    with contextlib.suppress(OSError):
        os.write(2, text.encode())
