"""vLLM's per-request spec-decode payload (``--per-request-spec-decode-metrics``), validated,
and one timed answer that may carry it: what the client hands the drafting canary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

#: a count a real answer can carry (a larger one is not vLLM's, and would overflow a float)
Count = Annotated[int, Field(ge=0, le=10**9)]
#: a full-length draft step read only when at least this many, and half the steps, were full
MIN_FULL_STEPS = 8


class OwnStats(BaseModel):
    """vLLM's per-request ``metrics.speculative_decoding`` (``SpeculativeDecodingMetrics``, 0.29.0
    on, the same in 0.33.0: ``acceptance_histogram[j]`` counts the verify steps that accepted
    exactly ``j`` draft tokens, the bonus token excluded). Only the fields a reading needs; the
    rest is ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    acceptance_histogram: tuple[Count, ...]
    num_spec_steps: Count
    num_draft_tokens: Count
    num_spec_tokens: Annotated[int, Field(ge=1, le=1024)]
    #: per verify step, in order (``detailed`` only): what it accepted and what it proposed
    per_step_accepted: tuple[Count, ...] | None = None
    per_step_drafted: tuple[Count, ...] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> OwnStats:
        k = self.num_spec_tokens
        if len(self.acceptance_histogram) != k + 1:
            raise ValueError(
                f"acceptance_histogram has {len(self.acceptance_histogram)} buckets, "
                f"num_spec_tokens {k} needs {k + 1}"
            )
        if sum(self.acceptance_histogram) != self.num_spec_steps:
            raise ValueError("acceptance_histogram does not add up to num_spec_steps")
        steps = (self.per_step_accepted, self.per_step_drafted)
        if any(s is not None and len(s) != self.num_spec_steps for s in steps):
            raise ValueError("per_step arrays do not have num_spec_steps entries")
        if self.per_step_accepted and self.per_step_drafted:
            pairs = zip(self.per_step_accepted, self.per_step_drafted, strict=True)
            if any(not a <= d <= k for a, d in pairs):
                raise ValueError("a step accepted more than it drafted, or drafted more than K")
        return self

    @classmethod
    def parse(cls, payload: object) -> OwnStats | str:
        """The stats, or why they cannot be read (a reading that says so)."""
        try:
            return cls.model_validate(payload)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "speculative_decoding"
            return f"per-request spec-decode metrics unreadable ({where}: {first['msg']})"

    def full_histogram(self) -> tuple[int, ...] | None:
        """The histogram over the steps that proposed all K draft tokens: all of them, or (with
        ``detailed``) those the arrays show; None when trimmed drafts cannot be told apart."""
        k = self.num_spec_tokens
        if self.per_step_accepted is not None and self.per_step_drafted is not None:
            full = [0] * (k + 1)
            steps = zip(self.per_step_accepted, self.per_step_drafted, strict=True)
            for accepted, drafted in steps:
                if drafted == k:
                    full[accepted] += 1
            # a few full steps (the canary alone in a batch a moment) read the deep positions
            # on a handful of drafts: noise, not a measure
            enough = max(MIN_FULL_STEPS, self.num_spec_steps / 2)
            return tuple(full) if sum(full) >= enough else None
        if self.num_draft_tokens != k * self.num_spec_steps:
            return None
        return self.acceptance_histogram


@dataclass(frozen=True)
class Answer:
    """The response to one canary request, as the adapter saw it."""

    ok: bool
    completion_tokens: int | None
    seconds: float
    detail: str = ""
    #: the request's own spec-decode stats, or why they could not be read; None: not offered
    #: (vLLM without ``--per-request-spec-decode-metrics``)
    own: OwnStats | str | None = None
    #: neither answered nor refused within its timeout: the daemon's request unanswered
    timed_out: bool = False
