"""``sparkwarden node VERB --json``: one of this node's own steps, asked by the head over SSH.

Imports only what the step needs: each call is a fresh process, started once per node per step,
so its start-up is paid on every step of a cluster restart.
"""

from __future__ import annotations

import argparse

from sparkwarden.cluster import node as node_steps


def node(args: argparse.Namespace) -> int:
    """One JSON line out, exit 0 or 1."""
    if args.verb == "drop":  # the one verb that logs (its wait for memory): structlog for it only
        from sparkwarden.base import logs

        logs.setup(args.log_level or "warning")
    params = node_steps.Params(
        args.engine,
        args.voice,
        args.timeout,
        args.gate_gib,
        args.wait,
        args.interval,
        args.engine_process,
        args.action,
        args.holder,
        args.ttl,
        args.config,
    )
    code, line = node_steps.answer_line(args.verb, params)
    print(line)
    return code
