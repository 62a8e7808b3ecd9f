"""How one request drafts and what it accepts: the per-position acceptance laws by prompt class,
the request's verify steps, and its own spec-decode stats as vLLM 0.29.0 on reports them.

Kept apart from the traffic and the engine because tests and ``devtools/traces.py`` draw on the
laws alone, without a server.
"""

from __future__ import annotations

import random

# Drafting is counted per request, draft by draft: a greedy request (temperature 0) draws from a
# generator seeded by its prompt and seed, so the same prompt drafts the same tokens every time.
# The law of depth is deliberately *not* sparkwarden's a*(0.8a)^i: with --law deeper-easier, a
# hard text's deeper positions, once reached, are accepted more often than its first (the
# field's mixed-traffic curve 51.8, 32.3, 20.4, 12.4, 8.1 % has conditional ratios 0.62..0.67).

#: position-0 acceptance by prompt class (FIELD-NOTES)
CLASS_ALPHA = {"math": 0.78, "code": 0.75, "mixed": 0.52, "prose": 0.30}


#: --law deeper-easier: position i >= 1, once reached, is accepted at a + (CEILING - a) * w[i-1]:
#: for mixed text (a = 0.518) the ratios 0.62, 0.63, 0.65, 0.67 of the field's curve; prose
#: (0.30) 0.47..0.55, easier than its position 0
CEILING = 0.85
DEEPER = (0.30, 0.35, 0.40, 0.45)


def conditional(alpha0: float, k: int, law: str) -> list[float]:
    """Acceptance of each position given the one before was accepted."""
    if law == "geometric":
        return [alpha0] + [0.8 * alpha0] * (k - 1)
    deeper = [alpha0 + (CEILING - alpha0) * DEEPER[min(i, len(DEEPER) - 1)] for i in range(k - 1)]
    return [alpha0, *deeper]


def prompt_class(text: str) -> str:
    """The class a prompt belongs to, by a word in it (the shipped canary prompts have one)."""
    lowered = text.lower()
    if any(w in lowered for w in ("compute", "math", "sum", "divide")):
        return "math"
    if any(w in lowered for w in ("python", "function", "code")):
        return "code"
    if any(w in lowered for w in ("describe", "story", "prose", "paragraph")):
        return "prose"
    return "mixed"


class Request:
    """One request's drafting, step by step: greedy requests draw from a generator seeded by
    their prompt and seed, so the same prompt drafts the same tokens every time."""

    def __init__(
        self, rng: random.Random, spoil: float, cond: list[float], max_tokens: int, k: int
    ) -> None:
        self.rng, self.spoil, self.cond, self.max_tokens = rng, spoil, cond, max_tokens
        self.made = 0
        self.drafting = Drafting(k)

    @property
    def done(self) -> bool:
        return self.made >= self.max_tokens

    def step(self, drafted: int) -> int:
        """One verify step of ``drafted`` draft tokens: how many were accepted (the bonus
        token comes on top). A step that drafts nothing makes one token and counts no draft."""
        accepted = 0
        if drafted:
            spoilt = self.rng.random() < self.spoil
            for c in self.cond[:drafted]:
                if spoilt or self.rng.random() >= c or self.made + accepted + 1 >= self.max_tokens:
                    break
                accepted += 1
            self.drafting.observe(drafted, accepted)
        self.made += accepted + 1
        return accepted


class Drafting:
    """A request's own spec-decode stats, as vLLM's ``RequestSpecDecodeMetrics`` (0.29.0 on)
    (vllm/v1/metrics/stats.py): a dense histogram of accepted draft tokens per verify step
    (index j: steps that accepted exactly j, bonus token excluded, length K+1) and the draft
    tokens proposed; per-step lists kept for ``detailed``."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.histogram = [0] * (k + 1)
        self.draft_tokens = 0
        self.per_step_accepted: list[int] = []
        self.per_step_drafted: list[int] = []

    @property
    def steps(self) -> int:
        return sum(self.histogram)

    def observe(self, drafted: int, accepted: int) -> None:
        self.histogram[accepted] += 1
        self.draft_tokens += drafted
        self.per_step_accepted.append(accepted)
        self.per_step_drafted.append(drafted)

    def payload(self, level: str, stream: bool = False) -> dict[str, object]:
        """``metrics.speculative_decoding`` as vLLM serialises it: the answer (``model_dump``)
        carries the per-step fields as null unless ``detailed``; the stream's usage chunk
        (``exclude_none``) leaves them out."""
        steps = self.steps
        accepted = sum(j * count for j, count in enumerate(self.histogram))
        out: dict[str, object] = {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / self.draft_tokens if self.draft_tokens else 0.0,
            "acceptance_histogram": list(self.histogram),
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": self.draft_tokens,
            "num_spec_tokens": self.k,
            "per_step_accepted": None,
            "per_step_drafted": None,
        }
        if level == "detailed" and steps:
            out["per_step_accepted"] = list(self.per_step_accepted)
            out["per_step_drafted"] = list(self.per_step_drafted)
        return {k: v for k, v in out.items() if v is not None} if stream else out


def per_request_metrics(
    drafting: Drafting | None, level: str, n: object, stream: bool
) -> dict[str, object] | None:
    """The response's ``metrics`` (vLLM 0.29.0 on ``PerRequestMetrics``, timing off): None when
    off, for ``n > 1`` (the stats are one sequence's of n), or without drafting."""
    if level == "none" or n != 1 or drafting is None:
        return None
    spec = drafting.payload(level, stream)
    if stream:
        return {"speculative_decoding": spec}
    timing = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms")
    return {**dict.fromkeys((*timing, "tokens_per_second")), "speculative_decoding": spec}
