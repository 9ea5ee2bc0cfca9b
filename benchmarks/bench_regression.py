"""Benchmark: does the baseline gate cry wolf, and does it catch a real drop? BM25 on Cranfield.

What it measures
    BM25 (the repository-root ``conftest.py`` retriever) answers the 225 Cranfield queries of
    ``example_golden/cranfield.json`` once, top 100 each; the ranked ids are cached and every
    run below is a transformed copy of those lists, scored by ``evaluate`` through a replay
    retriever (BM25 is never re-run per seed). The baseline is ``entry_from_result`` of the
    unperturbed run; each run is judged by ``compare_to_baseline(run, baseline, {})`` -- the
    default allowance (0.01 absolute drop per metric), alpha 0.05, Holm over the gated metrics
    (recall@10, mrr@10, ndcg@10 by default), exactly what the plugin gates. For each of
    ``--seeds`` (50) seeds:

    A. null, identical quality: per query, adjacent pairs of NON-relevant hits (grade <= 0 or
       unjudged) are swapped at random through the top 100. Every quality metric is unchanged
       (judged@k may move: a judged non-relevant doc can swap with an unjudged one across rank
       k), so any regression is a false alarm.
    B. harder null, noisy baseline: per query, with probability 0.5, one random adjacent pair
       in the top 20 is swapped (relevant or not). The baseline is re-recorded from another
       run perturbed the same way with a different seed, so baseline and run are independent
       noisy copies of BM25 with the same expected quality; a regression is a false alarm.
    C. detection: a true drop of ``--drop`` (0.03) in recall@10. Queries are picked at random
       (among those with a relevant doc in their top 10) and one relevant doc leaves the top
       10 per step: the docs below it in the top 10 shift up one, the first non-relevant doc
       below rank 10 fills rank 10, and the relevant doc takes that doc's old rank (so
       recall@100 is unchanged). Steps stop as soon as the mean recall@10 is >= ``--drop`` below the
       baseline's. Detected when recall@10 is in ``Comparison.regressed``.

    Also printed: ``compare.power_table`` for recall@10 (the drop the paired test finds
    with 80% power at this n and alpha, Bonferroni over the metrics) in one comparison of B
    and one of C, the largest recall@10 drop seen under B, and timings.

Targets
    A: 0 false alarms in 50 seeds.   B: false-alarm rate <= 5%.   C: detection >= 90%.
    The whole script (BM25 index + retrieval included) in under ~3 minutes on 2 cores.

How to run (from the repository root, venv active, ``pip install -e ".[example]"`` for
``bm25s`` and ``PyStemmer``)::

    python benchmarks/bench_regression.py
    python benchmarks/bench_regression.py --seeds 200 --drop 0.02

Exit status 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pytest_retrieval import EvaluationResult, GoldenSet
    from pytest_retrieval.baseline import BaselineEntry
    from pytest_retrieval.compare import Comparison, MetricChange

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "example_golden" / "cranfield.json"
CORPUS = ROOT / "example_golden" / "cranfield" / "corpus.jsonl"
DEPTH = 100
GATED = "recall@10"
ALPHA = 0.05
SWAP_PROBABILITY = 0.5  # A: chance to swap each eligible non-relevant pair; B: chance per query
TOP_SWAP = 20  # B: the swapped pair lies within the top 20
TARGET_A = 0  # false alarms allowed in A (any number of seeds)
TARGET_B = 0.05  # false-alarm rate allowed in B
TARGET_C = 0.90  # detection rate required in C
TARGET_SECONDS = 180.0

Run = dict[str, list[str]]  # query id -> ranked doc ids


def _bm25() -> Callable[[str, int], list[dict[str, object]]]:
    spec = importlib.util.spec_from_file_location(
        "_bench_regression_conftest", ROOT / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    search: Callable[[str, int], list[dict[str, object]]] = module.build_bm25_search(CORPUS)
    return search


@dataclass
class Bench:
    """The golden set, the cached BM25 run, and a replay retriever over any transformed run."""

    golden: GoldenSet
    bm25: Run
    relevant: dict[str, set[str]]  # query id -> ids with grade >= 1
    by_text: dict[str, str]  # query text -> query id
    evaluations: int = 0
    eval_seconds: float = 0.0
    compare_seconds: list[float] = field(default_factory=list)

    @classmethod
    def load(cls) -> Bench:
        from pytest_retrieval import load_golden

        golden = load_golden(GOLDEN)
        search = _bm25()
        bm25 = {q.id: [str(hit["id"]) for hit in search(q.query, DEPTH)] for q in golden.queries}
        by_text = {q.query: q.id for q in golden.queries}
        if len(by_text) != len(golden.queries):
            raise SystemExit("golden query texts are not unique: the replay cannot tell them apart")
        relevant = {q.id: {d for d, g in q.relevant.items() if g > 0} for q in golden.queries}
        return cls(golden, bm25, relevant, by_text)

    def evaluate(self, run: Run) -> EvaluationResult:
        from pytest_retrieval import evaluate

        def replay(query: str, k: int) -> list[str]:
            return run[self.by_text[query]][:k]

        start = time.perf_counter()
        result = evaluate(replay, self.golden, concurrency=1, retriever_id="bm25")
        self.eval_seconds += time.perf_counter() - start
        self.evaluations += 1
        return result

    def compare(self, result: EvaluationResult, entry: BaselineEntry) -> Comparison:
        from pytest_retrieval.compare import compare_to_baseline

        start = time.perf_counter()
        comparison = compare_to_baseline(result, entry, {}, alpha=ALPHA)
        self.compare_seconds.append(time.perf_counter() - start)
        return comparison

    def recall(self, run: Run, k: int = 10) -> float:
        """Mean recall@k of ``run`` (relevant in the top k / all relevant), as the plugin's."""
        return float(
            np.mean(
                [
                    len(self.relevant[q].intersection(run[q][:k])) / len(self.relevant[q])
                    for q in self.bm25
                ]
            )
        )


# --- run transformations (pure: each returns a new run) -----------------------------------


def swap_nonrelevant(bench: Bench, run: Run, rng: np.random.Generator) -> tuple[Run, int]:
    """A: swap random adjacent pairs of non-relevant hits, anywhere in the list."""
    out: Run = {}
    swaps = 0
    for qid, ranked in run.items():
        ranked = list(ranked)
        relevant = bench.relevant[qid]
        i = 0
        while i < len(ranked) - 1:
            pair_nonrelevant = ranked[i] not in relevant and ranked[i + 1] not in relevant
            if pair_nonrelevant and rng.random() < SWAP_PROBABILITY:
                ranked[i], ranked[i + 1] = ranked[i + 1], ranked[i]
                swaps += 1
                i += 2
            else:
                i += 1
        out[qid] = ranked
    return out, swaps


def swap_top(run: Run, rng: np.random.Generator) -> tuple[Run, int]:
    """B: per query, with probability 0.5, swap one random adjacent pair in the top 20."""
    out: Run = {}
    swaps = 0
    for qid, ranked in run.items():
        ranked = list(ranked)
        pairs = min(TOP_SWAP, len(ranked)) - 1
        if pairs > 0 and rng.random() < SWAP_PROBABILITY:
            i = int(rng.integers(pairs))
            ranked[i], ranked[i + 1] = ranked[i + 1], ranked[i]
            swaps += 1
        out[qid] = ranked
    return out, swaps


def inject_drop(
    bench: Bench, run: Run, drop: float, rng: np.random.Generator, k: int = 10
) -> tuple[Run, int]:
    """C: push relevant docs out of random queries' top k until mean recall@k is ``drop`` lower.

    One step: a random query with a relevant doc in its top k (and a non-relevant doc below);
    a random such relevant doc leaves the top k, the docs below it in the top k shift up one,
    the first non-relevant doc below rank k fills rank k, and the relevant doc takes that
    doc's old rank (so recall@100 and everything below rank k stay put).
    """
    out = {qid: list(ranked) for qid, ranked in run.items()}
    n = len(out)
    per_query = {
        q: len(bench.relevant[q].intersection(out[q][:k])) / len(bench.relevant[q]) for q in out
    }
    target = sum(per_query.values()) - drop * n * (1 - 1e-12)
    steps = 0
    while sum(per_query.values()) > target:
        eligible = [
            q
            for q in out
            if any(d in bench.relevant[q] for d in out[q][:k])
            and any(d not in bench.relevant[q] for d in out[q][k:])
        ]
        if not eligible:
            raise RuntimeError(f"cannot remove {drop} of recall@{k}: no relevant doc left to move")
        qid = eligible[int(rng.integers(len(eligible)))]
        ranked, relevant = out[qid], bench.relevant[qid]
        ranks = [r for r in range(k) if ranked[r] in relevant]
        r = ranks[int(rng.integers(len(ranks)))]
        j = next(j for j in range(k, len(ranked)) if ranked[j] not in relevant)
        moved, filler = ranked[r], ranked[j]
        top = [d for d in ranked[:k] if d != moved] + [filler]  # ranks below r shift up one
        tail = [moved if d == filler else d for d in ranked[k:]]  # moved takes filler's rank
        out[qid] = ranked = top + tail
        per_query[qid] = len(relevant.intersection(ranked[:k])) / len(relevant)
        steps += 1
    return out, steps


# --- the simulation ---------------------------------------------------------------------


@dataclass
class Outcome:
    seeds: int
    drop: float
    baseline_recall: float
    alarms_a: list[int] = field(default_factory=list)  # seeds with a false alarm
    alarms_b: list[int] = field(default_factory=list)
    detected: list[int] = field(default_factory=list)
    swaps_a: int = 0
    swaps_b: int = 0
    steps_c: list[int] = field(default_factory=list)
    max_change_a: float = 0.0  # largest |delta| of any metric under A (should be exactly 0)
    worst_b: float = 0.0  # largest recall@10 drop (baseline - run) seen under B
    raw_b: int = 0  # seeds of B with some raw (unadjusted) one-sided p < alpha
    over_allowance_b: int = 0  # seeds of B with some drop beyond the allowance
    drops_c: list[float] = field(default_factory=list)  # realised recall@10 drop under C
    p_c: list[float] = field(default_factory=list)  # recall@10 Holm-adjusted p under C
    detectable_single: float | None = None  # compare.power_table of the baseline run alone
    detectable_b: float | None = None
    detectable_c: float | None = None
    regressed_c: dict[str, int] = field(default_factory=dict)  # metric -> seeds regressed

    def passed(self) -> dict[str, bool]:
        return {
            "A": len(self.alarms_a) <= TARGET_A,
            "B": len(self.alarms_b) / self.seeds <= TARGET_B,
            "C": len(self.detected) / self.seeds >= TARGET_C,
        }


def _change(comparison: Comparison, metric: str) -> MetricChange:
    return next(c for c in comparison.changes if c.metric == metric)


def simulate(bench: Bench, seeds: int = 50, drop: float = 0.03, first_seed: int = 0) -> Outcome:
    """Run A, B and C for ``seeds`` seeds; return the counts (no printing)."""
    from pytest_retrieval.compare import entry_from_result, power_table

    git = {"commit": "bench"}
    base_result = bench.evaluate(bench.bm25)
    baseline = entry_from_result(base_result, git, "bench")
    base_recall = base_result.metrics[GATED]
    if abs(bench.recall(bench.bm25) - base_recall) > 1e-9:
        raise RuntimeError("this script's recall@10 disagrees with the plugin's")
    outcome = Outcome(seeds, drop, base_recall)
    outcome.detectable_single = power_table(base_result, None, {}, ALPHA)[GATED][0]
    for seed in range(first_seed, first_seed + seeds):
        # A: identical quality
        run, swaps = swap_nonrelevant(bench, bench.bm25, np.random.default_rng([seed, 1]))
        outcome.swaps_a += swaps
        comparison = bench.compare(bench.evaluate(run), baseline)
        outcome.max_change_a = max(
            [
                outcome.max_change_a,
                *(abs(c.delta) for c in comparison.changes if not c.metric.startswith("judged@")),
            ]
        )
        if comparison.regressed:
            outcome.alarms_a.append(seed)

        # B: two independent noisy copies of BM25
        noisy_base, swaps_base = swap_top(bench.bm25, np.random.default_rng([seed, 2]))
        noisy_run, swaps_run = swap_top(bench.bm25, np.random.default_rng([seed, 3]))
        outcome.swaps_b += swaps_base + swaps_run
        entry_b = entry_from_result(bench.evaluate(noisy_base), git, "bench")
        comparison = bench.compare(bench.evaluate(noisy_run), entry_b)
        outcome.worst_b = max(outcome.worst_b, -_change(comparison, GATED).delta)
        if any(c.p_value is not None and c.p_value < ALPHA for c in comparison.changes):
            outcome.raw_b += 1
        if any(-c.delta > c.allowed for c in comparison.changes):
            outcome.over_allowance_b += 1
        if outcome.detectable_b is None:
            compared = replace(bench.evaluate(noisy_run), comparison=comparison)
            outcome.detectable_b = power_table(compared, entry_b, {}, ALPHA)[GATED][0]
        if comparison.regressed:
            outcome.alarms_b.append(seed)

        # C: a true drop in recall@10
        run, steps = inject_drop(bench, bench.bm25, drop, np.random.default_rng([seed, 4]))
        outcome.steps_c.append(steps)
        result = bench.evaluate(run)
        comparison = bench.compare(result, baseline)
        change = _change(comparison, GATED)
        outcome.drops_c.append(-change.delta)
        outcome.p_c.append(change.p_adjusted if change.p_adjusted is not None else float("nan"))
        if outcome.detectable_c is None:
            compared = replace(result, comparison=comparison)
            outcome.detectable_c = power_table(compared, baseline, {}, ALPHA)[GATED][0]
        for regressed in comparison.regressed:
            outcome.regressed_c[regressed.metric] = outcome.regressed_c.get(regressed.metric, 0) + 1
        if any(c.metric == GATED for c in comparison.regressed):
            outcome.detected.append(seed)
    return outcome


def report(outcome: Outcome, bench: Bench, setup_s: float, total_s: float) -> str:
    n = outcome.seeds
    verdict = {name: "PASS" if ok else "FAIL" for name, ok in outcome.passed().items()}
    queries = len(bench.golden.queries)
    lines = [
        f"Cranfield, {queries} queries, BM25 top {DEPTH}; baseline {GATED} = "
        f"{outcome.baseline_recall:.4f}; default allowance 0.01, alpha {ALPHA}, Holm over "
        f"the gated metrics (recall, mrr, ndcg at k); {n} seeds",
        "",
        f"{'scenario':<46} {'seeds':>7} {'rate':>6}  {'target':>6}  result",
        f"{'A  false alarms, non-relevant swaps':<46} "
        f"{len(outcome.alarms_a):>3}/{n:<3} {len(outcome.alarms_a) / n:>6.1%}  "
        f"{'0':>6}  {verdict['A']}",
        f"{'B  false alarms, noisy run vs noisy baseline':<46} "
        f"{len(outcome.alarms_b):>3}/{n:<3} {len(outcome.alarms_b) / n:>6.1%}  "
        f"{'<= 5%':>6}  {verdict['B']}",
        f"{f'C  detection, {GATED} drop >= {outcome.drop:g}':<46} "
        f"{len(outcome.detected):>3}/{n:<3} {len(outcome.detected) / n:>6.1%}  "
        f"{'>= 90%':>6}  {verdict['C']}",
        "",
        f"A: {outcome.swaps_a / n / queries:.1f} swaps per query; largest |delta| of any metric "
        f"{outcome.max_change_a:.2g}",
        f"B: {outcome.swaps_b / n / 2 / queries:.2f} swaps per query per run; largest {GATED} "
        f"drop {outcome.worst_b:.4f}; seeds with a drop > allowance "
        f"{outcome.over_allowance_b}/{n}, with a raw p < {ALPHA} {outcome.raw_b}/{n}",
        f"C: {np.mean(outcome.steps_c):.1f} relevant docs moved out per seed; realised drop "
        f"{min(outcome.drops_c):.4f}..{max(outcome.drops_c):.4f}; Holm p of {GATED} "
        f"max {np.nanmax(outcome.p_c):.2g}; regressed per metric: "
        + ", ".join(f"{m} {c}" for m, c in sorted(outcome.regressed_c.items())),
        f"detectable {GATED} drop (80% power, compare.power_table): "
        f"{outcome.detectable_b:.4f} in B seed 0, {outcome.detectable_c:.4f} in C seed 0; "
        f"{outcome.detectable_single:.4f} estimated from the baseline run alone "
        "(compare.power_table without a baseline)",
    ]
    compares = bench.compare_seconds
    lines += [
        "",
        f"time: total {total_s:.1f} s (target < {TARGET_SECONDS:.0f} s): BM25 index + top-{DEPTH} "
        f"retrieval {setup_s:.1f} s, {bench.evaluations} evaluations "
        f"{bench.eval_seconds:.1f} s ({bench.eval_seconds / bench.evaluations * 1000:.0f} ms "
        f"each), {len(compares)} comparisons {sum(compares):.1f} s "
        f"({np.mean(compares) * 1000:.0f} ms each, max {max(compares) * 1000:.0f} ms)",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=50, help="seeds per scenario (50)")
    parser.add_argument("--drop", type=float, default=0.03, help="recall@10 drop for C (0.03)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (0)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    bench = Bench.load()
    setup_s = time.perf_counter() - start
    outcome = simulate(bench, args.seeds, args.drop, args.first_seed)
    total_s = time.perf_counter() - start
    print(report(outcome, bench, setup_s, total_s))
    ok = all(outcome.passed().values()) and total_s < TARGET_SECONDS
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
