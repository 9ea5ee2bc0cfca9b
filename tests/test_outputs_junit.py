"""Issue 12, point 7: the failure message CI systems show (JUnit's ``message`` attribute, cut
to its first line or first ~10 lines) leads with the reason: the failed metric, its threshold
or allowance, p; the metric table comes after."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import write_golden

#: 120 queries; the retriever finds the relevant doc of 13 in 20, or (WORSE) of 8 in 20
RETRIEVER = """
import os, pytest

@pytest.fixture(scope="session")
def retriever():
    found = 8 if os.environ.get("WORSE") else 13
    def search(query, k):
        hit = int(query.split()[-1]) % 20 < found
        return (["d1", "x", "y"] if hit else ["x", "y", "z"])[:k]
    return search
"""
GOLDEN = {
    "name": "many",
    "k": 3,
    "queries": [{"id": f"q{i}", "query": f"query {i}", "relevant": ["d1"]} for i in range(120)],
}


def failure_message(xml: Path) -> str:
    [failure] = ET.parse(xml).getroot().iter("failure")
    return failure.get("message", "").removeprefix("Failed: ")


def test_a_failed_threshold_leads_the_junit_message(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(RETRIEVER)
    write_golden(pytester, GOLDEN)
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-threshold",
        "recall@3=0.9",
        "--junitxml",
        "junit.xml",
    )
    result.assert_outcomes(failed=1)
    first, *rest = failure_message(pytester.path / "junit.xml").splitlines()
    assert "recall@3 = 0.6500 is below 0.9 (threshold from --retrieval-threshold)" in first
    assert any(line.split()[:2] == ["metric", "value"] for line in rest)  # the table after


def test_a_regression_leads_the_junit_message_with_its_allowance_and_p(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(RETRIEVER)
    write_golden(pytester, GOLDEN)
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    monkeypatch.setenv("WORSE", "1")
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1)
    first = failure_message(pytester.path / "junit.xml").splitlines()[0]
    assert "recall@3 dropped 0.2500 (allowed 0.0100, p=" in first
    assert "< 0.05)" in first
