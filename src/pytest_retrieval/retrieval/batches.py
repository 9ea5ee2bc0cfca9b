"""Retrievers that search a batch of queries per call and answer with row numbers.

An in-memory index (FAISS, a numpy matrix, a sparse BM25 matrix) searches a batch of queries
about as fast as one, and answers with an integer array: ``ids[i, j]`` is the row, in its own
table of doc ids, of query ``i``'s hit at rank ``j`` (``-1``: no hit, as FAISS pads). Handed
over as it is, the hits stay columnar: where each judged doc came back is found with a few
array operations per batch, and a row becomes doc-id strings only when something reads it (a
report, the judge, an export). On 100,000 queries x 100 hits that is the difference between
a plugin that costs more than pytrec_eval and one that costs less (``benchmarks/``).

:func:`batched` declares such a function; what it makes is still a plain
``retriever(query, k)`` for every other use (one query per call).
"""

from __future__ import annotations

import functools
import inspect
import json
import operator
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from collections.abc import Set as AbstractSet
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import chain, pairwise, repeat
from operator import attrgetter
from typing import Any

import numpy as np

from .._internal.gc import paused_gc
from .._internal.stacks import format_traceback
from ..golden import GoldenQuery
from ..hits import (
    NOT_RETURNED,
    NUL,
    HitError,
    QueryRun,
    Ranking,
    describe_error,
    error_key,
    stopped_calls,
    timed_out,
)

#: the event loop async searches run on: the one async one-query retrievers share
LOOP_NAME = "pytest-retrieval-loop"
#: queries per call unless :func:`batched` is told otherwise
DEFAULT_BATCH_SIZE = 1024
#: judged docs x hits compared at once (:meth:`_Calls.found`): rows of 8 MB at most
COMPARED = 1 << 20
#: judged docs a query above which they are found by binary search (:meth:`_Calls.found`)
SEARCHED = 16

_RETURN_HINT = (
    "a @batched retriever returns an integer array of shape (len(queries), k): row numbers "
    "into its doc_ids, -1 for no hit (as faiss's index.search(...)[1])"
)


class RowRanking(Ranking):
    """A :class:`~pytest_retrieval.hits.Ranking` kept as a row of its batch's id array: the
    doc-id strings are made only when something reads them."""

    __slots__ = ("batch", "names", "row")

    def __init__(self, batch: np.ndarray, row: int, size: int, names: Sequence[str]) -> None:
        self.batch = batch
        self.row = row
        self.size = size
        self.names = names

    @property
    def joined(self) -> str:  # type: ignore[override]
        return NUL.join(self.ids)

    def __reduce__(self) -> tuple[type[Ranking], tuple[str, int]]:
        """Copied or pickled as the :class:`Ranking` it equals (not with its whole batch
        and doc-id table)."""
        return Ranking, (self.joined, self.size)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(map(self.names.__getitem__, self.batch[self.row, : self.size].tolist()))


class BatchRetriever:
    """``search(queries, k, **params)`` made a retriever by :func:`batched`: the evaluation
    calls it a batch at a time; everything else calls ``retriever(query, k)``."""

    def __init__(self, search: Callable[..., Any], doc_ids: Sequence[str], batch_size: int) -> None:
        try:
            size = operator.index(batch_size)  # numpy's integers too; not a bool, float, str
        except TypeError:
            size = 0
        if isinstance(batch_size, bool) or size < 1:
            raise ValueError(
                f"batched(batch_size=...) must be a whole number >= 1, not {batch_size!r}"
            )
        unordered = isinstance(doc_ids, AbstractSet | Mapping)  # no row order to read
        if isinstance(doc_ids, str | bytes) or unordered or not isinstance(doc_ids, Iterable):
            raise TypeError(
                f"batched(doc_ids=...) takes each row's doc id in row order (a list, a tuple, "
                f"a numpy array of strings), not a {type(doc_ids).__name__}"
            )
        functools.update_wrapper(self, search, updated=())  # its name; not its attributes
        self.search = search
        self.doc_ids = doc_ids
        self.batch_size = size

    def table(self) -> tuple[str, ...]:
        """:attr:`names`, read again when ``doc_ids`` has grown or shrunk since (an index
        that took documents in between two evaluations)."""
        names = self.names
        if isinstance(self.doc_ids, Sized) and len(self.doc_ids) != len(names):
            for cached in ("names", "rows", "joinable"):
                self.__dict__.pop(cached, None)
            names = self.names
        return names

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """The doc-id table, checked once: non-empty strings, none twice (else HitError)."""
        names = tuple(self.doc_ids)
        if not names:
            raise HitError("doc_ids is empty: batched(doc_ids=...) holds each row's doc id")
        for row, doc in enumerate(names):
            if not isinstance(doc, str) or not doc:
                raise HitError(
                    f"doc_ids[{row}] is {doc!r}: batched(doc_ids=...) holds each row's doc id, "
                    "a non-empty string (convert them with str())"
                )
        if any(type(doc) is not str for doc in names):  # numpy's str_ (an array of ids)
            names = tuple(map(str, names))
        if len(set(names)) != len(names):
            seen: set[str] = set()
            twice = next(doc for doc in names if doc in seen or seen.add(doc))  # type: ignore[func-returns-value]
            raise HitError(
                f"doc_ids holds {twice!r} twice: batched(doc_ids=...) needs one id per row, "
                "each row a different doc"
            )
        return names

    @functools.cached_property
    def joinable(self) -> bool:
        """No doc id holds the NUL that joins a :class:`RowRanking`'s ids (else: tuples)."""
        return not any(NUL in doc for doc in self.names)

    @functools.cached_property
    def rows(self) -> dict[str, int]:
        """Doc id -> its row number."""
        return dict(zip(self.names, range(len(self.names)), strict=True))

    def __call__(self, query: str, k: int, **params: Any) -> list[str]:
        """One query's hits as doc ids (a batch of one)."""
        answer = _answer(self.search, [query], k, params)
        names = self.table()
        return [names[row] for row in _checked_row(answer[0], len(names))]


def batched(
    doc_ids: Sequence[str], *, batch_size: int = DEFAULT_BATCH_SIZE
) -> Callable[[Callable[..., Any]], BatchRetriever]:
    """Make ``search(queries: list[str], k: int) -> int array (len(queries), k)`` a retriever
    that is called a batch at a time; ``doc_ids[r]`` is the doc id of row number ``r``::

        @pytest.fixture(scope="session")
        def retriever():
            index, ids = load_index()

            @pytest_retrieval.batched(doc_ids=ids)
            def search(queries, k):
                return index.search(embed(queries), k)[1]  # faiss: (distances, rows)

            return search

    The queries of one ``params`` share calls (``search(queries, k, **params)``), wherever
    they are in the golden set. ``--retrieval-timeout`` is a deadline for each call; the
    calls run one after another (``--retrieval-concurrency`` is for one-query retrievers);
    a query's latency is its call's time over the queries in it."""

    def wrap(search: Callable[..., Any]) -> BatchRetriever:
        return BatchRetriever(search, doc_ids, batch_size)

    return wrap


def _answer(
    search: Callable[..., Any],
    texts: list[str],
    k: int,
    params: Any,
    running: list[tuple[Any, Future[Any]]] | None = None,
) -> np.ndarray:
    """``search``'s answer for ``texts``, checked: a 2-D integer array with a row per query
    (else HitError). A coroutine runs on the plugin's shared event loop, as an ``async def``
    one-query retriever's calls do (a client made on the first call keeps working); it is
    added to ``running`` (its loop and future) for the caller to cancel at its deadline."""
    answer = search(texts, k, **params)
    if inspect.isawaitable(answer):
        from .._internal.loop import awaited, shared_loop

        loop = shared_loop(LOOP_NAME)
        future = loop.submit(awaited(answer))
        if running is not None:
            running.append((loop, future))
        answer = future.result()
    if hasattr(answer, "mask") and callable(getattr(answer, "filled", None)):
        # a numpy masked array: a masked hit is no hit, whatever the dtype (-1 fits no uint)
        answer = np.where(np.ma.getmaskarray(answer), -1, np.ma.getdata(answer).astype(np.int64))
    try:
        ids = np.asarray(answer)
    except Exception as exc:
        raise HitError(f"the retriever's answer is not an array ({exc}); {_RETURN_HINT}") from None
    if ids.dtype.kind not in "iu" or ids.ndim != 2 or ids.shape[0] != len(texts):
        if isinstance(answer, np.ndarray) or ids.dtype.kind != "O":
            what = f"{ids.dtype} array of shape {ids.shape}"
        else:
            what = type(answer).__name__
        raise HitError(f"for {len(texts)} queries the retriever returned a {what}; {_RETURN_HINT}")
    return ids


def _checked_row(row: np.ndarray, size: int) -> list[int]:
    """A row's row numbers, -1s dropped; one outside the table is a HitError."""
    bad = np.flatnonzero((row >= size) | (row < -1))
    if bad.size:
        rank = int(bad[0])
        raise HitError(
            f"hit at rank {rank + 1} is row {int(row[rank])} of doc_ids, which holds rows 0 "
            f"to {size - 1}; {_RETURN_HINT}"
        )
    values: list[int] = row[row >= 0].tolist()
    return values


_RELEVANT, _PARAMS = attrgetter("relevant"), attrgetter("params")


@dataclass
class _Calls:
    """One evaluation's calls, a batch at a time: the results, the failed calls in a row."""

    retriever: BatchRetriever
    queries: Sequence[GoldenQuery]
    k: int
    timeout: float | None
    ranks: bool
    max_failures: int
    failing: int = 0
    tripped: bool = False
    traced: set[str] = field(default_factory=set)  # error kinds that keep a traceback

    def run(self, progress: Callable[[int, int], None] | None) -> list[QueryRun]:
        total = len(self.queries)
        try:
            self.retriever.table()  # checked (or read again) before the first call
        except HitError as exc:
            return [QueryRun(error=str(exc)) for _ in range(total)]
        results: dict[int, QueryRun] = {}
        group: object = None
        for indices, params, key in self.batches():
            # failures in a row count per params: a value the backend refuses (a language
            # it has no index for) does not stop the calls of the others
            if key is not group:
                group, self.failing, self.tripped = key, 0, False
            if self.tripped:
                continue
            for index, run in zip(indices, self.call(indices, params), strict=True):
                results[index] = run  # called: a failure past the trip is still a failure
                self.failing = 0 if run.error is None else self.failing + 1
                self.tripped |= 0 < self.max_failures <= self.failing
            if progress is not None:
                progress(len(results), total)
        return [results.get(i) or stopped_calls(self.max_failures) for i in range(total)]

    def batches(self) -> Iterator[tuple[list[int], dict[str, Any], object]]:
        """The golden queries' indices in calls of ``batch_size``, with their ``params`` and
        the group they belong to: the queries of equal ``params`` together (however they are
        spread over the golden set), groups in the order their first query comes."""
        size, total = self.retriever.batch_size, len(self.queries)
        if not any(map(_PARAMS, self.queries)):  # the common case: golden order
            for start in range(0, total, size):
                yield list(range(start, min(start + size, total))), {}, None
            return
        buckets: dict[str, list[tuple[dict[str, Any], list[int]]]] = {}
        groups: list[tuple[dict[str, Any], list[int]]] = []
        for index, query in enumerate(self.queries):
            bucket = buckets.setdefault(_params_key(query.params), [])
            # JSON tells 1, 1.0 and true apart (the key), == tells {1: x} from {"1": x}
            found = next((g for g in bucket if _same(g[0], query.params)), None)
            if found is None:
                found = (query.params, [])
                bucket.append(found)
                groups.append(found)
            found[1].append(index)
        for params, indices in groups:
            for start in range(0, len(indices), size):
                yield indices[start : start + size], params, indices

    def call(self, indices: list[int], params: dict[str, Any]) -> list[QueryRun]:
        """One call for the golden queries at ``indices``; when it fails, each of them fails
        alike."""
        count = len(indices)
        texts = [self.queries[index].query for index in indices]
        outcome: list[Any] = []
        running: list[tuple[Any, Future[Any]]] = []  # an async search's loop and future

        def call() -> None:
            try:
                outcome.append(_answer(self.retriever.search, texts, self.k, params, running))
            except BaseException as exc:  # even SystemExit: the retriever's failure
                outcome.append(exc)

        started = time.perf_counter()
        if self.timeout is None:
            call()
        else:  # a call cannot be killed: past its deadline its daemon thread is left behind
            worker = threading.Thread(target=call, name="pytest-retrieval-batch", daemon=True)
            worker.start()
            worker.join(self.timeout)
            if not outcome:
                for loop, future in running:  # an async search: cancelled; its loop, if
                    future.cancel()  # blocked, left for a new one
                    if loop.blocked_for() > self.timeout / 2:
                        loop.abandon()
                runs = [timed_out(self.timeout, "") for _ in range(count)]
                for run in runs:
                    run.latency = self.timeout / count
                return runs
        latency = (time.perf_counter() - started) / count
        answer = outcome[0]
        if isinstance(answer, KeyboardInterrupt):
            raise answer  # Ctrl-C stops the run, as it does a one-query retriever's
        if isinstance(answer, BaseException):
            return self.failed(answer, latency, count)
        with paused_gc():  # the call's garbage collected; then our own objects, kept (see _gc)
            return self.read(indices, answer, latency)

    def failed(self, exc: BaseException, latency: float, count: int) -> list[QueryRun]:
        error = str(exc) if isinstance(exc, HitError) else describe_error(exc, reading=False)
        runs = [QueryRun(latency=latency, error=error) for _ in range(count)]
        if not isinstance(exc, HitError) and error_key(error) not in self.traced:
            self.traced.add(error_key(error))
            tb = exc.__traceback__
            runs[0].traceback = format_traceback(exc, tb.tb_next if tb else None)
        return runs

    def read(self, indices: list[int], ids: np.ndarray, latency: float) -> list[QueryRun]:
        """Each query's :class:`QueryRun` from its row. A plain row -- its first k row numbers
        in the table, distinct, none -1, and none of them again further on -- stays an array
        (the common case: no loop over its hits); any other is read by :meth:`irregular`.
        The first k columns are copied: a search may reuse its output array."""
        names = self.retriever.names
        size, n = len(names), len(ids)
        top = np.array(ids[:, : self.k])  # a copy, and only what is kept
        width = top.shape[1]
        ordered = np.sort(top, axis=1)
        plain = ~(ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        if width:
            plain &= ordered[:, 0] >= 0
        outside = bool(ids.size) and (int(ids.max()) >= size or int(ids.min()) < -1)
        if outside:
            plain &= ((ids < size) & (ids >= -1)).all(axis=1)
        if ids.shape[1] > width and width:  # a kept doc again past k: normalize_hits counts it
            plain &= ~_again(ordered, ids[:, width:], size)
        found = self.found(indices, top) if self.ranks else [None] * n
        runs = list(map(QueryRun, self.rankings(top), found))
        for row in np.flatnonzero(~plain).tolist():
            runs[row] = self.irregular(indices[row], ids[row])
        for run in runs:
            run.latency = latency
        return runs

    def rankings(self, top: np.ndarray) -> Iterator[Sequence[str]]:
        """Each row of ``top`` as ranked doc ids: kept as the array's row, or (an id holds a
        NUL) a tuple."""
        names = self.retriever.names
        if self.retriever.joinable:
            rows = range(len(top))
            return map(RowRanking, repeat(top), rows, repeat(top.shape[1]), repeat(names))
        return (tuple(map(names.__getitem__, row)) for row in top.tolist())

    def irregular(self, index: int, row: np.ndarray) -> QueryRun:
        """Golden query ``index``'s run from a row with -1s (no hit) or a row number twice,
        read as :func:`~.hits.normalize_hits` reads a list: each doc at its first rank, then
        the first k kept; or an error for a row number outside the table, wherever it is."""
        names = self.retriever.names
        try:
            hits = _checked_row(row, len(names))
        except HitError as exc:
            return QueryRun(error=str(exc))
        kept = list(dict.fromkeys(hits))[: self.k]
        ranks = None
        if self.ranks:
            docs, starts = self.judged
            rank = dict(zip(kept, range(len(kept)), strict=True))
            judged = docs[starts[index] : starts[index + 1]].tolist()
            ranks = tuple([rank.get(doc, NOT_RETURNED) for doc in judged])
        duplicates = sum(map(set(kept).__contains__, hits)) - len(kept)
        ranking = next(self.rankings(np.array([kept], dtype=np.int64)))
        return QueryRun(ranking, ranks, duplicates=duplicates)

    @functools.cached_property
    def judged(self) -> tuple[np.ndarray, np.ndarray]:
        """Every query's judged docs as row numbers (-2: not in the table), flat in golden
        order, and where each query's begin (looked up once for the whole golden set)."""
        counts = np.fromiter(map(len, map(_RELEVANT, self.queries)), np.intp, len(self.queries))
        flat = list(map(self.retriever.rows.get, chain.from_iterable(map(_RELEVANT, self.queries))))
        if None in flat:
            flat = [-2 if row is None else row for row in flat]
        starts = np.zeros(len(counts) + 1, dtype=np.intp)
        np.cumsum(counts, out=starts[1:])
        return np.asarray(flat, dtype=np.int64), starts

    def found(self, indices: list[int], top: np.ndarray) -> list[tuple[int, ...]]:
        """Where the judged docs of the golden queries at ``indices`` are in their rows of
        ``top`` (:attr:`QueryRun.ranks`). A few judged docs a query: each compared with its
        row, a chunk at a time (memory bounded); many (TREC-style qrels): binary searches of
        the sorted rows, which cost the same however many there are."""
        docs, starts = self.judged
        at = np.asarray(indices, dtype=np.intp)
        counts = starts[at + 1] - starts[at]
        bounds = np.zeros(len(at) + 1, dtype=np.intp)
        np.cumsum(counts, out=bounds[1:])
        owner = np.repeat(np.arange(len(at)), counts)
        wanted = docs[np.arange(bounds[-1]) + np.repeat(starts[at] - bounds[:-1], counts)]
        width = top.shape[1]
        if not width:
            rank = np.full(len(owner), NOT_RETURNED, dtype=np.int64)
        elif len(owner) > SEARCHED * len(at):
            rank = _searched(top, owner, wanted, len(self.retriever.names))
        else:
            rank = _compared(top, owner, wanted, len(self.retriever.names))
        ranks = rank.tolist()
        return [tuple(ranks[a:b]) for a, b in pairwise(bounds.tolist())]


def _compared(top: np.ndarray, owner: np.ndarray, wanted: np.ndarray, size: int) -> np.ndarray:
    """The rank of each ``wanted`` row number in its row ``top[owner]`` (NOT_RETURNED: not
    there), by comparing it with every number of the row, a chunk of them at a time."""
    if top.dtype.kind == "i" and size <= np.iinfo(top.dtype).max:
        wanted = wanted.astype(top.dtype)  # compared as they are: no copy of the rows
    rank = np.full(len(owner), NOT_RETURNED, dtype=np.int64)
    step = max(1, COMPARED // top.shape[1])
    for start in range(0, len(owner), step):
        chunk = slice(start, start + step)
        match = top[owner[chunk]] == wanted[chunk, None]
        rank[chunk] = np.where(match.any(axis=1), match.argmax(axis=1), NOT_RETURNED)
    return rank


def _searched(top: np.ndarray, owner: np.ndarray, wanted: np.ndarray, size: int) -> np.ndarray:
    """:func:`_compared` by binary searches of the rows sorted, as one sorted array (each
    row's numbers offset past the previous row's; a plain row has no number twice, and the
    others are read again)."""
    order = np.argsort(top, axis=1)
    keys = _keyed(np.take_along_axis(top, order, axis=1), size).ravel()
    sought = wanted + 1 + owner * (size + 2)
    where, hit = _lookup(keys, sought)
    hit &= wanted >= 0
    rank: np.ndarray = np.where(hit, order.ravel()[where], NOT_RETURNED)
    return rank


def _keyed(numbers: np.ndarray, size: int) -> np.ndarray:
    """Row numbers (-1 .. ``size``, clipped to it) + 1 + their row's offset: row ``r``'s
    keys lie in ``[r * (size + 2), (r + 1) * (size + 2))``, so sorted rows make one sorted
    array."""
    offsets = np.arange(len(numbers), dtype=np.int64)[:, None] * (size + 2) + 1
    keys: np.ndarray = np.clip(numbers, -1, size).astype(np.int64) + offsets
    return keys


def _again(ordered: np.ndarray, extra: np.ndarray, size: int) -> np.ndarray:
    """Per row: does ``extra`` (the columns past k) hold a row number of the row's first k
    (``ordered``: sorted)? Binary searches of the rows as one sorted array (:func:`_keyed`)."""
    keys = _keyed(ordered, size).ravel()
    sought = _keyed(extra, size)
    _, hit = _lookup(keys, sought)
    again: np.ndarray = np.asarray((hit & (extra >= 0)).any(axis=1))
    return again


def _lookup(keys: np.ndarray, sought: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``sought`` is in the sorted, non-empty ``keys``, and whether it is."""
    where = np.minimum(np.searchsorted(keys, sought), len(keys) - 1)
    hit: np.ndarray = keys[where] == sought
    return where, hit


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``a == b``, False when comparing raises (a numpy array among the values)."""
    try:
        return bool(a == b)
    except Exception:
        return a is b


def _params_key(params: Mapping[str, Any]) -> str:
    """What tells one query's ``params`` from another's, hashable ("" for none)."""
    if not params:
        return ""
    try:
        return json.dumps(params, sort_keys=True)
    except (TypeError, ValueError):
        return repr(sorted(params.items(), key=repr))


def run_batches(
    retriever: BatchRetriever,
    queries: Sequence[GoldenQuery],
    k: int,
    *,
    timeout: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    ranks: bool = False,
    max_failures: int = 0,
) -> list[QueryRun]:
    """Call a :func:`batched` retriever for every query, a batch at a time; results in
    golden order, as :func:`~pytest_retrieval.retrieval.run_retriever` gives them."""
    return _Calls(retriever, queries, k, timeout, ranks, max_failures).run(progress)
