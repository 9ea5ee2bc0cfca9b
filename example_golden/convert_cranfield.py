"""Convert the Cranfield collection into the golden sets bundled with pytest-retrieval.

Usage::

    python example_golden/convert_cranfield.py /path/to/cranfield

``/path/to/cranfield`` holds the public distribution files ``cran.all.1400``, ``cran.qry`` and
``cranqrel``. The script writes, next to itself (the output is deterministic, so re-running it
gives byte-identical files):

- ``cranfield/corpus.jsonl``, ``cranfield/queries.jsonl`` and ``cranfield/qrels/test.tsv``:
  the collection in BEIR layout;
- ``cranfield.json``: the same queries and judgments in the object form of the golden format,
  with metrics, thresholds and one tag per query.

Ids and grades:

- Doc ids are the ``.I`` numbers of ``cran.all.1400`` as strings, ``"1"`` .. ``"1400"``.
- Query ids are the 1-based POSITION of the query in ``cran.qry`` (``"1"`` .. ``"225"``),
  because that is how ``cranqrel`` numbers them; the ``.I`` numbers of ``cran.qry`` are not
  contiguous (001, 002, 004, 008, ...) and are kept as ``metadata.cran_qry_number``.
- Grade = 5 - Cleverdon code (1 -> 4 complete answer, 2 -> 3, 3 -> 2, 4 -> 1 minimum
  interest). Rows with code -1 are kept with grade 0: judged, not relevant.

Tags: every query gets exactly one tag, ``short`` or ``long``, by its word count (words = tokens
holding a letter or digit, so Cranfield's detached " ." does not count). A query is ``short``
when its word count is at most the median word count of all 225 queries, ``long`` otherwise.

Texts have their whitespace normalised (runs collapsed to one space, ends stripped). The corpus
``text`` is the ``.W`` abstract; the ``title`` is ``.T``. Known quirk of the source: in a few
records (docs 240, 576, 578) marker lines such as ``.A``, ``.B`` or a second ``.W`` appear
inside the abstract. ``.W`` is the last field of every record, so once it has started every
line up to the next ``.I`` is abstract text, and stray marker lines are dropped.

The thresholds written to ``cranfield.json`` are roughly 80% of what the example BM25
retriever (``conftest.py`` at the repository root) measures, rounded down to 2 decimals.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent
NAME = "cranfield"
K = 10
METRICS = [
    "recall@10",
    "precision@10",
    "hit_rate@10",
    "mrr@10",
    "ndcg@10",
    "ndcg_exp@10",
    "map@10",
    "recall@100",
]
#: ~80% of the BM25 baseline of conftest.py, rounded down
#: (measured: recall@10 0.4004, mrr@10 0.5313, ndcg@10 0.3730)
THRESHOLDS = {"recall@10": 0.32, "mrr@10": 0.42, "ndcg@10": 0.29}

_FIELD = re.compile(r"^\.([A-Z])(?:\s+(\S+))?\s*$")
_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class Record:
    """One ``.I`` record: its number and the text of each of its fields."""

    number: str
    fields: dict[str, str]


@dataclass(frozen=True)
class Query:
    id: str  # 1-based position in cran.qry
    number: str  # the .I number, as written in cran.qry
    text: str


def normalize(text: str) -> str:
    """Collapse runs of whitespace into one space and strip the ends."""
    return " ".join(text.split())


def parse_records(text: str) -> Iterator[Record]:
    """Parse the SMART-style ``.I``/``.T``/``.A``/``.B``/``.W`` format.

    ``.W`` is always the last field: once it has started, every line until the next ``.I``
    belongs to it and stray marker lines inside it are dropped (see the module docstring).
    """
    number: str | None = None
    fields: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        marker = _FIELD.match(line)
        if marker and marker[1] == "I":
            if number is not None:
                yield _record(number, fields)
            number, fields, current = marker[2], {}, None
            if number is None:
                raise ValueError(f"record marker without a number: {line!r}")
        elif marker and current != "W":
            current = marker[1]
            fields.setdefault(current, [])
        elif marker:
            continue  # a stray marker inside the abstract
        elif current is not None:
            fields[current].append(line)
        elif line.strip():
            raise ValueError(f"text outside any field in record {number}: {line!r}")
    if number is not None:
        yield _record(number, fields)


def _record(number: str, fields: dict[str, list[str]]) -> Record:
    return Record(number, {name: normalize(" ".join(lines)) for name, lines in fields.items()})


def read_corpus(path: Path) -> list[dict[str, str]]:
    records = list(parse_records(path.read_text(encoding="utf-8")))
    ids = [str(int(r.number)) for r in records]
    if ids != [str(n) for n in range(1, len(records) + 1)]:
        raise ValueError(f"{path}: doc numbers are not 1..{len(records)} in order")
    return [
        {"_id": doc_id, "title": r.fields.get("T", ""), "text": r.fields.get("W", "")}
        for doc_id, r in zip(ids, records, strict=True)
    ]


def read_queries(path: Path) -> list[Query]:
    records = parse_records(path.read_text(encoding="utf-8"))
    return [
        Query(str(position), r.number, r.fields["W"]) for position, r in enumerate(records, start=1)
    ]


def read_qrels(path: Path, query_ids: set[str], doc_ids: set[str]) -> dict[str, dict[str, int]]:
    """``{query_id: {doc_id: grade}}`` from ``query_position doc_id code`` rows."""
    qrels: dict[str, dict[str, int]] = {}
    for line_number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        row = line.split()
        if not row:
            continue  # blank lines
        if len(row) != 3:
            raise ValueError(f"{path}:{line_number}: expected 3 columns, got {line!r}")
        query_id, doc_id, code = row[0], row[1], int(row[2])
        if query_id not in query_ids or doc_id not in doc_ids:
            raise ValueError(f"{path}:{line_number}: unknown query or doc in {line!r}")
        if code not in {-1, 1, 2, 3, 4}:
            raise ValueError(f"{path}:{line_number}: unknown relevance code {code}")
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged:
            raise ValueError(f"{path}:{line_number}: doc {doc_id} judged twice for {query_id}")
        judged[doc_id] = 0 if code == -1 else 5 - code
    return qrels


def word_count(text: str) -> int:
    return sum(1 for token in text.split() if _WORD.search(token))


def length_tags(queries: Iterable[Query]) -> dict[str, str]:
    """``short`` if a query has at most the median number of words, else ``long``."""
    counts = {q.id: word_count(q.text) for q in queries}
    median = statistics.median(counts.values())
    return {qid: "short" if n <= median else "long" for qid, n in counts.items()}


def by_grade(judged: dict[str, int]) -> dict[str, int]:
    """Judgments best grade first, then by numeric doc id."""
    return dict(sorted(judged.items(), key=lambda item: (-item[1], int(item[0]))))


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def write_lines(path: Path, lines: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def write_beir(
    folder: Path,
    corpus: list[dict[str, str]],
    queries: list[Query],
    qrels: dict[str, dict[str, int]],
) -> None:
    write_lines(folder / "corpus.jsonl", (dumps(doc) for doc in corpus))
    write_lines(
        folder / "queries.jsonl",
        (
            dumps({"_id": q.id, "text": q.text, "metadata": {"cran_qry_number": q.number}})
            for q in queries
        ),
    )
    rows = ["query-id\tcorpus-id\tscore"]
    for q in queries:
        rows += [f"{q.id}\t{doc}\t{grade}" for doc, grade in sorted(qrels[q.id].items(), key=_num)]
    write_lines(folder / "qrels" / "test.tsv", rows)


def _num(item: tuple[str, int]) -> int:
    return int(item[0])


def write_golden(
    path: Path, queries: list[Query], qrels: dict[str, dict[str, int]], tags: dict[str, str]
) -> None:
    """The object form, one query per line so that diffs stay readable."""
    entries = [
        dumps(
            {
                "id": q.id,
                "query": q.text,
                "relevant": by_grade(qrels[q.id]),
                "tags": [tags[q.id]],
                "metadata": {"cran_qry_number": q.number},
            }
        )
        for q in queries
    ]
    header = {
        "name": NAME,
        "description": (
            "Cranfield collection (1400 aeronautics abstracts, 225 queries), graded "
            "5 - Cleverdon code, code -1 kept as grade 0; tags: short/long query by word "
            "count around the median. Written by convert_cranfield.py."
        ),
        "k": K,
        "corpus": f"{NAME}/corpus.jsonl",
        "metrics": METRICS,
        "thresholds": THRESHOLDS,
    }
    lines = ["{"]
    lines += [f"  {dumps(key)}: {dumps(value)}," for key, value in header.items()]
    lines.append('  "queries": [')
    lines += [f"    {entry}," for entry in entries[:-1]]
    lines += [f"    {entries[-1]}", "  ]", "}"]
    write_lines(path, lines)


def convert(source: Path, out_dir: Path = OUT_DIR) -> None:
    corpus = read_corpus(source / "cran.all.1400")
    queries = read_queries(source / "cran.qry")
    qrels = read_qrels(source / "cranqrel", {q.id for q in queries}, {doc["_id"] for doc in corpus})
    unjudged = [q.id for q in queries if not any(g > 0 for g in qrels.get(q.id, {}).values())]
    if unjudged:
        raise ValueError(f"queries without a relevant document: {unjudged}")
    tags = length_tags(queries)
    write_beir(out_dir / NAME, corpus, queries, qrels)
    write_golden(out_dir / f"{NAME}.json", queries, qrels, tags)
    judgments = sum(len(j) for j in qrels.values())
    relevant = sum(g > 0 for j in qrels.values() for g in j.values())
    print(
        f"{len(corpus)} docs, {len(queries)} queries, {judgments} judgments "
        f"({relevant} relevant), tags: "
        + ", ".join(f"{t}={list(tags.values()).count(t)}" for t in sorted(set(tags.values())))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("source", type=Path, help="folder with cran.all.1400, cran.qry, cranqrel")
    args = parser.parse_args(argv)
    convert(args.source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
