"""Benchmark: the statistics of a large golden set -- intervals and paired tests -- in time and
peak memory, and the evidence behind their switch-overs to closed forms.

Run from the repository root (dev extra installed)::

    python benchmarks/bench_stats.py                   # n = 5k, 20k, 200k, 1M; both parts
    python benchmarks/bench_stats.py --sizes 20000 --skip-accuracy

A. Cost. Per n (5,000: the largest that is resampled): six per-query arrays shaped like real
   metrics (hit@10, recall@10, mrr@10, precision@10, ndcg@10, map@10) and a second run in
   which 20% of the queries changed. Timed
   (best of ``--repeat``) and, in a separate call, traced (tracemalloc peak, numpy's arrays
   included):

   - ``bootstrap_ci`` over the six arrays, one call, as ``evaluation`` makes it;
   - ``paired_pvalue`` both ways for the six, 12 calls, as ``compare`` makes them (resolution
     alpha / gated / 10 = 0.05 / 3 / 10), for an unchanged-looking run ("noise", p about 0.5)
     and for drops near alpha ("near alpha": p about 3x resolution, where Monte Carlo draws
     longest).

   Implementations: this tree ("new"); ``stats.py`` at each ``--old`` revision, read with
   ``git show`` ("a8fb2e2": before issue 13; "3f21a3a~1": the resamples x n matrix the issue
   measured); and that matrix written out here ("matrix", bootstrap only, where it fits).
B. Accuracy (skip with ``--skip-accuracy``), the evidence for the switch-overs:

   - BOOTSTRAP_MAX_QUERIES: the normal interval's endpoints against the exact bootstrap's (a
     bootstrap of data with few distinct values is a multinomial over them: 200,000
     resamples), largest gap in standard errors, per shape and n;
   - NORMAL_MIN_EFFECTIVE: the sign-flip test's normal tail, uncorrected and continuity-
     corrected, and the Monte Carlo it replaces (3 seeds), against the exact distribution
     (one inverse FFT of prod cos(k_i w) for integer-valued differences), relative error of p,
     per shape and m_eff.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import time
import tracemalloc
import types
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from pytest_retrieval import stats

ROOT = Path(__file__).resolve().parent.parent
ALPHA, GATED = 0.05, 3
RESOLUTION = ALPHA / GATED / 10
Array = np.ndarray


def load_revision(revision: str) -> types.ModuleType | None:
    """stats.py as it was at ``revision``, as a module; None outside a git checkout."""
    try:
        source = subprocess.run(
            ["git", "show", f"{revision}:src/pytest_retrieval/stats.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType(f"stats_{revision}")
    exec(compile(source, f"stats.py@{revision}", "exec"), module.__dict__)
    return module


def matrix_bootstrap(values: dict[str, Array], resamples: int = 2000) -> None:
    """All resamples at once: the resamples x n index matrix and its gathered values."""
    n = len(next(iter(values.values())))
    draws = np.random.default_rng(0).integers(0, n, size=(resamples, n))
    for array in values.values():
        np.quantile(array[draws].mean(axis=1), [0.025, 0.975])


def metric_runs(n: int, seed: int) -> tuple[dict[str, Array], dict[str, Array]]:
    """Six metric-shaped arrays and the same after 20% of the queries changed."""
    rng = np.random.default_rng(seed)

    def draw() -> dict[str, Array]:
        relevant = rng.integers(1, 6, n)
        rank = rng.geometric(0.3, n)
        return {
            "hit@10": (rng.random(n) < 0.6).astype(np.float64),
            "recall@10": rng.binomial(relevant, 0.5) / relevant,
            "mrr@10": np.where(rank <= 10, 1.0 / rank, 0.0),
            "precision@10": rng.binomial(10, 0.3, n) / 10,
            "ndcg@10": rng.random(n) ** 2,
            "map@10": rng.random(n) ** 3,
        }

    before, fresh = draw(), draw()
    changed = rng.random(n) < 0.2
    return before, {name: np.where(changed, fresh[name], before[name]) for name in before}


def near_alpha(before: Array, after: Array, target: float) -> Array:
    """``after`` with the changed queries' signs set so the normal p of a drop is ``target``:
    the first j changes become drops, the rest gains (sizes kept), j by bisection."""
    sizes = np.abs(after - before)
    changed = np.flatnonzero(sizes)
    spread = math.sqrt(float(np.square(sizes).sum()))
    goal = NormalDist().inv_cdf(target) * spread
    low, high = 0, changed.size
    while low < high:  # the sum falls as j grows: smallest j with sum <= goal
        middle = (low + high) // 2
        if sizes[changed].sum() - 2 * sizes[changed[: middle + 1]].sum() <= goal:
            high = middle
        else:
            low = middle + 1
    signs = np.ones(before.size)
    signs[changed[: low + 1]] = -1.0
    return before + signs * sizes


def measure(call: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """Best wall time of ``repeat`` calls, the tracemalloc peak (MB) of one more, and what
    the call returned."""
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    try:
        result = call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return best, peak / 2**20, result


def paired_calls(module: Any, before: dict[str, Array], after: dict[str, Array]) -> float:
    """compare.py's 12 calls: each metric's drop and rise (as "less" with the runs swapped,
    which every version has); the resolution keyword where the version has it. Returns the
    smallest p."""
    extra = (
        {"resolution": RESOLUTION}
        if "resolution" in module.paired_pvalue.__code__.co_varnames
        else {}
    )
    found = []
    for name in before:
        found.append(module.paired_pvalue(before[name], after[name], **extra))
        found.append(module.paired_pvalue(after[name], before[name], **extra))
    return min(found)


def cost(sizes: list[int], revisions: list[str], repeat: int) -> None:
    versions: list[tuple[str, Any]] = [("new", stats)]
    for revision in revisions:
        module = load_revision(revision)
        if module is None:
            print(f"(old revision {revision}: not available, left out)")
        else:
            versions.append((revision, module))
    print("A. cost: 6 metrics; time is best of", repeat, "| peak = tracemalloc peak")
    print(f"{'n':>9} {'version':>10} {'what':<24} {'time':>9} {'peak':>9}")
    for n in sizes:
        before, after = metric_runs(n, seed=n)
        drops = {name: near_alpha(before[name], after[name], 3 * RESOLUTION) for name in before}
        rows: list[tuple[str, str, Callable[[], object]]] = []
        for label, module in versions:
            rows.append((label, "bootstrap_ci (all 6)", partial(module.bootstrap_ci, before)))
            rows.append((label, "paired x12, noise", partial(paired_calls, module, before, after)))
            rows.append(
                (label, "paired x12, near alpha", partial(paired_calls, module, before, drops))
            )
        matrix_gb = 2000 * n * 8 * 2 / 1e9  # int64 indices + gathered float64 values
        if matrix_gb <= 2:
            rows.append(("matrix", "bootstrap_ci (all 6)", partial(matrix_bootstrap, before)))
        else:
            print(
                f"{n:>9,} {'matrix':>10} {'bootstrap_ci (all 6)':<24} would need {matrix_gb:.0f} GB"
            )
        for label, what, call in rows:
            runs = 1 if "near alpha" in what and label != "new" else repeat
            seconds, peak, result = measure(call, runs)
            smallest = f"min p {result:.2g}" if isinstance(result, float) else ""
            print(f"{n:>9,} {label:>10} {what:<24} {seconds:>8.3f}s {peak:>7.1f}MB  {smallest}")


# ---------------------------------------------------------------- B. accuracy


def bootstrap_shapes(n: int, rng: np.random.Generator) -> Iterator[tuple[str, Array]]:
    for rate in (0.5, 0.1, 0.02, 0.005):
        yield f"0/1, {rate:.1%} ones", (rng.random(n) < rate).astype(np.float64)
    rank = rng.geometric(0.1, n)
    yield "mrr@10, hard set", np.where(rank <= 10, 1.0 / rank, 0.0)
    relevant = rng.integers(1, 6, n)
    yield "recall@10, 1-5 relevant", rng.binomial(relevant, 0.3) / relevant


def bootstrap_accuracy() -> None:
    z = NormalDist().inv_cdf(0.975)
    sizes = (500, 1000, 2000, 5000, 20000)
    print("\nB1. normal interval vs exact bootstrap: largest endpoint gap in standard errors")
    print("    (two 2,000-resample bootstraps with different seeds differ by about 0.08 rms)")
    print(f"{'shape':<26}" + "".join(f"{n:>9,}" for n in sizes))
    table: dict[str, list[float]] = {}
    for n in sizes:
        rng = np.random.default_rng(n)
        for name, values in bootstrap_shapes(n, rng):
            distinct, counts = np.unique(values, return_counts=True)
            means = rng.multinomial(n, counts / n, size=200_000) @ distinct / n
            low, high = np.quantile(means, [0.025, 0.975])
            mean, se = float(values.mean()), float(values.std(ddof=1)) / math.sqrt(n)
            gap = max(abs(mean - z * se - low), abs(mean + z * se - high)) / se
            table.setdefault(name, []).append(gap)
    for name, gaps in table.items():
        print(f"{name:<26}" + "".join(f"{gap:>9.3f}" for gap in gaps))
    print(f"(BOOTSTRAP_MAX_QUERIES = {stats.BOOTSTRAP_MAX_QUERIES:,}; rare 0/1 values: the gap is")
    print(" within one step 1/n of the bootstrap's own lattice)")


def exact_cdf(units: Array) -> Array:
    """P(S <= s), s = -sum..sum, S = sum(+-units_i): inverse FFT of prod cos(units_i w)."""
    total = int(units.sum())
    size = 1 << (2 * total).bit_length()
    w = 2 * np.pi * np.arange(size) / size
    values, counts = np.unique(units, return_counts=True)
    characteristic = np.ones(size)
    for value, count in zip(values, counts, strict=True):
        characteristic *= np.cos(value * w) ** count
    pmf = np.fft.ifft(characteristic).real
    return np.cumsum(np.clip(np.concatenate((pmf[size - total :], pmf[: total + 1])), 0, None))


def sign_flip_units(shape: str, m: int, rng: np.random.Generator) -> Array:
    """|d| of a metric in integer units of its grid (m of them)."""
    if shape == "hit@k (all |d| 1)":
        return np.ones(m, dtype=np.int64)
    if shape == "precision@10":
        return rng.integers(1, 4, m)
    if shape == "recall@10 (1-4 rel)":
        relevant = rng.integers(1, 5, 3 * m)
        units = np.abs(rng.binomial(relevant, 0.5) - rng.binomial(relevant, 0.5)) * (12 // relevant)
        return units[units > 0][:m]
    reciprocal = np.array([0, 60, 30, 20, 15, 12])  # mrr@5 in units of 1/60
    odds = np.array([0.3, 0.35, 0.15, 0.1, 0.06, 0.04])
    units = np.abs(rng.choice(reciprocal, 3 * m, p=odds) - rng.choice(reciprocal, 3 * m, p=odds))
    return units[units > 0][:m]


def sign_flip_accuracy() -> None:
    shapes = ("hit@k (all |d| 1)", "precision@10", "recall@10 (1-4 rel)", "mrr@5")
    targets = (1e-2, 1e-3, 1e-4)
    print("\nB2. sign-flip p vs exact: relative error, plain normal / corrected normal /")
    print("    Monte Carlo (worst of 3 seeds; resolution 1e-4, as alpha 0.003 would ask)")
    print(
        f"{'shape':<20} {'m':>6} {'m_eff':>6}  "
        + "  ".join(f"{'p~' + format(t, 'g'):^24}" for t in targets)
    )
    normal_from, cap = stats.NORMAL_MIN_EFFECTIVE, stats.PERMUTATION_MAX_QUERIES
    try:
        for shape in shapes:
            for m in (250, 500, 1000, 2000, 4000):
                units = sign_flip_units(shape, m, np.random.default_rng(m))
                scaled = units / units.max()
                effective = float(np.square(scaled).sum()) ** 2 / float(np.sum(scaled**4))
                cdf, total = exact_cdf(units), int(units.sum())
                order = np.random.default_rng(1).permutation(units.size)
                sums = total - 2 * np.cumsum(units[order])
                cells = []
                for target in targets:
                    drops = int(np.searchsorted(-cdf[sums + total], -target)) + 1
                    signs = np.ones(units.size)
                    signs[order[:drops]] = -1.0
                    exact = float(cdf[int(signs @ units) + total])
                    diffs = signs * units.astype(np.float64)
                    plain = NormalDist().cdf(float(diffs.sum()) / math.sqrt(float(diffs @ diffs)))
                    stats.NORMAL_MIN_EFFECTIVE, stats.PERMUTATION_MAX_QUERIES = 0, cap
                    corrected = stats.paired_pvalue(np.zeros(units.size), diffs)
                    stats.NORMAL_MIN_EFFECTIVE, stats.PERMUTATION_MAX_QUERIES = math.inf, 10**9
                    sampled = [
                        stats.paired_pvalue(np.zeros(units.size), diffs, seed=s) / exact - 1
                        for s in range(3)
                    ]
                    worst = max(sampled, key=abs)
                    cells.append(
                        f"{plain / exact - 1:+.3f}/{corrected / exact - 1:+.3f}/{worst:+.2f}"
                    )
                print(
                    f"{shape:<20} {m:>6} {effective:>6.0f}  "
                    + "  ".join(f"{c:^24}" for c in cells),
                    flush=True,
                )
    finally:
        stats.NORMAL_MIN_EFFECTIVE, stats.PERMUTATION_MAX_QUERIES = normal_from, cap
    print(
        f"(NORMAL_MIN_EFFECTIVE = {stats.NORMAL_MIN_EFFECTIVE:,}: the corrected normal from there)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5_000, 20_000, 200_000, 1_000_000])
    parser.add_argument("--old", nargs="*", default=["a8fb2e2", "3f21a3a~1"], help="git revisions")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-accuracy", action="store_true")
    args = parser.parse_args()
    cost(args.sizes, args.old, args.repeat)
    if not args.skip_accuracy:
        bootstrap_accuracy()
        sign_flip_accuracy()


if __name__ == "__main__":
    main()
