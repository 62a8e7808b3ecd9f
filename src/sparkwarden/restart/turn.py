"""The turn of a replica set: who may take its engine out for a planned restart now.

One lease, kept as one row in the journal of the set's first node and settled there inside one
``BEGIN IMMEDIATE`` transaction (:meth:`sparkwarden.restart.journal.Journal.turn`), so two
Sparks asking at the same instant are answered one after the other: the first gets it, the
second is told who holds it. :func:`settle` is that check-and-set, pure: the lease as it is, what
is asked, and the first node's own clock in; the lease as it is after, and the answer out.
Expiry is judged by that one clock only: the askers' clocks never enter it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Action = Literal["take", "renew", "release", "read"]
ACTIONS: tuple[Action, ...] = ("take", "renew", "release", "read")


@dataclass(frozen=True)
class Lease:
    """Who holds the turn, and until when (the first node's clock)."""

    holder: str
    taken_at: float
    expires_at: float

    def live(self, now: float) -> bool:
        return now < self.expires_at


@dataclass(frozen=True)
class Answer:
    """What the first node answers: whether it was granted, and the lease now (None: free)."""

    granted: bool
    holder: str | None
    expires_in: float | None
    why: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        expires = data.get("expires_in")
        return cls(
            bool(data.get("granted")),
            str(data["holder"]) if data.get("holder") else None,
            float(expires) if isinstance(expires, int | float) else None,
            str(data.get("why") or ""),
        )


def settle(
    lease: Lease | None, action: Action, holder: str, ttl: float, now: float
) -> tuple[Lease | None, Answer]:
    """The check-and-set. ``take``: granted when the turn is free, expired, or already the
    asker's (then renewed); ``renew``: only by its live holder; ``release``: only by its
    holder (a turn already free or expired is released too); ``read``: changes nothing."""
    live = lease if lease is not None and lease.live(now) else None
    if action == "read":
        return lease, _answer(live, True, now, "read")
    if action == "take":
        if live is None or live.holder == holder:
            taken = live.taken_at if live is not None else now
            new = Lease(holder, taken, now + ttl)
            return new, _answer(new, True, now, "taken")
        return lease, _answer(live, False, now, f"held by {live.holder}")
    if action == "renew":
        if live is not None and live.holder == holder:
            new = Lease(holder, live.taken_at, now + ttl)
            return new, _answer(new, True, now, "renewed")
        why = f"held by {live.holder}" if live is not None else "not held (expired or released)"
        return lease, _answer(live, False, now, why)
    if live is None:
        return None, _answer(None, True, now, "free")
    if live.holder != holder:
        return lease, _answer(live, False, now, f"held by {live.holder}, not {holder}")
    return None, _answer(None, True, now, "released")


def _answer(lease: Lease | None, granted: bool, now: float, why: str) -> Answer:
    if lease is None:
        return Answer(granted, None, None, why)
    return Answer(granted, lease.holder, round(lease.expires_at - now, 3), why)
