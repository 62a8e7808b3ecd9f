"""Two replicas on this one machine behind real LiteLLM and Nginx, for the tests and the benchmark.

Each simulated Spark has its own stand-in engine (a real container), its own Nginx running the
shipped example (its rotation flag in a folder of its own), and its own sparkwarden daemon with
its own config and state. LiteLLM runs the shipped replica example: one alias, a deployment per
Spark's Nginx. The daemons reach each other as on real Sparks, over real SSH: one sshd on a
loopback port, a test-only key, an ``ssh_config`` naming each Spark. Everything is stopped by
the pids this kit started, the containers removed by the stage.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from devtools.standin.stage import Stage, free_port, wait_healthy, write_config
from tests.kits.clock import next_minute
from tests.kits.clusterkit import SPARKWARDEN, SSHD, every_host, sshd_config
from tests.kits.daemonkit import DaemonProcess, end, wait_for
from tests.kits.gatewaykit import ALIAS, MASTER_KEY, LiteLLM, Nginx, Result, StreamingLoad

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"


class LoopSsh:
    """One sshd on a loopback port, reached as each Spark's name through its own ssh_config."""

    def __init__(self, base: Path, names: tuple[str, ...]) -> None:
        self.base, self.port, self.names = base, free_port(), names
        self.key = base / "id_ed25519"
        _keygen(self.key)
        host_key = base / "ssh_host_ed25519_key"
        _keygen(host_key)
        (base / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (base / "sshd_config").write_text(
            sshd_config(
                f"127.0.0.1:{self.port}",
                base,
                host_key,
                "MaxStartups 100:30:200",
                "MaxSessions 100",
            )
        )
        known = base / "known_hosts"
        known.write_text(f"[127.0.0.1]:{self.port} {Path(f'{host_key}.pub').read_text()}")
        lines = []
        for name in names:
            lines += [f"Host {name}", "    HostName 127.0.0.1", f"    Port {self.port}"]
            lines += ["    User root"]
        lines += every_host(self.key, known)
        self.config = base / "ssh_config"
        self.config.write_text("\n".join(lines))
        self.start()

    def start(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
        with (self.base / "sshd.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.base / "sshd_config")],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for("the loopback sshd", self._answers, timeout=20)

    def _answers(self) -> bool:
        probe = ["ssh", "-F", str(self.config), "-o", "ConnectTimeout=2", self.names[0], "true"]
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0

    def close(self) -> None:
        end(self.proc)


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkwarden-test", "-f", str(path)],
        check=True,
    )


@dataclass
class Replica:
    """One simulated Spark: its engine, its Nginx (with its rotation flag), its daemon."""

    name: str
    llm: str
    port: int
    nginx: Nginx
    flag: Path
    config: Path = Path()
    daemon: DaemonProcess | None = None

    @property
    def own_url(self) -> str:
        return f"http://127.0.0.1:{self.nginx.port}/v1"

    def out(self) -> bool:
        """Out of users' way: its flag is up, or its engine does not answer /health."""
        if self.flag.exists():
            return True
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code != 200
        except httpx.HTTPError:
            return True

    def runs(self, reason: str) -> list[dict[str, Any]]:
        assert self.daemon is not None
        return self.daemon.runs_with(reason)


@dataclass
class Watch:
    """Who is out, every 0.1 s: the longest time one was out, and whether both ever were."""

    replicas: list[Replica]
    both_out: list[float] = field(default_factory=list)
    out_since: dict[str, float] = field(default_factory=dict)
    longest_out: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            out = [r for r in self.replicas if r.out()]
            if len(out) == len(self.replicas):
                self.both_out.append(now)
            for replica in self.replicas:
                if replica in out:
                    since = self.out_since.setdefault(replica.name, now)
                    self.longest_out = max(self.longest_out, now - since)
                else:
                    self.out_since.pop(replica.name, None)
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


class ReplicaSet:
    """Two replicas (``spark1`` first: it keeps the turn) behind one LiteLLM. The users' path
    (each Spark's Nginx, LiteLLM, the sshd) is made once; each test or night brings its own
    engines on the Sparks' ports (:meth:`engines`), configs and daemons (:meth:`night_in`)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.names = ("spark1", "spark2")
        self.replicas: list[Replica] = []
        self.ssh: LoopSsh | None = None
        self.litellm: LiteLLM | None = None
        self.folders: list[Path] = []  # made outside ``base``: removed by close()
        self.home = base  # where this night's configs, state and logs go
        for name in self.names:
            port = free_port()
            flags = _open_dir(Path(tempfile.mkdtemp(prefix=f"sw-{name}-run-")))
            self.folders.append(flags)  # Nginx's workers (nobody) look for the flag in it
            nginx = Nginx(base / name / "nginx", port, flag=flags / "out-of-rotation")
            self.replicas.append(Replica(name, "", port, nginx, flags / "out-of-rotation"))

    def start(self) -> ReplicaSet:
        for replica in self.replicas:
            replica.nginx.start()  # before its engine: a 502 until it answers
        self.ssh = LoopSsh(_open_dir(self.base / "ssh"), self.names)
        ports = tuple(r.nginx.port for r in self.replicas)
        self.litellm = LiteLLM(self.base / "litellm", ports[0], MODEL, peers=ports[1:])
        self.litellm.start(timeout=400)  # slow to start on a loaded box
        return self

    def engines(self, stage: Stage, standin: tuple[str, ...] = ()) -> None:
        """Each Spark's stand-in engine, on its port, healthy."""
        for replica in self.replicas:
            replica.llm, _ = stage.llm(replica.name, *standin, port=replica.port)
        for replica in self.replicas:
            wait_healthy(replica.port)

    @contextlib.contextmanager
    def night_in(self, stage: Stage, home: Path, standin: tuple[str, ...] = ()) -> Iterator[None]:
        """Engines of its own (removed by ``stage``), configs and logs under ``home``; its
        daemons stopped and any flag it left removed at the end, for the next one."""
        self.home = home
        self.engines(stage, standin)
        try:
            yield
        finally:
            for replica in self.replicas:
                if replica.daemon is not None:
                    replica.daemon.stop()
                    replica.daemon = None
                with contextlib.suppress(FileNotFoundError):
                    replica.flag.unlink()

    @property
    def url(self) -> str:
        assert self.litellm is not None
        return self.litellm.url

    def configure(self, sections: dict[str, dict[str, Any]], replicas: bool = True) -> None:
        """Each Spark's daemon config: the replica set and its rotation (``replicas``), else
        today's lone Sparks side by side; ``sections`` for both."""
        assert self.ssh is not None
        key = self.home / "gateway-key"
        key.write_text(MASTER_KEY + "\n")
        for replica in self.replicas:
            home = self.home / replica.name
            home.mkdir(parents=True, exist_ok=True)
            replica.config = home / "sparkwarden.toml"
            ctl = _open_dir(Path(tempfile.mkdtemp(prefix=f"sw-{replica.name}-ctl-")))
            self.folders.append(ctl)
            more: dict[str, Any] = {
                "control": {"socket": str(ctl / "control.sock"), "group": ""},
                "watch": {"interval": "0.5s"},
                "gateway": {"url": self.url, "model": ALIAS, "api_key_file": str(key)},
            }
            if replicas:
                more["replicas"] = {
                    "self": replica.name,
                    "check_interval": "1s",
                    "turn_ttl": "1m",
                    "connect_timeout": "2s",
                    "ssh_config": str(self.ssh.config),
                    "rotation": {"url": replica.own_url, "flag": str(replica.flag)},
                    "nodes": [
                        {
                            "name": r.name,
                            "ssh": r.name,
                            "sparkwarden": f"{SPARKWARDEN} --config {home.parent / r.name}"
                            "/sparkwarden.toml",
                        }
                        for r in self.replicas
                    ],
                }
            for section, values in sections.items():
                more.setdefault(section, {}).update(values)
            write_config(replica.config, home / "state", [replica.llm], replica.port, [], **more)

    def start_daemons(self) -> None:
        for replica in self.replicas:
            log = self.home / replica.name / "daemon.log"
            replica.daemon = DaemonProcess(replica.config, log).start(ready=False)
        for replica in self.replicas:
            assert replica.daemon is not None
            wait_for(f"{replica.name}'s daemon", replica.daemon.answering, timeout=60)

    def close(self) -> None:
        for replica in self.replicas:
            if replica.daemon is not None:
                replica.daemon.stop()
        if self.litellm is not None:
            self.litellm.stop()
        for replica in self.replicas:
            replica.nginx.stop()
        if self.ssh is not None:
            self.ssh.close()
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


def _open_dir(path: Path) -> Path:
    """A folder others may traverse (pytest's are root's alone; sshd and Nginx read in it)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def replica_set(base: Path) -> Iterator[ReplicaSet]:
    """The users' path of two Sparks, up; everything it started ended at the end."""
    made = ReplicaSet(base)
    try:
        yield made.start()
    finally:
        made.close()


#: What both Sparks run for a night: a quick drain (users have gone to the peer), a fresh
#: engine restarted all the same, a budget that allows a retry.
NIGHT: dict[str, dict[str, Any]] = {
    "drain": {"quiet": "1s", "deadline": "30s"},
    "budget": {"max_runs": 2},
}


@dataclass
class Night:
    """What users and the watch saw while both Sparks ran their nightly restart."""

    results: list[Result]
    watch: Watch
    runs: dict[str, list[dict[str, Any]]]
    seconds: float


def served(load: StreamingLoad, more: int, timeout: float = 180) -> None:
    """``more`` answers completed from now (LiteLLM's first answers are slow on a loaded box)."""
    start = load.count("complete")
    wait_for(f"{more} more answers", lambda: load.count("complete") >= start + more, timeout)


def night(two: ReplicaSet, replicas: bool = True, clients: int = 3) -> Night:
    """Both Sparks scheduled at the same minute, users streaming through LiteLLM from before
    the first restart until after the last: taking turns (``replicas``), or as today, each
    Spark on its own."""
    cron, at = next_minute()
    schedule = {"cron": cron, "timezone": "UTC", "min_uptime": "1s"}
    two.configure({"schedule": schedule, **NIGHT}, replicas)
    two.start_daemons()
    began = time.monotonic()
    load = StreamingLoad(two.url, clients=clients, max_tokens=20).start()
    watch = Watch(two.replicas).start()
    try:
        served(load, 6)
        wait_for(
            "both scheduled runs to end",
            lambda: all(r.runs("schedule") for r in two.replicas),
            timeout=(at - datetime.now(UTC)).total_seconds() + 240,
        )
        served(load, 6)  # users served after both
    finally:
        watch.stop()
        results = load.stop()
    runs = {r.name: r.runs("schedule") for r in two.replicas}
    return Night(results, watch, runs, time.monotonic() - began)
