"""The Markdown summary renders as GitHub-flavoured Markdown: valid tables, closed <details>."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden
from markdown_it import MarkdownIt

GFM = MarkdownIt("commonmark", {"html": True}).enable("table")

HOSTILE = "a | b <script>alert(1)</script>\nnext `code`"


def tables(markdown: str) -> list[list[list[str]]]:
    """Every table as rows of cell texts, parsed by a real GFM table parser."""
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


class TagBalance(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in {"details", "summary", "script"}:
            self.open.append(tag)
        if tag == "script":
            self.problems.append("a <script> tag got through")

    def handle_endtag(self, tag: str) -> None:
        if tag in {"details", "summary"}:
            if not self.open or self.open[-1] != tag:
                self.problems.append(f"</{tag}> without its opening tag")
            else:
                self.open.pop()


def check_gfm(markdown: str) -> list[list[list[str]]]:
    """Tables parse with consistent widths; <details>/<summary> balance; no raw HTML leaks."""
    parsed = tables(markdown)
    raw_tables = len(re.findall(r"^\|(---\|)+$", markdown, flags=re.MULTILINE))
    assert len(parsed) == raw_tables, "a table did not parse as a GFM table"
    for rows in parsed:
        assert len({len(row) for row in rows}) == 1, rows
    html = GFM.render(markdown)
    balance = TagBalance()
    balance.feed(html)
    assert not balance.problems and not balance.open, (balance.problems, balance.open)
    assert "<script>" not in html
    return parsed


def test_summary_tables_and_details(project: pytest.Pytester) -> None:
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
    parsed = check_gfm(markdown)
    assert markdown.startswith("## Retrieval evaluation: ❌ 1 of 1 failed")
    metrics = parsed[0]
    assert metrics[0] == ["metric", "value", "95% CI", "threshold", "baseline", "Δ", "p", "verdict"]
    precision = next(row for row in metrics if row[0] == "`precision@3`")
    assert precision[1] == "0.5833" and precision[3] == "≥ 0.7" and "❌" in precision[7]
    assert "<details><summary>Worst queries by precision@3</summary>" in markdown
    worst = parsed[-1]
    assert worst[0][:3] == ["query", "text", "precision@3"] and worst[1][0] == "juice"


def test_regression_and_hostile_text(pytester: pytest.Pytester) -> None:
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
    parsed = check_gfm(markdown)
    assert "compared with the baseline recorded" in markdown
    assert any("❌ regressed" in row[7] for row in parsed[0][1:])
    assert "<details><summary>Queries that got worse on" in markdown
    assert "&lt;script&gt;" in markdown and "a \\| b" in markdown


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
    check_gfm(text)


def test_ab_table(pytester: pytest.Pytester) -> None:
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
    parsed = check_gfm(markdown)
    assert "### fruit: 2 retrievers side by side" in markdown
    ab = parsed[-1]
    assert ab[0] == ["metric", "keyword (reference)", "reversed", "Δ", "p"]


def test_unwritable_output_is_a_clear_failure(project: pytest.Pytester, tmp_path: Path) -> None:
    blocker = project.path / "file"
    blocker.write_text("", encoding="utf-8")
    result = project.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-markdown", "file/summary.md"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*could not write *file/summary.md*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
