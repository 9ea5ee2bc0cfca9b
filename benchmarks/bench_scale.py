"""Benchmark: large golden sets through ``pytest --retrieval-golden``, end to end, as ratios
against pytrec_eval's compute alone on the same ranked lists.

What it measures (issue 13), in one run:

A. 100,000 queries x 100 hits (k = 100): wall clock of the whole
   ``python -m pytest --retrieval-golden golden.json`` process (start-up, golden loading and
   validation, 100,000 retriever calls, scoring recall/precision/hit_rate/mrr/ndcg/map at 100
   with bootstrap CIs, per-tag means, the verdict), best of ``--repeat``, divided by
   pytrec_eval's ``evaluate`` alone (recall_100, recip_rank, ndcg_cut_100; its input dicts
   built beforehand and not timed; best of 3) on the same lists. Target: <= 1.0. The pytest
   process runs with its bytecode cached, as on a user's machine.
B. The same at 10 hits (k = 10), reported.
C. 1,000,000 queries x 10 hits: wall clock and the peak RSS of the pytest process (children
   included: ``ru_maxrss``), and the same with ``--retrieval-report``. Targets: RSS <= 3 GB,
   time <= 12x the 100,000 x 10 run, the report adding <= 30 %.

The golden set: graded relevance (1-3), 1-5 relevant ids per query from a 200,000-doc space,
1-2 tags each. The retriever: a ``conftest.py`` fixture over a numpy array of ranked doc
numbers (query i -> row i), returning doc-id strings -- a fast in-memory index, so that what
is timed is the plugin, not the user's search.

How to run (from the repository root, venv active; needs pytrec-eval-terrier)::

    python benchmarks/bench_scale.py             # everything (about 3 minutes)
    python benchmarks/bench_scale.py --quick     # 20,000 / 200,000 queries

Exit status 0 when every target is met, 1 when one is not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

N_DOCS = 200_000
TAGS = ("faq", "howto", "errors", "billing", "api", "login", "export", "privacy")

CONFTEST = '''\
"""Retriever for bench_scale: query i -> row i of ranked doc numbers, as doc-id strings."""

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session")
def retriever():
    here = Path(__file__).parent
    rows = np.load(here / "ranked.npy")
    names = [f"doc{d}" for d in range(int(rows.max()) + 1)]

    def search(query, k):
        row = rows[int(query.split(" ", 2)[1])]
        return list(map(names.__getitem__, row[:k].tolist()))

    return search
'''


def synthetic(n_queries: int, hits: int, seed: int) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Golden entries and each query's ranked doc numbers (relevant ones mixed in)."""
    rng = np.random.default_rng(seed)
    n_rel = rng.integers(1, 6, size=n_queries)
    ranked = rng.integers(0, N_DOCS, size=(n_queries, hits), dtype=np.int32)
    entries: list[dict[str, Any]] = []
    rel_docs = rng.integers(0, N_DOCS, size=(n_queries, 5))
    grades = rng.integers(1, 4, size=(n_queries, 5))
    positions = rng.integers(0, hits, size=(n_queries, 5))
    tag_a = rng.integers(0, len(TAGS), size=n_queries)
    tag_b = rng.integers(0, len(TAGS), size=n_queries)
    for i in range(n_queries):
        count = int(n_rel[i])
        relevant = {}
        for j in range(count):
            relevant[f"doc{int(rel_docs[i, j])}"] = int(grades[i, j])
            if (i + j) % 3:  # about 2/3 of them retrieved, somewhere in the list
                ranked[i, positions[i, j]] = rel_docs[i, j]
        tags = sorted({TAGS[tag_a[i]], TAGS[tag_b[i]]})
        entries.append(
            {"id": f"q{i}", "query": f"query {i} text", "relevant": relevant, "tags": tags}
        )
    return entries, ranked


def runs_of(ranked: np.ndarray) -> list[list[str]]:
    """What the retriever returns: unique ids, first occurrence kept (as the plugin keeps)."""
    return [list(dict.fromkeys(f"doc{d}" for d in row.tolist())) for row in ranked]


def write_project(folder: Path, entries: list[dict[str, Any]], ranked: np.ndarray, k: int) -> None:
    golden = {"name": "scale", "k": k, "queries": entries}
    (folder / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    np.save(folder / "ranked.npy", ranked)
    (folder / "conftest.py").write_text(CONFTEST, encoding="utf-8")


def pytrec_seconds(
    entries: list[dict[str, Any]], ranked: np.ndarray, k: int, repeat: int = 3
) -> float:
    """pytrec_eval's evaluate alone on the same lists (scores give the list order), best of
    ``repeat``, as the pytest process is timed best of ``--repeat``."""
    import pytrec_eval

    qrels = {e["id"]: dict(e["relevant"]) for e in entries}
    run = {}
    for entry, ids in zip(entries, runs_of(ranked), strict=True):
        run[entry["id"]] = {doc: float(len(ids) - r) for r, doc in enumerate(ids)}
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {f"recall_{k}", "recip_rank", f"ndcg_cut_{k}"}
    )
    best = math.inf
    for _ in range(repeat):
        started = time.perf_counter()
        evaluator.evaluate(run)
        best = min(best, time.perf_counter() - started)
    return best


def run_pytest(folder: Path, extra: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (GB) of one pytest process on ``folder``."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "s = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(s, rss, p.returncode)\n"
        "sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])\n"
    )
    command = [
        sys.executable,
        "-c",
        code,
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--retrieval-golden",
        "golden.json",
        *extra,
    ]
    # as on a user's machine: Python keeps compiled (and pytest's assertion-rewritten)
    # modules in __pycache__; PYTHONDONTWRITEBYTECODE would recompile them on every run
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False, env=env)
    seconds, rss_kb, status = proc.stdout.split()
    if status != "0" or "1 passed" not in proc.stderr:
        sys.stderr.write(f"pytest failed (exit {status}):\n{proc.stderr}\n")
        raise SystemExit(2)
    return float(seconds), int(rss_kb) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 and 200,000 queries")
    parser.add_argument("--repeat", type=int, default=2, help="pytest runs, best taken")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    small, large = (20_000, 200_000) if args.quick else (100_000, 1_000_000)
    ok = True
    rows: list[str] = []
    times: dict[tuple[int, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        for n, hits, extra_runs in ((small, 100, True), (small, 10, True), (large, 10, False)):
            folder = Path(tmp) / f"{n}x{hits}"
            folder.mkdir()
            entries, ranked = synthetic(n, hits, args.seed)
            write_project(folder, entries, ranked, hits)
            reference = pytrec_seconds(entries, ranked, hits) if extra_runs else None
            del entries, ranked
            best, rss = min(run_pytest(folder, []) for _ in range(args.repeat if extra_runs else 1))
            times[(n, hits)] = best
            line = f"{n:>9,} queries x {hits:>3} hits: pytest {best:6.2f} s, peak RSS {rss:.2f} GB"
            if reference is not None:
                ratio = best / reference
                line += f"; pytrec_eval compute {reference:5.2f} s; ratio {ratio:.2f}"
                if hits == 100:
                    line += " (target <= 1.0)"
                    ok &= ratio <= 1.0
            else:
                growth = best / times[(small, 10)]
                with_report, rss_report = run_pytest(folder, ["--retrieval-report", "report.json"])
                added = with_report / best - 1
                line += (
                    f"; {growth:.1f}x the {small:,} run (target <= {large // small * 1.2:.0f}x)"
                    f"\n{'':>30}with --retrieval-report {with_report:6.2f} s ({added:+.0%}, "
                    f"target <= +30%), peak RSS {rss_report:.2f} GB"
                )
                ok &= rss <= 3.0 and rss_report <= 3.0 and added <= 0.30
                ok &= growth <= large // small * 1.2
            rows.append(line)
            print(line, flush=True)
    print("all targets met" if ok else "a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
