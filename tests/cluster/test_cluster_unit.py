"""The cluster run's order and refusals, the verdicts and the SSH link's reading, with a
fake link (the real one over SSH: test_cluster_docker.py)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import pytest

from sparkwarden.actions import history
from sparkwarden.adapters.docker_engine import DockerEngine
from sparkwarden.base.containers import ContainerState
from sparkwarden.base.errors import ConfigError, ContainerError, HandedOver
from sparkwarden.cluster.link import (
    CONTROL_PREFIX,
    NodeFailed,
    NodeUnreachable,
    SshLink,
    interpret,
    node_argv,
    run_launcher,
)
from sparkwarden.cluster.looks import cluster_of
from sparkwarden.cluster.node import Params, engine_view, runs_engine, runs_vllm
from sparkwarden.cluster.run import (
    ClusterParts,
    Proving,
    booted_by,
    left_paused,
    restart_cluster,
    resume_left,
)
from sparkwarden.cluster.run import plan as cluster_plan
from sparkwarden.cluster.setup import check as check_setup
from sparkwarden.cluster.verdict import (
    NodeView,
    Proof,
    as_json,
    judge,
    node_problems,
    preflight_problems,
)
from sparkwarden.cluster.watch import MENDED_BY_RESTART, Look, Watch, observe
from sparkwarden.config.schema import ClusterNode, Config, GatewayConfig, parse
from sparkwarden.restart.journal import Journal, RunRecord
from sparkwarden.restart.step_names import CLUSTER_STEPS, RAY_STEPS, cluster_steps
from sparkwarden.surfaces import exporter, status_text
from sparkwarden.vllm.client import ChatOutcome, Health, VllmClient
from tests.kits.fulljournal import FULL, fill_when

IMAGE = "sha256:" + "a" * 64
TWO = {"nodes": [{"name": "a", "engine": ["x"]}, {"name": "b", "ssh": "b", "engine": ["y"]}]}


def make_config(tmp_path: Path, **cluster: Any) -> Config:
    return parse(
        {
            "llm": {"containers": ["vllm-head"], "base_url": "http://127.0.0.1:8000"},
            "state": {"dir": str(tmp_path / "state")},
            "cluster": {
                "nodes": [
                    {"name": "head", "engine": ["vllm-head"], "voice": ["stt"]},
                    {"name": "w1", "ssh": "root@spark2", "engine": ["vllm-w1"]},
                ],
                **cluster,
            },
        }
    )


class FakeLink:
    """Each node's engines, voice and memory; records every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.engines = {
            "head": {"vllm-head": {"id": "h" * 64, "image": IMAGE, "status": "running"}},
            "w1": {"vllm-w1": {"id": "w" * 64, "image": IMAGE, "status": "running"}},
        }
        self.voice = {"head": {"stt": "running"}, "w1": {}}
        self.unreachable: set[str] = set()
        #: (node, verb): that node stops answering from that call on
        self.lose_at: tuple[str, str] | None = None
        self.low_memory: set[str] = set()

    def call(self, node: ClusterNode, verb: str, params: Params, timeout: float) -> dict[str, Any]:
        assert timeout > 0
        self.calls.append((node.name, verb))
        if self.lose_at == (node.name, verb):
            self.unreachable.add(node.name)
        if node.name in self.unreachable:
            raise NodeUnreachable(
                node.name, "ssh: connect to host spark2 port 22: No route to host"
            )
        engines = self.engines[node.name]
        if verb == "inspect":
            return {
                "version": "0.1",
                "engines": [{"name": n, **e} for n, e in engines.items()],
                "memory": {"available_gib": 100.0, "total_gib": 121.0},
            }
        if verb == "pause":
            paused = [n for n, s in self.voice[node.name].items() if s == "running"]
            self.voice[node.name].update(dict.fromkeys(paused, "paused"))
            return {"paused": paused}
        if verb == "resume":
            self.voice[node.name].update(dict.fromkeys(params.voice, "running"))
            return {"resumed": params.voice}
        if verb == "stop":
            for engine in engines.values():
                engine["status"] = "exited"
            return {"stopped": list(engines), "now": {n: e["status"] for n, e in engines.items()}}
        if verb == "drop":
            if node.name in self.low_memory:
                said = "memory did not come back: 20.0 GiB available"
                raise NodeFailed(node.name, said, {"ok": False, "available_after_gib": 20.0})
            return {"summary": "20.0 -> 100.0 GiB"}
        if verb == "start":
            for engine in engines.values():
                engine["status"] = "running"
            return {"started": {n: {"id": e["id"]} for n, e in engines.items()}}
        raise AssertionError(verb)

    def verbs(self, verb: str) -> list[str]:
        return [node for node, v in self.calls if v == verb]


class FakeEngine:
    def __init__(self) -> None:
        self.chats = 0

    def health(self, timeout: float = 10.0) -> Health:
        return Health("up", "HTTP 200")

    def served_model(self, timeout: float = 30.0) -> str:
        return "m"

    def chat(self, model: str, timeout: float) -> ChatOutcome:
        self.chats += 1
        return ChatOutcome(True, "answered", "ready")


def run(tmp_path: Path, link: FakeLink) -> tuple[Any, Journal, FakeEngine]:
    config = make_config(tmp_path)
    journal = Journal(config.state.dir)
    engine = FakeEngine()
    parts = ClusterParts(link, cast(VllmClient, engine), journal, sleep=lambda _s: None)
    return restart_cluster(config, "manual", parts), journal, engine


def test_healthy_run_stops_head_first_starts_workers_first(tmp_path: Path) -> None:
    link = FakeLink()
    outcome, journal, engine = run(tmp_path, link)
    assert outcome.ok, outcome.error
    acts = [c for c in link.calls if c[1] in ("stop", "start")]
    assert acts == [("head", "stop"), ("w1", "stop"), ("w1", "start"), ("head", "start")]
    assert sorted(link.verbs("drop")) == ["head", "w1"]
    assert link.voice["head"]["stt"] == "running" and link.verbs("resume") == ["head"]
    assert engine.chats == 1
    record = journal.run(outcome.run_id)
    assert record is not None and record.result == "ok"
    assert [s.name for s in record.steps] == list(CLUSTER_STEPS)
    drop = next(s for s in record.steps if s.name == "drop_caches")
    assert set(drop.detail["nodes"]) == {"head", "w1"}  # each node's figures


def test_a_worker_is_asked_once_per_step_its_stop_answer_is_the_confirming_look(
    tmp_path: Path,
) -> None:
    """Each call to a worker is an SSH round trip and a Python start on it: confirm_stopped
    reads the worker's engines from its stop answer (read after its docker stop), and looks
    at the head, stopped before it, again."""
    link = FakeLink()
    outcome, journal, _ = run(tmp_path, link)
    assert outcome.ok, outcome.error
    assert [v for n, v in link.calls if n == "w1"] == [
        "inspect",
        "stop",
        "drop",
        "start",
        "inspect",
    ]
    assert link.calls[link.calls.index(("w1", "stop")) + 1] == ("head", "inspect")
    record = journal.run(outcome.run_id)
    assert record is not None
    confirm = next(s for s in record.steps if s.name == "confirm_stopped")
    assert confirm.detail["nodes"] == {"head": {"vllm-head": "exited"}, "w1": {"vllm-w1": "exited"}}
    assert confirm.detail["read_at_stop"] == ["w1"]


def test_confirm_stopped_fails_on_what_a_stop_answer_says_is_up(tmp_path: Path) -> None:
    link = FakeLink()
    original = link.call

    def came_back(node: ClusterNode, verb: str, params: Params, timeout: float) -> dict[str, Any]:
        answer = original(node, verb, params, timeout)
        if verb == "stop" and node.name == "w1":
            answer["now"] = {"vllm-w1": "restarting"}
        return answer

    link.call = came_back  # type: ignore[method-assign]
    outcome, _, _ = run(tmp_path, link)
    assert outcome.failed_step == "confirm_stopped"
    assert outcome.error == "still up w1: vllm-w1"
    assert link.verbs("drop") == [] and link.verbs("start") == []


def test_a_stop_answer_without_its_read_gets_a_look_of_its_own(tmp_path: Path) -> None:
    """A worker's older sparkwarden answers its stop without ``now``: it is inspected again."""
    link = FakeLink()
    original = link.call

    def older(node: ClusterNode, verb: str, params: Params, timeout: float) -> dict[str, Any]:
        answer = original(node, verb, params, timeout)
        if verb == "stop":
            answer.pop("now")
        return answer

    link.call = older  # type: ignore[method-assign]
    outcome, _, _ = run(tmp_path, link)
    assert outcome.ok, outcome.error
    assert [v for n, v in link.calls if n == "w1"][1:3] == ["stop", "inspect"]


def test_node_verbs_import_only_what_they_use() -> None:
    """``sparkwarden node VERB`` is a fresh Python on a worker for every step: no logger but for
    drop (structlog about 0.2 s), no Docker SDK for drop (about 0.2 s), never the schema."""
    code = (
        "import contextlib, io, sys\n"
        "import sparkwarden.actions.node\n"
        "print(sorted(m for m in ('docker', 'structlog') if m in sys.modules))\n"
        "from sparkwarden.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['node', 'resume', '--json'])\n"
        "print(sorted(m for m in ('structlog', 'pydantic', 'httpx') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.splitlines() == ["[]", "[]"], out.stdout + out.stderr


def test_unreachable_node_at_preflight_touches_nothing(tmp_path: Path) -> None:
    link = FakeLink()
    link.unreachable.add("w1")
    outcome, journal, _ = run(tmp_path, link)
    assert not outcome.ok and outcome.failed_step == "preflight"
    assert "w1" in (outcome.error or "") and "unreachable" in (outcome.error or "")
    assert {verb for _, verb in link.calls} == {"inspect"}
    record = journal.run(outcome.run_id)
    assert record is not None
    results = {s.name: s.result for s in record.steps}
    assert results == {
        **dict.fromkeys(CLUSTER_STEPS, "skipped"),
        "preflight": "failed",
        "resume_voice": "ok",  # always: nothing to resume here
    }


def test_mismatched_images_refused(tmp_path: Path) -> None:
    link = FakeLink()
    link.engines["w1"]["vllm-w1"]["image"] = "sha256:" + "b" * 64
    outcome, _, _ = run(tmp_path, link)
    assert outcome.failed_step == "preflight" and "image differs" in (outcome.error or "")
    assert {verb for _, verb in link.calls} == {"inspect"}


def test_memory_not_back_on_one_node_starts_nothing_and_resumes_voice(tmp_path: Path) -> None:
    link = FakeLink()
    link.low_memory.add("w1")
    outcome, journal, engine = run(tmp_path, link)
    assert outcome.failed_step == "drop_caches" and "w1" in (outcome.error or "")
    assert link.verbs("start") == [] and engine.chats == 0
    assert link.voice["head"]["stt"] == "running"
    # the node whose memory did not come back keeps its reading: the memory trend needs it
    assert journal.memory_after_drops(0.0)["w1"] == [20.0]


@pytest.mark.parametrize("verb", ["stop", "drop"])
def test_node_lost_mid_run_is_not_touched_again_and_named(tmp_path: Path, verb: str) -> None:
    nodes = [
        {"name": "head", "engine": ["vllm-head"], "voice": ["stt"]},
        {"name": "w1", "ssh": "root@spark2", "engine": ["vllm-w1"], "voice": ["tts"]},
    ]
    config = make_config(tmp_path, nodes=nodes)
    link = FakeLink()
    link.voice["w1"] = {"tts": "running"}
    link.lose_at = ("w1", verb)
    journal = Journal(config.state.dir)
    parts = ClusterParts(link, cast(VllmClient, FakeEngine()), journal, sleep=lambda _s: None)
    outcome = restart_cluster(config, "manual", parts)
    assert (
        not outcome.ok
        and outcome.failed_step == {"stop": "stop_workers", "drop": "drop_caches"}[verb]
    )
    assert "node w1 is unreachable" in (outcome.error or "")
    assert "left paused on w1 (tts)" in (outcome.error or "")
    lost_at = link.calls.index(("w1", verb))
    assert "w1" not in [n for n, _ in link.calls[lost_at + 1 :]]  # never touched again
    assert link.verbs("start") == []  # nothing started
    assert link.voice["head"]["stt"] == "running"  # resumed where it could be
    record = journal.runs(limit=1)[0]
    assert record.plan["cluster_voice_left"] == {"w1": ["tts"]}
    assert left_paused(journal.runs(limit=5)) == {"w1": ["tts"]}  # the next run resumes it
    resume = next(s for s in record.steps if s.name == "resume_voice")
    assert resume.result == "failed" and resume.detail["left_paused"] == {"w1": ["tts"]}
    journal.close()


def test_a_recreated_container_fails_the_start(tmp_path: Path) -> None:
    link = FakeLink()
    original = link.call

    def recreate(node: ClusterNode, verb: str, params: Params, timeout: float) -> dict[str, Any]:
        answer = original(node, verb, params, timeout)
        if verb == "start" and node.name == "w1":
            answer["started"]["vllm-w1"]["id"] = "x" * 64
        return answer

    link.call = recreate  # type: ignore[method-assign]
    outcome, _, _ = run(tmp_path, link)
    assert outcome.failed_step == "start_workers" and "recreated" in (outcome.error or "")
    assert link.verbs("start") == ["w1"]  # the head was not started against it


def view(name: str, role: str, status: str | None = "running") -> NodeView:
    if status is None:
        return NodeView(name, role, None, "unreachable: ssh: Connection timed out")  # type: ignore[arg-type]
    answer = {
        "version": "0.1",
        "engines": [{"name": f"e-{name}", "status": status, "image": IMAGE}],
        "memory": {"available_gib": 9.0, "total_gib": 12.0},
    }
    return NodeView(name, role, answer)  # type: ignore[arg-type]


def test_a_dead_worker_is_a_crash_though_health_says_200() -> None:
    verdict = judge([view("head", "head"), view("w1", "worker", "exited")], "up")
    assert verdict.state == "crashed" and "w1" in verdict.summary and "200" not in verdict.summary
    assert "/health says up" in verdict.summary


def test_unreachable_node_is_reported_not_guessed() -> None:
    verdict = judge([view("head", "head"), view("w1", "worker", None)], "up")
    assert verdict.state == "unknown" and "w1" in verdict.summary
    assert "unreachable" in verdict.nodes["w1"]


def test_head_down_leaves_stranded_ranks() -> None:
    verdict = judge([view("head", "head", "exited"), view("w1", "worker")], "loading")
    assert verdict.state == "head-down" and "w1" in verdict.summary


def test_serving_and_down() -> None:
    assert judge([view("head", "head"), view("w1", "worker")], "up").state == "serving"
    down = [view("head", "head", "exited"), view("w1", "worker", "exited")]
    assert judge(down, "loading").state == "down"
    assert judge([view("head", "head"), view("w1", "worker")], "dead").state == "unhealthy"


def test_status_on_the_head_exits_1_for_an_unreachable_node_or_a_dead_worker() -> None:
    """The head's own snapshot is sound (daemon running, its LLM running): only the cluster
    field can make ``sparkwarden status`` exit 1, and its text has one line per node."""
    sound = {"daemon": {"running": True}, "llm": {"status": "running"}}
    serving = as_json([view("head", "head"), view("w1", "worker")], None)
    assert serving["problems"] == []
    assert status_text.exit_code({**sound, "cluster": serving}) == status_text.EXIT_OK
    for bad, said in (
        (view("w1", "worker", "exited"), "e-w1 is exited"),
        (view("w1", "worker", None), "unreachable"),
    ):
        cluster = as_json([view("head", "head"), bad], None)
        assert any(said in p for p in cluster["problems"]), cluster
        assert status_text.exit_code({**sound, "cluster": cluster}) == status_text.EXIT_PROBLEM
    lines = status_text.format_text({**sound, "cluster": cluster}).splitlines()
    assert lines[-3].startswith("cluster:     unknown: no answer from w1")
    assert re.match(r"  head +head +reachable +e-head running, 9.0/12.0 GiB available$", lines[-2])
    assert re.match(
        r"  w1 +worker +UNREACHABLE +unreachable: ssh: Connection timed out$", lines[-1]
    )


def node(name: str, role: str, command: list[str], auto_remove: bool = False) -> NodeView:
    engine = {"name": f"e-{name}", "status": "running", "command": command}
    return NodeView(name, role, {"engines": [{**engine, "auto_remove": auto_remove}]})  # type: ignore[arg-type]


RANK = ["vllm", "serve", "m", "--nnodes=2", "--master-port", "29501"]


def said(findings: list[Any]) -> list[tuple[str, str]]:
    return [(f.severity, f.message) for f in findings]


def test_doctor_sees_the_native_set_up_and_what_it_lacks() -> None:
    head = node("head", "head", ["bash", "-c", " ".join([*RANK, "--node-rank", "0"])])
    good = node("w1", "worker", [*RANK, "--node-rank", "1", "--headless", "--master-addr", "x"])
    findings = said(check_setup([head, good], "native"))
    assert ("info", "sees the native set-up on every node (2 nodes)") in findings
    assert ("info", "native ranks complete: head rank 0, w1 rank 1") in findings
    assert not [f for f in findings if f[0] == "error"]
    bad = node("w1", "worker", [*RANK, "--node-rank", "0"])
    (error,) = [m for s, m in said(check_setup([head, bad], "native")) if s == "error"]
    assert "w1: --node-rank 0 also on head" in error
    assert "w1: a worker without --headless" in error and "without --master-addr" in error


SERVE = "exec vllm serve m --distributed-executor-backend ray -tp 2"
RAY_HEAD = ["/bin/bash", "-c", f"ray start --head --port=6379 && {SERVE}"]
RAY_WORKER = ["ray", "start", "--block", "--address=h:6379"]


def test_doctor_sees_the_ray_set_up_and_what_it_lacks() -> None:
    views = [node("head", "head", RAY_HEAD), node("w1", "worker", RAY_WORKER)]
    findings = said(check_setup(views, "ray"))
    assert ("info", "sees the ray set-up on every node (2 nodes)") in findings
    assert ("info", "Ray set-up complete on 2 nodes") in findings
    assert not [f for f in findings if f[0] == "error"]
    assert ("error", "cluster.setup is 'native' but the containers show the ray set-up") in said(
        check_setup(views, "native")
    )
    # NVIDIA's playbook: Ray alone in the containers, vllm serve exec'd into the head's
    exec_d = ["/bin/bash", "-c", "ray start --block --head --port=6379"]
    wide = ["bash", "-c", f"ray start --head && {SERVE.replace('-tp 2', '-tp 2 -pp 2')}"]
    joinless = ["ray", "start", "--head"]
    for head, worker, lacking in (
        (exec_d, RAY_WORKER, "head: vllm serve is not in the head container's command"),
        (wide, RAY_WORKER, "head: the engine asks 4 GPU(s) (tensor x pipeline parallel)"),
        (RAY_HEAD, joinless, "w1: a worker whose container does not run ray start --address"),
        (
            ["bash", "-c", "ray start --head && exec vllm serve m -tp 2"],
            RAY_WORKER,
            "head: vllm serve without --distributed-executor-backend ray",
        ),
        (
            ["bash", "-c", f"ray start --head --block && {SERVE}"],
            RAY_WORKER,
            "head: ray start --head --block never returns: vllm serve never runs",
        ),
        (
            RAY_HEAD,
            ["ray", "start", "--address=h:6379"],
            "w1: ray start without --block returns at once, and its container exits",
        ),
        (
            ["bash", "-c", f"ray start --head --port=6380 && {SERVE}"],
            RAY_WORKER,
            "w1: joins port 6379, but the head's GCS listens on 6380",
        ),
        (
            RAY_HEAD,
            ["ray", "start", "--block", "--head", "--address=h:6379"],
            "w1: a worker that starts a Ray head of its own",
        ),
        (
            ["bash", "-c", SERVE],
            RAY_WORKER,
            "head: the head's container does not run ray start --head",
        ),
    ):
        views = [node("head", "head", head), node("w1", "worker", worker)]
        (error,) = [m for s, m in said(check_setup(views, "ray")) if s == "error"]
        assert error.startswith("Ray set-up incomplete: ") and lacking in error, error


def test_stopping_before_anything_is_touched_touches_nothing(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    link, journal = FakeLink(), Journal(config.state.dir)
    parts = ClusterParts(link, cast(VllmClient, FakeEngine()), journal, should_abort=lambda: True)
    outcome = restart_cluster(config, "manual", parts)
    assert not outcome.ok and "sparkwarden is stopping: nothing was touched" in str(outcome.error)
    assert {verb for _node, verb in link.calls} == {"inspect"}  # the preflight's look only
    assert link.voice["head"]["stt"] == "running"


def test_a_handed_over_boot_is_proven_not_restarted_and_its_marks_carried(tmp_path: Path) -> None:
    """The next daemon's run for a boot the cut run started: the preflight, then from the wait
    for /health on; nothing stopped or started; the cut run's marks in its plan, so that it is
    proven again if it is cut short too."""
    config = make_config(tmp_path)
    link, journal, engine = FakeLink(), Journal(config.state.dir), FakeEngine()
    parts = ClusterParts(link, cast(VllmClient, engine), journal, sleep=lambda _s: None)
    marks = {"stop_head_sent": True, "llm_started_at": 1.0, "cluster_started": {"w1": {"x": "t"}}}
    outcome = restart_cluster(
        config,
        "repair",
        parts,
        adopt={"head": ["stt"]},
        prove=Proving("the boot run #7 started", marks),
    )
    assert outcome.ok, outcome.error
    assert not {"stop", "start", "drop", "pause"} & {verb for _node, verb in link.calls}
    assert engine.chats == 1 and link.verbs("resume") == ["head"]
    (record,) = journal.runs(1)
    assert {k: record.plan[k] for k in marks} == marks
    said = {s.name: s.result for s in record.steps}
    assert said["stop_head"] == said["start_head"] == "skipped" and said["chat_probe"] == "ok"
    assert any("not taken: the boot run #7 started" in str(s.detail) for s in record.steps)


def test_a_boot_is_the_run_s_own_only_with_every_start_it_recorded() -> None:
    def views(head_at: str, w1_at: str, w1_up: bool = True) -> list[NodeView]:
        def answer(name: str, at: str) -> dict[str, Any]:
            return {"engines": [{"name": f"e-{name}", "status": "running", "started_at": at}]}

        return [
            NodeView("head", "head", answer("head", head_at)),
            NodeView("w1", "worker", answer("w1", w1_at) if w1_up else None, "unreachable"),
        ]

    started = {"head": {"e-head": "t1"}, "w1": {"e-w1": "t0"}}
    assert booted_by(views("t1", "t0"), started)
    assert not booted_by(views("t2", "t0"), started)  # the head restarted by hand since
    assert not booted_by(views("t1", "t0", w1_up=False), started)
    assert not booted_by(views("t1", "t0"), {})  # cut before its starts were recorded


def test_voice_left_on_a_node_no_longer_configured_is_named(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    answers, failures = resume_left(config, FakeLink(), {"head": ["stt"], "spark9": ["tts"]})
    assert list(answers) == ["head"]
    assert failures == {"spark9": "no node named spark9 in [cluster] now: resume its voice by hand"}


def test_the_ray_containers_the_docs_show_are_a_complete_set_up() -> None:
    """docs/clusters.md's two container commands, read as doctor reads them."""
    text = (Path(__file__).parents[2] / "docs" / "clusters.md").read_text()

    def command(role: str) -> list[str]:
        shown = re.search(rf"^{role}'s container: +(.+)$", text, re.M)
        assert shown, role
        return shlex.split(shown[1])

    views = [node("head", "head", command("head")), node("w1", "worker", command("worker"))]
    assert ("info", "Ray set-up complete on 2 nodes") in said(check_setup(views, "ray"))


@pytest.mark.parametrize(
    ("head", "worker"),
    [
        (["sh", "-c", f"ray start --head; {SERVE}"], RAY_WORKER),  # ";" against the word
        (["bash", "-lc", f"ray start --head&&{SERVE}"], RAY_WORKER),
        (RAY_HEAD, ["ray", "start", "--block", "--address", "h:6379"]),  # a space, not "="
        (RAY_HEAD, ["sh", "-c", "ray start --address=h:6379 && sleep infinity"]),
    ],
)
def test_doctor_reads_ray_commands_as_operators_write_them(
    head: list[str], worker: list[str]
) -> None:
    views = [node("head", "head", head), node("w1", "worker", worker)]
    assert ("info", "Ray set-up complete on 2 nodes") in said(check_setup(views, "ray"))


def test_a_ray_cluster_starts_its_head_before_the_workers_that_join_it() -> None:
    assert cluster_steps("native") == cluster_steps("launcher") == CLUSTER_STEPS
    ray = cluster_steps("ray")
    assert ray == RAY_STEPS and ray.index("start_head") < ray.index("start_workers")
    assert sorted(ray) == sorted(CLUSTER_STEPS) and ray[-2:] == ("resume_voice", "gateway_probe")


def test_doctor_names_the_launcher_set_up() -> None:
    idle = ["sleep", "infinity"]
    views = [node("head", "head", idle, True), node("w1", "worker", idle, True)]
    assert ("info", "sees the launcher set-up on every node (2 nodes)") in said(
        check_setup(views, "native")
    )
    mixed = [node("head", "head", idle, True), node("w1", "worker", ["python", "app.py"])]
    errors = [m for s, m in said(check_setup(mixed, "native")) if s == "error"]
    assert errors == [
        "set-up not recognised on w1/e-w1: no --nnodes, no ray start, not a --rm launcher container"
    ]
    lost = [node("head", "head", idle, True), view("w1", "worker", None)]
    assert "w1: not checked: unreachable" in said(check_setup(lost, "native"))[0][1]


@pytest.mark.parametrize(
    ("command", "is_vllm"),
    [
        ("vllm serve Qwen/Qwen3 --port 8000", True),
        ("/usr/bin/python3 /usr/local/bin/vllm serve Qwen/Qwen3", True),
        ("/usr/bin/python3 -u /standin/vllm serve m", True),
        ("python3 -m vllm.entrypoints.openai.api_server --model m", True),
        ("sleep infinity", False),
        ("tail -f /logs/vllm.log", False),
        ("/opt/vllm-env/bin/python -c import time", False),
        ("bash -c cd /workspace/vllm && sleep infinity", False),
        ("VLLM::EngineCore", False),
    ],
)
def test_a_launcher_rank_is_seen_by_vllm_s_own_program(command: str, is_vllm: bool) -> None:
    """What makes a running launcher container not idle: a vLLM process in it, by its
    program, not by a path that merely names vllm."""
    assert runs_vllm(command) is is_vllm


def test_a_ray_worker_s_raylet_keeps_a_launcher_container_from_idle() -> None:
    raylet = "/usr/local/lib/python3.12/dist-packages/ray/core/src/ray/raylet/raylet --node-ip=x"
    assert runs_engine(raylet) and not runs_vllm(raylet)
    assert not runs_engine("sleep infinity") and runs_engine("vllm serve m")


def test_a_launcher_container_whose_processes_cannot_be_read_is_never_called_idle() -> None:
    """``docker top`` refused (the container stopping at that moment, no ``ps`` for dockerd):
    the look says so and keeps Docker's own status; an idle verdict would restart a cluster."""
    attrs = {"Name": "/rank0", "Id": "abc", "Image": "sha256:1", "Config": {"Cmd": ["sleep"]}}
    attrs["State"] = {"Status": "running", "ExitCode": 0, "OOMKilled": False}

    class Docker:
        def __init__(self, top: list[str] | None) -> None:
            self.top = top

        def attrs(self, _name: str) -> dict[str, Any]:
            return attrs

        def inspect(self, _name: str) -> ContainerState:
            return ContainerState.from_inspect(attrs)

        def processes(self, name: str) -> list[str]:
            if self.top is None:
                raise ContainerError(f"top {name}: 409 Conflict: container is not running")
            return self.top

    def view(top: list[str] | None) -> dict[str, Any]:
        return engine_view(cast(DockerEngine, Docker(top)), "rank0", engine_process=True)

    unread = view(None)
    assert unread["status"] == "running" and "409" in unread["processes_unread"]
    assert view(["sleep infinity"])["status"] == "idle"
    assert view(["sleep infinity", "vllm serve m"])["status"] == "running"


def test_preflight_problems_name_each_node() -> None:
    assert preflight_problems([view("head", "head"), view("w1", "worker")]) == []
    missing = view("w1", "worker", "missing")
    assert preflight_problems([view("head", "head"), missing]) == ["w1: no container named e-w1"]
    older = view("w1", "worker")
    assert older.answer is not None
    older.answer["version"] = "0.0.9"  # a node not upgraded with the others
    assert preflight_problems([view("head", "head"), older]) == [
        "sparkwarden's version differs between nodes (install the same one everywhere): "
        "0.1 on head; 0.0.9 on w1"
    ]


def test_ssh_command_line_is_batch_with_a_connect_timeout(tmp_path: Path) -> None:
    config = make_config(tmp_path, connect_timeout="4s", ssh_config=str(tmp_path / "ssh_config"))
    assert config.cluster is not None
    head, worker = config.cluster.nodes
    argv = node_argv(worker, config.cluster, "stop", Params(engine=["vllm w1"], timeout=30))
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"] and "ConnectTimeout=4" in argv
    assert argv[-2] == "root@spark2"
    assert argv[-1].startswith("sparkwarden node stop --engine 'vllm w1' --timeout 30 ")
    assert node_argv(head, config.cluster, "drop", Params())[:3] == ["sparkwarden", "node", "drop"]


def test_answers_read_from_exit_code_and_json_line() -> None:
    assert interpret("w1", 0, 'noise\n{"ok": true, "x": 1}\n', "", True)["x"] == 1
    with pytest.raises(NodeUnreachable, match="w1 is unreachable: ssh: Permission denied"):
        interpret("w1", 255, "", "Permission denied (publickey).\n", True)
    with pytest.raises(NodeFailed, match="memory did not come back"):
        interpret("w1", 1, '{"ok": false, "error": "memory did not come back"}', "", True)
    with pytest.raises(NodeFailed, match="not found"):
        interpret("w1", 127, "", "sh: 1: sparkwarden: not found", True)


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"nodes": [{"name": "a", "engine": ["x"]}]}, "cluster.nodes: List should have at least 2"),
        (
            {"nodes": [{"name": "a", "engine": ["x"]}, {"name": "a", "ssh": "b", "engine": ["y"]}]},
            "node names listed more than once: a",
        ),
        (
            {
                "nodes": [
                    {"name": "a", "engine": ["x"]},
                    {"name": "b", "ssh": "-oProxyCommand=x", "engine": ["y"]},
                ]
            },
            "cluster.nodes.1.ssh",
        ),
        ({**TWO, "setup": "launcher"}, 'setup = "launcher" needs launcher = '),
        (
            {**TWO, "launcher": "./launch-cluster.sh"},
            'launcher is only read with setup = "launcher"',
        ),
        ({**TWO, "setup": "mpi"}, "cluster.setup"),
        # the daemon on the head watches llm.containers: the head's engine must be among them
        ({**TWO}, r"cluster.nodes.0.engine: the head's engine \(x\) must be in llm.containers"),
        (
            {"nodes": [{"name": "a", "engine": ["x"]}, {"name": "b", "engine": ["y"]}]},
            "every node but the head needs ssh .*: b",
        ),
        (
            {"nodes": [{"name": "a", "ssh": "a", "engine": ["x"]}, TWO["nodes"][1]]},
            r"the first node \(a\) is the head, where this runs: no ssh",
        ),
        (
            {"nodes": [*TWO["nodes"], {"name": "c", "ssh": "b", "engine": ["z"]}]},
            "two nodes reached at the same ssh destination: b",
        ),
        (
            {
                "nodes": [
                    TWO["nodes"][0],
                    {"name": "b", "ssh": "b", "engine": ["y"], "voice": ["y"]},
                ]
            },
            "a container listed as both engine and voice on b",
        ),
        ({**TWO, "confirm": 0}, "cluster.confirm"),
    ],
)
def test_bad_cluster_config_named(tmp_path: Path, cluster: dict[str, Any], message: str) -> None:
    data = {"llm": {"containers": ["llm"], "base_url": "http://127.0.0.1:8000"}, "cluster": cluster}
    with pytest.raises(ConfigError, match=message):
        parse(data)


def record(run_id: int, result: str, plan: dict[str, Any]) -> RunRecord:
    return RunRecord(run_id, "manual", result, 0.0, None, None, None, None, None, plan)  # type: ignore[arg-type]


def test_left_paused_gathers_cut_runs_back_to_the_last_finished_one() -> None:
    runs = [
        record(5, "running", {"cluster": ["head", "w1"], "cluster_voice": {"w1": ["tts"]}}),
        record(4, "ok", {"container": "llm"}),  # a single-host run: not the cluster's
        record(3, "interrupted", {"cluster": ["head"], "cluster_voice": {"head": ["stt"]}}),
        record(2, "ok", {"cluster": ["head"], "cluster_voice": {"head": ["old"]}}),
        record(1, "interrupted", {"cluster": ["head"], "cluster_voice": {"head": ["older"]}}),
    ]
    assert left_paused(runs) == {"w1": ["tts"], "head": ["stt"]}


def test_adopted_voice_is_resumed_on_its_node(tmp_path: Path) -> None:
    link = FakeLink()
    link.voice["w1"] = {"tts": "paused"}  # a run killed on the head had paused it
    config = make_config(tmp_path)
    journal = Journal(config.state.dir)
    parts = ClusterParts(link, cast(VllmClient, FakeEngine()), journal, sleep=lambda _s: None)
    outcome = restart_cluster(config, "manual", parts, adopt={"w1": ["tts"]})
    assert outcome.ok, outcome.error
    assert link.voice["w1"]["tts"] == "running" and sorted(link.verbs("resume")) == ["head", "w1"]


def test_voice_left_on_a_node_still_unreachable_is_kept_for_the_next_run(tmp_path: Path) -> None:
    """A run that fails at preflight (w1 still unreachable) keeps, for the next run, the voice an
    earlier run left paused there: it is neither resumed nor forgotten."""
    link = FakeLink()
    link.voice["w1"] = {"tts": "paused"}
    link.unreachable.add("w1")
    config = make_config(tmp_path)
    journal = Journal(config.state.dir)
    parts = ClusterParts(link, cast(VllmClient, FakeEngine()), journal, sleep=lambda _s: None)
    outcome = restart_cluster(config, "manual", parts, adopt={"w1": ["tts"]})
    assert not outcome.ok and outcome.failed_step == "preflight" and outcome.nodes == ("w1",)
    assert "left paused on w1 (tts)" in (outcome.error or "")
    assert left_paused(journal.runs(limit=10)) == {"w1": ["tts"]}
    link.unreachable.clear()  # w1 answers again: the next run resumes it
    outcome = restart_cluster(config, "manual", parts, adopt=left_paused(journal.runs(limit=10)))
    assert outcome.ok, outcome.error
    assert link.voice["w1"]["tts"] == "running"
    assert outcome.container_id == "h" * 64  # what the daemon owes a retry to, had it failed


def test_history_columns_fit_a_clusters_step_names(tmp_path: Path) -> None:
    from sparkwarden.actions.history import format_run

    outcome, journal, _ = run(tmp_path, FakeLink())
    record = journal.run(outcome.run_id)
    assert record is not None
    text = format_run(record)
    assert re.search(r"^    confirm_stopped +ok +\d", text, re.MULTILINE), text
    assert re.search(r"^    workers_running +ok +\d", text, re.MULTILINE), text


def test_a_dead_rank_seen_twice_in_a_row_wants_the_cluster_restarted() -> None:
    from sparkwarden.cluster.verdict import ClusterVerdict
    from sparkwarden.cluster.watch import Look, Watch, observe

    def looks(*states: str, unreachable: tuple[str, ...] = ()) -> list[Any]:
        watch, seen = Watch(), []
        for t, state in enumerate(states):
            verdict = ClusterVerdict(state, f"{state} summary", {"w1": "unreachable: timed out"})  # type: ignore[arg-type]
            got = observe(watch, Look(float(t), verdict, unreachable), confirm=2)
            watch = got.watch
            seen.append(got)
        return seen

    def restarts(*states: str) -> list[bool]:
        return [s.restart is not None for s in looks(*states)]

    assert restarts("serving", "crashed") == [False, False]  # once may be a rank mid-restart
    assert restarts("crashed", "crashed") == [False, True]
    assert restarts("head-down", "crashed") == [False, True]  # both mended only by a restart
    assert restarts("crashed", "unknown", "crashed") == [False] * 3  # never guessed
    assert restarts("down", "down", "down") == [False] * 3  # stopped by someone: the head's own
    # after it asked, the streak starts again: no second restart from the same two looks
    assert restarts("crashed", "crashed", "crashed") == [False, True, False]
    said = looks("crashed", "crashed")[1].restart
    assert said == "cluster crashed on 2 checks in a row: crashed summary"
    # a node that stops answering is told once, and again when it is back
    seen = looks("unknown", "unknown", unreachable=("w1",))
    assert [s.lost for s in seen] == [("w1",), ()]


def test_the_daemon_on_the_head_wants_a_restart_and_names_the_lost_node(tmp_path: Path) -> None:
    from sparkwarden.cluster.verdict import ClusterVerdict
    from sparkwarden.cluster.watch import Look
    from sparkwarden.daemon import decide
    from sparkwarden.daemon import intents as do

    config = make_config(tmp_path)
    crashed = ClusterVerdict("crashed", "the engine on w1 is down", {})
    mind, said = decide.on_cluster(decide.Mind(), Look(10.0, crashed), config)
    assert mind.pending is None and said == []
    mind, said = decide.on_cluster(mind, Look(20.0, crashed), config)
    assert mind.pending is not None and mind.pending.reason == "crash"
    assert "the engine on w1 is down" in mind.pending.why
    # a look taken before the last run ended says nothing of the cluster that run left
    old = decide.Mind(last_run_end=30.0)
    assert decide.on_cluster(old, Look(25.0, crashed), config) == (old, [])
    lost = ClusterVerdict("unknown", "no answer from w1", {"w1": "unreachable: ssh timed out"})
    mind, said = decide.on_cluster(decide.Mind(), Look(40.0, lost, ("w1",)), config)
    notes = [i for i in said if isinstance(i, do.Notify)]
    assert [(n.kind, n.subject) for n in notes] == [("node_unreachable", "w1")]
    assert mind.pending is None  # an unreachable node is reported, never acted on


def test_the_heads_last_look_is_published_node_by_node() -> None:
    """What status --json's ``cluster_watch`` and the exporter's sparkwarden_cluster_node_up
    (ClusterNodeDown) are made of: a node unreachable, or its engine down, is not up."""
    from sparkwarden.cluster.verdict import ClusterVerdict
    from sparkwarden.cluster.watch import Look, Watch
    from sparkwarden.daemon import decide, publish

    assert publish._cluster_watch(decide.Mind()) is None  # a lone host: nothing
    lines = {"head": "reachable, running", "w1": "unreachable", "w2": "reachable, exited"}
    look = Look(1e9, ClusterVerdict("unknown", "no answer from w1", lines), ("w1",), ("head",))
    said = publish._cluster_watch(decide.Mind(cluster=Watch(1, look)))
    assert said is not None and said["state"] == "unknown" and said["unreachable"] == ["w1"]
    assert said["nodes"] == {
        "head": {"reachable": True, "engine_up": True},
        "w1": {"reachable": False, "engine_up": False},
        "w2": {"reachable": True, "engine_up": False},
    }


class LoadingEngine(FakeEngine):
    def health(self, timeout: float = 10.0) -> Health:
        return Health("loading", "HTTP 503 (loading)")


def test_the_heads_engine_down_while_loading_fails_the_wait_at_once(tmp_path: Path) -> None:
    """An operator's stop (or a crash) of the head during a cold boot fails the run at the next
    poll, not after health_timeout, with voice resumed; a daemon stopping hands the boot over:
    the run left open, voice still paused (the next daemon proves the boot, then resumes it)."""

    class DiesAtStart(FakeLink):
        def call(self, node: ClusterNode, verb: str, params: Params, timeout: float) -> Any:
            answer = super().call(node, verb, params, timeout)
            if (node.name, verb) == ("head", "start"):
                self.engines["head"]["vllm-head"]["status"] = "exited"
            return answer

    config = make_config(tmp_path)
    for link, abort in ((DiesAtStart(), False), (FakeLink(), True)):
        journal = Journal(config.state.dir)
        sleeps: list[float] = []
        parts = ClusterParts(
            link,
            cast(VllmClient, LoadingEngine()),
            journal,
            sleep=sleeps.append,
            # the stop arrives once the head is started: in the boot wait
            should_abort=lambda abort=abort, link=link: abort and ("head", "start") in link.calls,  # type: ignore[misc]
        )
        if abort:
            with pytest.raises(HandedOver, match="sparkwarden is stopping after"):
                restart_cluster(config, "manual", parts)
            (record,) = journal.runs(1)
            assert record.result == "running" and record.plan["handed_over"]  # for the next
            assert [s.result for s in record.steps if s.name == "wait_health"] == ["running"]
            assert link.voice["head"]["stt"] == "paused"  # never beside an unproven engine
        else:
            outcome = restart_cluster(config, "manual", parts)
            said = "the head's engine went down while loading: vllm-head is exited"
            assert outcome.failed_step == "wait_health" and said in (outcome.error or ""), outcome
            assert link.voice["head"]["stt"] == "running"  # voice resumed all the same
        assert len(sleeps) <= 1  # not a cold boot's worth of polls
        journal.close()


def test_a_launcher_that_does_not_return_is_ended_with_what_it_started(tmp_path: Path) -> None:
    """The launcher's own children (a ``docker run`` it waits for) go with it at the timeout,
    not left running in a process group no terminal reaches."""
    pid_file = tmp_path / "child"
    command = f"sleep 300 & echo $! > {shlex.quote(str(pid_file))}; wait"
    with pytest.raises(NodeFailed, match="the launcher did not return within 1s"):
        run_launcher(command, timeout=1)
    child = Path(f"/proc/{pid_file.read_text().strip()}")
    deadline = time.monotonic() + 10  # killed, then reaped by init
    while child.exists() and "State:\tZ" not in _read(child / "status"):
        assert time.monotonic() < deadline, "the launcher's child outlived it"
        time.sleep(0.05)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


# --- who started when, and whose move it was (#38) ---------------------------------------------


def ranked(name: str, role: str, started: str, **engine: Any) -> NodeView:
    """A node whose engine runs from the start ``started`` (its ``StartedAt``)."""
    base = view(name, role)
    (first,) = base.engines
    return NodeView(
        name, role, {**(base.answer or {}), "engines": [{**first, **engine, "started_at": started}]}
    )  # type: ignore[arg-type]


def stopped(name: str, term_at: float | None, died_at: float | None) -> NodeView:
    """A worker whose engine exited; ``term_at``: the SIGTERM of a ``docker stop`` before it."""
    base = view(name, "worker", "exited")
    (first,) = base.engines
    engine = {**first, "stopped": {"term_at": term_at, "died_at": died_at}}
    return NodeView(name, "worker", {**(base.answer or {}), "engines": [engine]})  # type: ignore[arg-type]


SERVED = {"head": {"e-head": "T0"}, "w1": {"e-w1": "T0"}, "w2": {"e-w2": "T0"}}


def test_a_rank_started_since_the_cluster_served_is_stale_and_mended_by_a_restart() -> None:
    """Docker's policy or an operator's docker restart on a worker: the new rank never rejoins
    the head, whose /health still says 200; every rank new is a cluster started anew."""
    proof = Proof(SERVED)
    cluster = [
        ranked("head", "head", "T0"),
        ranked("w1", "worker", "T1"),
        ranked("w2", "worker", "T0"),
    ]
    verdict = judge(cluster, "up", proof)
    assert verdict.state == "stale" and "w1: e-w1 started again at T1" in verdict.summary
    assert "restart the cluster as one" in verdict.summary
    assert "w1: e-w1 started again at T1, after the cluster's start" in node_problems(
        cluster, proof
    )
    look = Look(1.0, verdict)
    seen = observe(observe(Watch(), look, 2).watch, look, 2)
    assert seen.restart is not None and seen.restart.startswith("cluster stale on 2 checks")
    # the head started again against old ranks hangs as well
    head_new = [
        ranked("head", "head", "T1"),
        ranked("w1", "worker", "T0"),
        ranked("w2", "worker", "T0"),
    ]
    assert judge(head_new, "up", proof).state == "stale"
    anew = [
        ranked("head", "head", "T2"),
        ranked("w1", "worker", "T2"),
        ranked("w2", "worker", "T2"),
    ]
    assert judge(anew, "up", proof).state == "serving"
    same = [
        ranked("head", "head", "T0"),
        ranked("w1", "worker", "T0"),
        ranked("w2", "worker", "T0"),
    ]
    assert judge(same, "up", proof).state == "serving" and judge(same, "up").state == "serving"


def test_without_a_proven_start_dockers_own_count_tells_a_rank_it_started_again() -> None:
    again = [ranked("head", "head", "T0"), ranked("w1", "worker", "T1", restart_count=1)]
    verdict = judge(again, "up", Proof())
    assert verdict.state == "stale", verdict
    assert (
        "w1: e-w1 was started again by Docker's restart policy (RestartCount 1)" in verdict.summary
    )
    assert (
        judge([ranked("head", "head", "T0"), ranked("w1", "worker", "T1")], "up").state == "serving"
    )


def test_a_worker_stopped_by_hand_is_left_alone_and_named_with_what_ends_the_wait() -> None:
    proof = Proof(SERVED, runs=((100.0, 200.0),), stop_window=25.0)
    by_hand = [ranked("head", "head", "T0"), stopped("w1", 300.0, 302.0)]
    verdict = judge(by_hand, "up", proof)
    assert verdict.state == "stopped", verdict
    assert "stopped by hand: e-w1 on w1 (on w1: docker start e-w1), left alone" in verdict.summary
    assert verdict.state not in MENDED_BY_RESTART
    (problem,) = node_problems(by_hand, proof)
    assert problem == "w1: e-w1 is exited, stopped by hand (on w1: docker start e-w1)"
    # the run's own stop, a crash (no SIGTERM), a SIGTERM long before the exit: not by hand
    for worker in (
        stopped("w1", 150.0, 152.0),
        stopped("w1", None, 302.0),
        stopped("w1", 300.0, 400.0),
    ):
        assert judge([ranked("head", "head", "T0"), worker], "up", proof).state == "crashed"


def test_doctor_names_a_restart_policy_on_a_nodes_engine() -> None:
    head = node("head", "head", ["bash", "-c", " ".join([*RANK, "--node-rank", "0"])])
    worker = node("w1", "worker", [*RANK, "--node-rank", "1", "--headless", "--master-addr", "x"])
    (engine,) = worker.engines
    policed = NodeView("w1", "worker", {"engines": [{**engine, "restart_policy": "on-failure"}]})  # type: ignore[arg-type]
    (error,) = [(m, f) for s, m, f in fixes(check_setup([head, policed], "native")) if s == "error"]
    assert "w1: e-w1 has Docker's restart policy 'on-failure'" in error[0]
    assert "never rejoins the running head" in error[0]
    assert error[1] == "on w1: docker update --restart=no e-w1"
    assert not [f for f in fixes(check_setup([head, worker], "native")) if f[0] == "error"]


def fixes(findings: list[Any]) -> list[tuple[str, str, str]]:
    return [(f.severity, f.message, f.fix) for f in findings]


def test_what_a_killed_link_left_is_ended_by_the_next_link(tmp_path: Path) -> None:
    """``kill -9`` of a ``cluster restart`` leaves its ssh masters and their private folder;
    the next link the head makes (a run, a look, status) ends them. A living process's stays."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no process has now
    left = Path(tempfile.mkdtemp(prefix=f"{CONTROL_PREFIX}{gone.pid}-"))
    (left / "a1b2c3").touch()  # where a master's socket was
    alive = Path(tempfile.mkdtemp(prefix=f"{CONTROL_PREFIX}{os.getpid()}-"))
    config = make_config(tmp_path, ssh_config=str(tmp_path / "no-such-ssh-config"))
    assert config.cluster is not None
    try:
        link = SshLink(config.cluster)
        link.close()
        assert not left.exists() and alive.exists()
    finally:
        shutil.rmtree(left, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)


# --- one list of steps, one probe of the users' path (issue 34's drift) -------------------------


def test_a_cluster_runs_own_steps_are_in_the_metrics(tmp_path: Path) -> None:
    """``/metrics`` named a lone host's steps only: 7 of a cluster run's 12 were dropped."""
    outcome, _, _ = run(tmp_path, FakeLink())
    assert outcome.ok, outcome.error
    last = history.as_json(make_config(tmp_path), 1)[0]
    family = exporter.last_run_steps(last)
    assert [s.labels["step"] for s in family.samples] == [s["name"] for s in last["steps"]]
    assert [s["name"] for s in last["steps"]] == list(CLUSTER_STEPS)


class FakeGateway(FakeEngine):
    """The users' path: fails ``failing`` times (a cooldown), then answers."""

    def __init__(self, failing: int = 0) -> None:
        super().__init__()
        self.failing = failing

    def chat(self, model: str, timeout: float) -> ChatOutcome:
        self.chats += 1
        if self.chats <= self.failing:
            return ChatOutcome(False, "HTTP 429: cooling down")
        return ChatOutcome(True, "answered", "ready")


def gateway_run(tmp_path: Path, gateway: FakeGateway) -> tuple[Any, Journal]:
    config = make_config(tmp_path)
    config = config.model_copy(
        update={"gateway": GatewayConfig(url="http://127.0.0.1:4000/v1", model="users", timeout=5)}
    )
    journal = Journal(config.state.dir)
    clock = iter(range(10_000))
    parts = ClusterParts(
        FakeLink(),
        cast(VllmClient, FakeEngine()),
        journal,
        monotonic=lambda: float(next(clock)),
        sleep=lambda _s: None,
        gateway=cast(VllmClient, gateway),
    )
    return restart_cluster(config, "manual", parts), journal


def test_a_cluster_run_proves_the_users_path_after_voice_is_back(tmp_path: Path) -> None:
    """A cluster's head with a ``[gateway]`` never proved the users' path after its run."""
    gateway = FakeGateway(failing=1)
    outcome, journal = gateway_run(tmp_path, gateway)
    assert outcome.ok, outcome.error
    record = journal.run(outcome.run_id)
    assert record is not None
    assert [s.name for s in record.steps][-2:] == ["resume_voice", "gateway_probe"]
    probe = record.steps[-1]
    assert probe.result == "ok" and probe.detail["attempts"] == 2 and gateway.chats == 2


def test_a_users_path_that_never_answers_fails_the_cluster_run_at_its_probe(
    tmp_path: Path,
) -> None:
    outcome, journal = gateway_run(tmp_path, FakeGateway(failing=10_000))
    assert not outcome.ok and outcome.failed_step == "gateway_probe", outcome
    assert "the gateway http://127.0.0.1:4000 did not answer" in str(outcome.error)
    record = journal.run(outcome.run_id)
    assert record is not None and record.result == "failed"
    resumed = next(s for s in record.steps if s.name == "resume_voice")
    assert resumed.result == "ok"  # voice came back before the users' path was tried


def test_dry_run_on_a_clusters_head_prints_the_clusters_plan(tmp_path: Path) -> None:
    """``restart --dry-run`` on a head printed a lone host's 9 steps; ``restart`` there runs the
    cluster's."""
    config = make_config(tmp_path)
    link, nodes = FakeLink(), cluster_of(config).nodes
    views = [
        NodeView(n.name, "worker" if i else "head", link.call(n, "inspect", Params(n.engine), 1))
        for i, n in enumerate(nodes)
    ]
    plan = cluster_plan(config, views)
    assert [name for name, _ in plan] == list(CLUSTER_STEPS)
    said = dict(plan)
    assert "w1" in said["stop_workers"] and "vllm-head" in said["start_head"]
    assert said["gateway_probe"] == "nothing: no [gateway] configured"


def test_a_journal_that_cannot_be_written_still_resumes_every_nodes_voice(tmp_path: Path) -> None:
    """The one sequence's promise on a cluster too: a state dir that fills mid-run (after the
    start) ends the run failed, said as such, with the head's voice resumed unrecorded."""
    config, link = make_config(tmp_path), FakeLink()
    journal = Journal(config.state.dir)
    fill_when(journal, lambda: "start" in {verb for _node, verb in link.calls})
    parts = ClusterParts(link, cast(VllmClient, FakeEngine()), journal, sleep=lambda _s: None)
    outcome = restart_cluster(config, "manual", parts)
    assert not outcome.ok
    assert outcome.error == f"the journal could not be written: {FULL}"
    assert link.calls[-1] == ("head", "resume") and link.voice["head"]["stt"] == "running"
