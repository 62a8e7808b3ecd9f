"""When the head restarts the cluster by itself: a pure judgement over its recent looks.

A worker's engine gone (``crashed``), a rank started again since the cluster last served
(``stale``: it never joins the running head) or the head's gone with ranks left running
(``head-down``) can only be mended by restarting the whole cluster; seen on ``confirm`` looks
in a row (one look can catch a rank mid-restart), the daemon on the head wants a restart, which
its gates (hold, budget, backoff, a container stopped by hand) still let through or not. A node
that does not answer (``unknown``) is reported, once, never acted on: nothing is guessed.
``down`` (no engine anywhere) is left to the head's own reconcile: an operator stopped it, or a
run failed naming why. A worker's engine stopped by hand (``stopped``) is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sparkwarden.cluster.verdict import ClusterState, ClusterVerdict, Starts

#: The states only a restart of the whole cluster mends.
MENDED_BY_RESTART: frozenset[ClusterState] = frozenset({"crashed", "stale", "head-down"})


@dataclass(frozen=True)
class Look:
    """One look at every node from the head: the verdict, and the nodes that did not answer."""

    t: float
    verdict: ClusterVerdict
    unreachable: tuple[str, ...] = ()
    #: the nodes whose engine containers run
    engines_up: tuple[str, ...] = ()
    #: the engine starts a serving cluster runs from, when no run of sparkwarden's made them
    #: (nor an earlier look adopted them): to adopt
    adopt: Starts | None = None


@dataclass(frozen=True)
class Watch:
    """What the head carries from one look to the next."""

    #: looks in a row that saw a dead rank
    streak: int = 0
    last: Look | None = None


@dataclass(frozen=True)
class Seen:
    watch: Watch
    #: why the cluster must be restarted as one now; None: not (yet)
    restart: str | None
    #: nodes that stopped answering at this look, and those answering again
    lost: tuple[str, ...] = ()
    back: tuple[str, ...] = ()


def observe(watch: Watch, look: Look, confirm: int) -> Seen:
    """Fold one look into the watch: a restart once a dead rank is seen ``confirm`` looks in a
    row (the streak starts again after it), and which nodes were lost or came back."""
    state = look.verdict.state
    streak = watch.streak + 1 if state in MENDED_BY_RESTART else 0
    before = set(watch.last.unreachable) if watch.last else set()
    lost = tuple(n for n in look.unreachable if n not in before)
    back = tuple(sorted(before - set(look.unreachable)))
    restart = None
    if streak >= confirm:
        restart = f"cluster {state} on {streak} checks in a row: {look.verdict.summary}"
        streak = 0
    return Seen(Watch(streak, look), restart, lost, back)


def after_run(watch: Watch) -> Watch:
    """A run ended: the dead ranks seen before it say nothing of the cluster it left (who did
    not answer is kept: it is said again only when it changes)."""
    return replace(watch, streak=0)


def stopped_by_hand(watch: Watch) -> str | None:
    """What an operator stopped on a worker, as the last look saw it: no automatic restart may
    start it again (every one would, the cluster restarting as one), whatever asks for it."""
    last = watch.last
    return last.verdict.summary if last is not None and last.verdict.state == "stopped" else None
