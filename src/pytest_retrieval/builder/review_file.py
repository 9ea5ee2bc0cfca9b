"""The review file: LLM-judge proposals for a golden set and the reviewer's decisions on them.

JSON Lines: a header object, then one proposal per line. ``pool`` writes it, ``review`` (a
local page) and ``apply`` read it, and both the page and the command line record decisions
through :func:`record_decision` (atomic and locked, so neither loses the other's writes).

Written with ``ensure_ascii`` so that every line is ASCII: no character of a document's text
(a lone surrogate, U+2028) can break the one-object-per-line rule or the encoding, and the
same proposals always give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._internal.json import JsonProblem, loads
from ..errors import InputError

REVIEW_VERSION = 1
KINDS = ("add", "remove")
ACTIONS = ("accept", "grade", "reject", "skip")
JUDGE_GRADES = range(0, 4)  # the 0-3 scale
HEADER_KEY = "pytest_retrieval_review"
#: the fix for a malformed line: a review file is written by ``pool``, not by hand
REMAKE = "fix that line, or make the file again with 'pytest-retrieval pool'"


class ReviewFileError(InputError):
    """A review file that cannot be read or updated; the message names file, line and fix."""


@dataclass(frozen=True)
class Decision:
    """What the reviewer decided: ``accept`` the judge's grade, ``grade`` (their own 0-3),
    ``reject`` (record nothing) or ``skip`` (undecided, revisit)."""

    action: str
    grade: int | None
    by: str
    at: str

    def __post_init__(self) -> None:
        problem = decision_problem(self.action, self.grade)
        if problem:
            raise ValueError(problem)


def decision_problem(action: Any, grade: Any) -> str | None:
    """Why ``(action, grade)`` is not a valid decision, or None (shared with the page's API)."""
    if action not in ACTIONS:
        return f"action {action!r} is not one of {', '.join(ACTIONS)}"
    if action == "grade":
        if not _is_int(grade) or grade not in JUDGE_GRADES:
            return f"action 'grade' needs a grade 0-3, got {grade!r}"
    elif grade is not None:
        return f"action {action!r} takes no grade (got {grade!r}); use action 'grade' to set one"
    return None


@dataclass(frozen=True)
class Proposal:
    """One (query, document) the judge graded: an unjudged hit to ``add`` or a golden label
    the judge disputes (``remove``, proposing grade 0)."""

    query_id: str
    query: str
    doc_id: str
    text: str
    kind: str
    current: int | None
    grade: int
    reason: str
    confidence: float | None
    rank: int
    sources: tuple[str, ...]
    decision: Decision | None

    @property
    def key(self) -> tuple[str, str, str]:
        """``(query_id, doc_id, kind)``: unique in a review file."""
        return (self.query_id, self.doc_id, self.kind)

    @property
    def final_grade(self) -> int | None:
        """The grade the decision records (None: no decision, ``reject`` or ``skip``)."""
        if self.decision is None:
            return None
        if self.decision.action == "accept":
            return self.grade
        if self.decision.action == "grade":
            return self.decision.grade
        return None


@dataclass(frozen=True)
class Review:
    """A read review file; ``lines`` holds each proposal's line number, for messages that
    point at a decision."""

    path: Path
    header: dict[str, Any]
    proposals: tuple[Proposal, ...]
    lines: tuple[int, ...]


# --------------------------------------------------------------------------------------------
# reading


def read_review(path: Path) -> Review:
    """Read and check a review file; raises :class:`ReviewFileError` (file, line, fix)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ReviewFileError(
            f"{path}: no such review file; make one with 'pytest-retrieval pool'"
        ) from None
    except OSError as exc:
        raise ReviewFileError(
            f"{path}: cannot read the review file ({exc.strerror}); check the path and its "
            "permissions"
        ) from None
    try:
        text = data.decode("utf-8-sig")  # a BOM (from a Windows editor) is skipped
    except UnicodeDecodeError as exc:
        bad_line = data[: exc.start].count(b"\n") + 1
        raise ReviewFileError(
            f"{path}:{bad_line}: not UTF-8 text (a review file is JSON Lines written by "
            f"'pytest-retrieval pool'); {REMAKE}"
        ) from None
    header: dict[str, Any] | None = None
    proposals: list[Proposal] = []
    lines: list[int] = []
    seen: dict[tuple[str, str, str], int] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        value = _json_line(path, number, line)
        if header is None:
            header = _header(path, number, value)
            continue
        proposal = _proposal(path, number, value)
        if proposal.key in seen:
            raise ReviewFileError(
                f"{path}:{number}: proposal {list(proposal.key)} is listed again (first on "
                f"line {seen[proposal.key]}); remove one of the two lines"
            )
        seen[proposal.key] = number
        proposals.append(proposal)
        lines.append(number)
    if header is None:
        raise ReviewFileError(f"{path}: empty review file; make one with 'pytest-retrieval pool'")
    return Review(path=path, header=header, proposals=tuple(proposals), lines=tuple(lines))


def _json_line(path: Path, number: int, line: str) -> Any:
    try:
        return loads(line)
    except JsonProblem as exc:
        if not exc.problem.startswith("invalid JSON: "):  # too deep, a key twice
            raise ReviewFileError(f"{path}:{number}: {exc}; {REMAKE}") from None
        problem = exc.problem.removeprefix("invalid JSON: ")
        column = exc.where.rpartition(", ")[2]
        raise ReviewFileError(
            f"{path}:{number}: not JSON ({problem} at {column}); each line of a "
            f"review file is one JSON object: {REMAKE}"
        ) from None


def _header(path: Path, number: int, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or HEADER_KEY not in value:
        raise ReviewFileError(
            f"{path}:{number}: not a review file (its first line has no "
            f"'{HEADER_KEY}' key); make one with 'pytest-retrieval pool'"
        )
    version = value[HEADER_KEY]
    if not _is_int(version) or version != REVIEW_VERSION:
        raise ReviewFileError(
            f"{path}:{number}: review file version {version!r}; this pytest-retrieval reads "
            f"version {REVIEW_VERSION}; upgrade pytest-retrieval, or make the file again with "
            "'pytest-retrieval pool'"
        )
    if not isinstance(value.get("golden"), str):
        raise ReviewFileError(
            f"{path}:{number}: the header has no 'golden' path (a string); {REMAKE}"
        )
    return value


_FIELDS = (
    "query_id",
    "query",
    "doc_id",
    "text",
    "kind",
    "current",
    "grade",
    "reason",
    "confidence",
    "rank",
    "sources",
    "decision",
)


def _proposal(path: Path, number: int, value: Any) -> Proposal:
    where = f"{path}:{number}"
    if not isinstance(value, dict):
        raise ReviewFileError(f"{where}: a proposal must be a JSON object; {REMAKE}")
    missing = [name for name in _FIELDS if name not in value]
    if missing:
        raise ReviewFileError(
            f"{where}: proposal without {', '.join(map(repr, missing))}; {REMAKE}"
        )
    problem = _proposal_problem(value)
    if problem:
        raise ReviewFileError(f"{where}: {problem}; {REMAKE}")
    decision = value["decision"]
    return Proposal(
        query_id=value["query_id"],
        query=value["query"],
        doc_id=value["doc_id"],
        text=value["text"],
        kind=value["kind"],
        current=value["current"],
        grade=value["grade"],
        reason=value["reason"],
        confidence=None if value["confidence"] is None else float(value["confidence"]),
        rank=value["rank"],
        sources=tuple(value["sources"]),
        decision=None
        if decision is None
        else Decision(
            action=decision["action"], grade=decision["grade"], by=decision["by"], at=decision["at"]
        ),
    )


def _proposal_problem(value: dict[str, Any]) -> str | None:
    """The first thing wrong with a proposal object (the caller adds the fix), or None."""
    for name in ("query_id", "query", "doc_id", "text", "reason"):
        if not isinstance(value[name], str):
            return f"'{name}' must be a string, got {value[name]!r}"
    kind, current, grade = value["kind"], value["current"], value["grade"]
    if kind not in KINDS:
        return f"'kind' must be 'add' or 'remove', got {kind!r}"
    if not _is_int(grade) or grade not in JUDGE_GRADES:
        return f"'grade' (the judge's) must be 0-3, got {grade!r}"
    if kind == "add" and current is not None:
        return f"an 'add' proposal has 'current': null (the doc is unjudged), got {current!r}"
    if kind == "remove" and not (_is_int(current) and current >= 1):
        return f"a 'remove' proposal has the golden grade (>= 1) in 'current', got {current!r}"
    confidence = value["confidence"]
    if confidence is not None and not (
        isinstance(confidence, (int, float))
        and not isinstance(confidence, bool)
        and 0 <= confidence <= 1
    ):
        return f"'confidence' must be null or a number 0-1, got {confidence!r}"
    if not (_is_int(value["rank"]) and value["rank"] >= 1):
        return f"'rank' must be a 1-based rank, got {value['rank']!r}"
    sources = value["sources"]
    if not (isinstance(sources, list) and all(isinstance(s, str) for s in sources)):
        return f"'sources' must be a list of strings, got {sources!r}"
    decision = value["decision"]
    if decision is None:
        return None
    if not isinstance(decision, dict) or set(decision) != {"action", "grade", "by", "at"}:
        return (
            "'decision' must be null or an object with exactly 'action', 'grade', 'by', 'at', "
            f"got {decision!r}"
        )
    problem = decision_problem(decision["action"], decision["grade"])
    if problem:
        return f"decision: {problem}"
    if not (isinstance(decision["by"], str) and isinstance(decision["at"], str)):
        return "decision: 'by' and 'at' must be strings"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------------
# writing


def proposal_json(proposal: Proposal) -> dict[str, Any]:
    """The proposal as its JSON object, in the file's key order."""
    decision = proposal.decision
    return {
        "query_id": proposal.query_id,
        "query": proposal.query,
        "doc_id": proposal.doc_id,
        "text": proposal.text,
        "kind": proposal.kind,
        "current": proposal.current,
        "grade": proposal.grade,
        "reason": proposal.reason,
        "confidence": proposal.confidence,
        "rank": proposal.rank,
        "sources": list(proposal.sources),
        "decision": None
        if decision is None
        else {
            "action": decision.action,
            "grade": decision.grade,
            "by": decision.by,
            "at": decision.at,
        },
    }


def write_review(path: Path, header: Mapping[str, Any], proposals: Sequence[Proposal]) -> None:
    """Write the file atomically; the same header and proposals always give the same bytes.

    Refuses two proposals with the same key (a file that :func:`read_review` would reject).
    """
    from .._internal.io import atomic_write

    keys: set[tuple[str, str, str]] = set()
    for proposal in proposals:
        if proposal.key in keys:
            raise ReviewFileError(
                f"{path}: proposal {list(proposal.key)} given twice; give each key once"
            )
        keys.add(proposal.key)
    head = {HEADER_KEY: REVIEW_VERSION, **{k: v for k, v in header.items() if k != HEADER_KEY}}
    lines = [_line(head)]
    lines.extend(_line(proposal_json(p)) for p in proposals)
    atomic_write(path, lines)


def _line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False) + "\n"


def record_decision(path: Path, key: tuple[str, str, str], decision: Decision | None) -> Review:
    """Set (or with None, clear) one proposal's decision and write the file back.

    Read, change and write happen under one file lock, so the review page and a command line
    writing at the same time never lose each other's decisions. Returns the new file.
    """
    from dataclasses import replace

    from .._internal.io import locked

    with locked(path):
        review = read_review(path)
        proposals = list(review.proposals)
        for index, proposal in enumerate(proposals):
            if proposal.key == tuple(key):
                proposals[index] = replace(proposal, decision=decision)
                break
        else:
            raise ReviewFileError(
                f"{path}: no proposal {list(key)} (query_id, doc_id, kind); the file may have "
                "been made again by 'pool' since the page was loaded: reload it"
            )
        write_review(path, review.header, proposals)
        # write_review puts the header on line 1, then one proposal per line
        lines = tuple(range(2, len(proposals) + 2))
        return Review(path=path, header=review.header, proposals=tuple(proposals), lines=lines)
