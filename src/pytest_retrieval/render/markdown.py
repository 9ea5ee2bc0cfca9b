"""GitHub-flavoured Markdown summary: for a PR comment or ``$GITHUB_STEP_SUMMARY``.

The facts of the terminal summary as tables a reviewer reads without opening the CI log: one
table per evaluation (value, CI, threshold, baseline, Δ, p, verdict), notes on drift,
staleness, power and the judge, the worst queries folded in ``<details>``, and the A/B table
when several retrievers ran. The rows and notes come from :mod:`.rows`, shared with the HTML
page; this module only decides how they look in Markdown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .rows import Cell, ab_rows, metric_rows, notes, overall, plain, tag_rows, worst_queries
from .text import num, short, title

if TYPE_CHECKING:
    from ..compare import ABGroup
    from ..results import EvaluationResult, QueryResult
    from ..verdicts import Verdict

EMOJI = {"pass": "✅", "fail": "❌", "warn": "⚠️"}
WORST_SHOWN = 10  # queries that got worse, listed (the JSON report has all)

#: Markdown punctuation that could start emphasis, code, links, images, math or a cell
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]~!#|$])")


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
    if verdict.reasons:  # why, first: every reason of the session, by kind
        lines += [
            f"- {EMOJI['fail']} {escape(r.kind)}: {escape(r.message)}" for r in verdict.reasons
        ]
        lines.append("")
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
                f"{m.doc} → {'#' + str(m.after) if m.after else 'gone'}" for m in change.lost
            )
            rows.append(
                [
                    plain(change.id),
                    plain(short(change.query, 80)),
                    plain(f"{num(change.before)} → {num(change.after)}"),
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
        plain(short(query.query, 80)),
        plain(num(query.metrics.get(metric, math.nan))),
        plain(missed),
        [("fail", f"error: {query.error}")] if query.error else plain(found),
    ]


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
