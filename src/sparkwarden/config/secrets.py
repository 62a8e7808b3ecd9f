"""The secrets a config names, checked for use: which are absent here and which are wrong.

The rules for one file are in :mod:`secretfiles` (the schema reads keys through them); this
module walks a whole :class:`Config`, so it stands above the schema.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sparkwarden.base.errors import ConfigError
from sparkwarden.config.schema import Config
from sparkwarden.config.secretfiles import key_problem, secret_file_problem, unreadable


def secret_report(
    config: Config, keys: bool = True, notify: bool = True
) -> tuple[list[str], list[str]]:
    """What the daemon and a sequence need beyond the file itself, the secrets they read:
    (absent here: missing, unreadable, unset; wrong: in other hands, malformed, not a URL).

    Checked by the commands that use them (``run``, ``restart``, ``record``); ``check-config``
    shows the absent ones as warnings (a group member cannot read root's key) and refuses the
    wrong ones; the commands that only read state (``status``, ``history``, ``doctor``) never
    look, so an operator in the group is not refused over root's secrets.
    """
    absent: list[str] = []
    wrong: list[str] = []
    files = {"llm.api_key_file": config.llm.api_key_file}
    if config.gateway is not None:
        files["gateway.api_key_file"] = config.gateway.api_key_file
    for field, path in files.items() if keys else ():
        if path is None:
            continue
        if unread := unreadable(path):
            absent.append(f"{field}: {unread}")
        elif problem := secret_file_problem(path):
            wrong.append(f"{field}: {problem}")
        elif shape := key_problem(path.read_text(errors="replace")):
            wrong.append(f"{field}: {str(path)!r}: {shape}")
    for index, target in enumerate(config.notify if notify else ()):
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


def secret_problems(config: Config, keys: bool = True, notify: bool = True) -> list[str]:
    """Every reason a secret cannot be used, absent or wrong (see :func:`secret_report`)."""
    absent, wrong = secret_report(config, keys, notify)
    return absent + wrong


def require_secrets(config: Config, source: Path, keys: bool = True, notify: bool = True) -> None:
    """Raise :class:`ConfigError` (exit 2, nothing touched) when a secret is not usable:
    ``keys``, the engine's and gateway's API keys; ``notify``, the notification URLs (only the
    daemon and ``notify --test`` send; ``restart`` and ``record`` never do)."""
    problems = secret_problems(config, keys, notify)
    if problems:
        raise ConfigError(f"config {source}: " + "; ".join(problems))
