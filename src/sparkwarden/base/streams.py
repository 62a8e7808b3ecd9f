"""Output streams that outlive their reader: a write to a terminal that hung up or a pipe whose
reader quit is dropped, never raised into the work it reports. Kept apart from
:mod:`sparkwarden.base.logs` (which re-exports them): a quick command (``restart`` through the
daemon) prints through them without importing structlog.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import TextIO

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
