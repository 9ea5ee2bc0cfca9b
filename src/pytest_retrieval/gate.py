"""The gate: which metrics are gated, thresholds checked, and the functions that decide a
verdict -- an evaluation's (:func:`decide`) and a session's (:func:`session_verdict`). Pure:
no I/O. What it checks against is parsed in :mod:`.limits`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from ._internal.io import relative
from .limits import LATENCY, Allowance, Threshold, ThresholdError
from .metrics import JUDGED, Metric
from .results import ChangeStatus, EvaluationResult
from .verdicts import (
    DOWNSTREAM_LABELS,
    JUDGE_COVERAGE,
    MISSING_BASELINE,
    REGRESSION,
    RETRIEVER_ERRORS,
    RUN_COVERAGE,
    STALE_BASELINE,
    THRESHOLD,
    GateOutcome,
    Reason,
    Verdict,
    causes_first,
)

#: ungraded causes a judge coverage reason names, the commonest first
TOP_CAUSES = 3

#: fewest sampled queries (in the sample, or in a tag of it) that can fail a threshold
MIN_SAMPLED = 30


def check(
    thresholds: Iterable[Threshold],
    values: Mapping[str, float],
    tag_values: Mapping[str, Mapping[str, float]],
    intervals: Mapping[str, tuple[float, float]],
    tag_intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
    *,
    sample: bool = False,
    sizes: Mapping[str, int] | None = None,
) -> list[GateOutcome]:
    """Compare each threshold with the aggregate (or per-tag) value; NaN never passes. On a
    ``sample``, a threshold its 95% interval reaches passes: only an upper bound below it
    shows that the full set fails (the point estimate alone would fail where the gate of
    the full run passes); and below MIN_SAMPLED queries (``sizes``: per tag, "" for all)
    nothing can show it (a bootstrap of three values is no interval)."""
    outcomes = []
    for threshold in thresholds:
        name = threshold.metric.name
        if threshold.tag is None:
            value, ci = values[name], intervals.get(name)
        else:
            if threshold.tag not in tag_values and sample:  # none of the tag was drawn
                outcomes.append(GateOutcome(threshold, math.nan, None, True))
                continue
            if threshold.tag not in tag_values:
                known = ", ".join(sorted(tag_values)) or "none"
                raise ThresholdError(
                    f"threshold {threshold.key} ({threshold.source}): no query has the tag "
                    f"{threshold.tag!r} (tags in this golden set: {known})"
                )
            value = tag_values[threshold.tag][name]
            ci = (tag_intervals or {}).get(threshold.tag, {}).get(name)
        small = (sizes or {}).get(threshold.tag or "", MIN_SAMPLED) < MIN_SAMPLED
        reached = sample and (small or (ci is not None and ci[1] >= threshold.minimum))
        passed = not math.isnan(value) and (value >= threshold.minimum or reached)
        outcomes.append(GateOutcome(threshold, value, ci, passed))
    return outcomes


def tag_intervals(result: EvaluationResult) -> dict[str, dict[str, tuple[float, float]]]:
    """tag -> metric -> 95% interval over that tag's queries, for the tag thresholds of
    ``result`` (a sample judges them on their interval, as it does the whole set's)."""
    from .stats import bootstrap_ci

    found: dict[str, dict[str, tuple[float, float]]] = {}
    for threshold in result.thresholds:
        if threshold.tag is None:
            continue
        name = threshold.metric.name
        values = np.array(
            [q.metrics.get(name, math.nan) for q in result.queries if threshold.tag in q.tags],
            dtype=np.float64,
        )
        values = values[np.isfinite(values)]
        if values.size:
            found.setdefault(threshold.tag, {}).update(bootstrap_ci({name: values})[0])
    return found


# ---------------------------------------------------------------------------- gated set

#: metric families gated by default, at the golden set's k
DEFAULT_GATED = ("recall", "mrr", "ndcg")


def gated_metrics(
    computed: Iterable[str],
    k: int,
    thresholds: Iterable[Threshold],
    allowances: Mapping[str, Allowance],
    chosen: Iterable[str] | None = None,
) -> tuple[str, ...]:
    """The metrics whose drop against a baseline can fail the run: ``chosen`` (from
    --retrieval-gate, ini, golden file or marker; default recall@k, mrr@k and ndcg@k), plus
    every metric with a threshold or an explicit allowance; only those computed. Holm's
    correction runs over this set, so a smaller, declared set keeps the gate sensitive."""
    names = list(computed)
    wanted = set(chosen) if chosen is not None else {f"{f}@{k}" for f in DEFAULT_GATED}
    wanted |= {t.metric.name for t in thresholds}
    wanted |= {m for m, a in allowances.items() if a.source != "default" and m != LATENCY}
    return tuple(name for name in names if name in wanted)


# ---------------------------------------------------------------------------- the verdict


def decide(result: EvaluationResult, *, strict_baseline: bool = False) -> EvaluationResult:
    """The evaluation with its verdict: the only place pass/fail is decided.

    Fails on: a threshold not met, failed retriever calls, judge coverage (or downstream
    labels) below what was required, a gated metric that regressed against the baseline,
    and, with ``strict_baseline``, a stale or missing baseline (otherwise a warning).
    """
    sample = result.sampled_from is not None
    outcomes = tuple(
        check(
            result.thresholds,
            result.metrics,
            result.per_tag,
            result.ci,
            tag_intervals(result) if sample else None,
            sample=sample,
            sizes={"": len(result.queries), **result.tag_counts},
        )
    )
    reasons: list[Reason] = []
    warnings: list[Reason] = []
    if result.errors:  # the cause of every 0 below: first in every output
        reasons.append(Reason(RETRIEVER_ERRORS, f"{result.failed_calls} (they score 0)"))
    for outcome in outcomes:
        t = outcome.threshold
        scope = f" on tag {t.tag!r}" if t.tag else ""
        of = f"on a sample of {len(result.queries)} of {result.sampled_from} queries"
        if outcome.passed:
            sampled = result.tag_counts.get(t.tag, 0) if t.tag else len(result.queries)
            queries = "query" if sampled == 1 else "queries"
            if math.isnan(outcome.value):  # a sample that drew none of the tag
                warnings.append(
                    Reason(
                        THRESHOLD,
                        f"{t.key} was not checked: no query {of} has the tag {t.tag!r} "
                        f"(threshold from {t.source})",
                        t.key,
                    )
                )
            elif outcome.value < t.minimum and sampled < MIN_SAMPLED:
                why = (
                    f"{t.metric.name}{scope} = {outcome.value:.4f} is below {t.minimum:g} {of}, "
                    f"but {sampled} sampled {queries}{scope} (fewer than {MIN_SAMPLED}) cannot "
                    f"show that the full set fails (threshold from {t.source})"
                )
                warnings.append(Reason(THRESHOLD, why, t.key))
            elif outcome.value < t.minimum:  # a sample's estimate, within its interval's reach
                high = outcome.ci[1] if outcome.ci else math.nan
                why = (
                    f"{t.metric.name}{scope} = {outcome.value:.4f} is below {t.minimum:g} {of}, "
                    f"but its upper 95% bound {high:.4f} is not: the sample cannot show that "
                    f"the full set fails (threshold from {t.source})"
                )
                warnings.append(Reason(THRESHOLD, why, t.key))
            continue
        if math.isnan(outcome.value):
            why = (
                f"{t.metric.name}{scope} is n/a ({_unscored(t.metric)}): the threshold "
                f"{t.minimum:g} (from {t.source}) cannot pass on it"
            )
        elif sample and outcome.ci is not None and not math.isnan(outcome.ci[1]):
            why = (
                f"{t.metric.name}{scope} upper 95% bound {outcome.ci[1]:.4f} < {t.minimum:g} "
                f"{of} (estimate {outcome.value:.4f}; threshold from {t.source})"
            )
        else:
            why = (
                f"{t.metric.name}{scope} = {outcome.value:.4f} is below {t.minimum:g} "
                f"(threshold from {t.source})"
            )
        reasons.append(Reason(THRESHOLD, why, t.key))
    if result.run_missing:
        warnings.append(Reason(RUN_COVERAGE, _run_coverage(result)))
    reasons += _label_problems(result)
    comparison = result.comparison
    if comparison is not None and not comparison.stale:
        for change in comparison.changes:
            if change.verdict is not ChangeStatus.REGRESSED:
                continue
            if change.metric == LATENCY:
                why = f"latency p95 rose {change.delta:.1f} ms (allowed {change.allowed:.1f} ms"
            else:
                why = f"{change.metric} dropped {-change.delta:.4f} (allowed {change.allowed:.4f}"
            if change.p_adjusted is not None:
                why += f", p={change.p_adjusted:.4g} < {comparison.alpha:g}"
            reasons.append(Reason(REGRESSION, why + ")", change.metric))
    for stale in (_stale(result), _not_in_baseline(result)):
        if stale is not None:
            (reasons if strict_baseline else warnings).append(stale)
    return replace(result, verdict=Verdict(tuple(reasons), tuple(warnings), outcomes))


def _run_coverage(result: EvaluationResult) -> str:
    from .runfile import listed

    name = Path(result.run_file or "").name  # the full path is the report's run_file
    sampled = "" if result.sampled_from is None else "sampled "
    they = "they are" if len(result.run_missing) > 1 else "it is"
    return (
        f"run file {name} lacks {len(result.run_missing)} of the {len(result.queries)} "
        f"{sampled}queries of golden set {result.golden_name} ({listed(result.run_missing)}): "
        f"{they} evaluated as returning nothing (score 0)"
    )


def _unscored(metric: Metric) -> str:
    """Why ``metric`` has no value: a judge metric when the judge graded none of its slots."""
    if metric.labels in JUDGED:
        return "nothing was graded: the LLM judge could not grade any hit of its top k"
    return "no query has golden judgments to score it on"


def _stale(result: EvaluationResult) -> Reason | None:
    """A baseline that cannot gate this run: missing, or stale (nothing comparable)."""
    path = relative(result.baseline_path) if result.baseline_path else "the baseline file"
    if result.baseline_note == "missing":
        return Reason(
            MISSING_BASELINE,
            f"no baseline for {result.golden_name}::{result.retriever_id} in {path}: "
            "nothing gates a regression",
        )
    if result.comparison is not None and result.comparison.stale:
        return Reason(
            STALE_BASELINE,
            f"stale baseline {path}: {result.comparison.stale}; nothing gates a regression",
        )
    return None


def _not_in_baseline(result: EvaluationResult) -> Reason | None:
    """Gated metrics the compared baseline was recorded without: their regression cannot be
    checked, which a gate must say rather than pass them as compared."""
    comparison = result.comparison
    if comparison is None or comparison.stale:
        return None
    lacking = [
        c.metric
        for c in comparison.changes
        if c.gated and c.verdict is ChangeStatus.NOT_IN_BASELINE
    ]
    if not lacking:
        return None
    path = relative(result.baseline_path) if result.baseline_path else "the baseline file"
    one = len(lacking) == 1
    return Reason(
        STALE_BASELINE,
        f"stale baseline {path}: it has no {', '.join(lacking)}, which this run gates: "
        f"{'its regression is' if one else 'their regressions are'} not checked",
    )


def _label_problems(result: EvaluationResult) -> list[Reason]:
    """Judge or downstream labels that cannot be trusted."""
    problems = []
    if result.erag and result.erag.get("failed"):
        first, why = next(iter(result.erag["failures"].items()))
        problems.append(
            Reason(
                DOWNSTREAM_LABELS,
                f"{result.erag['failed']} downstream labels failed (they count as 0); "
                f"first: {first}: {why}",
            )
        )
    judge = result.judge
    if judge:
        coverage, needed = judge.get("coverage", 1.0), judge.get("min_coverage", 0.0)
        if coverage < needed:
            stopped = judge.get("stopped")
            causes = sorted(
                ((c, n) for c, n in (judge.get("causes") or {}).items() if c != stopped),
                key=lambda kv: -kv[1],
            )
            why = f"; {stopped}" if stopped else ""
            if causes:
                top = ", ".join(f"{cause} ({count}x)" for cause, count in causes[:TOP_CAUSES])
                why += f"; most often: {top}"
            problems.append(
                Reason(
                    JUDGE_COVERAGE,
                    f"the LLM judge graded {coverage:.1%} of the hits, below the required "
                    f"{needed:.0%} (--retrieval-judge-min-coverage){why}",
                )
            )
    return problems


# ---------------------------------------------------------------------------- the session


def session_verdict(
    results: Sequence[EvaluationResult], own: Sequence[Reason], warned: Sequence[Reason] = ()
) -> Verdict:
    """The session's verdict: its own reasons (a baseline not written, an output that could
    not be written, ...) and warnings, and each evaluation's, named by golden set and
    retriever."""
    reasons = list(own)
    warnings: list[Reason] = list(warned)
    for result in results:
        label = f"{result.golden_name} [{result.retriever_id}]: "
        reasons += [Reason(r.kind, label + r.message, r.metric) for r in result.verdict.reasons]
        warnings += [Reason(r.kind, label + r.message, r.metric) for r in result.verdict.warnings]
    return Verdict(causes_first(reasons), tuple(warnings))


def part_verdict(result: EvaluationResult) -> Verdict:
    """A shard part's verdict, as its partial report keeps it: only its failed retriever
    calls (the whole has them too); thresholds, regressions and label coverage are decided
    on the whole, by :func:`decide`."""
    return Verdict(tuple(result.verdict.of_kind(RETRIEVER_ERRORS)))


def promote(verdict: Verdict, kind: str, why: str) -> Verdict:
    """``verdict`` with its warnings of ``kind`` made reasons (after the others), ``why``
    added to each: a warning filter in force (``-W error``) makes that warning an error."""
    promoted = tuple(
        replace(w, message=f"{w.message}; {why}") for w in verdict.warnings if w.kind == kind
    )
    kept = tuple(w for w in verdict.warnings if w.kind != kind)
    return Verdict((*verdict.reasons, *promoted), kept, verdict.outcomes, verdict.decided)
