"""CI-facing outputs: JUnit properties, --retrieval-sample, progress on a terminal and in logs."""

from __future__ import annotations

import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pexpect
import pytest
from helpers import write_golden

SLOW_RETRIEVER = """
import time, pytest

@pytest.fixture(scope="session")
def retriever():
    def search(query, k):
        time.sleep(0.03)
        return ["d1", "x", "d2"][:k]
    return search
"""

TAGGED = {
    "name": "tagged",
    "k": 3,
    "queries": [
        {"id": f"q{i}", "query": f"query {i}", "relevant": ["d1"], "tags": [tag]}
        for i, tag in enumerate(["faq"] * 60 + ["errors"] * 30 + ["billing"] * 10)
    ],
}


def properties(xml_path: Path) -> dict[str, str]:
    root = ET.parse(xml_path).getroot()
    return {p.get("name", ""): p.get("value", "") for p in root.iter("property")}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["local", "xdist"])
def test_junit_xml_carries_metric_properties(project: pytest.Pytester, workers: list[str]) -> None:
    result = project.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--junitxml", "junit.xml", *workers
    )
    result.assert_outcomes(passed=1)
    props = properties(project.path / "junit.xml")
    assert props["retrieval.golden"] == "fruit"
    assert props["retrieval.retriever"] == "retriever"
    assert props["retrieval.queries"] == "4"
    assert float(props["retrieval.recall@3"]) == pytest.approx(1.0)
    assert float(props["retrieval.precision@3"]) == pytest.approx(0.583333, abs=1e-6)
    assert props["retrieval.passed"] == "True"


def test_sample_is_stratified_seeded_and_says_so(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SLOW_RETRIEVER.replace("time.sleep(0.03)", "pass"))
    write_golden(pytester, TAGGED)
    runs = [
        pytester.runpytest(
            "--retrieval-golden",
            "golden.json",
            "--retrieval-sample",
            "20",
            "--retrieval-report",
            f"r{i}.json",
        )
        for i in range(2)
    ]
    runs[0].stdout.fnmatch_lines(
        ["tagged [[]retriever[]] · sample of 20 of 100 queries", "*a sample (--retrieval-sample)*"]
    )
    reports = [json.loads((pytester.path / f"r{i}.json").read_text()) for i in range(2)]
    ids = [[q["id"] for q in r["evaluations"][0]["queries"]] for r in reports]
    assert ids[0] == ids[1] and len(ids[0]) == 20  # same seed, same sample
    tags = [q["tags"][0] for q in reports[0]["evaluations"][0]["queries"]]
    assert (tags.count("faq"), tags.count("errors"), tags.count("billing")) == (12, 6, 2)
    assert reports[0]["evaluations"][0]["sampled_from"] == 100
    other = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-sample",
        "20",
        "--retrieval-sample-seed",
        "7",
        "--retrieval-report",
        "r7.json",
    )
    other.assert_outcomes(passed=1)
    seven = json.loads((pytester.path / "r7.json").read_text())
    assert [q["id"] for q in seven["evaluations"][0]["queries"]] != ids[0]


def test_sample_never_updates_a_baseline_and_compares_on_its_queries(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(SLOW_RETRIEVER.replace("time.sleep(0.03)", "pass"))
    write_golden(pytester, TAGGED)
    refused = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-sample",
        "20",
        "--retrieval-update-baseline",
    )
    refused.stdout.fnmatch_lines(["*baseline NOT updated*--retrieval-sample*"])
    assert refused.ret == pytest.ExitCode.TESTS_FAILED
    assert not (pytester.path / "golden.json.baseline.json").exists()
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    sampled = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-sample", "20")
    sampled.assert_outcomes(passed=1)
    out = sampled.stdout.str()
    assert "removed" not in out  # the 80 queries left out are not "removed from the set"


def test_bad_sample_size_is_a_usage_error(project: pytest.Pytester) -> None:
    result = project.runpytest("--retrieval-golden", "golden.json", "--retrieval-sample", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--retrieval-sample*'0' is not a whole number >= 1*"])


CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # anything but \t and \n


def test_progress_in_a_log_is_plain_lines(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SLOW_RETRIEVER)
    write_golden(pytester, dict(TAGGED, queries=TAGGED["queries"][:90]))
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--retrieval-concurrency", "1"
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "retrieval tagged [retriever]: queries 90/90 (100%) · done in" in out
    assert not CONTROL.search(out), repr(CONTROL.search(out))


def test_progress_on_a_terminal_is_one_live_line_then_erased(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SLOW_RETRIEVER)
    write_golden(pytester, dict(TAGGED, queries=TAGGED["queries"][:90]))
    addopts = "-p no:cacheprovider -p no:langsmith_plugin"
    env = dict(os.environ, COLUMNS="120", PYTEST_ADDOPTS=addopts)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "pytest", "--retrieval-golden", "golden.json", "--retrieval-concurrency", "1"],
        cwd=str(pytester.path),
        env=env,
        encoding="utf-8",
        use_poll=True,  # select() fails once the process holds 1,024 fds (a long -n worker)
        timeout=60,
        dimensions=(40, 120),
    )
    child.expect(pexpect.EOF)
    out = child.before
    live = re.findall(r"\rretrieval tagged \[retriever\]: queries (\d+)/90", out)
    assert len(live) >= 2, out  # rewritten in place several times
    assert [int(n) for n in live] == sorted(int(n) for n in live)
    assert "\n retrieval tagged" not in out and "queries 90/90" in out
    assert re.search(r"\r +\r", out)  # erased before pytest goes on
    assert "verdict: PASSED" in out


def test_quiet_runs_stay_quiet(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("--retrieval-golden", "golden.json", "-q")
    assert "retrieval fruit" not in result.stdout.str()  # fast: no progress at all
    result.assert_outcomes(passed=1)


def test_output_paths_in_the_ini_are_relative_to_it_from_a_subfolder(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every output an ini key names lands beside the ini, wherever pytest starts: the
    report went to the working directory while the Markdown went beside the ini."""
    pytester.makeconftest(SLOW_RETRIEVER.replace("time.sleep(0.03)", "pass"))
    write_golden(pytester, TAGGED)
    pytester.makeini(
        "[pytest]\nretrieval_golden = golden.json\nretrieval_report = out/r.json\n"
        "retrieval_markdown = out/r.md\nretrieval_html = out/r.html\n"
    )
    sub = pytester.mkdir("sub")
    monkeypatch.chdir(sub)
    result = pytester.runpytest("--rootdir", str(pytester.path))
    assert result.ret == 0, result.stdout.str()
    assert sorted(p.name for p in (pytester.path / "out").iterdir()) == [
        "r.html",
        "r.json",
        "r.md",
    ]
    assert not (sub / "out").exists()
