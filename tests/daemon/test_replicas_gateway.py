"""Two replicas behind real LiteLLM and Nginx (issue 37), two daemons, users streaming through
LiteLLM the whole time (tests/kits/replicaskit.py): restarts users never see.

- both scheduled at the same minute: each restarted once, one after the other, never both out,
  and not one user request failed or answered empty;
- a peer's engine crashing while the other is in its planned restart: the crash is recovered at
  once, the planned restart ends well, and no request is cut mid-answer but those the crash
  itself cut;
- the peers unreachable to each other: neither planned restart goes, each says for which
  peer, and users are served throughout.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.standin.stage import Stage
from tests.conftest import LITELLM
from tests.kits.commands import ROOT
from tests.kits.daemonkit import DaemonProcess, wait_for
from tests.kits.gatewaykit import StreamingLoad
from tests.kits.replicaskit import NIGHT, Replica, ReplicaSet, night, replica_set, served

DOCS = ROOT / "docs" / "replicas.md"

#: One worker runs them one after the other, on one users' path (LiteLLM, two Nginx, an sshd:
#: slow to start on a loaded box), each test with engines and daemons of its own.
pytestmark = pytest.mark.xdist_group(LITELLM)  # with every other LiteLLM test


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaSet]:
    with replica_set(tmp_path_factory.mktemp("replicas")) as made:
        yield made


#: The stand-in answers as a small engine does; its drain lets running answers finish.
STANDIN = ("--token-delay", "0.02", "--shutdown-timeout", "30")


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_two_replicas_scheduled_at_the_same_minute_restart_in_turn_and_users_never_see_it(
    two: ReplicaSet, stage: Stage, tmp_path: Path
) -> None:
    with two.night_in(stage, tmp_path, STANDIN):
        same_minute(two)


def same_minute(two: ReplicaSet) -> None:
    seen = night(two)
    for name, done in seen.runs.items():
        assert [r["result"] for r in done] == ["ok"], (name, done)
        steps = [s["name"] for s in done[0]["steps"]]
        assert steps[1] == "leave_rotation" and "rejoin_rotation" in steps, steps
    first, second = sorted(seen.runs.values(), key=lambda done: done[0]["started_at"])
    assert first[0]["ended_at"] <= second[0]["started_at"], "the two runs overlapped"
    assert seen.watch.both_out == [], f"both replicas out for {len(seen.watch.both_out)} looks"
    failed = [r for r in seen.results if r.kind != "complete"]
    assert failed == [], failed[:5]
    assert len(seen.results) >= 12
    for replica in two.replicas:
        assert not replica.flag.exists(), f"{replica.name} left out of rotation"
        assert replica.daemon is not None and "left_rotation" in replica.daemon.text()
    waited = [
        r.name for r in two.replicas if r.daemon and "restart_waits_for_peers" in r.daemon.text()
    ]
    assert waited, "neither waited for the other"
    docs_commands(two.replicas[0])


def docs_commands(spark: Replica) -> None:
    """Every ``$ `` line of docs/replicas.md, typed on a Spark whose daemon runs."""
    commands = re.findall(r"^\$ (.+)$", DOCS.read_text(), re.MULTILINE)
    assert commands
    env = {
        "SPARKWARDEN_CONFIG": str(spark.config),
        "PATH": f"{ROOT / '.venv' / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
    }
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=120
        )
        said = f"{command}: {done.stdout}{done.stderr}"
        assert done.returncode == 0, said
        if command.endswith("node serving --json"):
            answer = json.loads(done.stdout)
            assert answer["serving"] is True and answer["why"] == f"{spark.llm} serving", said
        if command.endswith("--dry-run"):
            assert "leave_rotation" in done.stdout and "rejoin_rotation" in done.stdout, said
        if command.endswith("status"):
            assert "replicas:    2 of 2 serving" in done.stdout, said


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_a_peer_crashing_during_the_others_planned_restart_is_recovered_and_nothing_is_cut(
    two: ReplicaSet, stage: Stage, tmp_path: Path
) -> None:
    # each engine boots for 8 s: the crash comes while one replica's planned restart waits
    with two.night_in(stage, tmp_path, (*STANDIN, "--boot-delay", "8")):
        crash_meanwhile(two, stage)


def crash_meanwhile(two: ReplicaSet, stage: Stage) -> None:
    spark1, spark2 = two.replicas
    # one automatic run each (the budget): no second uptime restart drains after the first
    once = {**NIGHT, "budget": {"max_runs": 1}}
    two.configure({"watch": {"max_uptime": "20s"}, "llm": {"health_timeout": "60s"}, **once})
    two.start_daemons()
    assert spark2.daemon is not None
    load = StreamingLoad(two.url, clients=3, max_tokens=20).start()
    try:
        served(load, 6)
        holder = wait_for(
            "a replica's planned restart to hold the turn",
            lambda: next((r for r in two.replicas if r.flag.exists()), None),
            timeout=120,
        )
        other = spark2 if holder is spark1 else spark1
        killed = time.monotonic()
        stage.client.containers.get(other.llm).kill()  # the peer's engine crashes
        assert other.daemon is not None and holder.daemon is not None
        crash = wait_for("the crash recovered", lambda: other.runs("crash"), timeout=120)
        uptime = wait_for("the planned restart's end", lambda: holder.runs("uptime"), timeout=180)
        served(load, 6)
    finally:
        results = load.stop()
    assert crash[0]["result"] == "ok", crash
    assert uptime[0]["result"] == "ok", uptime
    assert crash[0]["started_at"] < uptime[0]["ended_at"], "the crash came after the restart"
    # the crash cut what its engine was answering; nothing else was cut, the planned restart
    # (drained, then stopped with --shutdown-timeout) least of all
    cut = [r for r in results if r.kind == "cut" and not r.began <= killed <= r.began + r.seconds]
    assert cut == [], cut
    for replica in two.replicas:
        assert not replica.flag.exists(), f"{replica.name} left out of rotation"


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_peers_unreachable_keep_planned_restarts_waiting_saying_so_and_users_served(
    two: ReplicaSet, stage: Stage, tmp_path: Path
) -> None:
    with two.night_in(stage, tmp_path, STANDIN):
        unreachable(two)


def unreachable(two: ReplicaSet) -> None:
    """The SSH between the Sparks gone (its sshd ended): each is unreachable to the other, so
    neither planned restart may go (two could be out at once), and each says for which peer."""
    two.configure({"watch": {"max_uptime": "10s"}, **NIGHT})
    assert two.ssh is not None
    two.ssh.close()
    try:
        cut_off(two)
    finally:
        two.ssh.start()  # for the tests after this one


def cut_off(two: ReplicaSet) -> None:
    two.start_daemons()
    load = StreamingLoad(two.url, clients=2, max_tokens=20).start()
    try:
        for replica, peer in zip(two.replicas, reversed(two.replicas), strict=True):
            assert replica.daemon is not None
            daemon = replica.daemon

            def waits(daemon: DaemonProcess = daemon, peer: str = peer.name) -> bool:
                said = str((daemon.status()["replicas"] or {}).get("waits_for") or "")
                return said.startswith(f"peer {peer} unreachable")

            wait_for(f"{replica.name}'s uptime restart to wait for {peer.name}", waits, 90)
        served(load, 6)
        for replica in two.replicas:
            assert replica.daemon is not None
            later = replica.daemon.after_looks(6)
            assert later["daemon"]["pending"] == "uptime", later["daemon"]
            assert replica.daemon.history() == []  # nothing restarted
            assert not replica.flag.exists()  # and nobody taken out of rotation
    finally:
        results = load.stop()
    assert [r for r in results if r.kind != "complete"] == []
