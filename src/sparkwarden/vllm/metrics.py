"""vLLM's ``/metrics`` page, read with prometheus_client's own parser, down to what decisions use.

Counters are summed over label sets (several engines), per-position counters are kept in order,
and the ``_created`` time comes along: a new one means the counters reset (a restarted engine).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from sparkwarden.base.errors import SparkwardenError, scrub

PREFIX = "vllm:spec_decode_"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
CREATED = "vllm:spec_decode_num_draft_tokens_created"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
GENERATION = "vllm:generation_tokens_total"
PROMPT = "vllm:prompt_tokens_total"
#: KV-cache usage (0..1); older vLLM names it after the GPU cache
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")

#: The series ``sparkwarden record`` keeps: enough to replay every decision, nothing more.
RECORDED_PREFIXES = (
    PREFIX,
    "vllm:num_requests_",
    "vllm:generation_tokens",
    "vllm:prompt_tokens_total",
    *KV_CACHE,
)
#: What it means when a page that answers has no ``vllm:`` series at all.
NO_STATS = (
    "/metrics has no vllm: series: the engine runs with --disable-log-stats "
    "(no request gauges, no token or spec-decode counters)"
)


class MetricsError(SparkwardenError):
    """The page is not Prometheus text."""


class NoStats(MetricsError):
    """A well-formed page without a single ``vllm:`` series: vLLM started with
    ``--disable-log-stats`` creates no stat logger, yet ``/metrics`` answers 200 (0.10 to 0.33)."""


@dataclass(frozen=True)
class SpecDecode:
    drafts: float
    draft_tokens: float
    accepted: float
    per_pos: tuple[float, ...]
    created: float | None


@dataclass(frozen=True)
class EngineMetrics:
    spec: SpecDecode | None
    running: float | None
    waiting: float | None
    generation_tokens: float | None
    kv_cache: float | None = None
    prompt_tokens: float | None = None

    @property
    def busy(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    @property
    def context(self) -> float | None:
        """KV cache held per running request: how long the conversations are right now."""
        if self.kv_cache is None or not self.running:
            return None
        return self.kv_cache / self.running


def parse(text: str) -> EngineMetrics:
    """The figures sparkwarden decides on; raises :class:`MetricsError` on anything else."""
    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    created: float | None = None
    kv_cache: float | None = None
    try:
        # A real page has hundreds of histogram lines; parsing only ours is ~10x cheaper.
        for family in text_string_to_metric_families(keep_recorded(text)):
            for sample in family.samples:
                name = sample.name
                if name == PER_POS:
                    position = int(sample.labels.get("position", "0"))
                    per_pos[position] = per_pos.get(position, 0.0) + sample.value
                elif name == CREATED:
                    created = sample.value if created is None else min(created, sample.value)
                elif name in KV_CACHE:  # a share per engine: the fullest one speaks for all
                    kv_cache = sample.value if kv_cache is None else max(kv_cache, sample.value)
                elif name in (DRAFTS, DRAFT_TOKENS, ACCEPTED, RUNNING, WAITING, GENERATION, PROMPT):
                    sums[name] = sums.get(name, 0.0) + sample.value
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise MetricsError(scrub(f"/metrics is not Prometheus text: {exc}")) from None
    if not sums and not per_pos:
        if "vllm:" not in text:
            raise NoStats(NO_STATS)
        raise MetricsError("/metrics has none of the vllm: series sparkwarden reads")
    spec = None
    if DRAFT_TOKENS in sums and ACCEPTED in sums:
        spec = SpecDecode(
            drafts=sums.get(DRAFTS, 0.0),
            draft_tokens=sums[DRAFT_TOKENS],
            accepted=sums[ACCEPTED],
            per_pos=tuple(per_pos[i] for i in sorted(per_pos)),
            created=created,
        )
    return EngineMetrics(
        spec,
        sums.get(RUNNING),
        sums.get(WAITING),
        sums.get(GENERATION),
        kv_cache,
        sums.get(PROMPT),
    )


def keep_recorded(text: str) -> str:
    """Only the lines ``record`` stores (and their HELP/TYPE), so a trace stays small."""
    kept = []
    for line in text.splitlines():
        body = line.split(" ", 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else line
        if body.startswith(RECORDED_PREFIXES):
            kept.append(line)
    return "\n".join(kept) + "\n"
