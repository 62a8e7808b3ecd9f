"""A restart run in the foreground (no daemon to hand it to) is never cut by its terminal.

Ctrl-C, Ctrl-\\, Ctrl-Z, a ``kill`` or the SSH session dropping mid-run would leave voice paused
or the engine stopped until the next daemon start repairs it. So while the run goes, these
signals only say that it goes on to its end (Ctrl-Z is ignored), and once its terminal or pipe
is gone (SIGHUP, or a write that fails: a reader that quit, a hung-up terminal) what it prints
goes to /dev/null instead of failing a step. ``kill -9`` still cuts it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import TextIO, cast

from sparkwarden.base.streams import Sturdy, to_nowhere

#: The signals a terminal or an operator's ``kill`` sends to end a process.
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP)


@contextlib.contextmanager
def uncut(what: str) -> Iterator[list[str]]:
    """While the block runs, :data:`HELD` signals do not end the process and Ctrl-Z does not
    stop it; yields the names of the ones that came, in order. ``what`` names the run in the
    line that says so. A SIGHUP already ignored (``nohup``) stays ignored."""
    came: list[str] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        came.append(name)
        if signum == signal.SIGHUP:  # the terminal is gone: a write to it would fail
            outputs_to_nowhere()
        _tell(
            f"sparkwarden: {name}: {what} goes on to its end; cut, it would leave voice paused\n"
            f"  or the engine down (kill -9 {os.getpid()} cuts it; the next daemon start repairs"
            " that)\n"
        )

    before = {
        signum: signal.signal(signum, hold)
        for signum in HELD
        if signal.getsignal(signum) is not signal.SIG_IGN
    }
    before[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, signal.SIG_IGN)
    try:
        yield came
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def say(text: str, file: TextIO | None = None) -> None:
    """``print`` for a person, through :class:`~sparkwarden.base.streams.Sturdy`: when that
    stream's reader is gone (EPIPE: it quit; EIO: the terminal hung up), what follows on it goes
    to /dev/null. The other stream is kept: a failure still reaches a terminal that reads stderr
    when stdout went into ``| head -1``."""
    print(text, file=cast(TextIO, Sturdy(file or sys.stdout)), flush=True)


def outputs_to_nowhere() -> None:
    """stdout and stderr to /dev/null unless a file: the terminal hung up (SIGHUP)."""
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            to_nowhere(fd)


def _tell(text: str) -> None:
    """Straight to fd 2: a signal handler must not re-enter a ``print`` it interrupted."""
    with contextlib.suppress(OSError):
        os.write(2, text.encode())
