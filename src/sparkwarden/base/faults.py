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
#: With STALL_AT: a file whose appearance lets the stalled run go on (a fault done meanwhile).
RELEASE = "SPARKWARDEN_FAULT_RELEASE"
#: With STALL_AT: a file made once the run holds (the step has acted), for a test to wait on.
HELD = "SPARKWARDEN_FAULT_HELD"


def enabled() -> bool:
    return os.environ.get(ENABLE) == "1"


def stall_after_action() -> Callable[[str], None]:
    """A hook that freezes a run once step ``$SPARKWARDEN_FAULT_STALL_AT`` has acted, before it
    is recorded as ended: the state a crash in the middle of that step leaves behind; or, with
    ``$SPARKWARDEN_FAULT_RELEASE``, until that file exists (a node cut meanwhile, mid-run); the
    hold is signalled by the file ``$SPARKWARDEN_FAULT_HELD`` names, else by the release path
    with ``.held`` appended."""
    step = os.environ.get(STALL_AT)
    if not enabled() or not step:
        return lambda _name: None

    release = os.environ.get(RELEASE)
    held = os.environ.get(HELD) or (f"{release}.held" if release else None)

    def hook(name: str) -> None:
        if name == step:
            if held:  # the test's sign that the step has acted and the run holds
                open(held, "w").close()
            while not (release and os.path.exists(release)):
                time.sleep(0.1 if release else 3600)

    return hook
