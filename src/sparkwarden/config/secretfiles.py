"""Root's secret files (API keys, webhook URLs): who may own them and what they may hold.

A key or URL file another user can write lets that user point root's requests anywhere, so
the commands that send a secret check it here first; ``config`` only names the files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sparkwarden.errors import ConfigError

if TYPE_CHECKING:  # annotations only: config.py imports this module, not the reverse
    from sparkwarden.config import Config


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


def secret_report(config: Config) -> tuple[list[str], list[str]]:
    """What the daemon and a sequence need beyond the file itself, the secrets they read:
    (absent here: missing, unreadable, unset; wrong: in other hands, malformed, not a URL).

    Checked by the commands that use them (``run``, ``restart``, ``record``); ``check-config``
    shows the absent ones as warnings (a group member cannot read root's key) and refuses the
    wrong ones; the commands that only read state (``status``, ``history``, ``doctor``) never
    look, so an operator in the group is not refused over root's secrets.
    """
    absent: list[str] = []
    wrong: list[str] = []
    keys = {"llm.api_key_file": config.llm.api_key_file}
    if config.gateway is not None:
        keys["gateway.api_key_file"] = config.gateway.api_key_file
    for field, path in keys.items():
        if path is None:
            continue
        if unread := unreadable(path):
            absent.append(f"{field}: {unread}")
        elif problem := secret_file_problem(path):
            wrong.append(f"{field}: {problem}")
        elif shape := key_problem(path.read_text(errors="replace")):
            wrong.append(f"{field}: {str(path)!r}: {shape}")
    for index, target in enumerate(config.notify):
        key = f"notify.{index}"
        if target.url_file is not None:
            if unread := unreadable(target.url_file):
                absent.append(f"{key}.url_file: {unread}")
                continue
            if problem := secret_file_problem(target.url_file):
                wrong.append(f"{key}.url_file: {problem}")
                continue
        elif not os.environ.get(target.url_env or ""):
            absent.append(f"{key}.url_env: ${target.url_env} is not set")
            continue
        if not re.fullmatch(r"https?://\S+", target.url()):
            wrong.append(f"{key}: the URL it holds is not http:// or https://")
    return absent, wrong


def secret_problems(config: Config) -> list[str]:
    """Every reason a secret cannot be used, absent or wrong (see :func:`secret_report`)."""
    absent, wrong = secret_report(config)
    return absent + wrong


def unreadable(path: Path) -> str | None:
    try:
        with path.open("rb"):
            return None
    except OSError as exc:
        return f"{str(path)!r} cannot be read: {exc.strerror or exc}"


def require_secrets(config: Config, source: Path) -> None:
    """Raise :class:`ConfigError` (exit 2, nothing touched) when a secret is not usable."""
    problems = secret_problems(config)
    if problems:
        raise ConfigError(f"config {source}: " + "; ".join(problems))
