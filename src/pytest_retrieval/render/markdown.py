"""GitHub-flavoured Markdown summary: for a PR comment or ``$GITHUB_STEP_SUMMARY``.

The facts of the terminal summary as tables a reviewer reads without opening the CI log: the
session's verdict and reasons; per evaluation the regressed metrics, then which queries changed
against the baseline (or the A/B reference) and where their relevant documents went, then the
metric table (value, CI, threshold, baseline, Δ, p, verdict) and notes on drift, staleness,
power and the judge; per-tag and worst-query detail last, folded in ``<details>``. The rows and
notes come from :mod:`.rows`, shared with the HTML page; this module only decides how they look
in Markdown, and what fits.

GitHub rejects a step summary over 1 MiB whole, so the summary keeps to a byte budget: the
detail is cut first (per-tag and per-query rows, then tag-threshold rows, then changed
queries), each cut saying how much it left out and where all of it is. User text never turns
into a link, a mention or an issue reference (see :func:`escape`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..limits import LATENCY
from .rows import (
    CHANGED_SHOWN,
    Cell,
    ab_rows,
    ab_unjudged_notes,
    depth_note,
    metric_rows,
    move_text,
    notes,
    overall,
    plain,
    shift_counts,
    tag_rows,
    worst_queries,
)
from .text import delta, num, p_value, short, title

if TYPE_CHECKING:
    from ..compare import ABGroup
    from ..results import (
        Comparison,
        EvaluationResult,
        HitMove,
        MetricChange,
        QueryChange,
        QueryResult,
    )
    from ..verdicts import Reason, Verdict

EMOJI = {"pass": "✅", "fail": "❌", "warn": "⚠️"}

#: the summary's size cap in bytes. GitHub refuses a step summary over 1 MiB whole (nothing is
#: shown); half of that leaves room for what other steps append to the same summary file (a
#: job can run pytest more than once) and keeps the page quick to open.
MARKDOWN_BUDGET = 512 * 1024
REASONS_SHOWN = 8  # reasons listed (session, then each evaluation) before "+N more"
REASON_CHARS = 1_000  # a reason's message is cut here (one runaway message cannot fill it)
MOVES_SHOWN = 4  # moved documents listed per changed query before "+N more"
TEXT_SHOWN = 80  # query text and judge reasons are cut here
TAG_METRICS = 4  # metrics (columns) in the per-tag table

#: Markdown punctuation that could start emphasis, code, links, images, math or a cell
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]~!#|$])")

#: where GitHub (cmark-gfm's autolinks, its @mentions, #123 and GH-123 references) would find
#: a link: a word joiner (U+2060: invisible, no line break) goes there. Each alternative is an
#: empty match between two characters.
_LINK_SPOTS = re.compile(
    r"""(?ix)
    (?<=/)(?=/)                                   # //host, scheme://
    | (?<=\bwww)(?=\.)                            # www.x.y
    | (?<=\bmailto)(?=:) | (?<=\bxmpp)(?=:)         # mailto:a
    | (?<=@)(?!(?<=\w@)\d+(?!\w|\.\w))            # @team, a@b.c (not recall@10)
    | (?<=\#)(?=\d)                               # #123, owner/repo#123
    | (?<=\bgh)(?=-\d)                            # GH-123
    """
)
#: a host name as linkify-style renderers find one without a scheme (``example.com``, and
#: ``conftest.py``: .py is a country's domain), not after a slash (``tests/conftest.py``)
_HOST = re.compile(r"(?<![/\\\w.-])[\w.-]+")
#: the dot before a top-level domain (linkify-it's list: any two letters, a few generic ones)
_TOP_LEVEL = re.compile(
    r"(?i)(?<=\w\.)(?=(?:[^\W\d_]{2}|com|net|org|edu|gov|biz|pro|web|xxx|info|name|shop|aero"
    r"|asia|coop|museum|рф)\b|xn--)"
)
_JOINER = "\u2060"
#: what any of the above needs nearby; text without it (most cells: numbers, ids, words) is
#: left as it is, quickly
_LINK_HINT = re.compile(r"(?i)//|www|mailto|xmpp|@|\#\d|gh-\d|\w\.[^\W\d_]")


def unlink(text: str) -> str:
    """``text`` with a word joiner wherever GitHub or a linkify-style renderer would make a
    link, a mention or an issue reference of it; it reads the same."""
    if not _LINK_HINT.search(text):
        return text
    text = _LINK_SPOTS.sub(_JOINER, text)
    return _HOST.sub(lambda host: _TOP_LEVEL.sub(_JOINER, host.group()), text)


def escape(text: object) -> str:
    """User text for a table cell or a line: HTML is inert, Markdown punctuation is literal
    (no emphasis, links or images), pipes cannot split a cell, line breaks become spaces, and
    nothing becomes an autolink, an @mention or an issue reference (an invisible word joiner
    breaks each: backslash escapes do not stop GitHub's mentions, which it finds after
    rendering)."""
    flat = unlink(" ".join(str(text).splitlines()))
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", flat)


def code(text: object) -> str:
    """``text`` as an inline code span: a fence longer than any backtick run inside it (GitHub
    links nothing inside code)."""
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
    results: Sequence[EvaluationResult],
    groups: Sequence[ABGroup],
    verdict: Verdict,
    *,
    budget: int = MARKDOWN_BUDGET,
    report: str | None = None,
    html: str | None = None,
    options: tuple[str, str] | None = None,
) -> str:
    """The whole summary in at most ``budget`` bytes (UTF-8): a heading with the session's
    verdict and reasons, one section per evaluation, then the A/B tables. ``report`` and
    ``html``: where the JSON report and the HTML page were written, named by the notes on
    what was cut; when not written, ``options``: the options of the tool that write them
    (pytest's ``("--retrieval-report", "--retrieval-html")``; default: every tool's)."""
    where = Where(report, html, options)
    status, word = overall(results, verdict)
    head = [f"## Retrieval evaluation: {EMOJI[status]} {escape(word)}", ""]
    head += _reasons(verdict.reasons, where)
    if not results:
        head += ["No evaluation ran: nothing was scored.", ""]
    parts = [Part.whole(head)]
    against: dict[tuple[str, str, str], list[Comparison]] = {}
    for group in groups:
        for other, comparison in group.others:
            against.setdefault(_key(other), []).append(comparison)
    for result in results:
        compared = [result.comparison] if result.comparison is not None else []
        parts += _evaluation(result, compared + against.get(_key(result), []), where)
    for group in groups:
        parts.append(Part.whole(_ab(group)))
    return "\n".join(fit(parts, budget, where)).rstrip() + "\n"


# ---------------------------------------------------------------------------- the budget


@dataclass(frozen=True)
class Where:
    """Where every row the summary leaves out can be read: the paths the outputs were
    written to, else the options that write them."""

    report: str | None
    html: str | None
    options: tuple[str, str] | None = None  # the tool's options for (report, html)

    @property
    def page(self) -> str:
        if self.html:
            return f"the HTML page {self.html}"
        if self.options:
            return f"the HTML page (write one with {self.options[1]})"
        return "the HTML page (--retrieval-html, or eval's and combine's --html)"

    @property
    def data(self) -> str:
        if self.report:
            return f"the JSON report {self.report}"
        if self.options:
            return f"the JSON report (write one with {self.options[0]})"
        return "the JSON report (--retrieval-report, or eval's and combine's --report)"

    def __str__(self) -> str:
        return f"{self.page} and {self.data}"


@dataclass(frozen=True)
class Part:
    """A piece of the summary: ``render(n)`` is its lines with at most ``n`` of its ``rows``
    rows (fewer rows come with a note of what was left out). ``rank`` 0 is kept whole; the
    budget cuts the highest rank first."""

    rank: int
    rows: int
    render: Callable[[int], list[str]]

    @classmethod
    def whole(cls, lines: list[str]) -> Part:
        return cls(0, 0, lambda _: lines)


def _size(lines: Sequence[str]) -> int:
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def fit(parts: Sequence[Part], budget: int, where: Where) -> list[str]:
    """The parts' lines in at most ``budget`` bytes: rank by rank, highest first, the
    largest row count every part of that rank can keep (the same for each, so no evaluation
    loses all its detail to another); if the parts kept whole are too big themselves, the
    summary is cut at a line and says so."""
    shown = [part.render(part.rows) for part in parts]
    sizes = [_size(lines) for lines in shown]
    for rank in sorted({part.rank for part in parts if part.rank}, reverse=True):
        if sum(sizes) <= budget:
            break
        members = [part for part in parts if part.rank == rank]
        rest = sum(size for part, size in zip(parts, sizes, strict=True) if part.rank != rank)
        low, high = 0, max(part.rows for part in members)
        while low < high:  # the largest n that fits (0 if none does)
            middle = (low + high + 1) // 2
            if rest + sum(_size(lines) for lines in _cut(members, middle)) <= budget:
                low = middle
            else:
                high = middle - 1
        kept = iter(_cut(members, low))
        for i, part in enumerate(parts):
            if part.rank == rank:
                shown[i] = next(kept)
                sizes[i] = _size(shown[i])
    lines = [line for part in shown for line in part]
    return lines if sum(sizes) <= budget else _clip(lines, budget, where)


def _cut(parts: Sequence[Part], n: int) -> list[list[str]]:
    return [part.render(min(n, part.rows)) for part in parts]


def _clip(lines: Sequence[str], budget: int, where: Where) -> list[str]:
    """The lines that fit in ``budget`` bytes with a closing note, any fold left open closed."""
    note = f"(the summary is cut here at {budget} bytes; every evaluation is in {escape(where)})"
    room = budget - _size(["", "</details>", "", note]) - 1
    kept: list[str] = []
    folded = False
    for line in lines:
        room -= _size([line])
        if room < 0:
            break
        kept.append(line)
        folded = line.startswith("<details>") or (folded and line != "</details>")
    return [*kept, "", *(["</details>", ""] if folded else []), note]


def _reasons(reasons: Sequence[Reason], where: Where) -> list[str]:
    """Up to :data:`REASONS_SHOWN` reasons as list items (each cut at :data:`REASON_CHARS`),
    every kind among them, then how many more of each kind; a blank line after them."""
    shown = _sample(reasons)
    lines = [
        f"- {EMOJI['fail']} {escape(r.kind)}: {escape(short(r.message, REASON_CHARS))}"
        for r in shown
    ]
    return [*lines, *_more(reasons, shown, where), ""] if lines else []


def _sample(reasons: Sequence[Reason]) -> list[Reason]:
    """Up to :data:`REASONS_SHOWN` of ``reasons`` in their order: the first of each kind,
    then the earliest others (600 failing tag thresholds cannot hide a regression)."""
    firsts: dict[str, int] = {}
    for i, reason in enumerate(reasons):
        firsts.setdefault(reason.kind, i)
    chosen = set(list(firsts.values())[:REASONS_SHOWN])
    for i in range(len(reasons)):
        if len(chosen) >= REASONS_SHOWN:
            break
        chosen.add(i)
    return [reasons[i] for i in sorted(chosen)]


def _more(reasons: Sequence[Reason], shown: Sequence[Reason], where: Where) -> list[str]:
    """``- … 1,797 more reasons (1,794 threshold, 3 regression) in ...``, if any."""
    left: dict[str, int] = {}
    for reason in reasons:
        left[reason.kind] = left.get(reason.kind, 0) + 1
    for reason in shown:
        left[reason.kind] -= 1
    kinds = ", ".join(f"{count:,} {kind}" for kind, count in left.items() if count)
    hidden = len(reasons) - len(shown)
    return [f"- … {hidden:,} more reasons ({escape(kinds)}) in {escape(where)}"] if hidden else []


# ---------------------------------------------------------------------------- an evaluation


def _key(result: EvaluationResult) -> tuple[str, str, str]:
    return result.golden_source, result.golden_name, result.retriever_id


def _evaluation(
    result: EvaluationResult, compared: Sequence[Comparison], where: Where
) -> list[Part]:
    """Verdict, regressed metrics and changed queries first (the first screen); the metric
    table and notes; then the per-tag and worst-query detail the budget cuts first."""
    head = [f"### {'✅' if result.verdict.passed else '❌'} {escape(title(result))}", ""]
    moved = [(c, change) for c in compared if not c.stale for change in c.regressed]
    head += [_regressed(c, change) for c, change in moved]
    parts = [Part.whole(head + ([""] if moved else []))]
    parts += [_changed(c, where) for c in compared if c.shifts and not c.stale]
    parts.append(_metric_table(result, where))
    parts.append(Part.whole(_notes(result, where)))
    if result.per_tag:
        parts.append(_tags(result, where))
    parts.append(_worst(result, where))
    return parts


def _regressed(comparison: Comparison, change: MetricChange) -> str:
    """``- ❌ regressed: `recall@10` 0.8000 → 0.7500 (-0.0500, p 0.0020) against ...``."""
    if change.metric == LATENCY:
        values = f"{change.baseline:.1f} ms → {change.current:.1f} ms ({delta(change.delta, 1)})"
    else:
        p = p_value(change.p_adjusted if change.p_adjusted is not None else change.p_value)
        values = f"{num(change.baseline)} → {num(change.current)} ({delta(change.delta, 4)}"
        values += f", p {p})" if p else ")"
    return (
        f"- {EMOJI['fail']} {escape(change.verdict)}: {code(change.metric)} {values} "
        f"against {escape(comparison.reference)}"
    )


def _changed(comparison: Comparison, where: Where) -> Part:
    """How many queries got worse / better / stayed per gated metric, then per metric the
    largest drops and gains (the budget keeps fewer), with where their documents went."""
    lines = [f"#### Changed queries against {escape(comparison.reference)}", ""]
    header, *counts = shift_counts(comparison)
    rows = [[plain(h) for h in header]]
    rows += [[[("code", metric)], *map(plain, values)] for metric, *values in counts]
    lines += [*table(rows), ""]
    tables = []
    for metric, shift in comparison.shifts.items():
        worse, better = shift.worst(CHANGED_SHOWN), shift.best(CHANGED_SHOWN)
        judged = any(m.reason for change in worse + better for m in change.moves)
        titles = ["query", "text", "tags", metric, "where its documents went"]
        rows = [[plain(h) for h in titles + (["judge's reasons"] if judged else [])]]
        rows += [_change_row(change, shift.depth, judged) for change in worse + better]
        head, body = _split(table(rows))
        tables.append((shift, head, body[: len(worse)], body[len(worse) :]))

    def render(n: int) -> list[str]:
        shown = list(lines)
        for shift, head, worse, better in tables:
            queries = "query" if shift.worse == 1 else "queries"
            title = (
                f"**{escape(shift.metric)}: {shift.worse} {queries} worse, {shift.better} better**"
            )
            if n < shift.worse or n < shift.better:
                title += (
                    f" (showing {min(n, shift.worse)} of {shift.worse} worse and "
                    f"{min(n, shift.better)} of {shift.better} better; every changed query is in "
                    f"{escape(where.data)})"
                )
            shown += [title, ""]
            note = depth_note(shift)
            if note:
                shown += [f"_{escape(note)}_", ""]
            if worse[:n] or better[:n]:
                shown += [*head, *worse[:n], *better[:n], ""]
        return shown

    return Part(1, CHANGED_SHOWN, render)


def _split(lines: list[str]) -> tuple[list[str], list[str]]:
    """A table's header lines (the header and its rule) and its body, a line a row."""
    return lines[:2], lines[2:]


def _change_row(change: QueryChange, depth: int, judged: bool) -> list[Cell]:
    """One changed query: id, text, tags, before → after, where its documents went (the
    relevant ones that left, entered or moved within the top k, then other judged hits that
    moved; :data:`MOVES_SHOWN` at most), the judge's reasons."""
    lost, gained = change.lost, change.gained
    kinds = (
        (f"left the top {change.k}", lost),
        (f"entered the top {change.k}", gained),
        (f"moved within the top {change.k}", [m for m in change.moves if _within(m, change)]),
        ("judged", [m for m in change.moves if not (m.grade or 0) > 0 and _judged(m)]),
    )
    room, pieces = MOVES_SHOWN, []
    for label, moves in kinds:
        if moves and room > 0:
            pieces.append(
                f"{label}: "
                + "; ".join(move_text(m, change.depth or depth, change.asked) for m in moves[:room])
            )
        room -= len(moves)
    moved = " · ".join(pieces) + (f" · +{-room} more" if room < 0 else "")
    status = "fail" if change.delta < 0 else "pass"
    row: list[Cell] = [
        plain(change.id),
        plain(short(change.query, TEXT_SHOWN)),
        plain(short(", ".join(change.tags), TEXT_SHOWN)),
        [(status, f"{num(change.before)} → {num(change.after)} ({delta(change.delta, 4)})")],
        plain(moved),
    ]
    if judged:
        reasons = [f"{m.doc}: {short(m.reason, TEXT_SHOWN)}" for m in change.moves if m.reason]
        row.append(plain("; ".join(reasons[:MOVES_SHOWN])))
    return row


def _within(move: HitMove, change: QueryChange) -> bool:
    """A relevant document that moved but stayed in the top k."""
    return (move.grade or 0) > 0 and move not in change.lost and move not in change.gained


def _judged(move: HitMove) -> bool:
    return move.judge_before is not None or move.judge_after is not None


def _metric_table(result: EvaluationResult, where: Where) -> Part:
    """The metric table; the budget cuts tag-threshold rows, passing ones first."""
    rows = metric_rows(result)
    lines = table(rows)
    count = len(result.metrics)
    extra = rows[1 + count :]
    latency = 1 if extra and extra[-1][0] == [("code", LATENCY)] else 0
    head, gates, tail = (
        lines[: 2 + count],
        lines[2 + count : len(lines) - latency],
        lines[len(lines) - latency :],
    )
    failing = {
        i for i, row in enumerate(extra[: len(gates)]) if any(s == "fail" for s, _ in row[-1])
    }
    order = sorted(range(len(gates)), key=lambda i: i not in failing)

    def render(n: int) -> list[str]:
        shown = [*head, *(gates[i] for i in sorted(order[:n])), *tail, ""]
        if n < len(gates):
            shown += [
                f"- {len(gates) - n} of {len(gates)} tag thresholds not shown (failing ones "
                f"are kept first); every one is in {escape(where)}",
                "",
            ]
        return shown

    return Part(2, len(gates), render)


def _notes(result: EvaluationResult, where: Where) -> list[str]:
    """The notes under the table; the verdict's reasons among them are sampled."""
    reasons = {f"{r.kind}: {r.message}": r for r in result.verdict.reasons}
    shown = {id(r) for r in _sample(result.verdict.reasons)}
    lines: list[str] = []
    for note in notes(result):
        reason = reasons.get(note.text) if note.status == "fail" else None
        if reason is not None and id(reason) not in shown:
            continue
        mark = f"{EMOJI[note.status]} " if note.status in EMOJI else ""
        text = escape(short(note.text, REASON_CHARS))
        lines.append(f"- {mark}{text}" + (f": {code(note.code)}" if note.code else ""))
    sampled = [r for r in result.verdict.reasons if id(r) in shown]
    return [*lines, *_more(result.verdict.reasons, sampled, where), ""]


def _tags(result: EvaluationResult, where: Where) -> Part:
    """The per-tag table, folded; the budget keeps the tags lowest on the first metric."""
    head, rows = _split(table(tag_rows(result, limit=TAG_METRICS)))
    first = next(iter(result.metrics), "")
    values = [v.get(first, math.nan) for v in result.per_tag.values()]
    order = sorted(range(len(rows)), key=lambda i: (math.isnan(values[i]), values[i]))

    def render(n: int) -> list[str]:
        note = escape(
            f"{len(rows) - n} of {len(rows)} tags not shown (kept: the lowest on {first}); "
            f"every tag is in {where}"
        )
        if n == 0:
            return [f"- {note}", ""]
        body = [*head, *(rows[i] for i in sorted(order[:n]))]
        return details("By tag", body + (["", note] if n < len(rows) else []))

    return Part(3, len(rows), render)


def _worst(result: EvaluationResult, where: Where) -> Part:
    """The worst queries of the first failing gate (or of the first metric), folded."""
    failing = [o for o in result.verdict.outcomes if not o.passed]
    metric = failing[0].threshold.metric.name if failing else next(iter(result.metrics), "")
    if not metric:
        return Part.whole([])
    tag = failing[0].threshold.tag if failing else None
    header = ("query", "text", metric, "missed relevant", "relevant found at")
    rows = [[plain(h) for h in header]]
    rows += [_query_row(q, metric) for q in worst_queries(result, metric, tag)]
    head, body = _split(table(rows))

    def render(n: int) -> list[str]:
        if n == 0:
            return [f"- worst queries by {escape(metric)} not shown; see {escape(where)}", ""]
        return details(f"Worst queries by {metric}", head + body[:n])

    return Part(3, len(body), render)


def _query_row(query: QueryResult, metric: str) -> list[Cell]:
    missed = ", ".join(query.missed[:5])
    if len(query.missed) > 5:
        missed += f" (+{len(query.missed) - 5})"
    found = ", ".join(f"{doc} #{rank}" for doc, rank in query.found_ranks.items())
    return [
        plain(query.id),
        plain(short(query.query, TEXT_SHOWN)),
        plain(num(query.metrics.get(metric, math.nan))),
        plain(missed),
        [("fail", f"error: {query.error}")] if query.error else plain(found),
    ]


def _ab(group: ABGroup) -> list[str]:
    reference = group.reference
    warnings = [
        f"- {EMOJI['warn']} {escape(note.text)}: {code(note.code)}"
        for note in ab_unjudged_notes(group)
    ]
    return [
        f"### {escape(reference.golden_name)}: {len(group.others) + 1} retrievers side by side",
        "",
        "Δ and paired two-sided p-values (Holm-adjusted) against "
        f"{escape(reference.retriever_id)}; ✅/❌: better/worse beyond the allowed change with "
        "Holm-adjusted p < alpha over the gated metrics (the others show raw p).",
        "",
        *table(ab_rows(group)),
        "",
        *([*warnings, ""] if warnings else []),
    ]
