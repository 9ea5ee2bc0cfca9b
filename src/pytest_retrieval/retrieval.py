"""Call the user's retriever for every golden query: sync or async, concurrent, with deadlines.

Results come back in golden order whatever order the calls finish in. Whatever the retriever
does wrong -- raise anything (any ``BaseException``, during the call or while its hits are
read: a generator failing half-way, an ``id`` property raising), overrun the timeout, block
the event loop, return something that is not a ranked list of hits -- becomes an error on that
query (it scores 0 and fails the evaluation); it never aborts the other queries and never hangs
the run. The exception is ``KeyboardInterrupt``: it stops the run, as Ctrl-C would.

Where calls run:

- sync retrievers: ``concurrency`` daemon worker threads, watched by the caller's thread; a
  call past its deadline is recorded as timed out and its thread abandoned (a fresh one takes
  over). With concurrency 1 and no timeout the calls run in the caller's own thread, so a
  client bound to the thread that made it (sqlite3) works.
- async retrievers: ``concurrency`` worker tasks on the process's private event loop
  (:func:`~pytest_retrieval._loop.shared_loop`), kept between evaluations so a client created
  lazily on the first call keeps working. A call past its deadline is recorded and cancelled
  and its task abandoned (a coroutine that swallows the cancellation is never awaited). The
  caller's thread watches the loop's heartbeat: a coroutine that blocks the loop is named in a
  :class:`BlockingRetrieverWarning`, and past the deadline the loop is abandoned and the
  queries still to answer move to a new one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import itertools
import os
import re
import sysconfig
import threading
import time
import traceback
import warnings
from collections.abc import (
    AsyncIterable,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NamedTuple, TypeVar

from ._loop import GRACE, PrivateLoop, run_private, shared_loop, thread_frames
from .golden import GoldenQuery

Retriever = Callable[..., Any]
ProgressCallback = Callable[[int, int], None]
W = TypeVar("W")  # what runs a call: a thread id or a task

DEFAULT_CONCURRENCY = 8
#: a loop blocked this long (seconds) by one call is named in a warning, timeout or not
BLOCKED_WARNING = 1.0
#: how often (seconds) the caller's thread looks at progress and the loop without a timeout
POLL = 0.2
#: longest error message kept (an HTTP error can carry a whole response body)
MAX_ERROR = 1000


class HitError(ValueError):
    """The retriever returned something that is not a ranked list of hits."""


class BlockingRetrieverWarning(RuntimeWarning):
    """An ``async def`` retriever blocked the event loop (a blocking call inside it)."""


@dataclass
class QueryRun:
    """What one retriever call gave: ranked unique ids (top k), texts, timing and any error."""

    ids: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    latency: float = 0.0  # seconds
    error: str | None = None
    duplicates: int = 0  # repeated ids dropped (each id counts at its first rank only)
    #: the exception's traceback, kept for the first error of each kind (:func:`error_key`)
    traceback: str | None = None


_RETURN_HINT = (
    "return a ranked list of hits: doc-id strings, or dicts/objects with an 'id' "
    "(and optional 'text' and 'score')"
)


def normalize_hits(raw: Any, k: int) -> QueryRun:
    """Turn whatever the retriever returned into a :class:`QueryRun` (ids cut at ``k``)."""
    if raw is None:
        raise HitError(f"the retriever returned None; {_RETURN_HINT}")
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        raise HitError(f"the retriever returned a {type(raw).__name__}; {_RETURN_HINT}")
    if type(raw) is list and all(type(hit) is str and hit for hit in raw):
        top = list(dict.fromkeys(raw))[:k]  # the common case, plain ids: 10x faster
        kept = set(top)
        return QueryRun(ids=top, duplicates=sum(hit in kept for hit in raw) - len(top))
    run = QueryRun()
    seen: set[str] = set()
    for rank, hit in enumerate(raw, start=1):
        text: Any = None
        score: Any = None
        if isinstance(hit, str):
            doc_id: Any = hit
        elif isinstance(hit, Mapping):
            doc_id, text, score = hit.get("id"), hit.get("text"), hit.get("score")
        else:
            doc_id = getattr(hit, "id", None)
            text, score = getattr(hit, "text", None), getattr(hit, "score", None)
        if not isinstance(doc_id, str) or not doc_id:
            got = f"{type(hit).__name__} {_safe_repr(hit)}" if doc_id is None else repr(doc_id)
            raise HitError(
                f"hit at rank {rank} has no usable id (got {got[:80]}): doc ids must be "
                f"non-empty strings, never coerced (convert them with str() in the retriever); "
                f"{_RETURN_HINT}"
            )
        if doc_id in seen:
            run.duplicates += 1
            continue
        if len(run.ids) >= k:
            continue  # keep scanning: a bad hit further down is still a contract violation
        seen.add(doc_id)
        run.ids.append(doc_id)
        if isinstance(text, str):
            run.texts[doc_id] = text
        if isinstance(score, int | float) and not isinstance(score, bool):
            run.scores[doc_id] = float(score)
    return run


def is_async(retriever: Retriever) -> bool:
    """True for ``async def`` functions (async generators too: streamed hits) and objects
    with such a ``__call__``."""
    call = getattr(retriever, "__call__", None)  # noqa: B004 - we want the method itself
    return any(
        inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in (retriever, call)
    )


def error_key(error: str) -> str:
    """What makes two errors "the same" when they are grouped: the message, numbers aside
    (``hit at rank 1 has no usable id (got int 17)`` and ``... (got int 4)`` are one bug)."""
    return re.sub(r"\d+", "#", error)


def run_retriever(
    retriever: Retriever,
    queries: Sequence[GoldenQuery],
    k: int,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
) -> list[QueryRun]:
    """Call ``retriever(query, k, **params)`` for every query; results in golden order.

    ``timeout`` (seconds) is a deadline for every call, sync or async: a call past it is an
    error on its query and is abandoned (never joined nor awaited). Warns with
    :class:`BlockingRetrieverWarning` when an async retriever blocked the event loop.
    """
    if not callable(retriever):
        raise TypeError(
            f"the retriever fixture returned a {type(retriever).__name__}, not a callable; "
            "return a function search(query: str, k: int) -> list of hits, or a LangChain, "
            "LlamaIndex or Haystack retriever object"
        )
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive seconds, not {timeout!r}")
    runner = _Runner(retriever, queries, k, max(1, concurrency), timeout, progress)
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
    return [runner.results[index] for index in range(len(queries))]


# ---------------------------------------------------------------------------- messages


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__} whose repr() raised>"


def _describe(exc: BaseException, reading: bool) -> str:
    """``the retriever raised ValueError: boom`` (plus how to fix it, when we know)."""
    try:
        message = str(exc)
    except Exception:
        message = "<its message could not be shown: str() raised>"
    what = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if reading:
        text = f"reading the hits the retriever returned raised {what}"
    else:
        text = f"the retriever raised {what}"
    if len(text) > MAX_ERROR:
        text = text[: MAX_ERROR - 3] + "..."
    hint = next((fix for needles, fix in _HINTS if any(n in message for n in needles)), None)
    return text if hint is None else f"{text} -- {hint}"


_HINTS = (
    (
        ("SQLite objects created in a thread can only be used in that same thread",),
        "the client was made in another thread (the fixture's) but sync retrievers are "
        "called from pytest-retrieval's worker threads: open it inside the retriever, one per "
        "thread (threading.local()), or allow sharing (sqlite3.connect(..., "
        "check_same_thread=False)), or run the calls in the test's own thread with "
        "--retrieval-concurrency 1 and no --retrieval-timeout",
    ),
    (
        (
            "attached to a different loop",
            "Event loop is closed",
            "different event loop",
        ),
        "the client belongs to another event loop (made in a fixture, e.g. an async one under "
        "pytest-asyncio) but async retrievers run on pytest-retrieval's own event loop: create "
        "the client inside the retriever, lazily on its first call (or per call with "
        "'async with'), not in the fixture",
    ),
    (
        ("There is no current event loop in thread",),
        "a sync retriever that drives an async client runs in a worker thread without an "
        "event loop: make the retriever 'async def' and await the client (created inside the "
        "retriever on its first call)",
    ),
)


def _timed_out(timeout: float, where: str) -> QueryRun:
    return QueryRun(
        latency=timeout,
        error=f"the retriever did not answer within {timeout:g} s (--retrieval-timeout)"
        + (f"; abandoned while at {where}" if where else ""),
    )


def _blocked(timeout: float, where: str, by_this_call: bool) -> QueryRun:
    who = "the retriever blocked" if by_this_call else "code outside the retriever call blocked"
    return QueryRun(
        latency=timeout,
        error=f"{who} the event loop for more than {timeout:g} s (--retrieval-timeout)"
        f"{f' at {where}' if where else ''}: a blocking call inside async def (time.sleep, "
        "requests, a sync client) stalls every query; await an async client or wrap the call "
        "in asyncio.to_thread",
    )


@functools.cache
def _library_paths() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    return tuple(os.path.join(os.path.realpath(path), "") for path in found)


_OURS = os.path.join(os.path.dirname(os.path.realpath(__file__)), "")


class _Place(NamedTuple):
    """A line of code (taken when seen: a running frame moves on)."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        """``conftest.py:12 in search`` (relative to the working directory when inside it)"""
        try:
            relative = os.path.relpath(self.file)
        except ValueError:  # another drive
            relative = ".."
        shown = self.file if relative.startswith("..") else relative
        return f"{shown}:{self.line} in {self.function}"


def _place(frames: Iterable[FrameType]) -> _Place | None:
    """Where a stuck call is (frames innermost first): the innermost frame of user code, else
    the innermost frame, inside the retriever (our own frames mark where the call began)."""
    inside = list(itertools.takewhile(lambda f: not _path(f).startswith(_OURS), frames))
    if not inside:
        return None
    libraries = _library_paths()
    frame = next((f for f in inside if not _path(f).startswith(libraries)), inside[0])
    return _Place(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def _where(frames: Iterable[FrameType]) -> str:
    """``conftest.py:12 in search`` for a message; "" when unknown."""
    return str(_place(frames) or "")


def _path(frame: FrameType) -> str:
    return os.path.realpath(frame.f_code.co_filename)


def _task_frames(task: asyncio.Task[Any]) -> list[FrameType]:
    """A suspended task's coroutine frames along its ``await`` chain, innermost first."""
    stack: list[FrameType] = []
    awaitable: Any = task.get_coro()
    while awaitable is not None:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is None:
            break
        stack.append(frame)
        awaitable = (
            getattr(awaitable, "cr_await", None)
            or getattr(awaitable, "gi_yieldfrom", None)
            or (frame.f_locals.get("coroutine") if frame.f_code is _CLOCKED else None)
        )
    return stack[::-1]


# ---------------------------------------------------------------------------- the runner


class _Runner:
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
    ) -> None:
        self.retriever = retriever
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
        self.blocked: dict[int, tuple[float, _Place | None]] = {}  # query -> (seconds, where)
        self.reported = 0
        if not queries:
            self.finished.set()

    # ------------------------------------------------------------ guarded calls

    def call_sync(self, query: GoldenQuery, started: float) -> QueryRun:
        reading = False
        try:
            raw = self.retriever(query.query, self.k, **query.params)
            if inspect.isawaitable(raw):  # a sync callable handing back a coroutine
                raw = run_private(functools.partial(_await, raw), "pytest-retrieval-call")
            reading = True
            run = normalize_hits(raw, self.k)
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
                raw = [hit async for hit in raw]
            run = normalize_hits(raw, self.k)
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
        run = QueryRun(latency=latency, error=_describe(exc, reading))
        if self.traced.setdefault(error_key(run.error or ""), run) is run:  # the first: claimed
            tb = exc.__traceback__
            run.traceback = "".join(  # from the retriever's frame on: ours is noise
                traceback.format_exception(type(exc), exc, tb.tb_next if tb else None)
            )
        return run

    def record(self, index: int, run: QueryRun) -> bool:
        """Keep ``run`` as query ``index``'s result unless it already has one."""
        if self.results.setdefault(index, run) is not run:
            self.discard(run)
            return False
        if len(self.results) == self.total:
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

    # ------------------------------------------------------------ sync: caller's thread

    def run_inline(self) -> None:
        """Concurrency 1 without a deadline: every call in the caller's thread."""
        shown = time.perf_counter()
        for index, query in enumerate(self.queries):
            started = time.perf_counter()
            self.record(index, self.call_sync(query, started))
            if self.progress is not None and started - shown > POLL:
                shown = started
                self.report()
        self.report()

    # ------------------------------------------------------------ sync: worker threads

    def run_threads(self) -> None:
        """Daemon workers pull query indices; the caller's thread watches the deadlines.

        A call that overruns the timeout cannot be killed: it is recorded as a timeout, its
        thread is abandoned (daemon, so it cannot hold up interpreter exit) and a fresh worker
        keeps the concurrency up.
        """
        running: dict[int, tuple[float, int]] = {}  # index -> (start, thread) of calls in flight
        pending = itertools.count()
        total, queries, timeout = self.total, self.queries, self.timeout

        def work() -> None:
            me = threading.get_ident()
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
                    return  # declared timed out meanwhile: this thread retires

        def spawn() -> None:
            threading.Thread(target=work, name="pytest-retrieval-worker", daemon=True).start()

        def expire() -> bool:
            assert timeout is not None
            for index, ident in _overdue(running, timeout, self.results):
                if self.record(index, _timed_out(timeout, _where(thread_frames(ident)))):
                    running.pop(index, None)
                    spawn()
            return False

        for _ in range(min(self.concurrency, total)):
            spawn()
        self.watch(self.poll(), None if timeout is None else expire)
        self.report()

    # ------------------------------------------------------------ async: private loop

    def run_async(self) -> None:
        """Worker tasks on the shared private loop; a blocked loop is left for a new one."""
        todo = list(range(self.total))
        while todo:
            loop = shared_loop("pytest-retrieval-loop")
            batch = _Batch(self, loop, todo)
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
        index, (seconds, where) = worst[0]
        more = f" (and {len(worst) - 1} more queries)" if len(worst) > 1 else ""
        name = getattr(self.retriever, "__qualname__", type(self.retriever).__qualname__)
        warning = BlockingRetrieverWarning(
            f"the async retriever {name} blocked the event loop for {seconds:.1f} s on query "
            f"{self.queries[index].id!r}{f' at {where}' if where else ''}{more}: a "
            "blocking call inside async def (time.sleep, requests, a sync database client) "
            "stalls every other query and the timeout; await an async client or wrap the "
            "call in asyncio.to_thread"
        )
        if where is None:
            warnings.warn(warning, stacklevel=3)
        else:  # shown at the blocking line, not at ours
            warnings.warn_explicit(warning, type(warning), where.file, where.line)


def _overdue(
    running: Mapping[int, tuple[float, W]], timeout: float, results: Mapping[int, QueryRun]
) -> list[tuple[int, W]]:
    """The calls in flight past their deadline that have no result yet, with their worker."""
    now = time.perf_counter()
    return [
        (index, worker)
        for index, (start, worker) in list(running.items())
        if now - start > timeout and index not in results
    ]


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class _Batch:
    """The queries still to answer, on one private loop, until they are done or it blocks."""

    def __init__(self, runner: _Runner, loop: PrivateLoop, todo: Sequence[int]) -> None:
        self.runner = runner
        self.loop = loop
        self.todo = todo
        self.pending: Iterator[int] = iter(todo)
        self.running: dict[int, tuple[float, asyncio.Task[Any]]] = {}  # calls in flight
        self.clocks: dict[int, _Clock] = {}  # every call started here, recorded or not
        self.busy = 0.0  # seconds the loop ran the steps of calls not yet recorded
        self.abandoned = False
        self.done: asyncio.Future[None] | None = None
        self.tasks: set[asyncio.Task[Any]] = set()  # asyncio keeps only weak references

    async def main(self) -> None:
        self.done = asyncio.get_running_loop().create_future()
        for _ in range(min(self.runner.concurrency, len(self.todo))):
            self.spawn()
        timeout = self.runner.timeout
        expiry = None if timeout is None else asyncio.ensure_future(self.expire(timeout))
        if not self.runner.finished.is_set():
            await self.done
        if expiry is not None:
            expiry.cancel()
        for task in self.tasks:
            task.cancel()  # only stuck, already recorded calls are left: never awaited

    def spawn(self) -> None:
        task = asyncio.ensure_future(self.work())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def wake(self) -> None:
        """From any thread: the run is over, ``main`` may return."""
        self.loop.call(self._resolve)

    def _resolve(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def work(self) -> None:
        runner, running = self.runner, self.running
        me = asyncio.current_task()
        assert me is not None
        call, record, queries = runner.call_async, runner.record, runner.queries
        for index in self.pending:
            if self.abandoned or runner.stopped:
                return
            started = time.perf_counter()
            clock = self.clocks[index] = _Clock(self, index, call(queries[index], started))
            running[index] = (started, me)
            try:
                run = await clock
            except KeyboardInterrupt as exc:
                runner.stop(exc)
                return
            running.pop(index, None)
            if self.abandoned:
                runner.discard(run)  # the loop was left: the query runs on the next one
                return
            if not record(index, run):
                return  # timed out meanwhile: this task retires

    async def expire(self, timeout: float) -> None:
        """On the loop: record calls past the deadline, cancel them, start fresh workers.

        A call's deadline leaves out the time the loop ran the other calls: one waiting for
        a loop that the others block (a sync sleep in each) is not late by its own doing.
        """
        while True:
            await asyncio.sleep(min(0.05, timeout / 4))
            deadlines = {
                index: (start + self.clocks[index].stolen(), task)
                for index, (start, task) in list(self.running.items())
            }
            for index, task in _overdue(deadlines, timeout, self.runner.results):
                if self.runner.record(index, _timed_out(timeout, _where(_task_frames(task)))):
                    del self.running[index]
                    task.cancel()
                    self.spawn()

    def check(self) -> bool:
        """From the caller's thread: is the loop blocked? True once it is abandoned.

        A call is charged only for the time it has blocked the loop itself: since the last
        heartbeat or since its own start, whichever is later. Short blocks back to back (a
        sync sleep in every call) are each under the limit, whatever they add up to.
        """
        stale = self.loop.blocked_for()
        timeout = self.runner.timeout
        limit = BLOCKED_WARNING if timeout is None else min(BLOCKED_WARNING, timeout)
        if stale <= limit:
            return False
        frames = self.loop.frames()
        culprit = _serving(frames, self)
        place = _place(frames)
        where = str(place or "")
        if culprit is not None:
            now = time.perf_counter()
            clock = self.clocks.get(culprit)
            started = now if clock is None else clock.started
            stale = min(stale, now - started)
            seen = self.runner.blocked.get(culprit, (0.0, None))[0]
            if stale > limit:
                self.runner.blocked[culprit] = (max(seen, stale), place)
        if timeout is None or stale <= timeout:
            return False
        self.abandoned = True
        self.loop.abandon()
        if culprit is not None:
            self.runner.record(culprit, _blocked(timeout, where, by_this_call=True))
        else:  # every call in flight was stalled by it: none can be told apart
            for index in list(self.running):
                self.runner.record(index, _blocked(timeout, where, by_this_call=False))
        return True


class _Clock:
    """One async call, awaited step by step: how long its steps held the loop (``own``), so
    that its deadline can leave out the time the loop ran the other calls (:meth:`stolen`)."""

    def __init__(self, batch: _Batch, index: int, coroutine: Coroutine[Any, Any, QueryRun]) -> None:
        self.batch = batch
        self.index = index
        self.coroutine = coroutine
        self.started = time.perf_counter()
        self.busy_at_start = batch.busy
        self.own = 0.0

    def stolen(self) -> float:
        """Seconds the loop ran other calls (not yet recorded) since this one started."""
        return self.batch.busy - self.busy_at_start - self.own

    def __await__(self) -> Generator[Any, Any, QueryRun]:
        """What ``await coroutine`` does (values and exceptions passed both ways), timed."""
        coroutine, batch, results = self.coroutine, self.batch, self.batch.runner.results
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            began = time.perf_counter()
            try:
                yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as stop:
                value: QueryRun = stop.value
                return value
            finally:
                spent = time.perf_counter() - began
                self.own += spent
                if self.index not in results:  # an abandoned call delays no deadline
                    batch.busy += spent
            try:
                sent, thrown = (yield yielded), None
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # a cancellation: passed on, as await does
                sent, thrown = None, exc


_CLOCKED = _Clock.__await__.__code__


def _serving(frames: Sequence[FrameType], batch: _Batch) -> int | None:
    """The query one of ``batch``'s worker tasks is answering in this stack, if one is."""
    for frame in frames:
        if frame.f_code is _Batch.work.__code__ and frame.f_locals.get("self") is batch:
            index = frame.f_locals.get("index")
            return index if isinstance(index, int) else None
    return None
