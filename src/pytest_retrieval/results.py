"""What an evaluation found, as immutable values, and the one verdict every output renders.

A leaf of the package: these types are built by :mod:`.evaluation` (scores),
:mod:`.compare` (against a baseline or another retriever) and :mod:`.gate` (the verdict), and
read by every renderer. Nothing here decides anything; derived copies are made with
``dataclasses.replace``. ``to_dict`` / ``result_from_dict`` are the JSON report's round trip.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from functools import cached_property
from itertools import repeat
from typing import TYPE_CHECKING, Any, TypeVar, overload

import numpy as np
from numpy.typing import NDArray

from ._internal.gc import paused_gc
from ._internal.io import relative
from .hits import NOT_ANSWERED, NUL, Ranking, error_key
from .limits import Threshold
from .metrics import DEFAULT_RELEVANCE_LEVEL, parse_metric
from .settings import DEFAULT_ALPHA
from .verdicts import REGRESSION, UNDECIDED, GateOutcome, Reason, Verdict

if TYPE_CHECKING:
    from collections.abc import Iterable

HIT_DETAIL = 10  # hits per query whose text and score a report keeps
HIT_TEXT = 200  # characters of a hit's text a report keeps

#: former methods of EvaluationResult -> the function to call instead
_MOVED = {
    "assert_thresholds": "assert_thresholds(result, thresholds=None)",
    "assert_no_regression": "assert_no_regression(result)",
    "with_metrics": "with_metrics(result, names)",
}


# ---------------------------------------------------------------------------- per query


def is_graded(verdict: Mapping[str, Any]) -> bool:
    """The judge graded the hit (no ``error``, a decision); else the judge metrics leave the
    hit out: an ungraded hit is neither on nor off topic."""
    return verdict.get("error") is None and isinstance(verdict.get("on_topic"), bool)


@dataclass(frozen=True, slots=True)
class QueryResult:
    """One golden query: what came back, how it scored, how long it took. (Slots: a million
    are alive at once on a large golden set; 150 bytes each instead of 520.)"""

    id: str
    query: str
    tags: tuple[str, ...]
    relevant: dict[str, int]
    #: the ranked doc ids: a tuple, or a :class:`~pytest_retrieval.hits.Ranking` equal to one
    returned: Sequence[str]
    metrics: dict[str, float]
    latency_ms: float
    error: str | None = None
    duplicates: int = 0
    fingerprint: str = ""
    #: doc id -> the LLM judge's verdict on it (``{"on_topic", "score", "grade", "reason",
    #: "error"}``), for the top-k hits it was asked about; empty without a judge
    judgments: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: doc id -> downstream (eRAG) label in [0, 1], for the top-k hits; empty without one
    downstream: dict[str, float] = field(default_factory=dict)
    #: the golden query's relevance criteria for the judge (carried so a report alone can
    #: rebuild the judge's prompts, e.g. ``judge-batch submit REPORT``)
    criteria: str | None = None
    #: doc id -> the text the retriever gave, cut to HIT_TEXT characters, for the first
    #: HIT_DETAIL hits (what a reviewer reads in the HTML and ``show``; bounded so a large
    #: golden set's report stays small)
    texts: dict[str, str] = field(default_factory=dict)
    #: doc id -> the retriever's score, for the first HIT_DETAIL hits that had one
    scores: dict[str, float] = field(default_factory=dict)

    @property
    def missed(self) -> list[str]:
        """Relevant ids (grade >= 1) not in what came back, best grade first."""
        got = set(self.returned)
        ranked = sorted(self.relevant.items(), key=lambda kv: (-kv[1], kv[0]))
        return [doc for doc, grade in ranked if grade > 0 and doc not in got]

    @property
    def found_ranks(self) -> dict[str, int]:
        """Relevant id -> 1-based rank, for the relevant ids that came back."""
        return {d: r for r, d in enumerate(self.returned, 1) if self.relevant.get(d, 0) > 0}

    @property
    def error_key(self) -> str:
        """Its error's kind (:func:`~pytest_retrieval.hits.error_key`); "" without one."""
        return "" if self.error is None else error_key(self.error)

    def to_dict(self, *, rankings: bool = False) -> dict[str, Any]:
        """Its report entry; the optional judge, eRAG, criteria, text and score keys only
        when set (a million-query report is 16% smaller; ``from_dict`` reads them absent).
        ``rankings``: ``returned`` as it is, a :class:`~.hits.Ranking` not split (for
        :func:`to_wire`)."""
        entry = {
            "id": self.id,
            "query": self.query,
            "tags": list(self.tags),
            "returned": self.returned if rankings else tuple(self.returned),
            "relevant": self.relevant,
            "metrics": self.metrics,
            "latency_ms": round(self.latency_ms, 3),
            "error": self.error,
            "duplicates": self.duplicates,
            "fingerprint": self.fingerprint,
        }
        if self.judgments or self.downstream or self.texts or self.scores:
            for key, value in (
                ("judgments", self.judgments),
                ("downstream", self.downstream),
                ("texts", self.texts),
                ("scores", self.scores),
            ):
                if value:
                    entry[key] = value
        if self.criteria is not None:
            entry["criteria"] = self.criteria
        return entry


FloatArray = NDArray[np.float64]
_T = TypeVar("_T")


@dataclass(frozen=True)
class QueryColumns:
    """Every query of an evaluation, column by column, as scoring made them: the values of
    each metric in one array, the sparse parts (failed calls, repeated ids, the judge's
    verdicts) only where there are some."""

    ids: Sequence[str]
    queries: Sequence[str]
    tags: Sequence[tuple[str, ...]]
    relevant: Sequence[dict[str, int]]
    returned: Sequence[Sequence[str]]
    values: Mapping[str, FloatArray]  # metric -> one value per query
    latency_ms: FloatArray
    errors: Mapping[int, str]  # row -> its call's error
    duplicates: Mapping[int, int]  # row -> repeated ids dropped
    fingerprints: Sequence[str]
    criteria: Sequence[str | None] | None = None  # None: no query has any
    judgments: Sequence[dict[str, dict[str, Any]]] | None = None  # None: no judge
    downstream: Sequence[dict[str, float]] | None = None
    texts: Sequence[dict[str, str]] | None = None
    scores: Sequence[dict[str, float]] | None = None


_NONE: dict[str, Any] = {}  # what a query without judgments, labels, texts or scores holds


#: rows :meth:`QueryTable.pick` builds one at a time at most, before the whole table
PICKED = 1000


class QueryTable(Sequence[QueryResult]):
    """An evaluation's per-query results: a sequence of :class:`QueryResult` to every
    reader, equal to the list of them, kept as columns until one is asked for.

    Building a QueryResult and its dict of values for each of 100,000 queries costs as much
    as scoring them, and a gating run reads only columns (a metric's values, the failed
    calls, the list lengths: :meth:`values`, :meth:`error_rows`, ...). So the objects are
    built when something asks for them -- a report, a baseline, a renderer showing queries,
    the API -- all at once and kept; one asked for by its index (a failed query) is kept
    and is the same object in the whole list later; a slice (a report's chunk) is built and
    not kept. Once built, or when made from a list of QueryResults (a report read back,
    merged parts), its columns are read off the objects, once.
    """

    __slots__ = ("_built", "_columns", "_derived", "_single")

    def __init__(
        self, rows: Sequence[QueryResult] | None = None, columns: QueryColumns | None = None
    ) -> None:
        if (rows is None) == (columns is None):
            raise TypeError("QueryTable takes rows or columns")
        self._built: list[QueryResult] | None = None if rows is None else list(rows)
        self._columns = columns
        self._derived: dict[str, Any] = {}
        self._single: dict[int, QueryResult] = {}  # rows built one at a time, by index

    def __len__(self) -> int:
        return len(self._built) if self._built is not None else len(self._columns.ids)  # type: ignore[union-attr]

    @overload
    def __getitem__(self, index: int) -> QueryResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[QueryResult]: ...

    def __getitem__(self, index: int | slice) -> QueryResult | list[QueryResult]:
        if self._built is not None:
            return self._built[index]
        rows = range(len(self))[index]
        if isinstance(rows, int):
            if rows not in self._single:
                self._single[rows] = self._build(range(rows, rows + 1))[0]
            return self._single[rows]
        return self._build(rows) if rows.step == 1 else self.rows[index]

    def __iter__(self) -> Iterator[QueryResult]:
        return iter(self.rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, QueryTable):
            return self.rows == other.rows
        return isinstance(other, list) and self.rows == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"QueryTable({len(self)} queries)"

    @property
    def columns(self) -> QueryColumns | None:
        """The columns it was made from, while no QueryResult has been built (None after,
        or when it was made from QueryResults)."""
        return self._columns if self._built is None else None

    @property
    def rows(self) -> list[QueryResult]:
        """Every QueryResult, built on the first call."""
        if self._built is None:
            built = self._build(range(len(self)))
            for row, result in self._single.items():
                built[row] = result
            self._built, self._single = built, {}
        return self._built

    def pick(self, rows: Iterable[int]) -> list[QueryResult]:
        """The QueryResults of ``rows`` (a few failed queries, say): the built ones when
        the table is built; otherwise built and, like a slice's, not kept -- a gate that
        reads them does not hold a large table's rows -- unless they are many and a
        quarter of the table or more, which is then built whole (one row at a time costs
        more)."""
        rows = list(rows)
        if self._built is None and len(rows) > PICKED and 4 * len(rows) >= len(self):
            self.rows  # noqa: B018 -- build and keep them all
        if self._built is not None:
            return [self._built[row] for row in rows]
        single = self._single
        return [single.get(row) or self._build(range(row, row + 1))[0] for row in rows]

    # ------------------------------------------------------------ columns

    @property
    def ids(self) -> Sequence[str]:
        if (columns := self.columns) is not None:
            return columns.ids
        return self._derive("ids", lambda: [q.id for q in self.rows])

    @property
    def relevant(self) -> Sequence[dict[str, int]]:
        if (columns := self.columns) is not None:
            return columns.relevant
        return self._derive("relevant", lambda: [q.relevant for q in self.rows])

    @property
    def returned(self) -> Sequence[Sequence[str]]:
        if (columns := self.columns) is not None:
            return columns.returned
        return self._derive("returned", lambda: [q.returned for q in self.rows])

    @property
    def fingerprints(self) -> Sequence[str]:
        if (columns := self.columns) is not None:
            return columns.fingerprints
        return self._derive("fingerprints", lambda: [q.fingerprint for q in self.rows])

    @property
    def latency_ms(self) -> FloatArray:
        if (columns := self.columns) is not None:
            return columns.latency_ms
        return self._derive(
            "latency_ms",
            lambda: np.fromiter((q.latency_ms for q in self.rows), np.float64, len(self)),
        )

    @property
    def judgments(self) -> Sequence[Mapping[str, dict[str, Any]]]:
        """Each query's judge verdicts by doc id (empty without a judge)."""
        if (columns := self.columns) is not None:
            return columns.judgments or [_NONE] * len(self)
        return self._derive("judgments", lambda: [q.judgments for q in self.rows])

    def values(self, metric: str) -> FloatArray:
        """``metric``'s value for every query (NaN where a query has none)."""
        if (columns := self.columns) is not None and metric in columns.values:
            return columns.values[metric]
        return self._derive(
            f"values:{metric}",
            lambda: np.fromiter(
                (q.metrics.get(metric, math.nan) for q in self.rows),
                dtype=np.float64,
                count=len(self),
            ),
        )

    def error_rows(self) -> Mapping[int, str]:
        """Row -> error, for the queries whose retriever call failed."""
        if (columns := self.columns) is not None:
            return columns.errors
        return self._derive(
            "errors", lambda: {i: q.error for i, q in enumerate(self.rows) if q.error is not None}
        )

    def duplicates(self) -> int:
        """Repeated ids dropped, over all queries."""
        if (columns := self.columns) is not None:
            return sum(columns.duplicates.values())
        return sum(q.duplicates for q in self.rows)

    def entries(
        self, start: int = 0, stop: int | None = None, *, rankings: bool = False
    ) -> list[dict[str, Any]]:
        """The report entries (:meth:`QueryResult.to_dict`, ``rankings`` passed on) of rows
        ``start:stop``, made from the columns without building the QueryResults."""
        c = self._columns
        if c is None or self._built is not None:
            return [q.to_dict(rankings=rankings) for q in self.rows[start:stop]]
        rows = range(len(self))[start:stop]
        start, stop = rows.start, rows.stop
        names = list(c.values)
        values = zip(*(column[start:stop].tolist() for column in c.values.values()), strict=True)
        latency = c.latency_ms[start:stop].tolist()
        entries = [
            {
                "id": qid,
                "query": text,
                "tags": list(tags),
                "returned": returned if rankings else tuple(returned),
                "relevant": relevant,
                "metrics": dict(zip(names, row, strict=True)),
                "latency_ms": round(ms, 3),
                "error": None,
                "duplicates": 0,
                "fingerprint": fingerprint,
            }
            for qid, text, tags, returned, relevant, row, ms, fingerprint in zip(
                c.ids[start:stop],
                c.queries[start:stop],
                c.tags[start:stop],
                c.returned[start:stop],
                c.relevant[start:stop],
                values if names else [()] * len(rows),
                latency,
                c.fingerprints[start:stop],
                strict=True,
            )
        ]
        for row, error in c.errors.items():
            if start <= row < stop:
                entries[row - start]["error"] = error
        for row, dropped in c.duplicates.items():
            if start <= row < stop:
                entries[row - start]["duplicates"] = dropped
        for key, column in (  # in to_dict's order: the set ones only
            ("judgments", c.judgments),
            ("downstream", c.downstream),
            ("texts", c.texts),
            ("scores", c.scores),
            ("criteria", c.criteria),
        ):
            if column is not None:
                for entry, value in zip(entries, column[start:stop], strict=True):
                    if value or (key == "criteria" and value is not None):
                        entry[key] = value
        return entries

    def _derive(self, key: str, make: Callable[[], _T]) -> _T:
        """A column read off the built QueryResults, once."""
        if key not in self._derived:
            self._derived[key] = make()
        column: _T = self._derived[key]
        return column

    def _build(self, rows: range) -> list[QueryResult]:
        """The QueryResults of ``rows`` from the columns, each value a float shared by the
        queries that have it (a metric takes few values: 24 bytes a query and metric
        saved on large sets)."""
        c = self._columns
        assert c is not None
        start, stop = rows.start, rows.stop
        names = list(c.values)
        shared = [shared_floats(column[start:stop]) for column in c.values.values()]
        metrics = [dict(zip(names, row, strict=True)) for row in zip(*shared, strict=True)]
        if not names:
            metrics = [{} for _ in rows]
        none = repeat(None)
        nothing = repeat(_NONE)
        latency = c.latency_ms[start:stop].tolist()
        errors, duplicates = c.errors, c.duplicates
        return list(
            map(
                QueryResult,
                c.ids[start:stop],
                c.queries[start:stop],
                c.tags[start:stop],
                c.relevant[start:stop],
                c.returned[start:stop],
                metrics,
                latency,
                map(errors.get, rows) if errors else none,
                map(duplicates.get, rows, repeat(0)) if duplicates else repeat(0),
                c.fingerprints[start:stop],
                nothing if c.judgments is None else c.judgments[start:stop],
                nothing if c.downstream is None else c.downstream[start:stop],
                none if c.criteria is None else c.criteria[start:stop],
                nothing if c.texts is None else c.texts[start:stop],
                nothing if c.scores is None else c.scores[start:stop],
            )
        )


def _misses(relevant: Mapping[str, int], returned: Sequence[str]) -> bool:
    """A relevant doc (grade >= 1) is not in ``returned`` (:attr:`QueryResult.missed`)."""
    got = set(returned)
    return any(grade > 0 and doc not in got for doc, grade in relevant.items())


def shared_floats(values: FloatArray) -> list[float]:
    """``values.tolist()`` with one float object per distinct value."""
    seen: dict[float, float] = {}
    return [seen.setdefault(value, value) for value in values.tolist()]


@dataclass(frozen=True)
class ErrorGroup:
    """Failed queries whose errors differ at most in numbers: one bug, reported once."""

    error: str  # the first query's message
    queries: list[str]  # their ids, in golden order
    traceback: str | None  # the first traceback the run kept of this kind of error
    uniform: bool  # every message is the same (not only up to numbers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": self.error,
            "count": len(self.queries),
            "queries": self.queries,
            "traceback": self.traceback,
        }


@dataclass(frozen=True)
class ShortResults:
    """Most queries got fewer hits than the deepest metric's k (a retriever ignoring k?)."""

    metric: str  # the deepest metric (recall's when several share that k)
    k: int
    short: int  # answered queries with fewer than k hits
    answered: int  # queries whose call did not fail (and, from a run file, that it holds)
    median: float  # hits per answered query

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "k": self.k,
            "queries": self.short,
            "of": self.answered,
            "median_hits": self.median,
        }


# ---------------------------------------------------------------------------- comparisons


class ChangeStatus(str, Enum):
    """What a metric's change against the reference means (:attr:`MetricChange.verdict`).

    A ``str`` whose value the JSON report writes, so reports read as before; a member, not a
    literal, in the code, so a misspelt status is an error rather than a silent "not a
    regression". (``enum.StrEnum`` is 3.11+; ``__str__`` and ``__format__`` make it one.)
    """

    #: gated: dropped beyond the allowance, significantly (fails the gate)
    REGRESSED = "regressed"
    #: dropped (a latency: rose) beyond the allowance, not significantly
    WITHIN_NOISE = "within noise"
    #: gated: rose beyond the allowance, significantly
    IMPROVED = "improved"
    #: not gated: beyond the allowance with unadjusted p < alpha; never fails
    DROPPED = "dropped"
    ROSE = "rose"
    OK = "ok"
    #: no query has a value on both sides (nothing graded)
    NA = "n/a"
    NOT_IN_BASELINE = "not in baseline"
    #: a judge metric whose judge settings changed: not comparable
    JUDGE_CHANGED = "judge changed"
    #: asked for, and nothing to test it on (a latency gate without timings)
    NOT_TESTED = "not tested"
    #: in an A/B table, instead of REGRESSED / IMPROVED
    WORSE = "worse"
    BETTER = "better"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def _missing_(cls, value: object) -> ChangeStatus:
        known = ", ".join(repr(status.value) for status in cls)
        raise ValueError(f"{value!r} is not a metric change status (one of {known})")

    @property
    def compared(self) -> bool:
        """The metric was compared (else: missing from the reference, or not comparable)."""
        return self not in (self.NOT_IN_BASELINE, self.JUDGE_CHANGED, self.NOT_TESTED)


@dataclass(frozen=True)
class MetricChange:
    """One metric against the reference: values, the paired test, and what it means
    (``verdict``, a :class:`ChangeStatus`; a string is made one)."""

    metric: str
    baseline: float
    current: float
    allowed: float
    p_value: float | None = None  # raw one-sided p in the direction of the change
    p_adjusted: float | None = None  # Holm-Bonferroni over the gated metrics (gated only)
    verdict: ChangeStatus = ChangeStatus.OK
    gated: bool = False

    def __post_init__(self) -> None:
        """A status read from a report (a string) is the member it names."""
        object.__setattr__(self, "verdict", ChangeStatus(self.verdict))

    @property
    def delta(self) -> float:
        return self.current - self.baseline


_CHANGE_NUMBERS = ("baseline", "current", "allowed")


def _stop_cause(errors: Mapping[int, str]) -> str:
    """The kind (:func:`~.hits.error_key`) of the failures in a row that stopped the calls:
    the last failure, in golden order, before the first query left unanswered ("": the
    calls did not stop). Calls run side by side end in about golden order."""
    stopped = [row for row, error in errors.items() if error.startswith(NOT_ANSWERED)]
    if not stopped:
        return ""
    first = min(stopped)
    failed = [row for row, error in errors.items() if not error.startswith(NOT_ANSWERED)]
    before = [row for row in failed if row < first] or failed
    return error_key(errors[max(before)]) if before else ""


@dataclass(frozen=True)
class HitMove:
    """A document that entered or left a metric's top k between the reference and this run,
    or a relevant one that moved within it (ranks are 1-based; None: not retrieved now / not
    in the reference's known ranking)."""

    doc: str
    before: int | None
    after: int | None
    grade: int | None  # its golden grade (0: judged not relevant); None: not labelled
    judge_before: int | None = None  # the reference's judge label of it (1/0 or grade 0-3)
    judge_after: int | None = None  # this run's judge label of it; None: none or ungraded
    reason: str | None = None  # this run's judge reason, when it was judged


@dataclass(frozen=True)
class QueryChange:
    """One query whose value of ``metric`` changed: before -> after, and where its documents
    went: those that entered or left the top k, and the relevant ones that moved within it
    (relevant first), so a reviewer sees why."""

    id: str
    query: str
    metric: str
    before: float
    after: float
    tags: tuple[str, ...] = ()
    moves: tuple[HitMove, ...] = ()
    #: the reference's ranking of this query (a baseline's: its stored top k)
    reference_ranked: tuple[str, ...] = ()
    depth: int = 0  # how deep the reference's ranking is known (a baseline stores its top k)
    asked: int = 0  # how deep this run retrieved: a rank of None means "below #asked"

    @property
    def delta(self) -> float:
        return self.after - self.before

    @property
    def k(self) -> int:
        return parse_metric(self.metric).k

    @property
    def lost(self) -> list[HitMove]:
        """Relevant documents that left the top k."""
        return [m for m in self.moves if (m.grade or 0) > 0 and _crossed(m.before, m.after, self.k)]

    @property
    def gained(self) -> list[HitMove]:
        """Relevant documents that entered the top k."""
        return [m for m in self.moves if (m.grade or 0) > 0 and _crossed(m.after, m.before, self.k)]

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["tags"], values["reference_ranked"] = list(self.tags), list(self.reference_ranked)
        values["moves"] = [_compact(asdict(m)) for m in self.moves]
        return values

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryChange:
        return cls(
            id=data["id"],
            query=data["query"],
            metric=data["metric"],
            before=_nan(data["before"]),
            after=_nan(data["after"]),
            tags=tuple(data.get("tags", ())),
            moves=tuple(HitMove(**move) for move in data.get("moves", ())),
            reference_ranked=tuple(data.get("reference_ranked", ())),
            depth=data.get("depth", 0),
            asked=data.get("asked", 0),
        )


def _crossed(was: int | None, now: int | None, k: int) -> bool:
    """Rank ``was`` was in the top ``k`` and ``now`` is not (``_crossed(after, before, k)``
    reads time backwards: entering)."""
    return was is not None and was <= k and (now is None or now > k)


def _compact(move: dict[str, Any]) -> dict[str, Any]:
    """A move without its empty judge fields (most runs have no judge)."""
    return {key: value for key, value in move.items() if value is not None or key in _MOVE_KEYS}


_MOVE_KEYS = ("doc", "before", "after", "grade")


@dataclass(frozen=True)
class QueryShifts:
    """How the queries moved on one gated metric: counts, and every query that changed
    (largest drop first, largest gain last), whatever the aggregate verdict says."""

    metric: str
    worse: int
    better: int
    unchanged: int
    open: int  # queries with no value in one of the runs: not counted either way
    depth: int  # how deep the reference's ranking is known (a baseline's: its stored k)
    queries: tuple[QueryChange, ...] = ()

    def worst(self, n: int) -> list[QueryChange]:
        """Up to ``n`` queries that got worse, the largest drop first."""
        return [q for q in self.queries if q.delta < 0][:n]

    def best(self, n: int) -> list[QueryChange]:
        """Up to ``n`` queries that got better, the largest gain first."""
        return [q for q in reversed(self.queries) if q.delta > 0][:n]

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "worse": self.worse,
            "better": self.better,
            "unchanged": self.unchanged,
            "open": self.open,
            "depth": self.depth,
            "queries": [q.to_dict() for q in self.queries],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryShifts:
        values = {key: data[key] for key in ("metric", "worse", "better", "unchanged", "open")}
        queries = tuple(QueryChange.from_dict(q) for q in data.get("queries", ()))
        return cls(**values, depth=data.get("depth", 0), queries=queries)


#: The holes warning (decided by :func:`.compare.unjudged_hits`): a run's judged@k warns when
#: it is more than JUDGED_GAP below its reference's, OR more than JUDGED_SHARE_GAP of the
#: reference's below it (current < 0.75 x reference) while at least JUDGED_MIN_GAP below.
#: The absolute arm: a tenth of the top k, one more unjudged doc per query at k = 10, moves
#: recall and nDCG by as much as the share of relevant docs among those unjudged ones -- the
#: size of change a gate is asked to catch. It can never fire on a sparse golden set (a fresh
#: synth set judges one doc per query: judged@10 <= 0.1), hence the relative arm; its floor
#: keeps a handful of docs on a sparse set (0.04 against 0.025) from warning.
JUDGED_GAP = 0.10
JUDGED_SHARE_GAP = 0.25
JUDGED_MIN_GAP = 0.02


@dataclass(frozen=True)
class UnjudgedHits:
    """This run's judged@k is much lower than its reference's on the queries both share (the
    rule at JUDGED_GAP): its top k holds documents the golden set has not judged, which every
    golden metric counts as not relevant, so its recall and nDCG may be understated against
    the reference. Decided once by :mod:`.compare`; every output renders :meth:`message`."""

    metric: str  # judged@k at the evaluation's k
    reference: float  # the reference's judged@k on the shared queries both answered
    current: float  # this run's, on the same queries
    #: how many queries that is, when some shared queries are left out (either run
    #: returned nothing for them); None: all of them
    queries: int | None = None

    @property
    def k(self) -> int:
        return parse_metric(self.metric).k

    @property
    def rule(self) -> str:
        """Which arm of the rule at JUDGED_GAP the values meet, in words (the absolute one
        when both do)."""
        if self.reference - self.current > JUDGED_GAP:
            return f"more than {JUDGED_GAP:g} lower"
        return f"more than {JUDGED_SHARE_GAP:.0%} and at least {JUDGED_MIN_GAP:g} lower"

    def message(self, against: str) -> str:
        """The warning, naming the reference (``Comparison.reference``) and the arm of the
        rule that held; it ends where the :meth:`command` that fills the holes follows."""
        k = self.k
        on = "" if self.queries is None else f" on the {self.queries} queries both answered"
        return (
            f"{self.metric} is {self.current:.4f} against {self.reference:.4f} for {against}"
            f"{on} ({self.rule}): its top {k} holds documents the golden set "
            f"has not judged, which count as not relevant, so its recall@{k} and ndcg@{k} may "
            "be understated. Pool them for the LLM judge to grade and you to review "
            "(REPORT.json: this run's JSON report, --retrieval-report or eval's and combine's "
            "--report) with"
        )

    @staticmethod
    def command(golden: str) -> str:
        """The command that pools the unjudged hits of this run's report into a review file
        (``golden``: the golden set's path, given relative to the working directory)."""
        return f"pytest-retrieval pool {relative(golden)} REPORT.json -o review.jsonl"

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "reference": self.reference,
            "current": self.current,
            "queries": self.queries,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UnjudgedHits:
        queries = data.get("queries")
        return cls(
            str(data["metric"]),
            _nan(data["reference"]),
            _nan(data["current"]),
            None if queries is None else int(queries),
        )


@dataclass(frozen=True)
class Comparison:
    """A run against its baseline (or one retriever against another in an A/B run)."""

    reference: str  # "baseline <path>" or "retriever <id>"
    n_common: int
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    rejudged: list[str] = field(default_factory=list)
    changes: list[MetricChange] = field(default_factory=list)
    #: gated metric -> how the shared queries moved on it (every changed query)
    shifts: dict[str, QueryShifts] = field(default_factory=dict)
    stale: str | None = None
    alpha: float = DEFAULT_ALPHA
    baseline_created: str = ""
    baseline_commit: str = ""
    #: judge setting -> [baseline's, this run's], when LLM-judged values are not comparable
    judge_changed: dict[str, list[Any]] = field(default_factory=dict)
    #: set when this run's judged@k is much lower than the reference's (a warning, no failure)
    unjudged: UnjudgedHits | None = None

    @property
    def regressed(self) -> list[MetricChange]:
        return [
            c for c in self.changes if c.verdict in (ChangeStatus.REGRESSED, ChangeStatus.WORSE)
        ]

    @property
    def improved(self) -> list[MetricChange]:
        return [
            c for c in self.changes if c.verdict in (ChangeStatus.IMPROVED, ChangeStatus.BETTER)
        ]

    @property
    def drifted(self) -> bool:
        return bool(self.added or self.removed or self.rejudged)

    def to_dict(self, golden: str = "GOLDEN") -> dict[str, Any]:
        """The JSON report's comparison; ``golden``: the golden set's path, for the command
        in the unjudged warning's words."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "shifts"}
        values["changes"] = [asdict(c) for c in self.changes]
        values["shifts"] = {name: shift.to_dict() for name, shift in self.shifts.items()}
        unjudged = self.unjudged
        values["unjudged"] = None
        if unjudged is not None:  # with its words, for readers of the JSON report
            words = f"{unjudged.message(self.reference)}: {unjudged.command(golden)}"
            values["unjudged"] = {**unjudged.to_dict(), "message": words}
        return values

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        values = {key: value for key, value in data.items() if key != "worse"}  # older reports
        values["changes"] = [  # a number JSON cannot hold (NaN: no latency) is written null
            MetricChange(**{**c, **{k: _nan(c[k]) for k in _CHANGE_NUMBERS if k in c}})
            for c in data.get("changes", [])
        ]
        values["shifts"] = {
            name: QueryShifts.from_dict(shift) for name, shift in (data.get("shifts") or {}).items()
        }
        unjudged = data.get("unjudged")
        values["unjudged"] = None if unjudged is None else UnjudgedHits.from_dict(unjudged)
        return cls(**values)


# ---------------------------------------------------------------------------- parts


@dataclass(frozen=True)
class Part:
    """The part of a golden set an evaluation covers (a CI shard, ``--retrieval-shard I/N``)
    and what ``pytest-retrieval combine`` needs to gate the whole as one run would: where each
    query stands in the whole set (the bootstrap and the paired tests depend on the order),
    the whole set's size, and the gate's settings, which a part cannot apply itself."""

    index: int  # 0-based: shard I/N has index I - 1
    count: int
    total: int  # queries in the whole golden set
    positions: tuple[int, ...]  # each query's index in the whole set, in this part's order
    golden: str  # the golden set's path as the run named it (relative to where it started)
    nodeid: str  # the test item, so the combined JUnit names the same test case
    settings: dict[str, Any]  # the gate's settings (``finish.GateSettings.to_dict``)

    @property
    def described(self) -> str:
        """``shard 2/3: 98 of 300 queries of golden.json``."""
        return (
            f"shard {self.index + 1}/{self.count}: {len(self.positions)} of {self.total} "
            f"queries of {self.golden}"
        )

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["positions"] = list(self.positions)
        return values

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Part:
        return cls(
            index=_whole(data["index"]),
            count=_whole(data["count"]),
            total=_whole(data["total"]),
            positions=tuple(map(_whole, data["positions"])),
            golden=str(data["golden"]),
            nodeid=str(data["nodeid"]),
            settings=dict(data["settings"]),
        )


# ---------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class EvaluationResult:
    """Aggregate and per-query metrics of one retriever on one golden set, and its verdict."""

    golden_name: str
    golden_source: str
    fingerprint: str
    retriever_id: str
    k: int
    metrics: dict[str, float]
    ci: dict[str, tuple[float, float]]
    ci_method: str
    per_tag: dict[str, dict[str, float]]
    tag_counts: dict[str, int]
    #: a :class:`QueryTable` (a list given is made one)
    queries: Sequence[QueryResult]
    latency_p50_ms: float
    latency_p95_ms: float
    thresholds: list[Threshold] = field(default_factory=list)
    #: metrics whose drop against a baseline can fail the run (the rest are reported only)
    gated: tuple[str, ...] = ()
    #: the stored baseline this run was compared with (set by the plugin)
    baseline_path: str | None = None
    baseline_note: str = ""  # "", "missing", "recording"
    comparison: Comparison | None = None
    #: metric -> (drop detectable with 80% power, allowed drop), for the gated metrics
    power: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the LLM judge's run summary (model, prompt version, calls, cache hits, tokens, cost,
    #: coverage, ungraded causes); None when no judge ran
    judge: dict[str, Any] | None = None
    #: the full golden set's size when only a ``--retrieval-sample`` of it ran
    sampled_from: int | None = None
    #: the precomputed run file evaluated (``--retrieval-run``, ``eval``); None: a retriever
    run_file: str | None = None
    #: golden query ids (golden order) the run file lacks: evaluated as returning nothing
    run_missing: tuple[str, ...] = ()
    #: the run file's format ("trec", "json", "jsonl"): one that can list a query with no
    #: hits and does not list one lacks it (no baseline is recorded); a TREC run cannot
    run_format: str | None = None
    #: the downstream (eRAG) labeller's run summary; None without one
    erag: dict[str, Any] | None = None
    #: error kind (``QueryResult.error_key``) -> the first traceback the run kept of it
    tracebacks: dict[str, str] = field(default_factory=dict)
    #: judge metric -> (graded slots, slots) over its top k of every query: the share of the
    #: value that rests on the judge's labels (ungraded hits are left out of judge metrics)
    label_coverage: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: set on a CI shard's evaluation of part of the golden set (None: the whole set)
    part: Part | None = None
    #: the command that makes this result again, for the fixes notes print: the
    #: ``pytest-retrieval eval``/``combine`` line as typed, or ``pytest`` naming the
    #: ``retrieval_eval`` test ("": the golden set's pytest run)
    rerun: str = ""
    verdict: Verdict = UNDECIDED

    def __post_init__(self) -> None:
        if not isinstance(self.queries, QueryTable):
            object.__setattr__(self, "queries", QueryTable(self.queries))

    @property
    def table(self) -> QueryTable:
        """The per-query results, with their columns (:class:`QueryTable`)."""
        assert isinstance(self.queries, QueryTable)
        return self.queries

    @property
    def passed(self) -> bool:
        """The verdict's answer (thresholds, regressions, failed calls, judge coverage...)."""
        return self.verdict.passed

    @property
    def regressed(self) -> bool:
        return bool(self.verdict.of_kind(REGRESSION))

    @property
    def errors(self) -> list[QueryResult]:
        """Queries whose retriever call failed (they scored 0)."""
        return self.table.pick(self.table.error_rows())

    @property
    def error_groups(self) -> list[ErrorGroup]:
        """The failed queries grouped by kind of error, the most frequent first; when the
        calls stopped on failures in a row, the kind of the last failure before the stop
        (the streak that stopped them) first, the queries left unanswered last."""
        groups: dict[str, list[QueryResult]] = {}
        for query in self.errors:
            groups.setdefault(query.error_key, []).append(query)
        cause = _stop_cause(self.table.error_rows())
        return [
            ErrorGroup(
                error=members[0].error or "",
                queries=[q.id for q in members],
                traceback=self.tracebacks.get(key),
                uniform=all(q.error == members[0].error for q in members),
            )
            # the most frequent first; the queries left unanswered when the calls stopped
            # last: the failures before them are the cause
            for key, members in sorted(
                groups.items(),
                key=lambda kv: (kv[0].startswith(NOT_ANSWERED), kv[0] != cause, -len(kv[1])),
            )
        ]

    @property
    def failed_calls(self) -> str:
        """``25 of 80 retriever calls failed`` (empty: none), and how many queries were left
        unanswered when the calls stopped on failures in a row (``; the calls stopped, leaving
        55 queries unanswered``)."""
        errors = self.table.error_rows()
        if not errors:
            return ""
        stopped = sum(error.startswith(NOT_ANSWERED) for error in errors.values())
        said = f"{len(errors) - stopped} of {len(self.queries)} retriever calls failed"
        if stopped:
            said += f"; the calls stopped, leaving {stopped} queries unanswered"
        return said

    @cached_property
    def short_results(self) -> ShortResults | None:
        """Set when more than half of the answered queries got fewer hits than the deepest
        metric's k, and some of those missed a relevant document: the missing ranks count as
        misses, often because the retriever ignores k (or slices to a fixed number). (Read
        by the summary and the report: found once.) A query a run file lacks is not counted:
        the run coverage warning names it."""
        depths = {name: parse_metric(name).k for name in self.metrics}
        if not depths:
            return None
        k = max(depths.values())
        deepest = [name for name, depth in depths.items() if depth == k]
        metric = next((name for name in deepest if name.startswith("recall@")), deepest[0])
        table = self.table
        failed = table.error_rows()
        lengths = np.fromiter(map(len, table.returned), dtype=np.intp, count=len(table))
        answered = np.ones(len(table), dtype=bool)
        answered[list(failed)] = False
        if self.run_missing:
            lacked = set(self.run_missing)
            answered[[row for row, qid in enumerate(table.ids) if qid in lacked]] = False
        short = np.flatnonzero(answered & (lengths < k))
        if len(short) * 2 <= int(answered.sum()):
            return None
        relevant, returned = table.relevant, table.returned
        if not any(_misses(relevant[row], returned[row]) for row in short.tolist()):
            return None
        median = float(np.median(lengths[answered]))
        return ShortResults(metric, k, len(short), int(answered.sum()), median)

    @property
    def duplicates(self) -> int:
        return self.table.duplicates()

    @property
    def depth(self) -> int:
        """How deep each query was retrieved: the deepest k of its metrics."""
        return max([self.k, *(parse_metric(m).k for m in self.metrics)])

    @property
    def relevance_level(self) -> int:
        """The grade from which the judge's 0-3 verdicts count as relevant, as its summary
        recorded it (no judge, or a report older than the setting: the default)."""
        level = (self.judge or {}).get("relevance_level")
        return level if type(level) is int else DEFAULT_RELEVANCE_LEVEL

    def judge_slots(self, query: QueryResult, depth: int) -> list[int | None] | None:
        """The judge's label of each hit of ``query``'s top ``depth``, by rank: 1/0 on the
        binary scale, the grade on the 0-3 scale, None where it gave no verdict; None when
        no judge ran."""
        return self.judge_labels(query.returned, query.judgments, depth)

    def judge_labels(
        self, returned: Sequence[str], judgments: Mapping[str, dict[str, Any]], depth: int
    ) -> list[int | None] | None:
        """:meth:`judge_slots` of a query's columns: what it returned and the judge's
        verdicts."""
        if not self.judge:
            return None
        graded = self.judge.get("scale") == "0-3"
        labels: list[int | None] = []
        for doc in returned[:depth]:
            verdict = judgments.get(doc) or {}
            grade = verdict.get("grade")
            if not is_graded(verdict):
                labels.append(None)
            elif graded:
                labels.append(grade if type(grade) is int else None)
            else:
                labels.append(int(verdict["on_topic"]))
        return labels

    @property
    def open_queries(self) -> int:
        """Queries without golden judgments (scored by the judge or downstream labels only)."""
        return sum(1 for relevant in self.table.relevant if not relevant)

    if not TYPE_CHECKING:  # hidden from mypy, which would take any attribute name else

        def __getattr__(self, name: str) -> Any:
            """The assertions that were methods name the function that replaced them."""
            moved = _MOVED.get(name)
            if moved is None:
                raise AttributeError(f"'EvaluationResult' object has no attribute {name!r}")
            raise AttributeError(
                f"EvaluationResult.{name}() is no method any more: call "
                f"pytest_retrieval.{moved} instead (from pytest_retrieval import {name})"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationResult:
        return result_from_dict(data)

    def to_dict(self, *, queries: bool = True) -> dict[str, Any]:
        """The JSON report entry (schema: ``schema/report.schema.json``); without
        ``queries``, its ``queries`` list is left empty (a streamed report writes them)."""
        with paused_gc():
            return self._to_dict(queries)

    def _to_dict(self, queries: bool) -> dict[str, Any]:
        short = self.short_results
        part = {} if self.part is None else {"part": self.part.to_dict()}  # a shard's only
        rerun = {"rerun": self.rerun} if self.rerun else {}
        return {
            **part,
            **rerun,
            "golden": {
                "name": self.golden_name,
                "source": self.golden_source,
                "fingerprint": self.fingerprint,
            },
            "retriever": self.retriever_id,
            "k": self.k,
            "n_queries": len(self.queries),
            "metrics": self.metrics,
            "ci": {name: list(bounds) for name, bounds in self.ci.items()},
            "ci_method": self.ci_method,
            "coverage": {
                name: {"graded": graded, "slots": slots}
                for name, (graded, slots) in self.label_coverage.items()
            },
            "per_tag": {
                tag: {"n_queries": self.tag_counts[tag], "metrics": values}
                for tag, values in self.per_tag.items()
            },
            "latency_ms": {"p50": self.latency_p50_ms, "p95": self.latency_p95_ms},
            "thresholds": [
                {
                    "metric": o.threshold.key,
                    "minimum": o.threshold.minimum,
                    "value": o.value,
                    "passed": o.passed,
                    "source": o.threshold.source,
                }
                for o in self.verdict.outcomes
            ],
            "gated": list(self.gated),
            "errors": len(self.errors),
            "error_groups": [group.to_dict() for group in self.error_groups],
            "short_results": None if short is None else short.to_dict(),
            "duplicates_dropped": self.duplicates,
            "passed": self.verdict.passed,
            "verdict": self.verdict.to_dict(),
            "baseline": {
                "path": self.baseline_path,
                "note": self.baseline_note,
                "comparison": None
                if self.comparison is None
                else self.comparison.to_dict(self.golden_source),
                "power": {name: list(pair) for name, pair in self.power.items()},
            },
            "judge": self.judge,
            "sampled_from": self.sampled_from,
            "run_file": self.run_file,
            "run_missing": list(self.run_missing),
            "run_format": self.run_format,
            "erag": self.erag,
            "queries": self.table.entries() if queries else [],
        }


def _whole(value: Any) -> int:
    """A whole number as JSON gives it (2 or 2.0, as JSON Schema's "integer"; not "2", 2.5 or
    false): a TypeError otherwise, for the caller's message."""
    if type(value) is int or (type(value) is float and value.is_integer()):
        return int(value)
    raise TypeError(f"{value!r} is not a whole number")


def _returned(stored: Sequence[str] | str) -> Sequence[str]:
    """A ranking as a report stores it (a list of ids), or as :func:`to_wire` does (a
    Ranking's joined string: ids never hold the NUL that joins them)."""
    if isinstance(stored, str):
        return Ranking(stored, stored.count(NUL) + 1 if stored else 0)
    return tuple(stored)


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _threshold(entry: Mapping[str, Any]) -> Threshold:
    key = str(entry["metric"])
    name, _, tag = key.partition("[")
    return Threshold(parse_metric(name), float(entry["minimum"]), tag[:-1] or None, entry["source"])


def _reasons(entries: Iterable[Mapping[str, Any]]) -> tuple[Reason, ...]:
    return tuple(Reason(e["kind"], e["message"], e.get("metric")) for e in entries)


def verdict_from_dict(data: Mapping[str, Any]) -> Verdict:
    """The verdict as a report stored it (the thresholds' outcomes are in the entry)."""
    stored = data.get("verdict")
    if not isinstance(stored, Mapping):  # a report older than the verdict: fail safe
        return UNDECIDED
    outcomes = tuple(
        GateOutcome(_threshold(t), _nan(t["value"]), None, bool(t["passed"]))
        for t in data.get("thresholds", [])
    )
    return Verdict(_reasons(stored["reasons"]), _reasons(stored.get("warnings", [])), outcomes)


def to_wire(result: EvaluationResult) -> str:
    """``result``'s report entry as one JSON string, for the test report an xdist worker
    sends to the controller. execnet's serializer, in Python, walks each object of a nested
    entry: 100,000 queries x 100 hits took over a minute and 3 GB; one string crosses whole.
    A :class:`~.hits.Ranking` is written as its one joined string, not as 100 strings. NaN
    and infinities are written as JS spells them (``allow_nan``), so every float comes back
    as it was: this text is for :func:`from_wire`, not for a JSON file."""
    with paused_gc():
        entry = result.to_dict(queries=False)
        entry["queries"] = result.table.entries(rankings=True)
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=_joined)


def _joined(value: object) -> str:
    """What JSON writes for a Ranking (``json.dumps``' ``default``; nothing else reaches it)."""
    if isinstance(value, Ranking):
        return value.joined
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def from_wire(text: str) -> dict[str, Any]:
    """The report entry :func:`to_wire` wrote (``EvaluationResult.from_dict`` reads it)."""
    with paused_gc():
        entry: dict[str, Any] = json.loads(text)
    return entry


def result_from_dict(data: Mapping[str, Any]) -> EvaluationResult:
    """Rebuild an :class:`EvaluationResult` from its report entry (``to_dict``)."""
    with paused_gc():
        return _result_from_dict(data)


def _result_from_dict(data: Mapping[str, Any]) -> EvaluationResult:
    baseline = data.get("baseline") or {}
    stored = baseline.get("comparison")
    queries = [
        QueryResult(
            id=q["id"],
            query=q["query"],
            tags=tuple(q["tags"]),
            relevant=dict(q["relevant"]),
            returned=_returned(q["returned"]),
            metrics={name: _nan(v) for name, v in q["metrics"].items()},
            latency_ms=_nan(q["latency_ms"]),
            error=q["error"],
            duplicates=q["duplicates"],
            fingerprint=q.get("fingerprint", ""),
            judgments=dict(q.get("judgments") or {}),
            downstream=dict(q.get("downstream") or {}),
            criteria=q.get("criteria"),
            texts=dict(q.get("texts") or {}),
            scores=dict(q.get("scores") or {}),
        )
        for q in data["queries"]
    ]
    verdict = verdict_from_dict(data)
    return EvaluationResult(
        golden_name=data["golden"]["name"],
        golden_source=data["golden"]["source"],
        fingerprint=data["golden"]["fingerprint"],
        retriever_id=data["retriever"],
        k=data["k"],
        metrics={name: _nan(v) for name, v in data["metrics"].items()},
        ci={name: (_nan(lo), _nan(hi)) for name, (lo, hi) in data["ci"].items()},
        ci_method=data["ci_method"],
        per_tag={tag: dict(entry["metrics"]) for tag, entry in data["per_tag"].items()},
        tag_counts={tag: entry["n_queries"] for tag, entry in data["per_tag"].items()},
        queries=queries,
        latency_p50_ms=_nan(data["latency_ms"]["p50"]),
        latency_p95_ms=_nan(data["latency_ms"]["p95"]),
        thresholds=[o.threshold for o in verdict.outcomes],
        gated=tuple(data.get("gated", ())),
        baseline_path=baseline.get("path"),
        baseline_note=baseline.get("note", ""),
        comparison=None if stored is None else Comparison.from_dict(stored),
        power={name: (_nan(d), _nan(a)) for name, (d, a) in baseline.get("power", {}).items()},
        judge=data.get("judge"),
        sampled_from=data.get("sampled_from"),
        run_file=data.get("run_file"),
        run_missing=tuple(data.get("run_missing") or ()),
        run_format=data.get("run_format"),
        erag=data.get("erag"),
        tracebacks={
            error_key(group["error"]): group["traceback"]
            for group in data.get("error_groups") or []
            if group.get("traceback")
        },
        label_coverage={
            name: (int(entry["graded"]), int(entry["slots"]))
            for name, entry in (data.get("coverage") or {}).items()
        },
        part=None if data.get("part") is None else Part.from_dict(data["part"]),
        rerun=str(data.get("rerun") or ""),
        verdict=verdict,
    )


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
