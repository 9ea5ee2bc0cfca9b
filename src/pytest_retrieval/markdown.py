"""GitHub-flavoured Markdown summary: for a PR comment or ``$GITHUB_STEP_SUMMARY``.

Renders the facts of the terminal summary (``report.py``) as tables a reviewer reads without
opening the CI log: one table per evaluation (value, CI, threshold, baseline, Δ, p, verdict),
notes on drift, staleness, power and the judge, the worst queries folded in ``<details>``, and
the A/B table when several retrievers ran.

The tables and notes are built here once as plain text (:func:`metric_rows`, :func:`notes`,
:func:`ab_rows`, :func:`tag_rows`); ``html_report`` renders the same rows, so both outputs
always say the same thing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .compare import ABGroup
from .report import (
    _ci,
    _command,
    _delta,
    _num,
    _p,
    judge_lines,
    label_problems,
    power_lines,
    title,
    worst_queries,
)
from .results import Comparison, EvaluationResult, GateOutcome, MetricChange, QueryResult
from .verdicts import Verdict

#: a status tag for a cell part or a note: "" plain, "code", "pass", "fail", "warn"
Status = str
#: one piece of a table cell or a note: (status, plain text)
Mark = tuple[Status, str]
#: a table cell: its pieces, shown joined by " · "
Cell = list[Mark]

EMOJI = {"pass": "✅", "fail": "❌", "warn": "⚠️"}
IDS_SHOWN = 8  # drifted query ids listed per kind before "+N more"
WORST_SHOWN = 10  # queries that got worse, listed (the JSON report has all)

#: Markdown punctuation that could start emphasis, code, links, images, math or a cell
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]~!#|$])")


# ---------------------------------------------------------------------------- format-neutral


def plain(text: str) -> Cell:
    return [("", text)] if text else []


@dataclass
class Note:
    """One line under an evaluation's table; ``code`` (a command or path) is shown as code."""

    status: Status
    text: str
    code: str = ""


def metric_rows(result: EvaluationResult) -> list[list[Cell]]:
    """The evaluation's table: every metric, then each tag threshold, then latency against
    the baseline; first row is the header. The last cell is the verdict."""
    gates = {o.threshold.key: o for o in result.verdict.outcomes}
    changes: dict[str, MetricChange] = {}
    if result.comparison is not None and not result.comparison.stale:
        changes = {c.metric: c for c in result.comparison.changes}
    header = ["metric", "value", "95% CI", "threshold", "baseline", "Δ", "p", "verdict"]
    rows = [[plain(name) for name in header]]
    for name, value in result.metrics.items():
        outcome = gates.pop(name, None)
        rows.append(_metric_row(name, _num(value), _ci(result.ci.get(name)), outcome, changes))
    for key, outcome in gates.items():  # tag thresholds
        rows.append(_metric_row(key, _num(outcome.value), "", outcome, {}))
    latency = changes.get("latency_p95")
    if latency is not None:
        rows.append(
            [
                [("code", "latency_p95")],
                plain(f"{latency.current:.1f} ms"),
                [],
                plain(f"≤ +{latency.allowed:.1f} ms" if math.isfinite(latency.allowed) else ""),
                plain(f"{latency.baseline:.1f} ms"),
                plain(_delta(latency.delta, 1)),
                [],
                _change_marks(latency),
            ]
        )
    return rows


def _metric_row(
    name: str,
    value: str,
    ci: str,
    outcome: GateOutcome | None,
    changes: dict[str, MetricChange],
) -> list[Cell]:
    marks: Cell = []
    threshold = ""
    if outcome is not None:
        threshold = f"≥ {outcome.threshold.minimum:g}"
        marks.append(("pass", "pass") if outcome.passed else ("fail", "below threshold"))
    change = changes.get(name)
    baseline = delta = p = ""
    if change is not None and not math.isnan(change.baseline):
        baseline, delta = _num(change.baseline), _delta(change.delta, 4)
        p = _p(change.p_adjusted if change.gated else change.p_value)
    if change is not None:
        marks += _change_marks(change)
    return [
        [("code", name)],
        plain(value),
        plain(ci),
        plain(threshold),
        plain(baseline),
        plain(delta),
        plain(p),
        marks,
    ]


def _change_marks(change: MetricChange) -> Cell:
    status = {
        "regressed": "fail",
        "worse": "fail",
        "within noise": "warn",
        "judge changed": "warn",
        "improved": "pass",
        "better": "pass",
    }.get(change.verdict, "")
    if change.verdict == "ok":
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
                *[plain(_num(values.get(n, math.nan))) for n in names],
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
        row: list[Cell] = [[("code", name)], plain(_num(value))]
        for other, comparison in group.others:
            change = next((c for c in comparison.changes if c.metric == name), None)
            theirs = other.metrics.get(name, math.nan)
            status = (
                ""
                if change is None
                else {"worse": "fail", "better": "pass"}.get(change.verdict, "")
            )
            delta = _delta(theirs - value, 4)
            row += [
                plain(_num(theirs)),
                [(status, delta)] if delta else [],
                plain(_p(None if change is None else change.p_adjusted or change.p_value)),
            ]
        rows.append(row)
    return rows


def overall(results: Sequence[EvaluationResult], verdict: Verdict) -> Mark:
    """The session's verdict, as rendered: how many evaluations failed, and why else."""
    if not results:
        return "warn", "no evaluations ran"
    failed = sum(1 for r in results if not r.verdict.passed)
    if verdict.passed:
        return "pass", "all passed"
    if failed:
        return "fail", f"{failed} of {len(results)} failed"
    return "fail", f"failed: {verdict.reasons[0].message}"


def notes(result: EvaluationResult) -> list[Note]:
    """What the table does not show: latency, failures, the judge's bill, sampling, and how
    the run stands against its baseline (missing, drifted, stale, improved, underpowered)."""
    found = []
    if math.isfinite(result.latency_p50_ms):  # NaN when every call failed
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
                f"{len(result.errors)} of {len(result.queries)} retriever calls failed "
                f"(they score 0); first: {first.id}: {first.error}",
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
    found += [Note("", line.strip()) for line in judge_lines(result)]
    if result.erag:
        found.append(
            Note(
                "",
                f"downstream labels ({result.erag.get('version', '')}): "
                f"{result.erag.get('calls', 0)} calls, {result.erag.get('cache_hits', 0)} cached",
            )
        )
    found += [Note("fail", reason.message) for reason in label_problems(result.verdict)]
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
                _command(result, "--retrieval-update-baseline"),
            )
        )
    elif result.baseline_note == "recording":
        found.append(Note("", f"recording the baseline in {path}"))
    if result.comparison is not None:
        found += _comparison_notes(result, result.comparison)
    found += [Note("warn", line) for line in power_lines(result)]
    found += [Note("fail", f"{r.kind}: {r.message}") for r in result.verdict.reasons]
    return found


def _comparison_notes(result: EvaluationResult, comparison: Comparison) -> list[Note]:
    refresh = _command(result, "--retrieval-update-baseline")
    recorded = comparison.baseline_created or "unknown time"
    if comparison.baseline_commit:
        recorded += f", commit {comparison.baseline_commit}"
    found = [Note("", f"compared with {comparison.reference} (recorded {recorded})")]
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
                _command(result, "--retrieval-judge --retrieval-update-baseline"),
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


# ---------------------------------------------------------------------------- Markdown


def escape(text: object) -> str:
    """User text for a table cell or a line: HTML is inert, Markdown punctuation is literal
    (no emphasis, links or images), pipes cannot split a cell, line breaks become spaces."""
    flat = " ".join(str(text).splitlines())
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", flat)


def code(text: object) -> str:
    """``text`` as an inline code span: a fence longer than any backtick run inside it."""
    flat = " ".join(str(text).splitlines()).replace("|", "\\|")
    if not flat.strip():
        return escape(flat)
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def cell(marks: Cell) -> str:
    """A cell's pieces as Markdown: escaped, code in backticks, statuses as ✅/❌/⚠️."""
    parts = []
    for status, text in marks:
        shown = code(text) if status == "code" else escape(text)
        parts.append(f"{EMOJI[status]} {shown}" if status in EMOJI else shown)
    return " · ".join(parts)


def table(rows: Sequence[Sequence[Cell]]) -> list[str]:
    """A GFM table; the first row is the header."""
    header, *body = [[cell(c) for c in row] for row in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return lines


def details(summary: str, body: Sequence[str]) -> list[str]:
    """A folded block; the blank line after ``<summary>`` lets the Markdown inside render."""
    return [f"<details><summary>{escape(summary)}</summary>", "", *body, "", "</details>", ""]


def render_markdown(
    results: Sequence[EvaluationResult], groups: Sequence[ABGroup], verdict: Verdict
) -> str:
    """The whole summary: a heading with the session's verdict, one section per evaluation,
    then the A/B tables."""
    status, word = overall(results, verdict)
    lines = [f"## Retrieval evaluation: {EMOJI[status]} {escape(word)}", ""]
    for result in results:
        lines += _evaluation(result)
    for group in groups:
        lines += _ab(group)
    return "\n".join(lines).rstrip() + "\n"


def _evaluation(result: EvaluationResult) -> list[str]:
    lines = [f"### {'✅' if result.verdict.passed else '❌'} {escape(title(result))}", ""]
    lines += table(metric_rows(result))
    lines.append("")
    for note in notes(result):
        mark = f"{EMOJI[note.status]} " if note.status in EMOJI else ""
        lines.append(f"- {mark}{escape(note.text)}" + (f": {code(note.code)}" if note.code else ""))
    lines.append("")
    if result.per_tag:
        lines += details("By tag", table(tag_rows(result, limit=4)))
    lines += _worst(result)
    return lines


def _worst(result: EvaluationResult) -> list[str]:
    """The regression's worst queries, else the worst queries of the first failing gate
    (or of the first metric), folded away."""
    comparison = result.comparison
    if comparison is not None and comparison.worse:
        metric, worse = next(iter(comparison.worse.items()))
        rows = [[plain(h) for h in ("query", "text", metric, "relevant lost → new rank")]]
        for change in worse[:WORST_SHOWN]:
            lost = ", ".join(
                f"{doc} → {'#' + str(rank) if rank else 'gone'}"
                for doc, rank in change.lost.items()
            )
            rows.append(
                [
                    plain(change.id),
                    plain(_short(change.query)),
                    plain(f"{_num(change.before)} → {_num(change.after)}"),
                    plain(lost),
                ]
            )
        return details(
            f"{len(worse)} queries got worse on {metric} (the largest drops)", table(rows)
        )
    failing = [o for o in result.verdict.outcomes if not o.passed]
    metric = failing[0].threshold.metric.name if failing else next(iter(result.metrics), "")
    if not metric:
        return []
    tag = failing[0].threshold.tag if failing else None
    header = ("query", "text", metric, "missed relevant", "relevant found at")
    rows = [[plain(h) for h in header]]
    rows += [_query_row(query, metric) for query in worst_queries(result, metric, tag)]
    return details(f"Worst queries by {metric}", table(rows))


def _query_row(query: QueryResult, metric: str) -> list[Cell]:
    missed = ", ".join(query.missed[:5])
    if len(query.missed) > 5:
        missed += f" (+{len(query.missed) - 5})"
    found = ", ".join(f"{doc} #{rank}" for doc, rank in query.found_ranks.items())
    return [
        plain(query.id),
        plain(_short(query.query)),
        plain(_num(query.metrics.get(metric, math.nan))),
        plain(missed),
        [("fail", f"error: {query.error}")] if query.error else plain(found),
    ]


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ab(group: ABGroup) -> list[str]:
    reference = group.reference
    return [
        f"### {escape(reference.golden_name)}: {len(group.others) + 1} retrievers side by side",
        "",
        "Δ and paired two-sided p-values (Holm-adjusted) against "
        f"{escape(reference.retriever_id)}; ✅/❌: better/worse beyond the allowed change with "
        "Holm-adjusted p < alpha over the gated metrics (the others show raw p).",
        "",
        *table(ab_rows(group)),
        "",
    ]
