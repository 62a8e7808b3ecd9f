"""``/metrics`` pages made by released vLLM's own metric classes (``scripts/vllm_pages.py``),
read by sparkwarden's parser: every version, every K, two engines, the multiprocess registry,
``--disable-log-stats``, and drafts trimmed under load."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparkwarden.config.schema import AcceptanceConfig
from sparkwarden.evidence.acceptance import AcceptanceState, observe, score
from sparkwarden.evidence.draft_shape import healthy_share
from sparkwarden.vllm.metrics import EngineMetrics, NoStats, SpecDecode, keep_recorded, parse

PAGES = Path(__file__).parents[1] / "fixtures" / "vllm"
VERSIONS = ("0.10.2", "0.12.0", "0.28.0", "0.29.0", "0.33.0", "0.34.0")
#: pages only the releases that have the series can make
SINCE = {"sleeping": "0.12.0", "tool-parser": "0.28.0", "queue-limits": "0.28.0"}
#: what the generator fed each engine (scripts/vllm_pages.py)
DRAFTS = 4000
ZERO = SpecDecode(0.0, 0.0, 0.0, (0.0,) * 5, None)


def page(version: str, name: str) -> EngineMetrics:
    return parse((PAGES / version / f"{name}.prom").read_text())


def test_every_version_has_every_page() -> None:
    assert sorted(p.name for p in PAGES.iterdir()) == list(VERSIONS)
    names = {"k1", "k5", "k15", "two-engines", "multiproc", "no-stats", "trimmed", "trimmed-light"}
    names |= {"trimmed-decayed", "trimmed-light-decayed"}
    for version in VERSIONS:
        extra = {name for name, since in SINCE.items() if _release(version) >= _release(since)}
        assert names | extra == {p.stem for p in (PAGES / version).glob("*.prom")}, version
        payload = (PAGES / version / "spec-decode-metrics.json").exists()
        assert payload == (_release(version) >= (0, 29, 0)), version  # the flag came in 0.29.0


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("k", [1, 5, 15])
def test_one_engine_pages(version: str, k: int) -> None:
    m = page(version, f"k{k}")
    assert m.spec is not None
    assert len(m.spec.per_pos) == k  # one position per speculative token
    assert m.spec.drafts == DRAFTS and m.spec.draft_tokens == DRAFTS * k
    assert m.spec.accepted == sum(m.spec.per_pos)  # position i: drafts with >= i+1 accepted
    assert list(m.spec.per_pos) == sorted(m.spec.per_pos, reverse=True)
    assert m.spec.created is not None  # one API server: _created samples exist
    assert (m.running, m.waiting, m.kv_cache) == (3.0, 0.0, 0.25)
    assert (m.generation_tokens, m.prompt_tokens) == (5000.0, 20000.0)
    assert m.busy and m.context == pytest.approx(0.25 / 3)
    rate = m.spec.accepted / m.spec.draft_tokens
    assert 0.1 < rate < 0.75  # the generator's drafter: 0.7 at position 0, falling
    if k >= 2:
        scored = score(ZERO if k == 5 else _zero(k), m.spec)
        assert scored is not None and scored[1] == "shape"
        assert scored[0] == pytest.approx(1.0, abs=0.1)  # a healthy drafter reads healthy


def _zero(k: int) -> SpecDecode:
    return SpecDecode(0.0, 0.0, 0.0, (0.0,) * k, None)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["two-engines", "multiproc"])
def test_two_engines_are_summed(version: str, name: str) -> None:
    m = page(version, name)
    assert (m.running, m.waiting) == (7.0, 1.0)  # 3 + 4 running, 0 + 1 waiting
    assert (m.generation_tokens, m.prompt_tokens) == (10100.0, 40100.0)
    assert m.kv_cache == 0.35  # the fuller engine speaks for both
    if version == "0.10.2":
        # 0.10.2 raises NotImplementedError for spec decoding with >1 engine: no series at all
        assert m.spec is None
        return
    assert m.spec is not None
    assert m.spec.drafts == 2 * DRAFTS and m.spec.draft_tokens == 2 * DRAFTS * 5
    assert len(m.spec.per_pos) == 5
    # the multiprocess registry (api_server_count > 1) writes no _created samples
    assert (m.spec.created is None) == (name == "multiproc")


@pytest.mark.parametrize("version", VERSIONS)
def test_disable_log_stats_page_is_told_apart(version: str) -> None:
    text = (PAGES / version / "no-stats.prom").read_text()
    assert "process_" in text and "vllm:" not in text
    with pytest.raises(NoStats, match="--disable-log-stats"):
        parse(text)


@pytest.mark.parametrize("version", VERSIONS)
def test_trimmed_pages_are_short_of_tokens(version: str) -> None:
    m = page(version, "trimmed")
    assert m.spec is not None and m.spec.drafts == DRAFTS
    # half the drafts cut to 2 of 5 tokens: about 3 / 5 * 1/2 of the slots missing
    assert 0.25 < 1 - m.spec.draft_tokens / (DRAFTS * 5) < 0.35


def _score(version: str, name: str) -> float | None:
    m = page(version, name)
    assert m.spec is not None
    scored = score(ZERO, m.spec)
    return None if scored is None else scored[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_trimming_under_load_moved_the_reading_over_all_drafts(version: str) -> None:
    """Why the divisor matters: per-position rates over all drafts read the trimmed page as a
    far 'healthier' shape than the same drafter uncut."""
    cut, whole = page(version, "trimmed").spec, page(version, "k5").spec
    assert cut is not None and whole is not None
    over_all = [healthy_share(s.per_pos, s.drafts) for s in (cut, whole)]
    assert over_all[0] is not None and over_all[1] is not None
    assert over_all[0] / over_all[1] > 1.25


@pytest.mark.parametrize("version", VERSIONS)
def test_light_trimming_reads_as_the_uncut_drafter_and_decay_still_shows(version: str) -> None:
    whole, light = _score(version, "k5"), _score(version, "trimmed-light")
    decayed = _score(version, "trimmed-light-decayed")
    assert whole is not None and light is not None and decayed is not None
    assert light == pytest.approx(whole, abs=0.08)
    assert 0.4 < decayed / whole < 0.6  # half the drafts spoilt


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["trimmed", "trimmed-decayed"])
def test_heavy_trimming_is_not_read_and_says_so(version: str, name: str) -> None:
    m = page(version, name)
    assert m.spec is not None
    assert score(ZERO, m.spec) is None
    cfg = AcceptanceConfig(window=60, min_draft_tokens=100)
    zero = EngineMetrics(replace(ZERO, created=m.spec.created), 0.0, 0.0, 0.0)
    state, _ = observe(AcceptanceState(), zero, 0.0, cfg)
    state, fire = observe(state, m, 120.0, cfg)
    assert fire is None and state.windows == 0  # the window stays open
    assert "% of draft slots trimmed under load" in state.note


@pytest.mark.parametrize("version", VERSIONS)
def test_what_record_keeps_reads_the_same(version: str) -> None:
    """``sparkwarden record`` stores only the series decisions read: the same figures."""
    for path in sorted((PAGES / version).glob("*.prom")):
        if path.stem not in ("no-stats", "tool-parser"):
            text = path.read_text()
            assert parse(keep_recorded(text)) == parse(text), path.name


@pytest.mark.parametrize("version", ["0.12.0", "0.33.0"])
def test_without_created_a_restart_shows_as_counters_going_back(version: str) -> None:
    """The multiprocess registry (api_server_count > 1) has no _created: counters lower than
    the last scrape's are then the only sign of a restarted engine."""
    before = page(version, "multiproc")
    fresh = page(version, "k5")
    assert before.spec is not None and before.spec.created is None and fresh.spec is not None
    after = replace(fresh, spec=replace(fresh.spec, created=None))
    cfg = AcceptanceConfig(window=60, min_draft_tokens=100)
    state, _ = observe(AcceptanceState(), before, 0.0, cfg)
    state, _ = observe(state, after, 30.0, cfg)
    assert state.note == "counters reset: learning a new baseline"
    assert state.anchor == after.spec


@pytest.mark.parametrize("version", ["0.28.0", "0.29.0", "0.33.0"])
def test_a_tool_call_parser_under_disable_log_stats_is_still_no_stats(version: str) -> None:
    """With ``--tool-call-parser`` the API server registers its own ``vllm:`` counter even
    under ``--disable-log-stats``: the page still has no stats, and is said so."""
    text = (PAGES / version / "tool-parser.prom").read_text()
    assert "vllm:tool_call_parser_invocations_total{" in text
    with pytest.raises(NoStats, match="--disable-log-stats"):
        parse(text)


@pytest.mark.parametrize("version", ["0.12.0", "0.28.0", "0.29.0", "0.33.0"])
def test_a_sleeping_engine_is_read_as_sleeping(version: str) -> None:
    asleep, awake = page(version, "sleeping"), page(version, "k5")
    assert asleep.sleeping and asleep.sleep_level == 1  # /sleep?level=1: weights offloaded
    assert not awake.sleeping and awake.sleep_level is None


@pytest.mark.parametrize("version", ["0.28.0", "0.29.0", "0.33.0"])
def test_queue_limits_and_why_requests_wait(version: str) -> None:
    m = page(version, "queue-limits")
    assert m.waiting_by_reason == {"capacity": 0.0, "deferred": 2.0}
    assert m.waiting == 2.0  # the sum of both reasons
    if version == "0.33.0":
        assert m.rejections == {"max_num_queued_reqs": 3.0, "max_num_queued_tokens": 1.0}
    else:  # admission_rejections_total is 0.33's
        assert m.rejections == {}
    assert page(version, "k5").rejections == (
        {}
        if version != "0.33.0"
        else dict.fromkeys(("max_num_queued_reqs", "max_num_queued_tokens"), 0.0)
    )


def test_the_per_request_payload_is_the_same_from_0_29_0() -> None:
    """``--per-request-spec-decode-metrics`` came in 0.29.0 (vllm#48915), not 0.33: its payload,
    made by each release's own classes for the same steps, is the same in both."""
    payloads = [(PAGES / v / "spec-decode-metrics.json").read_text() for v in ("0.29.0", "0.33.0")]
    assert payloads[0] == payloads[1]
    assert not (PAGES / "0.28.0" / "spec-decode-metrics.json").exists()


@pytest.mark.parametrize("name", sorted(p.stem for p in (PAGES / "0.34.0").glob("*.prom")))
def test_no_series_renamed_or_removed_from_0_33_to_0_34(name: str) -> None:
    """What sparkwarden reads of 0.33 it reads of 0.34: the same families on every page."""

    def families(version: str) -> set[str]:
        text = (PAGES / version / f"{name}.prom").read_text()
        return {line for line in text.splitlines() if line.startswith(("# HELP", "# TYPE"))}

    assert families("0.34.0") == families("0.33.0")
