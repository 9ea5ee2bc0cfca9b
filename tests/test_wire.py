"""What an xdist worker sends the controller: each evaluation as one JSON string.

execnet's serializer walks every object of a nested report entry in Python: a golden set of
100,000 queries x 100 hits split under ``-n 2`` took 81 s and 3.3 GB where the serial run
took 13 s and 0.4 GB. As one string (a ranking as one joined string in it) it crosses
whole; the controller reads back the very evaluation the worker had.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from helpers import write_golden

from pytest_retrieval.evaluation import evaluate
from pytest_retrieval.golden import GoldenQuery, GoldenSet
from pytest_retrieval.hits import Ranking
from pytest_retrieval.results import EvaluationResult, from_wire, to_wire


def _search(query: str, k: int) -> list[Any]:
    i = int(query[1:])
    if i == 1:
        raise ConnectionError("down")
    if i == 2:
        return []  # an empty ranking
    if i == 3:
        return ["d0", "d0", "d1"]  # a duplicate: kept as a tuple
    if i == 4:
        return ["d\x00x", "d1"]  # an id holding the NUL a Ranking joins with: a tuple
    if i == 5:
        return [{"id": "d1", "text": "é ☃", "score": float("-inf")}, {"id": "d2", "score": 1e308}]
    return [f"d{(i + j) % 7}" for j in range(5)]


def _golden() -> GoldenSet:
    queries = tuple(
        GoldenQuery(
            id=f"q{i}",
            query=f"q{i}",
            relevant={} if i == 6 else {f"d{i % 7}": 2, "d1": 1},  # q6: open, NaN metrics
            tags=("even",) if i % 2 == 0 else (),
        )
        for i in range(10)
    )
    return GoldenSet(name="g", source="g.json", queries=queries)


def _text(result: EvaluationResult) -> str:
    """The whole report entry, NaN written as NaN (so that two equal entries compare equal)."""
    return json.dumps(result.to_dict(), sort_keys=True, ensure_ascii=False)


def test_an_evaluation_crosses_the_wire_unchanged() -> None:
    result = evaluate(_search, _golden(), metrics=["recall@5", "mrr@5", "ndcg@5"])
    text = to_wire(result)
    assert isinstance(text, str)
    back = EvaluationResult.from_dict(from_wire(text))
    assert _text(back) == _text(result)
    sent, got = list(result.queries), list(back.queries)
    assert [q.returned for q in got] == [q.returned for q in sent]
    assert [type(q.returned) for q in got] == [type(q.returned) for q in sent]
    assert isinstance(sent[0].returned, Ranking)
    assert got[2].returned == () and got[3].returned == ("d0", "d1")
    assert got[4].returned == ("d\x00x", "d1")
    assert got[5].scores == {"d1": -math.inf, "d2": 1e308} and got[5].texts["d1"] == "é ☃"
    assert math.isnan(got[6].metrics["recall@5"]) and got[1].error == sent[1].error
    assert '"returned":"d0\\u0000d1\\u0000d2\\u0000d3\\u0000d4"' in text  # one string
    assert '"returned":["d0","d1","d2"' not in text  # not a list of ids


CONFTEST = """
import pytest

worker = []

def pytest_configure(config):
    worker.append(hasattr(config, "workerinput"))

def pytest_runtest_logreport(report):
    wired = getattr(report, "retrieval", None)
    if wired and not worker[0]:  # as the controller receives it
        with open("wired.txt", "a") as out:
            out.write(" ".join(type(w).__name__ for w in wired) + "\\n")

@pytest.fixture
def retriever():
    return lambda query, k: [f"d{i}" for i in range(k)]
"""


def test_a_worker_sends_each_evaluation_as_one_string(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(CONFTEST)
    queries = [{"id": f"q{i}", "query": f"query {i}", "relevant": ["d1"]} for i in range(30)]
    write_golden(pytester, {"name": "g", "k": 3, "queries": queries})
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "-n", "2", "--retrieval-split-min", "10",
        "--retrieval-report", "r.json",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    assert (pytester.path / "wired.txt").read_text().split() == ["str", "str"]
    (evaluation,) = json.loads((pytester.path / "r.json").read_text())["evaluations"]
    assert evaluation["n_queries"] == 30 and evaluation["metrics"]["recall@3"] == 1.0
