"""A replica out of the gateway's rotation, and back in: the flag file its Nginx reads.

While the flag exists, this Spark's Nginx answers every new request 503 (the example in
``packaging/nginx/sparkwarden-upstream.conf``) and LiteLLM's router retries it on a peer, so
users never meet the drain's empty answers nor the engine's minutes down; the requests already
in flight finish. Only sparkwarden's own probe (header :data:`PROBE_HEADER`) goes through, so the
replica's own path is proven before it rejoins.

The file is the state: whatever a daemon remembers, the box says whether this Spark is out, and
a daemon started after a ``kill -9`` reads why. Its text is one JSON object (:class:`Out`); a
flag sparkwarden did not write (an operator's ``touch``) is an operator's, and only they end it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkwarden.base.dirs import make_dirs

#: The header sparkwarden's own probe sends: the replica's Nginx lets it through while out.
PROBE_HEADER = "X-Sparkwarden-Probe"


@dataclass(frozen=True)
class Out:
    """Why this Spark is out of rotation: since when (wall clock), and which run took it out
    (None: a planned restart's drain, before its run began). ``by_hand``: a flag sparkwarden
    did not write."""

    since: float
    why: str
    run: int | None = None
    by_hand: bool = False
    #: a failed run's flag was notified (kept in the flag: a restarted daemon does not repeat it)
    told: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "why": self.why,
            "run": self.run,
            "by_hand": self.by_hand,
            "told": self.told,
        }


def read(flag: Path) -> Out | None:
    """The flag as the box has it: None when this Spark is in rotation."""
    try:
        text = flag.read_text(errors="replace")
        since = flag.stat().st_mtime
    except FileNotFoundError:
        return None
    except OSError as exc:  # there, but unreadable: out, and said why
        return Out(time.time(), f"the flag {flag} is unreadable: {exc.strerror}", by_hand=True)
    try:
        said = json.loads(text)
        return Out(
            float(said["since"]), str(said["why"]), said.get("run"), told=said.get("told") is True
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return Out(since, f"{flag} put there by hand", by_hand=True)


def take_out(
    flag: Path, why: str, run: int | None = None, since: float | None = None, told: bool = False
) -> Out:
    """Write the flag (whole, by rename: Nginx never reads half of it); world-readable, as
    Nginx's workers are not root."""
    out = Out(time.time() if since is None else since, why, run, told=told)
    make_dirs(flag.parent, 0o755)  # Nginx's workers look into it, under the unit's UMask=0077
    part = flag.with_name(f".{flag.name}.{os.getpid()}")
    said = {"since": out.since, "why": out.why, "run": out.run, "told": out.told}
    part.write_text(json.dumps(said) + "\n")
    part.chmod(0o644)
    part.replace(flag)
    return out


def mark_told(flag: Path) -> None:
    """Note in the flag that its failed run was notified (unless it is no longer ours)."""
    out = read(flag)
    if out is not None and not out.by_hand and not out.told:
        take_out(flag, out.why, out.run, out.since, told=True)


def put_back(flag: Path) -> bool:
    """Remove the flag: Nginx passes requests again. False when it was not there, or is an
    operator's now (written while the own path was being proven): theirs is never removed."""
    out = read(flag)
    if out is None or out.by_hand:
        return False
    try:
        flag.unlink()
    except FileNotFoundError:
        return False
    return True
