"""The reviewer's HTML page in a real headless Chromium, at a desktop width and at 400 px:
what changed comes first, the query table has the gated metrics with baseline and Δ columns
and sorts by Δ, an opened row shows the baseline's ranking, the curves' axes are labelled,
and the page never scrolls sideways. Screenshots go to $RETRIEVAL_SCREENSHOTS (default: the
test's tmp_path); their paths are printed."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import BROWSER_ARGS, CHROMIUM

from pytest_retrieval import evaluate, load_golden
from pytest_retrieval.baseline import BaselineEntry
from pytest_retrieval.compare import compare_to_baseline, entry_from_result
from pytest_retrieval.gate import decide, session_verdict
from pytest_retrieval.render.html import render_html
from pytest_retrieval.results import EvaluationResult

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = [1280, 400]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def degraded() -> tuple[EvaluationResult, BaselineEntry]:
    """BM25 on Cranfield with its first two hits pushed to the end of the 100, compared and
    gated against BM25's baseline: MRR and nDCG regress, relevant documents leave the top 10."""
    spec = importlib.util.spec_from_file_location("example_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    bm25 = module.build_bm25_search()

    def pushed_down(query: str, k: int) -> list[str]:
        hits = list(bm25(query, k))
        return hits[2:] + hits[:2]

    golden = load_golden(ROOT / "example_golden" / "cranfield.json")
    entry = entry_from_result(
        evaluate(bm25, golden, retriever_id="bm25"), {}, "2025-01-01T00:00:00+00:00"
    )
    result = evaluate(pushed_down, golden, retriever_id="bm25")
    compared = replace(result, comparison=compare_to_baseline(result, entry, {}, alpha=0.05))
    return decide(compared), entry


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("RETRIEVAL_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Any:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def _open(browser: Any, file: Path, width: int, problems: list[str], **options: Any) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900}, **options)
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: None if r.url.startswith("file:") else problems.append(r.url))
    page.goto(file.as_uri())
    return page


def _no_sideways_scroll(page: Any) -> None:
    widths = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], f"the page scrolls sideways: {widths}"


def _shot(page: Any, folder: Path, name: str) -> None:
    path = folder / name
    page.screenshot(path=str(path), full_page=False)
    print(f"screenshot: {path}")
    assert path.stat().st_size > 5_000


@pytest.mark.parametrize("width", WIDTHS)
def test_reviewer_page(
    degraded: tuple[EvaluationResult, BaselineEntry],
    browser: Any,
    screenshots: Path,
    tmp_path: Path,
    width: int,
) -> None:
    result, entry = degraded
    comparison = result.comparison
    assert comparison is not None
    file = tmp_path / "report.html"
    file.write_text(
        render_html(
            [result],
            baselines={0: entry},
            verdict=session_verdict([result], ()),
            created="2025-06-01T12:30:00+00:00",
            git={"commit": "0123456789abcdef", "dirty": False},
        ),
        encoding="utf-8",
    )
    problems: list[str] = []
    page = _open(browser, file, width, problems)
    try:
        # the header, then what changed, before the summary
        header = page.inner_text("header")
        assert "2025-06-01 12:30:00" in header and "0123456789ab" in header
        first = page.evaluate("() => document.querySelector('main > header').nextElementSibling.id")
        assert first == "changed"
        panel_top = page.locator("#changed").bounding_box()["y"]
        assert panel_top < page.locator("#eval-0").bounding_box()["y"]
        panel = page.inner_text("#changed")
        regressed = comparison.regressed[0]
        assert f"{regressed.metric} regressed" in panel
        worst = comparison.shifts["ndcg@10"].worst(1)[0]
        move = worst.lost[0]
        assert f"{move.doc} #{move.before} → #{move.after}" in panel
        _no_sideways_scroll(page)
        _shot(page, screenshots, f"changed-{width}.png")

        # the query table: gated and failing metrics, baseline and Δ columns
        heads = page.eval_on_selector_all("#queries-0 thead th", "hs => hs.map(h => h.innerText)")
        heads = [h.replace("↕", "").strip() for h in heads]
        for metric in result.gated:
            at = heads.index(metric)
            assert heads[at + 1 : at + 3] == ["baseline", f"Δ {metric}"]
        ids = "rs => rs.map(r => r.cells[0].innerText.trim())"
        before = page.eval_on_selector_all("#queries-0 tr.q", ids)
        delta_head = page.locator("#queries-0 th", has_text="Δ ndcg@10")
        delta_head.click()  # the largest drop first
        column = heads.index("Δ ndcg@10")
        values = page.eval_on_selector_all(
            "#queries-0 tr.q", f"rs => rs.map(r => parseFloat(r.cells[{column}].innerText))"
        )
        after = page.eval_on_selector_all("#queries-0 tr.q", ids)
        assert after != before and values == sorted(values)
        assert after[0] == worst.id and values[0] == pytest.approx(worst.delta, abs=5e-5)
        _no_sideways_scroll(page)

        # the opened row: the baseline's ranking beside this run's, with the ranks now
        row = page.locator("#queries-0 tr.q").first
        row.click()
        hits = page.locator("#queries-0 tr.hits").first
        assert hits.is_visible() and row.get_attribute("aria-expanded") == "true"
        reference = hits.locator(".reference")
        assert reference.is_visible()
        shown = reference.inner_text()
        assert "baseline (top 10)" in shown
        assert f"#{move.after}" in shown and move.doc in shown
        assert "baseline rank" in hits.inner_text()
        # each hit's text (cut) under its id, and its score, in this run's ranking
        first_hit = hits.locator("table.now tbody tr").first
        doc = first_hit.locator("td").nth(1)
        assert doc.locator(".hit").is_visible()
        assert len(doc.locator(".hit").inner_text()) > 20
        float(first_hit.locator("td").nth(2).inner_text())  # the retriever's score
        _no_sideways_scroll(page)
        hits.scroll_into_view_if_needed()
        _shot(page, screenshots, f"opened-row-{width}.png")

        # curves: both axes labelled, visible
        x_axis = page.locator("svg text.axis.x", has_text="k (rank cutoff)").first
        y_axis = page.locator("svg text.axis.y", has_text="mean recall@k").first
        assert x_axis.is_visible() and y_axis.is_visible()
        assert page.get_by_text("stored to k = 10").first.is_visible()
        page.locator(".charts").first.scroll_into_view_if_needed()
        _no_sideways_scroll(page)
        _shot(page, screenshots, f"curves-{width}.png")
    finally:
        page.close()
    assert problems == []


def test_without_javascript_rows_still_open(
    degraded: tuple[EvaluationResult, BaselineEntry], browser: Any, tmp_path: Path
) -> None:
    result, entry = degraded
    file = tmp_path / "report.html"
    file.write_text(
        render_html([result], baselines={0: entry}, verdict=session_verdict([result], ())),
        encoding="utf-8",
    )
    problems: list[str] = []
    page = _open(browser, file, 400, problems, java_script_enabled=False)
    try:
        assert page.locator("#queries-0 tr.q").count() == len(result.queries)
        details = page.locator("#queries-0 tr.hits details").first
        assert details.is_visible() and not details.locator(".reference").is_visible()
        details.locator("summary").click()
        assert details.locator(".reference").is_visible()
        _no_sideways_scroll(page)
    finally:
        page.close()
    assert problems == []


def test_nothing_ran_page(browser: Any, tmp_path: Path, screenshots: Path) -> None:
    from pytest_retrieval.verdicts import USAGE, Reason, Verdict

    verdict = Verdict(reasons=(Reason(USAGE, "golden.json:3: 'k' must be a positive integer"),))
    file = tmp_path / "report.html"
    file.write_text(render_html([], verdict=verdict), encoding="utf-8")
    problems: list[str] = []
    page = _open(browser, file, 400, problems)
    try:
        text = page.inner_text("body")
        assert "failed (1 reason)" in text
        assert "usage: golden.json:3: 'k' must be a positive integer" in text
        _no_sideways_scroll(page)
        _shot(page, screenshots, "nothing-ran-400.png")
    finally:
        page.close()
    assert problems == []


def test_hit_texts_are_the_queries_own_and_cannot_break_the_page(
    browser: Any, tmp_path: Path
) -> None:
    """Review of issue 12: a hit's text holding "<!-- <script>" silently turned the page's
    script off (no sorting, no rows opening, no texts), and texts were keyed by doc id for
    the whole page, so a per-query snippet showed another query's text."""
    from pytest_retrieval.results import QueryResult

    def query(qid: str, snippet: str) -> QueryResult:
        return QueryResult(
            qid,
            f"query {qid}",
            (),
            {"d1": 1},
            ["d1", "d2"],
            {"recall@2": 1.0},
            1.0,
            texts={"d1": snippet, "d2": "x <!-- <script> y </script> z"},
        )

    golden_queries = [query("a", "snippet for a"), query("b", "snippet for b")]
    base = evaluate(lambda q, k: ["d1", "d2"], load_golden(ROOT / "example_golden" / "tiny.json"))
    result = replace(base, queries=golden_queries, metrics={"recall@2": 1.0}, k=2)
    page_file = tmp_path / "page.html"
    page_file.write_text(render_html([result], verdict=session_verdict([result], [])))
    problems: list[str] = []
    page = _open(browser, page_file, 1280, problems)
    assert page.evaluate("() => document.scripts.length") == 3, "a script was swallowed"
    page.locator("#queries-0 tr.q").nth(1).click()
    opened = page.locator("#queries-0 tr.hits").nth(1)
    cells = opened.locator("table.now tbody tr td:nth-child(2)")
    assert cells.nth(0).inner_text() == "d1\nsnippet for b"  # b's own snippet, not a's
    assert cells.nth(1).inner_text() == "d2\nx <!-- <script> y </script> z"
    assert problems == []
