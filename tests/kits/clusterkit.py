"""Simulated Sparks on this one machine: each node a network namespace with its own dockerd
and sshd, all on one private LAN, reached over real SSH with a test-only key.

The LAN is a bridge in a namespace of its own; each node has a veth into it with a 10.x
address that exists only inside namespaces this kit made. A node's sshd gives its sessions
the node's ``DOCKER_HOST``, so ``ssh node docker ps`` and ``ssh node sparkwarden ...`` see
that node's engine, as on a real cluster. Everything is removed by :meth:`ClusterKit.close`:
sshds and dockerds by the PIDs this kit started, then the namespaces and the folders.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shlex
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from devtools.standin.stage import (
    IMAGE,
    PYTHON,
    Stage,
    _volumes,
    ensure_image,
    free_port,
    write_config,
)
from sparkwarden.cluster.link import CONTROL_PREFIX
from tests.kits.commands import ROOT
from tests.kits.privatedocker import PrivateDocker

SSHD = "/usr/sbin/sshd"
#: The field's house rule: without it doctor (rightly) says vLLM's default is too much.
HOUSE_RULE = ("--gpu-memory-utilization", "0.8")
#: The sparkwarden every simulated node runs (the same files: one machine).
SPARKWARDEN = str(ROOT / ".venv" / "bin" / "sparkwarden")


@dataclass
class Node:
    """One simulated Spark: its namespace's dockerd, its sshd and its LAN address."""

    name: str
    address: str
    docker: PrivateDocker
    sshd: subprocess.Popen[bytes] | None = None
    #: the node's end of its veth into the LAN
    link: str = ""

    @property
    def netns(self) -> str:
        return self.docker.netns

    def client(self) -> docker.DockerClient:
        return self.docker.client()

    def enter(self) -> list[str]:
        """A command prefix that runs in this node's network (as its sparkwarden would)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--"]


class ClusterKit:
    """Nodes ``names`` (the first is the head) on one LAN; close() removes all of it."""

    def __init__(self, names: tuple[str, ...] = ("head", "w1")) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="sw-cluster-"))
        self.base.chmod(0o755)
        self.subnet = f"10.{random.randint(100, 250)}.{random.randint(0, 250)}"
        self.nodes: list[Node] = []
        self.lan: str | None = None
        try:
            self._make(names)
        except BaseException:
            self.close()
            raise

    # --- building ------------------------------------------------------------------------
    def _make(self, names: tuple[str, ...]) -> None:
        self.lan = f"{self.base.name[-8:]}-lan".replace("_", "")
        subprocess.run(["ip", "netns", "add", self.lan], check=True)
        lan = ["ip", "-n", self.lan]
        subprocess.run([*lan, "link", "add", "br0", "type", "bridge"], check=True)
        subprocess.run([*lan, "link", "set", "br0", "up"], check=True)
        self.key = self.base / "id_ed25519"
        _run(
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "sparkwarden-test",
            "-f",
            str(self.key),
        )
        for index, name in enumerate(names, start=1):
            node = Node(name, f"{self.subnet}.{index}", PrivateDocker())
            self.nodes.append(node)
            self._wire(node, index)
            node.docker.start()
            self._sshd(node)
        self._image()
        self._ssh_config()

    def _wire(self, node: Node, index: int) -> None:
        """A veth from the node's namespace into the LAN bridge; the address on the node's end."""
        outer, inner = f"swl{index}{self.base.name[-4:]}", f"swn{index}{self.base.name[-4:]}"
        _run(
            "ip",
            "link",
            "add",
            outer,
            "netns",
            self.lan,
            "type",
            "veth",
            "peer",
            "name",
            inner,
            "netns",
            node.netns,
        )
        _run("ip", "-n", self.lan, "link", "set", outer, "master", "br0", "up")
        _run("ip", "-n", node.netns, "addr", "add", f"{node.address}/24", "dev", inner)
        _run("ip", "-n", node.netns, "link", "set", inner, "up")
        node.link = inner

    def _sshd(self, node: Node) -> None:
        home = self.base / node.name
        home.mkdir()
        host_key = home / "ssh_host_ed25519_key"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key))
        (home / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (home / "sshd_config").write_text(
            sshd_config(
                f"{node.address}:22",
                home,
                host_key,
                f"SetEnv DOCKER_HOST={node.docker.url} SPARKWARDEN_NODE={node.name}",
            )
        )
        self.start_sshd(node)

    def start_sshd(self, node: Node) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        home = self.base / node.name
        with (home / "sshd.log").open("ab") as log:
            node.sshd = subprocess.Popen(
                [*node.enter(), SSHD, "-D", "-e", "-f", str(home / "sshd_config")],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.wait_ssh(node)

    def _ssh_config(self) -> None:
        known = self.base / "known_hosts"
        known.write_text(
            "".join(
                f"{n.address} {(self.base / n.name / 'ssh_host_ed25519_key.pub').read_text()}"
                for n in self.nodes
            )
        )
        lines = []
        for node in self.nodes:
            lines += [f"Host {node.name}", f"    HostName {node.address}", "    User root"]
        lines += every_host(self.key, known)
        self.ssh_config = self.base / "ssh_config"
        self.ssh_config.write_text("\n".join(lines))

    def _image(self) -> None:
        """The stand-in image on the head, then the very same image (same ID) on every node."""
        head = self.nodes[0].client()
        ensure_image(head)
        data = b"".join(head.images.get(IMAGE).save(named=True))
        for node in self.nodes[1:]:
            node.client().images.load(io.BytesIO(data).getvalue())

    # --- using ---------------------------------------------------------------------------
    @property
    def head(self) -> Node:
        return self.nodes[0]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def wait_ssh(self, node: Node, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            probe = subprocess.run(
                [*node.enter(), "bash", "-c", f"exec 3<>/dev/tcp/{node.address}/22"],
                capture_output=True,
            )
            if probe.returncode == 0:
                return
            if time.monotonic() > deadline or (node.sshd and node.sshd.poll() is not None):
                log = (self.base / node.name / "sshd.log").read_text(errors="replace")
                raise RuntimeError(f"sshd of {node.name} did not start:\n{log}")
            time.sleep(0.1)

    def ssh(
        self, source: Node, target: str, *command: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``ssh target command`` from inside ``source``'s network, with the kit's config."""
        return subprocess.run(
            [*source.enter(), "ssh", "-F", str(self.ssh_config), target, *command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop_sshd(self, node: Node) -> None:
        """SSH down on one node (its dockerd and containers stay up)."""
        if node.sshd is not None and node.sshd.poll() is None:
            node.sshd.terminate()
            node.sshd.wait(timeout=10)

    def cut(self, node: Node, up: bool = False) -> None:
        """The node off the LAN (its veth down: packets dropped, nothing refused), or back."""
        _run("ip", "-n", node.netns, "link", "set", node.link, "up" if up else "down")

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.stop_sshd(node)
            if node.sshd is not None and node.sshd.poll() is None:
                node.sshd.kill()
                node.sshd.wait()
            node.docker.close()
        if self.lan is not None:
            subprocess.run(["ip", "netns", "del", self.lan], check=False)
        shutil.rmtree(self.base, ignore_errors=True)


class Engine:
    """One multi-node stand-in engine across the kit's nodes, and the head's config for it."""

    setup = "native"

    def __init__(
        self,
        kit: ClusterKit,
        tmp_path: Path,
        worker_image: str | None = None,
        worker_voice: bool = False,
        head_voice: bool = False,
        head_args: tuple[str, ...] = (),
        worker_args: tuple[str, ...] = (),
        worker_policy: dict[str, Any] | None = None,
        **sections: dict[str, Any],
    ) -> None:
        """``worker_image``: the worker's rank from another image (a node that pulled another
        tag); ``worker_voice``, ``head_voice``: a voice container there; ``head_args``,
        ``worker_args``: more stand-in flags for the head's rank (``--boot-delay``) or the
        workers'; ``worker_policy``: Docker's restart policy on the workers' ranks;
        ``sections``: config."""
        self.head_args, self.worker_args, self.worker_policy = (
            head_args,
            worker_args,
            worker_policy,
        )
        self.kit = kit
        self.metrics_listen = str(sections.get("metrics", {}).get("listen", ""))
        self.port, self.master_port = free_port(), free_port()
        self.stages = {n.name: Stage(n.client()) for n in kit.nodes}
        #: each worker's rank, by node (rank N on the N-th worker)
        self.workers: dict[str, str] = {}
        self.head = self._ranks(worker_image)
        self.worker = self.workers["w1"]  # the first worker, as the two-node tests name it
        self.voice = [self.stages["w1"].voice("stt")] if worker_voice else []
        self.head_voice = [self.stages["head"].voice("tts")] if head_voice else []
        nodes = [
            {
                "name": "head",
                "engine": [self.head],
                "voice": self.head_voice,
                "sparkwarden": SPARKWARDEN,
            },
            *(
                {
                    "name": node,
                    "ssh": node,
                    "engine": [name],
                    "voice": self.voice if node == "w1" else [],
                    "sparkwarden": SPARKWARDEN,
                }
                for node, name in self.workers.items()
            ),
        ]
        self.config = write_config(
            tmp_path / "sparkwarden.toml",
            tmp_path / "state",
            [self.head],
            self.port,
            [],
            cluster={
                "nodes": nodes,
                "ssh_config": str(kit.ssh_config),
                "connect_timeout": "3s",
                "setup": self.setup,
                **sections.pop("cluster", {}),
            },
            # no nightly schedule unless a test says so: at 04:30 it fires in any test's
            # daemon (a CI run near that minute saw a trigger a test counted as its own)
            **{"schedule": {"cron": ""}, **sections},
        )

    def _ranks(self, worker_image: str | None) -> str:
        """vLLM's own multi-node mode: a headless rank on each worker, then rank 0 on the head
        (which waits for them); returns the head's container."""
        rank = [
            "--nnodes",
            str(len(self.kit.nodes)),
            "--master-port",
            str(self.master_port),
            "--collective-timeout",
            "2",
            *HOUSE_RULE,
        ]
        for number, node in enumerate(self.kit.nodes[1:], start=1):
            worker_args = [
                *rank,
                *("--node-rank", str(number), "--headless", "--master-addr", self.kit.head.address),
            ]
            self.workers[node.name], _ = self.stages[node.name].llm(
                f"rank{number}",
                *worker_args,
                *self.worker_args,
                network_mode="host",
                image=worker_image,
                **({"restart_policy": self.worker_policy} if self.worker_policy else {}),
            )
        head, _ = self.stages["head"].llm(
            "rank0", *rank, "--node-rank", "0", *self.head_args, port=self.port, network_mode="host"
        )
        return head

    def argv(self, *args: str) -> list[str]:
        return [SPARKWARDEN, "--config", str(self.config), *args]

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """``sparkwarden ARGS`` on the head: in its network, with its Docker."""
        result = self.kit.head.docker.run(*self.argv(*args), timeout=timeout)
        assert isinstance(result, subprocess.CompletedProcess)
        return result

    def status(self) -> dict[str, Any]:
        result = self.cli("cluster", "status", "--json")
        return dict(json.loads(result.stdout))

    def wait_serving(self, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            state = self.status()
            if state["state"] == "serving" and state["head_health"] == "up":
                return state
            assert time.monotonic() < deadline, state
            time.sleep(1.0)  # each look is a Python on the head and on every node, over SSH

    def started_at(self, node: str, name: str) -> str:
        return str(self.stages[node].attrs(name)["State"]["StartedAt"])

    def close(self) -> None:
        for stage in self.stages.values():
            stage.cleanup()


class RayEngine(Engine):
    """The same engine on a Ray cluster, as Ray's docs and vLLM's examples build one: the head's
    container runs ``ray start --head`` and then ``vllm serve --distributed-executor-backend ray
    -tp N`` (which waits for a node per rank); each worker's runs ``ray start --block
    --address=HEAD``. A worker gives up on a lost head after ``reconnect`` seconds (Ray's
    ``RAY_gcs_rpc_server_reconnect_timeout_s``, 60 by default)."""

    setup = "ray"
    reconnect = 3

    def _ranks(self, worker_image: str | None) -> str:
        gcs = self.master_port
        serve = ["/standin/vllm", "serve", "standin/model", "--port", str(self.port)]
        serve += ["--distributed-executor-backend", "ray", "-tp", str(len(self.kit.nodes))]
        script = (
            f"/standin/ray start --head --port={gcs} && exec {shlex.join([*serve, *HOUSE_RULE])}"
        )
        checks = {"RAY_health_check_period_ms": "200"}  # Ray's 3 s: a dead node seen in 1 s
        head = self.stages["head"].command(
            "ray-head", ["sh", "-c", script], network_mode="host", environment=checks
        )
        env = {"RAY_gcs_rpc_server_reconnect_timeout_s": str(self.reconnect)}
        for number, node in enumerate(self.kit.nodes[1:], start=1):
            join = ["/standin/ray", "start", "--block", f"--address={self.kit.head.address}:{gcs}"]
            self.workers[node.name] = self.stages[node.name].command(
                f"ray-worker{number}",
                join,
                network_mode="host",
                environment=env,
                image=worker_image,
            )
        return head


class LauncherEngine(Engine):
    """The same two ranks made as eugr's launch-cluster.sh makes them: ``--rm`` containers
    idling, the rank ``docker exec``'d into each, workers first; started by a small launcher
    script the head's config records (``setup = "launcher"``)."""

    def __init__(self, kit: ClusterKit, tmp_path: Path) -> None:
        self.kit = kit
        self.port, self.master_port = free_port(), free_port()
        tag = uuid.uuid4().hex[:8]
        self.head, self.worker = f"swt-{tag}-node0", f"swt-{tag}-node1"
        # vLLM's console script, as eugr's launcher execs it: ``vllm serve MODEL ...``
        rank = ["/standin/vllm", "serve", "standin/model", "--port", str(self.port)]
        rank += ["--nnodes", "2", "--master-port", str(self.master_port)]
        rank += ["--collective-timeout", "2", *HOUSE_RULE]
        worker = [*rank, "--node-rank", "1", "--headless", "--master-addr", kit.head.address]
        self.script = tmp_path / "launch-cluster.sh"
        self.script.write_text(
            "#!/bin/bash\n# a stand-in for eugr's launch-cluster.sh: workers first, then the head\n"
            "set -e\n"
            f"ssh -F {kit.ssh_config} w1 {shlex.quote(self._launch(self.worker, worker))}\n"
            f"{self._launch(self.head, [*rank, '--node-rank', '0'])}\n"
        )
        self.script.chmod(0o755)
        nodes = [
            {"name": "head", "engine": [self.head], "sparkwarden": SPARKWARDEN},
            {"name": "w1", "ssh": "w1", "engine": [self.worker], "sparkwarden": SPARKWARDEN},
        ]
        cluster = {"nodes": nodes, "ssh_config": str(kit.ssh_config), "connect_timeout": "3s"}
        cluster.update(setup="launcher", launcher=str(self.script))
        self.config = write_config(
            tmp_path / "sparkwarden.toml",
            tmp_path / "state",
            [self.head],
            self.port,
            [],
            cluster=cluster,
        )

    @staticmethod
    def _launch(name: str, rank: list[str]) -> str:
        """One node's part: wait out the old container's removal, run the idle one, exec
        the rank into it."""
        mounts = " ".join(f"-v {src}:{v['bind']}:{v['mode']}" for src, v in _volumes().items())
        idle = shlex.join([PYTHON, "-c", "import time; time.sleep(1e9)"])
        return (
            f"while docker inspect {name} >/dev/null 2>&1; do sleep 0.2; done; "
            f"docker run -d --rm --name {name} --network host {mounts} {IMAGE} {idle} >/dev/null"
            f" && docker exec -d {name} {shlex.join(rank)}"
        )

    def started_id(self, node: str, name: str) -> str:
        return str(self.kit.node(node).client().containers.get(name).id)

    def close(self) -> None:
        for node, name in (("head", self.head), ("w1", self.worker)):
            with contextlib.suppress(docker.errors.NotFound):
                self.kit.node(node).client().containers.get(name).remove(force=True)


def sshd_config(listen: str, home: Path, host_key: Path, *more: str) -> str:
    """A test sshd: root by the test key in ``home`` only, no password, nothing else asked."""
    return "\n".join(
        [
            f"ListenAddress {listen}",
            f"HostKey {host_key}",
            f"PidFile {home / 'sshd.pid'}",
            f"AuthorizedKeysFile {home / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PrintMotd no",
            *more,
            "",
        ]
    )


def every_host(key: Path, known: Path) -> list[str]:
    """The ssh_config lines for every simulated Spark: the test key, its known hosts only."""
    return [
        "Host *",
        f"    IdentityFile {key}",
        "    IdentitiesOnly yes",
        f"    UserKnownHostsFile {known}",
        "    StrictHostKeyChecking yes",
        "    BatchMode yes",
        "    LogLevel ERROR",
        "",
    ]


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def end_shared_ssh(kit: ClusterKit, pid: int) -> None:
    """What a sparkwarden killed by a test left: its shared SSH connections (ended through their
    own control sockets) and their folder."""
    for folder in Path(tempfile.gettempdir()).glob(f"{CONTROL_PREFIX}{pid}-*"):
        for control in folder.iterdir():
            subprocess.run(
                [*kit.head.enter(), "ssh", "-o", f"ControlPath={control}", "-O", "exit", "x"],
                capture_output=True,
                check=False,
            )
        shutil.rmtree(folder, ignore_errors=True)
