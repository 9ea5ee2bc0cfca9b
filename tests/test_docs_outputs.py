"""The code blocks of docs/runs.md, judge.md, downstream.md and outputs.md run as written."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from docs_examples import example

from pytest_retrieval import evaluate, load_golden, read_run
from pytest_retrieval.runfile import runs_for

#: a golden set over the documents the docs' run files rank
RUN_GOLDEN = {
    "name": "docs",
    "k": 10,
    "queries": [
        {"id": "q1", "query": "first query", "relevant": {"d1": 2, "d3": 1}},
        {"id": "q2", "query": "second query", "relevant": ["d2"]},
    ],
}

#: each run-format block of docs/runs.md, and a file name it may have
RUN_FILES = {
    "run-trec": "bm25.trec",
    "run-json-scores": "bm25.json",
    "run-json-lists": "bm25.json",
    "run-jsonl": "bm25.jsonl",
}


def _golden(folder: Path) -> Path:
    path = folder / "golden.json"
    path.write_text(json.dumps(RUN_GOLDEN), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(RUN_FILES))
def test_each_run_format_reads_as_the_same_ranking(name: str, tmp_path: Path) -> None:
    path = tmp_path / RUN_FILES[name]
    path.write_text(example(name), encoding="utf-8")
    run = read_run(path)
    assert run.name == "bm25"
    assert {qid: tuple(hits.ids) for qid, hits in run.queries.items()} == {
        "q1": ("d3", "d1"),
        "q2": ("d2",),
    }
    golden = load_golden(_golden(tmp_path))
    result = evaluate(None, golden, runs=runs_for(golden, run), retriever_id=run.name)
    assert result.metrics["recall@10"] == 1.0
    # q1: d3 (grade 1) above d1 (grade 2), so its nDCG is below 1; q2's is 1
    q1 = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert result.metrics["ndcg@10"] == pytest.approx((q1 + 1) / 2, abs=1e-12)


def test_the_jsonl_hit_keeps_its_text(tmp_path: Path) -> None:
    path = tmp_path / "bm25.jsonl"
    path.write_text(example("run-jsonl"), encoding="utf-8")
    hits = read_run(path).queries["q1"]
    assert hits.texts["d1"] == "the second hit's text"
    assert hits.scores["d1"] == 9.0


def test_the_library_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    _golden(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "bm25.trec").write_text(example("run-trec"), encoding="utf-8")
    exec(compile(example("runs-library"), "runs-library", "exec"), {})
    name, ndcg, passed = capsys.readouterr().out.split()
    assert name == "bm25" and 0 < float(ndcg) < 1 and passed == "True"


def test_the_run_in_a_test_example(pytester: pytest.Pytester) -> None:
    _golden(pytester.path)
    (pytester.path / "runs").mkdir()
    (pytester.path / "runs" / "bm25.trec").write_text(example("run-trec"), encoding="utf-8")
    pytester.makepyfile(test_run=example("runs-in-a-test"))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "test_run.py")
    result.assert_outcomes(passed=1)


#: what the downstream example leaves to the reader: a RAG pipeline and a scorer, and a
#: retriever whose hits carry their text
DOWNSTREAM_KIT = """
import types

DOCS = {"d1": "Paris is the capital of France", "d2": "Berlin is in Germany", "d3": "Lyon"}


def answer(query, context):
    return "Paris" if "Paris" in context[0] else "no idea"


my_rag = types.SimpleNamespace(answer=answer)


def exact_match(answer, expected):
    return 1.0 if answer == expected else 0.0


@pytest.fixture(scope="session")
def retriever():
    return lambda query, k: [{"id": d, "text": DOCS[d]} for d in sorted(DOCS)[:k]]
"""


def test_the_downstream_fixture_example(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(example("downstream-fixture") + DOWNSTREAM_KIT)
    golden = {
        "name": "capitals",
        "k": 3,
        "queries": [
            {
                "id": "fr",
                "query": "capital of France",
                "relevant": ["d1"],
                "metadata": {"answer": "Paris"},
            }
        ],
    }
    (pytester.path / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    options = ("--retrieval-golden", "golden.json", "--retrieval-report", "report.json")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *options)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*downstream labels (retrieval_downstream rag-v3): 3 calls*"])
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    metrics = report["evaluations"][0]["metrics"]
    assert metrics["erag_precision@3"] == pytest.approx(1 / 3)  # only d1 helps the answer
    assert metrics["erag_mrr@3"] == 1.0
