"""``sparkwarden run``: the supervisor systemd starts."""

from __future__ import annotations

from pathlib import Path

from sparkwarden.config.schema import Config
from sparkwarden.daemon.loop import Daemon


def run(config: Config, path: Path | None = None) -> int:
    """One daemon after another in this process: SIGHUP with a valid config ends the current
    one between runs and the next starts on the new config (systemd sees RELOADING=1)."""
    daemon = None
    while True:
        daemon = Daemon(config, path, daemon)  # a SIGHUP the last one took late is carried
        code = daemon.run()
        if daemon.reloaded is None:
            return code
        config = daemon.reloaded
