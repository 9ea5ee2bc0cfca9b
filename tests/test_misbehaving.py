"""Retrievers that misbehave never hang the run, and are reported truthfully.

Every test here guards itself with a hard time limit (pytest-timeout, or the subprocess
timeout of ``runpytest_subprocess``): a regression must fail, not hang the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import GOLDEN, write_golden

from pytest_retrieval import evaluate, load_golden
from pytest_retrieval.errors import ConfigError
from pytest_retrieval.golden import GoldenQuery, GoldenSet
from pytest_retrieval.hits import QueryRun
from pytest_retrieval.render.terminal import failure_text, summary_lines
from pytest_retrieval.retrieval import BlockingRetrieverWarning, run_retriever

#: end-to-end runs (pytest processes, xdist, a local judge server): out of the fast
#: subset, `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

TIMEOUT = 0.3
#: the hang guard of a pytest subprocess (start-up alone took 23 s on a 2-core box loaded to
#: 8): a process held up by an abandoned call would take its full 3600 s, or forever
SUBPROCESS_TIMEOUT = 180


def _queries(n: int) -> list[GoldenQuery]:
    return [GoldenQuery(id=f"q{i}", query=f"q{i}", relevant={"d1": 1}) for i in range(n)]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown: lets the calls a test abandoned finish, so no thread lingers."""
    event = threading.Event()
    yield event
    event.set()


def _run(retriever: Any, n: int = 4, **options: Any) -> list[QueryRun]:
    return run_retriever(retriever, _queries(n), 5, **options)


class _Stuck:
    """Counts the calls of a stuck retriever that began and that got past being stuck: a
    call the run abandoned has begun and not got past when ``run_retriever`` returns."""

    def __init__(self) -> None:
        self.began = self.returned = 0

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        self.began += 1
        yield
        self.returned += 1


# ---------------------------------------------------------------- raising while read


def _failing_generator(query: str, k: int) -> Iterator[str]:
    yield "d1"
    raise RuntimeError("index shard gone")


class _Hit:
    @property
    def id(self) -> str:
        raise LookupError("no id on this hit")


def _bad_id(query: str, k: int) -> list[Any]:
    return [_Hit()]


async def _async_failing_generator(query: str, k: int) -> Iterator[str]:
    return _failing_generator(query, k)


async def _async_bad_id(query: str, k: int) -> list[Any]:
    return [_Hit()]


async def _async_generator(query: str, k: int) -> AsyncIterator[str]:
    yield "d1"  # streamed hits: read on the event loop
    raise RuntimeError("index shard gone")


READ_ERRORS = [
    (_failing_generator, "RuntimeError: index shard gone", "raise RuntimeError"),
    (_bad_id, "LookupError: no id on this hit", "raise LookupError"),
    (_async_failing_generator, "RuntimeError: index shard gone", "raise RuntimeError"),
    (_async_bad_id, "LookupError: no id on this hit", "raise LookupError"),
    (_async_generator, "RuntimeError: index shard gone", "raise RuntimeError"),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("timeout", [None, 5.0])
@pytest.mark.parametrize(
    ("retriever", "error", "line"), READ_ERRORS, ids=[case[0].__name__ for case in READ_ERRORS]
)
def test_a_result_that_raises_while_read_is_an_error_not_a_hang_nor_a_timeout(
    retriever: Any, error: str, line: str, timeout: float | None
) -> None:
    runs = _run(retriever, n=6, concurrency=3, timeout=timeout)
    assert {run.error for run in runs} == {
        f"reading the hits the retriever returned raised {error}"
    }
    traced = [run.traceback for run in runs if run.traceback]
    assert len(traced) == 1  # the first of each kind of error only
    assert line in traced[0] and "test_misbehaving.py" in traced[0]


# ---------------------------------------------------------------- BaseException


class _Custom(BaseException):
    pass


@pytest.mark.timeout(30)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (SystemExit(3), "SystemExit: 3"),
        (GeneratorExit(), "GeneratorExit"),
        (_Custom("odd"), "_Custom: odd"),
        (asyncio.CancelledError(), "CancelledError"),
    ],
    ids=["SystemExit", "GeneratorExit", "custom", "CancelledError"],
)
def test_any_base_exception_is_an_error_on_its_query(
    exc: BaseException, error: str, use_async: bool
) -> None:
    def search(query: str, k: int) -> list[str]:
        if query == "q1":
            raise exc
        return ["d1"]

    async def asearch(query: str, k: int) -> list[str]:
        return search(query, k)

    runs = _run(asearch if use_async else search, concurrency=2, timeout=5)
    assert [run.error for run in runs] == [None, f"the retriever raised {error}", None, None]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mode", ["threads", "inline", "async"])
def test_keyboard_interrupt_from_the_retriever_stops_the_run(mode: str) -> None:
    calls: list[str] = []

    def search(query: str, k: int) -> list[str]:
        calls.append(query)
        if query == "q1":
            raise KeyboardInterrupt
        return ["d1"]

    async def asearch(query: str, k: int) -> list[str]:
        return search(query, k)

    options = {"concurrency": 1} if mode != "threads" else {"concurrency": 2, "timeout": 5.0}
    with pytest.raises(KeyboardInterrupt):
        _run(asearch if mode == "async" else search, n=50, **options)
    assert len(calls) < 50  # it stopped taking queries


# ---------------------------------------------------------------- deadlines


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_calls_that_all_hang_time_out_side_by_side(
    release: threading.Event, use_async: bool
) -> None:
    """A backend that is down: every call hangs. The calls still run --retrieval-concurrency
    at a time, so the run takes about queries / concurrency timeouts, not one timeout per
    query (the first call, which runs alone, timed out, and the next ran alone, and so on:
    a 30 s timeout held a 1,394-query CI job for hours)."""
    started: list[str] = []

    def search(query: str, k: int) -> list[str]:
        started.append(query)
        release.wait()
        return ["d1"]

    async def asearch(query: str, k: int) -> list[str]:
        started.append(query)
        await asyncio.sleep(3600)
        return ["d1"]

    seen: list[int] = []

    def progress(done: int, total: int) -> None:
        seen.append(len(started) - done)  # calls begun and not yet timed out

    runs = run_retriever(
        asearch if use_async else search, _queries(24), 5,
        concurrency=8, timeout=0.5, progress=progress,
    )  # fmt: skip
    assert all(run.error and "did not answer within 0.5 s" in run.error for run in runs)
    assert len(started) == 24
    assert max(seen) >= 4  # calls were in flight side by side (one at a time before)


STOPPED = "not answered: the calls stopped after the retriever failed 8 in a row"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["threads", "async", "inline"])
def test_calls_stop_after_max_failures_in_a_row(release: threading.Event, mode: str) -> None:
    """A backend that is down: 1,394 queries at a 30 s timeout held a CI job for hours. After
    ``max_failures`` failed calls in a row no further call is made, and the queries without
    an answer say why (they fail the evaluation, as the failed calls do anyway)."""
    started: list[str] = []

    def hang(query: str, k: int) -> list[str]:
        started.append(query)
        release.wait()
        return ["d1"]

    async def ahang(query: str, k: int) -> list[str]:
        started.append(query)
        await asyncio.sleep(3600)
        return ["d1"]

    def refuse(query: str, k: int) -> list[str]:
        started.append(query)
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    retriever, options = {
        "threads": (hang, {"concurrency": 4, "timeout": 0.3}),
        "async": (ahang, {"concurrency": 4, "timeout": 0.3}),
        "inline": (refuse, {"concurrency": 1}),
    }[mode]
    runs = run_retriever(retriever, _queries(200), 5, max_failures=8, **options)
    assert len(runs) == 200
    assert 8 <= len(started) <= 8 + 4  # and the calls in flight when the 8th failed
    stopped = [run for run in runs if run.error and run.error.startswith(STOPPED)]
    failed = [run for run in runs if run.error and not run.error.startswith(STOPPED)]
    assert 8 <= len(failed) <= len(started)
    assert len(stopped) + len(failed) == 200  # every query without an answer says why
    assert stopped[0].error == f"{STOPPED} (--retrieval-max-failures 8; 0: never stop)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("max_failures", [0, 3])
def test_a_call_that_answers_starts_the_count_again(max_failures: int) -> None:
    """Failures with answers between them are not a backend that is down; 0 never stops."""

    def every_other(query: str, k: int) -> list[str]:
        if int(query[1:]) % 3 and max_failures:
            raise ValueError("no such index")
        if not max_failures:
            raise ValueError("no such index")
        return ["d1"]

    runs = run_retriever(every_other, _queries(60), 5, concurrency=1, max_failures=max_failures)
    assert not any(run.error and run.error.startswith(STOPPED[:20]) for run in runs)
    assert sum(run.error is not None for run in runs) == (40 if max_failures else 60)


@pytest.mark.timeout(30)
def test_a_sync_call_that_never_returns_is_abandoned(release: threading.Event) -> None:
    stuck = _Stuck()

    def search(query: str, k: int) -> list[str]:
        if query == "q1":
            with stuck.call():
                release.wait()  # set at teardown only: a run that waited for it would hang
        return ["d1"]

    runs = _run(search, concurrency=2, timeout=TIMEOUT)
    assert (stuck.began, stuck.returned) == (1, 0)  # abandoned, not waited for
    assert runs[1].error is not None
    assert runs[1].error.startswith("the retriever did not answer within 0.3 s")
    assert "test_misbehaving.py" in runs[1].error and "in search" in runs[1].error  # where
    assert [runs[i].error for i in (0, 2, 3)] == [None] * 3


@pytest.mark.timeout(30)
def test_a_coroutine_blocking_the_event_loop_is_abandoned_and_named(
    release: threading.Event,
) -> None:
    stuck = _Stuck()

    async def search(query: str, k: int) -> list[str]:
        if query == "q1":
            with stuck.call():
                release.wait()  # a blocking call inside async def
        await asyncio.sleep(0.01)
        return ["d1"]

    with pytest.warns(BlockingRetrieverWarning, match=r"on query 'q1' at .*in search"):
        runs = _run(search, n=8, concurrency=4, timeout=TIMEOUT)
    assert (stuck.began, stuck.returned) == (1, 0)  # abandoned, not waited for
    assert runs[1].error is not None
    assert runs[1].error.startswith(
        "the retriever blocked the event loop for more than 0.3 s (--retrieval-timeout) at "
    )
    assert "asyncio.to_thread" in runs[1].error
    # the queries stalled behind it (and the rest) ran on a fresh loop
    assert [run.error for i, run in enumerate(runs) if i != 1] == [None] * 7


@pytest.mark.timeout(30)
def test_a_coroutine_that_swallows_cancellation_is_abandoned() -> None:
    stuck = _Stuck()

    async def search(query: str, k: int) -> list[str]:
        if query == "q1":
            with stuck.call():
                while True:  # never ends: a run that awaited it would hang
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.sleep(10)
        return ["d1"]

    runs = _run(search, concurrency=2, timeout=TIMEOUT)
    assert (stuck.began, stuck.returned) == (1, 0)  # abandoned, not awaited
    assert runs[1].error is not None
    assert runs[1].error.startswith("the retriever did not answer within 0.3 s")
    assert "in search" in runs[1].error
    assert [runs[i].error for i in (0, 2, 3)] == [None] * 3


@pytest.mark.timeout(30)
def test_a_stuck_to_thread_call_is_abandoned(release: threading.Event) -> None:
    stuck = _Stuck()

    async def search(query: str, k: int) -> list[str]:
        if query == "q1":
            with stuck.call():
                await asyncio.to_thread(release.wait)
        return ["d1"]

    runs = _run(search, concurrency=2, timeout=TIMEOUT)
    assert (stuck.began, stuck.returned) == (1, 0)  # abandoned, not awaited
    assert runs[1].error is not None and "did not answer within 0.3 s" in runs[1].error
    assert [runs[i].error for i in (0, 2, 3)] == [None] * 3


@pytest.mark.timeout(30)
def test_a_blocked_loop_is_named_even_without_a_timeout() -> None:
    async def search(query: str, k: int) -> list[str]:
        if query == "q2":
            time.sleep(1.4)
        return ["d1"]

    with pytest.warns(
        BlockingRetrieverWarning, match=r"search blocked the event loop for \d+\.\d s"
    ):
        runs = _run(search)
    assert [run.error for run in runs] == [None] * 4  # slow, not wrong
    # warnings as errors: one message with the way back, not the warning raised from here
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError, match=r"(?s)blocked the event loop.*BlockingRetriever"):
            _run(search)


@pytest.mark.timeout(30)
def test_short_blocks_back_to_back_are_not_added_up_on_one_query() -> None:
    """Each call blocks the loop 1.3 s, under the 2 s deadline: no query fails, and the
    warning gives a call's own blocking time, not the whole stall since the last heartbeat."""

    async def search(query: str, k: int) -> list[str]:
        time.sleep(1.3)
        return ["d1"]

    with pytest.warns(BlockingRetrieverWarning) as caught:
        runs = _run(search, n=3, timeout=2.0)
    assert [run.error for run in runs] == [None] * 3
    assert all(run.ids == ("d1",) for run in runs)
    (warning,) = caught
    assert re.search(
        r"blocked the event loop for 1\.\d s on query 'q\d' at .*in search "
        r"\(and 2 more queries\)",  # one call's block, not the 3.9 s stall of all three
        str(warning.message),
    ), warning.message


@pytest.mark.timeout(30)
def test_a_call_is_not_timed_out_for_the_time_other_calls_blocked_the_loop() -> None:
    """Every call blocks the loop 0.4 s, then awaits: its own time is under the 1 s deadline,
    though it waits longer than that for the loop the other calls hold."""

    async def search(query: str, k: int) -> list[str]:
        time.sleep(0.4)
        await asyncio.sleep(0.01)
        return ["d1"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BlockingRetrieverWarning)
        runs = _run(search, n=12, concurrency=4, timeout=1.0)
    assert [run.error for run in runs] == [None] * 12


def test_a_well_behaved_async_retriever_gives_no_warning() -> None:
    async def search(query: str, k: int) -> list[str]:
        await asyncio.sleep(0.001)
        return ["d1"]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runs = _run(search, n=200)
    assert all(run.ids == ("d1",) for run in runs)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stuck", ["sync", "to_thread", "blocking", "swallowing"])
def test_the_process_exits_after_abandoning_a_stuck_call(tmp_path: Path, stuck: str) -> None:
    """Nothing joins or awaits an abandoned call at shutdown or at interpreter exit."""
    script = tmp_path / "run.py"
    script.write_text(
        "import asyncio, threading, time\n"
        "from pytest_retrieval.golden import GoldenQuery\n"
        "from pytest_retrieval.retrieval import run_retriever\n"
        "never = threading.Event()\n"
        "def sync(q, k):\n"
        "    never.wait()\n"
        "async def to_thread(q, k):\n"
        "    await asyncio.to_thread(never.wait)\n"
        "async def blocking(q, k):\n"
        "    time.sleep(3600)\n"
        "async def swallowing(q, k):\n"
        "    while True:\n"
        "        try:\n"
        "            await asyncio.sleep(3600)\n"
        "        except asyncio.CancelledError:\n"
        "            pass\n"
        "queries = [GoldenQuery(id='q', query='q', relevant={'d': 1})]\n"
        f"(run,) = run_retriever({stuck}, queries, 5, timeout=0.2)\n"
        "print(run.error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "0.2 s (--retrieval-timeout)" in out.stdout


# ---------------------------------------------------------------- thread and loop bound clients


@pytest.mark.timeout(30)
def test_a_sqlite_connection_from_the_fixture_thread_gets_a_fix(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "docs.db")  # made here, as a fixture would
    db.execute("create table docs (id text)")
    db.execute("insert into docs values ('d1')")

    def search(query: str, k: int) -> list[str]:
        return [row[0] for row in db.execute("select id from docs limit ?", (k,))]

    runs = _run(search, concurrency=2)
    error = runs[0].error or ""
    assert "SQLite objects created in a thread can only be used in that same thread" in error
    assert "threading.local()" in error and "check_same_thread=False" in error
    assert "--retrieval-concurrency 1" in error
    # ... and the advertised fix works: concurrency 1 without a timeout stays in this thread
    runs = _run(search, concurrency=1)
    assert [run.ids for run in runs] == [("d1",)] * 4
    db.close()


@pytest.mark.timeout(60)
def test_a_client_bound_to_the_thread_that_first_used_it_fails_the_same_on_every_run() -> None:
    """A connection opened by the retriever on its first call works on that thread only.
    The first call runs on a thread of its own, so every later call fails, run after run
    and at any size -- with one thread at a time (the ramp) it passed on a small set and
    failed a varying number of calls on a large one."""
    from pytest_retrieval.golden import GoldenQuery

    def bound_retriever(first_wait: float) -> Callable[[str, int], list[str]]:
        opened: list[sqlite3.Connection] = []

        def search(query: str, k: int) -> list[str]:
            if not opened:
                opened.append(sqlite3.connect(":memory:"))
                time.sleep(first_wait)  # loads an index: the ramp sees a waiting retriever
            elif first_wait:
                time.sleep(0.001)  # a remote call: the calls outlast the first one on 8 threads
            return [str(row[0]) for row in opened[0].execute("select 'd1'")]

        return search

    for n, first_wait in ((40, 0.0), (400, 0.0), (400, 0.0), (2000, 0.1)):
        search = bound_retriever(first_wait)
        queries = [GoldenQuery(id=f"q{i}", query=f"q{i}", relevant={"d1": 1}) for i in range(n)]
        runs = run_retriever(search, queries, 5, concurrency=8)
        failed = [run for run in runs if run.error is not None]
        assert runs[0].error is None and len(failed) == n - 1
        error = failed[0].error or ""
        assert "can only be used in that same thread" in error
        assert "the worker that made the first call" in error  # where this one was made


@pytest.mark.timeout(30)
def test_a_client_bound_to_another_event_loop_gets_a_fix() -> None:
    other = asyncio.new_event_loop()  # e.g. a pytest-asyncio fixture's loop
    made_there = other.create_future()

    async def search(query: str, k: int) -> list[str]:
        await made_there  # what aiohttp/asyncpg do with a session made on another loop
        return ["d1"]

    runs = _run(search, timeout=5)
    other.close()
    error = runs[0].error or ""
    assert "attached to a different loop" in error
    assert "create the client inside the retriever, lazily on its first call" in error


def test_a_client_created_lazily_keeps_working_in_the_next_evaluation() -> None:
    """The private loop outlives one evaluation: a lazily made client stays usable."""
    made: list[asyncio.Lock] = []

    async def search(query: str, k: int) -> list[str]:
        if not made:
            made.append(asyncio.Lock())  # bound to the running loop on first use
        async with made[0]:
            await asyncio.sleep(0)
        return ["d1"]

    for _ in range(2):  # two evaluations: a parametrized fixture, or two golden sets
        runs = _run(search, timeout=5)
        assert [run.error for run in runs] == [None] * 4


def test_progress_of_async_retrievers_is_reported() -> None:
    seen: list[tuple[int, int]] = []

    async def search(query: str, k: int) -> list[str]:
        await asyncio.sleep(0.001)
        return ["d1"]

    run_retriever(search, _queries(20), 5, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (20, 20)


# ---------------------------------------------------------------- reports


def _golden(folder: Path, n: int) -> GoldenSet:
    data = [{"id": f"q{i}", "query": f"query {i}", "relevant": ["d1", "d7"]} for i in range(n)]
    path = folder / "g.json"
    path.write_text(json.dumps({"name": "g", "k": 10, "queries": data}), encoding="utf-8")
    return load_golden(path)


def _refused(query: str, k: int) -> list[str]:
    number = int(query.split()[1])
    if number % 3 == 0:
        raise ConnectionError("refused")
    if number == 4:
        return [1]  # type: ignore[list-item]
    return ["d1", "d2", "d3", "d4", "d5"][:5]


def test_errors_are_grouped_with_the_first_traceback_of_each(tmp_path: Path) -> None:
    result = evaluate(_refused, _golden(tmp_path, 40), concurrency=4)
    groups = result.error_groups
    assert [(g.error, len(g.queries)) for g in groups] == [
        ("the retriever raised ConnectionError: refused", 14),
        (
            "hit at rank 1 has no usable id (got int 1): doc ids must be non-empty strings, never "
            "coerced (convert them with str() in the retriever); return a ranked list of hits: "
            "doc-id strings, (id, score) pairs, or dicts/objects with an 'id' or 'doc_id' (and "
            "optional 'text' and 'score')",
            1,
        ),
    ]
    assert groups[0].queries[:3] == ["q0", "q3", "q6"]
    assert groups[0].traceback is not None
    assert 'raise ConnectionError("refused")' in groups[0].traceback
    assert groups[1].traceback is None  # a contract message, not an exception

    text = failure_text(result)
    assert (
        "    14 queries: the retriever raised ConnectionError: refused (first: q0, q3, q6, ...)"
    ) in text.splitlines()
    assert "    q4: hit at rank 1 has no usable id (got int 1)" in text
    assert "raise ConnectionError" not in text
    assert "(-v shows the first traceback of each; --retrieval-report keeps them)" in text
    written = failure_text(result, kept_in="out/report.json")  # the report the run writes
    assert "(-v shows the first traceback of each; out/report.json keeps them)" in written
    verbose = failure_text(result, verbose=True)
    assert "      Traceback (most recent call last):" in verbose.splitlines()
    assert 'raise ConnectionError("refused")' in verbose
    assert "  15 of 40 retriever calls failed (scored 0):" in summary_lines(result)

    entry = result.to_dict()
    assert entry["error_groups"][0]["count"] == 14
    assert 'raise ConnectionError("refused")' in entry["error_groups"][0]["traceback"]
    again = type(result).from_dict(json.loads(json.dumps(entry)))
    assert again.error_groups == groups  # the JSON report (and xdist payloads) keep them


def test_latency_is_na_when_no_call_answered(tmp_path: Path) -> None:
    def search(query: str, k: int) -> list[str]:
        raise ConnectionError("refused")

    lines = summary_lines(evaluate(search, _golden(tmp_path, 3)))
    assert "  latency n/a (no call answered)" in lines
    assert not any("nan" in line for line in lines)


def test_errors_differing_only_in_numbers_are_one_group(tmp_path: Path) -> None:
    def search(query: str, k: int) -> list[int]:
        return [int(query.split()[1]) + 100]

    result = evaluate(search, _golden(tmp_path, 12))
    (group,) = result.error_groups
    assert len(group.queries) == 12 and not group.uniform
    assert failure_text(result).count("has no usable id") == 1
    assert "; the messages differ only in numbers)" in failure_text(result)


def test_most_queries_short_of_k_get_a_note(tmp_path: Path) -> None:
    result = evaluate(_refused, _golden(tmp_path, 40), metrics=["recall@10", "recall@5"])
    short = result.short_results
    assert short is not None
    assert (short.metric, short.k, short.short, short.answered, short.median) == (
        "recall@10",
        10,
        25,
        25,
        5.0,
    )
    note = (
        "  note: 25 of 25 queries returned fewer than 10 hits (median 5): recall@10 counts "
        "the missing ranks as misses; does the retriever honour k?"
    )
    assert note in summary_lines(result)
    assert result.to_dict()["short_results"] == {
        "metric": "recall@10",
        "k": 10,
        "queries": 25,
        "of": 25,
        "median_hits": 5.0,
    }
    full = evaluate(lambda q, k: [f"d{i}" for i in range(k)], _golden(tmp_path, 10))
    assert full.short_results is None and full.to_dict()["short_results"] is None


# ---------------------------------------------------------------- end to end


def _golden_file(pytester: pytest.Pytester, n: int) -> str:
    queries = [{"id": f"q{i}", "query": f"query {i}", "relevant": ["d1"]} for i in range(n)]
    return write_golden(pytester, {"name": "big", "k": 3, "queries": queries})


RAISING_GENERATOR = """
import pytest

def search(query, k):
    yield "d1"
    raise ConnectionError("refused")  # half-way through reading the hits

@pytest.fixture
def retriever():
    return search
"""


def test_e2e_raising_generator_finishes_grouped_and_traced(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(RAISING_GENERATOR)
    golden = _golden_file(pytester, 30)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden",
        golden,
        "--retrieval-timeout",
        "5",
        "--retrieval-report",
        "report.json",
        "--retrieval-max-failures",
        "0",  # every call made, every failure in its group
        "-p",
        "no:cacheprovider",
        timeout=SUBPROCESS_TIMEOUT,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*30 of 30 retriever calls failed; they score 0:",
            "*30 queries: reading the hits the retriever returned raised ConnectionError: "
            "refused (first: q0, q1, q2, ...)",
        ]
    )
    result.stdout.no_fnmatch_line("*did not answer within*")
    result.stdout.fnmatch_lines(["  latency n/a (no call answered)"])  # not "p50 nan ms"
    report = json.loads((pytester.path / "report.json").read_text())
    (group,) = report["evaluations"][0]["error_groups"]
    assert group["count"] == 30 and group["queries"][:2] == ["q0", "q1"]
    assert 'raise ConnectionError("refused")' in group["traceback"]
    assert "conftest.py" in group["traceback"]
    schema = resources.files("pytest_retrieval").joinpath("schema/report.schema.json")
    jsonschema.validate(report, json.loads(schema.read_text()))


HANGING = """
import time, pytest

@pytest.fixture(scope="session")
def retriever():
    def search(query, k):
        time.sleep(3600)  # a backend that does not answer
    return search
"""


def test_e2e_a_backend_that_is_down_stops_the_calls(pytester: pytest.Pytester) -> None:
    """Every call hangs: after --retrieval-max-failures timeouts in a row no further call
    is made (the run took a timeout per query); the ini key and 0 (never) work too, and a
    bad value is a usage error."""
    pytester.makeconftest(HANGING)
    golden = _golden_file(pytester, 60)
    args = ("--retrieval-golden", golden, "--retrieval-timeout", "0.3", "-p", "no:cacheprovider")
    result = pytester.runpytest_subprocess(
        *args, "--retrieval-max-failures", "4", timeout=SUBPROCESS_TIMEOUT
    )
    result.assert_outcomes(failed=1)
    # the calls made and the queries left unanswered told apart, the cause's group first
    result.stdout.fnmatch_lines(
        [
            "* of 60 retriever calls failed; the calls stopped, leaving * queries unanswered; "
            "they score 0:",
            "*queries: the retriever did not answer within 0.3 s*",
            "*queries: not answered: the calls stopped after the retriever failed 4 in a row "
            "(--retrieval-max-failures 4; 0: never stop) (first: *",
        ],
        consecutive=True,
    )
    pytester.makeini("[pytest]\nretrieval_max_failures = 3\n")
    ini = pytester.runpytest_subprocess(*args, timeout=SUBPROCESS_TIMEOUT)
    ini.stdout.fnmatch_lines(["*failed 3 in a row (--retrieval-max-failures 3; 0: never stop)*"])
    pytester.makeini("[pytest]\nretrieval_max_failures = -1\n")
    bad = pytester.runpytest_subprocess(*args, timeout=SUBPROCESS_TIMEOUT)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*ini option retrieval_max_failures = '-1': *whole number >= 0*"])
    never = pytester.runpytest_subprocess(
        *args,
        "--retrieval-max-failures",
        "0",
        "--retrieval-concurrency",
        "30",
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert "not answered" not in never.stdout.str()
    never.stdout.fnmatch_lines(["*60 queries: the retriever did not answer within 0.3 s*"])


FLAKY_THEN_DOWN = """
import pytest

@pytest.fixture(scope="session")
def retriever():
    def search(query, k):
        i = int(query.split()[-1])
        if i >= 30:
            raise ConnectionError("backend down")
        if i % 2:
            raise (ValueError, KeyError, TypeError)[i % 3]("flaky")
        return ["d1"]
    return search
"""


def test_e2e_the_failures_that_stopped_the_calls_come_first(pytester: pytest.Pytester) -> None:
    """Three kinds of flaky failure, 5 each, then the backend goes down (q29 flaky, q30 and
    q31 down: 3 in a row): the failures that stopped the calls were listed by size, after
    the flaky ones, and cut from the summary ("... and 2 more kinds"). Their kind comes
    first."""
    pytester.makeconftest(FLAKY_THEN_DOWN)
    golden = _golden_file(pytester, 60)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", golden, "--retrieval-concurrency", "1",
        "--retrieval-max-failures", "3", "--retrieval-report", "r.json", timeout=SUBPROCESS_TIMEOUT,
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*17 of 60 retriever calls failed; the calls stopped, leaving 28 queries unanswered*",
            "*2 queries: the retriever raised ConnectionError: backend down (first: q30, q31)",
        ]
    )
    groups = json.loads((pytester.path / "r.json").read_text())["evaluations"][0]["error_groups"]
    assert "ConnectionError" in groups[0]["error"]
    assert groups[-1]["error"].startswith("not answered: the calls stopped")


def test_e2e_verbose_shows_the_first_traceback_of_each_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(RAISING_GENERATOR)
    golden = _golden_file(pytester, 5)
    quiet = pytester.runpytest_subprocess("--retrieval-golden", golden, timeout=SUBPROCESS_TIMEOUT)
    quiet.stdout.fnmatch_lines(["*(-v shows the first traceback of each*"])
    assert "Traceback (most recent call last):" not in quiet.stdout.str()
    verbose = pytester.runpytest_subprocess(
        "--retrieval-golden", golden, "-v", timeout=SUBPROCESS_TIMEOUT
    )
    verbose.assert_outcomes(failed=1)
    verbose.stdout.fnmatch_lines(
        [
            "*5 queries: reading the hits*",
            "*Traceback (most recent call last):*",
            '*raise ConnectionError("refused")*',
        ]
    )


BLOCKING_ASYNC = """
import time
import pytest

async def search(query, k):
    if query == "query 1":
        time.sleep(3600)  # blocks the event loop
    return ["d1"]

@pytest.fixture
def retriever():
    return search
"""

#: the fixture and helpers of every misbehaving retriever below (each fails on query 1 only)
MISBEHAVING = """
import asyncio, threading, time
import pytest

never = threading.Event()

class Hit:
    @property
    def id(self):
        raise LookupError("no id on this hit")

@pytest.fixture
def retriever():
    return search
"""

#: case -> (search, the failure line of q1); each with a 1 s --retrieval-timeout
STUCK = {
    "blocking": (
        "async def search(query, k):\n"
        "    if query == 'query 1':\n"
        "        time.sleep(3600)  # blocks the event loop\n"
        "    return ['d1']\n",
        "q1: the retriever blocked the event loop for more than 1 s (--retrieval-timeout) at "
        "conftest.py:* in search: *",
    ),
    "to_thread": (
        "async def search(query, k):\n"
        "    if query == 'query 1':\n"
        "        await asyncio.to_thread(never.wait)\n"
        "    return ['d1']\n",
        "q1: the retriever did not answer within 1 s (--retrieval-timeout); abandoned while at "
        "conftest.py:* in search",
    ),
    "sync_never_returns": (
        "def search(query, k):\n"
        "    if query == 'query 1':\n"
        "        never.wait()\n"
        "    return ['d1']\n",
        "q1: the retriever did not answer within 1 s (--retrieval-timeout); abandoned while at "
        "conftest.py:* in search",
    ),
    "swallows_cancellation": (
        "async def search(query, k):\n"
        "    while query == 'query 1':\n"
        "        try:\n"
        "            await asyncio.sleep(3600)\n"
        "        except asyncio.CancelledError:\n"
        "            pass\n"
        "    return ['d1']\n",
        "q1: the retriever did not answer within 1 s (--retrieval-timeout); abandoned while at "
        "conftest.py:* in search",
    ),
    "sync_id_raises": (
        "def search(query, k):\n    return ['d1', Hit()] if query == 'query 1' else ['d1']\n",
        "q1: reading the hits the retriever returned raised LookupError: no id on this hit",
    ),
    "async_id_raises": (
        "async def search(query, k):\n    return ['d1', Hit()] if query == 'query 1' else ['d1']\n",
        "q1: reading the hits the retriever returned raised LookupError: no id on this hit",
    ),
    "async_generator_fails_half_way": (
        "async def search(query, k):\n"
        "    yield 'd1'\n"
        "    if query == 'query 1':\n"
        "        raise ConnectionError('refused')\n",
        "q1: reading the hits the retriever returned raised ConnectionError: refused",
    ),
}


@pytest.mark.parametrize(("search", "message"), STUCK.values(), ids=STUCK.keys())
def test_e2e_misbehaving_calls_end_the_run_and_the_process(
    pytester: pytest.Pytester, search: str, message: str
) -> None:
    """The failing query is reported as what happened; the others pass; the process exits
    soon after the 1 s deadline, whatever the abandoned call still does."""
    pytester.makeconftest(MISBEHAVING + search)
    golden = _golden_file(pytester, 6)
    # the process exits: an abandoned call runs for 3600 s or forever, and a session or an
    # interpreter exit that waited for it would outlast the subprocess timeout
    result = pytester.runpytest_subprocess(
        "--retrieval-golden",
        golden,
        "--retrieval-timeout",
        "1",
        "-p",
        "no:cacheprovider",
        timeout=SUBPROCESS_TIMEOUT,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*1 of 6 retriever calls failed; they score 0:", "    " + message])


def test_e2e_blocking_is_named_in_the_warnings_summary(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BLOCKING_ASYNC.replace("3600", "1.5"))
    golden = _golden_file(pytester, 3)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", golden, "-p", "no:cacheprovider", timeout=SUBPROCESS_TIMEOUT
    )
    result.stdout.fnmatch_lines(
        [
            "*BlockingRetrieverWarning: the async retriever search blocked the event loop for "
            "* s on query 'q1' at conftest.py:* in search*"
        ]
    )


SHORT_BLOCKS = """
import time
import pytest

async def search(query, k):
    time.sleep(1.3)  # blocks the loop, but each call for less than the timeout
    return ["d1"]

@pytest.fixture
def retriever():
    return search
"""


def test_e2e_short_blocks_back_to_back_fail_no_query(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SHORT_BLOCKS)
    golden = _golden_file(pytester, 3)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden",
        golden,
        "--retrieval-timeout",
        "2",
        "-p",
        "no:cacheprovider",
        timeout=SUBPROCESS_TIMEOUT,
    )
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*blocked the event loop for more than*")
    result.stdout.fnmatch_lines(
        [
            "*BlockingRetrieverWarning: the async retriever search blocked the event loop for "
            "1.? s on query 'q?' at conftest.py:* in search (and 2 more queries)*",
            "*recall@3*1.0000*",
        ]
    )


SQLITE_FIXTURE = """
import sqlite3
import pytest

@pytest.fixture
def retriever(tmp_path):
    db = sqlite3.connect(tmp_path / "docs.db")  # made in the fixture's thread
    db.execute("create table docs (id text)")
    db.execute("insert into docs values ('d1')")

    def search(query, k):
        return [row[0] for row in db.execute("select id from docs limit ?", (k,))]

    yield search
    db.close()
"""


def test_e2e_thread_bound_client_message_and_fix(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SQLITE_FIXTURE)
    golden = _golden_file(pytester, 4)
    result = pytester.runpytest_subprocess("--retrieval-golden", golden, timeout=SUBPROCESS_TIMEOUT)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*4 queries: the retriever raised ProgrammingError: SQLite objects created in a thread*"
            "check_same_thread=False*--retrieval-concurrency 1*"
        ]
    )
    fixed = pytester.runpytest_subprocess(
        "--retrieval-golden", golden, "--retrieval-concurrency", "1", timeout=SUBPROCESS_TIMEOUT
    )
    fixed.assert_outcomes(passed=1)


LOOP_BOUND_FIXTURE = """
import asyncio
import pytest_asyncio

@pytest_asyncio.fixture
async def retriever():
    ready = asyncio.Event()
    waiting = asyncio.ensure_future(ready.wait())  # binds the event to pytest-asyncio's loop
    await asyncio.sleep(0)

    async def search(query, k):
        await ready.wait()  # a client made in the fixture, used on the plugin's loop
        return ["d1"]

    yield search
    waiting.cancel()
"""


def test_e2e_client_bound_to_the_fixture_loop_gets_a_fix(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_asyncio")
    pytester.makeconftest(LOOP_BOUND_FIXTURE)
    golden = _golden_file(pytester, 4)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden",
        golden,
        "-p",
        "asyncio",
        "--asyncio-mode",
        "strict",
        timeout=SUBPROCESS_TIMEOUT,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*4 queries: the retriever raised RuntimeError: * is bound to a different event "
            "loop -- the client belongs to another event loop*create the client inside the "
            "retriever, lazily on its first call*"
        ]
    )


KEYBOARD_INTERRUPT = """
import pytest

def search(query, k):
    raise KeyboardInterrupt

@pytest.fixture
def retriever():
    return search
"""


def test_e2e_keyboard_interrupt_stops_the_session(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYBOARD_INTERRUPT)
    golden = _golden_file(pytester, 50)
    result = pytester.runpytest_subprocess("--retrieval-golden", golden, timeout=SUBPROCESS_TIMEOUT)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])


SLICED = """
import pytest

@pytest.fixture
def retriever():
    return lambda query, k: ["d1", "d2", "d3", "d4", "d5", "d6", "d7"][:2]  # ignores k
"""


def test_e2e_short_results_note(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SLICED)
    golden = write_golden(pytester, GOLDEN)
    result = pytester.runpytest_subprocess("--retrieval-golden", golden, timeout=SUBPROCESS_TIMEOUT)
    result.stdout.fnmatch_lines(
        [
            "*note: 4 of 4 queries returned fewer than 3 hits (median 2): recall@3 counts the "
            "missing ranks as misses; does the retriever honour k?"
        ]
    )
