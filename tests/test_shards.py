"""Issue 13, point 3: one golden set across CI jobs. ``--retrieval-shard I/N`` evaluates the
queries whose id hashes to shard I and writes a partial report; ``pytest-retrieval combine``
gates the union exactly as one run (numbers, CIs, paired tests, verdict, exit status,
outputs), refuses partial reports that do not make one whole and never records a baseline
from part of a golden set. The matrix recipe of ``docs/scale.md`` runs here as written."""

from __future__ import annotations

import contextlib
import json
import random
import re
import shlex
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from docs_examples import example
from helpers import KEYWORD_RETRIEVER, write_golden
from judge_server import serve

from pytest_retrieval.cli import main
from pytest_retrieval.shards import shard_of
from pytest_retrieval.validators import Shard, shard_arg

#: end-to-end runs (pytest processes, xdist, a local judge server): out of the fast
#: subset, `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

#: Two retrievers (an A/B run) that find, at a rank that varies, the relevant documents of
#: some queries: bm25 those with n % 5 != 0 (WORSE: n % 5 > 1, a regression), dense n % 4;
#: FAIL_ON names a query whose call raises.
RETRIEVERS = """
import json, os, pytest

GOLDEN = {q["query"]: q for q in json.load(open("golden.json"))["queries"]}

@pytest.fixture(scope="session", params=os.environ.get("RETRIEVERS", "bm25,dense").split(","))
def retriever(request):
    name = request.param
    def search(query, k):
        if query == os.environ.get("FAIL_ON"):
            raise RuntimeError("index offline")
        n = int(query.split()[-1])
        wanted = sorted(GOLDEN[query]["relevant"])
        if name == "bm25":
            found = n % 5 > (1 if os.environ.get("WORSE") else 0)
        else:
            found = n % 4 != 0
        filler = [f"x{n}-{i}" for i in range(k)]
        at = n % 3
        ranked = filler[:at] + (wanted if found else []) + filler[at:]
        return ranked[:k]
    return search
"""


#: the texts the judge reads, for the keyword retriever of helpers.py
JUDGED_CORPUS = """

@pytest.fixture(scope="session")
def retrieval_corpus():
    return DOCS
"""
RERUN_ADVICE = "run every shard on the same commit with the same options"


def golden_set(size: int = 300, seed: int = 13) -> dict[str, Any]:
    """``size`` graded queries over 60 documents, tagged a/b/c, two also "rare" (so shard
    3/3 has none of it), with a threshold on the whole and one on the rare tag."""
    rng = random.Random(seed)
    queries = []
    for n in range(size):
        relevant = {
            f"d{rng.randrange(60)}": rng.choice([1, 2, 3]) for _ in range(rng.randint(1, 3))
        }
        tags = [rng.choice("abc")] + (["rare"] if n in (6, 103) else [])  # not in shard 3
        queries.append({"id": f"q{n}", "query": f"query {n}", "relevant": relevant, "tags": tags})
    return {
        "name": "many",
        "k": 10,
        "queries": queries,
        "thresholds": {"recall@10": 0.5, "ndcg@10[rare]": 0.1},
    }


def make_project(pytester: pytest.Pytester, size: int = 300) -> None:
    pytester.makeconftest(RETRIEVERS)
    (pytester.path / "golden.json").write_text(json.dumps(golden_set(size)), encoding="utf-8")


def run_shards(pytester: pytest.Pytester, *options: str, count: int = 3) -> list[pytest.RunResult]:
    return [
        pytester.runpytest(
            "--retrieval-golden",
            "golden.json",
            "--retrieval-shard",
            f"{i}/{count}",
            "--retrieval-report",
            f"part{i}.json",
            *options,
        )
        for i in range(1, count + 1)
    ]


def combine(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what the pytest runs before printed
    status = main(["combine", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def evaluations(path: Path) -> list[dict[str, Any]]:
    """A report's evaluations without what differs between two runs of one retriever: the
    measured latencies, and the command that made them (``combine``'s own line: a single
    run has none)."""
    found = []
    for entry in json.loads(path.read_text(encoding="utf-8"))["evaluations"]:
        entry.pop("latency_ms")
        entry.pop("rerun", None)
        for query in entry["queries"]:
            query.pop("latency_ms")
        found.append(entry)
    return found


def junit_cases(path: Path) -> dict[str, tuple[str | None, dict[str, str]]]:
    """Test case name -> (its failure message's first line or None, its properties but
    latency)."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = case.find("failure")
        message = None
        if failure is not None:
            message = failure.get("message", "").removeprefix("Failed: ").splitlines()[0]
        props = {
            p.get("name", ""): p.get("value", "")
            for p in case.iter("property")
            if "latency" not in p.get("name", "")
        }
        cases[f"{case.get('classname')}::{case.get('name')}"] = (message, props)
    return cases


def suite_properties(path: Path) -> list[tuple[str, str]]:
    suite = next(ET.parse(path).getroot().iter("testsuite"))
    props = suite.find("properties")
    return [(p.get("name", ""), p.get("value", "")) for p in props or []]


# ---------------------------------------------------------------------------- the shard rule


def test_shard_of_is_the_same_everywhere() -> None:
    """SHA-256 of the id's UTF-8, first 8 bytes big-endian, modulo N: a fixed table, so a
    change of hash (or of the byte order, or a salted hash()) fails here."""
    table = {
        "q0": [0, 1, 0, 4, 143],
        "q1": [0, 0, 1, 4, 106],
        "q42": [0, 0, 2, 6, 164],
        "query-7": [0, 1, 1, 3, 233],
        "Ünïcode ✓": [0, 1, 0, 2, 251],
        "": [0, 0, 1, 1, 652],
        "0123456789abcdef": [0, 0, 0, 3, 128],
        "q-3f2a9c0b1d4e": [0, 1, 1, 4, 523],
    }
    for query_id, expected in table.items():
        assert [shard_of(query_id, n) for n in (1, 2, 3, 7, 1000)] == expected, query_id


def test_shards_split_a_set_evenly_and_disjointly() -> None:
    ids = [f"q{i}" for i in range(30_000)]
    sizes = [0, 0, 0]
    for query_id in ids:
        sizes[shard_of(query_id, 3)] += 1
    assert sum(sizes) == 30_000
    assert all(abs(size - 10_000) < 300 for size in sizes), sizes  # 3 sigma is ~245


def test_shard_argument() -> None:
    assert shard_arg("2/3") == Shard(1, 3) and str(Shard(1, 3)) == "2/3"
    assert shard_arg("1/1") == Shard(0, 1)
    for bad in ("0/3", "4/3", "3", "a/b", "1/0", "-1/3", "2/3/4", ""):
        with pytest.raises(Exception, match=r"is not a shard I/N.*from 1 to N"):
            shard_arg(bad)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--retrieval-shard", "4/3"], "*--retrieval-shard: '4/3' is not a shard I/N*"),
        (["--retrieval-shard", "2/3"], "*--retrieval-shard 2/3 needs --retrieval-report PATH*"),
        (
            [
                "--retrieval-shard",
                "2/3",
                "--retrieval-report",
                "p.json",
                "--retrieval-update-baseline",
            ],
            "*a baseline is never recorded from part of one*combine ... --update-baseline*",
        ),
        (
            ["--retrieval-shard", "2/3", "--retrieval-report", "p.json", "--retrieval-sample", "9"],
            "*--retrieval-shard 2/3 with --retrieval-sample*",
        ),
    ],
    ids=["out-of-range", "no-report", "update-baseline", "sample"],
)
def test_bad_shard_settings_are_usage_errors(
    pytester: pytest.Pytester, options: list[str], expected: str
) -> None:
    make_project(pytester, size=20)
    result = pytester.runpytest("--retrieval-golden", "golden.json", *options)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert not (pytester.path / "golden.json.baseline.json").exists()


# ---------------------------------------------------------------------------- 3 shards == 1 run


def test_three_shards_combined_are_one_run_number_for_number(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """300 queries, two retrievers (A/B), a baseline, then bm25 regresses: the single run and
    3 shards + combine give the same metrics, CIs, per-tag and per-query values, p-values,
    changed queries, verdict, exit status, JUnit cases and session verdict."""
    make_project(pytester)
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline"
    )
    assert recorded.ret == 0
    monkeypatch.setenv("WORSE", "1")
    single = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-report",
        "single.json",
        "--junitxml",
        "single.xml",
    )
    assert single.ret == pytest.ExitCode.TESTS_FAILED
    summary = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    shards = run_shards(pytester, "--retrieval-markdown", "part.md")
    sizes = []
    for i, shard in enumerate(shards, 1):
        assert shard.ret == 0  # a part is not gated: bm25's regression shows only on the whole
        line = next(line for line in shard.outlines if line.startswith(f"shard {i}/3: "))
        sizes.append(int(line.split()[2]))
        assert f"of 300 queries of golden.json (partial report part{i}.json; not gated" in line
        assert "gate it with pytest-retrieval combine" in line
        shard.stdout.fnmatch_lines(["*no Markdown or HTML summary of a part*"])
    assert sum(sizes) == 300 and min(sizes) > 70
    assert not summary.exists() and not (pytester.path / "part.md").exists()
    rare = [
        any("rare" in q["tags"] for q in entry["queries"])
        for i in range(1, 4)
        for entry in json.loads((pytester.path / f"part{i}.json").read_text())["evaluations"]
    ]
    assert not all(rare)  # a shard without the tag of a threshold still ran and passed

    status, out, err = combine(
        capsys,
        "part1.json",
        "part2.json",
        "part3.json",
        "--report",
        "combined.json",
        "--junit-xml",
        "combined.xml",
        "--markdown",
        "combined.md",
    )
    assert status == single.ret == 1, err
    assert "combined 3 shards: many [bm25] 300 queries, many [dense] 300 queries" in out
    assert out.rstrip().endswith("retrieval verdict: FAILED (3 reasons, listed above)")

    one, whole = (
        evaluations(pytester.path / "single.json"),
        evaluations(pytester.path / "combined.json"),
    )
    assert [e["retriever"] for e in whole] == ["bm25", "dense"]
    for mine, theirs in zip(one, whole, strict=True):
        assert mine == theirs
    bm25 = whole[0]
    assert bm25["passed"] is False
    assert [r["metric"] for r in bm25["verdict"]["reasons"]] == ["recall@10", "mrr@10", "ndcg@10"]
    assert {r["kind"] for r in bm25["verdict"]["reasons"]} == {"regression"}
    changes = {c["metric"]: c for c in bm25["baseline"]["comparison"]["changes"]}
    assert changes["recall@10"]["verdict"] == "regressed"
    assert changes["recall@10"]["p_adjusted"] < 0.05
    assert bm25["metrics"]["recall@10"] == pytest.approx(0.6)  # n % 5 > 1: 3 in 5 found
    schema = json.loads(
        resources.files("pytest_retrieval").joinpath("schema/report.schema.json").read_text()
    )
    for name in ("part1.json", "combined.json"):  # a partial report's stamp is in the schema
        jsonschema.validate(json.loads((pytester.path / name).read_text()), schema)
    documents = [
        json.loads((pytester.path / f).read_text()) for f in ("single.json", "combined.json")
    ]
    assert documents[0]["verdict"] == documents[1]["verdict"]
    assert documents[0]["ab"] == documents[1]["ab"] and len(documents[1]["ab"]) == 1

    assert junit_cases(pytester.path / "combined.xml") == junit_cases(pytester.path / "single.xml")
    # the message CI viewers show is pytest's: the failure text with its metric table (cut
    # at about 500 characters from pytest 9.2); combine's was its first line only (a reviewer)
    messages = [
        [f.get("message") for f in ET.parse(pytester.path / name).getroot().iter("failure")]
        for name in ("combined.xml", "single.xml")
    ]
    assert messages[0] == messages[1] and all("\n  metric " in m for m in messages[0] if m)
    assert ("retrieval.passed", "False") in suite_properties(pytester.path / "combined.xml")
    reasons = [
        v for n, v in suite_properties(pytester.path / "combined.xml") if n == "retrieval.reason"
    ]
    assert len(reasons) == 3 and reasons[0].startswith("regression: many [bm25]: recall@10 dropped")
    markdown = (pytester.path / "combined.md").read_text(encoding="utf-8")
    assert markdown.startswith("## Retrieval evaluation: ❌ 1 of 2 failed\n")
    for reason in reasons:  # the JUnit file's reasons are the Markdown's, as it escapes them
        shown = reason.replace("[", "\\[").replace("]", "\\]").replace("<", "&lt;")
        assert f"- ❌ {shown}" in markdown.splitlines()
    assert summary.read_text(encoding="utf-8") == markdown + "\n"  # the step summary, once


def test_a_passing_whole_passes_and_failed_calls_fail_every_way(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard fails on what is broken whatever the others find (a retriever call that
    raised), and combine fails the whole for it, as the single run does."""
    make_project(pytester, size=60)
    monkeypatch.setenv("RETRIEVERS", "bm25")
    shards = run_shards(
        pytester,
        "--retrieval-threshold",
        "recall@10=0.5",
        "--retrieval-threshold",
        "ndcg@10[rare]=0",
    )
    assert [s.ret for s in shards] == [0, 0, 0]
    assert combine(capsys, "part1.json", "part2.json", "part3.json")[0] == 0

    monkeypatch.setenv("FAIL_ON", "query 7")
    single = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", "single.json"
    )
    shards = run_shards(pytester)
    failing = shard_of("q7", 3)
    assert [s.ret for s in shards] == [1 if i == failing else 0 for i in range(3)]
    shards[failing].stdout.fnmatch_lines(["*retriever errors: 1 of * retriever calls failed*"])
    status, out, _ = combine(
        capsys, "part1.json", "part2.json", "part3.json", "--report", "whole.json"
    )
    assert status == single.ret == 1
    assert "    retriever errors: 1 of 60 retriever calls failed (they score 0)" in out.splitlines()
    # the advice names the report each writes (it named --retrieval-report, which they gave)
    assert "    (-v shows the first traceback of each; whole.json keeps them)" in out.splitlines()
    single.stdout.fnmatch_lines(
        ["    (-v shows the first traceback of each; single.json keeps them)"]
    )
    shards[failing].stdout.fnmatch_lines(
        [f"    (-v shows the first traceback of each; part{failing + 1}.json keeps them)"]
    )
    assert evaluations(pytester.path / "whole.json") == evaluations(pytester.path / "single.json")
    baseline = pytester.path / "golden.json.baseline.json"
    status, out, _ = combine(capsys, "part1.json", "part2.json", "part3.json", "--update-baseline")
    assert status == 1 and not baseline.exists()
    assert "  not compared with a baseline: this run is to be recorded in " in out
    assert "--retrieval-report" not in out and "recording baseline" not in out
    assert "    (-v shows the first traceback of each; --report keeps them)" in out.splitlines()
    assert (
        "partial run: baseline NOT updated for golden.json: this run is partial (many [bm25]: "
        "1 of 60 retriever calls failed). Fix the failed calls, or force it with "
        "--update-baseline=force"
    ) in out.splitlines()
    combine(capsys, "part1.json", "part2.json", "part3.json", "--update-baseline=force")
    assert "golden.json::bm25" in json.loads(baseline.read_text())["entries"]


# ---------------------------------------------------------------------------- refusals


@pytest.fixture
def partials(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project of 40 queries, one retriever, and its three partial reports."""
    make_project(pytester, size=40)
    monkeypatch.setenv("RETRIEVERS", "bm25")
    assert [s.ret for s in run_shards(pytester)] == [0, 0, 0]
    return pytester


def refused(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> str:
    """combine's message for inputs it refuses (exit 2), checked to be written in the
    report it was asked for too."""
    status, out, err = combine(
        capsys, *argv, "--report", "refused.json", "--junit-xml", "refused.xml"
    )
    assert status == 2, (out, err)
    assert "Traceback" not in err and out == ""
    message = err.split("pytest-retrieval combine: error: ", 1)[1].strip()
    report = json.loads((path / "refused.json").read_text(encoding="utf-8"))
    assert report["passed"] is False and report["evaluations"] == []
    assert report["verdict"]["reasons"] == [{"kind": "usage", "message": message, "metric": None}]
    (suite,) = ET.parse(path / "refused.xml").getroot()  # red in a CI test viewer
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("1", "1", "0")
    error = suite.find("testcase/error")
    assert error is not None and error.get("message") == f"usage: {message}".splitlines()[0]
    return message


@contextlib.contextmanager
def judged_shards(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """part1..3.json of the judged golden set, with the test judge server still up inside
    the block (its credentials the only ones in the environment)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(KEYWORD_RETRIEVER + JUDGED_CORPUS)
    write_golden(pytester)
    with serve() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-shards-0123456789")
        assert [r.ret for r in run_shards(pytester, "--retrieval-judge")] == [0, 0, 0]
        yield


def rerun_shard(pytester: pytest.Pytester, index: int, *options: str) -> None:
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-shard",
        f"{index}/3",
        "--retrieval-report",
        f"part{index}.json",
        *options,
    )
    assert result.ret == 0


def test_a_missing_shard_is_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    message = refused(capsys, partials.path, "part1.json", "part3.json")
    assert message.startswith("shard 2/3 is missing (given: 1/3 part1.json, 3/3 part3.json)")
    assert "give every shard's report" in message


def test_a_partial_report_that_is_not_there_is_refused_with_the_outputs(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard whose job died before its upload: the outputs still say why."""
    message = refused(capsys, partials.path, "part1.json", "part2.json", "missing.json")
    assert message == "argument PARTIAL: no such file: 'missing.json'"


@pytest.mark.parametrize("option", ["--report", "--markdown", "--junit-xml"])
def test_an_output_onto_a_partial_report_not_given_is_refused_before_anything_is_written(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    """``combine part1.json part2.json --report part3.json`` (a slip of the shell) replaced
    shard 3's report with the refusal that shard 3 was missing; a copy of a shard's report
    elsewhere was overwritten by a gate that passed."""
    shard3 = (partials.path / "part3.json").read_bytes()
    status, _, err = combine(capsys, "part1.json", "part2.json", option, "part3.json")
    assert status == 2 and "Traceback" not in err
    assert (
        f"error: {option} part3.json is a shard's partial report (shard 3/3), "
        "not one given to combine: writing it would overwrite it; give it as a PARTIAL, or "
        "write the output to another path"
    ) in err
    assert (partials.path / "part3.json").read_bytes() == shard3
    (partials.path / "copy").mkdir()
    (partials.path / "copy" / "part1.json").write_bytes(shard3)
    status, _, err = combine(
        capsys, "part1.json", "part2.json", "part3.json", option, "copy/part1.json"
    )
    assert status == 2 and (partials.path / "copy" / "part1.json").read_bytes() == shard3
    # the shard says so in its first bytes, whatever its first evaluation (a retrieval_eval
    # test's has no part) or its verdict's length; a copy with its keys sorted is read whole
    assert b'"shard":"3/3"' in shard3[:40]
    sorted_copy = json.dumps(json.loads(shard3), sort_keys=True, indent=1)
    (partials.path / "copy" / "sorted.json").write_text(sorted_copy, encoding="utf-8")
    status, _, err = combine(
        capsys, "part1.json", "part2.json", "part3.json", option, "copy/sorted.json"
    )
    assert status == 2 and "copy/sorted.json is a shard's partial report (shard 3/3)" in err
    # a report combine wrote before is its own output: written again
    assert combine(capsys, "part1.json", "part2.json", "part3.json", "--report", "w.json")[0] == 0
    assert combine(capsys, "part1.json", "part2.json", "part3.json", "--report", "w.json")[0] == 0


def test_a_shard_given_twice_is_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(partials.path / "part2.json", partials.path / "again.json")
    message = refused(capsys, partials.path, "part1.json", "part2.json", "again.json", "part3.json")
    assert (
        message
        == "shard 2/3 is given twice: part2.json and again.json; give each shard's report once"
    )
    message = refused(capsys, partials.path, "part1.json", "part1.json", "part2.json", "part3.json")
    assert message.startswith("shard 1/3 is given twice: part1.json and part1.json;")


def test_shards_of_another_count_are_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    result = partials.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-shard",
        "3/4",
        "--retrieval-report",
        "four.json",
    )
    assert result.ret == 0
    message = refused(capsys, partials.path, "part1.json", "part2.json", "four.json")
    assert message.startswith("the reports are of different shard counts (part1.json is shard 1/3,")
    assert "four.json is shard 3/4" in message


def test_shards_of_another_golden_set_are_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    data = golden_set(40)
    data["queries"][0]["relevant"] = {"d0": 1}  # re-judged on the branch of shard 3
    (partials.path / "golden.json").write_text(json.dumps(data), encoding="utf-8")
    rerun_shard(partials, 3)
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert re.fullmatch(
        r"part1\.json and part3\.json differ on golden\.json \[bm25\]: golden fingerprint "
        r"'\w+' vs '\w+'; run every shard on the same commit with the same options",
        message,
    )


def test_shards_of_another_retriever_are_refused(
    partials: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RETRIEVERS", "dense")
    rerun_shard(partials, 2)
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert message.startswith(
        "golden.json [bm25] is in part1.json but not in part2.json (which has golden.json [dense])"
    )


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            ["--retrieval-threshold", "recall@10=0.6"],
            "thresholds recall@10=0.5, ndcg@10[rare]=0.1 vs recall@10=0.6, ndcg@10[rare]=0.1",
        ),
        (["--retrieval-alpha", "0.01"], "alpha 0.05 vs 0.01"),
        (["--retrieval-max-drop", "recall@10=2%"], "max drops the default vs recall@10=2%"),
        (["--retrieval-k", "5"], "k 10 vs 5"),
        (["--retrieval-metric", "ndcg@3"], "metrics hit_rate@10, "),
        (["--retrieval-gate", "map@10"], "gated metrics the default vs map@10"),
        (
            ["-W", "error:stale baseline:pytest.PytestWarning"],
            "a stale baseline is an error (-W) False vs True",
        ),
    ],
    ids=["threshold", "alpha", "max-drop", "k", "metric", "gate", "warnings-as-errors"],
)
def test_shards_run_with_other_settings_are_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str], options: list[str], expected: str
) -> None:
    rerun_shard(partials, 3, *options)
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert message.startswith(f"part1.json and part3.json differ on golden.json [bm25]: {expected}")


def test_a_partial_report_reads_as_a_part_in_show_diff_and_junit(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard's report is not the gate: show says it is a part, diff refuses to gate it
    (it passed a part against the whole), and its JUnit test case says which part it is
    instead of the part's metrics under the gate's test name."""
    partials.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "whole.json")
    (shard,) = [s for s in run_shards(partials, "--junitxml", "part.xml")][-1:]
    assert shard.ret == 0
    described = "shard 3/3: 12 of 40 queries of golden.json"
    capsys.readouterr()
    assert main(["show", "part3.json"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1] == (
        f"  {described} (a partial report: gated only with every shard's, by "
        "pytest-retrieval combine)"
    )
    assert main(["diff", "whole.json", "part3.json"]) == 1
    err = capsys.readouterr().err
    assert (
        f"part3.json: many [bm25] is {described}, not gated alone: combine every shard's "
        "report (pytest-retrieval combine ... --report whole.json) and compare that"
    ) in err
    cases = junit_cases(partials.path / "part.xml")
    ((_, properties),) = cases.values()
    assert properties == {"retrieval.part": f"{described} (gated by pytest-retrieval combine)"}


def test_what_is_not_a_partial_report_is_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    partials.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "whole.json")
    message = refused(capsys, partials.path, "part1.json", "whole.json")
    assert message.startswith(
        "whole.json: many [bm25] is not a part of a shard: the report was written"
    )
    stopped = partials.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-shard",
        "2/3",
        "--retrieval-report",
        "stopped.json",
        "--retrieval-update-baseline",
    )
    assert stopped.ret == pytest.ExitCode.USAGE_ERROR  # its report says why, with no evaluation
    message = refused(capsys, partials.path, "part1.json", "stopped.json", "part3.json")
    assert message.startswith(
        "stopped.json holds no evaluation: its shard run stopped before any ran (usage: "
        "--retrieval-shard 2/3 with --retrieval-update-baseline"
    )
    (partials.path / "notes.json").write_text("[1, 2]", encoding="utf-8")
    assert refused(capsys, partials.path, "notes.json") == "notes.json: not a JSON object"


def test_evaluations_of_the_shards_own_tests_are_left_out(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A test of the user's that calls retrieval_eval evaluates its whole golden set in every
    shard: not a part, so combine leaves it out and says so."""
    make_project(pytester, size=40)
    monkeypatch.setenv("RETRIEVERS", "bm25")
    pytester.makepyfile(
        test_mine="def test_mine(retrieval_eval, retriever):\n"
        "    retrieval_eval(retriever, golden='golden.json', retriever_id='mine')\n"
    )
    assert [s.ret for s in run_shards(pytester)] == [0, 0, 0]
    status, out, _ = combine(capsys, "part1.json", "part2.json", "part3.json", "--report", "w.json")
    assert status == 0
    assert (
        "combined 3 shards: many [bm25] 40 queries; left out: 1 evaluation of the shards' own "
        "tests (retrieval_eval calls are not sharded; run the shards with --retrieval-only)"
    ) in out.splitlines()
    assert [
        e["retriever"] for e in json.loads((pytester.path / "w.json").read_text())["evaluations"]
    ] == ["bm25"]
    # a shard where only that test ran: it was "written without --retrieval-shard"
    mine_only = run_shards(pytester, "-k", "test_mine", count=1)[0]
    assert mine_only.ret == 0
    status, _, err = combine(capsys, "part1.json")
    assert (
        status == 2
        and (
            "part1.json: shard 1/1 ran no golden-set evaluation, only many [mine] (retrieval_eval "
            "tests, which shards do not split): run every shard without -k, -m or --lf leaving "
            "its golden sets out"
        )
        in err
    )
    # the golden set from the ini, left out by the path given: the shard said nothing
    pytester.makeini("[pytest]\nretrieval_golden = golden.json\n")
    by_path = pytester.runpytest(
        "--retrieval-shard=1/1", "--retrieval-report=part1.json", "test_mine.py"
    )
    assert by_path.ret == 0
    by_path.stdout.fnmatch_lines(
        ["warning: shard 1/1 ran no golden-set evaluation, only retrieval_eval tests, which "
         "shards do not split (node ids or paths left out golden.json): combine refuses its "
         "report (part1.json)"]
    )  # fmt: skip


# ---------------------------------------------------------------------------- baselines


def test_no_baseline_is_recorded_for_a_golden_set_other_than_the_shards(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The gate job on another commit than the shards' (a golden set edited since): combine
    recorded the shards' numbers as the baseline of the golden set here, which they never
    evaluated (a reviewer). Refused, naming both fingerprints; gating is still allowed (the
    baseline's per-query fingerprints tell changed queries apart)."""
    golden = partials.path / "golden.json"
    document = json.loads(golden.read_text(encoding="utf-8"))
    document["queries"] = document["queries"][:-1]
    golden.write_text(json.dumps(document), encoding="utf-8")
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json",
                      "--update-baseline=force")  # fmt: skip
    assert message.startswith(
        "golden.json::retrieval[bm25]: the golden set here, golden.json, is not the one the "
        "shards evaluated (fingerprint "
    )
    assert "run combine on the commit the shards ran" in message
    assert not (partials.path / "golden.json.baseline.json").exists()
    status, _, _ = combine(capsys, "part1.json", "part2.json", "part3.json")
    assert status == 0


def test_the_baseline_is_recorded_from_the_whole_only(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = partials.path / "golden.json.baseline.json"
    refused(capsys, partials.path, "part1.json", "part2.json", "--update-baseline")
    assert not baseline.exists()
    status, out, _ = combine(capsys, "part1.json", "part2.json", "part3.json", "--update-baseline")
    assert status == 0
    assert "baseline written: golden.json.baseline.json (golden.json::bm25)" in out
    combined = json.loads(baseline.read_text(encoding="utf-8"))["entries"]["golden.json::bm25"]
    baseline.unlink()
    single = partials.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    assert single.ret == 0
    recorded = json.loads(baseline.read_text(encoding="utf-8"))["entries"]["golden.json::bm25"]
    for entry in (combined, recorded):
        entry.pop("created"), entry.pop("latency_ms")
        for query in entry["queries"].values():
            query.pop("latency_ms")
    assert combined == recorded
    # the next combine compares with it: an unchanged retriever, nothing moved
    status, out, _ = combine(capsys, "part1.json", "part2.json", "part3.json")
    assert status == 0 and "vs baseline golden.json.baseline.json" in out


def test_combine_where_the_shards_baseline_is_not_found_is_refused(
    partials: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The shards compared with a baseline; combine run from another folder (where that
    relative path names nothing) must not pass the whole as "no baseline"."""
    assert partials.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    assert [s.ret for s in run_shards(partials)] == [0, 0, 0]
    elsewhere = partials.path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    parts = [str(partials.path / f"part{i}.json") for i in (1, 2, 3)]
    message = refused(capsys, elsewhere, *parts)
    assert message == (
        "golden.json::retrieval[bm25]: the shards found their baseline entry golden.json::bm25 "
        f"in 'golden.json.baseline.json', but {elsewhere}/golden.json.baseline.json does not "
        "exist: run combine in the folder the shards ran pytest in, or pass the baseline they "
        "used with --baseline"
    )
    # recording there would write a new baseline beside the shards' (and pass): refused too
    message = refused(capsys, elsewhere, *parts, "--update-baseline")
    assert message.endswith("(recording here would write a new file beside it)")
    assert not (elsewhere / "golden.json.baseline.json").exists()
    # as the refusal advises: the shards' baseline passed, compared with it (a regression fails)
    status, out, _ = combine(
        capsys, *parts, "--baseline", str(partials.path / "golden.json.baseline.json")
    )
    assert status == 0 and "vs baseline" in out
    recorded = json.loads((partials.path / "golden.json.baseline.json").read_text())
    (elsewhere / "other.json").write_text(json.dumps({**recorded, "entries": {}}))
    message = refused(capsys, elsewhere, *parts, "--baseline", "other.json")
    assert message.startswith(
        "golden.json::retrieval[bm25]: the shards found their baseline entry golden.json::bm25 "
        "in 'golden.json.baseline.json', but other.json does not hold it"
    )
    monkeypatch.chdir(partials.path)  # where the shards ran: compared, as before
    status, out, _ = combine(capsys, "part1.json", "part2.json", "part3.json")
    assert status == 0 and "vs baseline golden.json.baseline.json" in out
    # another baseline, the golden set found: it may lack the entry (a first cached one)
    status, out, _ = combine(
        capsys, "part1.json", "part2.json", "part3.json", "--baseline", "new.json"
    )
    assert status == 0 and "no baseline for many::bm25 in new.json" in out
    # the fix it prints is combine's own, and records the entry run as printed
    fix = "pytest-retrieval combine part1.json part2.json part3.json --baseline new.json"
    assert f"record one on main with: {fix} --update-baseline" in out
    status, out, _ = combine(capsys, *shlex.split(fix)[2:], "--update-baseline")
    assert status == 0 and "baseline written: new.json" in out
    assert list(json.loads((partials.path / "new.json").read_text())["entries"]) == [
        "golden.json::bm25"
    ]


def test_empty_shards_combine_into_the_single_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A smoke set of 3 queries over 5 jobs: the shards no query hashes to still compute
    what the whole does (judged@k), so combine gates them as one run."""
    pytester.makeconftest(RETRIEVERS)
    small = {**golden_set(3), "thresholds": {}}
    (pytester.path / "golden.json").write_text(json.dumps(small), encoding="utf-8")
    monkeypatch.setenv("RETRIEVERS", "bm25")
    assert {shard_of(f"q{n}", 5) for n in range(3)} != set(range(5))  # some shards are empty
    assert [s.ret for s in run_shards(pytester, count=5)] == [0] * 5
    parts = [f"part{i}.json" for i in range(1, 6)]
    status, _, err = combine(capsys, *parts, "--report", "combined.json")
    assert status == 0, err
    single = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", "one.json"
    )
    assert single.ret == 0
    combined = evaluations(pytester.path / "combined.json")
    assert combined == evaluations(pytester.path / "one.json")
    assert "judged@10" in combined[0]["metrics"]


def test_combine_records_several_evaluations_into_one_baseline(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two retrievers on one golden set share its baseline file: one output, not a clash."""
    make_project(pytester, size=40)
    assert [s.ret for s in run_shards(pytester, count=2)] == [0, 0]
    status, out, err = combine(capsys, "part1.json", "part2.json", "--update-baseline")
    assert status == 0, err
    assert (
        "baseline written: golden.json.baseline.json (golden.json::bm25, golden.json::dense)" in out
    )


@pytest.mark.parametrize("strict", [["-W", "error"], ["-o", "filterwarnings=error"]])
def test_a_stale_baseline_under_warnings_as_errors_fails_the_combined_gate_as_one_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], strict: list[str]
) -> None:
    """One run fails on it (the warning made an error); combine passed the same shards, which
    could not tell it that the warning filters made it an error."""
    make_project(pytester, size=60)
    pytester.runpytest("--retrieval-golden=golden.json", "--retrieval-update-baseline")
    args = ("--retrieval-golden=golden.json", "--retrieval-k=2", *strict)
    # in processes of their own: warnings as errors in this one meet other tests' leftovers
    single = pytester.runpytest_subprocess(*args, "--retrieval-report=single.json")
    assert single.ret == 1
    for i in (1, 2, 3):
        shard = (f"--retrieval-shard={i}/3", f"--retrieval-report=part{i}.json")
        assert pytester.runpytest_subprocess(*args, *shard).ret == 0
    status, out, _ = combine(capsys, "part1.json", "part2.json", "part3.json", "--report", "w.json")
    assert status == 1 and "a warning, which the warning filters in force make an error" in out
    whole = json.loads((pytester.path / "w.json").read_text(encoding="utf-8"))
    one = json.loads((pytester.path / "single.json").read_text(encoding="utf-8"))
    assert whole["verdict"]["reasons"] == one["verdict"]["reasons"]
    assert {r["kind"] for r in whole["verdict"]["reasons"]} == {"stale baseline"}
    # without the filters the same shards pass, with the stale baseline as a warning
    assert [s.ret for s in run_shards(pytester, "--retrieval-k=2")] == [0, 0, 0]
    assert combine(capsys, "part1.json", "part2.json", "part3.json")[0] == 0


def test_a_shard_that_ran_no_evaluation_says_so(pytester: pytest.Pytester) -> None:
    """-k leaving out every evaluation: the shard wrote no partial report and said nothing,
    and combine then said only "no such file"."""
    make_project(pytester, size=40)
    [shard] = run_shards(pytester, "-k", "nothing_matches", count=1)
    assert shard.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert not (pytester.path / "part1.json").exists()
    shard.stdout.fnmatch_lines(
        ["warning: shard 1/1 ran no evaluation (-k, -m, --lf, node ids or paths left out "
         "golden.json::retrieval[[]bm25[]], golden.json::retrieval[[]dense[]]): it writes no "
         "partial report (part1.json), and combine needs every shard's"]
    )  # fmt: skip
    assert "retrieval verdict" not in shard.stdout.str()  # nothing was decided
    # the golden set not collected at all (a path or node id of other tests; --lf skipping
    # the file), and an earlier run's partial report left there, which combine would take
    assert run_shards(pytester, count=1)[0].ret == 0
    pytester.makepyfile(test_other="def test_x():\n    pass\n")
    pytester.makeini("[pytest]\nretrieval_golden = golden.json\n")
    other = pytester.runpytest(
        "--retrieval-shard=1/1", "--retrieval-report=part1.json", "test_other.py"
    )
    other.stdout.fnmatch_lines(
        ["warning: shard 1/1 ran no evaluation (-k, -m, --lf, node ids or paths left out every "
         "evaluation of golden.json): it writes no partial report; part1.json is an earlier "
         "run's (shard 1/1): delete it, or combine takes it for this one's"]
    )  # fmt: skip


def test_shards_that_left_an_evaluation_out_record_only_the_whole_golden_sets(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """-k leaves other.json's "dense" out: a single run records golden.json and refuses
    other.json; the shards, run alike, say so and combine does the same."""
    make_project(pytester, size=40)
    shutil.copy(pytester.path / "golden.json", pytester.path / "other.json")
    both = ("--retrieval-golden", "golden.json", "--retrieval-golden", "other.json")
    left_out = ("-k", "not (other and dense)")
    baseline = pytester.path / "golden.json.baseline.json"
    single = pytester.runpytest(*both, *left_out, "--retrieval-update-baseline")
    single.stdout.fnmatch_lines(["*baseline NOT updated for other.json: this run is partial*"])
    single_entries = sorted(json.loads(baseline.read_text())["entries"])
    assert single_entries == ["golden.json::bm25", "golden.json::dense"]
    assert not (pytester.path / "other.json.baseline.json").exists()
    baseline.unlink()
    shards = run_shards(pytester, "--retrieval-golden", "other.json", *left_out, count=2)
    assert [s.ret for s in shards] == [0, 0]
    shards[0].stdout.fnmatch_lines(
        ["*warning: other.json: this shard ran part of it (1 of 2 evaluations of other.json "
         "were deselected or did not run (other.json::retrieval[[]dense[]])): combine records "
         "no baseline from it unless forced (--update-baseline=force)"]
    )  # fmt: skip
    status, out, _ = combine(capsys, "part1.json", "part2.json", "--update-baseline")
    assert status == 1
    assert (
        "partial run: baseline NOT updated for other.json: this run is partial (1 of 2 "
        "evaluations of other.json were deselected or did not run (other.json::retrieval"
        "[dense])). Run every shard without -k, -m or --lf leaving an evaluation out, or force "
        "it with --update-baseline=force"
    ) in out
    assert sorted(json.loads(baseline.read_text())["entries"]) == single_entries
    assert not (pytester.path / "other.json.baseline.json").exists()
    status, out, _ = combine(capsys, "part1.json", "part2.json", "--update-baseline=force")
    assert status == 0 and "baseline written: other.json.baseline.json (other.json::bm25)" in out
    # other.json left out whole: nothing of it to record, golden.json recorded, as one run
    baseline.unlink()
    (pytester.path / "other.json.baseline.json").unlink()
    single = pytester.runpytest(*both, "-k", "not other", "--retrieval-update-baseline")
    assert single.ret == 1
    single.stdout.fnmatch_lines(["*baseline NOT updated for other.json: this run is partial (2*"])
    assert sorted(json.loads(baseline.read_text())["entries"]) == single_entries
    baseline.unlink()
    shards = run_shards(pytester, "--retrieval-golden", "other.json", "-k", "not other", count=2)
    assert [s.ret for s in shards] == [0, 0]
    status, out, _ = combine(capsys, "part1.json", "part2.json", "--update-baseline")
    assert status == 1
    assert "baseline NOT updated for other.json: this run is partial (2 of 2 evaluations" in out
    assert sorted(json.loads(baseline.read_text())["entries"]) == single_entries
    assert not (pytester.path / "other.json.baseline.json").exists()


def test_shards_of_different_versions_are_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    path = partials.path / "part3.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    report["plugin_version"] = "9.9.9"
    path.write_text(json.dumps(report), encoding="utf-8")
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert message.startswith("the reports were written by different pytest-retrieval versions (")
    assert "part3.json by 9.9.9" in message and message.endswith(
        "; run every shard with the same version"
    )


# ---------------------------------------------------------------------------- the docs' recipe


def recipe_jobs() -> dict[str, Any]:
    """The jobs of the matrix workflow in docs/scale.md."""
    jobs: dict[str, Any] = yaml.safe_load(example("shards-github-actions"))["jobs"]
    return jobs


def recipe_commands() -> tuple[list[list[str]], list[str]]:
    """The recipe's shard command for each matrix value, and its combine command."""
    jobs = recipe_jobs()
    (shard_step,) = [s for s in jobs["shard"]["steps"] if "--retrieval-shard" in s.get("run", "")]
    (gate_step,) = [s for s in jobs["gate"]["steps"] if "combine" in s.get("run", "")]
    shards = [
        shlex.split(shard_step["run"].replace("${{ matrix.shard }}", str(value)))
        for value in jobs["shard"]["strategy"]["matrix"]["shard"]
    ]
    return shards, shlex.split(gate_step["run"])


def test_the_docs_recipe_has_the_shape_github_expects() -> None:
    jobs = recipe_jobs()
    matrix = jobs["shard"]["strategy"]
    assert matrix["fail-fast"] is False  # one failing shard does not cancel the others
    assert jobs["gate"]["needs"] == "shard" and jobs["gate"]["if"] == "${{ !cancelled() }}"
    uploads = [s for s in jobs["shard"]["steps"] if s.get("uses", "").startswith("actions/upload")]
    assert [s["if"] for s in uploads] == ["${{ !cancelled() }}"]  # a failed shard's report too
    (download,) = [
        s for s in jobs["gate"]["steps"] if s.get("uses", "").startswith("actions/download")
    ]
    assert download["with"]["merge-multiple"] is True
    shards, gate = recipe_commands()
    written = {shard[shard.index("--retrieval-report") + 1] for shard in shards}
    assert re.fullmatch(download["with"]["pattern"].replace("*", ".*"), "partial-1")
    assert written == {
        word for word in gate if word.endswith(".json") and word.startswith("partial")
    }
    assert [u["with"]["path"] for u in uploads] == ["partial-${{ matrix.shard }}.json"]


def test_the_docs_recipe_runs_as_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recipe's commands, as docs/scale.md writes them, in a project configured with the
    recipes' ini block and laid out as the recipes assume (the golden set from
    retrieval_golden in tests/retrieval/, the fixture in tests/conftest.py): shards pass,
    combine gates."""
    ini = example("recipes-pyproject")
    golden = "tests/retrieval/golden.json"
    assert f'retrieval_golden = ["{golden}"]' in ini
    (pytester.path / "pyproject.toml").write_text(ini, encoding="utf-8")
    (pytester.path / "tests" / "retrieval").mkdir(parents=True)
    conftest = RETRIEVERS.replace('open("golden.json")', f'open("{golden}")')
    (pytester.path / "tests" / "conftest.py").write_text(conftest, encoding="utf-8")
    (pytester.path / golden).write_text(json.dumps(golden_set(60)), encoding="utf-8")
    monkeypatch.setenv("RETRIEVERS", "bm25")
    shards, gate = recipe_commands()
    assert len(shards) == 3
    for words in shards:
        assert words[0] == "pytest"
        assert pytester.runpytest(*words[1:]).ret == 0
    assert gate[0] == "pytest-retrieval"
    status = main(gate[1:])
    out = capsys.readouterr().out
    assert status == 0 and "combined 3 shards: many [bm25] 60 queries" in out
    written = [word for word in gate if word.startswith("retrieval") and "." in word]
    assert written and all((pytester.path / name).is_file() for name in written)


def test_a_golden_set_in_a_folder_named_like_dotdot_is_inside_the_checkout(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``..data/golden.json`` is inside the folder (only ``..`` itself, or ``../``, leads out):
    shards that ran in checkouts at two places name it alike, so combine takes them."""
    monkeypatch.setenv("RETRIEVERS", "bm25")
    first = pytester.path / "job1"
    (first / "..data").mkdir(parents=True)
    (first / "conftest.py").write_text(RETRIEVERS.replace("golden.json", "..data/golden.json"))
    small = {**golden_set(40), "thresholds": {}}
    (first / "..data" / "golden.json").write_text(json.dumps(small), encoding="utf-8")
    second = pytester.path / "job2"
    shutil.copytree(first, second)
    for i, job in ((1, first), (2, second)):
        monkeypatch.chdir(job)
        result = pytester.runpytest(
            "--retrieval-golden",
            "..data/golden.json",
            "--retrieval-shard",
            f"{i}/2",
            "--retrieval-report",
            str(pytester.path / f"part{i}.json"),
        )
        assert result.ret == 0, result.stdout.str()
    recorded = [
        json.loads((pytester.path / f"part{i}.json").read_text())["evaluations"][0]["part"]
        for i in (1, 2)
    ]
    assert [part["golden"] for part in recorded] == ["..data/golden.json"] * 2
    status, _, err = combine(
        capsys, str(pytester.path / "part1.json"), str(pytester.path / "part2.json")
    )
    assert status == 0, err


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        ("/evaluations/0/queries/0/id", None),
        ("/evaluations/0/queries/0/tags", [1]),
        ("/evaluations/0/queries/0/duplicates", None),
        ("/evaluations/0/queries/0/error", 5),
        ("/evaluations/0/part/positions/0", "0"),  # int() took these
        ("/evaluations/0/part/positions/1", 1.5),
        ("/evaluations/0/part/positions/0", False),
        ("/evaluations/0/part/index", "2"),
        ("/evaluations/0/part/count", 3.5),
    ],
)
def test_a_partial_report_with_a_value_of_the_wrong_type_is_refused_where_it_is(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str], pointer: str, value: Any
) -> None:
    """An edited or foreign partial report: one refusal naming the file and the place (it
    was a traceback and exit 1, the status of a failed gate, with no outputs written)."""
    path = partials.path / "part3.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    *parents, last = pointer.strip("/").split("/")
    place: Any = document
    for step in parents:
        place = place[int(step)] if isinstance(place, list) else place[step]
    place[int(last) if isinstance(place, list) else last] = value
    path.write_text(json.dumps(document), encoding="utf-8")
    parts = ["part1.json", "part2.json", "part3.json"]
    message = refused(capsys, partials.path, *parts, "--update-baseline")
    assert message.startswith(f"part3.json, {pointer}"), message
    assert message.endswith("run that shard again")
    assert not (partials.path / "golden.json.baseline.json").exists()  # nothing recorded


@pytest.mark.parametrize("version", [99, "1", True, None])
def test_a_partial_report_of_another_format_version_is_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str], version: Any
) -> None:
    path = partials.path / "part2.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["version"] = version
    path.write_text(json.dumps(document), encoding="utf-8")
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert message == (
        f"part2.json, /version: {version!r} is not the report format this pytest-retrieval "
        "reads (1); run the shards and combine with one pytest-retrieval"
    )


def test_a_position_outside_the_golden_set_is_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Positions give the golden order; one edited past the end moved a query silently."""
    path = partials.path / "part2.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    original = document["evaluations"][0]["part"]["positions"][-1]
    document["evaluations"][0]["part"]["positions"][-1] = 100000  # still in increasing order
    path.write_text(json.dumps(document), encoding="utf-8")
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert message.startswith(
        "golden.json [bm25]: the shards place a query at 100000, outside the golden set's 40 "
        "positions (0 to 39)"
    ), message
    # two positions swapped within a part: its queries out of golden order
    document["evaluations"][0]["part"]["positions"][-1] = original
    positions = document["evaluations"][0]["part"]["positions"]
    positions[0], positions[1] = positions[1], positions[0]
    path.write_text(json.dumps(document), encoding="utf-8")
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert message.startswith(
        "part2.json: golden.json [bm25]: its positions are not in increasing (golden) order"
    ), message


def test_shards_of_different_commits_are_refused(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job re-run after a push mixes two versions of the retriever: not one run."""
    for name, commit in (
        ("part1.json", "a" * 40),
        ("part2.json", "a" * 40),
        ("part3.json", "b" * 40),
    ):
        path = partials.path / name
        document = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**document, "git": {"commit": commit, "dirty": False}}))
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert message == (
        "the shards ran on different commits (part1.json at aaaaaaaaaaaa, part2.json at "
        "aaaaaaaaaaaa, part3.json at bbbbbbbbbbbb); run every shard on the same commit with the "
        "same options"
    )


@pytest.mark.parametrize(
    ("option", "difference"),
    [
        (["--retrieval-judge-model", "gpt-4.1"], "judge model 'gpt-4.1-mini' vs 'gpt-4.1'"),
        (["--retrieval-judge-min-score", "0.9"], "judge min_score 0.5 vs 0.9"),
        (["--retrieval-judge-samples", "3"], "judge samples 1 vs 3"),
        (["--retrieval-judge-text-budget", "3"], "judge text_budget 4000 vs 3"),
        (["--retrieval-judge-min-coverage", "0.5"], "judge min_coverage 0.95 vs 0.5"),
    ],
    ids=["model", "min-score", "samples", "text-budget", "min-coverage"],
)
def test_shards_judged_by_another_judge_are_refused(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: list[str],
    difference: str,
) -> None:
    """An on-topic rate whose parts two judges labelled is not one number: a shard run with
    another judge model or setting is refused, by what a baseline compares of a judge."""
    with judged_shards(pytester, monkeypatch):
        parts = ["part1.json", "part2.json", "part3.json"]
        status, _, err = combine(capsys, *parts, "--report", "whole.json")
        assert status == 0, err  # one judge: one whole
        whole = json.loads((pytester.path / "whole.json").read_text(encoding="utf-8"))
        assert whole["evaluations"][0]["judge"]["model"] == "gpt-4.1-mini"
        assert any(m.startswith("otr@") for m in whole["evaluations"][0]["metrics"])
        rerun_shard(pytester, 3, "--retrieval-judge", *option)
    message = refused(capsys, pytester.path, *parts)
    on = "part1.json and part3.json differ on golden.json [retriever]"
    assert message == f"{on}: {difference}; {RERUN_ADVICE}"


def test_merged_judge_summaries_weigh_the_agreement_of_every_part() -> None:
    """The agreement is the mean over the hits asked more than once, of all parts (a part
    that sampled none has none); counters add up, settings stay."""
    from pytest_retrieval.evaluation import _add_summaries

    parts = [
        {"agreement": None, "sampled": 0, "samples": 3, "text_budget": 4000, "calls": 0},
        {"agreement": 1.0, "sampled": 10, "samples": 3, "text_budget": 4000, "calls": 30},
        {"agreement": 0.5, "sampled": 30, "samples": 3, "text_budget": 4000, "calls": 90},
    ]
    total = _add_summaries(parts)
    assert total is not None
    assert total["agreement"] == pytest.approx(0.625)
    assert (total["sampled"], total["calls"]) == (40, 120)
    assert (total["samples"], total["text_budget"]) == (3, 4000)
    assert _add_summaries([{"agreement": None, "sampled": 0}])["agreement"] is None  # type: ignore[index]
    older = [{"calls": 3}, {"agreement": 1.0, "sampled": 2, "calls": 3}]  # one without the key
    assert _add_summaries(older) == {"calls": 6, "agreement": 1.0, "sampled": 2}


@pytest.mark.parametrize(
    ("field", "value"),
    [("on_topic", "yes"), ("grade", 2.5), ("score", "high"), ("reason", None), ("error", 1)],
)
def test_a_partial_report_with_an_edited_judgment_is_refused_where_it_is(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    field: str,
    value: Any,
) -> None:
    """The judge's verdicts travel in the partial reports: one of the wrong type changed
    the on-topic rate silently (``"on_topic": "yes"`` counted as ungraded)."""
    with judged_shards(pytester, monkeypatch):
        pass  # the shards' partial reports are all this test reads
    parts = ["part1.json", "part2.json", "part3.json"]
    documents = {p: json.loads((pytester.path / p).read_text(encoding="utf-8")) for p in parts}
    part, index = next(
        (p, i)
        for p, document in documents.items()
        for i, q in enumerate(document["evaluations"][0]["queries"])
        if q.get("judgments")
    )
    judgments = documents[part]["evaluations"][0]["queries"][index]["judgments"]
    doc = next(iter(judgments))
    judgments[doc][field] = value
    (pytester.path / part).write_text(json.dumps(documents[part]), encoding="utf-8")
    message = refused(capsys, pytester.path, *parts)
    pointer = f"/evaluations/0/queries/{index}/judgments/{doc}/{field}"
    assert message.startswith(f"{part}, {pointer}: "), message


def test_combine_records_no_first_baseline_where_the_shards_golden_set_is_not_found(
    partials: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No baseline yet, combine run from a subfolder: the shards name golden.json and its
    baseline relative to the folder they ran in, so --update-baseline would write
    sub/golden.json.baseline.json, where no run reads it. Refused, saying where to run."""
    assert [s.ret for s in run_shards(partials)] == [0, 0, 0]
    sub = partials.path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    parts = [f"../part{i}.json" for i in (1, 2, 3)]
    message = refused(capsys, sub, *parts, "--update-baseline")
    assert message == (
        "golden.json::retrieval[bm25]: the shards ran pytest where their golden set is "
        f"golden.json, which is not in {sub}: the baseline they name, "
        "golden.json.baseline.json, would be recorded here, where no run reads it; run "
        "combine in the folder the shards ran pytest in, or name golden.json.baseline.json in "
        "that folder with --baseline"
    )
    assert sorted(p.name for p in sub.iterdir()) == ["refused.json", "refused.xml"]
    # gating (not recording) there is not refused: the shards found no baseline either
    status, out, _ = combine(capsys, *parts)
    assert status == 0 and "no baseline" in out
    # the shards' baseline named from here, laid out as they named it: recorded there
    status, out, _ = combine(
        capsys, *parts, "--update-baseline", "--baseline", "../golden.json.baseline.json"
    )
    written = "baseline written: ../golden.json.baseline.json (golden.json::bm25)"
    assert status == 0 and written in out
    (partials.path / "golden.json.baseline.json").unlink()
    # from the folder the shards ran in: recorded beside the golden set
    monkeypatch.chdir(partials.path)
    status, out, _ = combine(capsys, "part1.json", "part2.json", "part3.json", "--update-baseline")
    assert status == 0 and (partials.path / "golden.json.baseline.json").exists()


def test_combine_with_another_baseline_where_the_golden_set_is_not_found_is_refused(
    partials: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The shards had no baseline; a cached one elsewhere holds the golden set's entry,
    keyed by its path relative to that file (../golden.json). From a folder where the
    golden set is not found, combine cannot work out that key: gating said "no baseline"
    and passed a regression, recording wrote an entry (golden.json) no run reads."""
    cache = partials.path / "cache"
    cache.mkdir()
    baseline = ["--retrieval-baseline", "cache/b.json"]
    recorded = partials.runpytest(
        "--retrieval-golden", "golden.json", *baseline, "--retrieval-update-baseline"
    )
    assert recorded.ret == 0
    before = (cache / "b.json").read_text(encoding="utf-8")
    assert '"../golden.json::bm25"' in before
    assert [s.ret for s in run_shards(partials)] == [0, 0, 0]
    elsewhere = partials.path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    parts = [f"../part{i}.json" for i in (1, 2, 3)]
    expected = (
        "golden.json::retrieval[bm25]: the shards' golden set, golden.json as they name it, "
        f"is not found from here ({elsewhere}), so its entry in ../cache/b.json (keyed by "
        "the golden set's path relative to that file) cannot be told; run combine in the "
        "folder the shards ran pytest in"
    )
    for update in ([], ["--update-baseline"]):
        message = refused(capsys, elsewhere, *parts, "--baseline", "../cache/b.json", *update)
        assert message == expected
    assert (cache / "b.json").read_text(encoding="utf-8") == before
    # from the shards' folder, the golden set is found: the entry is found and compared
    monkeypatch.chdir(partials.path)
    parts = ["part1.json", "part2.json", "part3.json"]
    status, out, _ = combine(capsys, *parts, "--baseline", "cache/b.json")
    assert status == 0 and "vs baseline cache/b.json" in out


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda e: e["golden"].update(source=None),
            "part1.json, /evaluations/0/golden/source: None is not of type 'string'",
        ),
        (
            lambda e: e["queries"][0]["relevant"].update(
                dict.fromkeys(e["queries"][0]["relevant"], -1)
            ),
            "part1.json, part2.json, part3.json: a value no shard writes (ValueError: ",
        ),
        (  # a setting of the wrong type was said to differ between the shards
            lambda e: e.update(k=str(e["k"])),
            "part1.json, /evaluations/0/k: '10' is not of type 'integer': not a partial report "
            "as pytest-retrieval writes it",
        ),
    ],
    ids=["null-source", "negative-grade", "k-as-text"],
)
def test_a_partial_report_edited_past_the_schema_is_refused_without_a_traceback(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str], edit: Any, expected: str
) -> None:
    path = partials.path / "part1.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    edit(document["evaluations"][0])
    path.write_text(json.dumps(document), encoding="utf-8")
    message = refused(capsys, partials.path, "part1.json", "part2.json", "part3.json")
    assert message.startswith(expected), message


def test_a_shard_that_ran_nothing_is_not_said_to_have_run_only_tests(
    pytester: pytest.Pytester,
) -> None:
    """A collection error in the only path given: nothing ran, which is not "only
    retrieval_eval tests ran"."""
    make_project(pytester, size=20)
    pytester.makeini("[pytest]\nretrieval_golden = golden.json\n")
    pytester.makepyfile(test_broken="def test_x(:\n    pass\n")
    shard = pytester.runpytest(
        "--retrieval-shard=1/1", "--retrieval-report=part1.json", "test_broken.py"
    )
    assert shard.ret == pytest.ExitCode.INTERRUPTED  # the collection error
    assert "only retrieval_eval tests" not in shard.stdout.str()


def test_a_shard_below_a_threshold_does_not_say_passed(
    partials: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard is not gated: its "verdict: PASSED" under a threshold its part misses read as
    a pass in CI logs. It says it was not gated, and combine decides (here: failed)."""
    gate = ("--retrieval-threshold", "recall@10=0.99")
    shards = run_shards(partials, *gate)
    assert [s.ret for s in shards] == [0, 0, 0]  # a shard job passes: it evaluated its part
    for shard in shards:
        text = shard.stdout.str()
        assert "PASSED" not in text.split("= retrieval =")[1]
        shard.stdout.fnmatch_lines(
            [
                "  verdict: not gated in a shard (combine decides on the whole set)",
                "retrieval verdict: not gated in a shard (pytest-retrieval combine decides)",
            ],
            consecutive=False,
        )
    status, out, _ = combine(capsys, "part1.json", "part2.json", "part3.json")
    assert status == 1 and "recall@10" in out  # the whole set, gated: below the threshold
