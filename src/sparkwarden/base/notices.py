"""The events an operator can be notified of: one list for the config, the decider and webhooks."""

from __future__ import annotations

from typing import Final, Literal, get_args

Notice = Literal[
    "run_failed",
    "gave_up",
    "crash_recovered",
    "memory_floor",
    "drafting_suspect",
    "reboot_required",
    "policy_taken_over",
    "gateway_failed",
    "node_unreachable",
    "out_of_rotation",
    "would_restart",
]
EVENTS: Final[tuple[Notice, ...]] = get_args(Notice)
TITLES: Final[dict[Notice, str]] = {
    "run_failed": "sparkwarden: restart failed",
    "gave_up": "sparkwarden: gave up, an operator is needed",
    "crash_recovered": "sparkwarden: crashed LLM recovered",
    "memory_floor": "sparkwarden: memory below the floor",
    "drafting_suspect": "sparkwarden: drafting looks low, the canary says the drafter is fine",
    "reboot_required": "sparkwarden: memory leaks across restarts, reboot required",
    "policy_taken_over": "sparkwarden: took the LLM back from Docker's restart policy",
    "gateway_failed": "sparkwarden: the engine answers, the users' gateway does not",
    "node_unreachable": "sparkwarden: a cluster's node, or a replica's peer, does not answer",
    "out_of_rotation": "sparkwarden: a replica stays out of the gateway's rotation",
    "would_restart": "sparkwarden (observe mode): would have restarted the LLM",
}
