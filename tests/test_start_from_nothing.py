"""Issue 14's whole path on the Cranfield corpus, as docs/building.md gives it, against the
local OpenAI-compatible test server: ``synth`` 100 queries, run two BM25 variants (recording
their baselines), ``pool`` their top 10, accept a few proposals on the ``review`` page in
headless Chromium, ``apply``; then the golden set validates, the baseline comparison names
exactly the accepted queries as re-judged, and judged@10 rises. (The docs ask 300 queries;
100 take the same path, and pooling 300 took 40 of this test's 55 s. ``test_synth`` writes
300 from the same corpus.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import BROWSER_ARGS, CHROMIUM
from judge_server import JudgeServer, serve

from pytest_retrieval import cli
from pytest_retrieval.builder.review_file import read_review
from pytest_retrieval.builder.review_server import ReviewServer

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "example_golden" / "cranfield" / "corpus.jsonl"
KEY = "sk-test-start-from-nothing"

#: two BM25 variants over the same corpus: title and text, and the title alone
CONFTEST = f"""
import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("example_conftest", {str(ROOT / "conftest.py")!r})
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def titles_only(folder):
    path = Path(folder) / "titles.jsonl"
    with open({str(CORPUS)!r}, encoding="utf-8") as lines, open(path, "w") as out:
        for line in lines:
            if line.strip():
                doc = json.loads(line)
                out.write(json.dumps({{"_id": doc["_id"], "title": doc.get("title", "")}}) + "\\n")
    return path


@pytest.fixture(scope="session", params=["bm25", "bm25-title"])
def retriever(request, tmp_path_factory):
    if request.param == "bm25":
        return example.build_bm25_search({str(CORPUS)!r})
    return example.build_bm25_search(titles_only(tmp_path_factory.mktemp("titles")))
"""


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with serve(api_key=KEY, graded=True) as running:
        yield running


def judged(report: Path) -> dict[str, float]:
    """Each evaluation's mean judged@10 in a JSON report."""
    data = json.loads(report.read_text(encoding="utf-8"))
    return {e["retriever"]: e["metrics"]["judged@10"] for e in data["evaluations"]}


def rejudged(report: Path) -> dict[str, list[str]]:
    data = json.loads(report.read_text(encoding="utf-8"))
    return {
        e["retriever"]: sorted(e["baseline"]["comparison"]["rejudged"]) for e in data["evaluations"]
    }


def accept_on_the_page(review: Path, how_many: int) -> None:
    """Open the review page in headless Chromium and press ``a`` on the first proposals."""
    from playwright.sync_api import expect, sync_playwright

    serving = ReviewServer(review, "127.0.0.1", 0, by="e2e-reviewer")
    thread = threading.Thread(target=serving.serve_forever, daemon=True)
    thread.start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            try:
                page = browser.new_page()
                page.goto(serving.url)
                page.wait_for_selector("#card:not([hidden])")
                for done in range(1, how_many + 1):
                    page.keyboard.press("a")
                    expect(page.locator("#decided")).to_have_text(str(done))
            finally:
                browser.close()
    finally:
        serving.shutdown()
        serving.server_close()
        thread.join(5)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_synth_run_pool_review_apply_on_cranfield(
    pytester: pytest.Pytester, server: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--base-url", server.base_url, "--cache", str(pytester.path / "judge-cache")]
    golden = pytester.path / "golden.json"

    # 1. synth: 100 queries from the user's own corpus, each filter counted
    assert cli.main(["synth", str(CORPUS), "-o", str(golden), "--queries", "100", *base]) == 0
    summary = capsys.readouterr().out
    assert "answerab" in summary and "duplicate" in summary, summary
    queries = json.loads(golden.read_text(encoding="utf-8"))["queries"]
    assert len(queries) == 100
    assert all(q["metadata"]["status"] == "synthetic" for q in queries)
    assert cli.main(["validate", str(golden)]) == 0

    # 2. both BM25 variants, their baselines recorded
    pytester.makeconftest(CONFTEST)
    before = pytester.path / "before.json"
    ran = pytester.runpytest(
        "-p", "no:randomly", "--retrieval-golden", str(golden),
        "--retrieval-update-baseline", "--retrieval-report", str(before),
    )  # fmt: skip
    assert ran.ret == 0, ran.stdout.str()[-3000:]
    judged_before = judged(before)
    assert set(judged_before) == {"bm25", "bm25-title"}

    # 3. pool the two variants' top 10
    review = pytester.path / "review.jsonl"
    assert cli.main(["pool", str(golden), str(before), "-o", str(review), *base]) == 0
    proposals = read_review(review).proposals
    assert proposals and all(p.kind == "add" for p in proposals)
    assert {s.split(":")[-1] for p in proposals for s in p.sources} >= {
        "bm25",
        "bm25-title",
    }

    # 4. accept the first five on the page, in Chromium
    accept_on_the_page(review, 5)
    decided = [p for p in read_review(review).proposals if p.decision is not None]
    assert [p.decision.action for p in decided if p.decision] == ["accept"] * 5
    accepted_queries = sorted({p.query_id for p in decided})

    # 5. apply: the golden set still validates, the labels carry their provenance
    assert cli.main(["apply", str(review), str(golden)]) == 0
    assert cli.main(["validate", str(golden)]) == 0
    applied = {q["id"]: q for q in json.loads(golden.read_text(encoding="utf-8"))["queries"]}
    for proposal in decided:
        entry = applied[proposal.query_id]
        assert entry["relevant"][proposal.doc_id] == proposal.grade
        assert proposal.doc_id in entry["metadata"]["labels"]

    # 6. against the baselines: exactly the accepted queries are re-judged; judged@10 rises
    after = pytester.path / "after.json"
    ran = pytester.runpytest(
        "-p", "no:randomly", "--retrieval-golden", str(golden), "--retrieval-report", str(after)
    )  # fmt: skip
    assert ran.ret == 0, ran.stdout.str()[-3000:]
    assert rejudged(after) == {
        "bm25": accepted_queries,
        "bm25-title": accepted_queries,
    }
    judged_after = judged(after)
    assert any(judged_after[r] > judged_before[r] for r in judged_before), (
        judged_before,
        judged_after,
    )
    assert all(judged_after[r] >= judged_before[r] for r in judged_before)
