"""--retrieval-run and --retrieval-export-run end to end (pytester).

The inner projects are table-driven: ``lists.json`` holds, per query text, the hits a
retriever returns (``{"id", "score"}``), so the same lists can go through the ``retriever``
fixture and through a run file, and the two JSON reports are compared number for number.
"""

from __future__ import annotations

import json
import random
import shlex
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

#: end-to-end runs (pytest processes, a local judge server): out of the fast subset,
#: `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

K = 10
#: the retriever of the inner runs: the hits lists.json holds for each query text
CONFTEST = """
import json
from pathlib import Path

import pytest

LISTS = json.loads((Path(__file__).parent / "lists.json").read_text())


@pytest.fixture(scope="session")
def retriever():
    return lambda query, k: LISTS[query][:k]
"""


def synthetic(tricky: bool = False) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """A graded golden set of 48 tagged queries and each query's hits (by query text):
    q0 retrieves nothing, some retrieve fewer than k. ``tricky``: scores trec_eval would
    reorder (ties in the wrong id order, rising scores, missing scores); else each list's
    scores fall strictly."""
    rng = random.Random(13)
    queries, lists = [], {}
    for i in range(48):
        relevant = {f"d{j}": rng.randint(0, 3) for j in rng.sample(range(60), 6)}
        queries.append(
            {"id": f"q{i}", "query": f"query {i}", "relevant": relevant, "tags": [f"t{i % 3}"]}
        )
        ranking = [f"d{j}" for j in rng.sample(range(60), 0 if i == 0 else rng.randint(3, K))]
        if not tricky:
            scores: list[float | None] = [round(20.0 - 1.5 * r, 2) for r in range(len(ranking))]
        elif i % 3 == 0:
            scores = [float(rng.randint(0, 1)) for _ in ranking]
        elif i % 3 == 1:
            scores = [0.1 * r for r in range(len(ranking))]
        else:
            scores = [rng.random() if rng.random() < 0.5 else None for _ in ranking]
        lists[f"query {i}"] = [
            {"id": doc} if score is None else {"id": doc, "score": score}
            for doc, score in zip(ranking, scores, strict=True)
        ]
    golden = {
        "name": "synth",
        "k": K,
        "metrics": ["recall@10", "precision@10", "mrr@10", "ndcg@10", "map@10", "hit_rate@5"],
        "queries": queries,
    }
    return golden, lists


def project(pytester: pytest.Pytester, tricky: bool = False) -> dict[str, list[dict[str, Any]]]:
    golden, lists = synthetic(tricky)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    (pytester.path / "lists.json").write_text(json.dumps(lists), encoding="utf-8")
    return {f"q{i}": lists[f"query {i}"] for i in range(len(lists))}


def write_run(path: Path, by_qid: dict[str, list[dict[str, Any]]], form: str) -> None:
    """The lists (strictly falling scores) as a run file of ``form``."""
    if form == "trec":
        lines = [
            f"{qid} Q0 {hit['id']} {rank} {hit['score']} bm25"
            for qid, hits in by_qid.items()
            for rank, hit in enumerate(hits, start=1)
        ]
        text = "\n".join(lines) + "\n"
    elif form == "scores":
        text = json.dumps({q: {h["id"]: h["score"] for h in hits} for q, hits in by_qid.items()})
    elif form == "lists":
        text = json.dumps({q: [h["id"] for h in hits] for q, hits in by_qid.items()})
    else:
        text = "".join(json.dumps({"id": q, "hits": hits}) + "\n" for q, hits in by_qid.items())
    path.write_text(text, encoding="utf-8")


def report(pytester: pytest.Pytester, name: str) -> list[dict[str, Any]]:
    evaluations: list[dict[str, Any]] = json.loads((pytester.path / name).read_text())[
        "evaluations"
    ]
    return evaluations


def assert_same_numbers(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every number of two evaluations of the same lists, bar the retriever's id."""
    for key in ("golden", "k", "n_queries", "metrics", "ci", "per_tag", "short_results"):
        if key == "short_results" and got.get("run_missing"):
            continue  # a query a TREC run lacks is not a short answer (run coverage says it)
        assert got[key] == expected[key], key
    assert got["verdict"]["passed"] == expected["verdict"]["passed"]
    rows = [(q["id"], q["returned"], q["metrics"]) for q in got["queries"]]
    assert rows == [(q["id"], q["returned"], q["metrics"]) for q in expected["queries"]]


def run_reference(pytester: pytest.Pytester, *args: str) -> dict[str, Any]:
    """The retriever fixture's evaluation (the conftest is removed afterwards: the run-file
    evaluations that follow have no ``retriever`` fixture)."""
    result = pytester.runpytest("--retrieval-golden", "golden.json", *args)
    assert result.ret == 0, result.stdout.str()
    (pytester.path / "conftest.py").unlink()
    (evaluation,) = report(pytester, "reference.json")
    assert evaluation["retriever"] == "retriever"
    return evaluation


@pytest.mark.parametrize(
    ("form", "name"),
    [("trec", "bm25.trec"), ("scores", "bm25.json"), ("lists", "bm25.json"), ("jsonl", "bm25")],
)
def test_run_file_equals_the_same_lists_through_the_retriever(
    pytester: pytest.Pytester, form: str, name: str
) -> None:
    by_qid = project(pytester)
    expected = run_reference(pytester, "--retrieval-report", "reference.json")
    write_run(pytester.path / name, by_qid, form)
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", name,
        "--retrieval-report", "run.json", "-v",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["golden.json::retrieval[[]bm25[]] PASSED*"])
    assert "no fixture named" not in result.stdout.str()
    (evaluation,) = report(pytester, "run.json")
    assert evaluation["retriever"] == "bm25"  # the file name: baselines are keyed by it
    assert_same_numbers(evaluation, expected)
    assert evaluation["metrics"]["ndcg@10"] > 0
    if form != "lists":
        scored = next(q for q in evaluation["queries"] if q["id"] == "q1")
        assert scored["scores"] == {h["id"]: h["score"] for h in by_qid["q1"]}
    if form == "trec":  # q0 retrieved nothing: a TREC run cannot say so (JSON can: [])
        result.stdout.fnmatch_lines(
            ["*run file * lacks 1 of the 48 queries of golden set synth ('q0'): it is "
             "evaluated as returning nothing (score 0)"]
        )  # fmt: skip


#: our metric -> (pytrec_eval measure, its result key); the lists hold at most 10 hits, so
#: recip_rank (no cutoff) is mrr@10
MEASURES = {
    "recall@10": ("recall.10", "recall_10"),
    "precision@10": ("P.10", "P_10"),
    "ndcg@10": ("ndcg_cut.10", "ndcg_cut_10"),
    "map@10": ("map_cut.10", "map_cut_10"),
    "hit_rate@5": ("success.5", "success_5"),
    "mrr@10": ("recip_rank", "recip_rank"),
}


def trec_eval_values(path: Path, golden: dict[str, Any]) -> dict[str, dict[str, float]]:
    """pytrec_eval's per-query values on the run file at ``path``, by our metric names."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    with path.open(encoding="utf-8") as handle:
        parsed = pytrec_eval.parse_run(handle)
    qrels = {q["id"]: q["relevant"] for q in golden["queries"]}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {m for m, _ in MEASURES.values()})
    return {
        qid: {ours: found[key] for ours, (_, key) in MEASURES.items()}
        for qid, found in evaluator.evaluate(parsed).items()
    }


def test_export_is_what_trec_eval_scores_and_reads_back(pytester: pytest.Pytester) -> None:
    """The export of a retriever whose own scores trec_eval would reorder: pytrec_eval on the
    file gives the plugin's per-query values; evaluated again as a run file, the same report."""
    project(pytester, tricky=True)
    golden = json.loads((pytester.path / "golden.json").read_text())
    expected = run_reference(
        pytester, "--retrieval-report", "reference.json", "--retrieval-export-run", "out.trec"
    )
    theirs = trec_eval_values(pytester.path / "out.trec", golden)
    assert len(theirs) == 47  # q0 retrieved nothing: it has no line
    for query in expected["queries"]:
        assert set(query["metrics"]) == {*MEASURES, "judged@10"}  # judged@10: see test_judged
        for name in MEASURES:
            value = query["metrics"][name]
            assert abs(value - theirs.get(query["id"], {}).get(name, 0.0)) <= 1e-9, (query, name)
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "out.trec",
        "--retrieval-report", "run.json",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    (again,) = report(pytester, "run.json")
    assert_same_numbers(again, expected)
    assert again["retriever"] == "out"


def test_export_note_and_adjusted_scores(pytester: pytest.Pytester) -> None:
    project(pytester, tricky=True)
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-export-run", "x.trec"
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["run exported: x.trec (synth [[]retriever[]]: 47 queries, * hits); scores of * queries "
         "adjusted so that every tool keeps their order (tied or rising scores); * hits had no "
         "score of the retriever's: written with falling scores of "
         "the export's making"]  # the lists with hits the retriever gave no score
    )  # fmt: skip
    first = (pytester.path / "x.trec").read_text().splitlines()[0].split()
    assert first[1] == "Q0" and first[3] == "1" and first[5] == "retriever"


def test_ab_runs_export_one_file_each(pytester: pytest.Pytester) -> None:
    by_qid = project(pytester)
    (pytester.path / "conftest.py").unlink()
    write_run(pytester.path / "bm25.trec", by_qid, "trec")
    reversed_lists = {qid: hits[::-1] for qid, hits in by_qid.items()}
    write_run(pytester.path / "dense.json", reversed_lists, "lists")
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "bm25.trec",
        "--retrieval-run", "dense.json", "--retrieval-export-run", "out/x.trec",
        "--retrieval-report", "r.json",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()
    assert [e["retriever"] for e in report(pytester, "r.json")] == ["bm25", "dense"]
    result.stdout.fnmatch_lines(["*2 retrievers side by side*against bm25*"])
    assert sorted(p.name for p in (pytester.path / "out").iterdir()) == [
        "x.bm25.trec",
        "x.dense.trec",
    ]
    dense = (pytester.path / "out" / "x.dense.trec").read_text().splitlines()
    assert dense[0].split()[:4] == ["q1", "Q0", by_qid["q1"][-1]["id"], "1"]


@pytest.mark.parametrize("xdist", [False, True], ids=["inprocess", "xdist"])
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "run file *missing.trec: does not exist"),
        ("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2\n", "run file *missing.trec, line 2: 4 fields*"),
        ("x Q0 d1 1 2.0 t\n", "run file *missing.trec: none of its 1 query ids is a query of*"),
    ],
    ids=["missing", "malformed", "foreign"],
)
def test_bad_run_file_is_a_usage_error(
    pytester: pytest.Pytester, xdist: bool, content: str | None, expected: str
) -> None:
    project(pytester)
    if content is not None:
        (pytester.path / "missing.trec").write_text(content)
    args = ["--retrieval-golden", "golden.json", "--retrieval-run", "missing.trec"]
    args += ["--retrieval-report", "r.json"]
    if xdist:
        pytest.importorskip("xdist")
        result = pytester.runpytest_subprocess(*args, "-n", "2")
    else:
        result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {expected}", "  fix: *"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    reasons = json.loads((pytester.path / "r.json").read_text())["verdict"]["reasons"]
    assert [r["kind"] for r in reasons] == ["usage"] and "missing.trec" in reasons[0]["message"]


def test_two_run_files_of_one_name_are_refused(pytester: pytest.Pytester) -> None:
    by_qid = project(pytester)
    (pytester.path / "a").mkdir()
    write_run(pytester.path / "run.trec", by_qid, "trec")
    write_run(pytester.path / "a" / "run.json", by_qid, "lists")
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "run.trec",
        "--retrieval-run", "a/run.json",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --retrieval-run: * are both named 'run'*rename one file"])


@pytest.mark.parametrize("split", [[], ["--retrieval-split-min", "10"]], ids=["whole", "split"])
def test_run_file_under_xdist(pytester: pytest.Pytester, split: list[str]) -> None:
    """-n 2 (the golden set whole on one worker, or split across both) gives the report and
    the export of -n 0; the controller writes the export once."""
    pytest.importorskip("xdist")
    by_qid = project(pytester, tricky=True)
    (pytester.path / "conftest.py").unlink()
    write_run(pytester.path / "bm25.jsonl", by_qid, "jsonl")
    args = ["--retrieval-golden", "golden.json", "--retrieval-run", "bm25.jsonl", *split]
    single = pytester.runpytest(
        *args, "--retrieval-report", "a.json", "--retrieval-export-run", "a.trec"
    )
    assert single.ret == 0, single.stdout.str()
    spread = pytester.runpytest_subprocess(
        *args, "-n", "2", "--retrieval-report", "b.json", "--retrieval-export-run", "b.trec"
    )
    assert spread.ret == 0, spread.stdout.str()
    (expected,), (got,) = report(pytester, "a.json"), report(pytester, "b.json")
    assert_same_numbers(got, expected)
    assert got["retriever"] == "bm25"
    exported = (pytester.path / "a.trec").read_text()
    assert (pytester.path / "b.trec").read_text() == exported
    assert exported.count("\n") == sum(len(hits) for hits in by_qid.values())
    spread.stdout.fnmatch_lines(["run exported: b.trec (synth [[]bm25[]]: 47 queries, * hits)*"])


def test_baseline_is_keyed_by_the_run_name(pytester: pytest.Pytester) -> None:
    by_qid = project(pytester)
    (pytester.path / "conftest.py").unlink()
    write_run(pytester.path / "nightly.trec", by_qid, "trec")
    args = ["--retrieval-golden", "golden.json", "--retrieval-run", "nightly.trec"]
    assert pytester.runpytest(*args, "--retrieval-update-baseline").ret == 0
    stored = json.loads((pytester.path / "golden.json.baseline.json").read_text())
    assert list(stored["entries"]) == ["golden.json::nightly"]
    result = pytester.runpytest(*args, "--retrieval-strict-baseline")
    assert result.ret == 0, result.stdout.str()  # compared with it: not missing


def test_the_no_baseline_note_of_a_run_file_records_its_baseline(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fix the note prints, run as printed (pytest's from pytest, ``eval``'s from
    ``eval``), records the run file's own entry; a live retriever's command would record
    another."""
    from pytest_retrieval.cli import main

    by_qid = project(pytester)
    (pytester.path / "conftest.py").unlink()
    write_run(pytester.path / "nightly.trec", by_qid, "trec")
    first = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "nightly.trec"
    )
    assert first.ret == 0
    fix = (
        "pytest --retrieval-golden=golden.json --retrieval-run=nightly.trec "
        "--retrieval-update-baseline"
    )
    first.stdout.fnmatch_lines(
        [f"*no baseline for synth::nightly in *; record one on main with: {fix}"]
    )
    first.stdout.fnmatch_lines(["  latency n/a (a precomputed run)*"])  # not "p50 0.0 ms"
    assert main(["eval", "golden.json", "nightly.trec"]) == 0
    # eval's own command (its user may have no pytest set-up); it records the same entry
    by_eval = "pytest-retrieval eval golden.json nightly.trec --update-baseline"
    assert f"record one on main with: {by_eval}" in capsys.readouterr().out
    assert main(shlex.split(by_eval)[1:]) == 0
    stored = json.loads((pytester.path / "golden.json.baseline.json").read_text())
    assert list(stored["entries"]) == ["golden.json::nightly"]
    (pytester.path / "golden.json.baseline.json").unlink()
    # typed with "--" (a file named like an option): the option goes before it
    assert main(["eval", "--", "golden.json", "nightly.trec"]) == 0
    dashed = "pytest-retrieval eval --update-baseline -- golden.json nightly.trec"
    assert f"record one on main with: {dashed}" in capsys.readouterr().out
    assert main(shlex.split(dashed)[1:]) == 0
    (pytester.path / "golden.json.baseline.json").unlink()
    recorded = pytester.runpytest(*shlex.split(fix)[1:])
    assert recorded.ret == 0
    stored = json.loads((pytester.path / "golden.json.baseline.json").read_text())
    assert list(stored["entries"]) == ["golden.json::nightly"]
    # another baseline file, another id (eval only): the command names both
    renamed = [
        "eval",
        "golden.json",
        "nightly.trec",
        "--retriever",
        "my run",
        "--baseline",
        "o.json",
    ]
    assert main(renamed) == 0
    fix = (
        "pytest-retrieval eval golden.json nightly.trec --retriever 'my run' --baseline o.json "
        "--update-baseline"
    )
    assert f"record one on main with: {fix}" in capsys.readouterr().out
    assert main(shlex.split(fix)[1:]) == 0
    stored = json.loads((pytester.path / "o.json").read_text())
    assert list(stored["entries"]) == ["golden.json::my run"]
    assert main(renamed) == 0
    assert "no baseline" not in capsys.readouterr().out
    shutil.copy(pytester.path / "nightly.trec", pytester.path / "my run.trec")  # quoted
    assert main(["eval", "golden.json", "my run.trec"]) == 0
    fix = "pytest-retrieval eval golden.json 'my run.trec' --update-baseline"
    assert f"record one on main with: {fix}" in capsys.readouterr().out
    assert main(shlex.split(fix)[1:]) == 0
    assert main(["eval", "golden.json", "my run.trec"]) == 0
    assert "no baseline" not in capsys.readouterr().out
    other = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "nightly.trec",
        "--retrieval-baseline", "p.json",
    )  # fmt: skip
    other.stdout.fnmatch_lines(
        ["*record one on main with: pytest --retrieval-golden=golden.json --retrieval-run="
         "nightly.trec --retrieval-baseline=p.json --retrieval-update-baseline"]
    )  # fmt: skip


def test_retrieval_eval_takes_a_run(pytester: pytest.Pytester) -> None:
    """A test's own evaluation of a run file: read_run's result in place of a retriever."""
    by_qid = project(pytester)
    (pytester.path / "conftest.py").unlink()
    write_run(pytester.path / "nightly.trec", by_qid, "trec")
    first = [hit["id"] for hit in by_qid["q1"]]
    pytester.makepyfile(
        test_own=f"""
        from pytest_retrieval.runfile import read_run

        def test_nightly(retrieval_eval):
            result = retrieval_eval(read_run("nightly.trec"), golden="golden.json")
            assert result.retriever_id == "nightly"
            assert [list(q.returned) for q in result.queries][:2] == [[], {first!r}]

        def test_renamed(retrieval_eval):
            retrieval_eval(read_run("nightly.trec"), golden="golden.json", retriever_id="mine")
        """
    )
    ran = pytester.runpytest("test_own.py")
    ran.assert_outcomes(passed=2)
    # the fix reruns the test (not eval: the test is what names the run "mine")
    fix = "pytest test_own.py::test_renamed --retrieval-update-baseline"
    ran.stdout.fnmatch_lines([f"*no baseline for synth::mine in *; record one on main with: {fix}"])
    assert pytester.runpytest(*shlex.split(fix)[1:]).ret == 0
    stored = json.loads((pytester.path / "golden.json.baseline.json").read_text())
    assert list(stored["entries"]) == ["golden.json::mine"]


def test_an_export_writes_the_retrievers_scores_at_every_rank(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result keeps the first 10 hits' scores, and the export wrote deeper hits with
    scores of its own making (85.5, not the retriever's 85.0): score fusion in ranx then
    used made-up scores. With an export the result keeps every hit's score. Hits a retriever
    gave no score among hits it scored are written with scores of the export's making and
    counted; plain ids (no score at all) are ranks written as scores, as before, and not
    counted."""
    pytester.makeconftest(
        "import os, pytest\n\n@pytest.fixture(scope='session')\ndef retriever():\n"
        "    if os.environ.get('PLAIN'):\n"
        "        return lambda query, k: [f'd{i}' for i in range(20)]\n"
        "    scored = int(os.environ.get('SCORED', '20'))\n"
        "    return lambda query, k: [{'id': f'd{i}', 'score': 100.0 - i * 1.5 if i < scored "
        "else None} for i in range(20)]\n"
    )
    golden = {"name": "deep", "k": 20, "queries": [{"id": "q1", "query": "a", "relevant": ["d15"]}]}
    (pytester.path / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    args = ("--retrieval-golden", "golden.json", "--retrieval-export-run", "ex.trec")
    for workers in (("-p", "no:xdist"), ("-n", "2", "--retrieval-split-min", "1")):
        result = pytester.runpytest_subprocess(*args, *workers)
        assert result.ret == 0, result.stdout.str()
        result.stdout.fnmatch_lines(
            ["run exported: ex.trec (deep [[]retriever[]]: 1 queries, 20 hits)"]
        )
        assert "export's making" not in result.stdout.str()
        scores = [
            float(line.split()[4]) for line in (pytester.path / "ex.trec").read_text().splitlines()
        ]
        assert scores == [100.0 - i * 1.5 for i in range(20)]  # the retriever's, all 20
    monkeypatch.setenv("SCORED", "12")
    partly = pytester.runpytest(*args)
    partly.stdout.fnmatch_lines(
        [
            "run exported: ex.trec (deep [[]retriever[]]: 1 queries, 20 hits); 8 hits had no "
            "score of the retriever's: written with falling scores of the export's making"
        ]
    )
    lines = (pytester.path / "ex.trec").read_text().splitlines()
    assert lines[11].split()[4] == "83.5" and lines[12].split()[4] == "82.5"  # made up
    monkeypatch.delenv("SCORED")
    monkeypatch.setenv("PLAIN", "1")
    plain = pytester.runpytest(*args)
    assert "export's making" not in plain.stdout.str()
    plain.stdout.fnmatch_lines(["run exported: ex.trec (deep [[]retriever[]]: 1 queries, 20 hits)"])


def test_an_export_that_cannot_be_written_fails_the_session(pytester: pytest.Pytester) -> None:
    project(pytester)
    (pytester.path / "taken").mkdir()
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-export-run", "taken"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "output: run of synth [[]retriever[]] NOT exported to taken: *",
            "retrieval verdict: FAILED*",
        ]
    )


def coverage_warnings(evaluation: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in evaluation["verdict"]["warnings"] if w["kind"] == "run coverage"]


def test_golden_queries_a_run_lacks_are_a_warning_in_every_output(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's coverage is part of the verdict: the same warning in the terminal, a
    failure's text (so JUnit's), the JSON report (valid against its schema), Markdown and
    HTML; from one process, from a worker under -n 2, and from 3 shards combined (each part
    sees only its own queries; combine names them all)."""
    import jsonschema

    from pytest_retrieval.cli import main

    schema = json.loads(
        (Path(__file__).parents[1] / "src/pytest_retrieval/schema/report.schema.json").read_text()
    )
    by_qid = project(pytester)
    (pytester.path / "conftest.py").unlink()
    del by_qid["q5"]  # q0 retrieved nothing: a TREC run has no line for it either
    write_run(pytester.path / "bm25.trec", by_qid, "trec")
    args = ["--retrieval-golden", "golden.json", "--retrieval-run", "bm25.trec"]
    expected = {
        "kind": "run coverage",
        "message": "run file bm25.trec lacks 2 of the 48 queries of golden set synth ('q0', "
        "'q5'): they are evaluated as returning nothing (score 0)",
        "metric": None,
    }

    def checked(name: str) -> dict[str, Any]:
        jsonschema.validate(json.loads((pytester.path / name).read_text()), schema)
        (evaluation,) = report(pytester, name)
        assert coverage_warnings(evaluation) == [expected]
        assert evaluation["run_missing"] == ["q0", "q5"]
        # the queries the run lacks are not counted as short answers ("honour k?") too
        assert evaluation["short_results"]["of"] == 46
        return evaluation

    single = pytester.runpytest(
        *args, "--retrieval-report", "a.json", "--retrieval-markdown", "a.md",
        "--retrieval-html", "a.html",
    )  # fmt: skip
    assert single.ret == 0, single.stdout.str()
    assert single.stdout.str().count("lacks 2 of the 48 queries") == 1
    single.stdout.fnmatch_lines([f"    note: {expected['message']}"])
    checked("a.json")
    assert expected["message"] in (pytester.path / "a.md").read_text(encoding="utf-8")
    assert "lacks 2 of the 48 queries" in (pytester.path / "a.html").read_text(encoding="utf-8")

    failed = pytester.runpytest(
        *args, "--retrieval-threshold", "recall@10=0.9", "--junitxml", "f.xml"
    )
    assert failed.ret == pytest.ExitCode.TESTS_FAILED
    failure = ET.parse(pytester.path / "f.xml").find(".//failure")
    assert failure is not None  # in the message CI viewers show, not only the element text
    assert f"note: {expected['message']}" in failure.get("message", "")

    pytest.importorskip("xdist")
    spread = pytester.runpytest_subprocess(*args, "-n", "2", "--retrieval-report", "b.json")
    assert spread.ret == 0, spread.stdout.str()
    checked("b.json")

    for i in (1, 2, 3):
        shard = pytester.runpytest(
            *args, "--retrieval-shard", f"{i}/3", "--retrieval-report", f"part{i}.json"
        )
        assert shard.ret == 0, shard.stdout.str()
    capsys.readouterr()
    status = main(["combine", "part1.json", "part2.json", "part3.json", "--report", "c.json"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"note: {expected['message']}" in out
    checked("c.json")


@pytest.mark.parametrize(
    ("option", "value", "ini"),
    [
        ("--retrieval-run", "../x.trec", "[pytest]\nretrieval_golden = golden.json\n"),
        ("--retrieval-golden", "../golden.json", "[pytest]\nretrieval_thresholds = recall@3=0.9\n"),
        ("--retrieval-run", "{outside}/x.trec", "[tool:pytest]\nretrieval_golden = golden.json\n"),
    ],
    ids=["run", "golden", "absolute-setup-cfg"],
)
def test_an_option_value_outside_the_project_that_made_pytest_skip_its_ini_is_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, option: str, value: str, ini: str
) -> None:
    """pytest chooses its rootdir and ini file before it knows a plugin's options, so the
    value of ``--retrieval-run ../x.trec`` counts as a test path there: the common folder of
    it and the working directory becomes the rootdir, and the project's ini file (its golden
    set, its thresholds) goes unread. A usage error says so and how to write it (``=``);
    written so, the run is evaluated."""
    project = pytester.path / "project"
    project.mkdir()
    golden, _ = synthetic()
    for folder in (pytester.path, project):
        (folder / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    (pytester.path / "x.trec").write_text(
        "".join(f"q{i} Q0 d{i} 1 1.0 run\n" for i in range(48)), encoding="utf-8"
    )
    (project / ("setup.cfg" if "tool:" in ini else "pytest.ini")).write_text(ini, "utf-8")
    monkeypatch.chdir(project)
    value = value.format(outside=pytester.path)
    refused = pytester.runpytest(option, value)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    ini_name = "setup.cfg" if "tool:" in ini else "pytest.ini"
    refused.stderr.fnmatch_lines(
        [
            f"ERROR: {option} {value}: pytest took {value} for a test path when it looked for "
            f"its ini file (before it knows plugins' options), so it did not read {ini_name} "
            f"(rootdir: {pytester.path}); write {option}={value}"
        ]
    )
    if option == "--retrieval-run":  # the ini names the golden set, the run has no fixture
        written = pytester.runpytest(f"{option}={value}")
        written.assert_outcomes(passed=1)


def test_an_option_value_outside_the_project_is_fine_where_no_ini_went_unread(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an ini file in the project there is nothing pytest failed to read, and a flag
    followed by a test path outside is that test path: neither is refused."""
    project = pytester.path / "project"
    project.mkdir()
    golden, _ = synthetic()
    (project / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    (pytester.path / "x.trec").write_text(
        "".join(f"q{i} Q0 d{i} 1 1.0 run\n" for i in range(48)), encoding="utf-8"
    )
    monkeypatch.chdir(project)
    pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "../x.trec"
    ).assert_outcomes(passed=1)
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (pytester.path / "test_outside.py").write_text("def test_o(): pass\n", encoding="utf-8")
    result = pytester.runpytest("--retrieval-strict", "../test_outside.py")
    result.assert_outcomes(passed=1)


def _ini_layout(root: Path) -> Path:
    """``root/project`` (a pytest.ini naming golden.json), ``root/data/x.trec`` a run of it,
    ``root/other`` a test folder with its own pytest.ini; returns the project."""
    project, data, other = root / "project", root / "data", root / "other"
    for folder in (project, data, other):
        folder.mkdir()
    golden, _ = synthetic()
    (project / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    run = "".join(f"q{i} Q0 d{i} 1 1.0 run\n" for i in range(48))
    (data / "x.trec").write_text(run, encoding="utf-8")
    (project / "pytest.ini").write_text("[pytest]\nretrieval_golden = golden.json\n", "utf-8")
    (other / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (other / "test_other.py").write_text("def test_o(): pass\n", encoding="utf-8")
    return project


@pytest.mark.parametrize(
    ("addopts", "args", "unread"),
    [
        ("--retrieval-run ../data/x.trec", [], "pytest.ini"),
        ("", ["--rootdir=.", "--retrieval-run", "../data/x.trec"], "pytest.ini"),
        ("", ["--retrieval-run", "sub/x.trec"], "pytest.ini"),  # sub/tox.ini read instead
        ("-c ci.ini", ["--retrieval-run", "../data/x.trec"], None),
        ("", ["-cci.ini", "--retrieval-run", "../data/x.trec"], None),
        (
            "",
            ["../other", "--retrieval-golden=golden.json", "--retrieval-run", "../data/x.trec"],
            None,
        ),
        ("", ["--retrieval-run", "x.trec"], None),  # inside: the project's ini is read
        ("", ["--basetemp", "../bt", "--retrieval-run", "../data/x.trec"], "pytest.ini"),
        ("", ["-k", "sub", "--retrieval-run", "../data/x.trec"], "pytest.ini"),
        ("--retrieval-report ../bt/r.json", ["--retrieval-report=r.json"], "pytest.ini"),
        ("", ["--rootdir", "../other", "--retrieval-run", "../data/x.trec"], "pytest.ini"),
        ("", ["--ignore", "sub", "--retrieval-run", "x.trec"], None),  # sub/tox.ini: no path
        ("", ["@sub", "--config-file=../pytest.ini", "--retrieval-run", "../x.trec"], None),
        ("", ["@sub", "-c../pytest.ini", "--retrieval-run", "../x.trec"], None),
        ("", ["-q", "sub", "--retrieval-run", "sub/x.trec"], "-"),  # -q: a flag (7.4 too)
        (
            "",
            ["--retrieval-golden=golden.json", "--", "--retrieval-run", "../data/x.trec"],
            "pytest.ini",
        ),
    ],
    ids=[
        "addopts",
        "rootdir",
        "nested-ini",
        "c-in-addopts",
        "c-attached",
        "test-path",
        "inside",
        "basetemp-value",
        "k-value",
        "addopts-overridden",
        "rootdir-value",
        "ignore-value",
        "config-file-nested",
        "c-attached-nested",
        "q-flag",
        "after-double-dash",
    ],
)
def test_the_ini_check_replays_pytests_choice(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    addopts: str,
    args: list[str],
    unread: str | None,
) -> None:
    """Refused exactly when the option's value changed which ini file pytest read: from
    PYTEST_ADDOPTS too, with --rootdir, or a value inside the project with an ini of its own
    beside it; not when -c names the file or a test path outside picks the same one."""
    project = _ini_layout(pytester.path)
    (project / "sub").mkdir()
    shutil.copy(pytester.path / "data" / "x.trec", project / "sub" / "x.trec")
    shutil.copy(pytester.path / "data" / "x.trec", project / "x.trec")
    (project / "sub" / "tox.ini").write_text("[pytest]\n", encoding="utf-8")
    (project / "ci.ini").write_text("[pytest]\nretrieval_golden = golden.json\n", "utf-8")
    (pytester.path / "bt").mkdir()
    (pytester.path / "bt" / "r.json").write_text("{}", encoding="utf-8")
    monkeypatch.chdir(project / args[0][1:] if args[:1] and args[0].startswith("@") else project)
    args = [arg for arg in args if not arg.startswith("@")]
    monkeypatch.setenv("PYTEST_ADDOPTS", addopts)
    result = pytester.runpytest(*args)
    if unread in (None, "-"):  # "-": sub/tox.ini is read either way (no golden set there)
        assert "pytest took" not in result.stderr.str()
        if unread is None:
            assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stderr
    else:
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [f"ERROR: --retrieval-* *: pytest took * so it did not read {unread} (rootdir: *"]
        )


def test_the_ini_check_under_a_workspace_pyproject_without_pytest_settings(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pyproject.toml without pytest settings above everything (a monorepo's): pytest 8.1+
    takes it for the rootdir's config, earlier ones take none; refused on either."""
    project = _ini_layout(pytester.path)
    (pytester.path / "pyproject.toml").write_text('[project]\nname = "w"\n', encoding="utf-8")
    monkeypatch.chdir(project)
    result = pytester.runpytest("--retrieval-run", "../data/x.trec")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --retrieval-run ../data/x.trec: * did not read pytest.ini *"]
    )


def test_the_command_a_note_prints_for_a_run_outside_runs_as_printed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path outside the working directory is written with ``=`` in the fix a note prints:
    after a space, pytest would leave the project's ini file unread (refused)."""
    project = _ini_layout(pytester.path)
    monkeypatch.chdir(project)
    first = pytester.runpytest("--retrieval-run=../data/x.trec")
    assert first.ret == 0
    fix = (
        "pytest --retrieval-golden=golden.json --retrieval-run=../data/x.trec "
        "--retrieval-update-baseline"
    )
    first.stdout.fnmatch_lines([f"*record one on main with: {fix}"])
    recorded = pytester.runpytest(*shlex.split(fix)[1:])
    assert recorded.ret == 0, recorded.stderr.str()
    assert (project / "golden.json.baseline.json").exists()


def test_the_ini_check_names_pytest_addopts_when_the_value_is_there(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _ini_layout(pytester.path)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PYTEST_ADDOPTS", "--retrieval-run ../data/x.trec")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --retrieval-run ../data/x.trec in PYTEST_ADDOPTS: pytest took * write "
            "--retrieval-run=../data/x.trec in PYTEST_ADDOPTS"
        ]
    )


def test_the_command_a_note_prints_for_a_golden_set_beside_its_own_ini_runs_as_printed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A golden set in a folder with an ini file of its own (a monorepo's package): after a
    space pytest would read that one, so every path in a printed command has ``=``."""
    project = _ini_layout(pytester.path)
    (project / "evals").mkdir()
    (project / "golden.json").rename(project / "evals" / "golden.json")
    (project / "evals" / "pytest.ini").write_text("[pytest]\nmarkers = evals\n", "utf-8")
    (project / "pytest.ini").write_text(
        "[pytest]\nretrieval_golden = evals/golden.json\n", encoding="utf-8"
    )
    (project / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture(scope='session')\ndef retriever():\n"
        "    return lambda query, k: ['d1']\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(project)
    first = pytester.runpytest()
    fix = "pytest --retrieval-golden=evals/golden.json --retrieval-update-baseline"
    first.stdout.fnmatch_lines([f"*record one on main with: {fix}"])
    recorded = pytester.runpytest(*shlex.split(fix)[1:])
    assert recorded.ret == 0, recorded.stderr.str()
    assert (project / "evals" / "golden.json.baseline.json").exists()


def test_a_word_after_update_baseline_is_its_mode_and_the_message_says_so(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest("--retrieval-update-baseline", "tests")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*argument --retrieval-update-baseline: 'tests' is not safe or force; a word after "
            "--retrieval-update-baseline is its mode: put test paths before the option, or "
            "write --retrieval-update-baseline=safe"
        ]
    )


def test_a_run_without_a_golden_set_where_the_ini_names_one_says_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _ini_layout(pytester.path)
    (project / "test_a.py").write_text("def test_a(): pass\n", encoding="utf-8")
    monkeypatch.chdir(project)
    result = pytester.runpytest("test_a.py", "--retrieval-run=../data/x.trec")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --retrieval-run: no golden set to evaluate the run on: those of "
            "retrieval_golden in the ini are evaluated when pytest is given a folder that "
            "holds them, and the paths given do not; pass --retrieval-golden PATH"
        ]
    )


def test_the_ini_check_comes_before_a_conftest_that_needs_the_unread_ini(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conftest that imports the project's code through the ini's ``pythonpath`` fails to
    import when pytest left that ini unread: the user is told why (the option's value after
    a space) and the fix, not shown a bare ImportError; and the report names both."""
    project = _ini_layout(pytester.path)
    (project / "pytest.ini").write_text("[pytest]\npythonpath = src\n", encoding="utf-8")
    (project / "src").mkdir()
    (project / "src" / "searchlib.py").write_text("def search(q, k): return []\n", "utf-8")
    (project / "conftest.py").write_text("import searchlib  # via pythonpath\n", "utf-8")
    (pytester.path / "data" / "g.json").write_bytes((project / "golden.json").read_bytes())
    monkeypatch.chdir(project)
    result = pytester.runpytest(
        "--retrieval-golden", "../data/g.json", "--retrieval-report", "report.json"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --retrieval-golden ../data/g.json: pytest took ../data/g.json for a test "
            "path * so it did not read pytest.ini (rootdir: *); write "
            "--retrieval-golden=../data/g.json (conftest.py then failed to import: "
            "ModuleNotFoundError: No module named 'searchlib')"
        ]
    )
    assert "ImportError while loading" not in result.stderr.str()
    report = json.loads((project / "report.json").read_text(encoding="utf-8"))
    assert "did not read pytest.ini" in json.dumps(report)


def test_a_failing_ini_check_leaves_the_conftest_import_error_shown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ini check runs half way through pytest's start-up when a conftest fails to
    import: if it breaks there, the user still sees the import error, not a traceback."""
    import pytest_retrieval.plugin.start as start

    def broken(config: pytest.Config) -> None:
        raise RuntimeError("replay broke")

    monkeypatch.setattr(start, "check_ini_read", broken)
    pytester.makeconftest("import not_a_module_here\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ImportError while loading conftest*"])
    assert "replay broke" not in result.stdout.str() + result.stderr.str()


def test_an_export_named_gz_is_gzip_and_reads_back(pytester: pytest.Pytester) -> None:
    """``--retrieval-export-run run.trec.gz`` writes gzip (run files are read from gzip, so
    trec_eval users name them so): zcat and --retrieval-run read it; with two retrievers
    their ids go before ``.trec.gz``."""
    import gzip

    project(pytester)
    exported = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-export-run", "run.trec.gz"
    )
    assert exported.ret == 0
    exported.stdout.fnmatch_lines(["run exported: run.trec.gz (*"])
    plain = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-export-run", "run.trec"
    )
    assert plain.ret == 0
    packed = (pytester.path / "run.trec.gz").read_bytes()
    text = (pytester.path / "run.trec").read_text(encoding="utf-8")
    assert gzip.decompress(packed).decode("utf-8") == text
    again = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-export-run", "again.trec.gz"
    )
    assert again.ret == 0  # no time stamp nor file name inside: the same bytes every run
    assert (pytester.path / "again.trec.gz").read_bytes() == packed
    shutil.copy(pytester.path / "run.trec", pytester.path / "dense.trec")
    read = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-run", "run.trec.gz",
        "--retrieval-run", "dense.trec", "--retrieval-export-run", "ab.trec.gz",
    )  # fmt: skip
    assert read.ret == 0
    assert sorted(p.name for p in pytester.path.glob("ab.*")) == [
        "ab.dense.trec.gz",
        "ab.run.trec.gz",
    ]
    for name in ("ab.dense.trec.gz", "ab.run.trec.gz"):  # what each run file held
        assert gzip.decompress((pytester.path / name).read_bytes()).decode() == text.replace(
            " retriever\n", f" {name.split('.')[1]}\n"
        )


@pytest.mark.parametrize("name", ["out.json", "out.jsonl", "out.ndjson", "out.JSON.gz"])
def test_an_export_named_as_json_is_a_usage_error(pytester: pytest.Pytester, name: str) -> None:
    """A TREC run written under a JSON name is refused when read back (--retrieval-run,
    eval): refused before the run, nothing written."""
    project(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-export-run", name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    stem = name.split(".")[0]
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --retrieval-export-run {name}: the export is a TREC run, and a file named "
            f"so is read as JSON (--retrieval-run, pytest-retrieval eval, ranx); name it "
            f"{stem}.trec (or {stem}.trec.gz)"
        ]
    )
    assert not list(pytester.path.glob("out*"))


def test_an_ini_export_named_as_json_names_the_ini_key(pytester: pytest.Pytester) -> None:
    project(pytester)
    pytester.makeini("[pytest]\nretrieval_export_run = out.json\n")
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: ini retrieval_export_run = out.json: the export is a TREC*"]
    )


def test_an_export_named_as_another_output_is_not_written(pytester: pytest.Pytester) -> None:
    """Several evaluations' exports are named only at the end (run.trec -> run.bm25.trec):
    one that is another output's path is not exported (the session fails saying so), not
    written and then overwritten by that output while the terminal said "run exported"."""
    project(pytester)
    assert (
        pytester.runpytest(
            "--retrieval-golden", "golden.json", "--retrieval-export-run", "bm25.trec"
        ).ret
        == 0
    )
    shutil.copy(pytester.path / "bm25.trec", pytester.path / "dense.trec")
    runs = ["--retrieval-golden", "golden.json", "--retrieval-run", "bm25.trec"]
    runs += ["--retrieval-run", "dense.trec", "--retrieval-export-run", "out/run.trec"]
    for option, path in [
        ("--retrieval-report", "out/run.bm25.trec"),
        ("--junitxml", "out/run.dense.trec"),
    ]:
        result = pytester.runpytest(*runs, option, path)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        what = "bm25" if "bm25" in path else "dense"
        result.stdout.fnmatch_lines(
            [
                f"output: run of synth [[]{what}[]] NOT exported to {path}: the {option} "
                "output is written there; give --retrieval-export-run another name",
                "retrieval verdict: FAILED*",
            ]
        )
        assert not any(f"run exported: {path}" in line for line in result.stdout.lines)
        written = (pytester.path / path).read_text(encoding="utf-8")
        assert written.startswith("{" if option == "--retrieval-report" else "<?xml")
        other = "out/run.dense.trec" if what == "bm25" else "out/run.bm25.trec"
        assert (pytester.path / other).read_text(encoding="utf-8").startswith("q")


def test_exports_of_two_golden_sets_of_one_name_say_which_file(pytester: pytest.Pytester) -> None:
    project(pytester)
    (pytester.path / "g2").mkdir()
    shutil.copy(pytester.path / "golden.json", pytester.path / "g2" / "golden.json")
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-golden", "g2/golden.json",
        "--retrieval-export-run", "two.trec",
    )  # fmt: skip
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "run exported: two.retriever.trec (synth [[]retriever[]] of golden.json: *",
            "run exported: two.retriever-2.trec (synth [[]retriever[]] of g2/golden.json: *",
        ]
    )
