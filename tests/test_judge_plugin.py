"""`pytest --retrieval-judge`: the judge in the plugin, against the local test server."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from helpers import DOCS, GOLDEN, KEYWORD_RETRIEVER, PROC_FD, held_open, opened_since, write_golden
from judge_server import JudgeServer, serve

#: end-to-end runs (pytest processes, xdist, a local judge server): out of the fast
#: subset, `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "src" / "pytest_retrieval" / "schema" / "report.schema.json"
KEY = "sk-test-plugin-0123456789"

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


def test_judge_without_credentials_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    result = pytester.runpytest_subprocess("--retrieval-golden", "golden.json", "--retrieval-judge")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--retrieval-judge: no credentials for the LLM judge: set OPENAI_API_KEY*"]
    )
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize("cache", ["jc/judge.sqlite", "jc/judge.sqlite/deeper"])
def test_a_judge_cache_that_is_a_file_is_a_usage_error(
    pytester: pytest.Pytester, server: JudgeServer, cache: str
) -> None:
    """The option names a folder (its judge.sqlite is made inside): naming the database
    file itself was a FileExistsError traceback on every evaluation."""
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    (pytester.path / "jc").mkdir()
    (pytester.path / "jc" / "judge.sqlite").write_bytes(b"SQLite format 3\x00")
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--retrieval-judge", "--retrieval-judge-cache", cache
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--retrieval-judge: the cache folder *jc/judge.sqlite* a file, not a folder: name "
         "the folder to keep the cache in (judge.sqlite is made inside it)*"]
    )  # fmt: skip
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert (pytester.path / "jc" / "judge.sqlite").read_bytes() == b"SQLite format 3\x00"


def test_cranfield_example_gets_otr_with_reasons(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    example = pytester.path / "example_golden"
    shutil.copytree(ROOT / "example_golden" / "cranfield", example / "cranfield")
    shutil.copy(ROOT / "example_golden" / "cranfield.json", example / "cranfield.json")
    result = pytester.runpytest_subprocess(
        "--retrieval-golden",
        "example_golden/cranfield.json",
        "--retrieval-judge",
        "--retrieval-report",
        "report.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*otr@10 *",
            "*judge gpt-4.1-mini (prompt otr-*): 2250 calls, 0 cache hits*coverage 100.0%*",
        ]
    )
    report = json.loads((pytester.path / "report.json").read_text("utf-8"))
    evaluation = report["evaluations"][0]
    assert 0 < evaluation["metrics"]["otr@10"] < 1
    first = evaluation["queries"][0]
    verdicts = [first["judgments"][doc] for doc in first["returned"][:10]]
    assert all(v["reason"] and v["error"] is None for v in verdicts)
    on_topic = sum(v["on_topic"] for v in verdicts) / 10
    assert first["metrics"]["otr@10"] == pytest.approx(on_topic)
    assert evaluation["judge"]["pairs"] == 2250
    jsonschema.validate(report, json.loads(SCHEMA.read_text("utf-8")))
    assert KEY not in (pytester.path / "report.json").read_text("utf-8")
    # every request carried the document text from the BEIR corpus, inside the tags
    assert len(server.requests) == 2250 and all(s.document for s in server.requests)


def test_cached_second_run_and_open_queries(pytester: pytest.Pytester, server: JudgeServer) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    golden = json.loads(json.dumps(GOLDEN))
    golden["queries"].append({"id": "open", "query": "cherry juice", "tags": ["drink"]})
    write_golden(pytester, golden)
    args = [
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-cache",
        "c",
    ]
    first = pytester.runpytest(*args)
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(
        [
            "*otr@3 *",
            "*4 labelled and 1 open queries*",
            "*judge gpt-4.1-mini*: 15 calls, 0 cache hits*graded 15/15 hits*",
        ]
    )
    second = pytester.runpytest(*args)
    second.stdout.fnmatch_lines(["*: 0 calls, 15 cache hits*"])
    assert len(server.requests) == 15


def test_open_query_without_judge_says_what_to_do(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    golden = json.loads(json.dumps(GOLDEN))
    golden["queries"].append({"id": "open", "query": "cherry juice"})
    write_golden(pytester, golden)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*/queries/4: query 'open' has no 'relevant' doc ids*"])
    result.stderr.fnmatch_lines(["*--retrieval-judge*"])


def test_low_coverage_fails_with_the_cause(pytester: pytest.Pytester, server: JudgeServer) -> None:
    pytester.makeconftest(TEXT_RETRIEVER.replace("'cherry tart'", "'cherry tart [[refuse]]'"))
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-judge")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the LLM judge graded *% of the hits, below the required 95%"
            "*most often: the judge refused to grade*",
        ]
    )


def test_hits_without_text_and_no_corpus_are_ungraded(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)  # bare ids, no corpus
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-judge")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ungraded 12x: no text to judge*give a corpus*"])
    assert server.requests == []


def test_retrieval_corpus_fixture_and_graded_scale(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytester.makeconftest(
        KEYWORD_RETRIEVER
        + """

@pytest.fixture(scope="session")
def retrieval_corpus():
    return DOCS
"""
    )
    write_golden(pytester)
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-scale",
        "0-3",
        "--retrieval-threshold",
        "llm_ndcg@3=0.1",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*llm_precision@3*", "*llm_mrr@3*", "*llm_ndcg@3 *>= 0.1*PASS*"])


def test_judge_metric_without_judge_is_a_clear_failure(project: pytest.Pytester) -> None:
    result = project.runpytest("--retrieval-golden", "golden.json", "--retrieval-metric", "otr@3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*otr@3 needs an LLM judge: run with --retrieval-judge*"])


def test_calibration_report(pytester: pytest.Pytester, server: JudgeServer) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    labels = [
        {"query": "apple pie", "text": "apple pie recipe", "on_topic": True},
        {"query": "apple pie", "text": "bread machine manual", "on_topic": False},
    ]
    (pytester.path / "labels.json").write_text(json.dumps(labels), encoding="utf-8")
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-validate",
        "labels.json",
    )
    result.stdout.fnmatch_lines(
        ["*judge calibration on labels.json: 2 pairs, accuracy 1.000, Cohen's kappa 1.000*"]
    )


def test_without_the_flag_nothing_of_the_judge_is_imported(project: pytest.Pytester) -> None:
    project.makeconftest(
        KEYWORD_RETRIEVER
        + """
import sys

def pytest_sessionfinish(session):
    loaded = sorted(m for m in ("openai", "pytest_retrieval.judge") if m in sys.modules)
    print("LOADED:", loaded)
"""
    )
    result = project.runpytest_subprocess("--retrieval-golden", "golden.json", "-s")
    result.stdout.fnmatch_lines(["*LOADED: []*"])


def test_failing_otr_shows_the_judges_reasons(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-threshold",
        "otr@3=0.99",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*otr@3 *[[]*[]]*>= 0.99*FAIL*",  # with its Wilson interval
            "*worst queries by otr@3:*",
            "*#2 * off topic: 0% of the query terms appear*",
        ]
    )


def test_baseline_records_the_judge_and_a_changed_judge_is_not_compared(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    judge = ["--retrieval-golden", "golden.json", "--retrieval-judge"]
    pytester.runpytest(*judge, "--retrieval-update-baseline").assert_outcomes(passed=1)
    stored = json.loads((pytester.path / "golden.json.baseline.json").read_text("utf-8"))
    entry = stored["entries"]["golden.json::retriever"]
    assert entry["judge"]["model"] == "gpt-4.1-mini" and entry["judge"]["min_score"] == 0.5
    assert "otr@3" in entry["metrics"]
    same = pytester.runpytest(*judge)
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*otr@3 *ok*"])
    changed = pytester.runpytest(*judge, "--retrieval-judge-min-score", "0.9")
    changed.assert_outcomes(passed=1)
    changed.stdout.fnmatch_lines(
        [
            "*the judge changed since the baseline (min_score 0.5 -> 0.9)*",
            "*otr@3 *judge changed*",
        ]
    )
    # the fix it prints re-records under the judge that ran: run as printed, then compared
    fix = (
        "pytest --retrieval-golden=golden.json --retrieval-judge --retrieval-judge-min-score "
        "0.9 --retrieval-update-baseline"
    )
    changed.stdout.fnmatch_lines([f"*re-record with {fix}"])
    pytester.runpytest(*shlex.split(fix)[1:]).assert_outcomes(passed=1)
    again = pytester.runpytest(*judge, "--retrieval-judge-min-score", "0.9")
    assert "judge changed" not in again.stdout.str()
    again.stdout.fnmatch_lines(["*otr@3 *ok*"])


def test_batch_api_fills_the_cache_for_an_offline_run(
    pytester: pytest.Pytester, server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_retrieval.cli import main

    pytester.makeconftest(KEYWORD_RETRIEVER)  # bare ids: texts come from the corpus
    (pytester.path / "corpus.json").write_text(json.dumps(DOCS), encoding="utf-8")
    write_golden(pytester, {**GOLDEN, "corpus": "corpus.json"})
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    monkeypatch.chdir(pytester.path)
    assert main(["judge-batch", "submit", "r.json", "-o", "batch.json", "--cache", "jc"]) == 0
    state = json.loads((pytester.path / "batch.json").read_text("utf-8"))
    assert state["batch_id"] and state["requests"] == 12 and KEY not in json.dumps(state)
    assert main(["judge-batch", "collect", "batch.json"]) == 0
    assert server.requests == []  # nothing went through the online endpoint
    offline = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-cache-only",
        "--retrieval-judge-cache",
        "jc",
    )
    offline.assert_outcomes(passed=1)
    offline.stdout.fnmatch_lines(["*: 0 calls, 12 cache hits*coverage 100.0%*"])
    again = main(["judge-batch", "submit", "r.json", "-o", "batch2.json", "--cache", "jc"])
    assert again == 0 and not (pytester.path / "batch2.json").exists()  # all cached already


def test_price_table_is_overridable_in_ini(pytester: pytest.Pytester, server: JudgeServer) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    pytester.makeini("[pytest]\nretrieval_judge_prices =\n    gpt-4.1-mini=1000,1000\n")
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-judge")
    result.stdout.fnmatch_lines(["*12 calls, 0 cache hits, 1440 tokens, ~$1.4400*"])
    pytester.makeini("[pytest]\nretrieval_judge_prices = gpt-4.1-mini=cheap\n")
    bad = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-judge")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*retrieval_judge_prices: 'gpt-4.1-mini=cheap' is not*"])


def test_judge_under_xdist_with_a_shared_cache(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    write_golden(pytester, {**GOLDEN, "name": "fruit2"}, name="golden2.json")
    args = ["--retrieval-golden", "golden.json", "--retrieval-golden", "golden2.json"]
    args += ["--retrieval-judge", "--retrieval-judge-cache", "shared", "-n", "2"]
    first = pytester.runpytest_subprocess(*args)
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["*otr@3*", "*otr@3*"])
    again = pytester.runpytest_subprocess(*args)
    again.assert_outcomes(passed=2)
    assert again.stdout.str().count(": 0 calls, 12 cache hits") == 2
    assert len(server.requests) <= 24  # each (query, doc) paid for at most once per set


def test_judge_progress_shows_calls_and_cache_hits(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    server.latency = 0.25
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-concurrency",
        "1",
        "--retrieval-progress",
        "lines",
    )
    result.stdout.fnmatch_lines(
        ["retrieval fruit [[]retriever[]]: judge 12/12 (100%) · 12 calls, 0 cache hits · done in *"]
    )


def test_each_evaluation_reports_its_own_judge_counts(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    write_golden(pytester, {**GOLDEN, "name": "fruit2"}, name="golden2.json")
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-golden",
        "golden2.json",
        "--retrieval-judge",
        "--retrieval-judge-cache",
        "c",
    )
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert out.count(": 12 calls, 0 cache hits, 1440 tokens") == 1  # the first set
    assert out.count(": 0 calls, 12 cache hits, 0 tokens") == 1  # the second, same hits


def test_the_re_record_command_names_a_custom_prompt_and_an_exact_min_score(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    """Run as printed after a judge change, the fix records that judge: its prompt file and
    its minimum score to the last digit."""
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    judge = ["--retrieval-golden", "golden.json", "--retrieval-judge"]
    pytester.runpytest(*judge, "--retrieval-update-baseline").assert_outcomes(passed=1)
    (pytester.path / "prompts").mkdir()
    prompt = pytester.path / "prompts" / "mine.txt"
    prompt.write_text(
        "Is the document about the query?\nQuery: {query}\nDocument: {document}\n",
        encoding="utf-8",
    )
    options = ["--retrieval-judge-prompt", "prompts/mine.txt", "--retrieval-judge-min-score"]
    changed = pytester.runpytest(*judge, *options, "0.1234567")
    fix = (
        "pytest --retrieval-golden=golden.json --retrieval-judge --retrieval-judge-min-score "
        "0.1234567 --retrieval-judge-prompt=prompts/mine.txt --retrieval-update-baseline"
    )
    changed.stdout.fnmatch_lines([f"*re-record with {fix}"])
    pytester.runpytest(*shlex.split(fix)[1:]).assert_outcomes(passed=1)
    again = pytester.runpytest(*judge, *options, "0.1234567")
    assert "judge changed" not in again.stdout.str()


@pytest.mark.skipif(not os.path.isdir(PROC_FD), reason="lists /proc/self/fd")
def test_a_judged_session_closes_its_caches(pytester: pytest.Pytester, server: JudgeServer) -> None:
    """The judge's and the downstream labels' SQLite caches were left open after the session
    (three files each: the database, -wal, -shm), piling up in a process that runs pytest
    again and again (an IDE, a notebook, pytester)."""
    pytester.makeconftest(
        TEXT_RETRIEVER
        + textwrap.dedent(
            """
            @pytest.fixture
            def retrieval_downstream():
                return lambda query, doc, entry: 1.0
            """
        )
    )
    write_golden(pytester)
    args = ("--retrieval-golden=golden.json", "--retrieval-judge", "--retrieval-judge-cache=c")
    pytester.runpytest(*args).assert_outcomes(passed=1)  # fills the caches
    before = held_open()
    for _ in range(2):
        pytester.runpytest(*args).assert_outcomes(passed=1)
    assert opened_since(before) == []
    assert len(server.requests) == 12  # the first run's calls only: the caches answered


def test_the_cache_only_fallback_is_said_once_under_xdist(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller and every worker each warned: "3 warnings" for one fact under -n 2."""
    pytest.importorskip("xdist")
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden=golden.json",
        "--retrieval-judge",
        "--retrieval-judge-fallback=cache-only",
        "--retrieval-judge-cache=c",
        "--retrieval-judge-min-coverage=0",
        "-n",
        "2",
    )
    result.assert_outcomes(passed=1, warnings=1)
    assert result.stdout.str().count("the LLM judge has no credentials") == 1


def test_a_corrupt_judge_cache_under_warnings_as_errors_fails_in_its_words(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    """A cache that is not a database is moved aside with a warning and the run goes on; with
    warnings as errors the evaluation failed with a traceback into cache.py."""
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    (pytester.path / "c").mkdir()
    (pytester.path / "c" / "judge.sqlite").write_bytes(bytes(range(256)) * 64)
    args = ("--retrieval-golden=golden.json", "--retrieval-judge", "--retrieval-judge-cache=c")
    result = pytester.runpytest(*args, "-W", "error")
    result.assert_outcomes(failed=1)
    assert "cache.py" not in result.stdout.str()  # no source listing of the plugin
    result.stdout.fnmatch_lines(
        ["*the cache */c/judge.sqlite was not a usable SQLite database*",
         "*(a warning, which the warning filters in force make an error*"
         "-W default::pytest_retrieval._internal.cache.CacheWarning)*"]
    )  # fmt: skip
    again = pytester.runpytest(*args)  # moved aside: the next run goes on
    again.assert_outcomes(passed=1)
