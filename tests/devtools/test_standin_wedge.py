"""The stand-in's wedge (a SIGSTOPped worker on vLLM 0.32) and its slow-prefill law, on the
stand-in as a local process."""

from __future__ import annotations

import contextlib
import threading
import time

import httpx

from devtools.standin.stage import local
from sparkwarden.vllm.client import chat_body
from sparkwarden.vllm.metrics import parse
from tests.kits.daemonkit import wait_for

MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"
#: no background drafting: the counters move only for the requests made here
STILL = ("--drafts-per-s", "0")


def chat(
    url: str, timeout: float, prompt: str = "hi", max_tokens: int = 8, stream: bool = False
) -> httpx.Response:
    body = {**chat_body(MODEL, max_tokens=max_tokens, prompt=prompt), "stream": stream}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)


def test_a_wedge_answers_health_and_models_hangs_chats_and_freezes_every_series() -> None:
    with local("--wedge-after", "3", "--token-delay", "0.05") as url:  # tokens move till then
        assert chat(url, 10).status_code == 200  # serving before it wedges
        in_flight = threading.Thread(target=lambda: _quietly(url), daemon=True)
        in_flight.start()  # a long answer being generated when the worker stops
        wait_for("the wedge", lambda: _page(url) == _page(url, after=1.0), timeout=30)
        frozen = _page(url)
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 200
        try:
            chat(url, 2)
            raise AssertionError("a chat was answered by a wedged engine")
        except httpx.TimeoutException:
            pass
        time.sleep(1.0)
        assert _page(url) == frozen  # counters and gauges alike, the running request's too
        engine = parse(frozen)
        assert engine.running == 1.0  # the long answer, frozen in place; not the chat after


def _quietly(url: str) -> None:
    with contextlib.suppress(httpx.HTTPError):
        chat(url, 60, max_tokens=400, stream=True)


def _page(url: str, after: float = 0.0) -> str:
    time.sleep(after)
    return httpx.get(f"{url}/metrics", timeout=5).text


def test_a_long_prompt_is_prefilled_at_its_pace_counting_nothing_until_it_ends() -> None:
    with local(*STILL, "--prefill-tokens-per-s", "1000") as url:
        before = parse(_page(url))
        began = time.monotonic()
        done = threading.Thread(target=lambda: chat(url, 30, prompt="word " * 3000))
        done.start()
        time.sleep(1.5)
        during = parse(_page(url))
        assert during.running == 1.0 and during.prompt_tokens == before.prompt_tokens
        assert during.generation_tokens == before.generation_tokens
        done.join()
        assert time.monotonic() - began >= 3.0
        after = parse(_page(url))
        assert after.prompt_tokens is not None and before.prompt_tokens is not None
        assert after.prompt_tokens - before.prompt_tokens >= 3000
