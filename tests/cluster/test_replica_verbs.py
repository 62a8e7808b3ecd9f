"""Replicas (issue 37): the ``sparkwarden node`` verbs a replica set adds (``serving`` on each
peer, ``turn`` on the first node), on the command line, over the link and in this process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sparkwarden.cli import NODE_VERBS, TURN_ACTIONS, build_parser
from sparkwarden.cluster import replica_verbs
from sparkwarden.cluster.link import node_argv
from sparkwarden.cluster.node import VERBS, Params, perform
from sparkwarden.cluster.replicas import serving_of
from sparkwarden.config.schema import parse
from sparkwarden.restart.turn import ACTIONS

CFG = parse(
    {
        "llm": {"containers": ["vllm"], "base_url": "http://127.0.0.1:9"},
        "replicas": {
            "self": "spark2",
            "nodes": [
                {"name": "spark1", "ssh": "root@spark1"},
                {"name": "spark2", "ssh": "root@spark2"},
            ],
        },
    }
)


def test_a_peer_serves_with_one_engine_up_healthy_and_no_run_of_its_own() -> None:
    assert serving_of(["vllm"], "up", None) == (True, "vllm serving")
    assert not serving_of(["vllm"], "up", "pid 7, schedule")[0]
    assert not serving_of([], "-", None)[0]
    assert not serving_of(["vllm"], "loading", None)[0]
    assert not serving_of(["a", "b"], "up", None)[0]


def test_the_turn_verb_on_the_command_line_and_in_this_process(tmp_path: Path) -> None:
    first = CFG.replicas.first  # type: ignore[union-attr]
    params = Params(action="take", holder="spark2", ttl=1800)
    argv = node_argv(first, CFG.replicas, "turn", params)  # type: ignore[arg-type]
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"] and "root@spark1" in argv
    remote = argv[-1]
    assert "node turn" in remote and "--action take --holder spark2 --ttl 1800" in remote
    args = build_parser().parse_args(["node", "turn", *params.argv(), "--json"])
    assert (args.verb, args.action, args.holder, args.ttl) == ("turn", "take", "spark2", 1800)
    config = tmp_path / "sparkwarden.toml"
    config.write_text(
        '[llm]\ncontainers = ["vllm"]\nbase_url = "http://127.0.0.1:9"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n'
    )
    ask = Params(action="take", holder="spark2", ttl=60, config=str(config))
    assert perform("turn", ask)["granted"] is True
    other = replace(ask, holder="spark3")
    assert perform("turn", other)["holder"] == "spark2"
    assert perform("turn", replace(other, action="release"))["granted"] is False
    assert replica_verbs.perform("turn", "read", "", 0, str(config))["holder"] == "spark2"
    assert (list(VERBS), list(ACTIONS)) == (NODE_VERBS, TURN_ACTIONS)  # the CLI's own copies
