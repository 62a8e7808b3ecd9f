"""Shared fixtures: the real Docker engine, stand-in containers, configs, the CLI as a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
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


def socket_of(config: Path) -> Path:
    from sparkwarden.config import load

    return load(config).control.socket


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


def history(config: Path) -> list[dict[str, Any]]:
    """``sparkwarden history --json``: the runs, newest first."""
    result = run_cli(config, "history", "--json", "--limit", "50")
    assert result.returncode == 0, result.stderr
    runs: list[dict[str, Any]] = json.loads(result.stdout)
    return runs


def running_step(config: Path) -> str | None:
    """The step the newest run is in right now, if it is running."""
    runs = history(config)
    steps = runs[0]["steps"] if runs else []
    return next((s["name"] for s in steps if s["result"] == "running"), None)


def start_cli(config: Path, *args: str) -> subprocess.Popen[str]:
    """``sparkwarden ARGS`` in the background (the caller waits for it or kills it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sparkwarden", "--config", str(config), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
