"""Private event loops on daemon threads that can always be left behind.

Retriever and judge coroutines run on a loop of their own in a helper thread: that works
whether or not the caller already runs an event loop (pytest-asyncio, an async test calling
``evaluate``, a notebook), where ``asyncio.run`` would fail. Unlike ``asyncio.run``, nothing
here can wait forever on user code: shutting a loop down cancels its leftover tasks and waits
for them only briefly, the threads behind ``asyncio.to_thread`` / ``run_in_executor(None, ...)``
are daemons that nobody joins (``concurrent.futures`` would join a stuck one at interpreter
exit), and a loop that user code blocks (``time.sleep`` inside ``async def``) is visible from
outside (:meth:`PrivateLoop.blocked_for`, :meth:`PrivateLoop.frames`) and can be abandoned.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from types import FrameType
from typing import Any, ParamSpec, TypeVar

from .stacks import thread_frames

T = TypeVar("T")
P = ParamSpec("P")

#: seconds between heartbeats: how fresh ``blocked_for`` is
HEARTBEAT = 0.05
#: seconds leftover tasks get to finish after they are cancelled at shutdown
GRACE = 0.5

_Job = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonExecutor(ThreadPoolExecutor):
    """The default executor of a private loop: daemon threads that are never joined.

    asyncio only accepts a ``ThreadPoolExecutor`` here, so this is one by type; it runs its own
    pool. An idle thread takes the next job, else a new one starts; a call that never returns
    keeps its thread and is left there (a daemon cannot hold up interpreter exit).
    """

    def __init__(self, name: str) -> None:
        super().__init__(max_workers=1, thread_name_prefix=name)  # the base pool stays unused
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._spawned = 0
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[T] = Future()
        self._jobs.put((future, fn, args, kwargs))
        if not self._idle.acquire(blocking=False):
            self._spawned += 1
            name = f"{self._name}-executor-{self._spawned}"
            threading.Thread(target=self._serve, name=name, daemon=True).start()
        return future

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args, kwargs = job
            if future.set_running_or_notify_cancel():
                try:
                    value = fn(*args, **kwargs)
                except BaseException as exc:  # as concurrent.futures does: the caller sees it
                    future.set_exception(exc)
                else:
                    future.set_result(value)
            del job, future, fn, args, kwargs  # no references kept while idle
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Idle threads leave; busy ones finish their job first. Never waits, whatever
        ``wait`` says: a stuck call must not stall the shutdown."""
        self._closed = True
        for _ in range(self._spawned):
            self._jobs.put(None)


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Exception handler of a loop left behind: its pending tasks are dropped silently."""


class PrivateLoop:
    """An event loop running on a daemon thread until :meth:`close` or :meth:`abandon`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(DaemonExecutor(name))
        self.beat = time.perf_counter()
        self.abandoned = False
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    @property
    def usable(self) -> bool:
        """Running and not abandoned (a fork leaves the child a loop without its thread)."""
        return not self.abandoned and self.thread.is_alive() and not self.loop.is_closed()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``coroutine`` on the loop; its result (or exception) arrives in the future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the loop soon (from any thread); a no-op once it is closed."""
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            self.loop.call_soon_threadsafe(callback)

    def blocked_for(self) -> float:
        """Seconds since the loop last got round to its heartbeat (0 once it has stopped)."""
        if not self.thread.is_alive():
            return 0.0
        return time.perf_counter() - self.beat

    def frames(self) -> list[FrameType]:
        """The loop thread's Python stack, innermost frame first."""
        return thread_frames(self.thread.ident or -1)

    def close(self, timeout: float = 2 * GRACE + 1.0) -> None:
        """Stop the loop and wait (at most ``timeout`` s) for its bounded shutdown."""
        self.call(self.loop.stop)
        self.thread.join(timeout)

    def abandon(self) -> None:
        """Leave the loop: it stops and shuts down whenever user code lets it; nobody waits."""
        self.abandoned = True
        self.call(self.loop.stop)

    def _main(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)  # as asyncio.run does: for code calling get_event_loop()
        loop.call_soon(self._heartbeat)
        loop.call_soon(self._ready.set)
        try:
            loop.run_forever()
        finally:
            try:
                self._shut_down()
            finally:
                asyncio.set_event_loop(None)

    def _heartbeat(self) -> None:
        self.beat = time.perf_counter()
        self.loop.call_later(HEARTBEAT, self._heartbeat)

    def _shut_down(self) -> None:
        """Cancel what is left, give it ``GRACE`` s, close: never waits on user code longer."""
        loop = self.loop
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        pending: set[asyncio.Task[Any]] = set()
        try:
            if left:
                _, pending = loop.run_until_complete(asyncio.wait(left, timeout=GRACE))
            for task in left:
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: no "exception was never retrieved" noise
            if not pending:
                closing = loop.create_task(loop.shutdown_asyncgens())
                _, pending = loop.run_until_complete(asyncio.wait({closing}, timeout=GRACE))
        except BaseException:  # a task broke the loop once more (KeyboardInterrupt, SystemExit)
            pending = {*pending, *left}
        if pending:
            loop.set_exception_handler(_quiet)  # they are dropped, as asyncio.run would not
        loop.close()  # its executor shuts down without waiting (DaemonExecutor)


_shared: PrivateLoop | None = None
_shared_lock = threading.Lock()


def shared_loop(name: str) -> PrivateLoop:
    """The process's loop for retriever coroutines, kept between evaluations.

    A client the retriever creates lazily on its first call is bound to this loop and keeps
    working in the next evaluation. A new loop replaces it only after it was abandoned
    (blocked past a deadline) or died.
    """
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.usable:
            _shared = PrivateLoop(name)
        return _shared


async def awaited(awaitable: Awaitable[T]) -> T:
    """A coroutine of any awaitable (a future, a custom awaitable): what a loop can run."""
    return await awaitable


def run_private(make: Callable[[], Coroutine[Any, Any, T]], name: str) -> T:
    """Run ``make()`` to completion on a fresh private loop, then shut that loop down."""
    private = PrivateLoop(name)
    try:
        return private.submit(make()).result()
    finally:
        private.close()
