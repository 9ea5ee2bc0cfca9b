"""What one retriever call gave (:class:`QueryRun`), and every error a call can end in.

A retriever may return anything: :func:`normalize_hits` turns a ranked list of hits (id
strings, ``(id, score)`` pairs, dicts or objects with an ``id`` or ``doc_id``) into ranked
unique ids and rejects the rest with a :class:`HitError` saying what to return instead. It
reads at most :func:`read_limit` hits of any iterable (an endless generator, a list of
millions): the deepest k, and as many again (at least :data:`LOOKAHEAD`) for the repeated ids
that precede them; what comes after is never read, so neither counted nor checked. A call
that raises, overruns its deadline or blocks the event loop gets its message here too
(:func:`describe_error`, :func:`timed_out`, :func:`blocked_loop`), with the fix when the
cause is a known one.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Collection, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from types import GeneratorType
from typing import Any, overload

from ._internal.scrub import scrub
from .errors import RetrieverError

#: longest error message kept (an HTTP error can carry a whole response body)
MAX_ERROR = 1000
#: the rank of a judged doc that did not come back: past every cutoff
NOT_RETURNED = 2**62
#: what separates the ids in a :class:`Ranking` (no id holds one)
NUL = "\x00"
#: fewest hits read past the deepest k: room for repeated ids before the k-th distinct one
LOOKAHEAD = 100


def read_limit(k: int) -> int:
    """How many of a retriever's hits are read at most: k, and room for repeats (k more, at
    least :data:`LOOKAHEAD`). A retriever repeating more ids than that before its k-th
    distinct one is scored on the distinct ones read, and its repeats are counted."""
    return k + max(k, LOOKAHEAD)


class HitError(RetrieverError, ValueError):
    """The retriever returned something that is not a ranked list of hits (its message
    quotes what came back: scrubbed of secrets, as every error text is)."""

    def __init__(self, message: str) -> None:
        super().__init__(scrub(message))


class Ranking(Sequence[str]):
    """Ranked doc ids kept as one string -- the ids joined by NUL -- until they are read.

    Many rankings alive at once add up: a tuple of 100 ids is a container the garbage
    collector traverses before it lets it be (100,000 of them: 0.6 s of collections during
    the calls) and 100 references to drop at exit; one string is neither, and holds none of
    the retriever's strings alive. Readers that need the ids split the string (``ids``);
    those that need the positions of a few ids or the count do not. Equal to, ordered like
    and hashed like the tuple of its ids (but not JSON-serializable as one: ``list()`` it).
    :func:`normalize_hits` makes one when no id holds a NUL."""

    __slots__ = ("joined", "size")

    def __init__(self, joined: str, size: int) -> None:
        self.joined = joined
        self.size = size

    @property
    def ids(self) -> tuple[str, ...]:
        """The ids (split anew at each read: kept, they would cost what the string saves)."""
        return tuple(self.joined.split(NUL)) if self.size else ()

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self.ids[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __contains__(self, doc: object) -> bool:
        return doc in self.ids

    def index(self, doc: Any, start: int = 0, stop: int = sys.maxsize) -> int:
        return self.ids.index(doc, start, stop)

    def __reversed__(self) -> Iterator[str]:
        return reversed(self.ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ranking):
            return self.joined == other.joined and self.size == other.size
        return self.ids == other if isinstance(other, tuple) else NotImplemented

    def __lt__(self, other: object) -> bool:
        ids = _as_tuple(other)
        return NotImplemented if ids is None else self.ids < ids

    def __le__(self, other: object) -> bool:
        ids = _as_tuple(other)
        return NotImplemented if ids is None else self.ids <= ids

    def __gt__(self, other: object) -> bool:
        ids = _as_tuple(other)
        return NotImplemented if ids is None else self.ids > ids

    def __ge__(self, other: object) -> bool:
        ids = _as_tuple(other)
        return NotImplemented if ids is None else self.ids >= ids

    def __hash__(self) -> int:
        return hash(self.ids)

    def __repr__(self) -> str:
        return repr(self.ids)


def _as_tuple(other: object) -> tuple[str, ...] | None:
    """What a Ranking compares with, as a tuple (tuples compare only with tuples)."""
    if isinstance(other, Ranking):
        return other.ids
    return other if isinstance(other, tuple) else None


@dataclass(slots=True)
class QueryRun:
    """What one retriever call gave: ranked unique ids (top k), texts, timing and any error.
    (Slots: a million of them are alive at once on a large golden set.) The ids are a
    :class:`Ranking`, or a tuple when one holds a NUL or the call gave more than k or the
    same id twice."""

    ids: Sequence[str] = ()
    #: the 0-based rank in ``ids`` of each doc its golden query judges (in ``relevant``'s
    #: order), :data:`NOT_RETURNED` for one not there; found right after the call, while its
    #: hits are in the CPU's cache (None: not asked for, the kernels find them)
    ranks: tuple[int, ...] | None = None
    texts: dict[str, str] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    latency: float = 0.0  # seconds
    error: str | None = None
    duplicates: int = 0  # repeated ids dropped (each id counts at its first rank only)
    #: the exception's traceback, kept for the first error of each kind (:func:`error_key`)
    traceback: str | None = None


_RETURN_HINT = (
    "return a ranked list of hits: doc-id strings, (id, score) pairs, or dicts/objects with "
    "an 'id' or 'doc_id' (and optional 'text' and 'score')"
)


def normalize_hits(raw: Any, k: int, judged: Collection[str] | None = None) -> QueryRun:
    """Turn whatever the retriever returned into a :class:`QueryRun` (ids cut at ``k``);
    with ``judged`` (the golden query's judged doc ids), their ranks too. At most
    :func:`read_limit` hits are read (a generator is closed after them)."""
    limit = read_limit(k)
    if type(raw) is list and len(raw) > limit:
        raw = raw[:limit]
    joined = _joined(raw) if type(raw) is list else None
    if joined is not None:  # the common case: C loops only
        distinct = set(raw)
        if "" not in distinct:
            if len(distinct) == len(raw) and len(raw) <= k:
                if joined.count(NUL) >= len(raw):  # an id holds a NUL: it cannot separate
                    ranks = None if judged is None else _ranks(raw, judged, distinct)
                    return QueryRun(ids=tuple(raw), ranks=ranks)
                ranks = None if judged is None else _joined_ranks(joined, judged, distinct)
                return QueryRun(ids=Ranking(joined, len(raw)), ranks=ranks)
            top = tuple(dict.fromkeys(raw))[:k]
            kept = set(top)
            return QueryRun(
                ids=top,
                ranks=None if judged is None else _ranks(top, judged, kept),
                duplicates=sum(hit in kept for hit in raw) - len(top),
            )
    if raw is None:
        raise HitError(f"the retriever returned None; {_RETURN_HINT}")
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        raise HitError(f"the retriever returned a {type(raw).__name__}; {_RETURN_HINT}")
    if hasattr(raw, "columns") and hasattr(raw, "itertuples"):  # iterating one yields its
        raise HitError(  # column names, read as doc ids: a silent zero
            f"the retriever returned a {type(raw).__name__} (a table: iterating it gives its "
            "column names, not its rows); return its id column as a list "
            "(df['docno'].tolist()) or its rows as (id, score) pairs"
        )
    ids: list[str] = []
    texts: dict[str, str] = {}
    scores: dict[str, float] = {}
    duplicates = 0
    seen: set[str] = set()
    hits = iter(raw)
    try:
        for rank, hit in enumerate(itertools.islice(hits, limit), start=1):
            doc_id, text, score = _fields(hit)
            if not isinstance(doc_id, str) or not doc_id:
                raise HitError(_no_id(rank, hit, doc_id))
            if doc_id in seen:
                duplicates += 1
                continue
            if len(ids) >= k:
                continue  # keep reading to the limit: a bad hit there is still a violation
            seen.add(doc_id)
            ids.append(doc_id)
            if isinstance(text, str):
                texts[doc_id] = text
            if _is_score(score):
                scores[doc_id] = float(score)
    finally:
        if isinstance(raw, GeneratorType):  # its cleanup runs now, not once it is collected
            raw.close()
    top = tuple(ids)
    ranks = None if judged is None else _ranks(top, judged, seen)
    return QueryRun(ids=top, ranks=ranks, texts=texts, scores=scores, duplicates=duplicates)


def _fields(hit: Any) -> tuple[Any, Any, Any]:
    """A hit's id, text and score: an id string; an ``(id, score)`` pair (rank_bm25 or FAISS
    glue, LangChain's ``(Document, score)``: the first item is read as a hit); a dict or an
    object with an ``id`` (else a ``doc_id``), a ``text`` and a ``score``."""
    pair_score: Any = None
    if (
        isinstance(hit, tuple | list)
        and len(hit) == 2
        and _is_score(hit[1])
        and not isinstance(hit[0], tuple | list)
    ):
        hit, pair_score = hit
    if isinstance(hit, str):
        doc_id: Any = hit
        text: Any = None
        score: Any = None
    elif isinstance(hit, Mapping):
        doc_id = hit.get("id")
        if doc_id is None:
            doc_id = hit.get("doc_id")
        text, score = hit.get("text"), hit.get("score")
    else:
        doc_id = getattr(hit, "id", None)
        if doc_id is None:
            doc_id = getattr(hit, "doc_id", None)
        text, score = getattr(hit, "text", None), getattr(hit, "score", None)
    return doc_id, text, pair_score if pair_score is not None else score


def _is_score(value: Any) -> bool:
    """A real number (numpy's float32 too), not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool)


def _no_id(rank: int, hit: Any, doc_id: Any) -> str:
    got = f"{type(hit).__name__} {_safe_repr(hit)}" if doc_id is None else repr(doc_id)
    return (
        f"hit at rank {rank} has no usable id (got {scrub(got)[:80]}): doc ids must be "
        f"non-empty strings, never coerced (convert them with str() in the retriever); "
        f"{_RETURN_HINT}"
    )


def _ranks(ids: Sequence[str], judged: Collection[str], present: Container[str]) -> tuple[int, ...]:
    """The rank of each judged doc in ``ids`` (``present``: a set holding ``ids``' docs)."""
    return tuple([ids.index(doc) if doc in present else NOT_RETURNED for doc in judged])


def _joined_ranks(joined: str, judged: Collection[str], present: Container[str]) -> tuple[int, ...]:
    """:func:`_ranks` from the ids joined by NUL (none holds one): a search of one string
    whose characters lie together, not a comparison with each id spread over the heap (100
    hits: 40% less time)."""
    wrapped = ""
    ranks = []
    for doc in judged:
        if doc in present:
            wrapped = wrapped or f"{NUL}{joined}{NUL}"
            ranks.append(wrapped.count(NUL, 0, wrapped.find(f"{NUL}{doc}{NUL}")))
        else:
            ranks.append(NOT_RETURNED)
    return tuple(ranks)


def _joined(raw: list[Any]) -> str | None:
    """The hits joined by NUL when every one is a ``str`` (``str.join`` refuses anything
    else, in a C loop: a third of the cost of collecting the hits' types), else None."""
    try:
        return NUL.join(raw)
    except TypeError:
        return None


def error_key(error: str) -> str:
    """What makes two errors "the same" when they are grouped: the message, numbers aside
    (``hit at rank 1 has no usable id (got int 17)`` and ``... (got int 4)`` are one bug)."""
    return re.sub(r"\d+", "#", error)


def describe_error(exc: BaseException, reading: bool) -> str:
    """``the retriever raised ValueError: boom`` (plus how to fix it, when we know);
    ``reading``: raised while its hits were read, not by the call."""
    try:
        message = scrub(str(exc))  # before it is cut short: a key cut in two is no key
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
        "the client was made in another thread (the fixture's, or the worker that made the "
        "first call) but sync retrievers are called from pytest-retrieval's worker threads, "
        "the first call alone on its own: open it inside the retriever, one per "
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


#: how the error of a query left without an answer when the calls stopped begins
#: (:func:`stopped_calls`): told apart from the failures that stopped them
NOT_ANSWERED = "not answered: the calls stopped after the retriever failed "


def stopped_calls(max_failures: int) -> QueryRun:
    """The result of a query not called, or abandoned in flight, once ``max_failures`` calls
    in a row failed (a backend that is down)."""
    return QueryRun(
        error=f"{NOT_ANSWERED}{max_failures} in a row (--retrieval-max-failures "
        f"{max_failures}; 0: never stop)"
    )


def timed_out(timeout: float, where: str) -> QueryRun:
    """The result of a call abandoned at its deadline (``where``: the line it was stuck at)."""
    return QueryRun(
        latency=timeout,
        error=f"the retriever did not answer within {timeout:g} s (--retrieval-timeout)"
        + (f"; abandoned while at {where}" if where else ""),
    )


def blocked_loop(timeout: float, where: str, by_this_call: bool) -> QueryRun:
    """The result of a call whose event loop was blocked past the deadline and abandoned."""
    who = "the retriever blocked" if by_this_call else "code outside the retriever call blocked"
    return QueryRun(
        latency=timeout,
        error=f"{who} the event loop for more than {timeout:g} s (--retrieval-timeout)"
        f"{f' at {where}' if where else ''}: a blocking call inside async def (time.sleep, "
        "requests, a sync client) stalls every query; await an async client or wrap the call "
        "in asyncio.to_thread",
    )


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__} whose repr() raised>"
