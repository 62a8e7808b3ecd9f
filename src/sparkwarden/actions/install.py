"""``install-service`` and ``uninstall-service``: the systemd unit, a config, the socket group.

Every action is printed before it is taken; an existing config is never overwritten; the unit's
``ExecStart`` points at the executable that ran this command (a pipx or venv install).
"""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.base.containers import ContainerState
from sparkwarden.base.errors import ConfigError, NoSuchContainer, SparkwardenError
from sparkwarden.config.locate import DEFAULT_PATH, places, resolve_path
from sparkwarden.daemon.beliefs import Kept
from sparkwarden.restart import docker_policy
from sparkwarden.restart.journal import JOURNAL_FILE, Journal

UNIT_NAME = "sparkwarden.service"
UNIT_DIR = Path("/etc/systemd/system")
PACKAGED_EXEC = "/usr/local/bin/sparkwarden"
#: On the default PATH of every user, a non-interactive SSH session's included: the bare name
#: ``sparkwarden`` reaches this installation (``ssh spark sparkwarden status``).
LINK = Path(PACKAGED_EXEC)
GROUP = "sparkwarden"
#: How README installs it; the ProtectHome refusal says the same.
README_INSTALL = (
    "python3 -m venv /opt/sparkwarden && /opt/sparkwarden/bin/pip install ./sparkwarden"
)


def packaged(name: str) -> str:
    return resources.files("sparkwarden").joinpath("data", name).read_text()


def executable() -> str:
    """How systemd should start this very installation of sparkwarden."""
    found = shutil.which(sys.argv[0]) or shutil.which("sparkwarden")
    command = str(Path(found).absolute()) if found else f"{sys.executable} -m sparkwarden"
    for real in {Path(found).resolve() if found else None, Path(sys.executable).resolve()}:
        if real is None or not (real.is_relative_to("/root") or real.is_relative_to("/home")):
            continue
        raise SparkwardenError(
            f"sparkwarden runs from {real.parent}, which the unit's ProtectHome=yes "
            f"hides: install it in /opt from the checkout ({README_INSTALL}) and run "
            "/opt/sparkwarden/bin/sparkwarden install-service"
        )
    return command


def render_unit(exec_path: str) -> str:
    text = packaged(UNIT_NAME)
    if PACKAGED_EXEC not in text:
        raise SparkwardenError(f"the packaged unit has no ExecStart={PACKAGED_EXEC} to point")
    return text.replace(f"ExecStart={PACKAGED_EXEC} ", f"ExecStart={exec_path} ")


def _say(text: str) -> None:
    print(f"sparkwarden: {text}", flush=True)


def _run(*argv: str) -> None:
    _say("running " + " ".join(argv))
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SparkwardenError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def _write(path: Path, text: str, mode: int, gid: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_text(text)
    tmp.chmod(mode)
    if gid is not None:
        os.chown(tmp, 0, gid)
    tmp.replace(path)


def _group_id() -> int | None:
    try:
        return grp.getgrnam(GROUP).gr_gid
    except KeyError:
        return None


def _link(link: Path, exec_path: str) -> None:
    """Put the bare name on every user's PATH; a different ``sparkwarden`` there is kept."""
    target = Path(exec_path)
    if not target.is_absolute():  # started as ``python -m sparkwarden``: nothing to link to
        _say(f"not linking {link}: this installation has no sparkwarden executable")
        return
    if link == target:
        return
    if link.is_symlink() and Path(os.readlink(link)) == target:
        _say(f"keeping {link} -> {target}")
        return
    if link.exists() or link.is_symlink():
        what = f"a link to {os.readlink(link)}" if link.is_symlink() else "a file"
        _say(
            f"WARNING: keeping {link}, {what}, not this installation: the bare name "
            f"'sparkwarden' runs that one (remove it, then install-service links {target})"
        )
        return
    _say(f"linking {link} -> {target} (the bare name 'sparkwarden' for every user and SSH)")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def _exec_start(unit: Path) -> Path | None:
    """The executable an installed unit starts: what install-service linked, if anything."""
    for line in unit.read_text().splitlines() if unit.exists() else []:
        if line.startswith("ExecStart="):
            return Path(line.removeprefix("ExecStart=").split()[0])
    return None


def install(root: Path | None, start: bool) -> int:
    """Put the unit and a config in place; enable and start the unit (unless ``root``)."""
    live = root is None
    if live and os.geteuid() != 0:
        raise SparkwardenError("install-service must run as root (it writes to /etc)")
    base = root or Path("/")
    if live and _group_id() is None:
        _say(f"creating the system group {GROUP!r} for the control socket")
        _run("groupadd", "--system", GROUP)
    gid = _group_id() if live else None

    unit = base / UNIT_DIR.relative_to("/") / UNIT_NAME
    exec_path = executable()
    _say(f"writing {unit} (ExecStart={exec_path} ...)")
    _write(unit, render_unit(exec_path), 0o644)

    _link(base / LINK.relative_to("/"), exec_path)

    config = base / DEFAULT_PATH.relative_to("/")
    if config.exists():
        _say(f"keeping the existing {config} (never overwritten)")
    else:
        _say(f"writing the default {config}: edit llm.containers and llm.base_url")
        _write(config, packaged("sparkwarden.toml"), 0o640)
    if gid is not None:  # the group reads the config to find the control socket
        _say(f"making {config.parent} and {config.name} readable to group {GROUP!r} (0750/0640)")
        for path, mode in ((config.parent, 0o750), (config, 0o640)):
            os.chown(path, 0, gid)
            path.chmod(mode)
    if not live:
        _say(f"installed under {base}; systemd not touched")
        return 0
    _run("systemctl", "daemon-reload")
    if start:
        _run("systemctl", "enable", "--now", UNIT_NAME)
    else:
        _run("systemctl", "enable", UNIT_NAME)
    _say(
        "done. Watch it with: systemctl status sparkwarden; journalctl -u sparkwarden -o cat; "
        "sparkwarden status"
    )
    return 0


def restore_restart_policies(config_path: str | Path | None) -> None:
    """Give Docker back the restart policies the daemon took over, as the journal recorded them.

    Run once the daemon is stopped (it would take them again). A container removed since, or
    whose policy an operator changed since, is left as it is.
    """
    if not resolve_path(config_path).exists():
        return  # never configured: no daemon took anything
    try:  # only state.dir: a config that no longer validates must not keep the policies away
        state_dir = places(config_path).state_dir
    except ConfigError as exc:
        _say(f"cannot read the config ({exc}): restart policies, if any were taken, stay 'no'")
        return
    if not (state_dir / JOURNAL_FILE).exists():
        return
    journal = Journal(state_dir)
    kept = Kept(journal)
    try:
        taken: dict[str, Any] = kept.policies_taken()
        if not taken:
            return
        docker = DockerEngine()
        states: dict[str, ContainerState | None] = {}
        for name in taken:
            try:
                states[name] = docker.inspect(name)
            except NoSuchContainer:
                states[name] = None
        for name, policy, note in docker_policy.to_restore(taken, states):
            _say(note)
            if policy is not None:
                docker.set_restart_policy(name, policy.docker())
            taken = {k: v for k, v in taken.items() if k != name}
            kept.put_policies_taken(taken)  # what is done is not done twice
        docker.close()
    finally:
        journal.close()


def uninstall(root: Path | None, purge: bool, config_path: str | Path | None = None) -> int:
    """Stop, disable and remove the unit, give back Docker's restart policies; config and state
    stay unless ``purge``."""
    live = root is None
    if live and os.geteuid() != 0:
        raise SparkwardenError("uninstall-service must run as root")
    base = root or Path("/")
    unit = base / UNIT_DIR.relative_to("/") / UNIT_NAME
    if live:
        _run("systemctl", "disable", "--now", UNIT_NAME)
    link, linked = base / LINK.relative_to("/"), _exec_start(unit)
    if link.is_symlink() and linked is not None and Path(os.readlink(link)) == linked:
        _say(f"removing {link} (it links to {linked})")
        link.unlink()
    if unit.exists():
        _say(f"removing {unit}")
        unit.unlink()
    if live:
        _run("systemctl", "daemon-reload")
    restore_restart_policies(config_path)
    leftovers = [base / DEFAULT_PATH.parent.relative_to("/"), base / "var/lib/sparkwarden"]
    if purge:
        for path in leftovers:
            if path.exists():
                _say(f"removing {path}")
                shutil.rmtree(path)
        if live and _group_id() is not None:
            _run("groupdel", GROUP)
    else:
        _say("kept " + ", ".join(str(p) for p in leftovers if p.exists()) + " (--purge removes)")
    return 0
