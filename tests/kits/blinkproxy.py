"""A Docker socket that blinks: it relays to the real engine, but drops the connection after the
engine has acted on a chosen request and before its answer reaches the caller.

That is what a connection blink leaves: the state change landed, the caller saw an error and
retries. Everything else is relayed byte for byte (the events stream included).
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
from pathlib import Path

ENGINE = "/var/run/docker.sock"


class BlinkProxy:
    def __init__(self, blink_on: bytes, times: int = 1) -> None:
        """Blink on the first ``times`` requests whose first line contains ``blink_on``."""
        self.blink_on = blink_on
        self.left = times
        self.blinked = 0
        self.dir = Path(tempfile.mkdtemp(prefix="sw-blink-"))
        self.path = self.dir / "docker.sock"
        self.url = f"unix://{self.path}"
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(16)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            engine.connect(ENGINE)
            cut = threading.Event()
            threading.Thread(target=self._up, args=(client, engine, cut), daemon=True).start()
            threading.Thread(target=self._down, args=(engine, client, cut), daemon=True).start()

    def _claim(self, data: bytes) -> bool:
        first = data.split(b"\r\n", 1)[0]
        with self._lock:
            if self.left > 0 and self.blink_on in first:
                self.left -= 1
                return True
        return False

    def _up(self, client: socket.socket, engine: socket.socket, cut: threading.Event) -> None:
        """Caller to engine; marks the connection to be cut once the engine answers."""
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if self._claim(data):
                    cut.set()
                engine.sendall(data)
        with contextlib.suppress(OSError):
            engine.shutdown(socket.SHUT_WR)

    def _down(self, engine: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        """Engine to caller; the answer to a marked request is swallowed and both ends closed."""
        with contextlib.suppress(OSError):
            while data := engine.recv(65536):
                if cut.is_set():
                    with self._lock:
                        self.blinked += 1
                    break
                client.sendall(data)
        for end in (client, engine):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self._closed = True
        self._server.close()
        self.path.unlink(missing_ok=True)
        self.dir.rmdir()


class HungEngine:
    """A Docker socket that accepts every connection, reads the request, and never answers: a
    wedged dockerd as a caller sees it."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sw-hung-"))
        self.path = self.dir / "docker.sock"
        self.url = f"unix://{self.path}"
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)  # kept open, never written to

    def close(self) -> None:
        self._server.close()
        for conn in self._held:
            conn.close()
        self.path.unlink(missing_ok=True)
        self.dir.rmdir()
