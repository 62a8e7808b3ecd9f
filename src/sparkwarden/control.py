"""The daemon's control socket: one JSON request per connection, one JSON answer.

Only root and members of the configured group may talk to it: the socket file is root-owned with
mode 0660, and each peer's credentials (``SO_PEERCRED``) are checked again. Requests are size-
limited and schema-checked (:mod:`sparkwarden.control_schema`); a malformed one gets an error
answer, never a crash. The client half (:func:`call`, :func:`stream`) imports neither the schema
nor the logger: ``sparkwarden status`` must start fast.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from sparkwarden.errors import SparkwardenError

MAX_REQUEST = 4096


class DaemonUnavailable(SparkwardenError):
    """No daemon listens on the socket: the caller acts on its own."""


class Peer(NamedTuple):
    pid: int
    uid: int
    gid: int


def peer_of(conn: socket.socket) -> Peer:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid)


def group_id(name: str | None) -> int | None:
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def allowed(peer: Peer, group: str | None) -> bool:
    """Root, our own user, or a member of ``group`` (primary or supplementary)."""
    if peer.uid in (0, os.geteuid()):
        return True
    gid = group_id(group)
    if gid is None:
        return False
    if peer.gid == gid:
        return True
    try:
        user = pwd.getpwuid(peer.uid).pw_name
    except KeyError:
        return False
    return gid in os.getgrouplist(user, peer.gid)


#: An answer is one JSON object, or a stream of them (a restart reports step by step).
Answer = dict[str, Any] | Iterator[dict[str, Any]]
Handler = Callable[[Any, Peer], Answer]


class ControlServer:
    def __init__(self, path: Path, group: str | None, handler: Handler) -> None:
        from sparkwarden import control_schema, logs  # the server's only: see the docstring

        self._schema = control_schema
        self.log = logs.get("sparkwarden.control")
        self.path = path
        self.group = group
        self._handler = handler
        self._sock: socket.socket | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a stale socket of a dead daemon (the lock says we are alone)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # never world-accessible, not even for an instant
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old_umask)
        gid = group_id(self.group)
        if gid is not None:
            os.chown(self.path, os.geteuid(), gid)
            os.chmod(self.path, 0o660)
        elif self.group:
            self.log.warning("control_group_missing", group=self.group, mode="0600 (root only)")
        sock.listen(16)
        sock.settimeout(0.5)
        self._sock = sock
        threading.Thread(target=self._accept, name="control", daemon=True).start()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5.0)
            try:
                peer = peer_of(conn)
                if not allowed(peer, self.group):
                    self.log.warning("control_refused", uid=peer.uid, gid=peer.gid, pid=peer.pid)
                    _send(
                        conn,
                        {
                            "ok": False,
                            "error": f"uid {peer.uid} may not control "
                            f"sparkwarden (not root, not in group {self.group})",
                        },
                    )
                    return
                answer = self._answer(_receive(conn), peer)
            except (OSError, TimeoutError) as exc:
                self.log.warning("control_io_error", error=str(exc))
                return
            with contextlib.suppress(OSError):
                if isinstance(answer, dict):
                    _send(conn, answer)
                    return
                conn.settimeout(None)  # a streamed run: one line per step, for minutes
                for line in answer:
                    _send(conn, line)

    def _answer(self, raw: bytes | None, peer: Peer) -> Answer:
        if raw is None:
            return {"ok": False, "error": f"request larger than {MAX_REQUEST} bytes"}
        try:
            request = self._schema.parse_wire(raw)
        except self._schema.MalformedRequest as exc:
            return {"ok": False, "error": str(exc)}
        try:
            return self._handler(request, peer)
        except SparkwardenError as exc:
            return {"ok": False, "error": str(exc)}

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _receive(conn: socket.socket) -> bytes | None:
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(1024)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            return None
    return data.split(b"\n", 1)[0]


def _send(conn: socket.socket, payload: dict[str, Any]) -> None:
    conn.sendall(json.dumps(payload, default=str).encode() + b"\n")


def stream(
    path: Path, payload: dict[str, Any], timeout: float | None = 10.0
) -> Iterator[dict[str, Any]]:
    """Ask the daemon and yield each JSON line it answers; :class:`DaemonUnavailable` when none
    listens. ``timeout`` bounds each wait for a line (None: a streamed run may take minutes)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10.0)
    try:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise DaemonUnavailable(f"no daemon listens on {path}") from None
        except PermissionError:
            raise SparkwardenError(
                f"not allowed to use {path}: run as root or join its group"
            ) from None
        _send(sock, payload)
        sock.settimeout(timeout)
        lines = sock.makefile("rb")
        while True:
            try:
                raw = lines.readline()
            except TimeoutError:
                raise SparkwardenError(
                    f"the daemon did not answer on {path} within {timeout:g}s"
                ) from None
            if not raw:
                return
            try:
                yield json.loads(raw)
            except ValueError:
                raise SparkwardenError(f"the daemon's answer on {path} is not JSON") from None
    finally:
        sock.close()


def call(path: Path, payload: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Ask the daemon for one answer; :class:`DaemonUnavailable` when none listens."""
    for answer in stream(path, payload, timeout):
        return answer
    raise SparkwardenError(f"the daemon closed {path} without an answer")
