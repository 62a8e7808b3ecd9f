"""The host: free memory (``MemAvailable``, and what of the rest someone holds) and the
page-cache drop that returns ghost memory.

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


#: The memory cgroup's root statistics (v1, then v2) and the counters of memory someone holds:
#: anonymous memory of processes and shared memory (``/dev/shm``, tmpfs) charged to a cgroup.
CGROUP_STATS = (
    (Path("/sys/fs/cgroup/memory/memory.stat"), ("total_rss", "total_shmem")),
    (Path("/sys/fs/cgroup/memory.stat"), ("anon", "shmem")),
)


class Memory(NamedTuple):
    available_gib: float
    total_gib: float
    #: what processes and containers hold (their cgroups' anonymous and shared memory); None
    #: when the cgroup statistics cannot be read
    held_gib: float | None = None

    @property
    def unheld_gib(self) -> float | None:
        """In use, yet held by no process and no cgroup: what the GB10 driver keeps after a
        stop (reserved huge pages play it in tests), and the kernel's own. Only this counts
        toward ``reboot_required``: a container growing its cache is not a leak."""
        if self.held_gib is None:
            return None
        return max(0.0, self.total_gib - self.available_gib - self.held_gib)


def held_gib(stats: tuple[tuple[Path, tuple[str, ...]], ...] = CGROUP_STATS) -> float | None:
    """Anonymous and shared memory every cgroup holds, from the root's statistics."""
    for path, keys in stats:
        try:
            text = path.read_text()
        except OSError:
            continue
        fields = dict(line.split(maxsplit=1) for line in text.splitlines() if " " in line)
        if all(key in fields for key in keys):
            return sum(int(fields[key]) for key in keys) / GIB
    return None


class Host:
    def __init__(self, drop_caches_path: Path = DROP_CACHES) -> None:
        self._drop_path = drop_caches_path

    def memory(self) -> Memory:
        import psutil

        vm = psutil.virtual_memory()
        return Memory(vm.available / GIB, vm.total / GIB, held_gib())

    def drop_caches(self) -> None:
        """``sync; echo 3 > /proc/sys/vm/drop_caches``: page cache, dentries and inodes."""
        os.sync()
        with self._drop_path.open("w") as handle:
            handle.write("3\n")
