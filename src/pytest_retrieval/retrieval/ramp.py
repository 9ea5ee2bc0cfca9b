"""How many worker threads a sync retriever gets: one, and more only while more help.

Threads help a retriever that waits (a remote vector database, an HTTP API): its calls
overlap. They do not help one that computes in Python (an in-memory index, numpy scoring):
under the GIL only one thread runs at a time, and several threads taking turns cost more
than one alone (a numpy retriever at 8 threads took 2.2x the time of one: the GIL changes
hands at every numpy call). Which kind a retriever is cannot be known before it runs, so
:class:`Ramp` watches it, from the caller's thread, on what the process does:

- start with one worker. When the process used less than a quarter of a CPU while that
  worker called the retriever, the calls wait: take every thread allowed at once (a quarter,
  not a half: a busy machine can starve a computing process of half its CPU);
- otherwise double the workers as long as each doubling makes the calls finish at least a
  quarter faster, and fall back to the last count that did when one does not. Calls that
  mostly compute (three quarters of a CPU and more on one worker) keep a doubling only when
  the workers then compute in parallel too, each using three quarters of a CPU (C code that
  releases the GIL, a free-threaded Python): under the GIL they share one CPU, and a
  speed-up measured then is the first calls' warming up (seen here: 1 -> 4 workers for a
  retriever in pure Python, 4x its time in calls);
- every :data:`RECHECK` seconds, start over from one worker, whatever the count reached: a
  first look can be wrong (the first calls wait for a cache or a connection pool to fill,
  then the calls compute), and a retriever can change. (A first call alone that loads an
  index is not looked at: the caller starts the ramp after it, :meth:`Ramp.start`.)

Pure: the caller measures (monotonic seconds, calls finished, process CPU seconds) and
sets the number of workers it is told.
"""

from __future__ import annotations

from dataclasses import dataclass

#: a window's least length (seconds) before the CPU share is read
MIN_WINDOW = 0.05
#: a throughput window's least length (seconds) and calls per worker
MIN_THROUGHPUT_WINDOW = 0.2
MIN_CALLS_PER_WORKER = 8
#: the least speed-up that keeps a doubling of the workers
GAIN = 1.25
#: below this share of one CPU while one worker calls, the calls are waiting, not computing
WAITING = 0.25
#: from this share of one CPU per worker, the calls compute (and more workers must too)
COMPUTING = 0.75
#: seconds between two looks at a count that has settled
RECHECK = 5.0


@dataclass
class _Window:
    started: float
    done: int
    cpu: float


class Ramp:
    """The number of worker threads to keep for a run of at most ``limit`` at once."""

    def __init__(self, limit: int, now: float, done: int = 0, cpu: float = 0.0) -> None:
        self.limit = max(1, limit)
        self.start(now, done, cpu)

    def start(self, now: float, done: int = 0, cpu: float = 0.0) -> None:
        """Look from here on, from one worker (what came before is not the calls' pace:
        a first call that loaded an index)."""
        self.workers = 1
        self.window = _Window(now, done, cpu)
        self.previous: tuple[int, float] | None = None  # (workers, calls/s) before a doubling
        self.computing = False  # the calls kept one CPU busy on one worker
        self.settled_at: float | None = None if self.limit > 1 else now

    def update(self, now: float, done: int, cpu: float) -> int:
        """The workers to keep, given the time, the calls finished so far and the process's
        CPU time so far."""
        if self.settled_at is not None:
            if self.limit == 1 or now - self.settled_at < RECHECK:
                return self.workers
            self.settled_at = None  # look again, from one worker
            self.previous = None
            self.workers = 1
            self._restart(now, done, cpu)
            return self.workers
        elapsed = now - self.window.started
        first_look = self.workers == 1 and self.previous is None and elapsed >= MIN_WINDOW
        if first_look and (cpu - self.window.cpu) / elapsed < WAITING:  # waiting, not computing
            return self._settle(self.limit, now)
        calls = done - self.window.done
        if elapsed < MIN_THROUGHPUT_WINDOW or calls < MIN_CALLS_PER_WORKER * self.workers:
            return self.workers
        rate = calls / elapsed
        share = (cpu - self.window.cpu) / elapsed / self.workers  # of one CPU, per worker
        if self.previous is None and self.workers == 1:
            self.computing = share >= COMPUTING
        elif self.previous is not None and (
            rate < GAIN * self.previous[1] or (self.computing and share < COMPUTING)
        ):
            return self._settle(self.previous[0], now)  # that doubling did not pay
        if self.workers >= self.limit:
            return self._settle(self.workers, now)
        self.previous = (self.workers, rate)
        self.workers = min(2 * self.workers, self.limit)
        self._restart(now, done, cpu)
        return self.workers

    def _restart(self, now: float, done: int, cpu: float) -> None:
        self.window = _Window(now, done, cpu)

    def _settle(self, workers: int, now: float) -> int:
        self.workers = workers
        self.settled_at = now
        return workers
