"""The real-engine tier: vLLM's own CPU build (``devtools/realvllm``) in real containers.

Every test here runs in scripts/test's first phase, ``alone``, one real engine at a time and
nothing else beside it: a boot needs about 40 s of CPU, single-threaded, and beside the parallel
phase it gets too little of it. Under cgroup v1 every host process at the root weighs as much as
the engine's whole container: CI's run saw 56 s of CPU in 240 s (a quarter of a core), and two
engines at once starve each other past any sound timeout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.realvllm import engine

GROUP = "realvllm"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here: alone, selected by ``-m realvllm``, on one worker if run in parallel.

    Before the phases are chosen (tests/conftest.py's hook, registered first, runs after this)."""
    for item in items:
        if item.path.parent == Path(__file__).parent:
            item.add_marker(pytest.mark.docker)
            item.add_marker(pytest.mark.realvllm)
            item.add_marker(pytest.mark.alone)
            item.add_marker(pytest.mark.xdist_group(GROUP))


@pytest.fixture(scope="session")
def real_home() -> Path:
    """The provisioned engine (scripts/setup-vllm; setup-host made it). Missing is a failure."""
    return engine.home()


@pytest.fixture
def real_config(make_config: Any, real_home: Path) -> Any:
    """A sparkwarden config for a real engine: make_config with the real engine's timeouts."""

    def make(llm: list[str], port: int, voice: list[str] | None = None, **sections: Any) -> Path:
        sections["llm"] = {**engine.LLM_TIMEOUTS, **sections.get("llm", {})}
        return make_config(llm, port, voice, **sections)

    return make


@pytest.fixture
def real_llm(stage: Any, real_home: Path) -> Iterator[Any]:
    """Start a real engine on the test's stage and wait for it: (name, port, boot seconds)."""

    def start(
        *flags: str, name: str = "tiny", role: str = "llm", wait: bool = True, **kw: Any
    ) -> tuple[str, int, float]:
        container, port = engine.start(stage, role, *flags, name=name, **kw)
        seconds = engine.wait_healthy(stage.client, container, port) if wait else 0.0
        return container, port, seconds

    yield start
