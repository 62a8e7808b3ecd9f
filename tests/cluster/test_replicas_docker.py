"""Replicas (issue 37) over real SSH between simulated Sparks (tests/kits/clusterkit.py): the
turn kept in the first node's journal, taken by a peer over SSH and refused to the first node
itself while held; a peer's engine asked whether it serves; a peer cut off the LAN counts as
not serving, so a planned restart waits."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests.kits.clusterkit import SPARKWARDEN, ClusterKit, Node
from tests.kits.commands import ROOT

#: Run inside a node's network: that Spark's daemon's own link, asked once, its answer as JSON.
ASK = """
import json, sys
from sparkwarden.cluster.replica_link import ReplicaLink
from sparkwarden.cluster.replicas import waits_for
from sparkwarden.config.schema import load
config = load(sys.argv[1])
link = ReplicaLink(config)
try:
    out = {}
    for what in sys.argv[2:]:
        if what == "look":
            look = link.look(renew=False)
            out["look"] = {
                "peers": [p.to_json() for p in look.peers],
                "turn": look.turn.to_json() if look.turn else None,
                "waits_for": waits_for(look, config.replicas.self, look.at, 60),
            }
        else:
            out[what] = link.turn(what).to_json()
    print(json.dumps(out))
finally:
    link.close()
"""


@pytest.fixture(scope="module")
def kit() -> Iterator[ClusterKit]:
    kit = ClusterKit(("spark1", "spark2"))
    yield kit
    kit.close()


def configs(kit: ClusterKit, base: Path) -> dict[str, Path]:
    """Each Spark's own config: the same set, each naming itself; reached as root over the
    kit's SSH, each sparkwarden reading its own config there."""
    paths = {name: base / f"{name}.toml" for name in ("spark1", "spark2")}
    nodes = [
        {
            "name": name,
            "ssh": name,
            "sparkwarden": f"env SPARKWARDEN_CONFIG={paths[name]} {SPARKWARDEN}",
        }
        for name in paths
    ]
    for name, path in paths.items():
        config: dict[str, Any] = {
            "llm": {"containers": ["vllm"], "base_url": "http://127.0.0.1:9"},
            "state": {"dir": str(base / name / "state")},
            "replicas": {
                "self": name,
                "nodes": nodes,
                "ssh_config": str(kit.ssh_config),
                "connect_timeout": "2s",
                "turn_ttl": "10m",
            },
        }
        path.write_text(tomli_w.dumps(config))
    return paths


def ask(node: Node, config: Path, *what: str) -> dict[str, Any]:
    done = subprocess.run(
        [*node.enter(), str(ROOT / ".venv" / "bin" / "python"), "-c", ASK, str(config), *what],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.timeout(240)
def test_the_turn_over_real_ssh_and_a_peer_cut_off_is_not_serving(
    kit: ClusterKit, tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)
    paths = configs(kit, tmp_path)
    spark1, spark2 = kit.node("spark1"), kit.node("spark2")
    # spark2 takes the turn in spark1's journal, over SSH
    taken = ask(spark2, paths["spark2"], "take")["take"]
    assert taken["granted"] and taken["holder"] == "spark2", taken
    # spark1 (the first node: its own journal, in-process) is refused while spark2 holds it
    refused = ask(spark1, paths["spark1"], "take")["take"]
    assert not refused["granted"] and refused["holder"] == "spark2", refused
    # spark1's look: its peer spark2 answers (no engine there: not serving), the turn is spark2's
    look = ask(spark1, paths["spark1"], "look")["look"]
    [peer] = look["peers"]
    assert peer["reachable"] and not peer["serving"], peer
    assert peer["why"] == "no LLM container up", peer
    assert look["waits_for"].startswith("peer spark2 not serving"), look
    # spark2 gives it back; spark1 may take it
    assert ask(spark2, paths["spark2"], "release")["release"]["granted"]
    assert ask(spark1, paths["spark1"], "take")["take"]["granted"]
    # spark1 off the LAN: from spark2 it is unreachable, and so is the turn
    kit.cut(spark1)
    try:
        look = ask(spark2, paths["spark2"], "look")["look"]
    finally:
        kit.cut(spark1, up=True)
    [peer] = look["peers"]
    assert not peer["reachable"] and not peer["serving"], peer
    assert look["turn"] is None
    assert look["waits_for"].startswith("peer spark1 unreachable"), look
