"""Structured logs: JSON lines for the journal, plain key=value lines on a terminal; a line
that cannot be written is dropped, never raised into the work it reports (:class:`Sturdy`).

Under systemd each line starts with its syslog priority (``<3>`` for an error): journald reads
the prefix (``SyslogLevelPrefix=``, on by default), strips it, and files the line at that
priority, so ``journalctl -u sparkwarden -p err`` shows the errors alone.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, TextIO, cast

import structlog

#: structlog's level names as syslog priorities (RFC 5424), what journald files a line under.
PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2}


def to_journal(out: TextIO) -> bool:
    """True when ``out`` is the stream systemd connected to the journal: ``$JOURNAL_STREAM``
    names its device and inode, so a pipe or a file the output was moved to is not mistaken."""
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(out.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return f"{st.st_dev}:{st.st_ino}" == f"{device}:{inode}"


def _prefixed(render: Callable[..., Any]) -> Callable[..., str]:
    def render_with_priority(logger: Any, method: str, event: dict[str, Any]) -> str:
        priority = PRIORITY.get(str(event.get("level", method)), PRIORITY["info"])
        return f"<{priority}>{render(logger, method, event)}"

    return render_with_priority


#: Errors that say a stream's reader is gone for good: the reader quit (a pipe, a socket) or the
#: terminal hung up.
GONE = frozenset({errno.EPIPE, errno.ECONNRESET, errno.EIO, errno.ENXIO})


class Sturdy:
    """A stream whose failed write is dropped: a log line never fails the work it reports. A
    terminal, pipe or socket whose reader is gone (:data:`GONE`) is replaced by /dev/null
    (:func:`to_nowhere`), so what the stream still holds is not written again at every line;
    any other error (EAGAIN, ENOBUFS under memory pressure) costs that line only."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> int:
        try:
            return self.out.write(text)
        except OSError as exc:
            self._failed(exc)
        except ValueError:  # the stream was closed
            pass
        return len(text)

    def flush(self) -> None:
        try:
            self.out.flush()
        except OSError as exc:
            self._failed(exc)
        except ValueError:
            pass

    def _failed(self, exc: OSError) -> None:
        if exc.errno in GONE:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                to_nowhere(self.out.fileno())
                self.out.flush()  # what it held, now to /dev/null


def to_nowhere(fd: int) -> None:
    """``fd`` to /dev/null unless it is a file (a terminal, a pipe, a socket: gone for good; a
    file an operator redirected output to keeps what follows)."""
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return
    nowhere = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(nowhere, fd)
    finally:
        os.close(nowhere)


def setup(level: str = "info", stream: TextIO | None = None, force_json: bool = False) -> None:
    out = stream or sys.stderr
    renderer: Any
    if force_json or not out.isatty():
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    if to_journal(out):
        renderer = _prefixed(renderer)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, Sturdy(out))),
        cache_logger_on_first_use=False,
    )


def get(name: str = "sparkwarden") -> Any:
    return structlog.get_logger(name)
