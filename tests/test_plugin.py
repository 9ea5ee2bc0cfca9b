"""End-to-end behaviour of `pytest --retrieval-golden ...` through pytester."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, PROC_FD, held_open, opened_since, write_golden


def test_evaluation_passes_and_prints_summary(project: pytest.Pytester) -> None:
    result = project.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*collected 1 item*",
            "*= retrieval =*",
            "fruit [[]retriever[]] · 4 queries",
            "*recall@3 *1.0000*",
            "*precision@3 *0.5833*",
            "*verdict: PASSED*",
        ]
    )


@pytest.mark.skipif(
    pytest.version_tuple < (9, 2), reason="ini keys of several types: pytest 9.2 and later"
)
def test_native_toml_numbers_are_read(project: pytest.Pytester) -> None:
    """pytest 9's native ``[tool.pytest]`` table checks value types: a number written as a
    TOML number (as anyone writes one) is read as the same number written as a string, and
    the plugin's own checks still apply to it."""
    project.makepyprojecttoml(
        "[tool.pytest]\nretrieval_alpha = 0.2\nretrieval_concurrency = 2\n"
        "retrieval_timeout = 30\nretrieval_split_min = 100\nretrieval_judge_deadline = 0\n"
        "retrieval_max_failures = 5\n"
        'retrieval_thresholds = ["recall@3=0.5"]\n'
    )
    result = project.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-shard",
        "1/1",
        "--retrieval-report",
        "p.json",
    )
    result.assert_outcomes(passed=1)
    partial = json.loads((project.path / "p.json").read_text())
    (evaluation,) = partial["evaluations"]
    assert evaluation["part"]["settings"]["alpha"] == 0.2
    assert evaluation["part"]["settings"]["thresholds"][0]["minimum"] == 0.5
    project.makepyprojecttoml("[tool.pytest]\nretrieval_alpha = 2\n")
    result = project.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option retrieval_alpha = '2':*"])
    project.makepyprojecttoml("[tool.pytest]\nretrieval_split_min = true\n")
    result = project.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*retrieval_split_min*expects one of*got bool*"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("retrieval_judge_deadline = soon", "*ini option retrieval_judge_deadline = 'soon':*"),
        (
            "retrieval_judge_fallback = maybe",
            "*ini option retrieval_judge_fallback = 'maybe': use error or cache-only*",
        ),
        ("retrieval_judge_prices = gpt=cheap", "*retrieval_judge_prices: 'gpt=cheap' is not*"),
    ],
)
def test_a_bad_judge_ini_value_is_an_error_without_the_judge_too(
    project: pytest.Pytester, line: str, message: str
) -> None:
    """A typo in a judge key of the shared ini is an error on every run, not only on the one
    that asks for the judge (CI's, after a local run without it passed)."""
    project.makeini(f"[pytest]\n{line}\n")
    result = project.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_threshold_failure_fails_item_with_table_and_worst_queries(
    project: pytest.Pytester,
) -> None:
    result = project.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-threshold", "precision@3=0.7"
    )
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "retrieval gate failed: threshold: precision@3 = 0.5833 is below 0.7 "
            "(threshold from --retrieval-threshold)",
            "*fruit [[]retriever] · 4 queries*",
            "*metric*value*95% CI*threshold*status*",
            "*precision@3*0.5833*>= 0.7*FAIL*",
            "*worst queries by precision@3:*",
            "*juice: 'juice' precision@3=0.3333*",
            "*relevant found at: d6 #1*",
            "*verdict: FAILED*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_worst_queries_show_missed_ids_and_ranks(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
import pytest

@pytest.fixture
def retriever():
    return lambda query, k: ["x1", "d2", "x2", "d9"][:k]
"""
    )
    write_golden(
        pytester,
        {
            "k": 4,
            "thresholds": {"recall@4": 0.9},
            "queries": [{"id": "q", "query": "q", "relevant": ["d1", "d2", "d9", "d7"]}],
        },
    )
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*missed relevant: d1, d7*", "*relevant found at: d2 #2, d9 #4*"])


def test_threshold_layers_cli_over_ini_over_file(project: pytest.Pytester) -> None:
    data = dict(GOLDEN, thresholds={"precision@3": 0.9, "recall@3": 0.5})
    write_golden(project, data)
    project.makeini("[pytest]\nretrieval_thresholds =\n    precision@3=0.8\n")
    # ini (0.8) replaces the file's 0.9; still failing
    project.runpytest("--retrieval-golden", "golden.json").assert_outcomes(failed=1)
    # the command line replaces the ini
    result = project.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-threshold", "precision@3=0.5"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*recall@3*>= 0.5*PASS*", "*precision@3*>= 0.5*PASS*"])


def test_tag_threshold(project: pytest.Pytester) -> None:
    result = project.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-threshold",
        "precision@3[drink]=0.5",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*precision@3[[]drink[]]*0.3333*>= 0.5*FAIL*", "*precision@3 on tag 'drink'*"]
    )


def test_ini_golden_is_collected_without_options(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nretrieval_golden = golden.json\n")
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*= retrieval =*"])


def test_runs_next_to_ordinary_tests_and_under_q_x_and_co(project: pytest.Pytester) -> None:
    project.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = project.runpytest("--retrieval-golden", "golden.json", "-q")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*fruit [[]retriever[]] · 4 queries*"])

    collected = project.runpytest("--retrieval-golden", "golden.json", "--co", "-q")
    # collected in the file tree's order, like any test file
    collected.stdout.fnmatch_lines(["golden.json::retrieval", "test_plain.py::test_ok"])
    assert "= retrieval =" not in collected.stdout.str()

    write_golden(project, dict(GOLDEN, name="second"), name="second.json")
    failing = project.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-golden",
        "second.json",
        "-x",
        "--retrieval-threshold",
        "precision@3=1",
    )
    failing.assert_outcomes(failed=1)  # -x: second.json and test_plain.py never ran
    assert "second [retriever]" not in failing.stdout.str()


def test_k_deselects_evaluations(project: pytest.Pytester) -> None:
    result = project.runpytest("--retrieval-golden", "golden.json", "-k", "not retrieval")
    result.assert_outcomes(deselected=1)
    assert "= retrieval =" not in result.stdout.str()


def test_disabled_plugin_leaves_pytest_alone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = pytester.runpytest("-p", "no:retrieval")
    result.assert_outcomes(passed=1)
    bad = pytester.runpytest("-p", "no:retrieval", "--retrieval-golden", "x.json")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR


def test_parametrized_retriever_gives_side_by_side(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        KEYWORD_RETRIEVER
        + """

@pytest.fixture(params=["keyword", "reversed"], scope="session")
def retriever(request):
    if request.param == "keyword":
        return search
    return lambda query, k: list(reversed(search(query, 6)))[:k]
"""
    )
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*golden.json::retrieval[[]keyword[]] PASSED*",
            "*golden.json::retrieval[[]reversed[]] PASSED*",
            "fruit: 2 retrievers side by side (Δ and paired two-sided p against keyword)",
            "*metric*keyword*reversed*Δ*p*",
            "*recall@3*1.0000*0.0000*-1.0000*0.3750*",
        ]
    )


def test_json_report(project: pytest.Pytester) -> None:
    result = project.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", "out/report.json"
    )
    result.assert_outcomes(passed=1)
    report = json.loads((project.path / "out" / "report.json").read_text())
    (evaluation,) = report["evaluations"]
    assert evaluation["golden"]["name"] == "fruit"
    assert re.fullmatch(r"[0-9a-f]{16}", evaluation["golden"]["fingerprint"])
    assert evaluation["retriever"] == "retriever"
    assert evaluation["k"] == 3
    assert evaluation["metrics"]["precision@3"] == pytest.approx(7 / 12)
    lo, hi = evaluation["ci"]["precision@3"]
    assert lo <= 7 / 12 <= hi
    assert evaluation["per_tag"]["fruit"]["n_queries"] == 2
    assert evaluation["per_tag"]["drink"]["metrics"]["precision@3"] == pytest.approx(1 / 3)
    first = evaluation["queries"][0]
    assert first["id"] == "apple"
    assert first["returned"] == ["d1", "d4", "d2"]
    assert first["metrics"]["recall@3"] == 1.0
    assert first["latency_ms"] >= 0
    assert first["error"] is None


def test_report_matches_its_schema(project: pytest.Pytester) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from importlib import resources

    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    schema = json.loads(
        resources.files("pytest_retrieval").joinpath("schema/report.schema.json").read_text()
    )
    jsonschema.validate(json.loads((project.path / "r.json").read_text()), schema)


def test_xdist_gives_identical_numbers_and_one_summary(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(
        KEYWORD_RETRIEVER
        + """

@pytest.fixture(params=["a", "b"])
def retriever(request):
    return search
"""
    )
    write_golden(pytester)
    write_golden(pytester, dict(GOLDEN, name="second"), name="second.json")
    args = ["--retrieval-golden", "golden.json", "--retrieval-golden", "second.json"]
    serial = pytester.runpytest_subprocess(*args, "--retrieval-report", "serial.json")
    parallel = pytester.runpytest_subprocess(
        *args, "-n", "2", "--retrieval-report", "parallel.json"
    )
    serial.assert_outcomes(passed=4)
    parallel.assert_outcomes(passed=4)
    assert parallel.stdout.str().count("= retrieval =") == 1
    assert parallel.stdout.str().count("  verdict: PASSED") == 4  # one per evaluation
    assert "retrieval verdict: PASSED" in parallel.stdout.str()

    def numbers(name: str) -> list[object]:
        report = json.loads((pytester.path / name).read_text())
        return [
            (e["golden"]["name"], e["retriever"], e["metrics"], e["ci"])
            for e in report["evaluations"]
        ]

    assert numbers("serial.json") == numbers("parallel.json")


def test_retrieval_eval_fixture_and_marker(project: pytest.Pytester) -> None:
    project.makepyfile(
        test_mine="""
import pytest
from conftest import search
from pytest_retrieval import assert_thresholds

@pytest.mark.retrieval(golden="golden.json", thresholds={"recall@3": 0.9})
def test_my_search(retrieval_eval, retrieval_golden):
    assert retrieval_golden.name == "fruit"
    result = retrieval_eval(search)
    assert result.metrics["recall@3"] == 1.0
    assert_thresholds(result)
    with pytest.raises(AssertionError, match="precision@3"):
        assert_thresholds(result, {"precision@3": 0.9})
    ranked = retrieval_eval(search, metrics=["ndcg_exp@2"])
    assert "ndcg_exp@2" in ranked.metrics

def test_explicit_golden(retrieval_eval):
    result = retrieval_eval(search, golden="golden.json", k=1)
    assert result.metrics["recall@1"] == pytest.approx((0.5 + 0.5 + 0.5 + 1) / 4)
"""
    )
    result = project.runpytest("test_mine.py")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*= retrieval =*", "*fruit [[]search[]]*"])


@pytest.mark.skipif(pytest.version_tuple < (9, 0), reason="the subtests fixture: pytest 9")
def test_evaluations_in_subtests_are_all_reported(project: pytest.Pytester) -> None:
    """pytest's ``subtests`` reports each subtest as a call of the same test: every
    evaluation made in one, and one after them, reaches the summary, the JSON report and
    JUnit (numbered as evaluations of one test are)."""
    project.makepyfile(
        test_mine="""
from conftest import search

def test_subtests(retrieval_eval, subtests):
    for k in (1, 2):
        with subtests.test(msg=f"k={k}"):
            retrieval_eval(search, golden="golden.json", k=k, retriever_id=f"k{k}")
    retrieval_eval(search, golden="golden.json", k=3, retriever_id="k3")
"""
    )
    result = project.runpytest(
        "test_mine.py", "--retrieval-report", "r.json", "--junitxml", "j.xml"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*fruit [[]k1[]]*", "*fruit [[]k2[]]*", "*fruit [[]k3[]]*"])
    report = json.loads((project.path / "r.json").read_text())
    assert [e["retriever"] for e in report["evaluations"]] == ["k1", "k2", "k3"]
    junit = (project.path / "j.xml").read_text()
    for name, value in (
        ("retrieval.retriever", "k1"),
        ("retrieval.2.retriever", "k2"),
        ("retrieval.3.retriever", "k3"),
    ):
        assert f'name="{name}" value="{value}"' in junit, name


def test_async_retriever_and_params(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
import asyncio
import pytest

@pytest.fixture
def retriever():
    async def search(query, k, namespace="default"):
        await asyncio.sleep(0.001)
        return [{"id": f"{namespace}-{query}", "score": 1.0, "text": "t"}]
    return search
"""
    )
    write_golden(
        pytester,
        [
            {"query": "a", "relevant": ["ns1-a"], "params": {"namespace": "ns1"}},
            {"query": "b", "relevant": ["default-b"]},
        ],
    )
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*recall@10 *1.0000*"])


def test_plugin_import_is_light() -> None:
    code = (
        "import sys, pytest_retrieval.plugin, pytest_retrieval;"
        "heavy = [m for m in ('numpy', 'openai', 'pydantic', 'jsonschema') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_hook_module_stays_thin() -> None:
    """Issue 40: ``plugin/__init__.py`` holds pytest's hooks, each delegating; collection,
    scheduling, xdist payloads and state live in modules of their own under ``plugin/``."""
    import pytest_retrieval.plugin as plugin

    assert plugin.__file__ is not None
    lines = Path(plugin.__file__).read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 350, f"{plugin.__file__} has {len(lines)} lines (at most 350)"


def test_a_run_without_retrieval_options_imports_nothing_heavy(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin is installed in suites that never evaluate: configuring it must not import
    numpy (or the other heavy modules) when no retrieval option or ini key is set. Only our
    plugin is loaded: other installed plugins (langsmith's) import pydantic themselves."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(
        test_plain="""
        import sys

        def test_light():
            heavy = [m for m in ('numpy', 'openai', 'pydantic', 'jsonschema') if m in sys.modules]
            assert heavy == []
        """
    )
    result = pytester.runpytest_subprocess("-p", "pytest_retrieval.plugin")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("workers", [[], ["-p", "xdist", "-n", "2"]], ids=["serial", "xdist"])
def test_a_run_without_golden_sets_does_not_load_the_evaluation_modules(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    """Start-up of suites that never evaluate: shards, the xdist split, run files, golden
    sets and scoring stay unimported (in the test, on a worker; and at the session's end, on
    the controller)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    check = textwrap.dedent(
        """
        import pathlib, sys

        EVALUATION = ("shards", "split", "runfile", "golden", "evaluation", "results", "metrics")

        def loaded():
            return [m for m in EVALUATION if f"pytest_retrieval.{m}" in sys.modules]
        """
    )
    pytester.makepyfile(test_plain=check + "\n\ndef test_light():\n    assert loaded() == []\n")
    pytester.makeconftest(
        check + "\n\ndef pytest_unconfigure(config):\n"
        "    if not hasattr(config, 'workerinput'):\n"
        "        pathlib.Path('loaded.txt').write_text(repr(loaded()))\n"
    )
    result = pytester.runpytest_subprocess("-p", "pytest_retrieval.plugin", *workers)
    result.assert_outcomes(passed=1)
    assert (pytester.path / "loaded.txt").read_text() == "[]"


def test_the_record_hint_of_a_retrieval_eval_test_reruns_that_test(
    pytester: pytest.Pytester,
) -> None:
    """A ``retrieval_eval`` test's "no baseline" note names the test to rerun with
    ``--retrieval-update-baseline`` (there may be no ``retriever`` fixture for a
    ``--retrieval-golden`` run), and that command, run as printed, records its entry."""
    write_golden(pytester)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_mine.py").write_text(
        textwrap.dedent(
            """
            import pytest

            def search(query, k):
                return ["d1", "d2", "d3", "d4"][:k]

            @pytest.mark.parametrize("depth", [3])
            def test_recall(retrieval_eval, depth):
                retrieval_eval(search, golden="../golden.json", k=depth)
            """
        ),
        encoding="utf-8",
    )
    first = pytester.runpytest("tests")
    assert first.ret == 0, first.stdout.str()
    fix = "pytest 'tests/test_mine.py::test_recall[3]' --retrieval-update-baseline"
    hint = f"*no baseline for fruit::search in *; record one on main with: {fix}"
    first.stdout.fnmatch_lines([hint.replace("[", "[[]")])
    pytest.importorskip("xdist")
    spread = pytester.runpytest_subprocess("tests", "-n", "2", "--retrieval-report", "r.json")
    spread.stdout.fnmatch_lines([hint.replace("[", "[[]")])  # it crosses from the workers
    shown = subprocess.run(  # and the report keeps it for `show`
        [sys.executable, "-m", "pytest_retrieval", "show", "r.json"],
        cwd=pytester.path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert f"record one on main with: {fix}" in shown.stdout
    recorded = pytester.runpytest(*shlex.split(fix)[1:])
    assert recorded.ret == 0, recorded.stdout.str()
    stored = json.loads((pytester.path / "golden.json.baseline.json").read_text())
    assert list(stored["entries"]) == ["golden.json::search"]
    again = pytester.runpytest("tests")
    assert again.ret == 0
    assert "no baseline" not in again.stdout.str()
    again.stdout.fnmatch_lines(["*vs baseline golden.json.baseline.json*"])


def test_a_retrieval_eval_test_run_by_its_path_takes_the_configured_golden_set(
    pytester: pytest.Pytester,
) -> None:
    """``pytest tests`` does not evaluate the ini's golden set on its own (pytest was given
    paths), but a ``retrieval_eval`` call that names no golden set still takes it (it failed:
    "no golden set for this test"), and its record hint names it."""
    write_golden(pytester)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_mine.py").write_text(
        "def test_any(retrieval_eval):\n"
        "    retrieval_eval(lambda query, k: ['d4'], retriever_id='other')\n",
        encoding="utf-8",
    )
    (pytester.path / "pytest.ini").write_text(
        "[pytest]\nretrieval_golden = golden.json\n", encoding="utf-8"
    )
    configured = pytester.runpytest("tests")
    assert configured.ret == 0, configured.stdout.str()
    # as printed: the ini's set is found, and not evaluated on its own (no retriever fixture)
    fix = "pytest tests/test_mine.py::test_any --retrieval-update-baseline"
    _records_as_hinted(pytester, configured, fix, "golden.json.baseline.json")
    # the set --retrieval-golden gave, also through the retrieval_golden fixture: named as
    # an ini value (named by the option, the set would be evaluated on its own too, with a
    # retriever fixture there is none of here, and the update refused as partial)
    (pytester.path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (pytester.path / "tests" / "test_mine.py").write_text(
        "def test_any(retrieval_eval, retrieval_golden):\n"
        "    retrieval_eval(lambda query, k: ['d4'], retrieval_golden, retriever_id='other')\n",
        encoding="utf-8",
    )
    given = pytester.runpytest("tests/test_mine.py", "--retrieval-golden", "golden.json",
                               "--retrieval-baseline", "b2.json")  # fmt: skip
    fix = (
        "pytest tests/test_mine.py::test_any -o retrieval_golden=golden.json "
        "--retrieval-baseline=b2.json --retrieval-update-baseline"
    )
    _records_as_hinted(pytester, given, fix, "b2.json")


def _records_as_hinted(
    pytester: pytest.Pytester, ran: pytest.RunResult, fix: str, baseline: str
) -> None:
    """``ran`` printed ``fix`` for the "other" retriever, and ``fix``, run as printed,
    records that entry alone in ``baseline``."""
    ran.stdout.fnmatch_lines(
        [f"*no baseline for fruit::other in *; record one on main with: {fix}"]
    )
    recorded = pytester.runpytest(*shlex.split(fix)[1:])
    assert recorded.ret == 0, recorded.stdout.str()
    stored = json.loads((pytester.path / baseline).read_text())
    assert list(stored["entries"]) == ["golden.json::other"]


def test_a_retrieval_eval_test_naming_its_set_does_not_read_the_configured_one(
    pytester: pytest.Pytester,
) -> None:
    """The record hint asks whether a test took the configured set without loading it: a
    test that names its own set passes when the ini's set is a broken file it never uses."""
    write_golden(pytester, name="mine.json")
    (pytester.path / "broken.json").write_text("{not json", encoding="utf-8")
    (pytester.path / "pytest.ini").write_text(
        "[pytest]\nretrieval_golden = broken.json\n", encoding="utf-8"
    )
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_mine.py").write_text(
        "def test_own(retrieval_eval):\n"
        "    retrieval_eval(lambda query, k: ['d4'], golden='../mine.json', retriever_id='o')\n",
        encoding="utf-8",
    )
    ran = pytester.runpytest("tests")
    assert ran.ret == 0, ran.stdout.str()
    ran.stdout.fnmatch_lines(
        [
            "*record one on main with: pytest tests/test_mine.py::test_own "
            "--retrieval-update-baseline"
        ]
    )


@pytest.mark.skipif(not os.path.isdir(PROC_FD), reason="lists /proc/self/fd")
def test_an_evaluation_leaves_no_file_or_socket_open(project: pytest.Pytester) -> None:
    """A session that runs many evaluations in one process (pytester, an IDE, a notebook
    calling pytest.main) must not pile up open files: with outputs, a baseline, a sync and an
    async retriever, each run gives back every descriptor it took. (The dev extra's
    pytest-rerunfailures left a listening socket per inner run, about 600 per xdist worker
    over the suite, till pty tests failed in select(): inner runs leave it out.)"""
    project.makeconftest(
        KEYWORD_RETRIEVER.replace("def retriever():", "def sync_retriever():")
        + textwrap.dedent(
            """
            @pytest.fixture(scope="session", params=["sync", "async"])
            def retriever(request, sync_retriever):
                if request.param == "sync":
                    return sync_retriever

                async def search(query, k):
                    return sync_retriever(query, k)

                return search
            """
        )
    )
    args = (
        "--retrieval-golden=golden.json",
        "--retrieval-report=out/report.json",
        "--retrieval-markdown=out/summary.md",
        "--junitxml=out/junit.xml",
        "--retrieval-update-baseline",
    )

    project.runpytest(*args).assert_outcomes(passed=2)  # lazy imports, caches
    before = held_open()
    for _ in range(3):
        project.runpytest(*args).assert_outcomes(passed=2)
    assert opened_since(before) == []
