"""Metric names and vectorised kernels, matching trec_eval on the same ranked lists.

Semantics (README "Metrics"): the retriever's order is the ranking (never re-sorted by
score); a doc id repeated in one list counts at its first rank only; an empty list scores 0
and still counts; precision divides by k; a query must have at least one relevant document.

Every kernel works on a grade matrix ``G`` (queries x K): ``G[i, r]`` is the judged grade of
the document at rank ``r + 1`` of query ``i`` (0 when unjudged, judged non-relevant, or past
the end of the list). A grade >= 1 is relevant, as with trec_eval's default relevance level.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

#: metric family -> one-line definition (shown by the README and error messages)
FAMILIES: dict[str, str] = {
    "recall": "relevant docs in the top k / all relevant docs",
    "precision": "relevant docs in the top k / k",
    "hit_rate": "1 if any relevant doc is in the top k, else 0",
    "mrr": "1 / rank of the first relevant doc in the top k, else 0",
    "ndcg": "DCG@k / ideal DCG@k, gain = grade, discount = log2(rank + 1)",
    "ndcg_exp": "as ndcg with gain = 2**grade - 1",
    "map": "sum of precision@rank at each relevant rank <= k / all relevant docs",
}

_NAME = re.compile(r"^(?P<family>[a-z_]+)@(?P<k>[0-9]+)$")


class MetricNameError(ValueError):
    """A metric name that is not ``family@k`` with a known family and k >= 1."""


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
    def sort_key(self) -> tuple[int, int]:
        """Display order: the families in FAMILIES order, then by k."""
        return list(FAMILIES).index(self.family), self.k


def parse_metric(name: str) -> Metric:
    """Parse ``family@k``; raise :class:`MetricNameError` saying what is allowed."""
    match = _NAME.match(name.strip())
    if match is None:
        raise MetricNameError(
            f"{name!r} is not a metric name: write FAMILY@K, e.g. recall@10 "
            f"(families: {', '.join(FAMILIES)})"
        )
    family, k = match["family"], int(match["k"])
    if family not in FAMILIES:
        raise MetricNameError(
            f"unknown metric {family!r} in {name!r}: known families are {', '.join(FAMILIES)}"
        )
    if k < 1:
        raise MetricNameError(f"bad k in {name!r}: k must be a whole number >= 1")
    return Metric(family, k)


@dataclass(frozen=True)
class GradeMatrix:
    """The ranked lists of a run expressed as grades, ready for every kernel."""

    grades: FloatArray  # (n, K) grade at each rank, 0 past the end of the list
    ideal: FloatArray  # (n, K) judged grades sorted descending, 0-padded
    n_relevant: FloatArray  # (n,) number of docs with grade >= 1
    depth: int  # K


def dedupe(ranked: Sequence[str]) -> list[str]:
    """Keep the first occurrence of every id, in order (trec_eval cannot see duplicates)."""
    return list(dict.fromkeys(ranked))


def grade_matrix(
    runs: Sequence[Sequence[str]], qrels: Sequence[Mapping[str, int]], depth: int
) -> GradeMatrix:
    """Build the grade matrix for ``runs`` cut at ``depth``; duplicates are dropped first.

    Raises ValueError when a query has no relevant document: its recall and nDCG would be
    undefined, and trec_eval would silently skip it.
    """
    if len(runs) != len(qrels):
        raise ValueError(f"{len(runs)} ranked lists for {len(qrels)} judged queries")
    n = len(runs)
    padding = [0] * depth
    rows: list[list[int]] = []
    for qrel, run in zip(qrels, runs, strict=True):
        if len(set(run)) != len(run):
            run = dedupe(run)
        if len(run) >= depth:
            rows.append(list(map(qrel.get, run[:depth], repeat(0))))
        else:
            rows.append([*map(qrel.get, run, repeat(0)), *padding[len(run) :]])
    grades = np.array(rows, dtype=np.float64).reshape(n, depth)
    ideal, n_relevant = _ideal(qrels, depth)
    if n and not n_relevant.min() > 0:
        first = int(np.argmin(n_relevant))
        raise ValueError(f"query #{first} has no relevant document (no grade >= 1)")
    return GradeMatrix(grades, ideal, n_relevant, depth)


def _ideal(qrels: Sequence[Mapping[str, int]], depth: int) -> tuple[FloatArray, FloatArray]:
    """Per query: its relevant grades sorted descending (cut at depth), and how many there are."""
    n = len(qrels)
    lengths = np.fromiter(map(len, qrels), dtype=np.int64, count=n)
    flat = np.fromiter(
        chain.from_iterable(q.values() for q in qrels), dtype=np.float64, count=int(lengths.sum())
    )
    row = np.repeat(np.arange(n), lengths)
    relevant = flat > 0
    flat, row = flat[relevant], row[relevant]
    n_relevant = np.bincount(row, minlength=n).astype(np.float64)
    order = np.lexsort((-flat, row))
    flat, row = flat[order], row[order]
    starts = (np.cumsum(n_relevant) - n_relevant).astype(np.int64)
    col = np.arange(flat.size) - starts[row]
    keep = col < depth
    ideal = np.zeros((n, depth), dtype=np.float64)
    ideal[row[keep], col[keep]] = flat[keep]
    return ideal, n_relevant


def _discount(k: int) -> FloatArray:
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))


def _dcg(gains: FloatArray, k: int) -> FloatArray:
    return np.asarray(gains[:, :k] @ _discount(k), dtype=np.float64)


def _recall(m: GradeMatrix, k: int) -> FloatArray:
    return np.asarray((m.grades[:, :k] > 0).sum(axis=1) / m.n_relevant, dtype=np.float64)


def _precision(m: GradeMatrix, k: int) -> FloatArray:
    return np.asarray((m.grades[:, :k] > 0).sum(axis=1) / k, dtype=np.float64)


def _hit_rate(m: GradeMatrix, k: int) -> FloatArray:
    return np.asarray((m.grades[:, :k] > 0).any(axis=1), dtype=np.float64)


def _mrr(m: GradeMatrix, k: int) -> FloatArray:
    relevant = m.grades[:, :k] > 0
    first = relevant.argmax(axis=1)
    return np.asarray(np.where(relevant.any(axis=1), 1.0 / (first + 1.0), 0.0), dtype=np.float64)


def _ndcg(m: GradeMatrix, k: int) -> FloatArray:
    return _dcg(m.grades, k) / _dcg(m.ideal, k)


def _ndcg_exp(m: GradeMatrix, k: int) -> FloatArray:
    return _dcg(np.exp2(m.grades) - 1.0, k) / _dcg(np.exp2(m.ideal) - 1.0, k)


def _map(m: GradeMatrix, k: int) -> FloatArray:
    relevant = (m.grades[:, :k] > 0).astype(np.float64)
    precision_at_rank = np.cumsum(relevant, axis=1) / np.arange(1, k + 1, dtype=np.float64)
    return np.asarray((precision_at_rank * relevant).sum(axis=1) / m.n_relevant)


_KERNELS: dict[str, Callable[[GradeMatrix, int], FloatArray]] = {
    "recall": _recall,
    "precision": _precision,
    "hit_rate": _hit_rate,
    "mrr": _mrr,
    "ndcg": _ndcg,
    "ndcg_exp": _ndcg_exp,
    "map": _map,
}
assert set(_KERNELS) == set(FAMILIES)


def compute_from_matrix(matrix: GradeMatrix, metrics: Sequence[Metric]) -> dict[str, FloatArray]:
    """Per-query values of every metric on an already built grade matrix."""
    if metrics and max(m.k for m in metrics) > matrix.depth:
        raise ValueError(f"grade matrix depth {matrix.depth} is below the largest cutoff")
    return {m.name: _KERNELS[m.family](matrix, m.k) for m in metrics}


def compute(
    metrics: Sequence[str | Metric],
    runs: Sequence[Sequence[str]],
    qrels: Sequence[Mapping[str, int]],
) -> dict[str, FloatArray]:
    """Per-query values of each metric: ``{name: array of len(runs)}``.

    ``runs[i]`` is the ranked doc-id list returned for query ``i`` and ``qrels[i]`` its
    judgments ``{doc_id: grade}`` (grade >= 1 relevant, 0 judged not relevant).
    """
    parsed = [m if isinstance(m, Metric) else parse_metric(m) for m in metrics]
    if not parsed:
        return {}
    matrix = grade_matrix(runs, qrels, max(m.k for m in parsed))
    return compute_from_matrix(matrix, parsed)
