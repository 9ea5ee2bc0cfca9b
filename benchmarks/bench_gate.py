"""Benchmark: know your gate. How often does a baseline comparison fail the session, against the
TRUE drop in recall@10, for golden sets of 30 to 20,000 queries? BM25 on resampled Cranfield.

What it measures
    BM25 (the repository-root ``conftest.py`` retriever, via ``bench_regression.Bench``)
    answers the 225 Cranfield queries once, top 100 each. A golden set of n queries is n draws
    of those queries with replacement; each draw is its own query with its own perturbations.
    Per trial:

    - baseline: BM25 with null noise (``bench_regression``'s scenario B: per query, with
      probability 0.5, one random adjacent pair in the top 20 is swapped, relevant or not);
    - current: an independent null-noise copy, so an unchanged PR is not an all-zero diff;
    - then a true drop of ``delta`` in mean recall@10 is made in the current run as
      ``bench_regression`` scenario C makes it: relevant docs leave the top 10 one at a time
      (ranks below shift up, the first non-relevant doc below rank 10 fills rank 10, the
      moved doc takes its old rank). The moves are drawn in random order among all relevant
      docs in the current top 10, first fit until the drop is ``delta``, then the one added
      or exchanged move that brings it closest (``choose_moves``). The drop is measured
      against the current run before the moves (the true effect of the change; what the
      gate sees adds the null noise) and reported with the drops it made in mrr@10 and
      ndcg@10.

    recall@10, mrr@10 and ndcg@10 (the default gated metrics at the golden set's k) are
    scored per query by ``pytest_retrieval.metrics`` (``compute_from_matrix`` on the grade
    matrix, checked at start-up against ``metrics.compute`` on the ranked id lists), and
    judged by ``compare.judge_changes(before, after, {}, 0.05, gated)``: the default
    allowance (0.01 absolute drop), alpha 0.05, Holm over the three. The session fails when
    any verdict is "regressed". Where no gated mean dropped beyond its allowance,
    ``judge_changes`` cannot say "regressed" and is not called (its p-values are nearly
    all the cost). One trial judges one golden set at every drop (same draws, same noise),
    so the columns of a row differ only by the drop.

    Drops: 0 (false alarms), 0.5x, 1x, 2x and 5x the allowance, or those of ``--drops``
    (recall@10 drops; a 0 among them gives the false-alarm line and check). Then the plugin's power
    line: ``compare.detectable_drop`` for recall@10 at n (from the Cranfield BM25 per-query
    values, alpha 0.05 over 3 tests), and the measured power of what it models, the
    recall@10 test alone (raw one-sided p < alpha / 3, allowance ignored), at 0.25x to 1.5x
    that drop: where it crosses 80% is the drop the test really sees.

Checks (exit 1 when one fails; the table is printed regardless)
    the fast scoring path equals ``metrics.compute`` on id lists; the false-alarm rate at
    drop 0 (when measured) is at most 2 x alpha at every size.

The picture
    ``--svg PATH`` also draws the gate's operating characteristic as a hand-written SVG line
    chart (no plotting library): x the true recall@10 drop made, y the share of sessions
    failed, one line per size, the allowance as a dashed vertical line and 80% as a dotted
    horizontal one, on a white plot so it reads on light and dark pages alike.

How to run (from the repository root, venv active, ``pip install -e ".[example]"`` for
``bm25s`` and ``PyStemmer``)::

    python benchmarks/bench_gate.py             # ~35 CPU s of trials: about a minute on 2 cores
    python benchmarks/bench_gate.py --markdown  # also the table as Markdown
    python benchmarks/bench_gate.py --sizes 30 200 --trials 500 --seed 1 --jobs 1
    python benchmarks/bench_gate.py --sizes 30 50 100 200 1000 \
        --drops 0 0.005 0.01 0.015 0.02 0.03 0.05 0.08 --svg docs/img/operating-characteristic.svg

Trial t of size n draws from the random stream (seed, n, t) alone: ``--jobs`` does not
change a number.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from xml.sax.saxutils import escape

import numpy as np
from numpy.typing import NDArray

from pytest_retrieval import metrics
from pytest_retrieval.compare import TOLERANCE, detectable_drop, judge_changes
from pytest_retrieval.gate import DEFAULT_GATED
from pytest_retrieval.limits import DEFAULT_MAX_DROP, default_allowance
from pytest_retrieval.stats import paired_pvalue, wilson_interval

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]

REGRESSION = Path(__file__).resolve().parent / "bench_regression.py"
SIZES = (30, 200, 1_000, 20_000)
MULTIPLES = (0.0, 0.5, 1.0, 2.0, 5.0)  # true drops, in allowances
DROPS = tuple(m * DEFAULT_MAX_DROP for m in MULTIPLES)  # the default ``--drops``
#: where the recall@k test alone is run, in multiples of the plugin's 80%-power drop
FRACTIONS = (0.25, 0.375, 0.5, 0.75, 1.0, 1.5)
TRIALS = 200
#: sizes above this get ``--large-trials``: their p-values cost most (~0.4 CPU s a trial at 20,000)
LARGE = 1_000
LARGE_TRIALS = 50
MAX_FALSE_ALARMS = 2.0  # x alpha, the internal check at drop 0
POWER = 0.8


def load_regression() -> ModuleType:
    """``benchmarks/bench_regression.py`` (BM25 run cache, null noise), imported by path."""
    spec = importlib.util.spec_from_file_location("_bench_gate_regression", REGRESSION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Population:
    """The 225 Cranfield queries under BM25, as grades by BM25 rank, to resample from."""

    ids: list[str]
    runs: list[list[str]]  # BM25's top ``depth`` ids per query
    qrels: list[dict[str, int]]
    grades: FloatArray  # (queries, depth): grade of BM25's hit at each rank
    ideal: FloatArray  # (queries, k): judged grades sorted descending
    n_relevant: FloatArray  # (queries,)
    k: int
    gated: tuple[str, ...]
    noise_depth: int  # the null noise swaps a pair within this top
    noise_probability: float
    alpha: float

    @classmethod
    def load(cls, regression: ModuleType) -> Population:
        bench = regression.Bench.load()
        queries = bench.golden.queries
        runs = [bench.bm25[q.id] for q in queries]
        qrels = [dict(q.relevant) for q in queries]
        k = int(bench.golden.k)
        matrix = metrics.grade_matrix(runs, qrels, regression.DEPTH)
        return cls(
            ids=[q.id for q in queries],
            runs=runs,
            qrels=qrels,
            grades=matrix.grades,
            ideal=matrix.ideal[:, :k],
            n_relevant=matrix.n_relevant,
            k=k,
            gated=tuple(f"{family}@{k}" for family in DEFAULT_GATED),
            noise_depth=regression.TOP_SWAP,
            noise_probability=regression.SWAP_PROBABILITY,
            alpha=regression.ALPHA,
        )

    def score(self, draws: IntArray, order: IntArray) -> dict[str, FloatArray]:
        """Per-query gated metrics of ``order`` (row i: BM25 ranks of query ``draws[i]``'s
        list, reordered), by the plugin's kernels on the grade matrix."""
        top = self.grades[draws[:, None], order[:, : self.k]]
        matrix = metrics.GradeMatrix(top, self.ideal[draws], self.n_relevant[draws], self.k)
        return metrics.compute_from_matrix(matrix, [metrics.parse_metric(m) for m in self.gated])

    def noisy(self, draws: IntArray, rng: np.random.Generator) -> IntArray:
        """BM25's order with null noise: per row, with probability ``noise_probability``, one
        random adjacent pair within the top ``noise_depth`` swapped (scenario B)."""
        n, depth = len(draws), self.grades.shape[1]
        order = np.tile(np.arange(depth, dtype=np.intp), (n, 1))
        rows = np.flatnonzero(rng.random(n) < self.noise_probability)
        at = rng.integers(self.noise_depth - 1, size=rows.size)
        order[rows, at], order[rows, at + 1] = order[rows, at + 1], order[rows, at]
        return order

    def demote(
        self, draws: IntArray, order: IntArray, drop: float, rng: np.random.Generator
    ) -> IntArray:
        """``order`` with relevant docs moved out of the top k until mean recall@k is ``drop``
        lower (as closely as the moves allow; see the module docstring)."""
        if drop <= 0:
            return order
        top = self.grades[draws[:, None], order[:, : self.k]] > 0
        rows, ranks = np.nonzero(top)
        sizes = 1.0 / (self.n_relevant[draws[rows]] * len(draws))  # recall@k mean per move
        chosen = choose_moves(sizes, drop, rng)
        out: IntArray = order.copy()
        by_row: dict[int, list[int]] = {}
        for row, rank in zip(rows[chosen].tolist(), ranks[chosen].tolist(), strict=True):
            by_row.setdefault(row, []).append(rank)
        for row, moved_ranks in by_row.items():
            out[row] = self.moved(int(draws[row]), order[row], moved_ranks)
        return out

    def moved(self, query: int, order: IntArray, moved_ranks: Sequence[int]) -> IntArray:
        """One row after its relevant docs at ``moved_ranks`` (< k) left the top k: the rest
        shift up, the first non-relevant docs below k fill the bottom of the top k, and the
        moved docs take their old ranks (scenario C's step, repeated)."""
        ranked = order.tolist()
        moved = set(moved_ranks)
        grades = self.grades[query]
        fillers: list[int] = []
        for j in range(self.k, len(ranked)):
            if len(fillers) == len(moved):
                break
            if grades[ranked[j]] <= 0:
                fillers.append(j)
        if len(fillers) < len(moved):
            raise RuntimeError(f"query {self.ids[query]}: too few non-relevant docs below k")
        leaving = [ranked[r] for r in sorted(moved)]
        top = [d for r, d in enumerate(ranked[: self.k]) if r not in moved]
        top += [ranked[j] for j in fillers]
        tail = list(ranked[self.k :])
        for j, doc in zip(fillers, leaving, strict=True):
            tail[j - self.k] = doc
        return np.array(top + tail, dtype=np.intp)


def choose_moves(sizes: FloatArray, target: float, rng: np.random.Generator) -> IntArray:
    """Indices of moves (each lowers the mean by ``sizes[i]``) summing to about ``target``:
    random order, first fit; then, when short, the best single change of adding an unused
    move or exchanging a chosen one for an unused one. Raises when all moves fall short."""
    slack = 1e-12 * max(target, 1.0)
    if float(sizes.sum()) < target - slack:
        raise RuntimeError(f"cannot drop recall by {target}: only {sizes.sum():.4f} to remove")
    order = rng.permutation(sizes.size)
    cumulative = np.cumsum(sizes[order])
    taken = int(np.searchsorted(cumulative, target + slack, side="right"))
    chosen = [order[:taken]]
    remaining = target - (float(cumulative[taken - 1]) if taken else 0.0)
    rest = order[taken:]
    while remaining > slack:  # first fit; a move too big now stays too big
        fits = np.flatnonzero(sizes[rest] <= remaining + slack)
        if not fits.size:
            break
        move = rest[fits[0]]
        chosen.append(np.array([move]))
        remaining -= float(sizes[move])
        rest = rest[fits[0] + 1 :]
    picked = np.concatenate(chosen)
    unused = np.ones(sizes.size, dtype=bool)
    unused[picked] = False
    if remaining <= slack or not unused.any():
        return picked
    spare = np.flatnonzero(unused)
    spare = spare[np.argsort(sizes[spare], kind="stable")]
    # candidates: take out chosen move c (none: 0) and put in the unused move nearest to
    # remaining + size(c), which leaves remaining + size(c) - size(u) to go
    out = np.concatenate(([-1], picked))
    wanted = remaining + np.concatenate(([0.0], sizes[picked]))
    near = np.clip(np.searchsorted(sizes[spare], wanted), 1, spare.size) - 1
    near = np.stack([near, np.minimum(near + 1, spare.size - 1)])
    error = np.abs(wanted - sizes[spare[near]])
    which, best = np.unravel_index(int(np.argmin(error)), error.shape)
    if error[which, best] >= remaining:
        return picked
    if out[best] >= 0:
        picked = picked[picked != out[best]]
    return np.append(picked, spare[near[which, best]])


@dataclass
class Cell:
    """One (size, true drop) cell over the trials run so far."""

    target: float
    trials: int = 0
    failed: int = 0  # sessions failed (gate cells) or recall@k tests fired (power cells)
    judged: int = 0  # gate cells: trials some gated mean dropped beyond its allowance
    drops: dict[str, list[float]] = field(default_factory=dict)  # metric -> true drop a trial
    by_metric: dict[str, int] = field(default_factory=dict)  # gate cells: metric -> regressed

    @property
    def rate(self) -> float:
        return self.failed / self.trials if self.trials else math.nan

    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.failed, self.trials)

    def record(self, null: dict[str, FloatArray], after: dict[str, FloatArray]) -> None:
        """One more trial: the true drop of each metric is ``null``'s mean minus ``after``'s."""
        self.trials += 1
        for metric, values in null.items():
            self.drops.setdefault(metric, []).append(float(values.mean() - after[metric].mean()))

    def add(self, other: Cell) -> None:
        self.trials += other.trials
        self.failed += other.failed
        self.judged += other.judged
        for metric, drops in other.drops.items():
            self.drops.setdefault(metric, []).extend(drops)
        for metric, count in other.by_metric.items():
            self.by_metric[metric] = self.by_metric.get(metric, 0) + count


@dataclass
class Row:
    """One golden-set size: the gate at each drop, and the recall@k test near its power line."""

    size: int
    detectable: float  # compare.detectable_drop of recall@k at this size
    gate: list[Cell]  # at MULTIPLES x the allowance
    power: list[Cell]  # at FRACTIONS x detectable
    cpu_seconds: float = 0.0

    def add(self, other: Row) -> None:
        for mine, theirs in zip(self.gate + self.power, other.gate + other.power, strict=True):
            mine.add(theirs)
        self.cpu_seconds += other.cpu_seconds


def empty_row(population: Population, size: int, drops: Sequence[float] = DROPS) -> Row:
    """The cells of ``size`` (a gate cell per true drop in ``drops``); the power line from
    BM25's unperturbed per-query recall@k, as the plugin computes it from a baseline's values."""
    recall = population.gated[0]
    everyone = np.arange(len(population.ids))
    depth = population.grades.shape[1]
    bm25 = population.score(everyone, np.tile(np.arange(depth), (everyone.size, 1)))
    hits = (population.grades[:, : population.k] > 0).sum(axis=1)  # relevant in the top k
    detectable = detectable_drop(
        bm25[recall], size, population.alpha, len(population.gated), hits=hits
    )
    return Row(
        size,
        detectable,
        [Cell(drop) for drop in drops],
        [Cell(f * detectable) for f in FRACTIONS],
    )


def beyond_allowance(
    before: dict[str, FloatArray], after: dict[str, FloatArray], gated: Sequence[str]
) -> bool:
    """Whether some gated mean dropped by more than its default allowance: without that
    ``judge_changes`` cannot say "regressed" (rule a), so its p-values, most of the cost, are
    skipped. Same floats and comparison as ``judge_changes``."""
    for metric in gated:
        base, now = float(before[metric].mean()), float(after[metric].mean())
        if base - now > default_allowance(metric).allowed(base) + TOLERANCE:
            return True
    return False


def run_trials(
    population: Population, size: int, trials: range, seed: int, drops: Sequence[float] = DROPS
) -> Row:
    """Golden sets of ``size`` draws, one per trial number, each judged at every drop. Trial
    t uses the random stream (seed, size, t) only, so splitting trials over processes does
    not change a result."""
    recall, tests, alpha = population.gated[0], len(population.gated), population.alpha
    row = empty_row(population, size, drops)
    start = time.process_time()
    for trial in trials:
        rng = np.random.default_rng([seed, size, trial])
        draws = rng.integers(len(population.ids), size=size)
        before = population.score(draws, population.noisy(draws, rng))
        order = population.noisy(draws, rng)
        null = population.score(draws, order)
        for cell in row.gate:
            after = population.score(draws, population.demote(draws, order, cell.target, rng))
            cell.record(null, after)
            if beyond_allowance(before, after, population.gated):
                cell.judged += 1
                changes = judge_changes(before, after, {}, alpha, population.gated)
                regressed = [c.metric for c in changes if c.verdict == "regressed"]
                cell.failed += bool(regressed)
                for metric in regressed:
                    cell.by_metric[metric] = cell.by_metric.get(metric, 0) + 1
        for cell in row.power:  # the formula's test: one-sided, Bonferroni over the gated
            after = population.score(draws, population.demote(draws, order, cell.target, rng))
            cell.record(null, after)
            p = paired_pvalue(before[recall], after[recall], resolution=alpha / tests / 10)
            cell.failed += p < alpha / tests
    row.cpu_seconds = time.process_time() - start
    return row


def run_all(
    population: Population,
    trials: dict[int, int],
    seed: int,
    jobs: int,
    drops: Sequence[float] = DROPS,
) -> list[Row]:
    """Every size's trials, in chunks over ``jobs`` processes (1: in this process)."""
    drops = tuple(drops)
    rows = {size: empty_row(population, size, drops) for size in trials}
    chunks = [
        (size, range(first, min(count, first + step)))
        for size, count in trials.items()
        for step in [max(1, -(-count // (4 * jobs)))]
        for first in range(0, count, step)
    ]
    if jobs == 1:
        parts = [run_trials(population, size, chunk, seed, drops) for size, chunk in chunks]
    else:
        context = multiprocessing.get_context("spawn")  # no forked BLAS threads or locks
        with ProcessPoolExecutor(jobs, mp_context=context) as pool:
            futures = [
                pool.submit(run_trials, population, size, chunk, seed, drops)
                for size, chunk in sorted(chunks, key=lambda c: -c[0])  # largest sets first
            ]
            parts = [future.result() for future in futures]
    for part in parts:
        rows[part.size].add(part)
    return [rows[size] for size in trials]


def check_scoring(population: Population, seed: int) -> str | None:
    """The grade-matrix path against ``metrics.compute`` on the ranked id lists of a noisy,
    demoted run; a message when they differ."""
    rng = np.random.default_rng([seed, 0])
    draws = rng.integers(len(population.ids), size=300)
    order = population.demote(draws, population.noisy(draws, rng), 0.05, rng)
    fast = population.score(draws, order)
    runs = [[population.runs[q][j] for j in row] for q, row in zip(draws, order, strict=True)]
    slow = metrics.compute(population.gated, runs, [population.qrels[q] for q in draws])
    for metric in population.gated:
        if not np.allclose(fast[metric], slow[metric], rtol=0, atol=1e-12):
            return f"{metric}: the grade-matrix scores differ from metrics.compute"
    for query, row in zip(draws, order, strict=True):
        if sorted(row.tolist()) != list(range(len(row))):
            return f"query {population.ids[query]}: a perturbed list lost or repeated a doc"
    return None


def crossing(cells: Sequence[Cell], metric: str) -> float | None:
    """The true ``metric`` drop where the measured rate reaches 80%, linear between the drops
    measured; None when it never does."""
    points = sorted((float(np.mean(c.drops[metric])), c.rate) for c in cells)
    if points[0][1] >= POWER:
        return points[0][0]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if y0 < POWER <= y1:
            return x0 + (POWER - y0) * (x1 - x0) / (y1 - y0)
    return None


def table(rows: Sequence[Row], metric: str, markdown: bool) -> str:
    """Rows = golden-set size; columns = true ``metric`` drop; cells = P(session fails) with
    its 95% Wilson interval; then where that crosses 80%, the plugin's 80%-power drop, and
    where the ``metric`` test alone measurably crosses 80%."""
    heads = ["queries"] + [f"drop {cell.target:g}" for cell in rows[0].gate]
    heads += ["gate 80% at", "detectable_drop", "test 80% at"]
    lines = []
    for row in rows:
        cells = [f"{row.size:,}"]
        for cell in row.gate:
            low, high = cell.interval()
            cells.append(f"{cell.rate:.0%} ({low:.0%}-{high:.0%})")
        gate, test = crossing(row.gate, metric), crossing(row.power, metric)
        cells.append(f"> {row.gate[-1].target:g}" if gate is None else f"~{gate:.3f}")
        cells.append(f"{row.detectable:.4f}")
        cells.append(f"> {row.power[-1].target:.4f}" if test is None else f"~{test:.4f}")
        lines.append(cells)
    if markdown:
        out = ["| " + " | ".join(heads) + " |", "|" + "---:|" * len(heads)]
        out += ["| " + " | ".join(cells) + " |" for cells in lines]
        return "\n".join(out)
    widths = [max(len(h), *(len(cells[i]) for cells in lines)) for i, h in enumerate(heads)]
    out = ["  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    out += ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in lines]
    return "\n".join(out)


def details(rows: Sequence[Row], gated: Sequence[str], alpha: float) -> str:
    """Per size and drop: the true drops made in each gated metric, how many trials had some
    mean beyond its allowance (only those reach the p-values), which metrics regressed; and
    the first metric's test alone at fractions of the plugin's power line."""
    recall = gated[0]
    lines = []
    for row in rows:
        alarms = false_alarms(row)
        trials = row.power[0].trials
        lines.append(
            f"n={row.size:,}: {trials} trials, {row.cpu_seconds:.0f} CPU s; false alarms "
            + (
                "not measured (no drop 0)"
                if alarms is None
                else f"{alarms.failed}/{alarms.trials} = {alarms.rate:.1%} (alpha {alpha})"
            )
        )
        lines += [
            f"  target: true drop made, {recall} mean [min, max] / "
            + " / ".join(f"{m} mean" for m in gated[1:])
            + "; trials beyond an allowance; regressed per metric",
        ]
        for cell in row.gate:
            if cell.target <= 0:
                continue
            made = cell.drops[recall]
            regressed = ", ".join(f"{m} {cell.by_metric.get(m, 0)}" for m in gated)
            lines.append(
                f"    {cell.target:g}: {np.mean(made):.4f} [{min(made):.4f}, {max(made):.4f}] / "
                + " / ".join(f"{np.mean(cell.drops[m]):.4f}" for m in gated[1:])
                + f"; {cell.judged}; {regressed}"
            )
        lines.append(
            f"  {recall} test alone (raw p < alpha / {len(gated)}) fired at detectable_drop x: "
            + ", ".join(
                f"{f:g} ({np.mean(c.drops[recall]):.4f}) {c.rate:.0%}"
                for f, c in zip(FRACTIONS, row.power, strict=True)
            )
        )
    return "\n".join(lines)


def false_alarms(row: Row) -> Cell | None:
    """The row's cell at drop 0 (an unchanged retriever), if it was measured."""
    return next((cell for cell in row.gate if cell.target <= 0), None)


#: line colours (Okabe-Ito, distinguishable with the common colour-vision deficiencies) and
#: marker shapes, one per golden-set size, in order
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
MARKERS = ("circle", "square", "triangle", "diamond", "down")


def _marker(shape: str, x: float, y: float, colour: str) -> str:
    r = 4.0
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:g}" fill="{colour}"/>'
    if shape == "square":
        return (
            f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:g}" height="{2 * r:g}" '
            f'fill="{colour}"/>'
        )
    corners = {
        "triangle": [(0, -1.25), (1.15, 0.9), (-1.15, 0.9)],
        "down": [(0, 1.25), (1.15, -0.9), (-1.15, -0.9)],
        "diamond": [(0, -1.35), (1.1, 0), (0, 1.35), (-1.1, 0)],
    }[shape]
    points = " ".join(f"{x + dx * r:.1f},{y + dy * r:.1f}" for dx, dy in corners)
    return f'<polygon points="{points}" fill="{colour}"/>'


def _ticks(high: float) -> list[float]:
    """About 5 to 10 round ticks from 0 to ``high`` (or a little less: a made drop of 0.0803
    for a target of 0.08 does not open a whole new step)."""
    step = 10 ** math.floor(math.log10(high)) if high > 0 else 1.0
    for factor in (0.1, 0.2, 0.25, 0.5, 1.0, 2.0):
        if high / (step * factor) <= 10:
            step *= factor
            break
    count = max(1, math.ceil(high / step - 0.05))
    return [round(i * step, 10) for i in range(count + 1)]


def operating_svg(
    series: dict[int, Sequence[tuple[float, float]]],
    allowance: float,
    metric: str = "recall@10",
    power: float = POWER,
    subtitle: str = "",
) -> str:
    """The gate's operating characteristic as a standalone SVG document (700 x 440 px).

    ``series`` maps a golden-set size to its (true ``metric`` drop, share of sessions failed)
    points; one line per size, a dashed vertical line at ``allowance`` and a dotted horizontal
    one at ``power``; ``subtitle``, a line under the title (the setup). The plot area is white,
    so the chart reads on light and dark pages."""
    width, height = 700, 440
    left, right, top, bottom = 64, 150, 58 if subtitle else 42, 58
    plot_w, plot_h = width - left - right, height - top - bottom
    high = max([allowance, *(x for points in series.values() for x, _ in points)])
    xticks = _ticks(high)
    x_max = xticks[-1] if xticks[-1] > 0 else 1.0

    def px(x: float) -> float:
        return left + plot_w * x / x_max

    def py(y: float) -> float:
        return top + plot_h * (1.0 - y)

    def label(x: float) -> str:
        return f"{x:.3f}".rstrip("0").rstrip(".") if x else "0"

    font = 'font-family="Helvetica, Arial, sans-serif"'
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="title">',
        f'<title id="title">Share of sessions the gate failed against the true {metric} '
        "drop, one line per golden-set size</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<g {font} font-size="13" fill="#222222">',
        f'<text x="{left}" y="24" font-size="15" font-weight="bold">How often the default '
        "gate fails a session</text>",
    ]
    if subtitle:
        out.append(
            f'<text x="{left}" y="42" font-size="12" fill="#555555">{escape(subtitle)}</text>'
        )
    for value in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):  # y grid and labels
        y = py(value)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
            'stroke="#e3e3e3" stroke-width="1"/>'
        )
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{value:.0%}</text>')
    for tick in xticks:  # x grid and labels
        x = px(tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" '
            'stroke="#e3e3e3" stroke-width="1"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 18}" text-anchor="middle">{label(tick)}</text>'
        )
    out += [
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#888888" stroke-width="1"/>',
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 14}" text-anchor="middle">'
        f"true drop in mean {metric}</text>",
        f'<text transform="translate(18 {top + plot_h / 2:.1f}) rotate(-90)" '
        'text-anchor="middle">sessions failed</text>',
    ]
    x = px(allowance)  # the allowance: a dashed vertical line
    out += [
        f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#444444" '
        'stroke-width="1.5" stroke-dasharray="6 4"/>',
        f'<text x="{x + 5:.1f}" y="{top + plot_h - 8}" font-size="12" fill="#444444">'
        f"allowance {label(allowance)}</text>",
    ]
    y = py(power)  # 80%: a dotted horizontal line
    out += [
        f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#444444" '
        'stroke-width="1.5" stroke-dasharray="1.5 3.5" stroke-linecap="round"/>',
        f'<text x="{left + plot_w - 4}" y="{y - 6:.1f}" text-anchor="end" font-size="12" '
        f'fill="#444444">{power:.0%}</text>',
    ]
    for i, (size, points) in enumerate(sorted(series.items())):  # one line per size, small first
        colour, shape = COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)]
        ordered = sorted(points)
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in ordered)
        out.append(
            f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2.2" '
            f'stroke-linejoin="round"><title>{size:,} queries</title></polyline>'
        )
        out += [_marker(shape, px(x), py(y), colour) for x, y in ordered]
        ly = top + 12 + 24 * i  # legend, right of the plot
        lx = left + plot_w + 16
        out += [
            f'<line x1="{lx}" y1="{ly}" x2="{lx + 26}" y2="{ly}" stroke="{colour}" '
            'stroke-width="2.2"/>',
            _marker(shape, lx + 13, ly, colour),
            f'<text x="{lx + 34}" y="{ly + 4}">{size:,} queries</text>',
        ]
    out += ["</g>", "</svg>", ""]
    return "\n".join(out)


def chart_series(rows: Sequence[Row], metric: str) -> dict[int, list[tuple[float, float]]]:
    """Per size, the gate's (mean true ``metric`` drop made, share of sessions failed)."""
    return {
        row.size: [(float(np.mean(cell.drops[metric])), cell.rate) for cell in row.gate]
        for row in rows
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=list(SIZES), help="golden-set sizes"
    )
    parser.add_argument(
        "--trials", type=int, default=TRIALS, help=f"trials per size up to {LARGE:,} ({TRIALS})"
    )
    parser.add_argument(
        "--large-trials",
        type=int,
        default=LARGE_TRIALS,
        help=f"trials per size above {LARGE:,} ({LARGE_TRIALS})",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="processes (all CPUs)"
    )
    parser.add_argument(
        "--drops",
        type=float,
        nargs="+",
        default=list(DROPS),
        help="true recall@k drops to measure (0 0.005 0.01 0.02 0.05: 0 to 5x the allowance)",
    )
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    parser.add_argument(
        "--svg", type=Path, metavar="PATH", help="also draw the failure rates as an SVG chart"
    )
    args = parser.parse_args(argv)
    if min(args.sizes) < 1 or min(args.trials, args.large_trials, args.jobs) < 1:
        parser.error("--sizes, --trials, --large-trials and --jobs must be at least 1")
    if min(args.drops) < 0 or max(args.drops) >= 1:
        parser.error("--drops must be at least 0 and below 1")
    drops = sorted(set(args.drops))
    start = time.perf_counter()
    population = Population.load(load_regression())
    setup = time.perf_counter() - start
    problems = []
    mismatch = check_scoring(population, args.seed)
    if mismatch is not None:
        problems.append(mismatch)
    trials = {size: args.trials if size <= LARGE else args.large_trials for size in args.sizes}
    rows = run_all(population, trials, args.seed, args.jobs, drops)
    recall = population.gated[0]
    print(
        f"P(session fails) vs the true {recall} drop. BM25 on {len(population.ids)} Cranfield "
        f"queries drawn with replacement, noisy baseline vs noisy current; allowance "
        f"{DEFAULT_MAX_DROP:g}, alpha {population.alpha}, Holm over "
        f"{', '.join(population.gated)}; 95% Wilson intervals. gate 80% at: where the failure "
        f"rate crosses 80% (linear between the drops measured). detectable_drop: the "
        f"plugin's 80%-power {recall} drop at n. test 80% at: where the {recall} test alone "
        f"(raw p < alpha / {len(population.gated)}, allowance ignored) measurably crosses 80%.",
        "",
        table(rows, recall, markdown=False),
        "",
        details(rows, population.gated, population.alpha),
        sep="\n",
    )
    if args.markdown:
        print("", table(rows, recall, markdown=True), sep="\n")
    if args.svg is not None:
        args.svg.write_text(
            operating_svg(
                chart_series(rows, recall),
                DEFAULT_MAX_DROP,
                recall,
                subtitle=f"BM25 on resampled Cranfield · allowance {DEFAULT_MAX_DROP:g} · alpha "
                f"{population.alpha:g} · "
                + (
                    f"{min(trials.values())} trials a point"
                    if len(set(trials.values())) == 1
                    else ", ".join(f"{count} trials at {size:,}" for size, count in trials.items())
                ),
            ),
            encoding="utf-8",
        )
        print(f"\nchart: {args.svg}")
    for row in rows:
        alarms = false_alarms(row)
        if alarms is not None and alarms.rate > MAX_FALSE_ALARMS * population.alpha:
            problems.append(
                f"n={row.size:,}: false alarms {alarms.rate:.1%} > {MAX_FALSE_ALARMS:g} x alpha"
            )
    cpu = sum(row.cpu_seconds for row in rows)
    print(
        f"\ntime: {time.perf_counter() - start:.1f} s wall, {args.jobs} process(es); trials "
        f"{cpu:.0f} CPU s; BM25 index + retrieval {setup:.1f} s"
    )
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
