"""When the head restarts the cluster by itself: a pure decision over its recent looks.

A worker's engine gone (``crashed``) or the head's gone with ranks left running (``head-down``)
can only be mended by restarting the whole cluster; seen on ``confirm`` looks in a row (one look
can catch a rank mid-restart) and within the restart budget, the answer is to restart. A node
that does not answer (``unknown``) is reported, never acted on: nothing is guessed. ``down``
(no engine anywhere) is left alone: an operator stopped it, or a run already failed naming why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sparkwarden.cluster.verdict import ClusterState

#: The states only a restart of the whole cluster mends.
MENDED_BY_RESTART: frozenset[ClusterState] = frozenset({"crashed", "head-down"})
#: The reason automatic cluster runs carry in the journal (the budget counts these).
REASON = "cluster-crash"


@dataclass(frozen=True)
class Decision:
    action: Literal["restart", "wait", "give-up"]
    why: str


def decide(
    looks: list[ClusterState],
    runs_started: list[float],
    now: float,
    confirm: int,
    max_runs: int,
    window: float,
) -> Decision:
    """``looks``: the states seen, oldest first; ``runs_started``: when this watch's automatic
    cluster runs began (Unix time)."""
    if not looks or looks[-1] not in MENDED_BY_RESTART:
        return Decision("wait", f"cluster {looks[-1] if looks else 'not seen yet'}")
    recent = looks[-confirm:]
    if len(recent) < confirm or any(state not in MENDED_BY_RESTART for state in recent):
        return Decision("wait", f"{looks[-1]}: seen {_streak(looks)} of {confirm} looks in a row")
    spent = [t for t in runs_started if now - t < window]
    if len(spent) >= max_runs:
        return Decision(
            "give-up",
            f"{looks[-1]}, but {len(spent)} cluster restarts in the last {window:g}s already: "
            "a restart loop can hang the boxes; left to an operator",
        )
    return Decision("restart", f"{looks[-1]} on {confirm} looks in a row")


def _streak(looks: list[ClusterState]) -> int:
    count = 0
    for state in reversed(looks):
        if state not in MENDED_BY_RESTART:
            break
        count += 1
    return count
