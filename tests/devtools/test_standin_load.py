"""The stand-in under load: vLLM 0.33's per-request spec-decode metrics, drafts trimmed while
many requests run, and the contention laws, on the stand-in as a local process."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.standin.stage import local
from devtools.standin.vllm_model.drafting import Drafting, per_request_metrics
from devtools.standin.vllm_model.engine import Engine
from devtools.standin.vllm_model.flags import parse_args
from devtools.standin.vllm_model.traffic import Contention
from devtools.standin.vllm_standin import main
from sparkwarden.evidence.canary_reading import OwnStats
from sparkwarden.vllm.client import chat_body, own_stats
from sparkwarden.vllm.metrics import EngineMetrics, parse
from tests.kits.daemonkit import wait_for

#: made by vLLM 0.33.0's own RequestSpecDecodeMetrics and pydantic models (scripts/vllm_pages.py)
FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures/vllm/0.33.0/spec-decode-metrics.json").read_text()
)
MODEL = "standin/Qwen3.6-35B-A3B-NVFP4"
#: per-request drafting, no background users: the counters move only for our requests
QUIET = ("--traffic", "math", "--users", "0", "--drafts-per-s", "0")
PROMPT = "Compute 37 * 43 step by step, then check the result by long division."
FLAG = "--per-request-spec-decode-metrics"


@pytest.mark.parametrize("level", ["summary", "detailed"])
def test_the_payload_is_vllms_for_the_same_steps(level: str) -> None:
    drafting = Drafting(FIXTURE["num_spec_tokens"])
    for drafted, accepted in FIXTURE["steps"]:
        drafting.observe(drafted, accepted)
    assert per_request_metrics(drafting, level, 1, stream=False) == FIXTURE[level]["answer"]
    assert per_request_metrics(drafting, level, 1, stream=True) == FIXTURE[level]["stream"]
    assert per_request_metrics(drafting, level, 2, stream=False) is None  # n > 1: suppressed
    assert per_request_metrics(drafting, "none", 1, stream=False) is None


@pytest.mark.parametrize(
    "argv",
    [
        [FLAG, "detailed"],
        [f"{FLAG}=detailed"],
        ["--per_request_spec_decode_metrics", "detailed"],
        ["--per_request_spec_decode_metrics=detailed"],
    ],
)
def test_the_flag_is_read_in_every_spelling_vllm_reads(argv: list[str]) -> None:
    assert parse_args(argv).per_request_spec_decode_metrics == "detailed"


def test_bad_values_are_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([FLAG, "full"], ["--contention", "batched"], ["--contention", "batched:-1"]):
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert argv[0] in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--trim-above", "2", "--trim-to", "6"])
    assert "--trim-to must be 0..--k (5), got 6" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="requires speculative decoding"):  # as vLLM 0.33
        main([FLAG, "summary", "--no-spec-decode"])


def test_contention_laws_slow_each_step_as_they_say() -> None:
    assert Contention("none").slowdown(4) == 1.0
    assert Contention("batched:0.3").slowdown(1) == 1.0
    assert Contention("batched:0.3").slowdown(3) == pytest.approx(1.6)
    assert Contention("serial").limit == 1 and Contention("batched:0.3").limit > 100
    engine = Engine(parse_args([*QUIET, "--contention", "batched:0.5"]))
    now = [100.0]
    engine.clock, engine._work_at = lambda: now[0], 100.0
    engine.extra_running = 3
    now[0] = 102.0
    with engine.lock:
        assert engine._settle() == pytest.approx(1.0)  # 2 s at half pace (3 running)
    engine.extra_running = 1
    now[0] = 103.0
    with engine.lock:
        assert engine._settle() == pytest.approx(2.0)  # then 1 s alone at full pace


def test_drafts_are_trimmed_only_above_the_load() -> None:
    engine = Engine(parse_args([*QUIET, "--trim-above", "2", "--trim-to", "2"]))
    with engine.lock:
        engine.extra_running = 2
        assert engine.draft_length() == 5
        engine.extra_running = 3
        assert engine.draft_length() == 2


# --- on the stand-in as a process ----------------------------------------------------------


def scrape(url: str) -> EngineMetrics:
    return parse(httpx.get(f"{url}/metrics", timeout=10).text)


def ask(url: str, **extra: Any) -> dict[str, Any]:
    body = {**chat_body(MODEL, max_tokens=128, prompt=PROMPT, seed=0), **extra}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


def same_shape(ours: object, theirs: object) -> None:
    """The same keys, and values of the same JSON types, all the way down."""
    assert type(ours) is type(theirs), (ours, theirs)
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs)
        for key in theirs:
            same_shape(ours[key], theirs[key])
    elif isinstance(theirs, list) and theirs and isinstance(ours, list):
        for item in ours:
            same_shape(item, theirs[0])


def arithmetic(spec: dict[str, Any]) -> None:
    """What vLLM's to_dict derives from its histogram, held by the payload."""
    hist, steps = spec["acceptance_histogram"], spec["num_spec_steps"]
    assert len(hist) == spec["num_spec_tokens"] + 1
    assert sum(hist) == steps > 0
    assert sum(j * h for j, h in enumerate(hist)) == spec["num_accepted_draft_tokens"]
    accepted = spec["num_accepted_draft_tokens"]
    assert spec["draft_acceptance_rate"] == accepted / spec["num_draft_tokens"]
    assert spec["mean_acceptance_length"] == 1 + accepted / steps


@pytest.mark.parametrize("level", ["summary", "detailed"])
def test_an_isolated_request_reports_what_it_added_to_the_counters(level: str) -> None:
    with local(*QUIET, FLAG, level) as url:
        before = scrape(url)
        answer = ask(url)
        after = scrape(url)
    same_shape(answer["metrics"], FIXTURE[level]["answer"])
    spec = answer["metrics"]["speculative_decoding"]
    arithmetic(spec)
    read = own_stats(json.dumps(answer))  # as the drafting canary reads it
    assert isinstance(read, OwnStats) and read.full_histogram() == tuple(
        spec["acceptance_histogram"]
    )
    assert before.spec is not None and after.spec is not None
    assert after.spec.drafts - before.spec.drafts == spec["num_spec_steps"]
    assert after.spec.draft_tokens - before.spec.draft_tokens == spec["num_draft_tokens"]
    assert after.spec.accepted - before.spec.accepted == spec["num_accepted_draft_tokens"]
    hist = spec["acceptance_histogram"]
    per_pos = [a - b for a, b in zip(after.spec.per_pos, before.spec.per_pos, strict=True)]
    assert per_pos == [sum(hist[i + 1 :]) for i in range(5)]  # position i: > i accepted
    assert spec["num_draft_tokens"] == 5 * spec["num_spec_steps"]  # alone: never trimmed
    generated = after.generation_tokens - before.generation_tokens
    assert generated == answer["usage"]["completion_tokens"] == 128
    if level == "detailed":
        assert sum(spec["per_step_accepted"]) == spec["num_accepted_draft_tokens"]
        assert sum(spec["per_step_drafted"]) == spec["num_draft_tokens"]


def test_the_stream_carries_the_metrics_on_its_usage_chunk_only() -> None:
    with local(*QUIET, FLAG, "summary") as url:
        plain = ask(url)
        events = stream(url, {"include_usage": True})
        without = stream(url, None)
        several = ask(url, n=2)
    assert several["metrics"] is None  # n > 1: vLLM suppresses them
    *tokens, final = events
    assert all("metrics" not in e and "usage" not in e for e in tokens)
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 128
    same_shape(final["metrics"], FIXTURE["summary"]["stream"])
    # greedy and seeded: the stream drafted exactly what the answer did
    assert final["metrics"]["speculative_decoding"] == {
        k: v for k, v in plain["metrics"]["speculative_decoding"].items() if v is not None
    }
    assert all("usage" not in e and "metrics" not in e for e in without)


def stream(url: str, options: dict[str, bool] | None) -> list[dict[str, Any]]:
    body = {**chat_body(MODEL, max_tokens=128, prompt=PROMPT, seed=0), "stream": True}
    if options is not None:
        body["stream_options"] = options
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


def test_drafts_trimmed_under_load_show_in_counters_and_answer() -> None:
    # two background users always running, each request a third: above --trim-above 2
    busy = ("--traffic", "math", "--users", "2", "--drafts-per-s", "0")
    with local(*busy, FLAG, "summary", "--trim-above", "2", "--trim-to", "2") as url:
        before = scrape(url)  # the first scrape starts the users' day: 2 running
        answer = ask(url)
        after = scrape(url)
    spec = answer["metrics"]["speculative_decoding"]
    arithmetic(spec)
    read = own_stats(json.dumps(answer))
    assert isinstance(read, OwnStats) and read.full_histogram() is None  # trimmed: unusable
    assert spec["num_draft_tokens"] == 2 * spec["num_spec_steps"] < 5 * spec["num_spec_steps"]
    assert max(i for i, h in enumerate(spec["acceptance_histogram"]) if h) <= 2
    assert before.spec is not None and after.spec is not None
    drafts = after.spec.drafts - before.spec.drafts
    assert after.spec.draft_tokens - before.spec.draft_tokens == 2 * drafts < 5 * drafts


@pytest.mark.parametrize(("law", "running", "waiting"), [("serial", 1, 1), ("batched:0.3", 2, 0)])
def test_concurrent_requests_share_the_engine_by_the_law(
    law: str, running: int, waiting: int
) -> None:
    """Two users at once: serial lets one generate and queues the other (first come, first
    served); batching runs both."""
    slow = ("--steps-per-s", "10", "--contention", law)
    with local(*QUIET, FLAG, "summary", *slow) as url:
        finished: list[str] = []

        def user(name: str) -> None:
            ask(url)
            finished.append(name)

        first = threading.Thread(target=user, args=("first",))
        first.start()
        wait_for("the first running", lambda: scrape(url).running == 1, timeout=30)
        second = threading.Thread(target=user, args=("second",))
        second.start()
        both = wait_for(
            "both arrived", lambda: (m := scrape(url)).running + m.waiting == 2 and m, timeout=30
        )
        assert (both.running, both.waiting) == (running, waiting)
        first.join(timeout=60)
        second.join(timeout=60)
    assert len(finished) == 2
    if law == "serial":
        assert finished == ["first", "second"]
