"""``pytest-retrieval show``'s text: a report's chosen queries with their ranked hits,
relevance marks and golden grades, the judge's verdicts and, against a baseline, where each
hit ranked there; and a baseline file's entries."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..baseline import BaselineEntry
    from ..results import Comparison, EvaluationResult, QueryChange, QueryResult


def evaluation_lines(
    result: EvaluationResult,
    *,
    query_ids: Sequence[str] | None = None,
    worst: int | None = None,
    tag: str | None = None,
    metric: str | None = None,
    depth: int | None = None,
) -> list[str]:
    """One evaluation's chosen queries (by id, the ``worst`` N, those with ``tag``), each
    with its hits to ``depth`` (default: the report's k), worst first by ``metric``."""
    from .text import title

    ranked_by = _ranking_metric(result, metric)
    comparison = result.comparison
    shift = comparison.shifts.get(ranked_by) if comparison is not None else None
    lines = [title(result) + (f" · vs {comparison.reference}" if comparison else "")]
    queries = [q for q in result.queries if tag is None or tag in q.tags]
    if query_ids:
        by_id = {q.id: q for q in result.queries}
        queries = [by_id[i] for i in query_ids if i in by_id]
    elif shift is not None:
        change = {c.id: c.delta for c in shift.queries}
        queries.sort(key=lambda q: (change.get(q.id, 0.0), _value(q, ranked_by), q.id))
        if worst:
            dropped = [q for q in queries if change.get(q.id, 0.0) < 0]
            queries = dropped[:worst]
            lines.append(f"  the largest drops on {ranked_by}: {_drops(len(dropped), worst)}")
        else:
            lines.append(f"  worst first: the largest drop on {ranked_by} first")
    else:
        queries.sort(key=lambda q: (_value(q, ranked_by), q.id))
        queries = queries[:worst] if worst else queries
        if worst or tag:
            lines.append(f"  worst first by {ranked_by}")
    if not queries:
        lines.append("  (none here)")
    for query in queries:
        lines.extend(query_lines(result, query, depth or result.k))
    return lines


def _drops(dropped: int, asked: int) -> str:
    """How the queries shown stand to all that dropped: "1 of the 2 queries that dropped",
    "the 1 query that dropped (of 3 asked for)"."""
    if not dropped:
        return "none dropped"
    them = f"quer{'y' if dropped == 1 else 'ies'} that dropped"
    if asked < dropped:
        return f"{asked} of the {dropped} {them}"
    return f"the {dropped} {them}" + (f" (of {asked} asked for)" if dropped < asked else "")


def _ranking_metric(result: EvaluationResult, wanted: str | None) -> str:
    """What "worst" means: ``--metric``, else the first metric that regressed, else the first
    gated one on which a query got worse, else the first with shifts, else the first gated,
    else the first computed."""
    from ..metrics import parse_metric

    if wanted is not None:
        return wanted
    comparison = result.comparison
    if comparison is not None and comparison.shifts:
        regressed = [c.metric for c in comparison.regressed if c.metric in comparison.shifts]
        worse = [name for name, shift in comparison.shifts.items() if shift.worse]
        return next(iter([*regressed, *worse, *comparison.shifts]))
    gated = [m for m in result.gated if m in result.metrics]
    ordered = sorted(result.metrics, key=lambda m: parse_metric(m).sort_key)
    return gated[0] if gated else ordered[0]


def _value(query: QueryResult, metric: str) -> float:
    """The query's value of ``metric``; a query without one (open, NaN) sorts last."""
    value = query.metrics.get(metric, math.nan)
    return math.inf if math.isnan(value) else value


def query_lines(result: EvaluationResult, query: QueryResult, depth: int) -> list[str]:
    """id, text, tags, metrics (before → after where it changed), the ranked hits as a
    table, where the relevant documents went, and the relevant ones never retrieved."""
    from ..metrics import parse_metric
    from .rows import depth_note, move_lines
    from .text import delta, num, text_table

    comparison = result.comparison
    changes: dict[str, QueryChange] = {}
    known = 0
    if comparison is not None:
        for name, shift in comparison.shifts.items():
            for change in shift.queries:
                if change.id == query.id:
                    changes[name] = change
                    known = shift.depth
    lines = ["", f"{query.id}: {query.query}", f"  tags: {', '.join(query.tags) or 'none'}"]
    if query.error is not None:
        lines.append(f"  error: {query.error}")
    rows = [["metric", "value"] + (["before", "Δ"] if changes else [])]
    for name in sorted(query.metrics, key=lambda m: parse_metric(m).sort_key):
        row = [name, num(query.metrics[name])]
        if changes:
            moved = changes.get(name)
            row += [num(moved.before), delta(moved.delta, 4)] if moved else ["", ""]
        rows.append(row)
    lines.extend(text_table(rows))
    reference = next((c.reference_ranked for c in changes.values() if c.reference_ranked), ())
    column = (
        "baseline" if comparison and comparison.reference.startswith("baseline") else "reference"
    )
    lines.extend(text_table(hit_rows(result, query, depth, (column, reference), known)))
    if comparison is not None and not changes:
        lines.append(unchanged_note(comparison, query.id))
    seen_k: set[int] = set()
    for name, change in changes.items():
        if parse_metric(name).k not in seen_k:  # mrr@10 and ndcg@10 moved the same docs
            seen_k.add(parse_metric(name).k)
            lines.extend(f"  {line}" for line in move_lines(change, known))
            if comparison is not None and (note := depth_note(comparison.shifts[name])):
                lines.append(f"  ({note})")
    deeper = [f"{d} #{r}" for d, r in query.found_ranks.items() if r > depth]
    if deeper:
        lines.append(f"  relevant below rank {depth}: {', '.join(deeper)}")
    if query.missed:
        missed = [
            d if query.relevant[d] == 1 else f"{d} (grade {query.relevant[d]})"
            for d in query.missed
        ]
        where = f"not in the {len(query.returned)} hits retrieved"
        lines.append(f"  relevant, {where}: {', '.join(missed)}")
    return lines


def hit_rows(
    result: EvaluationResult,
    query: QueryResult,
    depth: int,
    ranked: tuple[str, Sequence[str]],
    known: int,
) -> list[list[str]]:
    """rank | doc | score | relevant | judge | baseline | text: the columns this report has
    data for (``ranked``: the reference column's name and the reference's ranking, maybe
    empty)."""
    from .rows import rank_text
    from .text import short

    column, reference = ranked
    judged = result.judge is not None or bool(query.judgments)
    graded = any(grade > 1 for grade in query.relevant.values())
    was = {doc: rank for rank, doc in enumerate(reference, 1)}
    head = ["rank", "doc"] + (["score"] if query.scores else []) + ["relevant"]
    head += (["judge"] if judged else []) + ([column] if reference else [])
    head += ["text"] if query.texts else []
    rows = [head]
    for rank, doc in enumerate(query.returned[:depth], 1):
        grade = query.relevant.get(doc)
        mark = "" if grade is None else "no (0)" if grade == 0 else "yes"
        if graded and grade:
            mark += f" ({grade})"
        row = [str(rank), doc]
        if query.scores:
            score = query.scores.get(doc)
            row.append("" if score is None else f"{score:.4g}")
        row.append(mark)
        if judged:
            row.append(judge_text(query.judgments.get(doc)))
        if reference:
            row.append(rank_text(was.get(doc), known=known or len(reference)))
        if query.texts:
            row.append(short(query.texts.get(doc, ""), 50))
        rows.append(row)
    if len(rows) == 1:
        rows.append(["", "(no hits)"] + [""] * (len(head) - 2))
    return rows


def judge_text(verdict: dict[str, Any] | None) -> str:
    """``yes: mentions the recipe`` / ``grade 2: ...`` / ``ungraded: timeout``."""
    from ..results import is_graded
    from .text import short

    if not verdict:
        return ""
    if not is_graded(verdict):
        return f"ungraded: {short(str(verdict.get('error') or 'no decision'), 40)}"
    grade = verdict.get("grade")
    label = f"grade {grade}" if type(grade) is int else ("yes" if verdict["on_topic"] else "no")
    reason = verdict.get("reason")
    return f"{label}: {short(' '.join(str(reason).split()), 60)}" if reason else label


def unchanged_note(comparison: Comparison, query_id: str) -> str:
    """Why a query of a compared run has no baseline ranks beside its hits."""
    if query_id in comparison.added:
        return f"  new since the {comparison.reference}: no ranks to compare"
    if query_id in comparison.rejudged:
        return f"  re-judged since the {comparison.reference}: not compared"
    if comparison.stale or not comparison.shifts:
        return f"  not compared query by query against the {comparison.reference}"
    return f"  unchanged on {', '.join(comparison.shifts)} against the {comparison.reference}"


def baseline_lines(path: Path, entries: Mapping[str, BaselineEntry]) -> list[str]:
    """A baseline file's entries: golden set, k, queries, when and from which commit it was
    recorded, its judge, and each metric with its CI."""
    from ..metrics import parse_metric
    from .text import ci, num, text_table

    lines = [f"{path}: {len(entries)} entries"]
    for key, entry in entries.items():
        commit = str(entry.git.get("commit", ""))[:12]
        dirty = " (dirty)" if entry.git.get("dirty") else ""
        lines.append(
            f"{key}: golden {entry.golden_name} (fingerprint {entry.golden_fingerprint}), "
            f"k={entry.k}, {len(entry.queries)} queries, recorded {entry.created or '?'}"
            + (f", commit {commit}{dirty}" if commit else "")
            + f", plugin {entry.plugin_version}"
        )
        if entry.judge:
            lines.append(f"  judge: {entry.judge}")
        rows = [["metric", "value", "95% CI"]]
        ordered = sorted(entry.metrics, key=lambda m: parse_metric(m).sort_key)
        rows += [[m, num(entry.metrics[m]), ci(entry.ci.get(m))] for m in ordered]
        lines.extend(text_table(rows))
        if entry.latency_p95_ms is not None:
            lines.append(f"  latency p50 {entry.latency_p50_ms} ms, p95 {entry.latency_p95_ms} ms")
    return lines
