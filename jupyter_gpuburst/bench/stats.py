"""Quantiles as every benchmark reports them: nearest rank, with the sample count beside them."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least q% of the samples at or below it."""
    ordered = sorted(values)
    if not ordered:
        return None
    # q * n / 100 in floating point can land a hair above a whole rank (99.9 * 1000 / 100)
    rank = max(1, math.ceil(q * len(ordered) / 100 - 1e-9))
    return ordered[rank - 1]


def summary(values: Iterable[float], scale: float = 1.0, digits: int = 4) -> dict[str, float | int | None]:
    """n, p50, p99, p99.9 and max (times ``scale``, e.g. 1000 for seconds -> ms).

    p99.9 is only a tail of its own with at least 1,000 samples; below that it is reported as
    null rather than as a copy of the max.
    """
    ordered = sorted(values)
    n = len(ordered)

    def q(p: float) -> float | None:
        v = percentile(ordered, p)
        return None if v is None else round(v * scale, digits)

    return {
        "n": n,
        "p50": q(50),
        "p99": q(99),
        "p99_9": q(99.9) if n >= 1000 else None,
        "max": round(ordered[-1] * scale, digits) if ordered else None,
    }
