"""How the head reaches each node's own sparkwarden: ``ssh`` as the cluster's set-up does it.

BatchMode (a key or nothing, never a prompt), a connect timeout, the keys and ``ssh_config``
the cluster was built with; the head itself is reached by a plain subprocess. What a node
answers is one JSON line from ``sparkwarden node VERB --json``; :func:`interpret` turns the
exit code and that line into an answer, :class:`NodeUnreachable` or :class:`NodeFailed`.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
from typing import Any, Protocol

from sparkwarden.base.errors import SparkwardenError
from sparkwarden.config.schema import ClusterConfig, ClusterNode

#: ssh's own exit code for "could not connect or authenticate".
SSH_FAILED = 255
#: A shell's "command not found".
NOT_FOUND = 127


class NodeUnreachable(SparkwardenError):
    """The node did not answer at all: reported as unreachable, never guessed about."""

    def __init__(self, node: str, detail: str) -> None:
        super().__init__(f"node {node} is unreachable: {detail}")
        self.node, self.detail = node, detail


class NodeFailed(SparkwardenError):
    """The node's sparkwarden answered that the step failed (its figures in ``answer``)."""

    def __init__(self, node: str, detail: str, answer: dict[str, Any] | None = None) -> None:
        super().__init__(f"node {node}: {detail}")
        self.node, self.detail, self.answer = node, detail, dict(answer or {})


class Link(Protocol):
    """One call of ``sparkwarden node VERB`` on a node (a fake in unit tests)."""

    def call(self, node: ClusterNode, verb: str, args: list[str], timeout: float) -> dict[str, Any]:
        """The node's answer, or :class:`NodeUnreachable` / :class:`NodeFailed`."""
        ...


def node_argv(node: ClusterNode, cluster: ClusterConfig, verb: str, args: list[str]) -> list[str]:
    """The command line: the node's sparkwarden, wrapped in ssh unless it is this host."""
    command = [*shlex.split(node.sparkwarden), "node", verb, *args, "--json"]
    if not node.ssh:
        return command
    ssh = ["ssh", "-o", "BatchMode=yes"]
    ssh += ["-o", f"ConnectTimeout={math.ceil(cluster.connect_timeout)}"]
    if cluster.ssh_config is not None:
        ssh += ["-F", str(cluster.ssh_config)]
    # The remote side runs one shell line: quote it so names reach the node's argv unchanged.
    return [*ssh, "--", node.ssh, shlex.join(command)]


def interpret(node: str, code: int, stdout: str, stderr: str, via_ssh: bool) -> dict[str, Any]:
    """A node's answer from its exit code and output (pure)."""
    answer = last_json(stdout)
    if answer is not None and code in (0, 1):
        if code == 0 and answer.get("ok") is True:
            return answer
        raise NodeFailed(node, str(answer.get("error") or "failed, no reason given"), answer)
    said = (stderr.strip() or stdout.strip()).splitlines()
    last = said[-1] if said else "no output"
    if via_ssh and code == SSH_FAILED:
        raise NodeUnreachable(node, f"ssh: {last}")
    if code == NOT_FOUND:
        raise NodeFailed(node, f"its sparkwarden was not found: {last}")
    raise NodeFailed(node, f"its sparkwarden exited with code {code}: {last}")


def last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


class SshLink:
    """The real link: one subprocess per call (ssh, or the head's own sparkwarden)."""

    def __init__(self, cluster: ClusterConfig) -> None:
        self.cluster = cluster

    def call(self, node: ClusterNode, verb: str, args: list[str], timeout: float) -> dict[str, Any]:
        argv = node_argv(node, self.cluster, verb, args)
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise NodeUnreachable(node.name, f"no answer within {timeout:g}s") from None
        except FileNotFoundError:
            raise NodeFailed(node.name, f"{argv[0]} is not installed on the head") from None
        return interpret(node.name, proc.returncode, proc.stdout, proc.stderr, bool(node.ssh))
