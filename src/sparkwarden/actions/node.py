"""``sparkwarden node VERB --json``: one of this node's own steps, asked by the head over SSH.

Imports only what the step needs: each call is a fresh process, started once per node per step.
"""

from __future__ import annotations

import argparse

from sparkwarden.cluster import node as node_steps


def node(args: argparse.Namespace) -> int:
    """One JSON line out, exit 0 or 1."""
    params = node_steps.Params(
        args.engine, args.voice, args.timeout, args.gate_gib, args.wait, args.interval
    )
    code, line = node_steps.answer_line(args.verb, params)
    print(line)
    return code
