"""The real daemon as a process: start it, wait for it, talk to it, end it by its pid."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkwarden.base import faults
from sparkwarden.config import schema as cfg
from sparkwarden.surfaces import control
from tests.kits.commands import ROOT, history, status


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def stalling(step: str, where: Path) -> dict[str, str]:
    """The environment that holds a daemon's runs once ``step`` has acted, before it is
    recorded (``base/faults.py``), with the file it makes then (:meth:`DaemonProcess.held`)."""
    return {
        faults.ENABLE: "1",
        faults.STALL_AT: step,
        faults.HELD: str(where / f"held-{step}-{uuid.uuid4().hex[:8]}"),
    }


class DaemonProcess:
    def __init__(self, config: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.config = config
        self.settings = cfg.load(config)
        self.log = log
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, ready: bool = True) -> DaemonProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparkwarden", "--config", str(self.config), "run"],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=self.env,
            )
        if ready:
            wait_for("the daemon to answer on its socket", self.answering, timeout=60)
        return self

    def answering(self) -> bool:
        """A poll's predicate: not yet, while no daemon listens or one drops the call (a reload
        ends the daemon on its old config: a call it had accepted is reset); a daemon that
        exited fails at once, and one that never answers fails at the caller's deadline."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{self.text()}")
        try:
            return bool(self.request({"cmd": "status"}).get("ok"))
        except (control.DaemonUnavailable, control.DaemonNotAnswering):
            return False

    def held(self, step: str, timeout: float = 60.0) -> None:
        """Once its run holds after ``step`` acted (a daemon started with :func:`stalling`): the
        step's "running" in history comes before its action, which may not have landed yet."""
        where = Path(self.env[faults.HELD])
        wait_for(f"the run held after {step} acted", where.exists, timeout=timeout)

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        return control.call(self.settings.control.socket, payload)

    def status(self) -> dict[str, Any]:
        return status(self.config)

    def history(self) -> list[dict[str, Any]]:
        return history(self.config)

    def after_looks(self, n: int, timeout: float = 60.0) -> dict[str, Any]:
        """Its status once it has looked at the box ``n`` more times: a wait for "nothing
        happens" bounded by what the daemon did, never by seconds a loaded machine may not give
        it (at the tests' 0.5 s interval, n looks are at least n / 2 seconds but for an event's
        early look)."""
        wait_for("the daemon to answer on its socket", self.answering, timeout=timeout)
        start = int(self.status()["daemon"]["looks"])
        status: dict[str, Any] = wait_for(
            f"{n} more looks of the daemon",
            lambda: (s := self.status())["daemon"]["looks"] >= start + n and s,
            timeout=timeout,
        )
        return status

    def runs_with(self, reason: str, finished: bool = True) -> list[dict[str, Any]]:
        return [
            r
            for r in self.history()
            if r["reason"] == reason and (not finished or r["result"] != "running")
        ]

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signum)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc is not None:
            end(self.proc)


def end(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL: only ever a process the test started, by its own handle."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class NotifySink:
    """A ``NOTIFY_SOCKET`` read as systemd reads it, every datagram at once (a full queue would
    block the daemon's sends): ``messages`` holds (monotonic time, text)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[tuple[float, str]] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.settimeout(0.5)
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        while True:
            try:
                self.messages.append((time.monotonic(), self._sock.recv(4096).decode()))
            except TimeoutError:
                continue
            except OSError:
                return

    def saying(self, text: str) -> list[str]:
        return [m for _, m in self.messages if text in m]

    def close(self) -> None:
        self._sock.close()


class Daemons:
    """Daemons a test starts, logging under ``logs``; :meth:`stop_all` ends each by its pid."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[DaemonProcess] = []

    def start(
        self, config: Path, env: dict[str, str] | None = None, ready: bool = True
    ) -> DaemonProcess:
        daemon = DaemonProcess(config, self.logs / f"daemon-{len(self.started)}.log", env)
        self.started.append(daemon)
        return daemon.start(ready=ready)

    def stop_all(self) -> None:
        for daemon in self.started:
            daemon.stop()


def restarted_as_wedged(daemon: DaemonProcess, timeout: float = 240.0) -> dict[str, Any]:
    """Once an engine the daemon watches is wedged: status says its chat is unanswered (never
    "ok"), and the run that follows is ``unhealthy``, ended well, in the wedge's words. The run."""
    unanswered = wait_for(
        "status saying the chat is unanswered",
        lambda: (s := daemon.status()["llm"])["unanswered_s"] and s,
        timeout=120,
        every=0.5,
    )
    assert unanswered["health"].startswith("chat unanswered for "), unanswered
    (run,) = wait_for("the wedge's run", lambda: daemon.runs_with("unhealthy"), timeout, 1.0)
    assert run["result"] == "ok", run
    said = json.dumps(run)
    assert "wedged: no progress for" in said and "/health says nothing of it" in said, said
    return dict(run)
