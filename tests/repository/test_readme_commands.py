"""README's two commands, on the paths they take: the demo runs, needs no test tool, and leaves
nothing behind (its stand-ins and its sparkwarden-demo-* folder)."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import docker
import pytest

from devtools.standin.stage import LABEL
from tests.kits.commands import ROOT

pytestmark = pytest.mark.docker


def test_the_demo_exits_0_and_leaves_nothing_behind(docker_client: docker.DockerClient) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sw-demo-tmp-"))
    try:
        result = subprocess.run(
            ["bash", "scripts/demo"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "TMPDIR": str(tmp)},
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "sparkwarden restart exited 0 (ok)" in result.stdout
        left = list(tmp.iterdir())
        assert left == [], f"the demo left {left}"
    finally:
        for child in tmp.iterdir():  # what a failed demo left, removed here so it is not twice
            subprocess.run(["rm", "-rf", str(child)], check=False)
        tmp.rmdir()
    llm = re.search(r"stand-in LLM (\S+) on", result.stdout)
    assert llm is not None, result.stdout
    prefix = llm.group(1).rsplit("-", 2)[0]
    made = docker_client.containers.list(all=True, filters={"label": f"{LABEL}={prefix}"})
    assert made == [], [c.name for c in made]


def test_the_demo_installs_no_test_tool() -> None:
    """setup-host --demo (what scripts/demo runs) skips the tests' tools: LiteLLM, Prometheus,
    Nginx, debootstrap and the [test] extras, which took minutes and the demo never uses."""
    demo = (ROOT / "scripts" / "demo").read_text()
    assert "bash scripts/setup-host --demo" in demo
    trace = subprocess.run(
        ["bash", "-x", "scripts/setup-host", "--demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert trace.returncode == 0, trace.stderr
    for tool in ("litellm", "promtool", "nginx", "debootstrap", ".[test]"):
        ran = [line for line in trace.stderr.splitlines() if tool in line]
        assert ran == [], (tool, ran)
