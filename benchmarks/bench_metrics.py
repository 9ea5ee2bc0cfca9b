"""Benchmark: pytest-retrieval's metric kernels against pytrec_eval on the same data.

Run from the repository root (with the dev extra installed, for pytrec_eval)::

    python benchmarks/bench_metrics.py                  # 100,000 queries x 100 hits
    python benchmarks/bench_metrics.py --queries 20000 --hits 50 --repeat 5

It builds one seeded synthetic data set -- ``--queries`` ranked lists of ``--hits`` distinct
doc ids drawn from a vocabulary of a few thousand ids, and ~20 graded judgments per query
(grades 0-3, at least one relevant, about half of them retrieved) -- and times on it, in one
process:

A. ours: all 7 metric families at k in {1, 5, 10, 100}, split into building the grade matrix
   from the Python strings (``grade_matrix``) and the kernels on the matrix
   (``compute_from_matrix``); best of ``--repeat``.
B. pytrec_eval computing the same 28 numbers: one evaluator for P / recall / success /
   ndcg_cut / map_cut, ``recip_rank`` on the run truncated at each k (trec_eval has no MRR@k),
   and a second ``ndcg_cut`` evaluator on qrels with grades mapped to 2**g - 1 (ndcg_exp).
   Building its input dicts is timed apart from the evaluation (evaluator construction plus
   ``evaluate``); best of ``--trec-repeat``.

Both results are then compared query by query on a seeded sample of ``--verify`` queries
(to 1e-9) so the timings cannot silently be of different computations.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from pytest_retrieval.metrics import Metric, compute_from_matrix, grade_matrix

T = TypeVar("T")
KS = (1, 5, 10, 100)
FAMILIES = ("recall", "precision", "hit_rate", "mrr", "ndcg", "ndcg_exp", "map")
#: our family -> trec_eval measure (mrr and ndcg_exp are handled separately)
TREC_MEASURE = {
    "recall": "recall",
    "precision": "P",
    "hit_rate": "success",
    "ndcg": "ndcg_cut",
    "map": "map_cut",
}


def synthetic(
    n_queries: int, hits: int, vocab: int, judged: int, seed: int, fresh_ids: bool = False
) -> tuple[list[list[str]], list[dict[str, int]]]:
    """Seeded ranked lists (distinct ids) and graded judgments, as plain Python objects.

    ``vocab`` must be prime: the ids of query i are ``(offset + step * slot) % vocab``, which
    are distinct for distinct slots. The run holds slots 0..hits-1 in order; the judged docs
    are ``judged`` random slots out of 0..2*hits-1, so about half of them are retrieved, at
    random ranks.

    As in real use, the judgments' id strings are other objects than the retriever's (equal,
    not identical: lookups compare characters). The retriever's ids are shared between queries
    (ids taken from one corpus list) unless ``fresh_ids``: then every id in every list is its
    own string object, as when each response is decoded from JSON.
    """
    rng = np.random.default_rng(seed)
    corpus_ids = np.array([f"doc-{i:05d}" for i in range(vocab)], dtype=object)
    golden_ids = np.array([f"doc-{i:05d}" for i in range(vocab)], dtype=object)
    offset = rng.integers(0, vocab, size=(n_queries, 1))
    step = rng.integers(1, vocab, size=(n_queries, 1))
    run_idx = (offset + step * np.arange(hits)) % vocab
    slots = np.argpartition(rng.random((n_queries, 2 * hits)), judged, axis=1)[:, :judged]
    judged_idx = (offset + step * slots) % vocab
    grades = rng.choice(4, p=[0.5, 0.25, 0.15, 0.1], size=(n_queries, judged))
    grades[:, 0] = np.maximum(grades[:, 0], 1)  # every query has a relevant doc
    runs: list[list[str]] = corpus_ids[run_idx].tolist()
    if fresh_ids:
        runs = json.loads(json.dumps(runs))
    doc_rows = golden_ids[judged_idx].tolist()
    qrels = [dict(zip(d, g, strict=True)) for d, g in zip(doc_rows, grades.tolist(), strict=True)]
    return runs, qrels


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[float, T]:
    """Best wall time over ``repeat`` calls, and the last result."""
    best = float("inf")
    result: T
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def ours(
    runs: Sequence[Sequence[str]], qrels: Sequence[dict[str, int]], repeat: int
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    metrics = [Metric(f, k) for f in FAMILIES for k in KS]
    depth = max(KS)
    build, totals, kernels = [], [], []
    values: dict[str, np.ndarray] = {}
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        matrix = grade_matrix(runs, qrels, depth)
        t1 = time.perf_counter()
        values = compute_from_matrix(matrix, metrics)
        t2 = time.perf_counter()
        build.append(t1 - t0)
        kernels.append(t2 - t1)
        totals.append(t2 - t0)
        del matrix
    times = {"build": min(build), "kernels": min(kernels), "total": min(totals)}
    return times, values


def trec(
    runs: Sequence[Sequence[str]], qrels: Sequence[dict[str, int]], repeat: int
) -> tuple[dict[str, float], dict[str, dict[str, dict[str, float]]]]:
    import pytrec_eval

    cuts = ",".join(map(str, KS))
    measures = {f"{m}.{cuts}" for m in TREC_MEASURE.values()}

    def build() -> tuple[Any, ...]:
        qids = [f"q{i}" for i in range(len(runs))]
        trec_qrels = dict(zip(qids, qrels, strict=True))
        exp_qrels = {q: {d: 2**g - 1 for d, g in j.items()} for q, j in trec_qrels.items()}
        scores = [float(s) for s in range(max(map(len, runs), default=0), 0, -1)]
        full = {q: dict(zip(run, scores, strict=False)) for q, run in zip(qids, runs, strict=True)}
        cut = {
            k: {
                q: dict(zip(run[:k], scores, strict=False))
                for q, run in zip(qids, runs, strict=True)
            }
            for k in KS
        }
        return trec_qrels, exp_qrels, full, cut

    def evaluate(data: tuple[Any, ...]) -> dict[str, dict[str, dict[str, float]]]:
        trec_qrels, exp_qrels, full, cut = data
        out = {"linear": pytrec_eval.RelevanceEvaluator(trec_qrels, measures).evaluate(full)}
        exp = pytrec_eval.RelevanceEvaluator(exp_qrels, {f"ndcg_cut.{cuts}"})
        out["exp"] = exp.evaluate(full)
        rr = pytrec_eval.RelevanceEvaluator(trec_qrels, {"recip_rank"})
        for k in KS:
            out[f"rr{k}"] = rr.evaluate(cut[k])
        return out

    build_time, data = best_of(repeat, build)
    eval_time, results = best_of(repeat, lambda: evaluate(data))
    return {"build": build_time, "eval": eval_time, "total": build_time + eval_time}, results


def verify(
    values: dict[str, np.ndarray], results: dict[str, dict[str, dict[str, float]]], sample: int
) -> int:
    """Compare ours and pytrec_eval on ``sample`` random queries; return the number compared."""
    n = len(next(iter(values.values())))
    rng = np.random.default_rng(1)
    picked = rng.choice(n, size=min(sample, n), replace=False)
    worst = 0.0
    for family in FAMILIES:
        for k in KS:
            name = f"{family}@{k}"
            if family == "mrr":
                table, measure = results[f"rr{k}"], "recip_rank"
            elif family == "ndcg_exp":
                table, measure = results["exp"], f"ndcg_cut_{k}"
            else:
                table, measure = results["linear"], f"{TREC_MEASURE[family]}_{k}"
            want = np.array([table[f"q{i}"][measure] for i in picked])
            gap = float(np.abs(values[name][picked] - want).max())
            worst = max(worst, gap)
            if gap > 1e-9:
                sys.exit(f"MISMATCH {name} vs trec_eval {measure}: max abs difference {gap:.3g}")
    print(
        f"verified: {len(picked)} queries x {len(values)} metrics agree with pytrec_eval "
        f"(max abs difference {worst:.1e})"
    )
    return len(picked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--hits", type=int, default=100)
    parser.add_argument("--judged", type=int, default=20, help="judgments per query")
    parser.add_argument("--vocab", type=int, default=5003, help="doc ids (a prime)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for ours")
    parser.add_argument("--trec-repeat", type=int, default=1, help="best of N for pytrec_eval")
    parser.add_argument("--verify", type=int, default=1000, help="queries to cross-check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-trec", action="store_true", help="time ours only")
    parser.add_argument(
        "--fresh-ids", action="store_true", help="every retrieved id its own str object"
    )
    args = parser.parse_args()
    if args.hits < max(KS):
        parser.error(f"--hits must be >= {max(KS)}")

    t0 = time.perf_counter()
    runs, qrels = synthetic(
        args.queries, args.hits, args.vocab, args.judged, args.seed, args.fresh_ids
    )
    print(
        f"data: {args.queries:,} queries x {args.hits} hits, {args.vocab} doc ids, "
        f"{args.judged} judgments/query{', fresh id objects' if args.fresh_ids else ''} "
        f"(built in {time.perf_counter() - t0:.1f} s); "
        f"{len(FAMILIES) * len(KS)} metrics: {', '.join(FAMILIES)} @ {KS}"
    )

    mine, values = ours(runs, qrels, args.repeat)
    rows = [
        ("ours: grade matrix from strings", mine["build"]),
        ("ours: kernels on the matrix", mine["kernels"]),
        ("ours: total", mine["total"]),
    ]
    if not args.skip_trec:
        theirs, results = trec(runs, qrels, args.trec_repeat)
        rows += [
            ("pytrec_eval: build input dicts", theirs["build"]),
            ("pytrec_eval: evaluate", theirs["eval"]),
            ("pytrec_eval: total", theirs["total"]),
        ]
    width = max(len(label) for label, _ in rows)
    print(f"\n{'step':<{width}}  seconds")
    for label, seconds in rows:
        print(f"{label:<{width}}  {seconds:7.3f}")
    if not args.skip_trec:
        print(f"\npytrec_eval evaluate / ours total:       {theirs['eval'] / mine['total']:6.1f}x")
        print(f"pytrec_eval incl. dicts / ours total:    {theirs['total'] / mine['total']:6.1f}x")
        print(f"pytrec_eval evaluate / ours kernels:     {theirs['eval'] / mine['kernels']:6.1f}x")
        print()
        verify(values, results, args.verify)


if __name__ == "__main__":
    main()
