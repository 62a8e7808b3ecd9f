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
8. ``gateway_probe`` the same request through the users' gateway, when one is configured: it
                     may lag behind the engine (cooldowns, failed upstreams), never restarts it
9. ``resume_voice``  always, even after a failure: unpause exactly what step 2 paused

Every step is written to the journal before and after it acts, so a run cut short by a crash of
sparkwarden itself can be finished later (reason ``repair``); a repair writes what it adopted
before it acts too. Voice is resumed even when the journal cannot be written at all.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sparkwarden import doctor, faults, logs, metrics, vllmflags
from sparkwarden.actions.doctor import vllm_config_file
from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.adapters.host import Host
from sparkwarden.adapters.vllm import VllmClient
from sparkwarden.config import Config
from sparkwarden.containers import ContainerState, choose_active
from sparkwarden.errors import NoSuchContainer, SparkwardenError, StepFailed, scrub
from sparkwarden.journal import Journal, StepResult

STEPS: Final = (
    "detect",
    "pause_voice",
    "stop_llm",
    "drop_caches",
    "start_llm",
    "wait_health",
    "chat_probe",
    "gateway_probe",
    "resume_voice",
)

#: Exit code of a process ended by SIGKILL: ``docker stop`` ran out of patience.
_SIGKILL_EXIT = 137
#: One gateway attempt: long enough for a loaded gateway, short enough to retry a stuck one.
_GATEWAY_TRY = 30.0

log = logs.get("sparkwarden.sequence")


@dataclass
class Parts:
    """The adapters a sequence drives, and the clock it waits on (fakes in unit tests)."""

    docker: DockerEngine
    vllm: VllmClient
    host: Host
    journal: Journal
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    #: Told "progress made; the next within N s" (the daemon's watchdog lease).
    heartbeat: Callable[[float], None] = lambda _lease: None
    #: True when sparkwarden must stop: a boot wait is cut short (the LLM keeps loading).
    should_abort: Callable[[], bool] = lambda: False
    #: Called once a step has acted, before it is recorded (tests: see :mod:`sparkwarden.faults`).
    after_action: Callable[[str], None] = lambda _name: None
    #: The users' path (``[gateway]``): the same chat code, through the gateway's URL and key.
    gateway: VllmClient | None = None

    @classmethod
    def from_config(cls, config: Config) -> Parts:
        return cls(
            docker=DockerEngine(timeout=config.docker.timeout, retry_for=config.docker.retry_for),
            vllm=VllmClient(config.llm.base_url, config.llm.api_key()),
            host=Host(),
            journal=Journal(config.state.dir),
            after_action=faults.stall_after_action(),
            gateway=(
                VllmClient(config.gateway.url, config.gateway.api_key()) if config.gateway else None
            ),
        )

    def close(self) -> None:
        self.docker.close()
        self.vllm.close()
        if self.gateway is not None:
            self.gateway.close()
        self.journal.close()


@dataclass(frozen=True)
class StepEvent:
    """What an observer (the CLI's progress lines, the daemon's STATUS=) is told of a step."""

    phase: Literal["begin", "end"]
    name: str
    index: int
    run_id: int
    result: StepResult = "running"
    summary: str = ""
    duration_s: float = 0.0


Observer = Callable[[StepEvent], None]


@dataclass(frozen=True)
class Done:
    summary: str
    detail: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False


@dataclass(frozen=True)
class Outcome:
    run_id: int
    ok: bool
    container: str | None
    error: str | None
    #: The step that failed first: a ``gateway_probe`` failure is no reason to restart again.
    failed_step: str | None = None


@dataclass(frozen=True)
class Resume:
    """Where a repair picks up an interrupted run: what it had paused and stopped.

    ``container`` is None when the run was cut short before it chose one (the repair detects
    afresh); ``llm_stopped`` says a ``docker stop`` was sent, so a container still "running" may
    be on its way down and must not be trusted.
    """

    container: str | None
    voice_paused: list[str]
    llm_stopped: bool = False

    @classmethod
    def from_plan(cls, container: str | None, plan: dict[str, Any]) -> Resume | None:
        """What an interrupted run left to finish; None when it had touched nothing."""
        resume = cls(
            container or plan.get("container"),
            list(plan.get("voice_paused", [])),
            # Once the start was sent, a running LLM is the one the run started.
            bool(plan.get("llm_stopped")) and not plan.get("llm_started"),
        )
        return resume if resume.container or resume.voice_paused else None


#: What a journal that cannot be written raises (a full or read-only state dir).
_UNRECORDABLE = (sqlite3.Error, OSError)


def restart(
    config: Config,
    reason: str,
    parts: Parts,
    observer: Observer | None = None,
    resume: Resume | None = None,
    why: str = "",
) -> Outcome:
    """Run the whole sequence once. The caller holds the run lock; ``why`` (what the trigger
    measured) is kept with the run for ``history``."""
    observer = observer or (lambda _e: None)
    try:
        run_id = parts.journal.begin_run(reason)
    except _UNRECORDABLE as exc:
        if resume:  # nothing can be recorded, but voice an interrupted run paused comes back
            orphan = _Run(config, parts, 0, observer)
            orphan.paused = list(resume.voice_paused)
            orphan.resume_unrecorded(f"the journal could not be written: {exc}")
        raise SparkwardenError(f"the journal could not be written: {exc}") from None
    run = _Run(config, parts, run_id, observer)
    if why:
        parts.journal.remember(run.id, why=why)
    run.repairing = resume is not None
    log.info("run_started", run=run.id, reason=reason)
    error: str | None = None
    failed_step: str | None = None
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
        run.step("gateway_probe", run.gateway_probe)
    except SparkwardenError as exc:
        error = scrub(str(exc))
        failed_step = exc.step if isinstance(exc, StepFailed) else None
    except _UNRECORDABLE as exc:  # a full or read-only state dir: still resume voice below
        log.error("journal_unwritable", run=run.id, error=str(exc))
        error = f"the journal could not be written: {exc}"
    except Exception as exc:  # a bug must still end with voice resumed and the run recorded
        log.exception("run_internal_error", run=run.id)
        error = f"internal error: {type(exc).__name__}: {scrub(str(exc))}"
    finally:
        error = run.finish(error)
    try:
        parts.journal.end_run(run.id, "failed" if error else "ok", error)
    except _UNRECORDABLE as exc:
        log.error("run_not_recorded", run=run.id, error=str(exc))
    log.info(
        "run_ended", run=run.id, reason=reason, result="failed" if error else "ok", error=error
    )
    container = run.container.name if run.container else None
    return Outcome(run.id, error is None, container, error, failed_step)


class _Run:
    """The state of one run and its steps; each step method returns a :class:`Done`."""

    def __init__(self, config: Config, parts: Parts, run_id: int, observer: Observer) -> None:
        self.config = config
        self.parts = parts
        self.id = run_id
        self.observer = observer
        self.container: ContainerState | None = None
        self.paused: list[str] = []
        self.taken: set[str] = set()
        self.repairing = False
        self.llm_was_up = False
        #: A repair of a run that had sent ``docker stop``: a "running" LLM may be going down.
        self.stop_sent = False
        #: Steps whose action has run (resume_voice must run once, recorded or not).
        self.acted: set[str] = set()

    # --- bookkeeping ---------------------------------------------------------------------------

    def step(self, name: str, action: Callable[[], Done | tuple[Any, Done]]) -> Any:
        """Journal a step before and after it runs, and tell the observer."""
        index = STEPS.index(name) + 1
        self.taken.add(name)
        self.parts.heartbeat(self._lease(name))
        step_id = self.parts.journal.begin_step(self.id, name)
        self.observer(StepEvent("begin", name, index, self.id))
        log.info("step_started", run=self.id, step=name)
        value: Any = None
        try:
            try:
                produced = action()
            finally:
                self.acted.add(name)
            value, done = produced if isinstance(produced, tuple) else (None, produced)
            self.parts.after_action(name)
        except Exception as exc:
            detail = exc.detail if isinstance(exc, StepFailed) else {}
            said = scrub(str(exc))
            detail = {**detail, "error": said}
            try:
                duration = self.parts.journal.end_step(step_id, "failed", detail)
            except _UNRECORDABLE as journal_exc:  # the step's own error is the one to report
                log.error("step_not_recorded", run=self.id, step=name, error=str(journal_exc))
                duration = 0.0
            self.observer(StepEvent("end", name, index, self.id, "failed", said, duration))
            log.error("step_failed", run=self.id, step=name, error=said, **_flat(detail))
            raise
        result: StepResult = "skipped" if done.skipped else "ok"
        duration = self.parts.journal.end_step(
            step_id, result, {"summary": done.summary, **done.detail}
        )
        self.observer(StepEvent("end", name, index, self.id, result, done.summary, duration))
        log.info(
            "step_ended",
            run=self.id,
            step=name,
            result=result,
            seconds=round(duration, 3),
            summary=done.summary,
        )
        return value

    def _lease(self, name: str) -> float:
        """How long step ``name`` may go without a heartbeat and still be healthy."""
        cfg, call = self.config, self.config.docker.timeout
        longest = {
            "pause_voice": call * (1 + len(cfg.voice.containers)) + cfg.voice.stop_timeout,
            "stop_llm": cfg.llm.stop_timeout + 2 * call,
            "drop_caches": cfg.memory.drop_interval + call,
            "start_llm": 2 * call,
            "wait_health": cfg.llm.poll_interval + 10.0 + call,
            "chat_probe": cfg.llm.probe_timeout + call,
            "gateway_probe": cfg.llm.poll_interval + _GATEWAY_TRY + call,
            "resume_voice": call * (1 + len(cfg.voice.containers)) + cfg.voice.stop_timeout,
        }
        return longest.get(name, call) + 30.0

    def finish(self, error: str | None) -> str | None:
        """Resume voice whatever happened, even when the journal cannot record it (a full state
        dir): the box comes first, the record after if it can be written. Returns the error."""
        try:
            self.skip_untaken()
            self.step("resume_voice", self.resume_voice)
        except SparkwardenError as exc:
            error = f"{error}; {exc}" if error else str(exc)
        except _UNRECORDABLE as exc:
            log.error("journal_unwritable", run=self.id, error=str(exc))
            error = error or f"the journal could not be written: {exc}"
            if "resume_voice" not in self.acted:
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
        """Record the steps a failure jumped over, so history shows the whole plan."""
        for name in STEPS[:-1]:
            if name not in self.taken:
                self.step(name, lambda: Done("not reached: an earlier step failed", skipped=True))

    # --- the steps -----------------------------------------------------------------------------

    def detect(self, resume: Resume | None) -> tuple[ContainerState, Done]:
        docker, journal = self.parts.docker, self.parts.journal
        states = [docker.inspect(name) for name in self.config.llm.containers]
        for name in self.config.voice.containers:
            docker.inspect(name)  # a missing voice container fails here, before anything moved
        if resume and resume.container:
            # The interrupted run's container, unless another candidate is up now (an operator
            # started it meanwhile): repairing it must not start a second LLM beside that one.
            mine = [s for s in states if s.name == resume.container]
            if not mine:
                raise StepFailed(
                    "detect",
                    f"the interrupted run's container {resume.container} is no longer in "
                    "llm.containers; not repairing it",
                )
            up = any(s.up for s in states)
            active = choose_active(states, resume.container) if up else mine[0]
            self.stop_sent = resume.llm_stopped and active.name == resume.container
        else:
            active = choose_active(states, journal.last_container())
        self.container = active
        journal.set_container(self.id, active.name, active.id)
        candidates = {s.name: s.status for s in states}
        return active, Done(
            f"{active.name} ({active.status}, id {active.id[:12]})",
            {
                "container": active.name,
                "id": active.id,
                "status": active.status,
                "candidates": candidates,
            },
        )

    def pause_voice(self, resume: Resume | None) -> Done:
        docker, voice = self.parts.docker, self.config.voice
        if resume:
            self.paused = list(resume.voice_paused)
            self.parts.journal.remember(self.id, voice_paused=self.paused, voice_mode=voice.mode)
            return Done(
                f"adopted from the interrupted run: {_names(self.paused)}",
                {"adopted": self.paused},
                skipped=True,
            )
        to_quiet, left_alone = voice_to_quiet(
            {name: docker.inspect(name).status for name in voice.containers}
        )
        # Written before acting: a crash between here and resume_voice leaves the list to repair.
        self.parts.journal.remember(self.id, voice_paused=to_quiet, voice_mode=voice.mode)
        for name in to_quiet:
            if voice.mode == "pause":
                docker.pause(name)
            else:
                docker.stop(name, voice.stop_timeout)
            self.paused.append(name)
        verb = "paused" if voice.mode == "pause" else "stopped"
        summary = f"{verb} {_names(self.paused)}"
        if left_alone:
            summary += "; left as they were: " + ", ".join(
                f"{n} ({s})" for n, s in left_alone.items()
            )
        return Done(summary, {verb: self.paused, "left_alone": left_alone})

    def stop_llm(self, active: ContainerState) -> Done:
        docker, timeout = self.parts.docker, self.config.llm.stop_timeout
        current = docker.inspect(active.name)
        if current.up and self.repairing and not self.stop_sent:
            self.llm_was_up = True
            return Done(
                f"repair: {active.name} is {current.status}; verified, not stopped",
                {"status": current.status},
                skipped=True,
            )
        if not current.up:
            return Done(
                f"was not running ({current.status}, exit code {current.exit_code})",
                {
                    "status": current.status,
                    "exit_code": current.exit_code,
                    "oom_killed": current.oom_killed,
                },
                skipped=True,
            )
        grace = engine_grace(docker.attrs(active.name))
        timeout = stop_timeout(timeout, grace)
        running = in_flight(self.parts.vllm.metrics())
        self.parts.journal.remember(self.id, llm_stopped=True)
        self.parts.heartbeat(self._lease("stop_llm") + (grace or 0.0))
        began = self.parts.monotonic()
        docker.stop(active.name, timeout)
        seconds = self.parts.monotonic() - began
        after = docker.inspect(active.name)
        if after.up:
            raise StepFailed("stop_llm", f"{active.name} is still {after.status} after docker stop")
        killed = after.exit_code == _SIGKILL_EXIT
        how = f"killed after the {timeout:g}s stop timeout" if killed else "exited by itself"
        summary = f"{how} in {seconds:.1f}s (exit code {after.exit_code})"
        if running:
            summary += "; " + in_flight_note(running, grace)
        return Done(
            summary,
            {
                "exit_code": after.exit_code,
                "killed": killed,
                "seconds": round(seconds, 3),
                "running_at_stop": running,
                "shutdown_timeout": grace,
                "stop_timeout": timeout,
            },
        )

    def drop_caches(self) -> Done:
        if self.repairing and self.llm_was_up:
            return Done("repair: the LLM is up, nothing to start", skipped=True)
        host, mem = self.parts.host, self.config.memory
        gate = mem.start_min_available_gib
        before = host.memory()
        deadline = self.parts.monotonic() + mem.start_wait
        drops = 0
        while True:
            host.drop_caches()
            drops += 1
            now = host.memory()
            figures = {
                "available_before_gib": round(before.available_gib, 2),
                "available_after_gib": round(now.available_gib, 2),
                "total_gib": round(now.total_gib, 2),
                "gate_gib": gate,
                "drops": drops,
            }
            if now.available_gib >= gate:
                return Done(
                    f"{before.available_gib:.1f} -> {now.available_gib:.1f} GiB available "
                    f"(gate {gate:g} GiB, {drops} drop{'s' if drops > 1 else ''})",
                    figures,
                )
            if self.parts.monotonic() + mem.drop_interval > deadline:
                raise StepFailed(
                    "drop_caches",
                    f"memory did not come back: {now.available_gib:.1f} GiB available after "
                    f"{mem.start_wait:g}s, the start gate is {gate:g} GiB; not starting the LLM "
                    "into ghost memory",
                    figures,
                )
            log.info("waiting_for_memory", available_gib=round(now.available_gib, 2), gate_gib=gate)
            self.parts.heartbeat(self._lease("drop_caches"))
            self.parts.sleep(mem.drop_interval)

    def start_llm(self, active: ContainerState) -> Done:
        docker = self.parts.docker
        if self.repairing and self.llm_was_up:
            return Done("repair: the LLM is up, nothing to start", skipped=True)
        self.parts.journal.remember(self.id, llm_started=True)
        docker.start(active.name)
        after = docker.inspect(active.name)
        if after.id != active.id:
            raise StepFailed(
                "start_llm",
                f"{active.name} now has id {after.id[:12]}, "
                f"not {active.id[:12]}: it was recreated behind sparkwarden's back",
            )
        return Done(
            f"started {active.name} (same id {after.id[:12]})",
            {
                "id": after.id,
                "status": after.status,
                "started_at": after.started_at.isoformat() if after.started_at else None,
            },
        )

    def wait_health(self, active: ContainerState) -> Done:
        llm, parts = self.config.llm, self.parts
        began = parts.monotonic()
        deadline = began + llm.health_timeout
        polls, next_note = 0, began + 15.0
        while True:
            polls += 1
            health = parts.vllm.health(timeout=min(10.0, llm.health_timeout))
            elapsed = parts.monotonic() - began
            if health.status == "up":
                return Done(
                    f"healthy after {elapsed:.1f}s ({polls} polls)",
                    {"seconds": round(elapsed, 3), "polls": polls},
                )
            state = parts.docker.inspect(active.name)
            if not state.up:
                raise StepFailed(
                    "wait_health",
                    f"{active.name} exited with code {state.exit_code} while loading"
                    + (" (OOM-killed)" if state.oom_killed else ""),
                    {
                        "seconds": round(elapsed, 3),
                        "exit_code": state.exit_code,
                        "oom_killed": state.oom_killed,
                    },
                )
            if parts.should_abort():
                raise StepFailed(
                    "wait_health",
                    f"sparkwarden is stopping: gave up waiting after {elapsed:.0f}s "
                    f"({active.name} is started and keeps loading)",
                    {"seconds": round(elapsed, 3), "aborted": True},
                )
            if parts.monotonic() + llm.poll_interval > deadline:
                raise StepFailed(
                    "wait_health",
                    f"not healthy within {llm.health_timeout:g}s; last answer: {health.detail}",
                    {"seconds": round(elapsed, 3), "polls": polls, "last": health.detail},
                )
            if parts.monotonic() >= next_note:
                log.info("still_loading", seconds=round(elapsed), last=health.detail)
                self.observer(
                    StepEvent(
                        "begin",
                        "wait_health",
                        STEPS.index("wait_health") + 1,
                        self.id,
                        summary=f"{elapsed:.0f}s: {health.detail}",
                    )
                )
                next_note += 15.0
            parts.heartbeat(self._lease("wait_health"))
            parts.sleep(llm.poll_interval)

    def chat_probe(self) -> Done:
        llm, parts = self.config.llm, self.parts
        model = llm.model or parts.vllm.served_model()
        if not model:
            raise StepFailed("chat_probe", "could not learn the served model from /v1/models")
        began = parts.monotonic()
        outcome = parts.vllm.chat(model, timeout=llm.probe_timeout)
        seconds = round(parts.monotonic() - began, 3)
        if not outcome.ok:
            raise StepFailed(
                "chat_probe",
                f"/health said 200 but the chat request failed: {outcome.detail}",
                {"model": model, "seconds": seconds},
            )
        return Done(
            f"{model} {outcome.detail} in {seconds:.1f}s",
            {"model": model, "seconds": seconds, "answer": outcome.content[:80]},
        )

    def gateway_probe(self) -> Done:
        """The users' path, retried until ``gateway.timeout``: how long it lagged the engine."""
        gateway, client, parts = self.config.gateway, self.parts.gateway, self.parts
        if gateway is None or client is None:
            return Done("no [gateway] configured", skipped=True)
        began = parts.monotonic()
        deadline = began + gateway.timeout
        attempts = 0
        while True:
            attempts += 1
            left = max(deadline - parts.monotonic(), 1.0)
            outcome = client.chat(gateway.model, timeout=min(left, _GATEWAY_TRY))
            lag = round(parts.monotonic() - began, 3)
            figures = {"url": gateway.url, "model": gateway.model, "attempts": attempts}
            if outcome.ok:
                return Done(
                    f"{gateway.url} {outcome.detail}; the users' path lagged the engine by "
                    f"{lag:.1f}s ({attempts} attempt{'s' if attempts > 1 else ''})",
                    {**figures, "lag_s": lag, "answer": outcome.content[:80]},
                )
            if parts.should_abort() or parts.monotonic() + self.config.llm.poll_interval > deadline:
                raise StepFailed(
                    "gateway_probe",
                    f"the gateway {gateway.url} did not answer a chat request for "
                    f"{gateway.model!r} within {gateway.timeout:g}s, though the engine itself "
                    f"answered; last: {outcome.detail}",
                    {**figures, "seconds": lag, "last": outcome.detail},
                )
            parts.heartbeat(self._lease("gateway_probe"))
            parts.sleep(self.config.llm.poll_interval)

    def resume_voice(self) -> Done:
        docker, voice = self.parts.docker, self.config.voice
        resumed: list[str] = []
        already: dict[str, str] = {}
        failures: list[str] = []
        for name in self.paused:
            try:
                status = docker.inspect(name).status
                if status == "paused":
                    docker.unpause(name)
                    resumed.append(name)
                elif status in ("exited", "created") and voice.mode == "stop":
                    docker.start(name)
                    resumed.append(name)
                else:
                    already[name] = status
            except NoSuchContainer:
                already[name] = "gone"  # removed while paused: nothing left to resume
            except Exception as exc:  # one that cannot be resumed must not keep the next paused
                failures.append(f"{name}: {exc}")
        detail = {"resumed": resumed, "already": already}
        if failures:
            raise StepFailed("resume_voice", "could not resume " + "; ".join(failures), detail)
        summary = f"resumed {_names(resumed)}"
        if already:
            summary += "; already " + ", ".join(f"{n} {s}" for n, s in already.items())
        return Done(summary, detail, skipped=not self.paused)


def engine_grace(attrs: dict[str, Any]) -> float | None:
    """vLLM's ``--shutdown-timeout`` as doctor reads it (command line in any spelling, and its
    ``--config`` file through the container's mounts); None when not set."""
    argv = doctor.command_line(attrs)
    return doctor.shutdown_timeout(vllmflags.read(argv, vllm_config_file(attrs, argv)[0]))


def stop_timeout(configured: float, shutdown_grace: float | None) -> float:
    """``docker stop``'s timeout: above vLLM's ``--shutdown-timeout`` (running requests finish)
    by doctor's teardown margin, and never under the configured one."""
    if not shutdown_grace:
        return configured
    return max(configured, shutdown_grace + doctor.SHUTDOWN_MARGIN)


def in_flight(metrics_text: str | None) -> int | None:
    """Requests running at the stop, from ``/metrics``; None when it cannot be read."""
    if metrics_text is None:
        return None
    try:
        running = metrics.parse(metrics_text).running
    except metrics.MetricsError:
        return None
    return None if running is None else int(running)


def in_flight_note(running: int, shutdown_grace: float | None) -> str:
    """What happened to the requests a planned stop found running (the drain's deadline passed)."""
    if shutdown_grace:
        return f"{running} request(s) running, given up to {shutdown_grace:g}s to finish"
    return (
        f"{running} request(s) running and cut: the engine has no --shutdown-timeout "
        "(vLLM aborts running requests at SIGTERM without one)"
    )


def voice_to_quiet(states: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The voice containers to quiet (the running ones) and those left as they were, by status.

    The one rule for the sequence, its dry-run plan and the memory floor's ``pause_voice``.
    """
    to_quiet = [name for name, status in states.items() if status == "running"]
    return to_quiet, {name: status for name, status in states.items() if status != "running"}


def _names(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


def _flat(detail: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in detail.items() if k != "error"}


def plan(config: Config, parts: Parts) -> list[tuple[str, str]]:
    """What :func:`restart` would do now, step by step, read from Docker and /proc only."""
    docker, llm, voice, mem = parts.docker, config.llm, config.voice, config.memory
    states = [docker.inspect(name) for name in llm.containers]
    active = choose_active(states, parts.journal.last_container())
    to_quiet, left_alone = voice_to_quiet(
        {name: docker.inspect(name).status for name in voice.containers}
    )
    memory = parts.host.memory()
    verb = "pause" if voice.mode == "pause" else "stop"
    quiet = f"{verb} {_names(to_quiet)}"
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
        ("wait_health", f"poll {llm.base_url}/health for up to {llm.health_timeout:g}s"),
        (
            "chat_probe",
            f"one chat request to {llm.model or 'the model /v1/models names'}, "
            f"up to {llm.probe_timeout:g}s",
        ),
        (
            "gateway_probe",
            f"the same request through {config.gateway.url} as {config.gateway.model!r}, "
            f"retried for up to {config.gateway.timeout:g}s"
            if config.gateway
            else "nothing: no [gateway] configured",
        ),
        (
            "resume_voice",
            f"{'unpause' if verb == 'pause' else 'start'} {_names(to_quiet)}"
            if to_quiet
            else "nothing to resume",
        ),
    ]
