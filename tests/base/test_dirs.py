"""Folders others must pass through keep their mode under the daemon's UMask=0077."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkwarden.base.dirs import make_dirs
from sparkwarden.restart import rotation
from sparkwarden.surfaces.control import ControlServer


@pytest.fixture
def unit_umask() -> Iterator[None]:
    """The umask the shipped unit gives the daemon (UMask=0077)."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_folders_get_the_mode_asked_for_and_old_ones_keep_theirs(
    tmp_path: Path, unit_umask: None
) -> None:
    (tmp_path / "old").mkdir(mode=0o700)
    make_dirs(tmp_path / "old" / "a" / "b", 0o755)
    assert mode(tmp_path / "old") == 0o700  # not sparkwarden's to open up
    assert mode(tmp_path / "old" / "a") == mode(tmp_path / "old" / "a" / "b") == 0o755
    make_dirs(tmp_path / "old" / "a", 0o750)  # there already: left as it is
    assert mode(tmp_path / "old" / "a") == 0o755


def test_the_control_sockets_new_folder_lets_its_group_through(
    tmp_path: Path, unit_umask: None
) -> None:
    """A socket configured outside /run/sparkwarden: its group reaches it (0700 kept it out)."""
    path = tmp_path / "sockets" / "control.sock"
    server = ControlServer(path, None, lambda request, peer: {"ok": True})
    server.start()
    try:
        assert mode(path.parent) == 0o755 and mode(path) == 0o600
    finally:
        server.stop()


def test_a_rotation_flags_new_folder_is_open_to_nginxs_workers(
    tmp_path: Path, unit_umask: None
) -> None:
    flag = tmp_path / "rotation" / "out-of-rotation"
    rotation.take_out(flag, "run #1", 1)
    assert mode(flag.parent) == 0o755 and mode(flag) == 0o644
