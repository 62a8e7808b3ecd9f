"""The stand-in's surface as vLLM has it: the drain under ``--shutdown-timeout`` (a new request
refused with HTTP 500, as the real 0.32.0 does), ``/version``, a sleeping engine, queue limits
and the tool-call parser's counter, each checked against what vLLM's own code does or writes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from devtools.standin.stage import STANDIN_DIR, free_port, wait_healthy
from sparkwarden.vllm.client import VllmClient, chat_body, interpret_chat
from sparkwarden.vllm.metrics import NoStats, parse
from tests.devtools.test_standin import VLLM_PAGES, families
from tests.kits.daemonkit import wait_for

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"


@contextmanager
def standin(*argv: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The stand-in as a process of this host, with its pid, so a test can SIGTERM it."""
    port = free_port()
    command = [sys.executable, "-u", str(STANDIN_DIR / "vllm_standin.py")]
    proc = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", str(port), *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_healthy(port)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def post(url: str, stream: bool = False, max_tokens: int = 8, timeout: float = 10) -> Any:
    body = {**chat_body(MODEL, max_tokens=max_tokens), "stream": stream}
    if not stream:
        return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=timeout) as r:
        lines = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


class Streamer(threading.Thread):
    """One long streamed request in flight; ``events`` are its chunks, or the error."""

    def __init__(self, url: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.url, self.max_tokens = url, max_tokens
        self.events: list[Any] = []
        self.error = ""

    def run(self) -> None:
        try:
            self.events = post(self.url, stream=True, max_tokens=self.max_tokens, timeout=60)
        except httpx.HTTPError as exc:
            self.error = type(exc).__name__


def _unanswered(url: str) -> bool:
    """A chat gets no answer at all (the connection refused or cut)."""
    try:
        post(url, timeout=10)
    except httpx.HTTPError:
        return True
    return False


def running(url: str) -> float:
    return parse(httpx.get(f"{url}/metrics", timeout=5).text).running or 0.0


def test_a_request_arriving_during_the_drain_is_refused_with_vllms_500() -> None:
    """As the real vLLM 0.32.0 does (tests/realvllm/test_drain_real.py measures it): a new
    request during the drain gets HTTP 500 at once, streamed or not; the running one ends."""
    with standin("--token-delay", "0.05", "--shutdown-timeout", "30", "--stop-delay", "1") as (
        url,
        proc,
    ):
        user = Streamer(url, max_tokens=200)  # 10 s of tokens: in flight through the asks
        user.start()
        wait_for("a request in flight", lambda: running(url) >= 1, timeout=10)
        proc.send_signal(signal.SIGTERM)
        wait_for("the drain", lambda: post(url).status_code == 500, timeout=10)
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200  # not dead: draining
        answer = post(url)
        streamed = httpx.post(
            f"{url}/v1/chat/completions", json={**chat_body(MODEL), "stream": True}, timeout=10
        )
        user.join(timeout=30)
        began = time.monotonic()
        proc.wait(timeout=30)  # it exits once the running request is done, and torn down
        exited_after = time.monotonic() - began
    expected = {
        "error": {
            "message": "cannot schedule new futures after shutdown",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
    assert answer.status_code == 500 and answer.json() == expected
    assert streamed.status_code == 500 and streamed.json() == expected
    outcome = interpret_chat(500, answer.text)
    assert not outcome.ok and "HTTP 500: cannot schedule new futures" in outcome.detail
    # the request running at SIGTERM was let finish
    finishes = [c.get("finish_reason") for e in user.events[:-1] for c in e["choices"]]
    assert not user.error and finishes[-1] == "length" and user.events[-1] == "[DONE]"
    assert exited_after < 10


def test_without_a_shutdown_timeout_running_requests_are_cut_and_none_answered() -> None:
    with standin("--token-delay", "0.05", "--stop-delay", "2") as (url, proc):
        user = Streamer(url, max_tokens=200)
        user.start()
        wait_for("a request in flight", lambda: running(url) >= 1, timeout=10)
        proc.send_signal(signal.SIGTERM)
        # once its SIGTERM is handled, the engine core is gone: no answer at all
        wait_for("no answer", lambda: _unanswered(url), timeout=10)
        user.join(timeout=30)
        proc.wait(timeout=30)
    assert "[DONE]" not in user.events  # cut mid-generation


def test_version_names_the_release() -> None:
    with standin() as (url, _), standin("--vllm-version", "0.28.0") as (older, _):
        assert httpx.get(f"{url}/version", timeout=5).json() == {"version": "0.33.0"}
        client = VllmClient(older)
        try:
            assert client.version() == "0.28.0"
        finally:
            client.close()
    closed = VllmClient(f"http://127.0.0.1:{free_port()}")
    assert closed.version(timeout=2) is None  # nothing listening: not known
    closed.close()


def test_a_sleeping_engine_says_so_and_queues_chats_until_woken() -> None:
    """As vLLM 0.33/0.34: asleep, a chat is taken and left unanswered (shown waiting) until the
    engine wakes; only ``/pause`` (pause_generation) refuses one with 503."""
    with standin("--sleep-level", "1") as (url, _):
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        asleep = parse(httpx.get(f"{url}/metrics", timeout=5).text)
        answers: list[Any] = []
        queued = threading.Thread(target=lambda: answers.append(post(url, timeout=30)))
        queued.start()
        wait_for("the chat queued", lambda: parse(httpx.get(f"{url}/metrics").text).waiting == 1)
        time.sleep(1.0)
        assert answers == []  # still unanswered, a second later
        httpx.post(f"{url}/wake_up", timeout=5)
        queued.join(timeout=10)
        awake = parse(httpx.get(f"{url}/metrics", timeout=5).text)
        answered = post(url)
        httpx.post(f"{url}/pause", timeout=5)
        refused = post(url)
        httpx.post(f"{url}/resume", timeout=5)
        resumed = post(url)
        httpx.post(f"{url}/sleep?level=2", timeout=5)
        deeper = parse(httpx.get(f"{url}/metrics", timeout=5).text)
    assert asleep.sleeping and asleep.sleep_level == 1
    assert [a.status_code for a in answers] == [200]  # the queued chat, answered once woken
    assert not awake.sleeping and awake.waiting == 0 and answered.status_code == 200
    assert refused.status_code == 503 and "paused" in refused.text
    assert resumed.status_code == 200
    assert deeper.sleeping and deeper.sleep_level == 2


def test_queue_limits_turn_requests_away_and_count_them() -> None:
    with standin("--token-delay", "0.05", "--max-num-queued-reqs", "1") as (url, _):
        user = Streamer(url, max_tokens=200)
        user.start()
        wait_for("a request in flight", lambda: running(url) >= 1, timeout=10)
        turned_away = post(url)
        m = parse(httpx.get(f"{url}/metrics", timeout=5).text)
        user.join(timeout=30)
    assert turned_away.status_code == 503 and "busy" in turned_away.text
    assert m.rejections == {"max_num_queued_reqs": 1.0, "max_num_queued_tokens": 0.0}


def test_new_series_have_the_shape_vllm_writes() -> None:
    with standin("--sleep-level", "1", "--max-num-queued-reqs", "4") as (url, _):
        ours = families(httpx.get(f"{url}/metrics", timeout=5).text)
    for page, name in (
        ("sleeping", "vllm:engine_sleep_state"),
        ("queue-limits", "vllm:admission_rejections_total"),
        ("queue-limits", "vllm:admission_rejections_created"),
    ):
        real = families((VLLM_PAGES / "0.33.0" / f"{page}.prom").read_text())
        assert ours[name] == real[name], name


def test_the_tool_call_parser_counter_under_disable_log_stats() -> None:
    with standin("--metrics", "no-stats", "--tool-call-parser", "qwen3_coder") as (url, _):
        text = httpx.get(f"{url}/metrics", timeout=5).text
    real = families((VLLM_PAGES / "0.33.0" / "tool-parser.prom").read_text())
    vllm = {name: shape for name, shape in real.items() if name.startswith("vllm:")}
    assert {name: shape for name, shape in families(text).items() if name in vllm} == vllm
    with pytest.raises(NoStats):
        parse(text)
