"""The healthy share from per-position acceptance, and the non-negative least squares under it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwarden.evidence.draft_shape import DEPTH_RATIO, healthy_share, nnls, reach, too_trimmed

DRAFTS = 1e6


def counts(
    mix: dict[float, float], spoiled: float = 0.0, ratio: float = DEPTH_RATIO
) -> list[float]:
    """Accepted tokens per position for ``DRAFTS`` drafts of a mix of texts (position-0
    acceptance -> share), a ``spoiled`` share of drafts rejected outright."""
    return [
        DRAFTS * (1 - spoiled) * sum(w * a * (ratio * a) ** i for a, w in mix.items())
        for i in range(5)
    ]


@pytest.mark.parametrize(
    "mix",
    [
        {0.30: 1.0},
        {0.52: 1.0},
        {0.78: 1.0},
        {0.3: 0.5, 0.78: 0.5},
        {0.3: 0.2, 0.52: 0.3, 0.75: 0.5},
    ],
)
def test_any_healthy_mix_is_whole(mix: dict[float, float]) -> None:
    share = healthy_share(counts(mix), DRAFTS)
    assert share is not None and share == pytest.approx(1.0, abs=0.015)


@pytest.mark.parametrize("spoiled", [0.1, 0.3, 0.6])
@pytest.mark.parametrize("mix", [{0.52: 1.0}, {0.3: 0.5, 0.78: 0.5}])
def test_a_decay_shows_as_the_share_it_spoils(mix: dict[float, float], spoiled: float) -> None:
    share = healthy_share(counts(mix, spoiled), DRAFTS)
    assert share is not None and share == pytest.approx(1 - spoiled, abs=0.015)


def test_a_wrong_depth_ratio_rescales_every_window_alike() -> None:
    """Why the ratio needs no tuning: the baseline, measured the same way, cancels it."""
    ratio = 0.9
    healthy = [healthy_share(counts(m, 0.0, ratio), DRAFTS) for m in ({0.3: 1.0}, {0.6: 1.0})]
    decayed = healthy_share(counts({0.45: 1.0}, 0.3, ratio), DRAFTS)
    assert healthy[0] is not None and healthy[1] is not None and decayed is not None
    assert healthy[0] == pytest.approx(healthy[1], rel=0.02)
    assert decayed / healthy[0] == pytest.approx(0.7, abs=0.02)


def test_too_few_drafts_say_nothing_but_a_collapse_says_a_lot() -> None:
    assert healthy_share([100, 20, 5, 1, 0], 400) is None  # the hardest text: < 30 at pos 1
    collapsed = healthy_share([40, 0, 0, 0, 0], 10_000)  # empty deep positions are evidence
    assert collapsed is not None and collapsed < 0.1


columns = st.lists(
    st.lists(st.floats(0, 10, allow_nan=False), min_size=4, max_size=4), min_size=1, max_size=8
)


@settings(max_examples=300, deadline=None)
@given(columns, st.lists(st.floats(-10, 10, allow_nan=False), min_size=4, max_size=4))
def test_nnls_meets_the_optimality_conditions(cols: list[list[float]], y: list[float]) -> None:
    """Karush-Kuhn-Tucker: x >= 0; no column can lower the residual by growing (gradient <= 0);
    every column in use is at a stationary point (gradient = 0)."""
    x = nnls(cols, y)
    residual = [y[i] - sum(x[j] * cols[j][i] for j in range(len(cols))) for i in range(4)]
    for j, column in enumerate(cols):
        gradient = sum(c * r for c, r in zip(column, residual, strict=True))
        scale = 1 + sum(c * c for c in column) * (1 + sum(v * v for v in y))
        assert x[j] >= 0
        assert gradient <= 1e-7 * scale
        if x[j] > 1e-9:
            assert abs(gradient) <= 1e-7 * scale


def test_reach_bounds_what_could_have_reached_each_position() -> None:
    # 100 drafts of K=5, 400 drafted tokens: 100 slots trimmed (at least 25 drafts cut to 1)
    assert reach(100, 400, 5) == [(100, 100), (75, 100), (67, 100), (50, 100), (0, 75)]
    # 300 slots trimmed: at most 100 past position 3, so 200 at 1..3, 3 at most per draft
    assert reach(100, 200, 5)[3] == (0, 33)
    assert reach(100, 500, 5) == [(100, 100)] * 5  # none trimmed: every draft reached every one
    assert reach(100, None, 5) == [(100, 100)] * 5


def test_which_drafts_were_trimmed_is_not_in_the_counters() -> None:
    """Why reach is a range: two trimmings give vLLM's counters the same values (drafts,
    drafted tokens, accepted per position) yet different drafts at position 1."""

    def counters(lengths: list[int], accepted: int) -> tuple[int, int, list[int]]:
        per_pos = [0] * 5
        for length in lengths:
            for i in range(min(accepted, length)):
                per_pos[i] += 1
        return len(lengths), sum(lengths), per_pos

    cut_to_one = [1] * 25 + [5] * 75  # 25 drafts miss positions 1 to 4
    last_missing = [4] * 100  # every draft misses only position 4
    assert counters(cut_to_one, 1) == counters(last_missing, 1)
    reached_1 = [sum(n >= 2 for n in lengths) for lengths in (cut_to_one, last_missing)]
    assert reached_1 == [75, 100]
    fewest, most = reach(100, 400, 5)[1]
    assert fewest <= min(reached_1) and max(reached_1) <= most  # both inside the bounds


def test_heavily_trimmed_drafts_are_not_read() -> None:
    rates = [DRAFTS * 0.6 * (0.48) ** i for i in range(5)]
    assert healthy_share(rates, DRAFTS, DRAFTS * 5) == pytest.approx(1.0, abs=0.02)
    assert healthy_share(rates, DRAFTS, DRAFTS * 3.5) is None  # 30% of the slots trimmed
    assert too_trimmed(DRAFTS, DRAFTS * 3.5, 5) and not too_trimmed(DRAFTS, DRAFTS * 4.9, 5)
