"""How the head reaches each node's own sparkwarden: ``ssh`` as the cluster's set-up does it.

BatchMode (a key or nothing, never a prompt), a connect timeout, the keys and ``ssh_config``
the cluster was built with; the head itself is reached by a plain subprocess. What a node
answers is one JSON line from ``sparkwarden node VERB --json``; :func:`interpret` turns the
exit code and that line into an answer, :class:`NodeUnreachable` or :class:`NodeFailed`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from sparkwarden.base.errors import SparkwardenError
from sparkwarden.cluster.node import Params, Verb, answer_line
from sparkwarden.config.schema import ClusterNode

#: ssh's own exit code for "could not connect or authenticate".
SSH_FAILED = 255
#: Unanswered keep-alives before ssh gives a node up (each ``connect_timeout`` apart).
ALIVE_COUNT = 3
#: A shell's "command not found".
NOT_FOUND = 127
#: How long an idle shared SSH connection outlives its last use (closed at the end of a run).
CONTROL_PERSIST = "120"
#: The shared connections' folder in the temp dir: this, the process ID, a random tail.
CONTROL_PREFIX = "sparkwarden-ssh-"


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


class Reached(Protocol):
    """A Spark reached over the link: a cluster's node, or a replica set's peer."""

    @property
    def name(self) -> str: ...
    @property
    def ssh(self) -> str: ...
    @property
    def sparkwarden(self) -> str: ...


class Reaching(Protocol):
    """How the Sparks are reached: a ``[cluster]`` or a ``[replicas]``."""

    @property
    def nodes(self) -> Sequence[Reached]: ...
    @property
    def ssh_config(self) -> Path | None: ...
    @property
    def connect_timeout(self) -> float: ...


class Link(Protocol):
    """One call of ``sparkwarden node VERB`` on a node (a fake in unit tests)."""

    def call(self, node: ClusterNode, verb: Verb, params: Params, timeout: float) -> dict[str, Any]:
        """The node's answer, or :class:`NodeUnreachable` / :class:`NodeFailed`."""
        ...


def node_argv(
    node: Reached, cluster: Reaching, verb: Verb, params: Params, control: str = ""
) -> list[str]:
    """The command line: the node's sparkwarden, wrapped in ssh unless it is this host.
    ``control``: a ControlPath, so one SSH connection per node serves a whole run."""
    command = [*shlex.split(node.sparkwarden), "node", verb, *params.argv(), "--json"]
    if not node.ssh:
        return command
    ssh = ["ssh", "-o", "BatchMode=yes"]
    if control:
        ssh += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control}"]
        ssh += ["-o", f"ControlPersist={CONTROL_PERSIST}"]
    seconds = math.ceil(cluster.connect_timeout)
    ssh += ["-o", f"ConnectTimeout={seconds}"]
    # A node lost mid-call (link down, box hung) ends the call within about three connect
    # timeouts, not at the step's own bound: the run then stops touching that node.
    ssh += ["-o", f"ServerAliveInterval={seconds}", "-o", f"ServerAliveCountMax={ALIVE_COUNT}"]
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
    """The real link: ssh to each node (one shared connection per node for as long as the link
    lives), the head's own verbs in this process (the head's sparkwarden is this one)."""

    def __init__(self, cluster: Reaching) -> None:
        self.cluster = cluster
        sweep(cluster)
        # private (0700), named for this process: what a killed one leaves can be told apart
        self._dir = tempfile.mkdtemp(prefix=f"{CONTROL_PREFIX}{os.getpid()}-")

    def call(self, node: Reached, verb: Verb, params: Params, timeout: float) -> dict[str, Any]:
        if not node.ssh:
            code, line = answer_line(verb, params)
            return interpret(node.name, code, line, "", via_ssh=False)
        argv = node_argv(node, self.cluster, verb, params, self._control)
        try:
            proc = subprocess.run(  # a session of its own: a terminal's Ctrl-C is not for it
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            raise NodeUnreachable(node.name, f"no answer within {timeout:g}s") from None
        except FileNotFoundError:
            raise NodeFailed(node.name, f"{argv[0]} is not installed on the head") from None
        return interpret(node.name, proc.returncode, proc.stdout, proc.stderr, via_ssh=True)

    @property
    def _control(self) -> str:
        return control_path(self._dir)

    def close(self) -> None:
        """End the shared connections (``ssh -O exit``) and their folder."""
        end_masters(self.cluster, self._dir)


def control_path(folder: str) -> str:
    return os.path.join(folder, "%C")


def end_masters(cluster: Reaching, folder: str) -> None:
    """End the shared connections kept in ``folder`` (``ssh -O exit``), then the folder."""
    for node in cluster.nodes:
        if node.ssh:
            argv = ["ssh", "-o", f"ControlPath={control_path(folder)}", "-O", "exit"]
            if cluster.ssh_config is not None:
                argv += ["-F", str(cluster.ssh_config)]
            subprocess.run(
                [*argv, "--", node.ssh],
                capture_output=True,
                timeout=30,
                check=False,
                start_new_session=True,
            )
    shutil.rmtree(folder, ignore_errors=True)


def sweep(cluster: Reaching) -> list[str]:
    """The shared connections and folders a link killed with its process left (``kill -9`` of
    a ``cluster restart``: its masters linger for ControlPersist, its folder for good), ended
    by the next link made: a folder named for a process that is gone. Returns them."""
    swept = []
    for folder in Path(tempfile.gettempdir()).glob(f"{CONTROL_PREFIX}*-*"):
        pid = folder.name.removeprefix(CONTROL_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its process lives: its link may be in use
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        end_masters(cluster, str(folder))
        swept.append(str(folder))
    return swept


def run_launcher(command: str, timeout: float) -> dict[str, Any]:
    """The launcher's start command on the head (``bash -c``), as the operator would type it:
    its exit code and the tail of what it said; :class:`NodeFailed` (the head) if it fails. In
    a process group of its own: a terminal's Ctrl-C is not for it, and a launcher that does not
    return in time is ended with everything it started."""
    proc = subprocess.Popen(
        ["bash", "-c", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # a child that left the group
            proc.communicate(timeout=5)
        proc.wait()
        raise NodeFailed("head", f"the launcher did not return within {timeout:g}s") from None
    tail = (out + err).strip().splitlines()[-5:]
    if proc.returncode != 0:
        said = tail[-1] if tail else "no output"
        raise NodeFailed("head", f"the launcher exited with code {proc.returncode}: {said}")
    return {"exit_code": proc.returncode, "said": tail}
