"""``sparkwarden status``: from the daemon if it runs, else from the file it left."""

from __future__ import annotations

import json
from typing import Any

from sparkwarden import control
from sparkwarden import status as status_mod
from sparkwarden.config import Config


def gather(config: Config) -> dict[str, Any]:
    """The daemon's snapshot; on any failure of the socket, the last one it wrote."""
    try:
        answer = control.call(config.control.socket, {"cmd": "status"}, timeout=5.0)
    except control.DaemonUnavailable:
        return _offline(config, status_mod.NOT_RUNNING)
    except control.DaemonNotAnswering as exc:
        return _offline(config, f"{status_mod.NOT_ANSWERING}: {exc}")
    if answer.get("ok"):
        snapshot: dict[str, Any] = answer["status"]
        return snapshot
    return _offline(config, f"{status_mod.NOT_ANSWERING}: {answer.get('error')}")


def _offline(config: Config, state: str) -> dict[str, Any]:
    """The last snapshot the daemon wrote, marked not running, with live memory."""
    from sparkwarden.adapters.host import Host

    snapshot = status_mod.read(config.state.dir / status_mod.STATUS_FILE) or {}
    snapshot.setdefault("daemon", {})
    snapshot["daemon"].update({"running": False, "pid": None, "state": state})
    memory = Host().memory()
    snapshot["memory"] = {
        **snapshot.get("memory", {}),
        "available_gib": round(memory.available_gib, 2),
        "total_gib": round(memory.total_gib, 2),
    }
    for key in ("llm", "acceptance", "budget"):
        snapshot.setdefault(key, {})
    for key in ("next_restart", "hold", "last_run", "gave_up"):
        snapshot.setdefault(key, None)
    return snapshot


def run(config: Config, as_json: bool) -> int:
    snapshot = gather(config)
    print(json.dumps(snapshot, indent=2) if as_json else status_mod.format_text(snapshot))
    return status_mod.exit_code(snapshot)
