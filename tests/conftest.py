"""Shared fixtures: the real Docker engine, stand-in containers, configs (commands: commands.py)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from devtools.standin.stage import Stage, ensure_image, write_config


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """The engine scripts/setup-host started. Missing is a failure, never a skip."""
    client = docker.from_env()
    client.ping()
    ensure_image(client)
    yield client
    client.close()


@pytest.fixture
def stage(docker_client: docker.DockerClient) -> Iterator[Stage]:
    stage = Stage(docker_client)
    yield stage
    stage.cleanup()


@pytest.fixture
def control_dir() -> Iterator[Path]:
    """A socket directory others may traverse (pytest's tmp dirs are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="sw-ctl-"))
    path.chmod(0o755)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


@pytest.fixture
def make_config(tmp_path: Path) -> Any:
    def make(
        llm_names: list[str], port: int, voice_names: list[str] | None = None, **sections: Any
    ) -> Path:
        return write_config(
            tmp_path / "sparkwarden.toml",
            tmp_path / "state",
            llm_names,
            port,
            voice_names or [],
            **sections,
        )

    return make


#: What a daemon under test runs with unless a test says otherwise: no nightly schedule, a
#: quick loop, and a control socket of its own.
DAEMON_DEFAULTS: dict[str, dict[str, Any]] = {
    "schedule": {"cron": ""},
    "watch": {"interval": "0.5s"},
}


@pytest.fixture
def make_daemon_config(make_config: Any, tmp_path: Path) -> Any:
    def make(
        llm_names: list[str], port: int, voice_names: list[str] | None = None, **sections: Any
    ) -> Path:
        ctl = tmp_path / "ctl"
        ctl.mkdir(exist_ok=True)
        merged: dict[str, Any] = {k: dict(v) for k, v in DAEMON_DEFAULTS.items()}
        merged["control"] = {"socket": str(ctl / "control.sock"), "group": ""}
        for key, values in sections.items():
            if isinstance(values, dict):
                merged.setdefault(key, {}).update(values)
            else:
                merged[key] = values
        return make_config(llm_names, port, voice_names, **merged)

    return make
