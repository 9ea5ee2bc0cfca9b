"""An output path that is one of the session's inputs -- the golden set, a run file, a
baseline, a shard's partial report -- or another output is a usage error before anything is
written: nothing the user wrote is overwritten, not even by the outputs that say why the
session stopped."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER

from pytest_retrieval.cli import main

RUN = "q1 Q0 d1 1 2.0 bm25\nq1 Q0 d4 2 1.0 bm25\n"


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    (pytester.path / "golden.json").write_text(json.dumps(GOLDEN), encoding="utf-8")
    (pytester.path / "in.trec").write_text(RUN, encoding="utf-8")
    return pytester.path


def tree(folder: Path) -> dict[Path, bytes]:
    """Every file the user wrote below ``folder`` (compiled bytecode aside)."""
    return {
        p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--retrieval-report", "golden.json"], "--retrieval-report golden.json is the golden set"),
        (["--retrieval-markdown", "./golden.json"], "is the golden set"),
        (["--retrieval-html", "golden.json"], "--retrieval-html golden.json is the golden set"),
        (["--junitxml", "golden.json"], "--junitxml golden.json is the golden set"),
        (["--retrieval-export-run", "golden.json"], "is the golden set"),
        (
            ["--retrieval-run", "in.trec", "--retrieval-export-run", "in.trec"],
            "--retrieval-export-run in.trec is the run file",
        ),
        (
            ["--retrieval-report", "golden.json.baseline.json"],
            "--retrieval-report golden.json.baseline.json is the baseline",
        ),
        (
            ["--retrieval-baseline", "golden.json", "--retrieval-update-baseline"],
            "the baseline to record golden.json is the golden set",
        ),
        (
            ["--retrieval-report", "out.json", "--retrieval-html", "out.json"],
            "--retrieval-report and --retrieval-html are both out.json: one would overwrite",
        ),
        (["--retrieval-report", "link.json"], "--retrieval-report link.json is the golden set"),
    ],
)
def test_an_output_that_is_an_input_is_refused_and_nothing_is_written(
    pytester: pytest.Pytester, project: Path, args: list[str], message: str
) -> None:
    (project / "golden.json.baseline.json").write_text("{}", encoding="utf-8")
    (project / "link.json").symlink_to(project / "golden.json")
    before = contents(project)
    result = pytester.runpytest("--retrieval-golden", "golden.json", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *{message}*"])
    assert "would overwrite" in result.stderr.str()
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()
    assert contents(project) == before


def test_outputs_elsewhere_are_written(pytester: pytest.Pytester, project: Path) -> None:
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", "out.json"
    )
    result.assert_outcomes(passed=1)
    assert json.loads((project / "out.json").read_text(encoding="utf-8"))["evaluations"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "golden.json", "in.trec", "--report", "golden.json"], "is the golden set"),
        (["eval", "golden.json", "in.trec", "--markdown", "in.trec"], "is the run file"),
        (
            ["eval", "golden.json", "in.trec", "--report", "golden.json.baseline.json"],
            "is the baseline",
        ),
        (
            ["eval", "golden.json", "in.trec", "--baseline", "in.trec", "--update-baseline"],
            "--baseline in.trec is the run file",
        ),
        (["combine", "p1.json", "--report", "p1.json"], "is a shard's partial report"),
    ],
)
def test_offline_commands_refuse_to_overwrite_their_inputs(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(project)
    (project / "p1.json").write_text("{}", encoding="utf-8")
    (project / "golden.json.baseline.json").write_text("{}", encoding="utf-8")
    before = contents(project)
    assert main(argv) == 2
    assert f"{message}: writing it would overwrite that file" in capsys.readouterr().err
    assert contents(project) == before


def test_the_files_a_golden_set_reads_are_inputs_too(pytester: pytest.Pytester) -> None:
    """A BEIR folder's queries and corpus, a TREC qrels file's queries file."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    beir = pytester.path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "apple"}\n')
    (beir / "corpus.jsonl").write_text('{"_id": "d1", "text": "apple pie"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    trec = pytester.path / "trec"
    trec.mkdir()
    (trec / "g.qrels").write_text("q1 0 d1 1\n")
    (trec / "queries.tsv").write_text("q1\tapple\n")
    before = tree(pytester.path)
    for golden, output, option in [
        ("beir", "beir/queries.jsonl", "--retrieval-report"),
        ("beir", "beir/corpus.jsonl", "--retrieval-markdown"),
        ("beir/qrels/test.tsv", "beir/queries.jsonl", "--retrieval-html"),
        ("trec/g.qrels", "trec/queries.tsv", "--retrieval-export-run"),
    ]:
        result = pytester.runpytest("--retrieval-golden", golden, option, output)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, (golden, output)
        result.stderr.fnmatch_lines([f"ERROR: {option} {output} is a file of the golden set *"])
    assert main(["eval", "trec/g.qrels", "trec/g.qrels", "--report", "trec/queries.tsv"]) == 2
    assert tree(pytester.path) == before


def test_the_corpus_a_json_golden_set_names_and_the_ini_file_are_inputs_too(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its ``"corpus"`` is known once the golden set is read: pytest, eval and combine."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    pytester.makeini("[pytest]\n")
    (pytester.path / "docs").mkdir()
    (pytester.path / "docs" / "corpus.jsonl").write_text('{"_id": "d1", "text": "apple"}\n')
    (pytester.path / "golden.json").write_text(
        json.dumps({**GOLDEN, "corpus": "docs/corpus.jsonl"}), encoding="utf-8"
    )
    (pytester.path / "in.trec").write_text(RUN, encoding="utf-8")
    shard = ["--retrieval-shard", "1/1", "--retrieval-report", "p1.json"]
    assert pytester.runpytest("--retrieval-golden", "golden.json", *shard).ret == 0
    before = tree(pytester.path)
    for option, output in [
        ("--retrieval-report", "docs/corpus.jsonl"),
        ("--retrieval-export-run", "./docs/corpus.jsonl"),
        ("--retrieval-markdown", "tox.ini"),  # what makeini writes
    ]:
        result = pytester.runpytest("--retrieval-golden", "golden.json", option, output)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, output
        what = "the ini file pytest read" if output == "tox.ini" else "the corpus of the"
        shown = output.removeprefix("./")
        result.stderr.fnmatch_lines([f"ERROR: {option} {shown} is {what}*"])
    capsys.readouterr()
    for argv in (
        ["eval", "golden.json", "in.trec", "--report", "docs/corpus.jsonl"],
        ["combine", "p1.json", "--html", "docs/corpus.jsonl"],
    ):
        assert main(argv) == 2
        message = "docs/corpus.jsonl is the corpus of the golden set golden.json: writing it"
        assert message in capsys.readouterr().err
    assert tree(pytester.path) == before


def test_an_ini_file_that_is_no_file_is_not_an_input(pytester: pytest.Pytester) -> None:
    """``-c /dev/null`` (a common way to run without the project's ini) with an output to
    /dev/null: nothing is overwritten, so nothing is refused."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    (pytester.path / "golden.json").write_text(json.dumps(GOLDEN), encoding="utf-8")
    result = pytester.runpytest_subprocess(
        "-c", os.devnull, "--rootdir", str(pytester.path), "--retrieval-golden", "golden.json",
        "--junitxml", os.devnull,
    )  # fmt: skip
    assert result.ret == 0, result.stderr.str()


def test_a_golden_set_that_does_not_load_keeps_its_corpus(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The outputs of a failed start say why, but not over the corpus the set names."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    (pytester.path / "corpus.jsonl").write_text('{"_id": "d1", "text": "apple"}\n')
    broken = {**GOLDEN, "corpus": "corpus.jsonl"}
    broken["queries"] = [*GOLDEN["queries"], {"id": "bad", "query": "x", "relevant": "oops"}]
    (pytester.path / "golden.json").write_text(json.dumps(broken), encoding="utf-8")
    (pytester.path / "in.trec").write_text(RUN, encoding="utf-8")
    before = tree(pytester.path)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report",
                                "corpus.jsonl", "--retrieval-html", "page.html")  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "corpus.jsonl NOT written: it is a file of the golden set golden.json" in (
        result.stdout.str() + result.stderr.str()
    )
    assert "golden.json" in (pytester.path / "page.html").read_text()  # the other: written
    (pytester.path / "page.html").unlink()
    capsys.readouterr()
    assert main(["eval", "golden.json", "in.trec", "--report", "corpus.jsonl"]) == 2
    assert "corpus.jsonl NOT written: it is a file of the golden set golden.json" in (
        capsys.readouterr().err
    )
    assert tree(pytester.path) == before


def two_shards(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> dict[str, bytes]:
    """p1.json and p2.json, the partial reports of 2 shards, and the baseline file they name
    (main.json: not named as baselines are by default, which no output may overwrite at
    all): the project's files, as they are before combine."""
    for i in (1, 2):
        shard = ["--retrieval-shard", f"{i}/2", "--retrieval-report", f"p{i}.json"]
        shard += ["--retrieval-baseline", "main.json"]
        assert pytester.runpytest("--retrieval-golden", "golden.json", *shard).ret == 0
    (pytester.path / "main.json").write_text("{}", encoding="utf-8")
    capsys.readouterr()
    return contents(pytester.path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--report", "golden.json"], "--report golden.json is the golden set"),
        (["--report", "main.json"], "is the baseline"),
        (
            ["--update-baseline", "--markdown", "main.json"],
            "--markdown and the baseline are both main.json",
        ),
    ],
)
def test_combine_refuses_to_overwrite_what_the_shards_name(
    pytester: pytest.Pytester,
    project: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    """The golden set and baseline are named by the partial reports: checked once read."""
    before = two_shards(pytester, capsys)
    assert main(["combine", "p1.json", "p2.json", *argv]) == 2
    assert message in capsys.readouterr().err
    assert contents(project) == before


@pytest.mark.parametrize(
    ("partials", "error"),
    [
        (["p1.json"], "shard 2/2 is missing (given: 1/2 {up}p1.json)"),
        (["p1.json", "nope.json"], "no such file: '{up}nope.json'"),  # before p1.json's content
        (["bad.json", "p2.json"], "{up}bad.json"),  # p2.json never read by the gate
    ],
    ids=["missing-shard", "missing-file", "unreadable-first"],
)
@pytest.mark.parametrize("where", [".", "sub"])
def test_a_refused_combine_writes_over_nothing_the_shards_name(
    pytester: pytest.Pytester,
    project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    partials: list[str],
    error: str,
    where: str,
) -> None:
    """Refused before the golden set is known from the whole (a shard missing, a report
    that does not read), from the shards' folder or below it: the refusal's outputs still
    skip the golden set and baseline the partial reports name."""
    before = two_shards(pytester, capsys)
    (project / "bad.json").write_text("{bad", encoding="utf-8")
    before["bad.json"] = b"{bad"
    (project / "sub").mkdir()
    monkeypatch.chdir(project / where)
    up = "" if where == "." else "../"
    argv = ["combine", *(up + name for name in partials), "--report", f"{up}golden.json"]
    assert main([*argv, "--markdown", f"{up}main.json"]) == 2
    err = capsys.readouterr().err
    assert "golden.json NOT written: it is a file of the golden set " in err
    assert "main.json NOT written: its inputs name it" in err
    assert error.format(up=up) in err
    assert contents(project) == before


def test_a_golden_set_named_in_a_test_is_not_overwritten_at_the_end(
    pytester: pytest.Pytester, project: Path
) -> None:
    """A golden set only a test names (``retrieval_eval``) is known after start-up: the
    outputs are checked as they are written, and the one that would overwrite it is not."""
    (project / "qrels.txt").write_text("apple 0 d1 1\ncherry 0 d3 1\n", encoding="utf-8")
    (project / "queries.tsv").write_text("apple\tapple\ncherry\tcherry\n", encoding="utf-8")
    for golden, option, path, why in [
        (
            "golden.json",
            "--retrieval-report",
            "golden.json",
            "it is a file of the golden set fruit",
        ),
        # a run is exported as TREC: a golden set in TREC form is the one at risk
        (
            "qrels.txt",
            "--retrieval-export-run",
            "qrels.txt",
            "it is a file of the golden set qrels",
        ),
    ]:
        pytester.makepyfile(
            test_mine=f"""
            def test_mine(retrieval_eval, retriever):
                retrieval_eval(retriever, golden="{golden}")
            """
        )
        assert pytester.runpytest("--retrieval-update-baseline").ret == 0
        before = contents(project)
        result = pytester.runpytest(option, path)
        assert result.ret == pytest.ExitCode.TESTS_FAILED, (option, result.stdout.str())
        shown = re.escape(path)
        found = rf"{shown} NOT written: {why}|NOT exported to {shown}: {why}"
        assert re.search(found, result.stdout.str()), result.stdout.str()
        assert contents(project) == before


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_corpus_of_a_golden_set_a_test_names_is_not_overwritten(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    """Known after start-up, loaded in this process or on a worker."""
    if workers:
        pytest.importorskip("xdist")
    pytester.makeconftest(KEYWORD_RETRIEVER)
    (pytester.path / "docs.jsonl").write_text('{"_id": "d1", "text": "apple"}\n')
    golden = {**GOLDEN, "corpus": "docs.jsonl"}
    (pytester.path / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    pytester.makepyfile(
        test_mine="""
        def test_mine(retrieval_eval, retriever):
            retrieval_eval(retriever, golden="golden.json")
        """
    )
    before = tree(pytester.path)
    result = pytester.runpytest_subprocess(*workers, "--retrieval-report", "docs.jsonl")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*docs.jsonl NOT written: it is the corpus of the golden set*"])
    after = tree(pytester.path)
    assert [after[path] for path in before] == list(before.values())


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "golden.json", "in.trec", "--markdown", "tox.ini"],
        ["eval", "golden.json", "in.trec", "--report", "conftest.py"],
        ["combine", "p1.json", "--html", "pyproject.toml"],
        ["combine", "p1.json", "--junit-xml", "setup.cfg"],
    ],
)
def test_offline_outputs_never_replace_the_projects_source_or_configuration(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """``combine`` and ``eval`` run without pytest, so they do not know which ini file the
    shards read: a Python file or a configuration file by pytest's names is never an
    output's place (a slip of the shell's completion)."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    pytester.makeini("[pytest]\n")
    (pytester.path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    (pytester.path / "setup.cfg").write_text("[metadata]\nname = mine\n")
    (pytester.path / "golden.json").write_text(json.dumps(GOLDEN), encoding="utf-8")
    (pytester.path / "in.trec").write_text(RUN, encoding="utf-8")
    shard = ["--retrieval-shard", "1/1", "--retrieval-report", "p1.json"]
    assert pytester.runpytest("--retrieval-golden", "golden.json", *shard).ret == 0
    before = tree(pytester.path)
    capsys.readouterr()
    assert main(argv) == 2
    shown = argv[-1]
    assert f"{shown} is a file of the project (its Python source or configuration): " in (
        capsys.readouterr().err
    )
    assert tree(pytester.path) == before


@pytest.mark.parametrize(
    ("option", "output"),
    [("--retrieval-report", "conftest.py"), ("--retrieval-html", "setup.cfg")],
)
def test_pytest_outputs_never_replace_the_projects_source_or_configuration(
    pytester: pytest.Pytester, project: Path, option: str, output: str
) -> None:
    """Beyond the ini file pytest read: a conftest, a test, another tool's configuration."""
    (project / "setup.cfg").write_text("[flake8]\nmax-line-length = 99\n")
    before = tree(project)
    result = pytester.runpytest("--retrieval-golden", "golden.json", option, output)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {option} {output} is a file of the project *"])
    assert tree(project) == before


@pytest.mark.parametrize("option", ["--retrieval-report", "--retrieval-markdown", "--junitxml"])
def test_no_output_replaces_another_golden_sets_baseline(
    pytester: pytest.Pytester, project: Path, option: str
) -> None:
    """A baseline this run does not read (another golden set's, committed beside it) is
    still the team's record: an output path naming it is refused, not written over (the
    next run of that golden set found a report where its baseline was)."""
    other = project / "other.json.baseline.json"
    other.write_text('{"format": "pytest-retrieval-baseline", "version": 1, "entries": {}}')
    before = tree(project)
    result = pytester.runpytest("--retrieval-golden", "golden.json", option, other.name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: {option} other.json.baseline.json is a baseline file (another golden *"]
    )
    assert tree(project) == before
    recorded = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-baseline",
                                  other.name, "--retrieval-update-baseline")  # fmt: skip
    assert recorded.ret == 0  # the baseline it records is written, of course
