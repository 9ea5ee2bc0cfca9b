"""Issue 13, point 5: ``pytest-retrieval eval GOLDEN RUN`` gates a precomputed run without
pytest exactly as a pytest run gates a retriever that returns the same lists: numbers, CIs,
paired tests against the baseline, verdict, exit status, JUnit test case and baseline entry."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_shards import evaluations, junit_cases, make_project

from pytest_retrieval.cli import main


def run_file(report: Path, target: Path) -> Path:
    """The ranked lists a pytest run's retriever returned (its report's ``returned``), as a
    ``{qid: [doc, ...]}`` run file (named bm25.json: its retriever id is bm25)."""
    (entry,) = json.loads(report.read_text(encoding="utf-8"))["evaluations"]
    target.write_text(json.dumps({q["id"]: q["returned"] for q in entry["queries"]}), "utf-8")
    return target


def trec_file(run: Path, target: Path) -> Path:
    """The same lists as a TREC run file, scores strictly decreasing down each list."""
    lines = [
        f"{qid} Q0 {doc} {rank} {100 - rank} tag"
        for qid, docs in json.loads(run.read_text(encoding="utf-8")).items()
        for rank, doc in enumerate(docs, 1)
    ]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def evaluate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what the pytest runs before printed
    status = main(["eval", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def without_time(entry: dict[str, Any]) -> dict[str, Any]:
    """A baseline entry without what differs between two recordings: when, and latencies
    (a run file has none)."""
    entry.pop("created"), entry.pop("latency_ms")
    for query in entry["queries"].values():
        query.pop("latency_ms", None)
    return entry


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """120 queries, the bm25 retriever of test_shards, its baseline recorded by pytest."""
    make_project(pytester, size=120)
    monkeypatch.setenv("RETRIEVERS", "bm25")
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline"
    )
    assert recorded.ret == 0
    return pytester


def test_eval_of_a_run_is_the_pytest_run_of_the_same_lists(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Against the retriever fixture, then against ``--retrieval-run`` of the same file."""
    monkeypatch.setenv("WORSE", "1")
    single = project.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-report",
        "single.json",
        "--junitxml",
        "single.xml",
    )
    assert single.ret == pytest.ExitCode.TESTS_FAILED  # bm25 regressed against its baseline
    run = run_file(project.path / "single.json", project.path / "bm25.json")
    status, out, err = evaluate(
        capsys, "golden.json", "bm25.json", "--report", "eval.json", "--junit-xml", "eval.xml"
    )
    assert status == single.ret == 1, err
    assert out.rstrip().endswith("retrieval verdict: FAILED (3 reasons, listed above)")
    ours = evaluations(project.path / "eval.json")
    single_entries = evaluations(project.path / "single.json")
    assert [e.pop("run_file") for e in single_entries] == [None]  # a live retriever
    assert [e.pop("run_file") for e in ours] == [str(run)]  # the one difference
    assert [e.pop("run_format") for e in single_entries] == [None]  # ... and its format
    assert [e.pop("run_format") for e in ours] == ["json"]
    assert ours == single_entries
    (entry,) = ours
    assert entry["metrics"]["recall@10"] == pytest.approx(0.6)
    changes = {c["metric"]: c for c in entry["baseline"]["comparison"]["changes"]}
    assert changes["recall@10"]["verdict"] == "regressed"
    assert changes["recall@10"]["p_adjusted"] < 0.05
    assert junit_cases(project.path / "eval.xml") == junit_cases(project.path / "single.xml")
    assert list(junit_cases(project.path / "eval.xml")) == ["golden.json::retrieval[bm25]"]

    from_run = project.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-run",
        str(run),
        "--retrieval-report",
        "run.json",
    )
    from_run_entries = evaluations(project.path / "run.json")
    assert [e.pop("run_file") for e in from_run_entries] == [str(run)]
    assert [e.pop("run_format") for e in from_run_entries] == ["json"]
    assert from_run.ret == 1 and from_run_entries == ours

    trec = trec_file(run, project.path / "bm25.trec")
    status, _, _ = evaluate(capsys, "golden.json", str(trec), "--report", "trec.json")
    assert status == 1
    scored = evaluations(project.path / "trec.json")
    assert [e.pop("run_file") for e in scored] == [str(trec)]
    assert [e.pop("run_format") for e in scored] == ["trec"]
    first = scored[0]["queries"][1]  # the run's scores are kept, as a retriever's would be
    assert first["scores"] == {doc: 99 - rank for rank, doc in enumerate(first["returned"])}
    for query in [*scored[0]["queries"], *ours[0]["queries"]]:
        query.pop("scores", None)  # a list has none
    assert scored == ours  # the same ranking: the scores decrease down each list


def test_eval_says_which_golden_queries_the_run_lacks(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    run = run_file(project.path / "single.json", project.path / "bm25.json")
    lists = json.loads(run.read_text())
    del lists["q3"]
    run.write_text(json.dumps(lists), encoding="utf-8")
    status, out, _ = evaluate(capsys, "golden.json", "bm25.json", "--report", "eval.json")
    assert status == 0
    assert "run file bm25.json lacks 1 of the 120 queries of golden set many ('q3')" in out
    (entry,) = evaluations(project.path / "eval.json")
    assert next(q for q in entry["queries"] if q["id"] == "q3")["returned"] == []


def test_a_run_lacking_golden_queries_records_no_baseline_unless_forced(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A truncated JSON run (a batch job that died half way) scores the queries it lacks 0:
    recorded, it would lower the bar every later run is held to. Refused as failed calls
    are, by pytest and by eval, with the way to force it. A TREC run records (with its
    note): it has no line for a query that found nothing, so a complete one may lack some."""
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    run = run_file(project.path / "single.json", project.path / "bm25.json")
    lists = json.loads(run.read_text())
    for qid in ("q3", "q7"):
        del lists[qid]
    run.write_text(json.dumps(lists), encoding="utf-8")
    baseline = project.path / "golden.json.baseline.json"
    before = baseline.read_text()
    refusal = (
        "baseline NOT updated for golden.json: this run is partial (run file bm25.json lacks "
        "2 of the 120 queries of many [bm25]). Give the run file every query (an empty list "
        "for one that found nothing)"
    )
    status, out, _ = evaluate(capsys, "golden.json", "bm25.json", "--update-baseline")
    assert status == 1 and refusal + ", or force it with --update-baseline=force" in out
    assert baseline.read_text() == before
    result = project.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "bm25.json",
        "--retrieval-update-baseline",
    )  # fmt: skip
    assert result.ret == 1
    assert f"{refusal}, or force it with --retrieval-update-baseline=force" in result.stdout.str()
    assert baseline.read_text() == before
    status, out, _ = evaluate(capsys, "golden.json", "bm25.json", "--update-baseline=force")
    assert status == 0, out
    assert baseline.read_text() != before
    baseline.write_text(before)
    trec = trec_file(run, project.path / "bm25.trec")
    status, out, _ = evaluate(capsys, "golden.json", str(trec), "--update-baseline")
    assert status == 0, out
    assert "lacks 2 of the 120 queries" in out and baseline.read_text() != before


def test_shards_of_different_run_files_are_not_combined(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """run.trec in one shard's job, run.jsonl in the others (one retriever id, "run"): the
    whole took the first part's format, so whether a run lacking queries recorded a
    baseline depended on the order of the arguments (a reviewer). Refused, naming both."""
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    lists = json.loads(run_file(project.path / "single.json", project.path / "l.json").read_text())
    (project.path / "run.jsonl").write_text(
        "".join(json.dumps({"id": qid, "hits": hits}) + "\n" for qid, hits in lists.items()),
        encoding="utf-8",
    )
    trec_file(project.path / "l.json", project.path / "run.trec")
    for index, run in ((1, "run.trec"), (2, "run.jsonl"), (3, "run.jsonl")):
        shard = project.runpytest(
            "--retrieval-golden", "golden.json", "--retrieval-run", run,
            "--retrieval-shard", f"{index}/3", "--retrieval-report", f"part{index}.json",
        )  # fmt: skip
        assert shard.ret == 0, shard.stdout.str()
    capsys.readouterr()
    assert main(["combine", "part2.json", "part1.json", "part3.json"]) == 2
    err = capsys.readouterr().err
    assert (
        "part1.json and part2.json differ on golden.json [run]: run file 'run.trec (trec)' vs "
        "'run.jsonl (jsonl)'"
    ) in err


def test_a_run_given_as_the_golden_set_says_what_it_is(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The arguments swapped: the run file read as TREC qrels is named a run, with the fix."""
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    trec = trec_file(
        run_file(project.path / "single.json", project.path / "bm25.json"),
        project.path / "bm25.trec",
    )
    status, out, err = evaluate(capsys, str(trec), "golden.json")
    assert status == 2 and out == ""
    assert (
        f"{trec}, line 1: this is a TREC run (QUERY_ID Q0 DOC_ID RANK SCORE TAG), not qrels"
    ) in err
    assert "pytest-retrieval eval GOLDEN RUN: the golden set first" in err


def test_json_files_given_in_each_others_place_say_what_they_are(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A JSON run as the golden set, a golden set or a report as the run: named, with the fix
    (they were "'queries' is a required property" and "/name: a query's hits are ...")."""
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    run = run_file(project.path / "single.json", project.path / "bm25.json")
    status, _, err = evaluate(capsys, str(run), "golden.json")
    assert status == 2
    assert f"{run}, /: a run file ({{query id: hits}}), not a golden set" in err
    assert "fix: pass the golden set where one goes and this file as the run" in err
    swapped = [
        ("golden.json", "a golden set (it has queries)"),
        ("single.json", "a pytest-retrieval report (it has evaluations)"),
    ]
    for given, what in swapped:
        status, _, err = evaluate(capsys, "golden.json", given)
        assert status == 2
        assert f"run file {given}, /: {what}, not a run" in err
        assert "eval the golden set comes first: eval GOLDEN RUN" in err


def test_what_only_looks_like_the_other_file_is_read_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose query is named "queries" (hits as objects) is a run; a golden object with
    settings but no "queries" is a golden set missing them, not a run."""
    monkeypatch.chdir(tmp_path)
    queries = [{"id": "queries", "query": "a", "relevant": ["d1"]}]
    queries.append({"id": "q2", "query": "b", "relevant": ["d2"]})
    Path("g.json").write_text(json.dumps({"name": "g", "queries": queries}))
    Path("run.json").write_text(
        json.dumps({"q2": [{"id": "d2", "score": 1.0}], "queries": [{"id": "d1", "score": 2.0}]})
    )
    status, out, _ = evaluate(capsys, "g.json", "run.json", "--metric", "recall@1")
    assert status == 0 and "recall@1      1.0000" in out
    Path("s.json").write_text(
        json.dumps({"metrics": ["recall@5"], "thresholds": {"recall@5": 0.5}})
    )
    status, _, err = evaluate(capsys, "s.json", "run.json")
    assert status == 2 and "s.json, /: 'queries' is a required property" in err
    assert "not a golden set" not in err


def test_an_empty_retriever_id_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["eval", "golden.json", "run.trec", "--retriever", " "])
    assert stopped.value.code == 2
    assert "argument --retriever: an empty retriever id names nothing" in capsys.readouterr().err


def test_eval_records_the_baseline_pytest_records(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = project.path / "golden.json.baseline.json"
    recorded = without_time(json.loads(baseline.read_text())["entries"]["golden.json::bm25"])
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    run = run_file(project.path / "single.json", project.path / "bm25.json")
    other = project.path / "other.baseline.json"
    status, out, _ = evaluate(
        capsys,
        "golden.json",
        str(run),
        "--baseline",
        str(other),
        "--update-baseline",
    )
    assert status == 0
    assert f"baseline written: {other.name} (golden.json::bm25)" in out
    written = json.loads(other.read_text())["entries"]["golden.json::bm25"]
    assert without_time(written) == recorded
    status, out, _ = evaluate(capsys, "golden.json", str(run))
    assert status == 0 and "vs baseline golden.json.baseline.json" in out  # unchanged: passes


def test_eval_gates_with_its_own_settings(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    run = run_file(project.path / "single.json", project.path / "bm25.json")
    status, out, _ = evaluate(
        capsys,
        "golden.json",
        str(run),
        "--retriever",
        "new",
        "--threshold",
        "recall@10=0.9",
        "--metric",
        "ndcg@3",
        "--strict-baseline",
    )
    assert status == 1
    assert "    threshold: recall@10 = 0.8000 is below 0.9 (threshold from --threshold)" in out
    assert "    missing baseline: no baseline for many::new in golden.json.baseline.json" in out
    assert "  ndcg@3 " in out


@pytest.mark.parametrize(
    ("ini", "name", "says"),
    [
        (
            "[pytest]\nretrieval_thresholds = recall@10=0.9\nretrieval_baseline = ci.json\n",
            "pytest.ini",
            "retrieval_thresholds, retrieval_baseline (--threshold, --baseline)",
        ),
        (
            '[tool.pytest.ini_options]\nretrieval_gate = ["map@10"]\nretrieval_alpha = "0.1"\n',
            "pyproject.toml",
            "retrieval_gate, retrieval_alpha (--gate, --alpha)",
        ),
        ("[pytest]\nretrieval_report = r.json\n", "pytest.ini", None),  # no gate setting
        (
            "[pytest]\naddopts = -q --retrieval-threshold=recall@10=0.9\n",
            "pytest.ini",
            "--retrieval-threshold in addopts (--threshold)",
        ),
    ],
)
def test_eval_says_which_gate_settings_of_the_ini_it_does_not_read(
    project: pytest.Pytester,
    capsys: pytest.CaptureFixture[str],
    ini: str,
    name: str,
    says: str | None,
) -> None:
    """A pytest run applies the ini's gate settings and eval does not: the same run could
    pass one and fail the other with no word of it."""
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    run = run_file(project.path / "single.json", project.path / "bm25.json")
    (project.path / name).write_text(ini, encoding="utf-8")
    status, _, err = evaluate(capsys, "golden.json", str(run))
    assert status == 0
    if says is None:
        assert "does not read" not in err
    else:
        # given as the warning advises, it is not given again
        option = says.split(" (")[1].split(",")[0].rstrip(")")
        value = {"--threshold": "recall@10=0.9", "--baseline": "ci.json", "--gate": "map@10"}
        _, _, again = evaluate(capsys, "golden.json", str(run), option, value[option])
        assert option not in again
        assert (
            f"pytest-retrieval eval: warning: {name} sets {says.split(' (')[0]}, which a pytest "
            "run applies and eval does not read: give them on the command line "
            f"({says.split(' (')[1]} for the same gate"
        ) in err.splitlines()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["golden.json", "absent.json"], "argument RUN: no such file: 'absent.json'"),
        (
            ["golden.json", "bm25.json", "--threshold", "recall@10[x]=0.5"],
            "no query has the tag 'x'",
        ),
        (["golden.json", "bm25.json", "--report", "."], "argument --report: '.' is a folder"),
        (["golden.json", "golden.json"], "error: run file golden.json, /: a golden set (it has"),
    ],
    ids=["no-run", "unknown-tag", "report-folder", "not-a-run"],
)
def test_bad_inputs_are_refused_with_one_message(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    run_file(project.path / "single.json", project.path / "bm25.json")
    status, out, err = evaluate(capsys, *argv)
    assert status == 2 and out == "" and "Traceback" not in err
    assert expected in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["golden.json", "absent.trec"], "argument RUN: no such file: 'absent.trec'"),
        (["absent.json", "bm25.json"], "argument GOLDEN: no such file or folder: 'absent.json'"),
    ],
)
def test_a_missing_input_is_said_in_the_outputs_asked_for(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    """A batch job whose run file was never produced: CI still gets its report and JUnit,
    saying why (as for any other input eval refuses)."""
    (project.path / "bm25.json").write_text('{"q1": ["d1"]}', encoding="utf-8")
    status, _, err = evaluate(capsys, *argv, "--report", "o.json", "--junit-xml", "o.xml")
    assert status == 2 and expected in err and "Traceback" not in err
    report = json.loads((project.path / "o.json").read_text(encoding="utf-8"))
    assert report["passed"] is False
    assert [r["message"] for r in report["verdict"]["reasons"]] == [expected]
    assert expected in (project.path / "o.xml").read_text(encoding="utf-8")


def test_eval_warns_of_tied_scores_as_pytest_does(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    (pytester.path / "golden.json").write_text(
        json.dumps({"name": "g", "queries": [{"id": "q1", "query": "a", "relevant": ["d1"]}]})
    )
    (pytester.path / "run.trec").write_text("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.5 t\n")
    warning = (
        "run file run.trec: 1 query has tied scores; among ties the hits are ranked by doc id, "
        "descending, as trec_eval ranks them (the rank column is not read)"
    )
    status, _, err = evaluate(capsys, "golden.json", "run.trec")
    assert status == 0 and f"pytest-retrieval eval: warning: {warning}" in err
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-run", "run.trec")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*PytestWarning: {warning}"])
    # a JSON run has no rank column (it was said to have one)
    (pytester.path / "run.json").write_text('{"q1": {"d1": 0.5, "d2": 0.5}}')
    status, _, err = evaluate(capsys, "golden.json", "run.json")
    assert (
        status == 0
        and (
            "run file run.json: 1 query has tied scores; among ties the hits are ranked by doc id, "
            "descending, as trec_eval ranks them (the docs' order in the file is not read)"
        )
        in err
    )


def test_a_run_cut_short_is_asked_about_its_depth_not_the_retriever(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fewer hits than k from a run file: its maker kept fewer, no retriever was called."""
    project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "single.json")
    run = run_file(project.path / "single.json", project.path / "bm25.json")
    lists = json.loads(run.read_text(encoding="utf-8"))
    top3 = project.path / "top3.json"
    top3.write_text(json.dumps({qid: docs[:3] for qid, docs in lists.items()}), "utf-8")
    _, out, _ = evaluate(capsys, "golden.json", str(top3))
    (note,) = [line for line in out.splitlines() if "fewer than 10 hits" in line]
    assert note.endswith(
        "counts the missing ranks as misses; was the run file cut at a depth below 10?"
    )


def test_the_error_advice_names_the_report_being_written_else_the_option_that_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where every failed call's traceback is kept: eval's and combine's option is --report
    (pytest's words, --retrieval-report, named an option they do not have), and a run that
    writes a report was told to give the option it gave."""
    from pytest_retrieval.finish import kept_in

    monkeypatch.chdir(tmp_path)
    assert kept_in(None) == "--report"
    assert kept_in(tmp_path / "out" / "whole.json") == os.path.join("out", "whole.json")
    assert kept_in(Path("whole.json")) == "whole.json"


QRELS = "1 0 d1 2\n1 0 d2 1\n1 0 d5 0\n2 0 d3 1\n3 0 d7 1\n"
TREC_RUN = "1 Q0 d9 1 3.0 r\n1 Q0 d2 2 2.0 r\n1 Q0 d1 3 1.5 r\n2 Q0 d3 1 1.0 r\n3 Q0 d1 1 1 r\n"


def test_trec_qrels_and_a_run_need_no_queries_file(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """What trec_eval takes, qrels and a run, is enough to evaluate a run: nothing is
    searched, so no query text is needed (each query's text is its id). A retriever still
    needs the texts: without the queries file it would be asked for "1"."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    pytester.path.joinpath("test.qrels").write_text(QRELS)
    pytester.path.joinpath("bm25.trec").write_text(TREC_RUN)
    status, out, err = evaluate(capsys, "test.qrels", "bm25.trec", "--report", "eval.json")
    assert status == 0, out + err
    ran = pytester.runpytest(
        "--retrieval-golden", "test.qrels", "--retrieval-run", "bm25.trec",
        "--retrieval-report", "pytest.json",
    )  # fmt: skip
    assert ran.ret == 0, ran.stdout.str()
    qrels: dict[str, dict[str, int]] = {}
    for line in QRELS.splitlines():
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    run: dict[str, dict[str, float]] = {}
    for line in TREC_RUN.splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    measures = {"recall_10": "recall@10", "recip_rank": "mrr@10", "ndcg_cut_10": "ndcg@10"}
    expected = pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(run)
    for name in ("eval.json", "pytest.json"):
        (entry,) = evaluations(pytester.path / name)
        assert [q["query"] for q in entry["queries"]] == ["1", "2", "3"]
        for measure, metric in measures.items():
            mean = sum(scores[measure] for scores in expected.values()) / 3
            assert entry["metrics"][metric] == pytest.approx(mean, abs=1e-9)
    assert entry["metrics"]["recall@10"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)

    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture\ndef retriever():\n    return lambda query, k: []\n"
    )
    searched = pytester.runpytest("--retrieval-golden", "test.qrels")
    assert searched.ret == pytest.ExitCode.USAGE_ERROR
    searched.stderr.fnmatch_lines(["*test.qrels*TREC qrels need a queries file beside them*"])


def test_shards_of_a_run_on_qrels_without_texts_combine_and_record(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same qrels without a queries file, a run evaluated in 2 shards: combine checks the
    golden set here is the one the shards evaluated (by fingerprint, texts read as they read
    them) and records the baseline, which the next single run is compared with."""
    pytester.path.joinpath("test.qrels").write_text(QRELS)
    pytester.path.joinpath("bm25.trec").write_text(TREC_RUN)
    for i in (1, 2):
        shard = pytester.runpytest(
            "--retrieval-golden", "test.qrels", "--retrieval-run", "bm25.trec",
            "--retrieval-shard", f"{i}/2", "--retrieval-report", f"part{i}.json",
        )  # fmt: skip
        assert shard.ret == 0, shard.stdout.str()
    capsys.readouterr()
    status = main(["combine", "part1.json", "part2.json", "--update-baseline"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert pytester.path.joinpath("test.qrels.baseline.json").is_file()
    again = pytester.runpytest("--retrieval-golden", "test.qrels", "--retrieval-run", "bm25.trec")
    assert again.ret == 0, again.stdout.str()
    again.stdout.fnmatch_lines(["*vs baseline test.qrels.baseline.json*", "*recall@10  0 * 0 * 3"])


def test_a_run_file_has_no_latency_in_any_output(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run file records no timings: every output says none (null, no property), as the
    terminal's "latency n/a" and the baseline do; 0.0 ms would chart a retriever that took
    no time."""
    pytester.path.joinpath("test.qrels").write_text(QRELS)
    pytester.path.joinpath("bm25.trec").write_text(TREC_RUN)
    outputs = ("--report", "eval.json", "--junit-xml", "eval.xml")
    status, out, err = evaluate(capsys, "test.qrels", "bm25.trec", *outputs)
    assert status == 0, out + err
    ran = pytester.runpytest(
        "--retrieval-golden", "test.qrels", "--retrieval-run", "bm25.trec",
        "--retrieval-report", "pytest.json", "--junitxml", "pytest.xml",
    )  # fmt: skip
    assert ran.ret == 0, ran.stdout.str()
    ran.stdout.fnmatch_lines(["*latency n/a (a precomputed run)*"])
    for name in ("eval", "pytest"):
        (entry,) = json.loads((pytester.path / f"{name}.json").read_text())["evaluations"]
        assert entry["latency_ms"] == {"p50": None, "p95": None}
        assert [q["latency_ms"] for q in entry["queries"]] == [None, None, None]
        junit = (pytester.path / f"{name}.xml").read_text()
        assert "retrieval.queries" in junit and "latency" not in junit


def one_relevant_each(pytester: pytest.Pytester, n: int, name: str = "g") -> None:
    """golden.json: n queries q0..q{n-1}, each with its one relevant document d0..d{n-1}."""
    queries = [{"id": f"q{i}", "query": f"q{i}", "relevant": [f"d{i}"]} for i in range(n)]
    golden = {"name": name, "k": 3, "queries": queries}
    (pytester.path / "golden.json").write_text(json.dumps(golden), encoding="utf-8")


def found_first(n: int) -> dict[str, list[str]]:
    """A run that ranks each query's relevant document first (see one_relevant_each)."""
    return {f"q{i}": [f"d{i}", "x", "y"] for i in range(n)}


def test_the_markdown_names_the_option_of_the_tool_that_wrote_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """More changed queries than the Markdown lists, and no JSON report written: the note on
    where the rest are named eval's and combine's --report to a pytest run (and pytest's
    option to eval). Each names its own, as the terminal does."""
    one_relevant_each(pytester, 30, "many")
    good = found_first(30)
    worse = {f"q{i}": ["x", "y", f"d{i}"] for i in range(30)}
    (pytester.path / "run.json").write_text(json.dumps(good), encoding="utf-8")
    status, out, err = evaluate(capsys, "golden.json", "run.json", "--update-baseline")
    assert status == 0, out + err
    (pytester.path / "run.json").write_text(json.dumps(worse), encoding="utf-8")
    status, out, err = evaluate(capsys, "golden.json", "run.json", "--markdown", "eval.md")
    assert status == 1, out + err
    ran = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "run.json",
        "--retrieval-markdown", "pytest.md",
    )  # fmt: skip
    assert ran.ret == pytest.ExitCode.TESTS_FAILED
    eval_md = (pytester.path / "eval.md").read_text(encoding="utf-8")
    pytest_md = (pytester.path / "pytest.md").read_text(encoding="utf-8")
    assert "every changed query is in the JSON report (write one with --report)" in eval_md
    assert "every changed query is in the JSON report (write one with --retrieval-report)" in (
        pytest_md
    )
    assert "eval's and combine's" not in eval_md + pytest_md


LIVE_AND_RUN = """
import pytest
from pytest_retrieval.runfile import read_run

SEEN = []

def search(query, k):
    SEEN.append(query)
    return ["d1", "d3"]

@pytest.fixture
def retriever():
    return search

def test_live(retrieval_eval):
    retrieval_eval(search, golden="test.qrels")

@pytest.mark.retrieval(golden="test.qrels")
def test_marked(retrieval_eval):
    retrieval_eval(search)

def test_run(retrieval_eval):
    retrieval_eval(read_run("bm25.trec"), golden="test.qrels")

def test_searched_nothing():
    assert SEEN == []
"""


def test_qrels_without_texts_are_never_searched(pytester: pytest.Pytester) -> None:
    """With --retrieval-run the golden set was loaded without texts once for the session,
    and a live retriever in a retrieval_eval test was then searched for "1", "2", "3"
    (the ids) without a word. Whatever loads it first, only a precomputed run evaluates it;
    a search fails with the queries-file message. A run in a retrieval_eval test needs no
    texts either, with or without --retrieval-run."""
    pytester.path.joinpath("test.qrels").write_text(QRELS)
    pytester.path.joinpath("bm25.trec").write_text(TREC_RUN)
    pytester.makepyfile(test_mixed=LIVE_AND_RUN)
    for run in ([], ["--retrieval-golden", "test.qrels", "--retrieval-run", "bm25.trec"]):
        ran = pytester.runpytest("test_mixed.py", *run, "-p", "no:randomly")
        outcomes = ran.parseoutcomes()
        assert outcomes.get("failed") == 2, ran.stdout.str()
        assert outcomes.get("passed") == (3 if run else 2), ran.stdout.str()
        ran.stdout.fnmatch_lines(
            ["FAILED test_mixed.py::test_live - *", "FAILED test_mixed.py::test_marked - *"],
            consecutive=False,
        )
        assert ran.stdout.str().count("test.qrels: TREC qrels need a queries file beside") >= 2


def test_downstream_labels_need_the_query_texts(pytester: pytest.Pytester) -> None:
    """The eRAG labeller reads each query's text: with qrels lacking texts it was asked
    about "1", "2", "3" (the ids). It fails with the queries-file message instead."""
    pytester.path.joinpath("test.qrels").write_text(QRELS)
    pytester.path.joinpath("bm25.trec").write_text(TREC_RUN)
    pytester.makeconftest(
        "import pytest\n\n"
        "@pytest.fixture(scope='session')\n"
        "def retrieval_corpus():\n"
        "    return {f'd{i}': f'text {i}' for i in range(10)}\n\n"
        "@pytest.fixture(scope='session')\n"
        "def retrieval_downstream():\n"
        "    def score(query, doc, entry):\n"
        "        raise AssertionError(f'asked about {query!r}')\n"
        "    score.version = 'v1'\n"
        "    return score\n"
    )
    ran = pytester.runpytest("--retrieval-golden", "test.qrels", "--retrieval-run", "bm25.trec")
    ran.assert_outcomes(failed=1)
    assert "test.qrels: TREC qrels need a queries file beside them" in ran.stdout.str()
    assert "asked about" not in ran.stdout.str()


def test_a_latency_gate_on_a_run_file_says_not_tested_in_every_output(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A baseline recorded from a live retriever, then its run file gated with a latency
    allowance: the run has no latency, so the row said "nan ms" (terminal, Markdown, HTML)
    and `show` of the report crashed on its null. It says n/a, not tested."""
    one_relevant_each(pytester, 12)
    pytester.makeconftest(
        "import time, pytest\n\n@pytest.fixture\ndef retriever():\n"
        "    def search(query, k):\n        time.sleep(0.001)\n"
        "        return [f'd{query[1:]}', 'x', 'y']\n    return search\n"
    )
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline"
    )
    assert recorded.ret == 0, recorded.stdout.str()
    (pytester.path / "retriever.json").write_text(json.dumps(found_first(12)), encoding="utf-8")
    outputs = ("--retrieval-markdown", "out.md", "--retrieval-html", "out.html")
    ran = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "retriever.json",
        "--retrieval-max-drop", "latency_p95=20%", "--retrieval-report", "out.json", *outputs,
    )  # fmt: skip
    assert ran.ret == 0, ran.stdout.str()
    ran.stdout.fnmatch_lines(["*latency_p95 * ms * n/a * not tested*"])
    for name in ("out.md", "out.html"):
        text = (pytester.path / name).read_text(encoding="utf-8")
        assert "latency_p95" in text and "nan ms" not in text.lower()
    assert "nan ms" not in ran.stdout.str()
    capsys.readouterr()
    status = main(["show", "out.json"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "n/a" in out and "nan ms" not in out


def test_a_latency_gate_against_a_baseline_without_latency_says_not_tested(
    pytester: pytest.Pytester,
) -> None:
    """A baseline recorded from a run file has no latency; a live run gated on latency
    against it showed no latency row at all, as if the gate had not been asked for."""
    one_relevant_each(pytester, 12)
    (pytester.path / "retriever.json").write_text(json.dumps(found_first(12)), encoding="utf-8")
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "retriever.json",
        "--retrieval-update-baseline",
    )  # fmt: skip
    assert recorded.ret == 0, recorded.stdout.str()
    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture\ndef retriever():\n"
        "    return lambda query, k: [f'd{query[1:]}', 'x', 'y']\n"
    )
    live = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-max-drop", "latency_p95=20%",
        "--retrieval-markdown", "out.md",
    )  # fmt: skip
    assert live.ret == 0, live.stdout.str()
    live.stdout.fnmatch_lines(["*latency_p95 * n/a * ms *not tested*"])
    assert "not tested" in (pytester.path / "out.md").read_text(encoding="utf-8")
