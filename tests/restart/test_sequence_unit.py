"""The sequence with fake adapters and a fake clock: the paths real containers make slow."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sparkwarden.adapters.host import Memory
from sparkwarden.base.containers import ContainerState
from sparkwarden.base.errors import HandedOver
from sparkwarden.config.schema import parse
from sparkwarden.restart import sequence
from sparkwarden.restart.journal import Journal
from sparkwarden.restart.parts import Parts, Resume
from sparkwarden.restart.step_names import STEPS
from sparkwarden.vllm.client import ChatOutcome, Health
from tests.kits.fulljournal import FULL, fill_when

T0 = datetime(2026, 11, 30, 4, 30, tzinfo=UTC)


@dataclass
class FakeDocker:
    status: dict[str, str]
    calls: list[str] = field(default_factory=list)
    fail_on: str | None = None
    flags: dict[str, list[str]] = field(default_factory=dict)
    stop_timeouts: list[float] = field(default_factory=list)

    def inspect(self, name: str) -> ContainerState:
        return ContainerState(name, f"id-{name}", self.status[name], T0, None, 0, False)

    def _do(self, verb: str, name: str, new: str) -> None:
        self.calls.append(f"{verb} {name}")
        if self.fail_on == f"{verb} {name}":
            raise RuntimeError(f"bug while {verb} {name}")
        self.status[name] = new

    def pause(self, name: str) -> None:
        self._do("pause", name, "paused")

    def unpause(self, name: str) -> None:
        self._do("unpause", name, "running")

    def attrs(self, name: str) -> dict[str, Any]:
        return {"Config": {"Cmd": ["vllm", "serve", *self.flags.get(name, [])]}}

    def stop(self, name: str, timeout: float) -> None:
        self.stop_timeouts.append(timeout)
        self._do("stop", name, "exited")

    def start(self, name: str) -> None:
        self._do("start", name, "running")

    def close(self) -> None:
        pass


@dataclass
class FakeHost:
    available: list[float]  # what each look at MemAvailable returns, in order
    drops: int = 0

    def memory(self) -> Memory:
        value = self.available.pop(0) if len(self.available) > 1 else self.available[0]
        return Memory(value, 121.0)

    def drop_caches(self) -> None:
        self.drops += 1


class FakeVllm:
    def health(self, timeout: float = 10.0) -> Health:
        return Health("up", "HTTP 200")

    def served_model(self, timeout: float = 30.0) -> str:
        return "qwen"

    def key_refused(self, timeout: float = 10.0) -> str | None:
        return None

    running: int = 0

    def chat(self, model: str, timeout: float) -> ChatOutcome:
        return ChatOutcome(True, "answered 'ready'", "ready")

    def metrics(self, timeout: float = 10.0) -> str:
        return f'vllm:num_requests_running{{engine="0"}} {self.running}\n'

    def close(self) -> None:
        pass


@dataclass
class FakeGateway:
    """Answers (or not) in the order given; the last answer repeats."""

    answers: list[ChatOutcome]
    calls: int = 0

    def chat(self, model: str, timeout: float) -> ChatOutcome:
        self.calls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def close(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def build(
    tmp_path: Path,
    docker: FakeDocker,
    host: FakeHost,
    sections: dict[str, Any] | None = None,
    **memory: Any,
) -> tuple[Any, Parts]:
    config = parse(
        {
            "llm": {"containers": ["llm"], "base_url": "http://127.0.0.1:1"},
            "voice": {"containers": ["stt"]},
            "memory": {"start_min_available_gib": 60, **memory},
            "state": {"dir": str(tmp_path)},
            **(sections or {}),
        }
    )
    clock = Clock()
    parts = Parts(
        docker=docker,
        vllm=FakeVllm(),
        host=host,  # type: ignore[arg-type]
        journal=Journal(tmp_path),
        monotonic=clock.monotonic,
        sleep=clock.sleep,
    )
    return config, parts


def test_memory_comes_back_after_a_few_drops(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"})
    host = FakeHost([20.0, 30.0, 45.0, 70.0])  # before, then after each drop
    config, parts = build(tmp_path, docker, host, drop_interval="5s", start_wait="3m")
    outcome = sequence.restart(config, "manual", parts)
    assert outcome.ok
    step = next(s for s in parts.journal.runs(1)[0].steps if s.name == "drop_caches")
    assert step.detail["drops"] == 3 == host.drops
    assert step.detail["available_before_gib"] == 20.0
    assert step.detail["available_after_gib"] == 70.0


def test_memory_that_never_comes_back_keeps_the_llm_stopped(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"})
    host = FakeHost([10.0])
    config, parts = build(tmp_path, docker, host, drop_interval="5s", start_wait="60s")
    outcome = sequence.restart(config, "manual", parts)
    assert not outcome.ok and "not starting the LLM" in (outcome.error or "")
    assert "start llm" not in docker.calls
    assert host.drops == 13  # at 0 s, then every 5 s until the 60 s it may wait are up
    assert docker.status == {"llm": "exited", "stt": "running"}


def test_a_bug_in_a_step_still_resumes_voice_and_records_the_run(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"}, fail_on="stop llm")
    config, parts = build(tmp_path, docker, FakeHost([90.0]))
    outcome = sequence.restart(config, "manual", parts)
    assert not outcome.ok and "internal error: RuntimeError" in (outcome.error or "")
    assert docker.calls[-1] == "unpause stt" and docker.status["stt"] == "running"
    run = parts.journal.runs(1)[0]
    assert run.result == "failed"
    results = {s.name: s.result for s in run.steps}
    assert results["stop_llm"] == "failed" and results["resume_voice"] == "ok"
    assert [s.name for s in run.steps] == ["detect", "pause_voice", "stop_llm", *STEPS[3:]]


def test_repair_verifies_a_running_llm_and_resumes_only_what_was_paused(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "paused"})
    config, parts = build(tmp_path, docker, FakeHost([90.0]))
    resume = Resume("llm", ["stt"])
    outcome = sequence.restart(config, "repair", parts, resume=resume)
    assert outcome.ok
    assert docker.calls == ["unpause stt"]  # the LLM was neither stopped nor started
    results = {s.name: s.result for s in parts.journal.runs(1)[0].steps}
    assert results["stop_llm"] == results["start_llm"] == "skipped"
    assert results["chat_probe"] == "ok"


def test_repair_after_a_stop_was_sent_stops_and_starts_a_still_running_llm(
    tmp_path: Path,
) -> None:
    """Killed mid-``docker stop``: "running" may mean "on its way down"; finish the stop."""
    docker = FakeDocker({"llm": "running", "stt": "paused"})
    config, parts = build(tmp_path, docker, FakeHost([90.0]))
    resume = Resume("llm", ["stt"], llm_stopped=True)
    outcome = sequence.restart(config, "repair", parts, resume=resume)
    assert outcome.ok
    assert docker.calls == ["stop llm", "start llm", "unpause stt"]


def test_repair_verifies_a_candidate_started_meanwhile_and_never_starts_a_second(
    tmp_path: Path,
) -> None:
    docker = FakeDocker({"llm": "exited", "other": "running", "stt": "paused"})
    config, parts = build(tmp_path, docker, FakeHost([90.0]))
    config.llm.containers.append("other")
    resume = Resume("llm", ["stt"], llm_stopped=True)
    outcome = sequence.restart(config, "repair", parts, resume=resume)
    assert outcome.ok and outcome.container == "other"
    assert docker.calls == ["unpause stt"]


def test_repair_whose_detect_fails_still_resumes_the_adopted_voice(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "exited", "stt": "paused"})
    config, parts = build(tmp_path, docker, FakeHost([90.0]))
    resume = Resume("gone-llm", ["stt"])  # dropped from llm.containers meanwhile
    outcome = sequence.restart(config, "repair", parts, resume=resume)
    assert not outcome.ok and "no longer in llm.containers" in (outcome.error or "")
    assert docker.calls == ["unpause stt"]
    assert parts.journal.runs(1)[0].plan["voice_paused"] == ["stt"]  # written before detect


def test_a_journal_that_cannot_be_written_still_resumes_voice(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"})
    config, parts = build(tmp_path, docker, FakeHost([90.0]))
    fill_when(
        parts.journal, lambda: docker.status["llm"] == "running" and "start llm" in docker.calls
    )
    outcome = sequence.restart(config, "manual", parts)
    assert not outcome.ok
    assert outcome.error == f"the journal could not be written: {FULL}"
    assert docker.calls[-1] == "unpause stt" and docker.status["stt"] == "running"


def test_resume_from_an_interrupted_runs_plan() -> None:
    plan = {"voice_paused": ["stt"], "llm_stopped": True, "container": "llm"}
    assert Resume.from_plan(None, plan) == Resume("llm", ["stt"], True)
    assert Resume.from_plan("a", {}) == Resume("a", [], False)
    assert Resume.from_plan(None, {**plan, "llm_started": True}) == Resume(
        "llm", ["stt"], False, llm_started=True
    )  # the stop had finished and the start was sent: a running LLM is the one it started
    assert Resume.from_plan(None, {}) is None  # cut short before touching anything
    assert Resume.from_plan(None, {"voice_paused": ["stt"]}) == Resume(None, ["stt"])


def test_a_repair_that_cannot_even_begin_its_run_still_resumes_voice(tmp_path: Path) -> None:
    import sqlite3

    import pytest

    from sparkwarden.base.errors import SparkwardenError

    docker = FakeDocker({"llm": "running", "stt": "paused"})
    config, parts = build(tmp_path, docker, FakeHost([90.0]))

    def full(*_args: Any) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    parts.journal.begin_run = full  # type: ignore[method-assign]
    with pytest.raises(SparkwardenError, match="the journal could not be written"):
        sequence.restart(config, "repair", parts, resume=Resume("llm", ["stt"]))
    assert docker.calls == ["unpause stt"]


GATEWAY = {"gateway": {"url": "http://127.0.0.1:4000/v1", "model": "qwen", "timeout": "2m"}}
REFUSED = ChatOutcome(False, "HTTP 429: No deployments available for selected model")


def _step(parts: Parts, name: str) -> Any:
    return next(s for s in parts.journal.runs(1)[0].steps if s.name == name)


def test_a_gateway_that_lags_is_waited_for_and_its_lag_recorded(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"})
    config, parts = build(tmp_path, docker, FakeHost([100.0]), GATEWAY)
    parts.gateway = FakeGateway([REFUSED, REFUSED, ChatOutcome(True, "answered 'ready'", "ready")])  # type: ignore[assignment]
    outcome = sequence.restart(config, "manual", parts)
    assert outcome.ok and parts.gateway.calls == 3
    step = _step(parts, "gateway_probe")
    assert step.result == "ok" and step.detail["attempts"] == 3
    assert step.detail["lag_s"] == 2.0  # two refusals, a 1 s poll after each
    assert "lagged the engine by 2.0s" in step.detail["summary"]


def test_a_dead_gateway_fails_the_run_naming_it_and_the_engine_stays_up(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"})
    config, parts = build(tmp_path, docker, FakeHost([100.0]), GATEWAY)
    parts.gateway = FakeGateway([REFUSED])  # type: ignore[assignment]
    outcome = sequence.restart(config, "schedule", parts)
    assert not outcome.ok and outcome.failed_step == "gateway_probe"
    assert "the gateway http://127.0.0.1:4000 did not answer" in (outcome.error or "")
    assert "the engine itself answered" in (outcome.error or "")
    assert "No deployments available" in (outcome.error or "")
    assert docker.status == {"llm": "running", "stt": "running"}  # voice resumed, LLM left up
    assert 100 <= parts.gateway.calls <= 121  # retried for the 2 min it may lag


def test_without_a_gateway_the_step_says_so(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"})
    config, parts = build(tmp_path, docker, FakeHost([100.0]))
    assert sequence.restart(config, "manual", parts).ok
    step = _step(parts, "gateway_probe")
    assert step.result == "skipped" and step.detail["summary"] == "no [gateway] configured"


def test_a_failure_before_the_gateway_does_not_blame_it(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"}, fail_on="start llm")
    config, parts = build(tmp_path, docker, FakeHost([100.0]), GATEWAY)
    parts.gateway = FakeGateway([REFUSED])  # type: ignore[assignment]
    outcome = sequence.restart(config, "manual", parts)
    assert not outcome.ok and outcome.failed_step != "gateway_probe"
    assert parts.gateway.calls == 0
    assert _step(parts, "gateway_probe").result == "skipped"


def test_running_requests_get_vllms_shutdown_timeout_before_sigkill(tmp_path: Path) -> None:
    docker = FakeDocker(
        {"llm": "running", "stt": "running"}, flags={"llm": ["--shutdown-timeout=200"]}
    )
    config, parts = build(tmp_path, docker, FakeHost([100.0]))
    parts.vllm.running = 3  # type: ignore[attr-defined]
    assert sequence.restart(config, "schedule", parts).ok
    assert docker.stop_timeouts == [230.0]  # 200 s to finish them, then doctor's 30 s teardown
    step = _step(parts, "stop_llm")
    assert step.detail["running_at_stop"] == 3 and step.detail["shutdown_timeout"] == 200.0
    assert "3 request(s) running, given up to 200s to finish" in step.detail["summary"]
    assert "refused with HTTP 500 (vLLM's drain)" in step.detail["summary"]  # 0.32-0.34


def test_running_requests_on_an_engine_without_shutdown_timeout_are_recorded_cut(
    tmp_path: Path,
) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"})
    config, parts = build(tmp_path, docker, FakeHost([100.0]))
    parts.vllm.running = 2  # type: ignore[attr-defined]
    assert sequence.restart(config, "schedule", parts).ok
    assert docker.stop_timeouts == [120.0]
    step = _step(parts, "stop_llm")
    assert step.detail["running_at_stop"] == 2 and step.detail["shutdown_timeout"] is None
    assert "2 request(s) running and cut" in step.detail["summary"]


class LoadingVllm(FakeVllm):
    """An engine still loading: the port is not open yet."""

    def health(self, timeout: float = 10.0) -> Health:
        return Health("down", "connection refused")


def test_stopping_mid_boot_hands_the_run_over_and_the_repair_finishes_it(
    tmp_path: Path,
) -> None:
    """An upgrade's SIGTERM while the engine loads: no voice resumed, no verdict recorded; the
    next daemon's repair proves the engine (health, chat) and only then resumes voice."""
    docker = FakeDocker({"llm": "running", "stt": "running"})
    config, parts = build(tmp_path, docker, FakeHost([90.0]))
    parts.vllm = LoadingVllm()  # type: ignore[assignment]
    parts.should_abort = lambda: True
    with capture_logs() as logged, pytest.raises(HandedOver, match="next sparkwarden finishes"):
        sequence.restart(config, "manual", parts)
    assert docker.status["stt"] == "paused" and "unpause stt" not in docker.calls
    [run] = parts.journal.unfinished()
    assert run.result == "running" and run.error is None
    assert {s.name: s.result for s in run.steps}["wait_health"] == "running"
    assert "run_ended" not in [e["event"] for e in logged]

    parts.vllm, parts.should_abort = FakeVllm(), lambda: False  # type: ignore[assignment]
    parts.journal.mark_interrupted(run.id, "sparkwarden stopped during this run")
    resume = Resume.from_plan(run.container, run.plan)
    assert resume == Resume("llm", ["stt"], llm_stopped=False, llm_started=True)
    calls = len(docker.calls)
    outcome = sequence.restart(config, "repair", parts, resume=resume)
    assert outcome.ok and docker.calls[calls:] == ["unpause stt"]  # not stopped, not started
    steps = {s.name: s.result for s in parts.journal.runs(1)[0].steps}
    assert steps["wait_health"] == steps["chat_probe"] == steps["resume_voice"] == "ok"


def test_a_failed_run_ends_at_error_level(tmp_path: Path) -> None:
    docker = FakeDocker({"llm": "running", "stt": "running"})
    config, parts = build(tmp_path, docker, FakeHost([10.0]), drop_interval="5s", start_wait="5s")
    with capture_logs() as logged:
        assert not sequence.restart(config, "manual", parts).ok
    [ended] = [e for e in logged if e["event"] == "run_ended"]
    assert ended["log_level"] == "error" and ended["result"] == "failed"
