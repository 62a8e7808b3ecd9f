"""The /metrics reader on the real fixture and on pages that are not what they should be."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkwarden.vllm.metrics import MetricsError, keep_recorded, parse

FIXTURE = (Path(__file__).parents[1] / "fixtures/vllm-metrics-spec-decode.prom").read_text()


def test_fixture_figures() -> None:
    m = parse(FIXTURE)
    assert m.spec is not None
    assert m.spec.drafts == 2.04363e06 and m.spec.draft_tokens == 1.021815e07
    assert m.spec.accepted == 3.14719e06
    assert m.spec.per_pos == (1.592e06, 987000.0, 301000.0, 164000.0, 103190.0)
    assert m.spec.created == pytest.approx(1.7960193643505929e09)
    assert (m.running, m.waiting, m.generation_tokens) == (1.0, 0.0, 1.8421337e07)
    assert m.kv_cache == 0.0734 and m.context == 0.0734  # one request holds it all
    assert m.busy


def test_older_kv_cache_name_and_an_idle_engine() -> None:
    old = FIXTURE.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert parse(old).kv_cache == 0.0734
    running = next(ln for ln in FIXTURE.splitlines() if ln.startswith("vllm:num_requests_run"))
    idle = FIXTURE.replace(running, running.replace("} 1.0", "} 0.0"))
    assert parse(idle).running == 0.0 and parse(idle).context is None  # no request, no context


def test_without_spec_decode_series() -> None:
    lines = [ln for ln in FIXTURE.splitlines() if "spec_decode" not in ln]
    m = parse("\n".join(lines) + "\n")
    assert m.spec is None and m.running == 1.0


@pytest.mark.parametrize(
    "page", ["", "<html>\x00 not prometheus {{{", "# just a comment\n", "other_metric 1\n"]
)
def test_unusable_pages_are_errors(page: str) -> None:
    with pytest.raises(MetricsError):
        parse(page)


def test_record_filter_keeps_only_what_decisions_need() -> None:
    noisy = (
        FIXTURE + "# HELP vllm:e2e_request_latency_seconds x\n"
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 3.0\n'
    )
    kept = keep_recorded(noisy)
    assert "e2e_request_latency" not in kept
    assert kept.count("\n") == FIXTURE.count("\n")  # everything the fixture has is read
    assert parse(kept) == parse(FIXTURE)
