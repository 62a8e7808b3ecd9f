"""``sparkwarden status``: from the daemon if it runs, else from the file it left.

It renders the snapshot the daemon published and needs only the state dir and the socket
(:mod:`sparkwarden.config.locate`): no config schema, no logger, so it answers quickly over SSH.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sparkwarden.config.locate import Places
from sparkwarden.surfaces import control
from sparkwarden.surfaces import status_text as status_mod

if TYPE_CHECKING:
    from sparkwarden.config.schema import Config

#: A node's ``node inspect`` bound for status, past ssh's connect timeout: its Python starting
#: and one Docker inspect; status answers within this even when a node hangs.
STATUS_MARGIN = 10.0


def gather(where: Places) -> dict[str, Any]:
    """The daemon's snapshot; on any failure of the socket, the last one it wrote."""
    try:
        answer = control.call(where.socket, {"cmd": "status"}, timeout=5.0)
    except control.DaemonUnavailable:
        return _offline(where, status_mod.NOT_RUNNING)
    except control.DaemonNotAnswering as exc:
        return _offline(where, f"{status_mod.NOT_ANSWERING}: {exc}")
    if answer.get("ok"):
        snapshot: dict[str, Any] = answer["status"]
        return snapshot
    return _offline(where, f"{status_mod.NOT_ANSWERING}: {answer.get('error')}")


def _offline(where: Places, state: str) -> dict[str, Any]:
    """The last snapshot the daemon wrote, marked not running, with live memory."""
    from sparkwarden.adapters.host import Host

    snapshot = status_mod.read(where.state_dir / status_mod.STATUS_FILE) or {
        status_mod.NO_SNAPSHOT: True  # nothing known: status says so, not defaults
    }
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
    snapshot["booting"] = None  # nobody is waiting for the engine: the waiter is gone
    return snapshot


def run(where: Places, as_json: bool, config: Config | None = None) -> int:
    """``config``: loaded only on a cluster's head, whose status shows every node too."""
    snapshot = view(where, config)
    print(json.dumps(snapshot, indent=2) if as_json else status_mod.format_text(snapshot))
    return status_mod.exit_code(snapshot)


def view(where: Places, config: Config | None = None) -> dict[str, Any]:
    """What ``status --json`` prints, as data (its exit code is ``status_text.exit_code`` of it):
    the tests read state through it in-process."""
    snapshot = gather(where)
    if config is not None and config.cluster is not None:
        snapshot["cluster"] = cluster_view(config)
    return snapshot


def cluster_view(config: Config) -> dict[str, Any]:
    """Every node, one bounded parallel look (the head's ``/health`` is already in ``llm``)."""
    from sparkwarden.actions.cluster import journal_proof
    from sparkwarden.cluster import looks, verdict

    return verdict.as_json(looks.look(config, STATUS_MARGIN), None, journal_proof(config))
