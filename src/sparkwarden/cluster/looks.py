"""One look at every node from the head, in parallel: what ``status``, ``cluster status``,
doctor, the daemon's watch and a run's preflight all ask. Kept apart from the restart sequence
so that a look imports only the link (``status`` over SSH answers quickly)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkwarden.base.errors import SparkwardenError, scrub
from sparkwarden.cluster.link import Link, NodeFailed, NodeUnreachable, SshLink
from sparkwarden.cluster.node import Params
from sparkwarden.cluster.verdict import NodeView
from sparkwarden.config.schema import ClusterConfig, ClusterNode, Config

#: Added to every node call's own bound: ssh's connect, the node's Python starting.
CALL_MARGIN = 30.0


def fan_out(
    nodes: list[ClusterNode], call: Callable[[ClusterNode], dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """One call per node, in parallel: (answers, failures by node name)."""
    answers: dict[str, dict[str, Any]] = {}
    failures: dict[str, str] = {}
    if not nodes:
        return answers, failures
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        futures = {node.name: pool.submit(call, node) for node in nodes}
        for name, future in futures.items():
            try:
                answers[name] = future.result()
            except (NodeUnreachable, NodeFailed) as exc:
                failures[name] = scrub(str(exc))
    return answers, failures


def inspect_all(config: Config, link: Link, margin: float = CALL_MARGIN) -> list[NodeView]:
    """Every node's ``node inspect`` answer, in parallel, as views (unreachable ones too);
    each call bounded by the connect timeout plus ``margin``."""
    cluster = cluster_of(config)
    timeout = cluster.connect_timeout + margin

    def ask(node: ClusterNode) -> dict[str, Any]:
        # the launcher's containers idle: a rank exec'd into one may have died inside it
        params = Params(node.engine, node.voice, engine_process=cluster.containers_launched)
        return link.call(node, "inspect", params, timeout)

    answers, failures = fan_out(cluster.nodes, ask)
    return [
        NodeView(
            node.name,
            "head" if i == 0 else "worker",
            answers.get(node.name),
            failures.get(node.name, ""),
        )
        for i, node in enumerate(cluster.nodes)
    ]


def look(config: Config, margin: float = CALL_MARGIN) -> list[NodeView]:
    """Every node's answer now, over a link of its own (one SSH connection per node, closed
    after)."""
    link = SshLink(cluster_of(config))
    try:
        return inspect_all(config, link, margin)
    finally:
        link.close()


def cluster_of(config: Config) -> ClusterConfig:
    if config.cluster is None:
        raise SparkwardenError("no [cluster] in the config: this host drives no cluster")
    return config.cluster
