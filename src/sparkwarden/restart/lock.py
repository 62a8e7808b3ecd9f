"""One sequence at a time, across processes: an ``flock`` on a file in the state dir.

The kernel drops the lock when its holder dies, even by ``kill -9``, so a crash never leaves a
stale lock behind; the file's text names the holder for the message a second caller sees.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from types import TracebackType

from sparkwarden.base.errors import LockBusy


class RunLock:
    def __init__(self, state_dir: Path, name: str = "sequence.lock") -> None:
        self.path = state_dir / name
        self._fd: int | None = None

    def acquire(self, reason: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace")
            os.close(fd)
            raise LockBusy(f"another sequence is running: {describe_holder(holder)}") from None
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "reason": reason, "since": time.time()}
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd

    def set_run(self, run_id: int, reason: str) -> None:
        """Name the journal run in the lock file, so a refused caller can point at it."""
        if self._fd is None:
            return
        info = {"pid": os.getpid(), "reason": reason, "since": time.time(), "run": run_id}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(info).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def held_by_other(self) -> str | None:
        """Who holds the lock now, or None; without taking it."""
        if not self.path.exists():
            return None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return describe_holder(os.read(fd, 4096).decode(errors="replace"))
        finally:
            os.close(fd)
        return None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def describe_holder(text: str) -> str:
    try:
        info = json.loads(text)
    except ValueError:
        return "holder unknown"
    run = f"run #{info['run']}, " if "run" in info else ""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return f"{run}reason {info.get('reason', '?')}, pid {info.get('pid', '?')}, since {since}"
