"""A real users' path for tests and the benchmark: LiteLLM -> Nginx -> the stand-in vLLM.

Both run the shipped examples (packaging/nginx/, packaging/litellm/) with only their ports and the
served model substituted, on free loopback ports, and are stopped by pid. LiteLLM lives in a venv
of its own (made by scripts/setup-host in a machine-wide cache, named by a hash of its pin in
scripts/litellm-requirements.txt): it is no dependency of sparkwarden.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from devtools.standin.stage import free_port
from sparkwarden.config.schema import ROTATION_FLAG as FLAG

#: The rotation flag's path as the Nginx example names it (the daemon's default).
ROTATION_FLAG = str(FLAG)

ROOT = Path(__file__).resolve().parents[2]
NGINX_EXAMPLE = ROOT / "packaging" / "nginx" / "sparkwarden-upstream.conf"
LITELLM_EXAMPLE = ROOT / "packaging" / "litellm" / "config.yaml"
LITELLM_REPLICAS = ROOT / "packaging" / "litellm" / "replicas.yaml"
LITELLM_PIN = ROOT / "scripts" / "litellm-requirements.txt"
#: Where scripts/setup-host installed the pinned LiteLLM (the same hash of the same file).
LITELLM = (
    Path("/var/cache/sparkwarden-tests")
    / f"litellm-{hashlib.sha256(LITELLM_PIN.read_bytes()).hexdigest()[:12]}"
    / "bin"
    / "litellm"
)
NGINX = "/usr/sbin/nginx"
#: The alias users ask for in the LiteLLM example, and the master key the tests give it.
ALIAS = "qwen"
MASTER_KEY = "sk-sparkwarden-test"


def render(
    example: Path, dest: Path, replacements: dict[str, str], every: dict[str, str] | None = None
) -> Path:
    """The shipped example with its addresses replaced; each must be there exactly once, so an
    edit of the example that the tests would silently stop exercising fails here instead.
    ``every``: replaced wherever they are (at least once): a replica set's served model."""
    text = example.read_text()
    for old, new in replacements.items():
        count = text.count(old)
        if count != 1:
            raise AssertionError(f"{example.name}: expected {old!r} once, found it {count} times")
        text = text.replace(old, new)
    for old, new in (every or {}).items():
        if old not in text:
            raise AssertionError(f"{example.name}: expected {old!r}, found none")
        text = text.replace(old, new)
    dest.write_text(text)
    return dest


def _stop(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait(
    what: str, proc: subprocess.Popen[bytes], log: Path, check: object, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if callable(check) and check():
                return
        time.sleep(0.2)
    raise AssertionError(f"{what} not ready within {timeout:g}s:\n{log.read_text()[-3000:]}")


@dataclass
class Nginx:
    """Debian's nginx running the example server in front of ``upstream_port``."""

    dir: Path
    upstream_port: int
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    #: a replica's rotation flag (the example's path otherwise: never written in a test)
    flag: Path | None = None

    def start(self) -> Nginx:
        self.dir.mkdir(parents=True, exist_ok=True)
        temp = self.dir / "temp"
        temp.mkdir(exist_ok=True)
        temp.chmod(0o777)  # the workers run as nobody
        upstream, listen = self.upstream_port, self.port
        flag = str(self.flag or self.dir / "out-of-rotation")
        site = render(
            NGINX_EXAMPLE,
            self.dir / "site.conf",
            {
                "127.0.0.1:8000 ": f"127.0.0.1:{upstream} ",
                "1:8080;": f"1:{listen};",
                ROTATION_FLAG: flag,
            },
        )
        paths = "\n".join(
            f"    {kind}_temp_path {temp / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (self.dir / "nginx.conf").write_text(
            f"daemon off;\npid {self.dir / 'nginx.pid'};\n"
            f"error_log {self.dir / 'error.log'} warn;\n"
            "worker_processes 1;\nevents { worker_connections 512; }\n"
            f"http {{\n    access_log off;\n{paths}\n    include {site};\n}}\n"
        )
        log = self.dir / "nginx.out"
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [NGINX, "-c", str(self.dir / "nginx.conf"), "-p", str(self.dir)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait("nginx", self.proc, log, self._listening, timeout=30)
        return self

    def _listening(self) -> bool:
        httpx.get(f"http://127.0.0.1:{self.port}/", timeout=2)  # any answer, a 502 too
        return True

    def stop(self) -> None:
        _stop(self.proc, signal.SIGQUIT)  # nginx's graceful stop; workers end with the master


@dataclass
class LiteLLM:
    """The LiteLLM proxy running the example model entry, pointed at ``nginx_port``."""

    dir: Path
    nginx_port: int
    served_model: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    #: a replica set: the other Sparks' Nginx ports, each a deployment of the one alias (the
    #: replica example, packaging/litellm/replicas.yaml)
    peers: tuple[int, ...] = ()

    @property
    def url(self) -> str:
        """The OpenAI base URL users give their client."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout: float = 180.0) -> LiteLLM:
        if not LITELLM.exists():
            raise AssertionError(f"{LITELLM} is missing: run scripts/setup-host")
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.peers:  # one deployment per Spark's Nginx, every one serving the same model
            ports = (self.nginx_port, *self.peers)
            spark = {f"//spark{i}:8080/v1": f"//127.0.0.1:{p}/v1" for i, p in enumerate(ports, 1)}
            model = {"hosted_vllm/Qwen3.6-35B-A3B": f"hosted_vllm/{self.served_model}"}
            config = render(LITELLM_REPLICAS, self.dir / "config.yaml", spark, model)
        else:
            replace = {
                "1:8080/v1": f"1:{self.nginx_port}/v1",
                "/Qwen3.6-35B-A3B ": f"/{self.served_model} ",
            }
            config = render(LITELLM_EXAMPLE, self.dir / "config.yaml", replace)
        env = {
            **os.environ,
            "LITELLM_MASTER_KEY": MASTER_KEY,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "VLLM_API_KEY": "none",
            "NO_DOCS": "True",
        }
        log = self.dir / "litellm.log"
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    *(str(LITELLM), "--config", str(config)),
                    *("--host", "127.0.0.1", "--port", str(self.port)),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.dir,
                env=env,
            )
        _wait("litellm", self.proc, log, self._live, timeout=timeout)
        return self

    def _live(self) -> bool:
        url = f"http://127.0.0.1:{self.port}/health/liveliness"
        return httpx.get(url, timeout=2).status_code == 200

    def stop(self) -> None:
        _stop(self.proc)


Kind = Literal["complete", "cut", "refused", "empty"]


@dataclass(frozen=True)
class Result:
    """One user request: ``cut`` means tokens came and then the stream ended unfinished;
    ``empty`` an answer that finished with no token (what vLLM 0.33 answers while it drains,
    ``finish_reason`` "abort", as the gateway passes it on: ``finish``)."""

    kind: Kind
    began: float
    seconds: float
    tokens: int
    detail: str = ""
    finish: str = ""
    wall: float = 0.0  # when it began, by the wall clock (the journal's clock)


def stream_once(client: httpx.Client, url: str, max_tokens: int) -> Result:
    """One streaming chat request as a user's client makes it, classified."""
    began, wall = time.monotonic(), time.time()
    tokens, finish, done = 0, "", False
    body = {
        "model": ALIAS,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    detail = ""
    try:
        with client.stream("POST", f"{url}/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                detail = f"HTTP {response.status_code}"
            else:
                for line in response.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line.removeprefix("data: ")
                    if data == "[DONE]":
                        done = True
                        continue
                    chunk = json.loads(data)
                    if "error" in chunk:
                        detail = str(chunk["error"])[:120]
                        continue
                    for choice in chunk.get("choices") or []:
                        if (choice.get("delta") or {}).get("content"):
                            tokens += 1
                        if choice.get("finish_reason"):
                            finish = str(choice["finish_reason"])
    except (httpx.HTTPError, ValueError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:120]
    seconds = time.monotonic() - began
    kind: Kind = "cut" if tokens else "refused"
    if finish and done:
        kind = "complete" if tokens else "empty"
    return Result(kind, began, seconds, tokens, detail, finish, wall)


class StreamingLoad:
    """A few users streaming answers through the gateway, back to back, until stopped."""

    def __init__(
        self,
        url: str,
        clients: int = 3,
        max_tokens: int = 40,
        think: float = 0.0,
        stagger: float = 0.0,
    ) -> None:
        """``think``: each user pauses a random 0..think s after an answer (seeded), so the
        users fall out of step as real ones are; 0 sends back to back. ``stagger``: user i sends
        its first request i x stagger s after the first, out of step with no pause: started
        together, back-to-back users of equal answers stay in lockstep, all between two
        requests at the same moments."""
        self.url, self.clients, self.max_tokens, self.think = url, clients, max_tokens, think
        self.stagger = stagger
        self.results: list[Result] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _user(self, seed: int) -> None:
        headers = {"Authorization": f"Bearer {MASTER_KEY}"}
        pauses = random.Random(seed)  # a reproducible pace
        with httpx.Client(headers=headers, timeout=httpx.Timeout(120, connect=5)) as client:
            self._stop.wait(seed * self.stagger)
            while not self._stop.is_set():
                result = stream_once(client, self.url, self.max_tokens)
                with self._lock:
                    self.results.append(result)
                if result.kind in ("refused", "empty"):
                    self._stop.wait(0.2)  # a user's client that retries, not a flood
                elif self.think:
                    self._stop.wait(pauses.uniform(0, self.think))

    def start(self) -> StreamingLoad:
        for seed in range(self.clients):
            thread = threading.Thread(target=self._user, args=(seed,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def count(self, kind: Kind) -> int:
        with self._lock:
            return sum(r.kind == kind for r in self.results)

    def stop(self) -> list[Result]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=180)
        return list(self.results)


@contextlib.contextmanager
def users_path(dir: Path, engine_port: int, served_model: str) -> Iterator[tuple[Nginx, LiteLLM]]:
    """Nginx and LiteLLM in front of the engine on ``engine_port``; both stopped at the end."""
    nginx = Nginx(dir / "nginx", engine_port)
    litellm = LiteLLM(dir / "litellm", nginx.port, served_model)
    try:
        nginx.start()
        litellm.start()
        yield nginx, litellm
    finally:
        litellm.stop()
        nginx.stop()
