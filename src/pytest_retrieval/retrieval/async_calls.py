"""Async retriever calls on the private event loop, with deadlines and a blocked-loop watch.

One :class:`Batch` is the queries still to answer on one loop: ``concurrency`` worker tasks
pull them, and a task on the loop records the calls past their deadline and cancels them.
A call's deadline leaves out the time the loop spent running the other calls (each call is
awaited through a :class:`_Clock` that times its steps). From the caller's thread
:meth:`Batch.check` watches the loop's heartbeat: a call blocking the loop is charged with it,
and past the deadline the loop is abandoned and the queries left move to a new batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Generator, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from .._internal.loop import PrivateLoop
from .._internal.stacks import place, where
from ..hits import QueryRun, blocked_loop, timed_out

if TYPE_CHECKING:
    from . import Runner

#: a loop blocked this long (seconds) by one call is named in a warning, timeout or not
BLOCKED_WARNING = 1.0


class Batch:
    """The queries still to answer, on one private loop, until they are done or it blocks."""

    def __init__(self, runner: Runner, loop: PrivateLoop, todo: Sequence[int]) -> None:
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
            for index, task in self.runner.overdue(deadlines):
                if self.runner.record(index, timed_out(timeout, where(_task_frames(task)))):
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
        stuck = place(frames)
        shown = str(stuck or "")
        if culprit is not None:
            now = time.perf_counter()
            clock = self.clocks.get(culprit)
            started = now if clock is None else clock.started
            stale = min(stale, now - started)
            seen = self.runner.blocked.get(culprit, (0.0, None))[0]
            if stale > limit:
                self.runner.blocked[culprit] = (max(seen, stale), stuck)
        if timeout is None or stale <= timeout:
            return False
        self.abandoned = True
        self.loop.abandon()
        if culprit is not None:
            self.runner.record(culprit, blocked_loop(timeout, shown, by_this_call=True))
        else:  # every call in flight was stalled by it: none can be told apart
            for index in list(self.running):
                self.runner.record(index, blocked_loop(timeout, shown, by_this_call=False))
        return True


class _Clock:
    """One async call, awaited step by step: how long its steps held the loop (``own``), so
    that its deadline can leave out the time the loop ran the other calls (:meth:`stolen`)."""

    def __init__(self, batch: Batch, index: int, coroutine: Coroutine[Any, Any, QueryRun]) -> None:
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


def _serving(frames: Sequence[FrameType], batch: Batch) -> int | None:
    """The query one of ``batch``'s worker tasks is answering in this stack, if one is."""
    for frame in frames:
        if frame.f_code is Batch.work.__code__ and frame.f_locals.get("self") is batch:
            index = frame.f_locals.get("index")
            return index if isinstance(index, int) else None
    return None


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
