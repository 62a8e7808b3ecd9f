"""What every fault test asserts: the box is no worse than sparkwarden found it."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

import httpx

from devtools.standin.stage import Stage


def answers_chat(port: int) -> bool:
    """The stand-in answers a real chat request (not just /health)."""
    try:
        model = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"][0]["id"]
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            timeout=10,
            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
    except (httpx.HTTPError, ValueError, KeyError, IndexError):
        return False
    return reply.status_code == 200


def no_overlap(runs: list[dict[str, Any]]) -> None:
    """No two sequences ran at once (history entries, any order)."""
    spans = sorted(
        (datetime.fromisoformat(r["started_at"]), datetime.fromisoformat(r["ended_at"]), r["id"])
        for r in runs
        if r["result"] not in ("dry-run", "running") and r["ended_at"]
    )
    by_id = {r["id"]: r for r in runs}
    keys = ("id", "reason", "result", "started_at", "ended_at", "error")
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        told = [{k: by_id[i].get(k) for k in keys} for i in (first, second)]
        assert end <= start, f"runs #{first} and #{second} overlapped: {told}"


def assert_sound(
    stage: Stage,
    runs: list[dict[str, Any]],
    *,
    llm: str,
    port: int,
    voice: dict[str, str],
    gave_up: dict[str, Any] | None = None,
    serving: bool | None = None,
) -> None:
    """Voice exactly as expected (never left paused or stopped by sparkwarden); the LLM running
    and answering, or reported down (the newest run failed, or status says it gave up, as
    ``gave_up`` holds it); no overlapping sequences. ``serving``: the LLM as read together with
    ``runs`` (one snapshot), read here otherwise."""
    for name, expected in voice.items():
        assert stage.status(name) == expected, f"{name} is {stage.status(name)}, not {expected}"
    if serving is None:
        serving = stage.status(llm) == "running" and answers_chat(port)
    reported = bool(runs and runs[0]["result"] == "failed") or bool(gave_up and gave_up["why"])
    assert serving or reported, "LLM down and nobody said so"
    no_overlap(runs)
