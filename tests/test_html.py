"""The HTML report: curve and chart numbers, escaping, size, and a real headless Chromium on
the Cranfield example with two retrievers."""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import BROWSER_ARGS, CHROMIUM, DOCS, GOLDEN, KEYWORD_RETRIEVER, write_golden

from pytest_retrieval import evaluate, load_golden
from pytest_retrieval.compare import ab_groups, compare_to_baseline, entry_from_result
from pytest_retrieval.gate import decide, session_verdict
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
from pytest_retrieval.results import EvaluationResult, QueryChange
from pytest_retrieval.verdicts import NO_RESULT, USAGE, Reason, Verdict

ROOT = Path(__file__).resolve().parents[1]


def html(results: list[EvaluationResult], groups: Any = (), baselines: Any = None) -> str:
    """The page as the plugin renders it, headed by the session's verdict."""
    return render_html(results, groups, baselines, verdict=session_verdict(results, ()))


def search(query: str, k: int) -> list[str]:
    """The helpers' keyword retriever, in process."""
    words = set(query.split())
    return sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]


@pytest.fixture(scope="module")
def bm25() -> Any:
    """The example's BM25 search over Cranfield."""
    spec = importlib.util.spec_from_file_location("example_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_bm25_search()


@pytest.fixture(scope="module")
def cranfield_ab(bm25: Any) -> list[EvaluationResult]:
    """BM25 on Cranfield, and a variant that reverses each top 10: two retrievers."""

    def reversed_top(query: str, k: int) -> list[str]:
        hits = list(bm25(query, k))
        return hits[:10][::-1] + hits[10:]

    golden = load_golden(ROOT / "example_golden" / "cranfield.json")
    return [
        evaluate(bm25, golden, retriever_id="bm25"),
        evaluate(reversed_top, golden, retriever_id="bm25-reversed"),
    ]


@pytest.fixture(scope="module")
def degraded(bm25: Any) -> tuple[EvaluationResult, Any]:
    """BM25 with its first two hits pushed to the end of the 100, compared (and gated)
    against BM25's baseline: relevant documents leave the top 10, MRR and nDCG regress."""

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
    assert "baseline (2025-01-01)" in page
    # the 1..100 charts and the close-ups of the baseline's stored range, two curves each
    assert page.count("<polyline") == 8 and page.count("k = 1..10<") == 2
    assert 'stroke-dasharray="6 4"' in page  # the baseline is drawn dashed


def test_baseline_curve_stops_where_its_rankings_stop(
    cranfield_ab: list[EvaluationResult],
) -> None:
    bm25, worse = cranfield_ab
    entry = entry_from_result(bm25, {}, "2025-01-01T00:00:00+00:00")  # stores the top 10
    stored = baseline_curve(worse, entry, "recall")
    svg = line_chart(
        "recall", [("current", current_curve(worse, "recall"), False), ("b", stored, True)], 10
    )
    dashed = re.search(r'<polyline[^>]*stroke-dasharray="6 4"[^>]*points="([^"]+)"', svg)
    solid = re.search(r'<polyline[^>]*stroke-width="2" points="([^"]+)"', svg)
    assert dashed is not None and solid is not None
    ends = [float(p.split(",")[0]) for p in dashed.group(1).split()]
    xs = [float(p.split(",")[0]) for p in solid.group(1).split()]
    assert len(ends) == 10 and len(xs) == 100  # never drawn past its stored k
    assert ends[-1] == pytest.approx(xs[9])
    assert "stored to k = 10" in svg and "mean recall@k, k = 1..100" in svg
    close = line_chart(
        "recall",
        [("current", current_curve(worse, "recall"), False), ("b", stored, True)],
        10,
        upto=10,
    )
    assert "mean recall@k, k = 1..10<" in close and "stored to k" not in close


def test_axes_are_labelled(cranfield_ab: list[EvaluationResult]) -> None:
    svg = line_chart("ndcg", [("a", [0.1, 0.2, 0.3], False)])
    assert '<text class="axis x"' in svg and ">k (rank cutoff)</text>" in svg
    assert re.search(r'<text class="axis y"[^>]*rotate\(-90[^>]*>mean ndcg@k</text>', svg)
    bars = histogram(cranfield_ab[0], "ndcg@10")
    assert ">ndcg@10</text>" in bars and re.search(r'class="axis y"[^>]*>queries</text>', bars)


def test_header_says_when_which_commit_and_golden_set(
    cranfield_ab: list[EvaluationResult],
) -> None:
    bm25 = cranfield_ab[0]
    page = render_html(
        [bm25],
        verdict=session_verdict([bm25], ()),
        created="2025-06-01T12:30:00+00:00",
        git={"commit": "0123456789abcdef0123", "dirty": True},
    )
    header = page.split("<header>")[1].split("</header>")[0]
    assert '<time datetime="2025-06-01T12:30:00+00:00">2025-06-01 12:30:00+00:00</time>' in header
    assert "commit <code>0123456789ab</code> (uncommitted changes)" in header
    assert f"golden cranfield <code>{bm25.fingerprint[:12]}</code>" in header
    plain = html([bm25])  # no git info: the time is still there, no commit is made up
    assert "<time datetime=" in plain and "commit" not in plain.split("</header>")[0]


def test_nothing_ran_renders_the_failed_verdict_and_each_reason() -> None:
    verdict = Verdict(
        reasons=(
            Reason(USAGE, "golden.json:3: 'k' must be a positive integer; write \"k\": 10"),
            Reason(NO_RESULT, "conftest.py: the retriever fixture raised RuntimeError('down')"),
        )
    )
    page = render_html([], verdict=verdict)
    assert '<span class="badge fail">failed (2 reasons)</span>' in page
    assert "usage: golden.json:3: &#x27;k&#x27; must be a positive integer" in page
    assert (
        "no result: conftest.py: the retriever fixture raised RuntimeError(&#x27;down&#x27;)"
        in page
    )
    assert "No evaluation ran" in page and "What changed" not in page


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
    assert page.count("<script>") == 2  # only our own (in the head and at the end)
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


def test_big_compared_sets_keep_the_most_changed_and_the_worst(
    degraded: tuple[EvaluationResult, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_retrieval.render.html.MAX_QUERY_ROWS", 20)
    monkeypatch.setattr("pytest_retrieval.render.html.MIN_QUERY_ROWS", 10)
    result, entry = degraded
    page = html([result], baselines={0: entry})
    first = next(m for m in result.metrics if m in {r.metric for r in result.verdict.reasons})
    assert (
        f"20 of 225 queries: the 10 most changed against the baseline and the 10 worst by "
        f"{first}; 205 left out (the JSON report has all of them)" in page
    )
    shown = set(_query_rows(page))
    comparison = result.comparison
    assert comparison is not None
    moved: dict[str, float] = {}
    for metric in (m for m in result.gated if m in comparison.shifts):
        for change in comparison.shifts[metric].queries:
            moved[change.id] = max(moved.get(change.id, 0.0), abs(change.delta))
    most = sorted(moved, key=lambda q: (-moved[q], q))[:10]
    assert set(most) <= shown
    rest = shown - set(most)
    assert len(rest) == 10
    by_id = {q.id: q for q in result.queries}
    assert all(by_id[q].metrics[first] == 0.0 for q in rest)


def test_big_sets_list_only_the_worst_queries(
    cranfield_ab: list[EvaluationResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_retrieval.render.html.MAX_QUERY_ROWS", 20)
    monkeypatch.setattr("pytest_retrieval.render.html.MIN_QUERY_ROWS", 10)
    result = cranfield_ab[0]
    page = html([result])
    assert page.count('<tr class="q"') == 20
    assert (
        "20 of 225 queries: the 20 worst by recall@10; 205 left out "
        "(the JSON report has all of them)" in page
    )
    listed = re.findall(r'<tr class="q"[^>]*><td>([^<]+)</td>', page)
    by_id = {q.id: q for q in result.queries}
    assert len(listed) == 20 and all(by_id[i].metrics["recall@10"] == 0.0 for i in listed)


def test_the_row_budget_is_shared_by_the_page(
    cranfield_ab: list[EvaluationResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pytest_retrieval.render.html.MAX_QUERY_ROWS", 100)
    monkeypatch.setattr("pytest_retrieval.render.html.MIN_QUERY_ROWS", 30)
    page = html(cranfield_ab)
    assert page.count('<tr class="q"') == 100  # 50 rows for each of the two evaluations
    assert "50 of 225 queries: the 50 worst by recall@10; 175 left out" in page
    page = html([*cranfield_ab, *cranfield_ab, *cranfield_ab, *cranfield_ab])
    assert page.count('<tr class="q"') == 8 * 30  # never fewer than MIN_QUERY_ROWS each


def test_cranfield_page_stays_small(cranfield_ab: list[EvaluationResult]) -> None:
    page = html(cranfield_ab, ab_groups(cranfield_ab, None, 0.05))
    size = len(page.encode("utf-8"))
    print(f"Cranfield, 2 retrievers x 225 queries x 100 hits: {size / 1024:.0f} KiB")
    assert size < 1_200_000  # hit texts (each once, ~110 KB here) and scores included
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


def _panel(page: str) -> str:
    match = re.search(r'<section class="changed" id="changed">(.*?)</section>', page, re.S)
    assert match is not None, "no what-changed panel"
    return match.group(1)


def test_what_changed_comes_first(degraded: tuple[EvaluationResult, Any]) -> None:
    result, entry = degraded
    comparison = result.comparison
    assert comparison is not None and result.regressed
    page = html([result], baselines={0: entry})
    assert page.index('<section class="changed"') < page.index('<h2 id="eval-0"')
    panel = _panel(page)
    for change in comparison.regressed:  # the regressed metrics, baseline -> now, Δ, p
        assert f"{change.metric} regressed: {change.baseline:.4f} → {change.current:.4f}" in panel
    for metric, shift in comparison.shifts.items():  # queries worse / better / unchanged
        assert (
            f"<tr><td><code>{metric}</code></td>" in panel
            and f"<td class=n>{shift.worse}</td><td class=n>{shift.better}</td>"
            f"<td class=n>{shift.unchanged}</td></tr>"
            in panel
        )
    ndcg = comparison.shifts["ndcg@10"]
    first = ndcg.worst(1)[0]
    assert first.lost, "the largest drop lost a relevant document"
    move = first.lost[0]
    assert f"<code>{first.id}</code>" in panel
    assert f"left the top 10: {move.doc} #{move.before} → #{move.after}" in panel
    assert f"{first.before:.4f} → {first.after:.4f}" in panel
    assert "largest gains" in panel


def test_what_changed_shows_without_a_regression(
    degraded: tuple[EvaluationResult, Any], cranfield_ab: list[EvaluationResult]
) -> None:
    result, _ = degraded
    bm25 = cranfield_ab[0]
    entry = entry_from_result(result, {}, "2025-01-01T00:00:00+00:00")  # the worse one as main
    better = decide(replace(bm25, comparison=compare_to_baseline(bm25, entry, {}, alpha=0.05)))
    assert not better.regressed
    panel = _panel(html([better], baselines={0: entry}))
    assert "no gated metric is significantly worse than its baseline" in panel
    shift = better.comparison.shifts["mrr@10"]  # type: ignore[union-attr]
    assert shift.better > 0 and shift.best(1)[0].id in panel


def test_ab_comparison_gets_the_panel_too(cranfield_ab: list[EvaluationResult]) -> None:
    groups = ab_groups(cranfield_ab, None, 0.05)
    panel = _panel(html(cranfield_ab, groups))
    assert "against retriever bm25" in panel and "bm25-reversed" in panel
    assert "<th>bm25</th><th>now</th>" in panel


def _query_rows(page: str, index: int = 0) -> dict[str, list[str]]:
    """Query id -> the texts of its row's cells, in the query table of evaluation ``index``."""
    table = page.split(f'id="queries-{index}"')[1].split(f'id="queries-{index + 1}"')[0]
    rows = {}
    for row in re.findall(r'<tr class="q"[^>]*>(.*?)</tr>', table, re.S):
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        rows[cells[0]] = cells
    return rows


def test_query_table_shows_gated_and_failing_metrics_with_baseline_and_delta(
    degraded: tuple[EvaluationResult, Any],
) -> None:
    result, entry = degraded
    page = html([result], baselines={0: entry})
    table = page.split('id="queries-0"')[1]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", table.split("</thead>")[0])
    failing = [m for m in result.metrics if m in {r.metric for r in result.verdict.reasons}]
    assert failing and head[3] == failing[0]  # a failing metric first
    for metric in result.gated:
        at = head.index(metric)
        assert head[at + 1 : at + 3] == ["baseline", f"Δ {metric}"]
    assert "precision@10" not in head  # neither gated nor failing
    rows = _query_rows(page)
    change: QueryChange = result.comparison.shifts["ndcg@10"].worst(1)[0]  # type: ignore[union-attr]
    cells = rows[change.id]
    at = head.index("ndcg@10")
    assert cells[at : at + 3] == [
        f"{change.after:.4f}",
        f"{change.before:.4f}",
        f"{change.delta:+.4f}",
    ]
    unchanged = next(
        q
        for q in result.queries
        if q.id not in {c.id for c in result.comparison.shifts["ndcg@10"].queries}  # type: ignore[union-attr]
    )
    value = f"{unchanged.metrics['ndcg@10']:.4f}"
    assert rows[unchanged.id][at : at + 3] == [value, value, "+0.0000"]


def test_expanded_row_shows_the_baseline_ranking_beside(
    degraded: tuple[EvaluationResult, Any],
) -> None:
    result, entry = degraded
    page = html([result], baselines={0: entry})
    change = result.comparison.shifts["ndcg@10"].worst(1)[0]  # type: ignore[union-attr]
    hits = page.split(f"ranked hits of {change.id}</summary>")[1].split("</details>")[0]
    reference = hits.split('<div class="reference">')[1]
    assert "baseline (top 10)" in reference
    listed = re.findall(r"<tr(?: class=rel)?><td>(\d+)</td><td>([^<]+)</td>", reference)
    assert [doc for _, doc in listed] == list(change.reference_ranked)
    query = next(q for q in result.queries if q.id == change.id)
    now = {doc: rank for rank, doc in enumerate(query.returned, 1)}
    first = change.reference_ranked[0]
    assert re.search(rf"<td>1</td><td>{first}</td><td>.*?</td><td>#{now[first]}</td>", reference)
    current = hits.split('<div class="reference">')[0]
    assert "<th>baseline rank</th>" in current
    hit = rf"<td>1</td><td[^>]*>{query.returned[0]}</td><td>[0-9.]+</td><td>.*?</td><td>#3</td>"
    assert re.search(hit, current)  # rank, doc id, score, golden grade, baseline rank
    assert f"<code>ndcg@10</code> {change.before:.4f} → {change.after:.4f}" in hits


def test_every_table_scrolls_in_its_own_box(degraded: tuple[EvaluationResult, Any]) -> None:
    result, entry = degraded
    page = html([result], baselines={0: entry})
    tables = page.count("<table")
    boxed = page.count('<div class="scroll"><table')
    assert tables == boxed + page.count('<table class="ranked')  # ranked: inside a boxed row
    assert "@media (max-width:640px)" in page and "max-width:100%" in page
    assert re.search(r'<svg width="\d+" height="\d+" viewBox="0 0 \d+ \d+"', page)
