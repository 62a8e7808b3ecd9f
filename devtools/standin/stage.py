"""Stand-in LLM and voice containers on the local Docker engine, for tests, demo and benchmarks.

No image can be pulled here, so the image is an empty rootfs skeleton made with ``docker import``;
the containers run the host's own Python by bind-mounting ``/usr`` (and friends) read-only, and
publish their port on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shlex
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx

IMAGE = "sparkwarden-standin:rootfs"
LABEL = "io.sparkwarden.standin"
STANDIN_DIR = Path(__file__).resolve().parent
HOST_MOUNTS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")
PYTHON = "/usr/bin/python3"


def ensure_image(client: docker.DockerClient) -> str:
    """Import the empty skeleton once; it is a few hundred bytes. Under a lock: tests running in
    parallel would each import one, and the tag would move under a container just made."""
    with host_lock("standin-image"):
        try:
            client.images.get(IMAGE)
            return IMAGE
        except docker.errors.ImageNotFound:
            pass
        repo, tag = IMAGE.split(":")
        client.api.import_image_from_data(skeleton(), repository=repo, tag=tag)
        return IMAGE


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    """One holder at a time on this machine (every process: parallel tests, the demo), for what
    two must not do at once (an image import, ``useradd``); released when the holder dies."""
    with open(f"/tmp/.sparkwarden-{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def skeleton(*extra: str) -> bytes:
    """The image's rootfs as a tar: empty folders for the host's bind mounts (and ``extra``
    ones: the same files under another image ID)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in (
            "usr",
            "lib",
            "lib64",
            "bin",
            "sbin",
            "etc",
            "tmp",
            "proc",
            "sys",
            "dev",
            "standin",
            "run",
            *extra,
        ):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
    return buffer.getvalue()


#: How Docker's CLI says it ran no command (no such container, one not running).
DOCKER_REFUSED = ("Error response from daemon:", "Error: No such container")


def docker_exec(
    container: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    workdir: str | None = None,
    host: str | None = None,
) -> tuple[int, str, str]:
    """``docker exec``: (exit code, stdout, stderr), every byte of them.

    Through Docker's own CLI, not docker-py's ``exec_run``: that one reads the command's output
    from the raw socket after ``http.client`` has read the 101 answer through a buffer, so what
    the command wrote before the caller read that answer (a fast command, a starved caller) is
    lost, its exit code kept (docker-py #2042; ``tests/devtools/test_docker_exec.py``). A refused
    exec raises: its exit code 1 would read as the command's.
    """
    command = ["docker", *(["--host", host] if host else []), "exec"]
    for key, value in (env or {}).items():
        command += ["--env", f"{key}={value}"]
    command += ["--workdir", workdir] if workdir else []
    done = subprocess.run([*command, container, *argv], capture_output=True, check=False)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    if done.returncode != 0 and err.startswith(DOCKER_REFUSED):  # not the command's own code
        raise RuntimeError(f"docker exec in {container} refused: {err.strip()}")
    return done.returncode, out, err


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _volumes() -> dict[str, dict[str, str]]:
    volumes = {path: {"bind": path, "mode": "ro"} for path in HOST_MOUNTS if Path(path).exists()}
    volumes[str(STANDIN_DIR)] = {"bind": "/standin", "mode": "ro"}
    return volumes


@dataclass
class Stage:
    """Creates uniquely named stand-in containers and removes every one of them at the end."""

    client: docker.DockerClient
    prefix: str = field(default_factory=lambda: f"swt-{uuid.uuid4().hex[:8]}")
    created: list[str] = field(default_factory=list)

    def name(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def llm(
        self,
        role: str = "llm",
        *standin_args: str,
        port: int | None = None,
        start: bool = True,
        shell: bool = False,
        **create: Any,
    ) -> tuple[str, int]:
        """A stand-in vLLM container publishing 127.0.0.1:port; returns (name, port).
        ``shell``: the command wrapped in ``sh -c "..."``, as operators often write it."""
        port = port or free_port()
        name = self.name(role)

        def wrap(command: list[str]) -> list[str]:
            return ["sh", "-c", shlex.join(command)] if shell else command

        if create.get("network_mode") == "host":  # the stand-in listens on the host's port
            command = [PYTHON, "-u", "/standin/vllm_standin.py", "--port", str(port)]
            self._create(name, wrap([*command, *standin_args]), start=start, **create)
            return name, port
        command = [PYTHON, "-u", "/standin/vllm_standin.py", "--port", "8000", *standin_args]
        ports = {"8000/tcp": ("127.0.0.1", port)}
        self._create(name, wrap(command), ports=ports, start=start, **create)
        return name, port

    def voice(self, role: str, start: bool = True, **create: Any) -> str:
        command = [PYTHON, "-u", "/standin/vllm_standin.py", "--role", "voice"]
        return self.command(role, command, start=start, **create)

    def command(self, role: str, command: list[str], start: bool = True, **create: Any) -> str:
        """A container running ``command`` on the stand-in image (a Ray node, ...); its name."""
        name = self.name(role)
        self._create(name, command, start=start, **create)
        return name

    def _create(self, name: str, command: list[str], start: bool, **create: Any) -> None:
        image = create.pop("image", None) or ensure_image(self.client)
        volumes = {**_volumes(), **create.pop("volumes", {})}
        labels = {LABEL: self.prefix, **create.pop("labels", {})}
        if "stop_timeout" in create:  # only the low-level API knows --stop-timeout
            api, ports = self.client.api, create.pop("ports", {})
            host = api.create_host_config(
                binds=volumes, init=create.pop("init", None), port_bindings=ports
            )
            api.create_container(
                image,
                command=command,
                name=name,
                labels=labels,
                host_config=host,
                ports=list(ports),
                stop_timeout=create.pop("stop_timeout"),
                **create,
            )
            self.created.append(name)
            if start:
                api.start(name)
            return
        container = self.client.containers.create(
            image,
            command=command,
            name=name,
            volumes=volumes,
            labels=labels,
            **create,
        )
        self.created.append(name)
        if start:
            container.start()

    def status(self, name: str) -> str:
        return str(self.client.containers.get(name).attrs["State"]["Status"])

    def attrs(self, name: str) -> dict[str, Any]:
        return dict(self.client.containers.get(name).attrs)

    def cleanup(self) -> None:
        for name in self.created:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.containers.get(name).remove(force=True)
        self.created.clear()


@contextlib.contextmanager
def local(*standin_args: str, log: Path | None = None) -> Iterator[str]:
    """The stand-in as a process of this host on 127.0.0.1 (no container), healthy; yields its
    base URL and ends it by its pid."""
    port = free_port()
    command = [sys.executable, "-u", str(STANDIN_DIR / "vllm_standin.py")]
    command += ["--host", "127.0.0.1", "--port", str(port), *standin_args]
    with open(log or os.devnull, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def wait_healthy(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"stand-in on port {port} not healthy within {timeout}s")


def write_config(
    path: Path,
    state_dir: Path,
    llm_names: list[str],
    port: int,
    voice_names: list[str],
    **sections: Any,
) -> Path:
    """A sparkwarden config for the stand-ins, with thresholds that fit a small test machine."""
    import tomli_w

    data: dict[str, Any] = {
        "llm": {
            "containers": llm_names,
            "base_url": f"http://127.0.0.1:{port}",
            "stop_timeout": "10s",
            "health_timeout": "30s",
            "probe_timeout": "10s",
            "poll_interval": "0.2s",
        },
        "voice": {"containers": voice_names, "stop_timeout": "5s"},
        "memory": {"start_min_available_gib": 1, "start_wait": "10s", "drop_interval": "1s"},
        "state": {"dir": str(state_dir)},
        "docker": {"timeout": "30s", "retry_for": "10s"},
    }
    for section, values in sections.items():
        if isinstance(values, list):  # an array of tables, e.g. [[notify]]
            data[section] = values
        else:
            data.setdefault(section, {}).update(values)
    path.write_text(tomli_w.dumps(data))
    return path
