"""A self-contained HTML report: tables, recall@k / nDCG@k curves, a per-query explorer.

One file, no network: styles, inline SVG plots and a few lines of vanilla JavaScript (search
and expand) are all inside. Every piece of user text is escaped. Curves are computed by the
same kernels as the gate, from the stored rankings, so the curve at k = 10 is recall@10.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import numpy as np

from . import metrics as kernels
from .baseline import BaselineEntry
from .compare import ABGroup
from .evaluation import EvaluationResult, QueryResult
from .report import _ci, _delta, _num, _p, title

MAX_CURVE_K = 100
MAX_QUERY_ROWS = 2000
COLOURS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777"]

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#1f2937}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #e5e7eb}
h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0}th,td{padding:4px 10px;text-align:left;
border-bottom:1px solid #e5e7eb;vertical-align:top}th{background:#f9fafb}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#047857;font-weight:600}.fail{color:#b91c1c;font-weight:600}
.muted{color:#6b7280}.charts{display:flex;flex-wrap:wrap;gap:24px}
svg text{font-size:11px;fill:#374151}
tr.q{cursor:pointer}tr.q:hover{background:#f3f4f6}tr.hits td{background:#fafafa}
tr.hits tr.rel td{background:#dcfce7}.off{color:#b91c1c}.on{color:#047857}
input.search{padding:6px 10px;width:360px;border:1px solid #d1d5db;border-radius:6px}
code{background:#f3f4f6;padding:0 4px;border-radius:3px}
"""

JS = """
document.querySelectorAll('input.search').forEach(function (box) {
  box.addEventListener('input', function () {
    var needle = box.value.toLowerCase();
    var table = document.getElementById(box.dataset.table);
    table.querySelectorAll('tr.q').forEach(function (row) {
      var show = row.dataset.text.indexOf(needle) >= 0;
      row.style.display = show ? '' : 'none';
      var hits = row.nextElementSibling;
      if (!show && hits) { hits.style.display = 'none'; }
    });
  });
});
document.querySelectorAll('tr.q').forEach(function (row) {
  row.addEventListener('click', function () {
    var hits = row.nextElementSibling;
    hits.style.display = hits.style.display === 'none' ? '' : 'none';
  });
});
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_html(
    results: Sequence[EvaluationResult],
    groups: Sequence[ABGroup] = (),
    baselines: Mapping[int, BaselineEntry] | None = None,
) -> str:
    """The whole page; ``baselines`` maps an index in ``results`` to its stored baseline."""
    failed = sum(1 for r in results if not r.passed or r.regressed)
    verdict = (
        f'<span class="fail">{failed} of {len(results)} failed</span>'
        if failed
        else '<span class="pass">all passed</span>'
    )
    body = [f"<h1>Retrieval evaluation: {verdict}</h1>"]
    for group in groups:
        body.append(_ab_section(group))
    for index, result in enumerate(results):
        body.append(_section(index, result, (baselines or {}).get(index)))
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<title>pytest-retrieval report</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + f"<script>{JS}</script></body></html>\n"
    )


# ---------------------------------------------------------------------------- curves


def curve(
    runs: Sequence[Sequence[str]], qrels: Sequence[Mapping[str, int]], family: str, depth: int
) -> list[float]:
    """Mean ``family@k`` for k = 1..depth over the labelled queries."""
    kept = [(run, qrel) for run, qrel in zip(runs, qrels, strict=True) if qrel]
    if not kept or depth < 1:
        return []
    names = [f"{family}@{k}" for k in range(1, depth + 1)]
    values = kernels.compute(names, [r for r, _ in kept], [q for _, q in kept])
    return [float(values[name].mean()) for name in names]


def _depth(result: EvaluationResult) -> int:
    longest = max((len(q.returned) for q in result.queries), default=0)
    return max(1, min(MAX_CURVE_K, longest))


def _current_curves(result: EvaluationResult, family: str) -> list[float]:
    return curve(
        [q.returned for q in result.queries],
        [q.relevant for q in result.queries],
        family,
        _depth(result),
    )


def _baseline_curves(result: EvaluationResult, entry: BaselineEntry, family: str) -> list[float]:
    """The baseline's rankings scored with today's judgments, on the queries both have."""
    common = [q for q in result.queries if q.id in entry.queries and q.relevant]
    if not common:
        return []
    depth = min(_depth(result), max(len(entry.queries[q.id].ranked) for q in common))
    return curve(
        [entry.queries[q.id].ranked for q in common], [q.relevant for q in common], family, depth
    )


def _line_chart(label: str, series: Sequence[tuple[str, Sequence[float]]]) -> str:
    """An SVG line chart of metric@k against k, one line per series, with axes and legend."""
    width, height, left, bottom, top, right = 420, 260, 44, 34, 24, 12
    plot_w, plot_h = width - left - right, height - top - bottom
    longest = max((len(values) for _, values in series), default=0)
    if longest == 0:
        return ""
    span = max(1, longest - 1)

    def x(k: int) -> float:
        return left + plot_w * (k - 1) / span

    def y(v: float) -> float:
        return top + plot_h * (1 - v)

    parts = [
        f"<svg width={width} height={height} role=img "
        f'aria-label="{_e(label)} at k = 1..{longest}">',
        f"<text x={left} y=14 font-weight=600>{_e(label)} at k</text>",
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f"<line x1={left} x2={left + plot_w} y1={y(tick):.1f} y2={y(tick):.1f} "
            f'stroke="#e5e7eb"/><text x={left - 6} y={y(tick) + 4:.1f} '
            f"text-anchor=end>{tick:g}</text>"
        )
    for k in sorted({1, *range(0, longest + 1, max(1, longest // 5))} - {0} | {longest}):
        parts.append(f"<text x={x(k):.1f} y={top + plot_h + 16} text-anchor=middle>{k}</text>")
    parts.append(f"<text x={left + plot_w / 2} y={height - 2} text-anchor=middle>k</text>")
    for i, (name, values) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in enumerate(values, 1))
        dash = ' stroke-dasharray="5 3"' if name.startswith("baseline") else ""
        parts.append(
            f'<polyline fill=none stroke="{colour}" stroke-width=2{dash} points="{points}"/>'
        )
        parts.append(
            f'<rect x={left + 8} y={top + 6 + 16 * i} width=12 height=3 fill="{colour}"/>'
            f"<text x={left + 24} y={top + 10 + 16 * i}>{_e(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _histogram(result: EvaluationResult, metric: str, bins: int = 10) -> str:
    values = np.array([q.metrics.get(metric, math.nan) for q in result.queries])
    values = values[np.isfinite(values)]
    if values.size == 0:
        return ""
    counts, _ = np.histogram(values, bins=bins, range=(0.0, 1.0))
    width, height, left, bottom, top = 420, 260, 44, 34, 24
    plot_w, plot_h = width - left - 12, height - top - bottom
    tallest = max(1, int(counts.max()))
    bar = plot_w / bins
    parts = [
        f'<svg width={width} height={height} role=img aria-label="distribution of {_e(metric)}">',
        f"<text x={left} y=14 font-weight=600>per-query {_e(metric)} "
        f"({values.size} queries)</text>",
    ]
    for i, count in enumerate(counts):
        h = plot_h * count / tallest
        parts.append(
            f"<rect x={left + i * bar + 1:.1f} y={top + plot_h - h:.1f} width={bar - 2:.1f} "
            f'height={h:.1f} fill="#93c5fd"><title>{i / bins:.1f}-{(i + 1) / bins:.1f}: '
            f"{count}</title></rect>"
        )
    for i in range(0, bins + 1, 2):
        parts.append(
            f"<text x={left + i * bar:.1f} y={top + plot_h + 16} text-anchor=middle>"
            f"{i / bins:.1f}</text>"
        )
    parts.append(
        f"<text x={left - 6} y={top + 4} text-anchor=end>{tallest}</text>"
        f"<text x={left - 6} y={top + plot_h + 4} text-anchor=end>0</text></svg>"
    )
    return "".join(parts)


# ---------------------------------------------------------------------------- sections


def _metric_table(result: EvaluationResult) -> str:
    gates = {o.threshold.key: o for o in result.gate()}
    changes = {}
    if result.comparison is not None and not result.comparison.stale:
        changes = {c.metric: c for c in result.comparison.changes}
    rows = [
        "<tr><th>metric</th><th>value</th><th>95% CI</th><th>threshold</th>"
        "<th>baseline</th><th>Δ</th><th>p</th><th>verdict</th></tr>"
    ]
    for name, value in result.metrics.items():
        outcome, change = gates.get(name), changes.get(name)
        verdicts = []
        if outcome is not None:
            verdicts.append(
                '<span class="pass">pass</span>'
                if outcome.passed
                else '<span class="fail">below threshold</span>'
            )
        if change is not None and change.verdict != "ok":
            css = {"regressed": "fail", "improved": "pass"}.get(change.verdict, "muted")
            verdicts.append(f'<span class="{css}">{_e(change.verdict)}</span>')
        rows.append(
            f"<tr><td><code>{_e(name)}</code></td><td class=n>{_num(value)}</td>"
            f"<td class=n>{_ci(result.ci.get(name))}</td>"
            f"<td class=n>{'≥ ' + format(outcome.threshold.minimum, 'g') if outcome else ''}</td>"
            f"<td class=n>{_num(change.baseline) if change and not math.isnan(change.baseline) else ''}</td>"  # noqa: E501
            f"<td class=n>{_delta(change.delta, 4) if change else ''}</td>"
            f"<td class=n>{_p(change.p_adjusted) if change else ''}</td>"
            f"<td>{' · '.join(verdicts)}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def _section(index: int, result: EvaluationResult, entry: BaselineEntry | None) -> str:
    ok = result.passed and not result.regressed
    status = '<span class="pass">passed</span>' if ok else '<span class="fail">failed</span>'
    facts = [
        f"latency p50 {result.latency_p50_ms:.1f} ms · p95 {result.latency_p95_ms:.1f} ms",
    ]
    if result.errors:
        facts.append(f'<span class="fail">{len(result.errors)} retriever calls failed</span>')
    if result.judge_problem:
        facts.append(f'<span class="fail">{_e(result.judge_problem)}</span>')
    if result.sampled_from is not None:
        facts.append(f"a sample of {len(result.queries)} of {result.sampled_from} queries")
    if result.comparison is not None:
        facts.append(f"compared with {_e(result.comparison.reference)}")
    charts = []
    for family in ("recall", "ndcg"):
        series = [("current", _current_curves(result, family))]
        if entry is not None:
            stored = _baseline_curves(result, entry, family)
            label = "baseline" if len(stored) >= len(series[0][1]) else f"baseline (top {entry.k})"
            series.append((label, stored))
        charts.append(_line_chart(f"{family}", [s for s in series if s[1]]))
    first = next(iter(result.metrics), "")
    charts.append(
        _histogram(result, f"ndcg@{result.k}" if f"ndcg@{result.k}" in result.metrics else first)
    )
    return (
        f'<h2 id="eval-{index}">{_e(title(result))} — {status}</h2>'
        f'<p class="muted">{" · ".join(facts)}</p>'
        + _metric_table(result)
        + f'<div class="charts">{"".join(charts)}</div>'
        + _query_table(index, result)
    )


def _listed(result: EvaluationResult, metric: str) -> list[QueryResult]:
    """Every query, or for a big golden set the MAX_QUERY_ROWS worst by ``metric`` (the page
    must stay small enough for a browser; the JSON report has them all)."""
    if len(result.queries) <= MAX_QUERY_ROWS:
        return list(result.queries)

    def score(query: QueryResult) -> float:
        value = query.metrics.get(metric, math.nan)
        return math.inf if math.isnan(value) else value

    return sorted(result.queries, key=score)[:MAX_QUERY_ROWS]


def _query_table(index: int, result: EvaluationResult) -> str:
    shown = list(result.metrics)[:3]
    table_id = f"queries-{index}"
    head = "".join(f"<th>{_e(name)}</th>" for name in shown)
    listed = _listed(result, shown[0] if shown else "")
    rows = []
    for query in listed:
        text = " ".join([query.id, query.query, *query.tags]).lower()
        cells = "".join(
            f"<td class=n>{_num(query.metrics.get(name, math.nan))}</td>" for name in shown
        )
        error = f' <span class="fail">{_e(query.error)}</span>' if query.error else ""
        rows.append(
            f'<tr class="q" data-text="{_e(text)}"><td>{_e(query.id)}</td>'
            f"<td>{_e(query.query)}{error}</td><td>{_e(', '.join(query.tags))}</td>{cells}</tr>"
            f'<tr class="hits" style="display:none"><td colspan={3 + len(shown)}>'
            f"{_hits(query, result.k)}</td></tr>"
        )
    heading = f"Queries ({len(result.queries)})"
    if len(listed) < len(result.queries):
        heading = (
            f"The {len(listed)} worst of {len(result.queries)} queries by {_e(shown[0])} "
            "(all of them are in the JSON report)"
        )
    return (
        f"<h3>{heading}</h3>"
        f'<input class="search" type="search" data-table="{table_id}" '
        f'placeholder="filter by id, text or tag" aria-label="filter queries">'
        f'<table id="{table_id}"><tr><th>id</th><th>query</th><th>tags</th>{head}</tr>'
        + "".join(rows)
        + "</table>"
    )


def _hits(query: QueryResult, k: int) -> str:
    rows = ["<tr><th>#</th><th>doc id</th><th>grade</th><th>judge</th></tr>"]
    for rank, doc in enumerate(query.returned[: max(k, 10)], 1):
        grade = query.relevant.get(doc)
        css = ' class="rel"' if grade else ""
        verdict = query.judgments.get(doc)
        judged = ""
        if verdict is not None:
            if verdict.get("error"):
                judged = f'<span class="muted">ungraded: {_e(verdict["error"])}</span>'
            else:
                mark, css_v = ("on topic", "on") if verdict.get("on_topic") else ("off", "off")
                judged = f'<span class="{css_v}">{mark}</span> {_e(verdict.get("reason", ""))}'
        shown_grade = "" if grade is None else f"relevant ({grade})" if grade else "judged 0"
        rows.append(
            f"<tr{css}><td class=n>{rank}</td><td>{_e(doc)}</td><td>{shown_grade}</td>"
            f"<td>{judged}</td></tr>"
        )
    missed = ", ".join(_e(doc) for doc in query.missed)
    tail = f'<p class="muted">missed relevant: {missed}</p>' if missed else ""
    return "<table>" + "".join(rows) + "</table>" + tail


def _ab_section(group: ABGroup) -> str:
    members = [group.reference, *(other for other, _ in group.others)]
    charts = []
    for family in ("recall", "ndcg"):
        series = [(r.retriever_id, _current_curves(r, family)) for r in members]
        charts.append(_line_chart(family, series))
    head = "".join(
        f"<th>{_e(other.retriever_id)}</th><th>Δ</th><th>p</th>" for other, _ in group.others
    )
    rows = [f"<tr><th>metric</th><th>{_e(group.reference.retriever_id)}</th>{head}</tr>"]
    for name, value in group.reference.metrics.items():
        cells = ""
        for other, comparison in group.others:
            change = next((c for c in comparison.changes if c.metric == name), None)
            theirs = other.metrics.get(name, math.nan)
            cells += (
                f"<td class=n>{_num(theirs)}</td><td class=n>{_delta(theirs - value, 4)}</td>"
                f"<td class=n>{_p(change.p_adjusted if change else None)}</td>"
            )
        rows.append(
            f"<tr><td><code>{_e(name)}</code></td><td class=n>{_num(value)}</td>{cells}</tr>"
        )
    return (
        f"<h2>{_e(group.reference.golden_name)}: {len(members)} retrievers side by side</h2>"
        '<p class="muted">Δ and paired two-sided p-values against the first.</p>'
        f"<table>{''.join(rows)}</table>"
        f'<div class="charts">{"".join(charts)}</div>'
    )
