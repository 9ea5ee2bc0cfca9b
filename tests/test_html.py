"""The HTML report: curve numbers, escaping, and a real headless Chromium on Cranfield."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden

from pytest_retrieval import evaluate, load_golden
from pytest_retrieval.compare import ab_groups
from pytest_retrieval.evaluation import EvaluationResult
from pytest_retrieval.html_report import curve, render_html

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def cranfield_ab() -> list[EvaluationResult]:
    """BM25 on Cranfield, and a variant that reverses each top 10: two retrievers."""
    spec = importlib.util.spec_from_file_location("example_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    search = module.build_bm25_search()

    def reversed_top(query: str, k: int) -> list[str]:
        hits = list(search(query, k))
        return hits[:10][::-1] + hits[10:]

    golden = load_golden(ROOT / "example_golden" / "cranfield.json")
    return [
        evaluate(search, golden, retriever_id="bm25"),
        evaluate(reversed_top, golden, retriever_id="bm25-reversed"),
    ]


def test_curve_at_k_is_the_metric(cranfield_ab: list[EvaluationResult]) -> None:
    result = cranfield_ab[0]
    runs = [q.returned for q in result.queries]
    qrels = [q.relevant for q in result.queries]
    recall = curve(runs, qrels, "recall", 100)
    assert recall[9] == pytest.approx(result.metrics["recall@10"], abs=1e-12)
    assert recall[99] == pytest.approx(result.metrics["recall@100"], abs=1e-12)
    assert recall == sorted(recall)  # recall@k never falls as k grows
    ndcg = curve(runs, qrels, "ndcg", 10)
    assert ndcg[9] == pytest.approx(result.metrics["ndcg@10"], abs=1e-12)


def test_user_text_is_escaped(tmp_path: Path) -> None:
    data = json.loads(json.dumps(GOLDEN))
    data["queries"][0]["query"] = "apple </script><script>alert(1)</script> <b>x</b>"
    data["queries"][0]["tags"] = ['"><img src=x onerror=alert(1)>']
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    result = evaluate(lambda query, k: ["d1", "d4"][:k], path)
    page = render_html([result])
    assert page.count("<script>") == 1  # only our own
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert "<img" not in page and "<b>x" not in page


def test_plugin_writes_the_report(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-html", "out/report.html"
    )
    result.assert_outcomes(passed=1)
    page = (pytester.path / "out" / "report.html").read_text("utf-8")
    assert page.startswith("<!DOCTYPE html>") and "http" not in page.split("<body>")[0]
    assert 'points="' in page and "baseline" in page  # current and baseline curves
    assert "<svg" in page and 'class="q"' in page


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_report_in_a_real_browser(cranfield_ab: list[EvaluationResult], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "report.html"
    groups = ab_groups(cranfield_ab, None, 0.05)
    page_file.write_text(render_html(cranfield_ab, groups), encoding="utf-8")
    assert "http://" not in page_file.read_text("utf-8") and "https://" not in page_file.read_text(
        "utf-8"
    )
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on(
                "request", lambda r: None if r.url.startswith("file:") else problems.append(r.url)
            )
            page.goto(page_file.as_uri())
            assert "2 retrievers side by side" in page.inner_text("body")
            table = page.locator("#queries-0")
            rows = table.locator("tr.q")
            assert rows.count() == 225
            page.fill('input[data-table="queries-0"]', "boundary layer")
            visible = [r for r in rows.all() if r.is_visible()]
            assert 0 < len(visible) < 225
            assert all("boundary layer" in r.inner_text().lower() for r in visible)
            page.fill('input[data-table="queries-0"]', "")
            first = rows.first
            hits = table.locator("tr.hits").first
            assert not hits.is_visible()
            first.click()
            assert hits.is_visible()
            assert hits.locator("tr.rel").count() >= 1  # relevant hits are marked
            assert "relevant (" in hits.inner_text()
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=False)
            print(f"screenshot: {shot}")
        finally:
            browser.close()
    assert problems == []
    assert shot.stat().st_size > 10_000


def test_big_sets_list_only_the_worst_queries(
    cranfield_ab: list[EvaluationResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_retrieval.html_report.MAX_QUERY_ROWS", 20)
    result = cranfield_ab[0]
    page = render_html([result])
    assert page.count('class="q"') == 20
    assert "The 20 worst of 225 queries by recall@10 (all of them are in the JSON report)" in page
    worst = min(q.metrics["recall@10"] for q in result.queries)
    assert worst == 0.0 and page.count('class="q"') == 20
