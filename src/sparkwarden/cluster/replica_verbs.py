"""What ``sparkwarden node serving`` and ``sparkwarden node turn`` do on a replica: read its own
config, then say whether its engine serves, or settle the turn in its journal (the set's first
node). Imports only what each needs: each call is a fresh process over SSH."""

from __future__ import annotations

from typing import Any

from sparkwarden.base.errors import SparkwardenError
from sparkwarden.cluster.replicas import serving_of
from sparkwarden.config.schema import Config
from sparkwarden.restart.turn import ACTIONS, Action, Answer


def perform(verb: str, action: str, holder: str, ttl: float, path: str | None) -> dict[str, Any]:
    """``sparkwarden node serving|turn`` on this Spark, from its own config (``path``, or the
    default one)."""
    from sparkwarden.config.schema import load

    config = load(path)
    if verb == "turn":
        if action not in ACTIONS:
            raise SparkwardenError(f"turn: unknown action {action!r}")
        return turn_here(config, action, holder, ttl).to_json()
    return serving_here(config)


def turn_here(config: Config, action: Action, holder: str, ttl: float) -> Answer:
    """The turn in this Spark's journal (a connection of its own: any thread may ask)."""
    from sparkwarden.restart.journal import Journal

    journal = Journal(config.state.dir)
    try:
        return journal.turn(action, holder, ttl)
    finally:
        journal.close()


def serving_here(config: Config) -> dict[str, Any]:
    """Whether this Spark's own engine serves: one candidate up, /health 200, no run going, in
    the gateway's rotation."""
    from sparkwarden.adapters.docker_engine import DockerEngine
    from sparkwarden.restart import rotation
    from sparkwarden.restart.lock import RunLock
    from sparkwarden.vllm.client import VllmClient

    docker = DockerEngine()
    try:
        up = []
        for name in config.llm.containers:
            try:
                if docker.inspect(name).up:
                    up.append(name)
            except SparkwardenError:
                continue  # missing: not up
    finally:
        docker.close()
    health = "-"
    if len(up) == 1:
        vllm = VllmClient(config.llm.base_url, config.llm.api_key())
        try:
            health = vllm.health(timeout=min(config.health.timeout, 10.0)).status
        finally:
            vllm.close()
    run = RunLock(config.state.dir).held_by_other()
    out = rotation.read(config.rotation.flag) if config.rotation else None
    serving, why = serving_of(up, health, run, out.why if out else None)
    return {"serving": serving, "why": why}
