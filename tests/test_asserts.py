"""The assertions on an evaluation are functions of ``pytest_retrieval`` (issue 40): the
results import neither the evaluation nor the renderers. The methods they replace say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import DOCS, GOLDEN

import pytest_retrieval
from pytest_retrieval import (
    assert_no_regression,
    assert_thresholds,
    evaluate,
    with_metrics,
)
from pytest_retrieval.results import EvaluationResult


def search(query: str, k: int) -> list[str]:
    words = set(query.split())
    return sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]


@pytest.fixture
def result(tmp_path: Path) -> EvaluationResult:
    path = tmp_path / "golden.json"
    path.write_text(json.dumps(GOLDEN), encoding="utf-8")
    return evaluate(search, path)


def test_the_functions_are_public() -> None:
    for name in ("assert_thresholds", "assert_no_regression", "with_metrics"):
        assert name in pytest_retrieval.__all__
        assert callable(getattr(pytest_retrieval, name))


def test_assert_thresholds_decides_anew_for_other_thresholds(result: EvaluationResult) -> None:
    assert_thresholds(result)
    assert_no_regression(result)
    with pytest.raises(AssertionError, match="precision@2"):  # not computed: computed here
        assert_thresholds(result, {"precision@2": 0.99})


def test_with_metrics_adds_metrics(result: EvaluationResult) -> None:
    wider = with_metrics(result, ["ndcg_exp@2"])
    assert "ndcg_exp@2" in wider.metrics and "ndcg_exp@2" not in result.metrics
    assert wider.metrics["recall@3"] == result.metrics["recall@3"]


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("assert_thresholds", "assert_thresholds(result, thresholds=None)"),
        ("assert_no_regression", "assert_no_regression(result)"),
        ("with_metrics", "with_metrics(result, names)"),
    ],
)
def test_the_former_methods_name_the_function(
    result: EvaluationResult, name: str, call: str
) -> None:
    with pytest.raises(AttributeError) as raised:
        getattr(result, name)
    message = str(raised.value)
    assert f"EvaluationResult.{name}() is no method any more" in message
    assert f"pytest_retrieval.{call}" in message
    assert f"from pytest_retrieval import {name}" in message


def test_another_missing_attribute_is_a_plain_attribute_error(result: EvaluationResult) -> None:
    with pytest.raises(AttributeError, match="has no attribute 'metrcs'"):
        result.metrcs  # type: ignore[attr-defined]  # noqa: B018
    assert not hasattr(result, "assert_thresholds")
