"""``sparkwarden check-config``: the file is valid; here is every value in force."""

from __future__ import annotations

import sys
from pathlib import Path

import tomli_w

from sparkwarden.config import Config, effective, secret_problems


def run(config: Config, path: Path) -> int:
    """Exit 0 when the file is valid; a secret it names that cannot be used here is a warning:
    a group member may not read root's key, and only the daemon and a sequence need it."""
    for problem in secret_problems(config):
        print(f"sparkwarden: warning: {problem} (run and restart refuse it)", file=sys.stderr)
    print(f"# {path}: valid. Effective configuration, defaults filled in:")
    print(tomli_w.dumps(effective(config)), end="")
    return 0
