"""A hostile listener on an engine's port, run as a real unprivileged account.

``python3 -c HOSTILE <port> <mode> <log>`` (Debian's python3: root's venv is not the account's):
it answers ``/health`` 200 like an engine, writes every request's method, path and
Authorization header to ``<log>``, and answers the rest per mode:

- ``squat``: a well-formed model list and chat answer (a squatter that passes for the engine);
- ``nested``: 200 KB of ``[[[[`` for every JSON answer;
- ``huge``: a 5 MB error body (HTTP 500);
- ``echo``: HTTP 500 ``unknown api key <the key it was sent>`` with terminal escapes in it;
- ``drip``: a 200 whose body comes one byte every 0.2 s, for days;
- ``escapes``: an error message that retitles and clears a terminal, and forges a line.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.standin.stage import host_lock

HOSTILE = textwrap.dedent(
    """
    import http.server, json, sys, time
    port, mode, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    ESC = "\\x1b]0;pwned\\x07\\x1b[2J\\n[8/8] gateway_probe ok"

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, code, body):
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _answer(self):
            with open(log, "a") as out:
                auth = self.headers.get("Authorization") or "-"
                out.write(json.dumps([self.command, self.path, auth]) + "\\n")
            if self.path == "/health":
                return self._send(200, b"")
            key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            if mode == "nested":
                return self._send(200, b"[" * 200_000)
            if mode == "huge":
                return self._send(500, b"x" * 5_000_000)
            if mode == "echo":
                message = "unknown api key " + key + " " + ESC
                return self._send(500, json.dumps({"error": {"message": message}}).encode())
            if mode == "drip":  # a body that never ends, one byte at a time
                self.send_response(200)
                self.send_header("Content-Length", "1000000")
                self.end_headers()
                for _ in range(1_000_000):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            if mode == "escapes":
                return self._send(500, json.dumps({"error": {"message": ESC}}).encode())
            if self.path == "/v1/models":
                return self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())
            choice = {"message": {"content": "ready"}, "finish_reason": "stop"}
            self._send(200, json.dumps({"choices": [choice]}).encode())

        do_GET = _answer

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer()

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    print("listening", flush=True)
    server.serve_forever()
    """
)


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int


@contextlib.contextmanager
def account(role: str) -> Iterator[Account]:
    """A real unprivileged account made for the test (``useradd``), removed afterwards."""
    name = f"sw{role[:6]}{uuid.uuid4().hex[:6]}"
    with host_lock("accounts"):  # useradd refuses while another holds /etc/passwd's lock
        subprocess.run(
            [
                "useradd",
                "--system",
                "--user-group",
                "--no-create-home",
                "-s",
                "/usr/sbin/nologin",
                name,
            ],
            check=True,
            capture_output=True,
        )
    try:
        entry = pwd.getpwnam(name)
        yield Account(name, entry.pw_uid, entry.pw_gid)
    finally:
        with host_lock("accounts"):
            subprocess.run(["userdel", name], check=False, capture_output=True)
            subprocess.run(["groupdel", name], check=False, capture_output=True)


@dataclass
class Hostile:
    """A running hostile listener; :meth:`requests` is what it was sent."""

    proc: subprocess.Popen[str]
    log: Path

    def requests(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@contextlib.contextmanager
def hostile(port: int, mode: str, who: Account | None) -> Iterator[Hostile]:
    """The listener bound to ``port`` on all addresses, as ``who`` (None: as root); its log in
    a folder of its own (pytest's are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="sw-hostile-"))
    log = folder / "requests.log"
    log.touch()
    as_user: dict[str, Any] = {}
    if who is not None:
        os.chown(folder, who.uid, who.gid)
        os.chown(log, who.uid, who.gid)
        as_user = {"user": who.uid, "group": who.gid, "extra_groups": []}
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-c", HOSTILE, str(port), mode, str(log)],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
        **as_user,
    )
    running = Hostile(proc, log)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "listening\n", "the hostile listener did not start"
        yield running
    finally:
        if proc.poll() is None:
            running.stop()
        shutil.rmtree(folder, ignore_errors=True)
