"""`pytest-retrieval pool` and the review file it writes (review_file.py)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_retrieval.review_file import (
    Decision,
    Proposal,
    ReviewFileError,
    read_review,
    record_decision,
    write_review,
)

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


def test_missing_review_file(tmp_path: Path) -> None:
    with pytest.raises(ReviewFileError, match="no such review file; make one with"):
        read_review(tmp_path / "nope.jsonl")
