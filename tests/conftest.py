"""Shared fixtures: the real Docker engine, stand-in containers, configs (commands: commands.py)."""

from __future__ import annotations

import resource
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


#: Module-wide fixtures too costly to make once per parallel worker, or whose tests build on each
#: other (a booted systemd, LiteLLM and Nginx, a private dockerd): scripts/test's `--dist
#: loadgroup` sends every test of a module that uses one of them to one worker, which makes it
#: once. The simulated nodes (``kit``) are not: a worker brings its own up in seconds, and
#: their tests, a minute each, would be the suite's longest chain on one worker.
SHARED = ("box", "gateway", "private_docker")
#: Every module that runs LiteLLM (the ``gateway`` fixture's, the replica sets'): one worker,
#: one LiteLLM at a time; two at once on two cores starve the users' streams they measure.
LITELLM = "litellm"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase",
        choices=("all", "alone", "parallel"),
        default="all",
        help="scripts/test's phases: the tests marked alone, or all the others (default: all)",
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = config.getoption("--phase")
    if phase != "all":  # an option of its own, so that a -m given to scripts/test still applies
        alone = phase == "alone"
        keep = [i for i in items if (i.get_closest_marker("alone") is not None) == alone]
        kept = set(keep)
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = keep
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        for name in SHARED:
            made = defs.name2fixturedefs.get(name) if defs is not None else None
            if made and made[-1].scope == "module":
                group = LITELLM if name == "gateway" else item.module.__name__  # type: ignore[attr-defined]
                item.add_marker(pytest.mark.xdist_group(group))
                break


# --- where the suite's CPU goes -------------------------------------------------------------------
# The CI machine has two cores and the parallel phase keeps both busy: the suite's time is its CPU.
# Each test's CPU (its worker's and every process it started and reaped: CLI calls, daemons; not
# what runs in containers) is carried on its report, and the 30 costliest are listed at the end.

CPU = "cpu_s"
_spent: dict[str, float] = {}


def _cpu_now() -> float:
    own, reaped = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_began] = _cpu_now()


_began = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    if call.when == "teardown" and _began in item.stash:
        report = outcome.get_result()
        report.user_properties.append((CPU, round(_cpu_now() - item.stash[_began], 2)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == CPU:
            _spent[report.nodeid] = float(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if len(_spent) <= 30:  # a run of a few tests: their durations say as much
        return
    terminalreporter.section(
        f"the 30 tests that took the most CPU ({sum(_spent.values()):.0f} s in all; a test's "
        "worker and what it started, not its containers)"
    )
    for nodeid, seconds in sorted(_spent.items(), key=lambda kv: -kv[1])[:30]:
        terminalreporter.write_line(f"{seconds:7.1f}s  {nodeid}")
