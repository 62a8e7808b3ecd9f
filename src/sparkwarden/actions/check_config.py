"""``sparkwarden check-config``: the file is valid; here is every value in force."""

from __future__ import annotations

import sys
from pathlib import Path

import tomli_w

from sparkwarden.base.errors import ConfigError
from sparkwarden.config.schema import Config, effective
from sparkwarden.config.secrets import secret_report


def run(config: Config, path: Path) -> int:
    """Exit 0 when the file is valid. A secret that cannot be read here is a warning (a group
    member may not read root's key; only the daemon and a sequence need it); one that is wrong
    for anyone (in other hands, malformed) is refused, exit 2."""
    absent, wrong = secret_report(config)
    if wrong:
        raise ConfigError(f"config {path}: " + "; ".join(wrong))
    for problem in absent:
        print(f"sparkwarden: warning: {problem} (run and restart refuse it)", file=sys.stderr)
    print(f"# {path}: valid. Effective configuration, defaults filled in:")
    print(tomli_w.dumps(effective(config)), end="")
    return 0
