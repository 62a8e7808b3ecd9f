"""How much of the drafting is healthy, from the shape of per-position acceptance.

Why: acceptance swings 2.5x with the workload, so its level alone cannot tell a prose evening
from a decaying drafter. Its *shape* can. For text the drafter finds easy (position-0
acceptance ``a``), deeper positions hold up; for hard text they collapse: position ``i`` is
accepted at about ``a * (DEPTH_RATIO * a) ** i``. Any workload is a mix of such texts, so a
healthy window's per-position rates are a non-negative mix of those curves whose weights sum to
1. A decay that spoils a share of the drafts outright (the model the scoring corpus states)
scales every position by the same factor and leaves the mix's shape alone. So: fit the rates
with non-negative weights over a grid of curves; the weights' sum is the healthy share.

Two limits, on purpose. A workload on which the drafter is *always* wrong (a = 0) looks exactly
like decay, so the grid starts at ``LOWEST``: no real text is that hard. And ``DEPTH_RATIO``
need not be known: with ratio ``k/c`` the curve of ``a`` equals the curve of ``c*a`` divided by
``c``, so a wrong ratio rescales every window by the same factor, which the trigger's baseline
(learnt the same way after each restart) cancels.

Drafts of different lengths. Position ``i`` counts drafts with at least ``i+1`` tokens accepted,
but the scheduler trims drafts to its token budget and to ``max_model_len``: a draft cut to ``L``
tokens cannot be accepted past ``L``. Divided by *all* drafts, deep positions then fall with load,
not with health (on vLLM's own pages, half the drafts cut to 2 of 5 tokens reads 1.35x "healthier"
than the same drafter uncut: the shape looks like harder text). The right divisor is the drafts
that *reached* position ``i``; vLLM counts that (0.33's ``num_draft_tokens_per_pos``) but exports
no per-position draft counter in any release, only the total of drafted tokens. From drafts ``N``,
drafted tokens ``D`` and K positions, ``M = N*K - D`` draft slots were trimmed, and a draft that
misses position ``i`` misses all ``K - i`` slots from there, so at most ``M // (K - i)`` drafts
missed it; every counted draft reached position 0 (a draft of no token is not counted). Which
drafts were cut is not in the counters: 1.5N slots missing may be 0.5N drafts cut to 2, or 0.375N
cut to 1. So a position is read only where that doubt is small: at most ``TRIM_DOUBT`` of the drafts
may have missed it, and its rate is taken over the middle of what could have reached it. Deeper
positions are left out; with fewer than two left the window cannot be read, and stays open.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DEPTH_RATIO = 0.8
LOWEST = 0.25
GRID = tuple(LOWEST + (1.0 - LOWEST) * j / 12 for j in range(13))
#: accepted tokens the hardest text would have at a position for it to be read (noise ~18 %)
MIN_COUNT = 30
#: the largest share of drafts that may have been trimmed short of a position it is read at
TRIM_DOUBT = 0.1


def reach(drafts: float, draft_tokens: float | None, positions: int) -> list[tuple[float, float]]:
    """For each position, the fewest and the most drafts that could have reached it, from the
    drafts and the drafted tokens (see the module docstring: the exact number is not exported)."""
    missing = max(0.0, drafts * positions - draft_tokens) if draft_tokens is not None else 0.0
    bounds = [(drafts, drafts)]
    for i in range(1, positions):
        # a draft missing position i misses K - i slots from there; the slots past i are at
        # most drafts * (K-1-i), and a draft cut before i misses at most i slots up to it
        before = max(0.0, missing - drafts * (positions - 1 - i))
        fewest = max(0.0, drafts - missing // (positions - i))
        bounds.append((fewest, max(fewest, drafts - math.ceil(before / i))))
    return bounds


def too_trimmed(drafts: float, draft_tokens: float, positions: int) -> bool:
    """So many drafts trimmed that position 1 cannot be read, and so no shape at all."""
    return (
        positions >= 2 and reach(drafts, draft_tokens, positions)[1][0] < (1 - TRIM_DOUBT) * drafts
    )


def healthy_share(
    accepted: Sequence[float], drafts: float, draft_tokens: float | None = None
) -> float | None:
    """The healthy share of drafting behind per-position accepted-token counts over ``drafts``
    drafts of ``draft_tokens`` tokens in all (None: none trimmed); None while the drafts are too
    few, or too trimmed, to read a shape (fewer than two positions at which even the hardest
    text, ``LOWEST``, would have been accepted ``MIN_COUNT`` times and which at most
    ``TRIM_DOUBT`` of the drafts may have missed).

    A position is read by what the hardest text would show there, not by what it did show: a
    collapsed drafter's empty deep positions are evidence, and are kept. Residuals are weighted
    by 1/sqrt(rate), as counting noise is, floored at ``MIN_COUNT`` tokens. About 0.2 ms."""
    floor = MIN_COUNT / drafts if drafts > 0 else math.inf
    read = []
    for i, ((fewest, most), n) in enumerate(
        zip(reach(drafts, draft_tokens, len(accepted)), accepted, strict=True)
    ):
        if fewest < (1 - TRIM_DOUBT) * drafts or LOWEST * (DEPTH_RATIO * LOWEST) ** i < floor:
            break  # deeper positions are reached by fewer drafts and count fewer tokens
        read.append((i, n / ((fewest + most) / 2)))
    if len(read) < 2:
        return None
    weights = [1 / math.sqrt(max(rate, floor)) for _, rate in read]
    curves = [
        [w * a * (DEPTH_RATIO * a) ** i for (i, _), w in zip(read, weights, strict=True)]
        for a in GRID
    ]
    return sum(nnls(curves, [w * rate for (_, rate), w in zip(read, weights, strict=True)]))


def nnls(columns: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Least squares with non-negative coefficients (Lawson and Hanson's active set).

    ``columns[j]`` is the j-th column. Hand-written because the problem is tiny (rows =
    positions, 13 columns) and numpy + scipy would cost the daemon ~30 MiB for one call."""
    n = len(columns)
    x = [0.0] * n
    passive: list[int] = []
    spanned: set[int] = set()  # columns the passive ones already span: adding them is futile
    for _ in range(3 * n):
        residual = _residual(columns, x, y)
        gradient = [_dot(column, residual) for column in columns]
        free = [
            j for j in range(n) if j not in passive and j not in spanned and gradient[j] > 1e-12
        ]
        if not free:
            break
        passive.append(max(free, key=lambda j: gradient[j]))
        while passive:
            z = _least_squares([columns[j] for j in passive], y)
            if z is None:
                spanned.add(passive.pop())
                break
            if all(v > 0 for v in z):
                x = [0.0] * n
                for j, v in zip(passive, z, strict=True):
                    x[j] = v
                spanned.clear()
                break
            # Step from x towards z until the first coefficient reaches zero; drop it.
            step = min(x[j] / (x[j] - v) for j, v in zip(passive, z, strict=True) if v <= 0)
            for j, v in zip(passive, z, strict=True):
                x[j] += step * (v - x[j])
            passive = [j for j in passive if x[j] > 1e-15]
            x = [x[j] if j in passive else 0.0 for j in range(n)]
    return x


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(p * q for p, q in zip(a, b, strict=True))


def _residual(
    columns: Sequence[Sequence[float]], x: Sequence[float], y: Sequence[float]
) -> list[float]:
    fit = [0.0] * len(y)
    for column, coefficient in zip(columns, x, strict=True):
        if coefficient:
            for i, value in enumerate(column):
                fit[i] += coefficient * value
    return [target - f for target, f in zip(y, fit, strict=True)]


def _least_squares(columns: Sequence[Sequence[float]], y: Sequence[float]) -> list[float] | None:
    """Unconstrained least squares by modified Gram-Schmidt; None when the columns are
    (numerically) dependent."""
    q: list[list[float]] = []
    r = [[0.0] * len(columns) for _ in columns]
    for k, column in enumerate(columns):
        v = list(column)
        for i, basis in enumerate(q):
            r[i][k] = _dot(basis, v)
            v = [a - r[i][k] * b for a, b in zip(v, basis, strict=True)]
        norm = math.sqrt(_dot(v, v))
        if norm <= 1e-10 * math.sqrt(_dot(column, column)):
            return None
        r[k][k] = norm
        q.append([a / norm for a in v])
    b = [_dot(basis, y) for basis in q]
    z = [0.0] * len(columns)
    for k in range(len(columns) - 1, -1, -1):
        z[k] = (b[k] - sum(r[k][j] * z[j] for j in range(k + 1, len(columns)))) / r[k][k]
    return z
