"""``sparkwarden cluster restart|status|preflight``: the head drives and watches every node."""

from __future__ import annotations

import json
import sqlite3
import sys

from sparkwarden.actions.foreground import say, uncut
from sparkwarden.base.errors import LockBusy, SparkwardenError
from sparkwarden.cluster.looks import cluster_of, look
from sparkwarden.cluster.verdict import Proof, describe, judge, preflight_problems
from sparkwarden.cluster.verdict import as_json as cluster_json
from sparkwarden.config.schema import Config
from sparkwarden.vllm.client import Health, VllmClient


def restart(config: Config, reason: str) -> int:
    """The whole cluster as one unit, under the head's one run lock (the same lock as a
    single-host restart: the two never overlap)."""
    if config.cluster is None:
        raise SparkwardenError("no [cluster] in the config: use 'sparkwarden restart'")
    from sparkwarden.surfaces.reasons import manual_reason

    reason = manual_reason(reason)  # typed: an operator's run, whatever its text
    # the restart's own machinery, imported only here: status and preflight stay light
    from sparkwarden.actions.run_lines import print_step
    from sparkwarden.base import faults
    from sparkwarden.cluster.link import SshLink
    from sparkwarden.cluster.run import ClusterParts, left_paused, restart_cluster
    from sparkwarden.restart.journal import Journal
    from sparkwarden.restart.lock import RunLock

    lock = RunLock(config.state.dir)
    try:
        lock.acquire(f"cluster:{reason}")
    except LockBusy as exc:
        print(f"sparkwarden: {exc}", file=sys.stderr)
        return 1
    link = SshLink(config.cluster)
    parts = ClusterParts(
        link,
        VllmClient(config.llm.base_url, config.llm.api_key()),
        Journal(config.state.dir),
        after_action=faults.stall_after_action(),
        gateway=VllmClient(config.gateway.url, config.gateway.api_key())
        if config.gateway
        else None,
    )
    try:
        # A cluster run cut short (sparkwarden killed on the head): closed as interrupted, and
        # the voice it may have paused on any node is resumed by this run.
        adopt = left_paused(parts.journal.runs(limit=50))
        for record in parts.journal.unfinished():
            if "cluster" in record.plan:
                note = f"sparkwarden (pid {record.pid}) stopped during this cluster run"
                parts.journal.mark_interrupted(record.id, note)
        with uncut("the cluster restart"):
            outcome = restart_cluster(config, reason, parts, observer=print_step, adopt=adopt)
    finally:
        link.close()
        parts.vllm.close()
        if parts.gateway is not None:
            parts.gateway.close()
        parts.journal.close()
        lock.release()
    if outcome.ok:
        say(f"run #{outcome.run_id}: the cluster restarted as one and answers")
        return 0
    failed = f"run #{outcome.run_id} failed at {outcome.failed_step or '?'}: {outcome.error}"
    say(failed, sys.stderr)
    return 1


def dry_run(config: Config, reason: str) -> int:
    """``restart --dry-run`` on a cluster's head: the cluster's plan, from a look at every node
    (the restart there is the cluster's, never one rank's)."""
    from sparkwarden.actions.run_lines import CLUSTER_PLAN_TITLE, print_plan
    from sparkwarden.daemon.plans import cluster_plan

    print_plan(CLUSTER_PLAN_TITLE, cluster_plan(config, reason))
    return 0


def status(config: Config, as_json: bool) -> int:
    """Every node as the head sees it now; exit 0 only when the whole cluster serves."""
    views = look(config)
    health = _head_health(config)
    proof = journal_proof(config)
    verdict = judge(views, health.status, proof)
    if as_json:
        print(json.dumps(cluster_json(views, health.status, proof)))
    else:
        print(f"cluster: {verdict.state}: {verdict.summary}")
        print(f"  head /health: {health.status} ({health.detail})")
        for view in views:
            print(f"  {view.name:<12} {view.role:<6} {describe(view)}")
    return 0 if verdict.state == "serving" else 1


def preflight(config: Config, as_json: bool) -> int:
    """What a restart's first step checks, touching nothing."""
    views = look(config)
    # a launcher's --rm containers are gone while its cluster is down, as in a run's preflight
    problems = preflight_problems(views, cluster_of(config).containers_launched)
    if as_json:
        print(
            json.dumps(
                {
                    "ok": not problems,
                    "problems": problems,
                    "nodes": {v.name: v.answer or {"problem": v.problem} for v in views},
                }
            )
        )
    else:
        for view in views:
            print(f"  {view.name:<12} {view.role:<6} {describe(view)}")
        print("preflight: ok" if not problems else "preflight failed: " + "; ".join(problems))
    return 0 if not problems else 1


def journal_proof(config: Config) -> Proof:
    """What the head's journal knows of the cluster (:meth:`Kept.cluster_proof`); a journal
    this user cannot read knows nothing (a run's own stops then read as an operator's)."""
    from sparkwarden.daemon.cluster_looks import cluster_proof

    try:
        return cluster_proof(config)
    except (SparkwardenError, OSError, sqlite3.Error):
        return Proof()


def _head_health(config: Config) -> Health:
    vllm = VllmClient(config.llm.base_url, config.llm.api_key())
    try:
        return vllm.health(timeout=config.health.timeout)
    finally:
        vllm.close()
