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
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DEPTH_RATIO = 0.8
LOWEST = 0.25
GRID = tuple(LOWEST + (1.0 - LOWEST) * j / 12 for j in range(13))
#: accepted tokens the hardest text would have at a position for it to be read (noise ~18 %)
MIN_COUNT = 30


def healthy_share(accepted: Sequence[float], drafts: float) -> float | None:
    """The healthy share of drafting behind per-position accepted-token counts over ``drafts``
    drafts; None while the drafts are too few to read a shape (fewer than two positions at
    which even the hardest text, ``LOWEST``, would have been accepted ``MIN_COUNT`` times).

    A position is read by what the hardest text would show there, not by what it did show: a
    collapsed drafter's empty deep positions are evidence, and are kept. Residuals are weighted
    by 1/sqrt(rate), as counting noise is, floored at ``MIN_COUNT`` tokens. About 0.2 ms."""
    floor = MIN_COUNT / drafts if drafts > 0 else math.inf
    read = [
        (i, n / drafts)
        for i, n in enumerate(accepted)
        if LOWEST * (DEPTH_RATIO * LOWEST) ** i >= floor
    ]
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
