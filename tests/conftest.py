"""Shared fixtures: the real Docker engine, stand-in containers, configs, the CLI as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.standin.stage import Stage, ensure_image, write_config

ROOT = Path(__file__).resolve().parent.parent


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


def run_cli(
    config: Path | None,
    *args: str,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``sparkwarden ARGS`` as its own process, exactly as an operator runs it."""
    command = [sys.executable, "-m", "sparkwarden"]
    if config is not None:
        command += ["--config", str(config)]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        check=False,
    )
