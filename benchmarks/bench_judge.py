"""Benchmark: the LLM judge against a local OpenAI-compatible server with 50 ms latency.

What it measures (the server runs in a subprocess, so client and server CPU are apart):

A. 2,000 (query, document) pairs at the default concurrency (16), cold cache:
   judgments per second, and client CPU per call (process time of this process / calls);
B. the same 2,000 pairs again: must make zero requests and finish in <= 1 s (all cached);
C. 10% of the documents changed: must make exactly those 200 requests.
D. a dead endpoint (every request answered 500, same latency): the circuit breaker must end
   the 2,000 pairs in <= 20 s with at most 2 x concurrency requests (without it: 5 requests
   a pair with backoff, about 15 minutes).

Targets: A >= 150 judgments/s on this 2-core machine; B 0 requests and <= 1 s; C 200;
D <= 20 s and <= 32 requests.

How to run (from the repository root, venv active)::

    python benchmarks/bench_judge.py

Exit status 0 when every target is met, 1 when not.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from pytest_retrieval.judge import Judge, JudgeConfig, JudgePair

ROOT = Path(__file__).resolve().parents[1]
N = 2000
LATENCY = 0.05
TARGET_RATE = 150.0
TARGET_CACHED_S = 1.0
TARGET_DEAD_S = 20.0
TARGET_DEAD_REQUESTS = 32  # 2 x the default concurrency

TOPICS = ["boundary layer heat transfer", "wing flutter", "shock waves", "panel buckling"]


def make_pairs(changed: int = 0) -> list[JudgePair]:
    pairs = []
    for i in range(N):
        topic = TOPICS[i % len(TOPICS)]
        other = TOPICS[(i + 1) % len(TOPICS)]
        text = f"document {i} about {topic if i % 3 else other} measurements"
        if i < changed:
            text += " (revised)"
        pairs.append(JudgePair(f"{topic} experiments", None, f"d{i}", text))
    return pairs


def requests_served(base: str) -> int:
    with urllib.request.urlopen(base.replace("/v1", "/stats")) as response:
        return int(json.loads(response.read())["requests"])


def start_server(*fault: str) -> tuple[subprocess.Popen[str], str]:
    """The test server in a subprocess (its CPU apart from ours), and its base URL."""
    script = str(ROOT / "tests" / "judge_server.py")
    server = subprocess.Popen(
        [sys.executable, script, "--latency", str(LATENCY), *fault],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"


def dead_endpoint() -> tuple[float, int, str]:
    """D: seconds until 2,000 pairs are done against an endpoint that answers only 500,
    the requests it got, and why the judge stopped."""
    server, base = start_server("--fault", "500")
    try:
        judge = Judge(JudgeConfig(base_url=base, use_cache=False))
        started = time.perf_counter()
        verdicts = judge.judge(make_pairs())
        seconds = time.perf_counter() - started
        assert all(v.error is not None for v in verdicts)
        return seconds, requests_served(base), str(judge.summary()["stopped"])
    finally:
        server.kill()
        server.wait()


def main() -> int:
    server, base = start_server()
    try:
        with tempfile.TemporaryDirectory() as cache:

            def judge() -> Judge:
                return Judge(JudgeConfig(base_url=base, cache_dir=Path(cache), use_cache=True))

            cold = judge()
            wall, cpu = time.perf_counter(), time.process_time()
            verdicts = cold.judge(make_pairs())
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            graded = sum(v.error is None for v in verdicts)
            rate = N / wall
            served_a = requests_served(base)

            warm = judge()
            started = time.perf_counter()
            warm.judge(make_pairs())
            cached_s = time.perf_counter() - started
            served_b = requests_served(base) - served_a

            changed = judge()
            changed.judge(make_pairs(changed=N // 10))
            served_c = requests_served(base) - served_a - served_b
    finally:
        server.kill()
        server.wait()

    print(f"{N} pairs, server latency {LATENCY * 1000:.0f} ms, concurrency 16 (default)")
    print(f"A. cold:    {wall:6.2f} s  {rate:6.1f} judgments/s  (target >= {TARGET_RATE:g})")
    print(f"           client CPU {cpu * 1000 / N:.2f} ms per call; graded {graded}/{N}")
    print(f"B. cached:  {cached_s:6.2f} s  {served_b} requests  (target 0 and <= 1 s)")
    print(f"C. 10% changed: {served_c} requests (target {N // 10})")
    dead_s, dead_requests, stopped = dead_endpoint()
    print(
        f"D. dead endpoint: {dead_s:6.2f} s  {dead_requests} requests  "
        f"(target <= {TARGET_DEAD_S:g} s and <= {TARGET_DEAD_REQUESTS})"
    )
    print(f"           {stopped}")
    ok = (
        rate >= TARGET_RATE
        and graded == N
        and served_b == 0
        and cached_s <= TARGET_CACHED_S
        and served_c == N // 10
        and dead_s <= TARGET_DEAD_S
        and dead_requests <= TARGET_DEAD_REQUESTS
    )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
