"""Several nodes as one engine: vLLM's own multi-node ranks (``--nnodes``, ``--headless``) and a
Ray cluster's placement group (``--distributed-executor-backend ray``).

Both decide when the API port may open and when the engine dies of a node lost, which is what a
restart of a multi-node engine meets.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

# --- several nodes as one engine (--nnodes) ------------------------------------------------
#
# vLLM's own multi-node mode (no Ray): rank 0 serves the API and, before its port opens, waits at
# its rendezvous ("Init torch distributed begin") until every other rank has joined on
# --master-port; the other ranks run --headless. A rank that vanishes is seen only by the next
# collective: requests hang, /health stays 200, and after VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS
# (--collective-timeout) the engine dies (vllm#36451). A headless rank whose head died logs
# TCPStore errors for ever and never rejoins a new head (vllm#32136), so a head restarted
# against it waits at its rendezvous for ever.


class Ranks:
    """Rank 0's view of the other ranks: who joined, and who has vanished since."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lost: set[int] = set()
        #: told when a rank is lost: a stuck collective stops every step (the engine wedges)
        self.on_lost: Callable[[], None] = lambda: None

    def gather(self) -> None:
        """Block until every other rank said hello (the API port stays closed meanwhile)."""
        a = self.args
        print(f"Init torch distributed begin (waiting for {a.nnodes - 1} rank(s))", flush=True)
        joined: dict[int, socket.socket] = {}
        with socket.create_server(("0.0.0.0", a.master_port)) as server:
            while len(joined) < a.nnodes - 1:
                conn, peer = server.accept()
                words = conn.makefile("r").readline().split()
                if len(words) != 2 or words[0] != "rank" or not words[1].isdigit():
                    conn.close()
                    continue
                rank = int(words[1])
                conn.sendall(b"ok\n")
                joined[rank] = conn
                print(f"rank {rank} joined from {peer[0]}", flush=True)
        print("Init torch distributed end", flush=True)
        for rank, conn in joined.items():
            threading.Thread(target=self._watch, args=(rank, conn), daemon=True).start()

    def _watch(self, rank: int, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while conn.recv(1024):
                pass
        self.lost.add(rank)  # nothing said: only the next collective notices
        print(f"rank {rank}: connection gone", flush=True)
        self.on_lost()  # no step completes any more: every series freezes, /health says 200

    def collective(self) -> None:
        """A step that needs every rank: with one lost it hangs, then the engine dies."""
        if not self.lost:
            return
        time.sleep(self.args.collective_timeout)
        print(
            f"EngineCore died: collective timed out after {self.args.collective_timeout:g}s "
            f"waiting for rank(s) {sorted(self.lost)}",
            flush=True,
        )
        os._exit(1)


# --- a Ray cluster (--distributed-executor-backend ray) -----------------------------------
#
# vLLM 0.33 (vllm/v1/executor/ray_utils.py ``initialize_ray_cluster``): ``ray.init(address=None)``
# joins the cluster ``ray start`` left on this node (else it starts a lone local one), then
# waits for a placement group of one GPU bundle per rank, up to PG_WAIT_TIMEOUT (1800 s), logging
# every 10, 20, 40... s. Once serving, ray_executor_v2's RayWorkerMonitor shuts the executor down
# as soon as a worker's actor dies (its node gone), and the API server exits with it.


class RayPlacement:
    """The engine's placement group on a Ray cluster: one node per rank, watched for deaths."""

    def __init__(self, args: argparse.Namespace, world: int) -> None:
        self.args, self.world = args, world
        self.placed: list[str] = []

    def gather(self) -> None:
        """Block until the cluster has a node per rank (the API port stays closed meanwhile)."""
        address = ray_address()
        if address is None:
            print("No existing Ray instance: started a local one (this node's GPU)", flush=True)
            self._wait(lambda: ["local"])
            return
        host, _, port = address.rpartition(":")
        conn = socket.create_connection((host, int(port)), timeout=10)
        conn.settimeout(None)
        conn.sendall(b"watch\n")
        lines = conn.makefile("r")
        nodes: list[str] = []

        def latest() -> list[str]:
            return nodes

        def read() -> None:
            for line in lines:
                words = line.split()
                if words and words[0] == "nodes":
                    nodes[:] = words[1:]
                elif words and words[0] == "dead" and words[1] in self.placed:
                    rank = self.placed.index(words[1])
                    self._die(
                        f"RayWorkerProc rank=[{rank}] died unexpectedly, shutting down executor."
                    )
            self._die("Ray's GCS is gone (its head stopped): the engine cannot run")

        print(f"Connecting to existing Ray cluster at address: {address}", flush=True)
        threading.Thread(target=read, daemon=True).start()
        self._wait(latest)

    def _wait(self, nodes: Callable[[], list[str]]) -> None:
        began, report = time.monotonic(), 10.0
        while len(nodes()) < self.world:
            waited = time.monotonic() - began
            if waited >= self.args.pg_timeout:
                self._die(
                    f"ValueError: Cannot provide a placement group requiring {self.world} GPUs "
                    f"within {self.args.pg_timeout:g} seconds."
                )
            if waited >= report:
                report *= 2
                print(
                    f"Waiting for creating a placement group of specs for {int(waited)} seconds. "
                    f"specs={[{'GPU': 1.0}] * self.world}. Check `ray status`",
                    flush=True,
                )
            time.sleep(0.1)
        self.placed = nodes()[: self.world]
        print(f"placement group ready: ranks on {', '.join(self.placed)}", flush=True)

    @staticmethod
    def _die(said: str) -> None:
        print(said, flush=True)
        print("EngineCore died; the API server exits", flush=True)
        os._exit(1)


def ray_address() -> str | None:
    """Where ``ray.init()`` without an address connects: RAY_ADDRESS, then the file ``ray start``
    wrote on this node."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    with contextlib.suppress(OSError):
        folder = Path(os.environ.get("RAY_TMPDIR", "/tmp/ray"))
        return (folder / "ray_current_cluster").read_text().strip() or None
    return None


def headless(args: argparse.Namespace) -> None:
    """A rank without an API: joins its head, then outlives it, never rejoining."""
    where = (args.master_addr, args.master_port)
    print(f"headless rank {args.node_rank}: joining {where[0]}:{where[1]}", flush=True)
    while True:
        try:
            conn = socket.create_connection(where, timeout=2)
            conn.sendall(f"rank {args.node_rank}\n".encode())
            if conn.makefile("r").readline().strip() == "ok":
                break
            conn.close()
        except OSError:
            pass
        time.sleep(0.5)
    conn.settimeout(None)
    print(f"headless rank {args.node_rank}: joined", flush=True)
    with contextlib.suppress(OSError):
        while conn.recv(1024):
            pass
    while True:
        print("TCPStore error: connection to the head lost (this rank will not rejoin)", flush=True)
        time.sleep(5)
