"""``restart --dry-run``'s plan: what a restart would do now, read from Docker, /proc (and on a
cluster's head every node), touching nothing, and kept in history as a dry run.

One code for both places that make it: the daemon, asked over its control socket (the normal
case on a box: the command then imports nothing heavy and starts quickly), and the command
itself when no daemon answers (:mod:`sparkwarden.actions.restart`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkwarden.config.schema import Config
from sparkwarden.restart.journal import Journal

if TYPE_CHECKING:
    from sparkwarden.restart.parts import Parts

#: A plan: each step's name and what it would do now.
Steps = list[tuple[str, str]]


def record_dry_run(journal: Journal, reason: str) -> None:
    """A dry run is kept in history (and ``/metrics``) as one: nothing was touched."""
    run_id = journal.begin_run(reason, result="dry-run")
    journal.end_run(run_id, "dry-run")


def plan_now(config: Config, parts: Parts) -> Steps:
    """What a restart would do now, recording nothing (observe mode's ``would``, a dry run): a
    lone host's plan from ``parts``' Docker, /proc and journal, or on a cluster's head the
    cluster's, from a look at every node."""
    if config.cluster is None:
        from sparkwarden.restart import sequence

        return sequence.plan(config, parts)
    return _cluster_steps(config)


def _cluster_steps(config: Config) -> Steps:
    from sparkwarden.cluster.looks import look
    from sparkwarden.cluster.run import plan

    return plan(config, look(config))


def host_plan(config: Config, parts: Parts, reason: str) -> Steps:
    """A lone host's plan, from ``parts``' Docker, /proc and journal; recorded there."""
    steps = plan_now(config, parts)
    record_dry_run(parts.journal, reason)
    return steps


def cluster_plan(config: Config, reason: str) -> Steps:
    """A cluster head's plan, from a look at every node (the restart there is the cluster's,
    never one rank's); recorded in the head's journal."""
    steps = _cluster_steps(config)
    journal = Journal(config.state.dir)
    try:
        record_dry_run(journal, reason)
    finally:
        journal.close()
    return steps


def answer(config: Config, reason: str) -> dict[str, Any]:
    """The daemon's answer to a ``dry-run`` request, made on the control thread that took it.

    Made there, not queued for the main thread: a plan only reads, and the main thread may be
    in a run for minutes (a dry run then would wait for its end) or wedged (it would never
    answer). It is safe there because it shares nothing with the main thread: its own Docker
    client (docker-py's client is a ``requests`` session, not made to be shared between
    threads), its own journal connection (SQLite's connections belong to the thread that opened
    them; the journal is in WAL mode, and a write waits for the main thread's, as the command's
    own dry run in a process of its own always has), and on a cluster's head its own SSH links
    (:func:`~sparkwarden.cluster.looks.look`), all closed before it answers. Nothing it does
    changes the box, so it may run beside a restart, as a dry run in a process of its own did.
    """
    if config.cluster is not None:
        return {"ok": True, "cluster": True, "steps": cluster_plan(config, reason)}
    from sparkwarden.restart.parts import Parts

    parts = Parts.from_config(config)
    try:
        return {"ok": True, "cluster": False, "steps": host_plan(config, parts, reason)}
    finally:
        parts.close()
