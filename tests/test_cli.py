"""`python -m pytest_retrieval` / `pytest-retrieval`: validate, convert, diff, show."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import GOLDEN
from test_bad_input import MALFORMED_GOLDEN

from pytest_retrieval import evaluate, load_golden
from pytest_retrieval._internal.io import git_info, now
from pytest_retrieval.baseline import update
from pytest_retrieval.cli import main
from pytest_retrieval.compare import entry_from_result
from pytest_retrieval.gate import session_verdict
from pytest_retrieval.render.json import dumps, json_report
from pytest_retrieval.sanity import near_duplicates

ROOT = Path(__file__).resolve().parents[1]
TART = "how do i bake a cherry tart with fresh"


def write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit status, stdout, stderr; argparse's own errors (SystemExit) are a status too."""
    try:
        status = main(list(argv))
    except SystemExit as exc:
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The argparse-style message of a bad command line (exit 2), checked to be one."""
    status, out, err = run(capsys, *argv)
    assert status == 2, (out, err)
    assert err.startswith(f"usage: pytest-retrieval {argv[0]}"), err
    assert f"pytest-retrieval {argv[0]}: error: " in err and "Traceback" not in err
    return err.split(": error: ", 1)[1]


@pytest.mark.parametrize(("golden", "expected"), MALFORMED_GOLDEN)
def test_validate_gives_the_plugins_message_for_every_malformed_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], golden: Any, expected: list[str]
) -> None:
    path = write(tmp_path / "golden.json", golden)
    status, _, err = run(capsys, "validate", str(path))
    assert status == 1
    assert err.startswith(f"golden set {path}")
    for fragment in expected:
        assert fragment in err, err
    assert "Traceback" not in err


def test_validate_reports_counts_duplicates_and_balance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(json.dumps(GOLDEN))
    data["queries"] += [
        {"id": "dup", "query": "Apple", "relevant": ["d1"]},
        {"id": "near1", "query": f"{TART} cream", "relevant": ["d3"]},
        {"id": "near2", "query": f"{TART} custard", "relevant": ["d3"]},
    ]
    path = write(tmp_path / "golden.json", data)
    status, out, _ = run(capsys, "validate", str(path))
    assert status == 0
    assert "7 queries: 7 labelled, 0 open; 1 with graded judgments" in out
    assert "duplicate query text: apple, dup" in out
    assert "near-duplicate queries: near1, near2" in out
    assert "tags: drink 1, fruit 2; untagged 4" in out
    assert run(capsys, "validate", "--strict", str(path))[0] == 1
    status, out, _ = run(capsys, "validate", "--json", str(path))
    report = json.loads(out)[0]
    assert report["relevant_per_query"] == {"min": 1, "median": 1, "max": 2}
    assert report["single_relevant"] == ["juice", "dup", "near1", "near2"]


def test_near_duplicates_scale_linearly() -> None:
    texts = [(str(i), f"alpha{i} beta{i} gamma{i} delta") for i in range(20_000)]
    texts.append(("x", "Delta, gamma5 beta5 alpha5 extra"))  # reordered, one word added
    groups = near_duplicates(texts)
    assert groups == [["5", "x"]]


def test_convert_beir_trec_and_csv_round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    beir = ROOT / "example_golden" / "cranfield"
    out = tmp_path / "beir.json"
    status, text, _ = run(capsys, "convert", str(beir), "-o", str(out))
    assert status == 0 and "225 queries" in text
    assert load_golden(out).fingerprint == load_golden(beir).fingerprint

    qrels = tmp_path / "run.qrels"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 2\nq2 0 d3 1\n", encoding="utf-8")
    topics = tmp_path / "topics.txt"
    topics.write_text("q1\tapple pie\nq2\tcherry\n", encoding="utf-8")
    trec_out = tmp_path / "trec.json"
    assert run(capsys, "convert", str(qrels), "--queries", str(topics), "-o", str(trec_out))[0] == 0
    trec = load_golden(trec_out)
    assert [(q.id, q.query, q.relevant) for q in trec.queries] == [
        ("q1", "apple pie", {"d1": 1, "d2": 2}),
        ("q2", "cherry", {"d3": 1}),
    ]

    table = tmp_path / "golden.csv"
    table.write_text(
        "id,query,relevant,tags\nq1,apple pie,d1;d2:2,fruit;baking\nq2,cherry,d3,\n",
        encoding="utf-8",
    )
    csv_out = tmp_path / "csv.json"
    assert run(capsys, "convert", str(table), "-o", str(csv_out), "--k", "5")[0] == 0
    converted = load_golden(csv_out)
    assert converted.k == 5 and converted.queries[0].tags == ("fruit", "baking")
    assert converted.fingerprint == trec.fingerprint  # same queries and judgments


def test_convert_never_overwrites_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = write(tmp_path / "mine.json", {"hand": "written"})
    beir = str(ROOT / "example_golden" / "cranfield")
    assert "exists; pass --force to overwrite it" in usage_error(
        capsys, "convert", beir, "-o", str(out)
    )
    assert json.loads(out.read_text()) == {"hand": "written"}
    assert run(capsys, "convert", beir, "-o", str(out), "--force")[0] == 0


def test_convert_bad_csv_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "golden.csv"
    table.write_text("query,relevant\napple,d1\ncherry,\n", encoding="utf-8")
    status, _, err = run(capsys, "convert", str(table), "-o", str(tmp_path / "o.json"))
    assert status == 1
    assert "golden.csv, line 3: a row needs 'query' and 'relevant'" in err


def test_convert_to_a_folder_or_under_a_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = str(ROOT / "example_golden" / "tiny.json")
    folder = tmp_path / "out"
    folder.mkdir()
    for extra in ([], ["--force"]):
        message = usage_error(capsys, "convert", tiny, "-o", str(folder), *extra)
        assert f"-o {folder} is a folder" in message and "golden.json" in message
    assert list(folder.iterdir()) == []
    under_file = tmp_path / "mine.json"
    under_file.write_text("{}", encoding="utf-8")
    message = usage_error(capsys, "convert", tiny, "-o", str(under_file / "x.json"))
    assert f"{under_file} is a file, not a folder" in message


def test_convert_write_failure_is_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("pytest_retrieval._internal.io.atomic_write", full)
    out = tmp_path / "o.json"
    status, _, err = run(
        capsys, "convert", str(ROOT / "example_golden" / "tiny.json"), "-o", str(out)
    )
    assert (status, err) == (
        1,
        f"pytest-retrieval convert: cannot write {out}: No space left on device\n",
    )


def test_missing_inputs_are_usage_errors_that_name_the_argument(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = str(tmp_path / "gone.json")
    tiny = str(ROOT / "example_golden" / "tiny.json")
    message = usage_error(capsys, "convert", gone, "-o", str(tmp_path / "o.json"))
    assert message == f"argument SOURCE: no such file or folder: {gone!r}\n"
    message = usage_error(capsys, "convert", tiny, "--queries", gone, "-o", "-")
    assert message == f"argument --queries: no such file: {gone!r}\n"
    assert "no such file or folder" in usage_error(capsys, "validate", tiny, gone)
    assert "argument FILE: no such file" in usage_error(capsys, "show", gone)
    assert "argument REPORT_B: no such file" in usage_error(capsys, "diff", tiny, gone)
    assert "is a folder" in usage_error(capsys, "diff", tiny, str(tmp_path))
    message = usage_error(capsys, "judge-batch", "submit", tiny, "-o", "s.json", "--corpus", gone)
    assert message.startswith("argument --corpus: no such file")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["diff", "{a}", "{a}", "--max-drop", "bogus"],
            "argument --max-drop: 'bogus' is not METRIC=DROP",
        ),
        (["diff", "{a}", "{a}", "--max-drop", "mrr@10=-1"], "argument --max-drop: "),
        (
            ["diff", "{a}", "{a}", "--gate", "recal@10"],
            "argument --gate: unknown metric 'recal' in 'recal@10'",
        ),
        (
            ["diff", "{a}", "{a}", "--alpha", "2"],
            "argument --alpha: '2' is not a significance level",
        ),
        (["convert", "{a}", "-o", "-", "--k", "0"], "argument --k: '0' is not a whole number >= 1"),
        (
            ["judge-batch", "submit", "{a}", "-o", "s.json", "--min-score", "7"],
            "argument --min-score: '7' is not a number between 0 and 1",
        ),
        (
            ["judge-batch", "submit", "{a}", "-o", "s.json", "--text-budget", "-1"],
            "argument --text-budget: '-1' is not a whole number >= 1",
        ),
        (["judge-batch", "submit", "{a}"], "submit needs -o STATE.json"),
        (["show", "{a}", "--worst", "0"], "argument --worst: '0' is not a whole number >= 1"),
    ],
)
def test_bad_values_are_argparse_errors_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    a = write(tmp_path / "a.json", {"evaluations": []})
    message = usage_error(capsys, *(arg.format(a=a) for arg in argv))
    assert message.startswith(expected), message


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_retrieval._version import __version__

    status, out, _ = run(capsys, "--version")
    assert (status, out) == (0, f"pytest-retrieval {__version__}\n")


def test_judge_batch_refuses_a_wrong_file_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = write(tmp_path / "golden.json", GOLDEN)
    state = tmp_path / "s.json"
    status, _, err = run(capsys, "judge-batch", "submit", str(golden), "-o", str(state))
    assert status == 1 and f"{golden}: not a pytest-retrieval report" in err
    assert "credentials" not in err and not state.exists()
    report = write(tmp_path / "r.json", {"evaluations": []})
    message = usage_error(capsys, "judge-batch", "submit", str(report), "-o", str(tmp_path))
    assert message.startswith(f"-o {tmp_path} is a folder; give the file to write, e.g. -o ")
    status, _, err = run(capsys, "judge-batch", "collect", str(report))
    assert status == 1 and f"{report} is a report; collect reads the state file" in err


def _report(tmp_path: Path, name: str, degrade: bool) -> Path:
    golden = load_golden(ROOT / "example_golden" / "cranfield.json")

    def search(query: str, k: int) -> list[str]:
        ranked = [doc for doc in relevant_first[query]][:k]
        return ranked[::-1] if degrade and hash(query) % 3 == 0 else ranked

    relevant_first = {
        q.query: [*sorted(q.relevant, key=lambda d: -q.relevant[d]), *map(str, range(2000, 2100))]
        for q in golden.queries
    }
    result = evaluate(search, golden, retriever_id="bm25")
    path = tmp_path / f"{name}.json"
    path.write_text(dumps(json_report([result], session_verdict([result], ()))), encoding="utf-8")
    return path


def test_diff_reports_a_regression_from_two_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main_run = _report(tmp_path, "main", degrade=False)
    same = _report(tmp_path, "same", degrade=False)
    worse = _report(tmp_path, "worse", degrade=True)
    status, out, _ = run(capsys, "diff", str(main_run), str(same))
    assert status == 0 and "0 of 1 evaluation failed" in out
    status, out, _ = run(capsys, "diff", str(main_run), str(worse), "--max-drop", "ndcg@10=2%")
    assert status == 1
    assert "REGRESSION: mrr@10 dropped" in out
    assert "worse on mrr@10 (" in out and "left the top 10: " in out
    assert "1 of 1 evaluation failed" in out


def test_diff_bad_reports_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _report(tmp_path, "main", degrade=False)
    broken = tmp_path / "broken.json"
    broken.write_text('{"evaluations": [', encoding="utf-8")
    status, _, err = run(capsys, "diff", str(good), str(broken))
    assert status == 1 and f"{broken}: ends before its JSON does (line 1, column 18); " in err
    assert err.rstrip().endswith("run that job again)")
    broken.write_text('{"evaluations": [}', encoding="utf-8")
    status, _, err = run(capsys, "diff", str(good), str(broken))
    assert status == 1 and f"{broken}: not JSON (line 1, column 18); give a file" in err
    text = good.read_text(encoding="utf-8")
    cuts = ('{"evaluations": [{"golden": "abc', '{"evaluations": tr', '{"a": {"b": 1}')
    for cut in (*cuts, text[: len(text) // 2]):
        broken.write_text(cut, encoding="utf-8")  # cut inside a string, a literal, anywhere
        status, _, err = run(capsys, "diff", str(good), str(broken))
        assert status == 1 and f"{broken}: ends before its JSON does (line" in err, err
    for other in ("# Retrieval report\n", "q1 Q0 d1 1 1.0 run\n", "<testsuites/>\n"):
        broken.write_text(other, encoding="utf-8")  # another kind of file: not cut short
        status, _, err = run(capsys, "diff", str(good), str(broken))
        assert status == 1 and f"{broken}: not JSON (line 1, column 1)" in err, err
    broken.write_text("[pytest]\nretrieval_golden = g.json\n", encoding="utf-8")  # an ini
    status, _, err = run(capsys, "diff", str(good), str(broken))
    assert status == 1 and f"{broken}: not JSON (line 1, column 2); give a file " in err, err
    assert "cut short" not in err
    other = write(tmp_path / "other.json", {"something": "else"})
    status, _, err = run(capsys, "diff", str(other), str(good))
    assert status == 1 and "not a pytest-retrieval report" in err
    binary = tmp_path / "binary.json"
    binary.write_bytes(bytes(range(128, 256)))  # not UTF-8: was a UnicodeDecodeError traceback
    for command in (["diff", str(good), str(binary)], ["judge-batch", "collect", str(binary)]):
        status, _, err = run(capsys, *command)
        assert status == 1 and f"{binary}: not JSON (not UTF-8 text)" in err, err


def _edited(report: Path, name: str, edit: Callable[[dict[str, Any]], None]) -> Path:
    data = json.loads(report.read_text(encoding="utf-8"))
    edit(data["evaluations"][0])
    return write(report.with_name(name), data)


def _only_recall_at_5(evaluation: dict[str, Any]) -> None:
    for entry in (evaluation, *evaluation["queries"], *evaluation["per_tag"].values()):
        entry["metrics"] = {"recall@5": entry["metrics"]["recall@10"]}
    evaluation["ci"] = {"recall@5": [0.0, 1.0]}
    evaluation["gated"] = ["recall@5"]


def _other_query_ids(evaluation: dict[str, Any]) -> None:
    for query in evaluation["queries"]:
        query["id"] = f"x{query['id']}"


def _other_retriever(evaluation: dict[str, Any]) -> None:
    evaluation["retriever"] = "dense"


@pytest.mark.parametrize(
    ("edit", "because"),
    [
        (_only_recall_at_5, "no metric in common: "),
        (_other_query_ids, "no query in common"),
        (_other_retriever, "cranfield::bm25 is not in"),
    ],
)
def test_diff_exits_1_when_nothing_was_compared(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[dict[str, Any]], None],
    because: str,
) -> None:
    after = _report(tmp_path, "after", degrade=False)
    before = _edited(after, "before.json", edit)
    status, out, err = run(capsys, "diff", str(before), str(after))
    assert status == 1, out + err
    assert because in out + err
    assert "nothing compared" in err
    assert "pytest " not in out + err and "--retrieval-update-baseline" not in out + err


def test_diff_a_gated_metric_missing_from_a_report_compares_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _report(tmp_path, "main", degrade=False)
    status, out, err = run(capsys, "diff", str(report), str(report), "--gate", "recall@3")
    assert status == 1, out + err
    assert "--gate recall@3: not in" in out and "nothing compared" in err


def test_show_a_baseline_and_a_corrupt_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    golden = write(tmp_path / "golden.json", GOLDEN)
    result = evaluate(lambda query, k: ["d1", "d2", "d3"][:k], golden)
    path = tmp_path / "golden.json.baseline.json"
    update(path, [entry_from_result(result, git_info(tmp_path), now())], replace_corrupt=False)
    status, out, _ = run(capsys, "show", str(path))
    assert status == 0
    assert "fruit::retriever: golden fruit" in out and "4 queries" in out
    assert out.index("recall@3") < out.index("precision@3")  # metric order, not alphabetical
    path.write_text('{"format": "pytest-retrieval-baseline", "version": 99}', encoding="utf-8")
    status, _, err = run(capsys, "show", str(path))
    assert status == 1 and str(path) in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["validate"],
        ["convert", "x"],
        ["diff", "a"],
        ["diff", "a", "b", "--alpha"],
        ["diff", "a", "b", "--alpha", "2"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "usage: pytest-retrieval" in capsys.readouterr().err


def test_module_and_console_script_entry_points() -> None:
    module = subprocess.run(
        [sys.executable, "-m", "pytest_retrieval", "validate", "example_golden/tiny.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert module.returncode == 0 and "valid golden set 'tiny'" in module.stdout
    script = Path(sys.executable).with_name("pytest-retrieval")
    assert script.exists(), "the pytest-retrieval console script is installed"
    help_run = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert help_run.returncode == 0 and "validate" in help_run.stdout


def test_a_report_of_a_session_that_ran_nothing_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review of issue 12: diff said "see above" with nothing above and advised matching
    metrics; show said "see its verdict" without showing it and accepted any --query."""
    good = _report(tmp_path, "main", degrade=False)
    reason = {"kind": "usage", "message": "golden.json: /queries/0/relevant: fix it"}
    empty = write(
        tmp_path / "empty.json",
        {"passed": False, "verdict": {"passed": False, "reasons": [reason]}, "evaluations": []},
    )
    status, _, err = run(capsys, "diff", str(good), str(empty))
    assert status == 1
    assert f"{empty} holds no evaluation" in err and "usage: golden.json: /queries/0/" in err
    status, out, _ = run(capsys, "show", str(empty))
    assert status == 0 and "no evaluation ran: usage: golden.json: /queries/0/relevant" in out
    status, _, err = run(capsys, "show", str(empty), "--query", "q1")
    assert status == 2 and "holds no evaluation: usage: golden.json" in err


def test_eval_names_its_own_option_in_a_bad_baselines_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A baseline file that does not read: eval's fix names ``--update-baseline`` (the
    pytest option it named is not eval's: "unrecognized arguments")."""
    from pytest_retrieval.cli import main

    monkeypatch.chdir(tmp_path)
    write(tmp_path / "golden.json", GOLDEN)
    (tmp_path / "run.json").write_text(json.dumps({"apple": ["d1"]}), encoding="utf-8")
    (tmp_path / "golden.json.baseline.json").write_text(
        '{"format": "pytest-retrieval-baseline", "version": 1, "entries": {"x": 5}}',
        encoding="utf-8",
    )
    assert main(["eval", "golden.json", "run.json"]) != 0
    err = capsys.readouterr().err
    assert "re-record it with --update-baseline" in err
    assert "--retrieval-update-baseline" not in err
