"""``sparkwarden run``: the loop. Wiring only; each job lives in a room of its own.

One main thread does everything that changes the box: on a tick it observes
(:mod:`~sparkwarden.daemon.observe`) and fires the nightly schedule; between ticks it takes Docker
events and operator requests from a queue. Each input goes to the pure decider
(:mod:`~sparkwarden.daemon.decide`), whose intents the hands carry out
(:mod:`~sparkwarden.daemon.act`, which runs the sequence itself, so two can never overlap); a run's
result goes back to the decider. Every pass publishes the snapshot
(:mod:`~sparkwarden.daemon.publish`). Other threads only listen (Docker events, the control socket,
whose requests :mod:`~sparkwarden.daemon.handlers` answers) or report (the watchdog pinger, which
pings only on a lease the main thread grants when it makes progress).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from sparkwarden.adapters.docker_events import ContainerEvent, EventStream
from sparkwarden.adapters.systemd import SdNotify, Watchdog
from sparkwarden.base import logs
from sparkwarden.base.cron import crontab_trigger
from sparkwarden.base.errors import LockBusy, SparkwardenError
from sparkwarden.cluster.replicas import PeersLook
from sparkwarden.cluster.watch import Look
from sparkwarden.config import schema as config_mod
from sparkwarden.config.locate import resolve_path
from sparkwarden.config.schema import Config
from sparkwarden.config.secrets import require_secrets
from sparkwarden.daemon import decide, gates, publish, reconcile, rotation
from sparkwarden.daemon.act import Hands
from sparkwarden.daemon.cluster_looks import ClusterLooks
from sparkwarden.daemon.handlers import REFUSED, WAKE, Handlers, ManualCall
from sparkwarden.daemon.intents import Adopt, RunEnded, TakeCanary
from sparkwarden.daemon.kept import Identity, Kept
from sparkwarden.daemon.observe import MARGIN, Observation, Observer, Recorded, read_journal
from sparkwarden.daemon.replica_looks import ReplicaLooks
from sparkwarden.evidence import triggers
from sparkwarden.restart.lock import RunLock
from sparkwarden.restart.parts import Parts
from sparkwarden.surfaces import exporter, status_text
from sparkwarden.surfaces.control import ControlServer, group_id
from sparkwarden.surfaces.webhooks import Webhooks

log = logs.get("sparkwarden.daemon")


class Daemon:
    def __init__(
        self, config: Config, path: Path | None = None, previous: Daemon | None = None
    ) -> None:
        self.config = config
        #: Where SIGHUP re-reads the config from; the new one, once read and valid.
        self.path = path
        self.reload_wanted = False
        #: The daemon this one follows in the process (a reload): a SIGHUP it took while it
        #: wound down, until this one's handlers are in, is this one's to act on.
        self.previous = previous
        self.reloaded: Config | None = None
        self.sd = SdNotify()
        self.watchdog = Watchdog(self.sd)
        self.parts = Parts.from_config(config, self.watchdog.beat, self._should_stop)
        self.kept = Kept(self.parts.journal)
        #: a SimpleQueue: its put is safe in a signal handler (a Queue's lock is not)
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        #: the stop signal's name, set by the handler; said (log, systemd) by the main thread
        self.signalled: str | None = None
        self.signal_told = False
        self.daemon_lock = RunLock(config.state.dir, "daemon.lock")
        # Events are replayed from the last one a daemon saw, or from when the first daemon
        # began to listen: a crash, or an operator's stop, while sparkwarden itself was down (a
        # kill -9, a watchdog restart, an upgrade) is still told for what it was.
        seen = self.kept.events_seen()
        self.first_listener = seen is None
        self.events = EventStream(list(config.llm.containers), self.queue.put, since=seen)
        self.webhooks = Webhooks(list(config.notify))
        self.observer = Observer(config, self.parts, self.watchdog.beat)
        self.hands = Hands(config, self.parts, self.webhooks, self.sd, self._publish)
        self.reporter = publish.Publisher(config, self.sd)
        self.handlers = Handlers(
            config, self.queue, self.reporter.as_json, self._busy, self._freeze
        )
        self.control = ControlServer(config.control.socket, config.control.group, self.handlers)
        self.crontab = (
            crontab_trigger(config.schedule.cron, config.schedule.timezone)
            if config.schedule.cron
            else None
        )
        self.exporter: Any = None
        #: a cluster's head looks at every node (SSH) off the loop; None on a lone host
        self.cluster_looks = (
            # no look while a run goes, this daemon's or a typed one's: it would see the run's
            # own stops, want a restart and be refused by the lock, look after look
            ClusterLooks(config, self.queue.put, lambda: self._busy() is not None)
            if config.cluster is not None
            else None
        )
        #: a replica looks at its peers and the turn (SSH) off the loop; None otherwise
        self.replica_looks = (
            ReplicaLooks(config, self.queue.put) if config.replicas is not None else None
        )
        self.hands.turns = self.replica_looks
        self.stopping = False
        #: what transitions led to, taken in order once each is done (``_drain``)
        self.follow: collections.deque[Callable[[], None]] = collections.deque()
        self.draining = False
        #: an event asks for a look by then (monotonic), sooner than the next tick
        self.look_by = float("inf")
        self.ready = False
        self.hang = False
        # Voice the floor paused before a restart of sparkwarden is resumed when memory is back.
        paused = bool(self.kept.memory_paused())
        self.mind = decide.Mind(memory=triggers.MemoryState(alerted=paused))
        self.seen: Observation | None = None
        self.facts = self._read_journal()

    # --- life cycle ----------------------------------------------------------------------------

    def run(self) -> int:
        try:
            self.daemon_lock.acquire("daemon")
        except LockBusy:
            log.error("already_running", lock=str(self.daemon_lock.path))
            print(f"sparkwarden: another daemon is running ({self.daemon_lock.held_by_other()})")
            return 1
        gid = group_id(self.config.control.group)
        if gid is not None:  # members read the last snapshot when the daemon is down
            status_text.share(self.config.state.dir, gid)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_hangup)
        if self.previous is not None:  # no SIGHUP reaches it from here on
            self.reload_wanted |= self.previous.reload_wanted
            self.previous = None
        self.watchdog.start()
        self.watchdog.beat(self._loop_lease())
        if self.first_listener:  # killed before any event, its successor replays from here
            self.kept.see_events(time.time())
        try:
            self.hands.repair()  # its own stop and start are in the journal (decide.ours)
            self.facts = self._read_journal()
            # What happened while no sparkwarden listened is read before the first look: an
            # operator's stop meanwhile must be known before a down engine is judged.
            for event in self.events.replay(time.time()):
                self._handle(event)
            self._tick(time.time())
            self._keep_canary_baseline()
            self._publish()  # the control socket answers with this look from its first call
            self._start_listeners()
            self._catch_up_schedule()
            self.ready = True
            self.sd.ready(self._publish())
            log.info("ready", containers=self.config.llm.containers, faults=self.handlers.faults)
            self._loop()
        finally:
            self._shutdown()
        return 0

    def _start_listeners(self) -> None:
        self.events.start()
        if self.cluster_looks is not None:
            self.cluster_looks.start()
        if self.replica_looks is not None:
            self.replica_looks.start()
        self.control.start()
        self.webhooks.start()
        if self.config.metrics.listen:
            self.exporter = exporter.serve(self.config.metrics.listen, self.reporter.current)
            log.info("metrics_serving", listen=self.config.metrics.listen)

    def _shutdown(self) -> None:
        if self.reloaded is None:
            self.sd.stopping()
        else:
            self.sd.send("RELOADING=1")
        self.events.stop()
        if self.cluster_looks is not None:
            self.cluster_looks.stop()
        if self.replica_looks is not None:
            self.replica_looks.stop()  # and the turn given back, if held
        self._mark_events_seen()
        self.control.stop()
        self.webhooks.stop()
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
        left: list[Any] = []
        with contextlib.suppress(queue.Empty):
            while True:
                left.append(self.queue.get_nowait())
        pending = [i.t for i in left if isinstance(i, ContainerEvent)]
        self.kept.see_events(min(pending) - 1e-3 if pending else time.time())

    # A signal handler runs in the main thread between any two bytecodes, maybe inside a lock it
    # would take again (a log line being written, a systemd notification being sent): a
    # deadlock found under load. So the handlers only set fields and wake the loop; the main
    # thread says and does the rest (:meth:`_should_stop`, the loop).

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stopping:
            self.signalled, self.stopping = signal.Signals(signum).name, True
            self.queue.put(WAKE)

    def _on_hangup(self, _signum: int, _frame: FrameType | None) -> None:
        """Re-read the config, between runs only: the loop takes it up when no run is going."""
        self.reload_wanted = True
        self.queue.put(WAKE)

    def _should_stop(self) -> bool:
        """Asked by the loop and by a run's waits: a stop signal is said once, from here."""
        if self.signalled is not None and not self.signal_told:
            self.signal_told = True
            log.info("stop_requested", signal=self.signalled, running=self.hands.step)
            if self.hands.step is not None:
                # A boot wait is handed over at its next poll; other steps run to their end.
                cfg = self.config
                self.sd.stopping(extend_s=cfg.llm.probe_timeout + cfg.docker.timeout * 4 + 60)
            else:
                self.sd.stopping()
        return self.stopping

    def _reload_config(self) -> None:
        """A valid new config ends this daemon so a fresh one starts on it (same process); an
        invalid one is refused and the running config kept."""
        self.reload_wanted = False
        try:
            new = config_mod.load(self.path)
            require_secrets(new, resolve_path(self.path))  # an unset url_env: no next start
        except SparkwardenError as exc:
            log.error("reload_refused", error=str(exc), kept="the running config")
            return
        log.info("reloading", config=str(self.path))
        self.reloaded, self.stopping = new, True

    def _busy(self) -> str | None:
        """What a sequence running now is doing, for an operator's refused restart."""
        return self.hands.run_lock.held_by_other() or self.hands.step or None

    def _freeze(self) -> None:
        """Fault injection: a wedged loop, as a hung call would leave it."""
        self.hang = True
        self.watchdog.frozen = True

    # --- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        interval = self.config.watch.interval
        next_tick = time.monotonic() + interval
        while not self._should_stop():
            if self.hang:
                time.sleep(0.5)
                continue
            with contextlib.suppress(queue.Empty):
                self._handle(self.queue.get(timeout=max(0.0, next_tick - time.monotonic())))
            next_tick = min(next_tick, self.look_by)
            if time.monotonic() >= next_tick:
                self.look_by = float("inf")
                self._tick(time.time())
                self._decide(
                    decide.on_clock(self.mind, datetime.now(UTC), self.crontab, self.config)
                )
                next_tick = time.monotonic() + interval
            if not self.stopping:
                self._gate(time.time())
            if self.reload_wanted and not self.stopping:
                log.info("reload_requested")
                self._reload_config()
            self.watchdog.beat(self._loop_lease())
            self._publish()

    def _loop_lease(self) -> float:
        """Idle, the loop comes round every ``interval``; slow calls take their own lease."""
        return self.config.watch.interval + MARGIN

    def _handle(self, item: Any) -> None:
        if item == WAKE:  # an operator changed hold, budget or gave-up
            self.facts = self._read_journal()
        elif isinstance(item, ContainerEvent):
            runs = self.parts.journal.runs(10)  # whose stop or start it was
            seen = self.observer.event(item)
            self._decide(decide.on_event(self.mind, seen, self.config, runs))
            # an event only hastens the next look, once the exit has settled
            self.look_by = min(self.look_by, time.monotonic() + reconcile.SETTLE + 0.1)
        elif isinstance(item, ManualCall):
            self._manual(item)
        elif isinstance(item, Look):
            self._decide(decide.on_cluster(self.mind, item, self.config))
        elif isinstance(item, PeersLook):
            self._decide(gates.on_peers(self.mind, item))

    def _tick(self, t: float) -> None:
        """Docker and memory first, acted on at once (a memory floor pauses voice now), then the
        engine's slow HTTP reads."""
        engine = self.facts.engine
        self.seen = self.observer.look(t, engine.name if engine else self.facts.last_container)
        world = reconcile.World(
            self.seen.states,
            self.seen.error if self.seen.unreadable else "",
            self.hands.run_lock.held_by_other() or "",
        )
        verdict = reconcile.reconcile(self.facts, world, t, self.config)
        self._decide(reconcile.apply(self.mind, verdict, t))
        self._decide(decide.on_look(self.mind, self.seen, self.config))
        eager = decide.canary_owed(self.mind, t, self.config)
        probe = decide.probe_wanted(self.mind, t, self.config)
        self.seen = self.observer.engine(self.seen, eager, probe)
        self._decide(decide.on_engine(self.mind, self.seen, self.config))
        run_going = bool(self.hands.step is not None or self.hands.run_lock.held_by_other())
        self._decide(rotation.on_rotation(self.mind, self.seen, self.config, run_going))

    def _gate(self, t: float) -> None:
        """A pending restart through its gates, on the journal as it is now (an operator's hold
        may be written while a WAKE still waits in the queue); a planned one reads the requests
        it drains."""
        if self.mind.pending is not None:
            self.facts = self._read_journal(t)
        active = self.seen.active if self.seen else None
        mind, facts, cfg = self.mind, self.facts, self.config
        sample = (
            self.observer.scrape()
            if gates.wants_drain_sample(mind, facts, active, t, cfg)
            else None
        )
        self._decide(gates.gate(mind, facts, active, sample, t, cfg, self._turn(t)))
        turns, pending = self.replica_looks, self.mind.pending
        planned = pending is not None and pending.reason in triggers.PLANNED
        waits = pending is not None and pending.peers is not None  # a peer went out meanwhile
        if (
            turns is not None
            and turns.holding
            and self.hands.step is None
            and (waits or not planned)
        ):
            turns.release()  # its planned restart ran, was dropped or replaced, or waits again

    def _turn(self, t: float) -> gates.Turn | None:
        """A replica's turn for the gate: held, or asked for now when the gate would take it
        (the first node's answer over SSH: the watchdog is told it may take that long)."""
        turns = self.replica_looks
        if turns is None:
            return None
        mind, facts, active = self.mind, self.facts, self.seen.active if self.seen else None
        if not gates.wants_turn(mind, facts, active, t, self.config, turns.holding):
            return gates.Turn(turns.holding)
        if turns.refused is not None and (mind.peers is None or mind.peers.at <= turns.refused[0]):
            return gates.Turn(False, turns.refused[1])  # refused since the last look: not again
        self.watchdog.beat(turns.link.timeout + MARGIN)
        return gates.Turn(turns.holding, turns.take())

    def _manual(self, call: ManualCall) -> None:
        if not call.claim():
            return
        if self.mind.last_run_end > call.requested_at:  # one ran while it waited in line
            last = self.parts.journal.runs(1)
            call.refuse(
                f"{REFUSED}it ended just now"
                + (f" (run #{last[0].id}, {last[0].reason})" if last else "")
            )
            return
        why, out = gates.typed_why(call.by, self.mind, self.config)
        if out:  # an operator's restart goes at once, but says which replica is out meanwhile
            log.warning("restart_while_peer_out", peers=out)
        ended = self.hands.sequence(call.reason, why, call=call)
        if ended is not None:
            self.follow.append(functools.partial(self._after_run, ended))
            self._drain()

    def _decide(self, decision: decide.Transition) -> None:
        """Take the decider's word and have the hands act on it. What that leads to (a canary
        to read, a run's end to judge and look after) follows once it is done, in order, each
        from the mind as it is then: never from inside another transition."""
        mind, intents = decision
        active = self.seen.active if self.seen else None
        quiet = gates.forget_noted(mind, self.facts, active, self.config)
        if quiet is not mind:  # observe mode, noted already: let go, and not said every check
            mind, intents = quiet, [i for i in intents if not gates.tells_trigger(i)]
        self._apply((mind, intents))
        self._drain()

    def _apply(self, decision: decide.Transition) -> None:
        """One transition: the new mind, its intents carried out, what follows queued."""
        self.mind, intents = decision
        ended, wrote = self.hands.carry_out(intents)
        if any(isinstance(i, Adopt) for i in intents):  # a new engine: nothing it said is known
            self.observer.adopted(time.time())
        if wrote:
            self.facts = self._read_journal()
        for take in [i for i in intents if isinstance(i, TakeCanary)]:  # a read: the observer's
            self.follow.append(functools.partial(self._canary, take.t))
        if ended is not None:
            self.follow.append(functools.partial(self._after_run, ended))

    def _drain(self) -> None:
        """What transitions led to, in order; a transition made meanwhile is applied at once
        and what it leads to joins the end of the line (the outermost call drains it)."""
        if self.draining:
            return
        self.draining = True
        try:
            while self.follow:
                self.follow.popleft()()
        finally:
            self.draining = False

    def _canary(self, t: float) -> None:
        """The drafting canary the decider asked for, read and judged; a baseline learnt on
        this engine is kept in the journal (it survives a restart of sparkwarden)."""
        taken = self.observer.drafting_canary(t)
        if taken is None:
            return
        active = self.seen.active if self.seen else None
        subject = active.name if active else "llm"
        learnt = self.mind.canary.baseline
        self._decide(decide.on_canary(self.mind, taken, subject, self.config))
        baseline = self.mind.canary.baseline
        if baseline and baseline != learnt and active is not None:
            self.kept.put_canary_baseline(Identity.of(active), baseline)

    def _after_run(self, ended: RunEnded) -> None:
        """A run's end: the memory it left, its verdict, then a look at what the box is now."""
        self.observer.after_run(ended.at, ended.outcome.ok)
        self.facts = self._read_journal()
        self._decide(decide.memory_trend(self.mind, self.facts, ended, self.config))
        self._decide(decide.after_run(self.mind, ended, self.stopping))
        self._tick(time.time())

    def _keep_canary_baseline(self) -> None:
        """The canary baseline learnt on this very engine (same ID, same StartedAt) before
        sparkwarden restarted: kept, not relearnt from an engine that may have decayed since."""
        saved = self.kept.canary_baseline()
        active = self.seen.active if self.seen else None
        if saved is None or active is None or Identity.of(active) != saved[0]:
            return
        note = "canary baseline kept from before sparkwarden restarted (same engine)"
        canary = replace(self.mind.canary, baseline=saved[1], note=note)
        self.mind = replace(self.mind, canary=canary)
        log.info("canary_baseline_kept", container=active.name, baseline=dict(saved[1]))

    def _catch_up_schedule(self) -> None:
        last = self.parts.journal.last_run_of("schedule")
        last_at = datetime.fromtimestamp(last.started_at, UTC) if last else None
        now = datetime.now(UTC)
        self._decide(decide.catch_up(self.mind, now, self.crontab, last_at, self.config))

    # --- reporting -----------------------------------------------------------------------------

    def _read_journal(self, t: float | None = None) -> Recorded:
        now = time.time() if t is None else t
        return read_journal(self.kept, now, self.config.budget.window)

    def _publish(self, running: bool = True) -> str:
        if time.time() - self.facts.read_at >= 60:
            self.facts = self._read_journal()
        snapshot = publish.build(
            self.config,
            self.mind,
            self.seen,
            self.observer,
            self.facts,
            self.hands.step,
            self.ready,
            running,
            self.hands.booting(),
        )
        return self.reporter.publish(snapshot)
