"""Benchmark: a sync retriever computing under the GIL keeps one thread at concurrency 8.

What it measures
    ``run_retriever`` over ``--queries`` (3,000) queries at concurrency 8, with a retriever
    that spends 0.3 ms of CPU per call holding the GIL (pure Python). The ramp
    (``pytest_retrieval/retrieval/ramp.py``) watches the process's CPU time and the calls
    finished and should keep one worker thread (it tries a second once, and looks again
    every few seconds). Printed: the wall time, the calls each thread made, and the share of
    the calls made by the two busiest threads.

    Before the ramp, such a retriever was called from 8 threads taking turns under the GIL
    (a numpy retriever took 2.2x its time alone). The ramp decides on real measurements, so
    a machine busy with other processes can make a look see two threads outpace one by
    chance: this was a test (tests/test_ramp.py) and failed on loaded 2-core machines
    ("898 >= 0.9 * 3000"); the tests now check the ramp's decisions on given measurements
    and that ``run_retriever`` uses the threads the ramp asks for. Run this on a quiet machine.

Target
    The two busiest threads make >= 90% of the calls.

How to run (from the repository root, venv active)::

    python benchmarks/bench_ramp.py
    python benchmarks/bench_ramp.py --queries 10000

Exit status 0 when the target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence

from pytest_retrieval.golden import GoldenQuery
from pytest_retrieval.retrieval import run_retriever

TARGET_SHARE = 0.9


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--cpu-ms", type=float, default=0.3, help="CPU per call, ms")
    args = parser.parse_args(argv)
    callers: Counter[int] = Counter()
    cpu = args.cpu_ms / 1000

    def search(query: str, k: int) -> list[str]:
        callers[threading.get_ident()] += 1
        deadline = time.thread_time() + cpu  # CPU, holding the GIL
        while time.thread_time() < deadline:
            pass
        return ["d"]

    queries = [
        GoldenQuery(id=f"q{i}", query=f"q{i}", relevant={"d": 1}) for i in range(args.queries)
    ]
    started = time.perf_counter()
    runs = run_retriever(search, queries, 5, concurrency=8)
    wall = time.perf_counter() - started
    errors = sum(run.error is not None for run in runs)
    top_two = sum(count for _, count in callers.most_common(2))
    share = top_two / args.queries
    print(f"{args.queries} calls in {wall:.2f} s on {len(callers)} threads, {errors} errors")
    print(f"calls per thread: {sorted(callers.values(), reverse=True)}")
    ok = errors == 0 and share >= TARGET_SHARE
    print(
        f"two busiest threads: {share:.1%} of the calls (target >= {TARGET_SHARE:.0%}): "
        + ("ok" if ok else "FAIL")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
