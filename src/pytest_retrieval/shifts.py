"""Which queries changed between a reference (a baseline, or the reference retriever of an A/B
run) and this run, and where their documents went.

The aggregate verdict says whether a metric moved; a reviewer's next question is which
queries moved and why. This is computed for every gated metric whenever a reference exists,
whatever the verdict, so every output can show it (and the JSON report holds all of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .metrics import parse_metric
from .results import HitMove, QueryChange, QueryResult, QueryShifts

#: a change smaller than this is float rounding, not a change
UNCHANGED = 1e-12


@dataclass(frozen=True)
class Reference:
    """What is known of one query in the reference run: its ranking (a baseline stores its
    top k only) and its judge labels by rank (None: no judge, or an older baseline)."""

    ranked: Sequence[str]
    labels: Sequence[int | None] | None = None


def query_shifts(
    metric: str,
    ids: Sequence[str],
    before: np.ndarray,
    after: np.ndarray,
    current: Mapping[str, QueryResult],
    references: Mapping[str, Reference],
    labels_now: Mapping[str, Sequence[int | None] | None],
    depth: int,
    asked: int,
) -> QueryShifts:
    """How the queries ``ids`` moved on ``metric``, given their values in the reference
    (``before``) and now (``after``), as compared (judge metrics: on the slots graded in both).

    ``labels_now``: this run's judge labels by rank per query; ``depth``: how deep the
    reference's rankings are known; ``asked``: how deep this run retrieved.
    """
    delta = _delta(before, after)
    valid = np.isfinite(delta)
    worse = valid & (delta < -UNCHANGED)
    better = valid & (delta > UNCHANGED)
    changed = np.flatnonzero(worse | better)
    k = parse_metric(metric).k
    queries = [
        _change(
            metric,
            k,
            current[ids[i]],
            float(before[i]),
            float(after[i]),
            references[ids[i]],
            labels_now.get(ids[i]),
            depth,
            asked,
        )
        for i in changed.tolist()
    ]
    queries.sort(key=lambda q: (q.delta, q.id))
    return QueryShifts(
        metric,
        worse=int(worse.sum()),
        better=int(better.sum()),
        unchanged=int((valid & ~worse & ~better).sum()),
        open=int((~valid).sum()),
        depth=depth,
        queries=tuple(queries),
    )


def changed_rows(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Which queries moved (:func:`query_shifts` explains these), as a boolean mask."""
    delta = _delta(before, after)
    moved: np.ndarray = np.isfinite(delta) & (np.abs(delta) > UNCHANGED)
    return moved


def _delta(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    return np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)


def _change(
    metric: str,
    k: int,
    query: QueryResult,
    before: float,
    after: float,
    reference: Reference,
    labels_now: Sequence[int | None] | None,
    depth: int,
    asked: int,
) -> QueryChange:
    """One changed query with the documents that crossed the top-k cutoff (every relevant
    one, and the others the judge labelled in either run: their verdicts changed the judge
    metrics) and the relevant ones that moved within the top k; unlabelled, unjudged
    newcomers are in the rankings themselves. A reference known less deep than k (a
    baseline stores its top k) cannot tell that a document entered from below its depth:
    only documents it ranked below k count as entering."""
    old_rank = {doc: rank for rank, doc in enumerate(reference.ranked, 1)}
    new_rank = {doc: rank for rank, doc in enumerate(query.returned, 1)}
    old_top, new_top = reference.ranked[:k], query.returned[:k]
    crossed = [d for d in old_top if new_rank.get(d, k + 1) > k]
    crossed += [d for d in new_top if old_rank.get(d, k + 1 if depth >= k else 0) > k]
    crossed += [  # relevant, in both top k, at another rank: why mrr or ndcg moved
        d
        for d in new_top
        if query.relevant.get(d, 0) > 0
        and old_rank.get(d, k + 1) <= k
        and old_rank[d] != new_rank[d]
    ]
    moves = []
    for doc in crossed:
        was, now = old_rank.get(doc), new_rank.get(doc)
        move = HitMove(
            doc,
            was,
            now,
            query.relevant.get(doc),
            _label(reference.labels, was),
            _label(labels_now, now),
            (query.judgments.get(doc) or {}).get("reason"),
        )
        if (move.grade or 0) > 0 or move.judge_before is not None or move.judge_after is not None:
            moves.append(move)
    moves.sort(key=lambda m: (-(m.grade or 0), m.before or m.after or 0, m.doc))
    return QueryChange(
        query.id,
        query.query,
        metric,
        before,
        after,
        tags=query.tags,
        moves=tuple(moves),
        reference_ranked=tuple(reference.ranked),
        depth=depth,
        asked=asked,
    )


def _label(labels: Sequence[int | None] | None, rank: int | None) -> int | None:
    """The judge's label of the hit at ``rank`` (None: none kept that deep, or ungraded)."""
    if labels is None or rank is None or rank > len(labels):
        return None
    return labels[rank - 1]
