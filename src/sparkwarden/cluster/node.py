"""What ``sparkwarden node VERB`` does on one node: that host's own steps, for the head.

Each verb acts on this host's Docker and /proc only and returns its figures as one dict (the
JSON line the head reads); the head decides the order, this side only does and measures.
Each call is a fresh process on a worker, started over SSH for every step: a verb imports only
what it uses (``drop`` no Docker client, the others no logger).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Literal

from sparkwarden.adapters.host import Host
from sparkwarden.base.containers import (
    UP_STATUSES,
    ContainerState,
    ExitWatch,
    command_line,
    voice_to_quiet,
)
from sparkwarden.base.errors import NoSuchContainer, SparkwardenError, StepFailed
from sparkwarden.base.version import version

if TYPE_CHECKING:
    from sparkwarden.adapters.docker_engine import DockerEngine

#: A running engine container whose vLLM process is gone (``engine_process``): not up.
IDLE = "idle"
#: vLLM's program, as a process's command line shows it (``vllm serve``, ``-m vllm...``).
ENGINE_PROGRAM = "vllm"
#: A Ray node's own process (``.../ray/core/src/ray/raylet/raylet ...``).
RAY_NODE_PROGRAM = "raylet"


def inspect(
    docker: DockerEngine,
    host: Host,
    engines: list[str],
    voice: list[str],
    engine_process: bool = False,
) -> dict[str, Any]:
    """Who this node is, its engine containers (image ID included), voice, and memory.
    ``engine_process``: a running engine container with no vLLM process in it is ``idle`` (the
    launcher's containers idle on ``sleep infinity``: its rank, exec'd into one, may be dead)."""
    memory = host.memory()
    return {
        "host": socket.gethostname(),
        "version": version(),
        "engines": [engine_view(docker, name, engine_process) for name in engines],
        "voice": {name: status_of(docker, name) for name in voice},
        "memory": {
            "available_gib": round(memory.available_gib, 2),
            "total_gib": round(memory.total_gib, 2),
        },
    }


def engine_view(docker: DockerEngine, name: str, engine_process: bool = False) -> dict[str, Any]:
    try:
        attrs = docker.attrs(name)
    except NoSuchContainer:
        return {"name": name, "status": "missing"}
    state = docker.inspect(name)
    status, unread = state.status, None
    if engine_process and status == "running":
        try:
            if not any(runs_engine(line) for line in docker.processes(name)):
                status = IDLE
        except SparkwardenError as exc:  # stopped or paused since, or no ps: not called idle
            unread = str(exc)
    return {
        "name": name,
        "id": state.id,
        "image": str(attrs.get("Image", "")),
        "status": status,
        "exit_code": state.exit_code,
        "oom_killed": state.oom_killed,
        "started_at": state.started_at.isoformat() if state.started_at else None,
        # a rank Docker's policy started again (the head's rendezvous never sees it), and the
        # policy that would: the head tells a rank that cannot have joined by its start
        "restart_count": state.restart_count,
        "restart_policy": state.restart_policy,
        **({"stopped": stopped_by(docker, state)} if status in ("exited", "created") else {}),
        # what doctor reads the set-up from (vLLM's rank flags, ray start, a --rm launcher)
        "command": command_line(attrs),
        "auto_remove": bool((attrs.get("HostConfig") or {}).get("AutoRemove")),
        **({"processes_unread": unread} if unread else {}),
    }


def stopped_by(docker: DockerEngine, state: ContainerState) -> dict[str, Any]:
    """How a stopped engine container went down, told by this node's own Docker events since
    its last start (as the head tells its own): ``term_at``, the SIGTERM of a ``docker stop``
    (an operator's, or a run's: the head knows its runs), and ``died_at``. Events dockerd no
    longer keeps, or could not give, leave both None: a crash, as an unexplained exit is."""
    if state.started_at is None or state.finished_at is None:
        return {"term_at": None, "died_at": None}
    since, until = state.started_at.timestamp(), state.finished_at.timestamp() + 1
    try:
        events = docker.events(state.id, since, until)
    except SparkwardenError as exc:
        return {"term_at": None, "died_at": None, "events_unread": str(exc)}
    watch, died_at = ExitWatch(), None
    for event in events:
        watch = watch.on_event(event.action, event.signal, event.t)
        died_at = event.t if event.action == "die" else died_at
    return {"term_at": watch.term_at, "died_at": died_at}


def runs_engine(command: str) -> bool:
    """Whether a process in an engine container is a part of the engine: vLLM (see
    :func:`runs_vllm`), or Ray's ``raylet`` (a worker node of a Ray cluster that a launcher
    started: its vLLM ranks are Ray actors, the raylet is what lives as long as the node)."""
    words = command.split()
    return runs_vllm(command) or (bool(words) and words[0].rsplit("/", 1)[-1] == RAY_NODE_PROGRAM)


def runs_vllm(command: str) -> bool:
    """Whether a process's command line is vLLM's: the ``vllm`` program (``vllm serve``, or
    ``python .../bin/vllm serve``) or ``python -m vllm...``; a path or a log file that merely
    names vllm (``tail -f /logs/vllm.log``, ``/opt/vllm-env/bin/python``) is not."""
    words = command.split()
    if any(a == "-m" and b.split(".")[0] == ENGINE_PROGRAM for a, b in pairwise(words)):
        return True
    # the program, or the script its interpreter runs (past the interpreter's own options)
    script = next((word for word in words[1:] if not word.startswith("-")), "")
    return ENGINE_PROGRAM in (
        words[0].rsplit("/", 1)[-1] if words else "",
        script.rsplit("/", 1)[-1],
    )


def _state(docker: DockerEngine, name: str) -> ContainerState | None:
    try:
        return docker.inspect(name)
    except NoSuchContainer:
        return None


def status_of(docker: DockerEngine, name: str) -> str:
    try:
        return docker.inspect(name).status
    except NoSuchContainer:
        return "missing"


def pause(docker: DockerEngine, voice: list[str]) -> dict[str, Any]:
    """Pause the running voice containers; the head keeps the list to resume exactly those."""
    to_quiet, left_alone = voice_to_quiet({name: docker.inspect(name).status for name in voice})
    paused: list[str] = []
    for name in to_quiet:
        docker.pause(name)
        paused.append(name)
    return {"paused": paused, "left_alone": left_alone}


def resume(docker: DockerEngine, paused: list[str]) -> dict[str, Any]:
    resumed: list[str] = []
    already: dict[str, str] = {}
    for name in paused:
        status = status_of(docker, name)
        if status == "paused":
            docker.unpause(name)
            resumed.append(name)
        else:
            already[name] = status
    return {"resumed": resumed, "already": already}


def stop(
    docker: DockerEngine,
    engines: list[str],
    timeout: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """``docker stop`` each engine container that is up; then every one must be down (a
    launcher's ``--rm`` container is gone: "missing"). ``now``: each one's state read last, after
    every stop on this node, which the head's ``confirm_stopped`` takes as its look here."""
    stopped: dict[str, Any] = {}
    for name in engines:
        state = _state(docker, name)
        if state is None or not state.up:
            was = state.status if state else "missing"
            stopped[name] = {"was": was, "exit_code": state.exit_code if state else None}
            continue
        began = monotonic()
        with contextlib.suppress(NoSuchContainer):  # a --rm container removed as it stopped
            docker.stop(name, timeout)
        after = _state(docker, name)
        stopped[name] = {
            "seconds": round(monotonic() - began, 3),
            "exit_code": after.exit_code if after else None,
            "status": after.status if after else "missing",
        }
    now = {name: status_of(docker, name) for name in engines}
    still = [name for name, status in now.items() if status in UP_STATUSES]
    if still:
        raise StepFailed("stop", f"still up after docker stop: {', '.join(still)}", stopped)
    return {"stopped": stopped, "now": now}


def drop(
    host: Host,
    gate_gib: float,
    wait: float,
    interval: float,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Sync and drop caches until this node's memory clears the gate (StepFailed if never)."""
    from sparkwarden.restart.memory_gate import drop_until  # it logs: structlog, drop only

    summary, figures = drop_until(host, gate_gib, wait, interval, monotonic, sleep, step="drop")
    return {"summary": summary, **figures}


def start(docker: DockerEngine, engines: list[str]) -> dict[str, Any]:
    """``docker start`` the same containers; their IDs go back to the head to compare."""
    started: dict[str, Any] = {}
    for name in engines:
        docker.start(name)
        after = docker.inspect(name)
        started[name] = {
            "id": after.id,
            "status": after.status,
            "started_at": after.started_at.isoformat() if after.started_at else None,
        }
    return {"started": started}


Verb = Literal["inspect", "pause", "resume", "stop", "drop", "start", "serving", "turn"]
VERBS: tuple[Verb, ...] = (
    "inspect",
    "pause",
    "resume",
    "stop",
    "drop",
    "start",
    "serving",  # a replica's peer: whether its own engine serves (its own config)
    "turn",  # a replica set's first node: the turn, in its journal (see restart/turn.py)
)


@dataclass(frozen=True)
class Params:
    """What the head tells a node's verb: the one shape for the command line and in-process."""

    engine: list[str] = field(default_factory=list)
    voice: list[str] = field(default_factory=list)
    timeout: float = 120.0
    gate_gib: float = 60.0
    wait: float = 180.0
    interval: float = 5.0
    #: inspect: a running engine container counts only with a vLLM process in it (launcher)
    engine_process: bool = False
    #: turn: take, renew, release or read; for whom; for how long (seconds, the first node's
    #: clock decides when it is over)
    action: str = ""
    holder: str = ""
    ttl: float = 0.0
    #: serving, turn: this node's own config (not sent: a node reads its own default)
    config: str | None = None

    def argv(self) -> list[str]:
        """As ``sparkwarden node VERB`` takes it."""
        out = [arg for name in self.engine for arg in ("--engine", name)]
        out += ["--engine-process"] if self.engine_process else []
        out += [arg for name in self.voice for arg in ("--voice", name)]
        out += ["--timeout", f"{self.timeout:g}", "--gate-gib", f"{self.gate_gib:g}"]
        if self.action:
            out += ["--action", self.action, "--holder", self.holder, "--ttl", f"{self.ttl:g}"]
        return [*out, "--wait", f"{self.wait:g}", "--interval", f"{self.interval:g}"]


def perform(verb: Verb, params: Params) -> dict[str, Any]:
    """Run one verb on this host. ``drop`` needs no Docker: it neither imports nor opens a
    client (the Docker SDK takes about 0.2 s to import)."""
    if verb in ("serving", "turn"):  # a replica's: read from this node's own config
        from sparkwarden.cluster import replica_verbs

        return replica_verbs.perform(verb, params.action, params.holder, params.ttl, params.config)
    host = Host()
    if verb == "drop":
        return drop(host, params.gate_gib, params.wait, params.interval)
    from sparkwarden.adapters.docker_engine import DockerEngine

    docker = DockerEngine()
    try:
        if verb == "inspect":
            return inspect(docker, host, params.engine, params.voice, params.engine_process)
        if verb == "pause":
            return pause(docker, params.voice)
        if verb == "resume":
            return resume(docker, params.voice)
        if verb == "stop":
            return stop(docker, params.engine, params.timeout)
        return start(docker, params.engine)
    finally:
        docker.close()


def answer_line(verb: Verb, params: Params) -> tuple[int, str]:
    """(exit code, the one JSON line the head reads): 0 and ``ok: true``, or 1 and the error
    with the step's figures."""
    try:
        answer = perform(verb, params)
    except StepFailed as exc:
        return 1, json.dumps({"ok": False, "error": str(exc), **exc.detail}, default=str)
    except SparkwardenError as exc:
        return 1, json.dumps({"ok": False, "error": str(exc)})
    return 0, json.dumps({"ok": True, **answer}, default=str)
