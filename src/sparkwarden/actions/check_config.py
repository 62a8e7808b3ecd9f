"""``sparkwarden check-config``: the file is valid; here is every value in force."""

from __future__ import annotations

from pathlib import Path

import tomli_w

from sparkwarden.config import Config, effective


def run(config: Config, path: Path) -> int:
    print(f"# {path}: valid. Effective configuration, defaults filled in:")
    print(tomli_w.dumps(effective(config)), end="")
    return 0
