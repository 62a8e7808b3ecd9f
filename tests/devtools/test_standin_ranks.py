"""The stand-in's several-node mode behaves as vLLM's own (no Ray) is reported to: rank 0 waits
for its ranks, a lost rank hangs requests behind a 200 /health and then kills the engine, a
headless rank outlives its head and never rejoins. Processes on loopback, ended by PID."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devtools.standin.stage import free_port
from tests.kits.standin_procs import StandinProcs

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"


class Ranks(StandinProcs):
    """A head and a headless rank of one stand-in engine, as processes of this host."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path, "head")
        self.master = free_port()

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        nodes = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(self.master)]
        return self.run(name, "vllm_standin.py", *nodes, *args)

    def head(self) -> subprocess.Popen[bytes]:
        return self.start(
            "head", "--host", "127.0.0.1", "--port", str(self.port), "--collective-timeout", "1"
        )

    def worker(self) -> subprocess.Popen[bytes]:
        return self.start("worker", "--headless", "--node-rank", "1")


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[Ranks]:
    ranks = Ranks(tmp_path)
    yield ranks
    ranks.close()


def test_rank0_keeps_its_port_closed_until_its_rank_joins(ranks: Ranks) -> None:
    ranks.head()
    ranks.wait_log("head", "Init torch distributed begin")
    time.sleep(1.0)
    assert ranks.health() is None  # waiting at the rendezvous, its port closed
    ranks.worker()
    ranks.wait_health()
    assert "rank 1 joined" in ranks.log("head")


def test_a_lost_rank_hangs_requests_behind_a_200_then_the_engine_dies(ranks: Ranks) -> None:
    head, worker = ranks.head(), ranks.worker()
    ranks.wait_health()
    worker.kill()
    worker.wait()
    ranks.wait_log("head", "rank 1: connection gone")
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
    ranks.wait_log("worker", "TCPStore error")
    time.sleep(1.0)
    assert worker.poll() is None  # it never exits by itself
    ranks.head()  # a head restarted against the stale rank waits for ever
    time.sleep(2.0)
    assert ranks.health() is None
    assert ranks.log("head").count("rank 1 joined") == 1
