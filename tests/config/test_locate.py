"""``status`` finds the state dir and socket from the config with tomllib alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkwarden.adapters.host import GIB, Host
from sparkwarden.base.errors import ConfigError
from sparkwarden.config import locate
from sparkwarden.config.schema import ControlConfig, StateConfig, load
from tests.kits.commands import ROOT


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_defaults_are_the_schemas(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", '[llm]\ncontainers = ["v"]\nbase_url = "http://127.0.0.1:9"\n')
    places, config = locate.places(cfg), load(cfg)
    assert places == locate.Places(config.state.dir, config.control.socket)
    assert places == locate.Places(locate.DEFAULT_STATE_DIR, locate.DEFAULT_SOCKET)


def test_a_customised_config_is_followed(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "c.toml",
        f'[state]\ndir = "{tmp_path}/st"\n[control]\nsocket = "{tmp_path}/s.sock"\n',
    )
    assert locate.places(cfg) == locate.Places(tmp_path / "st", tmp_path / "s.sock")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[state\n", "not valid TOML"),
        ("state = 3\n", "state: expected a table"),
        ("[control]\nsocket = 5\n", "control.socket: expected a path"),
    ],
)
def test_a_bad_file_is_named_with_what_is_wrong(tmp_path: Path, text: str, named: str) -> None:
    cfg = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError, match=named) as caught:
        locate.places(cfg)
    assert str(cfg) in str(caught.value)


def test_its_keys_are_the_schemas() -> None:
    assert set(locate.KEYS["state"]) == set(StateConfig.model_fields)
    assert set(locate.KEYS["control"]) == set(ControlConfig.model_fields)


BASE = '[llm]\ncontainers = ["v"]\nbase_url = "http://127.0.0.1:9"\n'


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[state]\ndri = "/x"\n', "state.dri: unknown key"),
        ('[control]\nsockett = "/x"\n', "control.sockett: unknown key"),
        ("[control]\ngroup = 5\n", "control.group"),
        ("[state]\ndir = 5\n", "state.dir"),
        ('[state]\ndir = ["/x"]\n', "state.dir"),
        ('[state]\ndir = ""\n', None),
        ('[control]\nsocket = ""\n', None),
        ('[control]\ngroup = ""\nsocket = "s"\n', None),
    ],
)
def test_the_tables_it_reads_are_judged_as_the_schema_judges_them(
    tmp_path: Path, text: str, named: str | None
) -> None:
    """A typo is refused naming the key (not passed over for the default dir); what the schema
    takes, locate takes, to the same place."""
    cfg = write(tmp_path / "c.toml", BASE + text)
    if named is None:
        config = load(cfg)
        assert locate.places(cfg) == locate.Places(config.state.dir, config.control.socket)
        return
    for read in (locate.places, load):
        with pytest.raises(ConfigError, match=named) as caught:
            read(cfg)
        assert str(cfg) in str(caught.value)


def test_status_refuses_a_typo_with_exit_2(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", f'{BASE}[state]\ndri = "{tmp_path}/st"\n')
    out = subprocess.run(
        [sys.executable, "-m", "sparkwarden", "--config", str(cfg), "status"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 2
    assert "state.dri: unknown key" in out.stdout + out.stderr


@pytest.mark.alone  # two reads of the host's memory, a moment apart
def test_memory_is_what_psutil_would_read() -> None:
    import psutil

    ours, theirs = Host().memory(), psutil.virtual_memory()
    assert ours.total_gib == theirs.total / GIB
    assert abs(ours.available_gib - theirs.available / GIB) < 0.5  # read a moment apart


def test_status_imports_neither_the_schema_nor_the_logger(tmp_path: Path) -> None:
    """Each of these costs tens of milliseconds of a command that should take about a hundred."""
    cfg = write(
        tmp_path / "c.toml", f'[state]\ndir = "{tmp_path}/st"\n[control]\nsocket = "{tmp_path}/s"\n'
    )
    code = (
        "import sys\n"
        "from sparkwarden.cli import main\n"
        f"main(['--config', {str(cfg)!r}, 'status'])\n"
        "heavy = ('pydantic', 'structlog', 'httpx', 'docker', 'dataclasses')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert "NOT RUNNING" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"
