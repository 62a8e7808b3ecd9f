"""Real speculative decoding on the real engine: ``ngram`` and ``draft_model`` both run on a CPU.
What sparkwarden reads of them (the counters through its own parser, each answer's own stats, the
drafting canary's baseline) is read from vLLM itself, not from the stand-in's model of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.realvllm import engine
from devtools.standin.stage import Stage
from sparkwarden.vllm import metrics
from sparkwarden.vllm.client import chat_body, own_stats
from sparkwarden.vllm.spec_payload import OwnStats
from tests.kits.daemonkit import Daemons, wait_for

K = 3
#: Prompts that repeat themselves, so that ``ngram`` finds matches to propose.
PROMPTS = [
    "one two three one two three one two three one two three",
    "def add(a, b): return a + b. def add(a, b): return a + b.",
    "The quick brown fox. The quick brown fox. The quick brown fox.",
]


def speculative(method: str, **more: Any) -> str:
    return json.dumps({"method": method, "num_speculative_tokens": K, **more})


def scrape(port: int) -> metrics.EngineMetrics:
    return metrics.parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)


def ask(port: int, prompt: str, max_tokens: int = 48) -> dict[str, Any]:
    reply = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        timeout=120,
        json=chat_body("tiny", max_tokens, prompt),
    )
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def drafted(port: int) -> tuple[metrics.EngineMetrics, metrics.EngineMetrics]:
    """The engine's figures before and after the prompts, one at a time."""
    before = scrape(port)
    for prompt in PROMPTS:
        ask(port, prompt)
    return before, scrape(port)


def test_ngram_counters_read_by_sparkwardens_own_parser(real_llm: Any) -> None:
    _, port, _ = real_llm("--speculative-config", speculative("ngram", prompt_lookup_max=3))

    before, after = drafted(port)

    assert before.spec is not None and after.spec is not None, "no spec-decode series"
    assert len(after.spec.per_pos) == K, after.spec  # one counter per position, "0".."K-1"
    assert after.spec.created is not None  # one API server: `_created` samples exist
    assert after.running == 0 and after.waiting == 0
    assert after.generation_tokens is not None and before.generation_tokens is not None
    assert after.generation_tokens - before.generation_tokens == 48 * len(PROMPTS)
    assert after.prompt_tokens is not None and after.kv_cache is not None
    drafts = after.spec.drafts - before.spec.drafts
    tokens = after.spec.draft_tokens - before.spec.draft_tokens
    assert drafts > 0 and tokens > 0
    # ngram proposes fewer than K where it finds no match: never more than K a step
    assert tokens <= K * drafts
    accepted = after.spec.accepted - before.spec.accepted
    assert 0 < accepted <= tokens
    assert sum(after.spec.per_pos) - sum(before.spec.per_pos) == accepted


def test_a_good_drafter_reads_higher_than_a_noised_one_and_each_answer_carries_its_stats(
    stage: Stage, real_llm: Any
) -> None:
    """``draft_model``: the target's own weights as its draft agree on every greedy token; a
    noised copy agrees less. The counters, read by sparkwarden's parser, say so, and so does
    each answer's own ``metrics.speculative_decoding`` (``--per-request-spec-decode-metrics``)."""
    rates = {}
    for draft in ("draft", "draft-noisy"):
        llm, port, _ = real_llm(
            "--speculative-config",
            speculative("draft_model", model=str(engine.model(draft))),
            "--per-request-spec-decode-metrics",
            "summary",
            role=draft,
        )
        before = scrape(port)
        answers = [ask(port, prompt) for prompt in PROMPTS]
        after = scrape(port)
        assert before.spec is not None and after.spec is not None
        tokens = after.spec.draft_tokens - before.spec.draft_tokens
        drafts = after.spec.drafts - before.spec.drafts
        assert tokens == K * drafts, "draft_model proposes K tokens every step"
        rates[draft] = (after.spec.accepted - before.spec.accepted) / tokens
        own = [own_stats(json.dumps(a)) for a in answers]
        assert all(isinstance(o, OwnStats) for o in own), own
        summed = sum(o.num_draft_tokens for o in own if isinstance(o, OwnStats))
        assert summed == tokens, "each answer's own stats add up to what the counters moved"
        stage.client.containers.get(llm).stop(timeout=30)  # one engine at a time
    assert rates["draft"] >= 0.9, rates
    assert rates["draft-noisy"] < rates["draft"], rates


@pytest.mark.timeout(600)
@pytest.mark.parametrize("method", ["draft_model", "ngram"])
def test_the_drafting_canary_learns_its_baseline_on_the_real_engine(
    method: str,
    stage: Stage,
    real_llm: Any,
    real_config: Any,
    control_dir: Path,
    tmp_path: Path,
) -> None:
    """The daemon's canary on an idle real engine whose answers carry their own stats: each
    canary counts and the baseline is learnt, for a drafter that proposes K tokens every step
    (draft_model) and for one whose proposals vary (ngram: fewer than K where no match is
    found, the same way every time for a greedy prompt)."""
    more: dict[str, Any] = {"prompt_lookup_max": 3}
    if method == "draft_model":
        more = {"model": str(engine.model("draft"))}
    llm, port, _ = real_llm(
        "--speculative-config",
        speculative(method, **more),
        "--per-request-spec-decode-metrics",
        "summary",
    )
    config = real_config(
        [llm],
        port,
        [],
        schedule={"cron": ""},
        watch={"interval": "0.5s", "boot_grace": "0s"},
        health={"chat_interval": "0s"},
        control={"socket": str(control_dir / "control.sock"), "group": ""},
        acceptance={
            "canary_idle": "1s",
            "canary_soon": "1s",
            "canary_interval": "1h",
            "canary_learn": 2,
            "canary_max_tokens": 64,
        },
    )
    pool = Daemons(tmp_path)
    try:
        daemon = pool.start(config)
        canary = wait_for(
            "the canary's baseline",
            lambda: len((c := daemon.status()["acceptance"]["canary"])["baseline"]) == 3 and c,
            timeout=240,
        )
    finally:
        pool.stop_all()
    assert canary["own_stats"] is True, canary
    assert canary["valid"] >= 2 and canary["discarded"] == 0, canary
    assert all(0.0 < a <= 1.0 for a in canary["baseline"].values()), canary
    assert daemon.history() == [], "learning a baseline restarts nothing"
