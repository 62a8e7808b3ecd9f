"""The stand-in Ray cluster behaves as Ray and vLLM's Ray executor are documented to: the engine
finds the cluster ``ray start --head`` left on its node and waits for a node per rank; a worker
joins only a GCS that is up (retried meanwhile); a dead worker ends the engine at once; a worker
outlives its head only for the reconnect timeout, then exits, never joining a new head.
Processes on loopback, ended by PID; Ray's temp dir is the test's own."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.standin import ray_standin
from devtools.standin.stage import free_port
from tests.kits.standin_procs import StandinProcs


class RayProcs(StandinProcs):
    """A Ray head, its workers and a ``vllm serve --distributed-executor-backend ray``; Ray's
    temp dir the test's own, its timeouts short."""

    def __init__(self, tmp_path: Path) -> None:
        env = {
            "RAY_TMPDIR": str(tmp_path / "ray"),
            "RAY_gcs_rpc_server_reconnect_timeout_s": "1",
            "RAY_health_check_period_ms": "400",
            "RAY_health_check_failure_threshold": "10",  # a dead node marked so after 4 s
        }
        super().__init__(tmp_path, "vllm", env)
        self.env.pop("RAY_ADDRESS", None)
        self.gcs = free_port()

    def head(self) -> subprocess.Popen[bytes]:
        """Returned once its GCS is up, as ``ray start --head`` without ``--block`` does: an
        engine started before that finds no cluster and starts a local one, as vLLM would."""
        head = self.run(
            "ray-head", "ray_standin.py", "start", "--head", "--port", str(self.gcs), "--block"
        )
        self.wait_log("ray-head", "Ray runtime started")
        return head

    def worker(self, name: str = "w1") -> subprocess.Popen[bytes]:
        address = f"--address=127.0.0.1:{self.gcs}"
        return self.run(
            name, "ray_standin.py", "start", "--block", address, "--node-ip-address", name
        )

    def engine(self, tp: int = 2, pg_timeout: float = 15) -> subprocess.Popen[bytes]:
        """``pg_timeout``: how long its placement group may wait for the nodes (vLLM: 1800 s)."""
        return self.run(
            "vllm",
            "vllm_standin.py",
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--distributed-executor-backend", "ray", "-tp", str(tp)),
            *("--pg-timeout", str(pg_timeout)),
        )


@pytest.fixture
def ray(tmp_path: Path) -> Iterator[RayProcs]:
    procs = RayProcs(tmp_path)
    yield procs
    procs.close()


def test_the_engine_waits_for_a_node_per_rank_on_the_cluster_ray_start_left(ray: RayProcs) -> None:
    ray.head()
    engine = ray.engine(tp=2)
    time.sleep(1.0)
    assert ray.health() is None  # one node (the head) of two: its port stays closed
    ray.worker()
    ray.wait_health()
    assert f"existing Ray cluster at address: 127.0.0.1:{ray.gcs}" in ray.log("vllm")
    assert "ranks on" in ray.log("vllm") and "w1" in ray.log("vllm")
    assert engine.poll() is None


def test_without_enough_nodes_the_placement_group_times_out(ray: RayProcs) -> None:
    ray.head()
    engine = ray.engine(tp=2, pg_timeout=3)
    assert engine.wait(timeout=15) == 1
    assert "Cannot provide a placement group requiring 2 GPUs" in ray.log("vllm")
    assert ray.health() is None


def test_a_dead_worker_ends_the_engine_once_ray_marks_its_node_dead(ray: RayProcs) -> None:
    ray.head()
    worker = ray.worker()
    engine = ray.engine(tp=2)
    ray.wait_health()
    worker.kill()
    worker.wait()
    time.sleep(0.5)
    assert engine.poll() is None and ray.health() == 200  # Ray's health checks not done yet
    assert engine.wait(timeout=15) == 1
    assert "RayWorkerProc rank=[1] died unexpectedly" in ray.log("vllm")
    assert "node w1 marked dead" in ray.log("ray-head")


def test_more_gpus_than_the_node_has_without_ray_is_refused(ray: RayProcs) -> None:
    """vLLM 0.12 on: a world bigger than the node's GPUs needs --distributed-executor-backend."""
    engine = ray.run("vllm", "vllm_standin.py", "--port", str(ray.port), "-tp", "2")
    assert engine.wait(timeout=10) == 1
    assert "World size (2) is larger than the number of available GPUs (1)" in ray.log("vllm")


def test_a_worker_waits_for_a_head_not_yet_up_but_never_joins_a_new_one(ray: RayProcs) -> None:
    worker = ray.worker()
    time.sleep(1.0)
    head = ray.head()  # after the worker: it was retried and joins
    engine = ray.engine(tp=2)
    ray.wait_health()
    assert "joined the cluster" in ray.log("w1")
    head.kill()
    head.wait()
    assert engine.wait(timeout=15) == 1  # its GCS gone, the engine ends
    assert worker.wait(timeout=10) == 1  # after the reconnect timeout (1 s here)
    assert "failed to reconnect to the GCS" in ray.log("w1")


def test_docker_stop_s_sigterm_ends_ray_start_block(ray: RayProcs) -> None:
    ray.head()
    worker = ray.worker()
    ray.wait_log("w1", "joined the cluster")
    worker.terminate()
    assert worker.wait(timeout=3) == 0  # not the stop timeout's SIGKILL


class Watcher:
    """An engine watching the GCS: each line it is told, with what the head's log held then."""

    def __init__(self, said: list[str]) -> None:
        self.said, self.told = said, list[tuple[str, list[str]]]()

    def sendall(self, data: bytes) -> None:
        self.told.append((data.decode().strip(), list(self.said)))


def test_the_head_says_a_join_and_a_death_before_it_tells_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI read the head's log the moment the engine exited on "dead w1" and found no "marked
    dead": the head told its watchers first and said it after."""
    said: list[str] = []
    monkeypatch.setattr(ray_standin, "say", said.append)
    monkeypatch.setenv(ray_standin.CHECK_PERIOD_ENV, "1")
    gcs = ray_standin.Gcs("head")
    engine = Watcher(said)
    gcs.watchers.append(engine)  # type: ignore[arg-type]
    joined, raylet = socket.socketpair()
    raylet.shutdown(socket.SHUT_WR)  # the worker's raylet gone once it has joined
    gcs._join(joined, "w1")
    raylet.close()
    joined.close()
    told = dict(engine.told)
    assert any(line.startswith("node w1 joined") for line in told["nodes head w1"]), told
    assert any(line.startswith("node w1 marked dead") for line in told["dead w1"]), told
