"""A replica's run out of the gateway's rotation and back (issue 37), with fake adapters: out
before anything stops, back only once its own gateway path answered, out still when the run
fails. The flag is a real file."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparkwarden.restart import rotation, sequence
from sparkwarden.restart.parts import Resume
from sparkwarden.restart.step_names import REPLICA_STEPS
from sparkwarden.vllm.client import ChatOutcome
from tests.restart.test_sequence_unit import T0, FakeDocker, FakeGateway, FakeHost, build

OK = ChatOutcome(True, "answered 'ready'", "ready")


def replica(tmp_path: Path, own: FakeGateway, **docker: Any) -> tuple[Any, Any, Path]:
    flag = tmp_path / "run" / "out-of-rotation"
    sections = {
        "replicas": {
            "self": "spark2",
            "nodes": [{"name": "spark1", "ssh": "root@spark1"}, {"name": "spark2"}],
            "rotation": {"url": "http://127.0.0.1:8080/v1", "flag": str(flag)},
        }
    }
    state = FakeDocker({"llm": "running", "stt": "running"}, **docker)
    config, parts = build(tmp_path, state, FakeHost([90.0]), sections)
    parts.own_path = own  # type: ignore[assignment]
    return config, parts, flag


def steps(parts: Any) -> dict[str, str]:
    return {s.name: s.result for s in parts.journal.runs(1)[0].steps}


def test_a_replica_leaves_before_it_stops_and_rejoins_once_its_own_path_answers(
    tmp_path: Path,
) -> None:
    own = FakeGateway([OK])
    config, parts, flag = replica(tmp_path, own)
    at_stop: list[bool] = []
    parts.after_action = lambda name: at_stop.append(flag.exists()) if name == "stop_llm" else None
    outcome = sequence.restart(config, "schedule", parts)
    assert outcome.ok, outcome.error
    assert [s.name for s in parts.journal.runs(1)[0].steps] == list(REPLICA_STEPS)
    assert at_stop == [True]  # out of rotation while it stopped
    assert not flag.exists() and own.calls == 1
    run = parts.journal.runs(1)[0]
    left = next(s for s in run.steps if s.name == "leave_rotation")
    assert "Nginx answers new requests 503" in left.detail["summary"]
    back = next(s for s in run.steps if s.name == "rejoin_rotation")
    assert back.detail["summary"].startswith(
        "back in the gateway's rotation: http://127.0.0.1:8080"
    )


def test_the_flag_is_whole_json_world_readable_and_says_the_run(tmp_path: Path) -> None:
    flag = tmp_path / "out-of-rotation"
    out = rotation.take_out(flag, "run #3", 3)
    assert stat.S_IMODE(flag.stat().st_mode) == 0o644  # Nginx's workers are not root
    said = {"since": out.since, "why": "run #3", "run": 3, "told": False}
    assert json.loads(flag.read_text()) == said
    rotation.mark_told(flag)  # a restarted daemon reads that it was notified
    assert rotation.read(flag) == replace(out, told=True)
    flag.write_text(json.dumps(said) + "\n")
    assert rotation.read(flag) == out
    assert [p.name for p in tmp_path.iterdir()] == ["out-of-rotation"]  # no part left
    assert rotation.put_back(flag) and rotation.read(flag) is None
    assert not rotation.put_back(flag)
    flag.write_text("maintenance\n")  # an operator's touch
    by_hand = rotation.read(flag)
    assert by_hand is not None and by_hand.by_hand and by_hand.run is None
    assert not rotation.put_back(flag) and flag.exists()  # never removed by sparkwarden


def test_an_own_path_that_does_not_answer_keeps_it_out_and_fails_the_run(tmp_path: Path) -> None:
    own = FakeGateway([ChatOutcome(False, "HTTP 502 from nginx")])
    config, parts, flag = replica(tmp_path, own)
    outcome = sequence.restart(config, "schedule", parts)
    assert not outcome.ok and outcome.failed_step == "rejoin_rotation"
    assert "stays out of the gateway's rotation" in (outcome.error or "")
    assert "HTTP 502 from nginx" in (outcome.error or "")
    said = rotation.read(flag)
    assert said is not None and said.run == outcome.run_id  # the daemon notifies it
    assert steps(parts)["resume_voice"] == "ok"  # voice back all the same
    assert steps(parts)["gateway_probe"] == "skipped"


def test_a_run_that_fails_before_its_probes_leaves_it_out(tmp_path: Path) -> None:
    own = FakeGateway([OK])
    config, parts, flag = replica(tmp_path, own, fail_on="start llm")
    outcome = sequence.restart(config, "crash", parts)
    assert not outcome.ok and steps(parts)["start_llm"] == "failed"
    assert steps(parts)["rejoin_rotation"] == "skipped" and own.calls == 0
    said = rotation.read(flag)
    assert said is not None and said.run == outcome.run_id


def test_a_drains_flag_is_adopted_by_the_run_and_an_operators_left_alone(tmp_path: Path) -> None:
    own = FakeGateway([OK])
    config, parts, flag = replica(tmp_path, own)
    drained = rotation.take_out(flag, "planned schedule restart: draining")
    assert sequence.restart(config, "schedule", parts).ok
    left = next(s for s in parts.journal.runs(1)[0].steps if s.name == "leave_rotation")
    assert "since" in left.detail["summary"] and "draining" in left.detail["summary"]
    assert drained.run is None and not flag.exists()

    flag.write_text("maintenance by hand\n")
    assert sequence.restart(config, "manual", parts).ok
    assert flag.read_text() == "maintenance by hand\n"  # only its writer ends it
    assert steps(parts)["rejoin_rotation"] == "skipped"


def test_a_repair_after_a_kill_puts_the_replica_back_once_it_serves(tmp_path: Path) -> None:
    own = FakeGateway([OK])
    config, parts, flag = replica(tmp_path, own)
    rotation.take_out(flag, "run #1", 1)  # the killed run's flag
    outcome = sequence.restart(config, "repair", parts, resume=Resume("llm", ["stt"]))
    assert outcome.ok, outcome.error
    assert not flag.exists() and own.calls == 1


def test_the_dry_run_plan_names_both_rotation_steps_in_the_runs_order(tmp_path: Path) -> None:
    config, parts, flag = replica(tmp_path, FakeGateway([OK]))
    plan = dict(sequence.plan(config, parts))
    assert list(plan) == list(REPLICA_STEPS)
    assert plan["leave_rotation"] == f"write {flag}: its Nginx answers 503"
    assert "http://127.0.0.1:8080" in plan["rejoin_rotation"] and not flag.exists()


def test_a_repair_of_an_engine_the_operator_started_leaves_the_rejoin_to_the_daemon(
    tmp_path: Path,
) -> None:
    """kill -9 after stop_llm, then the operator's ``docker start``: the repair does not wait
    on that engine, so it cannot prove the path; the flag becomes one the daemon takes back
    once the engine serves, not a failed run's that stays out."""
    own = FakeGateway([OK])
    config, parts, flag = replica(tmp_path, own)
    rotation.take_out(flag, "run #1", 1)
    stopped_before_the_start = T0.timestamp() - 60
    resume = Resume("llm", ["stt"], llm_stopped=True, stopped_at=stopped_before_the_start)
    outcome = sequence.restart(config, "repair", parts, resume=resume)
    assert outcome.ok, outcome.error
    assert steps(parts)["rejoin_rotation"] == "skipped" and own.calls == 0
    said = rotation.read(flag)
    assert said is not None and said.run is None and not said.by_hand
