"""A self-contained HTML report: tables, recall@k / nDCG@k curves, a per-query explorer.

One file, no network: styles, inline SVG plots (:mod:`.charts`) and a few lines of vanilla
JavaScript (filter, sort, expand) are all inside, so it can be archived as a CI artifact and
opened anywhere. Every piece of user text goes through ``html.escape``. Tables and notes come
from :mod:`.rows`, the same model the Markdown summary renders.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..verdicts import REGRESSION
from .charts import Series, baseline_curve, current_curve, histogram, line_chart
from .rows import Cell, Note, ab_rows, metric_rows, notes, overall, tag_rows
from .text import num, title

if TYPE_CHECKING:
    from ..baseline import BaselineEntry
    from ..compare import ABGroup
    from ..results import EvaluationResult, QueryResult
    from ..verdicts import Verdict

MAX_QUERY_ROWS = 2000  # beyond this the page lists the worst queries only
MIN_HITS_SHOWN = 10
MAX_HITS_SHOWN = 100

#: a cell whose text is a number, a CI, a threshold or a latency: right-aligned
_NUMERIC = re.compile(r"^(?:[-+]?\d[\d.]*(?: ms)?|\[.*\]|[≥≤] .*|n/a)$")

CSS = """
:root{--fg:#1f2937;--muted:#6b7280;--line:#e5e7eb;--head:#f3f4f6;--pass:#047857;
--fail:#b91c1c;--warn:#b45309}
*{box-sizing:border-box}
body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg)}
main{max-width:1240px;margin:0 auto;padding:24px 32px 64px}
h1{font-size:24px;margin:0 0 2px}h2{font-size:19px;margin:44px 0 10px;padding-bottom:6px;
border-bottom:2px solid var(--line)}h3{font-size:15px;margin:22px 0 8px}
a{color:#1d4ed8;text-decoration:none}a:hover{text-decoration:underline}
table{border-collapse:collapse;margin:6px 0 14px}
th,td{padding:5px 12px;text-align:left;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--head);font-weight:600;white-space:nowrap}
.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--head);
padding:1px 5px;border-radius:4px}
.muted{color:var(--muted)}.pass{color:var(--pass)}.fail{color:var(--fail)}.warn{color:var(--warn)}
.badge{display:inline-block;padding:0 8px;border-radius:999px;font-size:12px;font-weight:600;
line-height:20px;white-space:nowrap}
.badge.pass{background:#d1fae5;color:#065f46}.badge.fail{background:#fee2e2;color:#991b1b}
.badge.warn{background:#fef3c7;color:#92400e}
h1 .badge,h2 .badge{font-size:13px;vertical-align:3px;margin-left:6px}
ul.notes{margin:6px 0 12px;padding-left:20px}ul.notes li{margin:2px 0}
ul.notes li.fail::marker,ul.notes li.warn::marker{content:"▲ ";font-size:11px}
ul.notes li.fail::marker{color:var(--fail)}ul.notes li.warn::marker{color:var(--warn)}
details{margin:6px 0 12px}summary{cursor:pointer;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:16px;margin:10px 0 6px}
.chart{border:1px solid var(--line);border-radius:8px;padding:6px 8px;background:#fff}
svg text{font-size:11px;fill:#4b5563}svg .title{font-size:12.5px;font-weight:600;fill:#111827}
.toolbar{display:flex;align-items:center;gap:14px;margin:8px 0}
input.search{padding:7px 11px;width:380px;border:1px solid #d1d5db;border-radius:6px;font:inherit}
input.search:focus{outline:2px solid #93c5fd;border-color:#60a5fa}
table.queries{width:100%}
table.queries th.sort{cursor:pointer;user-select:none}
table.queries th.sort::after{content:" ↕";color:#9ca3af}
table.queries th.asc::after{content:" ↑";color:var(--fg)}
table.queries th.desc::after{content:" ↓";color:var(--fg)}
tr.q{cursor:pointer}tr.q:hover td:not(.n){background:#f9fafb}
tr.q:focus-visible{outline:2px solid #93c5fd}
tr.q td:first-child::before{content:"▸";display:inline-block;width:14px;color:#9ca3af}
tr.q.open td:first-child::before{content:"▾"}
tr.q.open td:not(.n){background:#eff6ff}tr.q.open td{border-bottom-color:transparent}
tr.hits>td{background:#f9fafb;padding:8px 14px 12px 28px}
table.ranked{margin:0 0 6px;background:#fff}table.ranked td,table.ranked th{padding:3px 10px}
table.ranked td:first-child{text-align:right;color:var(--muted)}
tr.rel td{background:#dcfce7}
td.s0{background:#fef2f2}td.s1{background:#fff7ed}td.s2{background:#fefce8}
td.s3{background:#f7fee7}td.s4{background:#ecfdf5}
table.queries td:first-child{white-space:nowrap}
"""

JS = """
(function () {
  function filter(box) {
    var needle = box.value.trim().toLowerCase();
    var table = document.getElementById(box.dataset.table);
    var shown = 0, total = 0;
    table.querySelectorAll('tr.q').forEach(function (row) {
      if (row.searchText === undefined) {
        row.searchText = [0, 1, 2].map(function (i) {
          return row.cells[i].textContent;
        }).join(' ').toLowerCase();
      }
      var show = row.searchText.indexOf(needle) >= 0;
      row.hidden = !show;
      if (!show) { row.nextElementSibling.hidden = true; row.classList.remove('open'); }
      total += 1; shown += show ? 1 : 0;
    });
    document.getElementById(box.dataset.table + '-count').textContent =
      shown + ' of ' + total + ' shown';
  }
  function toggle(row) {
    var hits = row.nextElementSibling;
    hits.hidden = !hits.hidden;
    row.classList.toggle('open', !hits.hidden);
    row.setAttribute('aria-expanded', String(!hits.hidden));
  }
  function sort(th) {
    var table = th.closest('table'), body = table.tBodies[0], col = th.cellIndex;
    var down = th.classList.contains('asc');  // worst first, then best first
    table.querySelectorAll('th.sort').forEach(function (h) { h.classList.remove('asc', 'desc'); });
    th.classList.add(down ? 'desc' : 'asc');
    var pairs = [];
    body.querySelectorAll('tr.q').forEach(function (row) {
      var v = parseFloat(row.cells[col].textContent);
      pairs.push([isNaN(v) ? (down ? -Infinity : Infinity) : v, row, row.nextElementSibling]);
    });
    pairs.sort(function (a, b) { return down ? b[0] - a[0] : a[0] - b[0]; });
    pairs.forEach(function (p) { body.appendChild(p[1]); body.appendChild(p[2]); });
  }
  document.querySelectorAll('input.search').forEach(function (box) {
    box.addEventListener('input', function () { filter(box); });
  });
  document.querySelectorAll('tr.q').forEach(function (row) {
    row.addEventListener('click', function () { toggle(row); });
    row.addEventListener('keydown', function (e) {
      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); toggle(row); }
    });
  });
  document.querySelectorAll('th.sort').forEach(function (th) {
    th.addEventListener('click', function () { sort(th); });
  });
})();
"""


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def render_html(
    results: Sequence[EvaluationResult],
    groups: Sequence[ABGroup] = (),
    baselines: Mapping[int, BaselineEntry] | None = None,
    *,
    verdict: Verdict,
) -> str:
    """The whole page, headed by the session's ``verdict``; ``baselines`` maps an index in
    ``results`` to the stored baseline it was compared with (current-vs-baseline curves)."""
    status, word = overall(results, verdict)
    body = [
        f"<h1>Retrieval evaluation {_badge(status, word)}</h1>",
        f'<p class="muted">pytest-retrieval {_e(__version__)} · {len(results)} evaluations</p>',
    ]
    if verdict.reasons:  # why, first: every reason of the session, by kind
        body.append(_notes([Note("fail", f"{r.kind}: {r.message}") for r in verdict.reasons]))
    if len(results) > 1:
        body.append(_overview(results))
    body += [_ab_section(group) for group in groups]
    body += [
        _section(index, result, (baselines or {}).get(index))
        for index, result in enumerate(results)
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>Retrieval evaluation: {_e(word)}</title><style>{CSS}</style></head>"
        f"<body><main>{''.join(body)}</main><script>{JS}</script></body></html>\n"
    )


# ---------------------------------------------------------------------------- pieces


def _badge(status: str, text: str) -> str:
    return f'<span class="badge {status}">{_e(text)}</span>'


def _cell(marks: Cell, tag: str = "td", numeric: bool = False) -> str:
    """A table cell from the shared builders' pieces: escaped, statuses as badges."""
    parts = []
    for status, text in marks:
        if status == "code":
            parts.append(f"<code>{_e(text)}</code>")
        elif status in {"pass", "fail", "warn"}:
            parts.append(_badge(status, text))
        else:
            parts.append(_e(text))
    css = ' class="n"' if numeric else ""
    return f"<{tag}{css}>{' '.join(parts)}</{tag}>"


def _table(rows: Sequence[Sequence[Cell]]) -> str:
    """A table; columns whose cells are all numbers (or empty) are right-aligned."""
    header, *body = rows
    numeric = [
        any(row[i] for row in body)
        and all(len(row[i]) <= 1 and _NUMERIC.match(row[i][0][1]) for row in body if row[i])
        for i in range(len(header))
    ]
    head = "".join(_cell(c, "th", n) for c, n in zip(header, numeric, strict=True))
    lines = "".join(
        "<tr>" + "".join(_cell(c, "td", n) for c, n in zip(row, numeric, strict=True)) + "</tr>"
        for row in body
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{lines}</tbody></table>"


def _notes(found: Sequence[Note]) -> str:
    items = "".join(
        f'<li class="{note.status}">{_e(note.text)}'
        + (f": <code>{_e(note.code)}</code>" if note.code else "")
        + "</li>"
        for note in found
    )
    return f'<ul class="notes">{items}</ul>'


def _verdict(result: EvaluationResult) -> str:
    return _badge("pass", "passed") if result.verdict.passed else _badge("fail", "failed")


def _overview(results: Sequence[EvaluationResult]) -> str:
    """One line per evaluation, linking to its section: what failed, at a glance."""
    rows = []
    for index, result in enumerate(results):
        outcomes = result.verdict.outcomes
        passed = sum(o.passed for o in outcomes)
        comparison = result.comparison
        against = "no baseline"
        if comparison is not None:
            regressed = ", ".join(r.metric or "" for r in result.verdict.of_kind(REGRESSION))
            against = (
                "stale"
                if comparison.stale
                else (f"regressed: {regressed}" if regressed else "no regression")
            )
        rows.append(
            f'<tr><td><a href="#eval-{index}">{_e(result.golden_name)}</a></td>'
            f"<td>{_e(result.retriever_id)}</td><td class=n>{len(result.queries)}</td>"
            f"<td class=n>{passed} / {len(outcomes)}</td><td>{_e(against)}</td>"
            f"<td>{_verdict(result)}</td></tr>"
        )
    return (
        "<table><thead><tr><th>golden set</th><th>retriever</th><th>queries</th>"
        "<th>thresholds passed</th><th>vs baseline</th><th>verdict</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


# ---------------------------------------------------------------------------- sections


def _section(index: int, result: EvaluationResult, entry: BaselineEntry | None) -> str:
    charts = []
    for family in ("recall", "ndcg"):
        series: list[Series] = [("current", current_curve(result, family), False)]
        if entry is not None:
            recorded = f" ({entry.created[:10]})" if entry.created else ""
            series.append((f"baseline{recorded}", baseline_curve(result, entry, family), True))
        charts.append(line_chart(family, series, result.k))
    ndcg = f"ndcg@{result.k}"
    charts.append(
        histogram(result, ndcg if ndcg in result.metrics else next(iter(result.metrics), ""))
    )
    tags = ""
    if result.per_tag:
        tags = f"<details><summary>By tag</summary>{_table(tag_rows(result))}</details>"
    return (
        f'<h2 id="eval-{index}">{_e(title(result))} {_verdict(result)}</h2>'
        + _table(metric_rows(result))
        + _notes(notes(result))
        + tags
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


def _shade(value: float) -> str:
    """A background class for a metric in [0, 1]: red (0) to green (1), for scanning."""
    return "" if not math.isfinite(value) else f" s{min(4, int(value * 5))}"


def _query_table(index: int, result: EvaluationResult) -> str:
    shown = list(result.metrics)[:3]
    table_id = f"queries-{index}"
    listed = _listed(result, shown[0] if shown else "")
    rows = []
    for query in listed:
        cells = ""
        for name in shown:
            value = query.metrics.get(name, math.nan)
            cells += f'<td class="n{_shade(value)}">{num(value)}</td>'
        error = f" {_badge('fail', 'error')}" if query.error else ""
        rows.append(
            f'<tr class="q" tabindex="0" aria-expanded="false"><td>{_e(query.id)}</td>'
            f"<td>{_e(query.query)}{error}</td><td>{_e(', '.join(query.tags))}</td>{cells}</tr>"
            f'<tr class="hits" hidden><td colspan="{3 + len(shown)}">'
            f"{_hits(query, result.k)}</td></tr>"
        )
    heading = f"Queries ({len(result.queries)})"
    if len(listed) < len(result.queries):
        heading = (
            f"The {len(listed)} worst of {len(result.queries)} queries by {_e(shown[0])} "
            "(all of them are in the JSON report)"
        )
    head = "".join(f'<th class="sort n" title="sort">{_e(name)}</th>' for name in shown)
    return (
        f"<h3>{heading}</h3>"
        '<div class="toolbar">'
        f'<input class="search" type="search" data-table="{table_id}" '
        'placeholder="Filter by id, text or tag" aria-label="filter queries">'
        f'<span class="muted" id="{table_id}-count">{len(listed)} of {len(listed)} shown</span>'
        '<span class="muted">click a row for its ranked hits</span></div>'
        f'<table class="queries" id="{table_id}"><thead><tr><th>id</th><th>query</th>'
        f"<th>tags</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _judged(verdict: Mapping[str, Any] | None) -> str:
    """The judge's verdict on one hit: on/off topic with its grade or score, and why."""
    if verdict is None:
        return ""
    if verdict.get("error"):
        return f'<span class="muted">ungraded: {_e(verdict["error"])}</span>'
    if verdict.get("on_topic") is None:
        return ""
    if verdict.get("grade") is not None:
        strength = f" {verdict['grade']}/3"
    elif verdict.get("score") is not None:
        strength = f" {float(verdict['score']):.2f}"
    else:
        strength = ""
    label = (
        _badge("pass", f"on topic{strength}")
        if verdict["on_topic"]
        else _badge("fail", f"off topic{strength}")
    )
    reason = verdict.get("reason") or ""
    return f"{label} {_e(reason)}" if reason else label


def _hits(query: QueryResult, k: int) -> str:
    """The ranked hits of one query: golden grades, judge verdicts, downstream labels; then
    the relevant documents further down or not retrieved at all."""
    if query.error:
        return f'<p class="fail">retriever error: {_e(query.error)}</p>'
    depth = min(max(k, MIN_HITS_SHOWN), MAX_HITS_SHOWN)
    judged, labelled = bool(query.judgments), bool(query.downstream)
    head = "<tr><th>#</th><th>doc id</th><th>golden grade</th>"
    head += ("<th>LLM judge</th>" if judged else "") + ("<th>downstream</th>" if labelled else "")
    rows = []
    for rank, doc in enumerate(query.returned[:depth], 1):
        grade = query.relevant.get(doc)
        relevant = grade is not None and grade > 0
        golden = "" if grade is None else "not relevant (0)"
        if relevant:
            golden = _badge("pass", f"relevant ({grade})")
        row = f"<tr{' class=rel' if relevant else ''}><td>{rank}</td><td>{_e(doc)}</td>"
        row += f"<td>{golden}</td>"
        if judged:
            row += f"<td>{_judged(query.judgments.get(doc))}</td>"
        if labelled:
            label = query.downstream.get(doc)
            row += f"<td>{'' if label is None else f'{label:.2f}'}</td>"
        rows.append(row + "</tr>")
    if not rows:
        rows.append(
            f'<tr><td colspan="{3 + judged + labelled}" class="muted">nothing came back</td></tr>'
        )
    tail = []
    deeper = [(doc, rank) for doc, rank in query.found_ranks.items() if rank > depth]
    if deeper:
        tail.append("relevant further down: " + ", ".join(f"{_e(d)} #{r}" for d, r in deeper))
    if query.missed:
        tail.append("relevant, not retrieved: " + ", ".join(_e(doc) for doc in query.missed))
    more = "".join(f'<p class="muted">{line}</p>' for line in tail)
    return (
        f'<table class="ranked"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>{more}'
    )


def _ab_section(group: ABGroup) -> str:
    members = [group.reference, *(other for other, _ in group.others)]
    charts = []
    for family in ("recall", "ndcg"):
        series: list[Series] = [(r.retriever_id, current_curve(r, family), False) for r in members]
        charts.append(line_chart(family, series, group.reference.k))
    return (
        f"<h2>{_e(group.reference.golden_name)}: {len(members)} retrievers side by side</h2>"
        f'<p class="muted">Δ and paired two-sided p-values (Holm-adjusted) against '
        f"{_e(group.reference.retriever_id)}; marked when significantly better or worse beyond "
        "the allowed change.</p>"
        + _table(ab_rows(group))
        + f'<div class="charts">{"".join(charts)}</div>'
    )
