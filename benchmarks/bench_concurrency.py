"""Benchmark: retriever calls in flight at once -- ``evaluate`` over a 20 ms retriever.

What it measures
    A synthetic golden set of ``--queries`` (1,000) queries is written to a temp dir. Every
    retriever below sleeps ``--latency`` (20 ms) per call, then returns the query's own
    relevant id first plus a few fillers, so every query scores recall@10 = 1 and the ids that
    come back tell which query they answer. Wall time of ``evaluate(...)`` for:

    A. a sync retriever (``time.sleep``), 1,000 queries, default concurrency (8);
    B. the same retriever, concurrency 1, on the first ``--sequential-queries`` (100) queries,
       extrapolated linearly to 1,000 (about 1,000 x 20 ms = 20 s; not run in full to save
       time);
    C. an ``async def`` retriever (``await asyncio.sleep``), 1,000 queries, default
       concurrency.

    Each line shows the ideal time (queries x latency / concurrency), the overhead above it,
    the latency p50 the evaluation measured, and an order check: result i must be golden
    query i (same id, and the first returned id is that query's own relevant doc).

Target
    A <= 3 s for 1,000 sync queries at the default concurrency (ideal 2.5 s).

How to run (from the repository root, venv active)::

    python benchmarks/bench_concurrency.py
    python benchmarks/bench_concurrency.py --queries 2000 --latency 0.01

Exit status 0 when the target is met and every order check passes, 1 otherwise. The temp
dir is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_retrieval import EvaluationResult, GoldenSet

TARGET_S = 3.0
DEFAULT_CONCURRENCY = 8


def own_doc(query: str) -> str:
    """The relevant id of a query "query 123 about ..." (its number is the 2nd word)."""
    return f"doc{query.split()[1]}"


def write_golden(path: Path, n_queries: int) -> None:
    entries: list[dict[str, Any]] = [
        {"id": f"q{i}", "query": f"query {i} about topic", "relevant": [f"doc{i}"]}
        for i in range(n_queries)
    ]
    path.write_text(json.dumps({"name": "concurrency", "k": 10, "queries": entries}), "utf-8")


def order_check(result: EvaluationResult, golden: GoldenSet) -> str:
    """'ok' when result i answers golden query i, else what went wrong first."""
    if len(result.queries) != len(golden.queries):
        return f"FAIL: {len(result.queries)} results for {len(golden.queries)} queries"
    for i, (got, want) in enumerate(zip(result.queries, golden.queries, strict=True)):
        if got.error is not None:
            return f"FAIL: query {want.id} errored: {got.error}"
        if got.id != want.id or not got.returned or got.returned[0] != own_doc(want.query):
            first = got.returned[0] if got.returned else None
            return f"FAIL at {i}: result {got.id} returned {first}, expected {want.id}"
    return "ok"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--sequential-queries", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds per call")
    args = parser.parse_args(argv)
    latency: float = args.latency

    from pytest_retrieval import evaluate, load_golden

    def sync_search(query: str, k: int) -> list[str]:
        time.sleep(latency)
        return [own_doc(query), "filler-a", "filler-b"][:k]

    async def async_search(query: str, k: int) -> list[str]:
        await asyncio.sleep(latency)
        return [own_doc(query), "filler-a", "filler-b"][:k]

    rows: list[tuple[str, int, int, float, float, float, float, str]] = []
    checks_ok = True
    with tempfile.TemporaryDirectory(prefix="bench_concurrency_") as tmp:
        folder = Path(tmp)
        write_golden(folder / "golden.json", args.queries)
        write_golden(folder / "golden_seq.json", args.sequential_queries)
        full = load_golden(folder / "golden.json")
        small = load_golden(folder / "golden_seq.json")
        evaluate(sync_search, small, concurrency=DEFAULT_CONCURRENCY)  # warm-up: lazy imports

        cases: list[tuple[str, Any, GoldenSet, int]] = [
            ("sync time.sleep", sync_search, full, DEFAULT_CONCURRENCY),
            ("sync time.sleep", sync_search, small, 1),
            ("async asyncio.sleep", async_search, full, DEFAULT_CONCURRENCY),
        ]
        for name, search, golden, concurrency in cases:
            started = time.perf_counter()
            result = evaluate(search, golden, concurrency=concurrency)
            seconds = time.perf_counter() - started
            ideal = len(golden) * latency / concurrency
            started = time.perf_counter()
            result.with_metrics([])  # re-scores the stored rankings: the non-retrieval part
            scoring = time.perf_counter() - started
            check = order_check(result, golden)
            if result.metrics["recall@10"] != 1.0 and check == "ok":
                check = f"FAIL: recall@10 {result.metrics['recall@10']:.4f}, expected 1"
            checks_ok = checks_ok and check == "ok"
            rows.append(
                (
                    name,
                    len(golden),
                    concurrency,
                    seconds,
                    ideal,
                    scoring,
                    result.latency_p50_ms,
                    check,
                )
            )

    header = ("retriever", "queries", "conc", "wall s", "ideal s", "overhead", "scoring", "p50 ms")
    print("{:<22}{:>8}{:>6}{:>9}{:>9}{:>10}{:>9}{:>8}  order".format(*header))
    for name, n, conc, seconds, ideal, scoring, p50, check in rows:
        print(
            f"{name:<22}{n:>8,}{conc:>6}{seconds:>9.2f}{ideal:>9.2f}"
            f"{seconds - ideal:>+10.2f}{scoring:>9.2f}{p50:>8.1f}  {check}"
        )
    print(
        "ideal = queries x latency / concurrency; overhead = wall - ideal; scoring = the same "
        "metrics re-computed from the stored rankings (part of the overhead)"
    )
    _, n_seq, _, seq_s, _, _, _, _ = rows[1]
    per_call_ms = seq_s / n_seq * 1000
    sequential_s = seq_s / n_seq * args.queries
    print(
        f"sequential extrapolated to {args.queries:,} queries: {sequential_s:.1f} s "
        f"({per_call_ms:.1f} ms per call x {args.queries:,}; measured on {n_seq}, not run in full)"
    )
    sync_s = rows[0][3]
    print(f"speed-up at concurrency {DEFAULT_CONCURRENCY}: x{sequential_s / sync_s:.1f}")
    passed = sync_s <= TARGET_S and checks_ok
    print(
        f"{'PASS' if passed else 'FAIL'}: {args.queries:,} sync queries at concurrency "
        f"{DEFAULT_CONCURRENCY} in {sync_s:.2f} s (target <= {TARGET_S:g} s)"
        + ("" if checks_ok else "; an order check failed")
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
