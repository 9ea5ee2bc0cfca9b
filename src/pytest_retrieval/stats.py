"""Confidence intervals and percentiles for per-query metric values.

A 95% interval says how far an aggregate could move on another sample of queries of the same
size: a 0.62 recall@10 from 40 queries and from 4,000 are different claims.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

BOOTSTRAP_RESAMPLES = 2000
#: above this many queries the percentile bootstrap is replaced by the normal approximation,
#: which it converges to, at a fraction of the cost (n x resamples draws per metric).
BOOTSTRAP_MAX_QUERIES = 20_000
Z_95 = 1.959963984540054
#: resampling works on blocks of at most this many entries (16 MB of float64), so memory
#: does not grow with the number of resamples.
CHUNK_ENTRIES = 2_000_000


def bootstrap_ci(
    values: Mapping[str, FloatArray],
    *,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[dict[str, tuple[float, float]], str]:
    """Percentile-bootstrap interval of the mean of each array; one resample set for all.

    Returns the intervals and the method used ("bootstrap" or "normal" for large sets).
    Seeded, so the same values always give the same interval. Resamples are drawn in blocks
    of rows (at most CHUNK_ENTRIES draws each) from one generator stream, so the intervals
    equal those of drawing all resamples at once while memory stays independent of
    ``resamples``.
    """
    intervals: dict[str, tuple[float, float]] = {}
    if not values:
        return intervals, "bootstrap"
    n = len(next(iter(values.values())))
    if n == 0:
        return {name: (float("nan"), float("nan")) for name in values}, "bootstrap"
    if n > BOOTSTRAP_MAX_QUERIES:
        z = NormalDist().inv_cdf(0.5 + level / 2.0)
        for name, array in values.items():
            mean = float(array.mean())
            half = z * float(array.std(ddof=1)) / math.sqrt(n)
            intervals[name] = (
                max(mean - half, float(array.min())),
                min(mean + half, float(array.max())),
            )
        return intervals, "normal"
    rng = np.random.default_rng(seed)
    names = list(values)
    stacked = np.stack([values[name] for name in names], axis=1)  # (n, metrics)
    means = np.empty((resamples, len(names)))
    rows = max(1, CHUNK_ENTRIES // n)
    for start in range(0, resamples, rows):
        size = min(rows, resamples - start)
        # Resample by multiplicities: counts[b, i] = times query i is drawn in resample b.
        draws = rng.integers(0, n, size=(size, n))
        draws += np.arange(size)[:, None] * n
        counts = np.bincount(draws.ravel(), minlength=size * n).reshape(size, n)
        del draws
        means[start : start + size] = counts.astype(np.float64) @ stacked / n
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


#: Monte Carlo sign-flip resamples drawn first; more are drawn when p is small (see
#: ``resolution``).
PERMUTATIONS = 10_000
#: up to this many nonzero differences all 2^m sign patterns are counted (exact p): two
#: halves of 2^18 subset sums (2 MB each), about 60 ms at m = 36 and 4x that at m = 40.
EXACT_MAX_NONZERO = 36
#: above this many nonzero differences the sign-flip test uses its normal approximation.
#: Monte Carlo costs resamples x m draws (about 0.15 s per 10^8; at m = 20,000 a p near
#: resolution = 1e-4 takes 500,000 resamples, about 15 s), and by then the normal tail is
#: within about 3% of the exact one even for lattice data (see ``paired_pvalue``).
PERMUTATION_MAX_QUERIES = 20_000
ALTERNATIVES = ("less", "greater", "two-sided")


def paired_pvalue(
    before: FloatArray,
    after: FloatArray,
    *,
    alternative: str = "less",
    resamples: int = PERMUTATIONS,
    resolution: float = 1e-4,
    seed: int = 0,
) -> float:
    """p-value of a paired randomization (sign-flip) test of the mean per-query difference.

    ``alternative="less"``: evidence that ``after`` is lower (a regression); ``"greater"``:
    that it is higher (an improvement); ``"two-sided"``: that they differ (an A/B
    comparison). Under "no change" each query's difference is as likely to have either sign;
    zero differences are the same under every flip, so only the m nonzero ones count.

    - m <= EXACT_MAX_NONZERO: exact, the share of all 2^m sign patterns whose mean is at
      least as extreme as the observed one.
    - m <= PERMUTATION_MAX_QUERIES: Monte Carlo, p = (extreme + 1) / (drawn + 1), starting
      with ``resamples`` draws and doubling while p might be within 10x of ``resolution``
      (the smallest p the caller must tell apart, e.g. alpha / gated metrics / 10) and is
      known to worse than 10% (fewer than 100 extreme draws), up to 50 / resolution draws.
      So a clear effect returns p < resolution, and p near resolution is known to about
      15%. Seeded, so the same data always gives the same p.
    - larger m: the normal approximation of the same statistic (variance sum(d_i^2)), never
      0. The sign-flip sum is symmetric, so its error is O(1/m_eff) with
      m_eff = (sum d^2)^2 / sum d^4, plus, for lattice data such as all |d| equal, half an
      atom: a relative error of about z / sqrt(m) (3% at z = 4, m = 20,000, and less when
      the |d| vary). It is poor only when a few differences dominate (m_eff small).

    Identical inputs give exactly 1.0. Sums within 1e-10 * sum|d| count as ties (float
    rounding), which errs toward the larger p.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")
    if not 0.0 < resolution < 1.0:
        raise ValueError(f"resolution must be in (0, 1), not {resolution!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples!r}")
    old = np.asarray(before, dtype=np.float64)
    new = np.asarray(after, dtype=np.float64)
    if old.shape != new.shape or old.ndim != 1:
        raise ValueError(
            f"before and after must be 1-d arrays of the same length (paired by query), "
            f"not shapes {old.shape} and {new.shape}"
        )
    diffs = new - old
    if not np.all(np.isfinite(diffs)):
        raise ValueError("before and after must be finite: drop unpaired (NaN) queries first")
    diffs = diffs[diffs != 0]
    if diffs.size == 0:
        return 1.0
    if alternative == "greater":  # P(S >= s) of d is P(S <= -s) of -d: the flips are symmetric
        diffs = -diffs
    two_sided = alternative == "two-sided"
    if diffs.size <= EXACT_MAX_NONZERO:
        return _exact_pvalue(diffs, two_sided)
    if diffs.size <= PERMUTATION_MAX_QUERIES:
        return _monte_carlo_pvalue(diffs, two_sided, resamples, resolution, seed)
    return _normal_pvalue(diffs, two_sided)


def _tie_tolerance(diffs: FloatArray) -> float:
    """Float slack for "as extreme": rounding in sums of m terms stays far below this."""
    return 1e-10 * float(np.abs(diffs).sum())


def _subset_sums(diffs: FloatArray) -> FloatArray:
    """sum(s_i * d_i) for all 2^len(diffs) sign patterns s."""
    sums = np.zeros(1)
    for d in diffs:
        sums = np.concatenate((sums - d, sums + d))
    return sums


def _exact_pvalue(diffs: FloatArray, two_sided: bool) -> float:
    """Counts the patterns with sum <= the observed one by meeting in the middle: every sum
    is a + b with a from the first half's 2^(m/2) subset sums, b from the second's."""
    observed = float(diffs.sum())
    bound = (-abs(observed) if two_sided else observed) + _tie_tolerance(diffs)
    half = diffs.size // 2
    left = _subset_sums(diffs[:half])
    right = np.sort(_subset_sums(diffs[half:]))
    count = int(np.searchsorted(right, bound - left, side="right").sum())
    if two_sided:  # the sign-flip distribution is symmetric: both tails have `count`
        count *= 2
    return min(1.0, count / 2.0**diffs.size)


def _monte_carlo_pvalue(
    diffs: FloatArray, two_sided: bool, resamples: int, resolution: float, seed: int
) -> float:
    """Adaptive sign-flip Monte Carlo: doubles the draws while p might be near resolution.

    "Clearly below": even a Poisson upper bound on p (extreme + 2 sqrt(extreme) + 3 over
    drawn, the rule of three at 0) is under resolution."""
    rng = np.random.default_rng(seed)
    total = float(diffs.sum())
    tolerance = _tie_tolerance(diffs)
    rows = max(1, CHUNK_ENTRIES // diffs.size)
    cap = max(resamples, math.ceil(50.0 / resolution))
    drawn = extreme = 0
    target = resamples
    while True:
        for start in range(drawn, target, rows):
            size = min(rows, target - start)
            packed = rng.integers(0, 256, size=(size, (diffs.size + 7) // 8), dtype=np.uint8)
            keep = np.unpackbits(packed, axis=1, count=diffs.size).astype(np.float64)
            sums = 2.0 * (keep @ diffs) - total  # keep_i = 1: d_i keeps its sign
            if two_sided:
                extreme += int(np.count_nonzero(np.abs(sums) >= abs(total) - tolerance))
            else:
                extreme += int(np.count_nonzero(sums <= total + tolerance))
        drawn = target
        p = (extreme + 1) / (drawn + 1)
        clearly_below = (extreme + 2.0 * math.sqrt(extreme) + 3.0) / drawn < resolution
        clearly_above = extreme >= 10 and p >= 10.0 * resolution
        if drawn >= cap or clearly_below or clearly_above or extreme >= 100:
            return p
        target = min(2 * drawn, cap)


def _normal_pvalue(diffs: FloatArray, two_sided: bool) -> float:
    """Normal tail of the sign-flip sum; erfc keeps relative accuracy far out, and the
    result is clamped to the smallest positive float instead of underflowing to 0."""
    z = float(diffs.sum()) / math.sqrt(float(np.square(diffs).sum()))
    p = math.erfc(abs(z) / math.sqrt(2.0)) if two_sided else 0.5 * math.erfc(-z / math.sqrt(2.0))
    return min(1.0, max(p, sys.float_info.min))


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
