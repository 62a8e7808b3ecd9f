"""What a vLLM answer means: both error shapes, malformed bodies, the model list."""

from __future__ import annotations

import json

import httpx
import pytest

from sparkwarden.vllm.client import (
    VllmClient,
    chat_body,
    completion_tokens,
    first_model,
    interpret_chat,
)


def answer(content: object = "ready", finish: object = "stop") -> str:
    return json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish,
                }
            ]
        }
    )


def test_a_well_formed_answer_is_success() -> None:
    outcome = interpret_chat(200, answer())
    assert outcome.ok and outcome.content == "ready"


def test_length_finish_is_still_an_answer() -> None:
    assert interpret_chat(200, answer("thinking...", "length")).ok


@pytest.mark.parametrize(
    ("code", "body", "says"),
    [
        (
            500,
            json.dumps({"error": {"message": "EngineCore died", "type": "x", "code": 500}}),
            "HTTP 500: EngineCore died",
        ),
        (
            400,
            json.dumps({"object": "error", "message": "bad model", "code": 400}),
            "HTTP 400: bad model",
        ),
        (
            200,
            json.dumps({"object": "error", "message": "flat error in a 200"}),
            "carrying an error",
        ),
        (200, "<html>", "not a JSON object"),
        (200, json.dumps({"choices": []}), "no choices"),
        (200, answer(content=5), "malformed"),
        (200, answer(finish="abort"), "finish_reason is 'abort'"),
        (502, "", "HTTP 502: empty body"),
    ],
)
def test_failures_say_why(code: int, body: str, says: str) -> None:
    outcome = interpret_chat(code, body)
    assert not outcome.ok
    assert says in outcome.detail


def test_probe_disables_thinking_and_is_short() -> None:
    body = chat_body("m")
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["max_tokens"] <= 16 and body["temperature"] == 0


def test_first_model() -> None:
    assert first_model({"object": "list", "data": [{"id": "qwen"}]}) == "qwen"
    assert first_model({"data": []}) is None
    assert first_model("nonsense") is None


@pytest.mark.parametrize(
    ("code", "status"),
    [(200, "up"), (503, "dead"), (500, "dead")],  # 503 from vLLM 0.12 on; an empty 500 on 0.10
)
def test_health_reads_every_version_of_a_dead_engine(code: int, status: str) -> None:
    client = VllmClient("http://vllm.test")
    client._http = httpx.Client(
        base_url="http://vllm.test",
        transport=httpx.MockTransport(lambda request: httpx.Response(code, content=b"")),
    )
    assert client.health().status == status
    assert client.health().detail == f"HTTP {code}"


def test_the_drafting_canary_is_greedy_seeded_bounded_and_thinks_not() -> None:
    body = chat_body("m", max_tokens=128, prompt="a math prompt", seed=7)
    assert body["temperature"] == 0 and body["seed"] == 7 and body["max_tokens"] == 128
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"] == [{"role": "user", "content": "a math prompt"}]


@pytest.mark.parametrize(
    ("body", "tokens"),
    [
        ({"usage": {"completion_tokens": 97, "prompt_tokens": 20}}, 97),
        ({"usage": {}}, None),
        ({"usage": {"completion_tokens": "97"}}, None),
        ({"usage": {"completion_tokens": True}}, None),
        ({}, None),
    ],
)
def test_completion_tokens_come_only_from_a_well_formed_usage(
    body: dict[str, object], tokens: int | None
) -> None:
    assert completion_tokens(json.dumps(body)) == tokens
    assert completion_tokens("<html>") is None
