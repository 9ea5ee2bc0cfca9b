"""Issue 39, points 8, 10, 11 and 12: the readers as attackers and careless merges would
feed them. Deep nesting in any JSON we read, a key written twice, a query id given twice, a
quote in a qrels doc id, a grade that only Python's ``int()`` reads, an aggregate edited by
hand: each is one message naming the file and the place, never a traceback, a silent
choice or a lost judgment."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden
from judge_server import JudgeServer, serve
from test_cli import run, write

from pytest_retrieval.golden import load_golden

DEEP = "[" * 100_000
NESTED = "nested deeper than 100 levels"
RUN = {"apple": ["d1", "d4"], "bread": ["d2"], "cherry": ["d3"], "juice": ["d6"]}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A golden set, a run of it and its recorded baseline, in the working folder."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "golden.json", GOLDEN)
    write(tmp_path / "run.json", RUN)
    from pytest_retrieval.cli import main

    assert main(["eval", "golden.json", "run.json", "--update-baseline", "--report", "r.json"]) == 0
    return tmp_path


# ------------------------------------------------------------------------- point 8: depth


DEEP_COMMANDS = [
    pytest.param(["show", "{deep}"], "golden.json.baseline.json", id="show-baseline"),
    pytest.param(["show", "{deep}"], "report.json", id="show-report"),
    pytest.param(["eval", "golden.json", "run.json"], "golden.json.baseline.json", id="eval-base"),
    pytest.param(
        ["eval", "golden.json", "run.json", "--baseline", "{deep}"], "b.json", id="eval-baseline"
    ),
    pytest.param(["eval", "golden.json", "{deep}"], "deep.json", id="eval-run-json"),
    pytest.param(["eval", "golden.json", "{deep}"], "deep.jsonl", id="eval-run-jsonl"),
    pytest.param(["eval", "{deep}", "run.json"], "deep.json", id="eval-golden"),
    pytest.param(["validate", "{deep}"], "deep.jsonl", id="validate-jsonl"),
    pytest.param(["diff", "r.json", "{deep}"], "report.json", id="diff"),
    pytest.param(["combine", "{deep}"], "shard.json", id="combine"),
    pytest.param(["apply", "{deep}", "golden.json"], "review.jsonl", id="apply-review"),
    pytest.param(["pool", "golden.json", "{deep}", "-o", "p.jsonl"], "report.json", id="pool"),
    pytest.param(["judge-batch", "collect", "{deep}"], "state.json", id="judge-batch-state"),
]


@pytest.mark.parametrize(("argv", "name"), DEEP_COMMANDS)
def test_deep_nesting_in_any_file_a_command_reads_is_one_message(
    project: Path, capsys: pytest.CaptureFixture[str], argv: list[str], name: str
) -> None:
    deep = project / name
    deep.write_text(DEEP if name != "deep.jsonl" else '{"a": 1}\n' + DEEP, "utf-8")
    status, out, err = run(capsys, *(a.replace("{deep}", name) for a in argv))
    assert status in (1, 2), (out, err)
    assert name in err and NESTED in err, err
    assert "Traceback" not in err and "RecursionError" not in err


def test_deep_nesting_in_a_review_file_is_one_message_from_review(project: Path) -> None:
    """``review`` serves a page: it reads its file first, and says what is wrong with it."""
    (project / "review.jsonl").write_text(DEEP, "utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest_retrieval", "review", "review.jsonl", "--no-open"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (1, 2), done.stderr
    assert "review.jsonl" in done.stderr and NESTED in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_deep_nesting_in_a_baseline_is_a_usage_error_under_pytest(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    (pytester.path / "golden.json.baseline.json").write_text(DEEP, "utf-8")
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert "INTERNALERROR" not in output and "RecursionError" not in output
    assert "golden.json.baseline.json" in output and NESTED in output


def test_deep_nesting_in_a_calibration_file_fails_calibration_only(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    (pytester.path / "labels.json").write_text(DEEP, "utf-8")
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-validate",
        "labels.json",
    )
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "RecursionError" not in output
    assert "labels.json" in output and NESTED in output, output


TEXT_RETRIEVER = KEYWORD_RETRIEVER.replace(
    "    return ranked[:k]", '    return [{"id": d, "text": DOCS[d]} for d in ranked[:k]]'
)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with serve() as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-readers-0123456789")
        yield running


@pytest.mark.parametrize("damage", ["deep", "key twice"])
def test_a_bad_judge_cache_row_is_a_cache_miss(
    pytester: pytest.Pytester, server: JudgeServer, damage: str
) -> None:
    """One damaged row costs one request again, never the evaluation; a row with a key
    twice is not trusted (which of the two did the judge say?)."""
    pytester.makeconftest(TEXT_RETRIEVER)
    write_golden(pytester)
    args = [
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-cache",
        "c",
    ]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    calls = len(server.requests)
    with sqlite3.connect(pytester.path / "c" / "judge.sqlite") as db:
        key, value = db.execute("SELECT key, value FROM entries ORDER BY key LIMIT 1").fetchone()
        first, then = next(iter(json.loads(value).items()))
        twice = "{" + json.dumps(first) + ": " + json.dumps(then) + ", " + value.lstrip()[1:]
        row = DEEP if damage == "deep" else twice
        db.execute("UPDATE entries SET value = ? WHERE key = ?", (row, key))
    db.close()
    again = pytester.runpytest(*args)
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines([f"*: 1 calls, {calls - 1} cache hits*"])
    assert len(server.requests) == calls + 1


# ------------------------------------------------------------- point 10: keys and ids twice


def test_a_key_twice_in_a_golden_file_names_its_pointer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """json keeps the last: "relevant" d9 then d1 passed against d1."""
    path = tmp_path / "golden.json"
    path.write_text(
        '{"queries": [{"id": "q1", "query": "apple", "relevant": ["d9"], "relevant": ["d1"]}]}',
        "utf-8",
    )
    status, _, err = run(capsys, "validate", str(path))
    assert status == 1
    assert f"golden set {path}, /queries/0/relevant: this key appears twice" in err, err
    lines = tmp_path / "golden.jsonl"
    lines.write_text('{"id": "q0", "query": "x", "relevant": ["d1"]}\n' + path.read_text()[13:-2])
    status, _, err = run(capsys, "validate", str(lines))
    assert status == 1 and f"golden set {lines}, line 2, /relevant: this key appears" in err, err


def test_a_key_twice_in_a_golden_file_is_a_usage_error_under_pytest(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    text = json.dumps(GOLDEN).replace(
        '"relevant": ["d6"]', '"relevant": ["d1"], "relevant": ["d6"]'
    )
    (pytester.path / "golden.json").write_text(text, "utf-8")
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*golden.json, /queries/3/relevant: this key appears twice*"])


def _beir(folder: Path, queries: str, qrels: str) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "queries.jsonl").write_text(queries, "utf-8")
    (folder / "qrels" / "test.tsv").write_text(qrels, "utf-8")
    return folder


def test_a_query_id_twice_in_beir_queries_names_both_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _beir(
        tmp_path / "b",
        '{"_id": "q1", "text": "apple"}\n{"_id": "q2", "text": "pear"}\n'
        '{"_id": "q1", "text": "cherry"}\n',
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n",
    )
    status, _, err = run(capsys, "validate", str(folder))
    assert status == 1, err
    assert f"{folder / 'queries.jsonl'}, line 3: query id 'q1' again (first on line 1)" in err, err


def test_a_query_id_twice_in_queries_tsv_names_both_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.qrels").write_text("q1 0 d1 1\nq2 0 d2 1\n", "utf-8")
    queries = tmp_path / "queries.tsv"
    queries.write_text("q1\tapple\nq2\tpear\n\nq1\tcherry\n", "utf-8")
    status, _, err = run(capsys, "validate", str(tmp_path / "run.qrels"))
    assert status == 1, err
    assert f"{queries}, line 4: query id 'q1' again (first on line 1)" in err, err


# --------------------------------------------------------------- point 11: qrels as written


def test_a_quote_in_a_beir_doc_id_is_part_of_the_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """csv quoting joined q1's line with q2's: q2's judgment was lost and its run passed."""
    folder = _beir(
        tmp_path / "b",
        '{"_id": "q1", "text": "apple"}\n{"_id": "q2", "text": "pear"}\n',
        'query-id\tcorpus-id\tscore\nq1\t"d1\t1\nq2\td2\t1\nq2\td"3\t2\n',
    )
    out = tmp_path / "g.json"
    status, _, err = run(capsys, "convert", str(folder), "-o", str(out))
    assert status == 0, err
    queries = {q.id: q.relevant for q in load_golden(out).queries}
    assert queries == {"q1": {'"d1': 1}, "q2": {"d2": 1, 'd"3': 2}}


@pytest.mark.parametrize("grade", ["1_0", "\uff12", "1.0", "0x1", "1 0"])
def test_grades_read_as_trec_eval_reads_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], grade: str
) -> None:
    """Python's int() reads "1_0" as 10 and a full-width two ("\\uff12") as 2;
    trec_eval does not."""
    folder = _beir(
        tmp_path / "b",
        '{"_id": "q1", "text": "apple"}\n',
        f"query-id\tcorpus-id\tscore\nq1\td0\t1\nq1\td1\t{grade}\n",
    )
    status, _, err = run(capsys, "validate", str(folder))
    assert status == 1, err
    assert f"{folder / 'qrels' / 'test.tsv'}, line 3: grade" in err, err
    assert "not a whole number" in err or "expected 3 columns" in err, err
    (tmp_path / "run.qrels").write_text(f"q1 0 d1 {grade}\n", "utf-8")
    (tmp_path / "queries.tsv").write_text("q1\tapple\n", "utf-8")
    status, _, err = run(capsys, "validate", str(tmp_path / "run.qrels"))
    assert status == 1 and f"{tmp_path / 'run.qrels'}, line 1: " in err, err


@pytest.mark.parametrize("line", ["q2 0 1", "q2 0 d2 1 extra", "q2\u00a00 d2 1"])
def test_a_trec_line_without_its_four_fields_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    """A line that lost its doc id was read as query, doc "0", grade; a no-break space is
    no field separator (nor trimmed off an id)."""
    (tmp_path / "g.qrels").write_text(f"q1 0 d1 1\n{line}\n", "utf-8")
    (tmp_path / "queries.tsv").write_text("q1\tapple\nq2\tpear\n", "utf-8")
    status, _, err = run(capsys, "validate", str(tmp_path / "g.qrels"))
    assert status == 1, err
    assert f"{tmp_path / 'g.qrels'}, line 2: expected 4 columns" in err, err


def test_negative_and_signed_grades_still_read(tmp_path: Path) -> None:
    (tmp_path / "run.qrels").write_text("q1 0 d1 +2\nq1 0 d2 -1\nq1 0 d3 03\n", "utf-8")
    (tmp_path / "queries.tsv").write_text("q1\tapple\n", "utf-8")
    (query,) = load_golden(tmp_path / "run.qrels").queries
    assert query.relevant == {"d1": 2, "d2": 0, "d3": 3}


# ------------------------------------------------------- point 12: aggregates edited by hand


def _edit_aggregate(baseline: Path, metric: str, value: float) -> str:
    document = json.loads(baseline.read_text("utf-8"))
    (key,) = document["entries"]
    document["entries"][key]["metrics"][metric] = value
    baseline.write_text(json.dumps(document, indent=2), "utf-8")
    return f"/entries/{key}/metrics/{metric}"


def test_a_hand_edited_aggregate_is_refused_naming_the_field(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = project / "golden.json.baseline.json"
    recorded = json.loads(baseline.read_text("utf-8"))
    (entry,) = recorded["entries"].values()
    assert entry["metrics"]["recall@3"] < 1
    pointer = _edit_aggregate(baseline, "recall@3", 1.0)
    for argv in (["show", str(baseline)], ["eval", "golden.json", "run.json"]):
        status, out, err = run(capsys, *argv)
        assert status in (1, 2), (out, err)  # show: 1; eval: a usage error
        assert f"baseline {baseline}: entry 'golden.json::run' is malformed at " in err, err
        assert f"{pointer}: 1.0 is not the mean of the queries' recall@3 values (0.75)" in err
        assert "re-record it" in err
        assert "Traceback" not in err


def test_a_hand_edited_aggregate_is_a_usage_error_under_pytest(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline"
    )
    assert recorded.ret == 0
    pointer = _edit_aggregate(pytester.path / "golden.json.baseline.json", "mrr@3", 0.01)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{pointer}: 0.01 is not the mean of the queries'*"])


def test_a_deleted_aggregate_is_refused_naming_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = project / "golden.json.baseline.json"
    document = json.loads(baseline.read_text("utf-8"))
    (key,) = document["entries"]
    del document["entries"][key]["metrics"]["mrr@3"]
    baseline.write_text(json.dumps(document, indent=2), "utf-8")
    status, out, err = run(capsys, "show", str(baseline))
    assert status == 1, (out, err)
    assert f"/entries/{key}/metrics/mrr@3" in err and "is missing" in err, err


def test_a_hand_edited_latency_percentile_is_refused_under_pytest(
    pytester: pytest.Pytester,
) -> None:
    """The latency gate compares the recorded p95: a p95 of 10^6 ms switched it off."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline"
    )
    assert recorded.ret == 0
    baseline = pytester.path / "golden.json.baseline.json"
    assert pytester.runpytest("--retrieval-golden", "golden.json").ret == 0  # reads back
    document = json.loads(baseline.read_text("utf-8"))
    (key,) = document["entries"]
    document["entries"][key]["latency_ms"]["p95"] = 1e6
    baseline.write_text(json.dumps(document, indent=2), "utf-8")
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*/entries/{key}/latency_ms/p95: 1000000.0 is not the p95 of the queries' latencies*"]
    )


def test_recorded_aggregates_read_back_over_many_queries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mean as recorded (in run order) and as checked (in the file's order) may differ
    in the last bits: a recorded file always reads back."""
    monkeypatch.chdir(tmp_path)
    queries = [
        {"id": f"q{i:04d}", "query": f"query {i}", "relevant": [f"d{i % 7}", f"e{i % 11}"]}
        for i in range(3000)
    ]
    write(tmp_path / "golden.json", {"k": 5, "queries": queries[::-1]})
    run_of = {
        f"q{i:04d}": [f"d{(i * j) % 13}" for j in range(1, 4)] + ["e1", "e2"] for i in range(3000)
    }
    write(tmp_path / "run.json", run_of)
    status, out, err = run(capsys, "eval", "golden.json", "run.json", "--update-baseline")
    assert status == 0, (out, err)
    status, out, err = run(capsys, "show", "golden.json.baseline.json")
    assert status == 0, err
    assert "recall@5" in out


# ------------------------------------------------------------ run files: keys written twice


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        (
            "run.json",
            '{"apple": [{"id": "d9", "id": "d1"}], "bread": ["d2"]}',
            "/apple/0/id: this key appears twice",
        ),
        (
            "run.jsonl",
            '{"id": "apple", "hits": ["d9"], "hits": ["d1"]}\n{"id": "bread", "hits": ["d2"]}\n',
            "line 1, /hits: this key appears twice",
        ),
    ],
)
def test_a_key_twice_in_a_run_file_names_its_place(
    project: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, where: str
) -> None:
    (project / name).write_text(text, "utf-8")
    status, _, err = run(capsys, "eval", "golden.json", name, "--baseline", "none.json")
    assert status == 2, err
    assert f"run file {name}, {where}" in err, err


def test_brackets_a_broken_jsonl_line_leaves_open_are_not_called_nesting(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Forty lines that each leave five brackets open add up past the limit: the first
    broken line is what is wrong, and it is named."""
    (project / "run.jsonl").write_text('{"id": "apple", "hits": [[[[[\n' * 40, "utf-8")
    status, _, err = run(capsys, "eval", "golden.json", "run.jsonl", "--baseline", "none.json")
    assert status == 2, err
    assert "run file run.jsonl, line 1, column 30: invalid JSON: Expecting value" in err, err
    assert NESTED not in err


@pytest.mark.parametrize("name", ["golden.json", "golden.jsonl"])
def test_a_lone_surrogate_in_a_golden_set_is_named_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """JSON allows "\\ud800"; UTF-8 cannot write it: ids and texts are hashed and written."""
    entry = '{"id": "q1", "query": "apple", "relevant": ["d1"], "params": {"\\ud800": 1}}'
    path = tmp_path / name
    path.write_text(entry if name.endswith("l") else f"[{entry}]", "utf-8")
    status, _, err = run(capsys, "validate", str(path))
    assert status == 1, err
    where = "line 1, /params/\\ud800" if name.endswith("l") else "/0/params/\\ud800"
    assert f"golden set {path}, {where}: a lone surrogate escape" in err, err
    paired = tmp_path / "paired.json"
    paired.write_text(entry.replace("\\ud800", "\\ud83d\\ude00").join("[]"), "utf-8")
    assert run(capsys, "validate", str(paired))[0] == 0


def test_a_report_with_a_damaged_metric_name_names_the_file(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the fuzzing: a "[" in a metric name was a KeyError traceback from show."""
    text = (project / "r.json").read_text("utf-8")
    (project / "bad.json").write_text(text.replace('"recall@3"', '"[recall@3"', 1), "utf-8")
    for argv in (["show", "bad.json"], ["diff", "r.json", "bad.json"]):
        status, _, err = run(capsys, *argv)
        assert status == 1, err
        assert "bad.json: /evaluations/0/metrics: '[recall@3' is not a metric name" in err, err
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("run.json", '{"apple": ["d1", "\\ud800"]}', "/apple/1"),
        (
            "run.jsonl",
            '{"id": "apple", "hits": ["d1"]}\n{"id": "\\udc00", "hits": []}\n',
            "line 2, /id",
        ),
    ],
)
def test_a_lone_surrogate_in_a_run_file_is_named_not_a_traceback(
    project: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, where: str
) -> None:
    """Was a UnicodeEncodeError traceback writing the report."""
    (project / name).write_text(text, "utf-8")
    status, _, err = run(capsys, "eval", "golden.json", name, "--report", "out.json")
    assert status == 2, err
    assert f"run file {name}, {where}: a lone surrogate escape" in err, err
    json.loads((project / "out.json").read_text("utf-8"))  # the report says why, in UTF-8


def test_a_lone_surrogate_in_a_baseline_is_named(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = project / "golden.json.baseline.json"
    baseline.write_text(baseline.read_text("utf-8").replace('"d4"', '"\\ud800"', 1), "utf-8")
    status, _, err = run(capsys, "show", str(baseline))
    assert status == 1, err
    assert "/ranked/1: a lone surrogate escape" in err, err
