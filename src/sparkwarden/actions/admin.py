"""``hold``, ``release``, ``reset``: through the daemon when it runs, else straight to its state."""

from __future__ import annotations

from typing import Any

from sparkwarden.base.errors import SparkwardenError
from sparkwarden.config.schema import Config
from sparkwarden.surfaces import control


def run(config: Config, request: dict[str, Any]) -> int:
    try:
        answer = control.call(config.control.socket, request)
    except control.DaemonUnavailable:
        from sparkwarden.daemon.handlers import apply_admin
        from sparkwarden.restart.journal import Journal
        from sparkwarden.surfaces.control_schema import parse_request

        journal = Journal(config.state.dir)
        try:
            parsed = parse_request(request)
            answer = apply_admin(journal, parsed)
        finally:
            journal.close()
    if not answer.get("ok"):
        raise SparkwardenError(str(answer.get("error")))
    if "hold" in answer:
        hold = answer["hold"]
        print(f"held until {hold['until']}: no automatic restart until then")
    else:
        print(
            {
                "release": "released: automatic restarts resume",
                "reset": "reset: the restart budget is cleared",
            }[request["cmd"]]
        )
    return 0
