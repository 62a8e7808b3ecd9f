"""The hands' cluster half: a cluster's run and the repair of one cut short, driven from the
head (:mod:`sparkwarden.cluster.run` holds the steps' bodies; this holds what the daemon adds: the
lease, systemd's start timeout, the operator's streamed view, and what a repair finds)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, replace

from sparkwarden.adapters.systemd import SdNotify
from sparkwarden.base import logs
from sparkwarden.cluster import looks
from sparkwarden.cluster import node as node_steps
from sparkwarden.cluster import run as cluster_run
from sparkwarden.cluster import verdict as cluster_verdict
from sparkwarden.cluster.link import SshLink
from sparkwarden.config.schema import Config
from sparkwarden.daemon import intents as do
from sparkwarden.daemon.handlers import ManualCall
from sparkwarden.daemon.kept import Kept
from sparkwarden.restart.events import StepEvent
from sparkwarden.restart.journal import Plan, RunRecord
from sparkwarden.restart.lock import RunLock
from sparkwarden.restart.parts import Outcome, Parts, StepObserver

log = logs.get("sparkwarden.daemon")


class ClusterHands:
    """The cluster's runs, for :class:`sparkwarden.daemon.act.Hands` (which holds the state
    named here); only the main thread calls in, under the run lock."""

    config: Config
    parts: Parts
    sd: SdNotify
    publish: Callable[[], object]
    run_lock: RunLock
    step: str | None
    #: While a run waits for the started engine: its number, trigger, why, and since when.
    boot: tuple[int, str, str, float] | None
    #: the gates the run under way passed (None: an operator's), written into its plan
    gates: dict[str, str] | None

    def _observer(
        self,
        reason: str,
        why: str,
        call: ManualCall | None,
        begun: Callable[[], None] = lambda: None,
        lease: float | None = None,
    ) -> StepObserver:
        """What a run (a lone host's, a cluster's) tells as it goes: status's step and boot,
        the run lock's run, an operator's stream, a published snapshot. ``begun``: called as
        the first step begins (the run has written what it adopted); ``lease``: the watchdog's,
        renewed on every event (a lone host's run renews its own per step)."""

        def observe(event: StepEvent) -> None:
            if lease is not None:
                self.parts.heartbeat(lease)
            self.step = f"step {event.index} of {event.total}: {event.name}"
            self._track_boot(event, reason, why)
            if event.phase == "begin" and event.index == 1:
                if self.gates:
                    self.parts.journal.remember(event.run_id, gates=self.gates)
                begun()
                self.run_lock.set_run(event.run_id, reason)
                if call is not None:
                    call.begin(event.run_id)
            if call is not None and (event.phase == "end" or event.summary):
                call.events.put({"event": "step", **asdict(event)})
            self.publish()

        return observe

    def _track_boot(self, event: StepEvent, reason: str, why: str) -> None:
        """Note when a run starts waiting for the engine, for status (what a long boot is for)."""
        if event.name == "wait_health" and event.phase == "begin" and not event.summary:
            self.boot = (event.run_id, reason, why, time.time())
        elif event.phase == "end" or event.name != "wait_health":
            self.boot = None

    def _cluster_lease(self) -> float:
        """The longest a cluster run may go without a step ending: its slowest step (a cold
        boot, the memory gate, a stop, the launcher) and every SSH call's margins."""
        cfg, cluster = self.config, self.config.cluster
        assert cluster is not None
        slowest = max(
            cfg.llm.health_timeout,
            cfg.memory.start_wait,
            2 * cfg.llm.stop_timeout,
            cluster.launcher_timeout,
        )
        return slowest + 4 * (cluster.connect_timeout + looks.CALL_MARGIN)

    def _cluster_run_bound(self) -> float:
        """The longest a whole cluster run may take: every slow step in turn, and every SSH
        call's margins (systemd's start timeout is extended by it before a repair at start)."""
        cfg, cluster = self.config, self.config.cluster
        assert cluster is not None
        steps = cfg.llm.health_timeout + cfg.llm.probe_timeout + cfg.memory.start_wait
        steps += 2 * cfg.llm.stop_timeout + cluster.launcher_timeout
        return steps + 12 * (cluster.connect_timeout + looks.CALL_MARGIN)

    def _cluster_sequence(
        self,
        reason: str,
        why: str,
        call: ManualCall | None,
        begun: Callable[[], None] = lambda: None,
        prove: cluster_run.Proving | None = None,
    ) -> do.RunEnded:
        """The whole cluster restarted as one (:mod:`sparkwarden.cluster.run`), with the
        voice a cut cluster run left paused on any node; the caller holds the run lock and
        releases it. ``begun``: called once the run has written what it adopted; ``prove``:
        only prove the boot a cut run started (why)."""
        assert self.config.cluster is not None
        cfg, cluster = self.config, self.config.cluster
        lease = self._cluster_lease()
        self.parts.heartbeat(lease)

        observe = self._observer(reason, why, call, begun, lease)
        link = SshLink(cluster)
        parts = cluster_run.ClusterParts(
            link,
            self.parts.vllm,
            self.parts.journal,
            after_action=self.parts.after_action,
            should_abort=self.parts.should_abort,
            gateway=self.parts.gateway,
        )
        outcome: Outcome | None = None
        try:
            adopt = cluster_run.left_paused(self.parts.journal.runs(limit=50))
            outcome = cluster_run.restart_cluster(
                cfg, reason, parts, observer=observe, adopt=adopt, prove=prove
            )
        finally:
            link.close()
            self.step = None
            if call is not None:
                call.done(outcome)
        return do.RunEnded(reason, why, outcome, time.time())

    def _repair_cluster(self, run: RunRecord) -> None:
        """A cluster run cut short (the caller holds the run lock): closed as interrupted, and
        what it left mended from what the nodes are now:

        - every engine container runs the very start the cut run made (same ``StartedAt``): the
          boot it started (and handed over, when sparkwarden was stopped in its wait) is proven
          (``/health``, a chat, every rank), then voice resumed; nothing is restarted;
        - it had stopped an engine and a rank is down: the whole cluster is restarted as one,
          unless the run was handed over, when whatever changed since (an operator's stop, a
          crash) is the watch's to judge, with its gates;
        - otherwise (cut before any stop, ranks an operator started) only the voice it left
          paused on any node is resumed, and the daemon watches the cluster."""
        note = f"sparkwarden (pid {run.pid}) stopped during this cluster run"
        if self.config.cluster is None:  # [cluster] removed since: nothing to reach the nodes
            self.parts.journal.mark_interrupted(run.id, note)
            left = cluster_run.left_paused(self.parts.journal.runs(limit=50))
            here = left.pop(str((run.plan.get("cluster") or [""])[0]), [])
            resumed = node_steps.resume(self.parts.docker, here)["resumed"] if here else []
            log.error(
                "cluster_run_not_repaired",
                run=run.id,
                why="no [cluster]: only this host's voice is resumed",
                resumed=resumed,
                left_on_nodes=left,
            )
            return
        found_at = time.time()
        if "cluster" not in run.plan:
            # a host's run on what is now a cluster's head (an upgrade mid-run from before
            # clusters): its head's part of a cluster run, repaired as the cluster's
            head = self.config.cluster.nodes[0]
            plan: Plan = {
                "cluster": [n.name for n in self.config.cluster.nodes],
                "cluster_voice": {head.name: list(run.plan.get("voice_paused", []))},
                "stop_head_sent": bool(run.plan.get("llm_stopped")),
            }
            self.parts.journal.remember(run.id, **plan)
            run = replace(run, plan={**run.plan, **plan})

        def close() -> None:
            """Closed only once what it left is resumed or adopted by the repair run: a kill
            before that leaves it to the next start's repair."""
            self.parts.journal.mark_interrupted(run.id, note, found_at)

        if run.plan.get("stop_head_sent") or run.plan.get("stop_workers_sent"):
            link = SshLink(self.config.cluster)
            try:
                views = looks.inspect_all(self.config, link)
            finally:
                link.close()
            health = self.parts.vllm.health(timeout=self.config.health.timeout).status
            proof = Kept(self.parts.journal).cluster_proof(self.config.llm.stop_window)
            state = cluster_verdict.judge(views, health, proof).state
            up = state in ("serving", "unhealthy")  # every rank up, the head loading or not
            prove = None
            if up and cluster_run.booted_by(views, dict(run.plan.get("cluster_started") or {})):
                marks = cluster_run.carried(run.plan)
                prove = cluster_run.Proving(f"the boot run #{run.id} started", marks)
            if prove or (not up and not run.plan.get("handed_over")):
                log.info("cluster_repair", run=run.id, cluster=state, prove=bool(prove))
                # before READY=1: systemd's start timeout must wait for the whole run
                self.sd.send(f"EXTEND_TIMEOUT_USEC={int(self._cluster_run_bound() * 1e6)}")
                why = f"{note}; the cluster is {state}"
                self._cluster_sequence("repair", why, None, close, prove=prove)
                return
            log.info("cluster_repair_voice_only", run=run.id, cluster=state)
        left = cluster_run.left_paused(self.parts.journal.runs(limit=50))
        if not left:
            close()
            return
        link = SshLink(self.config.cluster)
        try:
            resumed, failed = cluster_run.resume_left(self.config, link, left)
        finally:
            link.close()
        # what could not be resumed stays for the next cluster run to resume
        self.parts.journal.remember(
            run.id, cluster_voice={n: v for n, v in left.items() if n not in resumed}
        )
        close()
        said = {n: a.get("resumed", []) for n, a in resumed.items()}
        if failed:
            log.error("cluster_voice_left_paused", run=run.id, resumed=said, failed=failed)
        else:
            log.info("cluster_voice_resumed", run=run.id, resumed=said)
