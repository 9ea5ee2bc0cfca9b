"""`pytest-retrieval pool` and the review file it writes (review_file.py)."""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import PROC_FD, held_open, opened_since
from judge_server import JudgeServer, serve

from pytest_retrieval.builder.review_file import (
    Decision,
    Proposal,
    ReviewFileError,
    read_review,
    record_decision,
    write_review,
)
from pytest_retrieval.cli import main

HEADER: dict[str, Any] = {
    "golden": "golden.json",
    "golden_fingerprint": "0123456789abcdef",
    "k": 10,
    "reports": ["run-a.json"],
    "judge": {"model": "m", "prompt_version": "v1", "scale": "0-3"},
    "created": "2024-01-01T00:00:00Z",
}


def proposal(doc: str = "d1", kind: str = "add", **changes: Any) -> Proposal:
    fields: dict[str, Any] = {
        "query_id": "q1",
        "query": "apple pie",
        "doc_id": doc,
        "text": "an apple pie \u2028 caf\u00e9 \ud800",
        "kind": kind,
        "current": None if kind == "add" else 2,
        "grade": 2 if kind == "add" else 0,
        "reason": "mentions apple pie",
        "confidence": 0.9,
        "rank": 3,
        "sources": ("run-a.json:bm25",),
        "decision": None,
    }
    fields.update(changes)
    return Proposal(**fields)


# --------------------------------------------------------------------------------------------
# review file


def test_review_file_round_trip_is_byte_stable(tmp_path: Path) -> None:
    path = tmp_path / "review.jsonl"
    decided = Decision(action="grade", grade=1, by="ann", at="2024-01-02T00:00:00Z")
    proposals = [proposal("d1"), proposal("d2", decision=decided), proposal("d3", kind="remove")]
    write_review(path, HEADER, proposals)
    first = path.read_bytes()
    review = read_review(path)
    assert review.proposals == tuple(proposals)
    assert review.header["pytest_retrieval_review"] == 1
    assert review.header["golden"] == "golden.json"
    write_review(path, review.header, review.proposals)
    assert path.read_bytes() == first
    lines = first.decode("ascii").split("\n")
    assert len(lines) == 5 and lines[-1] == ""  # header, 3 proposals, final newline
    assert next(iter(json.loads(lines[0]))) == "pytest_retrieval_review"
    assert review.proposals[0].text == "an apple pie \u2028 caf\u00e9 \ud800"


def test_final_grade_per_action() -> None:
    at = "2024-01-02T00:00:00Z"
    assert proposal().final_grade is None
    assert proposal(decision=Decision("accept", None, "a", at)).final_grade == 2
    assert proposal(decision=Decision("grade", 0, "a", at)).final_grade == 0
    assert proposal(decision=Decision("reject", None, "a", at)).final_grade is None
    assert proposal(decision=Decision("skip", None, "a", at)).final_grade is None
    remove = proposal(kind="remove", decision=Decision("accept", None, "a", at))
    assert remove.final_grade == 0
    assert remove.key == ("q1", "d1", "remove")


@pytest.mark.parametrize(
    ("action", "grade", "message"),
    [
        ("maybe", None, "action 'maybe' is not one of accept, grade, reject, skip"),
        ("grade", None, "action 'grade' needs a grade 0-3, got None"),
        ("grade", 4, "action 'grade' needs a grade 0-3, got 4"),
        ("grade", True, "action 'grade' needs a grade 0-3, got True"),
        ("accept", 2, "action 'accept' takes no grade (got 2)"),
    ],
)
def test_bad_decision_is_refused(action: str, grade: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Decision(action=action, grade=grade, by="a", at="t")


def test_record_decision_sets_and_clears(tmp_path: Path) -> None:
    path = tmp_path / "review.jsonl"
    write_review(path, HEADER, [proposal("d1"), proposal("d2")])
    decision = Decision("accept", None, "ann", "2024-01-02T00:00:00Z")
    review = record_decision(path, ("q1", "d2", "add"), decision)
    assert [p.decision for p in review.proposals] == [None, decision]
    assert read_review(path) == review
    cleared = record_decision(path, ("q1", "d2", "add"), None)
    assert [p.decision for p in cleared.proposals] == [None, None]
    with pytest.raises(ReviewFileError, match=r"no proposal \['q1', 'd9', 'add'\]"):
        record_decision(path, ("q1", "d9", "add"), decision)


def test_concurrent_decisions_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "review.jsonl"
    docs = [f"d{i}" for i in range(12)]
    write_review(path, HEADER, [proposal(d) for d in docs])

    def decide(doc: str) -> None:
        record_decision(path, ("q1", doc, "add"), Decision("grade", 3, doc, "t"))

    threads = [threading.Thread(target=decide, args=(d,)) for d in docs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [p.decision.by if p.decision else None for p in read_review(path).proposals] == docs


def _lines(*values: Any) -> str:
    return "".join((v if isinstance(v, str) else json.dumps(v)) + "\n" for v in values)


GOOD = json.loads(json.dumps({"pytest_retrieval_review": 1, **HEADER}))
ROW = {
    "query_id": "q1",
    "query": "x",
    "doc_id": "d1",
    "text": "t",
    "kind": "add",
    "current": None,
    "grade": 1,
    "reason": "r",
    "confidence": None,
    "rank": 1,
    "sources": ["a.json:bm25"],
    "decision": None,
}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty review file"),
        (_lines({"golden": "g.json"}), ":1: not a review file"),
        (_lines({**GOOD, "pytest_retrieval_review": 2}), ":1: review file version 2"),
        (_lines(GOOD, "{nope"), ":2: not JSON"),
        (_lines(GOOD, {**ROW, "kind": "drop"}), ":2: 'kind' must be 'add' or 'remove'"),
        (_lines(GOOD, {**ROW, "grade": 5}), ":2: 'grade' \\(the judge's\\) must be 0-3"),
        (_lines(GOOD, {**ROW, "current": 1}), ":2: an 'add' proposal has 'current': null"),
        (_lines(GOOD, {**ROW, "kind": "remove"}), ":2: a 'remove' proposal has the golden grade"),
        (_lines(GOOD, {**ROW, "confidence": 1.5}), ":2: 'confidence' must be null or a number"),
        (_lines(GOOD, {**ROW, "rank": 0}), ":2: 'rank' must be a 1-based rank"),
        (
            _lines(GOOD, {k: v for k, v in ROW.items() if k != "text"}),
            ":2: proposal without 'text'",
        ),
        (
            _lines(GOOD, {**ROW, "decision": {"action": "grade", "grade": 7, "by": "", "at": ""}}),
            ":2: decision: action 'grade' needs a grade 0-3, got 7",
        ),
        (
            _lines(GOOD, ROW, ROW),
            ":3: proposal \\['q1', 'd1', 'add'\\] is listed again .first on line 2",
        ),
    ],
)
def test_bad_review_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "review.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ReviewFileError, match=message) as caught:
        read_review(path)
    assert str(caught.value).startswith(str(path))
    # every message ends with the fix
    assert str(caught.value).endswith(
        (
            "make the file again with 'pytest-retrieval pool'",
            "make one with 'pytest-retrieval pool'",
            "remove one of the two lines",
        )
    )


def test_a_review_file_with_a_bom_is_read(tmp_path: Path) -> None:
    path = tmp_path / "review.jsonl"
    write_review(path, HEADER, [proposal("d1"), proposal("d2")])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    review = read_review(path)
    assert review.header["golden"] == "golden.json"
    assert [p.doc_id for p in review.proposals] == ["d1", "d2"]
    assert review.lines == (2, 3)


def test_missing_review_file(tmp_path: Path) -> None:
    with pytest.raises(ReviewFileError, match="no such review file; make one with"):
        read_review(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------------------------
# pool

CORPUS = {
    "d1": "apple pie with butter crust",
    "d2": "apple orchard in autumn",
    "d3": "bread machine manual",
    "d4": "cherry juice from fresh cherries",
    "d5": "cherry pie and apple pie bakery",
    "d6": "garden hose",
}
GOLDEN_SET: dict[str, Any] = {
    "name": "fruit",
    "corpus": "corpus.json",
    "queries": [
        {"id": "q1", "query": "apple pie", "relevant": {"d1": 3, "d3": 1}},
        {"id": "q2", "query": "cherry juice", "relevant": {"d4": 2}, "criteria": "drinks only"},
    ],
}


def report(retriever: str, ranked: dict[str, list[str]], golden: str = "fruit") -> dict[str, Any]:
    """A --retrieval-report with one evaluation (the keys pool reads)."""
    text = {q["id"]: q["query"] for q in GOLDEN_SET["queries"]}
    queries = [{"id": q, "query": text[q], "returned": docs} for q, docs in ranked.items()]
    return {
        "evaluations": [
            {"golden": {"name": golden}, "retriever": retriever, "k": 10, "queries": queries}
        ]
    }


@pytest.fixture
def project(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[JudgeServer]:
    """Golden set, corpus and two reports in a fresh folder; the test server as endpoint."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    write_json(tmp_path / "golden.json", GOLDEN_SET)
    write_json(tmp_path / "corpus.json", CORPUS)
    write_json(tmp_path / "a.json", report("bm25", {"q1": ["d1", "d2", "d5"], "q2": ["d4", "d6"]}))
    write_json(tmp_path / "b.json", report("dense", {"q1": ["d5", "d3", "d6"], "q2": ["d5"]}))
    with serve() as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield running


def write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


POOL = ["pool", "golden.json", "a.json", "b.json", "-o", "review.jsonl", "--cache", "jc"]


def rows(review_path: str = "review.jsonl") -> list[tuple[str, str, str, int, int, list[str]]]:
    return [
        (p.query_id, p.doc_id, p.kind, p.grade, p.rank, list(p.sources))
        for p in read_review(Path(review_path)).proposals
    ]


def test_pool_judges_the_unjudged_union_of_the_reports(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(POOL) == 0
    # q1: d2 (a #2), d5 (a #3, b #1), d6 (b #3); d1 and d3 are judged; q2: d6, d5
    assert rows() == [
        ("q1", "d5", "add", 3, 1, ["a.json:bm25", "b.json:dense"]),
        ("q1", "d2", "add", 2, 2, ["a.json:bm25"]),
        ("q1", "d6", "add", 0, 3, ["b.json:dense"]),
        ("q2", "d5", "add", 2, 1, ["b.json:dense"]),
        ("q2", "d6", "add", 0, 2, ["a.json:bm25"]),
    ]
    review = read_review(Path("review.jsonl"))
    assert review.proposals[0].text == CORPUS["d5"]
    assert review.proposals[0].reason == "100% of the query terms"
    assert review.proposals[0].confidence == 0.9
    assert review.header["golden"] == "golden.json"
    assert review.header["reports"] == ["a.json", "b.json"]
    assert review.header["judge"]["scale"] == "0-3"
    assert len(project.requests) == 5
    # the query's criteria reach the judge
    assert sum("drinks only" in r.user for r in project.requests) == 2
    out = capsys.readouterr().out
    assert "5 proposed additions (3 graded relevant, 2 graded 0), 0 proposed removals" in out


def test_a_warm_rerun_asks_nothing_and_writes_the_same_bytes(project: JudgeServer) -> None:
    assert main(POOL) == 0
    first = Path("review.jsonl").read_bytes()
    project.requests.clear()
    assert main(POOL) == 0
    assert project.requests == []
    assert Path("review.jsonl").read_bytes() == first


def test_pool_resumes_keeping_decisions(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(POOL) == 0
    at = "2024-01-02T00:00:00Z"
    record_decision(Path("review.jsonl"), ("q1", "d5", "add"), Decision("grade", 1, "ann", at))
    record_decision(Path("review.jsonl"), ("q2", "d6", "add"), Decision("accept", None, "ann", at))
    # the golden set labels q2/d6 by hand since: that decision no longer applies
    golden = json.loads(json.dumps(GOLDEN_SET))
    golden["queries"][1]["relevant"]["d6"] = 0
    write_json(Path("golden.json"), golden)
    project.requests.clear()
    capsys.readouterr()
    assert main(POOL) == 0
    review = read_review(Path("review.jsonl"))
    decided = {p.key: p.decision for p in review.proposals if p.decision}
    assert decided == {("q1", "d5", "add"): Decision("grade", 1, "ann", at)}
    assert [p.key for p in review.proposals] == [
        ("q1", "d5", "add"),
        ("q1", "d2", "add"),
        ("q1", "d6", "add"),
        ("q2", "d5", "add"),
    ]
    assert project.requests == []  # the undecided ones come from the cache
    out = capsys.readouterr().out
    assert "1 earlier decisions dropped: the golden set's labels of those changed since" in out
    assert "3 to review, 1 decisions kept" in out


def test_removals_are_proposed_only_when_the_judge_is_sure(project: JudgeServer) -> None:
    project.override = {"grade": 0}
    assert main([*POOL, "--propose-removals"]) == 0
    removals = [p for p in read_review(Path("review.jsonl")).proposals if p.kind == "remove"]
    # pooled golden-relevant docs: q1 d1 (3), d3 (1); q2 d4 (2)
    assert [(p.query_id, p.doc_id, p.current, p.grade) for p in removals] == [
        ("q1", "d1", 3, 0),
        ("q1", "d3", 1, 0),
        ("q2", "d4", 2, 0),
    ]
    project.override = {"grade": 0, "confidence": 0.5}
    assert main([*POOL, "--propose-removals", "--no-cache"]) == 0
    kinds = {p.kind for p in read_review(Path("review.jsonl")).proposals}
    assert kinds == {"add"}


def test_below_min_coverage_pool_fails_and_writes_nothing(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*POOL, "--max-calls", "2"]) == 1
    err = capsys.readouterr().err
    assert "the judge graded 2 of 5 pairs (40%, below --min-coverage 95%)" in err
    assert ": call budget exhausted (--max-calls 2) (" in err  # this command's option names
    assert "--retrieval-judge" not in err
    assert "nothing written to review.jsonl. The 2 answers are cached: run pool again (a " in err
    assert not Path("review.jsonl").exists()
    project.requests.clear()
    assert main(POOL) == 0
    assert len(project.requests) == 3  # only the rest
    assert len(read_review(Path("review.jsonl")).proposals) == 5


def test_cache_only_below_min_coverage_says_to_drop_it(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*POOL, "--cache-only"]) == 1
    err = capsys.readouterr().err
    assert "the judge graded 0 of 5 pairs (0%, below --min-coverage 95%): not in the cache " in err
    assert "(--cache-only) (5)" in err and "--retrieval-judge" not in err
    # nothing graded, so nothing cached to mention: the fix alone
    assert "nothing written to review.jsonl. Run pool again without --cache-only to ask the " in (
        err
    )
    assert "answers are cached" not in err
    assert project.requests == [] and not Path("review.jsonl").exists()


def test_above_min_coverage_the_ungraded_are_left_out(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*POOL, "--max-calls", "4", "--min-coverage", "0.8"]) == 0
    assert len(read_review(Path("review.jsonl")).proposals) == 4
    assert "1 pairs the judge did not grade were left out" in capsys.readouterr().out
    assert main(POOL) == 0
    assert len(read_review(Path("review.jsonl")).proposals) == 5


def test_texts_from_the_report_when_the_corpus_lacks_them(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    data = report("bm25", {"q1": ["d7", "d8"]})
    data["evaluations"][0]["queries"][0]["texts"] = {"d7": "apple pie, cut at 200"}
    write_json(Path("c.json"), data)
    # one pair of two has no text: 50% coverage at most
    command = ["pool", "golden.json", "c.json", "-o", "review.jsonl", "--cache", "jc"]
    assert main([*command, "--min-coverage", "0.5"]) == 0
    assert [(p.doc_id, p.text) for p in read_review(Path("review.jsonl")).proposals] == [
        ("d7", "apple pie, cut at 200")
    ]
    out = capsys.readouterr().out
    # the golden set names its corpus: the missing texts go there
    corpus = Path("corpus.json").resolve()
    assert f"1 documents judged on the report's cut text: add their full text to {corpus}\n" in out
    assert f"1 hits skipped, no text for them (q1/d8): add their documents to {corpus}\n" in out
    write_json(Path("part.json"), {"d1": "apple pie"})
    assert main([*command, "--min-coverage", "0.5", "--corpus", "part.json"]) == 0
    out = capsys.readouterr().out
    assert "cut text: add their full text to part.json\n" in out
    assert "no text for them (q1/d8): add their documents to part.json\n" in out


def test_reports_of_another_golden_set(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    write_json(Path("other.json"), report("bm25", {"q1": ["d2"]}, golden="other"))
    assert main(["pool", "golden.json", "other.json", "-o", "r.jsonl", "--cache", "jc"]) == 1
    err = capsys.readouterr().err
    assert "other.json: evaluation 1 (bm25) is of golden set 'other', not 'fruit'" in err
    assert "no evaluation of golden set 'fruit' in other.json" in err
    changed = report("bm25", {"q1": ["d2"]})
    changed["evaluations"][0]["queries"][0]["query"] = "apple tart"
    write_json(Path("changed.json"), changed)
    assert main(["pool", "golden.json", "changed.json", "-o", "r.jsonl", "--cache", "jc"]) == 1
    assert "changed.json: query 'q1' reads 'apple tart' in the report but 'apple pie'" in (
        capsys.readouterr().err
    )


def test_a_review_file_of_another_golden_set_is_not_resumed(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    write_review(Path("review.jsonl"), HEADER, [proposal("d1", query_id="q9")])
    before = Path("review.jsonl").read_bytes()
    assert main(POOL) == 1
    err = capsys.readouterr().err
    assert "review.jsonl was made for another golden set than golden.json" in err
    assert "query 'q9' is not in the golden set" in err
    assert Path("review.jsonl").read_bytes() == before


def test_batch_submit_collect_then_pool_from_the_cache(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*POOL, "--batch-submit", "state.json"]) == 0
    assert "submitted 5 pairs (0 already cached) in 1 batch(es): batch-1" in capsys.readouterr().out
    assert not Path("review.jsonl").exists()
    assert main(["judge-batch", "collect", "state.json"]) == 0
    assert main(POOL) == 0
    assert project.requests == []
    assert len(read_review(Path("review.jsonl")).proposals) == 5
    assert main([*POOL, "--batch-submit", "state2.json"]) == 0
    assert "nothing to submit: all 5 pairs are in the cache" in capsys.readouterr().out


def test_hits_without_text_count_against_the_coverage(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    write_json(Path("golden.json"), {k: v for k, v in GOLDEN_SET.items() if k != "corpus"})
    command = ["pool", "golden.json", "a.json", "-o", "review.jsonl", "--cache", "jc"]
    assert main(command) == 1
    assert (
        "3 of the 3 pairs to judge have no text (q1/d2, q1/d5, q2/d6), so at most 0% could be "
        "graded, below --min-coverage 95%; nothing judged or written to review.jsonl. Pass "
        "--corpus with their documents (or a lower --min-coverage to skip them)"
    ) in capsys.readouterr().err
    assert project.requests == [] and not Path("review.jsonl").exists()
    write_json(Path("part.json"), {"d1": "apple pie"})
    assert main([*command, "--corpus", "part.json"]) == 1
    assert "nothing judged or written to review.jsonl. Add their documents to part.json (or " in (
        capsys.readouterr().err
    )
    assert main([*command, "--corpus", "corpus.json"]) == 0
    assert len(read_review(Path("review.jsonl")).proposals) == 3


@pytest.mark.skipif(not os.path.isdir(PROC_FD), reason="lists /proc/self/fd")
def test_pool_closes_the_judge_cache(project: JudgeServer) -> None:
    """Its connections stayed open till the process ended (a ResourceWarning, "unclosed
    database", on Python 3.13)."""
    assert main(POOL) == 0  # the process's own event loop for the judge: kept, by design
    before = held_open()
    assert main(POOL) == 0
    assert opened_since(before) == []


def test_a_corrupt_cache_under_warnings_as_errors_is_one_line(
    project: JudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """python -W error: the cache's warning raised as a traceback out of pool."""
    Path("jc").mkdir()
    Path("jc", "judge.sqlite").write_bytes(bytes(range(256)) * 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(POOL) == 1
    err = capsys.readouterr().err
    assert err.startswith("pytest-retrieval pool: pytest-retrieval: the cache jc/judge.sqlite")
    assert "(a warning, which the warning filters in force make an error" in err
