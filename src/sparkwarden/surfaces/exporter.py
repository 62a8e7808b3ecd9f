"""sparkwarden's own Prometheus metrics, read from the status snapshot at each scrape.

One source of truth: the exporter keeps no counters of its own; it turns the snapshot the daemon
publishes (and the journal's run counts in it) into metric families. A fleet of Sparks is watched
by one Prometheus scraping each host's sparkwarden (packaging/prometheus/).
"""

from __future__ import annotations

import contextlib
import math
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, MetricsHandler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sparkwarden.adapters.host import GIB
from sparkwarden.restart.journal import RunResult
from sparkwarden.restart.step_names import EVERY_STEP
from sparkwarden.surfaces.snapshot import STATES, EngineView, Snapshot

DECIDING: tuple[RunResult, ...] = ("ok", "failed")  # the outcomes that say how a restart went


class SnapshotCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot | None]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        s = self._snapshot()
        if s is None:
            return
        daemon, llm, mem, acc, budget = s.daemon, s.llm, s.memory, s.acceptance, s.budget

        info = GaugeMetricFamily(
            "sparkwarden_build_info", "1, labelled with the version it runs", labels=["version"]
        )
        info.add_metric([daemon.version], 1.0)
        yield info

        runs = CounterMetricFamily(
            "sparkwarden_runs", "Restart runs by reason and result", labels=["reason", "result"]
        )
        observed = CounterMetricFamily(
            "sparkwarden_observed_restarts",
            "Restarts observe mode would have made (nothing touched), by reason",
            labels=["reason"],
        )
        for row in s.run_counts:
            if row["result"] == "observed":
                observed.add_metric([row["reason"]], row["count"])
            else:
                runs.add_metric([row["reason"], row["result"]], row["count"])
        yield runs
        yield observed
        finished_ok = last_finished_ok(s.run_counts)
        if finished_ok is not None:
            yield gauge(
                "sparkwarden_last_finished_run_ok",
                "1 when the newest run that ran to its end succeeded, 0 when it failed",
                finished_ok,
            )

        state = GaugeMetricFamily(
            "sparkwarden_state", "1 for the daemon's current state", labels=["state"]
        )
        current = daemon.state.split(":")[0]
        for name in STATES:
            state.add_metric([name], 1.0 if current == name else 0.0)
        yield state
        yield gauge(
            "sparkwarden_gave_up",
            "1 when the budget is spent and nothing is done",
            1.0 if s.gave_up else 0.0,
        )
        yield gauge(
            "sparkwarden_reboot_required",
            "1 when MemAvailable after stop and drop kept falling: no restarts until a reboot",
            1.0 if s.reboot_required else 0.0,
        )
        yield gauge(
            "sparkwarden_held",
            "1 while an operator's hold is in force",
            1.0 if s.hold else 0.0,
        )

        up = GaugeMetricFamily(
            "sparkwarden_llm_up", "1 when the active LLM container runs", labels=["container"]
        )
        up.add_metric([llm.container or ""], 1.0 if llm.status == "running" else 0)
        yield up
        yield gauge(
            "sparkwarden_llm_uptime_seconds",
            "Uptime of the active LLM container",
            known(llm.uptime_s),
        )
        yield gauge(
            "sparkwarden_memory_available_bytes",
            "MemAvailable of the host",
            mem.available_gib * GIB,
        )
        yield gauge("sparkwarden_memory_total_bytes", "MemTotal of the host", mem.total_gib * GIB)
        yield gauge(
            "sparkwarden_memory_below_floor",
            "1 while MemAvailable is under the floor",
            1.0 if mem.below_floor else 0.0,
        )
        # Always present (NaN while unknown), so alert rules and dashboards find them.
        yield gauge(
            "sparkwarden_acceptance_ratio",
            "Draft acceptance in the last window",
            known(acc.current),
        )
        yield gauge(
            "sparkwarden_acceptance_baseline_ratio",
            "Draft acceptance learnt after the last restart",
            known(acc.baseline),
        )
        yield gauge(
            "sparkwarden_drafting_health_ratio",
            "Healthy share of drafting over the baseline's, from per-position acceptance",
            known(acc.health),
        )
        ok = s.gateway.ok if s.gateway else None
        yield gauge(
            "sparkwarden_gateway_up",
            "1 when the users' gateway answered its last chat request, 0 when it failed "
            "(NaN: no [gateway], or not checked yet)",
            known(None if ok is None else float(ok)),
        )
        yield gauge(
            "sparkwarden_drafting_canary_health_ratio",
            "The drafting canary's acceptance over its baseline (greedy, fixed prompts)",
            known(acc.canary.get("health")),
        )
        yield gauge(
            "sparkwarden_drafting_suspicious",
            "1 while the passive estimate looks low and awaits the canary's word",
            1.0 if acc.canary.get("suspicious") else 0.0,
        )
        yield gauge(
            "sparkwarden_drafting_canary_overdue",
            "1 when suspicious for canary_max_wait without a valid canary (never idle)",
            1.0 if acc.canary.get("waiting_too_long") else 0.0,
        )
        yield gauge(
            "sparkwarden_restart_policies_at_risk",
            "Containers Docker may restart behind sparkwarden's back, into the ghost memory "
            "(llm.restart_policy = leave, or a take-over that failed)",
            float(len(s.restart_policy.at_risk)),
        )
        yield from engine_families(s.engine)
        yield gauge(
            "sparkwarden_budget_used", "Automatic runs in the budget window", float(budget.used)
        )
        yield gauge(
            "sparkwarden_budget_limit", "Automatic runs allowed per window", float(budget.limit)
        )

        if s.cluster_watch:  # a cluster's head: each node as its daemon's last look saw it
            node_up = GaugeMetricFamily(
                "sparkwarden_cluster_node_up",
                "1 when the node answered the head's last check and its engine runs",
                labels=["node"],
            )
            for node, seen in sorted(s.cluster_watch.get("nodes", {}).items()):
                node_up.add_metric([node], 1.0 if seen["reachable"] and seen["engine_up"] else 0.0)
            yield node_up
        if s.replicas:  # a replica: the set as its daemon's last look saw it
            yield from replica_families(s.replicas)
        last = s.last_run
        if last:
            yield gauge(
                "sparkwarden_last_run_ok",
                "1 when the newest run (running or a dry run too) succeeded",
                1.0 if last["result"] == "ok" else 0.0,
            )
            yield gauge(
                "sparkwarden_last_run_timestamp_seconds",
                "When the last run started",
                datetime.fromisoformat(last["started_at"]).timestamp(),
            )
            if last.get("duration_s") is not None:
                yield gauge(
                    "sparkwarden_last_run_duration_seconds",
                    "Wall time of the last run",
                    float(last["duration_s"]),
                )
            yield last_run_steps(last)


def replica_families(replicas: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
    """How many replicas serve (alert ``OneReplicaServing``), whether this one is in the
    gateway's rotation, and whether a planned restart holds the turn (one out on purpose)."""
    yield gauge(
        "sparkwarden_replicas_serving",
        "Replicas serving their users (this one and the peers, as last looked at)",
        float(replicas.get("serving_count") or 0),
    )
    yield gauge("sparkwarden_replicas", "Replicas in the set", float(replicas.get("count") or 0))
    yield gauge(
        "sparkwarden_replica_in_rotation",
        "1 when this replica is in the gateway's rotation, 0 while its flag keeps it out",
        0.0 if replicas.get("rotation") else 1.0,
    )
    turn = replicas.get("turn") or {}
    yield gauge(
        "sparkwarden_replicas_turn_taken",
        "1 while a replica holds the turn for its planned restart (0 also when unread)",
        1.0 if turn.get("holder") else 0.0,
    )


def last_run_steps(last: dict[str, Any]) -> GaugeMetricFamily:
    """Each step of the last run (``history --json``'s record) that has ended, by its name."""
    steps = GaugeMetricFamily(
        "sparkwarden_last_run_step_seconds",
        "Duration of each step of the last run",
        labels=["step"],
    )
    for step in last["steps"]:
        if step["name"] in EVERY_STEP and step["duration_s"] is not None:
            steps.add_metric([step["name"]], float(step["duration_s"]))
    return steps


def engine_families(engine: EngineView | None) -> Iterator[Any]:
    """What the engine says of itself, passed on: its release, sleep, and the users its queue
    limits turned away (vLLM's own counter: it starts again at 0 with the engine)."""
    if engine is None:
        return
    if engine.release:
        info = GaugeMetricFamily(
            "sparkwarden_engine_info",
            "The vLLM release answering (GET /version)",
            labels=["release"],
        )
        info.add_metric([engine.release], 1.0)
        yield info
    yield gauge(
        "sparkwarden_engine_sleeping",
        "1 while the engine is put to sleep (vllm:engine_sleep_state): not restarted",
        1.0 if engine.sleeping else 0.0,
    )
    yield by_reason(
        CounterMetricFamily(
            "sparkwarden_engine_admission_rejections",
            "Requests the engine's queue limits turned away with 503, by reason (vLLM 0.33.0 on)",
            labels=["reason"],
        ),
        engine.rejections,
    )
    yield by_reason(
        GaugeMetricFamily(
            "sparkwarden_engine_requests_waiting",
            "Requests waiting in the engine, by reason (capacity, deferred)",
            labels=["reason"],
        ),
        engine.waiting_by_reason,
    )


Family = TypeVar("Family", CounterMetricFamily, GaugeMetricFamily)


def by_reason(family: Family, counts: dict[str, float]) -> Family:
    for reason, count in counts.items():
        family.add_metric([reason], count)
    return family


def last_finished_ok(run_counts: list[dict[str, Any]]) -> float | None:
    """Whether the newest run that ran to its end succeeded, None before any did.

    What RestartFailed alerts on: a run still running (a cold boot takes 13-16 min) or a dry run
    decides nothing, nor does one cut short by sparkwarden's own stop (its repair run decides).
    """
    ended = [
        row
        for row in run_counts
        if row["result"] in DECIDING and row.get("last_ended_at") is not None
    ]
    if not ended:
        return None
    return 1.0 if max(ended, key=lambda row: row["last_ended_at"])["result"] == "ok" else 0.0


def known(value: float | None) -> float:
    return math.nan if value is None else float(value)


def gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


#: Connections served at once: a scrape takes milliseconds, and Prometheus makes one at a time.
WORKERS = 2
#: Connections accepted to wait for a worker; past them a connection is closed at once.
BACKLOG = 8
#: The longest one connection is given, idle or drip-fed, from its accept to its answer.
CLIENT_DEADLINE = 5.0


class BoundedMetricsServer(HTTPServer):
    """``/metrics`` served by a fixed few threads, within the daemon's own task budget.

    prometheus_client's server starts a thread per connection, with no cap and no timeout: a
    local user's idle half-sent requests took the daemon to its unit's ``TasksMax`` (issue 29).
    Here :data:`WORKERS` threads serve, :data:`BACKLOG` connections may wait, the rest are closed
    at once, and a connection still open :data:`CLIENT_DEADLINE` s after its accept is shut.
    The threads are the server's own: its loop (which also reaps) and its workers.
    """

    #: The kernel's accept queue: a burst is taken (and closed) at once, not left to retry SYNs.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)
        self._waiting: queue.Queue[tuple[socket.socket, Any, float] | None] = queue.Queue(BACKLOG)
        self._open: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._workers = [
            threading.Thread(target=self._work, name=f"metrics-{n}", daemon=True)
            for n in range(WORKERS)
        ]
        for worker in self._workers:
            worker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Queue the connection for a worker, or close it when the queue is full."""
        deadline = time.monotonic() + CLIENT_DEADLINE
        request.settimeout(CLIENT_DEADLINE)
        with self._lock:
            self._open[request] = deadline
        try:
            self._waiting.put_nowait((request, client_address, deadline))
        except queue.Full:
            self._close(request)

    def _work(self) -> None:
        while (item := self._waiting.get()) is not None:
            request, client_address, deadline = item
            try:
                if time.monotonic() < deadline:
                    self.finish_request(request, client_address)
            except OSError:  # the client went, or was shut at its deadline
                pass
            finally:
                self._close(request)

    def service_actions(self) -> None:
        """Each turn of the serve loop: shut connections past their deadline (a drip-fed
        request line holds a worker only this long, whatever each read's timeout)."""
        now = time.monotonic()
        with self._lock:
            late = [sock for sock, deadline in self._open.items() if deadline < now]
        for sock in late:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _close(self, request: socket.socket) -> None:
        with self._lock:
            self._open.pop(request, None)
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scrape that failed mid-way is the scraper's problem: no traceback in the log."""

    def shutdown(self) -> None:
        super().shutdown()
        for _ in self._workers:
            self._waiting.put(None)
        self.server_close()


def serve(listen: str, snapshot: Callable[[], Snapshot | None]) -> BoundedMetricsServer:
    """Serve /metrics on a loopback address; returns the server (for shutdown)."""
    host, _, port = listen.rpartition(":")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    server = BoundedMetricsServer((host.strip("[]"), int(port)), MetricsHandler.factory(registry))
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="metrics", daemon=True
    ).start()
    return server
