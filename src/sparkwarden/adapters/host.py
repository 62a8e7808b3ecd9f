"""The host: free memory (``MemAvailable``) and the page-cache drop that returns ghost memory.

No shell: ``sync`` is :func:`os.sync` and the drop is a direct write to procfs. Memory comes from
psutil (``available`` is ``MemAvailable``), imported when first read so that ``sparkwarden status``
with the daemon up never pays for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

GIB = 1024**3
DROP_CACHES = Path("/proc/sys/vm/drop_caches")


class Memory(NamedTuple):
    available_gib: float
    total_gib: float


class Host:
    def __init__(self, drop_caches_path: Path = DROP_CACHES) -> None:
        self._drop_path = drop_caches_path

    def memory(self) -> Memory:
        import psutil

        vm = psutil.virtual_memory()
        return Memory(vm.available / GIB, vm.total / GIB)

    def drop_caches(self) -> None:
        """``sync; echo 3 > /proc/sys/vm/drop_caches``: page cache, dentries and inodes."""
        os.sync()
        with self._drop_path.open("w") as handle:
            handle.write("3\n")
