"""Metric names and vectorised kernels, matching trec_eval on the same ranked lists.

Semantics (docs/metrics.md): the retriever's order is the ranking (never re-sorted by
score); a doc id repeated in one list counts at its first rank only; an empty list scores 0
and still counts; precision divides by k; a query must have at least one relevant document.

Every kernel works on a grade matrix ``G`` (queries x K): ``G[i, r]`` is the judged grade of
the document at rank ``r + 1`` of query ``i`` (0 when unjudged, judged non-relevant, or past
the end of the list). A grade >= 1 is relevant, as with trec_eval's default relevance level;
a negative grade counts as 0, as trec_eval's nDCG does.

``judged@k`` is no score of the retriever but of the golden set's coverage of its top k: the
share of the top k that carries a judgment (any grade, 0 included), as ir_measures' Judged@k
computes it: judged docs in the top k / min(k, docs returned), so a list shorter than k is
not penalised for the ranks it did not fill; an empty list scores 0 and counts (ir_measures
fills a query missing from the run with 0).

The LLM judge's metrics (``otr``, ``llm_*``) work on a slot matrix instead
(:func:`slot_matrix`): the judge's label at each rank 1..k, NaN where it could not grade the
hit. An ungraded hit is no label: it is left out (neither on nor off topic), so precision-like
rates divide by the graded slots (k less the ungraded hits; a slot past the end of the list is
a graded miss, as trec_eval's precision divides by k), and mrr / ndcg run on the condensed
list (ungraded hits removed, the rest ranked up, as Sakai's condensed lists do for unjudged
documents). A query whose top k has ungraded hits and no graded one has no value (NaN).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, repeat
from types import MappingProxyType
from typing import cast

import numpy as np
from numpy.typing import NDArray

from .errors import MetricNameError as MetricNameError  # raised here; public from here too

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]

#: bump when a metric's definition changes; baselines recorded under another version are
#: reported, not compared
DEFINITIONS_VERSION = 1

#: bump when a judge metric's definition changes; a baseline's judge metrics recorded under
#: another version are reported as "judge changed", not compared (2: ungraded hits left out,
#: graded metrics relevant at the relevance level)
JUDGE_METRICS_VERSION = 2

#: the judge's grade from which a hit counts as relevant for llm_precision / llm_mrr (the
#: 0-3 scale's "would satisfy the searcher"; ``--retrieval-judge-relevance-level``)
DEFAULT_RELEVANCE_LEVEL = 2

#: the label sources of the LLM judge: NaN labels (ungraded hits) are left out of these
JUDGED: tuple[str, ...] = ("on_topic", "llm_grade")

#: the share of the top k the golden set has judged (ir_measures' Judged@k; trec_eval has none)
JUDGED_FAMILY = "judged"

#: the metric families are :data:`FAMILIES`, one :class:`Family` record each, below the
#: formulas they name

#: the largest cutoff k anywhere (golden files, options, markers): a grade matrix holds
#: queries x k cells, so a k of 10**12 must be an error, not a MemoryError
MAX_K = 10_000

_NAME = re.compile(r"^(?P<family>[a-z_]+)@(?P<k>[0-9]+)$")


@dataclass(frozen=True)
class Metric:
    """A parsed metric name such as ``ndcg@10``."""

    family: str
    k: int

    @property
    def name(self) -> str:
        return f"{self.family}@{self.k}"

    def __str__(self) -> str:
        return self.name

    @property
    def labels(self) -> str:
        """Which labels it is computed on: "golden", or a judge/downstream source."""
        return FAMILIES[self.family].labels

    @property
    def kernel(self) -> str:
        return FAMILIES[self.family].kernel

    @property
    def sort_key(self) -> tuple[int, int]:
        """Display order: the families in FAMILIES order, then by k."""
        return _ORDER[self.family], self.k


def parse_metric(name: str) -> Metric:
    """Parse ``family@k``; raise :class:`MetricNameError` saying what is allowed."""
    match = _NAME.match(name.strip())
    if match is None:
        raise MetricNameError(
            f"{name!r} is not a metric name: write FAMILY@K, e.g. recall@10 "
            f"(families: {', '.join(FAMILIES)})"
        )
    family, digits = match["family"], match["k"]
    if len(digits) > len(str(MAX_K)) or int(digits) > MAX_K:
        raise MetricNameError(
            f"the cutoff {digits[:20]}{'...' if len(digits) > 20 else ''} is above the limit "
            f"of {MAX_K} in {name!r}: use a k of at most {MAX_K} (metrics are computed on a "
            "queries x k matrix)"
        )
    k = int(digits)
    if family not in FAMILIES:
        raise MetricNameError(
            f"unknown metric {family!r} in {name!r}: known families are {', '.join(FAMILIES)}"
        )
    if k < 1:
        raise MetricNameError(
            f"bad k in {name!r}: k must be a whole number >= 1, as in {family}@10 "
            f"(families: {', '.join(FAMILIES)})"
        )
    return Metric(family, k)


class GradeMatrix:
    """The ranked lists of a run expressed as grades, ready for every kernel.

    The kernels work on the cells with a grade > 0 only (a handful per row: the relevant docs
    that were retrieved), extracted once per matrix and shared by every metric and cutoff.
    :func:`grade_matrix` builds the cells directly; the dense ``(n, K)`` matrices (8 bytes a
    cell: 80 MB at 100,000 queries x 100) are made only when asked for.
    """

    def __init__(
        self,
        grades: FloatArray | None,
        ideal: FloatArray | None,
        n_relevant: FloatArray,
        depth: int,
    ) -> None:
        #: ``grades`` (n, K): grade at each rank, 0 past the end of the list; ``ideal`` (n, K):
        #: judged grades sorted descending, 0-padded; ``n_relevant`` (n,): docs with grade >= 1
        self.n_relevant = n_relevant
        self.depth = depth
        if grades is not None:
            self.__dict__["grades"] = grades
        if ideal is not None:
            self.__dict__["ideal"] = ideal

    @classmethod
    def of_cells(
        cls,
        cells: _Cells,
        ideal_cells: _Cells,
        n_relevant: FloatArray,
        depth: int,
        judged: _JudgedCells | None = None,
    ) -> GradeMatrix:
        matrix = cls(None, None, n_relevant, depth)
        matrix.__dict__.update(_cells=cells, _ideal_cells=ideal_cells, _judged=judged)
        return matrix

    @property
    def judged_cells(self) -> _JudgedCells:
        """Every judged doc in the top ``depth`` (grade 0 included), for judged@k: only a
        matrix built by :func:`grade_matrix` has them (a dense grade 0 may be unjudged)."""
        judged: _JudgedCells | None = self.__dict__.get("_judged")
        if judged is None:
            raise ValueError(
                "judged@k needs to know which docs are judged: build the matrix with "
                "grade_matrix(), not from dense grades"
            )
        return judged

    @cached_property
    def grades(self) -> FloatArray:
        return self._cells.dense(self.depth)

    @cached_property
    def ideal(self) -> FloatArray:
        return self._ideal_cells.dense(self.depth)

    @cached_property
    def _cells(self) -> _Cells:
        return _Cells.of(self.grades)

    @cached_property
    def _ideal_cells(self) -> _Cells:
        return _Cells.of(self.ideal)


@dataclass(frozen=True)
class _Cells:
    """The cells of a grade matrix with a grade > 0, in row-major order (ranks ascending).

    Everything a kernel needs of them is computed once and shared by all metrics and cutoffs.
    """

    row: IntArray
    rank: IntArray  # 0-based
    grade: FloatArray
    n: int  # rows in the matrix

    @classmethod
    def of(cls, matrix: FloatArray, where: IntArray | None = None) -> _Cells:
        """The cells at the sorted flat indices ``where``; by default every cell with grade > 0."""
        flat = matrix.reshape(-1)
        if where is None:
            where = np.flatnonzero(flat > 0)
        row, rank = np.divmod(where, matrix.shape[1])
        return cls(row, rank, flat[where], len(matrix))

    def dense(self, depth: int) -> FloatArray:
        """The ``(n, depth)`` matrix these cells come from."""
        matrix = np.zeros((self.n, depth), dtype=np.float64)
        matrix[self.row, self.rank] = self.grade
        return matrix

    def hits(self, k: int) -> FloatArray:
        """Relevant docs in the top k of each row."""
        return np.bincount(self.row[self.rank < k], minlength=self.n).astype(np.float64)

    @cached_property
    def first(self) -> IntArray:
        """Rank of each row's first relevant doc; a huge number for a row without one."""
        starts = self._row_starts
        first = np.full(self.n, np.iinfo(np.intp).max, dtype=np.intp)
        first[self.row[starts]] = self.rank[starts]
        return first

    @cached_property
    def precision(self) -> FloatArray:
        """Precision at the rank of each cell: relevant docs up to it / (rank + 1)."""
        seen = np.arange(1, self.row.size + 1)  # cells so far, over all rows ...
        before = np.maximum.accumulate(
            np.where(self._row_starts, seen - 1, 0)
        )  # ... before its row
        precision: FloatArray = (seen - before) / (self.rank + 1.0)
        return precision

    @cached_property
    def _row_starts(self) -> NDArray[np.bool_]:
        starts = np.ones(self.row.size, dtype=bool)
        starts[1:] = self.row[1:] != self.row[:-1]
        return starts

    @cached_property
    def _discount(self) -> FloatArray:
        discount: FloatArray = 1.0 / np.log2(self.rank + 2.0)  # 1 / log2(rank + 1), 1-based
        return discount

    @cached_property
    def _linear(self) -> FloatArray:
        return self.grade * self._discount

    @cached_property
    def _exponential(self) -> FloatArray:
        return (np.exp2(self.grade) - 1.0) * self._discount

    def dcg(self, k: int, *, exponential: bool = False) -> FloatArray:
        """DCG@k of every row, with gain ``grade`` or ``2**grade - 1``."""
        top = self.rank < k
        gains = self._exponential if exponential else self._linear
        dcg = np.bincount(self.row[top], gains[top], minlength=self.n)
        return np.asarray(dcg, dtype=np.float64)


@dataclass(frozen=True)
class _JudgedCells:
    """Each judged doc (any grade) found in a top ``depth``: its row and 0-based rank; and
    the rankings, whose lengths (after deduplication) are judged@k's denominators."""

    row: IntArray
    rank: IntArray
    runs: Sequence[Sequence[str]]
    depth: int
    unique: bool

    @cached_property
    def lengths(self) -> IntArray:
        """Distinct ids of each ranking, cut at ``depth``."""
        count = len if self.unique else _distinct
        lengths = np.fromiter(map(count, self.runs), dtype=np.intp, count=len(self.runs))
        return np.minimum(lengths, self.depth)

    def share(self, k: int) -> FloatArray:
        """judged@k of every row: judged docs in the top k / min(k, docs returned); 0 for an
        empty list, as ir_measures gives it."""
        counted = np.bincount(self.row[self.rank < k], minlength=len(self.runs))
        share: FloatArray = counted / np.maximum(np.minimum(self.lengths, k), 1)
        return share


def _distinct(run: Sequence[str]) -> int:
    return len(set(run))


def dedupe(ranked: Sequence[str]) -> list[str]:
    """Keep the first occurrence of every id, in order (trec_eval cannot see duplicates)."""
    return list(dict.fromkeys(ranked))


def _unique_ranks(run: Sequence[str], qrel: Mapping[str, float], depth: int) -> Iterable[int]:
    """:func:`_judged_ranks` of a ranking known to repeat no id: a few judged ids are found
    by C-level scans of the list, faster than a dict of all its ids."""
    top = run if len(run) <= depth else run[:depth]
    if not isinstance(top, tuple | list):
        top = tuple(top)  # a hits.Ranking: split once, not at each lookup
    if len(qrel) > 8:
        return map(dict(zip(top, range(depth), strict=False)).get, qrel, repeat(depth))
    return [top.index(doc) if doc in top else depth for doc in qrel]


def _judged_ranks(run: Sequence[str], qrel: Mapping[str, float], depth: int) -> Iterator[int]:
    """The 0-based rank of each judged doc (in ``qrel`` order) in ``run``, ``depth`` if absent.

    One dict of the top ``depth`` ids both finds the ranks and tells whether the list repeats
    an id there; only then is it deduplicated (ranks after a repeat move up).
    """
    rank = dict(zip(run, range(depth), strict=False))
    if len(rank) < min(len(run), depth):
        rank = dict(zip(dedupe(run), range(depth), strict=False))
    return map(rank.get, qrel, repeat(depth))


def grade_matrix(
    runs: Sequence[Sequence[str]],
    qrels: Sequence[Mapping[str, float]],
    depth: int,
    *,
    allow_empty: bool = False,
    unique: bool = False,
    ranks: Sequence[Sequence[int]] | None = None,
) -> GradeMatrix:
    """Build the grade matrix for ``runs`` cut at ``depth``; duplicates are dropped first.

    Raises ValueError when a query has no relevant document: its recall and nDCG would be
    undefined, and trec_eval would silently skip it.

    Rather than looking every retrieved id up in the judgments, this looks the (fewer) judged
    ids up in the ranking, then scatters their grades into the matrix. ``unique``: no ranking
    repeats an id (spares the check). ``ranks``: those look-ups already made, per query the
    0-based rank of each judged doc in ``qrels[i]``'s order in the deduplicated ranking (any
    number from ``depth`` up: not in the top ``depth``), as the evaluation finds them while
    each call's hits are in the CPU's cache.
    """
    if len(runs) != len(qrels):
        raise ValueError(f"{len(runs)} ranked lists for {len(qrels)} judged queries")
    n = len(runs)
    # One pass over the judgments (their grades, and which query each belongs to) ...
    lengths = np.fromiter(map(len, qrels), dtype=np.intp, count=n)
    total = int(lengths.sum())
    judged = np.fromiter(chain.from_iterable(map(_values, qrels)), dtype=np.float64, count=total)
    row = np.repeat(np.arange(n), lengths)
    n_relevant, ideal_cells = _ideal(judged, row, n, depth)
    if n and not allow_empty and not n_relevant.min() > 0:
        first = int(np.argmin(n_relevant))
        raise ValueError(f"query #{first} has no relevant document (no grade >= 1)")
    # ... and one over the ranked lists (unless made already), giving each judgment its rank.
    per_query: Iterable[Iterable[int]] = (
        ranks
        if ranks is not None
        else map(_unique_ranks if unique else _judged_ranks, runs, qrels, repeat(depth))
    )
    flat = np.fromiter(chain.from_iterable(per_query), dtype=np.int64, count=total)
    rank: IntArray = np.minimum(flat, depth).astype(np.intp)
    in_top = rank < depth
    found = in_top & (judged > 0)
    where = row[found] * depth + rank[found]  # flat index in the (n, depth) matrix
    order = np.argsort(where, kind="stable")  # row-major: by row, then rank
    cell_row, cell_rank = np.divmod(where[order], depth)
    cells = _Cells(cell_row, cell_rank, judged[found][order], n)
    judged_cells = _JudgedCells(row[in_top], rank[in_top], runs, depth, unique)
    return GradeMatrix.of_cells(cells, ideal_cells, n_relevant, depth, judged_cells)


def _values(qrel: Mapping[str, float]) -> Iterable[float]:
    return qrel.values()


def _ideal(judged: FloatArray, row: IntArray, n: int, depth: int) -> tuple[FloatArray, _Cells]:
    """Per query: how many relevant docs it has, and its relevant grades sorted descending
    (cut at depth) as the cells of the ideal matrix.

    ``judged`` holds every judgment of every query, ``row`` the query each belongs to.
    """
    relevant = judged > 0
    flat, row = judged[relevant], row[relevant]
    n_relevant = np.bincount(row, minlength=n).astype(np.float64)
    order = np.lexsort((-flat, row))
    flat, row = flat[order], row[order]
    starts = (np.cumsum(n_relevant) - n_relevant).astype(np.intp)
    col = np.arange(flat.size) - starts[row]
    keep = col < depth
    return n_relevant, _Cells(row[keep], col[keep], flat[keep], n)  # row-major


def _recall(m: GradeMatrix, k: int) -> FloatArray:
    return m._cells.hits(k) / m.n_relevant


def _precision(m: GradeMatrix, k: int) -> FloatArray:
    return m._cells.hits(k) / k


def _hit_rate(m: GradeMatrix, k: int) -> FloatArray:
    return (m._cells.hits(k) > 0).astype(np.float64)


def _mrr(m: GradeMatrix, k: int) -> FloatArray:
    first = m._cells.first
    return np.where(first < k, 1.0 / (first + 1.0), 0.0)


def _ndcg(m: GradeMatrix, k: int) -> FloatArray:
    return m._cells.dcg(k) / m._ideal_cells.dcg(k)


def _ndcg_exp(m: GradeMatrix, k: int) -> FloatArray:
    return m._cells.dcg(k, exponential=True) / m._ideal_cells.dcg(k, exponential=True)


def _map(m: GradeMatrix, k: int) -> FloatArray:
    cells = m._cells
    top = cells.rank < k
    return np.bincount(cells.row[top], cells.precision[top], minlength=cells.n) / m.n_relevant


def _judged(m: GradeMatrix, k: int) -> FloatArray:
    return m.judged_cells.share(k)


# ---------------------------------------------------------------------------- the families

_IIR = "Manning, Raghavan & Schütze, Introduction to Information Retrieval (2008), ch. 8"
_JUDGE = "this plugin's LLM judge; ungraded hits left out as Sakai's condensed lists (SIGIR 2007)"
_ERAG = (
    "Salemi & Zamani, Evaluating Retrieval Quality in Retrieval-Augmented Generation (SIGIR 2024)"
)


@dataclass(frozen=True)
class Family:
    """One metric family, all that is known of it in one record (as ir_measures' measures
    are): what it means, trec_eval's name for it, the labels it is scored on, the formula it
    runs, and where its definition comes from."""

    name: str
    #: one line, shown by error messages (docs/metrics.md's table says the same)
    definition: str
    citation: str
    #: trec_eval's measure, which the conformance tests compare with (None: trec_eval has none)
    trec_eval: str | None = None
    #: "golden" (the golden set's judgments), "on_topic" (the judge's binary verdicts),
    #: "llm_grade" (its 0-3 grades), "downstream" (eRAG labels, binarised at 0.5) or
    #: "downstream_gain" (eRAG labels as graded gains)
    labels: str = "golden"
    #: the family whose formula it runs, on its own labels (None: its own ``formula``)
    like: str | None = None
    #: its formula on a grade matrix, per query at cutoff k
    formula: Callable[[GradeMatrix, int], FloatArray] | None = None

    @property
    def kernel(self) -> str:
        """The family whose formula scores it: its own name, or the one it runs ``like``."""
        return self.like or self.name


def _registry(*families: Family) -> Mapping[str, Family]:
    """Name -> record, read-only; each family has a formula or runs one that has."""
    found = {family.name: family for family in families}
    for family in families:
        runs = found.get(family.kernel)
        if runs is None or runs.formula is None or (family.like and family.formula):
            raise TypeError(
                f"metric family {family.name}: give it either a formula or the name of a family "
                "with one to run like"
            )
    return MappingProxyType(found)


#: every metric family, in display order: the one registry (:class:`Family`)
FAMILIES: Mapping[str, Family] = _registry(
    Family(
        "recall",
        "relevant docs in the top k / all relevant docs",
        _IIR,
        trec_eval="recall",
        formula=_recall,
    ),
    Family("precision", "relevant docs in the top k / k", _IIR, trec_eval="P", formula=_precision),
    Family(
        "hit_rate",
        "1 if any relevant doc is in the top k, else 0",
        "trec_eval's success@k",
        trec_eval="success",
        formula=_hit_rate,
    ),
    Family(
        "mrr",
        "1 / rank of the first relevant doc in the top k, else 0",
        "Voorhees, The TREC-8 Question Answering Track Report (1999)",
        trec_eval="recip_rank (of the list cut at k)",
        formula=_mrr,
    ),
    Family(
        "ndcg",
        "DCG@k / ideal DCG@k, gain = grade, discount = log2(rank + 1)",
        "Järvelin & Kekäläinen, Cumulated gain-based evaluation of IR techniques (ACM TOIS 2002)",
        trec_eval="ndcg_cut",
        formula=_ndcg,
    ),
    Family(
        "ndcg_exp",
        "as ndcg with gain = 2**grade - 1",
        "Burges et al., Learning to rank using gradient descent (ICML 2005)",
        trec_eval="ndcg_cut (on grades rewritten to 2**grade - 1)",
        formula=_ndcg_exp,
    ),
    Family(
        "map",
        "sum of precision@rank at each relevant rank <= k / all relevant docs",
        _IIR,
        trec_eval="map_cut",
        formula=_map,
    ),
    Family(
        "judged",
        "docs with a golden judgment (any grade, 0 included) in the top k / "
        "min(k, docs returned); ir_measures' Judged@k",
        "MacAvaney, Macdonald & Ounis, Streamlining Evaluation with ir-measures (ECIR 2022)",
        formula=_judged,
    ),
    Family(
        "otr",
        "on-topic rate: hits the LLM judge found on topic in the top k / graded "
        "slots (k less the hits it could not grade)",
        _JUDGE,
        labels="on_topic",
        like="precision",
    ),
    Family(
        "llm_precision",
        "precision on the LLM judge's 0-3 grades: grade >= the relevance "
        "level (default 2) in the top k / graded slots",
        _JUDGE,
        labels="llm_grade",
        like="precision",
    ),
    Family(
        "llm_mrr",
        "mrr on the LLM judge's 0-3 grades (grade >= the relevance level, "
        "default 2), ungraded hits removed",
        _JUDGE,
        labels="llm_grade",
        like="mrr",
    ),
    Family(
        "llm_ndcg",
        "ndcg on the LLM judge's 0-3 grades of the returned hits (gain = "
        "grade), ungraded hits removed",
        _JUDGE,
        labels="llm_grade",
        like="ndcg",
    ),
    Family(
        "erag_precision",
        "precision on downstream (eRAG) labels (label >= 0.5 relevant)",
        _ERAG,
        labels="downstream",
        like="precision",
    ),
    Family(
        "erag_hit_rate",
        "hit_rate on downstream (eRAG) labels",
        _ERAG,
        labels="downstream",
        like="hit_rate",
    ),
    Family("erag_mrr", "mrr on downstream (eRAG) labels", _ERAG, labels="downstream", like="mrr"),
    Family(
        "erag_ndcg",
        "ndcg on downstream (eRAG) labels, gain = label in [0, 1]",
        _ERAG,
        labels="downstream_gain",
        like="ndcg",
    ),
)

_ORDER = {name: position for position, name in enumerate(FAMILIES)}

#: the families scored on the golden set's own judgments that trec_eval can check (judged@k,
#: also on the golden judgments, is checked against ir_measures instead)
GOLDEN_FAMILIES: tuple[str, ...] = tuple(
    f.name for f in FAMILIES.values() if f.labels == "golden" and f.trec_eval is not None
)


def compute_from_matrix(matrix: GradeMatrix, metrics: Sequence[Metric]) -> dict[str, FloatArray]:
    """Per-query values of every metric on an already built grade matrix."""
    if metrics and max(m.k for m in metrics) > matrix.depth:
        raise ValueError(f"grade matrix depth {matrix.depth} is below the largest cutoff")
    return {m.name: _formula(m.kernel)(matrix, m.k) for m in metrics}


def _formula(kernel: str) -> Callable[[GradeMatrix, int], FloatArray]:
    formula = FAMILIES[kernel].formula
    assert formula is not None  # _registry: a kernel is a family with a formula
    return formula


@dataclass(frozen=True)
class SlotMatrix:
    """The LLM judge's label at each rank 1..depth of each query's list (:func:`slot_matrix`)."""

    labels: FloatArray  # (n, depth): NaN for an ungraded hit, 0 past the end of the list
    hits: NDArray[np.bool_]  # (n, depth): a hit is at that rank (the list is that long)

    def graded(self, k: int) -> IntArray:
        """Graded slots in each query's top k: k less its ungraded hits."""
        graded: IntArray = np.isfinite(self.labels[:, :k]).sum(axis=1)
        return graded


def slot_matrix(
    runs: Sequence[Sequence[str]], labels: Sequence[Mapping[str, float]], depth: int
) -> SlotMatrix:
    """The slots of ``runs`` cut at ``depth`` (duplicates dropped first): each hit's label, a
    hit missing from ``labels`` being a graded 0 and a NaN label an ungraded hit."""
    if len(runs) != len(labels):
        raise ValueError(f"{len(runs)} ranked lists for {len(labels)} labelled queries")
    matrix = np.zeros((len(runs), depth), dtype=np.float64)
    hits = np.zeros((len(runs), depth), dtype=bool)
    for row, (run, labelled) in enumerate(zip(runs, labels, strict=True)):
        top = list(dict.fromkeys(run))[:depth]
        matrix[row, : len(top)] = [labelled.get(doc, 0.0) for doc in top]
        hits[row, : len(top)] = True
    return SlotMatrix(matrix, hits)


def slot_values(
    metrics: Sequence[Metric],
    slots: SlotMatrix,
    relevance_level: float = DEFAULT_RELEVANCE_LEVEL,
) -> dict[str, FloatArray]:
    """Per-query values of judge metrics on the graded slots of ``slots`` (module docstring).

    On ``llm_grade`` labels, llm_precision and llm_mrr count grade >= ``relevance_level``;
    on binary labels a label > 0 is relevant. llm_ndcg's gain is the grade, its ideal the
    graded grades of the whole matrix (every judged hit) sorted descending.
    """
    graded_all = np.isfinite(slots.labels)
    values_all = np.where(graded_all, slots.labels, 0.0)
    ideal_all = -np.sort(-values_all, axis=1)
    found: dict[str, FloatArray] = {}
    for metric in metrics:
        k = min(metric.k, slots.labels.shape[1])
        graded, values, hits = graded_all[:, :k], values_all[:, :k], slots.hits[:, :k]
        if metric.labels == "llm_grade" and metric.kernel != "ndcg":
            relevant = graded & (values >= relevance_level)
        else:
            relevant = graded & (values > 0)
        counted = graded.sum(axis=1).astype(np.float64)
        # ungraded hits and no graded one: nothing to score (an empty list still scores 0)
        undefined = ~(graded & hits).any(axis=1) & (hits & ~graded).any(axis=1)
        condensed = np.cumsum(graded, axis=1)  # 1-based rank among the graded slots
        with np.errstate(invalid="ignore", divide="ignore"):
            if metric.kernel == "precision":
                value = relevant.sum(axis=1) / counted
            elif metric.kernel == "mrr":
                first = np.argmax(relevant, axis=1)
                rank = condensed[np.arange(len(first)), first]
                value = np.where(relevant.any(axis=1), 1.0 / rank, 0.0)
            else:
                discount = np.where(graded, 1.0 / np.log2(condensed + 1.0), 0.0)
                dcg = (values * discount).sum(axis=1)
                ideal = (ideal_all[:, :k] / np.log2(np.arange(k) + 2.0)).sum(axis=1)
                value = np.where(ideal > 0, dcg / ideal, 0.0)
        found[metric.name] = np.where(undefined, np.nan, value).astype(np.float64)
    return found


#: labels of the judge / downstream metrics, ``{source: [{doc: label}, ...]}`` by position
PositionalLabels = Mapping[str, Sequence[Mapping[str, float]]]
#: the same by query id, ``{source: {qid: {doc: label}}}``, for the dict form of runs and qrels
Labels = PositionalLabels | Mapping[str, Mapping[str, Mapping[str, float]]]


def compute(
    metrics: Sequence[str | Metric],
    runs: Sequence[Sequence[str]] | Mapping[str, Mapping[str, float]],
    qrels: Sequence[Mapping[str, int]] | Mapping[str, Mapping[str, int]],
    labels: Labels | None = None,
    *,
    relevance_level: float = DEFAULT_RELEVANCE_LEVEL,
    unique: bool = False,
    ranks: Sequence[Sequence[int]] | None = None,
) -> dict[str, FloatArray]:
    """Per-query values of each metric: ``{name: array with one value per query}``.

    ``runs[i]`` is the ranked doc-id list returned for query ``i`` and ``qrels[i]`` its
    judgments ``{doc_id: grade}`` (grade >= 1 relevant, 0 judged not relevant). Judge and
    downstream metrics take their per-query labels from ``labels[source]`` instead (the
    source is :attr:`Family.labels`); a query none of whose hits is labelled relevant scores
    0 there, since those labels only ever cover what came back. A judge label of NaN is a
    hit the judge could not grade: it is left out (see the module docstring), and a query
    with nothing graded has no value (NaN). llm_precision and llm_mrr count a grade >=
    ``relevance_level``.

    Also takes the pytrec_eval / ranx form: ``runs = {qid: {doc_id: score}}`` and
    ``qrels = {qid: {doc_id: grade}}`` (both dicts; ``labels[source]`` then by qid too). Each
    query's docs are ranked as trec_eval ranks them (:func:`trec_order`: score descending,
    ties by doc id descending). The arrays follow the order of ``qrels``' keys; a query of
    ``qrels`` missing from ``runs`` scores 0 and counts (trec_eval would drop it); a query
    only in ``runs`` is ignored (it has no judgments). ``unique``: no ranked list repeats an
    id (the evaluation's are deduplicated), which spares the check. ``ranks``: where each
    ``qrels[i]`` doc is in ``runs[i]``, found already (:func:`grade_matrix`).
    """
    if isinstance(runs, Mapping) or isinstance(qrels, Mapping):
        runs, qrels, positional = _by_position(runs, qrels, labels)
    else:
        positional = cast("PositionalLabels | None", labels)  # _labels checks each source
    parsed = [m if isinstance(m, Metric) else parse_metric(m) for m in metrics]
    values: dict[str, FloatArray] = {}
    for source in dict.fromkeys(m.labels for m in parsed):
        group = [m for m in parsed if m.labels == source]
        depth = max(m.k for m in group)
        if source in JUDGED:
            slots = slot_matrix(runs, _labels(positional, source), depth)
            values.update(slot_values(group, slots, relevance_level))
            continue
        if source == "golden":
            matrix = grade_matrix(runs, qrels, depth, unique=unique, ranks=ranks)
        else:
            labels_of = _labels(positional, source)
            matrix = grade_matrix(runs, labels_of, depth, allow_empty=True, unique=unique)
        for name, column in compute_from_matrix(matrix, group).items():
            values[name] = column if source == "golden" else np.nan_to_num(column)
    return {m.name: values[m.name] for m in parsed}


def trec_order(scores: Mapping[str, float]) -> list[str]:
    """Doc ids ranked as trec_eval ranks a run: by score descending, ties by doc id descending.

    (trec_eval compares ids with ``strcmp``: byte order of UTF-8, i.e. code-point order.)
    Raises ValueError on a NaN score, which has no place in that order.
    """
    for doc, score in scores.items():
        if math.isnan(score):
            raise ValueError(f"doc {doc!r} has a NaN score: a run's scores must be numbers")
    # Two sorts beat one on (score, id) tuples: the second is stable, so ties keep id order.
    return sorted(sorted(scores, reverse=True), key=scores.__getitem__, reverse=True)


def _by_position(
    runs: Sequence[Sequence[str]] | Mapping[str, Mapping[str, float]],
    qrels: Sequence[Mapping[str, int]] | Mapping[str, Mapping[str, int]],
    labels: Labels | None,
) -> tuple[list[list[str]], list[Mapping[str, int]], PositionalLabels | None]:
    """The dict form of :func:`compute`'s arguments as lists, in the order of ``qrels``."""
    if not (isinstance(runs, Mapping) and isinstance(qrels, Mapping)):
        raise TypeError(
            "runs and qrels must both be lists (one entry per query, by position) or both "
            "dicts by query id ({qid: {doc_id: score}} and {qid: {doc_id: grade}})"
        )
    qids = list(qrels)
    empty: Mapping[str, float] = {}
    ranked = [trec_order(runs.get(qid, empty)) for qid in qids]
    if labels is None:
        return ranked, [qrels[qid] for qid in qids], None
    by_position: dict[str, list[Mapping[str, float]]] = {}
    for source, by_qid in labels.items():
        if not isinstance(by_qid, Mapping):
            raise TypeError(
                f"labels[{source!r}] must be a dict by query id ({{qid: {{doc_id: label}}}}) "
                "when runs and qrels are"
            )
        by_position[source] = [by_qid.get(qid, empty) for qid in qids]
    return ranked, [qrels[qid] for qid in qids], by_position


def _labels(labels: PositionalLabels | None, source: str) -> Sequence[Mapping[str, float]]:
    key = "downstream" if source.startswith("downstream") else source
    if labels is None or key not in labels:
        raise ValueError(f"no {key} labels given for the metrics that need them")
    per_query = labels[key]
    if isinstance(per_query, Mapping):
        raise TypeError(
            f"labels[{key!r}] is by query id: give runs and qrels by query id too, or the "
            "labels as a list (one {doc_id: label} per query, by position)"
        )
    if source == "downstream":  # binary metrics: relevant when the label is at least 0.5
        return [{d: float(v >= 0.5) for d, v in q.items()} for q in per_query]
    if source == "downstream_gain":  # graded: the label is the gain (kernels need > 0 cells)
        return [{d: v for d, v in q.items() if v > 0} for q in per_query]
    return per_query
