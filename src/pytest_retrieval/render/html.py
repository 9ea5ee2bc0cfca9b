"""A self-contained HTML report for the reviewer: what changed first, then the tables, the
recall@k / nDCG@k curves and a per-query explorer.

One file, no network: styles, inline SVG plots (:mod:`.charts`) and a few lines of vanilla
JavaScript (filter, sort, expand) are all inside, so it can be archived as a CI artifact and
opened anywhere. Without JavaScript it is a static page whose rows still open (``<details>``).
It fits a 400 px screen: wide tables scroll in their own box, never the page. Every piece of
user text goes through ``html.escape``. Tables and notes come from :mod:`.rows`, the same
model the Markdown summary renders.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..results import ChangeStatus
from ..verdicts import REGRESSION
from .charts import Series, baseline_curve, current_curve, histogram, line_chart
from .rows import (
    CHANGED_SHOWN,
    Cell,
    Note,
    ab_rows,
    ab_unjudged_notes,
    depth_note,
    metric_rows,
    move_lines,
    notes,
    overall,
    rank_text,
    recorded,
    shift_counts,
    tag_rows,
)
from .text import delta, num, p_value, short, title

if TYPE_CHECKING:
    from ..baseline import BaselineEntry
    from ..compare import ABGroup
    from ..results import Comparison, EvaluationResult, QueryChange, QueryResult
    from ..verdicts import Verdict

#: query rows listed on the whole page (shared by its evaluations, at least MIN_QUERY_ROWS
#: each): beyond it, the most changed and the worst; the page must open in a browser
MAX_QUERY_ROWS = 1000
MIN_QUERY_ROWS = 20
#: hits listed in an opened row: the golden set's k within these bounds (relevant ones
#: further down are named under the table), so a k of 100 does not make the page 10x larger
MIN_HITS_SHOWN = 10
MAX_HITS_SHOWN = 20
HIT_TEXT_SHOWN = 100  # characters of a hit's text in an opened row (the JSON report keeps 200)
QUERY_SHOWN = 160  # characters of a query's text in the what-changed panel

#: a cell whose text is a number, a CI, a threshold or a latency: right-aligned
_NUMERIC = re.compile(r"^(?:[-+]?\d[\d.]*(?: ms)?|\[.*\]|[≥≤] .*|n/a)$")

CSS = """
:root{--fg:#1f2937;--muted:#6b7280;--line:#e5e7eb;--head:#f3f4f6;--pass:#047857;
--fail:#b91c1c;--warn:#b45309}
*{box-sizing:border-box}
body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg)}
p,li,h1,h2,h3,h4{overflow-wrap:anywhere}
main{max-width:1240px;margin:0 auto;padding:24px 32px 64px}
@media (max-width:640px){main{padding:14px 10px 40px}}
h1{font-size:24px;margin:0 0 2px}h2{font-size:19px;margin:44px 0 10px;padding-bottom:6px;
border-bottom:2px solid var(--line)}h3{font-size:15px;margin:22px 0 8px}
a{color:#1d4ed8;text-decoration:none}a:hover{text-decoration:underline}
.scroll{overflow-x:auto;max-width:100%;margin:6px 0 14px}
table{border-collapse:collapse;margin:0}
th,td{padding:5px 12px;text-align:left;border-bottom:1px solid var(--line);vertical-align:top;
overflow-wrap:normal}
th{background:var(--head);font-weight:600;white-space:nowrap}
.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--head);
padding:1px 5px;border-radius:4px;overflow-wrap:anywhere}
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
section.changed{border:2px solid #c7d2fe;border-radius:10px;padding:4px 16px 10px;margin:18px 0;
background:#f8faff}
section.changed h2{margin-top:12px}
table.moved td{min-width:9em}table.moved td.n{min-width:0}
.moves{margin:0;padding-left:16px}.moves li{margin:1px 0}
.hit{color:#555;font-size:12px;min-width:18ch;max-width:46ch;white-space:normal}
.charts{display:flex;flex-wrap:wrap;gap:16px;margin:10px 0 6px}
.chart{border:1px solid var(--line);border-radius:8px;padding:6px 8px;background:#fff;
max-width:100%}
.chart svg{display:block;max-width:100%;height:auto}
svg text{font-size:11px;fill:#4b5563}svg .title{font-size:12.5px;font-weight:600;fill:#111827}
svg .axis{font-size:11.5px;fill:#111827}
.toolbar{display:flex;flex-wrap:wrap;align-items:center;gap:6px 14px;margin:8px 0}
input.search{padding:7px 11px;width:380px;max-width:100%;border:1px solid #d1d5db;
border-radius:6px;font:inherit}
input.search:focus{outline:2px solid #93c5fd;border-color:#60a5fa}
table.queries{width:100%}
table.queries th.sort{cursor:pointer;user-select:none}
table.queries th.sort::after{content:" ↕";color:#9ca3af}
table.queries th.asc::after{content:" ↑";color:var(--fg)}
table.queries th.desc::after{content:" ↓";color:var(--fg)}
table.queries td.text{min-width:14em}
tr.q{cursor:pointer}tr.q:hover td:not(.n){background:#f9fafb}
tr.q:focus-visible{outline:2px solid #93c5fd}
.js tr.q td:first-child::before{content:"▸";display:inline-block;width:14px;color:#9ca3af}
.js tr.q.open td:first-child::before{content:"▾"}
tr.q.open td:not(.n){background:#eff6ff}tr.q.open td{border-bottom-color:transparent}
tr.hits>td{background:#f9fafb;padding:4px 14px 8px 28px}
tr.hits details{margin:0;position:sticky;left:28px;max-width:calc(100vw - 60px)}
tr.hits summary{font-weight:400;color:var(--muted)}
.js tr.hits{display:none}.js tr.hits.shown{display:table-row}.js tr.hits summary{display:none}
.rankings{display:flex;flex-wrap:wrap;gap:8px 22px;align-items:flex-start}
.rankings h4{margin:4px 0;font-size:13px}
table.ranked{margin:0 0 6px;background:#fff}table.ranked td,table.ranked th{padding:3px 10px}
table.ranked td:first-child{text-align:right;color:var(--muted)}
tr.rel td{background:#dcfce7}
td.s0{background:#fef2f2}td.s1{background:#fff7ed}td.s2{background:#fefce8}
td.s3{background:#f7fee7}td.s4{background:#ecfdf5}
td.down{color:var(--fail)}td.up{color:var(--pass)}
table.queries tr.q td:first-child{white-space:nowrap}
"""

#: marks the page as scripted before it renders: rows start folded, the script opens them
HEAD_JS = "document.documentElement.classList.add('js');"

JS = """
(function () {
  var texts = JSON.parse(document.getElementById('hit-texts').textContent);
  document.querySelectorAll('td[data-t]').forEach(function (cell) {
    var hit = document.createElement('div');
    hit.className = 'hit'; hit.textContent = texts[+cell.dataset.t]; cell.appendChild(hit);
  });
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
      if (!show) { row.nextElementSibling.classList.remove('shown'); row.classList.remove('open'); }
      total += 1; shown += show ? 1 : 0;
    });
    document.getElementById(box.dataset.table + '-count').textContent =
      shown + ' of ' + total + ' shown';
  }
  function toggle(row) {
    var hits = row.nextElementSibling;
    var open = !hits.classList.contains('shown');
    hits.classList.toggle('shown', open);
    hits.querySelector('details').open = true;
    row.classList.toggle('open', open);
    row.setAttribute('aria-expanded', String(open));
  }
  function sort(th) {
    var table = th.closest('table'), body = table.tBodies[0], col = th.cellIndex;
    var down = th.classList.contains('asc');  // lowest (largest drop) first, then highest
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
    created: str = "",
    git: Mapping[str, Any] | None = None,
) -> str:
    """The whole page, headed by the session's ``verdict``, when (``created``, ISO 8601;
    default: now) and at which commit (``git``: ``{"commit", "dirty"}`` of the checkout that
    ran) it was made. ``baselines`` maps an index in ``results`` to the stored baseline it
    was compared with (per-query baseline values, rankings and curves). With no results it
    still says what failed: the verdict and each of its reasons."""
    baselines = baselines or {}
    status, word = overall(results, verdict)
    body = [_header(results, verdict, status, word, created, git or {})]
    compared = [
        _compared(result, groups, baselines.get(index)) for index, result in enumerate(results)
    ]
    body.append(_changes_panel(results, compared))
    if len(results) > 1:
        body.append(_overview(results))
    body += [_ab_section(group) for group in groups]
    cap = max(MIN_QUERY_ROWS, MAX_QUERY_ROWS // max(1, len(results)))  # rows per table
    texts: dict[str, int] = {}  # a hit's text -> its number: each text once per page
    body += [
        _section(index, result, baselines.get(index), compared[index], cap, texts)
        for index, result in enumerate(results)
    ]
    # "<" escaped: no "</script" or "<!--" in a hit's text can end or bend the block
    shared = json.dumps(list(texts), ensure_ascii=False).replace("<", "\\u003c")
    body.append(f'<script type="application/json" id="hit-texts">{shared}</script>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>Retrieval evaluation: {_e(word)}</title><style>{CSS}</style>"
        f"<script>{HEAD_JS}</script></head>"
        f"<body><main>{''.join(body)}</main><script>{JS}</script></body></html>\n"
    )


# ---------------------------------------------------------------------------- pieces


def _badge(status: str, text: str) -> str:
    return f'<span class="badge {status}">{_e(text)}</span>'


def _scroll(table: str) -> str:
    """A table in its own horizontal scroll box: a wide table never widens the page."""
    return f'<div class="scroll">{table}</div>'


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
    """A table in a scroll box; columns whose cells are all numbers (or empty) are
    right-aligned."""
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
    return _scroll(f"<table><thead><tr>{head}</tr></thead><tbody>{lines}</tbody></table>")


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


def _header(
    results: Sequence[EvaluationResult],
    verdict: Verdict,
    status: str,
    word: str,
    created: str,
    git: Mapping[str, Any],
) -> str:
    """The verdict, when and at which commit the run was made, then every reason it failed."""
    when = created or datetime.now(timezone.utc).isoformat(timespec="seconds")
    facts = [
        f"pytest-retrieval {_e(__version__)}",
        f"{len(results)} evaluation{'s' if len(results) != 1 else ''}",
        f'<time datetime="{_e(when)}">{_e(when.replace("T", " "))}</time>',
    ]
    commit = str(git.get("commit") or "")
    if commit:
        dirty = " (uncommitted changes)" if git.get("dirty") else ""
        facts.append(f"commit <code>{_e(commit[:12])}</code>{dirty}")
    goldens = dict.fromkeys((r.golden_name, r.fingerprint) for r in results)
    facts += [
        f"golden {_e(name)} <code>{_e(fingerprint[:12])}</code>"
        for name, fingerprint in goldens
        if fingerprint
    ]
    parts = [
        f"<h1>Retrieval evaluation {_badge(status, word)}</h1>",
        f'<p class="muted meta">{" · ".join(facts)}</p>',
    ]
    if verdict.reasons:  # why, first: every reason of the session, by kind
        parts.append(_notes([Note("fail", f"{r.kind}: {r.message}") for r in verdict.reasons]))
    if not results:
        parts.append(
            '<p class="muted">No evaluation ran, so there are no tables, curves or queries: '
            "the reasons above say what failed and where.</p>"
        )
    return f"<header>{''.join(parts)}</header>"


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
    return _scroll(
        "<table><thead><tr><th>golden set</th><th>retriever</th><th>queries</th>"
        "<th>thresholds passed</th><th>vs baseline</th><th>verdict</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


# ---------------------------------------------------------------------------- what changed


@dataclass(frozen=True)
class _Compared:
    """An evaluation against its reference (its baseline, or the A/B reference retriever):
    the comparison, the reference's name in column heads, and its per-query values and
    rankings, so the query table can show the reference beside each query."""

    label: str
    comparison: Comparison
    #: metric -> query id -> the reference's value, as compared, for the shared queries
    before: dict[str, dict[str, float]]
    #: query id -> the reference's ranking (a baseline's: its stored top k)
    ranked: dict[str, Sequence[str]]
    #: query id -> metric -> how it changed
    changes: dict[str, dict[str, QueryChange]]

    @property
    def depth(self) -> int:
        """How deep the reference's rankings are known."""
        return max((s.depth for s in self.comparison.shifts.values()), default=0)


def _compared(
    result: EvaluationResult, groups: Sequence[ABGroup], entry: BaselineEntry | None
) -> _Compared | None:
    """``result`` against its baseline (``entry``, when the caller has it) when it was
    compared with one, else against its A/B reference; None when neither was compared."""
    comparison = result.comparison
    if comparison is not None and not comparison.stale and comparison.shifts:
        stored: dict[str, tuple[Sequence[str], Mapping[str, float]]] = {}
        if entry is not None:
            stored = {qid: (q.ranked, q.metrics) for qid, q in entry.queries.items()}
        return _compared_with(result, "baseline", comparison, stored)
    for group in groups:
        for other, against in group.others:
            if other is result and against.shifts:
                theirs = {q.id: (q.returned, q.metrics) for q in group.reference.queries}
                return _compared_with(result, group.reference.retriever_id, against, theirs)
    return None


def _compared_with(
    result: EvaluationResult,
    label: str,
    comparison: Comparison,
    reference: Mapping[str, tuple[Sequence[str], Mapping[str, float]]],
) -> _Compared:
    """The reference's side of each shared query: a changed query's compared value and
    ranking from the comparison; an unchanged one's value is this run's, its ranking the
    reference's (``reference``: query id -> ranking, values; empty when unknown)."""
    changes: dict[str, dict[str, QueryChange]] = {}
    ranked: dict[str, Sequence[str]] = {}
    for shift in comparison.shifts.values():
        for change in shift.queries:
            changes.setdefault(change.id, {})[change.metric] = change
            ranked.setdefault(change.id, change.reference_ranked)
    for qid, (ranking, _) in reference.items():
        ranked.setdefault(qid, ranking)
    left_out = set(comparison.added) | set(comparison.rejudged)
    before: dict[str, dict[str, float]] = {}
    for metric in comparison.shifts:
        values = before.setdefault(metric, {})
        for query in result.queries:
            if query.id in left_out or (reference and query.id not in reference):
                continue
            found = changes.get(query.id, {}).get(metric)
            if found is not None:
                values[query.id] = found.before
                continue
            # unchanged as compared; a query the reference has no value for stays open
            theirs = reference.get(query.id)
            known = theirs is None or math.isfinite(theirs[1].get(metric, math.nan))
            values[query.id] = query.metrics.get(metric, math.nan) if known else math.nan
    return _Compared(label, comparison, before, ranked, changes)


def _changes_panel(
    results: Sequence[EvaluationResult], compared: Sequence[_Compared | None]
) -> str:
    """What changed, before anything else: per compared evaluation, its gated metrics against
    the reference (verdict, Δ, p, queries worse / better / unchanged), then the queries that
    changed most each way and where their relevant documents went."""
    blocks = [
        _changed_block(index, result, against)
        for index, (result, against) in enumerate(zip(results, compared, strict=True))
        if against is not None
    ]
    if not blocks:
        return ""
    return f'<section class="changed" id="changed"><h2>What changed</h2>{"".join(blocks)}</section>'


def _changed_block(index: int, result: EvaluationResult, against: _Compared) -> str:
    comparison = against.comparison
    reference = (
        f"its baseline (recorded {recorded(comparison)})"
        if against.label == "baseline"
        else f"retriever {against.label}"
    )
    changes = {c.metric: c for c in comparison.changes}
    counts = {row[0]: row[1:] for row in shift_counts(comparison)[1:]}
    rows = []
    for metric in comparison.shifts:
        change = changes.get(metric)
        worse, better, unchanged = counts[metric]
        if change is None:
            values = '<td class="n"></td>' * 4 + "<td></td>"
        else:
            p = change.p_adjusted if change.gated else change.p_value
            status = {
                ChangeStatus.REGRESSED: "fail",
                ChangeStatus.WORSE: "fail",
                ChangeStatus.WITHIN_NOISE: "warn",
                ChangeStatus.IMPROVED: "pass",
                ChangeStatus.BETTER: "pass",
            }.get(change.verdict, "")
            verdict = _badge(status, change.verdict) if status else _e(change.verdict)
            values = (
                f'<td class="n">{num(change.baseline)}</td><td class="n">{num(change.current)}'
                f'</td><td class="n">{delta(change.delta, 4)}</td><td class="n">{p_value(p)}'
                f"</td><td>{verdict}</td>"
            )
        rows.append(
            f"<tr><td><code>{_e(metric)}</code></td>{values}<td class=n>{_e(worse)}</td>"
            f"<td class=n>{_e(better)}</td><td class=n>{_e(unchanged)}</td></tr>"
        )
    table = _scroll(
        f"<table><thead><tr><th>gated metric</th><th>{_e(against.label)}</th><th>now</th>"
        "<th>Δ</th><th>p</th><th>verdict</th><th>queries worse</th><th>better</th>"
        f"<th>unchanged</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    lead = [
        Note(
            "fail",
            f"{c.metric} {c.verdict}: {num(c.baseline)} → {num(c.current)} "
            f"(Δ {delta(c.delta, 4)}, p {p_value(c.p_adjusted if c.gated else c.p_value)})",
        )
        for c in comparison.regressed
        if c.metric in comparison.shifts
    ] or [Note("", f"no gated metric is significantly worse than {reference}")]
    moved = "".join(
        _moved(shift.metric, shift.worst(CHANGED_SHOWN), shift.best(CHANGED_SHOWN), against)
        + _notes([Note("warn", note)] if (note := depth_note(shift)) else [])
        for shift in comparison.shifts.values()
    )
    return (
        f'<h3><a href="#eval-{index}">{_e(title(result))}</a> {_verdict(result)} '
        f'<span class="muted">against {_e(reference)}</span></h3>' + _notes(lead) + table + moved
    )


def _moved(
    metric: str, worst: Sequence[QueryChange], best: Sequence[QueryChange], against: _Compared
) -> str:
    """The queries that changed most on ``metric``, worse then better: text, tags, value
    before -> after, and the relevant documents that left or entered the top k."""
    if not worst and not best:
        return f'<p class="muted">No query changed on <code>{_e(metric)}</code>.</p>'
    rows = []
    for change in [*worst, *best]:
        tags = ", ".join(change.tags)
        lines = [_e(line) for line in move_lines(change, against.depth)]
        lines += [
            f"judge on {_e(move.doc)}: {_e(move.reason)}" for move in change.moves if move.reason
        ]
        where = "".join(f"<li>{line}</li>" for line in lines)
        where = f'<ul class="moves">{where}</ul>' if where else '<span class="muted">—</span>'
        direction = "down" if change.delta < 0 else "up"
        rows.append(
            f"<tr><td><code>{_e(change.id)}</code> {_e(short(change.query, QUERY_SHOWN))}</td>"
            f"<td>{_e(tags)}</td><td class=n>{num(change.before)} → {num(change.after)}</td>"
            f'<td class="n {direction}">{delta(change.delta, 4)}</td><td>{where}</td></tr>'
        )
    heading = (
        f"<code>{_e(metric)}</code>: the {len(worst)} largest drops and the {len(best)} largest "
        "gains"
    )
    return f"<h4>{heading}</h4>" + _scroll(
        '<table class="moved"><thead><tr><th>query</th><th>tags</th>'
        f"<th>{_e(against.label)} → now</th><th>Δ</th><th>relevant documents that moved"
        f"</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


# ---------------------------------------------------------------------------- sections


def _section(
    index: int,
    result: EvaluationResult,
    entry: BaselineEntry | None,
    against: _Compared | None,
    cap: int,
    texts: dict[str, int],
) -> str:
    charts = []
    for family in ("recall", "ndcg"):
        now = current_curve(result, family)
        series: list[Series] = [("current", now, False)]
        stored: list[float] = []
        if entry is not None:
            when = f" ({entry.created[:10]})" if entry.created else ""
            stored = baseline_curve(result, entry, family)
            series.append((f"baseline{when}", stored, True))
        charts.append(line_chart(family, series, result.k))
        if stored and len(stored) < len(now):  # a close-up of the range both runs cover
            charts.append(line_chart(family, series, result.k, upto=len(stored)))
    ndcg = f"ndcg@{result.k}"
    charts.append(
        histogram(result, ndcg if ndcg in result.metrics else next(iter(result.metrics), ""))
    )
    tags = ""
    if result.per_tag:
        tags = f"<details><summary>By tag</summary>{_table(tag_rows(result))}</details>"
    facts = [
        f"golden {_e(result.golden_source)}",
        f"fingerprint <code>{_e(result.fingerprint[:12])}</code>",
        f"k = {result.k}",
    ]
    if result.comparison is not None:
        facts.append(f"baseline recorded {_e(recorded(result.comparison))}")
    return (
        f'<h2 id="eval-{index}">{_e(title(result))} {_verdict(result)}</h2>'
        f'<p class="muted meta">{" · ".join(facts)}</p>'
        + _table(metric_rows(result))
        + _notes(notes(result))
        + tags
        + f'<div class="charts">{"".join(charts)}</div>'
        + _query_table(index, result, against, cap, texts)
    )


def _columns(result: EvaluationResult) -> list[str]:
    """The query table's metrics: the failing ones (a threshold missed, a regression), then
    the other gated ones, in the evaluation's order; the first metric when none is gated."""
    failing = {o.threshold.metric.name for o in result.verdict.outcomes if not o.passed}
    failing |= {r.metric for r in result.verdict.reasons if r.metric}
    names = [m for m in result.metrics if m in failing]
    names += [m for m in result.metrics if m in result.gated and m not in failing]
    return names or list(result.metrics)[:1]


def _listed(
    result: EvaluationResult, columns: Sequence[str], against: _Compared | None, cap: int
) -> tuple[list[QueryResult], int]:
    """Every query, or for a big golden set ``cap`` of them: up to half the most
    changed on the shown metrics (the largest change first), the rest the worst by the
    first (the page must stay small enough for a browser; the JSON report has them all).
    Returns the rows in the golden set's order and how many were kept for their change."""
    if len(result.queries) <= cap:
        return list(result.queries), 0
    moved: dict[str, float] = {}
    if against is not None:
        for qid, per_metric in against.changes.items():
            sizes = [abs(c.delta) for metric, c in per_metric.items() if metric in columns]
            if sizes:
                moved[qid] = max(sizes)
    changed = sorted(moved, key=lambda qid: (-moved[qid], qid))[: cap // 2]
    kept = set(changed)

    def score(query: QueryResult) -> float:
        value = query.metrics.get(columns[0], math.nan)
        return math.inf if math.isnan(value) else value

    rest = [q for q in sorted(result.queries, key=score) if q.id not in kept]
    kept.update(q.id for q in rest[: cap - len(kept)])
    return [q for q in result.queries if q.id in kept], len(changed)


def _shade(value: float) -> str:
    """A background class for a metric in [0, 1]: red (0) to green (1), for scanning."""
    return "" if not math.isfinite(value) else f" s{min(4, int(value * 5))}"


def _query_table(
    index: int,
    result: EvaluationResult,
    against: _Compared | None,
    cap: int,
    texts: dict[str, int],
) -> str:
    columns = _columns(result)
    table_id = f"queries-{index}"
    listed, changed = _listed(result, columns, against, cap)
    compared = [m for m in columns if against is not None and m in against.before]
    rows = []
    for query in listed:
        cells = ""
        for name in columns:
            value = query.metrics.get(name, math.nan)
            cells += f'<td class="n{_shade(value)}">{num(value)}</td>'
            if name in compared and against is not None:
                then = against.before[name].get(query.id, math.nan)
                change = value - then
                moved = " down" if change < 0 else (" up" if change > 0 else "")
                cells += (
                    f'<td class="n">{"" if math.isnan(then) else num(then)}</td>'
                    f'<td class="n{moved}">{delta(change, 4)}</td>'
                )
        error = f" {_badge('fail', 'error')}" if query.error else ""
        opened = _hits(query, result.k, result.depth, against, texts)
        width = 3 + len(columns) + 2 * len(compared)
        rows.append(
            f'<tr class="q" tabindex="0" aria-expanded="false"><td>{_e(query.id)}</td>'
            f'<td class="text">{_e(query.query)}{error}</td><td>{_e(", ".join(query.tags))}</td>'
            f'{cells}</tr><tr class="hits"><td colspan="{width}"><details><summary>ranked '
            f"hits of {_e(query.id)}</summary>{opened}</details>"
            "</td></tr>"
        )
    total = len(result.queries)
    heading = f"Queries ({total})"
    if len(listed) < total:
        worst = len(listed) - changed
        kept = f"the {worst} worst by {columns[0]}"
        if changed:
            kept = f"the {changed} most changed against the {against.label if against else ''}"
            kept += f" and the {worst} worst by {columns[0]}"
        heading = (
            f"{len(listed)} of {total} queries: {kept}; {total - len(listed)} left out "
            "(the JSON report has all of them)"
        )
    head = ""
    for name in columns:
        head += f'<th class="sort n" title="sort by {_e(name)}">{_e(name)}</th>'
        if name in compared and against is not None:
            head += (
                f'<th class="sort n" title="{_e(name)} of the {_e(against.label)}">'
                f'{_e(against.label)}</th><th class="sort n delta" title="sort by the change in '
                f'{_e(name)}">Δ {_e(name)}</th>'
            )
    return (
        f"<h3>{_e(heading)}</h3>"
        '<div class="toolbar">'
        f'<input class="search" type="search" data-table="{table_id}" '
        'placeholder="Filter by id, text or tag" aria-label="filter queries">'
        f'<span class="muted" id="{table_id}-count">{len(listed)} of {len(listed)} shown</span>'
        '<span class="muted">click a row for its ranked hits; a column head sorts</span></div>'
        + _scroll(
            f'<table class="queries" id="{table_id}"><thead><tr><th>id</th><th>query</th>'
            f"<th>tags</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
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


def _golden(grade: int | None) -> tuple[bool, str]:
    """Whether a golden grade is relevant, and how the hit tables show it."""
    if grade is None:
        return False, ""
    if grade > 0:
        return True, _badge("pass", f"relevant ({grade})")
    return False, "not relevant (0)"


def _hits(
    query: QueryResult, k: int, asked: int, against: _Compared | None, texts: dict[str, int]
) -> str:
    """One query opened: how it changed, its ranked hits (golden grades, judge verdicts,
    downstream labels, the reference's rank of each), the reference's ranking beside them,
    then the relevant documents further down or not retrieved at all (``asked``: how deep
    the run retrieved). Hit texts are numbered in ``texts`` (the page holds each once; its
    script fills them in)."""
    if query.error:
        return f'<p class="fail">retriever error: {_e(query.error)}</p>'
    depth = min(max(k, MIN_HITS_SHOWN), MAX_HITS_SHOWN)
    reference = against.ranked.get(query.id) if against is not None else None
    before = {doc: rank for rank, doc in enumerate(reference or (), 1)}
    judged, labelled = bool(query.judgments), bool(query.downstream)
    head = "<tr><th>#</th><th>doc id</th>"
    head += ("<th>score</th>" if query.scores else "") + "<th>golden grade</th>"
    if against is not None and reference is not None:
        head += f"<th>{_e(against.label)} rank</th>"
    head += ("<th>LLM judge</th>" if judged else "") + ("<th>downstream</th>" if labelled else "")
    rows = []
    for rank, doc in enumerate(query.returned[:depth], 1):
        relevant, golden = _golden(query.relevant.get(doc))
        text = query.texts.get(doc)
        number = texts.setdefault(short(text, HIT_TEXT_SHOWN), len(texts)) if text else None
        cell = "<td>" if number is None else f'<td data-t="{number}">'
        row = f"<tr{' class=rel' if relevant else ''}><td>{rank}</td>{cell}{_e(doc)}</td>"
        if query.scores:
            score = query.scores.get(doc)
            row += f"<td>{'' if score is None else f'{score:.4g}'}</td>"
        row += f"<td>{golden}</td>"
        if against is not None and reference is not None:
            row += f"<td>{rank_text(before.get(doc), known=against.depth)}</td>"
        if judged:
            row += f"<td>{_judged(query.judgments.get(doc))}</td>"
        if labelled:
            label = query.downstream.get(doc)
            row += f"<td>{'' if label is None else f'{label:.2f}'}</td>"
        rows.append(row + "</tr>")
    if not rows:
        rows.append('<tr><td colspan="3" class="muted">nothing came back</td></tr>')
    tables = [
        f'<div><h4>this run</h4><table class="ranked now"><thead>{head}</thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    ]
    if against is not None and reference is not None:
        tables.append(_reference_ranking(query, reference[:depth], against.label, asked))
    lines = []
    changed = against.changes.get(query.id, {}) if against is not None else {}
    known = against.depth if against is not None else None
    against_label = against.label if against is not None else ""
    for change in changed.values():
        moved = "".join(f"<li>{_e(line)}</li>" for line in move_lines(change, known))
        lines.append(
            f"<p><code>{_e(change.metric)}</code> {num(change.before)} → {num(change.after)} "
            f"(Δ {delta(change.delta, 4)} against the {_e(against_label)})</p>"
            + (f'<ul class="moves">{moved}</ul>' if moved else "")
        )
    tail = []
    deeper = [(doc, rank) for doc, rank in query.found_ranks.items() if rank > depth]
    if deeper:
        tail.append("relevant further down: " + ", ".join(f"{_e(d)} #{r}" for d, r in deeper))
    if query.missed:
        where = f"not in the {len(query.returned)} hits retrieved"
        tail.append(f"relevant, {where}: " + ", ".join(_e(doc) for doc in query.missed))
    more = "".join(f'<p class="muted">{line}</p>' for line in tail)
    return "".join(lines) + f'<div class="rankings">{"".join(tables)}</div>' + more


def _reference_ranking(query: QueryResult, reference: Sequence[str], label: str, asked: int) -> str:
    """The reference's ranking of ``query`` (a baseline's stored top k), each document's
    golden grade and its rank in this run (retrieved ``asked`` deep)."""
    now = {doc: rank for rank, doc in enumerate(query.returned, 1)}
    rows = []
    for rank, doc in enumerate(reference, 1):
        relevant, golden = _golden(query.relevant.get(doc))
        rows.append(
            f"<tr{' class=rel' if relevant else ''}><td>{rank}</td><td>{_e(doc)}</td>"
            f"<td>{golden}</td><td>{rank_text(now.get(doc), known=asked)}</td></tr>"
        )
    if not rows:
        rows.append('<tr><td colspan="4" class="muted">nothing came back</td></tr>')
    return (
        f'<div class="reference"><h4>{_e(label)} (top {len(reference)})</h4>'
        '<table class="ranked"><thead><tr><th>#</th><th>doc id</th><th>golden grade</th>'
        f"<th>now</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
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
        + _notes(ab_unjudged_notes(group))
        + f'<div class="charts">{"".join(charts)}</div>'
    )
