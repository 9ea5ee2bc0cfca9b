"""GitHub-flavoured Markdown summary: for a PR comment or ``$GITHUB_STEP_SUMMARY``.

Renders the same facts as the terminal summary (``report.py``), built from the same
helpers, as tables a reviewer reads without opening the CI log: one table per evaluation
(value, CI, threshold, baseline, Δ, p, verdict), the worst queries folded in ``<details>``,
and the A/B table when several retrievers ran.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .compare import ABGroup, MetricChange
from .evaluation import EvaluationResult, QueryResult
from .report import _ci, _delta, _num, _p, judge_lines, title, worst_queries

PASS, FAIL, NOTE = "✅", "❌", "⚠️"


def escape(text: object) -> str:
    """User text inside a table cell or a line: no pipes, tags or line breaks get through."""
    return (
        str(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("|", "\\|")
        .replace("\r", " ")
        .replace("\n", " ")
        .replace("`", "\\`")
    )


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """A GFM table; the first row is the header."""
    header, *body = rows
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return lines


def render_markdown(results: Sequence[EvaluationResult], groups: Sequence[ABGroup] = ()) -> str:
    """The whole summary: a heading, one section per evaluation, then the A/B tables."""
    failed = sum(1 for r in results if not r.passed or r.regressed)
    verdict = f"{FAIL} {failed} of {len(results)} failed" if failed else f"{PASS} all passed"
    lines = [f"## Retrieval evaluation: {verdict}", ""]
    for result in results:
        lines += _evaluation(result)
    for group in groups:
        lines += _ab(group)
    return "\n".join(lines).rstrip() + "\n"


def _evaluation(result: EvaluationResult) -> list[str]:
    ok = result.passed and not result.regressed
    lines = [f"### {PASS if ok else FAIL} {escape(title(result))}", ""]
    gates = {o.threshold.key: o for o in result.gate()}
    comparison = result.comparison
    changes: dict[str, MetricChange] = {}
    if comparison is not None and not comparison.stale:
        changes = {c.metric: c for c in comparison.changes}
    rows = [["metric", "value", "95% CI", "threshold", "baseline", "Δ", "p", "verdict"]]
    for name, value in result.metrics.items():
        rows.append(_row(name, value, _ci(result.ci.get(name)), gates.pop(name, None), changes))
    for key, outcome in gates.items():  # tag thresholds
        rows.append(_row(key, outcome.value, "", outcome, {}))
    if "latency_p95" in changes:
        change = changes["latency_p95"]
        rows.append(
            [
                "latency_p95",
                f"{change.current:.1f} ms",
                "",
                "",
                f"{change.baseline:.1f} ms",
                _delta(change.delta, 1),
                "",
                _verdict(None, change),
            ]
        )
    lines += table(rows)
    lines.append("")
    facts = [
        f"latency p50 {result.latency_p50_ms:.1f} ms · p95 {result.latency_p95_ms:.1f} ms",
    ]
    if result.errors:
        facts.append(f"{FAIL} {len(result.errors)} retriever calls failed (scored 0)")
    if result.judge_problem:
        facts.append(f"{FAIL} {escape(result.judge_problem)}")
    facts += [escape(line.strip()) for line in judge_lines(result)[:1]]
    if result.sampled_from is not None:
        facts.append(f"{NOTE} a sample of {len(result.queries)} of {result.sampled_from} queries")
    facts += _baseline_facts(result)
    lines += [f"- {fact}" for fact in facts]
    lines.append("")
    if result.per_tag:
        lines += _tags(result)
    lines += _worst(result)
    return lines


def _row(
    name: str,
    value: float,
    ci: str,
    outcome: object,
    changes: dict[str, MetricChange],
) -> list[str]:
    from .gate import GateOutcome

    threshold = ""
    if isinstance(outcome, GateOutcome):
        threshold = f"≥ {outcome.threshold.minimum:g}"
    else:
        outcome = None
    change = changes.get(name)
    baseline = delta = p = ""
    if change is not None and not math.isnan(change.baseline):
        baseline, delta, p = _num(change.baseline), _delta(change.delta, 4), _p(change.p_adjusted)
    return [
        f"`{name}`",
        _num(value),
        ci,
        threshold,
        baseline,
        delta,
        p,
        _verdict(outcome if isinstance(outcome, GateOutcome) else None, change),
    ]


def _verdict(outcome: object, change: MetricChange | None) -> str:
    from .gate import GateOutcome

    marks = []
    if isinstance(outcome, GateOutcome):
        marks.append(f"{PASS} pass" if outcome.passed else f"{FAIL} below threshold")
    if change is not None:
        marks.append(
            {
                "regressed": f"{FAIL} regressed",
                "within noise": f"{NOTE} within noise",
                "improved": f"{PASS} improved",
            }.get(change.verdict, change.verdict if change.verdict != "ok" else "")
        )
    return " · ".join(mark for mark in marks if mark)


def _baseline_facts(result: EvaluationResult) -> list[str]:
    comparison = result.comparison
    if result.baseline_note == "missing":
        return [
            f"no baseline yet: record one on main with `--retrieval-update-baseline` "
            f"(into `{escape(result.baseline_path)}`)"
        ]
    if result.baseline_note == "recording":
        return [f"recording the baseline in `{escape(result.baseline_path)}`"]
    if comparison is None:
        return []
    recorded = escape(comparison.baseline_created or "unknown time")
    if comparison.baseline_commit:
        recorded += f", commit `{escape(comparison.baseline_commit)}`"
    facts = [f"compared with the baseline recorded {recorded}"]
    if comparison.drifted:
        facts.append(
            f"{NOTE} golden set changed since: {len(comparison.added)} added, "
            f"{len(comparison.removed)} removed, {len(comparison.rejudged)} re-judged; "
            f"compared on the {comparison.n_common} unchanged queries"
        )
    if comparison.stale:
        facts.append(
            f"{NOTE} stale baseline ({escape(comparison.stale)}): not compared; refresh it "
            "with `--retrieval-update-baseline`"
        )
    if comparison.improved:
        facts.append(
            f"{PASS} improved beyond the allowance: ratchet the baseline up with "
            "`--retrieval-update-baseline`"
        )
    return facts


def _tags(result: EvaluationResult) -> list[str]:
    names = list(result.metrics)[:4]
    rows = [["tag", "queries", *[f"`{n}`" for n in names]]]
    for tag, values in result.per_tag.items():
        rows.append([escape(tag), str(result.tag_counts[tag]), *[_num(values[n]) for n in names]])
    return [
        "<details><summary>By tag</summary>",
        "",
        *table(rows),
        "",
        "</details>",
        "",
    ]


def _worst(result: EvaluationResult) -> list[str]:
    """The regression's worst queries, else the worst queries of the first failing gate
    (or of the first metric), folded away."""
    comparison = result.comparison
    if comparison is not None and comparison.worst:
        rows = [["query", "text", comparison.worst[0].metric, "relevant lost → new rank"]]
        for change in comparison.worst:
            lost = ", ".join(
                f"{escape(doc)} → {'#' + str(rank) if rank else 'gone'}"
                for doc, rank in change.lost.items()
            )
            rows.append(
                [
                    escape(change.id),
                    escape(_short(change.query)),
                    f"{_num(change.before)} → {_num(change.after)}",
                    lost,
                ]
            )
        summary = f"Queries that got worse on {comparison.worst[0].metric}"
    else:
        failing = [o for o in result.gate() if not o.passed]
        metric = failing[0].threshold.metric.name if failing else next(iter(result.metrics), "")
        tag = failing[0].threshold.tag if failing else None
        if not metric:
            return []
        rows = [["query", "text", metric, "missed relevant", "relevant found at"]]
        for query in worst_queries(result, metric, tag):
            rows.append(_query_row(query, metric))
        summary = f"Worst queries by {metric}"
    return [f"<details><summary>{summary}</summary>", "", *table(rows), "", "</details>", ""]


def _query_row(query: QueryResult, metric: str) -> list[str]:
    missed = ", ".join(escape(doc) for doc in query.missed[:5])
    if len(query.missed) > 5:
        missed += f" (+{len(query.missed) - 5})"
    found = ", ".join(f"{escape(doc)} #{rank}" for doc, rank in query.found_ranks.items())
    if query.error:
        found = f"error: {escape(query.error)}"
    return [
        escape(query.id),
        escape(_short(query.query)),
        _num(query.metrics.get(metric, math.nan)),
        missed,
        found,
    ]


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ab(group: ABGroup) -> list[str]:
    reference = group.reference
    header = ["metric", f"{escape(reference.retriever_id)} (reference)"]
    for other, _ in group.others:
        header += [escape(other.retriever_id), "Δ", "p"]
    rows = [header]
    for name, value in reference.metrics.items():
        row = [f"`{name}`", _num(value)]
        for other, comparison in group.others:
            change = next((c for c in comparison.changes if c.metric == name), None)
            theirs = other.metrics.get(name, math.nan)
            mark = ""
            if change is not None and change.verdict in {"worse", "better"}:
                mark = f" {FAIL}" if change.verdict == "worse" else f" {PASS}"
            row += [
                _num(theirs),
                _delta(theirs - value, 4) + mark,
                _p(change.p_adjusted if change else None),
            ]
        rows.append(row)
    return [
        f"### {escape(reference.golden_name)}: {len(group.others) + 1} retrievers side by side",
        "",
        "Δ and paired two-sided p-values against the reference.",
        "",
        *table(rows),
        "",
    ]
