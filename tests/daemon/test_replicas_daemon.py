"""Replicas (issue 37), the daemon as systemd runs it, on a stand-in engine: a planned restart
(uptime) on a replica whose only peer does not answer waits, and ``status`` says for which
peer; nothing is restarted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devtools.standin.stage import Stage, wait_healthy
from tests.kits.daemonkit import DaemonProcess, wait_for

#: An address nothing answers on (TEST-NET-3, RFC 5737): the peer is unreachable.
NOWHERE = "root@203.0.113.1"


@pytest.mark.docker
@pytest.mark.timeout(180)
def test_a_planned_restart_waits_for_an_unreachable_peer_and_status_names_it(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    replicas = {
        "self": "spark2",
        "check_interval": "1s",
        "turn_ttl": "1m",
        "connect_timeout": "1s",
        "nodes": [{"name": "spark1", "ssh": NOWHERE}, {"name": "spark2", "ssh": "root@spark2"}],
    }
    config = make_daemon_config([llm], port, [], watch={"max_uptime": "5s"}, replicas=replicas)
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        # before the first look at the peers it waits for that look; then for the peer
        seen: list[str] = []

        def waiting_for_the_peer() -> dict[str, Any] | None:
            s = daemon.status()
            waits = str((s["replicas"] or {}).get("waits_for") or "")
            if s["daemon"]["pending"] == "uptime" and waits:
                seen.append(waits)
            return s if waits.startswith("peer spark1 unreachable") else None

        status = wait_for("the uptime restart to wait for the peer", waiting_for_the_peer, 60)
        assert status["daemon"]["pending"] == "uptime", status["daemon"]
        said = ("a first look at the peers", "peer spark1 unreachable")
        assert all(w.startswith(said) for w in seen), seen  # it never went, nor waited for else
        [peer] = status["replicas"]["peers"]
        assert peer["name"] == "spark1" and not peer["reachable"], peer
        later = daemon.after_looks(10)
        assert later["daemon"]["pending"] == "uptime" and later["replicas"]["waits_for"]
        assert daemon.runs_with("uptime", finished=False) == []  # nothing restarted
        assert "restart_waits_for_peers" in daemon.text()
    finally:
        daemon.stop()
