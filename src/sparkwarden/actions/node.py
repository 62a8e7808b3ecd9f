"""``sparkwarden node VERB --json``: one of this node's own steps, asked by the head over SSH.

Imports only what the step needs: each call is a fresh process, started once per node per step.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.adapters.host import Host
from sparkwarden.base.errors import SparkwardenError, StepFailed
from sparkwarden.cluster import node as node_steps


def node(args: argparse.Namespace) -> int:
    """One of this node's own steps, for the head: one JSON line out, exit 0 or 1."""
    docker, host = DockerEngine(), Host()
    try:
        answer: dict[str, Any]
        if args.verb == "inspect":
            answer = node_steps.inspect(docker, host, args.engine, args.voice)
        elif args.verb == "pause":
            answer = node_steps.pause(docker, args.voice)
        elif args.verb == "resume":
            answer = node_steps.resume(docker, args.voice)
        elif args.verb == "stop":
            answer = node_steps.stop(docker, args.engine, args.timeout)
        elif args.verb == "drop":
            answer = node_steps.drop(host, args.gate_gib, args.wait, args.interval)
        else:
            answer = node_steps.start(docker, args.engine)
    except StepFailed as exc:
        print(json.dumps({"ok": False, "error": str(exc), **exc.detail}, default=str))
        return 1
    except SparkwardenError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 1
    finally:
        docker.close()
    print(json.dumps({"ok": True, **answer}, default=str))
    return 0
