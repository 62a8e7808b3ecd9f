"""The safe restart sequence, top to bottom. This file is the answer to "what does it do?".

``docker restart`` kills the engine on a DGX Spark: the stopped vLLM leaves ~90 GiB of unified
memory the driver has not returned, and a container started at once dies in it. So:

1. ``detect``        which LLM candidate is active (after a crash: the one that ran last)
2. ``pause_voice``   pause the speech containers that are running (they hold unified memory)
3. ``stop_llm``      ``docker stop`` with a long timeout (10 s SIGKILLs vLLM mid-teardown)
4. ``drop_caches``   ``sync`` + drop caches until ``MemAvailable`` clears the start gate
5. ``start_llm``     ``docker start`` the *same* container: same ID, same flags
6. ``wait_health``   poll ``/health``; connection refused means "still loading"
7. ``chat_probe``    one real chat request, because ``/health`` can be 200 over a dead engine
8. ``resume_voice``  always, even after a failure: unpause exactly what step 2 paused; as soon
                     as the engine answered, so voice never waits on the gateway
9. ``gateway_probe`` the same request through the users' gateway, when one is configured: it
                     may lag behind the engine (cooldowns, failed upstreams), never restarts it

Every step is written to the journal before and after it acts, so a run cut short by a crash of
sparkwarden itself can be finished later (reason ``repair``); a repair writes what it adopted
before it acts too. Voice is resumed even when the journal cannot be written at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkwarden.base import logs
from sparkwarden.base.containers import choose_active
from sparkwarden.base.errors import HandedOver, SparkwardenError
from sparkwarden.base.version import version
from sparkwarden.config.schema import Config
from sparkwarden.restart.journal import Plan
from sparkwarden.restart.parts import Outcome, Parts, Resume, StepObserver
from sparkwarden.restart.probes import Probes
from sparkwarden.restart.recorder import UNRECORDABLE, Done, failure
from sparkwarden.restart.step_names import STEPS
from sparkwarden.restart.steps import (
    LlmSteps,
    VoiceSteps,
    engine_grace,
    name_list,
    stop_timeout,
    voice_to_quiet,
)

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
    """Run the whole sequence once. The caller holds the run lock; ``why`` (what the trigger
    measured) is kept with the run for ``history``; ``target`` (a container ID): the only
    container it may stop or start."""
    observer = observer or (lambda _e: None)
    try:
        run_id = parts.journal.begin_run(reason)
    except UNRECORDABLE as exc:
        if resume:  # nothing can be recorded, but voice an interrupted run paused comes back
            orphan = _Run(config, parts, 0, observer)
            orphan.paused = list(resume.voice_paused)
            orphan.resume_unrecorded(f"the journal could not be written: {exc}")
        raise SparkwardenError(f"the journal could not be written: {exc}") from None
    run = _Run(config, parts, run_id, observer)
    # which code ran it (an upgrade shows in history), and what the trigger measured
    facts: Plan = {"version": version()}
    if why:
        facts["why"] = why
    parts.journal.remember(run.id, **facts)
    run.repairing = resume is not None
    run.target = target
    log.info("run_started", run=run.id, reason=reason, version=version())
    error: str | None = None
    failed_step: str | None = None
    handed_over = False
    try:
        if resume:  # before anything can fail: a repair cut short must not forget the list
            run.paused = list(resume.voice_paused)
            parts.journal.remember(
                run.id,
                voice_paused=run.paused,
                voice_mode=config.voice.mode,
                llm_stopped=resume.llm_stopped,
                container=resume.container,
            )
        active = run.step("detect", lambda: run.detect(resume))
        run.step("pause_voice", lambda: run.pause_voice(resume))
        run.step("stop_llm", lambda: run.stop_llm(active))
        run.step("drop_caches", run.drop_caches)
        run.step("start_llm", lambda: run.start_llm(active))
        run.step("wait_health", lambda: run.wait_health(active))
        run.step("chat_probe", run.chat_probe)
        run.step("resume_voice", run.resume_voice)  # the engine answers: voice back now
        run.step("gateway_probe", run.gateway_probe)
    except HandedOver as exc:  # stopping mid-boot: no voice, no verdict; the next daemon ends it
        handed_over = True
        log.warning("run_handed_over", run=run.id, reason=reason, why=str(exc))
        raise
    except Exception as exc:  # a step's failure, a full state dir, a bug: voice still resumed
        error, failed_step = failure(exc, run.id)
    finally:
        if not handed_over:
            error = run.finish(error)
    try:
        parts.journal.end_run(run.id, "failed" if error else "ok", error)
    except UNRECORDABLE as exc:
        log.error("run_not_recorded", run=run.id, error=str(exc))
    (log.error if error else log.info)(
        "run_ended", run=run.id, reason=reason, result="failed" if error else "ok", error=error
    )
    container = run.container.name if run.container else None
    container_id = run.container.id if run.container else None
    return Outcome(run.id, error is None, container, error, failed_step, container_id)


class _Run(VoiceSteps, LlmSteps, Probes):
    """One run: the steps (in :mod:`sparkwarden.restart.steps` and ``probes``), each recorded by
    its :class:`~sparkwarden.restart.recorder.Recorder`, and always ended."""

    def step(self, name: str, action: Callable[[], Done | tuple[Any, Done]]) -> Any:
        return self.record.step(name, action)

    def finish(self, error: str | None) -> str | None:
        """Resume voice whatever happened, even when the journal cannot record it (a full state
        dir): the box comes first, the record after if it can be written. Returns the error."""
        try:
            self.skip_untaken()
        except SparkwardenError as exc:
            error = f"{error}; {exc}" if error else str(exc)
        except UNRECORDABLE as exc:
            log.error("journal_unwritable", run=self.id, error=str(exc))
            error = error or f"the journal could not be written: {exc}"
            if "resume_voice" not in self.record.acted:
                error = self.resume_unrecorded(error)
        return error

    def resume_unrecorded(self, error: str) -> str:
        """``resume_voice`` without the journal; the log says what it did. Returns the error."""
        try:
            done = self.resume_voice()
            log.warning("voice_resumed_unrecorded", run=self.id, summary=done.summary)
        except SparkwardenError as exc:
            log.error("voice_not_resumed", run=self.id, error=str(exc))
            error = f"{error}; {exc}"
        return error

    def skip_untaken(self) -> None:
        """Record the steps a failure jumped over, so history shows the whole plan, and resume
        voice in its place if it has not been (a failure before it, or a journal that could not
        record its start)."""
        for name in STEPS:
            if name == "resume_voice" and name not in self.record.acted:
                self.step(name, self.resume_voice)
            elif name not in self.record.taken:
                self.record.skip(name, "not reached: an earlier step failed")


def plan(config: Config, parts: Parts) -> list[tuple[str, str]]:
    """What :func:`restart` would do now, step by step, read from Docker and /proc only."""
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
    return [
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
