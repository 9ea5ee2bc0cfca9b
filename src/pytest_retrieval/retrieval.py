"""Call the user's retriever for every golden query: sync or async, concurrent, with timeouts.

Results come back in golden order whatever order the calls finish in. A call that raises,
times out or returns something that is not a ranked list of hits becomes an error on that
query (it scores 0 and fails the evaluation); it never aborts the other queries.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._loop import run_private
from .golden import GoldenQuery

Retriever = Callable[..., Any]
ProgressCallback = Callable[[int, int], None]

DEFAULT_CONCURRENCY = 8


class HitError(ValueError):
    """The retriever returned something that is not a ranked list of hits."""


@dataclass
class QueryRun:
    """What one retriever call gave: ranked unique ids (top k), texts, timing and any error."""

    ids: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    latency: float = 0.0  # seconds
    error: str | None = None
    duplicates: int = 0  # repeated ids dropped (each id counts at its first rank only)


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
            got = f"{type(hit).__name__} {hit!r}" if doc_id is None else repr(doc_id)
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
    """True for ``async def`` functions and objects with an ``async def __call__``."""
    return inspect.iscoroutinefunction(retriever) or inspect.iscoroutinefunction(
        getattr(retriever, "__call__", None)  # noqa: B004 - we want the method itself
    )


def run_retriever(
    retriever: Retriever,
    queries: Sequence[GoldenQuery],
    k: int,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
) -> list[QueryRun]:
    """Call ``retriever(query, k, **params)`` for every query; results in golden order."""
    if not callable(retriever):
        raise TypeError(
            f"the retriever fixture returned a {type(retriever).__name__}, not a callable; "
            "return a function search(query: str, k: int) -> list of hits"
        )
    concurrency = max(1, concurrency)
    if is_async(retriever):
        return _run_async(retriever, queries, k, concurrency, timeout, progress)
    return _run_threads(retriever, queries, k, concurrency, timeout, progress)


def _finish(raw: Any, k: int, started: float) -> QueryRun:
    latency = time.perf_counter() - started
    try:
        run = normalize_hits(raw, k)
    except HitError as exc:
        return QueryRun(latency=latency, error=str(exc))
    run.latency = latency
    return run


def _describe(exc: BaseException) -> str:
    return f"the retriever raised {type(exc).__name__}: {exc}"


def _timeout_error(timeout: float) -> QueryRun:
    return QueryRun(
        latency=timeout,
        error=f"the retriever did not answer within {timeout:g} s (--retrieval-timeout)",
    )


def _call_sync(retriever: Retriever, query: GoldenQuery, k: int) -> QueryRun:
    started = time.perf_counter()
    try:
        raw = retriever(query.query, k, **query.params)
        if inspect.isawaitable(raw):  # a sync callable handing back a coroutine
            raw = asyncio.run(_await(raw))
    except BaseException as exc:  # even SystemExit: a worker that dies would hang the run
        return QueryRun(latency=time.perf_counter() - started, error=_describe(exc))
    return _finish(raw, k, started)


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _run_threads(
    retriever: Retriever,
    queries: Sequence[GoldenQuery],
    k: int,
    concurrency: int,
    timeout: float | None,
    progress: ProgressCallback | None,
) -> list[QueryRun]:
    """Daemon worker threads pull query indices; the caller's thread watches for timeouts.

    No lock on the hot path: ``next()`` on a shared counter and ``dict.setdefault`` are atomic
    in CPython, so a worker and the watchdog can race to record a query and exactly one wins.
    (A lock here costs more than a fast in-memory retriever's whole call.) A call that overruns
    its timeout cannot be killed: it is recorded as a timeout, its thread is abandoned (daemon,
    so it cannot hold up interpreter exit) and a fresh worker keeps the concurrency up.
    """
    total = len(queries)
    results: dict[int, QueryRun] = {}
    running: dict[int, float] = {}  # index -> start time of calls in flight
    pending = itertools.count()
    finished = threading.Event()

    def work() -> None:
        while True:
            index = next(pending)
            if index >= total:
                return
            running[index] = time.perf_counter()
            run = _call_sync(retriever, queries[index], k)
            running.pop(index, None)
            if results.setdefault(index, run) is not run:
                return  # declared timed out meanwhile: this thread retires
            if len(results) == total:
                finished.set()

    def spawn() -> None:
        threading.Thread(target=work, name="pytest-retrieval-worker", daemon=True).start()

    if total == 0:
        return []
    for _ in range(min(concurrency, total)):
        spawn()
    poll = None if timeout is None else min(0.05, timeout / 4)
    if progress is not None:
        poll = min(poll or 0.2, 0.2)
    reported = 0
    while not finished.wait(poll):
        if timeout is not None:
            now = time.perf_counter()
            for index, start in list(running.items()):
                expired = _timeout_error(timeout)
                if now - start > timeout and results.setdefault(index, expired) is expired:
                    running.pop(index, None)
                    if len(results) == total:
                        finished.set()
                    spawn()
        if progress is not None and len(results) != reported:
            reported = len(results)
            progress(reported, total)
    if progress is not None and reported != total:
        progress(total, total)
    return [results[index] for index in range(total)]


def _run_async(
    retriever: Retriever,
    queries: Sequence[GoldenQuery],
    k: int,
    concurrency: int,
    timeout: float | None,
    progress: ProgressCallback | None,
) -> list[QueryRun]:
    """Run the coroutines on a private loop in a helper thread (see ``_loop``)."""

    async def gather() -> list[QueryRun]:
        limit = asyncio.Semaphore(concurrency)
        done = 0

        async def one(query: GoldenQuery) -> QueryRun:
            nonlocal done
            async with limit:
                started = time.perf_counter()
                try:
                    raw = await asyncio.wait_for(retriever(query.query, k, **query.params), timeout)
                    run = _finish(raw, k, started)
                except asyncio.TimeoutError:
                    run = _timeout_error(timeout or 0.0)
                except Exception as exc:
                    run = QueryRun(latency=time.perf_counter() - started, error=_describe(exc))
            done += 1
            if progress is not None:
                progress(done, len(queries))
            return run

        return list(await asyncio.gather(*(one(q) for q in queries)))

    return run_private(gather, "pytest-retrieval-loop")
