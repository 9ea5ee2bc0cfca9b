"""The golden file's own settings, grades and neighbours, validated at load time.

One table of bad files drives both ``pytest --retrieval-golden`` (a usage error, exit 4) and
``pytest-retrieval validate`` (exit 1): the same file must get the same message from both.
Then: a UTF-8 byte-order mark is accepted in every format, and relevant ids are checked
against the corpus.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER
from test_bad_input import usage_error

from pytest_retrieval import GoldenError, load_golden
from pytest_retrieval.cli import main
from pytest_retrieval.golden import (
    MAX_GRADE,
    MAX_K,
    corpus_problem,
    golden_schema,
    load_corpus,
    load_corpus_ids,
    missing_from_corpus,
)

BOM = "\ufeff"


def _golden(**settings: Any) -> str:
    """The fruit golden set (tags: fruit, drink) with some settings replaced."""
    return json.dumps(dict(GOLDEN, **settings))


def _graded(grade: Any) -> str:
    return json.dumps({"queries": [{"id": "q1", "query": "apple", "relevant": {"d1": grade}}]})


def _beir(qrels: str, queries: str = "") -> dict[str, str]:
    return {
        "beir/queries.jsonl": queries or '{"_id": "q1", "text": "apple"}\n',
        "beir/qrels/test.tsv": "query-id\tcorpus-id\tscore\n" + qrels,
    }


def _case(
    files: str | dict[str, str], fragments: list[str], name: str, target: str = "golden.json"
) -> Any:
    """``files``: the golden.json text, or {path: text}; ``target``: what is passed."""
    written = {target: files} if isinstance(files, str) else files
    return pytest.param(written, target, fragments, id=name)


BASELINE = json.dumps({"format": "pytest-retrieval-baseline", "version": 1, "entries": {}})
REPORT = json.dumps({"version": 1, "plugin_version": "0.1", "created": "", "evaluations": []})

#: (files, the path handed over, fragments of the one message both must print)
BAD_FILES = [
    _case(
        _golden(k=10**12),
        [
            "golden.json, /k: 1000000000000 is greater than the maximum of 10000",
            "fix: k is the default cutoff, a whole number from 1 to 10000",
        ],
        "k-huge",
    ),
    _case(
        _golden(k=1e12),
        ["/k: 1000000000000.0 is greater than the maximum of 10000"],
        "k-huge-float",
    ),
    _case(_golden(k=10.5), ["/k: 10.5 is not of type 'integer'"], "k-fraction"),
    _case(_golden(k=True), ["/k: true is not of type 'integer'"], "k-bool"),
    _case(_golden(k="10"), ["/k: '10' is not of type 'integer'"], "k-string"),
    _case(
        _golden(metrics=["recal@3"]),
        [
            "/metrics/0: unknown metric 'recal' in 'recal@3'",
            'fix: list metric names such as ["recall@10"',
        ],
        "metric-unknown-family",
    ),
    _case(_golden(metrics=["recall@0"]), ["/metrics/0: bad k in 'recall@0'"], "metric-k-zero"),
    _case(
        _golden(metrics=["ndcg@1000000000000"]),
        [
            "/metrics/0: the cutoff 1000000000000 is above the limit of 10000 in "
            "'ndcg@1000000000000': use a k of at most 10000",
        ],
        "metric-k-huge",
    ),
    _case(
        _golden(thresholds={"recal@3": 0.5}),
        ["/thresholds/recal@3: unknown metric 'recal'", "fix: write thresholds as"],
        "threshold-unknown-metric",
    ),
    _case(
        _golden(thresholds={"recall@3": float("nan")}),
        ["/thresholds/recall@3: threshold recall@3 = nan: outside [0, 1]"],
        "threshold-nan",
    ),
    _case(
        _golden(thresholds={"recall@3": -0.1}),
        ["/thresholds/recall@3: -0.1 is less than the minimum of 0"],
        "threshold-negative",
    ),
    _case(
        _golden(thresholds={"recall@3": 80}),
        ["/thresholds/recall@3: 80 is greater than the maximum of 1"],
        "threshold-percent",
    ),
    _case(
        _golden(thresholds={"recall@3": "0.5"}),
        ["/thresholds/recall@3: '0.5' is not of type 'number'"],
        "threshold-string",
    ),
    _case(
        _golden(thresholds={"recall@3": None}),
        ["/thresholds/recall@3: null is not of type 'number'"],
        "threshold-null",
    ),
    _case(
        _golden(thresholds={"recall@20000": 0.5}),
        ["/thresholds/recall@20000: the cutoff 20000 is above the limit of 10000"],
        "threshold-k-huge",
    ),
    _case(
        _golden(thresholds={"recall@3[faq]": 0.5}),
        [
            "/thresholds/recall@3[faq]: no query has the tag 'faq' "
            "(tags in this golden set: drink, fruit)",
            'fix: add "tags": ["faq"] to the queries',
        ],
        "threshold-unknown-tag",
    ),
    _case(
        _golden(thresholds={"recall@3[a/b]": 0.5}),
        ["/thresholds/recall@3[a~1b]: no query has the tag 'a/b'"],
        "threshold-tag-pointer-escaped",
    ),
    _case(
        _golden(gate=["recal@3"]),
        ["/gate/0: unknown metric 'recal'", "fix: list the metrics a regression may fail on"],
        "gate-unknown-metric",
    ),
    _case(
        _golden(max_drop={"recall@3": -0.1}),
        [
            "/max_drop/recall@3: max drop recall@3=-0.1: write an absolute amount",
            "fix: write max_drop as",
        ],
        "max-drop-negative",
    ),
    _case(
        _golden(max_drop={"recall@3": "lots"}),
        ["/max_drop/recall@3: max drop recall@3='lots'"],
        "max-drop-words",
    ),
    _case(
        _golden(max_drop={"recall@3": 2}),
        ["/max_drop/recall@3: max drop recall@3=2: metrics are fractions in [0, 1]"],
        "max-drop-above-one",
    ),
    _case(
        _golden(max_drop={"recal@3": 0.1}),
        ["/max_drop/recal@3: max drop for 'recal@3': unknown metric 'recal'"],
        "max-drop-unknown-metric",
    ),
    _case(
        _golden(max_drop={"recall@3": True}),
        ["/max_drop/recall@3: true is not of type 'number', 'string'"],
        "max-drop-bool",
    ),
    _case(
        _graded(1e308),
        [
            "/queries/0/relevant/d1: 1e+308 is greater than the maximum of 100",
            "grades whole numbers from 0 to 100",
        ],
        "grade-1e308",
    ),
    _case(
        _graded(10**400),
        [
            "/queries/0/relevant/d1: 1000000000000000000000000000000000000000... "
            "(401 characters) is greater than the maximum of 100"
        ],
        "grade-10-to-the-400",
    ),
    _case(
        _graded(MAX_GRADE + 1),
        ["/queries/0/relevant/d1: 101 is greater than the maximum of 100"],
        "grade-101",
    ),
    _case(
        _graded(-1), ["/queries/0/relevant/d1: -1 is less than the minimum of 0"], "grade-negative"
    ),
    _case(
        _graded(float("nan")), ["/queries/0/relevant/d1: NaN is not of type 'integer'"], "grade-nan"
    ),
    _case(
        _graded(float("inf")),
        ["/queries/0/relevant/d1: Infinity is not of type 'integer'"],
        "grade-inf",
    ),
    _case(
        '[{"query": "a", "relevant": {"d1": ' + "9" * 5000 + "}}]",
        ["golden.json: unreadable JSON: Exceeds the limit (4300 digits)"],
        "number-too-long",
    ),
    _case(
        '{"query": "a", "relevant": ["d1"]}\n{"query": "b", "relevant": {"d1": 1e308}}\n',
        ["golden.jsonl, line 2/relevant/d1: 1e+308 is greater than the maximum of 100"],
        "jsonl-grade-huge",
        "golden.jsonl",
    ),
    _case(
        {"golden.qrels": "1 0 d1 1\n1 0 d2 1000\n", "queries.tsv": "1\tapple\n"},
        [
            "golden.qrels, line 2: grade '1000' is above the limit of 100",
            "fix: use grades from 0 to 100",
        ],
        "trec-grade-huge",
        "golden.qrels",
    ),
    _case(
        {"golden.qrels": "1 0 d1 1\n1 0 d2 1\n\n1 0 d1 2\n", "queries.tsv": "1\tapple\n"},
        [
            "golden.qrels, line 4: query '1' judges doc 'd1' a second time (first at line 1)",
            "fix: keep one line per query and doc",
        ],
        "trec-duplicate-judgment",
        "golden.qrels",
    ),
    _case(
        _beir("q1\td1\t1\nq1\td1\t1\n"),
        ["test.tsv, line 3: query 'q1' judges doc 'd1' a second time (first at line 2)"],
        "beir-duplicate-judgment",
        "beir",
    ),
    _case(
        _beir("q1\td1\t1e3\n"),
        ["test.tsv, line 2: grade '1e3' is not a whole number"],
        "beir-grade-not-whole",
        "beir",
    ),
    _case(
        {"golden.json.baseline.json": BASELINE},
        [
            "golden.json.baseline.json: this is a baseline file "
            "(written by --retrieval-update-baseline), not a golden set",
            "fix: pass the golden set it was recorded from (golden.json)",
        ],
        "baseline-file",
        "golden.json.baseline.json",
    ),
    _case(
        {"report.json": REPORT},
        [
            "report.json: this is a pytest-retrieval JSON report (--retrieval-report), "
            "not a golden set"
        ],
        "report-file",
        "report.json",
    ),
    _case(
        {"beir/corpus.jsonl": '{"_id": "d1", "title": "", "text": "apple"}\n'},
        [
            "corpus.jsonl: this is a BEIR corpus file (documents), not a golden set",
            "beir/ instead (queries.jsonl + qrels/<split>.tsv)",
        ],
        "beir-corpus-file",
        "beir/corpus.jsonl",
    ),
    _case(
        {"beir/queries.jsonl": '{"_id": "q1", "text": "apple"}\n'},
        [
            "queries.jsonl: this is a BEIR queries file (query texts without judgments), "
            "not a golden set"
        ],
        "beir-queries-file",
        "beir/queries.jsonl",
    ),
]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(("files", "target", "expected"), BAD_FILES)
def test_plugin_refuses_bad_golden_file(
    pytester: pytest.Pytester, files: dict[str, str], target: str, expected: list[str]
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    _write(pytester.path, files)
    output = usage_error(pytester, "--retrieval-golden", target)
    assert "ERROR: golden set " in output
    for fragment in expected:
        assert fragment in output, output


@pytest.mark.parametrize(("files", "target", "expected"), BAD_FILES)
def test_validate_refuses_bad_golden_file_with_the_plugins_message(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    target: str,
    expected: list[str],
) -> None:
    _write(tmp_path, files)
    status = main(["validate", str(tmp_path / target)])
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith(f"golden set {tmp_path}"), err
    assert "Traceback" not in err
    for fragment in expected:
        assert fragment in err, err


def test_settings_that_are_fine_load(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    path.write_text(
        _golden(
            k=5.0,  # JSON Schema counts 5.0 as an integer; it is stored as 5
            metrics=["ndcg_exp@10", f"recall@{MAX_K}"],
            thresholds={"recall@3[fruit]": 0.5, "mrr@3": 1},
            max_drop={"recall@3": "2%", "latency_p95": 50},
        )
    )
    golden = load_golden(path)
    assert golden.k == 5
    assert type(golden.k) is int


def test_schema_states_the_same_bounds() -> None:
    definitions = golden_schema()["$defs"]
    assert definitions["goldenSet"]["properties"]["k"]["maximum"] == MAX_K
    graded = definitions["query"]["properties"]["relevant"]["oneOf"][1]
    assert graded["additionalProperties"]["maximum"] == MAX_GRADE


def test_trec_negative_grades_stay_judged_not_relevant(tmp_path: Path) -> None:
    """trec_eval's convention, unlike a negative grade in JSON (an error)."""
    (tmp_path / "g.qrels").write_text("1 0 d1 2\n1 0 d2 -10000\n")
    (tmp_path / "queries.tsv").write_text("1\tapple\n")
    assert load_golden(tmp_path / "g.qrels").queries[0].relevant == {"d1": 2, "d2": 0}


# -------------------------------------------------------------------- byte-order mark


@pytest.mark.parametrize(
    ("files", "target"),
    [
        ({"g.json": _golden()}, "g.json"),
        ({"g.jsonl": "\n".join(json.dumps(q) for q in GOLDEN["queries"])}, "g.jsonl"),
        ({"g.qrels": "apple 0 d1 1\n", "queries.tsv": "apple\tapple\n"}, "g.qrels"),
        (_beir("q1\td1\t1\n"), "beir"),
        (dict(_beir("q1\td1\t1\n"), **{"beir/qrels/test.tsv": "q1\td1\t1\n"}), "beir"),
    ],
    ids=["json", "jsonl", "trec", "beir", "beir-qrels-without-header"],
)
def test_byte_order_mark_is_accepted(tmp_path: Path, files: dict[str, str], target: str) -> None:
    _write(tmp_path, {name: BOM + text for name, text in files.items()})
    golden = load_golden(tmp_path / target)
    assert all(not q.id.startswith(BOM) and BOM not in q.query for q in golden.queries)
    assert all(BOM not in doc for q in golden.queries for doc in q.relevant)


def test_byte_order_mark_in_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "g.csv").write_text(BOM + "id,query,relevant\nq1,apple,d1;d4:2\n", "utf-8")
    assert main(["convert", str(tmp_path / "g.csv"), "-o", "-"]) == 0
    converted = json.loads(capsys.readouterr().out)
    assert converted["queries"] == [{"id": "q1", "query": "apple", "relevant": {"d1": 1, "d4": 2}}]


def test_byte_order_mark_in_corpus(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text(BOM + '{"_id": "d1", "text": "apple"}\n', "utf-8")
    assert set(load_corpus(tmp_path / "corpus.jsonl")) == {"d1"}
    assert load_corpus_ids(tmp_path / "corpus.jsonl") == {"d1"}


# -------------------------------------------------------------------- corpus check

CORPUS_LINES = [
    '{"_id": "d1", "title": "Apple", "text": "apple pie recipe"}',
    '  { "_id" : 7 , "text": "integer id"}',
    '{"_id": "d\\"q", "text": "escaped quote in the id"}',
    '{"title": "", "_id": "d3", "text": "_id not first"}',
    '{"id": "d4", "text": "id instead of _id"}',
    '{"_id": 8.5, "text": "a float id"}',
    "",
    '{"_id": "d6", "text": "tart cherry juice"}',
]


def test_corpus_ids_match_load_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(CORPUS_LINES) + "\n", "utf-8")
    assert load_corpus_ids(corpus) == set(load_corpus(corpus))
    assert load_corpus_ids(corpus) == {"d1", "7", 'd"q', "d3", "d4", "8.5", "d6"}
    json_corpus = tmp_path / "corpus.json"
    json_corpus.write_text(json.dumps({"d1": "apple", "d2": "banana"}))
    assert load_corpus_ids(json_corpus) == {"d1", "d2"}


def test_corpus_ids_refuse_a_bad_line(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a"}\n{"text": "no id"}\n', "utf-8")
    with pytest.raises(GoldenError, match=r"^corpus .*corpus.jsonl, line 2: a corpus line needs"):
        load_corpus_ids(corpus)  # a corpus, not a "golden set"
    with pytest.raises(GoldenError, match=r"^corpus .*nope.jsonl: no such file"):
        load_corpus_ids(tmp_path / "nope.jsonl")


def _fruit(tmp_path: Path, **settings: Any) -> Path:
    path = tmp_path / "golden.json"
    path.write_text(_golden(**settings))
    return path


def test_missing_from_corpus_lists_relevant_ids_once_in_golden_order(tmp_path: Path) -> None:
    golden = load_golden(_fruit(tmp_path))
    # relevant: apple d1 d4; bread d2 d5 (d1 judged 0); cherry d3 d6; juice d6
    assert missing_from_corpus(golden, {"d1", "d2"}) == ["d4", "d5", "d3", "d6"]
    assert missing_from_corpus(golden, {"d1", "d2", "d3", "d4", "d5", "d6"}) == []
    assert missing_from_corpus(golden, {"d2", "d3", "d4", "d5", "d6"}) == ["d1"]


def test_corpus_problem_names_file_count_first_ids_and_fix(tmp_path: Path) -> None:
    golden = load_golden(_fruit(tmp_path))
    assert corpus_problem(golden, {"d1", "d2", "d3", "d4", "d5", "d6"}, "c.jsonl") is None
    problem = corpus_problem(golden, {"x"}, "c.jsonl")
    assert problem is not None
    assert str(problem) == (
        f"golden set {tmp_path / 'golden.json'}: 6 of 6 relevant doc ids are not in the corpus "
        "c.jsonl (1 documents): 'd1', 'd4', 'd2', 'd5', 'd3' and 1 more\n"
        "  fix: add those documents to the corpus, or correct the ids in the golden set (a "
        "typo, or judgments made on another version of the corpus)"
    )


def _beir_folder(root: Path, corpus: list[str]) -> Path:
    folder = root / "fruit"
    _write(
        root,
        _beir(
            "q1\td1\t1\nq1\td9\t1\nq2\td2\t0\nq2\td3\t2\n",
            '{"_id": "q1", "text": "apple"}\n{"_id": "q2", "text": "cherry"}\n',
        ),
    )
    (root / "beir").rename(folder)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "", "text": d}) + "\n" for d in corpus)
    )
    return folder


def test_validate_beir_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _beir_folder(tmp_path, ["d1", "d2", "d3", "d9"])
    assert main(["validate", "--strict", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "valid golden set 'fruit'" in out
    assert "corpus.jsonl: 4 documents, 0 relevant ids missing" in out
    assert "warning" not in out


def test_validate_warns_about_ids_missing_from_the_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _beir_folder(tmp_path, ["d1", "d2"])  # d9 and d3 are relevant but absent
    message = (
        "2 of 3 relevant doc ids are not in the corpus "
        f"{(folder / 'corpus.jsonl').resolve()} (2 documents): 'd9', 'd3'"
    )
    assert main(["validate", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"warning: golden set {folder / 'qrels' / 'test.tsv'}: {message}; fix: add" in out

    assert main(["validate", "--json", str(folder)]) == 0
    report = json.loads(capsys.readouterr().out)[0]
    assert report["corpus"] == {
        "path": str((folder / "corpus.jsonl").resolve()),
        "documents": 2,
        "missing": 2,
        "missing_ids": ["d9", "d3"],
    }

    assert main(["validate", "--strict", str(folder)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(f"golden set {folder / 'qrels' / 'test.tsv'}: {message}\n")
    assert "  fix: add those documents to the corpus" in captured.err
    assert "valid golden set" not in captured.out


def test_validate_checks_the_corpus_named_in_a_golden_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs.json").write_text(json.dumps({d: d for d in ("d1", "d2", "d3", "d4")}))
    path = _fruit(tmp_path, corpus="docs.json")
    assert main(["validate", "--strict", str(path)]) == 1
    assert "2 of 6 relevant doc ids are not in the corpus" in capsys.readouterr().err
    path = _fruit(tmp_path, corpus="sub/nope.jsonl")
    missing = (
        f"golden set {path}, /corpus: the corpus it names, sub/nope.jsonl, does not exist "
        f"({tmp_path / 'sub' / 'nope.jsonl'})\n"
        '  fix: correct the "corpus" path (relative to the golden file) or remove it'
    )
    assert main(["validate", str(path)]) == 0
    shown = missing.replace("\n  fix:", "; fix:")  # a warning line of validate's summary
    assert f"warning: {shown}" in capsys.readouterr().out
    assert main(["validate", "--strict", str(path)]) == 1
    assert missing in capsys.readouterr().err


# -------------------------------------------------------------------- CSV, a golden format


def test_a_csv_golden_set_loads_as_every_other_format(tmp_path: Path) -> None:
    table = tmp_path / "fruit.csv"
    table.write_text("id,query,relevant,tags\napple,apple,d1;d4:2,fruit\n", "utf-8")
    golden = load_golden(table)
    assert (golden.name, golden.source) == ("fruit", str(table))
    assert golden.queries[0].relevant == {"d1": 1, "d4": 2}
    assert list(golden.queries[0].tags) == ["fruit"]


def test_a_csv_row_that_breaks_the_schema_names_its_line(tmp_path: Path) -> None:
    table = tmp_path / "g.csv"
    table.write_text("query,relevant\napple,d1\nbread,d2:x\n", "utf-8")
    with pytest.raises(GoldenError, match=r"g\.csv, line 3: bad grade in 'd2:x'"):
        load_golden(table)


def test_pytest_evaluates_a_csv_golden_set(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    pytester.path.joinpath("fruit.csv").write_text(
        "id,query,relevant\napple,apple,d1;d4\njuice,juice,d6\n", "utf-8"
    )
    result = pytester.runpytest(
        "--retrieval-golden=fruit.csv", "--retrieval-threshold=recall@10=0.9", "-p", "no:xdist"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*fruit*", "*recall@10*1.0000*", "*verdict: PASSED*"])
