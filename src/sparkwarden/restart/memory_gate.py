"""The memory gate before any start: ``sync`` + drop caches until ``MemAvailable`` clears it.

Kept light (no Docker, no engine client) because every node of a cluster runs it through
``sparkwarden node drop``, started over SSH for each restart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkwarden.adapters.host import Host
from sparkwarden.base import logs
from sparkwarden.base.errors import StepFailed

log = logs.get("sparkwarden.sequence")


def drop_until(
    host: Host,
    gate: float,
    wait: float,
    interval: float,
    monotonic: Callable[[], float],
    sleep: Callable[[float], None],
    step: str = "drop_caches",
    on_wait: Callable[[], None] = lambda: None,
) -> tuple[str, dict[str, Any]]:
    """``sync`` + drop caches until ``MemAvailable`` clears the start gate: (summary, figures),
    or StepFailed after ``wait``. The one loop for a single host and for each cluster node."""
    before = host.memory()
    deadline = monotonic() + wait
    drops = 0
    while True:
        host.drop_caches()
        drops += 1
        now = host.memory()
        figures = {
            "available_before_gib": round(before.available_gib, 2),
            "available_after_gib": round(now.available_gib, 2),
            "total_gib": round(now.total_gib, 2),
            # the memory trend reads these: only memory nobody holds is a leak
            "held_after_gib": None if now.held_gib is None else round(now.held_gib, 2),
            "unheld_after_gib": None if now.unheld_gib is None else round(now.unheld_gib, 2),
            "gate_gib": gate,
            "drops": drops,
        }
        if now.available_gib >= gate:
            return (
                f"{before.available_gib:.1f} -> {now.available_gib:.1f} GiB available "
                f"(gate {gate:g} GiB, {drops} drop{'s' if drops > 1 else ''})"
            ), figures
        if monotonic() + interval > deadline:
            raise StepFailed(
                step,
                f"memory did not come back: {now.available_gib:.1f} GiB available after "
                f"{wait:g}s, the start gate is {gate:g} GiB; not starting the LLM "
                "into ghost memory",
                figures,
            )
        log.info("waiting_for_memory", available_gib=round(now.available_gib, 2), gate_gib=gate)
        on_wait()
        sleep(interval)
