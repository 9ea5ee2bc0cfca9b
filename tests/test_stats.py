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


def test_normal_approximation_is_never_zero_and_accurate_in_the_far_tail() -> None:
    before, after = np.ones(50_000), np.zeros(50_000)  # z = -224: the tail underflows
    assert stats.paired_pvalue(before, after) == sys.float_info.min
    assert stats.paired_pvalue(before, after, alternative="two-sided") == sys.float_info.min
    # 9,000 gains and 13,500 losses of 1: z = -4500 / sqrt(22500) = -30 exactly
    before, after = lattice(22_500, up=9_000)
    assert stats.paired_pvalue(before, after) == pytest.approx(4.906713927148e-198, rel=1e-9)
    two_sided = stats.paired_pvalue(before, after, alternative="two-sided")
    assert two_sided == pytest.approx(2 * 4.906713927148e-198, rel=1e-9)


def test_normal_tail_on_lattice_data_is_within_3_percent_above_the_cut_off() -> None:
    m = stats.PERMUTATION_MAX_QUERIES + 1
    up = 9_780  # p about 1e-3: the worst case for a normal tail, every |d| equal
    expected = binomial_tail(m, up)
    assert 5e-4 < expected < 2e-3
    assert stats.paired_pvalue(*lattice(m, up)) == pytest.approx(expected, rel=0.03)


def test_normal_approximation_agrees_with_monte_carlo_at_5000_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, after = with_z(5_000, -2.0, seed=4)
    sampled = stats.paired_pvalue(before, after, resamples=100_000)
    monkeypatch.setattr(stats, "PERMUTATION_MAX_QUERIES", 4_999)
    approx = stats.paired_pvalue(before, after)
    assert approx == pytest.approx(NormalDist().cdf(-2.0), rel=1e-9)
    assert approx == pytest.approx(sampled, rel=0.06)  # Monte Carlo error alone is ~2%


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
    values = {f"metric{j}": rng.random(20_000) for j in range(3)}
    tracemalloc.start()
    try:
        intervals, method = stats.bootstrap_ci(values, resamples=2_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert method == "bootstrap"
    assert peak < 80 * 2**20  # a 2,000 x 20,000 count matrix alone would be 320 MB
    low, high = intervals["metric0"]
    assert low < float(values["metric0"].mean()) < high


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
