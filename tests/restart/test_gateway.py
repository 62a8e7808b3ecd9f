"""The users' path on real parts: LiteLLM -> Nginx -> the stand-in vLLM on a real container.

LiteLLM (slow to start) and Nginx run once for the module, in front of one engine port that each
test's stand-in takes in turn; both run the shipped examples under packaging/.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.standin.stage import Stage, free_port, wait_healthy
from sparkwarden.restart.step_names import STEPS
from sparkwarden.vllm.client import VllmClient
from tests.actions.test_operator_tools import Receiver
from tests.kits.commands import history, run_cli
from tests.kits.daemonkit import DaemonProcess, wait_for
from tests.kits.gatewaykit import ALIAS, MASTER_KEY, Nginx, StreamingLoad, stream_once, users_path

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"


class Path_:
    """The module's users' path: where the engine must listen, and the gateway users call."""

    def __init__(self, engine_port: int, nginx: Nginx, url: str) -> None:
        self.engine_port, self.nginx, self.url = engine_port, nginx, url


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path_]:
    engine_port = free_port()
    with users_path(tmp_path_factory.mktemp("gateway"), engine_port, MODEL) as (nginx, litellm):
        yield Path_(engine_port, nginx, litellm.url)


def gateway_section(tmp_path: Path, url: str, **more: Any) -> dict[str, Any]:
    key = tmp_path / "gateway-key"
    key.write_text(MASTER_KEY + "\n")
    return {"url": url, "model": ALIAS, "api_key_file": str(key), **more}


def steps_of(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in run["steps"]}


def test_a_run_proves_the_users_path_and_records_its_lag(
    stage: Stage, make_config: Any, tmp_path: Path, gateway: Path_
) -> None:
    llm, port = stage.llm("llm", "--boot-delay", "1", port=gateway.engine_port)
    wait_healthy(port)
    config = make_config([llm], port, gateway=gateway_section(tmp_path, gateway.url))

    result = run_cli(config, "restart")

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"[9/{len(STEPS)}] gateway_probe" in result.stdout
    (run,) = history(config)
    probe = steps_of(run)["gateway_probe"]
    assert probe["result"] == "ok", probe
    assert probe["detail"]["url"] == gateway.url.removesuffix("/v1")
    assert probe["detail"]["answer"] == "ready" and probe["detail"]["lag_s"] >= 0
    assert "lagged the engine by" in probe["detail"]["summary"]


def test_a_broken_gateway_fails_the_run_naming_it_and_the_engine_keeps_serving(
    stage: Stage, make_config: Any, tmp_path: Path, gateway: Path_
) -> None:
    llm, port = stage.llm("llm", port=gateway.engine_port)
    wait_healthy(port)
    config = make_config(  # time for two tries when LiteLLM answers slowly (a loaded machine)
        [llm], port, gateway=gateway_section(tmp_path, gateway.url, timeout="8s")
    )
    gateway.nginx.stop()  # LiteLLM loses its upstream: users get 502s, vLLM is fine
    try:
        result = run_cli(config, "restart")
    finally:
        gateway.nginx.start()

    assert result.returncode == 1, result.stdout + result.stderr
    (run,) = history(config)
    assert run["result"] == "failed"
    assert f"the gateway {gateway.url.removesuffix('/v1')} did not answer" in run["error"]
    assert "the engine itself answered" in run["error"]
    steps = steps_of(run)
    assert steps["chat_probe"]["result"] == "ok" and steps["gateway_probe"]["result"] == "failed"
    assert steps["gateway_probe"]["detail"]["attempts"] >= 2  # retried until its timeout
    assert stage.status(llm) == "running"
    wait_for("the path back", lambda: stream_once_ok(gateway.url), timeout=30)


def stream_once_ok(url: str) -> bool:
    with httpx.Client(headers={"Authorization": f"Bearer {MASTER_KEY}"}, timeout=30) as client:
        return stream_once(client, url, 3).kind == "complete"


def restart_under_load(
    stage: Stage, make_daemon_config: Any, tmp_path: Path, gateway: Path_, *standin: str
) -> tuple[list[Any], dict[str, Any]]:
    """The daemon's planned restart (uptime) while users stream: the drain never sees quiet, so
    its deadline passes with requests running, the hardest case. One run (budget 1)."""
    token_s, tokens = 0.05, 200  # answers of 10 s
    llm, port = stage.llm("llm", "--token-delay", str(token_s), *standin, port=gateway.engine_port)
    wait_healthy(port)
    config = make_daemon_config(
        [llm],
        port,
        llm={"stop_timeout": "10s"},
        watch={"max_uptime": "12s"},
        drain={"quiet": "30s", "deadline": "3s"},
        budget={"max_runs": 1},
    )
    # Users out of step, a third of an answer apart, so one is always mid-answer: the stop's
    # one read of /metrics finds it running. Started together, back-to-back users stayed in
    # lockstep, all between two requests at the same moments, and the stop fell in such a gap
    # in 3 of 3 CI runs (running_at_stop 0), with 2 s answers and with 10 s.
    load = StreamingLoad(gateway.url, 3, tokens, stagger=tokens * token_s / 3).start()
    daemon = DaemonProcess(config, tmp_path / "daemon.log")
    try:
        wait_for("steady load", lambda: load.count("complete") >= 3, timeout=60)
        wait_for("requests in flight", lambda: running(port) >= 1, timeout=30)
        daemon.start()
        (run,) = wait_for("the planned run", lambda: finished(config), timeout=120)
        assert run["result"] == "ok" and run["reason"] == "uptime", run
        after = load.count("complete")
        wait_for("users served again", lambda: load.count("complete") >= after + 3, timeout=60)
    finally:
        results = load.stop()
        daemon.stop()
    assert "drain deadline of 3s reached" in daemon.text()
    return results, steps_of(run)["stop_llm"]["detail"]


def finished(config: Path) -> list[dict[str, Any]]:
    return [r for r in history(config) if r["result"] != "running"]


def running(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_running{"))
    return float(line.rsplit(" ", 1)[1])


def test_a_planned_restart_under_streaming_load_cuts_no_request(
    stage: Stage, make_daemon_config: Any, tmp_path: Path, gateway: Path_
) -> None:
    results, stop = restart_under_load(
        stage, make_daemon_config, tmp_path, gateway, "--shutdown-timeout", "30"
    )

    cut = [r for r in results if r.kind == "cut"]
    assert cut == [], cut
    assert stop["running_at_stop"] >= 1 and stop["shutdown_timeout"] == 30.0
    assert stop["stop_timeout"] == 60.0 and stop["killed"] is False  # 30 s + doctor's margin
    refused = [r for r in results if r.kind == "refused"]
    assert refused, "no request arrived while the engine was down"
    # Refused by the gateway with an HTTP error, not left to time out.
    assert all(r.detail.startswith("HTTP 5") for r in refused), refused


def test_without_shutdown_timeout_the_same_restart_cuts_requests(
    stage: Stage, make_daemon_config: Any, tmp_path: Path, gateway: Path_
) -> None:
    """The measurement above can fail: vLLM's default (0) aborts running requests at SIGTERM."""
    results, stop = restart_under_load(stage, make_daemon_config, tmp_path, gateway)

    assert stop["running_at_stop"] >= 1 and stop["shutdown_timeout"] is None, stop
    assert "running and cut" in stop["summary"], stop
    assert any(r.kind == "cut" for r in results), (stop, [r.kind for r in results])


def test_the_watching_daemon_reports_a_failing_gateway_and_leaves_the_engine_alone(
    stage: Stage, make_daemon_config: Any, tmp_path: Path, gateway: Path_
) -> None:
    llm, port = stage.llm("llm", port=gateway.engine_port)
    wait_healthy(port)
    hook, metrics_port = Receiver(), free_port()
    hook_file = tmp_path / "hook-url"
    hook_file.write_text(hook.url("/hook"))
    config = make_daemon_config(
        [llm],
        port,
        health={"interval": "0.5s", "chat_interval": "1s"},
        gateway=gateway_section(tmp_path, gateway.url, watch=True),
        metrics={"listen": f"127.0.0.1:{metrics_port}"},
        notify=[{"kind": "webhook", "url_file": str(hook_file), "min_interval": "1s"}],
    )
    started_at = stage.attrs(llm)["State"]["StartedAt"]
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        wait_for("the gateway seen ok", lambda: (daemon.status().get("gateway") or {}).get("ok"))
        gateway.nginx.stop()
        try:
            wait_for(
                "the gateway seen failing",
                lambda: (daemon.status().get("gateway") or {}).get("ok") is False,
                timeout=60,
            )
            status = daemon.status()
            shown = run_cli(config, "status")
            text = shown.stdout
            exported = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
            wait_for("the notification", lambda: hook.got, timeout=30)
        finally:
            gateway.nginx.start()
        assert "FAILED" in status["gateway"]["last"] and status["llm"]["status"] == "running"
        assert f"gateway:     {gateway.url.removesuffix('/v1')}: FAILED" in text
        assert shown.returncode == 1  # the users' path is down: a person is needed
        assert "sparkwarden_gateway_up 0.0" in exported
        sent = json.loads(hook.got[0]["body"])
        assert sent["event"] == "gateway_failed" and "the engine answers" in sent["summary"]
        wait_for(
            "the gateway seen ok again",
            lambda: (daemon.status().get("gateway") or {}).get("ok"),
            timeout=60,
        )
        assert run_cli(config, "status").returncode == 0
        assert daemon.history() == []  # never "fixed" by restarting vLLM
        assert stage.attrs(llm)["State"]["StartedAt"] == started_at
    finally:
        daemon.stop()
        hook.server.shutdown()


def test_requests_while_the_engine_is_down_fail_at_the_gateway_not_by_timeout(
    stage: Stage, gateway: Path_
) -> None:
    llm, port = stage.llm("llm", port=gateway.engine_port)
    wait_healthy(port)
    stage.client.containers.get(llm).stop(timeout=10)
    with httpx.Client(headers={"Authorization": f"Bearer {MASTER_KEY}"}, timeout=60) as client:
        results = [stream_once(client, gateway.url, 3) for _ in range(3)]
    assert [r.kind for r in results] == ["refused"] * 3
    assert all(r.detail == "HTTP 502" for r in results), results
    stage.client.containers.get(llm).start()
    wait_healthy(port)
    wait_for("the users' path back", lambda: stream_once_ok(gateway.url), timeout=30)


def test_a_run_failing_only_at_the_gateway_is_not_retried_by_restarting_the_engine(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm("llm")
    wait_healthy(port)
    hook = Receiver()
    hook_file = tmp_path / "hook-url"
    hook_file.write_text(hook.url("/hook"))
    dead = f"http://127.0.0.1:{free_port()}/v1"  # a gateway that lost its listener
    config = make_daemon_config(
        [llm],
        port,
        gateway={"url": dead, "model": ALIAS, "timeout": "2s"},
        budget={"backoff": "0s"},  # a retry, were there one, would start at once
        notify=[{"kind": "webhook", "url_file": str(hook_file)}],
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        stage.client.containers.get(llm).kill()  # a crash: an automatic run
        (run,) = wait_for("the crash run", lambda: finished(config), timeout=60)
        assert run["reason"] == "crash" and run["result"] == "failed"
        assert "the engine itself answered" in run["error"]
        sent = wait_for("the notification", lambda: hook.got, timeout=30)
        assert [json.loads(h["body"])["event"] for h in sent] == ["gateway_failed"]
        written = daemon.status()["written_at"]
        wait_for("a later status", lambda: daemon.status()["written_at"] > written, timeout=30)
        status = daemon.status()
        assert status["daemon"]["pending"] is None and status["llm"]["status"] == "running"
        assert len(history(config)) == 1
    finally:
        daemon.stop()
        hook.server.shutdown()


def test_while_vllm_drains_a_user_through_the_gateway_gets_an_error(
    stage: Stage, gateway: Path_
) -> None:
    """vLLM refuses a request arriving during its ``--shutdown-timeout`` drain at once with HTTP
    500 "cannot schedule new futures after shutdown" (measured on the real 0.32.0; the same code
    in 0.33 and 0.34); LiteLLM, with no other deployment to retry it on, passes an error to
    the user. sparkwarden's own probes call it what it is."""
    llm, port = stage.llm(
        "llm", "--token-delay", "0.05", "--shutdown-timeout", "60", port=gateway.engine_port
    )
    wait_healthy(port)
    engine = f"http://127.0.0.1:{port}"
    long = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 400}
    long["stream"] = True
    generating = threading.Thread(  # 20 s of tokens: the drain lasts that long
        target=lambda: httpx.post(f"{engine}/v1/chat/completions", json=long, timeout=120),
        daemon=True,
    )
    generating.start()
    wait_for("a request in flight", lambda: running(port) >= 1, timeout=10)
    stopping = threading.Thread(target=lambda: stage.client.containers.get(llm).stop(timeout=90))
    stopping.start()
    try:
        wait_for("SIGTERM", lambda: _draining(engine), timeout=10)
        with httpx.Client(headers={"Authorization": f"Bearer {MASTER_KEY}"}, timeout=30) as user:
            seen = stream_once(user, gateway.url, 8)
        through = VllmClient(gateway.url.removesuffix("/v1"), MASTER_KEY)
        probe = through.chat(ALIAS, timeout=30)
        through.close()
        direct = VllmClient(engine)
        said = direct.chat(MODEL, timeout=10)
        direct.close()
    finally:
        stopping.join(timeout=120)
        generating.join(timeout=60)
    assert seen.kind == "refused" and seen.tokens == 0 and seen.detail, seen
    assert not probe.ok, probe
    assert not said.ok and "HTTP 500: cannot schedule new futures" in said.detail, said


def _draining(engine: str) -> bool:
    """The engine refuses new requests: its drain began (cheap to ask: nothing is generated)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "?"}], "max_tokens": 1}
    return httpx.post(f"{engine}/v1/chat/completions", json=body, timeout=10).status_code == 500
