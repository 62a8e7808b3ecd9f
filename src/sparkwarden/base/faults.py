"""Fault injection for the test suite, off unless ``SPARKWARDEN_ENABLE_FAULTS=1``.

A supervisor that must survive being killed at any step has to be *seen* surviving it; these
hooks let a test hold sparkwarden still at a chosen point. Nothing here acts without the switch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

ENABLE = "SPARKWARDEN_ENABLE_FAULTS"
STALL_AT = "SPARKWARDEN_FAULT_STALL_AT"


def enabled() -> bool:
    return os.environ.get(ENABLE) == "1"


def stall_after_action() -> Callable[[str], None]:
    """A hook that freezes a run once step ``$SPARKWARDEN_FAULT_STALL_AT`` has acted, before it
    is recorded as ended: the state a crash in the middle of that step leaves behind."""
    step = os.environ.get(STALL_AT)
    if not enabled() or not step:
        return lambda _name: None

    def hook(name: str) -> None:
        if name == step:
            while True:
                time.sleep(3600)

    return hook
