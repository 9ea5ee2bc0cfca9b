"""The Markdown summary renders as GitHub-flavoured Markdown: valid tables, closed <details>,
and user text that stays text (no HTML, links, images or broken cells)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import DOCS, GOLDEN, KEYWORD_RETRIEVER, write_golden
from markdown_it import MarkdownIt

from pytest_retrieval import EvaluationResult, evaluate
from pytest_retrieval.compare import ab_groups, compare_to_baseline, entry_from_result
from pytest_retrieval.gate import decide, session_verdict
from pytest_retrieval.render.markdown import render_markdown
from pytest_retrieval.results import Comparison

#: GitHub's dialect as far as markdown-it goes: tables, strikethrough, raw HTML, autolinks
GFM = MarkdownIt("gfm-like", {"html": True, "linkify": True})

HOSTILE = "a|b <script>x</script>\n`c` **b** [l](http://e.v) ![i](http://e.v) $x$ \\| ~~s~~"


class Rendered(HTMLParser):
    """The HTML GitHub would show: which tags it has, whether they balance, and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.tags: set[str] = set()
        self.problems: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self.tags.add(tag)
        if tag in {"details", "summary"}:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in {"details", "summary"}:
            if not self.open or self.open[-1] != tag:
                self.problems.append(f"</{tag}> without its opening tag")
            else:
                self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def tables(markdown: str) -> list[list[list[str]]]:
    """Every table as rows of cell sources, parsed by a real GFM table parser."""
    found: list[list[list[str]]] = []
    rows: list[list[str]] = []
    cells: list[str] | None = None
    for token in GFM.parse(markdown):
        if token.type == "table_open":
            rows = []
        elif token.type == "tr_open":
            cells = []
        elif token.type == "inline" and cells is not None:
            cells.append(token.content)
        elif token.type == "tr_close" and cells is not None:
            rows.append(cells)
            cells = None
        elif token.type == "table_close":
            found.append(rows)
    return found


def check_gfm(markdown: str) -> tuple[list[list[list[str]]], Rendered]:
    """Tables parse with consistent widths; <details>/<summary> balance; only our own tags."""
    parsed = tables(markdown)
    raw_tables = len(re.findall(r"^\|(---\|)+$", markdown, flags=re.MULTILINE))
    assert len(parsed) == raw_tables, "a table did not parse as a GFM table"
    for rows in parsed:
        assert len({len(row) for row in rows}) == 1, rows
    rendered = Rendered()
    rendered.feed(GFM.render(markdown))
    assert not rendered.problems and not rendered.open, (rendered.problems, rendered.open)
    allowed = {"h2", "h3", "h4", "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td"}
    allowed |= {"details", "summary", "code", "strong"}
    assert rendered.tags <= allowed, rendered.tags - allowed  # no <script>, <a>, <img>, <em>...
    return parsed, rendered


def metric_table(parsed: list[list[list[str]]]) -> list[list[str]]:
    """The (first) metric table among the parsed tables."""
    return next(rows for rows in parsed if rows[0][:2] == ["metric", "value"])


JUDGE = {
    "model": "m",
    "prompt_version": "v1",
    "calls": 7,
    "cache_hits": 5,
    "prompt_tokens": 100,
    "completion_tokens": 20,
    "estimated_cost_usd": 0.0042,
    "graded": 12,
    "pairs": 12,
    "coverage": 1.0,
}


def md(results: list[EvaluationResult]) -> str:
    return render_markdown(results, (), session_verdict(results, ()))


def search(query: str, k: int) -> list[str]:
    """The helpers' keyword retriever, in process."""
    words = set(query.split())
    return sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]


def fruit(tmp_path: Path, **changes: object) -> Path:
    data = json.loads(json.dumps(GOLDEN))
    data.update(changes)
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_hostile_text_stays_text(tmp_path: Path) -> None:
    golden = json.loads(json.dumps(GOLDEN))
    golden["name"] = "fruit | <b>set</b>"
    golden["queries"][0].update(id="q|1 <i> &amp;", query=HOSTILE, tags=["t|<x>"])
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(golden), encoding="utf-8")
    result = evaluate(search, path, thresholds={"recall@3": 1.0, "precision@3[t|<x>]": 0.9})
    result = replace(result, retriever_id="ret | <u>x</u>")
    markdown = md([result])
    parsed, rendered = check_gfm(markdown)
    text = "".join(rendered.text).replace("\u2060", "")  # the joiners that stop autolinks
    flat = HOSTILE.replace("\n", " ")
    assert len(HOSTILE) < 80 and flat in text  # shown as typed, nothing interpreted
    assert "fruit | <b>set</b> [ret | <u>x</u>]" in text and "q|1 <i> &amp;" in text
    metrics = metric_table(parsed)
    assert metrics[0] == ["metric", "value", "95% CI", "threshold", "baseline", "Δ", "p", "verdict"]
    tag_gate = next(row for row in metrics if "precision@3" in row[0] and "t" in row[0])
    assert tag_gate[3] == "≥ 0.9" and "❌" in tag_gate[7]
    assert parsed[-1][0][:3] == ["query", "text", "recall@3"]  # the worst queries, folded


def test_tables_thresholds_tags_and_worst_queries(tmp_path: Path) -> None:
    result = evaluate(search, fruit(tmp_path), thresholds={"precision@3": 0.7})
    markdown = md([result])
    parsed, _ = check_gfm(markdown)
    assert markdown.startswith("## Retrieval evaluation: ❌ 1 of 1 failed")
    precision = next(row for row in parsed[0] if row[0] == "`precision@3`")
    assert precision[1] == "0.5833" and precision[3] == "≥ 0.7" and "❌" in precision[7]
    assert precision[4:7] == ["", "", ""]  # no baseline: blank cells
    assert "<details><summary>By tag</summary>\n\n|" in markdown
    assert parsed[1][0][:2] == ["tag", "queries"] and [r[0] for r in parsed[1][1:]] == [
        "drink",
        "fruit",
    ]
    assert "<details><summary>Worst queries by precision@3</summary>\n\n|" in markdown
    assert parsed[-1][1][0] == "juice"


def test_baseline_drift_judge_and_power_notes(tmp_path: Path) -> None:
    before = evaluate(search, fruit(tmp_path))
    entry = entry_from_result(before, {"commit": "0123456789abcdef"}, "2025-01-02T03:04:05+00:00")
    del entry.queries["juice"]  # the golden set gained a query since
    worse = evaluate(lambda q, k: search(q, 6)[::-1][:k], fruit(tmp_path))
    worse = replace(
        worse,
        comparison=compare_to_baseline(worse, entry, {}, alpha=1.0),
        baseline_path=str(tmp_path / "golden.json.baseline.json"),
        power={"recall@3": (0.3, 0.01)},
        judge=JUDGE,
    )
    worse = decide(worse)
    markdown = md([worse])
    parsed, rendered = check_gfm(markdown)
    text = "".join(rendered.text)
    assert (
        "compared with baseline (recorded 2025-01-02T03:04:05+00:00, commit 0123456789ab)" in text
    )
    assert "golden set changed since the baseline: added 1 (juice)" in text
    assert "compared on the 3 unchanged queries" in text
    assert "judge m (prompt v1): 7 calls, 5 cache hits, 120 tokens, ~$0.0042" in text
    assert "coverage 100.0%" in text
    assert "power: 3 queries detect a 0.3 drop in recall@3" in text
    regressed = [row for row in metric_table(parsed)[1:] if "❌ regressed" in row[7]]
    assert regressed and all(row[4] and row[5].startswith("-") for row in regressed)
    # before the metric table: the queries that got worse, and where their documents went
    changed = markdown.split("| metric | value |")[0].replace("\u2060", "")
    assert "**recall@3: 3 queries worse, 0 better**" in changed
    assert (
        "| apple | apple | fruit | ❌ 1.0000 → 0.0000 (-1.0000) | left the top 3: "
        "d1 \\#1 → below \\#3; d4 \\#2 → below \\#3 |"
    ) in changed


def test_stale_and_missing_baselines_say_what_to_do(tmp_path: Path) -> None:
    result = evaluate(search, fruit(tmp_path))
    stale_comparison = Comparison("baseline", 0, rejudged=["apple"], stale="no query unchanged")
    result = decide(replace(result, comparison=stale_comparison))
    stale = md([result])
    check_gfm(stale)
    assert "⚠️ stale baseline: no query unchanged; not compared. Refresh it with: `pytest " in stale
    result = replace(
        result,
        comparison=None,
        baseline_note="missing",
        baseline_path=str(tmp_path / "golden.json.baseline.json"),
    )
    missing = md([result])
    check_gfm(missing)
    assert "record one on main with: `pytest --retrieval-golden" in missing
    assert "--retrieval-update-baseline`" in missing


def test_ab_table_has_a_column_group_per_retriever(tmp_path: Path) -> None:
    path = fruit(tmp_path)
    results = [
        evaluate(search, path, retriever_id="keyword"),
        evaluate(lambda q, k: search(q, 6)[::-1][:k], path, retriever_id="reversed"),
        evaluate(lambda q, k: search(q, k)[:1], path, retriever_id="top_1"),
    ]
    markdown = render_markdown(
        results, ab_groups(results, None, 0.05), session_verdict(results, ())
    )
    parsed, _ = check_gfm(markdown)
    assert "### fruit: 3 retrievers side by side" in markdown
    ab = parsed[-1]
    header = ["metric", "keyword (reference)", "reversed", "Δ", "p", "top\\_1", "Δ", "p"]
    assert ab[0] == header
    recall = next(row for row in ab if row[0] == "`recall@3`")
    assert recall[1] == "1.0000" and recall[2] == f"{results[1].metrics['recall@3']:.4f}"
    assert recall[3].endswith(f"{results[1].metrics['recall@3'] - 1:+.4f}")


# ---------------------------------------------------------------------------- through pytest


def test_ab_table_through_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        KEYWORD_RETRIEVER.replace(
            '@pytest.fixture(scope="session")\ndef retriever():\n    return search',
            '@pytest.fixture(scope="session", params=["keyword", "reversed"])\n'
            "def retriever(request):\n"
            '    if request.param == "reversed":\n'
            "        return lambda query, k: search(query, 6)[::-1][:k]\n"
            "    return search",
        )
    )
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-markdown", "s.md")
    result.assert_outcomes(passed=2)
    markdown = (pytester.path / "s.md").read_text("utf-8")
    parsed, _ = check_gfm(markdown)
    assert "### fruit: 2 retrievers side by side" in markdown
    assert parsed[-1][0] == ["metric", "keyword (reference)", "reversed", "Δ", "p"]


def test_plugin_writes_the_summary(project: pytest.Pytester) -> None:
    result = project.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-markdown",
        "summary.md",
        "--retrieval-threshold",
        "precision@3=0.7",
    )
    result.assert_outcomes(failed=1)
    markdown = (project.path / "summary.md").read_text("utf-8")
    parsed, _ = check_gfm(markdown)
    assert markdown.startswith("## Retrieval evaluation: ❌ 1 of 1 failed")
    assert "❌" in next(row for row in parsed[0] if row[0] == "`precision@3`")[7]


def test_regression_with_hostile_text_through_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    golden = {**GOLDEN, "queries": [dict(q) for q in GOLDEN["queries"]]}
    golden["queries"][0]["query"] = "apple " + HOSTILE
    write_golden(pytester, golden)
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    worse = KEYWORD_RETRIEVER.replace("return ranked[:k]", "return ranked[::-1][:k]")
    pytester.makeconftest(worse)
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-markdown",
        "summary.md",
        "--retrieval-alpha",
        "1",
    )
    result.assert_outcomes(failed=1)
    markdown = (pytester.path / "summary.md").read_text("utf-8")
    parsed, _ = check_gfm(markdown)
    assert "compared with baseline golden.json.baseline.json (recorded" in markdown
    assert any("❌ regressed" in row[7] for row in metric_table(parsed)[1:])
    assert "#### Changed queries against baseline golden.json.baseline.json" in markdown
    assert re.search(r"\*\*recall@3: \d queries worse, 0 better\*\*", markdown)
    assert "&lt;script&gt;" in markdown and "a\\|b" in markdown


def test_github_step_summary_is_appended_to(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = project.path / "step_summary.md"
    summary.write_text("# Earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    project.runpytest("--retrieval-golden", "golden.json").assert_outcomes(passed=1)
    text = summary.read_text("utf-8")
    assert text.startswith("# Earlier step\n")  # what other steps wrote is kept
    assert "## Retrieval evaluation: ✅ all passed" in text
    check_gfm(text.split("\n", 1)[1])


def test_unwritable_output_is_a_clear_failure(project: pytest.Pytester) -> None:
    blocker = project.path / "file"
    blocker.write_text("", encoding="utf-8")
    result = project.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-markdown", "file/summary.md"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*could not write *file/summary.md*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
