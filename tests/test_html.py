"""The HTML report: curve and chart numbers, escaping, size, and a real headless Chromium on
the Cranfield example with two retrievers."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS, GOLDEN, KEYWORD_RETRIEVER, write_golden

from pytest_retrieval import evaluate, load_golden
from pytest_retrieval.compare import ab_groups, compare_to_baseline, entry_from_result
from pytest_retrieval.render.charts import (
    BOTTOM,
    HEIGHT,
    TOP,
    baseline_curve,
    current_curve,
    curve,
    histogram,
    line_chart,
)
from pytest_retrieval.render.html import render_html
from pytest_retrieval.results import EvaluationResult
from pytest_retrieval.verdicts import session_verdict

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


def html(results: list[EvaluationResult], groups: Any = (), baselines: Any = None) -> str:
    """The page as the plugin renders it, headed by the session's verdict."""
    return render_html(results, groups, baselines, verdict=session_verdict(results, ()))


def search(query: str, k: int) -> list[str]:
    """The helpers' keyword retriever, in process."""
    words = set(query.split())
    return sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]


@pytest.fixture(scope="module")
def cranfield_ab() -> list[EvaluationResult]:
    """BM25 on Cranfield, and a variant that reverses each top 10: two retrievers."""
    spec = importlib.util.spec_from_file_location("example_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    bm25 = module.build_bm25_search()

    def reversed_top(query: str, k: int) -> list[str]:
        hits = list(bm25(query, k))
        return hits[:10][::-1] + hits[10:]

    golden = load_golden(ROOT / "example_golden" / "cranfield.json")
    return [
        evaluate(bm25, golden, retriever_id="bm25"),
        evaluate(reversed_top, golden, retriever_id="bm25-reversed"),
    ]


def test_curve_at_k_is_the_metric(cranfield_ab: list[EvaluationResult]) -> None:
    result = cranfield_ab[0]
    recall = current_curve(result, "recall")
    assert len(recall) == 100  # k = 1..K, K the depth that came back
    assert recall[9] == pytest.approx(result.metrics["recall@10"], abs=1e-12)
    assert recall[99] == pytest.approx(result.metrics["recall@100"], abs=1e-12)
    assert recall == sorted(recall)  # recall@k never falls as k grows
    ndcg = curve(
        [q.returned for q in result.queries], [q.relevant for q in result.queries], "ndcg", 10
    )
    assert ndcg[9] == pytest.approx(result.metrics["ndcg@10"], abs=1e-12)
    page = html([result])
    assert f"current: recall@10 = {result.metrics['recall@10']:.4f}" in page  # hover value


def test_baseline_curve_scores_stored_rankings_with_todays_judgments(
    cranfield_ab: list[EvaluationResult],
) -> None:
    bm25, worse = cranfield_ab
    entry = entry_from_result(bm25, {}, "2025-01-01T00:00:00+00:00")  # stores the top 10
    assert baseline_curve(bm25, entry, "recall") == pytest.approx(
        current_curve(bm25, "recall")[:10]
    )
    reversed_then = baseline_curve(worse, entry, "ndcg")
    assert reversed_then[9] == pytest.approx(bm25.metrics["ndcg@10"])
    compared = replace(worse, comparison=compare_to_baseline(worse, entry, {}, alpha=0.05))
    page = html([compared], baselines={0: entry})
    assert "baseline (2025-01-01)" in page and page.count("<polyline") == 4
    assert 'stroke-dasharray="6 4"' in page  # the baseline is drawn dashed


def test_line_chart_geometry() -> None:
    svg = line_chart("recall", [("a", [0.0, 0.5, 1.0], False), ("b & <c>", [0.25], True)], 2)
    match = re.search(r'<polyline[^>]*points="([^"]+)"', svg)
    assert match is not None
    points = [tuple(map(float, p.split(","))) for p in match.group(1).split()]
    (x1, y1), (x2, y2), (x3, y3) = points
    assert x1 < x2 < x3 and x2 - x1 == pytest.approx(x3 - x2)
    assert y1 == pytest.approx(HEIGHT - BOTTOM) and y3 == pytest.approx(TOP)  # 0 and 1
    assert y2 == pytest.approx((y1 + y3) / 2)
    assert "<title>a: recall@2 = 0.5000</title>" in svg and "k = 2" in svg  # the gate's k
    assert "b &amp; &lt;c&gt;" in svg and "<c>" not in svg  # legend text escaped
    for label in ("0.25", "0.5", "0.75", ">1<", ">2<", ">3<"):
        assert label in svg
    assert line_chart("recall", [("empty", [], False)]) == ""


def test_histogram_counts_every_query(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(GOLDEN), encoding="utf-8")
    result = evaluate(search, path)
    svg = histogram(result, "precision@3")
    counts = [int(n) for n in re.findall(r": (\d+) queries</title>", svg)]
    assert len(counts) == 10 and sum(counts) == len(result.queries)
    values = [q.metrics["precision@3"] for q in result.queries]
    assert counts[9] == sum(v >= 0.9 for v in values)  # the last bin holds 1.0
    assert f"mean {sum(values) / len(values):.3f}" in svg


def test_user_text_is_escaped(tmp_path: Path) -> None:
    data = json.loads(json.dumps(GOLDEN))
    data["name"] = "<i>fruit</i>"
    data["queries"][0]["query"] = "apple </script><script>alert(1)</script> <b>x</b>"
    data["queries"][0]["tags"] = ['"><img src=x onerror=alert(1)>']
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    result = evaluate(lambda query, k: ["d1", "<d4>"][:k], path, retriever_id="r<u>")
    judged = {
        "d1": {
            "on_topic": False,
            "score": 0.1,
            "grade": None,
            "reason": "</td><script>x",
            "error": None,
        }
    }
    first = replace(result.queries[0], judgments=judged)
    page = html([replace(result, queries=[first, *result.queries[1:]])])
    assert page.count("<script>") == 1  # only our own
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    assert "&lt;i&gt;fruit&lt;/i&gt; [r&lt;u&gt;]" in page and "&lt;d4&gt;" in page
    assert "&lt;/td&gt;&lt;script&gt;x" in page and "off topic 0.10" in page
    for raw in ("<img", "<b>x", "<i>fruit", "<u>", "<d4>"):
        assert raw not in page


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


def test_big_sets_list_only_the_worst_queries(
    cranfield_ab: list[EvaluationResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_retrieval.render.html.MAX_QUERY_ROWS", 20)
    result = cranfield_ab[0]
    page = html([result])
    assert page.count('class="q"') == 20
    assert "The 20 worst of 225 queries by recall@10 (all of them are in the JSON report)" in page
    listed = re.findall(r'<tr class="q"[^>]*><td>([^<]+)</td>', page)
    by_id = {q.id: q for q in result.queries}
    assert len(listed) == 20 and all(by_id[i].metrics["recall@10"] == 0.0 for i in listed)


def test_cranfield_page_stays_small(cranfield_ab: list[EvaluationResult]) -> None:
    page = html(cranfield_ab, ab_groups(cranfield_ab, None, 0.05))
    size = len(page.encode("utf-8"))
    print(f"Cranfield, 2 retrievers x 225 queries x 100 hits: {size / 1024:.0f} KiB")
    assert size < 1_000_000
    assert "http://" not in page and "https://" not in page  # nothing to fetch


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_report_in_a_real_browser(cranfield_ab: list[EvaluationResult], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    bm25, worse = cranfield_ab
    first = bm25.queries[0]
    judged = replace(
        first,
        judgments={
            first.returned[0]: {
                "on_topic": True,
                "grade": 3,
                "reason": "covers aeroelastic models",
            },
            first.returned[1]: {"on_topic": None, "error": "timeout after 30 s"},
        },
    )
    results = [replace(bm25, queries=[judged, *bm25.queries[1:]]), worse]
    page_file = tmp_path / "report.html"
    page_file.write_text(html(results, ab_groups(results, None, 0.05)), encoding="utf-8")
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on(
                "request", lambda r: None if r.url.startswith("file:") else problems.append(r.url)
            )
            page.goto(page_file.as_uri())
            assert "2 retrievers side by side" in page.inner_text("body")
            assert page.locator("svg polyline").count() == 8  # 2 A/B charts x 2, 2 x 1 each

            def visible() -> int:
                return int(
                    page.eval_on_selector_all(
                        "#queries-0 tr.q", "rows => rows.filter(r => r.offsetParent).length"
                    )
                )

            assert visible() == 225
            page.fill('input[data-table="queries-0"]', "boundary layer")
            assert 0 < visible() < 225
            texts = page.eval_on_selector_all(
                "#queries-0 tr.q", "rs => rs.filter(r => r.offsetParent).map(r => r.innerText)"
            )
            assert all("boundary layer" in text.lower() for text in texts)
            assert page.inner_text("#queries-0-count") == f"{visible()} of 225 shown"
            page.fill('input[data-table="queries-0"]', "")
            assert visible() == 225

            row = page.locator("#queries-0 tr.q").first
            hits = page.locator("#queries-0 tr.hits").first
            assert not hits.is_visible()
            row.click()
            assert hits.is_visible() and row.get_attribute("aria-expanded") == "true"
            assert hits.locator("tr.rel").count() >= 1  # relevant hits are marked
            shown = hits.inner_text()
            assert "relevant (" in shown and "on topic 3/3" in shown
            assert "covers aeroelastic models" in shown and "ungraded: timeout after 30 s" in shown
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot))
            print(f"screenshot: {shot}")

            page.locator("#queries-0 th.sort").first.click()  # recall@10, worst first
            values = page.eval_on_selector_all(
                "#queries-0 tr.q", "rs => rs.map(r => parseFloat(r.cells[3].innerText))"
            )
            assert values == sorted(values)
            paired = "rs => rs.every(r => r.nextElementSibling.classList.contains('hits'))"
            assert page.eval_on_selector_all("#queries-0 tr.q", paired)  # hits moved along
            opened = page.locator("#queries-0 tr.q.open")
            assert opened.count() == 1
            opened.click()  # collapses again
            assert page.locator("#queries-0 tr.q.open").count() == 0
            assert page.locator("#queries-0 tr.hits:visible").count() == 0
        finally:
            browser.close()
    assert problems == []
    assert shot.stat().st_size > 10_000
