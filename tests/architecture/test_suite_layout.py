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
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "SW_WHERE": str(where), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [line.split() for line in where.read_text().splitlines()]


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


def collected(*args: str) -> list[str]:
    """The suite's own test ids a phase selects (collected only, nothing run)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode in (0, 5), result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_the_real_engine_boots_only_in_the_alone_phase() -> None:
    """CI once starved a real boot beside the parallel phase (56 s of CPU in 240 s)."""
    alone = collected("--phase", "alone", "-m", "realvllm", "tests/realvllm")
    parallel = collected("--phase", "parallel", "-m", "realvllm", "tests/realvllm")
    assert len(alone) >= 12 and all(t.startswith("tests/realvllm/") for t in alone), alone
    assert parallel == [], parallel
