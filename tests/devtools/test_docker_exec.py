"""``docker_exec`` keeps every byte a command writes, however late its caller reads.

CI's systemd tests read ``systemctl show`` as '' on a loaded box: docker-py's ``exec_run`` loses
what the command wrote before the caller read Docker's 101 answer (it reads the raw socket past
``http.client``'s buffer; docker-py #2042). Here the caller reads that answer only once both of
the command's lines are behind it on the socket, which makes the window every time: docker-py
loses both streams; Docker's CLI, which ``docker_exec`` runs, reads them whole.
"""

from __future__ import annotations

import http.client
import socket

import pytest

from devtools.standin.stage import Stage, docker_exec
from tests.kits.daemonkit import wait_for
from tests.kits.dockersockets import DockerRelay, Link

ARGV = ["sh", "-c", "echo out; echo err >&2; exit 3"]


#: Both of ARGV's lines as Docker frames them: an 8-byte header and "out\n", then "err\n".
FRAMES = 2 * (8 + 4)


def behind_the_101(data: bytes) -> int:
    """How many bytes a 101 answer's first read holds past the answer itself."""
    return len(data.partition(b"\r\n\r\n")[2])


class LateReader(DockerRelay):
    """A Docker socket whose caller gets each 101 answer only once the command has ended: the
    answer and the command's output reach it in one piece."""

    def __init__(self) -> None:
        self.held = 0
        super().__init__("sw-late-")

    def downward(self, data: bytes, link: Link) -> bytes | None:
        if data.startswith(b"HTTP/1.1 101"):
            while behind_the_101(data) < FRAMES and (more := link.engine.recv(65536)):
                data += more  # the command's output, held with the answer
            self.held += 1
        return data


@pytest.fixture
def idle(stage: Stage) -> str:
    """A container that only waits: the commands are the only execs it is given."""
    return stage.command("exec", ["sleep", "600"])


@pytest.mark.docker
def test_docker_py_loses_what_a_command_wrote_before_its_caller_read_the_101(
    stage: Stage, idle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root, as CI met it: the caller reads the 101 late (here: once the output is in)."""
    container = stage.client.containers.get(idle)
    begin, start = http.client.HTTPResponse.begin, stage.client.api.exec_start
    started: list[str] = []

    def late_begin(self: http.client.HTTPResponse) -> None:
        if started:  # the answer to exec start: read once the output is behind it
            started.clear()
            sock = self.fp.raw._sock  # type: ignore[union-attr]
            wait_for(
                "the output behind the 101",
                lambda: behind_the_101(sock.recv(4096, socket.MSG_PEEK)) >= FRAMES,
                60,
            )
        begin(self)

    def start_exec(exec_id: str, *args: object, **kwargs: object) -> object:
        started.append(exec_id)
        return start(exec_id, *args, **kwargs)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
    monkeypatch.setattr(stage.client.api, "exec_start", start_exec)
    lost = container.exec_run(ARGV, demux=True)
    assert (lost.exit_code, lost.output) == (3, (None, None)), lost


@pytest.mark.docker
def test_docker_exec_keeps_what_a_command_wrote_before_its_caller_read_the_101(
    stage: Stage, idle: str
) -> None:
    late = LateReader()
    try:
        assert docker_exec(idle, ARGV, host=late.url) == (3, "out\n", "err\n")
        assert late.held == 1  # the 101 was held until the output was behind it
    finally:
        late.close()
    said = docker_exec(idle, ["sh", "-c", "pwd; echo $WHO"], {"WHO": "carol"}, "/tmp")
    assert said == (0, "/tmp\ncarol\n", "")


@pytest.mark.docker
def test_a_failed_exec_is_an_error_not_a_commands_exit_code(stage: Stage, idle: str) -> None:
    """The CLI says a refused exec with exit code 1, as a command's own failure would read."""
    stage.client.containers.get(idle).kill()
    with pytest.raises(RuntimeError, match="is not running"):
        docker_exec(idle, ["true"])
    with pytest.raises(RuntimeError, match="No such container"):
        docker_exec(f"{idle}-none", ["true"])
