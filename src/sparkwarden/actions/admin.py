"""``hold``, ``release``, ``reset``: through the daemon when it runs, else straight to its state."""

from __future__ import annotations

from typing import Any

from sparkwarden import control
from sparkwarden.config import Config
from sparkwarden.errors import SparkwardenError


def run(config: Config, request: dict[str, Any]) -> int:
    try:
        answer = control.call(config.control.socket, request)
    except control.DaemonUnavailable:
        from sparkwarden.control_schema import parse_request
        from sparkwarden.handlers import apply_admin
        from sparkwarden.journal import Journal

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
