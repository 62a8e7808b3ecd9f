"""The host: free memory (``MemAvailable``) and the page-cache drop that returns ghost memory.

No shell: ``sync`` is :func:`os.sync` and the drop is a direct write to procfs. Memory is read from
``/proc/meminfo`` itself (what psutil would read), so ``sparkwarden status`` imports nothing heavy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

GIB = 1024**3
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
MEMINFO = Path("/proc/meminfo")


class Memory(NamedTuple):
    available_gib: float
    total_gib: float


def read_meminfo(text: str) -> Memory:
    """``MemAvailable`` and ``MemTotal`` (kB) of a ``/proc/meminfo`` text."""
    kib = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemAvailable", "MemTotal"):
            kib[key] = int(rest.split()[0])
    return Memory(kib["MemAvailable"] * 1024 / GIB, kib["MemTotal"] * 1024 / GIB)


class Host:
    def __init__(self, drop_caches_path: Path = DROP_CACHES, meminfo: Path = MEMINFO) -> None:
        self._drop_path = drop_caches_path
        self._meminfo = meminfo

    def memory(self) -> Memory:
        return read_meminfo(self._meminfo.read_text())

    def drop_caches(self) -> None:
        """``sync; echo 3 > /proc/sys/vm/drop_caches``: page cache, dentries and inodes."""
        os.sync()
        with self._drop_path.open("w") as handle:
            handle.write("3\n")
