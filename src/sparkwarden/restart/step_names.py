"""The names of the restart steps, in order: the one list the sequences, their journal,
``history``, ``status``, ``--dry-run`` and ``/metrics`` all name them by (no import but typing, so
``history`` stays quick). A lone host's run has :data:`STEPS` (:data:`REPLICA_STEPS` when it
leaves a gateway's rotation); a cluster's head runs :func:`cluster_steps`, in the order its
set-up starts in.
"""

from __future__ import annotations

from typing import Final

#: A lone host's run.
STEPS: Final = (
    "detect",
    "pause_voice",
    "stop_llm",
    "drop_caches",
    "start_llm",
    "wait_health",
    "chat_probe",
    "resume_voice",
    "gateway_probe",
)

#: A replica's run whose Spark leaves the gateway's rotation (``[replicas.rotation]``): out before
#: anything stops, back once the engine answered a chat and its own gateway path did too.
REPLICA_STEPS: Final = (
    "detect",
    "leave_rotation",
    *STEPS[1 : STEPS.index("resume_voice")],
    "rejoin_rotation",
    "resume_voice",
    "gateway_probe",
)

#: A cluster's run, driven from its head (vLLM's own ``--nnodes`` set-up and a launcher's):
#: the workers' ranks are started before the head that waits for them.
CLUSTER_STEPS: Final = (
    "preflight",
    "pause_voice",
    "stop_head",
    "stop_workers",
    "confirm_stopped",
    "drop_caches",
    "start_workers",
    "start_head",
    "wait_health",
    "chat_probe",
    "workers_running",
    "resume_voice",
    "gateway_probe",
)

#: Ray: the head (the GCS) is started before the workers that join it.
RAY_STEPS: Final = tuple(
    {"start_workers": "start_head", "start_head": "start_workers"}.get(name, name)
    for name in CLUSTER_STEPS
)

#: Every name a run may record, each once: the ``step`` label of ``/metrics``.
EVERY_STEP: Final = tuple(dict.fromkeys((*REPLICA_STEPS, *CLUSTER_STEPS)))


def cluster_steps(setup: str) -> tuple[str, ...]:
    """The order a cluster of this set-up is restarted in."""
    return RAY_STEPS if setup == "ray" else CLUSTER_STEPS


def name_width(steps: tuple[str, ...]) -> int:
    """The step-name column of a run's lines (``restart``, ``--dry-run``, ``history``)."""
    return max(map(len, steps)) + 1


#: The step-name column of a lone host's ``restart``, ``restart --dry-run`` and ``history``.
NAME_WIDTH: Final = name_width(STEPS)
