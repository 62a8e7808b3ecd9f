"""The names of the restart steps, in order: the one list the sequence, its journal, ``history``,
``status`` and ``/metrics`` all name them by (no import but typing, so ``history`` stays quick).
"""

from __future__ import annotations

from typing import Final

STEPS: Final = (
    "detect",
    "pause_voice",
    "stop_llm",
    "drop_caches",
    "start_llm",
    "wait_health",
    "chat_probe",
    "gateway_probe",
    "resume_voice",
)
#: The step-name column of ``restart``, ``restart --dry-run`` and ``history``: the longest + 1.
NAME_WIDTH: Final = max(map(len, STEPS)) + 1
