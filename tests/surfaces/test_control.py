"""The control socket against a hostile member: caps, one deadline, an accept loop that lives,
and nothing a member sends reaching root's terminal or the record as anything but text."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sparkwarden import cli
from sparkwarden.surfaces import control, control_schema, reasons
from sparkwarden.surfaces import status_text as status_mod
from sparkwarden.surfaces.control import Admission, ControlServer, Peer
from tests.kits.commands import ROOT
from tests.kits.daemonkit import wait_for

NOBODY, NOGROUP = 65534, 65534


def test_admission_caps_each_member_and_all_of_them_but_keeps_roots_reserve() -> None:
    admission = Admission(per_user=2, total=3, root_reserve=1)
    assert admission.admit(1000) is None and admission.admit(1000) is None
    assert "uid 1000 already has 2" in (admission.admit(1000) or "")
    assert admission.admit(1001) is None
    assert "3 connections" in (admission.admit(1002) or "")  # the members' total is spent
    assert admission.admit(0) is None  # root's reserve
    assert admission.admit(0) is not None
    admission.leave(1000)
    assert admission.admit(1002) is None
    assert admission.serving == {1000: 1, 1001: 1, 0: 1, 1002: 1}


@pytest.mark.parametrize("verb", ["restart", "dry-run"])
def test_a_socket_restart_is_always_manual_and_reasons_are_inert(verb: str) -> None:
    """A dry run is kept in history under its reason as a restart is: the same rule holds."""
    for reason in ("crash", "schedule", "manual\x1b[2J", "manualx"):
        with pytest.raises(ValidationError):
            control_schema.parse_request({"cmd": verb, "reason": reason})
    with pytest.raises(ValidationError):  # nothing but its reason: no container, no step
        control_schema.parse_request({"cmd": verb, "reason": "manual", "container": "x"})
    assert control_schema.parse_request({"cmd": verb, "reason": "manual:fix-1"}).reason
    assert control_schema.parse_request({"cmd": verb}).reason == "manual"
    assert reasons.manual_reason("crash") == "manual:crash"
    assert reasons.manual_reason("manual:x") == "manual:x"
    for reason in ("\x1b]0;pwned\x07", "ok\r\nGAVE UP: forged", "\x9b2J"):
        with pytest.raises(ValidationError):
            control_schema.parse_request({"cmd": "hold", "seconds": 60, "reason": reason})
    assert control_schema.parse_request({"cmd": "hold", "seconds": 60, "reason": "disk swap, ~1h"})
    with pytest.raises(SystemExit) as refused:  # the CLI says so before it asks anyone
        cli.main(["hold", "1h", "--reason", "\x1b[2J"])
    assert refused.value.code == 2


def test_status_never_writes_a_raw_escape_whatever_the_snapshot_holds() -> None:
    """A reason recorded before the check, or an engine's own error text, is shown escaped."""
    evil = "\x1b[2J\x1b]0;title\x07\r\nGAVE UP: forged " + "x" * 200
    snapshot: dict[str, Any] = {
        "daemon": {"running": True, "pid": 1, "state": "held"},
        "llm": {"container": "vllm", "status": "running", "note": evil, "health": evil},
        "hold": {"until": "2026-12-01T04:30:00+00:00", "reason": evil},
        "gave_up": {"why": evil, "reason": "crash"},
        "last_run": {"id": 1, "reason": evil, "result": "failed", "error": evil, "steps": []},
    }
    text = status_mod.format_text(snapshot)
    assert all(ord(c) >= 0x20 or c == "\n" for c in text), repr(text)
    assert "\\x1b[2J" in text and all(len(line) <= 80 for line in text.splitlines())
    assert not any(line.startswith("GAVE UP: forged") for line in text.splitlines())


def _status(_request: Any, _peer: Peer) -> dict[str, Any]:
    return {"ok": True, "status": {"daemon": {"running": True}}}


#: A member's slow-connection flood: N connections, each sending one byte now and then, never a
#: whole request; bounded in count and time. Prints how each connection ended. The target is a
#: socket's path, or ``tcp:PORT`` on 127.0.0.1 (the exporter).
FLOOD = textwrap.dedent(
    """
    import json, socket, sys, time
    path, count, bound = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    conns, ended = [], {}
    stop = time.monotonic() + bound
    for i in range(count):
        if path.startswith("tcp:"):
            s = socket.create_connection(("127.0.0.1", int(path[4:])), timeout=bound)
            s.setblocking(False)
            conns.append((i, s))
            continue
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        while True:
            try:
                s.connect(path)
                break
            except BlockingIOError:  # the listen backlog is full: wait for the server
                if time.monotonic() > stop:
                    ended[i] = "backlog"
                    break
                time.sleep(0.05)
        if i not in ended:
            conns.append((i, s))
    while conns and time.monotonic() < stop:
        for i, s in list(conns):
            try:
                data = s.recv(4096)
                ended[i] = "busy" if b"busy" in data else "closed"
            except BlockingIOError:
                try:
                    s.send(b" ")
                    continue
                except OSError:
                    ended[i] = "closed"
            except OSError:
                ended[i] = "closed"
            conns.remove((i, s))
            s.close()
        time.sleep(0.5)
    for i, s in conns:
        ended[i] = "open"
    print(json.dumps(sorted(ended.values())))
    """
)


def flood(path: Path, count: int, bound: float = 60.0, root: bool = False) -> subprocess.Popen[str]:
    """As nobody:nogroup (or root), with Debian's python3 (root's venv is not theirs)."""
    who: dict[str, Any] = {} if root else {"user": NOBODY, "group": NOGROUP, "extra_groups": []}
    return subprocess.Popen(
        ["/usr/bin/python3", "-c", FLOOD, str(path), str(count), str(bound)],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
        **who,
    )


def test_a_slow_flood_from_a_member_is_capped_and_cut_and_root_is_answered(
    control_dir: Path,
) -> None:
    path = control_dir / "control.sock"
    server = ControlServer(path, "nogroup", _status)
    server.start()
    try:
        slow = flood(path, 20)
        wait_for("the member's slots to fill", lambda: server.serving().get(NOBODY) == 8)
        assert control.call(path, {"cmd": "status"})["ok"] is True  # root, during the flood
        out, _ = slow.communicate(timeout=120)
        ended = json.loads(out)
    finally:
        server.stop()
    # 8 admitted and cut at the request deadline; the rest told "busy" (or left in the backlog).
    assert ended.count("closed") == 8, ended
    assert "open" not in ended and len(ended) == 20
    assert ended.count("busy") + ended.count("backlog") == 12, ended


SERVER = textwrap.dedent(
    """
    import resource, sys, time
    from pathlib import Path
    from sparkwarden.surfaces import control
    from sparkwarden.base import logs
    logs.setup("info")
    resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
    server = control.ControlServer(
        Path(sys.argv[1]), None, lambda r, p: {"ok": True, "status": {}}
    )
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
    server.stop()
    """
)


def test_the_accept_loop_outlives_running_out_of_files(control_dir: Path, tmp_path: Path) -> None:
    """Past the open-file limit accept() fails with EMFILE: the loop backs off and, once the
    flood is gone, answers again (it used to return for good). Root floods here: a member's
    own cap would stop it first."""
    path = control_dir / "control.sock"
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=ROOT,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        slow = flood(path, 60, root=True)  # root's cap (72) is above this server's 48 files
        wait_for("EMFILE", lambda: "control_accept_failed" in (tmp_path / "server.log").read_text())
        slow.communicate(timeout=120)
        wait_for("an answer again", lambda: _answers(path), timeout=30)
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
        log.close()
    assert "Too many open files" in (tmp_path / "server.log").read_text()


def _answers(path: Path) -> bool:
    try:
        return control.call(path, {"cmd": "status"}, timeout=2)["ok"] is True
    except control.DaemonNotAnswering:
        return False


def test_status_falls_back_to_the_snapshot_when_the_socket_fails(
    control_dir: Path, make_config: Any, tmp_path: Path
) -> None:
    """A socket that accepts and never answers: status reads the last snapshot, exit 3."""
    import socket

    from tests.kits.commands import run_cli

    config = make_config(["llm"], 1, control={"socket": str(control_dir / "mute.sock")})
    (tmp_path / "state").mkdir()
    status_mod.write_atomic(
        tmp_path / "state" / status_mod.STATUS_FILE,
        {"llm": {"container": "llm", "status": "running"}, "written_at": "2026-11-30T04:30"},
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(control_dir / "mute.sock"))
        mute.listen(1)
        result = run_cli(config, "status")
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout.startswith("sparkwarden: NOT ANSWERING; last known state from 2026")
    assert "did not answer" in result.stdout and "Traceback" not in result.stderr


def test_the_accept_loop_outlives_threads_that_cannot_start(
    control_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At TasksMax, Thread.start raises: that connection is closed, the loop backs off and
    serves the next one."""
    import threading

    path = control_dir / "control.sock"
    server = ControlServer(path, None, _status)
    server.start()
    refused: list[int] = []

    class Refusing(threading.Thread):
        def start(self) -> None:
            if len(refused) < 2:
                refused.append(1)
                raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(control.threading, "Thread", Refusing)
    try:
        for _ in range(2):
            with pytest.raises(control.DaemonNotAnswering):
                control.call(path, {"cmd": "status"}, timeout=10)
        assert control.call(path, {"cmd": "status"})["ok"] is True
        wait_for("every slot given back", lambda: server.serving() == {})
    finally:
        server.stop()
