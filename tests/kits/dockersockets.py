"""Docker sockets that misbehave as a caller meets them: one that relays to the real engine but
blinks, one that accepts and never answers; tests build others on the same relay.

Each lives in a temp folder of its own and is reached by ``url`` (a ``DOCKER_HOST``).
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ENGINE = "/var/run/docker.sock"


class UnixListener:
    """A Unix socket in a fresh temp folder; ``serve`` is handed each connection on the accept
    thread, so it must hand the work on (a thread) or keep the connection, not block."""

    def __init__(self, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix)) / "docker.sock"
        self.url = f"unix://{self.path}"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(64)
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.serve(self._server.accept()[0])

    def serve(self, caller: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self._server.close()
        self._accepting.join(5)
        self.path.unlink(missing_ok=True)
        self.path.parent.rmdir()


@dataclass
class Link:
    """One caller's connection and the engine connection relayed for it."""

    caller: socket.socket
    engine: socket.socket
    marked: bool = False
    ends: threading.Barrier = field(init=False)

    def __post_init__(self) -> None:
        self.ends = threading.Barrier(2, action=self.close)

    def cut(self) -> None:
        for end in (self.caller, self.engine):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.caller.close()
        self.engine.close()


#: What a relay's subclass sees of each chunk: it returns what passes on, or None to cut.
Hook = Callable[[bytes, Link], bytes | None]


class DockerRelay(UnixListener):
    """Relays each connection to the real engine byte for byte, the events stream included.

    Subclasses see each chunk on its way (``upward``: caller to engine; ``downward``: back) and
    may change it, or return None to cut the connection there. A direction's end is passed on as
    a half-close; the pair is closed when both directions have ended.
    """

    def serve(self, caller: socket.socket) -> None:
        engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        engine.connect(ENGINE)
        link = Link(caller, engine)
        for source, sink, hook in ((caller, engine, self.upward), (engine, caller, self.downward)):
            threading.Thread(
                target=self._relay, args=(source, sink, hook, link), daemon=True
            ).start()

    def upward(self, data: bytes, link: Link) -> bytes | None:
        return data

    def downward(self, data: bytes, link: Link) -> bytes | None:
        return data

    def _relay(self, source: socket.socket, sink: socket.socket, hook: Hook, link: Link) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if (passed := hook(data, link)) is None:
                    link.cut()
                    break
                sink.sendall(passed)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        link.ends.wait()


class BlinkProxy(DockerRelay):
    """Drops a connection after the engine has acted on a chosen request and before its answer
    reaches the caller: what a connection blink leaves (the state change landed, the caller saw
    an error and retries)."""

    def __init__(self, blink_on: bytes, times: int = 1) -> None:
        """Blink on the first ``times`` requests whose first line contains ``blink_on``."""
        self.blink_on = blink_on
        self.left = times
        self.blinked = 0
        self._lock = threading.Lock()
        super().__init__("sw-blink-")

    def upward(self, data: bytes, link: Link) -> bytes | None:
        """Marks the connection to be cut once the engine answers the chosen request."""
        first = data.split(b"\r\n", 1)[0]
        with self._lock:
            if self.left > 0 and self.blink_on in first:
                self.left -= 1
                link.marked = True
        return data

    def downward(self, data: bytes, link: Link) -> bytes | None:
        """The answer to a marked request is swallowed and the connection cut."""
        if not link.marked:
            return data
        with self._lock:
            self.blinked += 1
        return None


class HungEngine(UnixListener):
    """Accepts every connection, reads the request, and never answers: a wedged dockerd as a
    caller sees it."""

    def __init__(self) -> None:
        self.accepted = 0
        self._held: list[socket.socket] = []
        super().__init__("sw-hung-")

    def serve(self, caller: socket.socket) -> None:
        self.accepted += 1
        self._held.append(caller)  # kept open, never written to

    def close(self) -> None:
        super().close()
        for conn in self._held:
            conn.close()
