"""Every kind of bad input gets one clear message naming the file, the place and the fix:
a usage error (exit 4) for configuration, a failed item for what happens at run time,
and never an INTERNALERROR traceback."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import KEYWORD_RETRIEVER, write_golden


def usage_error(pytester: pytest.Pytester, *args: str) -> str:
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output
    return output


def _entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": "q1", "query": "apple", "relevant": ["d1"]}
    entry.update(changes)
    return {key: value for key, value in entry.items() if value is not None}


#: every malformed golden file, with fragments its message must contain (shared with the
#: CLI's ``validate`` tests: same file, same message)
MALFORMED_GOLDEN = [
    pytest.param(
        {"queries": [_entry(query=None)]},
        ["/queries/0: 'query' is a required property", 'fix: add a non-empty "query"'],
        id="missing-query",
    ),
    pytest.param(
        {"queries": [_entry(relevant=None)]},
        ["/queries/0: query 'q1' has no 'relevant' doc ids", "--retrieval-judge"],
        id="missing-relevant",
    ),
    pytest.param(
        {"queries": [_entry(relevant=[])]},
        ["/queries/0/relevant: [] should be non-empty", 'fix: write "relevant": ['],
        id="empty-relevant",
    ),
    pytest.param(
        {"queries": [_entry(relevant="d1")]},
        ["/queries/0/relevant: 'relevant' must be a non-empty list of doc-id strings"],
        id="relevant-is-a-string",
    ),
    pytest.param(
        {"queries": [_entry(relevant=[1, 2])]},
        ["/queries/0/relevant"],
        id="integer-doc-ids",
    ),
    pytest.param(
        {"queries": [_entry(relevant={"d1": 0})]},
        ["/queries/0/relevant: query 'q1' has no relevant document: every grade is 0"],
        id="all-grades-zero",
    ),
    pytest.param(
        {"queries": [_entry(relevant={"d1": 1.5})]},
        ["/queries/0/relevant/d1: 1.5 is not of type 'integer'"],
        id="fractional-grade",
    ),
    pytest.param(
        {"queries": [_entry(query=42)]},
        ["/queries/0/query: 42 is not of type 'string'"],
        id="query-not-a-string",
    ),
    pytest.param(
        {"queries": [_entry(tags="errors")]},
        ["/queries/0/tags: 'errors' is not of type 'array'", 'fix: write "tags"'],
        id="tags-not-a-list",
    ),
    pytest.param(
        {"queries": [_entry(relevent=["d1"])]},
        [
            "/queries/0: Additional properties are not allowed ('relevent' was unexpected)",
            "allowed keys are: criteria, id, metadata, params, query, relevant, tags",
        ],
        id="typo-in-key",
    ),
    pytest.param(
        {"queries": [_entry(), _entry()]},
        ["/queries/1/id: duplicate query id 'q1' (first used by entry 0)"],
        id="duplicate-ids",
    ),
    pytest.param(
        {"queries": []},
        ["/queries: the golden set has no queries"],
        id="no-queries",
    ),
    pytest.param(
        {"query": [_entry()]},
        ["'queries' is a required property"],
        id="no-queries-key",
    ),
    pytest.param(
        {"k": 0, "queries": [_entry()]},
        ["/k: 0 is less than the minimum of 1", "fix: k is the default cutoff"],
        id="bad-k",
    ),
    pytest.param(
        {"thresholds": {"recall@10": 80}, "queries": [_entry()]},
        ["/thresholds/recall@10: 80 is greater than the maximum of 1"],
        id="threshold-above-one",
    ),
    pytest.param(
        {"thresholds": {"recal@10": 0.5}, "queries": [_entry()]},
        ["/thresholds", "unknown metric 'recal'", "recall, precision, hit_rate"],
        id="unknown-metric-in-file",
    ),
    pytest.param(
        {"metrics": ["ndcg@ten"], "queries": [_entry()]},
        ["/metrics/0: 'ndcg@ten' does not match"],
        id="bad-metric-list",
    ),
    pytest.param("just a string", ["/: the document is a JSON str"], id="not-list-or-object"),
]


@pytest.mark.parametrize(("golden", "expected"), MALFORMED_GOLDEN)
def test_malformed_golden_file(pytester: pytest.Pytester, golden: Any, expected: list[str]) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester, golden)
    output = usage_error(pytester, "--retrieval-golden", "golden.json")
    assert "ERROR: golden set " in output
    assert "golden.json" in output
    for fragment in expected:
        assert fragment in output, output


def test_missing_file(pytester: pytest.Pytester) -> None:
    output = usage_error(pytester, "--retrieval-golden", "nope.json")
    assert "nope.json: no such file or folder" in output
    assert "fix: check the path given to --retrieval-golden, the retrieval_golden ini " in output


def test_invalid_json_names_line_and_column(pytester: pytest.Pytester) -> None:
    (pytester.path / "golden.json").write_text('{"queries": [\n  {"query": "a",}\n]}\n')
    output = usage_error(pytester, "--retrieval-golden", "golden.json")
    assert "golden.json, line 2, column 17: invalid JSON" in output


def test_invalid_jsonl_line(pytester: pytest.Pytester) -> None:
    lines = [json.dumps(_entry(id=f"q{i}")) for i in range(3)]
    lines[1] = json.dumps({"id": "q1", "relevant": ["d1"]})
    (pytester.path / "golden.jsonl").write_text("\n".join(lines) + "\n")
    output = usage_error(pytester, "--retrieval-golden", "golden.jsonl")
    assert "golden.jsonl, line 2: 'query' is a required property" in output


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--retrieval-threshold=recal@10=0.5", "unknown metric 'recal'"),
        ("--retrieval-threshold=recall@0=0.5", "bad k in 'recall@0'"),
        ("--retrieval-threshold=recall@10=1.5", "outside [0, 1]"),
        ("--retrieval-threshold=recall@10", "is not METRIC@K=VALUE"),
        ("--retrieval-threshold=recall@10=high", "must be a number in [0, 1]"),
        ("--retrieval-metric=mrr", "is not a metric name"),
        ("--retrieval-concurrency=0", "is not a whole number >= 1"),
        ("--retrieval-timeout=-1", "is not a number of seconds > 0"),
    ],
)
def test_bad_option(project: pytest.Pytester, option: str, expected: str) -> None:
    output = usage_error(project, "--retrieval-golden", "golden.json", option)
    assert expected in output
    assert option.split("=")[0] in output


def test_bad_ini_threshold(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nretrieval_thresholds = recall@10=2\n")
    output = usage_error(project, "--retrieval-golden", "golden.json")
    assert "ini option retrieval_thresholds" in output
    assert "outside [0, 1]" in output


def test_no_retriever_fixture(pytester: pytest.Pytester) -> None:
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*no fixture named 'retriever'*",
            "*fix: define it in a conftest.py*",
            "*def retriever():*",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str()


def _run_with(pytester: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    pytester.makeconftest(
        "import pytest, time\n\n@pytest.fixture\ndef retriever():\n"
        + "".join(f"    {line}\n" for line in body.strip().splitlines())
    )
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", *args)
    assert "INTERNALERROR" not in result.stdout.str()
    return result


def test_retriever_raising_fails_and_names_queries(pytester: pytest.Pytester) -> None:
    result = _run_with(
        pytester,
        """
def search(query, k):
    if query in ("apple", "juice"):
        raise ConnectionError("index offline")
    return ["d2", "d3"]
return search
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*2 of 4 retriever calls failed; they score 0:*",
            "*2 queries: the retriever raised ConnectionError: index offline (first: apple, "
            "juice)*",
        ]
    )


def test_retriever_returning_none(pytester: pytest.Pytester) -> None:
    result = _run_with(pytester, "return lambda query, k: None")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*4 of 4 retriever calls failed*", "*the retriever returned None; return a ranked list*"]
    )


def test_retriever_returning_non_ids(pytester: pytest.Pytester) -> None:
    result = _run_with(pytester, "return lambda query, k: [1, 2, 3]")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*hit at rank 1 has no usable id (got int 1): doc ids must be non-empty strings*"]
    )


def test_retriever_returning_dicts_without_id(pytester: pytest.Pytester) -> None:
    result = _run_with(pytester, 'return lambda query, k: [{"doc": "d1"}]')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*hit at rank 1 has no usable id (got dict {'doc': 'd1'})*"])


def test_retriever_fixture_not_callable(pytester: pytest.Pytester) -> None:
    result = _run_with(pytester, 'return "not a function"')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the retriever fixture returned a str, not a callable*"])


@pytest.mark.timeout(120)  # a run that waited for the stuck call would take an hour
def test_retriever_timeout(pytester: pytest.Pytester) -> None:
    result = _run_with(
        pytester,
        """
def search(query, k):
    if query == "juice":
        time.sleep(3600)
    return ["d1"]
return search
""",
        "--retrieval-timeout",
        "0.3",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*juice: the retriever did not answer within 0.3 s (--retrieval-timeout)*"]
    )


def test_a_missing_golden_set_a_marker_names_says_where_to_look(
    pytester: pytest.Pytester,
) -> None:
    """Not only the command-line option: the fix named it when no option was given."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    pytester.makepyfile(
        test_mine="""
        import pytest

        @pytest.mark.retrieval(golden="missing.json")
        def test_mine(retrieval_eval, retriever):
            retrieval_eval(retriever)
        """
    )
    result = pytester.runpytest()
    output = result.stdout.str() + result.stderr.str()
    assert "missing.json: no such file or folder" in output
    assert "a retrieval marker's golden= or retrieval_eval's golden=" in output


@pytest.mark.parametrize(
    "case", ["tied-run", "judge-fallback", "corpus"], ids=lambda case: str(case)
)
@pytest.mark.parametrize("strict", [["-W", "error"], ["-o", "filterwarnings=error"]])
def test_a_start_up_warning_made_an_error_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, case: str, strict: list[str]
) -> None:
    """Strict projects turn warnings into errors (-W error, filterwarnings = error). The
    warnings the plugin gives while pytest starts (a run file with tied scores, the judge's
    cache-only fallback, relevant ids the corpus lacks) then raised out of pytest_configure:
    an INTERNALERROR traceback, exit 3."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    golden: dict[str, Any] = {
        "name": "g",
        "queries": [{"id": "q1", "query": "apple", "relevant": ["d1"]}],
    }
    args = ["--retrieval-golden", "golden.json", *strict]
    if case == "tied-run":
        (pytester.path / "run.trec").write_text("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.5 t\n")
        args += ["--retrieval-run", "run.trec"]
        warning = "run file run.trec: 1 query has tied scores"
    elif case == "judge-fallback":
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        args += ["--retrieval-judge", "--retrieval-judge-fallback", "cache-only"]
        warning = "the LLM judge has no credentials"
    else:
        (pytester.path / "corpus.jsonl").write_text('{"_id": "d2", "text": "pear"}\n')
        golden["corpus"] = "corpus.jsonl"
        warning = "1 of 1 relevant doc ids are not in the corpus"
    write_golden(pytester, golden)
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(
        [f"ERROR: *{warning}*", "  (a warning, which the warning filters in force make an error*"]
    )
