"""The format-neutral model every renderer prints: an evaluation's tables as rows of cells,
the notes under them, and the facts the terminal shares with both (which queries are the
worst, the judge's bill, the gate's blind spot). Built once, from the results and their
Verdict, as plain text with a status per piece; ``markdown`` and ``html`` only choose how a
status looks, so both outputs always say the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._internal.io import relative
from ..metrics import parse_metric
from ..results import ChangeStatus
from ..verdicts import DOWNSTREAM_LABELS, JUDGE_COVERAGE, Reason, Verdict
from .text import ci, command, delta, judge_options, metric_value, ms, num, p_value, short

if TYPE_CHECKING:
    from ..compare import ABGroup
    from ..results import (
        Comparison,
        EvaluationResult,
        HitMove,
        MetricChange,
        QueryChange,
        QueryResult,
        QueryShifts,
    )
    from ..verdicts import GateOutcome

#: a status tag for a cell part or a note: "" plain, "code", "pass", "fail", "warn"
Status = str
#: one piece of a table cell or a note: (status, plain text)
Mark = tuple[Status, str]
#: a table cell: its pieces, shown joined by " · "
Cell = list[Mark]

IDS_SHOWN = 8  # drifted query ids listed per kind before "+N more"
WORST_QUERIES = 5  # the worst queries a failure shows
CHANGED_SHOWN = 10  # changed queries shown per direction and gated metric (Markdown, HTML)


def plain(text: str) -> Cell:
    """A cell of plain text (no pieces when empty)."""
    return [("", text)] if text else []


@dataclass
class Note:
    """One line under an evaluation's table; ``code`` (a command or path) is shown as code."""

    status: Status
    text: str
    code: str = ""


# ---------------------------------------------------------------------------- shared facts


def unjudged_note(result: EvaluationResult, comparison: Comparison) -> Note | None:
    """The comparison's warning that ``result``'s top k holds many more unjudged documents
    than the reference's (decided in :mod:`..compare`), with the ``pool`` command to fill
    them; None when there is none."""
    found = comparison.unjudged
    if found is None:
        return None
    golden = relative(result.golden_source)
    return Note("warn", found.message(comparison.reference), found.command(golden))


def ab_unjudged_notes(group: ABGroup) -> list[Note]:
    """:func:`unjudged_note` of every retriever of an A/B group against its reference,
    each named."""
    found = []
    for other, comparison in group.others:
        note = unjudged_note(other, comparison)
        if note is not None:
            found.append(Note(note.status, f"{other.retriever_id}: {note.text}", note.code))
    return found


def label_problems(verdict: Verdict) -> list[Reason]:
    """The verdict's reasons about judge or downstream labels."""
    return [r for r in verdict.reasons if r.kind in (JUDGE_COVERAGE, DOWNSTREAM_LABELS)]


def depth_note(shift: QueryShifts) -> str | None:
    """When the reference's ranking is known less deep than the metric's k (a baseline
    stores its top k; a deeper metric gated since): which moves cannot be told."""
    k = parse_metric(shift.metric).k
    if not shift.depth or shift.depth >= k:
        return None
    return (
        f"the reference's ranking is known to #{shift.depth} only: a document below "
        f"#{shift.depth} in it that entered or left the top {k} of {shift.metric} cannot be "
        "shown"
    )


def shift_counts(comparison: Comparison) -> list[list[str]]:
    """metric | worse | better | unchanged: how the shared queries moved on each gated
    metric (queries without a value in one run are counted apart)."""
    rows = [["metric", "worse", "better", "unchanged"]]
    for name, shift in comparison.shifts.items():
        unchanged = str(shift.unchanged) + (f" ({shift.open} n/a)" if shift.open else "")
        rows.append([name, str(shift.worse), str(shift.better), unchanged])
    return rows


def rank_text(rank: int | None, *, known: int | None = None) -> str:
    """``#3``; None is "below #N" for a ranking known ``known`` deep (a run retrieves its
    deepest metric's k, a baseline stores its top k), else "not retrieved"."""
    if rank is not None:
        return f"#{rank}"
    return f"below #{known}" if known else "not retrieved"


def move_text(move: HitMove, depth: int | None = None, asked: int | None = None) -> str:
    """``d12 #2 → #14`` (``depth``: how deep the reference's ranking is known; ``asked``:
    how deep this run retrieved), with the judge's labels when either run has one."""
    before = rank_text(move.before, known=depth)
    text = f"{move.doc} {before} → {rank_text(move.after, known=asked)}"
    if move.grade is not None and move.grade > 1:
        text += f" (grade {move.grade})"
    if move.judge_before is not None or move.judge_after is not None:
        text += f" · judge {_label(move.judge_before)} → {_label(move.judge_after)}"
    return text


def _label(label: int | None) -> str:
    return "-" if label is None else str(label)


def move_lines(change: QueryChange, depth: int | None = None) -> list[str]:
    """Where a changed query's documents went, one line per kind: the relevant ones that
    left and entered the top k, those that moved within it, then judge-labelled others;
    what a reviewer reads first about a changed query."""
    k = change.k
    lost, gained = change.lost, change.gained
    within = [m for m in change.moves if (m.grade or 0) > 0 and m not in lost and m not in gained]
    others = [m for m in change.moves if (m.grade or 0) <= 0]
    kinds = (
        (f"left the top {k}", lost),
        (f"entered the top {k}", gained),
        (f"moved within the top {k}", within),
        ("judged hits that moved", others),
    )
    return [
        f"{what}: " + "; ".join(move_text(m, change.depth or depth, change.asked) for m in moves)
        for what, moves in kinds
        if moves
    ]


def change_heading(change: QueryChange, also: Sequence[QueryChange] = (), width: int = 60) -> str:
    """``q12 'the query' [tag, tag] mrr@10 1.0000 → 0.2000``, then the same query's other
    changed metrics (``also``); the query text is cut to ``width``, never the values."""
    tags = f" [{', '.join(change.tags)}]" if change.tags else ""
    values = " · ".join(f"{c.metric} {num(c.before)} → {num(c.after)}" for c in (change, *also))
    return f"{change.id} {short(change.query, width)!r}{tags} {values}"


@dataclass(frozen=True)
class ChangedList:
    """The most changed queries in one direction on one gated metric, each query listed
    once across metrics (under the first metric it changed most on)."""

    metric: str
    direction: str  # "worse" or "better"
    count: int  # how many queries changed this way on the metric
    shown: list[tuple[QueryChange, list[QueryChange]]]  # change, its other metrics' changes
    listed_above: int  # of its most changed, how many are listed under a metric above


def changed_lists(comparison: Comparison, shown: int) -> list[ChangedList]:
    """Per gated metric, worse then better: its ``shown`` most changed queries, less those
    listed under an earlier metric (gated metrics mostly move together; a query is read
    once, with its changes on the other metrics)."""
    by_query: dict[str, list[QueryChange]] = {}
    for shift in comparison.shifts.values():
        for change in shift.queries:
            by_query.setdefault(change.id, []).append(change)
    lists = []
    for direction in ("worse", "better"):
        seen: set[str] = set()
        for metric, shift in comparison.shifts.items():
            ranked = shift.worst if direction == "worse" else shift.best
            candidates = ranked(shown)
            if not candidates:
                continue
            fresh = [c for c in candidates if c.id not in seen]
            entries = [
                (c, [o for o in by_query[c.id] if o.metric != metric and o.delta * c.delta > 0])
                for c in fresh
            ]
            repeated = len(candidates) - len(fresh)
            seen.update(c.id for c in fresh)
            count = shift.worse if direction == "worse" else shift.better
            lists.append(ChangedList(metric, direction, count, entries, repeated))
    return lists


def worst_queries(
    result: EvaluationResult, metric: str, tag: str | None = None, limit: int = WORST_QUERIES
) -> list[QueryResult]:
    """The lowest-scoring queries on ``metric`` (within ``tag`` if given)."""
    pool = [
        q
        for q in result.queries
        if (tag is None or tag in q.tags) and math.isfinite(q.metrics.get(metric, 0.0))
    ]
    return sorted(pool, key=lambda q: (q.metrics.get(metric, 0.0), q.id))[:limit]


def _distinct(a: float, b: float) -> tuple[str, str]:
    """Two numbers with 3 significant digits, more when they would read the same."""
    for digits in range(3, 8):
        pair = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if pair[0] != pair[1]:
            break
    return pair


def power_lines(result: EvaluationResult) -> list[str]:
    """The gate's blind spot: gated metrics whose allowed drop is smaller than the drop the
    compared queries can detect with 80% power (shown for an unchanged PR too)."""
    weak = {m: pair for m, pair in result.power.items() if pair[0] > pair[1]}
    if not weak:
        return []
    metric, (detectable, allowed) = next(iter(weak.items()))
    n = result.comparison.n_common if result.comparison is not None else len(result.queries)
    shown, limit = _distinct(detectable, allowed)
    others = len(weak) - 1
    more = f" (and {others} more gated metric{'s' if others > 1 else ''})" if others else ""
    return [
        f"power: {n} queries detect a {shown} drop in {metric} with 80% power, "
        f"not the allowed {limit}{more}; smaller drops pass unnoticed (more queries, "
        "or a larger max drop, close the gap)"
    ]


def judge_bill(result: EvaluationResult) -> list[str]:
    """The judge's bill (calls, cache, tokens, cost, coverage), then the commonest reasons
    hits went ungraded and how many documents were cut; empty without a judge."""
    judge = result.judge
    if not judge:
        return []
    cost = judge.get("estimated_cost_usd")
    lines = [
        f"judge {judge.get('model', '?')} (prompt {judge.get('prompt_version', '?')}): "
        f"{judge.get('calls', 0)} calls, {judge.get('cache_hits', 0)} cache hits, "
        f"{judge.get('prompt_tokens', 0) + judge.get('completion_tokens', 0)} tokens"
        + (f", ~${cost:.4f}" if cost is not None else "")
        + f"; graded {judge.get('graded', 0)}/{judge.get('pairs', 0)} hits "
        f"(coverage {judge.get('coverage', 1.0):.1%})"
    ]
    causes = sorted((judge.get("causes") or {}).items(), key=lambda kv: -kv[1])
    lines += [f"ungraded {count}x: {cause}" for cause, count in causes[:3]]
    if rest := causes[3:]:
        lines.append(
            f"ungraded {sum(count for _, count in rest)}x more, for {len(rest)} other cause"
            f"{'s' if len(rest) > 1 else ''} (the JSON report's judge.causes lists them)"
        )
    sampled = judge.get("sampled") or 0
    if (judge.get("samples") or 1) > 1 and sampled and judge.get("agreement") is not None:
        unanimous = judge.get("unanimous") or 0
        lines.append(
            f"asked {judge['samples']} times a hit: every answer agreed on {unanimous} of "
            f"{sampled} hits ({unanimous / sampled:.1%}); on average {judge['agreement']:.1%} "
            "of a hit's answers matched its majority verdict"
        )
    if judge.get("request_shape"):
        lines.append(
            "the endpoint refused some request parameters; sent without them: "
            + ", ".join(judge["request_shape"])
        )
    if judge.get("usage_unreadable"):
        lines.append(
            f"{judge['usage_unreadable']} answers had no readable token usage (not in the cost)"
            + (
                f"; estimated {judge['tokens_estimated']} tokens from the requests, counted "
                "against --retrieval-judge-max-tokens"
                if judge.get("tokens_estimated")
                else ""
            )
        )
    if judge.get("cached_ungraded"):
        lines.append(
            f"{judge['cached_ungraded']} ungraded answers (refused, malformed) were read from "
            f"the cache; {judge.get('retry_option') or '--retrieval-judge-retry-ungraded'} "
            "asks again"
        )
    if judge.get("truncated_docs"):
        lines.append(
            f"{judge['truncated_docs']} documents were cut to the text budget "
            "(--retrieval-judge-text-budget)"
        )
    return lines


def recorded(comparison: Comparison) -> str:
    """When the compared baseline was recorded, and at which commit if known."""
    when = comparison.baseline_created or "unknown time"
    if comparison.baseline_commit:
        when += f", commit {comparison.baseline_commit}"
    return when


# ---------------------------------------------------------------------------- tables


def metric_rows(result: EvaluationResult) -> list[list[Cell]]:
    """The evaluation's table: every metric, then each tag threshold, then latency against
    the baseline; first row is the header. The last cell is the verdict."""
    gates = {o.threshold.key: o for o in result.verdict.outcomes}
    changes: dict[str, MetricChange] = {}
    if result.comparison is not None and not result.comparison.stale:
        changes = {c.metric: c for c in result.comparison.changes}
    header = ["metric", "value", "95% CI", "threshold", "baseline", "Δ", "p", "verdict"]
    rows = [[plain(name) for name in header]]
    for name, number in result.metrics.items():
        outcome = gates.pop(name, None)
        rows.append(
            _metric_row(
                name, metric_value(result, name, number), ci(result.ci.get(name)), outcome, changes
            )
        )
    for key, outcome in gates.items():  # tag thresholds
        rows.append(_metric_row(key, num(outcome.value), "", outcome, {}))
    latency = changes.get("latency_p95")
    if latency is not None:
        rows.append(
            [
                [("code", "latency_p95")],
                plain(ms(latency.current)),
                [],
                plain(f"≤ +{latency.allowed:.1f} ms" if math.isfinite(latency.allowed) else ""),
                plain(ms(latency.baseline)),
                plain(delta(latency.delta, 1)),
                [],
                _change_marks(latency),
            ]
        )
    return rows


def _metric_row(
    name: str,
    shown: str,
    interval: str,
    outcome: GateOutcome | None,
    changes: dict[str, MetricChange],
) -> list[Cell]:
    marks: Cell = []
    threshold = ""
    if outcome is not None:
        threshold = f"≥ {outcome.threshold.minimum:g}"
        marks.append(("pass", "pass") if outcome.passed else ("fail", "below threshold"))
    change = changes.get(name)
    baseline = shift = p = ""
    if change is not None and not math.isnan(change.baseline):
        baseline, shift = num(change.baseline), delta(change.delta, 4)
        p = p_value(change.p_adjusted if change.gated else change.p_value)
    if change is not None:
        marks += _change_marks(change)
    return [
        [("code", name)],
        plain(shown),
        plain(interval),
        plain(threshold),
        plain(baseline),
        plain(shift),
        plain(p),
        marks,
    ]


def _change_marks(change: MetricChange) -> Cell:
    status = {
        ChangeStatus.REGRESSED: "fail",
        ChangeStatus.WORSE: "fail",
        ChangeStatus.WITHIN_NOISE: "warn",
        ChangeStatus.JUDGE_CHANGED: "warn",
        ChangeStatus.IMPROVED: "pass",
        ChangeStatus.BETTER: "pass",
    }.get(change.verdict, "")
    if change.verdict is ChangeStatus.OK:
        return []
    return [(status, change.verdict + ("" if change.gated else " (not gated)"))]


def tag_rows(result: EvaluationResult, limit: int | None = None) -> list[list[Cell]]:
    """Per-tag metrics (the first ``limit`` metrics); first row is the header."""
    names = list(result.metrics)[:limit]
    rows = [[plain("tag"), plain("queries"), *[[("code", n)] for n in names]]]
    for tag, values in result.per_tag.items():
        rows.append(
            [
                plain(tag),
                plain(str(result.tag_counts[tag])),
                *[plain(num(values.get(n, math.nan))) for n in names],
            ]
        )
    return rows


def ab_rows(group: ABGroup) -> list[list[Cell]]:
    """The A/B table: a metric per row, the reference's value, then each other retriever's
    value, Δ and paired two-sided p against it (Δ marked when significantly worse/better)."""
    reference = group.reference
    header = [plain("metric"), plain(f"{reference.retriever_id} (reference)")]
    for other, _ in group.others:
        header += [plain(other.retriever_id), plain("Δ"), plain("p")]
    rows = [header]
    for name, value in reference.metrics.items():
        row: list[Cell] = [[("code", name)], plain(num(value))]
        for other, comparison in group.others:
            change = next((c for c in comparison.changes if c.metric == name), None)
            theirs = other.metrics.get(name, math.nan)
            status = (
                ""
                if change is None
                else {ChangeStatus.WORSE: "fail", ChangeStatus.BETTER: "pass"}.get(
                    change.verdict, ""
                )
            )
            shift = delta(theirs - value, 4)
            row += [
                plain(num(theirs)),
                [(status, shift)] if shift else [],
                plain(p_value(None if change is None else change.p_adjusted or change.p_value)),
            ]
        rows.append(row)
    return rows


def overall(results: Sequence[EvaluationResult], verdict: Verdict) -> Mark:
    """The session's verdict, as rendered: how many evaluations failed, and why else."""
    failed = sum(1 for r in results if not r.verdict.passed)
    if not verdict.passed:
        if failed:
            return "fail", f"{failed} of {len(results)} failed"
        count = len(verdict.reasons)
        return "fail", f"failed ({count} reason{'s' if count != 1 else ''})"
    if not results:
        return "warn", "no evaluations ran"
    return "pass", "all passed"


# ---------------------------------------------------------------------------- notes


def notes(result: EvaluationResult) -> list[Note]:
    """What the table does not show: latency, failures, the judge's bill, sampling, and how
    the run stands against its baseline (missing, drifted, stale, improved, underpowered)."""
    found = []
    if math.isfinite(result.latency_p50_ms) and not result.run_file:  # NaN: no call answered
        found.append(
            Note(
                "",
                f"latency p50 {result.latency_p50_ms:.1f} ms · p95 {result.latency_p95_ms:.1f} ms",
            )
        )
    if result.ci_method != "bootstrap":
        found.append(Note("", f"confidence intervals by {result.ci_method} approximation"))
    if result.errors:
        first = result.errors[0]
        found.append(
            Note(
                "fail",
                f"{result.failed_calls} (they score 0); first: {first.id}: {first.error}",
            )
        )
    if result.duplicates:
        found.append(
            Note(
                "", f"{result.duplicates} repeated doc ids dropped (each counts at its first rank)"
            )
        )
    if result.open_queries:
        labelled = len(result.queries) - result.open_queries
        found.append(
            Note(
                "",
                f"{labelled} labelled and {result.open_queries} open queries (open ones count "
                "for the judge and downstream metrics only)",
            )
        )
    found += [Note("", line) for line in judge_bill(result)]
    if result.erag:
        found.append(
            Note(
                "",
                f"downstream labels ({result.erag.get('version', '')}): "
                f"{result.erag.get('calls', 0)} calls, {result.erag.get('cache_hits', 0)} cached",
            )
        )
    found += [Note("fail", reason.message) for reason in label_problems(result.verdict)]
    found += [Note("warn", w.message) for w in result.verdict.notes]
    if result.sampled_from is not None:
        found.append(
            Note(
                "warn",
                f"a sample of {len(result.queries)} of {result.sampled_from} queries "
                "(--retrieval-sample): a quick check, not the full gate; baselines are never "
                "updated from it",
            )
        )
    return found + _baseline_notes(result)


def _baseline_notes(result: EvaluationResult) -> list[Note]:
    path = result.baseline_path or ""
    found: list[Note] = []
    if result.baseline_note == "missing":
        found.append(
            Note(
                "",
                f"no baseline for {result.golden_name}::{result.retriever_id} in {path}; "
                "record one on main with",
                command(result, "--retrieval-update-baseline"),
            )
        )
    elif result.baseline_note == "recording":
        # not "recording": the update may yet be refused (the session's notes say which)
        found.append(
            Note("", f"not compared with a baseline: this run is to be recorded in {path}")
        )
    if result.comparison is not None:
        found += _comparison_notes(result, result.comparison)
    found += [Note("warn", line) for line in power_lines(result)]
    found += [Note("fail", f"{r.kind}: {r.message}") for r in result.verdict.reasons]
    return found


def _comparison_notes(result: EvaluationResult, comparison: Comparison) -> list[Note]:
    refresh = command(result, "--retrieval-update-baseline")
    found = [Note("", f"compared with {comparison.reference} (recorded {recorded(comparison)})")]
    if comparison.drifted:
        kinds = [
            f"{label} {len(ids)} ({', '.join(ids[:IDS_SHOWN])}"
            + (f", +{len(ids) - IDS_SHOWN} more" if len(ids) > IDS_SHOWN else "")
            + ")"
            for label, ids in (
                ("added", comparison.added),
                ("removed", comparison.removed),
                ("re-judged", comparison.rejudged),
            )
            if ids
        ]
        found.append(
            Note(
                "warn",
                f"golden set changed since the baseline: {'; '.join(kinds)}; compared on the "
                f"{comparison.n_common} unchanged queries",
            )
        )
    if comparison.judge_changed:
        what = ", ".join(f"{k} {a} → {b}" for k, (a, b) in comparison.judge_changed.items())
        found.append(
            Note(
                "warn",
                f"the judge changed since the baseline ({what}): its metrics are not compared; "
                "re-record with",
                command(result, f"{judge_options(result)} --retrieval-update-baseline"),
            )
        )
    if comparison.stale:
        found.append(
            Note(
                "warn",
                f"stale baseline: {comparison.stale}; not compared. Refresh it with",
                refresh,
            )
        )
    unjudged = unjudged_note(result, comparison)
    if unjudged is not None:
        found.append(unjudged)
    if comparison.improved:
        names = ", ".join(f"{c.metric} {c.delta:+.4f}" for c in comparison.improved)
        found.append(
            Note(
                "pass",
                f"improved significantly beyond the allowance ({names}): ratchet the baseline "
                "up with",
                refresh,
            )
        )
    return found
