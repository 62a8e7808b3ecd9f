"""One drafting canary: its requests, what each measured, and whether it counts.

A canary's acceptance comes from one of two sources, whichever the engine offers:

- **its own stats**: vLLM started with ``--per-request-spec-decode-metrics summary`` (or
  ``detailed``) puts the request's own spec-decode counts in the response
  (``metrics.speculative_decoding``: a histogram of draft tokens accepted per verify step).
  Nobody else's drafts are in them, so such a canary counts under load too; only drafts trimmed
  under load (fewer than K proposed per step) spoil it, since a short draft cannot reach the
  deep positions. Drafts shorter than K with nothing else running are the drafter's own:
  ``ngram`` and ``suffix`` propose fewer tokens where they find no match (vLLM 0.32.0
  ``ngram_proposer.py``), the same way every time for a greedy prompt, so such a reading
  counts on its rate over the tokens proposed, which its baseline was learnt on too.
- **counter deltas**: otherwise, the engine's ``vllm:spec_decode_*`` counters around the request.
  Those are the whole engine's, so the reading counts only if nothing else ran during it:
  request gauges 0 before and after, generation tokens grown by exactly the completion tokens the
  response reports, and counters neither reset nor gone backwards.

Pure: the adapter sends the requests and scrapes; :func:`take` gets them injected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sparkwarden.vllm.metrics import EngineMetrics, SpecDecode
from sparkwarden.vllm.spec_payload import Answer, OwnStats

Source = Literal["own", "counters"]


@dataclass(frozen=True)
class Reading:
    """One prompt's request: what it drafted and accepted (by position), and whether it counts."""

    prompt: str
    valid: bool
    why: str
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    #: accepted tokens per draft, by position (the per-position acceptance)
    per_pos: tuple[float, ...] = ()
    seconds: float = 0.0
    #: where the numbers came from: the request's own stats, or the engine's counters around it
    source: Source = "counters"

    @property
    def acceptance(self) -> float:
        return self.accepted / self.draft_tokens if self.draft_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "valid": self.valid,
            "why": self.why,
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "per_pos": list(self.per_pos),
            "seconds": self.seconds,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reading:
        return cls(
            prompt=str(data["prompt"]),
            valid=bool(data["valid"]),
            why=str(data["why"]),
            drafts=float(data["drafts"]),
            draft_tokens=float(data["draft_tokens"]),
            accepted=float(data["accepted"]),
            per_pos=tuple(float(v) for v in data["per_pos"]),
            seconds=float(data["seconds"]),
            source="own" if data.get("source") == "own" else "counters",
        )


@dataclass(frozen=True)
class Round:
    """One canary: a reading per prompt, taken at ``t``; ``created`` names the engine start the
    counters belonged to (None: unknown); ``own_stats`` says whether the engine's answers carried
    their own spec-decode stats (None: no answer came to tell)."""

    t: float
    readings: tuple[Reading, ...]
    created: float | None
    own_stats: bool | None = None

    @property
    def valid(self) -> bool:
        return bool(self.readings) and all(r.valid for r in self.readings)

    @property
    def why(self) -> str:
        bad = [f"{r.prompt}: {r.why}" for r in self.readings if not r.valid]
        return "; ".join(bad) if bad else "valid"

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "created": self.created,
            "own_stats": self.own_stats,
            "readings": [r.to_json() for r in self.readings],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Round:
        created, own = data.get("created"), data.get("own_stats")
        return cls(
            t=float(data["t"]),
            readings=tuple(Reading.from_json(r) for r in data["readings"]),
            created=None if created is None else float(created),
            own_stats=None if own is None else bool(own),
        )


def restarted(old: SpecDecode | None, new: SpecDecode) -> bool:
    if old is None:
        return False
    if old.created is not None and new.created is not None and old.created != new.created:
        return True
    return new.draft_tokens < old.draft_tokens or new.accepted < old.accepted


def measure(
    prompt: str, before: EngineMetrics | None, after: EngineMetrics | None, answer: Answer
) -> Reading:
    """One prompt's reading, from its own stats when the response has them, else from the
    scrapes around it; or why it does not count."""
    if not answer.ok:
        return _bad(prompt, answer, f"request failed: {answer.detail}")
    old = before.spec if before is not None else None
    new = after.spec if after is not None else None
    if old is not None and new is not None and restarted(old, new):
        return _bad(prompt, answer, "counters reset during it (engine restarted)")
    if isinstance(answer.own, str):
        return _bad(prompt, answer, answer.own)
    if answer.own is not None:
        return _from_own(prompt, answer, answer.own, alone(before) and alone(after))
    return _from_counters(prompt, before, after, answer)


def _bad(prompt: str, answer: Answer, why: str) -> Reading:
    return Reading(prompt, False, why, seconds=answer.seconds, source=_source(answer))


def _source(answer: Answer) -> Source:
    return "own" if answer.own is not None else "counters"


def alone(engine: EngineMetrics | None) -> bool:
    """Nothing but the canary ran or waited, as a scrape around it saw the engine."""
    return engine is not None and engine.running == 0 and engine.waiting == 0


def _from_own(prompt: str, answer: Answer, own: OwnStats, by_itself: bool) -> Reading:
    """Per position i, the share of full-length drafts that accepted more than i tokens; drafts
    shorter than K count on their rate only when the canary ran ``by_itself`` (the drafter's
    own lengths, not the scheduler's trims)."""
    histogram = own.full_histogram()
    draft_tokens = None if histogram is None else sum(histogram) * own.num_spec_tokens
    if histogram is None:
        proposed = own.num_draft_tokens / own.num_spec_steps if own.num_spec_steps else 0.0
        if not by_itself:
            return _bad(
                prompt,
                answer,
                f"drafts trimmed under load ({proposed:.2f} of {own.num_spec_tokens} tokens "
                "proposed per step, others running): the deep positions were not all tried",
            )
        histogram, draft_tokens = own.acceptance_histogram, own.num_draft_tokens
    steps = sum(histogram)
    if steps == 0 or not draft_tokens:
        return _bad(prompt, answer, "nothing drafted")
    k = own.num_spec_tokens
    per_pos = tuple(sum(histogram[i + 1 :]) / steps for i in range(k))
    return Reading(
        prompt,
        True,
        "valid",
        drafts=float(steps),
        draft_tokens=float(draft_tokens),
        accepted=float(sum(j * n for j, n in enumerate(histogram))),
        per_pos=per_pos,
        seconds=answer.seconds,
        source="own",
    )


def _from_counters(
    prompt: str, before: EngineMetrics | None, after: EngineMetrics | None, answer: Answer
) -> Reading:
    """The engine's counters around the request: they count only when nothing else ran."""
    if before is None or after is None or before.spec is None or after.spec is None:
        return _bad(prompt, answer, "no spec-decode metrics around the request")
    for when, engine in (("before", before), ("after", after)):
        if not alone(engine):
            return _bad(prompt, answer, f"other requests running or waiting {when} it")
    old, new = before.spec, after.spec
    if answer.completion_tokens is None:
        return _bad(prompt, answer, "the response reports no usage.completion_tokens")
    if before.generation_tokens is None or after.generation_tokens is None:
        return _bad(prompt, answer, "no generation_tokens counter")
    generated = after.generation_tokens - before.generation_tokens
    if generated != answer.completion_tokens:
        return _bad(
            prompt,
            answer,
            f"generation tokens grew by {generated:.0f}, the response made "
            f"{answer.completion_tokens}: other traffic",
        )
    drafts = new.drafts - old.drafts
    moved = (drafts, new.draft_tokens - old.draft_tokens, new.accepted - old.accepted)
    if not all(math.isfinite(v) for v in moved):
        return _bad(prompt, answer, "spec-decode counters are not finite numbers")
    if drafts <= 0 or new.draft_tokens <= old.draft_tokens:
        return _bad(prompt, answer, "nothing drafted")
    per_pos: tuple[float, ...] = ()
    if len(new.per_pos) == len(old.per_pos):
        per_pos = tuple((b - a) / drafts for a, b in zip(old.per_pos, new.per_pos, strict=True))
    return Reading(
        prompt,
        True,
        "valid",
        drafts=drafts,
        draft_tokens=new.draft_tokens - old.draft_tokens,
        accepted=new.accepted - old.accepted,
        per_pos=per_pos,
        seconds=answer.seconds,
    )


def take(
    prompts: Mapping[str, str],
    scrape: Callable[[], EngineMetrics | None],
    ask: Callable[[str], Answer],
    t: float,
) -> Round:
    """Send each prompt in turn, scraping before and after; stops at the first that does not
    count (the engine is busy or trimming now: the rest would not count either)."""
    readings: list[Reading] = []
    own: bool | None = None
    before = scrape()
    created = before.spec.created if before is not None and before.spec is not None else None
    for name, text in prompts.items():
        answer = ask(text)
        if answer.ok:
            own = answer.own is not None
        after = scrape()
        reading = measure(name, before, after, answer)
        readings.append(reading)
        if not reading.valid:
            break
        before = after
    return Round(t, tuple(readings), created, own)
