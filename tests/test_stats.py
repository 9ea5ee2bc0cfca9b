"""Unit tests of the paired sign-flip test and the bootstrap intervals (pure numpy, no pytester)."""

from __future__ import annotations

import itertools
import math
import sys
import tracemalloc
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from pytest_retrieval import stats


def lattice(m: int, up: int) -> tuple[np.ndarray, np.ndarray]:
    """m paired queries, ``up`` of them gaining 1 and the rest losing 1: every |d| is 1, so
    the sign-flip count of gains is Binomial(m, 1/2) and the exact p is a binomial tail."""
    before = np.full(m, 0.5)
    after = np.where(np.arange(m) < up, 1.0, 0.0)
    return before, after


def binomial_tail(m: int, up: int) -> float:
    """P(at most ``up`` gains of m) under fair signs, to about 1e-13 relative for m <= 200
    (1e-10 at m = 20,000): the largest term from log-gamma, then the rest down the ratios
    C(m, j - 1) / C(m, j) = j / (m - j + 1) while they still count."""
    term = math.exp(
        math.lgamma(m + 1) - math.lgamma(up + 1) - math.lgamma(m - up + 1) - m * math.log(2)
    )
    total = 0.0
    for j in range(up, -1, -1):
        total += term
        term *= j / (m - j + 1)
        if term < total * 1e-17:
            break
    return total


def with_z(n: int, z: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Continuous differences whose normal-approximation z score is ``z``."""
    noise = np.random.default_rng(seed).normal(0.0, 0.2, n)
    noise -= noise.mean()
    shift = z * float(noise.std()) / np.sqrt(n - z * z)  # solves n s / sqrt(sum (e+s)^2) = z
    return np.full(n, 0.5), 0.5 + noise + shift


def test_three_drops_give_the_exact_small_sample_pvalues() -> None:
    before, after = np.ones(3), np.zeros(3)
    assert stats.paired_pvalue(before, after) == 1 / 8
    assert stats.paired_pvalue(before, after, alternative="two-sided") == 2 / 8
    assert stats.paired_pvalue(before, after, alternative="greater") == 1.0
    # unchanged queries flip to themselves: they change neither the count nor the p-value
    padded_before = np.array([1.0, 0.5, 1.0, 0.0, 1.0, 0.25])
    padded_after = np.array([0.0, 0.5, 0.0, 0.0, 0.0, 0.25])
    assert stats.paired_pvalue(padded_before, padded_after) == 1 / 8
    assert stats.paired_pvalue(padded_before, padded_after, alternative="two-sided") == 2 / 8


@pytest.mark.parametrize("alternative", ["less", "greater", "two-sided"])
def test_exact_pvalue_equals_brute_force_enumeration(alternative: str) -> None:
    rng = np.random.default_rng(11)
    for _ in range(20):
        m = int(rng.integers(1, 13))
        # discrete metric values: many sign patterns tie with the observed sum
        diffs = rng.choice([-1.0, -0.5, -1 / 3, 0.25, 0.5, 1.0], m)
        sums = np.array([np.dot(s, diffs) for s in itertools.product((-1, 1), repeat=m)])
        observed = diffs.sum()
        expected = {
            "less": np.mean(sums <= observed + 1e-9),
            "greater": np.mean(sums >= observed - 1e-9),
            "two-sided": np.mean(np.abs(sums) >= abs(observed) - 1e-9),
        }[alternative]
        got = stats.paired_pvalue(np.zeros(m), diffs, alternative=alternative)
        assert got == expected, (diffs, got, expected)


def test_exact_at_the_cut_off_reaches_far_below_any_monte_carlo_floor() -> None:
    m = stats.EXACT_MAX_NONZERO
    before, after = lattice(m, up=5)
    expected = binomial_tail(m, 5)  # 6.5e-6
    assert stats.paired_pvalue(before, after) == pytest.approx(expected, rel=1e-12)
    assert stats.paired_pvalue(before, after, alternative="two-sided") == pytest.approx(
        2 * expected, rel=1e-12
    )


def test_identical_runs_give_exactly_one_at_every_size() -> None:
    for n in (0, 1, 10, 500, 30_000):
        values = np.linspace(0.0, 1.0, n)
        for alternative in ("less", "greater", "two-sided"):
            assert stats.paired_pvalue(values, values.copy(), alternative=alternative) == 1.0


@pytest.mark.parametrize("n", [8, 300, 25_000])  # exact, Monte Carlo, normal
def test_greater_mirrors_less(n: int) -> None:
    rng = np.random.default_rng(n)
    before = rng.random(n)
    after = np.clip(before + rng.normal(0.01, 0.2, n), 0.0, 1.0)
    improvement = stats.paired_pvalue(before, after, alternative="greater")
    assert improvement == stats.paired_pvalue(after, before, alternative="less")
    assert improvement < 0.5 < stats.paired_pvalue(before, after, alternative="less")


def test_monte_carlo_resolves_pvalues_below_a_strict_alpha() -> None:
    # alpha = 0.001 over 3 gated metrics, with a 10x margin: p must be told apart at 3.3e-5
    resolution = 0.001 / 3 / 10
    rng = np.random.default_rng(2)
    before = rng.random(200)
    after = np.clip(before - 0.3 + rng.normal(0.0, 0.1, 200), 0.0, 1.0)
    p = stats.paired_pvalue(before, after, resolution=resolution)
    assert 0.0 < p < resolution
    assert p == stats.paired_pvalue(before, after, resolution=resolution)  # seeded


def test_monte_carlo_near_resolution_matches_the_exact_tail() -> None:
    before, after = lattice(200, up=76)
    expected = binomial_tail(200, 76)  # 4.2e-4: within 10x of the resolution below
    p = stats.paired_pvalue(before, after, resolution=1e-4)
    assert p == pytest.approx(expected, rel=0.2)
    assert stats.paired_pvalue(before, after, resolution=1e-4, seed=1) == pytest.approx(
        expected, rel=0.2
    )


def test_normal_approximation_is_never_zero_in_the_far_tail() -> None:
    before, after = np.ones(50_000), np.zeros(50_000)  # z = -224: the tail underflows
    assert stats.paired_pvalue(before, after) == sys.float_info.min
    assert stats.paired_pvalue(before, after, alternative="two-sided") == sys.float_info.min
    # 9,000 gains and 13,500 losses of 1: sum -4,500, sd 150, and the sum moves in steps of
    # 2, so the tail is taken at z = (-4500 + 1) / 150 (continuity correction; was z = -30,
    # 4.9067e-198, before it). The exact binomial tail is 2.85e-199: this far out only "far
    # below any alpha, and not 0" matters. (pytest.approx's default abs=1e-12 would accept
    # any tiny number: abs=0.)
    before, after = lattice(22_500, up=9_000)
    expected = 0.5 * math.erfc((4_500 - 1) / 150 / math.sqrt(2))
    assert stats.paired_pvalue(before, after) == pytest.approx(expected, rel=1e-9, abs=0)
    two_sided = stats.paired_pvalue(before, after, alternative="two-sided")
    assert two_sided == pytest.approx(2 * expected, rel=1e-9, abs=0)


def test_normal_tail_on_lattice_data_is_continuity_corrected() -> None:
    m = stats.PERMUTATION_MAX_QUERIES + 1
    up = 9_780  # p about 1e-3, every |d| equal: the uncorrected normal tail was 2.3% low
    expected = binomial_tail(m, up)
    assert 5e-4 < expected < 2e-3
    assert stats.paired_pvalue(*lattice(m, up)) == pytest.approx(expected, rel=0.002)
    # a common step found below the smallest |d| (0.2 and 0.3 share 0.1), and float noise
    # on unchanged queries (1e-17) does not hide the grid; p about 1.5e-4, m_eff 1,742
    m, up = 2_000, 920
    before = np.zeros(m)
    after = np.where(np.arange(m) < up, 0.3, -0.3)
    after[1::2] *= 2 / 3
    after[:5] = 1e-17
    z_plain = float(after.sum()) / math.sqrt(float(np.square(after).sum()))
    z_corrected = (float(after.sum()) + 0.1) / math.sqrt(float(np.square(after).sum()))
    p = stats.paired_pvalue(before, after)
    assert p == pytest.approx(NormalDist().cdf(z_corrected), rel=1e-9)
    assert p > 1.03 * NormalDist().cdf(z_plain)


@pytest.mark.parametrize(
    ("late", "half_step"),
    [(0.15, 0.05), (0.2 + 1e-3 * math.pi, 0.0)],  # a finer grid; none (no correction)
)
def test_a_difference_beyond_the_first_ones_can_change_the_grid(
    late: float, half_step: float
) -> None:
    m = 5_000  # the grid is guessed from the first 4,096 differences, then checked on all
    after = np.where(np.arange(m) % 3 == 0, 0.2, -0.1)
    after[4_500] = late
    sd = math.sqrt(float(np.square(after).sum()))
    p = stats.paired_pvalue(np.zeros(m), after)
    assert p == pytest.approx(NormalDist().cdf((float(after.sum()) + half_step) / sd), rel=1e-9)


def test_normal_approximation_agrees_with_monte_carlo_on_continuous_differences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, after = with_z(5_000, -2.0, seed=4)
    approx = stats.paired_pvalue(before, after)  # m_eff about 1,700: the normal tail
    assert approx == pytest.approx(NormalDist().cdf(-2.0), rel=1e-9)  # no lattice to correct
    monkeypatch.setattr(stats, "NORMAL_MIN_EFFECTIVE", math.inf)
    sampled = stats.paired_pvalue(before, after, resamples=100_000)
    assert sampled != approx
    assert approx == pytest.approx(sampled, rel=0.06)  # Monte Carlo error alone is ~2%


def exact_sign_flip_cdf(units: np.ndarray) -> np.ndarray:
    """P(S <= s) for s = -sum(units)..sum(units), S = sum(+-units_i) with fair independent
    signs: the characteristic function of S is prod cos(units_i w), so one inverse FFT of
    it gives the exact distribution (to about 1e-14) of integer-valued differences."""
    total = int(units.sum())
    size = 1 << (2 * total).bit_length()
    w = 2 * np.pi * np.arange(size) / size
    values, counts = np.unique(units, return_counts=True)
    characteristic = np.ones(size)
    for value, count in zip(values, counts, strict=True):
        characteristic *= np.cos(value * w) ** count
    pmf = np.fft.ifft(characteristic).real
    pmf = np.concatenate((pmf[size - total :], pmf[: total + 1]))
    return np.cumsum(np.clip(pmf, 0.0, None))


def metric_differences(shape: str, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """|d| of a metric as integer units of its grid, sized so that m_eff is just above
    NORMAL_MIN_EFFECTIVE (the switch-over)."""
    if shape == "hit":  # 0/1 values: every |d| is 1
        return np.ones(1_000, dtype=np.int64), 1.0
    if shape == "precision@10":  # |d| of 0.1, 0.2, 0.3
        return rng.integers(1, 4, 1_520), 0.1
    if shape == "recall":  # 1..4 relevant docs: multiples of 1/12
        relevant = rng.integers(1, 5, 4_000)
        units = np.abs(rng.binomial(relevant, 0.5) - rng.binomial(relevant, 0.5)) * (12 // relevant)
        return units[units > 0][:1_850], 1 / 12
    # mrr@5: 1/rank or 0, first hit mostly at rank 1-2: multiples of 1/60
    reciprocal = np.array([0, 60, 30, 20, 15, 12])
    odds = np.array([0.3, 0.35, 0.15, 0.1, 0.06, 0.04])
    units = np.abs(rng.choice(reciprocal, 4_000, p=odds) - rng.choice(reciprocal, 4_000, p=odds))
    return units[units > 0][:1_640], 1 / 60


@pytest.mark.parametrize("shape", ["hit", "precision@10", "recall", "mrr@5"])
def test_normal_tail_at_the_switch_over_matches_the_exact_distribution(shape: str) -> None:
    units, grid = metric_differences(shape, np.random.default_rng(5))
    sizes = units / units.max()
    effective = float(np.square(sizes).sum()) ** 2 / float(np.sum(sizes**4))
    assert stats.NORMAL_MIN_EFFECTIVE <= effective < 1.1 * stats.NORMAL_MIN_EFFECTIVE
    cdf = exact_sign_flip_cdf(units)
    total = int(units.sum())
    order = np.random.default_rng(6).permutation(units.size)
    sums = total - 2 * np.cumsum(units[order])  # the observed sum when order[:j+1] drop
    for target, tolerance in ((1e-2, 0.005), (1e-3, 0.01), (1e-4, 0.02), (4e-5, 0.025)):
        drops = int(np.searchsorted(-cdf[sums + total], -target)) + 1
        signs = np.ones(units.size)
        signs[order[:drops]] = -1.0
        exact = float(cdf[int(signs @ units) + total])
        assert target / 3 < exact <= target
        after = signs * units * grid
        p = stats.paired_pvalue(np.zeros(units.size), after)
        assert p == pytest.approx(exact, rel=tolerance), (target, p, exact)
        assert p == stats.paired_pvalue(np.zeros(units.size), after, seed=1)  # no sampling


def test_below_the_switch_over_the_sign_flips_are_still_drawn() -> None:
    before, after = lattice(stats.NORMAL_MIN_EFFECTIVE - 1, up=470)  # m_eff = m = 999
    expected = binomial_tail(stats.NORMAL_MIN_EFFECTIVE - 1, 470)  # 0.034
    draws = [stats.paired_pvalue(before, after, seed=seed) for seed in range(3)]
    assert len(set(draws)) == 3  # Monte Carlo: the seed matters
    assert draws == pytest.approx([expected] * 3, rel=0.1)
    # a few large differences among many small ones: m = 3,000 but m_eff about 90
    rng = np.random.default_rng(9)
    diffs = np.where(rng.random(3_000) < 0.1, rng.normal(-0.1, 1.0, 3_000), 1e-3)
    assert stats.paired_pvalue(np.zeros(3_000), diffs) != stats.paired_pvalue(
        np.zeros(3_000), diffs, seed=1
    )


def test_monte_carlo_works_in_blocks_of_a_few_megabytes() -> None:
    rng = np.random.default_rng(10)
    before = rng.random(900)  # m_eff about 280: drawn
    after = np.clip(before + rng.normal(-0.02, 0.2, 900), 0.0, 1.0)
    tracemalloc.start()
    try:
        p = stats.paired_pvalue(before, after, resolution=1e-4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert p < 0.01
    assert peak < 4 * 2**20  # was 16 MB: 2,222 rows x 900 signs as float64 at once


@pytest.mark.parametrize(
    ("before", "after", "kwargs", "message"),
    [
        (np.zeros(3), np.zeros(4), {}, "same length"),
        (np.zeros(3), np.array([0.0, np.nan, 1.0]), {}, "finite"),
        (np.zeros(3), np.ones(3), {"alternative": "lower"}, "alternative must be one of"),
        (np.zeros(3), np.ones(3), {"resolution": 0.0}, "resolution must be in"),
    ],
)
def test_bad_input_is_one_clear_error(
    before: np.ndarray, after: np.ndarray, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        stats.paired_pvalue(before, after, **kwargs)


def unchunked_bootstrap(values: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """The all-at-once percentile bootstrap the chunked one must reproduce."""
    n = values.size
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    means = values[draws].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def test_bootstrap_is_seeded_and_matches_drawing_all_resamples_at_once() -> None:
    rng = np.random.default_rng(7)
    values = {"recall@10": rng.random(1_001), "mrr@10": 1.0 / rng.integers(1, 11, 1_001)}
    intervals, method = stats.bootstrap_ci(values, seed=3)
    assert method == "bootstrap"
    assert stats.bootstrap_ci(values, seed=3)[0] == intervals
    for name, array in values.items():
        reference = unchunked_bootstrap(array, stats.BOOTSTRAP_RESAMPLES, seed=3)
        assert intervals[name] == pytest.approx(reference, abs=1e-12)


def test_bootstrap_memory_does_not_grow_with_resamples() -> None:
    rng = np.random.default_rng(8)
    values = {f"metric{j}": rng.random(stats.BOOTSTRAP_MAX_QUERIES) for j in range(3)}
    peaks = {}
    for resamples in (2_000, 20_000):
        tracemalloc.start()
        try:
            intervals, method = stats.bootstrap_ci(values, resamples=resamples)
            peaks[resamples] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert method == "bootstrap"
        low, high = intervals["metric0"]
        assert low < float(values["metric0"].mean()) < high
    # blocks of 2 MB (were 16 MB); a 20,000 x 5,000 count matrix alone would be 800 MB. Only
    # the resamples x 3 means (0.4 MB more at 20,000) grow with resamples.
    assert peaks[2_000] < 8 * 2**20
    assert peaks[20_000] - peaks[2_000] < 2**20


def bootstrap_shapes(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Skewed per-query values like real metrics': rare and common hits, MRR, recall."""
    rank = rng.geometric(0.1, n)  # a hard set: the first relevant doc is often deep
    relevant = rng.integers(1, 6, n)
    return {
        "hit@1 (10%)": (rng.random(n) < 0.1).astype(np.float64),
        "hit@10 (2%)": (rng.random(n) < 0.02).astype(np.float64),
        "mrr@10": np.where(rank <= 10, 1.0 / rank, 0.0),
        "recall@10": rng.binomial(relevant, 0.3) / relevant,
    }


def test_normal_interval_agrees_with_the_bootstrap_at_the_switch_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    n = 5_001  # the evidence for BOOTSTRAP_MAX_QUERIES (was 20,000: resampled here)
    assert n == stats.BOOTSTRAP_MAX_QUERIES + 1
    values = bootstrap_shapes(n, np.random.default_rng(12))
    normal, method = stats.bootstrap_ci(values)
    assert method == "normal"
    monkeypatch.setattr(stats, "BOOTSTRAP_MAX_QUERIES", n)
    # 20,000 resamples: the bootstrap's own endpoint noise is about 0.02 standard errors
    resampled, method = stats.bootstrap_ci(values, resamples=20_000)
    assert method == "bootstrap"
    for name, array in values.items():
        se = float(array.std(ddof=1)) / math.sqrt(n)
        gaps = [abs(a - b) / se for a, b in zip(normal[name], resampled[name], strict=True)]
        assert max(gaps) < 0.1, (name, gaps)  # two 2,000-resample seeds differ by ~0.08


def test_below_the_switch_over_the_bootstrap_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    values = bootstrap_shapes(stats.BOOTSTRAP_MAX_QUERIES, np.random.default_rng(13))
    assert stats.bootstrap_ci(values)[1] == "bootstrap"
    # at 500 queries the normal interval would miss the bootstrap's by 0.17 standard errors
    # on 2% hits (the mean's distribution is skewed and coarse there), beyond the tolerance
    n = 500
    values = bootstrap_shapes(n, np.random.default_rng(13))
    resampled, _ = stats.bootstrap_ci(values, resamples=20_000)
    monkeypatch.setattr(stats, "BOOTSTRAP_MAX_QUERIES", n - 1)
    normal, method = stats.bootstrap_ci(values)
    assert method == "normal"
    rare = values["hit@10 (2%)"]
    se = float(rare.std(ddof=1)) / math.sqrt(n)
    gaps = [
        abs(a - b) / se
        for a, b in zip(normal["hit@10 (2%)"], resampled["hit@10 (2%)"], strict=True)
    ]
    assert max(gaps) > 0.15


def test_a_million_queries_take_a_few_passes_over_the_values() -> None:
    n = 1_000_000
    rng = np.random.default_rng(14)
    before = {"recall@10": rng.binomial(5, 0.5, n) / 5, "ndcg@10": rng.random(n) ** 2}
    after = {name: np.where(rng.random(n) < 0.3, np.roll(v, 1), v) for name, v in before.items()}
    tracemalloc.start()
    try:
        intervals, method = stats.bootstrap_ci(before)
        pvalues = [stats.paired_pvalue(before[k], after[k]) for k in before]
        pvalues += [stats.paired_pvalue(after[k], before[k]) for k in before]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert method == "normal"
    for name, values in before.items():
        low, high = intervals[name]
        half = stats.Z_95 * float(values.std(ddof=1)) / 1_000
        assert (low, high) == pytest.approx((values.mean() - half, values.mean() + half))
    assert all(0.0 < p <= 1.0 for p in pvalues)
    assert peak < 4 * 8 * n  # a few temporary copies of one metric's 8 MB, never n x resamples


def test_normal_interval_follows_the_level_and_stays_within_the_values() -> None:
    n = stats.BOOTSTRAP_MAX_QUERIES + 1
    values = np.zeros(n)
    values[:3] = 1.0  # mean 1.5e-4, standard error 8.7e-5: mean - 1.96 se is below 0
    intervals, method = stats.bootstrap_ci({"hit@1": values})
    assert method == "normal"
    low, high = intervals["hit@1"]
    assert low == 0.0
    assert high == pytest.approx(3 / n + 1.959964 * values.std(ddof=1) / np.sqrt(n), rel=1e-6)
    narrow, _ = stats.bootstrap_ci({"hit@1": values}, level=0.5)
    assert narrow["hit@1"][1] == pytest.approx(
        3 / n + 0.674490 * values.std(ddof=1) / np.sqrt(n), rel=1e-6
    )


@pytest.mark.parametrize("m", [37, 79, 300, 1_000, 1_023, 1_074])
def test_differences_all_one_way_have_the_exact_p(m: int) -> None:
    paired_pvalue = stats.paired_pvalue
    """Every query worse: only the observed sign pattern is that extreme, so p is 2^-m
    exactly (twice that two-sided). The Monte Carlo said p = 1 / (draws + 1), 1.0e-04 for
    an exact 1.7e-24 at m = 79, and the normal tail is an approximation out there."""
    rng = np.random.default_rng(m)
    before = rng.uniform(0.5, 1.0, m)
    after = before - rng.uniform(0.01, 0.4, m)  # every query lower, by differing amounts
    assert paired_pvalue(before, after) == 2.0**-m
    assert paired_pvalue(before, after, alternative="two-sided") == 2.0 ** (1 - m)
    assert paired_pvalue(after, before, alternative="greater") == 2.0**-m
    assert paired_pvalue(after, before, alternative="two-sided") == 2.0 ** (1 - m)
    assert paired_pvalue(after, before) == 1.0  # all better: no evidence of a drop at all
    # one difference within float slack of 0 counts as a tie (errs toward the larger p)
    tiny = after.copy()
    tiny[0] = before[0] - 1e-13
    assert paired_pvalue(before, tiny) > 2.0**-m
    # past 2^-1074 a float cannot hold it: the normal tail's floor, never 0
    many = np.linspace(0.3, 0.9, 2_500)
    assert 0.0 < paired_pvalue(many, many - 0.2) < 1e-300
