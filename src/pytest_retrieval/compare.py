"""Regression checks against a stored baseline, and A/B comparisons. Pure: no I/O.

A metric has regressed only when BOTH hold: its drop exceeds the allowance
(``--retrieval-max-drop``), and a paired sign-flip test over the per-query values of the
queries both runs share gives p < alpha after Holm-Bonferroni across the gated metrics.
The first condition ignores drops too small to matter; the second ignores drops that a
different sample of queries would not reproduce.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import stats
from .baseline import BaselineEntry
from .evaluation import EvaluationResult
from .metrics import MetricNameError, parse_metric

DEFAULT_MAX_DROP = 0.01
DEFAULT_ALPHA = 0.05
LATENCY = "latency_p95"
WORST = 5
TOLERANCE = 1e-9  # a drop of exactly the allowance is allowed, whatever the float rounding

_DROP = re.compile(r"^\s*(?P<amount>[0-9]*\.?[0-9]+)\s*(?P<percent>%?)\s*$")


class AllowanceError(ValueError):
    """A max-drop setting that cannot be used; the message says what to write."""


@dataclass(frozen=True)
class Allowance:
    """How far ``metric`` may drop: an absolute amount, or a fraction of the baseline."""

    metric: str
    amount: float
    relative: bool = False
    source: str = "default"

    def allowed(self, baseline_value: float) -> float:
        return self.amount * abs(baseline_value) if self.relative else self.amount

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"


def parse_allowance(metric: str, value: object, source: str) -> Allowance:
    """``0.01`` (absolute) or ``"2%"`` (relative to the baseline value)."""
    if metric != LATENCY:
        try:
            parse_metric(metric)
        except MetricNameError as exc:
            raise AllowanceError(f"max drop for {metric!r}: {exc}") from None
    text = str(value) if not isinstance(value, bool) else "x"
    match = _DROP.match(text)
    if match is None:
        raise AllowanceError(
            f"max drop {metric}={value!r}: write an absolute amount like 0.01 or a percentage "
            "like 2%"
        )
    amount = float(match["amount"])
    relative = bool(match["percent"])
    if relative:
        amount /= 100.0
    elif metric != LATENCY and amount > 1:
        raise AllowanceError(
            f"max drop {metric}={value}: metrics are fractions in [0, 1]; write 0.02 or 2%"
        )
    if metric == LATENCY and not relative:
        source += " (milliseconds)"
    return Allowance(metric, amount, relative, source)


def parse_assignment(text: str, source: str) -> Allowance:
    metric, sep, value = text.partition("=")
    if not sep:
        raise AllowanceError(f"{text!r} is not METRIC=DROP (e.g. recall@10=0.01 or ndcg@10=2%)")
    return parse_allowance(metric.strip(), value.strip(), source)


def merge(*layers: Iterable[Allowance]) -> dict[str, Allowance]:
    merged: dict[str, Allowance] = {}
    for layer in layers:
        for allowance in layer:
            merged[allowance.metric] = allowance
    return merged


@dataclass
class MetricChange:
    metric: str
    baseline: float
    current: float
    allowed: float
    p_value: float | None = None  # raw one-sided p (None: not tested)
    p_adjusted: float | None = None  # after Holm-Bonferroni
    verdict: str = "ok"  # ok | regressed | within noise | improved | not in baseline
    detectable: float | None = None  # drop found with 80% power at this n and alpha

    @property
    def delta(self) -> float:
        return self.current - self.baseline


@dataclass
class QueryChange:
    """One query that got worse: before -> after, and where its relevant docs went."""

    id: str
    query: str
    metric: str
    before: float
    after: float
    lost: dict[str, int | None]  # relevant id in baseline top k -> new rank (None: gone)


@dataclass
class Comparison:
    """A run against its baseline (or one retriever against another in an A/B run)."""

    reference: str  # "baseline <path>" or "retriever <id>"
    n_common: int
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    rejudged: list[str] = field(default_factory=list)
    changes: list[MetricChange] = field(default_factory=list)
    worst: list[QueryChange] = field(default_factory=list)
    stale: str | None = None
    alpha: float = DEFAULT_ALPHA
    baseline_created: str = ""
    baseline_commit: str = ""
    #: judge setting -> [baseline's, this run's], when LLM-judged values are not comparable
    judge_changed: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def regressed(self) -> list[MetricChange]:
        return [c for c in self.changes if c.verdict == "regressed"]

    @property
    def improved(self) -> list[MetricChange]:
        return [c for c in self.changes if c.verdict == "improved"]

    @property
    def drifted(self) -> bool:
        return bool(self.added or self.removed or self.rejudged)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        values = dict(data)
        values["changes"] = [MetricChange(**c) for c in data.get("changes", [])]
        values["worst"] = [QueryChange(**w) for w in data.get("worst", [])]
        return cls(**values)


def compare_to_baseline(
    result: EvaluationResult,
    entry: BaselineEntry,
    allowances: Mapping[str, Allowance],
    *,
    alpha: float = DEFAULT_ALPHA,
    reference: str = "baseline",
) -> Comparison:
    """Compare ``result`` with a recorded baseline on the queries both share unchanged."""
    current = {q.id: q for q in result.queries}
    added = sorted(set(current) - set(entry.queries))
    removed = sorted(set(entry.queries) - set(current))
    rejudged = sorted(
        qid
        for qid in set(current) & set(entry.queries)
        if current[qid].fingerprint != entry.queries[qid].fingerprint
    )
    changed = set(rejudged)
    common = [qid for qid in current if qid in entry.queries and qid not in changed]
    comparison = Comparison(
        reference=reference,
        n_common=len(common),
        added=added,
        removed=removed,
        rejudged=rejudged,
        alpha=alpha,
        baseline_created=entry.created,
        baseline_commit=str(entry.git.get("commit", ""))[:12],
    )
    if not common:
        comparison.stale = "no query of the golden set is unchanged since the baseline was recorded"
        return comparison
    missing = [m for m in result.metrics if not all(m in entry.queries[q].metrics for q in common)]
    judge_now = judge_definition(result)
    if judge_now is not None and entry.judge is not None and judge_now != entry.judge:
        changed_judge = [m for m in result.metrics if parse_metric(m).labels != "golden"]
        missing += [m for m in changed_judge if m not in missing]
        comparison.judge_changed = {
            key: [entry.judge.get(key), judge_now[key]]
            for key in JUDGE_DEFINITION
            if entry.judge.get(key) != judge_now[key]
        }
    before = {
        m: np.array([entry.queries[q].metrics[m] for q in common])
        for m in result.metrics
        if m not in missing
    }
    after = {m: np.array([current[q].metrics[m] for q in common]) for m in before}
    comparison.changes = _judge(before, after, allowances, alpha)
    comparison.changes += [
        MetricChange(
            m,
            math.nan,
            result.metrics[m],
            math.nan,
            verdict="judge changed"
            if comparison.judge_changed and parse_metric(m).labels != "golden"
            else "not in baseline",
        )
        for m in missing
    ]
    if missing and len(missing) == len(result.metrics):
        comparison.stale = "the baseline has none of the metrics this run computes"
    latency = allowances.get(LATENCY)
    if latency is not None and entry.latency_p95_ms is not None:
        comparison.changes.append(_latency_change(result, entry, latency))
    if comparison.regressed:
        first = (
            next(c for c in comparison.regressed if c.metric != LATENCY)
            if any(c.metric != LATENCY for c in comparison.regressed)
            else None
        )
        if first is not None:
            comparison.worst = _worst(result, entry, common, first.metric)
    return comparison


def _judge(
    before: Mapping[str, np.ndarray],
    after: Mapping[str, np.ndarray],
    allowances: Mapping[str, Allowance],
    alpha: float,
    alternative: str = "less",
) -> list[MetricChange]:
    changes = []
    raw: dict[str, float] = {}
    for metric, old in before.items():
        new = after[metric]
        paired = np.isfinite(old) & np.isfinite(new)  # open queries have no golden metrics
        if not paired.all():
            old, new = old[paired], new[paired]
        allowance = allowances.get(metric) or Allowance(metric, DEFAULT_MAX_DROP)
        change = MetricChange(
            metric, float(old.mean()), float(new.mean()), allowance.allowed(float(old.mean()))
        )
        if alpha < 1:
            raw[metric] = stats.paired_pvalue(old, new, alternative=alternative)
            change.p_value = raw[metric]
            sd = float(np.std(new - old, ddof=1)) if len(old) > 1 else 0.0
            change.detectable = stats.detectable_drop(sd, len(old), alpha / max(1, len(before)))
        changes.append(change)
    adjusted = stats.holm(raw) if raw else {}
    for change in changes:
        change.p_adjusted = adjusted.get(change.metric)
        significant = change.p_adjusted is None or change.p_adjusted < alpha
        if -change.delta > change.allowed + TOLERANCE:
            change.verdict = "regressed" if significant else "within noise"
        elif change.delta > change.allowed + TOLERANCE:
            change.verdict = "improved"
    return changes


def _latency_change(
    result: EvaluationResult, entry: BaselineEntry, allowance: Allowance
) -> MetricChange:
    old = float(entry.latency_p95_ms or 0.0)
    allowed = allowance.allowed(old)
    change = MetricChange(LATENCY, old, result.latency_p95_ms, allowed)
    if result.latency_p95_ms - old > allowed + TOLERANCE:  # higher latency is worse
        change.verdict = "regressed"
    return change


def _worst(
    result: EvaluationResult, entry: BaselineEntry, common: Sequence[str], metric: str
) -> list[QueryChange]:
    current = {q.id: q for q in result.queries}
    drops = sorted(
        common,
        key=lambda q: (current[q].metrics[metric] - entry.queries[q].metrics[metric], q),
    )
    worst = []
    k = parse_metric(metric).k
    for qid in drops[:WORST]:
        query = current[qid]
        before, after = entry.queries[qid].metrics[metric], query.metrics[metric]
        if after >= before:
            break
        ranks = {doc: rank for rank, doc in enumerate(query.returned, 1)}
        lost = {
            doc: ranks.get(doc)
            for doc in entry.queries[qid].ranked[:k]
            if query.relevant.get(doc, 0) > 0 and ranks.get(doc, k + 1) > k
        }
        worst.append(QueryChange(qid, query.query, metric, before, after, lost))
    return worst


def compare_runs(
    reference: EvaluationResult,
    other: EvaluationResult,
    allowances: Mapping[str, Allowance],
    alpha: float = DEFAULT_ALPHA,
) -> Comparison:
    """A/B: ``other`` against ``reference`` on the same golden set, two-sided p-values."""
    theirs = {q.id: q for q in other.queries}
    common = [q.id for q in reference.queries if q.id in theirs]
    ours = {q.id: q for q in reference.queries}
    metrics = [m for m in reference.metrics if m in other.metrics]
    before = {m: np.array([ours[q].metrics[m] for q in common]) for m in metrics}
    after = {m: np.array([theirs[q].metrics[m] for q in common]) for m in metrics}
    changes = _judge(before, after, allowances, alpha, alternative="two-sided")
    for change in changes:  # in an A/B table "regressed" reads as "worse"
        change.verdict = {"regressed": "worse", "improved": "better"}.get(
            change.verdict, change.verdict
        )
    return Comparison(
        f"retriever {reference.retriever_id}", len(common), changes=changes, alpha=alpha
    )


def power_table(
    result: EvaluationResult, allowances: Mapping[str, Allowance], alpha: float
) -> dict[str, tuple[float, float]]:
    """metric -> (drop detectable with 80% power, allowed drop): from the observed paired
    differences when compared with a baseline, else estimated from this run alone."""
    if alpha >= 1:
        return {}
    observed = (
        {}
        if result.comparison is None
        else {c.metric: c.detectable for c in result.comparison.changes if c.detectable is not None}
    )
    estimated = detectable_drops(result, alpha)
    table = {}
    for metric, value in result.metrics.items():
        allowance = allowances.get(metric) or Allowance(metric, DEFAULT_MAX_DROP)
        table[metric] = (observed.get(metric, estimated[metric]), allowance.allowed(value))
    return table


def entry_from_result(
    result: EvaluationResult, git: Mapping[str, Any], created: str
) -> BaselineEntry:
    """What a baseline records of a run: aggregates, and per query its values and top k."""
    from .baseline import BaselineQuery

    return BaselineEntry(
        golden_name=result.golden_name,
        golden_fingerprint=result.fingerprint,
        retriever_id=result.retriever_id,
        k=result.k,
        metrics=dict(result.metrics),
        ci=dict(result.ci),
        latency_p50_ms=_finite_or_none(result.latency_p50_ms),
        latency_p95_ms=_finite_or_none(result.latency_p95_ms),
        queries={
            q.id: BaselineQuery(q.fingerprint, dict(q.metrics), q.returned[: result.k])
            for q in result.queries
        },
        created=created,
        git=dict(git),
        judge=judge_definition(result),
    )


#: what must match for LLM-judged values to be comparable across runs
JUDGE_DEFINITION = ("model", "prompt_version", "scale", "min_score")


def judge_definition(result: EvaluationResult) -> dict[str, Any] | None:
    if not result.judge:
        return None
    return {key: result.judge.get(key) for key in JUDGE_DEFINITION}


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def detectable_drops(result: EvaluationResult, alpha: float) -> dict[str, float]:
    """Per metric, the drop a paired test finds with 80% power at this size and alpha
    (Bonferroni over the metrics, so conservative). Assumes two runs' per-query differences
    spread about as much as the per-query values themselves."""
    drops = {}
    for metric in result.metrics:
        values = np.array([q.metrics[metric] for q in result.queries])
        values = values[np.isfinite(values)]  # open queries have no golden metrics
        n = values.size
        sd = float(values.std(ddof=1)) if n > 1 else 0.0
        drops[metric] = stats.detectable_drop(sd, n, alpha / max(1, len(result.metrics)))
    return drops


@dataclass
class ABGroup:
    """Several retrievers on one golden set, each compared with the reference."""

    reference: EvaluationResult
    others: list[tuple[EvaluationResult, Comparison]]


def ab_groups(
    results: Sequence[EvaluationResult], compare_to: str | None, alpha: float
) -> list[ABGroup]:
    """Group results by golden set; where several retrievers ran, compare each with the one
    named ``compare_to`` (default: the first), paired per query, two-sided."""
    by_golden: dict[tuple[str, str], list[EvaluationResult]] = {}
    for result in results:
        by_golden.setdefault((result.golden_source, result.fingerprint), []).append(result)
    groups = []
    for members in by_golden.values():
        if len({r.retriever_id for r in members}) < 2:
            continue
        reference = next((r for r in members if r.retriever_id == compare_to), members[0])
        others = [
            (other, compare_runs(reference, other, {}, alpha))
            for other in members
            if other is not reference
        ]
        groups.append(ABGroup(reference, others))
    return groups
