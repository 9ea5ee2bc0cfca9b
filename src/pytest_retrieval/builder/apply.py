"""``pytest-retrieval apply``: merge a review file's decisions into the golden set.

What it promises (and the tests hold):

- Decided proposals become graded judgments (grade 0 kept: judged not relevant is
  information): ``accept`` records the judge's grade, ``grade`` the reviewer's; ``reject``
  and ``skip`` record nothing. ``--accept-judge`` also takes the judge's grade for undecided
  ``add`` proposals (no decision at all; ``skip`` means a person wants to look again), at or
  above ``--min-confidence`` when given; never a removal.
- A label already in the golden set is never rewritten, except by a person's ``accept`` or
  ``grade`` of a ``remove`` proposal whose label is still the one the proposal saw (its old
  grade is kept as ``previous``). A document labelled by hand since ``pool`` keeps its label.
- A golden query must keep a relevant document: a person's decision that would leave its
  query with none (the removal of its last relevant labels, or grade 0 for a query that has
  no relevant label) is refused with its review file line (and the lines of the removals
  that together do it) and the fix; the rest is applied, and the exit status is 1 so a
  script notices. The judge's grade 0 for every pooled document of a query that has no
  relevant label (``--accept-judge``) is no one's decision: one line per query says it is
  left open, and the exit status stays 0.
- Provenance per label in the query's ``metadata["labels"][doc_id]``: ``grade``, ``by``
  (``review:<name>`` or ``judge:<model>``), ``judge_grade``, ``judge_model`` (the review
  file's judge), ``confidence``, ``reason``, ``at`` (UTC, ``2024-01-02T03:04:05+00:00`` as
  baselines and reports write it) and, for a rewritten label, ``previous``. Metadata is
  not in a query's fingerprint, so only the queries whose judgments changed get a new
  fingerprint (the baseline reports exactly those as re-judged).
- Format and formatting: JSON files are edited in place, only the changed queries' entries
  are rewritten, each in its own layout (one line, or indented as the file is, keys in their
  order, its line endings); every other byte is kept, CRLF included. JSONL: only changed
  lines are rewritten. BEIR folders
  and TREC qrels are refused (convert them to JSON first): their format has no room for
  provenance.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.io import counted
from .._internal.json import loads
from ..errors import InputError, RetrievalError, UsageError

if TYPE_CHECKING:
    from ..golden import GoldenSet
    from .review_file import Proposal, Review

_SPACE = " \t\n\r"
BOM = "\ufeff"  # kept where a Windows editor put it; the loader skips it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Review file, golden set, output and the non-interactive path."""
    from ..validators import fraction

    parser.add_argument("review", type=Path, metavar="REVIEW", help="the review file (pool -o)")
    parser.add_argument("golden", type=Path, metavar="GOLDEN", help="the golden set (JSON/JSONL)")
    parser.add_argument(
        "-o", "--output", type=Path, default=None, help="write here (default: GOLDEN in place)"
    )
    parser.add_argument(
        "--accept-judge",
        action="store_true",
        help="also take the judge's grade for undecided proposed additions (never removals)",
    )
    parser.add_argument(
        "--min-confidence",
        type=fraction,
        default=None,
        help="with --accept-judge: only answers this confident (an answer without a "
        "confidence is then left out)",
    )
    parser.add_argument("--by", default=None, help="reviewer name for decisions that carry none")
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would change; write nothing"
    )
    parser.epilog = EXIT_STATUS


#: apply's exit statuses (its --help epilog; docs/building.md quotes it)
EXIT_STATUS = (
    "exit status: 0 every decision applied, or left as the review file says (rejected, "
    "skipped, undecided, below --min-confidence; a query the judge graded all pooled "
    "documents of 0 is left open); 1 a person's decision was refused because it would leave "
    "a query without a relevant document (each refusal is printed with its review file line; "
    "the rest is still written), an unreadable file, or a review file made for another "
    "golden set; 2 bad arguments."
)


# --------------------------------------------------------------------------------------------
# deciding what changes


@dataclass(frozen=True)
class Label:
    """One judgment to write: the grade, its provenance record, and the proposal's kind
    and review file line (for a refusal's message)."""

    query_id: str
    doc_id: str
    grade: int
    record: dict[str, Any]
    kind: str
    line: int


@dataclass(frozen=True)
class Plan:
    """What ``apply`` does: the labels to write, every proposal counted by what happened
    to it, one message per refused decision of a person, and one note per query left open
    (the judge graded all its documents 0)."""

    labels: list[Label]
    counts: Counter[str]
    refused: list[str]
    left_open: list[str]


def plan(
    review: Review,
    golden: GoldenSet,
    *,
    accept_judge: bool,
    min_confidence: float | None,
    by: str | None,
    now: str,
) -> Plan:
    """The labels to write (those that would leave a query without a relevant document
    refused), and every proposal counted by what happened to it."""
    current = {q.id: q.relevant for q in golden.queries}
    model = str((review.header.get("judge") or {}).get("model", "unknown"))
    labels: list[Label] = []
    counts: Counter[str] = Counter()
    for proposal, line in zip(review.proposals, review.lines, strict=True):
        decision = proposal.decision
        grade = proposal.final_grade
        if grade is not None and decision is not None:
            who = f"review:{decision.by or by or 'unknown'}"
            at = utc(decision.at)
        elif (
            accept_judge
            and decision is None
            and proposal.kind == "add"
            and (
                min_confidence is None
                or (proposal.confidence is not None and proposal.confidence >= min_confidence)
            )
        ):
            grade, who, at = proposal.grade, f"judge:{model}", now
        else:
            counts[_unapplied(proposal, accept_judge)] += 1
            continue
        now_grade = current[proposal.query_id].get(proposal.doc_id)
        if now_grade != proposal.current:  # labelled (or relabelled) since pool
            counts["already" if now_grade == grade else "kept"] += 1
            continue
        record: dict[str, Any] = {
            "grade": grade,
            "by": who,
            "judge_grade": proposal.grade,
            "judge_model": model,
            "confidence": proposal.confidence,
            "reason": proposal.reason,
            "at": at,
        }
        if proposal.current is not None:
            record["previous"] = proposal.current
        labels.append(Label(proposal.query_id, proposal.doc_id, grade, record, proposal.kind, line))
    kept, refused, left_open = _keep_a_relevant_document(review, current, labels)
    for label in kept:
        counts["removed" if label.kind == "remove" else "added"] += 1
        counts["zero"] += label.kind == "add" and label.grade == 0
    counts["refused"] = len(refused)
    counts["open"] = len(labels) - len(kept) - len(refused)
    return Plan(kept, counts, refused, left_open)


def _keep_a_relevant_document(
    review: Review, current: Mapping[str, Mapping[str, int]], labels: Sequence[Label]
) -> tuple[list[Label], list[str], list[str]]:
    """Leave out the labels that would leave a query with judgments but no relevant
    document (the golden set would not load): its removals, else (a query with no relevant
    label yet) its grade-0 additions. Returns the labels kept, one message per refused
    decision of a person, and one note per query whose judge labels are left out (no one
    decided those, so nothing to refuse)."""
    groups: dict[str, list[Label]] = {}
    for label in labels:
        groups.setdefault(label.query_id, []).append(label)
    pooled = Counter(p.query_id for p in review.proposals if p.kind == "add")
    left_out: set[int] = set()
    messages: list[str] = []
    notes: list[str] = []
    for query_id, group in groups.items():
        grades = {**current[query_id], **{label.doc_id: label.grade for label in group}}
        if any(grade > 0 for grade in grades.values()):
            continue
        removals = [label for label in group if label.kind == "remove"]
        blamed = removals or group
        left_out.update(id(label) for label in blamed)
        judged = sum(1 for label in blamed if label.record["by"].startswith("judge:"))
        if judged:
            every = "all " if judged == pooled[query_id] else ""
            notes.append(
                f"left open: the judge graded {every}{judged} pooled "
                f"document{'s' * (judged != 1)} of {query_id!r} 0"
            )
        for label in blamed:
            where = f"{review.path}:{label.line}"
            if label.record["by"].startswith("judge:"):
                continue
            if label.kind == "remove":
                others = " and ".join(
                    f"{review.path}:{other.line} removing {other.doc_id!r}"
                    for other in removals
                    if other is not label
                )
                messages.append(
                    f"{where}: removing {label.doc_id!r}"
                    + (f", with {others}," if others else "")
                    + f" would leave query {query_id!r} with no relevant document; reject "
                    + ("one of these decisions" if others else "this decision")
                    + f", or first give another document of {query_id!r} a grade >= 1 (in "
                    "the review or the golden set)"
                )
            else:
                messages.append(
                    f"{where}: query {query_id!r} has no relevant document, and grade 0 for "
                    f"{label.doc_id!r} would make it a judged query without one; grade a "
                    f"relevant document of {query_id!r} 1-3 in the review (or the golden "
                    "set), or reject this decision"
                )
    return [label for label in labels if id(label) not in left_out], messages, notes


def utc(at: str) -> str:
    """An ISO 8601 time as UTC to the second, the way baselines and reports write it
    (``...+00:00``), so every label's ``at`` reads alike; a time without a zone is taken
    as UTC, text that is no time is kept as it is."""
    try:
        moment = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return at
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def _unapplied(proposal: Proposal, accept_judge: bool) -> str:
    decision = proposal.decision
    if decision is None:
        if accept_judge and proposal.kind == "add":
            return "unconfident"
        return "undecided"
    return "rejected" if decision.action == "reject" else "skipped"


# --------------------------------------------------------------------------------------------
# editing the file


def entry_id(entry: Mapping[str, Any]) -> str:
    """The query id the loader gives an entry (its ``id``, else from its content)."""
    from ..golden import content_id

    if "id" in entry:
        return str(entry["id"])
    return content_id(entry["query"], entry.get("params") or {})


def updated_entry(entry: dict[str, Any], labels: Sequence[Label]) -> dict[str, Any]:
    """The entry with ``labels`` written into ``relevant`` and ``metadata["labels"]``; key
    order kept (``relevant`` after ``query`` when the entry had none; a list of ids becomes
    ``{id: 1}``, the same judgments)."""
    relevant = entry.get("relevant")
    grades: dict[str, Any] = (
        {str(d): 1 for d in relevant}
        if isinstance(relevant, list)
        else dict(relevant)
        if isinstance(relevant, dict)
        else {}
    )
    metadata = dict(entry.get("metadata") or {})
    provenance = dict(metadata.get("labels") or {})
    for label in labels:
        grades[label.doc_id] = label.grade
        provenance[label.doc_id] = label.record
    metadata["labels"] = provenance
    result: dict[str, Any] = {}
    for key, value in entry.items():
        result[key] = value
        if key == "query" and "relevant" not in entry:
            result["relevant"] = grades
    if "relevant" in entry:
        result["relevant"] = grades
    result["metadata"] = metadata
    return result


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in _SPACE:
        index += 1
    return index


def entry_spans(text: str) -> list[tuple[int, int]]:
    """Start and end offsets of each entry of a golden JSON document (a list of entries, or
    an object whose ``queries`` is one), found with the standard decoder."""
    decoder = json.JSONDecoder()
    index = _skip_space(text, 1 if text.startswith(BOM) else 0)
    if text.startswith("{", index):
        index = _skip_space(text, index + 1)
        while not text.startswith("}", index):
            key, index = decoder.raw_decode(text, index)
            index = _skip_space(text, _skip_space(text, index) + 1)  # past ':'
            if key == "queries":
                break
            _, index = decoder.raw_decode(text, index)
            index = _skip_space(text, index)
            if text.startswith(",", index):
                index = _skip_space(text, index + 1)
    spans: list[tuple[int, int]] = []
    if not text.startswith("[", index):
        return spans
    index = _skip_space(text, index + 1)
    while not text.startswith("]", index):
        _, end = decoder.raw_decode(text, index)
        spans.append((index, end))
        index = _skip_space(text, end)
        if text.startswith(",", index):
            index = _skip_space(text, index + 1)
    return spans


def dump_like(value: Any, original: str, column: int, ascii_only: bool) -> str:
    """``value`` as JSON in the layout of ``original`` (the text it replaces, which starts at
    ``column`` of its line): one line with the same separators, or indented the same way
    with the same line ending."""
    if "\n" not in original:
        separators = (
            ", " if re.search(r",\s", original) or "," not in original else ",",
            ": " if re.search(r":\s", original) else ":",
        )
        return json.dumps(value, ensure_ascii=ascii_only, separators=separators)
    ending = "\r\n" if "\r\n" in original else "\n"
    lines = original.split("\n")
    inner = lines[1][: len(lines[1]) - len(lines[1].lstrip(" \t"))]
    unit = inner[column:] or "  "
    text = json.dumps(value, ensure_ascii=ascii_only, indent=unit)
    return text.replace("\n", ending + original_indent(lines[-1], column))


def original_indent(last_line: str, column: int) -> str:
    """The whitespace before an entry's closing brace (the entry's own indent)."""
    return last_line[: len(last_line) - len(last_line.lstrip(" \t"))] or " " * column


def edit_json(text: str, labels_by_query: Mapping[str, Sequence[Label]]) -> str:
    """The JSON golden file's text with the changed entries rewritten, all else kept."""
    ascii_only = text.isascii()
    pieces: list[str] = []
    last = 0
    for start, end in entry_spans(text):
        entry = loads(text[start:end])  # read and checked before: load_golden
        if not isinstance(entry, dict) or entry_id(entry) not in labels_by_query:
            continue
        column = start - (text.rfind("\n", 0, start) + 1)
        new = updated_entry(entry, labels_by_query[entry_id(entry)])
        pieces += [text[last:start], dump_like(new, text[start:end], column, ascii_only)]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def edit_jsonl(text: str, labels_by_query: Mapping[str, Sequence[Label]]) -> str:
    """The JSONL golden file's text with only the changed entries' lines rewritten."""
    ascii_only = text.isascii()
    lines = text.split("\n")
    for number, line in enumerate(lines):
        body = line.rstrip("\r")
        bom = BOM if number == 0 and body.startswith(BOM) else ""
        body = body[len(bom) :]
        if not body.strip():
            continue
        entry = loads(body)
        if isinstance(entry, dict) and entry_id(entry) in labels_by_query:
            new = updated_entry(entry, labels_by_query[entry_id(entry)])
            ending = line[len(bom) + len(body) :]
            lines[number] = bom + dump_like(new, body.strip(), 0, ascii_only) + ending
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# the command


def run(args: argparse.Namespace) -> int:
    """Check the review file against the golden set, plan, edit, check, write, summarise."""
    from ..golden import load_golden
    from .pool import mismatches
    from .review_file import read_review

    golden_path: Path = args.golden
    if golden_path.is_dir() or golden_path.suffix not in {".json", ".jsonl"}:
        raise InputError(
            f"{golden_path}: apply edits JSON and JSONL golden sets (BEIR folders and TREC "
            "qrels have no room for provenance); convert it first: pytest-retrieval convert "
            f"{golden_path} -o golden.json, then pool and apply with golden.json"
        )
    output: Path = args.output or golden_path
    if output.suffix != golden_path.suffix:
        raise UsageError(f"-o {output}: give a {golden_path.suffix} file, as {golden_path} is")
    review = read_review(args.review)
    golden = load_golden(golden_path, require_relevant=False)
    problems = mismatches(review, golden, limit=20)
    if problems:
        raise InputError(
            f"{args.review} was made for another golden set than {golden_path}: "
            + "; ".join(problems)
            + f"; pool {golden_path} again to make its review file"
        )
    from .._internal.io import atomic_write, now

    decided = plan(
        review,
        golden,
        accept_judge=args.accept_judge,
        min_confidence=args.min_confidence,
        by=args.by,
        now=now(),
    )
    for message in decided.refused:
        print(f"refused: {message}", file=sys.stderr)
    for note in decided.left_open:
        print(note)
    by_query: dict[str, list[Label]] = {}
    for label in decided.labels:
        by_query.setdefault(label.query_id, []).append(label)
    if by_query and not args.dry_run:
        # bytes decoded as they are: no newline translation, so CRLF files keep every CRLF
        text = golden_path.read_bytes().decode("utf-8")
        edit = edit_jsonl if golden_path.suffix == ".jsonl" else edit_json
        new_text = edit(text, by_query)
        _check(golden, new_text, output, set(by_query))
        try:
            atomic_write(output, new_text)
        except OSError as exc:
            raise InputError(f"cannot write {output} ({exc.strerror or exc})") from None
    _summary(args, output, decided.counts, len(by_query))
    if decided.refused:
        refused = len(decided.refused)
        print(
            f"{refused} decision{'s' * (refused != 1)} refused (see above), the rest "
            f"{'would be ' if args.dry_run else ''}applied: exit status 1",
            file=sys.stderr,
        )
        return 1
    return 0


def _check(before: GoldenSet, text: str, output: Path, changed: set[str]) -> None:
    """Load the new text as a golden set before it replaces anything: it must validate, and
    exactly the ``changed`` queries' fingerprints may differ (else a bug: nothing written)."""
    import os
    import tempfile

    from ..golden import GoldenError, load_golden

    folder = output.parent if output.parent.exists() else Path(".")
    handle, name = tempfile.mkstemp(prefix=".apply-", suffix=output.suffix, dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
        after = load_golden(name, require_relevant=False)
    except GoldenError as exc:  # named by the output and the place, never the temp file
        raise RetrievalError(
            f"internal error, nothing written to {output}: the edited golden set would not "
            f"load ({exc.where or 'the file'}: {exc.problem})"
        ) from None
    finally:
        Path(name).unlink(missing_ok=True)
    old, new = before.query_fingerprints, after.query_fingerprints
    moved = {q for q in new if old.get(q) != new[q]} | (set(old) - set(new))
    if moved != changed:
        raise RetrievalError(
            f"internal error, nothing written: queries {sorted(moved ^ changed)} would change "
            "unexpectedly"
        )


def _summary(args: argparse.Namespace, output: Path, counts: Counter[str], queries: int) -> None:
    verb = "would change" if args.dry_run else "changed"
    print(
        f"{'dry run: ' if args.dry_run else ''}{output}: {counted(counts['added'], 'label')} "
        f"added ({counts['zero']} graded 0, kept as judged not relevant), "
        f"{counted(counts['removed'], 'removal')} applied; {counted(queries, 'query')} {verb}"
    )
    left = [
        (counts["refused"], "refused (see above)"),
        (counts["open"], "graded 0 by the judge on queries left open (see above)"),
        (counts["rejected"], "rejected"),
        (counts["skipped"], "skipped (revisit with pytest-retrieval review)"),
        (counts["undecided"], "undecided"),
        (counts["unconfident"], "below --min-confidence"),
        (counts["already"], "already in the golden set"),
        (counts["kept"], "labelled by hand since pool (hand label kept)"),
    ]
    shown = [f"{n} {what}" for n, what in left if n]
    if shown:
        print("not applied: " + ", ".join(shown))
    if args.dry_run:
        print("nothing written (--dry-run)")
    elif queries:
        print(
            "the baseline will report these queries as re-judged; record it again with "
            "--retrieval-update-baseline once reviewed"
        )
    sys.stdout.flush()
