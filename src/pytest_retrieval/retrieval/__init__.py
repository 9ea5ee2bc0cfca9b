"""Call the user's retriever for every golden query: sync or async, concurrent, with deadlines.

Results come back in golden order whatever order the calls finish in. Whatever the retriever
does wrong -- raise anything (any ``BaseException``, during the call or while its hits are
read: a generator failing half-way, an ``id`` property raising), overrun the timeout, block
the event loop, return something that is not a ranked list of hits -- becomes an error on that
query (it scores 0 and fails the evaluation); it never aborts the other queries and never hangs
the run. The exception is ``KeyboardInterrupt``: it stops the run, as Ctrl-C would.

Where calls run:

- sync retrievers: up to ``concurrency`` daemon worker threads, watched by the caller's
  thread, which sets their number (:mod:`~.ramp`): one, and more only while
  more make the calls finish faster -- all of them at once for a retriever that waits on the
  network, one for a retriever computing under the GIL, where more threads only take turns
  and cost time. A call past its deadline is recorded as timed out and its thread abandoned
  (a fresh one takes over). With concurrency 1 and no timeout the calls run in the caller's
  own thread, so a client bound to the thread that made it (sqlite3) works.
- async retrievers: ``concurrency`` worker tasks on the process's private event loop
  (:func:`~.._internal.loop.shared_loop`), kept between evaluations so a client created
  lazily on the first call keeps working. A call past its deadline is recorded and cancelled
  and its task abandoned (a coroutine that swallows the cancellation is never awaited). The
  caller's thread watches the loop's heartbeat: a coroutine that blocks the loop is named in a
  :class:`BlockingRetrieverWarning`, and past the deadline the loop is abandoned and the
  queries still to answer move to a new one (:mod:`~pytest_retrieval.retrieval.async_calls`).

What a call gave, and the message of each way it can fail, is :mod:`~pytest_retrieval.hits`;
where a stuck call is stuck, :mod:`~pytest_retrieval._internal.stacks`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import inspect
import itertools
import threading
import time
import warnings
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from .._internal.stacks import Place, format_traceback, thread_frames, where
from ..errors import warning_made_error
from ..golden import GoldenQuery
from ..hits import (
    HitError,
    QueryRun,
    describe_error,
    error_key,
    normalize_hits,
    read_limit,
    stopped_calls,
    timed_out,
)
from ..settings import DEFAULT_CONCURRENCY, DEFAULT_MAX_FAILURES
from .batches import BatchRetriever, run_batches
from .ramp import Ramp

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_FAILURES",
    "BlockingRetrieverWarning",
    "ProgressCallback",
    "Retriever",
    "Runner",
    "is_async",
    "run_retriever",
]

Retriever = Callable[..., Any]
ProgressCallback = Callable[[int, int], None]
W = TypeVar("W")  # what runs a call: a thread id or a task

#: how often (seconds) the caller's thread looks at progress and the loop without a timeout
POLL = 0.2
#: how often (seconds) it looks at the worker threads' progress, to set their number
RAMP_POLL = 0.05


class BlockingRetrieverWarning(RuntimeWarning):
    """An ``async def`` retriever blocked the event loop (a blocking call inside it)."""


def is_async(retriever: Retriever) -> bool:
    """True for ``async def`` functions (async generators too: streamed hits) and objects
    with such a ``__call__``."""
    call = getattr(retriever, "__call__", None)  # noqa: B004 - we want the method itself
    return any(
        inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in (retriever, call)
    )


def run_retriever(
    retriever: Retriever,
    queries: Sequence[GoldenQuery],
    k: int,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
    ranks: bool = False,
    max_failures: int = DEFAULT_MAX_FAILURES,
) -> list[QueryRun]:
    """Call ``retriever(query, k, **params)`` for every query; results in golden order.

    ``timeout`` (seconds) is a deadline for every call, sync or async: a call past it is an
    error on its query and is abandoned (never joined nor awaited). After ``max_failures``
    failed calls in a row (0: never) no further call is made: a backend that is down
    would otherwise cost a timeout for every query. Warns with
    :class:`BlockingRetrieverWarning` when an async retriever blocked the event loop.
    ``ranks``: find where each query's judged docs came back (:attr:`QueryRun.ranks`) as each
    call returns, when its hits are still in the CPU's cache (100,000 x 100 hits: about 0.1 s
    instead of 0.85 s for the same search afterwards).
    """
    if not callable(retriever):
        raise TypeError(
            f"the retriever fixture returned a {type(retriever).__name__}, not a callable; "
            "return a function search(query: str, k: int) -> list of hits, or a LangChain, "
            "LlamaIndex or Haystack retriever object"
        )
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive seconds, not {timeout!r}")
    if isinstance(retriever, BatchRetriever):
        return run_batches(
            retriever,
            queries,
            k,
            timeout=timeout,
            progress=progress,
            ranks=ranks,
            max_failures=max_failures,
        )
    runner = Runner(
        retriever, queries, k, max(1, concurrency), timeout, progress, ranks, max_failures
    )
    try:
        if is_async(retriever):
            runner.run_async()
        elif runner.concurrency == 1 and timeout is None:
            runner.run_inline()
        else:
            runner.run_threads()
    finally:  # workers take no further query, even when the caller was interrupted
        runner.stopped = True
        runner.finish()
    runner.warn_blocked()
    if runner.interrupt is not None:
        raise runner.interrupt
    if runner.tripped:  # the queries not called, or abandoned in flight
        return [runner.results.get(i) or stopped_calls(max_failures) for i in range(len(queries))]
    return [runner.results[index] for index in range(len(queries))]


class Runner:
    """One ``run_retriever`` call: the guarded calls, the results, the caller's watch.

    No lock on the hot path: ``next()`` on a shared counter and ``dict.setdefault`` are atomic
    in CPython, so a worker and the watchdog can race to record a query and exactly one wins.
    (A lock here costs more than a fast in-memory retriever's whole call.)
    """

    def __init__(
        self,
        retriever: Retriever,
        queries: Sequence[GoldenQuery],
        k: int,
        concurrency: int,
        timeout: float | None,
        progress: ProgressCallback | None,
        ranks: bool = False,
        max_failures: int = 0,
    ) -> None:
        self.retriever = retriever
        self.ranks = ranks
        self.max_failures = max_failures  # failed calls in a row that stop the calls (0: never)
        self.queries = queries
        self.k = k
        self.total = len(queries)
        self.concurrency = concurrency
        self.timeout = timeout
        self.progress = progress
        self.results: dict[int, QueryRun] = {}
        self.finished = threading.Event()
        self.wake: Callable[[], None] | None = None  # also tells the async main coroutine
        self.stopped = False
        self.interrupt: BaseException | None = None
        self.traced: dict[str, QueryRun] = {}  # error kind -> the run that keeps a traceback
        self.blocked: dict[int, tuple[float, Place | None]] = {}  # query -> (seconds, where)
        self.reported = 0
        self.failing = 0  # failed calls since the last answer (workers race: about right)
        self.tripped = False  # max_failures reached: nothing more is called or recorded
        if not queries:
            self.finished.set()

    # ------------------------------------------------------------ guarded calls

    def call_sync(self, query: GoldenQuery, started: float) -> QueryRun:
        reading = False
        try:
            raw = self.retriever(query.query, self.k, **query.params)
            if inspect.isawaitable(raw):  # a sync callable handing back a coroutine
                raw = await_privately(raw)
            reading = True
            run = normalize_hits(raw, self.k, query.relevant if self.ranks else None)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # even SystemExit: a worker that dies would hang the run
            return self.failed(exc, started, reading)
        run.latency = time.perf_counter() - started
        return run

    async def call_async(self, query: GoldenQuery, started: float) -> QueryRun:
        reading = False
        try:
            raw = self.retriever(query.query, self.k, **query.params)
            if inspect.isawaitable(raw):
                raw = await raw
            reading = True
            if isinstance(raw, AsyncIterable):  # an async generator streaming its hits
                raw = await read_stream(raw, read_limit(self.k))
            run = normalize_hits(raw, self.k, query.relevant if self.ranks else None)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # CancelledError too: we only cancel recorded queries
            return self.failed(exc, started, reading)
        run.latency = time.perf_counter() - started
        return run

    def failed(self, exc: BaseException, started: float, reading: bool) -> QueryRun:
        latency = time.perf_counter() - started
        if reading and isinstance(exc, HitError):
            return QueryRun(latency=latency, error=str(exc))  # our contract message, no trace
        run = QueryRun(latency=latency, error=describe_error(exc, reading))
        if self.traced.setdefault(error_key(run.error or ""), run) is run:  # the first: claimed
            tb = exc.__traceback__
            # from the retriever's frame on (ours is noise); parses nothing (see there)
            run.traceback = format_traceback(exc, tb.tb_next if tb else None)
        return run

    def record(self, index: int, run: QueryRun) -> bool:
        """Keep ``run`` as query ``index``'s result unless it already has one (or the calls
        stopped on failures in a row: what comes after is said not answered)."""
        if self.tripped or self.results.setdefault(index, run) is not run:
            self.discard(run)
            return False
        self.failing = 0 if run.error is None else self.failing + 1
        if self.max_failures and self.failing >= self.max_failures:
            self.tripped = self.stopped = True
            self.finish()
        elif len(self.results) == self.total:
            self.finish()
        return True

    def discard(self, run: QueryRun) -> None:
        """``run`` is not kept: the next error of its kind keeps the traceback instead."""
        key = error_key(run.error or "")
        if run.traceback is not None and self.traced.get(key) is run:
            del self.traced[key]

    def finish(self) -> None:
        self.finished.set()
        if self.wake is not None:
            self.wake()

    def stop(self, exc: BaseException) -> None:
        """A KeyboardInterrupt from the retriever: no further calls, re-raised by the caller."""
        self.interrupt = exc
        self.stopped = True
        self.finish()

    # ------------------------------------------------------------ caller's watch

    def watch(self, poll: float, check: Callable[[], bool] | None = None) -> bool:
        """Wait for the last result, reporting progress; True when ``check`` says give up."""
        while not self.finished.wait(poll):
            if check is not None and check():
                return True
            self.report()
        return False

    def report(self) -> None:
        if self.progress is not None and len(self.results) != self.reported:
            self.reported = len(self.results)
            self.progress(self.reported, self.total)

    def poll(self) -> float:
        return POLL if self.timeout is None else min(0.05, self.timeout / 4)

    def overdue(self, running: Mapping[int, tuple[float, W]]) -> list[tuple[int, W]]:
        """The calls in flight (query -> start, worker) past the timeout that have no result
        yet, with their worker."""
        assert self.timeout is not None
        now = time.perf_counter()
        return [
            (index, worker)
            for index, (start, worker) in list(running.items())
            if now - start > self.timeout and index not in self.results
        ]

    # ------------------------------------------------------------ sync: caller's thread

    def run_inline(self) -> None:
        """Concurrency 1 without a deadline: every call in the caller's thread."""
        shown = time.perf_counter()
        for index, query in enumerate(self.queries):
            if self.stopped:
                break
            started = time.perf_counter()
            self.record(index, self.call_sync(query, started))
            if self.progress is not None and started - shown > POLL:
                shown = started
                self.report()
        self.report()

    # ------------------------------------------------------------ sync: worker threads

    def run_threads(self) -> None:
        """Daemon workers pull query indices; the caller's thread watches the deadlines and
        sets how many workers run (:class:`~.ramp.Ramp`: one, more while more
        make the calls go faster, at most ``concurrency``).

        A call that overruns the timeout cannot be killed: it is recorded as a timeout, its
        thread is abandoned (daemon, so it cannot hold up interpreter exit) and a fresh worker
        takes its place. A worker told to stop leaves after its call.

        When more than one worker may run, the first call runs alone, on a thread of its own,
        which then hands over to a new one and idles till the end (so that no new thread
        gets its id, which a client's check would take for the same thread): a client bound
        to the thread that made it or first used it (sqlite3) fails every later call, on
        every run -- not only the calls that the ramp happens to put on a second thread,
        fewer or more from one run to the next. The ramp starts watching after that call
        (which may load an index or open a connection: not the calls' pace).
        """
        running: dict[int, tuple[float, int]] = {}  # index -> (start, thread) of calls in flight
        pending = itertools.count()
        total, queries, timeout = self.total, self.queries, self.timeout
        clocks = WorkerClocks()
        ramp = Ramp(self.concurrency, time.perf_counter(), 0, clocks.total())
        counts = threading.Lock()
        alive = 0  # workers that are not abandoned and have not left
        solo = self.concurrency > 1  # the first call is yet to run on a thread of its own
        watching = not solo  # the ramp has started watching the calls

        def work() -> None:
            key = clocks.register()
            try:
                serve(threading.get_ident())
            finally:
                clocks.leave(key)

        def serve(me: int) -> None:
            nonlocal alive, solo
            call, record = self.call_sync, self.record
            for index in pending:
                if index >= total or self.stopped:
                    return
                started = time.perf_counter()
                running[index] = (started, me)
                try:
                    run = call(queries[index], started)
                except KeyboardInterrupt as exc:
                    self.stop(exc)
                    return
                running.pop(index, None)
                if not record(index, run):
                    return  # declared timed out meanwhile: replaced, this thread retires
                if solo:  # the first call ran alone on this thread: a new one takes its place
                    solo = False
                    start()
                    self.finished.wait()  # alive till the end: no new thread takes its id
                    return
                if alive > ramp.workers:  # fewer workers wanted: one leaves
                    with counts:
                        if alive > ramp.workers:
                            alive -= 1
                            return

        def start() -> None:
            threading.Thread(target=work, name="pytest-retrieval-worker", daemon=True).start()

        def spawn(n: int = 1) -> None:
            nonlocal alive
            with counts:
                alive += n
            for _ in range(n):
                start()

        def tick() -> bool:
            nonlocal alive, watching, solo
            if timeout is not None:
                for index, ident in self.overdue(running):
                    if self.record(index, timed_out(timeout, where(thread_frames(ident)))):
                        running.pop(index, None)
                        with counts:
                            alive -= 1  # the stuck thread is left behind ...
                        # the first call, which ran alone, will not hand over (its thread
                        # stays, stuck: no new thread takes its id); else every next call
                        # would run alone too, one timeout after another
                        solo = False
                        spawn()  # ... and a fresh one takes its place
            if solo:
                return False  # the first call runs alone
            if not watching:
                watching = True
                ramp.start(time.perf_counter(), len(self.results), clocks.total())
            wanted = ramp.update(time.perf_counter(), len(self.results), clocks.total())
            left = total - len(self.results)
            if alive < min(wanted, left):
                spawn(min(wanted, left) - alive)
            return False

        spawn()
        self.watch(RAMP_POLL if timeout is None else self.poll(), tick)
        self.report()

    # ------------------------------------------------------------ async: private loop

    def run_async(self) -> None:
        """Worker tasks on the shared private loop; a blocked loop is left for a new one."""
        from .._internal.loop import GRACE, shared_loop  # asyncio: imported when something is async
        from .async_calls import Batch

        todo = list(range(self.total))
        while todo:
            loop = shared_loop("pytest-retrieval-loop")
            batch = Batch(self, loop, todo)
            self.wake = batch.wake
            main = loop.submit(batch.main())
            if not self.watch(self.poll(), batch.check):
                # main returns once woken, unless something blocks the loop again right now
                if concurrent.futures.wait([main], timeout=GRACE).done:
                    main.result()  # our own errors surface here
                break
            todo = [index for index in todo if index not in self.results]
        self.report()

    def warn_blocked(self) -> None:
        """Name the queries whose calls blocked the event loop."""
        if not self.blocked:
            return
        worst = sorted(self.blocked.items(), key=lambda item: -item[1][0])
        index, (seconds, stuck) = worst[0]
        more = f" (and {len(worst) - 1} more queries)" if len(worst) > 1 else ""
        name = getattr(self.retriever, "__qualname__", type(self.retriever).__qualname__)
        warning = BlockingRetrieverWarning(
            f"the async retriever {name} blocked the event loop for {seconds:.1f} s on query "
            f"{self.queries[index].id!r}{f' at {stuck}' if stuck else ''}{more}: a "
            "blocking call inside async def (time.sleep, requests, a sync database client) "
            "stalls every other query and the timeout; await an async client or wrap the "
            "call in asyncio.to_thread"
        )
        with warning_made_error(str(warning), f"{__name__}.{type(warning).__name__}"):
            if stuck is None:
                warnings.warn(warning, stacklevel=3)
            else:  # shown at the blocking line, not at ours
                warnings.warn_explicit(warning, type(warning), stuck.file, stuck.line)


async def read_stream(stream: AsyncIterable[Any], limit: int) -> list[Any]:
    """The first ``limit`` hits an async iterable streams (:func:`~.hits.read_limit`; an
    endless one is not read to the end); an async generator is closed after them."""
    hits: list[Any] = []
    try:
        if limit > 0:
            async for hit in stream:
                hits.append(hit)
                if len(hits) >= limit:
                    break
    finally:
        if inspect.isasyncgen(stream):  # its cleanup runs now, on this loop
            await stream.aclose()
    return hits


def await_privately(awaitable: Awaitable[Any]) -> Any:
    """What a sync call's awaitable gives, awaited on a private loop of its own (asyncio is
    imported only for a retriever that needs it: 30 ms of every run otherwise)."""
    from .._internal.loop import awaited, run_private

    return run_private(functools.partial(awaited, awaitable), "pytest-retrieval-call")


class WorkerClocks:
    """The CPU time the worker threads have used, read from the caller's thread (no cost per
    call): each worker's own CPU clock, its last value kept once it has left. Workers are
    told apart by a number of their own, not their thread id, which a new thread may reuse.
    Where threads have no clock of their own to read (``time.pthread_getcpuclockid``
    missing), the process's CPU time, which also counts other threads (a BLAS pool spinning
    after numpy work used 36 ms of CPU in 50 ms here)."""

    def __init__(self) -> None:
        self.numbers = itertools.count()
        self.clocks: dict[int, int] = {}  # worker -> its thread's CPU clock, while it runs
        self.spent: dict[int, float] = {}  # worker -> its last reading (final once it left)

    def register(self) -> int:
        """From the worker itself, while its thread id is surely valid: its number."""
        number = next(self.numbers)
        self.spent[number] = 0.0
        clock_of = getattr(time, "pthread_getcpuclockid", None)
        if clock_of is not None:
            self.clocks[number] = clock_of(threading.get_ident())
        return number

    def leave(self, number: int) -> None:
        """From the worker itself, as it returns."""
        self.spent[number] = time.thread_time()
        self.clocks.pop(number, None)

    def total(self) -> float:
        if not hasattr(time, "pthread_getcpuclockid"):
            return time.process_time()
        for number, clock in list(self.clocks.items()):
            with contextlib.suppress(OSError):  # a gone thread's clock is refused, not misread
                self.spent[number] = time.clock_gettime(clock)
        return sum(self.spent.values())
