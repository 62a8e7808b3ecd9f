"""scripts/test's layout holds: a test of a module that shares a costly fixture runs on the one
worker that makes it, the two phases split the suite between them, and the real engine boots only
in the first (docs/testing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.kits.commands import ROOT

#: A module whose tests share a module-wide ``box`` (one of conftest's SHARED), each writing the
#: worker it ran on; and a test that must run alone.
MODULE = """
import os
import pytest

@pytest.fixture(scope="module")
def box():
    return os.getpid()

@pytest.mark.parametrize("n", range(8))
def test_shares_the_box(box, n):
    with open(os.environ["SW_WHERE"], "a") as out:
        out.write(f"shared {os.getpid()} {box}\\n")

@pytest.mark.parametrize("n", range(4))
def test_independent(n):
    with open(os.environ["SW_WHERE"], "a") as out:
        out.write(f"free {os.getpid()}\\n")

@pytest.mark.alone
def test_alone():
    with open(os.environ["SW_WHERE"], "a") as out:
        out.write(f"alone {os.getpid()}\\n")
"""


def run_phase(tmp_path: Path, *args: str) -> list[list[str]]:
    """The module under the suite's own conftest, as scripts/test runs a phase: each line a test
    wrote."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_layout_sample.py").write_text(textwrap.dedent(MODULE))
    where = tmp_path / f"where-{len(list(tmp_path.glob('where-*')))}"
    pytest_in(tmp_path, *args, str(tmp_path), SW_WHERE=str(where), PYTHONPATH=str(ROOT))
    return [line.split() for line in where.read_text().splitlines()]


def pytest_in(folder: Path, *args: str, exits: tuple[int, ...] = (0,), **env: str) -> str:
    """pytest run quietly in ``folder`` with ``env`` added; its output (any exit but ``exits``
    fails: 5 is pytest's "no test selected")."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode in exits, result.stdout + result.stderr
    return result.stdout


def test_tests_that_share_a_module_fixture_run_on_one_worker(tmp_path: Path) -> None:
    """What broke silently once: pytest 9 no longer reads the group xdist 3.8 writes into a
    test's id, and every worker made the booted systemd of its own."""
    lines = run_phase(tmp_path, "--phase", "parallel", "-n", "3", "--dist", "loadgroup")
    shared = [line for line in lines if line[0] == "shared"]
    free = [line for line in lines if line[0] == "free"]
    assert len(shared) == 8 and len(free) == 4 and not [x for x in lines if x[0] == "alone"]
    assert len({pid for _, pid, _ in shared}) == 1, shared  # one worker, one box
    assert len({pid for _, pid in free} | {shared[0][1]}) > 1, lines  # the others spread


def test_the_alone_phase_runs_only_the_tests_marked_alone(tmp_path: Path) -> None:
    lines = run_phase(tmp_path, "--phase", "alone")
    assert [line[0] for line in lines] == ["alone"]


def test_the_real_engine_boots_only_in_the_alone_phase() -> None:
    """CI once starved a real boot beside the parallel phase (56 s of CPU in 240 s): every test
    of the tier, marked realvllm, is in the alone phase and none in the parallel one."""

    def collected(*args: str) -> list[str]:
        out = pytest_in(ROOT, "--collect-only", *args, "tests/realvllm", exits=(0, 5))
        return [line for line in out.splitlines() if "::" in line]

    tier = collected()
    assert tier and collected("--phase", "alone", "-m", "realvllm") == tier
    assert collected("--phase", "parallel") == []
