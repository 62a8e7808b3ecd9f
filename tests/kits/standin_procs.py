"""Stand-in programs (``devtools/standin``) run as processes of this host, on loopback: each
one's output in a log file of the test's, each ended by its PID at the end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from devtools.standin.stage import STANDIN_DIR, free_port


class StandinProcs:
    """Processes of the stand-ins, an API port for the one that serves, and their logs."""

    def __init__(self, tmp_path: Path, serving: str, env: dict[str, str] | None = None) -> None:
        """``serving``: the name of the process that serves the API (its log shown if not)."""
        self.port, self.serving = free_port(), serving
        self.logs = tmp_path
        self.env = {**os.environ, **(env or {})}
        self.procs: list[subprocess.Popen[bytes]] = []

    def run(self, name: str, script: str, *args: str) -> subprocess.Popen[bytes]:
        """``script`` (a file of devtools/standin) with ``args``; its output in ``name``.log."""
        command = [sys.executable, "-u", str(STANDIN_DIR / script), *args]
        with (self.logs / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        self.procs.append(proc)
        return proc

    def health(self) -> int | None:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code
        except httpx.ConnectError:
            return None

    def wait_health(self, timeout: float = 15.0) -> None:
        """Until ``/health`` says 200."""
        deadline = time.monotonic() + timeout
        while self.health() != 200:
            assert time.monotonic() < deadline, self.log(self.serving)
            time.sleep(0.1)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def wait_log(self, name: str, text: str, timeout: float = 10.0) -> None:
        """Until ``text`` is in ``name``'s log."""
        deadline = time.monotonic() + timeout
        while text not in self.log(name):
            assert time.monotonic() < deadline, self.log(name)
            time.sleep(0.05)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
