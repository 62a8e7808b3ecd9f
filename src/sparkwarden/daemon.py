"""``sparkwarden run``: observe, decide, act, report. The shell around the pure triggers.

One main thread does everything that changes the box: it observes on a tick (and fires the
nightly schedule, from APScheduler's crontab trigger), takes Docker events and operator requests
from a queue, asks the triggers, and runs the sequence itself, so two sequences can never
overlap. Other threads only listen (Docker events, the control socket) or report (the watchdog
pinger, which pings only on a lease the main thread grants when it makes progress).
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from sparkwarden import acceptance, exporter, faults, logs, metrics, notify, sequence, triggers
from sparkwarden import status as status_mod
from sparkwarden.adapters.docker_events import ContainerEvent, EventStream
from sparkwarden.adapters.systemd import Notifier, Watchdog
from sparkwarden.adapters.vllm import ChatOutcome, Health
from sparkwarden.config import Config
from sparkwarden.containers import ContainerState, choose_active
from sparkwarden.control import (
    Answer,
    ControlServer,
    FaultRequest,
    HoldRequest,
    Peer,
    ReleaseRequest,
    ResetRequest,
    RestartRequest,
    StatusRequest,
)
from sparkwarden.errors import LockBusy, SparkwardenError
from sparkwarden.journal import Journal
from sparkwarden.lock import RunLock
from sparkwarden.schedule import crontab_trigger, missed_run_due, next_fire
from sparkwarden.sequence import STEPS, Parts, Resume, StepEvent

log = logs.get("sparkwarden.daemon")

#: Journal key: the time of the last Docker event a daemon has seen.
EVENTS_SEEN = "events_seen_until"
#: Slack on every watchdog lease, for scheduling noise on a loaded box.
_MARGIN = 5.0


@dataclass
class Pending:
    """A restart some trigger asked for, waiting on hold, budget, backoff or drain."""

    reason: str
    why: str
    since: float
    drain: triggers.DrainState | None = None


@dataclass
class ManualCall:
    """An operator's restart through the socket: its steps are streamed back to the caller."""

    reason: str
    requested_at: float = field(default_factory=time.time)
    started: threading.Event = field(default_factory=threading.Event)
    run_id: int | None = None
    refused: str | None = None
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)

    def claim(self) -> bool:
        with self.lock:
            return not self.cancelled

    def cancel(self) -> bool:
        with self.lock:
            if self.run_id is None and self.refused is None:
                self.cancelled = True
            return self.cancelled

    def refuse(self, why: str) -> None:
        self.refused = why
        self.started.set()


@dataclass(frozen=True)
class Recorded:
    """What the journal says, read again only when it can have changed (and every minute):
    the loop must cost next to nothing between events."""

    hold: dict[str, Any] | None
    gave_up: dict[str, Any] | None
    budget: triggers.Budget
    last_run: dict[str, Any] | None
    last_container: str | None
    run_counts: list[dict[str, Any]]
    read_at: float


class Daemon:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.notifier = Notifier()
        self.watchdog = Watchdog(self.notifier)
        self.parts = Parts.from_config(config)
        self.parts.heartbeat = self.watchdog.beat
        self.parts.should_abort = lambda: self.stopping
        self.journal = self.parts.journal
        self.queue: queue.Queue[Any] = queue.Queue()
        self.run_lock = RunLock(config.state.dir)
        self.daemon_lock = RunLock(config.state.dir, "daemon.lock")
        # Events are replayed from the last one a daemon saw: a crash while sparkwarden itself
        # was down (a watchdog restart, an upgrade) is still a crash.
        self.events = EventStream(
            list(config.llm.containers), self.queue.put, since=self.journal.get(EVENTS_SEEN)
        )
        self.control = ControlServer(config.control.socket, config.control.group, self._request)
        self.trigger = (
            crontab_trigger(config.schedule.cron, config.schedule.timezone)
            if config.schedule.cron
            else None
        )
        #: The next nightly fire time; the loop itself fires it (no scheduler thread).
        self.next_schedule: datetime | None = None
        self.faults = faults.enabled()
        self.notify = notify.Notifier(list(config.notify))
        self.exporter: Any = None
        self.stopping = False
        self.hang = False

        # What the loop knows; published as the status snapshot.
        self.state = "starting"
        self.step_text = ""
        self.active: ContainerState | None = None
        self.llm_note = ""
        self.operator_stopped: str | None = None
        self.memory = self.parts.host.memory()
        self.engine: metrics.EngineMetrics | None = None
        self.metrics_note = "not scraped yet"
        self.last_probe = ""
        self.acc = acceptance.AcceptanceState()
        self.health = triggers.HealthState()
        self.gateway = triggers.GatewayWatch()
        self.mem_state = triggers.MemoryState()
        self.exits: dict[str, triggers.ExitWatch] = {}
        self.pending: Pending | None = None
        self.last_sequence_end = 0.0
        self.due = {"health": 0.0, "metrics": 0.0, "canary": 0.0}
        self.recorded = self._reload(time.time())
        self.status_written = (0.0, "")
        self.snapshot_lock = threading.Lock()
        self.manual_lock = threading.Lock()
        self.manual_call: ManualCall | None = None
        self.snapshot: dict[str, Any] = {}

    # --- life cycle ----------------------------------------------------------------------------

    def run(self) -> int:
        try:
            self.daemon_lock.acquire("daemon")
        except LockBusy:
            log.error("already_running", lock=str(self.daemon_lock.path))
            print(f"sparkwarden: another daemon is running ({self.daemon_lock.held_by_other()})")
            return 1
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.watchdog.start()
        self.watchdog.beat(self._loop_lease())
        try:
            self._repair()
            self._observe(time.time())
            self._start_listeners()
            self._catch_up_schedule()
            self.state = "idle"
            self._publish()
            self.notifier.ready(self._status_line())
            log.info("ready", containers=self.config.llm.containers, faults=self.faults)
            self._loop()
        finally:
            self._shutdown()
        return 0

    def _start_listeners(self) -> None:
        self.events.start()
        self.control.start()
        self.notify.start()
        if self.config.metrics.listen:
            self.exporter = exporter.serve(self.config.metrics.listen, self._current_snapshot)
            log.info("metrics_serving", listen=self.config.metrics.listen)

    def _current_snapshot(self) -> dict[str, Any]:
        with self.snapshot_lock:
            return self.snapshot

    def _shutdown(self) -> None:
        self.notifier.stopping()
        self.events.stop()
        self._mark_events_seen()
        self.control.stop()
        self.notify.stop()
        if self.exporter is not None:
            self.exporter.shutdown()
        self.watchdog.stop()
        self._publish(running=False)
        self.parts.close()
        self.daemon_lock.release()
        log.info("stopped")

    def _mark_events_seen(self) -> None:
        """Everything before now was handled, but what is still queued: the next daemon
        replays from the first event this one did not get to."""
        pending = [i.t for i in list(self.queue.queue) if isinstance(i, ContainerEvent)]
        self.journal.put(EVENTS_SEEN, min(pending) - 1e-3 if pending else time.time())

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.stopping:
            return
        self.stopping = True
        log.info("stop_requested", signal=signal.Signals(signum).name, state=self.state)
        if self.state == "restarting":
            # The sequence stops waiting for /health and resumes voice before we exit.
            cfg = self.config
            self.notifier.stopping(extend_s=cfg.llm.probe_timeout + cfg.docker.timeout * 4 + 60)
        else:
            self.notifier.stopping()
        self.queue.put(("wake", None))

    # --- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        interval = self.config.watch.interval
        next_tick = time.monotonic() + interval
        while not self.stopping:
            if self.hang:  # fault injection: a wedged loop, as a hung call would leave it
                time.sleep(0.5)
                continue
            try:
                item = self.queue.get(timeout=max(0.0, next_tick - time.monotonic()))
                self._handle(item)
            except queue.Empty:
                pass
            if time.monotonic() >= next_tick:
                self._observe(time.time())
                self._check_schedule(datetime.now(UTC))
                next_tick = time.monotonic() + interval
            if not self.stopping:
                self._act(time.time())
            self.watchdog.beat(self._loop_lease())
            self._publish()

    def _loop_lease(self) -> float:
        """Idle, the loop comes round every ``interval``; slow calls take their own lease."""
        return self.config.watch.interval + _MARGIN

    def _handle(self, item: Any) -> None:
        if item == ("wake", None):  # an operator changed hold, budget or gave-up
            self.recorded = self._reload(time.time())
        elif isinstance(item, ContainerEvent):
            self._on_container_event(item)
        elif isinstance(item, ManualCall):
            if not item.claim():
                return
            if self.last_sequence_end > item.requested_at:  # one ran while it waited in line
                last = self.journal.runs(1)
                item.refuse(
                    "another sequence is running: it ended just now"
                    + (f" (run #{last[0].id}, {last[0].reason})" if last else "")
                )
                return
            self._sequence(item.reason, "requested by an operator", call=item)

    def _fresh(self, t: float) -> str | None:
        """Why a nightly restart is pointless now: the engine was (re)started minutes ago."""
        active, least = self.active, self.config.schedule.min_uptime
        uptime = active.uptime_s(datetime.fromtimestamp(t, UTC)) if active else None
        if active is None or uptime is None or uptime >= least:
            return None
        return f"{active.name} up only {uptime:.0f}s (schedule.min_uptime {least:g}s)"

    # --- observing -----------------------------------------------------------------------------

    def _on_container_event(self, event: ContainerEvent) -> None:
        self.journal.put(EVENTS_SEEN, event.t)
        if event.t <= self.last_sequence_end:
            return  # our own stop and start
        watch = self.exits.get(event.name, triggers.ExitWatch())
        watch = watch.on_event(event.action, event.signal, event.t)
        self.exits[event.name] = watch
        log.info(
            "container_event",
            container=event.name,
            action=event.action,
            exit_code=event.exit_code,
            signal=event.signal,
        )
        if event.action == "start":
            if self.operator_stopped == event.name:
                self.operator_stopped = None
            self.health = triggers.HealthState()
        if event.action != "die":
            return
        kind = watch.classify_die(event.t, self.config.llm.stop_timeout + 15)
        if kind == "operator-stop":
            self.operator_stopped = event.name
            self.llm_note = f"{event.name} stopped by hand: not restarting it"
            log.warning("operator_stopped", container=event.name, exit_code=event.exit_code)
            return
        try:
            now = self.parts.docker.inspect(event.name)
        except SparkwardenError as exc:
            log.error("inspect_failed", container=event.name, error=str(exc))
            return
        if now.up:  # a restart policy or an operator brought it back already
            log.warning("died_but_up_again", container=event.name, status=now.status)
            return
        why = f"{event.name} died with exit code {event.exit_code}"
        self._want("crash", why, event.t)

    def _observe(self, t: float) -> None:
        now = datetime.fromtimestamp(t, UTC)
        cfg = self.config
        self.watchdog.beat(cfg.docker.timeout * (len(cfg.llm.containers) + 1) + _MARGIN)
        try:
            states = [self.parts.docker.inspect(name) for name in cfg.llm.containers]
            self.active = choose_active(states, self.recorded.last_container)
            if not self.operator_stopped:
                self.llm_note = ""
        except SparkwardenError as exc:
            self.active, self.llm_note = None, str(exc)
        self.memory = self.parts.host.memory()
        self.mem_state, alert = triggers.memory_observe(
            self.mem_state, self.memory.available_gib, t, cfg.memory
        )
        if alert == "alert":
            self._memory_alert(t)
        elif alert == "recovered":
            log.info("memory_recovered", available_gib=round(self.memory.available_gib, 1))
            self._resume_memory_paused()

        active = self.active
        running = active is not None and active.status == "running"
        why = triggers.uptime_due(active if running else None, now, cfg.watch.max_uptime)
        if why:
            self._want("uptime", why, t)
        if not running:
            return
        if t >= self.due["metrics"]:
            self.due["metrics"] = t + min(cfg.health.interval, 30.0)
            self._scrape(t)
        if t >= self.due["health"]:
            self.due["health"] = t + cfg.health.interval
            self._check_health(t, now)

    def _scrape(self, t: float) -> None:
        self.watchdog.beat(self.config.health.timeout + _MARGIN)
        text = self.parts.vllm.metrics(timeout=self.config.health.timeout)
        if text is None:
            self.engine, self.metrics_note = None, "/metrics did not answer"
        else:
            try:
                self.engine, self.metrics_note = metrics.parse(text), "ok"
            except metrics.MetricsError as exc:
                self.engine, self.metrics_note = None, str(exc)
        if self.engine is None:
            log.warning("metrics_unusable", note=self.metrics_note)
        if not self.config.acceptance.enabled:
            return
        was_available = self.acc.available
        self.acc, fire = acceptance.observe(self.acc, self.engine, t, self.config.acceptance)
        if was_available and not self.acc.available:
            log.warning(
                "acceptance_trigger_off",
                why=self.metrics_note if self.engine is None else "no spec-decode series",
            )
        if fire:
            self._want("acceptance", fire.why, t)

    def _check_health(self, t: float, now: datetime) -> None:
        cfg, vllm = self.config, self.parts.vllm
        assert self.active is not None
        # The canary, and after it the users' path when watched.
        probes = 2 if cfg.gateway is not None and cfg.gateway.watch else 1
        self.watchdog.beat(2 * cfg.health.timeout + probes * cfg.llm.probe_timeout + _MARGIN)
        health: Health = vllm.health(timeout=cfg.health.timeout)
        canary: ChatOutcome | None = None
        busy = self.engine is not None and self.engine.busy
        if (
            cfg.health.canary_interval > 0
            and t >= self.due["canary"]
            and health.status == "up"
            and not busy
        ):
            self.due["canary"] = t + cfg.health.canary_interval
            model = cfg.llm.model or vllm.served_model()
            canary = (
                vllm.chat(model, timeout=cfg.llm.probe_timeout)
                if model
                else ChatOutcome(False, "/v1/models names no model")
            )
            self.last_probe = f"{'ok' if canary.ok else 'FAILED'} {canary.detail}"[:70]
            if canary.ok and cfg.gateway is not None and cfg.gateway.watch and self.parts.gateway:
                self._gateway_seen(
                    self.parts.gateway.chat(cfg.gateway.model, timeout=cfg.llm.probe_timeout), t
                )
        self.health, why = triggers.health_observe(
            self.health,
            t=t,
            uptime_s=self.active.uptime_s(now),
            boot_grace=cfg.watch.boot_grace,
            health=health,
            canary=canary,
            metrics=self.engine,
            cfg=cfg.health,
        )
        if why:
            self._want("unhealthy", why, t)

    def _gateway_seen(self, outcome: ChatOutcome, t: float) -> None:
        """Report the users' path; whatever it says, the engine is left alone."""
        assert self.config.gateway is not None
        self.gateway, why = triggers.gateway_observe(self.gateway, outcome, t)
        if why:
            log.warning("gateway_failed", url=self.config.gateway.url, why=why)
            self.notify.emit("gateway_failed", self.config.gateway.url, why)

    def _memory_alert(self, t: float) -> None:
        cfg = self.config.memory
        log.warning(
            "memory_floor",
            available_gib=round(self.memory.available_gib, 1),
            floor_gib=cfg.floor_gib,
            action=cfg.floor_action,
        )
        self.notify.emit(
            "memory_floor",
            "host",
            f"MemAvailable {self.memory.available_gib:.1f} GiB, under the floor of "
            f"{cfg.floor_gib:g} GiB for {cfg.floor_for:g}s; action: {cfg.floor_action}",
        )
        if cfg.floor_action == "restart":
            self._want(
                "memory",
                f"MemAvailable {self.memory.available_gib:.1f} GiB below the "
                f"floor of {cfg.floor_gib:g} GiB",
                t,
            )
        elif cfg.floor_action == "pause_voice":
            docker, paused = self.parts.docker, list(self.journal.get("memory_paused") or [])
            for name in self.config.voice.containers:
                try:
                    if docker.inspect(name).status == "running":
                        self.journal.put("memory_paused", [*paused, name])  # before acting
                        docker.pause(name)
                        paused.append(name)
                        log.warning("voice_paused_for_memory", container=name)
                except SparkwardenError as exc:
                    log.error("voice_pause_failed", container=name, error=str(exc))

    def _resume_memory_paused(self) -> None:
        """Unpause exactly what the memory floor paused, once memory is back."""
        for name in self.journal.get("memory_paused") or []:
            try:
                if self.parts.docker.inspect(name).status == "paused":
                    self.parts.docker.unpause(name)
                    log.info("voice_resumed_after_memory", container=name)
            except SparkwardenError as exc:
                log.error("voice_resume_failed", container=name, error=str(exc))
        self.journal.delete("memory_paused")

    # --- deciding and acting -------------------------------------------------------------------

    def _want(self, reason: str, why: str, t: float) -> None:
        """Note a trigger; an urgent one replaces a planned one still waiting."""
        if self.pending is not None and (
            reason in triggers.PLANNED or self.pending.reason not in triggers.PLANNED
        ):
            return
        log.info("trigger", reason=reason, why=why)
        self.pending = Pending(reason, why, t)

    def _act(self, t: float) -> None:
        pending = self.pending
        if pending is None:
            return
        hold = self._hold(t)
        refuse = None
        if hold:
            until = status_mod.local_time(hold["until"])
            refuse = f"held until {until}: {hold.get('reason') or ''}"
        elif self.journal.get("gave_up"):
            refuse = "gave up earlier: waiting for an operator ('sparkwarden reset')"
        elif self.operator_stopped:
            refuse = f"{self.operator_stopped} was stopped by hand"
        if pending.reason == "schedule" and (fresh := self._fresh(t)):
            log.info("schedule_skipped", why=fresh)
            self.pending = None
            return
        if refuse:
            log.warning("trigger_refused", reason=pending.reason, why=pending.why, refused=refuse)
            self.pending = None
            return
        verdict = self._budget(t)
        if not verdict.allowed:
            if verdict.not_before is None:
                self._give_up(pending, verdict, t)
            return  # backing off: keep it pending
        if pending.reason in triggers.PLANNED:
            if pending.drain is None:
                pending.drain = triggers.DrainState(started=t)
                self.state = "draining"
                log.info("draining", reason=pending.reason)
            if self.active is not None:
                self._scrape(t)
            pending.drain, go = triggers.drain_observe(
                pending.drain, self.engine, t, self.config.drain
            )
            if go is None:
                return
            log.info("drained", reason=pending.reason, why=go)
        self.pending = None
        self._sequence(pending.reason, pending.why)

    def _budget(self, t: float) -> triggers.Budget:
        cfg = self.config.budget
        runs = [triggers.PastRun(*r) for r in self.journal.past_runs(t - cfg.window)]
        return triggers.budget(runs, t, float(self.journal.get("reset_at") or 0.0), cfg)

    def _give_up(self, pending: Pending, verdict: triggers.Budget, t: float) -> None:
        why = f"restart budget spent: {verdict.why}; last trigger {pending.reason}: {pending.why}"
        self.journal.put(
            "gave_up",
            {
                "reason": pending.reason,
                "why": why,
                "at": datetime.fromtimestamp(t, UTC).isoformat(),
            },
        )
        self.pending = None
        self.recorded = self._reload(t)
        log.error("gave_up", reason=pending.reason, why=why)
        self.notify.emit("gave_up", self.active.name if self.active else "llm", why)

    def _hold(self, t: float) -> dict[str, Any] | None:
        hold: dict[str, Any] | None = self.journal.get("hold")
        if hold and datetime.fromisoformat(hold["until"]).timestamp() <= t:
            self.journal.delete("hold")
            log.info("hold_expired")
            self.recorded = self._reload(t)
            return None
        return hold

    def _sequence(self, reason: str, why: str, call: ManualCall | None = None) -> None:
        try:
            self.run_lock.acquire(reason)
        except LockBusy as exc:
            log.warning("sequence_refused", reason=reason, error=str(exc))
            return
        self.state, self.step_text = "restarting", ""
        log.info("sequence_begins", reason=reason, why=why)

        def observe(event: StepEvent) -> None:
            self.step_text = f"step {event.index} of {len(STEPS)}: {event.name}"
            if event.phase == "begin" and event.index == 1:
                self.run_lock.set_run(event.run_id, reason)
                if call is not None:
                    call.run_id = event.run_id
                    call.started.set()
            if call is not None and (event.phase == "end" or event.summary):
                call.events.put({"event": "step", **asdict(event)})
            self._publish()

        outcome = None
        try:
            outcome = sequence.restart(self.config, reason, self.parts, observer=observe)
        finally:
            self.run_lock.release()
            self.last_sequence_end = time.time()
            self.state, self.step_text = "idle", ""
            if call is not None:
                call.events.put(
                    {
                        "event": "done",
                        "ok": bool(outcome and outcome.ok),
                        "run": call.run_id,
                        "container": outcome.container if outcome else None,
                        "error": outcome.error if outcome else "sparkwarden stopped mid-run",
                    }
                )
        self.health = triggers.HealthState()
        self.due = {
            "health": 0.0,
            "metrics": 0.0,
            "canary": time.time() + self.config.health.canary_interval,
        }
        if outcome.ok and reason not in triggers.AUTOMATIC:  # an operator's run clears it all
            self.journal.delete("gave_up")
            self.journal.put("reset_at", time.time())
        self.recorded = self._reload(time.time())
        subject = outcome.container or "llm"
        gateway = self.config.gateway
        if gateway is not None and outcome.ok:
            self.gateway = triggers.GatewayWatch(True, "ok (the run's gateway probe)")
        if gateway is not None and outcome.failed_step == triggers.GATEWAY_STEP:
            self.gateway = triggers.GatewayWatch(False, f"FAILED {outcome.error}", time.time())
            self.notify.emit(
                "gateway_failed",
                gateway.url,
                f"run #{outcome.run_id} ({reason}): {outcome.error}",
                run=outcome.run_id,
            )
        elif not outcome.ok:
            self.notify.emit(
                "run_failed",
                subject,
                f"run #{outcome.run_id} ({reason}) failed: {outcome.error}",
                run=outcome.run_id,
                reason=reason,
            )
        elif reason == "crash":
            self.notify.emit(
                "crash_recovered",
                subject,
                f"{why}; run #{outcome.run_id} brought it back and it answered a chat request",
                run=outcome.run_id,
            )
        if outcome.ok:
            self.last_probe = "ok (the run's chat probe)"
        elif triggers.retry_failed_run(reason, outcome.failed_step) and not self.stopping:
            self._want(
                reason, f"retry after failed run #{outcome.run_id}: {outcome.error}", time.time()
            )
        self._observe(time.time())

    def _repair(self) -> None:
        """Finish what a crash of sparkwarden left: voice resumed, the LLM serving."""
        for run in self.journal.unfinished():
            holder = self.run_lock.held_by_other()
            if holder:
                log.info("repair_skipped_running_elsewhere", run=run.id, holder=holder)
                continue
            self.run_lock.acquire("repair")
            try:
                note = f"sparkwarden (pid {run.pid}) stopped during this run"
                self.journal.mark_interrupted(run.id, note)
                log.warning("interrupted_run_found", run=run.id, reason=run.reason, plan=run.plan)
                if run.container is None:
                    continue  # cut short in detect: nothing had been touched
                self.state = "restarting"
                cfg = self.config
                budget_s = cfg.llm.health_timeout + cfg.llm.probe_timeout + 300
                self.notifier.send(f"EXTEND_TIMEOUT_USEC={int(budget_s * 1e6)}")
                resume = Resume(run.container, list(run.plan.get("voice_paused", [])))
                outcome = sequence.restart(cfg, "repair", self.parts, resume=resume)
                log.info("repaired", run=run.id, repair_run=outcome.run_id, ok=outcome.ok)
            finally:
                self.run_lock.release()
                self.last_sequence_end = time.time()
        self.recorded = self._reload(time.time())

    def _check_schedule(self, now: datetime) -> None:
        """Fire the nightly restart when its time has come; late by more than the grace (the
        loop was busy in a long sequence), it is skipped rather than run at a surprising hour."""
        due = self.next_schedule
        if self.trigger is None or due is None or now < due:
            return
        late = (now - due).total_seconds()
        if late <= max(self.config.schedule.missed_grace, 2 * self.config.watch.interval):
            self._want("schedule", f"nightly schedule, due {due.isoformat()}", now.timestamp())
        else:
            log.warning("schedule_missed", due=due.isoformat(), late_s=round(late))
        self.next_schedule = next_fire(self.trigger, max(now, due) + timedelta(seconds=1))

    def _catch_up_schedule(self) -> None:
        if self.trigger is None:
            return
        now = datetime.now(UTC)
        self.next_schedule = next_fire(self.trigger, now)
        last = self.journal.last_run_of("schedule")
        last_at = datetime.fromtimestamp(last.started_at, UTC) if last else None
        missed = missed_run_due(
            self.trigger, now, timedelta(seconds=self.config.schedule.missed_grace), last_at
        )
        if missed is not None:
            self._want("schedule", f"making up the run due at {missed.isoformat()}", time.time())

    # --- operator requests (control thread) ----------------------------------------------------

    def _request(self, request: Any, peer: Peer) -> Answer:
        log.info("control_request", cmd=request.cmd, uid=peer.uid, pid=peer.pid)
        if isinstance(request, StatusRequest):
            with self.snapshot_lock:
                return {"ok": True, "status": self.snapshot}
        if isinstance(request, RestartRequest):
            return self._manual(request.reason)
        if isinstance(request, FaultRequest):
            if not self.faults:
                return {"ok": False, "error": f"fault injection is off (set {faults.ENABLE}=1)"}
            self.hang = True
            self.watchdog.frozen = True
            log.warning("fault_injected", fault=request.name)
            return {"ok": True}
        journal = Journal(self.config.state.dir)
        try:
            return apply_admin(journal, request)
        finally:
            journal.close()
            self.queue.put(("wake", None))

    def _manual(self, reason: str) -> Iterator[dict[str, Any]]:
        """Queue the run for the main thread, then stream its steps until it is done.

        One operator request at a time: a second one, while the first is queued or running,
        is refused at once rather than run after it.
        """
        call = ManualCall(reason)
        with self.manual_lock:
            holder = self.run_lock.held_by_other()
            busy = (
                self.manual_call
                or holder
                or (self.step_text if self.state == "restarting" else None)
            )
            if busy:
                what = busy if isinstance(busy, str) else f"an operator's ({busy.reason})"
                yield {"ok": False, "error": f"another sequence is running: {what}"}
                return
            self.manual_call = call
        try:
            self.queue.put(call)
            if not call.started.wait(timeout=10.0) and call.cancel():
                yield {"ok": False, "error": "the daemon is busy; try again"}
                return
            call.started.wait()
            if call.refused:
                yield {"ok": False, "error": call.refused}
                return
            yield {"ok": True, "run": call.run_id}
            while True:
                event = call.events.get()
                yield event
                if event["event"] == "done":
                    return
        finally:
            with self.manual_lock:
                self.manual_call = None

    # --- reporting -----------------------------------------------------------------------------

    def _reload(self, t: float) -> Recorded:
        runs = self.journal.runs(1)
        hold = self.journal.get("hold")
        if hold and datetime.fromisoformat(hold["until"]).timestamp() <= t:
            hold = None
        return Recorded(
            hold=hold,
            gave_up=self.journal.get("gave_up"),
            budget=self._budget(t),
            last_run=runs[0].to_json() if runs else None,
            last_container=self.journal.last_container(),
            run_counts=self.journal.run_counts(),
            read_at=t,
        )

    def _publish(self, running: bool = True) -> None:
        """Keep the snapshot current; write the status file when it says something new (or
        every 30 s): an fsync every tick would be most of an idle daemon's work."""
        t = time.time()
        if t - self.recorded.read_at >= 60:
            self.recorded = self._reload(t)
        snapshot = self._snapshot(running)
        with self.snapshot_lock:
            self.snapshot = snapshot
        line = self._status_line()
        self.notifier.status(line)
        last_t, last_line = self.status_written
        if line == last_line and t - last_t < 30 and running:
            return
        try:
            status_mod.write_atomic(self.config.state.dir / status_mod.STATUS_FILE, snapshot)
            self.status_written = (t, line)
        except OSError as exc:
            log.error("status_write_failed", error=str(exc))

    def _state_name(self) -> str:
        if self.state == "restarting":
            return f"restarting: {self.step_text}" if self.step_text else "restarting"
        if self.recorded.gave_up:
            return "gave up"
        if self.state == "idle" and self.recorded.hold:
            return "held"
        return self.state

    def _next_restart(self, now: datetime) -> dict[str, str] | None:
        options: list[tuple[datetime, str]] = []
        if self.next_schedule is not None:
            options.append((self.next_schedule.astimezone(UTC), "schedule"))
        active, limit = self.active, self.config.watch.max_uptime
        if active is not None and active.status == "running" and active.started_at and limit > 0:
            options.append((active.started_at + timedelta(seconds=limit), "uptime"))
        if not options:
            return None
        at, reason = min(options)
        return {"at": at.isoformat(timespec="seconds"), "reason": reason}

    def _snapshot(self, running: bool) -> dict[str, Any]:
        now = datetime.now(UTC)
        active = self.active
        budget, recorded = self.recorded.budget, self.recorded
        health = self.health.last
        if self.health.failures:
            health += f" ({self.health.failures} failure(s) in a row)"
        return {
            "written_at": now.isoformat(timespec="seconds"),
            "daemon": {
                "running": running,
                "pid": os.getpid(),
                "state": self._state_name(),
                "pending": self.pending.reason if self.pending else None,
            },
            "llm": {
                "container": active.name if active else None,
                "status": active.status if active else "unknown",
                "uptime_s": active.uptime_s(now) if active else None,
                "health": health,
                "last_probe": self.last_probe,
                "note": self.llm_note,
                "operator_stopped": self.operator_stopped,
            },
            "memory": {
                "available_gib": round(self.memory.available_gib, 2),
                "total_gib": round(self.memory.total_gib, 2),
                "below_floor": self.mem_state.below_since is not None,
            },
            "acceptance": {
                "current": self.acc.current,
                "baseline": self.acc.baseline,
                "health": self.acc.health,
                "method": self.acc.method,
                "available": self.acc.available,
                "note": self.acc.note,
                "enabled": self.config.acceptance.enabled,
            },
            "metrics": self.metrics_note,
            "gateway": (
                {"url": self.config.gateway.url, "watch": self.config.gateway.watch}
                | asdict(self.gateway)
                if self.config.gateway
                else None
            ),
            "next_restart": self._next_restart(now),
            "budget": {"used": budget.used, "limit": budget.limit, "why": budget.why},
            "hold": recorded.hold,
            "gave_up": recorded.gave_up,
            "last_run": recorded.last_run,
            "run_counts": recorded.run_counts,
        }

    def _status_line(self) -> str:
        s = self.snapshot or self._snapshot(True)
        llm, mem, acc = s["llm"], s["memory"], s["acceptance"]
        parts = [s["daemon"]["state"]]
        if llm["container"]:
            parts.append(
                f"{llm['container']} {llm['status']}"
                + (
                    f" up {status_mod.duration(llm['uptime_s'] // 60 * 60)}"  # minutes do
                    if llm["uptime_s"] is not None
                    else ""
                )
            )
        if acc["current"] is not None:
            base = f"{acc['baseline']:.0%}" if acc["baseline"] is not None else "learning"
            parts.append(f"acc {acc['current']:.0%}/{base}")
        parts.append(f"mem {mem['available_gib']:.0f}/{mem['total_gib']:.0f} GiB")
        if s["next_restart"]:
            at = datetime.fromisoformat(s["next_restart"]["at"]).astimezone()
            parts.append(f"next {at:%a %H:%M} ({s['next_restart']['reason']})")
        return " | ".join(parts)


def apply_admin(journal: Journal, request: Any) -> dict[str, Any]:
    """hold / release / reset: durable state the daemon reads, with or without a daemon."""
    if isinstance(request, HoldRequest):
        until = datetime.now(UTC) + timedelta(seconds=request.seconds)
        hold = {"until": until.isoformat(timespec="seconds"), "reason": request.reason}
        journal.put("hold", hold)
        log.info("hold", **hold)
        return {"ok": True, "hold": hold}
    if isinstance(request, ReleaseRequest):
        journal.delete("hold")
        log.info("released")
        return {"ok": True}
    if isinstance(request, ResetRequest):
        journal.delete("gave_up")
        journal.put("reset_at", time.time())
        log.info("budget_reset")
        return {"ok": True}
    raise SparkwardenError(f"unknown request {request!r}")
