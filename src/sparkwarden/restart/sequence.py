"""The safe restart sequence, top to bottom, whatever the node count. This file is the answer to
"what does it do?".

``docker restart`` kills the engine on a DGX Spark: the stopped vLLM leaves ~90 GiB of unified
memory the driver has not returned, and a container started at once dies in it. A cluster's head
restarted alone hangs against its stale ranks, and a rank left running never rejoins a new head
(vllm#32136). So every run, a lone Spark's (a run of one node, in this process:
:class:`~sparkwarden.restart.host_run.HostRun`) or a cluster's from its head (every node over
SSH: :class:`sparkwarden.cluster.run.ClusterRun`), goes the same way. The step names are
:mod:`~sparkwarden.restart.step_names`'s; a lone host's are in brackets, a cluster's after them:

1. find             [``detect``] which LLM candidate is active (after a crash: the one that ran
                    last) | ``preflight``: every node answers over SSH with its engine's image and
                    memory; a failure here ends the run with nothing touched
   [``leave_rotation``] a replica with ``[replicas.rotation]``: its Nginx answers 503 from
                    here on, so the gateway sends new requests to a peer (the ones in flight finish)
2. ``pause_voice``  the speech containers that are running, on every node (they hold memory)
3. stop             [``stop_llm``] ``docker stop`` with a long timeout (10 s SIGKILLs vLLM
                    mid-teardown) | ``stop_head``, ``stop_workers``, ``confirm_stopped``: the head
                    first (its ranks would wait on it), then every worker, then none is up
4. ``drop_caches``  ``sync`` + drop caches until ``MemAvailable`` clears the start gate, on every
                    node: nothing starts unless all do
5. start            [``start_llm``] the *same* container: same ID, same flags |
                    ``start_workers``, ``start_head`` in the set-up's order (Ray: the head first)
6. ``wait_health``  poll ``/health``; connection refused means "still loading"
7. ``chat_probe``   one real chat request, because ``/health`` can be 200 over a dead engine
8. checks           [none] | ``workers_running``: a rank that died at start leaves the head
                    healthy and hung; [``rejoin_rotation``]: a replica's own gateway path answers
                    the same chat, then it is back in rotation (a failed run leaves it out)
9. ``resume_voice`` always, even after a failure: exactly what step 2 paused; as soon as the
                    engine answered, so voice never waits on the gateway
10. ``gateway_probe`` the same request through the users' gateway, when one is configured: it
                    may lag behind the engine (cooldowns, failed upstreams), never restarts it

Every step is written to the journal before and after it acts, so a run cut short by a crash of
sparkwarden itself can be finished later (reason ``repair``); a repair writes what it adopted
before it acts too. Voice is resumed even when the journal cannot be written at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from sparkwarden.base import logs
from sparkwarden.base.containers import choose_active, voice_to_quiet
from sparkwarden.base.errors import HandedOver, SparkwardenError
from sparkwarden.base.version import version
from sparkwarden.config.schema import Config
from sparkwarden.restart.host_run import HostRun
from sparkwarden.restart.journal import Journal, Plan
from sparkwarden.restart.parts import Outcome, Parts, Resume, StepObserver
from sparkwarden.restart.recorder import UNRECORDABLE, Done, Recorder, Step, failure
from sparkwarden.restart.steps import engine_grace, name_list, stop_timeout

log = logs.get("sparkwarden.sequence")


def restart(
    config: Config,
    reason: str,
    parts: Parts,
    observer: StepObserver | None = None,
    resume: Resume | None = None,
    why: str = "",
    target: str | None = None,
) -> Outcome:
    """A lone host's run (see :func:`run`). ``resume``: where a repair picks up an interrupted
    run; ``target`` (a container ID): the only container it may stop or start."""
    return run(HostRun(config, parts, resume, target), parts.journal, reason, observer, why)


def run(
    nodes: Nodes, journal: Journal, reason: str, observer: StepObserver | None = None, why: str = ""
) -> Outcome:
    """Run the whole sequence once over ``nodes``. The caller holds the run lock; ``why`` (what
    the trigger measured) is kept with the run for ``history``.

    Raises :class:`HandedOver` when sparkwarden is stopping while the started engine loads: the
    run is left open, voice still paused, for the next sparkwarden to prove and end."""
    try:
        run_id = journal.begin_run(reason)
    except UNRECORDABLE as exc:
        if nodes.paused:  # nothing can be recorded, but voice an interrupted run paused comes back
            _resume_unrecorded(nodes, f"the journal could not be written: {exc}")
        raise SparkwardenError(f"the journal could not be written: {exc}") from None
    nodes.open(run_id, observer or (lambda _e: None))
    step = nodes.step
    log.info("run_started", run=run_id, reason=reason, version=version(), steps=len(nodes.order))
    error: str | None = None
    failed_step: str | None = None
    handed_over = False
    try:
        # which code ran it (an upgrade shows in history), what the trigger measured, and what
        # a repair adopted: written before anything can fail
        facts: Plan = {"version": version(), **nodes.opening()}
        if why:
            facts["why"] = why
        journal.remember(run_id, **facts)
        step(nodes.order[0], nodes.find)  # detect | preflight
        for name, body in nodes.leaving():  # none | leave_rotation (a replica's gateway)
            step(name, body)
        if nodes.restarts():  # not when a repair proves the boot a cut run started
            step("pause_voice", nodes.pause_voice)
            for name, body in nodes.stops():  # stop_llm | stop_head, stop_workers, confirm_stopped
                step(name, body)
            step("drop_caches", nodes.drop_caches)
            for name, body in nodes.starts():  # start_llm | the set-up's order
                step(name, body)
        step("wait_health", nodes.wait_health)
        step("chat_probe", nodes.chat_probe)
        for name, body in nodes.checks():  # none | workers_running | rejoin_rotation
            step(name, body)
        step("resume_voice", nodes.resume_voice)  # the engine answers: voice back now
    except HandedOver as exc:  # stopping mid-boot: no voice, no verdict; the next daemon ends it
        handed_over = True
        log.warning("run_handed_over", run=run_id, reason=reason, why=str(exc))
        try:
            journal.remember(run_id, handed_over=time.time())
        except UNRECORDABLE as journal_exc:
            log.error("journal_unwritable", run=run_id, error=str(journal_exc))
        raise
    except Exception as exc:  # a step's failure, a full state dir, a bug: voice still resumed
        error, failed_step = failure(exc, run_id)
    finally:
        if not handed_over:
            error = _voice_back(nodes, error)
    # the users' path, once voice is back (it never waits on the gateway)
    try:
        if error is None:
            step("gateway_probe", nodes.gateway_probe)
        else:
            nodes.record.skip("gateway_probe", nodes.skip_why)
    except Exception as exc:
        if error is None:
            error, failed_step = failure(exc, run_id)
    try:
        journal.end_run(run_id, "failed" if error else "ok", error)
    except UNRECORDABLE as exc:
        log.error("run_not_recorded", run=run_id, error=str(exc))
    (log.error if error else log.info)(
        "run_ended", run=run_id, reason=reason, result="failed" if error else "ok", error=error
    )
    container, container_id = nodes.engine()
    failed_nodes = nodes.failed_nodes() if error else ()
    return Outcome(run_id, error is None, container, error, failed_step, container_id, failed_nodes)


def _voice_back(nodes: Nodes, error: str | None) -> str | None:
    """Record the steps a failure jumped over (history shows the whole plan) and resume voice
    if it has not been, even when the journal cannot record it (a full state dir): the box
    comes first, the record after if it can be written. Returns the run's error."""
    record = nodes.record
    try:
        for name in nodes.order[: nodes.order.index("resume_voice")]:
            if name not in record.taken:
                record.skip(name, nodes.skip_why)
        if "resume_voice" not in record.acted:
            nodes.step("resume_voice", nodes.resume_voice)
    except SparkwardenError as exc:
        error = f"{error}; {exc}" if error else str(exc)
    except UNRECORDABLE as exc:
        log.error("journal_unwritable", run=record.run_id, error=str(exc))
        error = error or f"the journal could not be written: {exc}"
        if "resume_voice" not in record.acted:
            error = _resume_unrecorded(nodes, error)
    return error


def _resume_unrecorded(nodes: Nodes, error: str) -> str:
    """``resume_voice`` without the journal; the log says what it did. Returns the error."""
    try:
        done = nodes.resume_voice()
        log.warning("voice_resumed_unrecorded", summary=done.summary)
    except (SparkwardenError, *UNRECORDABLE) as exc:
        log.error("voice_not_resumed", error=str(exc))
        error = f"{error}; {exc}"
    return error


class Nodes(Protocol):
    """The nodes of one run and the bodies of its steps: a lone host's, in this process
    (:class:`~sparkwarden.restart.host_run.HostRun`), or a cluster's from its head
    (:class:`sparkwarden.cluster.run.ClusterRun`). Each body returns a :class:`Done` or raises
    ``StepFailed``; :func:`run` keeps the order."""

    @property
    def order(self) -> tuple[str, ...]:
        """The run's step names, in order (:mod:`~sparkwarden.restart.step_names`)."""

    #: Why a step the run does not take is recorded as skipped.
    skip_why: str
    record: Recorder

    @property
    def paused(self) -> Collection[Any]:
        """Voice this run paused or adopted from an interrupted run (resumed whatever
        happens)."""

    def open(self, run_id: int, observer: StepObserver) -> None:
        """The run's number: its :class:`Recorder` is made."""

    def opening(self) -> Plan:
        """What the run writes in its plan before its first step (what a repair adopted)."""

    def step(self, name: str, body: Callable[[], Done]) -> Any:
        """One step, recorded."""

    def find(self) -> Done: ...
    def leaving(self) -> list[Step]:
        """What takes the nodes out of users' way before anything stops: a replica leaves
        its gateway's rotation."""

    def restarts(self) -> bool:
        """Whether it stops and starts (a repair may only prove a boot); raises when it must
        touch nothing."""

    def pause_voice(self) -> Done: ...
    def stops(self) -> list[Step]: ...
    def drop_caches(self) -> Done: ...
    def starts(self) -> list[Step]: ...
    def wait_health(self) -> Done: ...
    def chat_probe(self) -> Done: ...
    def checks(self) -> list[Step]: ...
    def resume_voice(self) -> Done: ...
    def gateway_probe(self) -> Done: ...
    def engine(self) -> tuple[str | None, str | None]:
        """The engine container the run is for (name, ID), once found."""

    def failed_nodes(self) -> tuple[str, ...]:
        """The nodes a failed run failed on (named in its notification)."""


def plan(config: Config, parts: Parts) -> list[tuple[str, str]]:
    """What :func:`restart` would do now on a lone host, step by step, read from Docker and
    /proc only."""
    docker, llm, voice, mem = parts.docker, config.llm, config.voice, config.memory
    states = [docker.inspect(name) for name in llm.containers]
    active = choose_active(states, parts.journal.last_container())
    to_quiet, left_alone = voice_to_quiet(
        {name: docker.inspect(name).status for name in voice.containers}
    )
    memory = parts.host.memory()
    proving = proving_plan(config)
    verb = "pause" if voice.mode == "pause" else "stop"
    quiet = f"{verb} {name_list(to_quiet)}"
    if left_alone:
        quiet += "; leave as they are: " + ", ".join(f"{n} ({s})" for n, s in left_alone.items())
    grace = engine_grace(docker.attrs(active.name)) if active.up else None
    stop = (
        f"docker stop {active.name} with a {stop_timeout(llm.stop_timeout, grace):g}s timeout"
        + (f" (above vLLM's --shutdown-timeout {grace:g}s)" if grace else "")
        if active.up
        else f"nothing: {active.name} is {active.status} (exit code {active.exit_code})"
    )
    steps = [
        ("detect", f"active LLM container: {active.name} ({active.status}, id {active.id[:12]})"),
        ("pause_voice", quiet),
        ("stop_llm", stop),
        (
            "drop_caches",
            f"sync + drop caches until >= {mem.start_min_available_gib:g} GiB is "
            f"available (now {memory.available_gib:.1f} of {memory.total_gib:.1f} GiB),"
            f" for up to {mem.start_wait:g}s",
        ),
        ("start_llm", f"docker start {active.name} (the same container, id {active.id[:12]})"),
        ("wait_health", proving["wait_health"]),
        ("chat_probe", proving["chat_probe"]),
        (
            "resume_voice",
            f"{'unpause' if verb == 'pause' else 'start'} {name_list(to_quiet)}"
            if to_quiet
            else "nothing to resume",
        ),
        ("gateway_probe", proving["gateway_probe"]),
    ]
    if (rotation := config.rotation) is not None:
        steps.insert(1, ("leave_rotation", f"write {rotation.flag}: its Nginx answers 503"))
        rejoin = f"one chat through {rotation.url} (its own gateway path), then remove the flag"
        steps.insert(
            steps.index(("chat_probe", proving["chat_probe"])) + 1, ("rejoin_rotation", rejoin)
        )
    return steps


def proving_plan(config: Config) -> dict[str, str]:
    """What the proving steps of any run (a lone host's, a cluster head's) will do."""
    llm, gateway = config.llm, config.gateway
    return {
        "wait_health": f"poll {llm.base_url}/health for up to {llm.health_timeout:g}s",
        "chat_probe": f"one chat request to {llm.model or 'the model /v1/models names'}, "
        f"up to {llm.probe_timeout:g}s",
        "gateway_probe": f"the same request through {gateway.url} as {gateway.model!r}, "
        f"retried for up to {gateway.timeout:g}s"
        if gateway
        else "nothing: no [gateway] configured",
    }
