"""vLLM's ``/metrics`` page, read with prometheus_client's own parser, down to what decisions use.

Counters are summed over label sets (several engines), per-position counters are kept in order,
and the ``_created`` time comes along: a new one means the counters reset (a restarted engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
#: ``{sleep_state="awake"|"weights_offloaded"|"discard_all"}``, 1 or 0 each: awake 0 is an
#: engine put to sleep (``/sleep``, ``--enable-sleep-mode``), which still answers ``/health`` 200
#: (vllm/v1/metrics/loggers.py 0.12.0:421, 0.33.0:594)
SLEEP = "vllm:engine_sleep_state"
#: requests turned away by ``--max-num-queued-reqs`` / ``--max-num-queued-tokens`` (HTTP 503), by
#: ``reason``; no ``engine`` label (loggers.py 0.33.0:847; not in 0.29.0)
REJECTIONS = "vllm:admission_rejections_total"
#: ``num_requests_waiting`` split by ``reason``: ``capacity`` or ``deferred`` (0.27.0 on)
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
#: ``vllm:`` series the API server registers with no stat logger: with ``--tool-call-parser`` the
#: parser's counter is there even under ``--disable-log-stats`` (vllm/parser/metrics.py, 0.27.0 on)
WITHOUT_STATS = ("vllm:tool_call_parser_invocations",)

#: The series ``sparkwarden record`` keeps: enough to replay every decision, nothing more.
RECORDED_PREFIXES = (
    PREFIX,
    "vllm:num_requests_",
    "vllm:generation_tokens",
    "vllm:prompt_tokens_total",
    *KV_CACHE,
    SLEEP,
    "vllm:admission_rejections",
)
#: What it means when a page that answers has no ``vllm:`` series at all.
NO_STATS = (
    "/metrics has no vllm: stats: the engine runs with --disable-log-stats "
    "(no request gauges, no token or spec-decode counters)"
)


class MetricsError(SparkwardenError):
    """The page is not Prometheus text."""


class NoStats(MetricsError):
    """A well-formed page without a ``vllm:`` series of the stat logger: vLLM started with
    ``--disable-log-stats`` creates none, yet ``/metrics`` answers 200 (0.10 to 0.33), with only
    the series in :data:`WITHOUT_STATS` when there are any."""


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
    #: put to sleep (``vllm:engine_sleep_state`` awake 0), and how deep: 1 weights offloaded,
    #: 2 weights discarded, 0 only the KV cache released; None while awake
    sleeping: bool = False
    sleep_level: int | None = None
    #: turned away by queue limits, by reason (0.33.0 on; empty when not exported)
    rejections: dict[str, float] = field(default_factory=dict)
    waiting_by_reason: dict[str, float] = field(default_factory=dict)

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
    sleep: dict[str, float] = {}
    by_reason: dict[str, dict[str, float]] = {REJECTIONS: {}, WAITING_BY_REASON: {}}
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
                elif name == SLEEP:  # the sleepiest engine speaks for all
                    state = sample.labels.get("sleep_state", "")
                    pick = min if state == "awake" else max
                    sleep[state] = pick(sleep.get(state, sample.value), sample.value)
                elif name in by_reason:
                    counts = by_reason[name]
                    reason = sample.labels.get("reason", "")
                    counts[reason] = counts.get(reason, 0.0) + sample.value
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise MetricsError(scrub(f"/metrics is not Prometheus text: {exc}")) from None
    if not sums and not per_pos:
        if not has_stats(text):
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
    sleeping = sleep.get("awake", 1.0) == 0
    level = 2 if sleep.get("discard_all") else 1 if sleep.get("weights_offloaded") else 0
    return EngineMetrics(
        spec,
        sums.get(RUNNING),
        sums.get(WAITING),
        sums.get(GENERATION),
        kv_cache,
        sums.get(PROMPT),
        sleeping=sleeping,
        sleep_level=level if sleeping else None,
        rejections=by_reason[REJECTIONS],
        waiting_by_reason=by_reason[WAITING_BY_REASON],
    )


def has_stats(text: str) -> bool:
    """Whether a page carries a ``vllm:`` sample of the stat logger (not only the API server's
    own :data:`WITHOUT_STATS`): ``--disable-log-stats`` leaves none."""
    for line in text.splitlines():
        if line.startswith("vllm:") and not line.startswith(WITHOUT_STATS):
            return True
    return False


def keep_recorded(text: str) -> str:
    """Only the lines ``record`` stores (and their HELP/TYPE), so a trace stays small."""
    kept = []
    for line in text.splitlines():
        body = line.split(" ", 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else line
        if body.startswith(RECORDED_PREFIXES):
            kept.append(line)
    return "\n".join(kept) + "\n"
