"""The stand-in is only worth testing against if it speaks exactly like vLLM."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from devtools.standin.vllm_model.engine import Engine
from devtools.standin.vllm_model.exposition import go_float
from devtools.standin.vllm_model.flags import parse_args

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/vllm-metrics-spec-decode.prom"
#: pages made by released vLLM's own metric classes (scripts/vllm_pages.py)
VLLM_PAGES = Path(__file__).resolve().parents[1] / "fixtures/vllm"


def families(text: str) -> dict[str, set[frozenset[str]]]:
    """Family name -> the label-name sets of its samples (values differ, shape must not)."""
    out: dict[str, set[frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).add(frozenset(sample.labels))
    return out


def engine(*argv: str) -> Engine:
    args: argparse.Namespace = parse_args(list(argv))
    return Engine(args)


def test_numbers_are_formatted_like_prometheus_client() -> None:
    for value in (0.0, 1.0, 987000.0, 2.04363e06, 1.7960193643505647e09, 0.0734, 18421337.0):
        assert go_float(value) == floatToGoString(value)


def test_exposition_has_the_fixture_shape() -> None:
    ours = families(engine().exposition())
    fixture = families(FIXTURE.read_text())
    # the fixture predates prompt_tokens, which every vLLM release exports
    assert {k: v for k, v in ours.items() if not k.startswith("vllm:prompt_tokens")} == fixture
    for version in ("0.10.2", "0.12.0", "0.28.0", "0.29.0", "0.33.0"):  # as vLLM writes each
        real = families((VLLM_PAGES / version / "k5.prom").read_text())
        assert {name: real[name] for name in ours} == ours, version
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" in ours
    assert (
        frozenset({"engine", "model_name", "position"})
        in ours["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    )


def test_without_spec_decode_only_the_general_series_remain() -> None:
    names = families(engine("--no-spec-decode").exposition())
    assert not [n for n in names if "spec_decode" in n]
    assert "vllm:generation_tokens_total" in names


def counted(*argv: str) -> Engine:
    return engine("--traffic", "math,prose", "--drafts-per-s", "0", *argv)


def test_greedy_requests_draft_the_same_tokens_every_time_per_prompt() -> None:
    e = counted()
    assert e.traffic is not None
    first = e.traffic.request(e, "Compute 37 * 43", 128, 0, greedy=True)
    after_first = (e.drafts, tuple(e.per_pos))
    second = e.traffic.request(e, "Compute 37 * 43", 128, 0, greedy=True)
    assert first == second and first[0] == 128
    assert e.drafts == 2 * after_first[0]
    assert tuple(2 * v for v in after_first[1]) == tuple(e.per_pos)
    prose = e.traffic.request(e, "Describe a harbour", 128, 0, greedy=True)
    assert prose[1] > first[1]  # harder text: more drafts for the same tokens


def test_the_deeper_easier_law_is_not_ours() -> None:
    from devtools.standin.vllm_model.drafting import conditional

    hard = conditional(0.30, 5, "deeper-easier")
    assert hard[1] > hard[0] and hard[4] > hard[1]  # deeper positions, once reached, easier
    mixed = conditional(0.518, 5, "deeper-easier")
    assert [round(c, 2) for c in mixed[1:]] == [0.62, 0.63, 0.65, 0.67]  # the field's ratios
    assert conditional(0.30, 5, "geometric")[1] < 0.30


def test_three_decays_each_lower_what_they_should() -> None:
    def canary(kind: str, prompt: str) -> float:
        e = counted("--decay-kind", kind, "--decay-after", "0", "--decay-over", "0.000001")
        assert e.traffic is not None
        e.traffic.began = time.monotonic() - 1.0  # the decay is a second old
        e.traffic.request(e, prompt, 128, 0, greedy=True)
        return e.accepted / e.draft_tokens

    healthy = canary("none", "Describe a harbour")
    assert canary("whole", "Describe a harbour") < 0.6 * healthy
    assert canary("per-token", "Describe a harbour") < 0.6 * healthy
    # confined to the users' high-volume prompts: no canary sees it, whatever its class
    assert canary("hot", "Describe a harbour") == healthy
    assert canary("hot", "Compute 37 * 43") == canary("none", "Compute 37 * 43")
    users = counted("--decay-kind", "hot", "--decay-after", "0", "--decay-over", "0.000001")
    assert users.traffic is not None
    assert users.traffic.odds("math", 1.0, False)[1][0] < 0.6 * 0.78


def test_a_decay_on_cue_begins_when_told_not_before() -> None:
    """SIGUSR2's handler: a decay that a timer would start a day later begins at once."""
    e = counted("--decay-kind", "per-token", "--decay-after", "86400", "--decay-over", "0.000001")
    assert e.traffic is not None
    assert e.traffic.decay_level(e.traffic.clock() + 3600) == 0.0
    e.traffic.begin_decay()
    time.sleep(0.01)
    assert e.traffic.decay_level(e.traffic.clock()) == e.args.decay_depth
