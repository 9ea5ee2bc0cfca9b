"""Benchmark: large golden sets through ``pytest --retrieval-golden``, end to end, as ratios
against pytrec_eval's compute alone on the same ranked lists.

What it measures (issue 13), in one run, each size in interleaved rounds (pytrec_eval, the
retriever alone, pytest's start-up and exit, ``json.loads`` of the golden file, the pytest
process; ``--repeat`` rounds, the best of each kept: this machine's timings vary by a third
from one minute to the next):

A. 100,000 queries x 100 hits (k = 100):
   - the whole ``python -m pytest --retrieval-golden golden.json`` process, wall clock:
     start-up, golden loading and validation, fingerprints, 100,000 retriever calls,
     recall/precision/hit_rate/mrr/ndcg/map/judged at 100 with intervals, per-tag means, the
     verdict and the summary. Only pytest-retrieval is loaded
     (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 -p pytest_retrieval.plugin``): the dev venv's other
     plugins (langsmith, hypothesis, ...) cost 0.6 s of start-up that is not ours. Bytecode
     is cached, as on a user's machine;
   - the retriever alone: the same fixture's set-up and the same 100,000 calls in a plain
     loop, in its own process, on a heap frozen as the plugin's calls run (``gc.freeze``),
     dropping what they return (a lower bound: any evaluation keeps it somehow);
   - the retriever inside a pytest process: the same fixture times its own set-up and
     calls in a separate ``pytest --retrieval-concurrency 1`` run (no call waits for
     another thread's). It is the retriever's cost where the plugin's work shares the CPU
     caches with it, and what it returns is kept: 1.35x its time alone at 100,000 x 100
     here (1.07 s and 0.79 s), 1.6x at 100,000 x 10 (0.27 s and 0.17 s). The plugin's
     share is the whole process less this;
   - pytrec_eval's ``evaluate`` alone (recall_100, recip_rank, ndcg_cut_100; its input
     dicts built beforehand and not timed) on the same lists.
   - the floor: what one pytest process that calls this retriever for every query must
     spend -- pytest's start-up and exit with the plugin loaded and nothing to run (an
     empty folder), ``json.loads`` of golden.json (in a process of its own, the garbage
     collector off as the plugin has it), and the retriever alone. A plugin that cost
     nothing more would take at least this long (a lower bound: numpy's import, which the
     retriever and the plugin share, is in none). It holds for one process parsing with
     the standard library's ``json``; ``pytest -n`` spreads the calls and is not bounded
     by it.
   Ratios: the whole process over pytrec_eval -- the issue's target, <= 1.0 -- the
   plugin's share (the process less the retriever inside it) over pytrec_eval, and the
   floor over pytrec_eval, also with the retriever's time inside a process for its time
   alone; the process over the floor says how far the plugin is from costing nothing.
   All of it for each of the two forms a retriever can take (docs/retriever.md,
   "Batched retrievers"), on the same lists:
   - batched (``pytest_retrieval.batched``): 1024 queries a call, answered with row
     numbers (the array's rows); the hits stay columnar. The target is checked on this
     form: the issue asks for calling in columnar form;
   - one query a call, answered with doc-id strings: reported. Here the retriever alone
     takes about half pytrec_eval's time (building 10 million strings), and the plugin's
     work on them is Python per query.
B. The same at 10 hits (k = 10), reported; and the same run compared with a baseline
   recorded from the same lists (as CI runs on a pull request), reported.
C. 1,000,000 queries x 10 hits: wall clock and the peak RSS of the pytest process
   (``ru_maxrss``), and the same with ``--retrieval-report``. Targets: RSS <= 3 GB, time <=
   12x the 100,000 x 10 run, the report adding <= 30 % (each the best of two runs); the
   growth is also shown without pytest's start-up and exit, which both sizes pay once.
Before A and B are timed, an untimed run's JSON report is checked against pytrec_eval:
recall@k, MRR@k and nDCG@k equal to 1e-9 on the same lists, or the script exits 2 (a
fast path that computed wrong numbers would otherwise meet every time target).
D. The 100,000 x 100 set split over two xdist workers (``-n 2``, ``--retrieval-split-min
   1000``; the best of two runs), reported beside the one-process run: each worker loads
   the golden set and calls the retriever for its half, the controller merges the halves.
   With a retriever this cheap the split is expected to cost more than it saves (it is
   for CPU-bound retrievers: docs/scale.md, "One golden set across
   xdist workers"). Printed after A.

The golden set: graded relevance (1-3), 1-5 relevant ids per query from a 200,000-doc space,
1-2 tags each. The retriever: a ``conftest.py`` fixture over a numpy array of ranked doc
numbers (query i -> row i), returning the doc-id strings of its own id table -- what an
in-memory index returns (FAISS row numbers mapped to ids) -- or, batched, the rows
themselves with the id table as ``doc_ids``; so that what is timed is the plugin, not the
user's search; its own time is measured and set apart all the same. B, C and D use the
one-query form.

How to run (from the repository root, venv active; needs pytrec-eval-terrier)::

    python benchmarks/bench_scale.py             # everything (about 8 minutes)
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

#: the fixture's body: built once, then ``search`` for every query
INDEX = """\
import numpy as np

def load(here):
    rows = np.load(here / "ranked.npy")
    return rows, [f"doc{d}" for d in range(int(rows.max()) + 1)]

def build(here):
    rows, names = load(here)

    def search(query, k):
        row = rows[int(query.split(" ", 2)[1])]
        return list(map(names.__getitem__, row[:k].tolist()))

    return search

def build_batched(here):
    rows, names = load(here)

    def search(queries, k):
        return rows[[int(query.split(" ", 2)[1]) for query in queries], :k]

    return search, names
"""

CONFTEST = '''\
"""Retriever for bench_scale: query i -> row i of ranked doc numbers, as doc-id strings
(BENCH_SCALE_BATCHED: a batch of queries per call, as row numbers)."""

import atexit
import os
import time
from pathlib import Path

import pytest

import pytest_retrieval
from bench_index import build, build_batched


@pytest.fixture(scope="session")
def retriever():
    here = Path(__file__).parent
    timed = os.environ.get("BENCH_SCALE_TIMED")  # a file: the retriever's own seconds
    clock = time.perf_counter
    started = clock()
    if os.environ.get("BENCH_SCALE_BATCHED"):
        search, names = build_batched(here)
    else:
        search, names = build(here), None
    spent = [clock() - started]
    if timed:
        atexit.register(lambda: Path(timed).write_text(str(spent[0])))
        untimed = search

        def search(*args):
            started = clock()
            hits = untimed(*args)
            spent[0] += clock() - started
            return hits

    return search if names is None else pytest_retrieval.batched(doc_ids=names)(search)
'''

#: the retriever alone, in its own process: set-up and every call, timed
ALONE = """\
import json, sys, time
from pathlib import Path
here = Path(sys.argv[1])
sys.path.insert(0, str(here))
texts = json.loads((here / "texts.json").read_text("utf-8"))
k = int(sys.argv[2])
import gc, numpy  # the plugin imports numpy too: not the retriever's cost
started = time.perf_counter()
if len(sys.argv) > 3:  # batched: 1024 queries a call, as pytest_retrieval.batched calls
    from bench_index import build_batched
    search, names = build_batched(here)
    gc.freeze()
    for start in range(0, len(texts), 1024):
        search(texts[start : start + 1024], k)
else:
    from bench_index import build
    search = build(here)
    gc.freeze()
    for text in texts:
        search(text, k)
print(time.perf_counter() - started)
"""


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
    texts = [entry["query"] for entry in entries]
    (folder / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    np.save(folder / "ranked.npy", ranked)
    (folder / "bench_index.py").write_text(INDEX, encoding="utf-8")
    (folder / "conftest.py").write_text(CONFTEST, encoding="utf-8")


class Pytrec:
    """pytrec_eval's evaluate on the same lists (scores give the list order), its input
    dicts built once and not timed."""

    def __init__(self, entries: list[dict[str, Any]], ranked: np.ndarray, k: int) -> None:
        import pytrec_eval

        qrels = {e["id"]: dict(e["relevant"]) for e in entries}
        self.run = {}
        for entry, ids in zip(entries, runs_of(ranked), strict=True):
            self.run[entry["id"]] = {doc: float(len(ids) - r) for r, doc in enumerate(ids)}
        self.k = k
        self.evaluator = pytrec_eval.RelevanceEvaluator(
            qrels, {f"recall_{k}", "recip_rank", f"ndcg_cut_{k}"}
        )

    def seconds(self) -> float:
        started = time.perf_counter()
        self.evaluator.evaluate(self.run)
        return time.perf_counter() - started

    def means(self) -> dict[str, float]:
        """recall@k, RR and nDCG@k averaged over the queries, as the plugin names them (RR
        is not cut by pytrec_eval: no list holds more than k hits, so it equals RR@k)."""
        scored = self.evaluator.evaluate(self.run).values()
        names = {f"recall_{self.k}": "recall", "recip_rank": "mrr", f"ndcg_cut_{self.k}": "ndcg"}
        return {
            f"{name}@{self.k}": float(np.mean([values[measure] for values in scored]))
            for measure, name in names.items()
        }


def _env() -> dict[str, str]:
    # as on a user's machine: Python keeps compiled (and pytest's assertion-rewritten)
    # modules in __pycache__; PYTHONDONTWRITEBYTECODE would recompile them on every run
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # ours only (see the docstring)
    return env


#: a child process that runs its arguments as a command and prints its wall seconds, its
#: peak RSS (KB) and its exit status, then the command's output on stderr
TIMED = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "s = time.perf_counter() - t\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(s, rss, p.returncode)\n"
    "sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])\n"
)
PYTEST = [sys.executable, "-m", "pytest", "-p", "pytest_retrieval.plugin"]
PYTEST += ["-p", "no:cacheprovider", "-q"]


def _env_of(batched: bool) -> dict[str, str]:
    return {**_env(), "BENCH_SCALE_BATCHED": "1"} if batched else _env()


def run_pytest(
    folder: Path, extra: list[str], passed: str = "1 passed", batched: bool = False
) -> tuple[float, float]:
    """Wall seconds and peak RSS (GB, the largest process: under ``-n`` the controller's or
    a worker's) of one pytest run on ``folder`` (``batched``: the batched retriever)."""
    command = [sys.executable, "-c", TIMED, *PYTEST, "--retrieval-golden", "golden.json", *extra]
    proc = subprocess.run(
        command, cwd=folder, capture_output=True, text=True, check=False, env=_env_of(batched)
    )
    seconds, rss_kb, status = proc.stdout.split()
    if status != "0" or passed not in proc.stderr:
        sys.stderr.write(f"pytest failed (exit {status}):\n{proc.stderr}\n")
        raise SystemExit(2)
    return float(seconds), int(rss_kb) / 1e6


def start_and_exit(empty: Path) -> float:
    """Wall seconds of a pytest process with the plugin loaded and nothing to run."""
    command = [sys.executable, "-c", TIMED, *PYTEST]
    proc = subprocess.run(
        command, cwd=empty, capture_output=True, text=True, check=False, env=_env()
    )
    seconds, _, status = proc.stdout.split()
    if status != "5":  # pytest's "no tests ran"
        sys.stderr.write(f"pytest on an empty folder exited {status}:\n{proc.stderr}\n")
        raise SystemExit(2)
    return float(seconds)


def parse_golden(folder: Path) -> float:
    """Seconds ``json.loads`` takes on golden.json, in a process of its own."""
    code = (
        "import gc, json, sys, time\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "gc.disable()\n"
        "t = time.perf_counter()\n"
        "json.loads(data)\n"
        "print(time.perf_counter() - t)\n"
    )
    return child_seconds(code, [str(folder / "golden.json")], "json.loads of golden.json")


def retriever_inside(folder: Path, batched: bool = False) -> float:
    """Seconds the retriever's set-up and calls take inside a pytest process (its fixture
    times them; calls in pytest's thread, ``--retrieval-concurrency 1``, so that no call
    waits for another thread): what it costs there, where the plugin's work shares the CPU
    caches with it."""
    timed = folder / "retriever_seconds.txt"
    command = [*PYTEST, "--retrieval-golden", "golden.json", "--retrieval-concurrency", "1"]
    proc = subprocess.run(
        command,
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        env={**_env_of(batched), "BENCH_SCALE_TIMED": str(timed)},
    )
    if proc.returncode != 0:
        sys.stderr.write(f"the timed pytest run failed (exit {proc.returncode}):\n{proc.stdout}\n")
        raise SystemExit(2)
    return float(timed.read_text())


def retriever_alone(folder: Path, k: int, batched: bool = False) -> float:
    """Seconds the retriever's set-up and calls take in a process of their own."""
    args = [str(folder), str(k), *(["batched"] if batched else [])]
    return child_seconds(ALONE, args, "the retriever alone")


def child_seconds(code: str, args: list[str], what: str) -> float:
    """The seconds ``code``, run in a process of its own, prints; exit 2 when it fails (a
    broken run, not a missed target)."""
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=_env()
    )
    if proc.returncode != 0:
        sys.stderr.write(f"{what} failed (exit {proc.returncode}):\n{proc.stderr}\n")
        raise SystemExit(2)
    return float(proc.stdout)


def check_numbers(folder: Path, pytrec: Pytrec) -> None:
    """The plugin's recall, MRR and nDCG on these lists (its JSON report, from an untimed
    run, with either retriever) equal pytrec_eval's to 1e-9: a fast path that computed wrong
    numbers would meet every time target. Exit 2 when they differ (a broken run, not a
    missed target)."""
    for batched in (False, True):
        run_pytest(folder, ["--retrieval-report", "numbers.json"], batched=batched)
        report = json.loads((folder / "numbers.json").read_text(encoding="utf-8"))
        ours = report["evaluations"][0]["metrics"]
        for name, theirs in pytrec.means().items():
            if not abs(ours[name] - theirs) <= 1e-9:
                form = "batched" if batched else "one-query"
                sys.stderr.write(
                    f"{name}: the plugin's {ours[name]!r} ({form} retriever), pytrec_eval's "
                    f"{theirs!r}\n"
                )
                raise SystemExit(2)
        (folder / "numbers.json").unlink()


def with_baseline(folder: Path) -> float:
    """The best of two runs compared with a baseline recorded from the same lists (as CI
    runs on a pull request), that baseline recorded first, untimed, then removed."""
    run_pytest(folder, ["--retrieval-update-baseline"])
    seconds = min(run_pytest(folder, [])[0] for _ in range(2))
    (folder / "golden.json.baseline.json").unlink()
    return seconds


def measure(folder: Path, hits: int, pytrec: Pytrec, rounds: int) -> dict[str, float]:
    """The best of ``rounds`` interleaved rounds of each measurement (``*_b``: with the
    batched retriever)."""
    best = {"pytrec": math.inf, "start": math.inf, "parse": math.inf, "rss": 0.0}
    for form in ("", "_b"):
        best.update({f"alone{form}": math.inf, f"inside{form}": math.inf})
        best[f"pytest{form}"] = math.inf
    empty = folder.parent / "empty"  # beside the project: no conftest.py to import
    empty.mkdir(exist_ok=True)
    for _ in range(rounds):
        best["pytrec"] = min(best["pytrec"], pytrec.seconds())
        best["start"] = min(best["start"], start_and_exit(empty))
        best["parse"] = min(best["parse"], parse_golden(folder))
        for form, batched in (("", False), ("_b", True)):
            alone = retriever_alone(folder, hits, batched)
            best[f"alone{form}"] = min(best[f"alone{form}"], alone)
            inside = retriever_inside(folder, batched)
            best[f"inside{form}"] = min(best[f"inside{form}"], inside)
            seconds, rss = run_pytest(folder, [], batched=batched)
            best[f"pytest{form}"] = min(best[f"pytest{form}"], seconds)
            best["rss"] = max(best["rss"], rss)
    return best


def describe(best: dict[str, float], form: str, target: str) -> tuple[float, str]:
    """The whole process over pytrec_eval for one retriever form, and its lines."""
    pytest_s, inside, alone = best[f"pytest{form}"], best[f"inside{form}"], best[f"alone{form}"]
    plugin = pytest_s - inside
    whole = pytest_s / best["pytrec"]
    floor = best["start"] + best["parse"] + alone
    floor_inside = best["start"] + best["parse"] + inside
    lines = (
        f"pytest {pytest_s:6.2f} s = the retriever inside it {inside:5.2f} s + plugin "
        f"{plugin:5.2f} s; whole process / pytrec_eval {whole:.2f}{target}; plugin / "
        f"pytrec_eval {plugin / best['pytrec']:.2f}\n{'':>34}floor {floor:.2f} s = start-up "
        f"and exit {best['start']:.2f} s + json.loads of the golden file {best['parse']:.2f} s "
        f"+ the retriever alone {alone:.2f} s: {floor / best['pytrec']:.2f}x pytrec_eval (a "
        f"plugin that did nothing more would take at least this long); with the retriever's "
        f"time inside a pytest process instead: {floor_inside:.2f} s, "
        f"{floor_inside / best['pytrec']:.2f}x; whole process / floor {pytest_s / floor:.2f}"
    )
    return whole, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 and 200,000 queries")
    parser.add_argument("--repeat", type=int, default=4, help="interleaved rounds, best taken")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    small, large = (20_000, 200_000) if args.quick else (100_000, 1_000_000)
    ok = True
    times: dict[tuple[int, int], float] = {}
    starts: dict[tuple[int, int], float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        for n, hits in ((small, 100), (small, 10)):
            folder = Path(tmp) / f"{n}x{hits}"
            folder.mkdir()
            entries, ranked = synthetic(n, hits, args.seed)
            write_project(folder, entries, ranked, hits)
            pytrec = Pytrec(entries, ranked, hits)
            del entries, ranked
            check_numbers(folder, pytrec)
            best = measure(folder, hits, pytrec, args.repeat)
            del pytrec
            starts[(n, hits)] = best["start"]
            times[(n, hits)] = best["pytest"]
            target = " (target <= 1.0)" if hits == 100 else ""
            _, one_lines = describe(best, "", "")
            whole, batched_lines = describe(best, "_b", target)
            print(
                f"{n:>9,} queries x {hits:>3} hits: pytrec_eval compute {best['pytrec']:5.2f} s; "
                f"peak RSS {best['rss']:.2f} GB\n"
                f"{'':>4}batched retriever (a call per 1024 queries, row numbers): "
                f"{batched_lines}\n"
                f"{'':>4}one-query retriever (a call per query, doc-id strings): {one_lines}",
                flush=True,
            )
            if hits == 100:
                ok &= whole <= 1.0
                split = ["-p", "xdist.plugin", "-n", "2", "--retrieval-split-min", "1000"]
                runs = [run_pytest(folder, split, "2 passed") for _ in range(2)]
                seconds, rss = min(s for s, _ in runs), max(r for _, r in runs)
                print(
                    f"{'':>4}one-query retriever split over 2 xdist workers (-n 2): "
                    f"{seconds:6.2f} s, {seconds / best['pytest']:.2f}x its one-process run; "
                    f"peak RSS {rss:.2f} GB",
                    flush=True,
                )
            else:
                compared = with_baseline(folder)
                print(
                    f"{'':>4}one-query retriever compared with a baseline of the same lists: "
                    f"{compared:6.2f} s "
                    f"({compared / best['pytest'] - 1:+.0%} on the run without one)",
                    flush=True,
                )
        folder = Path(tmp) / f"{large}x10"
        folder.mkdir()
        entries, ranked = synthetic(large, 10, args.seed)
        write_project(folder, entries, ranked, 10)
        del entries, ranked
        best_large, rss, with_report, rss_report = math.inf, 0.0, math.inf, 0.0
        for _ in range(2):  # interleaved, the best of each
            seconds, peak = run_pytest(folder, [])
            best_large, rss = min(best_large, seconds), max(rss, peak)
            seconds, peak = run_pytest(folder, ["--retrieval-report", "report.json"])
            with_report, rss_report = min(with_report, seconds), max(rss_report, peak)
        growth = best_large / times[(small, 10)]
        start = starts[(small, 10)]  # pytest's start-up and exit: the same for both sizes
        net = (best_large - start) / (times[(small, 10)] - start)
        added = with_report / best_large - 1
        limit = large // small * 1.2
        print(
            f"{large:>9,} queries x  10 hits (one-query retriever): pytest {best_large:6.2f} s, "
            f"peak RSS {rss:.2f} GB "
            f"(target <= 3 GB); {growth:.1f}x the {small:,} run (target <= {limit:.0f}x; "
            f"{net:.1f}x without pytest's start-up and exit)\n"
            f"{'':>30}with --retrieval-report {with_report:6.2f} s ({added:+.0%}, target <= "
            f"+30%), peak RSS {rss_report:.2f} GB",
            flush=True,
        )
        ok &= rss <= 3.0 and rss_report <= 3.0 and added <= 0.30 and growth <= limit
    print("all targets met" if ok else "a target was missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
