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
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.base.containers import ContainerState
from sparkwarden.base.errors import ConfigError, NoSuchContainer, SparkwardenError
from sparkwarden.base.version import version
from sparkwarden.config.locate import DEFAULT_PATH, places, resolve_path
from sparkwarden.daemon.kept import Kept
from sparkwarden.restart import docker_policy
from sparkwarden.restart.journal import JOURNAL_FILE, Journal
from sparkwarden.surfaces.status_text import duration, local_time

UNIT_NAME = "sparkwarden.service"
UNIT_DIR = Path("/etc/systemd/system")
PACKAGED_EXEC = "/usr/local/bin/sparkwarden"
#: On the default PATH of every user, a non-interactive SSH session's included: the bare name
#: ``sparkwarden`` reaches this installation (``ssh spark sparkwarden status``).
LINK = Path(PACKAGED_EXEC)
GROUP = "sparkwarden"
#: Where README installs it, and so what ``uninstall-service --purge`` may remove.
PREFIX = Path("/opt/sparkwarden")
#: How README installs it, typed in the checkout; the ProtectHome refusal says the same.
README_INSTALL = f"python3 -m venv {PREFIX} && {PREFIX}/bin/pip install ."


def packaged(name: str) -> str:
    return resources.files("sparkwarden").joinpath("data", name).read_text()


def executable() -> str:
    """How systemd should start this very installation of sparkwarden."""
    found = shutil.which(sys.argv[0]) or shutil.which("sparkwarden")
    if found and Path(found).is_symlink():  # the bare name's link: the unit names its target
        found = str(Path(found).resolve())
    command = str(Path(found).absolute()) if found else f"{sys.executable} -m sparkwarden"
    for real in {Path(found).resolve() if found else None, Path(sys.executable).resolve()}:
        if real is None or not (real.is_relative_to("/root") or real.is_relative_to("/home")):
            continue
        raise SparkwardenError(
            f"sparkwarden runs from {real.parent}, which the unit's ProtectHome=tmpfs "
            f"hides: install it in /opt, in the checkout ({README_INSTALL}), and run "
            f"{PREFIX}/bin/sparkwarden install-service"
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


#: The unit's ``EnvironmentFile=``, beside the config: the secrets given as variables.
ENV_FILE = "env"
ENV_TEXT = """\
# The environment of the sparkwarden unit (EnvironmentFile=-/etc/sparkwarden/env): KEY=value
# lines, root's own file, mode 0600. For secrets the config names by variable:
#   a [[notify]] target's url_env, e.g.  SPARKWARDEN_NTFY_URL=https://ntfy.sh/your-topic
#   the engine's --api-key, when llm.api_key_file is not set:  SPARKWARDEN_LLM_API_KEY=...
#   the gateway's key, when gateway.api_key_file is not set:  SPARKWARDEN_GATEWAY_API_KEY=...
# A value with & ; $ or spaces goes in single quotes: KEY='https://example/?a=1&b=2'
# Apply with: systemctl restart sparkwarden (a reload does not re-read this file).
"""


def install(root: Path | None, start: bool) -> int:
    """Put the unit and a config in place; enable and start the unit (unless ``root``)."""
    live = root is None
    if live and os.geteuid() != 0:
        raise SparkwardenError("install-service must run as root (it writes to /etc)")
    base = root or Path("/")
    exec_path = executable()  # refusals first: a refused install changes nothing
    unit_text = render_unit(exec_path)
    if live and _group_id() is None:
        _say(f"creating the system group {GROUP!r} for the control socket")
        _run("groupadd", "--system", GROUP)
    gid = _group_id() if live else None

    unit = base / UNIT_DIR.relative_to("/") / UNIT_NAME
    _say(f"writing {unit} (ExecStart={exec_path} ..., sparkwarden {version()})")
    _write(unit, unit_text, 0o644)

    _link(base / LINK.relative_to("/"), exec_path)

    config = base / DEFAULT_PATH.relative_to("/")
    if config.exists():
        _say(f"keeping the existing {config} (never overwritten)")
    else:
        _say(f"writing the default {config}: edit llm.containers and llm.base_url")
        _write(config, packaged("sparkwarden.toml"), 0o640)
    env = config.parent / ENV_FILE
    if env.exists():
        _say(f"keeping the existing {env} (never overwritten)")
    else:
        _say(f"writing {env} (0600, root only): secrets as KEY=value lines for the unit")
        _write(env, ENV_TEXT, 0o600)
    if gid is not None:  # the group reads the config to find the control socket
        _say(f"making {config.parent} and {config.name} readable to group {GROUP!r} (0750/0640)")
        for path, mode in ((config.parent, 0o750), (config, 0o640)):
            os.chown(path, 0, gid)
            path.chmod(mode)
    if not live:
        _say(f"installed under {base}; systemd not touched")
        return 0
    _run("systemctl", "daemon-reload")
    _run("systemctl", "enable", UNIT_NAME)
    if start:
        for warning in before_start(config):
            _say(f"WARNING: {warning}")
        # restart, not start: a daemon already running runs the old code until restarted (an
        # upgrade); one mid-run hands the run to the new one, which finishes it as a repair
        _say(f"(re)starting {UNIT_NAME} on this installation (sparkwarden {version()})")
        _run("systemctl", "restart", UNIT_NAME)
    _say(
        "done. Watch it with: systemctl status sparkwarden; journalctl -u sparkwarden -o cat; "
        "sparkwarden status"
    )
    return 0


def before_start(config_path: Path) -> list[str]:
    """What the operator should know before the daemon starts: an LLM container the config
    names that Docker does not have (the shipped example's), an engine already past
    ``watch.max_uptime`` (when the daemon's first planned restart of it comes)."""
    from sparkwarden.config.schema import load
    from sparkwarden.daemon.reconcile import first_sight

    try:
        config = load(config_path)
    except SparkwardenError:
        return []  # the daemon refuses it and says why, in the journal
    said: list[str] = []
    docker = DockerEngine(timeout=min(config.docker.timeout, 10.0), retry_for=0.0)
    try:
        states = []
        for name in config.llm.containers:
            try:
                states.append(docker.inspect(name))
            except NoSuchContainer:
                said.append(
                    f"llm.containers names {name}, which this Docker engine does not have: "
                    f"sparkwarden watches nothing until {config_path} names your LLM "
                    "containers (then: systemctl kill --kill-who=main -s HUP sparkwarden)"
                )
        now, limit = datetime.now(UTC), config.watch.max_uptime
        for state in states:
            first = first_sight(state, now.timestamp(), config) if state.up else None
            up = state.uptime_s(now) if state.up else None
            if first is None and up is not None and limit > 0 and up > limit:
                said.append(
                    f"{state.name} has been up {duration(up)}, past watch.max_uptime "
                    f"{duration(limit)}: the daemon restarts it as soon as it starts (within "
                    "drain.deadline). To choose the moment, first: sparkwarden hold 2h "
                    "--reason 'installing', then 'sparkwarden release' when it suits"
                )
            elif first is not None:
                at = local_time(datetime.fromtimestamp(first.until, UTC).isoformat())
                said.append(
                    f"{state.name} has been up {duration(up or 0.0)}, near or past "
                    f"watch.max_uptime {duration(limit)}: the daemon's first planned restart "
                    f"of it waits until {at} (sparkwarden status: 'next'), if it has not "
                    "watched it before; a crash or failed checks restart it at once. Another "
                    "moment: sparkwarden hold 1d --reason 'installing', then 'sparkwarden "
                    "release' when it suits"
                )
    except SparkwardenError as exc:
        said.append(f"could not check the containers: {exc}")
    finally:
        docker.close()
    return said


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
    """Stop, disable and remove the unit, give back Docker's restart policies; config, state,
    group and program stay unless ``purge``. A second run, or ``--purge`` after a plain one,
    finishes what is left and says what there was."""
    live = root is None
    if live and os.geteuid() != 0:
        raise SparkwardenError("uninstall-service must run as root")
    base = root or Path("/")
    unit = base / UNIT_DIR.relative_to("/") / UNIT_NAME
    if not unit.exists():
        _say(f"no unit at {unit}: nothing to stop or disable")
    elif live:
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
    config_dir = base / DEFAULT_PATH.parent.relative_to("/")
    state_dir = base / "var/lib/sparkwarden"
    program = base / PREFIX.relative_to("/")
    if not purge:
        kept = [
            f"{config_dir} (config, secrets)" if config_dir.exists() else "",
            f"{state_dir} (the journal of runs)" if state_dir.exists() else "",
            f"the group {GROUP!r}" if live and _group_id() is not None else "",
            f"{program} (the program)" if program.exists() else "",
        ]
        if any(kept):
            _say("kept " + ", ".join(k for k in kept if k) + " (--purge removes them)")
        return 0
    for path in (config_dir, state_dir):
        if path.exists():
            _say(f"removing {path}")
            shutil.rmtree(path)
        else:
            _say(f"no {path}: already gone")
    if live and _group_id() is not None:
        _run("groupdel", GROUP)
    _say(
        "left on purpose: your containers and images, their restart policies (given back as "
        "they were), and any other sparkwarden installation"
    )
    if program.exists():  # last: this very command may run from it
        _say(f"removing {program} (the program)")
        shutil.rmtree(program)
    return 0
