"""Terminal text: the summary section of each evaluation, the A/B tables, and the failure
message a failed evaluation raises (its verdict's reasons first, then the evidence). It
prints the Verdict and decides nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._internal.io import relative
from ..metrics import parse_metric
from ..results import ChangeStatus
from ..verdicts import REGRESSION
from .rows import (
    CHANGED_SHOWN,
    WORST_QUERIES,
    ab_unjudged_notes,
    change_heading,
    changed_lists,
    depth_note,
    judge_bill,
    label_problems,
    move_lines,
    power_lines,
    recorded,
    shift_counts,
    unjudged_note,
    worst_queries,
)
from .text import (
    ci,
    command,
    delta,
    judge_options,
    metric_value,
    ms,
    num,
    p_value,
    short,
    text_table,
    title,
)

if TYPE_CHECKING:
    from pathlib import Path

    from ..compare import ABGroup
    from ..results import Comparison, ErrorGroup, EvaluationResult, QueryResult
    from ..verdicts import GateOutcome


def metric_table(result: EvaluationResult) -> list[str]:
    """metric | value | 95% CI | threshold | status, every metric then each tag threshold."""
    gates = {o.threshold.key: o for o in result.verdict.outcomes}
    rows = [["metric", "value", "95% CI", "threshold", "status"]]
    for name, number in result.metrics.items():
        outcome = gates.pop(name, None)
        rows.append(_row(name, metric_value(result, name, number), result.ci.get(name), outcome))
    for key, outcome in gates.items():  # tag thresholds
        rows.append(_row(key, num(outcome.value), None, outcome))
    return text_table(rows)


def _row(
    name: str, shown: str, bounds: tuple[float, float] | None, outcome: GateOutcome | None
) -> list[str]:
    if outcome is None:
        return [name, shown, ci(bounds), "", ""]
    status = "PASS" if outcome.passed else "FAIL"
    return [name, shown, ci(bounds), f">= {outcome.threshold.minimum:g}", status]


#: where failed calls' tracebacks are kept, as the advice names it when no report is written
REPORT_OPTION = "--retrieval-report"


def kept_in(report: Path | None, option: str = REPORT_OPTION) -> str:
    """Where the advice sends the reader for every failed call's traceback: the JSON report
    being written, else the tool's ``option`` that writes one."""
    return option if report is None else relative(report)


def summary_lines(
    result: EvaluationResult, *, verbose: bool = False, kept_in: str = REPORT_OPTION
) -> list[str]:
    """The terminal summary section of one evaluation (``verbose``: with tracebacks;
    ``kept_in``: the report file being written, else the option that writes one)."""
    lines = [title(result), *metric_table(result)]
    latency = (
        "latency n/a (a precomputed run)"
        if result.run_file
        else "latency n/a (no call answered)"  # the percentiles of no latencies are NaN
        if math.isnan(result.latency_p50_ms)
        else f"latency p50 {result.latency_p50_ms:.1f} ms · p95 {result.latency_p95_ms:.1f} ms"
    )
    lines.append(
        f"  {latency}"
        + (f" · CI by {result.ci_method} approximation" if result.ci_method != "bootstrap" else "")
    )
    if result.per_tag:
        first = next(iter(result.metrics))
        tags = ", ".join(
            f"{tag} ({result.tag_counts[tag]}) {num(values[first])}"
            for tag, values in result.per_tag.items()
        )
        lines.append(f"  {first} by tag: {tags}")
    if result.duplicates:
        lines.append(
            f"  {result.duplicates} repeated doc ids dropped (each id counts at its first rank)"
        )
    if result.errors:
        lines.append(f"  {result.failed_calls} (scored 0):")
        lines.extend(error_lines(result, verbose, limit=3, kept_in=kept_in))
    lines.extend(short_results_lines(result))
    if result.open_queries:
        labelled = len(result.queries) - result.open_queries
        lines.append(
            f"  {labelled} labelled and {result.open_queries} open queries (open ones count "
            "for the judge and downstream metrics only)"
        )
    lines.extend(judge_lines(result))
    if result.erag:
        lines.append(
            f"  downstream labels (retrieval_downstream {result.erag.get('version', '')}): "
            f"{result.erag.get('calls', 0)} calls, {result.erag.get('cache_hits', 0)} cached"
        )
    lines.extend(f"  {r.message}" for r in label_problems(result.verdict))
    if result.sampled_from is not None:
        lines.append(
            "  a sample (--retrieval-sample): a quick check, not the full gate; "
            "baselines are never updated from it"
        )
    lines.extend(baseline_lines(result, verbose=verbose))
    word = result.verdict.word
    if result.part is not None and result.verdict.passed:  # a CI shard's: nothing was gated
        word = "not gated in a shard (combine decides on the whole set)"
    lines.append(f"  verdict: {word}")
    lines.extend(f"    {reason.kind}: {reason.message}" for reason in result.verdict.reasons)
    lines.extend(f"    note: {w.message}" for w in result.verdict.notes)
    return lines


def baseline_lines(result: EvaluationResult, *, verbose: bool = False) -> list[str]:
    """Where this run stands against its stored baseline, and what to do about it."""
    lines: list[str] = []
    path = relative(result.baseline_path) if result.baseline_path else ""
    if result.baseline_note == "missing":
        lines.append(
            f"  no baseline for {result.golden_name}::{result.retriever_id} in {path}; "
            f"record one on main with: {command(result, '--retrieval-update-baseline')}"
        )
    elif result.baseline_note == "recording":
        # not "recording": the update may yet be refused (the session's lines say which)
        lines.append(f"  not compared with a baseline: this run is to be recorded in {path}")
    comparison = result.comparison
    if comparison is not None:
        lines.extend(regression_lines(result, comparison, verbose=verbose))
    lines.extend(f"  {line}" for line in power_lines(result))
    return lines


def regression_lines(
    result: EvaluationResult,
    comparison: Comparison,
    *,
    verbose: bool = False,
    advice: bool = True,
) -> list[str]:
    """The run against ``comparison``: drift, judge changes, staleness, the change table, the
    regressions and the queries that changed (with where their relevant documents went).
    ``advice``: say which pytest command fixes what (not for two reports compared)."""

    def fix(words: str, extra: str) -> str:
        return f"{words} {command(result, extra)}" if advice else ""

    lines = [f"  vs {comparison.reference} (recorded {recorded(comparison)}):"]
    if comparison.drifted:
        lines.append(
            f"    golden set changed since: {len(comparison.added)} added, "
            f"{len(comparison.removed)} removed, {len(comparison.rejudged)} re-judged; "
            f"compared on the {comparison.n_common} unchanged queries"
        )
        for label, ids in (
            ("added", comparison.added),
            ("removed", comparison.removed),
            ("re-judged", comparison.rejudged),
        ):
            if ids:
                more = f" (+{len(ids) - 8} more)" if len(ids) > 8 else ""
                lines.append(f"      {label}: {', '.join(ids[:8])}{more}")
    if comparison.judge_changed:
        what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in comparison.judge_changed.items())
        lines.append(
            f"    the judge changed since the baseline ({what}): its metrics are not compared"
            + fix("; re-record with", f"{judge_options(result)} --retrieval-update-baseline")
        )
    if comparison.stale:
        lines.append(
            f"    STALE baseline: {comparison.stale}. Not compared."
            + fix(" Refresh it with:", "--retrieval-update-baseline")
        )
        return lines
    lines.extend(text_table(change_rows(comparison), indent="    "))
    unjudged = unjudged_note(result, comparison)
    if unjudged is not None:
        lines.append(f"    WARNING: {unjudged.text}: {unjudged.code}")
    if comparison.improved:
        names = ", ".join(f"{c.metric} {c.delta:+.4f}" for c in comparison.improved)
        lines.append(
            f"    improved significantly beyond the allowance ({names})"
            + fix(": ratchet the baseline up with", "--retrieval-update-baseline")
        )
    lines.extend(f"    REGRESSION: {r.message}" for r in result.verdict.of_kind(REGRESSION))
    lines.extend(changed_lines(comparison, shown=CHANGED_SHOWN if verbose else WORST_QUERIES))
    return lines


def changed_lines(comparison: Comparison, shown: int) -> list[str]:
    """How the shared queries moved per gated metric, and the ``shown`` that got most worse
    and most better on each, with where their relevant documents went."""
    if not comparison.shifts:
        return []
    lines = ["    queries that changed:"]
    lines.extend(text_table(shift_counts(comparison), indent="      "))
    for found in changed_lists(comparison, shown):
        most = len(found.shown) + found.listed_above
        above = f", {found.listed_above} of them listed above" if found.listed_above else ""
        lines.append(
            f"    {found.count} {found.direction} on {found.metric} "
            f"(the {most} most changed{above}){':' if found.shown else ''}"
        )
        depth = comparison.shifts[found.metric].depth
        note = depth_note(comparison.shifts[found.metric])
        if note and found.shown:
            lines.append(f"      ({note})")
        for change, others in found.shown:
            lines.append(f"      {change_heading(change, others)}")
            lines.extend(f"        {line}" for line in move_lines(change, depth))
    return lines


def change_rows(comparison: Comparison) -> list[list[str]]:
    """metric | baseline | current | Δ | allowed | p | verdict, one row per compared metric."""
    rows = [["metric", "baseline", "current", "Δ", "allowed", "p", "verdict"]]
    for c in comparison.changes:
        gated = "" if c.gated else " (not gated)"
        latency = c.metric == "latency_p95"
        fmt = ms if latency else num
        rows.append(
            [
                c.metric,
                fmt(c.baseline),
                fmt(c.current),
                delta(c.delta, 1 if latency else 4),
                fmt(c.allowed) if not math.isnan(c.allowed) else "",
                p_value(c.p_adjusted if c.gated else c.p_value),
                c.verdict + gated,
            ]
        )
    return rows


def ab_lines(groups: Sequence[ABGroup]) -> list[str]:
    """Side by side: one column per retriever, deltas and paired p against the reference."""
    lines: list[str] = []
    for group in groups:
        reference = group.reference
        header = ["metric", reference.retriever_id]
        for other, _ in group.others:
            header += [other.retriever_id, "Δ", "p"]
        rows = [header]
        for name, value in reference.metrics.items():
            row = [name, num(value)]
            for other, comparison in group.others:
                change = next((c for c in comparison.changes if c.metric == name), None)
                theirs = other.metrics.get(name, math.nan)
                row += [
                    num(theirs),
                    delta(theirs - value, 4),
                    p_value(None if change is None else change.p_adjusted or change.p_value)
                    + ("" if change is None else _mark(change.verdict)),
                ]
            rows.append(row)
        count = len(group.others) + 1
        lines.append(
            f"{reference.golden_name}: {count} retrievers side by side "
            f"(Δ and paired two-sided p against {reference.retriever_id})"
        )
        lines.extend(text_table(rows))
        lines.extend(f"  WARNING: {note.text}: {note.code}" for note in ab_unjudged_notes(group))
        for other, comparison in group.others:
            if comparison.shifts:
                lines.append(f"  {other.retriever_id} against {reference.retriever_id}:")
                lines.extend(changed_lines(comparison, shown=3))
        lines.append("")
    return lines


def _mark(verdict: ChangeStatus) -> str:
    """A/B: "better"/"worse" only when significant after Holm (see compare.judge_changes)."""
    return f" {verdict}" if verdict in (ChangeStatus.BETTER, ChangeStatus.WORSE) else ""


def describe_query(query: QueryResult, metric: str) -> list[str]:
    """One query's failure story: its score, the relevant ids it missed, where hits landed."""
    score = num(query.metrics.get(metric, math.nan))
    lines = [f"    {query.id}: {short(query.query, 70)!r} {metric}={score}"]
    if query.error:
        lines.append(f"      error: {query.error}")
        return lines
    missed = query.missed
    if missed:
        shown = ", ".join(missed[:5]) + (f" (+{len(missed) - 5} more)" if len(missed) > 5 else "")
        lines.append(f"      missed relevant: {shown}")
    found = query.found_ranks
    if found:
        lines.append("      relevant found at: " + ", ".join(f"{d} #{r}" for d, r in found.items()))
    if query.judgments and parse_metric(metric).labels != "golden":
        lines.extend(_verdict_lines(query))
    return lines


def _verdict_lines(query: QueryResult, limit: int = 3) -> list[str]:
    """The judge's reasons for the hits it found off topic (or could not grade)."""
    lines: list[str] = []
    for rank, doc in enumerate(query.returned, 1):
        verdict = query.judgments.get(doc)
        if verdict is None or verdict.get("on_topic") is True:
            continue
        if len(lines) == limit:
            lines.append("      ...")
            break
        if verdict.get("error"):
            lines.append(f"      #{rank} {doc} ungraded: {verdict['error']}")
        else:
            lines.append(f"      #{rank} {doc} off topic: {verdict.get('reason', '')}")
    return lines


def judge_lines(result: EvaluationResult) -> list[str]:
    """The judge's bill: calls, cache, tokens, cost, coverage, and why hits went ungraded."""
    return [("  " if i == 0 else "    ") + line for i, line in enumerate(judge_bill(result))]


def error_lines(
    result: EvaluationResult, verbose: bool, limit: int, kept_in: str = REPORT_OPTION
) -> list[str]:
    """One line per kind of error (``verbose``: each with the first traceback kept of it);
    the rest are in ``kept_in``."""
    groups = result.error_groups
    lines: list[str] = []
    for group in groups[:limit]:
        lines.append(f"    {group_line(group)}")
        if verbose and group.traceback:
            lines.extend(f"      {line}" for line in group.traceback.rstrip().splitlines())
    if len(groups) > limit:
        lines.append(f"    ... and {len(groups) - limit} more kinds of error (see {kept_in})")
    if not verbose and any(group.traceback for group in groups[:limit]):
        lines.append(f"    (-v shows the first traceback of each; {kept_in} keeps them)")
    return lines


def group_line(group: ErrorGroup, shown: int = 3) -> str:
    """``37 queries: <error> (first: q12, q15, q40, ...)``, or ``q12: <error>`` for one."""
    if len(group.queries) == 1:
        return f"{group.queries[0]}: {group.error}"
    first = ", ".join(group.queries[:shown]) + (", ..." if len(group.queries) > shown else "")
    differ = "" if group.uniform else "; the messages differ only in numbers"
    return f"{len(group.queries)} queries: {group.error} (first: {first}{differ})"


def short_results_lines(result: EvaluationResult) -> list[str]:
    """The note for a retriever that returns fewer hits than asked (ignoring k?)."""
    found = result.short_results
    if found is None:
        return []
    ask = (  # a run file holds what its maker kept, not what a call returned
        f"was the run file cut at a depth below {found.k}?"
        if result.run_file
        else "does the retriever honour k?"
    )
    return [
        f"  note: {found.short} of {found.answered} queries returned fewer than {found.k} hits "
        f"(median {found.median:g}): {found.metric} counts the missing ranks as misses; {ask}"
    ]


def failure_text(
    result: EvaluationResult, *, verbose: bool = False, kept_in: str = REPORT_OPTION
) -> str:
    """Why an evaluation failed: its first reason on the first line, the others next (CI
    systems show a long message's first lines only: JUnit's message keeps ten), then the
    gate table, failed calls (``verbose``: with their tracebacks), the regression and the
    worst queries."""
    verdict = result.verdict
    only_regressed = all(reason.kind == REGRESSION for reason in verdict.reasons)
    what = "retrieval regression" if only_regressed else "retrieval gate failed"
    reasons = [  # "retrieval regression: regression: ..." says it twice
        reason.message if only_regressed else f"{reason.kind}: {reason.message}"
        for reason in verdict.reasons
    ]
    more = f" (+{len(reasons) - 1} more below)" if len(reasons) > 1 else ""
    lines = [f"{what}: {reasons[0]}{more}" if reasons else what]
    lines += [f"  {reason}" for reason in reasons[1:]]
    # a run's missing queries, in the first lines that JUnit's message keeps
    lines.extend(f"  note: {w.message}" for w in verdict.notes)
    lines.append(f"  {title(result)}")
    lines += metric_table(result)
    if result.errors:
        lines.append(f"  {result.failed_calls}; they score 0:")
        lines.extend(error_lines(result, verbose, limit=10, kept_in=kept_in))
    lines.extend(short_results_lines(result))
    if label_problems(verdict):
        lines.extend(judge_lines(result))
    if result.comparison is not None and result.regressed:
        lines.extend(regression_lines(result, result.comparison, verbose=verbose))
    failed = [o for o in verdict.outcomes if not o.passed]
    if failed:
        worst = failed[0].threshold
        lines.append(f"  worst queries by {worst.key}:")
        for query in worst_queries(result, worst.metric.name, worst.tag):
            lines.extend(describe_query(query, worst.metric.name))
    return "\n".join(lines)
