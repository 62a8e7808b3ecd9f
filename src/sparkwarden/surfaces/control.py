"""The daemon's control socket: one JSON request per connection, one JSON answer.

Only root and members of the configured group may talk to it: the socket file is root-owned with
mode 0660, and each peer's credentials (``SO_PEERCRED``) are checked again. Requests are size-
limited and schema-checked (:mod:`sparkwarden.surfaces.control_schema`); a malformed one gets an
error answer, never a crash. The client half (:func:`call`, :func:`stream`) imports neither the
schema nor the logger: ``sparkwarden status`` must start fast.

A member is trusted with six verbs, not with the daemon: connections are capped per user and in
all (root keeps a reserve of its own), a request must arrive whole within one deadline, and the
accept loop outlives running out of files or threads. The client treats any failure of the
socket as "not answering", so ``status`` can fall back to the last snapshot.
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
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from sparkwarden.base.dirs import make_dirs
from sparkwarden.base.errors import SparkwardenError

MAX_REQUEST = 4096
#: Seconds for a whole request to arrive (not per ``recv``: a byte every few seconds is refused).
REQUEST_DEADLINE = 5.0
#: Seconds one line of an answer may wait for a reader that does not read.
SEND_TIMEOUT = 60.0
#: Connections served at once from one user that is not root, and from all users but root.
PER_USER = 8
MAX_CONNECTIONS = 64
#: Root's own reserve above MAX_CONNECTIONS: members together cannot lock root out.
ROOT_RESERVE = 8
#: Back-off of the accept loop when the process is out of files or threads.
BACKOFF_MIN, BACKOFF_MAX = 0.05, 2.0


class DaemonUnavailable(SparkwardenError):
    """No daemon listens on the socket: the caller acts on its own."""


class DaemonNotAnswering(SparkwardenError):
    """A daemon may be there but did not answer (busy, out of files, too slow): ``status``
    reads the last snapshot instead; a command that changes things says so and stops."""


class Peer(NamedTuple):
    pid: int
    uid: int
    gid: int

    def who(self) -> str:
        """The asker as history names them: "alice (uid 1001, pid 4242)"."""
        import pwd

        try:
            name = pwd.getpwuid(self.uid).pw_name
        except KeyError:
            name = "uid"
        return f"{name} (uid {self.uid}, pid {self.pid})"


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


class Admission:
    """Who is being served now: caps per user and in all, with a reserve for root. Pure."""

    def __init__(
        self,
        per_user: int = PER_USER,
        total: int = MAX_CONNECTIONS,
        root_reserve: int = ROOT_RESERVE,
    ) -> None:
        self.per_user, self.total, self.root_reserve = per_user, total, root_reserve
        self.serving: dict[int, int] = {}

    def admit(self, uid: int) -> str | None:
        """Take a slot for ``uid``, or say why not."""
        busy = sum(self.serving.values())
        members = busy - self.serving.get(0, 0)
        if uid == 0:
            if busy >= self.total + self.root_reserve:
                return f"{busy} connections are being served; try again"
        elif self.serving.get(uid, 0) >= self.per_user:
            return f"uid {uid} already has {self.per_user} connections open"
        elif members >= self.total:
            return f"{members} connections are being served; try again"
        self.serving[uid] = self.serving.get(uid, 0) + 1
        return None

    def leave(self, uid: int) -> None:
        self.serving[uid] -= 1
        if not self.serving[uid]:
            del self.serving[uid]


class ControlServer:
    def __init__(self, path: Path, group: str | None, handler: Handler) -> None:
        from sparkwarden.base import logs
        from sparkwarden.surfaces import control_schema  # the server's only: see the docstring

        self._schema = control_schema
        self.log = logs.get("sparkwarden.control")
        self.path = path
        self.group = group
        self._handler = handler
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._admission = Admission()
        self._admission_lock = threading.Lock()

    def start(self) -> None:
        make_dirs(self.path.parent, 0o755)  # the group passes through it, under UMask=0077
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
        """Accept until stopped. Running out of files (EMFILE) or threads is a pause with
        back-off, never the end of the loop: the socket must answer root again afterwards.
        Admission is decided here, so a flood never costs more than its capped threads."""
        assert self._sock is not None
        backoff = BACKOFF_MIN
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stop.is_set():
                    return
                self.log.warning("control_accept_failed", error=str(exc), retry_in=backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            try:
                self._admit(conn)
            except RuntimeError as exc:  # can't start new thread: TasksMax, memory
                self.log.warning("control_thread_failed", error=str(exc), retry_in=backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            backoff = BACKOFF_MIN

    def _admit(self, conn: socket.socket) -> None:
        """Serve ``conn`` on a thread of its own if its user has a slot, else say busy."""
        try:
            peer = peer_of(conn)
        except OSError:
            conn.close()
            return
        with self._admission_lock:
            full = self._admission.admit(peer.uid)
        if full:
            self.log.warning("control_busy", uid=peer.uid, pid=peer.pid, why=full)
            with conn, contextlib.suppress(OSError):
                conn.setblocking(False)  # a small answer into an empty buffer, or nothing
                _send(conn, {"ok": False, "error": f"the daemon is busy: {full}"})
            return
        try:
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True).start()
        except BaseException:
            self._leave(peer)
            conn.close()
            raise

    def serving(self) -> dict[int, int]:
        """Connections being served now, by uid."""
        with self._admission_lock:
            return dict(self._admission.serving)

    def _leave(self, peer: Peer) -> None:
        with self._admission_lock:
            self._admission.leave(peer.uid)

    def _serve(self, conn: socket.socket, peer: Peer) -> None:
        try:
            with conn:
                self._serve_admitted(conn, peer)
        finally:
            self._leave(peer)

    def _serve_admitted(self, conn: socket.socket, peer: Peer) -> None:
        try:
            raw = _receive(conn, time.monotonic() + REQUEST_DEADLINE)  # then one answer, always
            if not allowed(peer, self.group):
                self.log.warning("control_refused", uid=peer.uid, gid=peer.gid, pid=peer.pid)
                answer: Answer = {
                    "ok": False,
                    "error": f"uid {peer.uid} may not control "
                    f"sparkwarden (not root, not in group {self.group})",
                }
            else:
                answer = self._answer(raw, peer)
        except (OSError, TimeoutError) as exc:
            self.log.warning("control_io_error", uid=peer.uid, error=str(exc))
            return
        with contextlib.suppress(OSError):
            conn.settimeout(SEND_TIMEOUT)  # a streamed run sends a line per step, for minutes
            if isinstance(answer, dict):
                _send(conn, answer)
                return
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


def _receive(conn: socket.socket, deadline: float) -> bytes | None:
    """One request line, whole by ``deadline`` (monotonic) or :class:`TimeoutError`."""
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no whole request within {REQUEST_DEADLINE:g}s")
        conn.settimeout(left)
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
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:  # out of files ourselves
        raise DaemonNotAnswering(f"cannot open a socket: {exc.strerror or exc}") from None
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
        except OSError as exc:  # EAGAIN: its backlog is full; a timeout
            raise DaemonNotAnswering(f"{path}: {exc.strerror or exc}") from None
        try:
            _send(sock, payload)
            sock.settimeout(timeout)
            lines = sock.makefile("rb")
        except OSError as exc:
            raise DaemonNotAnswering(f"{path}: {exc.strerror or exc}") from None
        while True:
            try:
                raw = lines.readline()
            except TimeoutError:
                raise DaemonNotAnswering(
                    f"the daemon did not answer on {path} within {timeout:g}s"
                ) from None
            except OSError as exc:
                raise DaemonNotAnswering(f"{path}: {exc.strerror or exc}") from None
            if not raw:
                return
            try:
                yield json.loads(raw)
            except ValueError:
                raise DaemonNotAnswering(f"the daemon's answer on {path} is not JSON") from None
    finally:
        sock.close()


def call(path: Path, payload: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Ask the daemon for one answer; :class:`DaemonUnavailable` when none listens."""
    for answer in stream(path, payload, timeout):
        return answer
    raise DaemonNotAnswering(f"the daemon closed {path} without an answer")
