"""``sparkwarden run``: the supervisor systemd starts."""

from __future__ import annotations

from sparkwarden.config import Config
from sparkwarden.daemon import Daemon


def run(config: Config) -> int:
    return Daemon(config).run()
