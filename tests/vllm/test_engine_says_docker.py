"""What the engine says of itself, through the watching daemon on a real container: its release
(``GET /version``), a sleeping engine (reported sleeping, never restarted) and the users its
queue limits turned away, in ``status`` and in sparkwarden's own metrics."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devtools.standin.stage import Stage, free_port, wait_healthy
from sparkwarden.vllm.client import chat_body
from tests.kits.commands import run_cli
from tests.kits.daemonkit import DaemonProcess, wait_for

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"
#: every check sends the health chat, and two failures in a row would restart
WATCH = {"interval": "0.5s", "timeout": "2s", "chat_interval": "0.5s", "failures": 2}


@pytest.mark.docker
def test_a_sleeping_engine_is_reported_sleeping_and_its_queue_rejections_shown(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    llm, port = stage.llm(
        "llm", "--sleep-level", "1", "--max-num-queued-reqs", "1", "--token-delay", "0.05"
    )
    wait_healthy(port)
    url = f"http://127.0.0.1:{port}"
    listen = f"127.0.0.1:{free_port()}"
    config = make_daemon_config(
        [llm], port, health=WATCH, watch={"boot_grace": "0s"}, metrics={"listen": listen}
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        asleep = wait_for(
            "the engine seen asleep",
            lambda: (s := daemon.status()).get("engine", {}).get("sleeping") and s,
            timeout=30,
        )
        # asleep, vLLM takes a chat and queues it unanswered (core.py 0.33.0:993-1029): a
        # user's hangs; the daemon sends none (each would hang its loop for the probe's
        # timeout), look after look, for longer than health.failures x the canary interval
        hanging: list[int] = []
        asker = threading.Thread(
            target=lambda: hanging.append(
                httpx.post(
                    f"{url}/v1/chat/completions", json=chat_body(MODEL), timeout=120
                ).status_code
            ),
            daemon=True,
        )
        asker.start()
        wait_for("the user's chat queued", lambda: _waiting(url) == 1, timeout=10)
        still = daemon.after_looks(16)
        said = [ln for ln in daemon.text().splitlines() if "canary" in ln]
        assert _waiting(url) == 1 and hanging == [], said  # the user's only, still hanging
        assert still["llm"]["last_probe"] == "", still["llm"]
        text = run_cli(config, "status").stdout
        # woken, the user's chat is answered and the engine watched as before
        httpx.post(f"{url}/wake_up", timeout=5)
        asker.join(timeout=30)
        assert hanging == [200]
        wait_for(
            "the daemon's chat answered once woken",
            lambda: (
                (s := daemon.status())["llm"]["last_probe"].startswith("ok")
                and not s["engine"]["sleeping"]
            ),
            timeout=30,
        )
        # one user's long answer in flight, and a second user turned away
        user = threading.Thread(target=_long_answer, args=(url,), daemon=True)
        user.start()
        wait_for("a request in flight", lambda: _running(url) >= 1, timeout=10)
        body = chat_body(MODEL)
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=5).status_code == 503
        user.join(timeout=30)
        # the engine's own count: the user turned away, and on a loaded box maybe the daemon's
        # health chat too, sent as the long answer began (the daemon saw the engine idle)
        turned = _rejected(url)
        assert turned >= 1
        shown = wait_for(
            "the rejection in status",
            lambda: (
                (s := daemon.status())["engine"]["rejections"].get("max_num_queued_reqs") == turned
                and s
            ),
            timeout=30,
        )
        exported = httpx.get(f"http://{listen}/metrics", timeout=5).text
    finally:
        daemon.stop()
    assert daemon.history() == []  # never restarted
    assert asleep["engine"]["release"] == "0.33.0" and asleep["engine"]["sleep_level"] == 1
    assert still["llm"]["health"] == "sleeping (level 1): put to sleep, not restarted"
    assert still["_exit"] == 0  # asleep is not a problem
    assert "engine:      vLLM 0.33.0, SLEEPING (level 1): not restarted" in text
    assert shown["engine"]["sleeping"] is False
    assert shown["engine"]["rejections"] == {
        "max_num_queued_reqs": turned,
        "max_num_queued_tokens": 0.0,
    }
    said = f"queue:       turned away {turned:g}, max_num_queued_reqs {turned:g}"
    assert said in run_cli(config, "status").stdout
    families = {f.name: f.samples for f in text_string_to_metric_families(exported)}
    info = families["sparkwarden_engine_info"][0]
    assert info.labels == {"release": "0.33.0"} and info.value == 1.0
    refused = {
        s.labels["reason"]: s.value
        for s in families["sparkwarden_engine_admission_rejections"]
        if s.name.endswith("_total")
    }
    assert refused == {"max_num_queued_reqs": turned, "max_num_queued_tokens": 0.0}
    assert families["sparkwarden_engine_sleeping"][0].value == 0.0


def _long_answer(url: str) -> None:
    body = {**chat_body(MODEL, max_tokens=60), "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        for _ in response.iter_lines():
            pass


def _waiting(url: str) -> float:
    """Requests the engine took and has not started (``vllm:num_requests_waiting``)."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_waiting{"))
    return float(line.rsplit(" ", 1)[1])


def _rejected(url: str) -> float:
    """Requests the engine turned away at its queue limit (``vllm:admission_rejections``)."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    mark = "vllm:admission_rejections_total{"
    line = next(
        ln for ln in text.splitlines() if ln.startswith(mark) and "max_num_queued_reqs" in ln
    )
    return float(line.rsplit(" ", 1)[1])


def _running(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_running{"))
    return float(line.rsplit(" ", 1)[1])


@pytest.mark.docker
def test_a_floor_breach_on_an_engine_that_takes_the_free_memory_restarts_nothing(
    stage: Stage, make_daemon_config: Any, tmp_path: Path
) -> None:
    """vLLM 0.34 with no --gpu-memory-utilization takes what is free at its start: the floor
    (here above the whole machine, so breached at once) is its own cache. With floor_action
    "restart" the daemon says so with doctor's fix, and restarts nothing."""
    llm, port = stage.llm("llm", "--vllm-version", "0.34.0")
    wait_healthy(port)
    above_all = psutil.virtual_memory().total / 2**30 + 8
    config = make_daemon_config(
        [llm],
        port,
        health=WATCH,
        memory={"floor_gib": round(above_all), "floor_for": "1s", "floor_action": "restart"},
    )
    daemon = DaemonProcess(config, tmp_path / "daemon.log").start()
    try:
        said = wait_for(
            "the breach said with its cause",
            lambda: next(
                (
                    ln
                    for ln in daemon.text().splitlines()
                    if '"memory_floor"' in ln and "cause" in ln
                ),
                None,
            ),
            timeout=30,
        )
        daemon.after_looks(8)
    finally:
        daemon.stop()
    assert daemon.history() == []  # never restarted for its own cache
    floor = json.loads(said)
    assert floor["action"] == "warn" and "sparkwarden doctor" in floor["cause"], floor
    assert "vLLM 0.34.0's default 1 with the extensible KV cache" in floor["cause"], floor
