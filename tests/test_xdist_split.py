"""Issue 13, point 4: under ``pytest -n 2`` a golden set of at least --retrieval-split-min
queries runs as one item per worker and the controller merges the parts into one evaluation:
the same numbers, comparison, verdict, exit status, report and baseline as ``-n 0``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS, KEYWORD_RETRIEVER, write_golden
from judge_server import JudgeServer, serve

#: end-to-end runs (pytest processes, xdist, a local judge server): out of the fast
#: subset, `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

pytest.importorskip("xdist")

#: Two retrievers (A/B) over 120 queries with graded judgments; which relevant documents each
#: ranks where is a seeded shuffle per query, so every metric, tag and query differs.
#: VERSION=old shuffles one query in ten another way: the baseline it records differs a little.
#: FAIL_CALLS=1: "worse" fails 8 calls. FAIL_PART=2: the fixture raises for part 2 of the split.
RETRIEVERS = """
import os, random, pytest

def ranker(name):
    version = os.environ.get("VERSION", "new")
    def search(query, k):
        i = int(query.split()[-1])
        if name == "worse" and os.environ.get("FAIL_CALLS") and i % 17 == 0:
            raise TimeoutError("the backend timed out")
        docs = [f"d{i}", f"e{i}", "x1", "x2", "x3", "x4", "x5"]
        rng = random.Random(f"{version if i % 10 == 0 else ''}-{name}-{i}")
        rng.shuffle(docs)
        if name == "worse":
            docs = [d for d in docs if not d.startswith("d") or i % 3]
        return docs[:k]
    return search

@pytest.fixture(params=["good", "worse"])
def retriever(request):
    callspec = getattr(request.node, "callspec", None)
    part = callspec.params.get("retrieval_part") if callspec else None
    if part is not None and str(part.index + 1) == os.environ.get("FAIL_PART"):
        raise RuntimeError("index shard did not load")
    if part is not None and str(part.index + 1) == os.environ.get("CRASH_PART"):
        os._exit(3)  # the worker dies (out of memory, a segfault in a native index)
    return ranker(request.param)
"""
GOLDEN = {
    "name": "graded",
    "k": 3,
    "queries": [
        {
            "id": f"q{i}",
            "query": f"query {i}",
            "relevant": {f"d{i}": 3, f"e{i}": 1},
            "tags": ["even" if i % 2 == 0 else "odd", *(["third"] if i % 3 == 0 else [])],
        }
        for i in range(120)
    ],
}
GOLDEN_ARGS = ("--retrieval-golden", "golden.json")
SERIAL = ("-p", "no:xdist")
SPLIT = ("-n", "2", "--retrieval-split-min", "100")
#: what differs between any two runs: the clock and the machine's timings
VOLATILE = {"created", "git", "latency_ms", "latency_p50_ms", "latency_p95_ms"}


def project(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(RETRIEVERS)
    write_golden(pytester, GOLDEN)


def steady(value: Any) -> Any:
    """``value`` without the run's timings and timestamps (latency comparisons included)."""
    if isinstance(value, dict):
        if str(value.get("metric", "")).startswith("latency"):
            return None
        return {key: steady(item) for key, item in value.items() if key not in VOLATILE}
    if isinstance(value, list):
        return [steady(item) for item in value if steady(item) is not None]
    return value


def report(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((pytester.path / name).read_text())
    return document


def junit_properties(path: Path) -> list[tuple[str, str]]:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    props = suite.find("properties")
    return [] if props is None else [(p.get("name", ""), p.get("value", "")) for p in props]


def test_a_split_run_equals_the_serial_run_number_for_number(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(pytester)
    monkeypatch.setenv("VERSION", "old")
    recorded = pytester.runpytest(*GOLDEN_ARGS, *SERIAL, "--retrieval-update-baseline")
    assert recorded.ret == 0, recorded.stdout.str()
    monkeypatch.setenv("VERSION", "new")
    monkeypatch.setenv("FAIL_CALLS", "1")
    gate = ("--retrieval-threshold", "recall@3=0.4")  # good: 0.43, worse (no d in 1/3): 0.36
    serial = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, *SERIAL, *gate, "--retrieval-report", "serial.json"
    )
    split = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, *SPLIT, *gate, "-v", "--retrieval-report", "split.json",
        "--junitxml", "junit.xml",
    )  # fmt: skip
    serial.assert_outcomes(passed=1, failed=1)  # without -n, "worse" fails its test
    # good's parts pass, worse's fail on their failed calls (as without -n, and for
    # --reruns); the merged verdicts fail the session
    split.assert_outcomes(passed=2, failed=2)
    assert serial.ret == split.ret == pytest.ExitCode.TESTS_FAILED
    for part in ("good-part1/2", "good-part2/2"):  # in whatever order the workers finish
        split.stdout.fnmatch_lines([f"*PASSED golden.json::retrieval[[]{part}[]]*"])
    split.stdout.fnmatch_lines(["*FAILED golden.json::retrieval[[]worse-part2/2[]]*"])
    assert "golden.json::retrieval[good-part2/2]" in split.stdout.str()
    split.stdout.fnmatch_lines(
        [
            "graded [[]worse[]] · 120 queries",
            "*recall@3 * FAIL",
            "*retrieval verdict: FAILED (2 reasons, listed above)",
        ],
        consecutive=False,
    )
    assert split.stdout.str().count("= retrieval =") == 1

    serial_report, split_report = report(pytester, "serial.json"), report(pytester, "split.json")
    assert steady(split_report) == steady(serial_report)
    # what that equality covers, read from the split run's report
    good, worse = split_report["evaluations"]
    assert (good["retriever"], worse["retriever"]) == ("good", "worse")
    assert good["n_queries"] == worse["n_queries"] == 120
    assert [q["id"] for q in good["queries"]] == [f"q{i}" for i in range(120)]  # golden order
    assert set(good["per_tag"]) == {"even", "odd", "third"}
    assert good["ci"]["ndcg@3"][0] < good["metrics"]["ndcg@3"] < good["ci"]["ndcg@3"][1]
    changes = good["baseline"]["comparison"]["changes"]
    assert any(c["p_value"] is not None for c in changes)  # paired tests against the baseline
    assert split_report["ab"] and split_report["ab"][0]["reference"] == "good"
    assert worse["errors"] == 8 and worse["error_groups"][0]["count"] == 8
    assert not split_report["passed"]
    reasons = split_report["verdict"]["reasons"]
    assert [r["kind"] for r in reasons] == ["retriever errors", "threshold"]  # the cause first
    assert all(r["message"].startswith("graded [worse]: ") for r in reasons)

    properties = junit_properties(pytester.path / "junit.xml")  # JUnit says why, too
    assert ("retrieval.passed", "False") in properties
    assert any(
        name == "retrieval.reason" and value.startswith("threshold: graded [worse]: recall@3")
        for name, value in properties
    )


def case_properties(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each JUnit test case's properties, by its name (``retrieval[good-part1/2]``)."""
    cases = ET.parse(path).getroot().iter("testcase")
    return {
        case.get("name", ""): [
            (p.get("name", ""), p.get("value", "")) for p in case.iter("property")
        ]
        for case in cases
    }


@pytest.mark.parametrize("family", ["xunit1", "xunit2"])
def test_a_split_carries_the_merged_metrics_in_junit_as_the_serial_run_does(
    pytester: pytest.Pytester, family: str
) -> None:
    """CI dashboards read an evaluation's metrics from its JUnit test case: a golden set that
    grows past the split's minimum must not lose them. The first part's test case carries the
    merged evaluation's properties, the serial run's test case's, number for number."""
    project(pytester)
    junit = ("--junitxml", "junit.xml", "-o", f"junit_family={family}", "--junitprefix", "ci")
    gate = ("--retrieval-threshold", "recall@3=0.4")  # good passes, worse fails
    serial = pytester.runpytest_subprocess(*GOLDEN_ARGS, *SERIAL, *gate, *junit)
    serial_cases = case_properties(pytester.path / "junit.xml")
    split = pytester.runpytest_subprocess(*GOLDEN_ARGS, *SPLIT, *gate, *junit)
    assert serial.ret == split.ret == pytest.ExitCode.TESTS_FAILED
    split_cases = case_properties(pytester.path / "junit.xml")

    def steady_props(props: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [p for p in props if p[0] not in ("retrieval.latency_p95_ms", "retrieval.part")]

    for retriever in ("good", "worse"):
        whole = serial_cases[f"retrieval[{retriever}]"]
        first = split_cases[f"retrieval[{retriever}-part1/2]"]
        second = split_cases[f"retrieval[{retriever}-part2/2]"]
        assert ("retrieval.queries", "120") in whole
        assert steady_props(first) == steady_props(whole)
        assert any(name == "retrieval.latency_p95_ms" for name, _ in first)
        assert [name for name, _ in second] == ["retrieval.part"]  # the part's own, once
        assert [name for name, _ in first].count("retrieval.part") == 1
    worse = dict(split_cases["retrieval[worse-part1/2]"])
    assert worse["retrieval.passed"] == "False"
    assert dict(split_cases["retrieval[good-part1/2]"])["retrieval.passed"] == "True"


def test_a_split_records_the_same_baseline(pytester: pytest.Pytester) -> None:
    project(pytester)
    serial = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, *SERIAL, "--retrieval-update-baseline", "--retrieval-baseline", "serial.json"
    )
    split = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, *SPLIT, "--retrieval-update-baseline", "--retrieval-baseline", "split.json"
    )
    assert serial.ret == split.ret == 0, split.stdout.str()
    split.stdout.fnmatch_lines(["baseline written: split.json (golden.json::good, *::worse)"])
    serial_baseline, split_baseline = (
        report(pytester, "serial.json"),
        report(pytester, "split.json"),
    )
    assert steady(split_baseline) == steady(serial_baseline)
    assert len(split_baseline["entries"]["golden.json::good"]["queries"]) == 120


@pytest.mark.parametrize("strict", [["-W", "error"], ["-o", "filterwarnings=error"]])
def test_a_stale_baseline_under_warnings_as_errors_fails_the_merged_gate_in_its_words(
    pytester: pytest.Pytester, strict: list[str]
) -> None:
    """The controller warned of the stale baseline while it merged the parts: with warnings
    as errors that was a traceback, no retrieval section and no report."""
    project(pytester)
    assert (
        pytester.runpytest_subprocess(*GOLDEN_ARGS, *SERIAL, "--retrieval-update-baseline").ret == 0
    )
    result = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, *SPLIT, "--retrieval-k", "2", "--retrieval-report", "r.json", *strict
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        ["*stale baseline: stale baseline golden.json.baseline.json: *; refresh it with "
         "--retrieval-update-baseline (a warning, which the warning filters in force make an "
         "error*", "retrieval verdict: FAILED*"]
    )  # fmt: skip
    reasons = report(pytester, "r.json")["verdict"]["reasons"]
    assert {reason["kind"] for reason in reasons} == {"stale baseline"}


@pytest.mark.parametrize("minimum", ["0", "0.99"])
def test_a_threshold_on_a_tag_one_part_lacks_is_decided_on_the_whole(
    pytester: pytest.Pytester, minimum: str
) -> None:
    """Only q7 has the tag: one part has none of it. The threshold is the whole set's."""
    golden = json.loads(json.dumps(GOLDEN))
    golden["queries"][7]["tags"].append("rare")
    golden["thresholds"] = {"recall@3[rare]": float(minimum)}
    pytester.makeconftest(RETRIEVERS)
    write_golden(pytester, golden)
    serial = pytester.runpytest_subprocess(*GOLDEN_ARGS, *SERIAL, "--retrieval-report", "s.json")
    split = pytester.runpytest_subprocess(*GOLDEN_ARGS, *SPLIT, "--retrieval-report", "n.json")
    assert serial.ret == split.ret, split.stdout.str()
    assert split.ret == (0 if minimum == "0" else 1), split.stdout.str()
    assert "incomplete" not in split.stdout.str()
    assert steady(report(pytester, "n.json")) == steady(report(pytester, "s.json"))
    (outcome, *_) = report(pytester, "n.json")["evaluations"][0]["thresholds"]
    assert outcome["metric"] == "recall@3[rare]" and outcome["passed"] == (minimum == "0")


def test_a_part_no_query_hashes_to_is_not_waited_for(pytester: pytest.Pytester) -> None:
    """q2, q3 and q4 all hash to part 2 of 2: part 1 is not collected (it has nothing to
    evaluate), and the controller did not count it as a part that did not run -- the
    session failed ("1 of 2 parts did not run") where -n 0 passed."""
    from pytest_retrieval.shards import shard_of

    ids = ["q4", "q2", "q3"]
    assert {shard_of(qid, 2) for qid in ids} == {1}
    golden = {
        "name": "lopsided",
        "k": 3,
        "queries": [{"id": i, "query": f"query {i[1:]}", "relevant": [f"d{i[1:]}"]} for i in ids],
    }
    pytester.makeconftest(RETRIEVERS)
    write_golden(pytester, golden)
    serial = pytester.runpytest_subprocess(*GOLDEN_ARGS, *SERIAL, "--retrieval-report", "s.json")
    split = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, "-n", "2", "--retrieval-split-min", "1", "--retrieval-report", "n.json"
    )
    assert serial.ret == split.ret == 0, split.stdout.str()
    assert "part1/2" not in split.stdout.str() and "incomplete" not in split.stdout.str()
    listed = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, "-n", "2", "--retrieval-split-min", "1", "--co", "-q"
    )
    listed.stdout.fnmatch_lines(["golden.json::retrieval[[]good-part2/2[]]"])
    assert "part1/2" not in listed.stdout.str()
    assert steady(report(pytester, "n.json")) == steady(report(pytester, "s.json"))


def test_a_lopsided_split_left_out_by_k_is_left_out_quietly(pytester: pytest.Pytester) -> None:
    """-k choosing only a unit test: the golden set is deselected whole, as without -n. Its
    only part counted as 1 of 2 (the empty one) and the session failed (a reviewer)."""
    golden = {
        "name": "lopsided",
        "k": 3,
        "queries": [
            {"id": i, "query": f"query {i[1:]}", "relevant": [f"d{i[1:]}"]}
            for i in ("q4", "q2", "q3")
        ],
    }
    pytester.makeconftest(RETRIEVERS)
    write_golden(pytester, golden)
    pytester.makepyfile(test_unit="def test_u():\n    pass\n")
    args = (*GOLDEN_ARGS, "-p", "no:randomly", "--retrieval-split-min", "1", "-k", "test_u")
    serial = pytester.runpytest_subprocess(*args, *SERIAL)
    split = pytester.runpytest_subprocess(*args, "-n", "2")
    assert serial.ret == split.ret == 0, split.stdout.str()
    assert "incomplete" not in split.stdout.str()


def test_last_failed_reruns_every_part_of_a_golden_set_a_failed_part_belongs_to(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Part 2 fails (its retriever fixture raised; a part's failed calls fail it too):
    --lf then chose the part 2 items alone, and each evaluation was incomplete (FAILED),
    where -n 0's --lf re-runs a whole golden set. A failed part marks its golden set's
    other parts failed too, so --lf runs them all and the evaluations are whole."""
    project(pytester)
    monkeypatch.setenv("FAIL_PART", "2")
    args = (*GOLDEN_ARGS, "-p", "no:randomly", "-p", "cacheprovider", *SPLIT)
    first = pytester.runpytest_subprocess(*args)
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    first.assert_outcomes(passed=2, errors=2)
    monkeypatch.delenv("FAIL_PART")
    again = pytester.runpytest_subprocess(*args, "--lf", "--retrieval-report", "lf.json")
    assert "incomplete" not in again.stdout.str(), again.stdout.str()
    again.assert_outcomes(passed=4)
    assert [e["n_queries"] for e in report(pytester, "lf.json")["evaluations"]] == [120, 120]
    # a merged verdict that failed (every part passed) is a failure for --lf too: without
    # -n its item fails; a failing unit test beside it made --lf run that test alone
    pytester.makepyfile(
        test_unit="import os\n\ndef test_u():\n    assert not os.environ.get('U')\n"
    )
    monkeypatch.setenv("U", "1")
    gate = ("--retrieval-threshold", "recall@3=0.99")
    failing = pytester.runpytest_subprocess(*args, *gate)
    assert failing.ret == pytest.ExitCode.TESTS_FAILED
    failing.assert_outcomes(passed=4, failed=1)
    last = pytester.runpytest_subprocess(*args, *gate, "--lf")
    last.assert_outcomes(passed=4, failed=1)  # the unit test and every part, run again
    last.stdout.fnmatch_lines(["*retrieval verdict: FAILED*"])
    monkeypatch.delenv("U")
    fixed = pytester.runpytest_subprocess(*args, "--lf")
    fixed.assert_outcomes(passed=5)
    cleared = pytester.runpytest_subprocess(*args, "--lf")  # nothing failed: all run, pass
    assert cleared.ret == 0 and "incomplete" not in cleared.stdout.str()


@pytest.mark.keep_plugins
def test_a_part_with_failed_calls_fails_so_that_rerunfailures_runs_it_again(
    pytester: pytest.Pytester,
) -> None:
    """A transient failure (the first call of each worker times out): without -n,
    ``--reruns 1`` runs the evaluation again and it passes. A part passed despite its
    failed calls, so it was never run again and the merged verdict failed; now it fails on
    them (as a shard does), is run again, and only its last attempt is merged."""
    pytest.importorskip("pytest_rerunfailures")
    pytester.makeconftest(
        "import pytest\n\n"
        "@pytest.fixture(scope='session')\n"
        "def retriever():\n"
        "    calls = []\n"
        "    def search(query, k):\n"
        "        calls.append(query)\n"
        "        if len(calls) == 1:\n"
        "            raise TimeoutError('the backend timed out')\n"
        "        return [f'd{query.split()[-1]}', 'x1', 'x2'][:k]\n"
        "    return search\n"
    )
    write_golden(pytester, GOLDEN)
    args = (*GOLDEN_ARGS, "-p", "no:randomly", "--reruns", "1")
    serial = pytester.runpytest_subprocess(
        *args, *SERIAL, "--retrieval-report", "s.json", "--junitxml", "s.xml"
    )
    split = pytester.runpytest_subprocess(
        *args, *SPLIT, "--retrieval-report", "n.json", "--junitxml", "n.xml"
    )
    assert serial.ret == split.ret == 0, split.stdout.str()
    serial.stdout.fnmatch_lines(["*1 passed, 1 rerun*"])
    split.stdout.fnmatch_lines(["*2 passed, 2 rerun*"])
    assert steady(report(pytester, "n.json")) == steady(report(pytester, "s.json"))

    # JUnit: the merged metrics once, on the first part's last attempt, as without -n
    def names(path: str, case: str) -> list[list[str | None]]:
        cases = ET.parse(pytester.path / path).getroot().iter("testcase")
        return [
            [p.get("name") for p in c.iter("property") if p.get("name") != "retrieval.part"]
            for c in cases
            if c.get("name") == case
        ]

    whole, first = names("s.xml", "retrieval"), names("n.xml", "retrieval[part1/2]")
    assert whole[-1] and not any(whole[:-1])  # the last attempt's (rerunfailures 16.7: 2 cases)
    assert first[-1] == whole[-1] and not any(first[:-1])
    assert names("n.xml", "retrieval[part2/2]") and not any(names("n.xml", "retrieval[part2/2]"))
    failed = pytester.runpytest_subprocess(*GOLDEN_ARGS, "-p", "no:randomly", *SPLIT)
    assert failed.ret == pytest.ExitCode.TESTS_FAILED
    failed.assert_outcomes(failed=2)
    failed.stdout.fnmatch_lines(
        [
            "*graded [[]retriever[]] part1/2: 1 of * retriever calls failed (they score 0); "
            "merged with the other parts and decided on the controller"
        ]
    )


def test_a_crashed_worker_is_named_as_such(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(pytester)
    monkeypatch.setenv("CRASH_PART", "2")
    result = pytester.runpytest_subprocess(*GOLDEN_ARGS, *SPLIT)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = result.stdout.str()
    assert "at ???" not in text  # xdist's placeholder for "when" in a crash report
    result.stdout.fnmatch_lines(
        ["*golden.json::retrieval[[]*part2/2[]] failed before it produced an evaluation: *crashed*"]
    )


def test_a_part_that_errors_fails_the_evaluation_instead_of_merging_the_rest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(pytester)
    monkeypatch.setenv("FAIL_PART", "2")
    result = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, *SPLIT, "--retrieval-report", "report.json", "--retrieval-update-baseline"
    )
    result.assert_outcomes(passed=2, errors=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "no result: golden.json::retrieval[[]good[]]: evaluation incomplete: 1 of 2 parts "
            "failed (part2/2); the other parts are not merged, shown, gated or recorded as a "
            "baseline",
            "*retrieval verdict: FAILED*",
        ],
        consecutive=False,
    )
    assert "graded [good] · " not in result.stdout.str()  # part 1 alone is not shown
    document = report(pytester, "report.json")
    assert document["evaluations"] == [] and not document["passed"]
    messages = [r["message"] for r in document["verdict"]["reasons"]]
    assert any("retrieval[good-part2/2] failed at setup" in m for m in messages)
    assert any(
        m.startswith("golden.json::retrieval[worse]: evaluation incomplete") for m in messages
    )
    assert not (pytester.path / "golden.json.baseline.json").exists()


@pytest.mark.parametrize(
    "update", ["--retrieval-update-baseline", "--retrieval-update-baseline=force"]
)
def test_an_incomplete_split_is_not_recorded_even_forced_and_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, update: str
) -> None:
    """The advice of a refused update must work: forcing cannot record a set whose parts
    did not all run (it was offered, and then did nothing, silently)."""
    project(pytester)
    monkeypatch.setenv("FAIL_PART", "2")
    result = pytester.runpytest_subprocess(*GOLDEN_ARGS, *SPLIT, update)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "force it with" not in out
    result.stdout.fnmatch_lines(
        [
            "*baseline NOT updated for golden.json: its evaluation across the workers is "
            "incomplete (a part failed or did not run); a baseline is recorded only from a "
            "whole evaluation, forced or not: run every part*",
        ]
    )
    assert not (pytester.path / "golden.json.baseline.json").exists()


def test_a_part_left_out_leaves_the_gate_unrun(pytester: pytest.Pytester) -> None:
    project(pytester)
    pytester.makeini("[pytest]\nretrieval_split_min = 100\n")  # the ini key works too
    result = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, "-n", "2", "-k", "not part2", "--retrieval-update-baseline"
    )
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "partial run: golden.json::retrieval[[]good[]]: evaluation incomplete: 1 of 2 parts "
            "did not run (part2/2); * run every part (no -k, -m, --sw or node id that leaves one "
            "out)",
        ]
    )
    assert not (pytester.path / "golden.json.baseline.json").exists()


def test_a_part_chosen_by_node_id_says_the_others_did_not_run(pytester: pytest.Pytester) -> None:
    """A part picked by its node id is collected without the others: the evaluation did not
    run whole (it said the golden file had changed during the run). --lf after a failed
    part runs them all: test_last_failed_reruns_every_part_of_a_golden_set_..."""
    project(pytester)
    pytester.makeini("[pytest]\nretrieval_split_min = 100\n")
    chosen = "golden.json::retrieval[good-part1/2]"
    result = pytester.runpytest_subprocess(*GOLDEN_ARGS, "-n", "2", chosen)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "changed during the run" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "partial run: golden.json::retrieval[[]good[]]: evaluation incomplete: 1 of 2 parts "
            "did not run (part2/2); * run every part (no -k, -m, --sw or node id that leaves "
            "one out)",
        ]
    )


def test_the_parts_go_to_different_workers_among_other_tests(pytester: pytest.Pytester) -> None:
    # Old order: the parts side by side, sent to one worker in its share of the tests
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)  # 4 queries: 2 hash to each part
    pytester.makepyfile(
        test_units="import pytest\n\n@pytest.mark.parametrize('i', range(10))\n"
        "def test_unit(i):\n    pass\n"
    )
    result = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, "-n", "2", "--dist", "worksteal", "--retrieval-split-min", "2", "-v"
    )
    result.assert_outcomes(passed=12)
    ran = {
        line.split()[-1]: line.split()[0]
        for line in result.stdout.lines
        if "PASSED golden.json::retrieval[" in line
    }
    assert sorted(ran) == ["golden.json::retrieval[part1/2]", "golden.json::retrieval[part2/2]"]
    assert len(set(ran.values())) == 2, ran  # [gw0] and [gw1]


@pytest.mark.parametrize(
    ("workers", "dist", "sets"),
    # the cases where xdist deals every part out at the start (later ones go to whichever
    # worker asks first): load's first batches, worksteal's halves, loadgroup's turns
    [(2, "load", 2), (2, "worksteal", 2), (2, "loadgroup", 2), (3, "loadgroup", 2)],
)
def test_each_golden_sets_parts_go_to_different_workers_when_only_parts_run(
    pytester: pytest.Pytester, workers: int, dist: str, sets: int
) -> None:
    """Golden sets split across the workers and nothing else (``--retrieval-only``): xdist
    hands consecutive items to one worker, and each set's parts were side by side, so each
    set ran on one worker (no speed-up from -n). The parts take turns (:func:`take_turns`),
    for every way xdist deals them out."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    names = ["golden.json", "other.json", "third.json"][:sets]
    queries = [{"id": f"q{i}", "query": f"apple {i}", "relevant": ["d1"]} for i in range(30)]
    for name in names:
        write_golden(pytester, {"name": name, "k": 3, "queries": queries}, name=name)
    result = pytester.runpytest_subprocess(
        *[arg for name in names for arg in ("--retrieval-golden", name)],
        "-n", str(workers), "--dist", dist, "--retrieval-split-min", "2", "-v", "-p", "no:randomly",
    )  # fmt: skip
    result.assert_outcomes(passed=sets * workers)
    ran: dict[str, set[str]] = {}
    for line in result.stdout.lines:
        if "PASSED " in line and "::retrieval[part" in line:
            ran.setdefault(line.split()[-1].split("::")[0], set()).add(line.split()[0])
    assert sorted(ran) == sorted(names)
    assert all(len(found) == workers for found in ran.values()), ran  # every worker, each


@pytest.mark.parametrize(
    ("args", "listed"),
    [
        (["-n", "2"], ["good-part1/2", "worse-part1/2", "worse-part2/2", "good-part2/2"]),
        (["-n", "2", "--dist", "loadfile"], ["good", "worse"]),
        (["-n", "0"], ["good", "worse"]),
    ],
    ids=["split", "loadfile", "no-workers"],
)
def test_collect_only_lists_the_items_the_workers_run(
    pytester: pytest.Pytester, args: list[str], listed: list[str]
) -> None:
    """xdist starts no workers under --collect-only: the list came from the controller, which
    does not split, so it showed one item where the run has one per part."""
    project(pytester)
    result = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, "--retrieval-split-min", "100", *args, "--collect-only", "-q"
    )
    assert result.ret == pytest.ExitCode.OK
    shown = [line for line in result.stdout.lines if line.startswith("golden.json::")]
    assert shown == [f"golden.json::retrieval[{name}]" for name in listed]
    # an A/B reference is checked against the retrievers, not the parts' ids (it was a usage
    # error: "no retriever of that id ran; the ids are good-part1/2, ...")
    ab = ("--retrieval-compare-to", "good")
    listed_ab = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, "--retrieval-split-min", "100", *args, *ab, "--collect-only", "-q"
    )
    assert listed_ab.ret == pytest.ExitCode.OK, listed_ab.stdout.str()
    wrong = pytester.runpytest_subprocess(
        *GOLDEN_ARGS, "--retrieval-split-min", "100", *args, "--retrieval-compare-to", "bm25",
        "--collect-only", "-q",
    )  # fmt: skip
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    assert "no retriever of that id ran; the ids are good, worse" in wrong.stderr.str()


@pytest.mark.parametrize(
    "args",
    [
        ["--retrieval-split-min", "121"],  # above the golden set's 120 queries
        ["--retrieval-split-min", "0"],  # never
        ["--retrieval-split-min", "100", "--dist", "loadfile"],  # one worker takes the file
    ],
    ids=["below-the-minimum", "zero", "loadfile"],
)
def test_no_split_is_one_item_as_before(pytester: pytest.Pytester, args: list[str]) -> None:
    project(pytester)
    result = pytester.runpytest_subprocess(*GOLDEN_ARGS, "-n", "2", *args, "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*PASSED golden.json::retrieval[[]good[]]*"], consecutive=False)
    assert "part1/" not in result.stdout.str()


def test_a_bad_minimum_is_a_usage_error(pytester: pytest.Pytester) -> None:
    project(pytester)
    pytester.makeini("[pytest]\nretrieval_split_min = some\n")
    bad_ini = pytester.runpytest(*GOLDEN_ARGS)
    assert bad_ini.ret == pytest.ExitCode.USAGE_ERROR
    bad_ini.stderr.fnmatch_lines(
        ["ERROR: ini option retrieval_split_min = 'some': 'some' is not a whole number >= 0*"]
    )
    bad_option = pytester.runpytest(*GOLDEN_ARGS, "--retrieval-split-min", "-1")
    assert bad_option.ret == pytest.ExitCode.USAGE_ERROR
    bad_option.stderr.fnmatch_lines(["*--retrieval-split-min: '-1' is not a whole number >= 0*"])


@pytest.fixture
def judge_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with serve() as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-split-0123456789")
        yield running


def test_a_judged_split_equals_the_serial_run(
    pytester: pytest.Pytester, judge_server: JudgeServer
) -> None:
    # the helpers' 4 queries hash 2 and 2 into two parts; each worker judges its part's hits
    pytester.makeconftest(
        KEYWORD_RETRIEVER.replace(
            "    return ranked[:k]", '    return [{"id": d, "text": DOCS[d]} for d in ranked[:k]]'
        )
    )
    assert DOCS  # the texts the judge reads
    write_golden(pytester)
    judged = (*GOLDEN_ARGS, "--retrieval-judge", "--retrieval-judge-scale", "0-3")
    serial = pytester.runpytest_subprocess(
        *judged, *SERIAL, "--retrieval-judge-cache", "serial", "--retrieval-report", "serial.json"
    )
    split = pytester.runpytest_subprocess(
        *judged, "-n", "2", "--retrieval-split-min", "2", "-v",
        "--retrieval-judge-cache", "split", "--retrieval-report", "split.json",
    )  # fmt: skip
    assert serial.ret == split.ret == 0, split.stdout.str()
    split.stdout.fnmatch_lines(["*PASSED golden.json::retrieval[[]part2/2[]]*"], consecutive=False)
    serial_report, split_report = report(pytester, "serial.json"), report(pytester, "split.json")
    assert steady(split_report) == steady(serial_report)
    [evaluation] = split_report["evaluations"]
    assert evaluation["judge"]["calls"] == 12 and evaluation["judge"]["coverage"] == 1.0
    assert {"otr@3", "llm_ndcg@3"} <= set(evaluation["metrics"])


@pytest.mark.parametrize("workers", [2, 3, 4, 6])
@pytest.mark.parametrize("wholes", [1, 2, 3, 4, 5])
def test_the_parts_take_turns_so_that_no_dealing_puts_two_on_one_worker(
    wholes: int, workers: int
) -> None:
    """However xdist deals the items out -- in turns (loadgroup: position mod workers), a
    block of a round each (worksteal), two in a row (load's first batches) -- no evaluation
    gets two of its parts on one worker. Plain rounds (a1 b1 a2 b2) sent both of a's to one
    worker in turns at 2 workers; reversing every other round (a1 b1 b2 a2) did at 3."""
    from pytest_retrieval.plugin.split import take_turns

    names = "abcdefgh"[:wholes]
    rounds = [[(w, f"{w}{r}") for w in names] for r in range(workers)]
    order = take_turns(rounds, workers)
    assert sorted(order) == sorted(f"{w}{r}" for w in names for r in range(workers))
    for whole in names:
        places = [at for at, item in enumerate(order) if item[0] == whole]
        assert len({at % workers for at in places}) == workers  # in turns
        assert len({at // wholes for at in places}) == workers  # a block per round
    for at in range(0, len(order) - 1, 2):
        assert order[at][0] != order[at + 1][0] or wholes == 1  # two in a row


def test_parts_missing_from_a_round_still_take_turns() -> None:
    """A part no query hashes to is not collected: rounds of different sizes."""
    from pytest_retrieval.plugin.split import take_turns

    rounds = [[("a", "a0"), ("b", "b0")], [("a", "a1")], [("a", "a2"), ("b", "b2")]]
    order = take_turns(rounds, 3)
    assert sorted(order) == ["a0", "a1", "a2", "b0", "b2"]
    for whole in "ab":
        places = [at % 3 for at, item in enumerate(order) if item[0] == whole]
        assert len(set(places)) == len(places)
