"""One verdict behind every output: for each kind of failure, the exit status, the terminal,
the JSON report, JUnit, Markdown, HTML and ``pytest-retrieval diff`` all say the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

N = 40  # enough queries that a real drop is significant (4 cannot be: min exact p = 1/16)

#: one relevant doc per query; RETRIEVAL_MODE picks how the retriever behaves
CONFTEST = """
import os, pytest

@pytest.fixture(scope="session")
def retriever():
    mode = os.environ.get("RETRIEVAL_MODE", "good")
    def search(query, k):
        i = int(query.split()[-1])
        if mode == "errors" and i == 7:
            raise RuntimeError("index shard 3 is down")
        if mode == "worse" and i % 2 == 0:
            return ["x", "y", "z"][:k]
        if mode == "notext":
            return [{"id": f"d{i}"}, {"id": "x"}][:k]
        return [f"d{i}", "x", "y"][:k]
    return search
"""


def golden(relevant: str = "d{i}") -> dict[str, object]:
    return {
        "name": "verdict",
        "k": 3,
        "queries": [
            {"id": f"q{i}", "query": f"query {i}", "relevant": [relevant.format(i=i)]}
            for i in range(N)
        ],
    }


@dataclass
class Outputs:
    """What each output says about one run."""

    exit_code: int
    terminal: str
    report: dict[str, object]
    junit_passed: str
    junit_failed: bool
    junit_reasons: list[str]
    markdown: str
    html: str
    kinds: set[str] = field(default_factory=set)


def run(pytester: pytest.Pytester, *args: str, mode: str = "good") -> Outputs:
    os.environ["RETRIEVAL_MODE"] = mode  # restored by the project fixture's monkeypatch
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-report",
        "r.json",
        "--junitxml",
        "j.xml",
        "--retrieval-markdown",
        "m.md",
        "--retrieval-html",
        "h.html",
        *args,
    )
    report = json.loads((pytester.path / "r.json").read_text())
    root = ET.parse(pytester.path / "j.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    reasons = [
        str(p.get("value")) for p in root.iter("property") if p.get("name") == "retrieval.reason"
    ]
    evaluation = report["evaluations"][0]
    return Outputs(
        exit_code=int(result.ret),
        terminal=result.stdout.str(),
        report=report,
        junit_passed=str(props["retrieval.passed"]),
        junit_failed=root.find(".//failure") is not None,
        junit_reasons=reasons,
        markdown=(pytester.path / "m.md").read_text(),
        html=(pytester.path / "h.html").read_text(),
        kinds={reason["kind"] for reason in evaluation["verdict"]["reasons"]},
    )


def assert_agree(out: Outputs, passed: bool, kinds: set[str]) -> None:
    """Every output renders the same verdict, with the same reasons."""
    evaluation = out.report["evaluations"][0]  # type: ignore[index]
    assert out.exit_code == (0 if passed else 1), out.terminal
    assert out.report["passed"] is passed
    assert out.report["verdict"]["passed"] is passed  # type: ignore[index]
    assert evaluation["passed"] is passed and evaluation["verdict"]["passed"] is passed
    assert out.kinds == kinds
    session_kinds = {r["kind"] for r in out.report["verdict"]["reasons"]}  # type: ignore[index]
    assert session_kinds == kinds
    assert out.junit_passed == str(passed) and out.junit_failed is not passed
    word = "PASSED" if passed else "FAILED"
    assert f"retrieval verdict: {word}" in out.terminal
    assert f"verdict: {word}" in out.terminal
    for kind in kinds:  # every output names every reason
        assert f"{kind}: " in out.terminal
        assert f"{kind}: " in out.markdown and f"{kind}: " in out.html
        assert any(v.startswith(f"{kind}: ") for v in out.junit_reasons)
    first_line = out.markdown.splitlines()[0]
    assert ("✅" in first_line) is passed and ("❌" in first_line) is not passed
    badge = f'<h1>Retrieval evaluation <span class="badge {"pass" if passed else "fail"}">'
    assert badge in out.html


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("RETRIEVAL_MODE", "good")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "golden.json").write_text(json.dumps(golden()))
    return pytester


def record(pytester: pytest.Pytester) -> None:
    os.environ["RETRIEVAL_MODE"] = "good"
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline"
    )
    assert recorded.ret == 0, recorded.stdout.str()


def test_pass(project: pytest.Pytester) -> None:
    record(project)
    assert_agree(run(project), passed=True, kinds=set())


def test_threshold_failure(project: pytest.Pytester) -> None:
    out = run(project, "--retrieval-threshold", "precision@3=0.5")
    assert_agree(out, passed=False, kinds={"threshold"})


def test_regression(project: pytest.Pytester) -> None:
    record(project)
    good = json.loads(json.dumps(run(project).report))
    (project.path / "good.json").write_text(json.dumps(good))
    out = run(project, mode="worse")
    assert_agree(out, passed=False, kinds={"regression"})
    evaluation = out.report["evaluations"][0]  # type: ignore[index]
    shift = evaluation["baseline"]["comparison"]["shifts"]["recall@3"]
    assert shift["worse"] == N // 2  # every query that got worse, not the first 5
    assert len([q for q in shift["queries"] if q["after"] < q["before"]]) == N // 2
    # the diff command renders the same verdict for the same pair of runs
    diff = subprocess.run(
        [sys.executable, "-m", "pytest_retrieval", "diff", "good.json", "r.json"],
        cwd=project.path,
        capture_output=True,
        text=True,
    )
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "verdict: FAILED" in diff.stdout and "regression: recall@3 dropped" in diff.stdout


def test_retriever_errors(project: pytest.Pytester) -> None:
    out = run(project, mode="errors")
    assert_agree(out, passed=False, kinds={"retriever errors"})


def test_judge_coverage(project: pytest.Pytester) -> None:
    os.environ["OPENAI_API_KEY"] = "sk-unused"
    os.environ["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # never called: no hit has text
    out = run(project, "--retrieval-judge", "--retrieval-judge-cache=", mode="notext")
    assert_agree(out, passed=False, kinds={"judge coverage"})


@pytest.mark.parametrize(
    "strict",
    [[], ["--retrieval-strict-baseline"], ["-W", "error::pytest.PytestWarning"]],
    ids=["warning", "strict", "warnings-are-errors"],
)
def test_stale_baseline(project: pytest.Pytester, strict: list[str]) -> None:
    record(project)
    (project.path / "golden.json").write_text(json.dumps(golden("e{i}")))  # all re-judged
    out = run(project, *strict)
    if strict:
        assert_agree(out, passed=False, kinds={"stale baseline"})
        # -W error: the warning raised out of the evaluation, a traceback into the plugin
        # and no result ("failed before it produced an evaluation")
        assert "Traceback" not in out.terminal and "no result" not in out.terminal
        if "-W" in strict:
            assert "a warning, which the warning filters in force make an error" in out.terminal
    else:
        assert_agree(out, passed=True, kinds=set())
        warnings = out.report["verdict"]["warnings"]  # type: ignore[index]
        assert [w["kind"] for w in warnings] == ["stale baseline"]


def test_missing_baseline_is_a_failure_only_when_strict(project: pytest.Pytester) -> None:
    assert_agree(run(project), passed=True, kinds=set())
    out = run(project, "--retrieval-strict-baseline")
    assert_agree(out, passed=False, kinds={"missing baseline"})


def test_strict_baseline_from_ini(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nretrieval_strict_baseline = true\n")
    assert_agree(run(project), passed=False, kinds={"missing baseline"})


def test_report_schema_accepts_the_verdict(project: pytest.Pytester) -> None:
    import jsonschema

    schema = Path(__file__).resolve().parents[1] / "src/pytest_retrieval/schema/report.schema.json"
    out = run(project, "--retrieval-threshold", "precision@3=0.5")
    jsonschema.validate(out.report, json.loads(schema.read_text()))


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("default", ["recall@3", "mrr@3", "ndcg@3"]),
        ("golden", ["mrr@3"]),
        ("cli", ["ndcg@3"]),
        ("ini", ["recall@3"]),
    ],
)
def test_gated_set_is_declared(project: pytest.Pytester, where: str, expected: list[str]) -> None:
    """Regressions are gated on a declared set; thresholds and max drops always add to it."""
    args: list[str] = []
    if where == "golden":
        data = golden()
        data["gate"] = ["mrr@3"]
        (project.path / "golden.json").write_text(json.dumps(data))
    elif where == "cli":
        args = ["--retrieval-gate", "ndcg@3"]
    elif where == "ini":
        project.makeini("[pytest]\nretrieval_gate = recall@3\n")
    out = run(project, *args)
    assert out.report["evaluations"][0]["gated"] == expected  # type: ignore[index]
    with_threshold = run(project, *args, "--retrieval-threshold", "map@3=0.1")
    gated = with_threshold.report["evaluations"][0]["gated"]  # type: ignore[index]
    assert set(gated) == {*expected, "map@3"}


def test_an_evaluation_that_never_ran_fails_every_output(project: pytest.Pytester) -> None:
    """A retriever fixture that raises: no evaluation, but the outputs are written (a failed
    CI job must not leave an earlier run's passing report in place)."""
    first = run(project)
    assert first.report["passed"] is True
    project.makeconftest(
        CONFTEST.replace(
            "    mode = os.environ", "    raise OSError('index gone')\n    mode = os.environ"
        )
    )
    result = project.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-report",
        "r.json",
        "--retrieval-markdown",
        "m.md",
        "--junitxml",
        "j.xml",
    )
    assert result.ret == 1
    report = json.loads((project.path / "r.json").read_text())
    assert report["passed"] is False and report["evaluations"] == []
    assert [r["kind"] for r in report["verdict"]["reasons"]] == ["no result"]
    assert "❌" in (project.path / "m.md").read_text().splitlines()[0]
    result.stdout.fnmatch_lines(["*retrieval verdict: FAILED*"])


def test_session_reasons_reach_markdown_html_and_junit(project: pytest.Pytester) -> None:
    """A reason of the session itself (a refused baseline update) is in every output."""
    out = run(project, "--retrieval-update-baseline", "--retrieval-sample", "10")
    assert out.exit_code == 1 and out.report["passed"] is False
    assert [r["kind"] for r in out.report["verdict"]["reasons"]] == ["partial run"]  # type: ignore[index]
    assert "partial run: baseline NOT updated" in out.markdown
    assert "partial run: baseline NOT updated" in out.html
    assert any(r.startswith("partial run: ") for r in out.junit_reasons)
    assert "retrieval verdict: FAILED" in out.terminal


def test_ab_marks_use_the_allowances(pytester: pytest.Pytester) -> None:
    """A/B "worse" needs the drop to exceed the configured allowance, not the default."""
    pytester.makeconftest(
        CONFTEST.replace('scope="session")', 'scope="session", params=["good", "worse"])')
        .replace("def retriever():", "def retriever(request):")
        .replace('os.environ.get("RETRIEVAL_MODE", "good")', "request.param")
    )
    (pytester.path / "golden.json").write_text(json.dumps(golden()))
    strict = pytester.runpytest("--retrieval-golden", "golden.json")
    strict.stdout.fnmatch_lines(["*side by side*", "*recall@3*1.0000*0.5000*-0.5000*worse*"])
    lenient = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-max-drop", "recall@3=0.6"
    )
    ab_row = [x for x in lenient.stdout.lines if x.strip().startswith("recall@3") and "-0." in x]
    line = ab_row[-1]
    assert "-0.5000" in line and "worse" not in line


def test_diff_tells_golden_sets_of_the_same_name_apart(project: pytest.Pytester) -> None:
    """Two golden sets with the same name in one report: diff matches each with its own."""
    for folder, relevant in (("a", "d{i}"), ("b", "e{i}")):
        (project.path / folder).mkdir()
        (project.path / folder / "golden.json").write_text(json.dumps(golden(relevant)))
    both = ["--retrieval-golden", "a/golden.json", "--retrieval-golden", "b/golden.json"]
    os.environ["RETRIEVAL_MODE"] = "good"
    project.runpytest(*both, "--retrieval-report", "good.json")
    os.environ["RETRIEVAL_MODE"] = "worse"
    project.runpytest(*both, "--retrieval-report", "worse.json")
    diff = subprocess.run(
        [sys.executable, "-m", "pytest_retrieval", "diff", "good.json", "worse.json"],
        cwd=project.path,
        capture_output=True,
        text=True,
    )
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert diff.stdout.count("regression: recall@3 dropped") == 1  # a's, compared with a's
    assert "STALE" not in diff.stdout and "1 of 2 evaluations failed" in diff.stdout


def test_a_gated_metric_nothing_else_names_is_computed(project: pytest.Pytester) -> None:
    """--retrieval-gate recall@2 (not among the default metrics) is computed and gated, so a
    drop in it fails; before, the gated set silently came out empty."""
    record_args = ["--retrieval-gate", "recall@2"]
    os.environ["RETRIEVAL_MODE"] = "good"
    project.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline", *record_args
    )
    out = run(project, *record_args, mode="worse")
    evaluation = out.report["evaluations"][0]  # type: ignore[index]
    assert evaluation["gated"] == ["recall@2"] and "recall@2" in evaluation["metrics"]
    assert_agree(out, passed=False, kinds={"regression"})


def test_a_bad_setting_inside_a_test_fails_it_without_a_traceback(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "golden.json").write_text(json.dumps(golden()))
    pytester.makepyfile(
        test_mine="""
def test_search(retrieval_eval, retriever):
    retrieval_eval(retriever, golden="golden.json", thresholds={"recall@3": 7})
"""
    )
    result = pytester.runpytest("test_mine.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*retrieval_eval(thresholds=...): threshold recall@3 = 7: outside [[]0, 1[]]*"]
    )
    assert "session.py" not in result.stdout.str() and "contextlib" not in result.stdout.str()


def test_every_kind_of_reason_is_in_the_report_schema() -> None:
    """A new kind of reason or warning must be added to the JSON schema too (the "run
    coverage" warning was not, and every report that had one failed validation)."""
    from pytest_retrieval import verdicts

    kinds = {
        value for name, value in vars(verdicts).items() if name.isupper() and isinstance(value, str)
    }
    kinds.add(verdicts.UNDECIDED.reasons[0].kind)
    schema_path = Path(verdicts.__file__).parent / "schema" / "report.schema.json"
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    assert "run coverage" in kinds
    assert kinds == set(schema["$defs"]["reason"]["properties"]["kind"]["enum"])
