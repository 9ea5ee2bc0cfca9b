"""The examples of docs/judge.md, docs/downstream.md, docs/outputs.md and docs/runs.md run as
written (each block is fetched by its ``<!-- example: NAME -->`` marker): the judge's prices
and calibration labels against the local test server, the eRAG fixture, the output options,
the JUnit sample from the example's regression, and every run-file form and command."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from docs_examples import example
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden
from judge_server import JudgeServer, serve

from pytest_retrieval import read_run

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-docs-0123456789"

#: the keyword retriever, with each hit's text (for the judge and the labeller)
TEXT_RETRIEVER = KEYWORD_RETRIEVER.replace(
    "    return ranked[:k]",
    '    return [{"id": d, "text": DOCS[d]} for d in ranked[:k]]',
)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with serve() as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield running


def commands(block: str) -> list[list[str]]:
    """A shell block's commands as argument lists (continuations joined, comments dropped)."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


# ---------------------------------------------------------------------------- judge.md


def test_the_prices_in_the_ini_give_the_cost_estimate(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    """Every answer of the test server reports 100 prompt and 20 completion tokens: 12 hits
    at gpt-4.1-mini's 0.40 and 1.60 US$ a million are ~$0.0009; a model the plugin has no
    price for shows a cost only once the ini gives one."""
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    judged = [
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-no-cache",
    ]
    local = ["--retrieval-judge-model", "Qwen/Qwen2.5-7B-Instruct"]

    unpriced = pytester.runpytest_subprocess(*judged, *local)
    unpriced.assert_outcomes(passed=1)
    unpriced.stdout.fnmatch_lines(["*judge Qwen/Qwen2.5-7B-Instruct (prompt *): 12 calls, *"])
    assert "~$" not in unpriced.stdout.str()

    (pytester.path / "pyproject.toml").write_text(example("judge-prices"), encoding="utf-8")
    priced = pytester.runpytest_subprocess(*judged, *local)
    priced.stdout.fnmatch_lines(["*judge Qwen/Qwen2.5-7B-Instruct *: 12 calls, *, ~$0.0000;*"])
    mini = pytester.runpytest_subprocess(*judged)
    mini.stdout.fnmatch_lines(
        ["*judge gpt-4.1-mini *: 12 calls, 0 cache hits, 1440 tokens, ~$0.0009;*"]
    )


def test_the_calibration_labels_give_the_line_shown(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    (pytester.path / "labels.json").write_text(example("judge-validate-labels"), "utf-8")
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--retrieval-judge",
        "--retrieval-judge-validate", "labels.json",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    assert example("judge-calibration-line").strip() in result.stdout.lines


def shows(result: pytest.RunResult, name: str) -> None:
    """Every line of the text block ``name`` but its ``...`` is a line of the output."""
    lines = result.stdout.lines
    for line in example(name).splitlines():
        if line.strip() != "...":
            assert line in lines, f"{name}: {line!r} not in the output"


@pytest.fixture
def tiny(pytester: pytest.Pytester) -> pytest.Pytester:
    """The example's BM25 and its tiny.json (six queries over the Cranfield corpus)."""
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    folder = pytester.path / "example_golden"
    (folder / "cranfield").mkdir(parents=True)
    shutil.copy(ROOT / "example_golden" / "tiny.json", folder / "tiny.json")
    shutil.copy(ROOT / "example_golden" / "cranfield" / "corpus.jsonl", folder / "cranfield")
    return pytester


TINY_JUDGED = (
    "--retrieval-golden", "example_golden/tiny.json", "--retrieval-judge",
    "--retrieval-judge-cache", "jc",
)  # fmt: skip


def test_the_judge_summary_is_the_tiny_example_judged(
    tiny: pytest.Pytester, server: JudgeServer
) -> None:
    result = tiny.runpytest_subprocess(*TINY_JUDGED)
    result.assert_outcomes(passed=1)
    shows(result, "judge-summary")


def test_a_judge_that_refuses_fails_on_coverage_as_shown(
    tiny: pytest.Pytester, server: JudgeServer
) -> None:
    server.refuse_share = 0.2
    result = tiny.runpytest_subprocess(*TINY_JUDGED)
    result.assert_outcomes(failed=1)
    shows(result, "judge-coverage-failure")


def test_a_changed_judge_is_not_compared(tiny: pytest.Pytester, server: JudgeServer) -> None:
    tiny.runpytest_subprocess(*TINY_JUDGED, "--retrieval-update-baseline").assert_outcomes(passed=1)
    result = tiny.runpytest_subprocess(*TINY_JUDGED, "--retrieval-judge-min-score", "0.7")
    result.assert_outcomes(passed=1)
    shows(result, "judge-changed")
    assert len(server.requests) == 30  # the minimum score is applied to the cached answers


# ---------------------------------------------------------------------------- downstream.md

#: stand-ins for the example's RAG pipeline: the "answer" is the document's first word
RAG_STANDINS = """

class _Rag:
    def answer(self, query, context):
        return context[0].split()[0]


my_rag = _Rag()


def exact_match(answer, expected):
    return 1.0 if answer == expected else 0.0

"""


def test_the_downstream_fixture_labels_every_hit(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(TEXT_RETRIEVER + RAG_STANDINS + example("downstream-fixture"))
    golden = json.loads(json.dumps(GOLDEN))
    answers = {"apple": "apple", "bread": "banana", "cherry": "cherry", "juice": "tart"}
    for entry in golden["queries"]:
        entry["metadata"] = {"answer": answers[entry["id"]]}
    write_golden(pytester, golden)

    first = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(
        ["*erag_precision@3 *", "*erag_hit_rate@3 *", "*erag_mrr@3 *", "*erag_ndcg@3 *"]
    )
    shows(first, "downstream-summary")

    # cached: the rerun calls nothing; the baseline holds the eRAG metrics, compared, not gated
    again = pytester.runpytest("--retrieval-golden", "golden.json")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(
        ["  downstream labels (retrieval_downstream rag-v3): 0 calls, 12 cached",
         "*erag_ndcg@3 * ok (not gated)"]
    )  # fmt: skip


def test_a_failing_label_fails_the_evaluation_as_shown(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(TEXT_RETRIEVER + RAG_STANDINS + example("downstream-fixture"))
    golden = json.loads(json.dumps(GOLDEN))
    for entry in golden["queries"]:
        if entry["id"] != "bread":  # bread's entry has no answer: KeyError for its 3 hits
            entry["metadata"] = {"answer": entry["id"]}
    write_golden(pytester, golden)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(failed=1)
    shows(result, "downstream-failure")


# ---------------------------------------------------------------------------- outputs.md


def test_the_output_options_write_every_file(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    (command,) = commands(example("outputs-all"))
    assert command[0] == "pytest"
    result = pytester.runpytest_subprocess(*command[1:])
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "retrieval.json").read_text("utf-8"))
    assert report["passed"] is True
    assert (pytester.path / "retrieval.md").read_text("utf-8").startswith("## Retrieval evaluation")
    assert "<html" in (pytester.path / "retrieval.html").read_text("utf-8")
    ET.parse(pytester.path / "junit.xml")


def test_the_junit_sample_is_the_example_without_its_stemmer(pytester: pytest.Pytester) -> None:
    """The sample's properties, as the example's BM25 without its stemmer writes them
    against the committed baseline (the regression scripts/make_screenshot.py shows)."""
    conftest = (ROOT / "conftest.py").read_text("utf-8")
    stemmed = 'stemmer = Stemmer.Stemmer("english")'
    assert stemmed in conftest
    (pytester.path / "conftest.py").write_text(conftest.replace(stemmed, "stemmer = None"), "utf-8")
    shutil.copytree(ROOT / "example_golden", pytester.path / "example_golden")
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "example_golden/cranfield.json", "--junitxml", "junit.xml",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(failed=1)

    def properties(node: ET.Element) -> dict[str, str]:
        found = node.find("properties")
        assert found is not None
        return {p.get("name", ""): p.get("value", "") for p in found.iter("property")}

    sample = ET.fromstring(example("outputs-junit"))
    suite = ET.parse(pytester.path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    for key in ("errors", "failures", "skipped", "tests"):
        assert suite.get(key) == sample.get(key)
    assert properties(suite) == properties(sample)
    (case,) = suite.iter("testcase")
    (shown,) = sample.iter("testcase")
    assert (case.get("classname"), case.get("name")) == (shown.get("classname"), shown.get("name"))
    written = properties(case)
    for name, value in properties(shown).items():
        if name != "retrieval.latency_p95_ms":  # a timing
            assert written[name] == value, name
    failure, sample_failure = case.find("failure"), shown.find("failure")
    assert failure is not None and sample_failure is not None
    first_line = sample_failure.get("message", "").removesuffix(" ...")
    assert failure.get("message", "").splitlines()[0] == first_line


# ---------------------------------------------------------------------------- runs.md

RUN_GOLDEN = {
    "name": "docs",
    "k": 10,
    "queries": [
        {"id": "q1", "query": "trec tools", "relevant": ["d3", "d1"]},
        {"id": "q2", "query": "ranking", "relevant": ["d7"]},
    ],
}
#: the forms' shared ranking, and what a retriever fixture answers for the export
RANKED = {"q1": ("d3", "d1"), "q2": ("d7",)}
RUN_RETRIEVER = """
import pytest

ANSWERS = {"trec tools": ["d3", "d1"], "ranking": ["d7"]}

@pytest.fixture(scope="session")
def retriever():
    return lambda query, k: ANSWERS[query][:k]
"""


def run_layout(folder: Path) -> None:
    """golden.json and runs/bm25.trec, runs/dense.jsonl from the page's examples."""
    (folder / "golden.json").write_text(json.dumps(RUN_GOLDEN), "utf-8")
    (folder / "runs").mkdir()
    (folder / "runs" / "bm25.trec").write_text(example("run-trec"), "utf-8")
    (folder / "runs" / "dense.jsonl").write_text(example("run-jsonl"), "utf-8")


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("run-trec", "bm25.trec"),
        ("run-json-scores", "scores.json"),
        ("run-json-lists", "lists.json"),
        ("run-jsonl", "hits.jsonl"),
    ],
)
def test_every_run_form_reads_as_the_same_ranking(tmp_path: Path, name: str, file: str) -> None:
    path = tmp_path / file
    path.write_text(example(name), "utf-8")
    run = read_run(path)
    assert {qid: hits.ids for qid, hits in run.queries.items()} == RANKED
    assert run.tied == 0
    if name == "run-jsonl":
        assert run.queries["q1"].texts == {"d1": "Retrieval evaluation with TREC tools"}


def test_the_run_commands_run_as_written(pytester: pytest.Pytester) -> None:
    run_layout(pytester.path)
    pytester.makeconftest(RUN_RETRIEVER)
    one, ab, export, offline = commands(example("runs-commands"))

    result = pytester.runpytest_subprocess(*one[1:], "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["golden.json::retrieval[[]bm25[]] PASSED*", "docs [[]bm25[]] *"])

    result = pytester.runpytest_subprocess(*ab[1:], "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*::retrieval[[]bm25[]] PASSED*", "*::retrieval[[]dense[]] PASSED*"]
    )

    result = pytester.runpytest_subprocess(*export[1:])
    result.assert_outcomes(passed=1)
    exported = read_run(pytester.path / "runs" / "export.trec")
    assert {qid: hits.ids for qid, hits in exported.queries.items()} == RANKED

    assert offline[:2] == ["pytest-retrieval", "eval"]
    done = eval_command(pytester.path, *offline[2:])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "docs [bm25] · 2 queries" in done.stdout
    assert "latency n/a (a precomputed run)" in done.stdout


def eval_command(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_retrieval", "eval", *args],
        cwd=folder, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_bad_run_line_and_a_missing_query_read_as_shown(tmp_path: Path) -> None:
    run_layout(tmp_path)
    lines = example("run-trec").splitlines()
    (tmp_path / "runs" / "bad.trec").write_text(f"{lines[1]}\nq1 Q0 d1\n", "utf-8")
    bad = eval_command(tmp_path, "golden.json", "runs/bad.trec")
    assert bad.returncode == 2
    assert bad.stderr == example("run-error")
    (tmp_path / "runs" / "cut.trec").write_text("\n".join(lines[:3]) + "\n", "utf-8")
    cut = eval_command(tmp_path, "golden.json", "runs/cut.trec")
    assert cut.returncode == 0, cut.stdout
    assert example("run-missing-note").rstrip("\n") in cut.stdout.splitlines()


def test_the_library_reads_and_evaluates_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_layout(tmp_path)
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example("runs-library"), "runs-library", "exec"), {})
    ndcg, passed = printed.getvalue().split()
    assert (float(ndcg), passed) == (1.0, "True")


def test_a_run_in_a_test(pytester: pytest.Pytester) -> None:
    """``golden=`` is found beside the test file, the run through ``Path(__file__)``, from
    another working directory."""
    tests = pytester.path / "tests"
    tests.mkdir()
    run_layout(tests)
    (tests / "test_nightly.py").write_text(example("runs-in-a-test"), "utf-8")
    result = pytester.runpytest("tests/test_nightly.py")
    result.assert_outcomes(passed=1)


def test_the_screenshot_script_is_importable() -> None:
    """scripts/make_screenshot.py is not run here (it needs Chromium and takes seconds),
    but it compiles, and what it changes in the example is still there to change."""
    script = ROOT / "scripts" / "make_screenshot.py"
    compile(script.read_text("utf-8"), str(script), "exec")
    assert 'stemmer = Stemmer.Stemmer("english")' in (ROOT / "conftest.py").read_text("utf-8")
    assert os.path.getsize(ROOT / "docs" / "img" / "html-report.png") < 300_000
