"""The stand-in is only worth testing against if it speaks exactly like vLLM."""

from __future__ import annotations

import argparse
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from tests.standin.vllm_standin import Engine, go_float, parse_args

FIXTURE = Path(__file__).resolve().parent / "fixtures/vllm-metrics-spec-decode.prom"
#: pages made by released vLLM's own metric classes (scripts/vllm_pages.py)
VLLM_PAGES = Path(__file__).resolve().parent / "fixtures/vllm"


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
    for version in ("0.10.2", "0.12.0", "0.33.0"):  # each series as vLLM's own classes write it
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
