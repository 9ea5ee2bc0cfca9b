"""Downstream (eRAG) labels: the user's RAG scorer labels each top-k hit; cached, concurrent."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import DOCS, GOLDEN, KEYWORD_RETRIEVER, write_golden

from pytest_retrieval import assert_thresholds, evaluate
from pytest_retrieval.downstream import DownstreamRunner, Hit
from pytest_retrieval.golden import GoldenError, GoldenQuery, load_golden
from pytest_retrieval.metrics import compute


def search(query: str, k: int) -> list[dict[str, str]]:
    words = set(query.split())
    ranked = sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))
    return [{"id": d, "text": DOCS[d]} for d in ranked[:k]]


def answer_overlap(query: str, doc: Hit, entry: GoldenQuery) -> float:
    """A stand-in 'RAG model': the share of query words the document can answer with."""
    words = set(query.split())
    return len(words & set((doc.text or "").split())) / len(words)


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(GOLDEN), encoding="utf-8")
    return path


def test_erag_metrics_are_the_kernels_on_downstream_labels(golden: Path, tmp_path: Path) -> None:
    runner = DownstreamRunner(answer_overlap, cache_dir=tmp_path / "cache")
    result = evaluate(search, golden, downstream=runner)
    assert {"erag_precision@3", "erag_hit_rate@3", "erag_mrr@3", "erag_ndcg@3"} <= set(
        result.metrics
    )
    runs = [q.returned for q in result.queries]
    labels = [q.downstream for q in result.queries]
    assert labels[0] == {"d1": 1.0, "d4": 1.0, "d2": 0.0}  # "apple": d1, d4 contain it
    expected = compute(
        ["erag_precision@3", "erag_ndcg@3"], runs, [{} for _ in runs], {"downstream": labels}
    )
    for name, values in expected.items():
        assert result.metrics[name] == pytest.approx(float(np.mean(values)), abs=1e-12)
    # "bread recipe" -> d2 (1.0), d1 (0.5), d5 (0.5): binarised at 0.5, graded as gains
    bread = result.queries[1]
    assert bread.downstream == {"d2": 1.0, "d1": 0.5, "d5": 0.5}
    assert bread.metrics["erag_precision@3"] == pytest.approx(1.0)
    assert result.erag is not None and result.erag["calls"] == 12 and result.passed


def test_labels_are_cached_and_an_edit_invalidates_them(golden: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = DownstreamRunner(answer_overlap, cache_dir=cache)
    evaluate(search, golden, downstream=first)
    again = DownstreamRunner(answer_overlap, cache_dir=cache)
    evaluate(search, golden, downstream=again)
    assert (first.calls, again.calls, again.cache_hits) == (12, 0, 12)

    def edited(query: str, doc: Hit, entry: GoldenQuery) -> float:
        return 1.0

    edited_runner = DownstreamRunner(edited, cache_dir=cache)
    evaluate(search, golden, downstream=edited_runner)
    assert edited_runner.calls == 12  # a different function: nothing reused


@pytest.mark.timeout(60)
def test_calls_run_concurrently(golden: Path) -> None:
    """Counted: the calls in flight at once. Each call waits for all 4 to be in flight (the
    first few only: a run one call at a time gives up waiting, and fails)."""
    in_flight, peak, waited = 0, 0, False
    lock = threading.Condition()

    def slow(query: str, doc: Hit, entry: GoldenQuery) -> float:
        nonlocal in_flight, peak, waited
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
            lock.notify_all()
            if not waited:
                waited = not lock.wait_for(lambda: peak >= 4, timeout=10)
            in_flight -= 1
        return 0.5

    evaluate(search, golden, downstream=DownstreamRunner(slow, concurrency=4))
    assert peak == 4  # 4 at once, never more


@pytest.mark.parametrize(
    ("returns", "message"),
    [
        (ValueError("model down"), "retrieval_downstream raised ValueError: model down"),
        ("good", "retrieval_downstream returned 'good'; return a number in [0, 1]"),
        (1.5, "retrieval_downstream returned 1.5, outside [0, 1]"),
    ],
)
def test_a_failing_label_fails_the_evaluation_and_says_why(
    golden: Path, returns: object, message: str
) -> None:
    def broken(query: str, doc: Hit, entry: GoldenQuery) -> object:
        if isinstance(returns, Exception):
            raise returns
        return returns

    result = evaluate(search, golden, downstream=DownstreamRunner(broken))
    assert not result.passed
    assert any(message in r.message for r in result.verdict.of_kind("downstream labels"))
    with pytest.raises(AssertionError, match="downstream labels failed"):
        assert_thresholds(result)


def test_open_queries_need_a_judge_or_labeller(tmp_path: Path) -> None:
    data = {"queries": [{"query": "apple"}, {"query": "bread", "relevant": ["d2"]}]}
    path = tmp_path / "open.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(GoldenError, match="--retrieval-judge"):
        load_golden(path)
    result = evaluate(search, path, downstream=DownstreamRunner(answer_overlap))
    assert result.open_queries == 1
    assert np.isnan(result.queries[0].metrics["recall@10"])  # no golden judgments
    assert result.metrics["recall@10"] == pytest.approx(1.0)  # the labelled query alone
    assert result.queries[0].metrics["erag_hit_rate@10"] == 1.0


def test_retrieval_downstream_fixture_in_pytest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        KEYWORD_RETRIEVER
        + """

@pytest.fixture(scope="session")
def retrieval_downstream():
    def score(query, doc, entry):
        return 1.0 if doc.id in entry.metadata.get("answers", []) else 0.0
    return score
"""
    )
    golden = json.loads(json.dumps(GOLDEN))
    golden["queries"][0]["metadata"] = {"answers": ["d1"]}
    write_golden(pytester, golden)
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", "report.json"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*erag_hit_rate@3*0.2500*"])
    report = json.loads((pytester.path / "report.json").read_text())
    evaluation = report["evaluations"][0]
    assert evaluation["queries"][0]["downstream"]["d1"] == 1.0
    assert evaluation["erag"]["calls"] == 12
    cached = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", "report.json"
    )
    cached.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["evaluations"][0]["erag"]["cache_hits"] == 12
