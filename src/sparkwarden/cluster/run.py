"""A cluster's run: several Sparks serving one engine (vLLM ``--nnodes/--node-rank/--headless``,
a Ray cluster, or eugr's launcher), restarted as one unit from the head, never one rank. Its
steps' bodies are here; their order is :mod:`sparkwarden.restart.sequence`'s, the one sequence a
lone host's run takes too (the cluster's 13 steps: :mod:`sparkwarden.restart.step_names`).

Each node's step runs on it over SSH (``sparkwarden node``, :mod:`sparkwarden.cluster.node`),
in parallel where the order allows, journaled with every node's figures. A Ray cluster starts
the other way round (``RAY_STEPS``): the head's container first, whose ``ray start --head`` is
the cluster's GCS, then the workers', whose ``ray start --address`` joins it; the engine in the
head's container waits for a node per rank (vLLM's placement group, up to its 30 min
``PG_WAIT_TIMEOUT``). A worker's raylet never joins a new head, so there too every node is
stopped and started. The launcher set-up's own command makes the starts (workers first).

A node that does not answer in the middle of a run fails the step that needed it, naming it;
the run then never calls that node again (its voice left paused is named, and resumed by the
next cluster run), and since every start comes after every node's memory gate, nothing starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkwarden.base import logs
from sparkwarden.base.containers import UP_STATUSES
from sparkwarden.base.errors import SparkwardenError, StepFailed, scrub
from sparkwarden.cluster.link import Link, NodeFailed, NodeUnreachable, run_launcher
from sparkwarden.cluster.looks import CALL_MARGIN, cluster_of, fan_out, inspect_all
from sparkwarden.cluster.node import Params, Verb
from sparkwarden.cluster.verdict import NodeView, preflight_problems
from sparkwarden.config.schema import ClusterNode, Config
from sparkwarden.restart import sequence
from sparkwarden.restart.journal import Journal, Plan, RunRecord
from sparkwarden.restart.parts import Outcome, StepObserver
from sparkwarden.restart.probes import Loading, Waits, prove_chat, prove_gateway, wait_healthy
from sparkwarden.restart.recorder import Done, Recorder, Step
from sparkwarden.restart.step_names import cluster_steps
from sparkwarden.vllm.client import VllmClient

log = logs.get("sparkwarden.cluster")


@dataclass
class ClusterParts:
    """What a cluster run drives: the link to the nodes, the head's engine, the journal."""

    link: Link
    vllm: VllmClient
    journal: Journal
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    #: The launcher set-up's start: (command, timeout) -> its figures.
    launch: Callable[[str, float], dict[str, Any]] = run_launcher
    #: Called once a step has acted, before it is recorded (tests: see ``base/faults.py``).
    after_action: Callable[[str], None] = lambda _name: None
    #: True when sparkwarden must stop: the wait for the head's boot ends (voice resumed).
    should_abort: Callable[[], bool] = lambda: False
    #: The users' path (``[gateway]``): proven once the head answers and voice is back.
    gateway: VllmClient | None = None


def carried(plan: Plan) -> Plan:
    """What a cluster run wrote in its plan about its stops and starts, before or as it acted:
    a run that proves a cut run's boot carries them, so that a proving run cut short is proven
    again."""
    marks: Plan = {}
    for sent in ("stop_head_sent", "stop_workers_sent"):
        if sent in plan:
            marks[sent] = plan[sent]
    for at in ("llm_stopped_at", "llm_started_at"):
        if at in plan:
            marks[at] = plan[at]
    if "cluster_started" in plan:
        marks["cluster_started"] = plan["cluster_started"]
    return marks


@dataclass(frozen=True)
class Proving:
    """A boot a cut run started (and handed over): why it is proven rather than restarted, and
    the cut run's marks (:func:`carried`)."""

    why: str
    marks: Plan


def plan(config: Config, views: list[NodeView]) -> list[tuple[str, str]]:
    """What :func:`restart_cluster` would do now, step by step, from each node's answer to a
    look (``views``: :func:`sparkwarden.cluster.looks.inspect_all`), touching nothing."""
    cluster, llm, mem = cluster_of(config), config.llm, config.memory
    head, workers = cluster.nodes[0], cluster.nodes[1:]
    problems = preflight_problems(views, cluster.containers_launched)
    available = ", ".join(
        f"{v.name} {v.answer['memory']['available_gib']:.1f} GiB" for v in views if v.answer
    )
    ids = {v.name: {e.get("name"): str(e.get("id"))[:12] for e in v.engines} for v in views}

    def engines(nodes: list[ClusterNode]) -> str:
        return "; ".join(
            f"{n.name}: "
            + ", ".join(f"{e} (id {ids.get(n.name, {}).get(e, '?')})" for e in n.engine)
            for n in nodes
        )

    def voice(verb: str) -> str:
        said = [f"{n.name}: {', '.join(n.voice)}" for n in cluster.nodes if n.voice]
        return f"{verb} " + "; ".join(said) if said else "nothing (no voice configured)"

    starts = {
        "start_workers": f"docker start on every worker, in parallel: {engines(workers)}",
        "start_head": f"docker start on the head: {engines([head])}",
    }
    if cluster.containers_launched:
        starts = {
            "start_workers": f"the launcher: {cluster.launcher}",
            "start_head": "every node's engine containers run (the launcher's)",
        }
    said = {
        "preflight": "every node answers over SSH with its engine's image: "
        + ("; ".join(problems) if problems else f"ok now on {len(views)} nodes"),
        "pause_voice": voice("pause"),
        "stop_head": f"docker stop with a {llm.stop_timeout:g}s timeout: {engines([head])}",
        "stop_workers": f"docker stop on every worker, in parallel: {engines(workers)}",
        "confirm_stopped": f"no engine container up on any of {len(cluster.nodes)} nodes",
        "drop_caches": f"sync + drop caches on every node until each has >= "
        f"{mem.start_min_available_gib:g} GiB available (now {available or 'unknown'}), for "
        f"up to {mem.start_wait:g}s",
        **starts,
        "workers_running": "every worker's engine container still running",
        "resume_voice": voice("resume"),
        **sequence.proving_plan(config),
    }
    return [(name, said[name]) for name in cluster_steps(cluster.setup)]


def left_paused(runs: list[RunRecord]) -> dict[str, list[str]]:
    """Voice that cluster runs cut short (still ``running``, or found ``interrupted``) may have
    left paused, per node, from the newest run back to the last cluster run that ended (it
    resumed its own, but on the nodes it lost: its ``cluster_voice_left``). ``runs``: newest
    first."""
    left: dict[str, list[str]] = {}
    for record in runs:
        if "cluster" not in record.plan:
            continue
        if record.result not in ("running", "interrupted"):
            # it resumed its own, but for what it could not reach
            for node, names in dict(record.plan.get("cluster_voice_left") or {}).items():
                left[node] = sorted({*left.get(node, []), *names})
            break
        for node, names in dict(record.plan.get("cluster_voice") or {}).items():
            left[node] = sorted({*left.get(node, []), *names})
    return left


def booted_by(views: list[NodeView], started: dict[str, dict[str, Any]]) -> bool:
    """Whether every engine container runs the start a run recorded (``cluster_started``): the
    same ``StartedAt`` on every node, none started since by someone else."""
    now = {v.name: {e.get("name"): e.get("started_at") for e in v.engines} for v in views}
    return (
        bool(started)
        and all(
            name in now.get(node, {}) and now[node][name] == at
            for node, engines in started.items()
            for name, at in engines.items()
        )
        and all(v.reachable for v in views)
    )


def resume_left(
    config: Config, link: Link, left: dict[str, list[str]]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Resume, on each node, the voice cut cluster runs left paused (``left``, from
    :func:`left_paused`): (answers, failures by node)."""
    cluster = cluster_of(config)
    by_name = {node.name: node for node in cluster.nodes}

    def resume(node: ClusterNode) -> dict[str, Any]:
        bound = config.docker.timeout * len(left[node.name])
        params = Params(voice=left[node.name])
        return link.call(node, "resume", params, bound + cluster.connect_timeout + CALL_MARGIN)

    answers, failures = fan_out([by_name[n] for n in left if n in by_name and left[n]], resume)
    for name in left:  # renamed or removed from [cluster] since: said, never dropped silently
        if name not in by_name and left[name]:
            failures[name] = f"no node named {name} in [cluster] now: resume its voice by hand"
    return answers, failures


def restart_cluster(
    config: Config,
    reason: str,
    parts: ClusterParts,
    observer: StepObserver | None = None,
    adopt: dict[str, list[str]] | None = None,
    prove: Proving | None = None,
) -> Outcome:
    """Run the whole cluster sequence once (:func:`sparkwarden.restart.sequence.run`). The
    caller holds the run lock; ``adopt``: voice an interrupted cluster run may have left
    paused, per node (see :func:`left_paused`): resumed at the end like this run's own.
    ``prove``: the boot a cut run started and handed over (why): only the preflight, then from
    ``wait_health`` on; the steps between are not taken."""
    return sequence.run(ClusterRun(config, parts, adopt, prove), parts.journal, reason, observer)


class ClusterRun:
    """One cluster run's nodes and its steps' bodies, each journaled with every node's
    figures."""

    def __init__(
        self,
        config: Config,
        parts: ClusterParts,
        adopt: dict[str, list[str]] | None = None,
        prove: Proving | None = None,
    ) -> None:
        self.config, self.parts, self.id = config, parts, 0
        self.cluster = cluster_of(config)
        self.head: ClusterNode = self.cluster.nodes[0]
        self.workers: list[ClusterNode] = list(self.cluster.nodes[1:])
        self.order = cluster_steps(self.cluster.setup)
        self.prove = prove
        self.record: Recorder
        self.views: list[NodeView] = []
        self.ids: dict[str, dict[str, str | None]] = {}  # node -> engine name -> container ID
        #: voice paused, per node: what it adopted, then what it pauses
        self.paused = {node: list(names) for node, names in (adopt or {}).items() if names}
        #: nodes that did not answer in this run, and why: never called again in it
        self.lost: dict[str, str] = {}
        #: the nodes a step failed on
        self.blamed: set[str] = set()
        #: each node's answer to its stop (its engines' state read after it: ``now``)
        self.stopped: dict[str, dict[str, Any]] = {}
        #: each engine container's StartedAt after this run's start, by node
        self.started: dict[str, dict[str, Any]] = {}
        #: what a step not taken says in the journal
        self.skip_why = "not reached: an earlier step failed"

    def open(self, run_id: int, observer: StepObserver) -> None:
        self.id = run_id
        self.record = Recorder(
            self.parts.journal, run_id, self.order, observer, self.parts.after_action
        )

    def opening(self) -> Plan:
        """The cut run's marks it proves, the nodes, and the voice it adopted."""
        facts: Plan = {**self.prove.marks} if self.prove else {}
        facts["cluster"] = [n.name for n in self.cluster.nodes]
        facts["cluster_voice"] = self.paused
        return facts

    def leaving(self) -> list[Step]:
        return []  # a cluster is one engine: no peer to send its users to

    def restarts(self) -> bool:
        if self.prove is not None:
            self.skip_why = f"not taken: {self.prove.why}"
            return False
        if self.parts.should_abort():  # stopping before anything is touched: touch nothing
            raise SparkwardenError("sparkwarden is stopping: nothing was touched")
        return True

    def stops(self) -> list[Step]:
        """The head's engine first (its ranks would otherwise wait on it), then every
        worker's, then none is up anywhere."""
        return [
            ("stop_head", lambda: self.stop([self.head])),
            ("stop_workers", lambda: self.stop(self.workers)),
            ("confirm_stopped", self.confirm_stopped),
        ]

    def starts(self) -> list[Step]:
        """The same containers in the set-up's order: the workers' ranks before the head that
        waits for them; Ray's head (the GCS) before the workers that join it; the launcher's
        own command."""
        if self.cluster.containers_launched:
            return [("start_workers", self.launch), ("start_head", self.launched)]
        steps = {
            "start_workers": lambda: self.start(self.workers),
            "start_head": lambda: self.start([self.head]),
        }
        return [(name, steps[name]) for name in self.order if name in steps]

    def checks(self) -> list[Step]:
        return [("workers_running", self.workers_running)]

    def engine(self) -> tuple[str | None, str | None]:
        engine = self.head.engine[0]
        return engine, self.ids.get(self.head.name, {}).get(engine)

    def failed_nodes(self) -> tuple[str, ...]:
        unreachable = {v.name for v in self.views if not v.reachable}
        return tuple(sorted({*self.blamed, *self.lost, *unreachable}))

    def step(self, name: str, body: Callable[[], Done]) -> Any:
        """One step, recorded; the nodes it failed on are kept for the run's outcome."""
        try:
            return self.record.step(name, body)
        except StepFailed as exc:
            self.blamed |= set(dict(exc.detail.get("failed") or {}))
            raise

    def call(self, node: ClusterNode, verb: Verb, params: Params, bound: float) -> dict[str, Any]:
        """One verb on one node; a node that did not answer once in this run is not tried
        again (the run stops touching it, and says so)."""
        if node.name in self.lost:
            raise NodeUnreachable(node.name, f"not tried again in this run: {self.lost[node.name]}")
        try:
            return self.parts.link.call(
                node, verb, params, bound + self.cluster.connect_timeout + CALL_MARGIN
            )
        except NodeUnreachable as exc:
            self.lost[node.name] = exc.detail
            raise

    def on_every(
        self, step: str, nodes: list[ClusterNode], call: Callable[[ClusterNode], dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """``call`` on every node in parallel; one failure fails the step, naming the node."""
        answers, failures = fan_out(nodes, call)
        if failures:
            raise StepFailed(
                step,
                "; ".join(failures.values()),
                {"nodes": answers, "failed": failures},
            )
        return answers

    # --- the steps -----------------------------------------------------------------------
    def find(self) -> Done:
        """The preflight; the head's engine container is the run's."""
        done = self.preflight()
        engine = self.head.engine[0]
        self.parts.journal.set_container(
            self.id, engine, self.ids.get(self.head.name, {}).get(engine)
        )
        return done

    def preflight(self) -> Done:
        began = self.parts.monotonic()
        self.views = inspect_all(self.config, self.parts.link)
        seconds = round(self.parts.monotonic() - began, 3)
        nodes = {v.name: v.answer or {"problem": v.problem} for v in self.views}
        # a launcher's --rm containers are gone while its cluster is down: it makes them
        problems = preflight_problems(self.views, self.cluster.containers_launched)
        if problems:
            raise StepFailed(
                "preflight",
                "nothing was touched: " + "; ".join(problems),
                {"nodes": nodes, "problems": problems, "seconds": seconds},
            )
        for view in self.views:
            self.ids[view.name] = {e["name"]: e.get("id") for e in view.engines}
        memory = ", ".join(
            f"{v.name} {v.answer['memory']['available_gib']:.1f} GiB"
            for v in self.views
            if v.answer
        )
        return Done(
            f"{len(self.views)} nodes answered in {seconds:.1f}s, same image; available {memory}",
            {"nodes": nodes, "seconds": seconds},
        )

    def pause_voice(self) -> Done:
        with_voice = [n for n in self.cluster.nodes if n.voice]
        # Written before acting: what a later run resumes if this one is cut short.
        intended = {n.name: sorted({*n.voice, *self.paused.get(n.name, [])}) for n in with_voice}
        self.parts.journal.remember(self.id, cluster_voice={**self.paused, **intended})

        def pause(node: ClusterNode) -> dict[str, Any]:
            bound = self.config.docker.timeout * len(node.voice)
            answer = self.call(node, "pause", Params(voice=node.voice), bound)
            adopted = self.paused.get(node.name, [])
            self.paused[node.name] = [
                *adopted,
                *(n for n in answer.get("paused", []) if n not in adopted),
            ]
            return answer

        answers = self.on_every("pause_voice", with_voice, pause)
        said = [f"{n}: {', '.join(p) or 'none'}" for n, p in self.paused.items()]
        said_all = "; ".join(said) if said else "nothing (no voice configured)"
        return Done(f"paused {said_all}", {"nodes": answers})

    def stop(self, nodes: list[ClusterNode]) -> Done:
        head = bool(nodes) and nodes[0] is self.head
        step = "stop_head" if head else "stop_workers"
        if head:
            # the head's own stop, noted before it is made: the daemon on the head tells its
            # engine's events from an operator's by it (``decide.ours``), as for a lone host
            self.parts.journal.remember(self.id, stop_head_sent=True, llm_stopped_at=time.time())
        else:
            self.parts.journal.remember(self.id, stop_workers_sent=True)
        timeout = self.config.llm.stop_timeout

        def stop(node: ClusterNode) -> dict[str, Any]:
            params = Params(engine=node.engine, timeout=timeout)
            return self.call(node, "stop", params, timeout * len(node.engine))

        answers = self.on_every(step, nodes, stop)
        self.stopped.update(answers)
        return Done(f"stopped on {', '.join(answers)}", {"nodes": answers})

    def confirm_stopped(self) -> Done:
        """No engine container up on any node. A worker's stop answer ends with its engines'
        state read after its ``docker stop`` (so after the head's): that is its look here, one
        SSH call and Python start fewer per worker. The head, stopped first, is looked at again
        (in this process), and so is a worker whose answer has no such read (an older
        sparkwarden)."""
        read = {
            node.name: dict(self.stopped[node.name]["now"])
            for node in self.workers
            if "now" in self.stopped.get(node.name, {})
        }

        def look_again(node: ClusterNode) -> dict[str, Any]:
            answer = self.call(node, "inspect", Params(node.engine, node.voice), 0.0)
            return {e.get("name"): e.get("status") for e in answer.get("engines", [])}

        again = [node for node in self.cluster.nodes if node.name not in read]
        looked, unanswered = fan_out(again, look_again)
        now = {**read, **looked}
        up = [
            f"still up {node}: {name}"
            for node, engines in now.items()
            for name, status in engines.items()
            if status in UP_STATUSES
        ]
        detail = {
            "nodes": {
                n.name: now[n.name] if n.name in now else {"problem": unanswered.get(n.name)}
                for n in self.cluster.nodes
            },
            "read_at_stop": sorted(read),
        }
        if unanswered or up:
            raise StepFailed("confirm_stopped", "; ".join([*unanswered.values(), *up]), detail)
        return Done(f"no engine up on any of {len(now)} nodes", detail)

    def drop_caches(self) -> Done:
        mem = self.config.memory
        params = Params(
            gate_gib=mem.start_min_available_gib, wait=mem.start_wait, interval=mem.drop_interval
        )
        failed_figures: dict[str, dict[str, Any]] = {}

        def drop(node: ClusterNode) -> dict[str, Any]:
            try:
                return self.call(node, "drop", params, mem.start_wait)
            except NodeFailed as exc:  # its figures too: the memory trend needs this reading
                failed_figures[node.name] = {k: v for k, v in exc.answer.items() if k != "ok"}
                raise

        answers, failures = fan_out(self.cluster.nodes, drop)
        if failures:
            raise StepFailed(
                "drop_caches",
                "nothing started: memory did not come back on every node: "
                + "; ".join(failures.values()),
                {"nodes": {**answers, **failed_figures}, "failed": failures},
            )
        said = "; ".join(f"{n}: {a.get('summary', '')}" for n, a in answers.items())
        return Done(said, {"nodes": answers})

    def start(self, nodes: list[ClusterNode]) -> Done:
        head = bool(nodes) and nodes[0] is self.head
        step = "start_head" if head else "start_workers"
        if head:
            self.parts.journal.remember(self.id, start_head_sent=True, llm_started_at=time.time())
        else:
            self.parts.journal.remember(self.id, start_workers_sent=True)

        def start(node: ClusterNode) -> dict[str, Any]:
            return self.call(
                node, "start", Params(engine=node.engine), 2 * self.config.docker.timeout
            )

        answers = self.on_every(step, nodes, start)
        changed = [
            f"{node}: {name} is now {str(got.get('id'))[:12]}, "
            f"was {str(self.ids[node].get(name))[:12]}"
            for node, answer in answers.items()
            for name, got in answer.get("started", {}).items()
            if got.get("id") != self.ids[node].get(name)
        ]
        if changed:
            raise StepFailed(
                step,
                "recreated behind sparkwarden's back: " + "; ".join(changed),
                {"nodes": answers},
            )
        self.note_started(
            {
                node: {name: got.get("started_at") for name, got in answer["started"].items()}
                for node, answer in answers.items()
            }
        )
        return Done(f"started the same containers on {', '.join(answers)}", {"nodes": answers})

    def note_started(self, started: dict[str, dict[str, Any]]) -> None:
        """Which start of each engine container this run made (``StartedAt``), in its plan: a
        later sparkwarden proves only the boot this run started, not an operator's."""
        self.started.update(started)
        self.parts.journal.remember(self.id, cluster_started=self.started)

    def launch(self) -> Done:
        """The launcher set-up: its own command starts the ranks (workers first, then the
        head, as eugr's launch-cluster.sh does), as new ``--rm`` containers."""
        # the launcher starts the head too
        self.parts.journal.remember(self.id, start_workers_sent=True, llm_started_at=time.time())
        command = self.cluster.launcher
        try:
            figures = self.parts.launch(command, self.cluster.launcher_timeout)
        except NodeFailed as exc:
            raise StepFailed("start_workers", scrub(str(exc)), {"command": command}) from None
        return Done(f"the launcher ran: {command}", {"command": command, **figures})

    def launched(self) -> Done:
        """After the launcher: every node's engine containers exist and run."""
        views, detail = self.engines_running("start_head", "after the launcher: ", worker=False)
        self.note_started(
            {v.name: {e["name"]: e.get("started_at") for e in v.engines} for v in views}
        )
        return Done(f"the launcher's containers run on {', '.join(v.name for v in views)}", detail)

    def engines_running(
        self, step: str, said: str, worker: bool
    ) -> tuple[list[NodeView], dict[str, Any]]:
        """Every node's (``worker``: every worker's) engine containers run, or ``step`` fails."""
        views = inspect_all(self.config, self.parts.link)
        views = [v for v in views if v.role == "worker"] if worker else views
        bad = [f"{v.name}: {v.problem}" for v in views if not v.reachable]
        bad += [
            f"{v.name}: {e.get('name')} is {e.get('status')} (exit code {e.get('exit_code')})"
            for v in views
            for e in v.engines
            if e.get("status") != "running"
        ]
        detail = {"nodes": {v.name: v.answer or {"problem": v.problem} for v in views}}
        if bad:
            raise StepFailed(step, said + "; ".join(bad), detail)
        return views, detail

    def wait_health(self) -> Done:
        def went_down() -> tuple[str, dict[str, Any]] | None:
            """The head's engine went down while loading (an operator's stop, a crash)."""
            head = self.call(
                self.head,
                "inspect",
                Params(self.head.engine, engine_process=self.cluster.containers_launched),
                self.config.docker.timeout,
            )
            if down := [e for e in head.get("engines", []) if e.get("status") != "running"]:
                said = ", ".join(f"{e.get('name')} is {e.get('status')}" for e in down)
                return f"the head's engine went down while loading: {said}", {}
            return None

        parts = self.parts
        loading = Loading(
            "the cluster keeps loading and the next sparkwarden on the head finishes this run "
            "(/health, the chat probe, every rank, then voice)",
            " (a rank that did not join keeps the head at its rendezvous)",
        )
        waits = Waits(parts.monotonic, parts.sleep, parts.should_abort)
        return Done(*wait_healthy(self.config.llm, parts.vllm, waits, went_down, loading))

    def chat_probe(self) -> Done:
        return Done(*prove_chat(self.config.llm, self.parts.vllm, self.parts.monotonic))

    def workers_running(self) -> Done:
        views, detail = self.engines_running("workers_running", "a rank is not running: ", True)
        return Done(f"every worker's engine runs ({', '.join(v.name for v in views)})", detail)

    def gateway_probe(self) -> Done:
        """The users' path, proven as a lone host's run proves it."""
        parts, client = self.parts, self.parts.gateway
        if self.config.gateway is None or client is None:
            return Done("nothing: no [gateway] configured", skipped=True)
        waits = Waits(parts.monotonic, parts.sleep, parts.should_abort)
        return Done(*prove_gateway(self.config, client, waits))

    def resume_voice(self) -> Done:
        """Every node it can reach; what stays paused on a node lost in this run is named here
        and in the journal (``cluster_voice_left``), and the next cluster run resumes it."""
        to_resume = [n for n in self.cluster.nodes if self.paused.get(n.name)]
        left = {n.name: self.paused[n.name] for n in to_resume if n.name in self.lost}

        def resume(node: ClusterNode) -> dict[str, Any]:
            bound = self.config.docker.timeout * len(node.voice)
            return self.call(node, "resume", Params(voice=self.paused[node.name]), bound)

        answers, failures = fan_out([n for n in to_resume if n.name not in left], resume)
        for name in failures:  # not resumed now (unreachable since the preflight, or refused)
            left.setdefault(name, self.paused[name])
        for node in self.cluster.nodes:
            # lost while pausing: what it paused is unknown, so all it was told to
            if node.name in self.lost and node.voice and "pause_voice" in self.record.taken:
                left.setdefault(node.name, sorted({*node.voice, *self.paused.get(node.name, [])}))
        self.parts.journal.remember(self.id, cluster_voice_left=left)
        said = [f"{n}: {', '.join(a.get('resumed', []))}" for n, a in answers.items()]
        detail: dict[str, Any] = {"nodes": answers}
        if left or failures:
            why = [
                f"left paused on {n} ({', '.join(v)}): {self.lost.get(n) or failures.get(n)}"
                for n, v in left.items()
            ]
            raise StepFailed(
                "resume_voice",
                "resumed " + ("; ".join(said) or "nothing") + "; " + "; ".join(why),
                {**detail, "failed": failures, "left_paused": left, "lost": dict(self.lost)},
            )
        return Done("resumed " + ("; ".join(said) if said else "nothing"), detail)
