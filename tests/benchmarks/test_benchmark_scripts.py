"""Every benchmark script says how to run it: ``--help`` answers without running anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the runnable ones (the rest, such as common.py, are modules they import)
SCRIPTS = sorted(
    p for p in (ROOT / "benchmarks").glob("*.py") if 'if __name__ == "__main__"' in p.read_text()
)


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_answers_with_usage(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:"), done.stdout[:200]
