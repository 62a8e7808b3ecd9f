"""The stand-in's several-node mode behaves as vLLM's own (no Ray) is reported to: rank 0 waits
for its ranks, a lost rank hangs requests behind a 200 /health and then kills the engine, a
headless rank outlives its head and never rejoins. Processes on loopback, ended by PID."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.standin.stage import STANDIN_DIR, free_port

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"


class Ranks:
    """A head and a headless rank of one stand-in engine, as processes of this host."""

    def __init__(self, tmp_path: Path) -> None:
        self.port, self.master = free_port(), free_port()
        self.logs = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-u", str(STANDIN_DIR / "vllm_standin.py"), "--nnodes", "2"]
        command += ["--master-addr", "127.0.0.1", "--master-port", str(self.master), *args]
        with (self.logs / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def head(self) -> subprocess.Popen[bytes]:
        return self.start(
            "head", "--host", "127.0.0.1", "--port", str(self.port), "--collective-timeout", "1"
        )

    def worker(self) -> subprocess.Popen[bytes]:
        return self.start("worker", "--headless", "--node-rank", "1")

    def health(self) -> int | None:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code
        except httpx.ConnectError:
            return None

    def wait_health(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while self.health() != 200:
            assert time.monotonic() < deadline, self.log("head")
            time.sleep(0.1)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[Ranks]:
    ranks = Ranks(tmp_path)
    yield ranks
    ranks.close()


def test_rank0_keeps_its_port_closed_until_its_rank_joins(ranks: Ranks) -> None:
    ranks.head()
    time.sleep(1.5)
    assert ranks.health() is None  # waiting at the rendezvous, as "Init torch distributed begin"
    assert "Init torch distributed begin" in ranks.log("head")
    ranks.worker()
    ranks.wait_health()
    assert "rank 1 joined" in ranks.log("head")


def test_a_lost_rank_hangs_requests_behind_a_200_then_the_engine_dies(ranks: Ranks) -> None:
    head, worker = ranks.head(), ranks.worker()
    ranks.wait_health()
    worker.kill()
    worker.wait()
    time.sleep(0.3)
    assert ranks.health() == 200  # /health does not know
    began = time.monotonic()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"http://127.0.0.1:{ranks.port}/v1/chat/completions", json=body, timeout=10)
    assert time.monotonic() - began >= 0.9  # it hung for the collective timeout first
    assert head.wait(timeout=10) == 1
    assert "collective timed out" in ranks.log("head")


def test_a_headless_rank_outlives_its_head_and_never_rejoins(ranks: Ranks) -> None:
    head, worker = ranks.head(), ranks.worker()
    ranks.wait_health()
    head.kill()
    head.wait()
    time.sleep(1.0)
    assert worker.poll() is None  # it never exits by itself
    assert "TCPStore error" in ranks.log("worker")
    ranks.head()  # a head restarted against the stale rank waits for ever
    time.sleep(2.0)
    assert ranks.health() is None
    assert ranks.log("head").count("rank 1 joined") == 1
