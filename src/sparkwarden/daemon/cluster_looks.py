"""On a cluster's head: a thread that looks at every node each ``cluster.watch_interval``.

A look is SSH to every node in parallel (bounded by the connect timeout), so it is taken off the
main loop, which must beat the watchdog and answer ``status`` meanwhile; each look is handed to
the loop as a :class:`~sparkwarden.cluster.watch.Look`, judged there
(:func:`sparkwarden.daemon.decide.on_cluster`). No look is taken while a run goes: it would
only see the run's own stops.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sparkwarden.base import logs
from sparkwarden.cluster.looks import CALL_MARGIN, look
from sparkwarden.cluster.verdict import Proof, judge, starts_of
from sparkwarden.cluster.watch import Look
from sparkwarden.config.schema import Config
from sparkwarden.daemon.kept import Kept
from sparkwarden.restart.journal import Journal
from sparkwarden.vllm.client import VllmClient

log = logs.get("sparkwarden.cluster")


class ClusterLooks:
    def __init__(self, config: Config, sink: Callable[[Look], None], busy: Callable[[], bool]):
        assert config.cluster is not None
        self.config = config
        self.interval = config.cluster.watch_interval
        self.sink = sink
        self.busy = busy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cluster-looks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Waits for a look in progress: it closes its SSH connections (and their folder)."""
        self._stop.set()
        if self._thread.is_alive():
            assert self.config.cluster is not None
            self._thread.join(timeout=3 * self.config.cluster.connect_timeout + CALL_MARGIN)

    def take(self) -> Look:
        """Every node's answer and the head's ``/health``, judged against what the journal
        knows (which start the cluster served from, when its runs went)."""
        views = look(self.config)
        vllm = VllmClient(self.config.llm.base_url, self.config.llm.api_key())
        try:
            health = vllm.health(timeout=self.config.health.timeout).status
        finally:
            vllm.close()
        proof = cluster_proof(self.config)
        verdict = judge(views, health, proof)
        unreachable = tuple(v.name for v in views if not v.reachable)
        up = tuple(v.name for v in views if v.engine_up)
        starts = starts_of(views)
        adopt = starts if verdict.state == "serving" and starts != proof.starts else None
        return Look(time.time(), verdict, unreachable, up, adopt)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.busy():
                try:
                    self.sink(self.take())
                except Exception as exc:  # a look that failed must not end the watch
                    log.warning("cluster_look_failed", error=f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)


def cluster_proof(config: Config) -> Proof:
    """What the head's journal knows of its cluster now (a run typed meanwhile included)."""
    journal = Journal(config.state.dir)
    try:
        return Kept(journal).cluster_proof(config.llm.stop_window)
    finally:
        journal.close()
