#!/usr/bin/env python3
"""A stand-in for the ``ray`` command of a Ray cluster of Sparks, faithful to what a restart meets.

Runs on the host's Python with the standard library only (as ``/standin/ray`` in the stand-in
image). What it models, from Ray's documented behaviour and vLLM's Ray executor:

- ``ray start --head --port P [--block]`` starts the cluster's GCS; the head is a node with one
  GPU. It writes ``ray_current_cluster`` in Ray's temp dir (``RAY_TMPDIR``, ``/tmp/ray``),
  which is how ``ray.init()`` in ``vllm serve`` finds the cluster without an address.
- ``ray start --address H:P [--block]`` joins a worker node (one GPU). A GCS not yet up is
  retried for a while, then ``ray start`` fails, as Ray's does.
- Without ``--block``, ``ray start`` returns once its node is up, leaving it in the background
  (so ``ray start --head && exec vllm serve ...`` runs both in one container); with it, the
  command stays in the foreground and exits when its node dies.
- A worker whose GCS went away (its head stopped or died) gives up after
  ``RAY_gcs_rpc_server_reconnect_timeout_s`` (Ray's default 60 s) and exits: a raylet never
  joins a new head's cluster, so a worker left running across a head restart is lost to it.
- ``ray status`` lists the alive nodes.
- A worker whose raylet went away is marked dead only when Ray's health checks give up on it:
  ``RAY_health_check_failure_threshold`` (5) checks ``RAY_health_check_period_ms`` (3000) apart,
  about 15 s for a killed container; only then does vLLM's Ray executor see its actor die.
- ``ray start --block`` ends on SIGTERM (``docker stop``), as Ray's does.

The GCS speaks one line per message over TCP: ``join NAME`` (a node), ``watch`` (vLLM: the node
count now and on every change, and each node's death), ``status``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def cluster_file() -> Path:
    """Ray's record of the cluster started on this node, in its temp dir (``RAY_TMPDIR``)."""
    return Path(os.environ.get("RAY_TMPDIR", "/tmp/ray")) / "ray_current_cluster"


#: Ray's own knob: how long a raylet waits for its GCS to come back before it exits.
RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
#: Ray's health checks of a node: how often, and how many failed ones mark it dead.
CHECK_PERIOD_ENV = "RAY_health_check_period_ms"
CHECK_FAILURES_ENV = "RAY_health_check_failure_threshold"
#: How long ``ray start --address`` keeps trying a GCS that is not up yet.
JOIN_RETRY_SECONDS = 30.0


def say(text: str) -> None:
    print(text, flush=True)


class Gcs:
    """The head's Global Control Store: which nodes are alive, told to whoever watches."""

    def __init__(self, head_name: str) -> None:
        self.nodes: list[str] = [head_name]
        self.watchers: list[socket.socket] = []
        self.lock = threading.Lock()

    def serve(self, port: int, ready: int | None) -> None:
        with socket.create_server(("0.0.0.0", port), reuse_port=False) as server:
            cluster_file().parent.mkdir(parents=True, exist_ok=True)
            cluster_file().write_text(f"127.0.0.1:{port}\n")
            say(f"Ray runtime started. GCS on port {port}; head node {self.nodes[0]}")
            signal_ready(ready)
            while True:
                conn, peer = server.accept()
                threading.Thread(target=self._talk, args=(conn, peer[0]), daemon=True).start()

    def _talk(self, conn: socket.socket, peer: str) -> None:
        words = conn.makefile("r").readline().split()
        if not words:
            conn.close()
            return
        if words[0] == "join":  # named by --node-ip-address, else by where it called from
            self._join(conn, words[1] if len(words) > 1 else peer)
        elif words[0] == "watch":
            with self.lock:
                self.watchers.append(conn)
                self._send(conn, "nodes " + " ".join(self.nodes))
        elif words[0] == "status":
            with self.lock:
                alive = list(self.nodes)
            conn.sendall(f"{len(alive)} nodes alive: {', '.join(alive)}\n".encode())
            conn.close()
        else:
            conn.close()

    def _join(self, conn: socket.socket, name: str) -> None:
        with self.lock:  # said before it is told: whoever acts on it finds it in the log
            self.nodes.append(name)
            say(f"node {name} joined ({len(self.nodes)} alive)")
            conn.sendall(b"ok\n")
            self._tell("nodes " + " ".join(self.nodes))
        with contextlib.suppress(OSError):
            while conn.recv(1024):
                pass
        period = float(os.environ.get(CHECK_PERIOD_ENV, "3000")) / 1000
        checks = int(os.environ.get(CHECK_FAILURES_ENV, "5"))
        say(f"node {name}: raylet unreachable; health checks every {period:g}s")
        time.sleep(period * checks)
        with self.lock:
            self.nodes.remove(name)
            say(f"node {name} marked dead: its raylet is gone ({len(self.nodes)} alive)")
            self._tell(f"dead {name}")
            self._tell("nodes " + " ".join(self.nodes))

    def _tell(self, line: str) -> None:
        for watcher in list(self.watchers):
            if not self._send(watcher, line):
                self.watchers.remove(watcher)

    @staticmethod
    def _send(conn: socket.socket, line: str) -> bool:
        try:
            conn.sendall(f"{line}\n".encode())
            return True
        except OSError:
            return False


def signal_ready(fd: int | None) -> None:
    """Tell the ``ray start`` that forked this node (without ``--block``) that it is up."""
    if fd is not None:
        os.write(fd, b"ok\n")
        os.close(fd)


def worker(address: str, name: str, ready: int | None) -> int:
    """A worker node: join the GCS (retried while it is not up), then live until it goes."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + JOIN_RETRY_SECONDS
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=2)
            conn.sendall(f"join {name}\n".encode())  # an empty name: the GCS names it
            if conn.makefile("r").readline().strip() == "ok":
                break
            conn.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            say(f"ConnectionError: could not connect to the GCS at {address}")
            return 1
        time.sleep(0.3)
    conn.settimeout(None)
    say(f"Ray runtime started. this node joined the cluster at {address}")
    signal_ready(ready)
    with contextlib.suppress(OSError):
        while conn.recv(1024):
            pass
    wait = float(os.environ.get(RECONNECT_ENV, "60"))
    say(f"raylet: the GCS at {address} is unreachable; giving up in {wait:g}s")
    time.sleep(wait)
    say(f"raylet: failed to reconnect to the GCS within {wait:g}s; exiting")
    say("Some Ray subprocesses exited unexpectedly: raylet [exit code=1]")
    return 1


def status(address: str) -> int:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"status\n")
            say(conn.makefile("r").readline().strip())
            return 0
    except OSError as exc:
        say(f"ConnectionError: no Ray cluster at {address}: {exc}")
        return 1


def current_address() -> str | None:
    """Where ``ray.init()`` without an address looks: ``RAY_ADDRESS``, then Ray's own file."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    with contextlib.suppress(OSError):
        return cluster_file().read_text().strip() or None
    return None


def start(args: argparse.Namespace, argv: list[str]) -> int:
    if not args.head and not args.address:
        say("ray start: give --head, or --address of the head's GCS")
        return 2
    if not args.block and args.ready_fd is None:  # fork the node, return once it is up
        read, write = os.pipe()
        subprocess.Popen(
            [sys.executable, "-u", __file__, *argv, "--block", "--ready-fd", str(write)],
            pass_fds=(write,),
            start_new_session=True,
        )
        os.close(write)
        with os.fdopen(read) as pipe:
            ok = pipe.readline().strip() == "ok"
        return 0 if ok else 1
    if args.head:
        Gcs(args.node_ip_address or socket.gethostname()).serve(args.port, args.ready_fd)
        return 0
    return worker(args.address, args.node_ip_address, args.ready_fd)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(0))  # docker stop: Ray stops
    parser = argparse.ArgumentParser(prog="ray", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)
    begin = verbs.add_parser("start")
    begin.add_argument("--head", action="store_true")
    begin.add_argument("--address", default="")
    begin.add_argument("--port", type=int, default=6379)
    begin.add_argument("--block", action="store_true")
    begin.add_argument("--node-ip-address", default="")
    begin.add_argument("--ready-fd", type=int, default=None, help=argparse.SUPPRESS)
    ask = verbs.add_parser("status")
    ask.add_argument("--address", default="")
    # Ray's other start options (--num-gpus, --dashboard-host, ...) are accepted and ignored.
    args, _rest = parser.parse_known_args(argv)
    if args.verb == "status":
        address = args.address or current_address()
        if not address:
            say("ConnectionError: could not find any running Ray instance")
            return 1
        return status(address)
    return start(args, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
