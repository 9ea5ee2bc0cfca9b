"""The plugins teams already run, end to end beside pytest-retrieval: pytest-rerunfailures,
pytest-asyncio (auto and strict, session loop scope), pytest-randomly, pytest-cov,
pytest-timeout and pytest-xdist (``-n``, ``--dist loadfile``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden

#: a retriever that finds nothing on its first attempt and everything after (a flaky index)
FLAKY = """
import pathlib
import pytest

DOCS = {"d1": "apple pie recipe", "d2": "banana bread recipe", "d3": "cherry tart",
        "d4": "apple cider vinegar", "d5": "bread machine manual", "d6": "tart cherry juice"}

def search(query, k):
    words = set(query.split())
    return sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]

@pytest.fixture
def retriever():
    marker = pathlib.Path("attempts")
    attempt = int(marker.read_text()) + 1 if marker.exists() else 1
    marker.write_text(str(attempt))
    return search if attempt > 1 else (lambda query, k: ["nothing"])
"""

ASYNC_RETRIEVER = """
import asyncio
import pytest
import pytest_asyncio

DOCS = {"d1": "apple pie recipe", "d2": "banana bread recipe", "d3": "cherry tart",
        "d4": "apple cider vinegar", "d5": "bread machine manual", "d6": "tart cherry juice"}

async def search(query, k):
    await asyncio.sleep(0)
    words = set(query.split())
    return sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]

@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def retriever():
    await asyncio.sleep(0)  # built on pytest-asyncio's session loop
    return search
"""

ASYNC_TEST = """
import asyncio
import pytest

@pytest.mark.asyncio
async def test_async_unit():
    await asyncio.sleep(0)
"""


def _report(pytester: pytest.Pytester, name: str = "report.json") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / name).read_text(encoding="utf-8"))
    return data


@pytest.mark.keep_plugins
def test_rerunfailures_counts_one_evaluation_the_last_attempt(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FLAKY)
    write_golden(pytester, dict(GOLDEN, thresholds={"recall@3": 0.9}))
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--reruns",
        "2",
        "-p",
        "no:randomly",
        "--retrieval-report",
        "report.json",
        "--junitxml",
        "junit.xml",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 passed, 1 rerun*"])
    assert result.stdout.str().count("fruit [retriever] · 4 queries") == 1  # one summary block
    evaluations = _report(pytester)["evaluations"]
    assert len(evaluations) == 1
    assert evaluations[0]["metrics"]["recall@3"] == 1.0  # the last attempt's numbers
    properties = [p.get("name") for p in ET.parse(pytester.path / "junit.xml").iter("property")]
    assert properties.count("retrieval.recall@3") == 1


@pytest.mark.keep_plugins
@pytest.mark.parametrize("mode", ["auto", "strict"])
def test_pytest_asyncio_session_loop(pytester: pytest.Pytester, mode: str) -> None:
    # loop_scope= needs pytest-asyncio 0.24, which needs pytest 8.2: not on the pytest floor
    pytest.importorskip("pytest_asyncio", minversion="0.24")
    pytester.makeconftest(ASYNC_RETRIEVER)
    pytester.makepyfile(test_async=ASYNC_TEST)
    pytester.makeini(
        f"[pytest]\nasyncio_mode = {mode}\nasyncio_default_fixture_loop_scope = session\n"
        "asyncio_default_test_loop_scope = session\n"
    )
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*recall@3 *1.0000*", "*verdict: PASSED*"])


@pytest.mark.keep_plugins
def test_pytest_randomly_does_not_change_the_numbers(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    pytester.makepyfile(test_unit="import random\n\ndef test_unit():\n    random.random()\n")
    write_golden(pytester)
    runs = []
    for seed in ("1", "2"):
        result = pytester.runpytest(
            "--retrieval-golden",
            "golden.json",
            f"--randomly-seed={seed}",
            "--retrieval-report",
            f"report-{seed}.json",
        )
        result.assert_outcomes(passed=2)
        evaluation = _report(pytester, f"report-{seed}.json")["evaluations"][0]
        runs.append((evaluation["metrics"], evaluation["ci"]))
    assert runs[0] == runs[1]


def test_pytest_cov(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    pytester.makepyfile(
        mylib="def f():\n    return 1\n",
        test_unit="import mylib\n\ndef test_unit():\n    assert mylib.f() == 1\n",
    )
    write_golden(pytester)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--cov", "mylib", "--cov-report", "term"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*verdict: PASSED*", "*mylib.py*100%*"])


def test_pytest_timeout(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    result = pytester.runpytest_subprocess("--retrieval-golden", "golden.json", "--timeout", "60")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*verdict: PASSED*"])


@pytest.mark.parametrize("dist", [["-n", "2"], ["-n", "2", "--dist", "loadfile"]])
def test_xdist_matches_a_single_process(pytester: pytest.Pytester, dist: list[str]) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    pytester.makepyfile(test_unit="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    write_golden(pytester)
    write_golden(pytester, dict(GOLDEN, name="second"), name="second.json")
    args = ["--retrieval-golden", "golden.json", "--retrieval-golden", "second.json"]
    single = pytester.runpytest(*args, "--retrieval-report", "single.json")
    single.assert_outcomes(passed=4)
    spread = pytester.runpytest_subprocess(*args, *dist, "--retrieval-report", "spread.json")
    spread.assert_outcomes(passed=4)
    assert spread.stdout.str().count("= retrieval =") == 1
    assert [e["metrics"] for e in _report(pytester, "single.json")["evaluations"]] == [
        e["metrics"] for e in _report(pytester, "spread.json")["evaluations"]
    ]


def test_junit_has_no_nan_latency_when_no_call_answered(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture\ndef retriever():\n"
        "    def search(query, k):\n        raise ConnectionError('down')\n    return search\n"
    )
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1)
    values = {
        p.get("name"): p.get("value")
        for p in ET.parse(pytester.path / "junit.xml").iter("property")
    }
    assert values["retrieval.passed"] == "False"
    assert "nan" not in values.values()
