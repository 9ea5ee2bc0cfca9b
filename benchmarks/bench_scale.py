"""Benchmark: a 100,000-query golden set through ``pytest --retrieval-golden``, end to end.

What it measures
    In a temp dir it writes a synthetic golden set -- ``--queries`` (100,000) queries with text
    like "query 123 about billing", 1-5 relevant ids each from a 50,000-doc id space and 1-2
    tags -- plus a ``conftest.py`` whose ``retriever`` fixture is an in-memory dict lookup
    (query text -> 10 ids, a deterministic mix of relevant and non-relevant ids, loaded from
    ``index.json`` beside it). Then, from that dir:

    A. ``python -m pytest --retrieval-golden golden.json -p no:cacheprovider -q`` in a
       subprocess, wall clock, best of ``--repeat`` (2);
    B. the same with ``--retrieval-report report.json`` once, reported as the time it adds;
    C. where the time goes, in this process: pytest start-up on the same dir without a golden
       set, loading ``index.json`` (what the fixture does), ``load_golden`` of the file, and
       ``evaluate(search, golden_set)`` at the default concurrency (8) with the same retriever.
       With ``--profile`` (or when the target is missed) ``evaluate`` is run once more under
       cProfile and the top functions by cumulative time are printed.

Target
    A <= 10 s (best of 2) for 100,000 queries.

How to run (from the repository root, venv active)::

    python benchmarks/bench_scale.py
    python benchmarks/bench_scale.py --queries 20000 --profile

Exit status 0 when the target is met, 1 when not. Everything is written under a temp dir that
is removed at the end.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import io
import json
import math
import pstats
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

TARGET_S = 10.0
N_DOCS = 50_000
TOPICS = ("billing", "install", "errors", "api", "login", "export", "search", "privacy")
TAGS = ("faq", "howto", "errors", "billing", "api")

CONFTEST = '''\
"""Retriever for bench_scale: an in-memory dict lookup, query text -> ranked doc ids."""

import json
import math
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def retriever():
    index = json.loads(Path(__file__).with_name("index.json").read_text("utf-8"))

    def search(query, k):
        return index.get(query, [])[:k]

    return search
'''


def ranking(i: int, relevant: Sequence[str]) -> list[str]:
    """10 ids for query ``i``: about 2/3 of its relevant ids among non-relevant fillers."""
    keep = [doc for j, doc in enumerate(relevant) if (i + j) % 3 != 0]
    taken = set(relevant)
    fillers = [f"doc{(i * 7919 + 13 * n) % N_DOCS}" for n in range(20)]
    ranked = [doc for doc in fillers if doc not in taken][: 10 - len(keep)]
    for j, doc in enumerate(keep):
        ranked.insert((i + 3 * j) % (len(ranked) + 1), doc)
    return ranked


def synthetic(n_queries: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Seeded golden entries and the retriever's index (query text -> 10 ranked ids)."""
    rng = random.Random(seed)
    entries: list[dict[str, Any]] = []
    index: dict[str, list[str]] = {}
    for i in range(n_queries):
        text = f"query {i} about {TOPICS[i % len(TOPICS)]}"
        relevant = [f"doc{d}" for d in rng.sample(range(N_DOCS), rng.randint(1, 5))]
        tags = rng.sample(TAGS, rng.randint(1, 2))
        entries.append({"id": f"q{i}", "query": text, "relevant": relevant, "tags": tags})
        index[text] = ranking(i, relevant)
    return entries, index


def write_fixture_dir(folder: Path, n_queries: int, seed: int) -> None:
    entries, index = synthetic(n_queries, seed)
    golden = {"name": "scale", "k": 10, "queries": entries}
    (folder / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    (folder / "index.json").write_text(json.dumps(index), encoding="utf-8")
    (folder / "conftest.py").write_text(CONFTEST, encoding="utf-8")


def run_pytest(
    folder: Path, extra: Sequence[str]
) -> tuple[float, subprocess.CompletedProcess[str]]:
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *extra]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, proc


def check_run(proc: subprocess.CompletedProcess[str], what: str) -> None:
    """Stop with the output if the pytest run did not pass its one evaluation."""
    if proc.returncode != 0 or "1 passed" not in proc.stdout or "retrieval" not in proc.stdout:
        sys.stderr.write(f"{what}: unexpected pytest result (exit {proc.returncode})\n")
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(2)


class GcClock:
    """A ``gc.callbacks`` hook adding up the time spent in garbage collections."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


def load_index(folder: Path) -> dict[str, list[str]]:
    """What the conftest's fixture does."""
    loaded: dict[str, list[str]] = json.loads((folder / "index.json").read_text("utf-8"))
    return loaded


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def _listing(profiles: Sequence[cProfile.Profile], sort: str, top: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profiles[0], stream=out)
    for extra in profiles[1:]:
        stats.add(extra)
    stats.sort_stats(sort).print_stats(top)
    lines = out.getvalue().strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(["", lines[0], *lines[start:]])


def profile(name: str, fn: Callable[[], object], top: int) -> str:
    """cProfile ``fn``: the calling thread's top functions by cumulative time, then (if ``fn``
    started threads: the retriever workers) the workers' merged top functions by own time.

    GC pauses are charged to whatever function allocates when they hit; the profiler slows
    every worker while it holds the GIL, so the workers' lock waits are inflated."""
    workers: list[cProfile.Profile] = []

    def start_worker_profile(*_: object) -> None:
        worker = cProfile.Profile()
        workers.append(worker)
        worker.enable()  # replaces this hook for the rest of the thread

    main_profile = cProfile.Profile()
    threading.setprofile(start_worker_profile)
    main_profile.enable()
    try:
        fn()
    finally:
        main_profile.disable()
        threading.setprofile(None)
    text = f"\ncProfile of {name}, calling thread, top {top} by cumulative time:"
    text += _listing([main_profile], "cumulative", top)
    if workers:
        text += f"\n\n{len(workers)} worker threads merged, top {top} by own time:"
        text += _listing(workers, "tottime", top)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2, help="pytest runs, best taken")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="cProfile the in-process evaluate")
    parser.add_argument("--top", type=int, default=10, help="functions shown by --profile")
    args = parser.parse_args(argv)

    heavy = ("numpy", "pydantic", "jsonschema")
    imports = ("pytest_retrieval.evaluation", "pytest_retrieval.render.json", "jsonschema")
    fresh = not any(name in sys.modules for name in heavy)
    import_s, _ = timed(lambda: [importlib.import_module(name) for name in imports])
    from pytest_retrieval import EvaluationResult, evaluate, load_golden
    from pytest_retrieval.render.json import json_report, write_json

    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        folder = Path(tmp)
        gen_s, _ = timed(lambda: write_fixture_dir(folder, args.queries, args.seed))
        size_mb = (folder / "golden.json").stat().st_size / 1e6
        print(
            f"{args.queries:,} queries, golden.json {size_mb:.1f} MB, "
            f"index.json {(folder / 'index.json').stat().st_size / 1e6:.1f} MB "
            f"(generated in {gen_s:.1f} s)"
        )

        # A. end to end, best of --repeat
        golden_arg = ["--retrieval-golden", "golden.json"]
        runs: list[float] = []
        for _ in range(args.repeat):
            seconds, proc = run_pytest(folder, golden_arg)
            check_run(proc, "pytest run")
            runs.append(seconds)
        best = min(runs)
        rows.append(
            (
                "pytest --retrieval-golden (best)",
                best,
                "runs " + ", ".join(f"{s:.2f}" for s in runs),
            )
        )

        # B. with the JSON report
        report_s, proc = run_pytest(folder, [*golden_arg, "--retrieval-report", "report.json"])
        check_run(proc, "pytest run with --retrieval-report")
        report_mb = (folder / "report.json").stat().st_size / 1e6
        rows.append(
            (
                "  same + --retrieval-report",
                report_s,
                f"adds {report_s - best:+.2f} s; report.json {report_mb:.1f} MB",
            )
        )

        # C. where the time goes
        startup_s, proc = run_pytest(folder, [])
        rows.append(
            ("  pytest start-up, no golden (subprocess)", startup_s, f"exit {proc.returncode}")
        )
        in_process: list[tuple[str, float, str]] = []
        clock = GcClock()
        gc.callbacks.append(clock)
        try:

            def step(name: str, fn: Callable[[], T], note: Callable[[T], str]) -> T:
                gc_before = clock.seconds
                seconds, value = timed(fn)
                gc_note = f"gc {clock.seconds - gc_before:.2f} s"
                in_process.append((f"  {name}", seconds, f"{note(value)}; {gc_note}"))
                return value

            index: dict[str, list[str]] = step(
                "fixture: load index.json", lambda: load_index(folder), lambda _: "user code"
            )

            def search(query: str, k: int) -> list[str]:
                return index.get(query, [])[:k]

            golden = step(
                "load_golden",
                lambda: load_golden(folder / "golden.json"),
                lambda g: f"{len(g):,} queries",
            )
            result = step(
                "evaluate, concurrency 8",
                lambda: evaluate(search, golden, concurrency=8),
                lambda r: (
                    f"recall@10 {r.metrics['recall@10']:.4f}, "
                    f"p50 {r.latency_p50_ms * 1000:.1f} us/call"
                ),
            )
            payload = step(
                "result.to_dict (xdist worker only)",
                result.to_dict,
                lambda d: f"{len(d['queries']):,} query dicts",
            )
            step(
                "EvaluationResult.from_dict (xdist only)",
                lambda: EvaluationResult.from_dict(payload),
                lambda _: "controller rebuilds worker results",
            )
            document = step(
                "report: json_report (--retrieval-report)",
                lambda: json_report([result]),
                lambda _: "to_dict again",
            )
            step(
                "report: write_json (--retrieval-report)",
                lambda: write_json(folder / "inproc-report.json", document),
                lambda _: "compact C-encoded JSON, atomic write",
            )
        finally:
            gc.callbacks.remove(clock)
        plugin_parts = startup_s + import_s + sum(seconds for _, seconds, _ in in_process[:3])
        rows.append(("in-process (this process, one run each):", float("nan"), ""))
        rows.append(
            (
                "  import evaluation stack",
                import_s,
                "numpy, pydantic, jsonschema" + ("" if fresh else " (some already imported)"),
            )
        )
        rows.extend(in_process)
        rows.append(
            (
                "  start-up + import + next three rows",
                plugin_parts,
                f"vs pytest run: rest {best - plugin_parts:+.2f} s",
            )
        )

        width = max(len(name) for name, _, _ in rows)
        print(f"{'step'.ljust(width)}  {'seconds':>8}  note")
        for name, seconds, note in rows:
            shown = "" if math.isnan(seconds) else f"{seconds:8.2f}"
            print(f"{name.ljust(width)}  {shown:>8}  {note}")

        passed = best <= TARGET_S
        print(
            f"{'PASS' if passed else 'FAIL'}: {args.queries:,} queries end to end in {best:.2f} s "
            f"(target <= {TARGET_S:g} s)"
        )

        if args.profile or not passed:

            def pipeline() -> None:
                loaded = load_golden(folder / "golden.json")
                EvaluationResult.from_dict(evaluate(search, loaded, concurrency=8).to_dict())

            gc.collect()
            with_gc, _ = timed(pipeline)
            gc.collect()
            gc.disable()
            try:
                without_gc, _ = timed(pipeline)
            finally:
                gc.enable()
            print(
                f"\nwhat-if: load_golden + evaluate + to_dict + from_dict in-process: "
                f"{with_gc:.2f} s, {without_gc:.2f} s with gc.disable() "
                f"(GC passes over the large live heap cost {with_gc - without_gc:.2f} s)"
            )
            print(profile("load_golden", lambda: load_golden(folder / "golden.json"), args.top))
            print(profile("evaluate", lambda: evaluate(search, golden, concurrency=8), args.top))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
