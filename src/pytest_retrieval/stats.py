"""Confidence intervals and percentiles for per-query metric values.

A 95% interval says how far an aggregate could move on another sample of queries of the same
size: a 0.62 recall@10 from 40 queries and from 4,000 are different claims.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

BOOTSTRAP_RESAMPLES = 2000
#: above this many queries the percentile bootstrap is replaced by the normal approximation,
#: which it converges to, at a fraction of the cost (n x resamples draws per metric).
BOOTSTRAP_MAX_QUERIES = 20_000
Z_95 = 1.959963984540054


def bootstrap_ci(
    values: Mapping[str, FloatArray],
    *,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[dict[str, tuple[float, float]], str]:
    """Percentile-bootstrap interval of the mean of each array; one resample set for all.

    Returns the intervals and the method used ("bootstrap" or "normal" for large sets).
    Seeded, so the same values always give the same interval.
    """
    intervals: dict[str, tuple[float, float]] = {}
    if not values:
        return intervals, "bootstrap"
    n = len(next(iter(values.values())))
    if n == 0:
        return {name: (float("nan"), float("nan")) for name in values}, "bootstrap"
    if n > BOOTSTRAP_MAX_QUERIES:
        for name, array in values.items():
            mean = float(array.mean())
            half = Z_95 * float(array.std(ddof=1)) / np.sqrt(n) if n > 1 else 0.0
            intervals[name] = (
                max(mean - half, float(array.min())),
                min(mean + half, float(array.max())),
            )
        return intervals, "normal"
    rng = np.random.default_rng(seed)
    # Resample by multiplicities: counts[b, i] = times query i is drawn in resample b.
    counts = np.zeros((resamples, n), dtype=np.float64)
    draws = rng.integers(0, n, size=(resamples, n))
    np.add.at(counts, (np.repeat(np.arange(resamples), n), draws.ravel()), 1.0)
    names = list(values)
    stacked = np.stack([values[name] for name in names], axis=1)  # (n, metrics)
    means = counts @ stacked / n  # (resamples, metrics)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail], axis=0)
    for j, name in enumerate(names):
        intervals[name] = (float(low[j]), float(high[j]))
    return intervals, "bootstrap"


def percentile(values: FloatArray, q: float) -> float:
    """The q-th percentile (0..100), NaN for no values."""
    if values.size == 0:
        return float("nan")
    return float(np.percentile(values, q))
