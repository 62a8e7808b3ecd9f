"""Which cluster set-up the nodes' engine containers show, and what it lacks (for doctor).

Read from each engine container's command line as vLLM reads it (:mod:`serve_flags`) and from
Docker's ``AutoRemove``: vLLM's native multi-node mode (``--nnodes/--node-rank/--headless``),
Ray (``ray start --head`` / ``--address``, ``--distributed-executor-backend ray``), or eugr's
launcher (``--rm`` containers idling on ``sleep infinity``, ``vllm serve`` exec'd into them).
Pure: the nodes' ``inspect`` answers in, findings out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sparkwarden.base.containers import FIGHTING
from sparkwarden.cluster.node import runs_vllm
from sparkwarden.cluster.verdict import NodeView
from sparkwarden.vllm import serve_flags
from sparkwarden.vllm.doctor_rules import Finding

Setup = Literal["native", "ray", "launcher", "unknown"]
SUBJECT = "cluster"
#: What to do when the containers show a set-up the config does not name.
FIXES: dict[str, str] = {
    "native": 'set cluster.setup = "native"',
    "ray": 'set cluster.setup = "ray"',
    "launcher": 'set cluster.setup = "launcher" and cluster.launcher = "<its start command>"',
}


def seen(engine: dict[str, Any]) -> tuple[Setup, dict[str, str], list[str]]:
    """One engine container's set-up, its vLLM flags, and every word of its command (each
    part of a shell chain: the Ray checks read ``ray start`` there)."""
    command = engine.get("command") or []
    words = serve_flags.unwrap(command)
    every = serve_flags.every_word(command)
    flags = serve_flags.read(words)
    if _ray_start(every) or flags.get("distributed-executor-backend") == "ray":
        return "ray", flags, every
    if "nnodes" in flags:
        return "native", flags, every
    if engine.get("auto_remove") and not any("vllm" in word for word in words):
        return "launcher", flags, every
    return "unknown", flags, every


def check(views: list[NodeView], configured: str) -> list[Finding]:
    """What doctor says of a cluster: the set-up seen on every node, and what is missing."""
    findings: list[Finding] = []

    def add(severity: Literal["error", "warning", "info"], message: str, fix: str) -> None:
        findings.append(Finding(severity, SUBJECT, "setup", message, fix))

    kinds: dict[str, Setup] = {}
    ranks: dict[str, dict[str, str]] = {}
    commands: dict[str, list[str]] = {}
    for view in views:
        if not view.reachable:
            add("error", f"{view.name}: not checked: {view.problem}", "reach it over SSH first")
            continue
        for engine in view.engines:
            if engine.get("status") == "missing":
                if configured != "launcher":  # a launcher's --rm containers: gone while down
                    add(
                        "error",
                        f"{view.name}: no container named {engine.get('name')}",
                        "create it",
                    )
                continue
            kind, flags, commands[view.name] = seen(engine)
            kinds[f"{view.name}/{engine.get('name')}"] = kind
            ranks[view.name] = {**flags, "role": view.role}
            policy = str(engine.get("restart_policy") or "no")
            if policy in FIGHTING:
                add(
                    "error",
                    f"{view.name}: {engine.get('name')} has Docker's restart policy {policy!r}: "
                    "a rank it starts again never rejoins the running head (vllm#32136), and "
                    "the cluster hangs behind a /health of 200 until sparkwarden restarts it all",
                    f"on {view.name}: docker update --restart=no {engine.get('name')}",
                )
    unknown = [where for where, kind in kinds.items() if kind == "unknown"]
    if unknown:
        add(
            "error",
            f"set-up not recognised on {', '.join(unknown)}: no --nnodes, no ray start, not a "
            "--rm launcher container",
            "create the engine's containers with vLLM's --nnodes/--node-rank/--headless",
        )
    found = sorted({kind for kind in kinds.values() if kind != "unknown"})
    if len(found) > 1:
        add("error", f"the nodes disagree on the set-up: {', '.join(found)}", "one set-up for all")
    if len(found) != 1 or unknown or len(ranks) < len(views):  # not one set-up seen on all
        return findings
    kind = found[0]
    add("info", f"sees the {kind} set-up on every node ({len(views)} nodes)", "-")
    if kind != configured:
        add(
            "error",
            f"cluster.setup is {configured!r} but the containers show the {kind} set-up",
            FIXES[kind],
        )
    if kind == "native":
        findings += _native(ranks, len(views))
    if kind == "ray":
        findings += _ray(ranks, commands, len(views))
    return findings


#: ``ray start`` options that take no value.
RAY_SWITCHES = frozenset({"head", "block", "disable-usage-stats", "verbose"})
#: Ray's GCS port when ``ray start --head`` names none.
RAY_PORT = "6379"


@dataclass(frozen=True)
class RayStart:
    """A ``ray start`` in a container's command: its options, and whether another command of
    the chain runs after it (``ray start --head && exec vllm serve ...``)."""

    options: dict[str, str]
    followed: bool


def _ray_start(words: list[str]) -> RayStart | None:
    """The ``ray start`` in the command's words (every part of a chain), or None."""
    for i, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] == "ray" and words[i + 1] == "start":
            options: dict[str, str] = {}
            rest = words[i + 2 :]
            j = 0
            while j < len(rest) and rest[j] not in serve_flags.CHAIN:
                key, eq, value = rest[j].lstrip("-").partition("=")
                has_value = j + 1 < len(rest) and not rest[j + 1].startswith("-")
                if (
                    not eq
                    and key not in RAY_SWITCHES
                    and has_value
                    and rest[j + 1] not in serve_flags.CHAIN
                ):
                    value, j = rest[j + 1], j + 1
                options[key] = value
                j += 1
            return RayStart(options, j < len(rest))
    return None


def _ray(
    ranks: dict[str, dict[str, str]], commands: dict[str, list[str]], nodes: int
) -> list[Finding]:
    """A Ray cluster of containers sparkwarden can start again: Ray's head and the engine in the
    head's container, a worker's ``ray start --address`` in each other's, a GPU (a Spark) per
    rank."""
    missing: list[str] = []
    head = next((n for n, f in ranks.items() if f["role"] == "head"), None)
    head_start = _ray_start(commands[head]) if head else None
    port = (head_start.options.get("port") or RAY_PORT) if head_start else RAY_PORT
    for name, flags in ranks.items():
        start = _ray_start(commands[name])
        if flags["role"] == "head":
            missing += _ray_head(name, start, flags, commands[name], nodes)
            continue
        if start is None or "address" not in start.options:
            missing.append(f"{name}: a worker whose container does not run ray start --address")
            continue
        if "head" in start.options:
            missing.append(f"{name}: a worker that starts a Ray head of its own (--head)")
        if "block" not in start.options and not start.followed:
            missing.append(
                f"{name}: ray start without --block returns at once, and its container exits"
            )
        joins = start.options["address"].rpartition(":")[2]
        if joins != port:
            missing.append(f"{name}: joins port {joins}, but the head's GCS listens on {port}")
    return _findings(
        "ray",
        missing,
        f"Ray set-up complete on {nodes} nodes",
        "Ray set-up incomplete: ",
        "the head's container: ray start --head --port=6379 && exec vllm serve ... "
        "--distributed-executor-backend ray -tp N; each worker's: ray start --block "
        '--address=HEAD:6379 (or setup = "launcher" with the script that starts them)',
    )


def _ray_head(
    name: str, start: RayStart | None, flags: dict[str, str], words: list[str], nodes: int
) -> list[str]:
    """What the head's container lacks to be Ray's head and the engine in one."""
    missing: list[str] = []
    if start is None or "head" not in start.options:
        missing.append(f"{name}: the head's container does not run ray start --head")
    elif "block" in start.options and start.followed:
        missing.append(f"{name}: ray start --head --block never returns: vllm serve never runs")
    if not any(runs_vllm(" ".join(part)) for part in serve_flags.chain(words)):
        missing.append(
            f"{name}: vllm serve is not in the head container's command (exec'd into it?): "
            "starting the container again would not start the engine"
        )
        return missing
    try:
        world = int(flags.get("tensor-parallel-size", "1")) * int(
            flags.get("pipeline-parallel-size", "1")
        )
    except ValueError:
        return [
            *missing,
            f"{name}: --tensor-parallel-size or --pipeline-parallel-size is not a number",
        ]
    if world > 1 and flags.get("distributed-executor-backend") != "ray":
        missing.append(
            f"{name}: vllm serve without --distributed-executor-backend ray: vLLM (0.12 on) "
            f"refuses a world of {world} GPUs on a node of one"
        )
    if world != nodes:
        missing.append(
            f"{name}: the engine asks {world} GPU(s) (tensor x pipeline parallel), the "
            f"cluster has {nodes} nodes of one GPU: its placement group never fits"
            if world > nodes
            else f"{name}: the engine uses {world} of the {nodes} nodes' GPUs"
        )
    return missing


def _native(ranks: dict[str, dict[str, str]], nodes: int) -> list[Finding]:
    """vLLM's own multi-node mode: one rank per node, rank 0 serving on the head."""
    missing: list[str] = []
    seen_ranks: dict[str, str] = {}
    for name, flags in ranks.items():
        head = flags["role"] == "head"
        if flags.get("nnodes") != str(nodes):
            missing.append(f"{name}: --nnodes {flags.get('nnodes')}, but {nodes} nodes configured")
        rank = flags.get("node-rank", "0")
        if rank in seen_ranks:
            missing.append(f"{name}: --node-rank {rank} also on {seen_ranks[rank]}")
        seen_ranks[rank] = name
        if head and (rank != "0" or "headless" in flags):
            missing.append(f"{name}: the head must be rank 0 and serve (no --headless)")
        if not head and "headless" not in flags:
            missing.append(f"{name}: a worker without --headless")
        if not head and "master-addr" not in flags:
            missing.append(f"{name}: a worker without --master-addr (the head's address)")
    said = ", ".join(f"{n} rank {f.get('node-rank', '0')}" for n, f in ranks.items())
    return _findings(
        "ranks",
        missing,
        f"native ranks complete: {said}",
        "native set-up incomplete: ",
        "recreate the engine's containers with vLLM's --nnodes N --node-rank R "
        "--master-addr HEAD, --headless on the workers",
    )


def _findings(
    check: str, missing: list[str], complete: str, incomplete: str, fix: str
) -> list[Finding]:
    """One set-up's verdict: complete (info), or every missing piece in one error."""
    if not missing:
        return [Finding("info", SUBJECT, check, complete, "-")]
    return [Finding("error", SUBJECT, check, incomplete + "; ".join(missing), fix)]
