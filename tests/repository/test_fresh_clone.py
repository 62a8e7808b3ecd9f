"""The repository as a fresh clone gets it: no tracked link may leave it (scripts/check-links)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.kits.commands import ROOT

CHECK = ROOT / "scripts" / "check-links"


def check_links(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CHECK), str(repo)], capture_output=True, text=True, timeout=60, check=False
    )


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
    )


def test_no_tracked_file_of_this_checkout_is_a_link_leaving_it() -> None:
    """What broke both README commands on every other machine: `.venv-litellm` tracked as a
    link into one build machine's /tmp (scripts/test runs the same check first)."""
    result = check_links(ROOT)
    assert result.returncode == 0, result.stderr
    assert "check-links" in (ROOT / "scripts" / "test").read_text().split("setup-host")[0]


def test_a_link_leaving_the_repository_is_refused_by_name(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "a" / "b").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "README").write_text("x\n")
    (repo / "a" / "inside").symlink_to("../README")  # resolved from the link's own folder
    (repo / "a" / "b" / "also-inside").symlink_to("../../a")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "links that stay inside")
    assert check_links(repo).returncode == 0

    (repo / ".venv-litellm").symlink_to("/tmp/build-machine/venv")
    (repo / "a" / "b" / "up").symlink_to("../../../elsewhere")  # one .. too many
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "links that leave")
    result = check_links(repo)
    assert result.returncode == 1
    assert ".venv-litellm -> /tmp/build-machine/venv" in result.stderr
    assert "a/b/up -> ../../../elsewhere" in result.stderr
    assert "a/inside" not in result.stderr and "also-inside" not in result.stderr
    assert "git rm --cached" in result.stderr
