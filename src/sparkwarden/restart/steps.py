"""The bodies of the restart steps :mod:`sparkwarden.restart.sequence` calls in order.

sequence.py keeps the order, and :mod:`sparkwarden.restart.recorder` the journal and the observer;
each step here acts on Docker, the host or the engine and returns a :class:`Done` saying what it
did (or raises ``StepFailed``).
"""

from __future__ import annotations

import time
from typing import Any

from sparkwarden.base import logs
from sparkwarden.base.containers import ContainerState, choose_active, command_line, voice_to_quiet
from sparkwarden.base.errors import NoSuchContainer, StepFailed
from sparkwarden.config.schema import Config
from sparkwarden.restart.memory_gate import drop_until
from sparkwarden.restart.parts import Parts, Resume, StepObserver
from sparkwarden.restart.recorder import Done, Recorder
from sparkwarden.restart.step_names import REPLICA_STEPS, STEPS
from sparkwarden.vllm import doctor_rules, metrics, serve_flags
from sparkwarden.vllm.doctor_rules import vllm_config_file

#: Exit code of a process ended by SIGKILL: ``docker stop`` ran out of patience.
_SIGKILL_EXIT = 137
#: One gateway attempt: long enough for a loaded gateway, short enough to retry a stuck one.
GATEWAY_TRY = 30.0

log = logs.get("sparkwarden.sequence")


class RunState:
    """The state of one run the steps share: what it chose, paused and found, and its leases."""

    @property
    def order(self) -> tuple[str, ...]:
        """The run's step names, in order: a replica that leaves its gateway's rotation for
        its runs has two more."""
        return REPLICA_STEPS if self.config.rotation is not None else STEPS

    def __init__(
        self,
        config: Config,
        parts: Parts,
        resume: Resume | None = None,
        target: str | None = None,
    ) -> None:
        self.config = config
        self.parts = parts
        self.id = 0
        self.record: Recorder
        self.container: ContainerState | None = None
        #: Where a repair picks up an interrupted run (None: a run of its own).
        self.resume = resume
        self.paused: list[str] = list(resume.voice_paused) if resume else []
        self.repairing = resume is not None
        #: The one container (ID) this run may touch; None: whichever is active.
        self.target = target
        #: A repair found an engine up that the interrupted run did not leave so (another
        #: candidate, a replacement, or one started after the run's stop): the operator's. It is
        #: not stopped, started or waited on; voice comes back at once, the daemon watches it.
        self.theirs: str | None = None
        self.llm_was_up = False
        #: A repair of a run that had sent ``docker stop``: a "running" LLM may be going down.
        self.stop_sent = False

    def open(self, run_id: int, observer: StepObserver) -> None:
        """The run's number, once the journal gave it: each step journaled, told and logged,
        with a heartbeat of each step's lease."""
        self.id = run_id
        self.record = Recorder(
            self.parts.journal,
            run_id,
            self.order,
            observer,
            self.parts.after_action,
            beat=lambda name: self.parts.heartbeat(self._lease(name)),
        )

    def chosen(self) -> ContainerState:
        """The container ``detect`` chose: the only one the later steps touch."""
        assert self.container is not None, "detect chooses the container first"
        return self.container

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
            "gateway_probe": cfg.llm.poll_interval + GATEWAY_TRY + call,
            "resume_voice": call * (1 + len(cfg.voice.containers)) + cfg.voice.stop_timeout,
        }
        return longest.get(name, call) + 30.0


class VoiceSteps(RunState):
    """Quiet the speech containers before the LLM stops, and bring back exactly those after."""

    def pause_voice(self) -> Done:
        docker, voice, resume = self.parts.docker, self.config.voice, self.resume
        if resume:  # its list was adopted when the run was made (``self.paused``)
            self.parts.journal.remember(self.id, voice_paused=self.paused, voice_mode=voice.mode)
            return Done(
                f"adopted from the interrupted run: {name_list(self.paused)}",
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
        summary = f"{verb} {name_list(self.paused)}"
        if left_alone:
            summary += "; left as they were: " + ", ".join(
                f"{n} ({s})" for n, s in left_alone.items()
            )
        return Done(summary, {verb: self.paused, "left_alone": left_alone})

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
        summary = f"resumed {name_list(resumed)}"
        if already:
            summary += "; already " + ", ".join(f"{n} {s}" for n, s in already.items())
        return Done(summary, detail, skipped=not self.paused)


class LlmSteps(RunState):
    """Choose the LLM container, stop it, wait for its memory to come back, start it again."""

    def detect(self) -> Done:
        docker, journal, resume = self.parts.docker, self.parts.journal, self.resume
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
            self.theirs = theirs(active, resume)
            if not active.up and not resume.llm_stopped:
                how = "started it" if resume.llm_started else "did not stop it"
                self.theirs = (
                    f"{active.name} is {active.status} and the interrupted run {how}:"
                    " left to the daemon's next check"
                )
            self.stop_sent = resume.llm_stopped and active.name == resume.container
            self.stop_sent = self.stop_sent and self.theirs is None
        else:
            active = choose_active(states, journal.last_container())
            if self.target is not None and active.id != self.target:
                raise StepFailed(
                    "detect",
                    f"{active.name} (id {active.id[:12]}, {active.status}) is not the container "
                    f"this run was for (id {self.target[:12]}): an operator replaced it or "
                    "started another; nothing was touched",
                )
            self._key_accepted(active)
        self.container = active
        journal.set_container(self.id, active.name, active.id)
        candidates = {s.name: s.status for s in states}
        return Done(
            f"{active.name} ({active.status}, id {active.id[:12]})",
            {
                "container": active.name,
                "id": active.id,
                "status": active.status,
                "candidates": candidates,
            },
        )

    def _key_accepted(self, active: ContainerState) -> None:
        """A key the engine refuses would fail the chat probe after the engine was stopped:
        the restart could never be proven, so nothing is stopped."""
        refused = self.parts.vllm.key_refused() if active.up else None
        if refused is not None:
            raise StepFailed(
                "detect",
                f"{active.name} refuses sparkwarden's API key ({refused}): a restart could not "
                "be proven, so nothing was stopped; fix llm.api_key_file (or "
                "$SPARKWARDEN_LLM_API_KEY) to the engine's --api-key",
            )

    def stop_llm(self) -> Done:
        docker, timeout, active = self.parts.docker, self.config.llm.stop_timeout, self.chosen()
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
        self.parts.journal.remember(self.id, llm_stopped=True, llm_stopped_at=time.time())
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
        if self.repairing and self.theirs:
            return Done(f"repair: {self.theirs}", skipped=True)
        if self.repairing and self.llm_was_up:
            return Done("repair: the LLM is up, nothing to start", skipped=True)
        mem, parts = self.config.memory, self.parts
        summary, figures = drop_until(
            parts.host,
            mem.start_min_available_gib,
            mem.start_wait,
            mem.drop_interval,
            parts.monotonic,
            parts.sleep,
            on_wait=lambda: parts.heartbeat(self._lease("drop_caches")),
        )
        return Done(summary, figures)

    def start_llm(self) -> Done:
        docker, active = self.parts.docker, self.chosen()
        if self.repairing and self.theirs:
            return Done(f"repair: {self.theirs}", skipped=True)
        if self.repairing and self.llm_was_up:
            return Done("repair: the LLM is up, nothing to start", skipped=True)
        self.parts.journal.remember(self.id, llm_started=True, llm_started_at=time.time())
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


def theirs(active: ContainerState, resume: Resume) -> str | None:
    """Why an engine a repair finds up is the operator's, not the interrupted run's; None
    when it is the run's own (still up, or started by the run)."""
    if not active.up:
        return None
    if active.name != resume.container:
        return f"{active.name} is another candidate, started by hand"
    if resume.container_id and active.id != resume.container_id:
        return f"{active.name} was replaced by hand (id {active.id[:12]})"
    started = active.started_at.timestamp() if active.started_at else None
    if resume.stopped_at is not None and started is not None and started > resume.stopped_at:
        return f"{active.name} was started by hand after the run's stop"
    return None


def engine_grace(attrs: dict[str, Any]) -> float | None:
    """vLLM's ``--shutdown-timeout`` as doctor reads it (command line in any spelling, and its
    ``--config`` file through the container's mounts); None when not set."""
    argv = command_line(attrs)
    return doctor_rules.shutdown_timeout(serve_flags.read(argv, vllm_config_file(attrs, argv)[0]))


def stop_timeout(configured: float, shutdown_grace: float | None) -> float:
    """``docker stop``'s timeout: above vLLM's ``--shutdown-timeout`` (running requests finish)
    by doctor's teardown margin, and never under the configured one."""
    if not shutdown_grace:
        return configured
    return max(configured, shutdown_grace + doctor_rules.SHUTDOWN_MARGIN)


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
        return (
            f"{running} request(s) running, given up to {shutdown_grace:g}s to finish; "
            "requests arriving meanwhile were refused with HTTP 500 (vLLM's drain)"
        )
    return (
        f"{running} request(s) running and cut: the engine has no --shutdown-timeout "
        "(vLLM aborts running requests at SIGTERM without one)"
    )


def name_list(names: list[str]) -> str:
    return ", ".join(names) if names else "none"
