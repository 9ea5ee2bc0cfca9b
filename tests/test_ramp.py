"""How many threads a sync retriever gets (ramp.py): the decisions on given measurements, and
what a computing and a waiting retriever get from ``run_retriever`` at concurrency 8."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from pytest_retrieval.golden import GoldenQuery
from pytest_retrieval.retrieval import run_retriever
from pytest_retrieval.retrieval.ramp import MIN_THROUGHPUT_WINDOW, RECHECK, Ramp


class Clock:
    """Feeds a Ramp what a retriever would make the workers do: ``rate`` calls a second at
    each number of workers (times ``warm_up`` in the first 0.3 s), each worker using
    ``cpu_per_worker`` of a CPU, all of them at most ``cpus`` (1: under the GIL)."""

    def __init__(
        self,
        ramp: Ramp,
        rate: dict[int, float],
        cpu_per_worker: float,
        cpus: float = 2.0,
        warm_up: float = 1.0,
    ) -> None:
        self.ramp, self.rate, self.cpu_per_worker = ramp, rate, cpu_per_worker
        self.cpus, self.warm_up = cpus, warm_up
        self.now = self.done = self.cpu = 0.0
        self.seen: list[int] = []

    def run(self, seconds: float, step: float = 0.05) -> int:
        end = self.now + seconds
        while self.now < end:
            workers = self.ramp.workers
            self.now += step
            slow = self.warm_up if self.now <= 0.3 else 1.0
            self.done += self.rate[workers] * slow * step
            self.cpu += min(workers * self.cpu_per_worker, self.cpus) * step
            self.seen.append(self.ramp.update(self.now, int(self.done), self.cpu))
        return self.ramp.workers


def test_a_waiting_retriever_gets_every_thread_at_once() -> None:
    clock = Clock(Ramp(8, 0.0), {1: 40, 8: 320}, cpu_per_worker=0.02)
    assert clock.run(0.1) == 8
    assert clock.seen[0] == 8  # decided on the first look: no doubling steps


def test_a_retriever_computing_under_the_gil_keeps_one_thread() -> None:
    """Two threads take turns: no faster (a bit slower), so the ramp goes back to one."""
    clock = Clock(Ramp(8, 0.0), {1: 10_000, 2: 9_000}, cpu_per_worker=1.0, cpus=1.0)
    assert clock.run(2.0) == 1
    assert max(clock.seen) == 2  # tried two, once
    assert sum(1 for w in clock.seen if w == 2) * 0.05 <= 2 * MIN_THROUGHPUT_WINDOW


def test_first_calls_warming_up_do_not_pass_for_a_speed_up() -> None:
    """The first window at one worker is slow (caches, lazy set-up); two workers under the
    GIL then look faster, but share one CPU: the ramp keeps one (it kept four)."""
    clock = Clock(
        Ramp(8, 0.0), {1: 10_000, 2: 9_500, 4: 9_000}, cpu_per_worker=1.0, cpus=1.0, warm_up=0.5
    )
    assert clock.run(2.0) == 1


def test_code_that_releases_the_gil_gets_the_cores_it_can_use() -> None:
    """Two cores: two threads twice as fast, four no faster than two."""
    clock = Clock(Ramp(8, 0.0), {1: 1000, 2: 2000, 4: 2050}, cpu_per_worker=1.0, cpus=2.0)
    assert clock.run(3.0) == 2


def test_calls_that_wait_part_of_the_time_get_threads_while_they_help() -> None:
    """An HTTP call with its JSON parsed: 30% of a CPU on one worker; four workers finish
    calls faster than two, eight no faster than four."""
    clock = Clock(Ramp(8, 0.0), {1: 100, 2: 200, 4: 330, 8: 350}, cpu_per_worker=0.3)
    assert clock.run(4.0) == 4


def test_a_settled_count_is_tried_again_later() -> None:
    """A retriever that becomes waiting (a cache warmed up, a remote index took over) gets
    more threads at the next look."""
    clock = Clock(Ramp(8, 0.0), {1: 10_000, 2: 9_000}, cpu_per_worker=1.0, cpus=1.0)
    assert clock.run(1.0) == 1
    clock.cpu_per_worker = 0.01
    clock.rate = {1: 50, 8: 400}
    assert clock.run(RECHECK + 0.5) == 8


def test_a_first_call_that_waits_does_not_keep_every_thread() -> None:
    """The first call loads an index (or opens a connection): the first look sees a
    waiting retriever and takes all eight threads; once the calls compute under the GIL,
    the next look finds that one thread does as well, and the run goes on with one."""
    clock = Clock(Ramp(8, 0.0), {1: 0, 2: 0, 4: 0, 8: 0}, cpu_per_worker=0.02)
    assert clock.run(0.1) == 8
    clock.rate = {1: 10_000, 2: 9_500, 4: 9_000, 8: 8_000}
    clock.cpu_per_worker, clock.cpus = 1.0, 1.0
    assert clock.run(RECHECK + 1.0) == 1
    assert clock.run(RECHECK) == 1  # and stays there, trying two at each look


def test_a_waiting_retriever_goes_back_to_every_thread_at_each_look() -> None:
    clock = Clock(Ramp(8, 0.0), {1: 50, 2: 100, 4: 200, 8: 400}, cpu_per_worker=0.01)
    clock.run(RECHECK + 1.0)
    assert clock.ramp.workers == 8 and clock.seen.count(1) <= 3  # a look: 0.05-0.1 s on one


def test_a_limit_of_one_is_one() -> None:
    assert Clock(Ramp(1, 0.0), {1: 50}, cpu_per_worker=0.0).run(1.0) == 1


def _queries(n: int) -> list[GoldenQuery]:
    return [GoldenQuery(id=f"q{i}", query=f"q{i}", relevant={"d": 1}) for i in range(n)]


class _FixedRamp:
    """A Ramp that always asks for ``WANTED`` workers (``run_retriever``'s plumbing only)."""

    WANTED = 1

    def __init__(self, limit: int, now: float, done: int = 0, cpu: float = 0.0) -> None:
        self.workers = min(limit, self.WANTED)

    def start(self, now: float, done: int = 0, cpu: float = 0.0) -> None:
        pass

    def update(self, now: float, done: int, cpu: float) -> int:
        return self.workers


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wanted", [1, 8])
def test_run_retriever_calls_from_as_many_threads_as_the_ramp_wants(
    monkeypatch: pytest.MonkeyPatch, wanted: int
) -> None:
    """At concurrency 8, the calls run on the workers the ramp asks for: one (a retriever
    computing under the GIL was called from 8 threads taking turns, a numpy retriever took
    2.2x its time alone), or all eight. Counted: the calls in flight at once and the threads
    that made them. (What the ramp decides on a real machine's measurements is timed, on a
    quiet machine, by benchmarks/bench_ramp.py.)"""
    monkeypatch.setattr("pytest_retrieval.retrieval.Ramp", _FixedRamp)
    monkeypatch.setattr(_FixedRamp, "WANTED", wanted)
    callers: Counter[int] = Counter()
    lock = threading.Condition()
    in_flight = peak = 0

    def search(query: str, k: int) -> list[str]:
        nonlocal in_flight, peak
        with lock:
            callers[threading.get_ident()] += 1
            in_flight += 1
            peak = max(peak, in_flight)
            lock.notify_all()
            # after the first call (which runs alone), wait till the wanted calls overlap, so
            # that a pool of 8 shows 8 at once (a run short of them gives up, and fails); at
            # one wanted, q1 waits a while for a second call that a pool of more would make
            if query == "q1" and wanted == 1:
                lock.wait_for(lambda: peak > 1, timeout=1)
            elif query != "q0":
                lock.wait_for(lambda: peak >= wanted, timeout=20)
            in_flight -= 1
        return ["d"]

    runs = run_retriever(search, _queries(300), 5, concurrency=8)
    assert all(run.error is None for run in runs)
    assert peak == wanted
    # the first call ran alone on a thread of its own (which then idles till the end)
    assert len(callers) == 1 + wanted and 1 in callers.values(), callers


def test_worker_cpu_time_never_goes_back_when_a_thread_id_is_reused() -> None:
    """A worker that left keeps its CPU time in the sum, though a new worker's thread may
    get its thread id (glibc reuses them): the sum read by the ramp only grows."""
    from pytest_retrieval.retrieval import WorkerClocks

    clocks = WorkerClocks()
    idents: list[int] = []

    def burn(seconds: float) -> None:
        number = clocks.register()
        idents.append(threading.get_ident())
        deadline = time.thread_time() + seconds
        while time.thread_time() < deadline:
            pass
        clocks.leave(number)

    first = threading.Thread(target=burn, args=(0.2,))
    first.start()
    first.join()
    after_first = clocks.total()
    second = threading.Thread(target=burn, args=(0.05,))
    second.start()
    second.join()
    assert after_first >= 0.2 and clocks.total() >= after_first + 0.05
