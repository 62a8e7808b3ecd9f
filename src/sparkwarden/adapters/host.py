"""The host: free memory (``MemAvailable``) and the page-cache drop that returns ghost memory.

No shell: ``sync`` is :func:`os.sync` and the drop is a direct write to procfs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

GIB = 1024**3
DROP_CACHES = Path("/proc/sys/vm/drop_caches")


@dataclass(frozen=True)
class Memory:
    available_gib: float
    total_gib: float


class Host:
    def __init__(self, drop_caches_path: Path = DROP_CACHES) -> None:
        self._drop_path = drop_caches_path

    def memory(self) -> Memory:
        vm = psutil.virtual_memory()
        return Memory(available_gib=vm.available / GIB, total_gib=vm.total / GIB)

    def drop_caches(self) -> None:
        """``sync; echo 3 > /proc/sys/vm/drop_caches``: page cache, dentries and inodes."""
        os.sync()
        with self._drop_path.open("w") as handle:
            handle.write("3\n")
