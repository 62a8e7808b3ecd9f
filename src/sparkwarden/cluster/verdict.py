"""Pure judgements over what the nodes answered: may a restart begin, and how is the cluster.

A cluster is one engine: a worker's engine container that died is a crash of the whole, even
while the head's ``/health`` still says 200 (a lost rank shows only as a stuck collective); a
head that died leaves headless ranks that never exit nor rejoin; a node that did not answer is
reported as unreachable, never guessed about.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sparkwarden.base.containers import ExitWatch

#: What ``cluster status`` can say of the whole: ``stale``, a rank started again since the
#: cluster last served (it cannot have joined the running head); ``stopped``, a worker's engine
#: an operator stopped by hand (never overridden).
ClusterState = Literal[
    "serving", "crashed", "stale", "stopped", "head-down", "down", "unhealthy", "unknown"
]

#: Which start of each engine container the cluster served from: node -> container -> StartedAt.
Starts = dict[str, dict[str, str | None]]


@dataclass(frozen=True)
class Proof:
    """What the head's journal knows of the cluster it judges (nothing, by default)."""

    #: the starts the cluster last served from (a cluster run that ended ok, or the first look
    #: that saw it serving); None: none recorded yet
    starts: Starts | None = None
    #: the cluster runs' spans (start, end): a ``docker stop`` within one was the run's own
    runs: tuple[tuple[float, float], ...] = ()
    #: how long after its SIGTERM a container's exit still belongs to that stop
    stop_window: float = 25.0


@dataclass(frozen=True)
class NodeView:
    """One node as the head saw it: its ``node inspect`` answer, or why there was none."""

    name: str
    role: Literal["head", "worker"]
    answer: dict[str, Any] | None
    #: why there is no answer: "unreachable: ..." or what its sparkwarden said
    problem: str = ""

    @property
    def reachable(self) -> bool:
        return self.answer is not None

    @property
    def engines(self) -> list[dict[str, Any]]:
        return list((self.answer or {}).get("engines", []))

    @property
    def engine_up(self) -> bool:
        return any(e.get("status") == "running" for e in self.engines)


@dataclass(frozen=True)
class ClusterVerdict:
    state: ClusterState
    summary: str
    nodes: dict[str, str] = field(default_factory=dict)


def preflight_problems(views: list[NodeView], missing_ok: bool = False) -> list[str]:
    """Every reason not to touch the cluster; empty means a restart may begin. ``missing_ok``:
    the launcher set-up, whose ``--rm`` containers exist only while it runs."""
    problems: list[str] = []
    images: dict[str, set[str]] = {}
    for view in views:
        if view.answer is None:
            problems.append(f"{view.name}: {view.problem}")
            continue
        if not view.answer.get("version"):
            problems.append(f"{view.name}: its sparkwarden did not say its version")
        for engine in view.engines:
            if engine.get("status") == "missing":
                if missing_ok:
                    continue
                problems.append(f"{view.name}: no container named {engine.get('name')}")
            elif engine.get("image"):
                images.setdefault(str(engine["image"]), set()).add(view.name)
        memory = view.answer.get("memory") or {}
        if not isinstance(memory.get("available_gib"), int | float):
            problems.append(f"{view.name}: its memory could not be read")
    versions = {str(v.answer.get("version")) for v in views if v.answer and v.answer.get("version")}
    if len(versions) > 1:
        problems.append(
            "sparkwarden's version differs between nodes (install the same one everywhere): "
            + "; ".join(
                f"{v.answer.get('version')} on {v.name}" for v in views if v.answer is not None
            )
        )
    if len(images) > 1:
        problems.append(
            "the engine's image differs between nodes: "
            + "; ".join(
                f"{image[:19]} on {', '.join(sorted(nodes))}"
                for image, nodes in sorted(images.items())
            )
        )
    return problems


def starts_of(views: list[NodeView]) -> Starts:
    """Which start of each running engine container every reachable node has now."""
    return {
        v.name: {str(e.get("name")): e.get("started_at") for e in v.engines if _running(e)}
        for v in views
        if v.reachable
    }


def stopped_by_hand(view: NodeView, proof: Proof) -> list[str]:
    """The engine containers on ``view``'s node that an operator stopped: a ``docker stop``'s
    SIGTERM, the exit within the stop window after it, and no cluster run going then."""
    names = []
    for engine in view.engines:
        stopped = engine.get("stopped") or {}
        term, died = stopped.get("term_at"), stopped.get("died_at")
        if not isinstance(term, int | float) or not isinstance(died, int | float):
            continue
        ours = any(start <= term <= end for start, end in proof.runs)
        if not ours and ExitWatch(term_at=term).classify_die(died, proof.stop_window) != "crash":
            names.append(str(engine.get("name")))
    return names


def started_behind(views: list[NodeView], proof: Proof) -> list[str]:
    """The ranks started again since the cluster last served (Docker's restart policy, an
    operator's ``docker restart`` or start): a new rank never rejoins a head that runs on
    (vllm#32136), nor does a new head find its old ranks. Every rank new is a cluster started
    anew as a whole (by hand): not stale. Without a proven start, Docker's own count says it."""
    now = starts_of(views)
    running = [(node, name, at) for node, engines in now.items() for name, at in engines.items()]
    if proof.starts is None:
        return [
            f"{v.name}: {e.get('name')} was started again by Docker's restart policy "
            f"(RestartCount {e.get('restart_count')})"
            for v in views
            if v.reachable and v.role == "worker"
            for e in v.engines
            if _running(e) and int(e.get("restart_count") or 0) > 0
        ]
    known = [(n, c, at) for n, c, at in running if c in proof.starts.get(n, {})]
    moved = [(n, c, at) for n, c, at in known if proof.starts[n][c] != at]
    if not moved or len(moved) == len(known):
        return []
    return [
        f"{node}: {name} started again at {at}, after the cluster's start"
        for node, name, at in moved
    ]


def judge(
    views: list[NodeView], head_health: str | None, proof: Proof | None = None
) -> ClusterVerdict:
    """The cluster's state from every node's answer and the head's ``/health`` ("up", "dead",
    "loading", "no-answer", or None when not asked); ``proof``: what the head's journal knows
    (which start the cluster served from, its runs)."""
    proof = proof or Proof()
    lines = {view.name: describe(view) for view in views}
    unreachable = [v.name for v in views if not v.reachable]
    head = next(v for v in views if v.role == "head")
    workers = [v for v in views if v.role == "worker"]
    dead_workers = [v.name for v in workers if v.reachable and not v.engine_up]
    live_workers = [v.name for v in workers if v.reachable and v.engine_up]
    by_hand = {v.name: stopped_by_hand(v, proof) for v in workers if v.name in dead_workers}
    if any(by_hand.values()):
        named = "; ".join(
            f"{name} on {node} (on {node}: docker start {name})"
            for node, names in by_hand.items()
            for name in names
        )
        return ClusterVerdict(
            "stopped",
            f"stopped by hand: {named}, left alone; once started again the cluster is restarted "
            "as one (a new rank cannot join the running head), or: sparkwarden cluster restart",
            lines,
        )
    if dead_workers and head.reachable and head.engine_up:
        said = f" though the head's /health says {head_health}" if head_health == "up" else ""
        return ClusterVerdict(
            "crashed",
            f"the engine on {', '.join(dead_workers)} is down{said}: the cluster cannot serve "
            "(a lost rank hangs every request); restart the cluster as one",
            lines,
        )
    if head.reachable and not head.engine_up and live_workers:
        return ClusterVerdict(
            "head-down",
            f"the head's engine is down; the ranks on {', '.join(live_workers)} stay up and will "
            "not rejoin a new head: restart the cluster as one",
            lines,
        )
    if head.reachable and head.engine_up and (behind := started_behind(views, proof)):
        return ClusterVerdict(
            "stale",
            f"{'; '.join(behind)}: a rank started behind the head's back never joins it (every "
            "request hangs though /health may say 200); restart the cluster as one",
            lines,
        )
    if unreachable:
        return ClusterVerdict(
            "unknown", f"no answer from {', '.join(unreachable)}: state unknown", lines
        )
    if not head.engine_up:
        return ClusterVerdict("down", "no engine runs on any node", lines)
    if head_health not in (None, "up"):
        return ClusterVerdict(
            "unhealthy", f"every rank runs but the head's /health is {head_health}", lines
        )
    return ClusterVerdict("serving", f"all {len(views)} nodes run their engine", lines)


def node_problems(views: list[NodeView], proof: Proof | None = None) -> list[str]:
    """What makes ``sparkwarden status`` on the head exit 1: a node that did not answer, a
    worker whose engine container is not running (the head's own engine is status's ``llm``;
    one stopped by hand says so, with what ends the wait), or a rank started behind the head's
    back."""
    proof = proof or Proof()
    problems = [f"{v.name}: {v.problem}" for v in views if not v.reachable]
    for v in views:
        if not v.reachable or v.role != "worker":
            continue
        by_hand = stopped_by_hand(v, proof)
        for e in v.engines:
            if e.get("status") == "running":
                continue
            name = e.get("name")
            said = f"{v.name}: {name} is {e.get('status')}"
            if name in by_hand:
                said += f", stopped by hand (on {v.name}: docker start {name})"
            problems.append(said)
    return problems + started_behind(views, proof)


def _running(engine: dict[str, Any]) -> bool:
    return engine.get("status") == "running"


def as_json(
    views: list[NodeView], head_health: str | None, proof: Proof | None = None
) -> dict[str, Any]:
    """The cluster as ``cluster status --json`` and ``status --json``'s ``cluster`` show it."""
    verdict = judge(views, head_health, proof)
    return {
        "state": verdict.state,
        "summary": verdict.summary,
        "head_health": head_health,
        "problems": node_problems(views, proof),
        "nodes": {
            v.name: {
                "role": v.role,
                "reachable": v.reachable,
                "answer": v.answer,
                "problem": v.problem,
            }
            for v in views
        },
    }


def from_json(nodes: dict[str, Any]) -> list[NodeView]:
    """The views back from :func:`as_json`'s ``nodes`` (status renders its text from them)."""
    return [
        NodeView(name, n.get("role", "worker"), n.get("answer"), str(n.get("problem") or ""))
        for name, n in nodes.items()
    ]


def describe(view: NodeView) -> str:
    """One node in words: its engine containers' state and memory, or why it did not answer."""
    if view.answer is None:
        return view.problem or "unreachable"
    parts = [f"{e.get('name')} {e.get('status')}" for e in view.engines]
    memory = view.answer.get("memory") or {}
    if isinstance(memory.get("available_gib"), int | float):
        parts.append(
            f"{memory['available_gib']:.1f}/{memory.get('total_gib', 0):.1f} GiB available"
        )
    return ", ".join(parts)
