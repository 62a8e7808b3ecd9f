"""install-service and uninstall-service under a root directory: what they add, they remove."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.standin.stage import Stage, wait_healthy, write_config
from sparkwarden.actions import install
from sparkwarden.base.errors import SparkwardenError
from tests.kits.commands import docs_text

EXE = "/opt/sparkwarden/bin/sparkwarden"


@pytest.fixture
def sparkwarden(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., str]:
    """install/uninstall under a root dir, as if run from /opt/sparkwarden (this test's own
    interpreter may live under /root, which the ProtectHome check rightly refuses)."""
    monkeypatch.setattr(install, "executable", lambda: EXE)

    def run(command: str, root: Path) -> str:
        if command == "install-service":
            assert install.install(root, start=False) == 0
        else:
            assert install.uninstall(root, purge=command.endswith("--purge")) == 0
        return capsys.readouterr().out

    return run


def test_the_bare_name_is_linked_and_only_that_link_is_removed(
    tmp_path: Path, sparkwarden: Callable[..., str]
) -> None:
    link = tmp_path / "usr/local/bin/sparkwarden"
    assert f"linking {link} -> {EXE}" in sparkwarden("install-service", tmp_path)
    assert os.readlink(link) == EXE
    assert f"keeping {link} -> {EXE}" in sparkwarden("install-service", tmp_path)
    assert f"removing {link}" in sparkwarden("uninstall-service", tmp_path)
    assert not link.is_symlink()


def test_a_different_sparkwarden_on_the_path_is_never_overwritten(
    tmp_path: Path, sparkwarden: Callable[..., str]
) -> None:
    link = tmp_path / "usr/local/bin/sparkwarden"
    link.parent.mkdir(parents=True)
    link.symlink_to("/opt/other/bin/sparkwarden")
    out = sparkwarden("install-service", tmp_path)
    assert f"WARNING: keeping {link}, a link to /opt/other/bin/sparkwarden" in out
    assert os.readlink(link) == "/opt/other/bin/sparkwarden"
    assert f"removing {link}" not in sparkwarden("uninstall-service", tmp_path)
    assert os.readlink(link) == "/opt/other/bin/sparkwarden"  # not ours: left alone

    link.unlink()
    link.write_text("#!/bin/sh\n")
    assert f"WARNING: keeping {link}, a file" in sparkwarden("install-service", tmp_path)
    assert link.read_text() == "#!/bin/sh\n"


def test_the_protecthome_refusal_installs_what_readme_installs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["/root/venv/bin/sparkwarden"])
    monkeypatch.setattr(install.shutil, "which", lambda name: "/root/venv/bin/sparkwarden")
    with pytest.raises(SparkwardenError) as refused:
        install.executable()
    assert install.README_INSTALL in str(refused.value)
    # typed in the checkout itself, whatever its folder is called (not ./sparkwarden)
    assert install.README_INSTALL.endswith("/bin/pip install .")
    assert install.README_INSTALL + "  # in this checkout" in docs_text()


def test_a_refused_install_creates_no_group(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(install.os, "geteuid", lambda: 0)
    monkeypatch.setattr(install, "_group_id", lambda: None)
    monkeypatch.setattr(install, "_run", lambda *argv: ran.append(argv))
    monkeypatch.setattr(sys, "argv", ["/home/op/venv/bin/sparkwarden"])
    monkeypatch.setattr(install.shutil, "which", lambda name: "/home/op/venv/bin/sparkwarden")
    with pytest.raises(SparkwardenError, match="ProtectHome"):
        install.install(None, start=True)
    assert ran == []  # no groupadd, nothing at all


def test_uninstall_twice_then_purge_finishes_and_says_what_it_leaves(
    tmp_path: Path, sparkwarden: Callable[..., str]
) -> None:
    sparkwarden("install-service", tmp_path)
    (tmp_path / "var/lib/sparkwarden").mkdir(parents=True)
    (tmp_path / "opt/sparkwarden/bin").mkdir(parents=True)
    first = sparkwarden("uninstall-service", tmp_path)
    assert f"removing {tmp_path}/etc/systemd/system/sparkwarden.service" in first
    assert f"kept {tmp_path}/etc/sparkwarden (config, secrets)" in first
    assert f"{tmp_path}/opt/sparkwarden (the program) (--purge removes them)" in first
    again = sparkwarden("uninstall-service", tmp_path)
    assert "nothing to stop or disable" in again
    purged = sparkwarden("uninstall-service --purge", tmp_path)
    for gone in ("etc/sparkwarden", "var/lib/sparkwarden", "opt/sparkwarden"):
        assert f"removing {tmp_path}/{gone}" in purged
        assert not (tmp_path / gone).exists()
    assert "left on purpose: your containers and images" in purged
    assert "nothing to stop or disable" in sparkwarden("uninstall-service --purge", tmp_path)


@pytest.mark.docker
def test_install_says_what_the_daemon_will_do_first(stage: Stage, tmp_path: Path) -> None:
    """An engine already past max_uptime is restarted as soon as the daemon starts: install
    says so and suggests a hold; a container the config names that Docker lacks is said too."""
    llm, port = stage.llm("llm")
    wait_healthy(port)
    time.sleep(2.5)
    config = write_config(tmp_path / "sw.toml", tmp_path / "state", [llm, "vllm-27b"], port, [])
    text = config.read_text().replace("[watch]\n", '[watch]\nmax_uptime = "2s"\n')
    if "[watch]" not in text:
        text += '\n[watch]\nmax_uptime = "2s"\n'
    config.write_text(text)
    said = install.before_start(config)
    assert any("vllm-27b, which this Docker engine does not have" in s for s in said), said
    [past] = [s for s in said if "past watch.max_uptime" in s]
    assert past.startswith(f"{llm} has been up ") and "sparkwarden hold 2h" in past
    config.write_text(text.replace('max_uptime = "2s"', 'max_uptime = "20h"'))
    assert not [s for s in install.before_start(config) if "max_uptime" in s]


def test_installed_by_the_bare_name_the_unit_starts_the_program_not_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sparkwarden install-service` (an upgrade, through /usr/local/bin's link): ExecStart
    named the link itself, and uninstall-service then kept the link."""
    program = tmp_path / "opt/sparkwarden/bin/sparkwarden"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    link = tmp_path / "usr/local/bin/sparkwarden"
    link.parent.mkdir(parents=True)
    link.symlink_to(program)
    monkeypatch.setattr(sys, "argv", ["sparkwarden"])
    monkeypatch.setattr(sys, "executable", str(program.with_name("python")))
    monkeypatch.setattr(install.shutil, "which", lambda name: str(link))
    assert install.executable() == str(program)


def test_install_service_refuses_a_config_it_would_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``install-service --config X`` was accepted and ignored: the unit reads /etc/sparkwarden."""
    from sparkwarden import cli

    elsewhere = tmp_path / "mine.toml"
    code = cli.main(["--config", str(elsewhere), "install-service", "--no-start"])
    said = capsys.readouterr().err
    assert code == 2, said
    assert "install-service takes no --config" in said and str(elsewhere) in said
    assert "/etc/sparkwarden/sparkwarden.toml" in said
    assert not elsewhere.exists()
