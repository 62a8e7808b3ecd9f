"""A replica set as one Spark sees it: its peers serving or not, and whose turn it is. Pure.

Each Spark serves its own engine; a planned restart on one waits while any peer is not serving
(an unreachable one counts as not serving) or while another holds the turn
(:mod:`sparkwarden.restart.turn`). What is looked at comes in as a :class:`PeersLook` (taken
off the daemon's loop by :mod:`sparkwarden.daemon.replica_looks`); :func:`waits_for` says what
a planned restart still waits for, or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkwarden.restart.turn import Answer


@dataclass(frozen=True)
class PeerView:
    """One peer's answer to ``sparkwarden node serving``, or why there was none."""

    name: str
    serving: bool
    why: str
    reachable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "serving": self.serving,
            "why": self.why,
            "reachable": self.reachable,
        }


@dataclass(frozen=True)
class PeersLook:
    """Every peer at one look, and the turn as the first node answered (None: unread)."""

    at: float
    peers: tuple[PeerView, ...]
    turn: Answer | None
    turn_error: str = ""


def serving_of(
    up: list[str], health: str, run: str | None, out: str | None = None
) -> tuple[bool, str]:
    """Whether a Spark's own engine serves its users: one LLM candidate up, ``/health`` 200, no
    run of its own going (``run``: who holds its run lock), and in the gateway's rotation
    (``out``: why it is not)."""
    if run:
        return False, f"restarting ({run})"
    if out is not None:
        return False, f"out of the gateway's rotation: {out}"
    if not up:
        return False, "no LLM container up"
    if len(up) > 1:
        return False, f"{len(up)} LLM containers up ({', '.join(up)})"
    if health != "up":
        return False, f"{up[0]} up, /health {health}"
    return True, f"{up[0]} serving"


#: How :func:`waits_for` begins when only the turn keeps a restart back (observe mode takes none).
TURN_WAITS = "the turn"


def waits_for(look: PeersLook | None, me: str, t: float, stale_after: float) -> str | None:
    """What a planned restart on ``me`` waits for now, or None: it may take the turn. A look
    older than ``stale_after`` (the looks stopped) is no evidence that the peers serve."""
    if (peers := peer_waits(look, t, stale_after)) is not None or look is None:
        return peers
    if look.turn is None:
        return f"the turn to be read ({look.turn_error or 'no answer'})"
    if look.turn.holder is not None and look.turn.holder != me:
        expires = look.turn.expires_in or 0
        return f"the turn: peer {look.turn.holder} holds it (expires in {expires:.0f}s)"
    return None


def peer_waits(look: PeersLook | None, t: float, stale_after: float) -> str | None:
    """The peer a planned restart waits for (not serving, unreachable, or not looked at
    lately), whoever holds the turn; None when every peer serves."""
    if look is None:
        return "a first look at the peers"
    if t - look.at > stale_after:
        return f"a fresh look at the peers (the last is {t - look.at:.0f}s old)"
    for peer in look.peers:
        if not peer.serving:
            what = "unreachable" if not peer.reachable else "not serving"
            return f"peer {peer.name} {what}: {peer.why}"
    return None


def unreachable(look: PeersLook | None) -> list[str]:
    return [p.name for p in look.peers if not p.reachable] if look is not None else []


def peers_out(look: PeersLook | None) -> list[str]:
    """The peers last seen not serving, each with why (what a typed restart says)."""
    if look is None:
        return []
    return [f"{p.name}: {p.why}" for p in look.peers if not p.serving]
