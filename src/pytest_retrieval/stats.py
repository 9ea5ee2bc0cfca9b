"""Confidence intervals and percentiles for per-query metric values.

A 95% interval says how far an aggregate could move on another sample of queries of the same
size: a 0.62 recall@10 from 40 queries and from 4,000 are different claims.
"""

from __future__ import annotations

import math
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


PERMUTATIONS = 10_000
#: above this many paired queries the sign-flip test uses its normal approximation
PERMUTATION_MAX_QUERIES = 20_000


def paired_pvalue(
    before: FloatArray,
    after: FloatArray,
    *,
    alternative: str = "less",
    resamples: int = PERMUTATIONS,
    seed: int = 0,
) -> float:
    """p-value of a paired randomization (sign-flip) test on per-query differences.

    ``alternative="less"``: evidence that ``after`` is lower (a regression);
    ``"two-sided"``: that they differ (an A/B comparison). Under "no change" each query's
    difference is as likely to have either sign. Seeded: the same data always gives the
    same p. Above PERMUTATION_MAX_QUERIES the normal approximation of the same statistic.
    """
    if alternative not in {"less", "two-sided"}:
        raise ValueError(f"alternative must be 'less' or 'two-sided', not {alternative!r}")
    diffs = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    n = diffs.size
    if n == 0 or not np.any(diffs):
        return 1.0
    observed = float(diffs.mean())
    two_sided = alternative == "two-sided"
    if n > PERMUTATION_MAX_QUERIES:
        scale = float(np.sqrt(np.sum(diffs**2))) / n
        tail = _normal_left_tail(-abs(observed) if two_sided else observed, scale)
        return min(1.0, 2 * tail) if two_sided else tail
    rng = np.random.default_rng(seed)
    extreme = 0
    chunk = max(1, 2_000_000 // n)
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2 - 1
        means = signs @ diffs / n
        if two_sided:
            extreme += int(np.count_nonzero(np.abs(means) >= abs(observed) - 1e-12))
        else:
            extreme += int(np.count_nonzero(means <= observed + 1e-12))
    return (extreme + 1) / (resamples + 1)


def _normal_left_tail(observed: float, scale: float) -> float:
    from math import erf, sqrt

    if scale == 0:
        return 1.0 if observed >= 0 else 0.0
    return 0.5 * (1.0 + erf(observed / scale / sqrt(2.0)))


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone), same keys."""
    order = sorted(pvalues, key=lambda name: pvalues[name])
    m = len(order)
    adjusted: dict[str, float] = {}
    running = 0.0
    for i, name in enumerate(order):
        running = max(running, min(1.0, (m - i) * pvalues[name]))
        adjusted[name] = running
    return adjusted


def _z(alpha: float) -> float:
    """Upper-tail standard normal quantile for a one-sided ``alpha``."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(1.0 - alpha)


def detectable_drop(sd_diff: float, n: int, alpha: float, power: float = 0.8) -> float:
    """Smallest mean drop a one-sided paired test finds with ``power`` at ``alpha``."""
    from statistics import NormalDist

    if n == 0:
        return float("inf")
    return (_z(alpha) + NormalDist().inv_cdf(power)) * sd_diff / float(np.sqrt(n))


def wilson_interval(successes: float, trials: float, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a proportion: sane at 0 and 1 and for few trials, where the
    normal approximation gives intervals outside [0, 1] or of zero width."""
    if trials <= 0:
        return float("nan"), float("nan")
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)
