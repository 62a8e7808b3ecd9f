"""``docker_exec`` keeps every byte a command writes, however late its caller reads.

CI's systemd tests read ``systemctl show`` as '' with exit code 0 on a loaded box: docker-py's
``exec_run`` loses what the command wrote before the caller read Docker's 101 answer (it reads
the raw socket past ``http.client``'s buffer; docker-py #2042). A relay that holds each 101 for
half a second, then passes it with whatever followed, makes that window every time: Docker's
CLI, which ``docker_exec`` runs, reads it whole.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.standin.stage import Stage, docker_exec

ENGINE = "/var/run/docker.sock"
HOLD = 0.5


class LateReader:
    """A Docker socket whose caller reads each 101 answer late: it arrives with the output."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="sw-late-")) / "docker.sock"
        self.url = f"unix://{self.path}"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.path))
        self._server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                caller, _ = self._server.accept()
                engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                engine.connect(ENGINE)
                threading.Thread(
                    target=self._relay, args=(caller, engine, False), daemon=True
                ).start()
                threading.Thread(
                    target=self._relay, args=(engine, caller, True), daemon=True
                ).start()

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket, hold: bool) -> None:
        with contextlib.suppress(OSError), source, sink:
            while data := source.recv(65536):
                if hold and data.startswith(b"HTTP/1.1 101"):
                    time.sleep(HOLD)  # the command runs and writes meanwhile
                    source.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        while more := source.recv(65536):
                            data += more
                    source.setblocking(True)
                sink.sendall(data)

    def close(self) -> None:
        self._server.close()
        self.path.unlink(missing_ok=True)
        self.path.parent.rmdir()


@pytest.fixture
def late() -> Iterator[LateReader]:
    relay = LateReader()
    yield relay
    relay.close()


ARGV = ["sh", "-c", "echo out; echo err >&2; exit 3"]


@pytest.mark.docker
def test_docker_py_loses_what_a_command_wrote_before_its_caller_read_the_101(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root, as CI met it: a caller slow to read the 101 (here: half a second late)."""
    name = stage.command("exec", ["sleep", "600"])
    begin = http.client.HTTPResponse.begin

    def late_begin(self: http.client.HTTPResponse) -> None:
        time.sleep(HOLD)
        begin(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
    lost = stage.client.containers.get(name).exec_run(ARGV, demux=True)
    assert (lost.exit_code, lost.output) == (3, (None, None)), lost


@pytest.mark.docker
def test_docker_exec_keeps_what_a_command_wrote_before_its_caller_read_the_101(
    stage: Stage, late: LateReader
) -> None:
    name = stage.command("exec", ["sleep", "600"])
    assert docker_exec(name, ARGV, host=late.url) == (3, "out\n", "err\n")
    said = docker_exec(name, ["sh", "-c", "pwd; echo $WHO"], {"WHO": "carol"}, "/tmp")
    assert said == (0, "/tmp\ncarol\n", "")
