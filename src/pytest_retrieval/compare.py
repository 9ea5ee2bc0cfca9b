"""Paired comparisons: a run against its stored baseline, one retriever against another (A/B),
and the power of the gate. Pure: no I/O.

A gated metric has regressed only when BOTH hold: its drop exceeds the allowance
(``--retrieval-max-drop``), and a one-sided paired sign-flip test over the per-query values of
the queries both runs share gives p < alpha after Holm-Bonferroni across the GATED metrics
(:func:`pytest_retrieval.gate.gated_metrics`). The first condition ignores drops too small to
matter; the second ignores drops that another sample of queries would not reproduce. An
improvement needs the same (the other one-sided test, its own Holm family). Metrics that are
not gated are reported with their unadjusted p and never fail a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from operator import itemgetter
from statistics import NormalDist
from typing import Any

import numpy as np

from . import stats
from .baseline import BaselineEntry, BaselineQuery
from .errors import RetrievalError
from .limits import LATENCY, Allowance, default_allowance
from .metrics import (
    DEFINITIONS_VERSION,
    JUDGE_METRICS_VERSION,
    JUDGED,
    JUDGED_FAMILY,
    FloatArray,
    IntArray,
    Metric,
    SlotMatrix,
    compute,
    parse_metric,
    slot_values,
)
from .results import (
    JUDGED_GAP,
    JUDGED_MIN_GAP,
    JUDGED_SHARE_GAP,
    ChangeStatus,
    Comparison,
    EvaluationResult,
    MetricChange,
    QueryResult,
    QueryShifts,
    UnjudgedHits,
    finite_or_none,
)
from .settings import DEFAULT_ALPHA
from .shifts import Reference, changed_rows, query_shifts

POWER = 0.8
TOLERANCE = 1e-9  # a drop of exactly the allowance is allowed, whatever the float rounding
#: a refresh keeps the recorded latencies while the median moved less than this fraction or
#: this many ms (or not significantly): per-query timings jitter from run to run
KEPT_LATENCY_SHIFT = 0.5
KEPT_LATENCY_MS = 1.0
#: what must match for LLM-judged values to be comparable across runs (judge_definition
#: adds the judge metrics' definition version, JUDGE_METRICS_VERSION)
JUDGE_DEFINITION = (
    "model",
    "prompt_version",
    "scale",
    "min_score",
    "relevance_level",
    "samples",  # more than one: the majority verdict
    "text_budget",  # the characters of each document the judge reads
)
#: the values of the later keys in a judge summary or baseline written before they were
#: recorded (the judge's defaults then): such a baseline is still compared
JUDGE_DEFAULTS: dict[str, Any] = {"samples": 1, "text_budget": 4000}


def compare_to_baseline(
    result: EvaluationResult,
    entry: BaselineEntry,
    allowances: Mapping[str, Allowance],
    *,
    alpha: float = DEFAULT_ALPHA,
    reference: str = "baseline",
) -> Comparison:
    """Compare ``result`` with a recorded baseline on the queries both share unchanged; the
    gated metrics are ``result.gated``. Read from the run's columns: an object per query
    is built only for the queries that changed (100,000 queries: a tenth of the time)."""
    table = result.table
    ids, stored, fingerprints = table.ids, entry.queries, table.fingerprints
    row_of = dict(zip(ids, range(len(ids)), strict=True))  # a repeated id: once, its last row
    order, at = (ids, range(len(ids))) if len(row_of) == len(ids) else (row_of, row_of.values())
    common: list[str] = []
    rows_of_common: list[int] = []
    was: list[BaselineQuery] = []
    added, rejudged = [], []
    for qid, row, old in zip(order, at, map(stored.get, order), strict=True):  # in run order
        if old is None:
            added.append(qid)
        elif old.fingerprint != fingerprints[row]:
            rejudged.append(qid)
        else:
            common.append(qid)
            rows_of_common.append(row)
            was.append(old)
    shared = len(common) + len(rejudged)
    comparison = Comparison(
        reference=reference,
        n_common=len(common),
        added=sorted(added),
        removed=sorted(stored.keys() - row_of.keys()) if shared < len(stored) else [],
        rejudged=sorted(rejudged),
        alpha=alpha,
        baseline_created=entry.created,
        baseline_commit=str(entry.git.get("commit", ""))[:12],
    )
    stale = _stale_reason(entry, common)
    if stale is not None:
        return replace(comparison, stale=stale)
    rows = np.array(rows_of_common, dtype=np.intp)
    stored_values = _stored_columns([q.metrics for q in was], list(result.metrics))
    before: dict[str, FloatArray] = {}
    missing = []  # metrics some shared query has no stored value of
    for m in result.metrics:
        column = stored_values.get(m)
        if column is None:
            column = _judged_of_rankings(parse_metric(m), result, entry.k, was, rows)
        if column is None:
            missing.append(m)
        else:
            before[m] = column
    judge_changed: dict[str, list[Any]] = {}
    judge_now = judge_definition(result)
    recorded = None if entry.judge is None else {**JUDGE_DEFAULTS, **entry.judge}
    if judge_now is not None and recorded is not None and judge_now != recorded:
        missing += [
            m for m in result.metrics if parse_metric(m).labels != "golden" and m not in missing
        ]
        before = {m: column for m, column in before.items() if m not in missing}
        judge_changed = {
            key: [recorded.get(key), value]
            for key, value in judge_now.items()
            if recorded.get(key) != value
        }
    after = {m: table.values(m)[rows] for m in before}
    depth = _judge_depth(result.metrics)
    now = _QueryDetail(result, rows)
    _on_common_slots(
        before,
        after,
        [q.judged for q in was],
        now.all_labels(depth),
        graded=(result.judge or {}).get("scale") == "0-3",
        level=result.relevance_level,
    )
    changes = judge_changes(before, after, allowances, alpha, result.gated)
    changes += [
        MetricChange(
            m,
            math.nan,
            result.metrics[m],
            math.nan,
            verdict=ChangeStatus.JUDGE_CHANGED
            if judge_changed and parse_metric(m).labels != "golden"
            else ChangeStatus.NOT_IN_BASELINE,
            gated=m in result.gated,
        )
        for m in missing
    ]
    latency = allowances.get(LATENCY)
    if latency is not None and entry.latency_p95_ms is not None:
        old_ms = np.array([q.latency_ms or 0.0 for q in was])  # None (not measured): 0
        changes.append(latency_change(result, entry, rows, old_ms, latency, alpha))
    elif latency is not None:  # asked for, and the baseline has none (a run file recorded it)
        change = MetricChange(LATENCY, math.nan, result.latency_p95_ms, math.nan, gated=True)
        changes.append(replace(change, verdict=ChangeStatus.NOT_TESTED))

    def references(positions: Sequence[int]) -> list[Reference]:
        return [Reference(was[i].ranked, was[i].judged) for i in positions]

    shifts = _shifts(result, common, before, after, now, references, changes, depth=entry.k)
    returned = table.returned
    return replace(
        comparison,
        changes=changes,
        shifts=shifts,
        judge_changed=judge_changed,
        unjudged=unjudged_hits(
            before,
            after,
            result.k,
            [
                bool(returned[row]) and bool(q.ranked)
                for row, q in zip(rows.tolist(), was, strict=True)
            ],
        ),
        stale="the baseline has none of the metrics this run computes"
        if missing and len(missing) == len(result.metrics)
        else None,
    )


def _stored_column(recorded: Sequence[Mapping[str, float]], metric: str) -> FloatArray | None:
    """``metric``'s stored value of each query (None when one has none)."""
    try:
        return np.fromiter(map(itemgetter(metric), recorded), np.float64, len(recorded))
    except KeyError:
        return None


def _stored_columns(
    recorded: Sequence[Mapping[str, float]], metrics: Sequence[str]
) -> dict[str, FloatArray]:
    """The stored values of ``metrics`` that every query has, each a column: read in one
    pass over the queries when all have them all (7 metrics of a million queries: 0.27 s,
    0.58 s in a pass per metric), else metric by metric."""
    if len(metrics) > 1:
        try:
            table = np.fromiter(
                chain.from_iterable(map(itemgetter(*metrics), recorded)),
                np.float64,
                len(recorded) * len(metrics),
            ).reshape(len(recorded), len(metrics))
        except KeyError:
            pass
        else:
            return {m: table[:, i].copy() for i, m in enumerate(metrics)}
    found = {m: _stored_column(recorded, m) for m in metrics}
    return {m: column for m, column in found.items() if column is not None}


class _QueryDetail:
    """A run's queries at ``rows`` as objects (:class:`QueryResult`) and judge labels, built
    only for the positions asked for: a comparison explains the queries that moved, a
    handful of 100,000 on most pull requests."""

    def __init__(self, result: EvaluationResult, rows: IntArray) -> None:
        self.result, self.rows = result, rows

    def queries(self, positions: Sequence[int]) -> list[QueryResult]:
        return self.result.table.pick(self.rows[list(positions)].tolist())

    def labels(self, queries: Sequence[QueryResult], depth: int) -> list[list[int | None] | None]:
        """Each query's judge labels of its top ``depth`` (``judge_slots``)."""
        judge_slots = self.result.judge_slots
        if not self.result.judge:
            return [None] * len(queries)
        return [judge_slots(q, depth) for q in queries]

    def all_labels(self, depth: int) -> list[list[int | None] | None]:
        """Every query's judge labels, from the columns."""
        table, rows = self.result.table, self.rows.tolist()
        if not self.result.judge:
            return [None] * len(rows)
        returned, judgments, labels = table.returned, table.judgments, self.result.judge_labels
        return [labels(returned[row], judgments[row], depth) for row in rows]


def _judged_of_rankings(
    metric: Metric,
    result: EvaluationResult,
    depth: int,
    was: Sequence[BaselineQuery],
    rows: IntArray,
) -> FloatArray | None:
    """The baseline's judged@k per shared query (``was``, at ``rows`` in the run) when the
    baseline did not record it (one older than the metric): from its stored top ``depth``,
    which the unchanged judgments of those queries score as they scored then. None for
    another metric, or one deeper than the stored rankings."""
    if metric.family != JUDGED_FAMILY or metric.k > depth or not was:
        return None
    relevant = result.table.relevant
    judged = [relevant[row] for row in rows.tolist()]
    qrels = [grades or {"": 1} for grades in judged]
    values = compute([metric], [q.ranked for q in was], qrels)[metric.name]
    open_rows = np.array([not grades for grades in judged])
    found: FloatArray = np.where(open_rows, np.nan, values)
    return found


def unjudged_hits(
    before: Mapping[str, FloatArray],
    after: Mapping[str, FloatArray],
    k: int,
    answered: Sequence[bool],
) -> UnjudgedHits | None:
    """The warning that a run's top k holds many more unjudged documents than its
    reference's: its judged@k more than JUDGED_GAP below the reference's, or more than
    JUDGED_SHARE_GAP of it below while at least JUDGED_MIN_GAP below (the rule at
    :data:`.results.JUDGED_GAP`), on the shared queries both ``answered`` (returned a hit
    for): judged@k of an empty list is 0, yet it holds no unjudged document -- a retriever
    that finds nothing has no holes to pool."""
    name = f"{JUDGED_FAMILY}@{k}"
    if name not in before or name not in after:
        return None
    old, new = before[name], after[name]
    paired = np.isfinite(old) & np.isfinite(new)  # open queries have no judged@k
    rows = paired & np.asarray(answered, dtype=bool)
    if not rows.any():
        return None
    reference, current = float(old[rows].mean()), float(new[rows].mean())
    gap = reference - current
    absolute = gap > JUDGED_GAP + TOLERANCE
    share = current < (1 - JUDGED_SHARE_GAP) * reference - TOLERANCE
    if not (absolute or (share and gap >= JUDGED_MIN_GAP - TOLERANCE)):
        return None
    fewer = int(rows.sum()) if rows.sum() < paired.sum() else None
    return UnjudgedHits(name, reference, current, queries=fewer)


def _judge_depth(metrics: Iterable[str]) -> int:
    """The deepest k of the judge metrics among ``metrics`` (0: none)."""
    return max((m.k for m in map(parse_metric, metrics) if m.labels in JUDGED), default=0)


def _on_common_slots(
    before: dict[str, np.ndarray],
    after: dict[str, np.ndarray],
    old: Sequence[list[int | None] | None],
    new: Sequence[list[int | None] | None],
    *,
    graded: bool,
    level: int,
) -> None:
    """Replace, in place, the per-query values of the judge metrics in ``before`` / ``after``
    by both runs' values on the slots graded in both, for the queries whose judge labels
    both runs hold (``old`` / ``new``, by rank): a hit one judge could not grade is left out
    of both sides, so refusals alone change nothing. Queries without labels keep their
    stored values (a baseline older than the labels)."""
    rows = [
        i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a is not None and b is not None
    ]
    if not rows:
        return
    for name in before:
        metric = parse_metric(name)
        if metric.labels not in JUDGED:
            continue
        pairs = [(old[i], new[i]) for i in rows]
        sides = _common_slots(metric, pairs, graded=graded, level=level)
        for values, slots in zip((before, after), sides, strict=True):
            column = values[name].astype(np.float64)
            column[rows] = slot_values([metric], slots, level)[name]
            values[name] = column


def _common_slots(
    metric: Metric,
    pairs: Sequence[tuple[list[int | None] | None, list[int | None] | None]],
    *,
    graded: bool,
    level: int,
) -> tuple[SlotMatrix, SlotMatrix]:
    """The two runs' slot matrices of ``metric``'s top k, each slot graded in both or left
    out (NaN) in both; on the 0-3 scale otr is on topic at grade >= ``level``."""
    k = metric.k
    shape = (len(pairs), k)
    matrices = [np.zeros(shape), np.zeros(shape)]
    hits = [np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)]
    binary = graded and metric.labels == "on_topic"
    for row, pair in enumerate(pairs):
        top = [list(labels or [])[:k] for labels in pair]
        for side, labels in enumerate(top):
            hits[side][row, : len(labels)] = True
            for rank, label in enumerate(labels):
                if label is not None:
                    matrices[side][row, rank] = float(label >= level) if binary else label
        for rank in range(k):
            if any(rank < len(labels) and labels[rank] is None for labels in top):
                matrices[0][row, rank] = matrices[1][row, rank] = np.nan
    return SlotMatrix(matrices[0], hits[0]), SlotMatrix(matrices[1], hits[1])


def _stale_reason(entry: BaselineEntry, common: Sequence[str]) -> str | None:
    version = entry.metrics_version
    if version != DEFINITIONS_VERSION:
        return (
            f"it was recorded with metric definitions v{version}, this plugin computes "
            f"v{DEFINITIONS_VERSION} (plugin {entry.plugin_version}); values are not comparable"
        )
    if not common:
        return "no query of the golden set is unchanged since the baseline was recorded"
    return None


def judge_changes(
    before: Mapping[str, np.ndarray],
    after: Mapping[str, np.ndarray],
    allowances: Mapping[str, Allowance],
    alpha: float,
    gated: Sequence[str],
    *,
    two_sided: bool = False,
) -> list[MetricChange]:
    """Per metric: the paired test and its verdict. Gated metrics are Holm-adjusted as one
    family per direction (drops; rises); the others keep their raw p and are only reported.
    ``two_sided`` (A/B): "worse"/"better" instead of "regressed"/"improved"."""
    Status = ChangeStatus
    drops: dict[str, float] = {}
    rises: dict[str, float] = {}
    rows: dict[str, tuple[float, float, float]] = {}
    m = max(1, sum(1 for metric in before if metric in gated))
    resolution = alpha / m / 10
    for metric, old in before.items():
        new = after[metric]
        paired = np.isfinite(old) & np.isfinite(new)  # open queries have no golden metrics
        if not paired.all():
            old, new = old[paired], new[paired]
        base, now = (float(old.mean()), float(new.mean())) if old.size else (math.nan, math.nan)
        allowance = allowances.get(metric) or default_allowance(metric)
        rows[metric] = (base, now, allowance.allowed(base))
        if alpha < 1 and old.size:
            drops[metric] = stats.paired_pvalue(old, new, resolution=resolution)
            rises[metric] = stats.paired_pvalue(new, old, resolution=resolution)
    adjusted_drops = stats.holm({k: v for k, v in drops.items() if k in gated})
    adjusted_rises = stats.holm({k: v for k, v in rises.items() if k in gated})
    changes = []
    for metric, (base, now, allowed) in rows.items():
        delta = now - base
        falling = delta < 0
        raw = (drops if falling else rises).get(metric)
        if two_sided and raw is not None:
            raw = min(1.0, 2 * raw)
        is_gated = metric in gated
        adjusted = (adjusted_drops if falling else adjusted_rises).get(metric)
        if two_sided and adjusted is not None:
            adjusted = min(1.0, 2 * adjusted)
        p = adjusted if is_gated else raw
        significant = alpha >= 1 or (p is not None and p < alpha)
        beyond = abs(delta) > allowed + TOLERANCE
        verdict = Status.OK
        if math.isnan(delta):  # no query has a value on both sides (nothing graded)
            verdict = Status.NA
        elif beyond and falling:
            if not is_gated:
                verdict = Status.DROPPED if significant else Status.WITHIN_NOISE
            elif two_sided:
                verdict = Status.WORSE if significant else Status.WITHIN_NOISE
            else:
                verdict = Status.REGRESSED if significant else Status.WITHIN_NOISE
        elif beyond and delta > 0:
            if not is_gated:
                verdict = Status.ROSE if significant else Status.OK
            else:
                rose = Status.BETTER if two_sided else Status.IMPROVED
                verdict = rose if significant else Status.OK
        changes.append(
            MetricChange(
                metric,
                base,
                now,
                allowed,
                p_value=raw,
                p_adjusted=adjusted if is_gated else None,
                verdict=verdict,
                gated=is_gated,
            )
        )
    return changes


def latency_change(
    result: EvaluationResult,
    entry: BaselineEntry,
    rows: IntArray,
    before_ms: FloatArray,
    allowance: Allowance,
    alpha: float,
) -> MetricChange:
    """Latency regressed when p95 rose beyond the allowance AND most queries got slower,
    significantly: a one-sided paired sign test on log(now / before) of every query both runs
    answered (the sign, not the size, so a few very slow calls cannot carry it). A few slow
    calls in the tail (a shared CI machine) move p95 but not the sign test; a slower
    retriever moves both. ``rows``: the compared queries' rows in the run; ``before_ms``:
    their stored latencies (0 where none was measured)."""
    old_p95 = float(entry.latency_p95_ms or 0.0)
    allowed = allowance.allowed(old_p95)
    table = result.table
    now_ms = table.latency_ms[rows]
    answered = (before_ms > 0) & (now_ms > 0)
    if errors := table.error_rows():
        answered &= ~np.isin(rows, list(errors))
    change = MetricChange(LATENCY, old_p95, result.latency_p95_ms, allowed, gated=True)
    if not answered.any():
        return replace(change, verdict=ChangeStatus.NOT_TESTED)
    signs = np.sign(np.log(now_ms[answered] / before_ms[answered]))
    p = stats.paired_pvalue(np.zeros_like(signs), signs, alternative="less")
    p_slower = stats.paired_pvalue(signs, np.zeros_like(signs), alternative="less")
    beyond = result.latency_p95_ms - old_p95 > allowed + TOLERANCE  # higher is worse
    verdict = ChangeStatus.OK
    if beyond:
        verdict = ChangeStatus.REGRESSED if p_slower < alpha else ChangeStatus.WITHIN_NOISE
    return replace(change, p_value=min(p, p_slower), p_adjusted=p_slower, verdict=verdict)


def latency_unchanged(
    result: EvaluationResult, entry: BaselineEntry, alpha: float = DEFAULT_ALPHA
) -> bool:
    """No significant per-query latency change either way: a refreshed baseline keeps the
    recorded latencies, so a refresh of an unchanged retriever does not rewrite them."""
    current = {q.id: q for q in result.queries}
    pairs = [
        (before, current[q].latency_ms)
        for q, stored in entry.queries.items()
        if q in current
        and (before := stored.latency_ms)
        and current[q].error is None
        and current[q].latency_ms > 0
    ]
    if not pairs:
        return False
    before, now = np.array(pairs).T
    shift = abs(float(np.median(now)) - float(np.median(before)))
    if shift <= max(KEPT_LATENCY_SHIFT * float(np.median(before)), KEPT_LATENCY_MS):
        return True  # timer and machine noise: not worth a diff
    signs = np.sign(np.log(now / before))
    return stats.paired_pvalue(np.zeros_like(signs), signs, alternative="two-sided") >= alpha


def _shifts(
    result: EvaluationResult,
    common: Sequence[str],
    before: Mapping[str, np.ndarray],
    after: Mapping[str, np.ndarray],
    now: _QueryDetail,
    references: Callable[[Sequence[int]], list[Reference]],
    changes: Sequence[MetricChange],
    *,
    depth: int,
) -> dict[str, QueryShifts]:
    """How the shared queries moved on each gated metric that was compared, on the values
    the paired tests compared; ``now`` and ``references`` (by position in ``common``) give
    the details of the queries that moved, made for those only."""
    compared = [c.metric for c in changes if c.gated and c.metric in before]
    moved = np.zeros(len(common), dtype=bool)
    for metric in compared:
        moved |= changed_rows(before[metric], after[metric])
    positions = np.flatnonzero(moved).tolist()
    queries = now.queries(positions)
    keys = [common[i] for i in positions]
    current = dict(zip(keys, queries, strict=True))
    referenced = dict(zip(keys, references(positions), strict=True))
    labels_now = dict(zip(keys, now.labels(queries, _judge_depth(result.metrics)), strict=True))
    return {
        metric: query_shifts(
            metric,
            common,
            before[metric],
            after[metric],
            current,
            referenced,
            labels_now,
            depth,
            result.depth,
        )
        for metric in compared
    }


def compare_runs(
    reference: EvaluationResult,
    other: EvaluationResult,
    allowances: Mapping[str, Allowance],
    alpha: float = DEFAULT_ALPHA,
) -> Comparison:
    """A/B: ``other`` against ``reference`` on the same golden set, two-sided paired tests;
    "better"/"worse" need what a regression needs (Holm over the gated metrics, allowance)."""
    ours, theirs = reference.table, other.table
    our_row = dict(zip(ours.ids, range(len(ours)), strict=True))  # a repeated id: its last
    their_row = dict(zip(theirs.ids, range(len(theirs)), strict=True))
    common = [qid for qid in ours.ids if qid in their_row]
    rows = {
        "ours": np.fromiter(map(our_row.__getitem__, common), np.intp, len(common)),
        "theirs": np.fromiter(map(their_row.__getitem__, common), np.intp, len(common)),
    }
    metrics = [m for m in reference.metrics if m in other.metrics]
    before = {m: ours.values(m)[rows["ours"]] for m in metrics}
    after = {m: theirs.values(m)[rows["theirs"]] for m in metrics}
    depth = _judge_depth(metrics)
    mine, now = _QueryDetail(reference, rows["ours"]), _QueryDetail(other, rows["theirs"])
    _on_common_slots(
        before,
        after,
        mine.all_labels(depth),
        now.all_labels(depth),
        graded=(reference.judge or {}).get("scale") == "0-3",
        level=reference.relevance_level,
    )
    gated = [m for m in reference.gated if m in other.gated] or list(reference.gated)
    changes = judge_changes(before, after, allowances, alpha, gated, two_sided=True)

    def references(positions: Sequence[int]) -> list[Reference]:
        queries = mine.queries(positions)
        return list(map(Reference, [q.returned for q in queries], mine.labels(queries, depth)))

    shifts = _shifts(other, common, before, after, now, references, changes, depth=reference.depth)
    our_lists, their_lists = ours.returned, theirs.returned
    return Comparison(
        f"retriever {reference.retriever_id}",
        len(common),
        changes=changes,
        shifts=shifts,
        alpha=alpha,
        unjudged=unjudged_hits(
            before,
            after,
            other.k,
            [
                bool(our_lists[a]) and bool(their_lists[b])
                for a, b in zip(rows["ours"].tolist(), rows["theirs"].tolist(), strict=True)
            ],
        ),
    )


def detectable_drop(
    values: np.ndarray, n: int, alpha: float, tests: int, *, hits: np.ndarray | None = None
) -> float:
    """The drop in a metric's mean that the gate finds with 80% power, from quantities that do
    not depend on the change under test: the reference's per-query values and ``n`` compared
    queries, at ``alpha`` Bonferroni-split over ``tests`` gated metrics (Holm is at least as
    powerful, so this errs on the safe side).

    Model (checked by ``benchmarks/bench_gate.py``): a drop is made by relevant documents
    leaving the top k one at a time, each taking an equal share of its query's value: a query
    worth v with h relevant documents in its top k (``hits``; None: h = 1) loses v / h per
    document. Then the per-query differences d have sum(d^2) = n (delta c - delta^2) with
    c = sum(v^2 / h) / sum(v), and the normal approximation of the one-sided paired test
    gives delta = Z^2 c / (n + Z^2), Z = z(alpha / tests) + z(power).
    """
    keep = np.isfinite(values)
    finite = values[keep]
    total = float(finite.sum())
    if n <= 0 or total <= 0:
        return math.inf if n <= 0 else math.nan
    share = finite if hits is None else finite / np.maximum(hits[keep], 1)
    c = float((finite * share).sum()) / total
    normal = NormalDist()
    z = normal.inv_cdf(1 - alpha / max(1, tests)) + normal.inv_cdf(POWER)
    return z * z * c / (n + z * z)


def power_table(
    result: EvaluationResult,
    entry: BaselineEntry | None,
    allowances: Mapping[str, Allowance],
    alpha: float,
) -> dict[str, tuple[float, float]]:
    """Gated metric -> (drop detectable with 80% power, allowed drop). From the baseline's
    per-query values and the number of compared queries when there is a baseline, else from
    this run's values: never from this run's differences, so an unchanged PR still sees it."""
    if alpha >= 1 or not result.gated:
        return {}
    n = len(result.queries) if result.comparison is None else result.comparison.n_common
    table_of = result.table  # the run's columns: no object per query is built
    golden_ks = sorted({m.k for m in map(parse_metric, result.gated) if m.labels == "golden"})
    table = {}
    counted: dict[str, dict[int, FloatArray]] = {}  # "baseline"/"run" -> k -> hits per query
    stored = [] if entry is None else list(entry.queries.values())
    recorded = [q.metrics for q in stored]
    for metric in result.gated:
        k = parse_metric(metric).k
        values = None if entry is None else _stored_column(recorded, metric)
        if entry is not None and values is not None:
            source = "baseline"
            ids = list(entry.queries)
            ranked: list[Sequence[str]] = [q.ranked for q in stored]
            reference = entry.metrics.get(metric, result.metrics[metric])
        else:
            source = "run"
            ids = list(table_of.ids)
            values = table_of.values(metric)
            ranked = list(table_of.returned)
            reference = result.metrics[metric]
        hits = None
        if parse_metric(metric).labels == "golden":  # relevant docs in each top k
            precision = f"precision@{k}"
            if source == "run":
                scored = table_of.values(precision) if precision in result.metrics else None
            else:  # as recorded, with the judgments the values were recorded with
                scored = _stored_column(recorded, precision)
            if scored is not None:  # already counted: k * p@k
                hits = np.rint(scored * k)
            else:
                if source not in counted:  # every k from one pass over the rankings
                    relevant = dict(zip(table_of.ids, table_of.relevant, strict=True))
                    qrels = [relevant.get(q) or {"": 1} for q in ids]
                    counted[source] = _relevant_hits(ranked, qrels, golden_ks, source == "run")
                hits = counted[source][k]
        allowance = allowances.get(metric) or default_allowance(metric)
        drop = detectable_drop(values, n, alpha, len(result.gated), hits=hits)
        if math.isfinite(drop):
            table[metric] = (drop, allowance.allowed(reference))
    return table


def _relevant_hits(
    ranked: Sequence[Sequence[str]],
    qrels: Sequence[Mapping[str, int]],
    ks: Sequence[int],
    unique: bool,
) -> dict[int, FloatArray]:
    """Relevant docs in each top k, by the metric kernels (precision@k times k); ``unique``:
    the rankings repeat no id (this run's: deduplicated when the retriever returned them)."""
    values = compute([Metric("precision", k) for k in ks], ranked, qrels, unique=unique)
    return {k: np.rint(values[f"precision@{k}"] * k) for k in ks}


def entry_from_result(
    result: EvaluationResult,
    git: Mapping[str, Any],
    created: str,
    *,
    golden_key: str = "",
    previous: BaselineEntry | None = None,
) -> BaselineEntry:
    """What a baseline records of a run: aggregates, and per query its values, top k and
    latency. When ``previous`` (the entry this one replaces) has latencies that this run does
    not significantly differ from, they are kept: a refresh of an unchanged retriever then
    rewrites nothing but ``created`` and the git info."""
    measured = not result.run_file  # a run file's latencies are none, not 0.0 ms
    keep = previous is not None and (not measured or latency_unchanged(result, previous))
    old = previous.queries if previous is not None and keep else {}
    depth = _judge_depth(result.metrics)
    queries = {
        q.id: BaselineQuery(
            q.fingerprint,
            dict(q.metrics),
            list(q.returned[: result.k]),
            old[q.id].latency_ms
            if q.id in old
            else (None if q.error or not measured else q.latency_ms),
            result.judge_slots(q, depth) if depth else None,
        )
        for q in result.queries
    }
    p50, p95 = finite_or_none(result.latency_p50_ms), finite_or_none(result.latency_p95_ms)
    if not measured:
        p50 = p95 = None
    if keep and previous is not None:
        p50, p95 = previous.latency_p50_ms, previous.latency_p95_ms
    return BaselineEntry(
        golden_name=result.golden_name,
        golden_fingerprint=result.fingerprint,
        retriever_id=result.retriever_id,
        k=result.k,
        metrics=dict(result.metrics),
        ci=dict(result.ci),
        latency_p50_ms=p50,
        latency_p95_ms=p95,
        queries=queries,
        created=created,
        git=dict(git),
        judge=judge_definition(result),
        golden_key=golden_key,
    )


def judge_definition(result: EvaluationResult) -> dict[str, Any] | None:
    """What must match for this run's judge metrics to be compared with a baseline's: the
    judge's settings that change its labels (the relevance level on the 0-3 scale only) and
    the judge metrics' definitions version."""
    if not result.judge:
        return None
    definition = {key: result.judge.get(key, JUDGE_DEFAULTS.get(key)) for key in JUDGE_DEFINITION}
    if definition["scale"] == "0-3":
        definition["relevance_level"] = result.relevance_level
    else:
        definition["relevance_level"] = None  # binary verdicts have no relevance level
    definition["judge_metrics_version"] = JUDGE_METRICS_VERSION
    return definition


@dataclass(frozen=True)
class ABGroup:
    """Several retrievers on one golden set, each compared with the reference."""

    reference: EvaluationResult
    others: list[tuple[EvaluationResult, Comparison]]


class UnknownReference(RetrievalError, ValueError):
    """``--retrieval-compare-to`` names a retriever that did not run."""


def ab_groups(
    results: Sequence[EvaluationResult],
    compare_to: str | None,
    alpha: float,
    allowances: Mapping[str, Mapping[str, Allowance]] | None = None,
) -> list[ABGroup]:
    """Group results (in declaration order) by golden set; where several retrievers ran,
    compare each with the one named ``compare_to`` (default: the first declared), paired per
    query, two-sided, with that golden set's ``allowances`` (by golden source; default 0.01
    per metric). An unknown ``compare_to`` raises, listing the ids that ran. With one
    retriever nothing is compared and nothing is checked: its reference may have been left
    out by ``-k`` (a typo is caught at collection, among the parametrized ids)."""
    by_golden: dict[tuple[str, str], list[EvaluationResult]] = {}
    for result in results:
        by_golden.setdefault((result.golden_source, result.fingerprint), []).append(result)
    groups = []
    several = [
        members for members in by_golden.values() if len({r.retriever_id for r in members}) > 1
    ]
    if compare_to is not None and several:
        known = sorted({r.retriever_id for members in several for r in members})
        if compare_to not in known:
            raise UnknownReference(
                f"--retrieval-compare-to {compare_to!r}: no retriever of that id ran; the ids "
                f"are {', '.join(known)}"
            )
    for members in several:
        reference = next((r for r in members if r.retriever_id == compare_to), members[0])
        others = [
            (
                other,
                compare_runs(
                    reference, other, (allowances or {}).get(reference.golden_source, {}), alpha
                ),
            )
            for other in members
            if other is not reference
        ]
        groups.append(ABGroup(reference, others))
    return groups
