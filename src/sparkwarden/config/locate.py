"""Where things are: the config file, the state dir and the control socket, found cheaply.

``sparkwarden status`` over SSH must answer at once, so it reads only the ``[state]`` and
``[control]`` tables of the config with :mod:`tomllib`, checking their keys and values as the
schema would, and never imports the schema (pydantic alone costs more than the whole command
should); the other tables are left to the commands that load the schema. The schema in
:mod:`sparkwarden.config.schema` takes its defaults for them from here, so the two can never
disagree; it still validates the whole file for every other command.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from sparkwarden.base.errors import ConfigError

DEFAULT_PATH = Path("/etc/sparkwarden/sparkwarden.toml")
ENV_PATH = "SPARKWARDEN_CONFIG"
DEFAULT_STATE_DIR = Path("/var/lib/sparkwarden")
DEFAULT_SOCKET = Path("/run/sparkwarden/control.sock")


def resolve_path(explicit: str | Path | None) -> Path:
    """``--config`` wins, then ``$SPARKWARDEN_CONFIG``, then the system path."""
    if explicit:
        return Path(explicit)
    from_env = os.environ.get(ENV_PATH)
    return Path(from_env) if from_env else DEFAULT_PATH


def read_toml(path: Path) -> dict[str, Any]:
    """The config file as TOML, or :class:`ConfigError` naming the file and what is wrong."""
    try:
        raw = path.read_bytes()
    except PermissionError as exc:
        raise ConfigError(
            f"config {path}: cannot read: {exc.strerror} (for root and {_group_of(path)}: "
            "run as root, or ask root to add you to that group)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"config {path}: cannot read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"config {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path}: not valid TOML: {exc}") from None


def _group_of(path: Path) -> str:
    """The group that may read ``path``, in words, for a refusal an operator can act on."""
    import grp

    for candidate in (path, path.parent):  # the file cannot be stat()ed past a closed dir
        try:
            return f"group {grp.getgrgid(candidate.stat().st_gid).gr_name!r}"
        except (OSError, KeyError):
            continue
    return "its group"


class Places(NamedTuple):
    state_dir: Path
    socket: Path
    #: the file has a ``[cluster]`` table: status then loads the schema and looks at every node
    cluster: bool = False


#: The keys of the two tables ``status`` reads, each a TOML string, and what it names: those of
#: ``StateConfig`` and ``ControlConfig`` (tests/config/test_locate.py holds them equal), so a
#: typo is refused here as the schema refuses it.
KEYS: dict[str, dict[str, str]] = {
    "state": {"dir": "path"},
    "control": {"socket": "path", "group": "group name"},
}


def places(explicit: str | Path | None) -> Places:
    """``state.dir`` and ``control.socket`` from the config file, defaults where it is silent."""
    path = resolve_path(explicit)
    data = read_toml(path)
    state, control = (_table(data, path, section) for section in ("state", "control"))
    return Places(
        state_dir=Path(state.get("dir", DEFAULT_STATE_DIR)),
        socket=Path(control.get("socket", DEFAULT_SOCKET)),
        cluster="cluster" in data,
    )


def _table(data: dict[str, Any], source: Path, section: str) -> dict[str, Any]:
    """One of the two tables, checked as the schema checks it: known keys, each of its type."""
    table = data.get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: {section}: expected a table")
    known = KEYS[section]
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{source}: {section}.{key}: unknown key")
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {section}.{key}: expected a {known[key]}")
    return table
