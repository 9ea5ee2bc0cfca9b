"""Confidence intervals, percentiles and paired tests for per-query metric values.

A 95% interval says how far an aggregate could move on another sample of queries of the same
size: a 0.62 recall@10 from 40 queries and from 4,000 are different claims.

Each statistic resamples only where its closed form is not yet accurate, and resamples in
blocks of at most CHUNK_ENTRIES numbers, so the resampling's working memory does not grow
with the number of resamples and, beyond a few temporary copies of the values, not with the
number of queries (a million queries cost a few O(n) passes). What a statistic keeps can:
the paired test keeps counts only, but the bootstrap keeps one mean per resample and metric
for its percentiles (8 bytes each: 2,000 resamples of 7 metrics are 112 KB, 200,000 of 15
are 24 MB, twice that while the percentiles are taken). Which statistic runs:

- interval of a mean (``bootstrap_ci``): percentile bootstrap up to BOOTSTRAP_MAX_QUERIES
  queries, the normal interval above;
- paired sign-flip test (``paired_pvalue``): exact up to EXACT_MAX_NONZERO differing queries,
  the normal tail (continuity-corrected on lattice data) once the differences are many and
  none dominates (NORMAL_MIN_EFFECTIVE), Monte Carlo in between.

``benchmarks/bench_stats.py`` prints the evidence for both switch-overs and the time and
peak memory of each path.
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
#: above this many queries the percentile bootstrap gives way to the normal interval. At
#: 5,000 queries the normal endpoints are within 0.07 standard errors of the exact bootstrap's
#: on recall-, MRR- and nDCG-like values and on 0/1 values with at least 2% of either (within
#: one step of the bootstrap's own lattice for rarer ones), while two bootstrap runs of 2,000
#: resamples with different seeds differ by about 0.08 (rms). bench_stats.py prints the table;
#: tests/test_stats.py checks it at the switch-over.
BOOTSTRAP_MAX_QUERIES = 5_000
Z_95 = 1.959963984540054
#: resampling works on blocks of at most this many numbers (2 MB of float64, cache-sized):
#: the working memory does not grow with the number of resamples, and small blocks are
#: also faster.
CHUNK_ENTRIES = 2**18


def bootstrap_ci(
    values: Mapping[str, FloatArray],
    *,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[dict[str, tuple[float, float]], str]:
    """Interval of the mean of each array (all of one length, paired by query).

    Returns the intervals and the method used:

    - "bootstrap" (n <= BOOTSTRAP_MAX_QUERIES): percentile bootstrap, one resample set for
      all arrays, seeded. Resamples are drawn in blocks of rows (at most CHUNK_ENTRIES draws
      each) from one generator stream, so the intervals equal those of drawing all resamples
      at once, while the extra memory is one block plus ``resamples`` x metrics means
      (twice those while their percentiles are taken: ``np.quantile`` sorts a copy).
    - "normal" (larger n): mean +- z * sd / sqrt(n), clipped to the values' range; what the
      bootstrap converges to (see BOOTSTRAP_MAX_QUERIES), in one pass per array.
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
        means[start : start + size] = _resampled_means(rng, stacked, size)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail], axis=0)
    for j, name in enumerate(names):
        intervals[name] = (float(low[j]), float(high[j]))
    return intervals, "bootstrap"


def _resampled_means(rng: np.random.Generator, stacked: FloatArray, size: int) -> FloatArray:
    """Means of ``size`` bootstrap resamples of the rows of ``stacked`` (n x metrics), by
    multiplicities: counts[b, i] = times query i is drawn in resample b. A function, so the
    block's arrays are freed before the next block is drawn."""
    n = stacked.shape[0]
    draws = rng.integers(0, n, size=(size, n))
    draws += np.arange(size)[:, None] * n
    counts = np.bincount(draws.ravel(), minlength=size * n).reshape(size, n)
    del draws
    means: FloatArray = counts.astype(np.float64) @ stacked / n
    return means


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
#: from this effective number of differences, (sum d^2)^2 / sum d^4 (m when all |d| are
#: equal, less when a few dominate), the sign-flip test uses its continuity-corrected normal
#: tail. Against the exact distribution at m_eff ~ 1,000 it is within 2% of p for
#: p >= 1e-4 on hit@k (every |d| equal), precision@k, recall@k and MRR differences, and
#: within 1% for p >= 1e-3 (uncorrected: 10% low on hit@k). The Monte Carlo it replaces is
#: known to about 10% near ``resolution`` only (100 extreme draws); above 10x resolution it
#: stops after as few as 10 (errors of 30-80% in bench_stats), and it costs up to
#: 50 / resolution x m draws.
NORMAL_MIN_EFFECTIVE = 1_000
#: above this many nonzero differences the normal tail is used whatever m_eff: Monte Carlo
#: would cost up to 50 / resolution x m draws (10^10 at m = 20,000, resolution 1e-4).
PERMUTATION_MAX_QUERIES = 20_000
#: the Monte Carlo draws its random signs in blocks of this many (rows x m) bits, so that a
#: seed gives the same p-values as earlier versions; it multiplies them in CHUNK_ENTRIES blocks.
DRAW_ENTRIES = 2_000_000
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
      least as extreme as the observed one; also exact, 2^-m, when every difference goes
      the tested way (m <= 1074, the smallest float).
    - m_eff >= NORMAL_MIN_EFFECTIVE or m > PERMUTATION_MAX_QUERIES: the normal tail of the
      same statistic (variance sum d^2), never 0, in O(m). When every |d| is a multiple of
      a common step (hit@k, precision@k) the sum moves in steps of twice that and the tail
      is taken half a step beyond the observed sum; uncorrected, it would understate p by
      about z / sqrt(m) (7% at m = 2,000, p = 1e-4). The remaining error is O(1/m_eff)
      (see NORMAL_MIN_EFFECTIVE); it is poor only when a few differences dominate.
    - otherwise Monte Carlo, p = (extreme + 1) / (drawn + 1), starting with ``resamples``
      draws and doubling while p might be within 10x of ``resolution`` (the smallest p the
      caller must tell apart, e.g. alpha / gated metrics / 10) and is known to worse than
      10% (fewer than 100 extreme draws), up to 50 / resolution draws. So a clear effect
      returns p < resolution, and p near resolution is known to about 15%. Seeded, so the
      same data always gives the same p.

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
    diffs = np.compress(diffs != 0, diffs)  # (3x faster than a boolean index at 10^6)
    if diffs.size == 0:
        return 1.0
    if alternative == "greater":  # P(S >= s) of d is P(S <= -s) of -d: the flips are symmetric
        diffs = -diffs
    two_sided = alternative == "two-sided"
    if diffs.size <= EXACT_MAX_NONZERO:
        return _exact_pvalue(diffs, two_sided)
    one_way = _one_way_pvalue(diffs, two_sided)
    if one_way is not None:
        return one_way
    # scaled to a largest |d| of 1: sums of squares and fourth powers cannot underflow
    scaled = diffs / float(np.abs(diffs).max())
    powers = np.square(scaled)
    spread = float(powers.sum())
    np.square(powers, out=powers)
    effective = spread * spread / float(powers.sum())
    del powers
    if effective >= NORMAL_MIN_EFFECTIVE or diffs.size > PERMUTATION_MAX_QUERIES:
        return _normal_pvalue(scaled, math.sqrt(spread), two_sided)
    return _monte_carlo_pvalue(diffs, two_sided, resamples, resolution, seed)


def _one_way_pvalue(diffs: FloatArray, two_sided: bool) -> float | None:
    """Exact p when every difference goes the tested way (all drops): only the observed
    sign pattern is that extreme, so p = 2^-m (twice that two-sided), where the Monte Carlo
    could only say 1 / (draws + 1) (1e-4 for 1.7e-24 at m = 79). None otherwise, when a flip
    of the smallest |d| is within the float slack (a tie: counted, so not alone), or when
    2^-m is below the smallest float (m > 1074; the normal tail's floor then)."""
    m = diffs.size
    if m > 1074 or not (np.all(diffs < 0) or (two_sided and np.all(diffs > 0))):
        return None
    if 2.0 * float(np.abs(diffs).min()) <= _tie_tolerance(diffs):
        return None
    return math.ldexp(2.0 if two_sided else 1.0, -m)


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
    drawn, the rule of three at 0) is under resolution. Memory: one block of packed signs
    (DRAW_ENTRIES bits) and one of CHUNK_ENTRIES floats."""
    rng = np.random.default_rng(seed)
    total = float(diffs.sum())
    tolerance = _tie_tolerance(diffs)
    draw_rows = max(1, DRAW_ENTRIES // diffs.size)
    rows = max(1, CHUNK_ENTRIES // diffs.size)
    cap = max(resamples, math.ceil(50.0 / resolution))
    drawn = extreme = 0
    target = resamples
    while True:
        for start in range(drawn, target, draw_rows):
            size = min(draw_rows, target - start)
            packed = rng.integers(0, 256, size=(size, (diffs.size + 7) // 8), dtype=np.uint8)
            for first in range(0, size, rows):
                sums = _flipped_sums(packed[first : first + rows], diffs, total)
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


def _flipped_sums(packed: NDArray[np.uint8], diffs: FloatArray, total: float) -> FloatArray:
    """sum(s_i * d_i) for each row of packed sign bits (bit 1: d_i keeps its sign)."""
    keep = np.unpackbits(packed, axis=1, count=diffs.size).astype(np.float64)
    sums: FloatArray = 2.0 * (keep @ diffs) - total
    return sums


#: a lattice step below this share of the sign-flip sum's sd moves the normal tail by less
#: than the approximation's own error: not looked for.
LATTICE_MIN_STEP = 1e-3
#: a common step is looked for among the smallest |d| divided by 1..LATTICE_MAX_PARTS (0.1
#: and 0.25 share 0.05: parts 2; recall over 1..5 relevant docs: parts up to 12).
LATTICE_MAX_PARTS = 64
#: |d| within this many steps of a multiple count as on the grid (metric rounding is ~1e-15);
#: also, relative to the largest |d|, the size below which a difference is float noise.
LATTICE_TOLERANCE = 1e-6
#: the candidate step is first checked on the distinct values among this many differences.
LATTICE_HEAD = 4096


def _lattice_half_step(sizes: FloatArray, spread: float) -> float:
    """Half the spacing of the sign-flip sum's values when every |d| is a multiple of a
    common step (the sum then moves in steps of twice it), or 0 when there is none coarse
    enough to matter. ``sizes`` are |d| scaled to a largest of 1 (float noise sits on every
    grid: left out), ``spread`` the sum's sd."""
    counted = sizes > LATTICE_TOLERANCE
    smallest = float(np.min(sizes, where=counted, initial=1.0))
    if smallest < LATTICE_MIN_STEP * spread:
        return 0.0
    coarse = sizes[counted]
    candidates = np.unique(coarse[:LATTICE_HEAD])
    complete = coarse.size <= LATTICE_HEAD
    for parts in range(1, LATTICE_MAX_PARTS + 1):
        step = smallest / parts
        if not _on_grid(candidates, step):
            continue
        if complete or _on_grid(coarse, step):
            return step
        candidates, complete = np.unique(coarse), True  # a value beyond the head is off grid
    return 0.0


def _on_grid(sizes: FloatArray, step: float) -> bool:
    """Every size is a whole number of steps (to LATTICE_TOLERANCE of a step)."""
    units = sizes / step
    return bool(np.all(np.abs(units - np.rint(units)) <= LATTICE_TOLERANCE))


def _normal_pvalue(scaled: FloatArray, spread: float, two_sided: bool) -> float:
    """Normal tail of the sign-flip sum of ``scaled`` (sd ``spread``), continuity-corrected
    on a lattice; erfc keeps relative accuracy far out, and the result is clamped to the
    smallest positive float instead of underflowing to 0."""
    total = float(scaled.sum())
    half = _lattice_half_step(np.abs(scaled), spread)
    if two_sided:
        z = (half - abs(total)) / spread
        p = math.erfc(-z / math.sqrt(2.0))
    else:
        z = (total + half) / spread
        p = 0.5 * math.erfc(-z / math.sqrt(2.0))
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
