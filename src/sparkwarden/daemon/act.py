"""The hands: carry out what the decider asked, and hand a run's result back as a value.

Only the main thread calls in here, so a sequence can never overlap another. The sequence runs
under the run lock (shared with a ``sparkwarden restart`` run by hand); its steps are streamed to
an operator's waiting request and published to status as they go.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from sparkwarden.adapters.systemd import SdNotify
from sparkwarden.base import logs
from sparkwarden.base.containers import ContainerState, voice_to_quiet
from sparkwarden.base.errors import HandedOver, LockBusy, SparkwardenError
from sparkwarden.base.version import version
from sparkwarden.config.schema import Config
from sparkwarden.daemon import intents as do
from sparkwarden.daemon import plans
from sparkwarden.daemon.cluster_hands import ClusterHands
from sparkwarden.daemon.handlers import ManualCall
from sparkwarden.daemon.kept import Kept
from sparkwarden.daemon.replica_looks import ReplicaLooks
from sparkwarden.restart import docker_policy, rotation, sequence
from sparkwarden.restart.journal import Plan, RunRecord
from sparkwarden.restart.lock import RunLock
from sparkwarden.restart.parts import Parts, Resume
from sparkwarden.restart.rotation_steps import own_path_chat
from sparkwarden.surfaces.webhooks import Webhooks

log = logs.get("sparkwarden.daemon")


class Hands(ClusterHands):
    """What the daemon does: each intent, the sequence under the run lock, the repair."""

    def __init__(
        self,
        config: Config,
        parts: Parts,
        webhooks: Webhooks,
        sd: SdNotify,
        publish: Callable[[], object],
    ) -> None:
        self.config = config
        self.parts = parts
        self.kept = Kept(parts.journal)
        self.webhooks = webhooks
        self.sd = sd
        self.publish = publish
        self.run_lock = RunLock(config.state.dir)
        #: What a running sequence is doing ("" before its first step); None when none runs.
        self.step: str | None = None
        self.boot = None
        self.gates: dict[str, str] | None = None
        #: a replica's turn (the daemon sets it): given back when a run ends
        self.turns: ReplicaLooks | None = None

    def carry_out(self, intents: list[do.Intent]) -> tuple[do.RunEnded | None, bool]:
        """Do each intent in order; returns a run's result, and whether the journal's facts
        changed (the caller reads them again)."""
        ended, wrote = None, False
        for intent in intents:
            match intent:
                case do.Say(level, event, fields):
                    getattr(log, level)(event, **fields)
                case do.Notify(kind, subject, summary, detail):
                    self.webhooks.emit(kind, subject, summary, **detail)
                case do.EventsSeen(until):
                    self.kept.see_events(until)
                case do.GiveUp(gave_up):
                    self.kept.give_up(gave_up)
                    wrote = True
                case do.RequireReboot(flag):
                    self.kept.require_reboot(flag)
                    wrote = True
                case do.ExpireHold():
                    self.kept.release()
                    wrote = True
                case do.ClearGaveUp(t):
                    self.kept.reset(t)
                    wrote = True
                case do.QuietVoiceForMemory():
                    self._quiet_voice_for_memory()
                case do.ResumeVoiceAfterMemory():
                    self._resume_voice_after_memory()
                case do.TakeOverPolicy(container):
                    self._take_over_policy(container)
                    wrote = True
                case do.Restart(reason, why, target, gates):
                    ended = self.sequence(reason, why, target=target, gates=dict(gates))
                case do.Adopt(engine):
                    self.kept.put_engine(engine)
                    self.kept.put_operator_stopped(None)  # it, or another, is up again
                    wrote = True
                case do.NoteOperatorStop(stop):
                    self.kept.put_operator_stopped(stop)
                    wrote = True
                case do.AdoptClusterStarts(starts, t):
                    self.kept.adopt_cluster_starts(starts, t)
                    wrote = True
                case do.KeepRetry(retry):
                    self.kept.put_retry(retry)
                    wrote = True
                case do.SpareFirstSight(first):
                    self.kept.put_first_sight(first)
                    wrote = True
                case do.Observe(reason, why, target, key, gates):
                    self.observe(reason, why, target, key, dict(gates))
                    wrote = True
                case do.TakeCanary():
                    pass  # a read, not an act: the daemon hands it to the observer
                case do.LeaveRotation(why):
                    self._leave_rotation(why)
                case do.RejoinRotation(why):
                    self._rejoin_rotation(why)
                case do.RotationTold():
                    if self.config.rotation is not None:
                        rotation.mark_told(self.config.rotation.flag)
        return ended, wrote

    def _leave_rotation(self, why: str) -> None:
        """Out of the gateway's rotation (the flag its Nginx reads), unless out already."""
        flag = self.config.rotation.flag if self.config.rotation else None
        if flag is None or rotation.read(flag) is not None:
            return
        try:
            rotation.take_out(flag, why)
        except OSError as exc:  # users still reach it: the drain's empty answers may show
            log.error("leave_rotation_failed", flag=str(flag), error=str(exc))
            return
        log.info("left_rotation", flag=str(flag), why=why)

    def _rejoin_rotation(self, why: str) -> None:
        """Back in rotation once the replica's own gateway path answers a chat; else still
        out, tried again at the next health check."""
        cfg, client = self.config, self.parts.own_path
        if cfg.rotation is None or client is None:
            return
        outcome = own_path_chat(cfg, self.parts)
        if not outcome.ok:
            log.warning("rejoin_refused", url=cfg.rotation.url, why=why, last=outcome.detail)
            return
        try:
            back = rotation.put_back(cfg.rotation.flag)
        except OSError as exc:
            log.error("rejoin_failed", flag=str(cfg.rotation.flag), error=str(exc))
            return
        if back:
            log.info("rejoined_rotation", url=cfg.rotation.url, why=why)

    def sequence(
        self,
        reason: str,
        why: str,
        call: ManualCall | None = None,
        target: str | None = None,
        gates: dict[str, str] | None = None,
    ) -> do.RunEnded | None:
        """The restart sequence under the run lock; None when the lock is someone else's.
        ``target``: the only container (ID) it may touch; ``gates``: what it passed, kept in
        its plan for ``sparkwarden why``."""
        self.gates = gates
        try:
            self.run_lock.acquire(reason)
        except LockBusy as exc:
            log.warning("sequence_refused", reason=reason, error=str(exc))
            return None
        self.step = ""
        log.info("sequence_begins", reason=reason, why=why)
        if self.config.cluster is not None:  # a cluster's head: every restart is the cluster's
            try:
                return self._cluster_sequence(reason, why, call)
            except HandedOver:
                return None  # left open, voice paused: the next daemon's repair finishes it
            finally:
                self.run_lock.release()

        observe = self._observer(reason, why, call)
        outcome = None
        try:
            outcome = sequence.restart(
                self.config, reason, self.parts, observer=observe, why=why, target=target
            )
        except HandedOver:
            return None  # left open, voice paused: the next daemon's repair finishes it
        finally:
            self.run_lock.release()
            self.step = None
            if self.turns is not None:
                self.turns.release()  # a replica's planned restart ended: the next may go
            if call is not None:
                call.done(outcome)
        assert outcome is not None  # sequence.restart records its own failures; it returns
        return do.RunEnded(reason, why, outcome, time.time())

    def observe(
        self, reason: str, why: str, target: str | None, key: str, gates: dict[str, str]
    ) -> None:
        """Observe mode: the restart it would make, recorded as an ``observed`` run whose steps
        say what each would do now (read from Docker and /proc, or each node), and notified.
        Nothing is touched, no lock is taken: no budget is spent and no gauge of runs moves."""
        try:
            lines = plans.plan_now(self.config, self.parts)
        except SparkwardenError as exc:
            lines = [("detect", f"the plan could not be read: {exc}")]
        container = next((text for name, text in lines if name == "detect"), "")
        plan: Plan = {"version": version(), "why": why, "observed_key": key, "gates": gates}
        run_id = self.parts.journal.record_observed(reason, plan, lines)
        log.warning("would_restart", run=run_id, reason=reason, why=why, target=target)
        summary = f"run #{run_id} ({reason}): {why}; nothing touched (watch.mode = observe)"
        self.webhooks.emit("would_restart", "llm", summary, plan=container)

    def repair(self) -> float | None:
        """Finish what a crash of sparkwarden left, a lone host's run or a cluster's: voice
        resumed, the LLM serving. Returns when the last repair ended, if one ran."""
        ended = None
        self.gates = None  # a repair passed no gate
        for run in self.parts.journal.unfinished():
            holder = self.run_lock.held_by_other()
            if holder:
                log.info("repair_skipped_running_elsewhere", run=run.id, holder=holder)
                continue
            self.run_lock.acquire("repair")
            log.warning("interrupted_run_found", run=run.id, reason=run.reason, plan=run.plan)
            try:
                if "cluster" in run.plan or self.config.cluster is not None:
                    self._repair_cluster(run)
                else:
                    self._repair_host(run)
            except HandedOver:
                break  # stopping again mid-boot: the next daemon repairs this repair
            finally:
                self.run_lock.release()
                self.step = None
                ended = time.time()
        return ended

    def _repair_host(self, run: RunRecord) -> None:
        """A lone host's run cut short: the sequence again from where it was, adopting what it
        paused and stopped (:class:`Resume`); closed as interrupted once the repair has written
        what it adopted (a kill in between leaves a run that still says what to resume)."""
        note = f"sparkwarden (pid {run.pid}) stopped during this run"
        resume = Resume.from_plan(run.container, run.plan, run.container_id)
        if resume is None:
            self.parts.journal.mark_interrupted(run.id, note)
            return  # cut short in detect: nothing had been touched
        cfg, found_at = self.config, time.time()
        self.step = ""
        budget_s = cfg.llm.health_timeout + cfg.llm.probe_timeout + 300
        self.sd.send(f"EXTEND_TIMEOUT_USEC={int(budget_s * 1e6)}")
        journal = self.parts.journal
        observe = self._observer(
            "repair", note, None, lambda: journal.mark_interrupted(run.id, note, found_at)
        )
        outcome = sequence.restart(cfg, "repair", self.parts, observer=observe, resume=resume)
        log.info("repaired", run=run.id, repair_run=outcome.run_id, ok=outcome.ok)

    def booting(self) -> dict[str, object] | None:
        """The snapshot's ``booting``: the run waiting for the started engine, and how long."""
        if self.boot is None or self.step is None:
            return None
        run_id, reason, why, since = self.boot
        return {
            "run": run_id,
            "reason": reason,
            "why": why,
            "waited_s": round(time.time() - since, 1),
            "health_timeout_s": self.config.llm.health_timeout,
        }

    def _quiet_voice_for_memory(self) -> None:
        """Pause the running voice containers, each noted in the journal before it is paused."""
        docker, paused = self.parts.docker, self.kept.memory_paused()
        for name in self.config.voice.containers:
            try:
                to_quiet, _ = voice_to_quiet({name: docker.inspect(name).status})
                if to_quiet:
                    self.kept.put_memory_paused([*paused, name])  # before acting
                    docker.pause(name)
                    paused.append(name)
                    log.warning("voice_paused_for_memory", container=name)
            except SparkwardenError as exc:
                log.error("voice_pause_failed", container=name, error=str(exc))

    def _take_over_policy(self, state: ContainerState) -> None:
        """Docker's restart policy to ``no``: the original recorded first (``uninstall-service``
        gives it back), and withdrawn if Docker refuses, so the record says what was changed."""
        before = self.kept.policies_taken()
        at = datetime.now(UTC).isoformat(timespec="seconds")
        self.kept.put_policies_taken(docker_policy.remember(before, state, at))
        was = str(docker_policy.Policy.of(state))
        try:
            self.parts.docker.set_restart_policy(state.name, docker_policy.NO.docker())
        except SparkwardenError as exc:
            self.kept.put_policies_taken(before)
            log.error("restart_policy_take_over_failed", container=state.name, error=str(exc))
            return
        log.warning("restart_policy_taken_over", container=state.name, was=was, now="no")
        self.webhooks.emit(
            "policy_taken_over",
            state.name,
            f"{state.name} had Docker restart policy {was!r}, which restarts a crashed engine "
            "into ghost memory: set to 'no' (uninstall-service restores it)",
            was=was,
        )

    def _resume_voice_after_memory(self) -> None:
        for name in self.kept.memory_paused():
            try:
                if self.parts.docker.inspect(name).status == "paused":
                    self.parts.docker.unpause(name)
                    log.info("voice_resumed_after_memory", container=name)
            except SparkwardenError as exc:
                log.error("voice_resume_failed", container=name, error=str(exc))
        self.kept.clear_memory_paused()
