"""Root's secret files (API keys, webhook URLs): who may own them and what they may hold.

A key or URL file another user can write lets that user point root's requests anywhere, so
the commands that send a secret check it here first; ``config`` only names the files.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkwarden.base.errors import ConfigError, remember_secret


def key_problem(text: str) -> str | None:
    """Why ``text`` cannot be a Bearer token (never quoting it): one token, no whitespace. A
    second line (a comment, an env-file habit) would go into the header, and httpx's refusal
    would quote the whole header in an error."""
    key = text.strip()
    if not key:
        return None
    if any(c.isspace() for c in key):
        return "the API key must be one token on one line, without spaces (the file has more)"
    if not key.isprintable() or not key.isascii():
        return "the API key has characters a Bearer token cannot carry"
    return None


def read_key(path: Path | None, env: str, field: str) -> str | None:
    if path is None:
        key, source = os.environ.get(env, ""), env
    else:
        key, source = path.read_text(errors="replace"), str(path)
    if problem := key_problem(key):
        raise ConfigError(f"{field}: {source}: {problem}")
    remember_secret(key.strip())  # whatever later repeats it (an engine's error) is scrubbed
    return key.strip() or None


def secret_file_problem(path: Path) -> str | None:
    """Why root must not read a secret from ``path``: missing, unreadable, or in other hands.

    A key or URL file another user can write lets that user point root's requests anywhere
    (a webhook URL) or swap the key, so only a root-owned file no one else may write is taken.
    """
    if unread := unreadable(path):
        return unread
    info = path.stat()
    if info.st_uid != 0 or info.st_mode & 0o022:
        who = f"uid {info.st_uid}" if info.st_uid != 0 else "root"
        return (
            f"{str(path)!r} is owned by {who} with mode {info.st_mode & 0o777:04o}: only a file "
            f"owned by root and writable by no one else is trusted "
            f"(fix: chown root:root {path} && chmod 0600 {path})"
        )
    return None


def unreadable(path: Path) -> str | None:
    try:
        with path.open("rb"):
            return None
    except OSError as exc:
        return f"{str(path)!r} cannot be read: {exc.strerror or exc}"
