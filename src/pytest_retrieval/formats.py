"""Golden-set file formats: JSON, JSONL, CSV, BEIR folders, TREC qrels, and corpus files.

Readers turn a file into :class:`RawGolden` (entries exactly as written, plus the settings the
format carries); :mod:`.golden` validates and builds them. Format problems (bad JSON, a qrels
line with two columns, a query id without text) are found here and name the file and line.
This module imports nothing from :mod:`.golden`, so the dependency points one way.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._internal.gc import paused_gc
from ._internal.io import text_lines
from ._internal.json import JsonProblem, loads
from .errors import GoldenError

#: the largest judgment grade (0-3 or 0-4 are usual; 100 allows percentage-like scales)
MAX_GRADE = 100


@dataclass(frozen=True)
class RawGolden:
    """A golden file as read, before validation.

    ``prefix`` and ``lines`` say where entry ``i`` is, for messages: at ``{prefix}/{i}`` (a
    JSON pointer), or at line ``lines[i]`` of a JSONL file. ``document`` is the top level of
    the JSON object form, whose settings are validated against the schema before the entries.
    """

    source: Path
    entries: Any
    settings: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""
    lines: list[int] | None = None
    document: dict[str, Any] | None = None
    #: TREC qrels read without a queries file: where one was looked for (each query's text
    #: is then its id, which only a precomputed run may evaluate)
    texts_missing: Path | None = None


def read_golden(source: Path) -> RawGolden:
    """A JSON/JSONL/CSV file, a BEIR folder or split (``qrels/<split>.tsv``), or TREC qrels."""
    if not source.exists():
        raise GoldenError(
            source,
            "",
            "no such file or folder",
            "check the path given to --retrieval-golden, the retrieval_golden ini key, a "
            "retrieval marker's golden= or retrieval_eval's golden=",
        )
    if source.is_dir():
        return _read_beir(source, split=None)
    if source.suffix == ".tsv" and source.parent.name == "qrels":
        return _read_beir(source.parent.parent, split=source.stem)
    if source.suffix == ".jsonl":
        return _read_jsonl(source)
    if source.suffix == ".json":
        return _read_json(source)
    if source.suffix.lower() == ".csv":
        return _read_csv(source)
    if source.suffix in {".qrels", ".trec", ".txt"} or "qrels" in source.name:
        return read_trec(source)
    raise GoldenError(
        source,
        "",
        f"unknown golden-set format {source.suffix!r}",
        "use .json, .jsonl, .csv, a BEIR folder (queries.jsonl + qrels/<split>.tsv) "
        "or a TREC qrels file (.qrels) with a queries.tsv beside it",
    )


def golden_files(source: Path) -> list[Path]:
    """Every file reading the golden set ``source`` may open (none is read here): itself, a
    BEIR folder's queries, corpus and qrels, a TREC qrels file's queries file. What no
    output may overwrite."""
    folder = source if source.is_dir() else None
    if source.suffix == ".tsv" and source.parent.name == "qrels":
        folder = source.parent.parent
    if folder is not None:
        qrels = sorted((folder / "qrels").glob("*.tsv"))
        return [source, folder / "queries.jsonl", folder / "corpus.jsonl", *qrels]
    if source.suffix in {".qrels", ".trec", ".txt"} or "qrels" in source.name:
        return [source, *_trec_queries_candidates(source)]
    return [source]


def golden_inputs(golden: Path) -> list[tuple[str, Path | None]]:
    """:func:`golden_files`, each named for :func:`~._internal.io.overwrite_problem`'s message."""
    first, *others = golden_files(golden)
    return [("the golden set", first), *((f"a file of the golden set {golden}", f) for f in others)]


def corpus_input(golden: str, corpus: str | None) -> list[tuple[str, Path | None]]:
    """The corpus a JSON golden set names (its ``"corpus"``, known once it is loaded), named
    for :func:`~._internal.io.overwrite_problem`'s message (``golden``: the set as shown); none
    without one."""
    if corpus is None:
        return []
    return [(f"the corpus of the golden set {golden}", Path(corpus))]


def declared_corpus(source: Path) -> str | None:
    """The ``"corpus"`` a JSON golden set's settings name, resolved (None: none, or not a
    JSON object; the loaders report any fault). For a guard that does not load the set."""
    if source.suffix.lower() != ".json" or not source.is_file():
        return None
    try:
        document = loads(read_text(source))
    except ValueError:  # GoldenError and JsonProblem are ones
        return None
    corpus = document.get("corpus") if isinstance(document, dict) else None
    return str((source.parent / corpus).resolve()) if isinstance(corpus, str) and corpus else None


def read_text(source: Path) -> str:
    """The file's text; a UTF-8 byte-order mark (as Windows editors write) is dropped."""
    with _reading(source, lambda exc: f"byte {exc.start}"):
        return source.read_text(encoding="utf-8-sig")


@contextmanager
def _reading(source: Path, place: Callable[[UnicodeDecodeError], str]) -> Iterator[None]:
    """Reading ``source``: bytes that are not UTF-8 (at ``place(exc)``) or an OS error become
    one GoldenError saying so."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise GoldenError(source, place(exc), "not UTF-8 text", "save it as UTF-8") from exc
    except OSError as exc:
        raise GoldenError(source, "", f"cannot read it ({exc.strerror})") from exc


def parse_json(source: Path, text: str, line: int | None = None) -> Any:
    """``text`` parsed strictly (:mod:`._json`: nesting bounded, a key written twice named
    by its pointer); ``line`` is its line number when it is one line of a JSONL file."""
    try:
        return loads(text, line=line)
    except JsonProblem as exc:
        raise GoldenError(source, exc.where, exc.problem, exc.fix) from None


#: a JSON escape of a UTF-16 surrogate: paired ones are one character, a lone one is none
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _refuse_lone_surrogates(source: Path, text: str, document: Any, line: str) -> None:
    """A string of the golden set that holds a lone surrogate (``"\\ud800"``: JSON allows
    the escape, UTF-8 cannot write it) is an error at its pointer: ids, texts and params
    are hashed, printed and written as UTF-8. The document is searched only when its text
    has such an escape (``line``: the JSONL line, before the pointer)."""
    pointer = lone_surrogate(document) if has_surrogate_escape(text) else None
    if pointer is not None:
        raise GoldenError(
            source,
            f"{line}{pointer or '/'}",
            "a lone surrogate escape (such as \\ud800) in a string: not a character, and "
            "not text that can be written as UTF-8",
            "remove it, or write the character it was cut from (a pair such as "
            "\\ud83d\\ude00 is one character)",
        )


def has_surrogate_escape(text: str) -> bool:
    """Whether JSON ``text`` escapes a surrogate: only then may its strings hold a lone one
    (a file read as UTF-8 holds none otherwise), and :func:`lone_surrogate` need search."""
    return "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None


def lone_surrogate(document: Any) -> str | None:
    """The JSON pointer of the first string (or key) of ``document`` that holds a lone
    surrogate; None when none does."""
    return _lone_surrogate(document, "")


def _lone_surrogate(value: Any, pointer: str) -> str | None:
    """The JSON pointer of the first string (or key) under ``value`` with a lone surrogate."""
    if isinstance(value, str):
        return None if value.isascii() or _encodes(value) else pointer
    children: Any = (
        value.items()
        if isinstance(value, dict)
        else (value if _is_pairs(value) else enumerate(value))
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        token = str(key).encode("utf-8", "backslashreplace").decode()  # \ud800 as written
        place = f"{pointer}/{token.replace('~', '~0').replace('/', '~1')}"
        if isinstance(key, str) and not _encodes(key):
            return place
        found = _lone_surrogate(child, place)
        if found is not None:
            return found
    return None


def _is_pairs(value: list[Any]) -> bool:
    """An object as ``object_pairs_hook=list`` parses it (the run file reader's)."""
    return bool(value) and all(type(item) is tuple for item in value)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(value: Any) -> str:
    """``value`` as written in the JSON file (true, null, NaN), cut short when long (a
    400-digit grade)."""
    as_json = value is None or isinstance(value, bool)
    as_json = as_json or (isinstance(value, float) and not math.isfinite(value))
    text = json.dumps(value) if as_json else repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


# --------------------------------------------------------------------------------------------
# JSON and JSONL


def _read_json(source: Path) -> RawGolden:
    text = read_text(source)
    document = parse_json(source, text)
    _refuse_lone_surrogates(source, text, document, "")
    if isinstance(document, list):
        if document:
            _refuse_other_files(source, document[0])
        return RawGolden(source, document)
    if isinstance(document, dict):
        if "queries" not in document:
            _refuse_other_files(source, document)
        settings = {key: value for key, value in document.items() if key != "queries"}
        return RawGolden(
            source, document.get("queries"), settings, prefix="/queries", document=document
        )
    raise GoldenError(
        source,
        "/",
        f"the document is a JSON {type(document).__name__}",
        'write a list of queries, or an object {"queries": [...]}',
    )


def _read_jsonl(source: Path) -> RawGolden:
    entries: list[Any] = []
    lines: list[int] = []
    for number, line in enumerate(text_lines(read_text(source)), start=1):
        if line.strip():
            entries.append(parse_json(source, line, line=number))
            _refuse_lone_surrogates(source, line, entries[-1], f"line {number}, ")
            lines.append(number)
            if len(entries) == 1:
                _refuse_other_files(source, entries[0])
    return RawGolden(source, entries, lines=lines)


#: the CSV layout, for ``pytest-retrieval convert --help`` and the messages of :func:`_read_csv`
CSV_HELP = """\
CSV: a header row, then one row per query. Columns: query (required), relevant (required:
doc ids separated by ';', each optionally with a grade as id:grade), id (optional, default:
derived from the query text, q- and 12 hex digits, unchanged when other rows are added or
removed), tags (optional, separated by ';'). Example:
  id,query,relevant,tags
  q1,how to reset a password,doc-12;doc-40:2,account
"""


def _read_csv(source: Path) -> RawGolden:
    """A header row, then one query a row (:data:`CSV_HELP`); its entries are validated as
    every other format's, a problem named by its line."""
    try:
        with source.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            rows = [(reader.line_num, row) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise GoldenError(source, "", f"cannot read it as CSV ({exc})") from None
    entries: list[dict[str, Any]] = []
    for number, row in rows:  # the line the row ends on (a quoted field may span lines)
        if not row.get("query") or not row.get("relevant"):
            raise GoldenError(
                source,
                f"line {number}",
                "a row needs 'query' and 'relevant' columns with values",
                "see `pytest-retrieval convert --help` for the CSV layout",
            )
        relevant: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in row["relevant"].split(";"))):
            doc, _, grade = item.rpartition(":") if ":" in item else (item, "", "1")
            try:
                relevant[doc] = int(grade)
            except ValueError:
                raise GoldenError(
                    source, f"line {number}", f"bad grade in {item!r}", "write id:grade, e.g. d1:2"
                ) from None
        entry: dict[str, Any] = {"query": row["query"], "relevant": relevant}
        if row.get("id"):
            entry["id"] = row["id"]
        if row.get("tags"):
            entry["tags"] = [t.strip() for t in row["tags"].split(";") if t.strip()]
        entries.append(entry)
    return RawGolden(source, entries, lines=[number for number, _ in rows])


_REPORT_KEYS = frozenset({"version", "plugin_version", "created", "evaluations"})


def _refuse_other_files(source: Path, first: Any) -> None:
    """Files that sit beside golden sets and may be handed over by mistake (a glob, a
    pre-commit pattern): a baseline, a JSON report, BEIR documents or queries. ``first`` is
    the document (a JSON object without "queries") or its first entry. Say what the file is
    instead of listing schema errors about it."""
    if not isinstance(first, dict):
        return
    if first.get("format") == "pytest-retrieval-baseline":
        golden = source.name.removesuffix(".baseline.json")
        named = f" ({golden})" if golden != source.name else ""
        raise GoldenError(
            source,
            "",
            "this is a baseline file (written by --retrieval-update-baseline), not a golden set",
            f"pass the golden set it was recorded from{named}; `pytest-retrieval show` reads "
            "a baseline",
        )
    if first.keys() >= _REPORT_KEYS:
        raise GoldenError(
            source,
            "",
            "this is a pytest-retrieval JSON report (--retrieval-report), not a golden set",
            "pass the golden set that was evaluated; `pytest-retrieval diff` compares reports",
        )
    if "_id" in first and "query" not in first:
        corpus = source.name == "corpus.jsonl" or (
            "title" in first and source.name != "queries.jsonl"
        )
        kind = "corpus" if corpus else "queries"
        what = "documents" if kind == "corpus" else "query texts without judgments"
        raise GoldenError(
            source,
            "",
            f"this is a BEIR {kind} file ({what}), not a golden set",
            f"pass the BEIR folder {source.parent}/ instead (queries.jsonl + "
            "qrels/<split>.tsv); its corpus.jsonl is found there",
        )


# --------------------------------------------------------------------------------------------
# BEIR and TREC


def default_qrels(folder: Path) -> Path | None:
    """The qrels file a BEIR folder stands for: ``qrels/test.tsv``, else its only split."""
    splits = sorted((folder / "qrels").glob("*.tsv"))
    tests = [path for path in splits if path.stem == "test"]
    return tests[0] if tests else splits[0] if len(splits) == 1 else None


def _read_beir(folder: Path, split: str | None) -> RawGolden:
    queries_file = folder / "queries.jsonl"
    qrels_dir = folder / "qrels"
    if not queries_file.is_file() or not qrels_dir.is_dir():
        raise GoldenError(
            folder,
            "",
            "a golden-set folder must be in BEIR layout",
            "put queries.jsonl and qrels/<split>.tsv in it (corpus.jsonl optional)",
        )
    if split is None:
        chosen = default_qrels(folder)
        if chosen is None:
            splits = sorted(p.stem for p in qrels_dir.glob("*.tsv"))
            raise GoldenError(
                qrels_dir,
                "",
                f"cannot choose a split among {splits or 'no .tsv files'}",
                f"point --retrieval-golden at {qrels_dir}/<split>.tsv",
            )
        split = chosen.stem
    qrels_file = qrels_dir / f"{split}.tsv"
    judgments = _read_beir_qrels(qrels_file)
    texts: dict[str, tuple[str, dict[str, Any]]] = {}
    first_on: dict[str, int] = {}
    for number, line in enumerate(text_lines(read_text(queries_file)), start=1):
        if not line.strip():
            continue
        record = parse_json(queries_file, line, line=number)
        _refuse_lone_surrogates(queries_file, line, record, f"line {number}, ")
        if not isinstance(record, dict) or not isinstance(record.get("_id"), str | int):
            raise GoldenError(
                queries_file,
                f"line {number}",
                "expected an object with '_id' and 'text'",
                'write {"_id": "q1", "text": "query text"}',
            )
        if not isinstance(record.get("text"), str) or not record["text"].strip():
            raise GoldenError(
                queries_file,
                f"line {number}/text",
                "missing or empty query text",
                'write {"_id": "q1", "text": "query text"}',
            )
        query_id = _once(queries_file, str(record["_id"]), number, first_on)
        texts[query_id] = (record["text"], record.get("metadata") or {})
    _require_texts(judgments, texts, qrels_file, queries_file)
    entries = []
    for query_id, relevant in judgments.items():
        text, metadata = texts[query_id]
        entries.append({"id": query_id, "query": text, "relevant": relevant, "metadata": metadata})
    corpus = folder / "corpus.jsonl"
    settings = {
        "name": folder.name if split == "test" else f"{folder.name}-{split}",
        "corpus": str(corpus.resolve()) if corpus.is_file() else None,
    }
    return RawGolden(qrels_file, entries, settings)


def _read_beir_qrels(path: Path) -> dict[str, dict[str, int]]:
    lines = text_lines(read_text(path))

    def rows() -> Iterator[tuple[int, Sequence[str]]]:
        for number, line in enumerate(lines, start=1):  # split at tabs: a quote is a character
            row = line.split("\t")
            if not "".join(row).strip():
                continue
            if number == 1 and row[0].strip().lower() in {"query-id", "query_id", "qid"}:
                continue
            yield number, row

    return _judgments(path, rows, "query-id<TAB>corpus-id<TAB>score", 3)


#: a grade as trec_eval reads one: an optional sign and ASCII digits, nothing else
_GRADE = re.compile(r"[+-]?[0-9]+")
#: a field of a TREC qrels line: fields are split at ASCII whitespace only, as trec_eval
#: splits them (``str.split`` also splits at U+00A0, U+2003, U+0085 and more)
_TREC_FIELD = re.compile(r"[^ \t\n\r\f\v]+")
#: what a field is trimmed of: ASCII whitespace only (a no-break space is part of an id)
_ASCII_SPACE = " \t\n\r\f\v"

#: the rows of a qrels file, ``(line number, [query id, doc id, grade])``, from the start
Rows = Callable[[], Iterator[tuple[int, Sequence[str]]]]


def _judgments(path: Path, rows: Rows, layout: str, columns: int) -> dict[str, dict[str, int]]:
    """Qrels rows -> ``{query: {doc: grade}}``.

    TREC uses negative grades for "judged not relevant": they are kept as judged, grade 0.
    A second line for the same query and doc is an error (which of the two would count?);
    only then are the rows read again, to name the first line.
    """
    judgments: dict[str, dict[str, int]] = {}
    for number, row in rows():
        if len(row) != 3:
            raise GoldenError(
                path,
                f"line {number}",
                f"expected {columns} columns, got {len(row)}",
                f"write {layout}",
            )
        query_id, doc_id, grade_text = (cell.strip(_ASCII_SPACE) for cell in row)
        if _GRADE.fullmatch(grade_text) is None:  # int() reads "1_0" as 10, full-width digits
            raise GoldenError(
                path,
                f"line {number}",
                f"grade {shown(grade_text)} is not a whole number in ASCII digits",
                f"write {layout}",
            )
        grade = int(grade_text)
        if grade > MAX_GRADE:
            raise GoldenError(
                path,
                f"line {number}",
                f"grade {shown(grade_text)} is above the limit of {MAX_GRADE}",
                f"use grades from 0 to {MAX_GRADE} (0-3 is usual)",
            )
        judged = judgments.setdefault(query_id, {})
        if doc_id in judged:
            first = next(
                n
                for n, r in rows()
                if [r[0].strip(_ASCII_SPACE), r[1].strip(_ASCII_SPACE)] == [query_id, doc_id]
            )
            raise GoldenError(
                path,
                f"line {number}",
                f"query {query_id!r} judges doc {doc_id!r} a second time (first at line {first})",
                "keep one line per query and doc: delete one of the two",
            )
        judged[doc_id] = max(grade, 0)
    return judgments


def read_trec(source: Path, queries_file: Path | None = None) -> RawGolden:
    """TREC qrels plus a ``QUERY_ID<TAB>TEXT`` queries file (default: found beside them).
    Without one, each query's text is its id and ``texts_missing`` says where it was looked
    for: a precomputed run searches nothing and needs none (trec_eval takes qrels and a run);
    :func:`.golden.check_texts` refuses the rest."""
    lines = text_lines(read_text(source))

    def rows() -> Iterator[tuple[int, Sequence[str]]]:
        for number, fields in enumerate(map(_TREC_FIELD.findall, lines), start=1):
            if len(fields) == 6 and fields[1] == "Q0":
                raise GoldenError(
                    source,
                    f"line {number}",
                    "this is a TREC run (QUERY_ID Q0 DOC_ID RANK SCORE TAG), not qrels",
                    "give the golden set (qrels: QUERY_ID ITERATION DOC_ID GRADE) as the "
                    "golden set, and the run with --retrieval-run (pytest-retrieval eval GOLDEN "
                    "RUN: the golden set first)",
                )
            if fields and len(fields) != 4:  # 3 fields is a line that lost one: not q, d, g
                raise GoldenError(
                    source,
                    f"line {number}",
                    f"expected 4 columns, got {len(fields)}",
                    "write QUERY_ID ITERATION DOC_ID GRADE",
                )
            if fields:
                yield number, [fields[0], fields[2], fields[3]]

    judgments = _judgments(source, rows, "QUERY_ID ITERATION DOC_ID GRADE", 4)
    if queries_file is None:
        candidates = _trec_queries_candidates(source)
        queries_file = next((f for f in candidates if f.is_file()), None)
        if queries_file is None:
            entries = [
                {"id": query_id, "query": query_id, "relevant": relevant}
                for query_id, relevant in judgments.items()
            ]
            return RawGolden(source, entries, {"name": source.stem}, texts_missing=candidates[1])
    elif not queries_file.is_file():
        raise GoldenError(queries_file, "", "no such queries file", "check the --queries path")
    texts: dict[str, str] = {}
    first_on: dict[str, int] = {}
    for number, line in enumerate(text_lines(read_text(queries_file)), start=1):
        if not line.strip():
            continue
        query_id, sep, text = line.partition("\t")
        if not sep or not text.strip():
            raise GoldenError(
                queries_file,
                f"line {number}",
                "expected QUERY_ID<TAB>TEXT",
                "write one query per line: id, a tab, the text",
            )
        texts[_once(queries_file, query_id.strip(), number, first_on)] = text.strip()
    _require_texts(judgments, texts, source, queries_file)
    entries = [
        {"id": query_id, "query": texts[query_id], "relevant": relevant}
        for query_id, relevant in judgments.items()
    ]
    return RawGolden(source, entries, {"name": source.stem})


def _once(queries_file: Path, query_id: str, number: int, first_on: dict[str, int]) -> str:
    """``query_id``, read on line ``number``, noted in ``first_on``; given a second time, an
    error naming both lines (a dict would keep the last text silently)."""
    first = first_on.setdefault(query_id, number)
    if first != number:
        raise GoldenError(
            queries_file,
            f"line {number}",
            f"query id {query_id!r} again (first on line {first})",
            "one line per query id: delete one of the two (which text would be asked?)",
        )
    return query_id


def _require_texts(
    judgments: Mapping[str, object], texts: Mapping[str, object], qrels: Path, queries_file: Path
) -> None:
    """Every judged query has its text in ``queries_file`` (the first one missing is named)."""
    missing = next((query_id for query_id in judgments if query_id not in texts), None)
    if missing is not None:
        raise GoldenError(
            qrels,
            "",
            f"query id {missing!r} has judgments but no text",
            f"add it to {queries_file}",
        )


def _trec_queries_candidates(qrels: Path) -> list[Path]:
    """Where a TREC qrels file's queries may be, in the order they are looked for."""
    stem = qrels.name.split(".")[0]
    names = (f"{stem}.queries.tsv", "queries.tsv", "topics.tsv")
    return [qrels.parent / name for name in names]


def no_queries_file(qrels: Path, expected: Path, reader: str = "") -> GoldenError:
    """TREC qrels read without a queries file, for what needs the query texts: ``reader``
    names it (the LLM judge, downstream labels; "": a retriever, which a precomputed run
    replaces)."""
    searched = not reader
    return GoldenError(
        qrels,
        "",
        "TREC qrels need a queries file beside them"
        + ("" if searched else f": {reader} reads each query's text"),
        f"write {expected} with one QUERY_ID<TAB>TEXT line per query"
        + (
            " (a precomputed run needs none: --retrieval-run, pytest-retrieval eval)"
            if searched
            else ""
        ),
    )


# --------------------------------------------------------------------------------------------
# corpus files


def load_corpus(path: str | Path) -> dict[str, str]:
    """Doc id -> text, for the LLM judge: BEIR ``corpus.jsonl`` (``_id``, ``title``, ``text``
    per line; ``id`` also accepted) or a JSON object ``{"doc-id": "text", ...}``."""
    source = _corpus_file(path)
    if source.suffix == ".json":
        with _as_corpus():
            return _json_corpus(source)
    corpus: dict[str, str] = {}
    with _as_corpus(), paused_gc():
        for number, line in enumerate(text_lines(read_text(source)), start=1):
            if line.strip():
                doc_id, body = _corpus_record(source, line, number)
                corpus[doc_id] = body
    return corpus


#: a BEIR corpus line that starts with a plain string (or integer) "_id"
_LEADING_ID = re.compile(r'\s*\{\s*"_id"\s*:\s*(?:"([^"\\]*)"|(-?[1-9][0-9]*|0))\s*[,}]')


def load_corpus_ids(path: str | Path) -> set[str]:
    """The doc ids of a corpus, exactly as :func:`load_corpus` keys them, without its texts.

    Made to be cheap on big corpora: the file is streamed, and a line that starts with its
    ``"_id"`` (as BEIR writes them) costs a regex match, not a JSON parse; the rest of such a
    line is not checked. Other lines are parsed and checked as :func:`load_corpus` does.
    """
    source = _corpus_file(path)
    if source.suffix == ".json":
        return set(_json_corpus(source))
    ids: set[str] = set()
    number = 0
    with (
        _as_corpus(),
        _reading(source, lambda _: f"after line {number}"),
        source.open(encoding="utf-8-sig") as handle,
        paused_gc(),
    ):
        for number, line in enumerate(handle, start=1):
            match = _LEADING_ID.match(line)
            if match is not None:
                ids.add(match[1] if match[1] is not None else match[2])
            elif line.strip():
                ids.add(_corpus_record(source, line, number)[0])
    return ids


def _corpus_file(path: str | Path) -> Path:
    source = Path(path)
    if not source.is_file():
        raise GoldenError(source, "", "no such file", "fix the path", kind="corpus")
    return source


@contextmanager
def _as_corpus() -> Iterator[None]:
    """Errors reading a corpus name it a corpus (they are raised as a golden set's)."""
    try:
        yield
    except GoldenError as exc:
        raise GoldenError(exc.source, exc.where, exc.problem, exc.fix, kind="corpus") from None


def _json_corpus(source: Path) -> dict[str, str]:
    document = parse_json(source, read_text(source))
    if not isinstance(document, dict) or not all(isinstance(v, str) for v in document.values()):
        raise GoldenError(
            source, "/", "a JSON corpus must be an object of doc id -> text", "fix its shape"
        )
    return {str(key): value for key, value in document.items()}


def _corpus_record(source: Path, line: str, number: int) -> tuple[str, str]:
    """One ``corpus.jsonl`` line -> (doc id, title and text)."""
    record = parse_json(source, line, line=number)
    doc_id = record.get("_id", record.get("id")) if isinstance(record, dict) else None
    body = record.get("text") if isinstance(record, dict) else None
    if doc_id is None or not isinstance(body, str):
        raise GoldenError(
            source,
            f"line {number}",
            "a corpus line needs an id (_id or id) and a text",
            'write {"_id": "doc-1", "title": "...", "text": "..."}',
        )
    title = record.get("title")
    return str(doc_id), f"{title}\n{body}" if isinstance(title, str) and title else body
