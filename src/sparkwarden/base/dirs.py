"""Folders made with the mode asked for, whatever the umask.

The unit runs the daemon with ``UMask=0077``, which cuts ``mkdir(mode=0o755)`` to 0700: a
control socket's folder its group must pass through, or a rotation flag's folder Nginx's
workers must look into, would then keep them out without a word.
"""

from __future__ import annotations

from pathlib import Path


def make_dirs(path: Path, mode: int) -> None:
    """``mkdir -p`` whose new folders get ``mode``; a folder that already exists keeps its own
    (an operator's choice, or systemd's ``RuntimeDirectoryMode``)."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:  # made meanwhile by someone else: theirs
            continue
        folder.chmod(mode)
