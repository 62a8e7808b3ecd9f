"""A Docker engine of the test's own, in a network namespace of its own, to restart at will.

Restarting the shared engine would end processes the test did not start; a second engine in the
host's network namespace would reconfigure the host's bridges (it deletes docker0). So this one
runs in a named network namespace, with ``--live-restore`` so its containers survive its
restarts, and everything that talks to its containers by port runs in that namespace too.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import docker
import docker.errors

from tests.kits.commands import ROOT
from tests.kits.signals import AS_TYPED


class PrivateDocker:
    def __init__(self) -> None:
        self.netns = f"swt-{uuid.uuid4().hex[:8]}"
        self.base = Path(tempfile.mkdtemp(prefix="sw-dockerd-"))
        self.socket = self.base / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True)

    def _enter(self) -> list[str]:
        """Into the namespace's network only (``ip netns exec`` would also remount /sys and
        hide the cgroup mounts dockerd needs)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--"]

    def start(self) -> None:
        with (self.base / "dockerd.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *self._enter(),
                    "dockerd",
                    "--data-root",
                    str(self.base / "data"),
                    "--exec-root",
                    str(self.base / "exec"),
                    "--pidfile",
                    str(self.base / "dockerd.pid"),
                    "-H",
                    self.url,
                    "--bridge=none",
                    "--iptables=false",
                    "--ip-masq=false",
                    "--live-restore",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                client = docker.DockerClient(base_url=self.url, timeout=5)
                client.ping()
                client.close()
                return
            except docker.errors.DockerException:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("private dockerd did not start:\n" + self.log()) from None
                time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM to the dockerd this object started, by its pid."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove_containers(self) -> None:
        """Every container of this engine removed, whatever a failed test left: the engine is
        the test's own, so all of them are; a stopped engine would orphan their processes."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(docker.errors.DockerException):
            client = self.client()
            try:
                for container in client.containers.list(all=True):
                    with contextlib.suppress(docker.errors.DockerException):
                        container.remove(force=True)
            finally:
                client.close()

    def restart(self) -> None:
        self.stop()
        self.restarts += 1
        self.start()

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=30)

    def run(
        self,
        *argv: str,
        env: dict[str, str] | None = None,
        background: bool = False,
        timeout: float = 120,
        job: bool = False,
    ) -> subprocess.Popen[str] | subprocess.CompletedProcess[str]:
        """A command inside the namespace, talking to this engine. ``job``: in a process group
        of its own with a terminal's signals, as a shell runs a command (a terminal's Ctrl-C
        goes to the whole group)."""
        command = [
            *self._enter(),
            *(AS_TYPED if job else ["env"]),
            f"DOCKER_HOST={self.url}",
            *[f"{k}={v}" for k, v in (env or {}).items()],
            *argv,
        ]
        if background:
            return subprocess.Popen(
                command,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                process_group=0 if job else None,
            )
        return subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        result = self.run(sys.executable, "-c", code)
        assert isinstance(result, subprocess.CompletedProcess)
        return result

    def log(self) -> str:
        path = self.base / "dockerd.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def close(self) -> None:
        self.remove_containers()
        self.stop()
        # The engine leaves mounts under its own directories: take them down, deepest first.
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for point in sorted(
            (m for m in mounts if m.startswith(str(self.base))), key=len, reverse=True
        ):
            subprocess.run(["umount", "-l", point], check=False)
        for _ in range(20):  # the engine's last children may still be leaving the namespace
            if subprocess.run(["ip", "netns", "del", self.netns], check=False).returncode == 0:
                break
            time.sleep(0.5)
        shutil.rmtree(self.base, ignore_errors=True)
