"""The shipped unit under a real systemd: PID 1 in a container on the local Docker engine.

A minimal Debian rootfs (debootstrap, cached between runs) boots systemd with a private cgroup
namespace (never the host's /sys/fs/cgroup, never --privileged). sparkwarden is installed inside
from wheels built here, supervises stand-in containers on the host's engine through the Docker
socket, and reaches their ports on 127.0.0.1 through the host network.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import tomli_w

from devtools.standin.stage import Stage, docker_exec, free_port, host_lock, wait_healthy
from sparkwarden.actions.install import README_INSTALL
from tests.actions.test_operator_tools import Receiver
from tests.kits.commands import ROOT, docs_text, too_wide
from tests.kits.daemonkit import wait_for
from tests.surfaces.test_control import FLOOD

#: A cold machine builds the rootfs (debootstrap) and the SSH image within the first test's
#: set-up, on a machine busy with the rest of the suite.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]

CACHE = Path("/var/cache/sparkwarden-tests")
PACKAGES = "systemd,systemd-sysv,dbus,python3,python3-venv,passwd,util-linux"


def inputs_key(*inputs: str) -> str:
    """What a cached build is named by: a new input (a package, a pin) makes a new one."""
    return hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:12]


ROOTFS = CACHE / f"rootfs-bookworm-{inputs_key(PACKAGES)}"
IMAGE = f"sparkwarden-systemd:bookworm-{inputs_key(PACKAGES)}"
UNIT = ROOT / "packaging" / "systemd" / "sparkwarden.service"
BIN = "/opt/sparkwarden/bin/sparkwarden"
SOCKET = "/run/sparkwarden/control.sock"
SECRET = "sk-systemd-test-9f8e7d"
#: The most `systemd-analyze security` may rate the installed unit (issue 20: it was 4.2).
EXPOSURE_MAX = 2.5
#: Debian's OpenSSH, for `ssh spark sparkwarden status` exactly as README says. Installed into a
#: derived image (the shared rootfs and IMAGE stay as they are), named by a hash of its inputs.
SSH_PACKAGES = "openssh-server openssh-client"
SSH_BUILD = (
    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
    f"--no-install-recommends {SSH_PACKAGES} >/dev/null && rm -rf /var/lib/apt/lists/* && "
    # Started by the test on a port of its own: the box shares the host's network.
    "systemctl disable ssh.service"
)


#: What `pip install .` needs to build the checkout (pyproject's build-system).
BUILD = ("setuptools>=77", "setuptools-scm>=8", "wheel")
#: Where README's install is typed: the checkout (here a copy without .git, as from an archive).
CHECKOUT = "/root/sparkwarden"
#: pip finds the wheels built here, as it would find them on PyPI.
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/wheels"}


def build_rootfs() -> Path:
    """debootstrap once per machine (about a minute); later runs reuse it. Under a lock: a test
    on another worker may need it at the same moment (a cold cache saw two build it)."""
    with host_lock("systemd-rootfs"):
        return debootstrap()


def debootstrap() -> Path:
    if (ROOTFS / "lib/systemd/systemd").exists():
        return ROOTFS
    shutil.rmtree(ROOTFS, ignore_errors=True)  # one a killed run left half-made
    partial = CACHE / f"partial-{uuid.uuid4().hex[:6]}"
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={PACKAGES}",
            "bookworm",
            str(partial),
            "http://deb.debian.org/debian",
        ],
        check=True,
        capture_output=True,
        timeout=900,
    )
    (partial / "etc/machine-id").write_text("")
    partial.rename(ROOTFS)
    return ROOTFS


@pytest.fixture(scope="module")
def rootfs() -> Path:
    return build_rootfs()


@pytest.fixture(scope="module")
def image(docker_client: docker.DockerClient, rootfs: Path) -> str:
    with host_lock("systemd-image"):
        return import_rootfs(docker_client, rootfs)


def import_rootfs(docker_client: docker.DockerClient, rootfs: Path) -> str:
    try:
        docker_client.images.get(IMAGE)
        return IMAGE
    except docker.errors.ImageNotFound:
        pass
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        [
            "docker",
            "import",
            "-c",
            'CMD ["/lib/systemd/systemd"]',
            "-c",
            "ENV container=docker",
            "-",
            IMAGE,
        ],
        stdin=tar.stdout,
        check=True,
        capture_output=True,
    )
    tar.wait()
    return IMAGE


@pytest.fixture(scope="module")
def ssh_image(docker_client: docker.DockerClient, image: str) -> str:
    """IMAGE plus OpenSSH, built once per base image and recipe (about a minute)."""
    base = docker_client.images.get(image).id
    tag = f"sparkwarden-systemd-ssh:{hashlib.sha256((base + SSH_BUILD).encode()).hexdigest()[:12]}"
    with host_lock("systemd-ssh-image"):
        return add_ssh(docker_client, image, tag)


def add_ssh(docker_client: docker.DockerClient, image: str, tag: str) -> str:
    try:
        docker_client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    builder = docker_client.containers.run(
        image, ["/bin/sh", "-c", SSH_BUILD], detach=True, network_mode="host"
    )
    try:
        result = builder.wait(timeout=600)
        assert result["StatusCode"] == 0, builder.logs().decode(errors="replace")
        builder.commit(*tag.split(":"), changes=['CMD ["/lib/systemd/systemd"]'])
    finally:
        builder.remove(force=True)
    return tag


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sparkwarden and everything it needs, as wheels for the container's Python 3.11: its own
    built from this checkout every time, the others once per machine for each pyproject.toml."""
    project = (ROOT / "pyproject.toml").read_text()
    needs = CACHE / f"wheels-{inputs_key(project, *BUILD)}"
    with host_lock("systemd-wheels"):
        wheel_needs(needs)
    out = tmp_path_factory.mktemp("wheels")
    pip_wheel(out, "--no-deps", str(ROOT))
    for wheel in needs.glob("*.whl"):
        shutil.copy(wheel, out)
    out.chmod(0o755)
    return out


def wheel_needs(needs: Path) -> None:
    """What sparkwarden needs as wheels, once per machine for each pyproject.toml."""
    if not (needs / ".complete").exists():
        partial = CACHE / f"partial-wheels-{uuid.uuid4().hex[:6]}"
        # setuptools and wheel too: README's install builds this checkout inside the box.
        pip_wheel(partial, str(ROOT), *BUILD)
        for own in partial.glob("sparkwarden-*.whl"):
            own.unlink()
        (partial / ".complete").touch()
        shutil.rmtree(needs, ignore_errors=True)
        partial.rename(needs)


def pip_wheel(into: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(into), *args],
        check=True,
        capture_output=True,
        timeout=600,
    )


def test_unit_verifies_without_a_word(rootfs: Path, tmp_path: Path) -> None:
    """systemd-analyze verify only warns on a bad key (exit 0): any output is a failure."""
    root = tmp_path / "root"
    shutil.copytree(
        rootfs,
        root,
        symlinks=True,
        ignore_dangling_symlinks=True,
        ignore=shutil.ignore_patterns("usr", "var", "proc", "sys", "dev"),
    )
    (root / "usr").symlink_to(rootfs / "usr")  # systemd's own units, read-only use
    (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
    shutil.copy(UNIT, root / "etc/systemd/system/sparkwarden.service")
    result = verify(root, root / "opt/bin/sparkwarden")
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stderr

    broken = UNIT.read_text().replace("WatchdogSec=", "WatchdgSec=")
    (root / "etc/systemd/system/sparkwarden.service").write_text(broken)
    result = verify(root, root / "opt/bin/sparkwarden")
    assert "Unknown key" in result.stderr  # the check can fail


def verify(root: Path, exe: Path) -> subprocess.CompletedProcess[str]:
    unit = root / "etc/systemd/system/sparkwarden.service"
    text = unit.read_text().replace("/usr/local/bin/sparkwarden", "/opt/bin/sparkwarden")
    unit.write_text(text)
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\n")  # verify checks that ExecStart names an executable file
    exe.chmod(0o755)
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", "sparkwarden.service"],
        capture_output=True,
        text=True,
        timeout=60,
    )


class Box:
    """The systemd container: exec as root or as a user, write files."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self.ran: list[str] = []  # every command, to check README's against

    def sh(
        self,
        command: str,
        user: str = "root",
        env: dict[str, str] | None = None,
        workdir: str = "/root",
    ) -> tuple[int, str]:
        """Run ``command``; a status/history/doctor/restart text must fit the terminal."""
        self.ran.append(command)
        argv = ["/bin/sh", "-c", command]
        if user != "root":
            argv = ["runuser", "-u", user, "--", *argv]
        code, out, err = docker_exec(self.container.name, argv, env, workdir)
        wide = too_wide(command.split(), out, err)
        assert wide == [], f"{command!r}: lines too wide: {wide}"
        return int(code), out + err

    def ok(
        self,
        command: str,
        user: str = "root",
        env: dict[str, str] | None = None,
        workdir: str = "/root",
    ) -> str:
        code, out = self.sh(command, user, env, workdir)
        assert code == 0, f"{command!r} exited {code}:\n{out}"
        return out

    def put(self, path: str, text: str, mode: int = 0o644) -> None:
        data = text.encode()
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(Path(path).name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        self.ok(f"mkdir -p {Path(path).parent}")
        self.container.put_archive(str(Path(path).parent), buffer.getvalue())

    def put_checkout(self, where: str) -> None:
        """This checkout's sources (what `git clone` gives), as ``where``/sparkwarden."""
        skip = {".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache"}
        skip |= {".pytest_cache", ".hypothesis", "results"}

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            parts = Path(info.name).parts
            if skip & set(parts) or any(p.endswith(".egg-info") for p in parts):
                return None
            return info

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(ROOT, arcname="sparkwarden", filter=keep)
        self.container.put_archive(where, buffer.getvalue())

    def show(self, prop: str) -> str:
        return self.ok(f"systemctl show -p {prop} --value sparkwarden").strip()

    def put_config(self, text: str) -> None:
        """The config as install-service leaves it: root's, and the group reads it (members
        find the control socket through it)."""
        self.put("/etc/sparkwarden/sparkwarden.toml", text, 0o640)
        self.ok("chgrp sparkwarden /etc/sparkwarden/sparkwarden.toml")

    def restart(self) -> None:
        """``systemctl restart``; the tests' many restarts are not counted against the unit's
        start limit (5 in 30 min: for a daemon that keeps dying, not an operator's restarts)."""
        self.ok("systemctl reset-failed sparkwarden; systemctl restart sparkwarden")


@pytest.fixture(scope="module")
def hook() -> Iterator[Receiver]:
    """A local webhook the daemon in the box posts to (the box shares the host's loopback)."""
    receiver = Receiver()
    yield receiver
    receiver.server.shutdown()


@pytest.fixture(scope="module")
def box(
    docker_client: docker.DockerClient, ssh_image: str, wheels: Path, hook: Receiver
) -> Iterator[Box]:
    stage = Stage(docker_client)
    name = f"{stage.prefix}-systemd"
    container = docker_client.containers.run(
        ssh_image,
        name=name,
        detach=True,
        network_mode="host",
        cgroupns="private",
        cap_add=["SYS_ADMIN"],
        stop_signal="SIGRTMIN+3",
        tmpfs={"/run": "", "/run/lock": "", "/tmp": ""},
        volumes={
            "/var/run/docker.sock": {"bind": "/run/docker.sock", "mode": "rw"},
            str(wheels): {"bind": "/wheels", "mode": "ro"},
        },
    )
    box = Box(container)
    try:
        wait_for(
            "systemd to boot",
            lambda: box.sh("systemctl is-system-running")[1].strip() in ("running", "degraded"),
            timeout=60,
        )
        # Docker mounts /proc/sys read-only in containers; on a real host it is writable.
        box.ok("mount -o remount,rw,bind /proc/sys")
        box.put_checkout("/root")
        # README's install line as written, in the checkout; pip finds the wheels built here.
        box.ok(README_INSTALL, env=OFFLINE, workdir=CHECKOUT)
        # Docker's restart policy, as compose files give it: the daemon takes it over
        llm, port = stage.llm("llm", "--api-key", SECRET, restart_policy={"Name": "unless-stopped"})
        stt = stage.voice("stt")
        wait_healthy(port)
        # Secrets as README says to keep them: root's own files, no one else may write them.
        box.put("/etc/sparkwarden/llm.key", SECRET, 0o600)
        box.put("/etc/sparkwarden/hook.url", hook.url("/hook"), 0o600)
        config = {
            "notify": [{"kind": "webhook", "url_file": "/etc/sparkwarden/hook.url"}],
            "llm": {
                "containers": [llm],
                "base_url": f"http://127.0.0.1:{port}",
                "api_key_file": "/etc/sparkwarden/llm.key",
                "stop_timeout": "10s",
                "health_timeout": "30s",
                "probe_timeout": "5s",
                "poll_interval": "0.2s",
            },
            "voice": {"containers": [stt]},
            "memory": {"start_min_available_gib": 1, "start_wait": "10s"},
            "schedule": {"cron": ""},
            "watch": {"interval": "1s"},
            "health": {"interval": "2s", "timeout": "2s"},
            "docker": {"timeout": "5s", "retry_for": "5s"},
        }
        box.put("/etc/sparkwarden/sparkwarden.toml", tomli_w.dumps(config), 0o600)
        box.llm, box.stt, box.stage = llm, stt, stage  # type: ignore[attr-defined]
        yield box
    finally:
        container.remove(force=True)
        stage.cleanup()


def policy(box: Box) -> str:
    """The LLM container's Docker restart policy, as the host's engine has it."""
    attrs = box.stage.attrs(box.llm)  # type: ignore[attr-defined]
    return str(attrs["HostConfig"]["RestartPolicy"]["Name"] or "no")


def test_install_service_starts_it_only_after_ready(box: Box) -> None:
    before = box.ok("cat /etc/sparkwarden/sparkwarden.toml")
    began = time.monotonic()
    out = box.ok(f"{BIN} install-service")
    assert "keeping the existing /etc/sparkwarden/sparkwarden.toml" in out
    assert f"linking /usr/local/bin/sparkwarden -> {BIN}" in out
    assert box.ok("cat /etc/sparkwarden/sparkwarden.toml") == before  # never overwritten
    # systemctl restart returns once READY=1 came: already active.
    assert box.show("ActiveState") == "active", box.sh("journalctl -u sparkwarden -o cat")[1]
    assert box.show("Type") == "notify"
    assert time.monotonic() - began < 60
    assert box.ok("getent group sparkwarden").startswith("sparkwarden:")
    assert policy(box) == "no"  # taken over before READY=1
    unit = box.ok("cat /etc/systemd/system/sparkwarden.service")
    assert f"ExecStart={BIN} --config /etc/sparkwarden/sparkwarden.toml run" in unit
    code, out = box.sh("systemd-analyze verify /etc/systemd/system/sparkwarden.service")
    assert code == 0 and out == "", out
    # README's next words, the bare name now on every user's PATH.
    assert "valid. Effective configuration" in box.ok("sparkwarden check-config")
    box.ok("systemctl restart sparkwarden")
    assert "active (running)" in box.ok("systemctl status sparkwarden")


#: operating.md's check of the notifications, with the unit's own environment file.
NOTIFY_TEST = "set -a; . /etc/sparkwarden/env; set +a; sparkwarden notify --test"


def test_a_secret_in_the_units_environment_file_reaches_the_daemon(
    box: Box, hook: Receiver
) -> None:
    """A [[notify]] url_env comes from /etc/sparkwarden/env, the unit's EnvironmentFile= (made
    root's, 0600, by install-service): without the variable the daemon refuses to start, naming
    it; with it, it starts and its notifications arrive; operating.md's check sends a test."""
    assert box.ok("stat -c '%a %U' /etc/sparkwarden/env").strip() == "600 root"
    assert "EnvironmentFile=-/etc/sparkwarden/env" in box.ok("systemctl cat sparkwarden")
    before = box.ok("cat /etc/sparkwarden/sparkwarden.toml")
    by_env = before.replace('url_file = "/etc/sparkwarden/hook.url"', 'url_env = "SW_HOOK_URL"')
    assert by_env != before
    try:
        box.put_config(by_env)
        code, _ = box.sh("systemctl reset-failed sparkwarden; systemctl restart sparkwarden")
        assert code != 0
        assert "$SW_HOOK_URL is not set" in box.ok("journalctl -u sparkwarden -o cat -n 30")
        env = box.ok("cat /etc/sparkwarden/env") + f"SW_HOOK_URL={hook.url('/from-env')}\n"
        box.put("/etc/sparkwarden/env", env, 0o600)
        box.restart()
        assert box.show("ActiveState") == "active"
        box.stage.client.containers.get(box.llm).kill()  # type: ignore[attr-defined]
        wait_for(
            "crash_recovered through the variable",
            lambda: any(
                g["path"] == "/from-env" and '"crash_recovered"' in g["body"] for g in hook.got
            ),
            timeout=120,
        )
        out = box.ok(NOTIFY_TEST)
        assert "notify[0] (webhook): answered" in out and "every target answered" in out
        assert any(g["path"] == "/from-env" and '"test"' in g["body"] for g in hook.got)
    finally:
        box.put_config(before)
        box.restart()


def test_status_text_reaches_systemd_and_status_answers(box: Box) -> None:
    llm = box.llm  # type: ignore[attr-defined]
    wait_for("STATUS=", lambda: llm in box.show("StatusText"))
    assert "idle" in box.show("StatusText")
    out = box.ok(f"{BIN} status")
    assert "sparkwarden: running" in out and llm in out
    journal = box.ok("journalctl -u sparkwarden -o cat")
    assert '"event": "ready"' in journal


def test_a_group_member_restarts_through_the_socket_an_outsider_cannot(box: Box) -> None:
    box.ok("useradd -m -s /bin/bash alice && useradd -m -s /bin/bash bob")
    box.ok("usermod -aG sparkwarden alice")  # README's words
    out = box.ok(f"{BIN} restart", user="alice")
    assert "by the daemon" in out and "[8/9] resume_voice" in out and "ok:" in out
    runs = box.ok(f"{BIN} history --json")
    assert '"reason": "manual"' in runs and '"result": "ok"' in runs
    uid = box.ok("id -u alice").strip()
    assert f"why: requested by alice (uid {uid}, pid " in box.ok(f"{BIN} history")  # who asked

    box.ok("cp /etc/sparkwarden/sparkwarden.toml /tmp/bob.toml && chmod 644 /tmp/bob.toml")
    code, out = box.sh(f"{BIN} --config /tmp/bob.toml restart", user="bob")
    assert code == 1 and "not allowed to use /run/sparkwarden/control.sock" in out
    code, out = box.sh(f"{BIN} status", user="bob")  # the real config is not his to read
    assert code == 2 and "Permission denied" in out


def test_the_hardened_unit_rates_at_most_2_5_and_still_does_the_whole_job(
    box: Box, hook: Receiver
) -> None:
    """Under the unit as installed: a crash is recovered by a full sequence (drop_caches, the
    chat probe with the API key from its file) and the webhook is told; nothing was refused."""
    out = box.ok("systemd-analyze security --no-pager sparkwarden.service")
    exposure = float(out.split("Overall exposure level for sparkwarden.service:")[1].split()[0])
    print(f"systemd-analyze security: exposure {exposure}")  # the figure README gives
    assert exposure <= EXPOSURE_MAX, out
    before = {r["id"] for r in json.loads(box.ok(f"{BIN} history --json"))}
    box.container.client.containers.get(box.llm).kill()  # type: ignore[attr-defined]

    def crash_run() -> dict[str, Any] | None:
        """This kill's run: an earlier test's crash run is not it."""
        runs = json.loads(box.ok(f"{BIN} history --json"))
        return next(
            (r for r in runs if r["reason"] == "crash" and r["ended_at"] and r["id"] not in before),
            None,
        )

    run = wait_for("the crash run", crash_run, timeout=90)
    assert run["result"] == "ok", run
    steps = {step["name"]: step for step in run["steps"]}
    assert steps["drop_caches"]["result"] == "ok" and steps["chat_probe"]["result"] == "ok"
    wait_for("the webhook", lambda: any("crash_recovered" in g["body"] for g in hook.got))
    journal = box.ok("journalctl -u sparkwarden -o cat")
    assert "Operation not permitted" not in journal and SECRET not in journal


#: The journal by priority, as docs/notes-26.md gives it ("The journal at 3 a.m.").
JOURNAL = ("journalctl -u sparkwarden -p err", "journalctl -u sparkwarden -p warning")
#: Uninstall, as docs/notes-26.md gives it: after the first, the bare name is gone.
UNINSTALL = (
    "sparkwarden uninstall-service",
    "/opt/sparkwarden/bin/sparkwarden uninstall-service --purge",
)


def test_a_gave_up_reaches_journalctl_p_err_and_history(box: Box) -> None:
    """journald files each line at its level: the errors alone under -p err; a status call is
    routine (debug, not logged at the daemon's info); history shows the gave-up."""
    # this test's own lines (an earlier test's refused start left systemd's own at err)
    since = box.ok("date '+%Y-%m-%d %H:%M:%S'").strip()
    for _ in range(3):
        box.ok(f"{BIN} status")
    config = box.ok("cat /etc/sparkwarden/sparkwarden.toml")
    box.put_config(config + '\n[budget]\nmax_runs = 1\nbackoff = "0s"\n')  # the crash run spent it
    box.restart()
    try:
        box.container.client.containers.get(box.llm).kill()  # type: ignore[attr-defined]
        wait_for(
            "a gave up at priority err",
            lambda: "gave_up" in box.ok(JOURNAL[0]),  # as the docs give it
            timeout=60,
        )
        wait_for("a gave up at priority warning", lambda: "gave_up" in box.ok(JOURNAL[1]))
        errors = box.ok(f"journalctl -u sparkwarden -p err -o cat --since '{since}'").splitlines()
        assert errors and all(json.loads(line)["level"] == "error" for line in errors), errors
        routine = box.ok("journalctl -u sparkwarden -o cat")
        assert '"cmd": "status"' not in routine  # 88 in 15 minutes, once
        assert '"cmd": "restart"' in routine  # an operator's request still is
        history = box.ok("sparkwarden history")
        assert history.startswith("GAVE UP 20") and "restart budget spent" in history, history
    finally:
        box.put_config(config)
        box.restart()
        # an operator's run brings the engine back and clears the gave-up; a reason with spaces
        out = box.ok("sparkwarden restart --reason 'after the gave-up test'")
    assert "by the daemon" in out and "gateway_probe skipped" in out, out
    assert "[9/9] gateway_probe skipped" in out


def test_a_members_slow_flood_leaves_root_an_answer(box: Box) -> None:
    """alice holds every connection she may, a byte at a time: root's status still answers
    from the daemon, and so does hers once her flood is cut at the request deadline."""
    box.put("/srv/flood.py", FLOOD)  # not /tmp: a tmpfs that put_archive cannot reach
    uid = box.ok("id -u alice").strip()
    ended: list[tuple[int, str]] = []
    flood = threading.Thread(
        target=lambda: ended.append(box.sh(f"python3 /srv/flood.py {SOCKET} 40 60", "alice"))
    )
    flood.start()

    def refused_her() -> bool:
        lines = box.ok("journalctl -u sparkwarden -o cat").splitlines()
        return any("control_busy" in line and f'"uid": {uid}' in line for line in lines)

    try:
        wait_for("alice's flood to be refused", lambda: refused_her() or ended, timeout=60)
        assert not ended, (ended, box.sh("journalctl -u sparkwarden -o cat | tail -20")[1])
        code, out = box.sh(f"{BIN} status")
        assert code == 0 and out.startswith("sparkwarden: running (pid "), out
    finally:
        flood.join(timeout=120)
    assert ended and json.loads(ended[0][1]).count("closed") == 8, ended  # her cap, then cut
    code, out = box.sh(f"{BIN} status", user="alice")
    assert code == 0 and out.startswith("sparkwarden: running (pid "), out


def test_an_outsiders_slow_flood_on_the_exporter_stays_within_the_units_tasks(box: Box) -> None:
    """Issue 29: 400 drip-fed connections to /metrics from an outsider (carol, in no
    group) took prometheus_client's thread-per-connection server to TasksMax=256 in ~45 s.
    Now the daemon's thread count does not rise, root's status answers, every connection is
    closed."""
    port = free_port()
    before_toml = box.ok("cat /etc/sparkwarden/sparkwarden.toml")
    metrics = f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n'
    box.put_config(before_toml + metrics)
    box.restart()
    box.ok("id carol >/dev/null 2>&1 || useradd -m -s /bin/bash carol")
    box.put("/srv/flood.py", FLOOD)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        scrape = f"python3 -c 'import urllib.request as u; u.urlopen(\"{url}\")'"
        wait_for("/metrics", lambda: box.sh(scrape)[0] == 0, 60)
        pid, restarts = box.show("MainPID"), box.show("NRestarts")

        def same_daemon() -> None:  # systemd's own record: the one it started, never restarted
            if (box.show("MainPID"), box.show("NRestarts")) != (pid, restarts):
                said = box.sh("journalctl -u sparkwarden -n 30 --no-pager")[1]
                raise AssertionError(f"the daemon (pid {pid}) is gone mid-flood:\n{said}")

        def tasks() -> int:  # TasksCurrent needs the pids controller, which this box lacks
            threads = box.ok(f"awk '/^Threads:/ {{print $2}}' /proc/{pid}/status 2>&1 || true")
            if threads.strip().isdigit():
                return int(threads)
            same_daemon()  # not a number: the daemon ended; systemd says so
            return 0

        before = wait_for("a reading of its threads", lambda: tasks() or None, 30)
        ended: list[tuple[int, str]] = []
        flood = threading.Thread(
            target=lambda: ended.append(box.sh(f"python3 /srv/flood.py tcp:{port} 400 60", "carol"))
        )
        flood.start()
        peak, asked = before, time.monotonic() + 1
        while flood.is_alive():
            peak = max(peak, tasks())
            time.sleep(0.1)  # a reading every tenth of a second, not a docker exec flood of ours
            if asked and time.monotonic() > asked:  # root's status, mid-flood
                code, out = box.sh(f"{BIN} status")
                assert code == 0 and out.startswith("sparkwarden: running (pid "), out
                asked = 0.0
        flood.join()
        assert not asked, "the flood ended before status was asked"
        same_daemon()
    finally:
        box.put_config(before_toml)
        box.restart()
    assert int(box.show("TasksMax")) == 256
    assert peak <= before + 2, (before, peak)  # a status request's thread, no more
    outcome = json.loads(ended[0][1])
    assert len(outcome) == 400 and "open" not in outcome, outcome


def test_ssh_spark_sparkwarden_status_as_readme_says(box: Box) -> None:
    """A real sshd on loopback, key auth: a non-interactive session has the default PATH."""
    port = free_port()
    box.put(
        "/etc/ssh/sshd_config.d/test.conf",
        f"Port {port}\nListenAddress 127.0.0.1\nPasswordAuthentication no\n",
    )
    box.ok("systemctl start ssh.service")
    box.ok("mkdir -p -m 700 /root/.ssh && ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519")
    for user in ("alice", "bob"):
        home = f"/home/{user}/.ssh"
        box.ok(f"install -d -m 700 -o {user} -g {user} {home}")
        box.ok(
            f"install -m 600 -o {user} -g {user} /root/.ssh/id_ed25519.pub {home}/authorized_keys"
        )
    box.put(
        "/root/.ssh/config",
        f"Host spark\n  HostName 127.0.0.1\n  Port {port}\n  User alice\n  BatchMode yes\n"
        "  StrictHostKeyChecking accept-new\n  LogLevel ERROR\n",
        0o600,
    )
    code, out = box.sh("ssh spark sparkwarden status")
    assert code == 0, out
    assert out.startswith("sparkwarden: running (pid ") and box.llm in out  # type: ignore[attr-defined]
    assert "\x1b" not in out and max(len(line) for line in out.splitlines()) <= 80, out
    code, out = box.sh("ssh spark sparkwarden status --json")
    assert code == 0, out
    snapshot = json.loads(out)
    assert snapshot["daemon"]["running"] and snapshot["llm"]["status"] == "running"
    runs = json.loads(box.ok("ssh spark sparkwarden history --json"))  # the journal, as alice
    assert {"manual", "crash"} <= {run["reason"] for run in runs}, runs
    code, out = box.sh("ssh spark sparkwarden check-config")  # root's secrets: a warning
    assert code == 0 and "warning: llm.api_key_file:" in out and "Permission denied" in out, out

    code, out = box.sh("ssh bob@spark sparkwarden status")
    assert code == 2 and "Traceback" not in out, out
    assert "cannot read: Permission denied" in out and "group 'sparkwarden'" in out, out

    code, out = box.sh("ssh spark sparkwarden doctor")  # what needs root is said, not failed
    assert "Traceback" not in out and out.count("not checked without root") == 2, out
    assert not [line for line in out.splitlines() if line.startswith("ERROR   docker")], out
    assert not [line for line in out.splitlines() if line.startswith("ERROR   host")], out

    box.ok("systemctl stop sparkwarden")
    try:
        code, out = box.sh("ssh spark sparkwarden status")
        assert code == 3, out  # the last snapshot, sound: README's exit 3
        assert out.startswith("sparkwarden: NOT RUNNING; last known state from 20"), out
        # the journal, read only, with no daemon and no WAL left (once: a readonly database)
        code, out = box.sh("ssh spark sparkwarden history")
        assert code == 0 and "crash" in out and "readonly" not in out, out
    finally:
        box.ok("systemctl start sparkwarden")


def section_commands(title: str) -> list[str]:
    """The commands in a section's ```sh blocks, as an operator types them (comments off)."""
    text = docs_text()
    assert f"## {title}" in text, f"no section '## {title}' in README.md or docs/*.md"
    section = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    return [
        line.split("  #", 1)[0].strip()
        for block in section.split("```sh\n")[1:]
        for line in block.split("```", 1)[0].splitlines()
        if line.strip()
    ]


#: The upgrade, as docs/notes-26.md gives it for docs/operating.md ("Upgrade").
UPGRADE = (
    "/opt/sparkwarden/bin/pip install .",
    "sparkwarden install-service",
    "sparkwarden --version",
    "sparkwarden status",
)


def test_an_upgrade_as_the_docs_say_restarts_the_daemon_onto_the_new_code(box: Box) -> None:
    """New code in the checkout (here: the version git would give one commit later), then
    the docs' sequence: status says which code runs and which is installed until
    install-service restarts the daemon onto it."""
    old = box.ok("sparkwarden --version").split()[1]
    new = f"{old}.post1" if "dev" not in old else old.replace("dev", "dev1")
    pid = box.show("MainPID")
    box.ok(UPGRADE[0], env={**OFFLINE, "SETUPTOOLS_SCM_PRETEND_VERSION": new}, workdir=CHECKOUT)
    code, out = box.sh("sparkwarden status")
    assert code == 0 and f"{old} runs; {new} is installed" in out.replace("\n             ", " ")
    out = box.ok(UPGRADE[1])
    assert f"(re)starting sparkwarden.service on this installation (sparkwarden {new})" in out
    assert box.show("MainPID") != pid and box.show("ActiveState") == "active"
    assert box.ok(UPGRADE[2]).strip() == f"sparkwarden {new}"
    assert f"version:     {new}\n" in box.ok(UPGRADE[3])
    assert f'"version": "{new}"' in box.ok(f"{BIN} status --json")


def test_the_docs_upgrade_is_the_sequence_tested() -> None:
    """The commands the docs give for an upgrade are the ones the test above ran; so for the
    uninstall and the journal by priority (the tests below run those)."""
    assert tuple(section_commands("Upgrade")) == UPGRADE
    assert tuple(section_commands("Uninstall")) == UNINSTALL
    assert set(JOURNAL) <= set(section_commands("The journal at 3 a.m."))


def test_a_hung_daemon_is_killed_by_the_watchdog_and_restarted(box: Box) -> None:
    box.put(
        "/etc/systemd/system/sparkwarden.service.d/test.conf",
        "[Service]\nEnvironment=SPARKWARDEN_ENABLE_FAULTS=1\nWatchdogSec=4s\nRestartSec=1s\n",
    )
    box.ok("systemctl daemon-reload")
    box.restart()
    assert box.show("NRestarts") == "0"
    box.ok(
        '/opt/sparkwarden/bin/python -c "from pathlib import Path; from sparkwarden.surfaces '
        "import control; print(control.call(Path('/run/sparkwarden/control.sock'), "
        "{'cmd': 'fault', 'name': 'hang-loop'}))\""
    )
    wait_for("a watchdog restart", lambda: int(box.show("NRestarts")) >= 1, timeout=60)
    wait_for("active again", lambda: box.show("ActiveState") == "active", timeout=30)
    journal = box.ok("journalctl -u sparkwarden -o cat")
    assert "Watchdog timeout" in journal
    box.ok("rm -r /etc/systemd/system/sparkwarden.service.d && systemctl daemon-reload")


def test_reload_rereads_the_config_and_any_unexpected_end_is_restarted(box: Box) -> None:
    box.restart()
    pid = box.show("MainPID")
    box.ok("systemctl kill --kill-who=main -s HUP sparkwarden")  # as README says
    wait_for("the reload", lambda: '"reloading"' in box.ok("journalctl -u sparkwarden -o cat"))
    wait_for("active again", lambda: box.show("ActiveState") == "active", timeout=30)
    assert box.show("MainPID") == pid and box.show("NRestarts") == "0"
    restarts = int(box.show("NRestarts"))
    box.ok(f"kill -USR2 {pid}")  # a stray signal: not a failure systemd would otherwise restart
    wait_for("a restart", lambda: int(box.show("NRestarts")) > restarts, timeout=60)
    wait_for("active again", lambda: box.show("ActiveState") == "active", timeout=60)
    assert box.show("MainPID") != pid


def test_systemctl_stop_ends_it_cleanly_and_uninstall_removes_it(box: Box) -> None:
    box.restart()
    box.ok("systemctl stop sparkwarden")
    assert box.show("ActiveState") == "inactive"
    assert box.show("Result") == "success"
    assert '"event": "stopped"' in box.ok("journalctl -u sparkwarden -o cat")
    out = box.ok(f"{BIN} uninstall-service")
    assert "kept /etc/sparkwarden" in out
    assert "removing /usr/local/bin/sparkwarden" in out
    assert f"restoring {box.llm}'s restart policy 'unless-stopped'" in out  # type: ignore[attr-defined]
    assert policy(box) == "unless-stopped"
    assert box.sh("test -e /etc/systemd/system/sparkwarden.service")[0] == 1
    assert box.sh("test -e /usr/local/bin/sparkwarden")[0] == 1
    assert box.sh("test -e /etc/sparkwarden/sparkwarden.toml")[0] == 0


def test_every_command_readme_gives_for_the_install_was_run_as_written(box: Box) -> None:
    """README's install section, line by line: each command in its code blocks ran here."""
    commands = section_commands("Install on a Spark")
    assert len(commands) >= 6
    assert [c for c in commands if c not in box.ran] == []


def test_install_on_the_shipped_config_says_no_llm_container_exists(box: Box) -> None:
    box.ok("rm -rf /etc/sparkwarden")
    out = box.ok(f"{BIN} install-service")
    assert "WARNING: llm.containers names vllm-35b, which this Docker engine does not have" in out
    wait_for("STATUS=", lambda: "no LLM container" in box.show("StatusText"))
    assert "vllm-35b: no such container" in box.show("StatusText")
    code, out = box.sh(f"{BIN} status")
    assert code == 1 and "vllm-35b: no such container" in out, out
    box.ok(f"{BIN} uninstall-service")


def test_install_without_a_config_and_no_start_then_uninstall_purge(box: Box) -> None:
    box.ok("rm -rf /etc/sparkwarden")
    out = box.ok(f"{BIN} install-service --no-start")
    assert "writing the default /etc/sparkwarden/sparkwarden.toml" in out
    shipped = box.ok(
        "/opt/sparkwarden/bin/python -c 'from sparkwarden.actions.install import packaged; "
        'print(packaged("sparkwarden.toml"), end="")\''
    )
    assert box.ok("cat /etc/sparkwarden/sparkwarden.toml") == shipped
    assert "writing /etc/sparkwarden/env (0600, root only)" in out
    assert box.ok("stat -c '%a %U' /etc/sparkwarden/env").strip() == "600 root"
    assert box.ok("stat -c '%a %G' /etc/sparkwarden/sparkwarden.toml").strip() == "640 sparkwarden"
    assert box.ok("systemctl is-enabled sparkwarden").strip() == "enabled"
    assert box.show("ActiveState") == "inactive"  # --no-start: enabled, not started

    out = box.ok(UNINSTALL[0])
    assert "(the program) (--purge removes them)" in out and "the group 'sparkwarden'" in out
    assert "nothing to stop or disable" in box.ok(f"{BIN} uninstall-service")  # a second time
    out = box.ok(UNINSTALL[1])  # after a plain one: once, it failed
    assert "removing /etc/sparkwarden" in out and "removing /opt/sparkwarden" in out
    assert "left on purpose: your containers and images" in out
    for path in (
        "/etc/systemd/system/sparkwarden.service",
        "/etc/sparkwarden",
        "/var/lib/sparkwarden",
        "/opt/sparkwarden",
    ):
        assert box.sh(f"test -e {path}")[0] == 1, path
    assert box.sh("getent group sparkwarden")[0] == 2  # the group is gone too
