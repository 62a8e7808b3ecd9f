"""A /metrics page shaped like a real vLLM server's: its histograms, counters and gauges.

Made with prometheus_client itself (as vLLM does), so sizes and formatting are realistic:
several hundred lines, most of them histogram buckets that sparkwarden never reads.
"""

from __future__ import annotations

import random

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    gc_collector,
    generate_latest,
    platform_collector,
    process_collector,
)

LABELS = ["engine", "model_name"]
MODEL = {"engine": "0", "model_name": "AEON-7/Qwen3.6-35B-A3B-heretic-NVFP4"}
LATENCY = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
TOKEN_TIME = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000]


def page(seed: int = 7) -> str:
    rng = random.Random(seed)  # noqa: S311 (sample data, not secrets)
    registry = CollectorRegistry()
    process_collector.ProcessCollector(registry=registry)
    platform_collector.PlatformCollector(registry=registry)
    gc_collector.GCCollector(registry=registry)
    histograms = [
        ("time_to_first_token_seconds", TOKEN_TIME),
        ("inter_token_latency_seconds", TOKEN_TIME),
        ("request_time_per_output_token_seconds", TOKEN_TIME),
        ("e2e_request_latency_seconds", LATENCY),
        ("request_queue_time_seconds", LATENCY),
        ("request_inference_time_seconds", LATENCY),
        ("request_prefill_time_seconds", LATENCY),
        ("request_decode_time_seconds", LATENCY),
        ("request_prompt_tokens", TOKENS),
        ("request_generation_tokens", TOKENS),
        ("iteration_tokens_total", TOKENS),
        ("request_max_num_generation_tokens", TOKENS),
        ("request_params_max_tokens", TOKENS),
    ]
    for name, buckets in histograms:
        h = Histogram(f"vllm:{name}", name, LABELS, buckets=buckets, registry=registry)
        for _ in range(200):
            h.labels(**MODEL).observe(rng.choice(buckets) * rng.random())
    for name in (
        "prompt_tokens",
        "generation_tokens",
        "num_preemptions",
        "prefix_cache_queries",
        "prefix_cache_hits",
        "spec_decode_num_drafts",
        "spec_decode_num_draft_tokens",
        "spec_decode_num_accepted_tokens",
    ):
        Counter(f"vllm:{name}", name, LABELS, registry=registry).labels(**MODEL).inc(
            rng.randint(10**5, 10**7)
        )
    per_pos = Counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "per position",
        [*LABELS, "position"],
        registry=registry,
    )
    for position in range(5):
        per_pos.labels(**MODEL, position=str(position)).inc(rng.randint(10**4, 10**6))
    finished = Counter(
        "vllm:request_success", "finished", [*LABELS, "finished_reason"], registry=registry
    )
    for reason in ("stop", "length", "abort"):
        finished.labels(**MODEL, finished_reason=reason).inc(rng.randint(1, 10**4))
    for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        Gauge(f"vllm:{name}", name, LABELS, registry=registry).labels(**MODEL).set(rng.random())
    return generate_latest(registry).decode()
