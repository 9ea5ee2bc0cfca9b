"""Precomputed runs: read a run file into ranked hits per query, match it to a golden set,
and write what a retriever returned as a TREC run. Pure: no pytest.

Formats, told apart by content (and by a ``.json``/``.jsonl``/``.ndjson`` name, optionally
``.gz``-compressed):

- TREC run: ``qid Q0 doc rank score tag``, six whitespace-separated fields a line; blank
  lines and ``#`` comment lines are skipped (as trec_eval 10 skips them). The rank, ``Q0``
  and tag fields are ignored, as trec_eval ignores them.
- JSON, scores: ``{"q1": {"d3": 12.5, "d1": 9.0}}`` (ranx, pytrec_eval).
- JSON, lists: ``{"q1": ["d3", "d1"]}``.
- JSONL: one query a line, ``{"id": "q1", "hits": [...]}`` (other keys, e.g. the query's
  text, are ignored); ``hits`` is a list or a ``{doc: score}`` object as in JSON.

A hit in a list is a doc-id string or ``{"id": doc, "score": number, "text": string}``
(score and text optional; a text is what an LLM judge reads). Ids are strings, never coerced.

**Order.** Scores alone (TREC, ``{doc: score}``) are ranked as trec_eval ranks them: score
descending, ties by doc id descending (:func:`~.metrics.trec_order`; :func:`sorts_after` is
the same rule between two hits). A list keeps its order: its scores are shown, never used
to re-rank. (Scores are compared as 64-bit floats, as trec_eval does since 10.0; pytrec_eval
and trec_eval 9 hold 32-bit floats, so there scores apart only past ~7 significant digits
tie. :func:`write_trec` writes scores that rank the same in both.)

**Checks.** Every problem is a :class:`RunFileError` naming the file, the line (TREC, JSONL)
or JSON pointer, and the fix. A doc twice for one query is an error in TREC and ``{doc:
score}`` forms (trec_eval and pytrec_eval refuse it too); in a list, as in a retriever's
answer, the first rank counts and repeats are dropped and counted (``QueryRun.duplicates``).
Scores must be finite numbers (no NaN: it has no place in trec_eval's order).

**Matching a golden set** (:func:`runs_for`, :func:`missing_queries`): a run query the golden
set lacks is ignored; a golden query the run lacks is evaluated as returning nothing (it
scores 0, as with ``trec_eval -c``) and listed, so the verdict warns of it; a run that
shares no query id with the golden set is an error (it is for another set).
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import math
import os
import re
import struct
import zlib
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from ._internal.gc import paused_gc
from ._internal.io import OutsideLinkError, link_problem, relative, text_lines
from ._internal.json import MAX_DEPTH, depth_beyond
from .errors import RunFileError
from .formats import has_surrogate_escape, lone_surrogate
from .hits import QueryRun
from .metrics import trec_order

if TYPE_CHECKING:
    from .golden import GoldenSet
    from .results import EvaluationResult

TREC_LAYOUT = "qid Q0 doc rank score tag"
#: how many ids a message lists before "..."
SHOWN = 3
_GZIP = b"\x1f\x8b"
#: longest line read (characters): a TREC line is well under a kilobyte, a JSONL query's hits
#: with their texts some megabytes; a "line" without an end (``/dev/zero``) is no run file
MAX_LINE = 64 * 2**20
#: largest JSON or JSONL run read (characters): it is read whole
MAX_DOCUMENT = 2**31
_CHUNK = 2**20
_JSONL_NAMES = (".jsonl", ".ndjson")
#: the extensions (:func:`format_suffix`) a run file is read as JSON by
JSON_NAMES = (".json", *_JSONL_NAMES)
_FLOAT32 = struct.Struct("f")
_SPACE = re.compile(r"\s")


@dataclass(frozen=True)
class Run:
    """A run file, read: each query id's ranked hits (evaluation order, see the module doc)."""

    path: Path
    format: str  # "trec", "json" or "jsonl"
    queries: dict[str, QueryRun]
    #: queries with tied scores, ranked by doc id among the ties (trec_eval's rule): the
    #: TREC rank column does not break them
    tied: int = 0

    @property
    def name(self) -> str:
        """The retriever id of this run (:func:`run_name`); baselines are keyed by it."""
        return run_name(self.path)


def ties_warning(run: Run) -> str:
    """What pytest and ``eval`` warn of a run with tied scores (``run.tied`` queries)."""
    queries = "query has" if run.tied == 1 else "queries have"
    unread = "the rank column" if run.format == "trec" else "the docs' order in the file"
    return (
        f"run file {relative(run.path)}: {run.tied} {queries} tied scores; among ties the hits "
        f"are ranked by doc id, descending, as trec_eval ranks them ({unread} is not read)"
    )


def run_name(path: Path) -> str:
    """A run file's retriever id: its name without ``.gz`` and its extension
    (``runs/bm25.trec`` -> ``bm25``)."""
    name = path.name.removesuffix(".gz")
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    return stem or name


def read_run(path: str | Path) -> Run:
    """Read a run file in any supported format (module doc); a bad one is a RunFileError."""
    source = Path(path)
    if source.is_dir():
        raise RunFileError(source, "", "is a folder", "pass the run file itself")
    with _reading(source), paused_gc():  # millions of hits: no collector passes over them
        with open(source, "rb") as handle:
            compressed = handle.read(2) == _GZIP
        with _open(source, compressed) as text:
            head = text.read(1)
            skipped = 0
            while head.isspace() and skipped < MAX_LINE:  # an endless blank stream ends too
                head = text.read(1)
                skipped += 1
            if head == "\x00" or head.isspace():
                raise _not_text(source, head)
            suffix = format_suffix(source)
            named_json = suffix in JSON_NAMES
            if head in ("{", "[") or (head and named_json):  # named so: JSON, whatever it holds
                document = _read_document(source, head, text)
                if head not in ("{", "[") and len(document.split("\n", 1)[0].split()) == 6:
                    raise RunFileError(
                        source,
                        "line 1",
                        "a TREC run line in a file named as JSON",
                        f"rename it (e.g. {source.stem}.trec): a {suffix} run is JSON",
                    )
                return _read_json(source, document, suffix in _JSONL_NAMES)
            if not head:
                raise RunFileError(source, "", "is empty", f"write one hit a line: {TREC_LAYOUT}")
            text.seek(0)
            return _read_trec(source, text)


def runs_for(golden: GoldenSet, run: Run, *, part: bool = False) -> list[QueryRun]:
    """One :class:`QueryRun` per golden query, in golden order (for ``evaluate(runs=...)``):
    a query the run lacks returned nothing. Raises RunFileError when the run holds none of
    the golden set's queries, unless ``golden`` is a ``part`` of a set (a shard may miss)."""
    found = run.queries
    chosen = [found.get(query.id) for query in golden.queries]
    if not part and golden.queries and all(hits is None for hits in chosen):
        from .golden import content_id

        fix = "evaluate the run with the golden set it was made for, or use that set's query ids"
        if all(q.id == content_id(q.query, q.params) for q in golden.queries[:3]):
            fix = (
                f'golden set {golden.name}: its entries have no "id", so each has one made '
                "from its query text (q-...): give each entry the id the run uses"
            )
        raise RunFileError(
            run.path,
            "",
            f"none of its {len(found)} query ids is a query of golden set {golden.name} "
            f"(the run has {listed(list(found))}; the golden set {listed(_golden_ids(golden))})",
            fix,
        )
    runs = [QueryRun() if hits is None else hits for hits in chosen]
    for hits in runs:
        hits.latency = math.nan  # a file records no timings: none (n/a), not 0.0 ms
    return runs


def missing_queries(golden: GoldenSet, run: Run) -> tuple[str, ...]:
    """The golden set's query ids the run lacks, in golden order (``EvaluationResult.
    run_missing``: the verdict warns of them)."""
    return tuple(query.id for query in golden.queries if query.id not in run.queries)


def _golden_ids(golden: GoldenSet) -> list[str]:
    return [query.id for query in golden.queries]


# ---------------------------------------------------------------------------- order


def sorts_after(score: float, doc: str, above_score: float, above_doc: str) -> bool:
    """Whether trec_eval ranks (``doc``, ``score``) below (``above_doc``, ``above_score``):
    a lower score, or the same score and a smaller doc id (trec_eval's ``comp_sim_docno``
    compares ids with ``strcmp``: UTF-8 byte order, which is Python's code-point order).
    The pairwise form of :func:`~.metrics.trec_order`."""
    return score < above_score or (score == above_score and doc < above_doc)


def _ranked(scores: dict[str, float], values: list[float]) -> tuple[tuple[str, ...], bool]:
    """``scores``' docs in trec_eval's order, and whether two of them tie (``values``:
    ``scores``' values, in its order)."""
    if all(a > b for a, b in pairwise(values)):  # written in that order, no tie
        return tuple(scores), False
    return tuple(trec_order(scores)), len(set(values)) < len(values)


# ---------------------------------------------------------------------------- TREC


def _not_text(source: Path, head: str) -> RunFileError:
    """A file that starts with a NUL (``/dev/zero``, a binary file) or only blanks."""
    what = "starts with a NUL character" if head == "\x00" else f"holds over {MAX_LINE:,} blanks"
    return RunFileError(
        source,
        "line 1",
        f"{what}: not a run file",
        f"pass a TREC run ({TREC_LAYOUT}, one hit a line), a JSON or a JSONL run",
    )


def _too_long(source: Path, number: int, limit: int, what: str) -> RunFileError:
    return RunFileError(
        source,
        f"line {number}",
        f"{what} longer than {limit:,} characters: not a run file (one without line ends, "
        "such as /dev/zero, is never read to its end)",
        f"pass a TREC run ({TREC_LAYOUT}, one hit a line), a JSON or a JSONL run",
    )


def _read_document(source: Path, head: str, text: IO[str]) -> str:
    """The rest of a JSON (or JSONL) run after its first character ``head``, read in chunks:
    at most :data:`MAX_DOCUMENT` characters, and none a NUL (never in JSON text; a device such
    as /dev/zero would otherwise be read forever)."""
    parts = [head]
    size = lines = 0
    chunk = head
    while chunk:
        nul = chunk.find("\x00")
        if nul >= 0:
            line = lines + chunk.count("\n", 0, nul) + 1
            raise RunFileError(
                source,
                f"line {line}",
                "holds a NUL character: not JSON text",
                "pass a JSON or JSONL run file (or a TREC run, named other than .json/.jsonl)",
            )
        size += len(chunk)
        if size > MAX_DOCUMENT:
            raise _too_long(source, lines + 1, MAX_DOCUMENT, "the file is")
        lines += chunk.count("\n")
        chunk = text.read(_CHUNK)
        parts.append(chunk)
    return "".join(parts)


def _read_trec(source: Path, text: IO[str]) -> Run:
    """A TREC run, line by line (one pass; a duplicate is located by a second). A line is
    read up to :data:`MAX_LINE` characters: a longer one is an error, not a hang."""
    inf = math.inf
    scored: dict[str, dict[str, float]] = {}
    get = scored.get
    limit = MAX_LINE + 1
    for number, line in enumerate(iter(functools.partial(text.readline, limit), ""), start=1):
        if len(line) >= limit:
            raise _too_long(source, number, MAX_LINE, "line is")
        fields = line.split()
        if len(fields) != 6 or fields[0][0] == "#":
            if not fields or fields[0][0] == "#":  # blank or a comment, as trec_eval 10
                continue
            raise _fields_error(source, number, fields)
        qid, _, doc, _, score_text, _ = fields
        try:
            score = float(score_text)
            if "_" in score_text or not score_text.isascii():  # 1_0: trec_eval reads 1
                raise ValueError(score_text)
        except ValueError:
            raise RunFileError(
                source,
                f"line {number}",
                f"score {score_text!r} (the 5th field) is not a decimal number in ASCII digits "
                "(such as 12.5 or -3e-2: trec_eval reads up to the first other character)",
                f"write {TREC_LAYOUT}, with the retriever's score (higher ranks first)",
            ) from None
        if not -inf < score < inf:
            raise RunFileError(
                source,
                f"line {number}",
                f"score {score_text!r} is not a finite number",
                "give every hit a finite score: trec_eval ranks the hits by it",
            )
        hits = get(qid)
        if hits is None:
            hits = scored[qid] = {}
        elif doc in hits:
            raise _duplicate(source, number, qid, doc)
        hits[doc] = score
    if not scored:
        raise RunFileError(source, "", "holds no hits", f"write one hit a line: {TREC_LAYOUT}")
    queries: dict[str, QueryRun] = {}
    tied = 0
    for qid, hits in scored.items():
        ids, ties = _ranked(hits, list(hits.values()))
        tied += ties
        queries[qid] = QueryRun(ids=ids, scores=hits)
    return Run(source, "trec", queries, tied)


def _fields_error(source: Path, number: int, fields: list[str]) -> RunFileError:
    shown = " ".join(fields)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    problem = f"{len(fields)} fields ({shown!r}); a TREC run line has 6: {TREC_LAYOUT}"
    if len(fields) == 4:
        problem += " (4 fields is a qrels line: is this the golden set's qrels?)"
    return RunFileError(source, f"line {number}", problem, f"write each hit as {TREC_LAYOUT}")


def _duplicate(source: Path, number: int, qid: str, doc: str) -> RunFileError:
    """Doc ``doc`` a second time for ``qid`` on line ``number``: read again to name the first."""
    first = "an earlier line"
    with _open(source, _is_gzip(source)) as text:
        for earlier, line in enumerate(text, start=1):
            fields = line.split()
            if len(fields) == 6 and fields[0] == qid and fields[2] == doc:
                first = f"line {earlier}"
                break
    return RunFileError(
        source,
        f"line {number}",
        f"doc {doc!r} is listed twice for query {qid!r} (first on {first})",
        "keep one line per query and doc: which score would count? (trec_eval refuses "
        "duplicates too)",
    )


# ---------------------------------------------------------------------------- JSON


def _read_json(source: Path, document: str, jsonl_name: bool) -> Run:
    """A JSON document, or JSON lines (by name, or when a value follows the first).

    Parsed by the standard decoder with ``object_pairs_hook=list`` (the strict reader of
    :mod:`._json` builds a dict per object: too slow for 10^7 hits), so what it checks is
    checked here: the nesting depth, before parsing (:func:`_bounded`); a key twice in one
    object, where objects are read (:func:`_fields`, and a query or doc twice by name)."""
    _bounded(source, document, jsonl_name)
    if not jsonl_name:
        try:
            data = json.loads(document, object_pairs_hook=list)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data" or format_suffix(source) == ".json":
                raise _json_error(source, exc) from None
        except (ValueError, RecursionError) as exc:
            problem = f"unreadable JSON: {exc}"
            raise RunFileError(source, "", problem, "shorten that value") from None
        else:
            if has_surrogate_escape(document):
                _text_only(source, data, "")
            return _from_document(source, data)
    return _read_jsonl(source, document)


def _text_only(source: Path, data: Any, line: str) -> None:
    """No id or text of the run holds a lone surrogate (``"\\ud800"``: JSON allows the
    escape, UTF-8 cannot write it, and ids are written to reports and baselines); called
    only when the document escapes a surrogate at all."""
    pointer = lone_surrogate(data)
    if pointer is not None:
        raise RunFileError(
            source,
            f"{line}{pointer or '/'}",
            "a lone surrogate escape (such as \\ud800) in a string: not a character",
            "remove it, or write the character it was cut from",
        )


def _bounded(source: Path, document: str, lines: bool) -> None:
    """Nesting deeper than :data:`~._json.MAX_DEPTH` is refused before the decoder recurses
    into it (``[`` x 100,000: a RecursionError), found by one vectorised scan of the whole
    document. In JSON ``lines``, brackets a broken line leaves open add up over the next
    lines: the lines before the deep one are parsed, so the first broken one is named."""
    data = document.encode("utf-8", "surrogatepass")
    offset = depth_beyond(data, MAX_DEPTH)
    if offset is not None:
        line = data.count(b"\n", 0, offset) + 1
        column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
        if lines:  # each line before is at most MAX_DEPTH deep: the decoder reads it
            before = document.split("\n", line - 1)[: line - 1]
            for number, text in enumerate(before, start=1):
                if text.strip():
                    _json_line(source, text, number)
        raise RunFileError(
            source,
            f"line {line}, column {column}",
            f"nested deeper than {MAX_DEPTH} levels",
            "this is not a run file: a run nests 4 levels ({qid: [{id, score}]})",
        )


def _fields(source: Path, pairs: list[Any], where: str) -> dict[str, Any]:
    """A JSON object parsed as (key, value) pairs, as a dict; a key twice is an error at its
    pointer (``where`` is the object's), not the last value kept silently."""
    fields = dict(pairs)
    if len(fields) < len(pairs):
        counts = Counter(key for key, _ in pairs)
        key = next(key for key, _ in pairs if counts[key] > 1)
        raise RunFileError(
            source,
            f"{where}/{_escape(key)}",
            "this key appears twice in one object (JSON readers keep one of the two silently)",
            "keep one of the two",
        )
    return fields


def _json_error(source: Path, exc: json.JSONDecodeError, line: int | None = None) -> RunFileError:
    """``exc`` where it is in the file (``line``: the JSONL line that was parsed)."""
    where = f"line {exc.lineno + (line or 1) - 1}, column {exc.colno}"
    if exc.msg == "Extra data":
        fix = (
            'write one {"id", "hits"} object a line'
            if line
            else "a .json run is one object {qid: ...}; for one query a line, name it .jsonl"
        )
        return RunFileError(source, where, "more JSON after the first value", fix)
    return RunFileError(
        source,
        where,
        f"invalid JSON: {exc.msg}",
        "fix the JSON syntax there (a trailing comma or a missing quote is typical)",
    )


def _from_document(source: Path, data: Any) -> Run:
    """``{qid: hits}`` as parsed with ``object_pairs_hook=list``: objects are lists of
    (key, value) pairs, so repeated keys are still seen."""
    if not _is_object(data):
        raise RunFileError(
            source,
            "/",
            f"a JSON {_kind(data)}; a JSON run is an object by query id",
            'write {"q1": {"d3": 12.5, "d1": 9.0}} or {"q1": ["d3", "d1"]}, or one '
            '{"id": "q1", "hits": [...]} a line in a .jsonl file',
        )
    top = dict(data)
    if isinstance(top.get("id"), str) and "hits" in top:  # a query's hits are never a string
        raise RunFileError(
            source,
            "/",
            'one query\'s record, as a line of a JSONL run holds it ({"id", "hits"}); a '
            ".json run is one object by query id",
            f'name it {_jsonl_name(source)} (one query a line), or write {{"q1": ["d3", "d1"]}}',
        )
    what = (
        "a golden set" if _golden_entries(top.get("queries"))
        else "a pytest-retrieval report" if {"evaluations", "plugin_version"} <= set(top)
        else None
    )  # fmt: skip
    if what is not None:
        raise RunFileError(
            source,
            "/",
            f"{what} (it has {'queries' if what == 'a golden set' else 'evaluations'}), not a run",
            "give the run file (what the retriever returned, {qid: hits}); for pytest-retrieval "
            "eval the golden set comes first: eval GOLDEN RUN",
        )
    queries: dict[str, QueryRun] = {}
    tied = 0
    for qid, value in data:
        if qid in queries:
            raise RunFileError(
                source, _pointer(qid), f"query {qid!r} is given twice", "merge its hits into one"
            )
        if not qid:
            raise RunFileError(source, _pointer(qid), "an empty query id", "name every query")
        queries[qid], ties = _hits(source, value, _pointer(qid))
        tied += ties
    if not queries:
        raise RunFileError(source, "/", "holds no queries", "write {qid: hits, ...}")
    return Run(source, "json", queries, tied)


def _golden_entries(value: Any) -> bool:
    """``value`` is a golden set's ``queries`` (objects with a "query", parsed as lists of
    pairs), not the hits of a query named "queries" (ids, or objects with an "id")."""
    first = value[0] if isinstance(value, list) and value else None
    return isinstance(first, list) and any(
        isinstance(pair, tuple) and pair[0] == "query" for pair in first
    )


def _read_jsonl(source: Path, document: str) -> Run:
    """One ``{"id", "hits"}`` a line."""
    escapes = has_surrogate_escape(document)
    queries: dict[str, QueryRun] = {}
    lines_of: dict[str, int] = {}
    tied = 0
    for number, record in _jsonl_records(source, document):
        if escapes:
            _text_only(source, record, f"line {number}, ")
        fields = _fields(source, record, f"line {number}, ") if _is_object(record) else None
        qid = None if fields is None else fields.get("id")
        if fields is None or not isinstance(qid, str) or not qid or "hits" not in fields:
            raise RunFileError(
                source,
                f"line {number}",
                f"expected an object with a query id string 'id' and 'hits', got {_shown(record)}",
                'write one query a line: {"id": "q1", "hits": ["d3", "d1"]} (hits: doc ids, '
                '{"id", "score", "text"} objects, or a {doc: score} object)',
            )
        if qid in lines_of:
            raise RunFileError(
                source,
                f"line {number}",
                f"query {qid!r} again (first on line {lines_of[qid]})",
                "one line per query: merge its hits into one line",
            )
        lines_of[qid] = number
        queries[qid], ties = _hits(source, fields["hits"], f"line {number}, /hits")
        tied += ties
    if not queries:
        raise RunFileError(source, "", "holds no queries", 'write one {"id", "hits"} a line')
    return Run(source, "jsonl", queries, tied)


#: JSONL lines parsed in one call (a call per line costs more than the parsing)
_BATCH = 4096


def _jsonl_records(source: Path, document: str) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of each non-blank line, parsed a batch of lines at a
    time as one JSON array; a batch that does not parse is parsed line by line, which
    names the line that is not one JSON value."""
    lines = text_lines(document)
    for first in range(0, len(lines), _BATCH):
        numbered = [
            (number, line)
            for number, line in enumerate(lines[first : first + _BATCH], start=first + 1)
            if line.strip()
        ]
        try:
            joined = "[" + ",".join(line for _, line in numbered) + "]"
            batch = json.loads(joined, object_pairs_hook=list)
        except (ValueError, RecursionError):
            batch = None
        if batch is None or len(batch) != len(numbered):  # two values on one line join too
            batch = [_json_line(source, line, number) for number, line in numbered]
        yield from zip((number for number, _ in numbered), batch, strict=True)


def _json_line(source: Path, line: str, number: int) -> Any:
    """One line of a JSONL file, parsed; a RunFileError naming the line if it is not JSON."""
    try:
        return json.loads(line, object_pairs_hook=list)
    except json.JSONDecodeError as exc:
        raise _json_error(source, exc, number) from None
    except (ValueError, RecursionError) as exc:
        raise RunFileError(
            source, f"line {number}", f"unreadable JSON: {exc}", "shorten that value"
        ) from None


def _hits(source: Path, value: Any, where: str) -> tuple[QueryRun, bool]:
    """One query's hits (at ``where``: a JSON pointer, after the line in JSONL):
    ``{doc: score}`` (trec_eval's order) or a list (its order)."""
    if _is_object(value):
        return _scored(source, value, where)
    if not isinstance(value, list):
        raise RunFileError(
            source,
            where,
            f"a query's hits are a list or a {{doc: score}} object, got {_shown(value)}",
            'write ["d3", "d1"] or {"d3": 12.5, "d1": 9.0}',
        )
    if _plain_ids(value):  # no per-hit work
        unique = tuple(dict.fromkeys(value))
        return QueryRun(ids=unique, duplicates=len(value) - len(unique)), False
    quick = _quick_hits(value)
    if quick is not None:
        return quick, False
    ids: list[str] = []
    scores: dict[str, float] = {}
    texts: dict[str, str] = {}
    duplicates = 0
    seen = set()
    for rank, hit in enumerate(value):
        doc: Any
        score: Any
        text: Any
        if isinstance(hit, str):
            doc, score, text = hit, None, None
        elif _is_object(hit):
            fields = _fields(source, hit, f"{where}/{rank}")
            doc, score, text = fields.get("id"), fields.get("score"), fields.get("text")
        else:
            doc = score = text = None
        if not isinstance(doc, str) or not doc:
            raise RunFileError(
                source,
                f"{where}/{rank}",
                f"a hit needs a doc id string, got {_shown(hit)}",
                'write a doc id string or {"id": "d1", "score": 0.5, "text": "..."}: ids are '
                "never converted, so write numbers in quotes",
            )
        if doc in seen:
            duplicates += 1  # the first rank counts, as in a retriever's answer
            continue
        seen.add(doc)
        ids.append(doc)
        if score is not None:
            scores[doc] = _score(source, score, f"{where}/{rank}/score")
        if text is not None:
            if not isinstance(text, str):
                raise RunFileError(
                    source,
                    f"{where}/{rank}/text",
                    f"text {_shown(text)} is not a string",
                    "quote it",
                )
            texts[doc] = text
    return QueryRun(ids=tuple(ids), scores=scores, texts=texts, duplicates=duplicates), False


def _quick_hits(hits: list[Any]) -> QueryRun | None:
    """``{"id", "score", "text"}`` hits read without per-hit checks when quick checks pass
    (objects only, ids unique non-empty strings, scores finite numbers, texts non-empty
    strings);
    None: let the hit-by-hit reading find what is wrong, and where."""
    if set(map(type, hits)) != {list} or not all(hit and type(hit[0]) is tuple for hit in hits):
        return None
    fields = [dict(hit) for hit in hits]
    if sum(map(len, fields)) < sum(map(len, hits)):  # a key twice: named hit by hit
        return None
    ids: list[Any] = [hit.get("id") for hit in fields]
    if not _plain_ids(ids) or len(set(ids)) < len(ids):
        return None
    scores = {doc: hit["score"] for doc, hit in zip(ids, fields, strict=True) if "score" in hit}
    texts = {doc: hit["text"] for doc, hit in zip(ids, fields, strict=True) if "text" in hit}
    if not _finite_numbers(list(scores.values())) or not _plain_ids(list(texts.values())):
        return None
    return QueryRun(
        ids=tuple(ids), scores={doc: float(score) for doc, score in scores.items()}, texts=texts
    )


def _plain_ids(hits: list[Any]) -> bool:
    """Whether ``hits`` are all non-empty strings (a quick check: ``str.join`` refuses
    anything else)."""
    try:
        "".join(hits)
    except TypeError:
        return False
    return "" not in hits


def _scored(source: Path, pairs: list[Any], where: str) -> tuple[QueryRun, bool]:
    """``{doc: score}``, ranked; the checks per doc run only when the quick ones fail."""
    scores = dict(pairs)
    values = list(scores.values())
    types = set(map(type, values))
    if len(scores) < len(pairs) or "" in scores or not _finite_numbers(values, types):
        scores = {}
        for doc, score in pairs:
            place = f"{where}/{_escape(doc)}"
            if doc in scores:
                raise RunFileError(
                    source, place, f"doc {doc!r} is given twice", "keep one score per doc"
                )
            if not doc:
                raise RunFileError(source, place, "an empty doc id", "name every doc")
            scores[doc] = _score(source, score, place)
        values = list(scores.values())
    elif int in types:
        values = [float(value) for value in values]
        scores = dict(zip(scores, values, strict=True))
    ids, ties = _ranked(scores, values)
    return QueryRun(ids=ids, scores=scores), ties


def _finite_numbers(values: list[Any], types: set[type] | None = None) -> bool:
    """Whether every value is a finite int or float (a bool is neither): a quick check; the
    caller checks value by value when it fails (an overflowing sum fails it too).
    ``types``: the values' types, when the caller has them."""
    kinds = set(map(type, values)) if types is None else types
    if not kinds <= {float, int}:
        return False
    try:  # ints as floats: 10**400 and -10**400 sum to 0, but neither is a float
        return math.isfinite(sum(map(float, values)) if int in kinds else sum(values))
    except OverflowError:
        return False


def _score(source: Path, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunFileError(
            source,
            where,
            f"score {_shown(value)} is not a number",
            "write the retriever's score as a JSON number (higher ranks first)",
        )
    try:
        score = float(value)
    except OverflowError:  # an integer beyond any float (1e400 written out)
        score = math.inf
    if not math.isfinite(score):
        raise RunFileError(
            source, where, f"score {_shown(value)} is not a finite number", "give a finite score"
        )
    return score


def _is_object(value: Any) -> bool:
    """A JSON object as ``object_pairs_hook=list`` gives it: a list of (key, value) pairs."""
    return type(value) is list and (not value or type(value[0]) is tuple)


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    return {str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _shown(value: Any) -> str:
    """``value`` as its JSON text (objects as objects), cut short."""
    try:
        text = json.dumps(_plain(value), ensure_ascii=False)
    except ValueError:  # NaN is fine for json.dumps; a cycle cannot happen: a safety net
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(value: Any) -> Any:
    if _is_object(value) and value:
        return {key: _plain(item) for key, item in value}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _pointer(key: str) -> str:
    return "/" + _escape(key)


# ---------------------------------------------------------------------------- writing


def trec_scores(ids: Sequence[str], scores: Mapping[str, float]) -> tuple[list[float], bool]:
    """Scores to write for ``ids`` so that every tool ranks them in list order, and whether
    any of the retriever's own scores had to change.

    Written scores fall strictly: tools break ties differently (trec_eval by doc id
    descending, ir_measures' RR@k by doc id ascending), so no tie is left to them, even
    one in trec_eval's order. trec_eval compares scores as 64-bit floats since 10.0, as
    32-bit floats before (9.0.8), and so does pytrec_eval (ir_measures' default backend):
    scores that differ only past about 7 significant digits tie there. So a hit keeps its
    own score when it is below the hit above in both precisions; else it gets the largest
    32-bit float below the hit above. A hit without a (finite)
    score gets the score above minus 1 (the first hit: the number of hits), or the 32-bit
    float below where 1 is lost to rounding: a list without scores is written n, ..., 1.
    Where 32-bit floats run out (scores beyond +-3.4e38), the list is written n, ..., 1."""
    own = [scores.get(doc) for doc in ids]
    if all(value is not None and math.isfinite(value) for value in own):
        single = array("f", cast("list[float]", own)).tolist()
        if all(a > b for a, b in pairwise(single)):  # strictly falling in 32 bits: as given
            return cast("list[float]", own), False
    written: list[float] = []
    changed = overflow = False
    for given in own:
        mine = given if given is not None and math.isfinite(given) else None
        if not written:
            written.append(float(len(ids)) if mine is None else mine)
            continue
        above = written[-1]
        if mine is not None and _below(mine, above):
            value = mine
        elif mine is None and _single(above - 1.0) < _single(above):
            value = above - 1.0
        else:
            value = _single_below(above)
            changed = changed or mine is not None
            # no 32-bit float below the one above (it is -3.4e38 or -inf): they may tie
            overflow = overflow or not _single(value) < _single(above)
        written.append(value)
    if not overflow or all(map(_below, written[1:], written)):
        return written, changed
    # past a 32-bit float's range (+-3.4e38) scores are infinite there and tie: n..1
    written = [float(len(ids) - position) for position in range(len(ids))]
    return written, any(g is not None and math.isfinite(g) for g in own)


def _single(value: float) -> float:
    """``value`` as a 32-bit float holds it (+-inf beyond its range)."""
    return float(_FLOAT32.unpack(_FLOAT32.pack(value))[0])


def _below(score: float, above: float) -> bool:
    """``score`` below ``above`` both as 64-bit and as 32-bit floats: ranked lower by every
    tool, whatever its precision and its tie rule."""
    return score < above and _single(score) < _single(above)


def _single_below(score: float) -> float:
    """The largest 32-bit float below ``score`` in both precisions (below -3.4e38, where
    32-bit floats end, the next 64-bit float down)."""
    import numpy as np

    with np.errstate(over="ignore"):  # below the lowest 32-bit float: -inf, said nothing
        lower = float(np.nextafter(np.float32(_single(score)), np.float32(-np.inf)))
    return lower if math.isfinite(lower) else math.nextafter(score, -math.inf)


@dataclass(frozen=True)
class Written:
    """What :func:`write_trec` wrote."""

    path: Path
    queries: int  # queries with at least one hit (a query with none has no line)
    hits: int
    adjusted: int  # queries whose own scores were changed to keep their order
    #: hits written with a score of the export's making in queries that have the
    #: retriever's scores for others
    made_up: int = 0


def write_trec(
    path: str | Path, query_ids: Sequence[str], runs: Sequence[QueryRun], tag: str
) -> Written:
    """Write ``runs`` (one per query id, ranked) as a TREC run that trec_eval, ranx,
    pytrec_eval, ir_measures and :func:`read_run` rank exactly as listed: rank = list
    position, score = the retriever's where scores fall strictly, else adjusted
    (:func:`trec_scores`); ``tag``
    names the run (whitespace becomes ``_``). A query that returned nothing has no line.
    Raises ValueError for an empty id or one with whitespace (a TREC line cannot hold it),
    leaving no file."""
    target = Path(path)
    tag = re.sub(r"\s+", "_", tag) or "run"
    queries = hits = adjusted = made_up = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with _writing(temporary, packed=_gz_less(target.name) != target.name) as handle:
            for qid, run in zip(query_ids, runs, strict=True):
                if not run.ids:
                    continue
                _check_ids(qid, run.ids)
                values, changed = trec_scores(run.ids, run.scores)
                handle.writelines(
                    f"{qid} Q0 {doc} {rank} {value!r} {tag}\n"
                    for rank, (doc, value) in enumerate(zip(run.ids, values, strict=True), 1)
                )
                queries += 1
                hits += len(run.ids)
                adjusted += changed
                if run.scores:  # plain ids have no score to lose: ranks are written
                    made_up += sum(doc not in run.scores for doc in run.ids)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return Written(target, queries, hits, adjusted, made_up)


@contextmanager
def _writing(path: Path, packed: bool) -> Iterator[IO[str]]:
    """``path`` opened for text, gzip-compressed when ``packed`` -- with no time stamp nor
    file name in its header, so the same run gives the same bytes. A symlink out of the
    project is not written through (:func:`~._internal.io.link_problem`)."""
    problem = link_problem("the export", path)
    if problem is not None:
        raise OutsideLinkError(problem)
    with open(path, "wb") as raw:
        if not packed:
            with io.TextIOWrapper(raw, encoding="utf-8", newline="\n") as handle:
                yield handle
            return
        zipped = gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0)
        with zipped, io.TextIOWrapper(zipped, encoding="utf-8", newline="\n") as handle:
            yield handle


def write_result(path: str | Path, result: EvaluationResult) -> Written:
    """An evaluation's retrieved lists as a TREC run (:func:`write_trec`), tagged with its
    retriever id. The scores are those the result kept (every hit's when it was evaluated
    with ``all_scores``; else the first ``HIT_DETAIL`` hits'); hits without one get scores
    below the hit above (:func:`trec_scores`)."""
    runs = [QueryRun(ids=query.returned, scores=query.scores) for query in result.queries]
    return write_trec(path, [query.id for query in result.queries], runs, result.retriever_id)


def export_paths(path: Path, evaluations: Sequence[tuple[str, str]]) -> list[Path]:
    """Where each (golden set name, retriever id) evaluation's run goes: ``path`` when there
    is one; else one file each beside it, named by the golden set when there are several
    and by the retriever when there are several (``out.trec`` -> ``out.fruit.bm25.trec``;
    the same pair twice gets ``-2``)."""
    if len(evaluations) == 1:
        return [path]
    goldens = {golden for golden, _ in evaluations}
    retrievers = {retriever for _, retriever in evaluations}
    unzipped = Path(_gz_less(path.name))  # run.trec.gz -> run.bm25.trec.gz
    stem, suffix = unzipped.stem, unzipped.suffix + path.name[len(unzipped.name) :]
    chosen: list[Path] = []
    for golden, retriever in evaluations:
        parts = [golden] * (len(goldens) > 1) + [retriever] * (len(retrievers) > 1)
        name = ".".join(_file_part(part) for part in parts or [retriever])
        target = path.with_name(f"{stem}.{name}{suffix}")
        count = 1
        while target in chosen:
            count += 1
            target = path.with_name(f"{stem}.{name}-{count}{suffix}")
        chosen.append(target)
    return chosen


def _file_part(name: str) -> str:
    """``name`` as part of a file name: only letters, digits, ``.``, ``-`` and ``_``."""
    return re.sub(r"[^\w.-]+", "_", name).strip(".") or "_"


def _check_ids(qid: str, docs: Sequence[str]) -> None:
    """A query's ids fit a TREC line: none empty, none with whitespace (one search for all),
    no query id read as a comment."""
    if qid and "" not in docs and not _SPACE.search(qid + "".join(docs)) and qid[0] != "#":
        return
    if qid.startswith("#"):
        raise ValueError(
            f"query id {qid!r} starts with '#': trec_eval and TREC run readers (this one too) "
            "take such a line for a comment, so the query would be lost on the way back; "
            "rename the query in the golden set"
        )
    for what, value in [("query id", qid), *(("doc id", doc) for doc in docs)]:
        if not value or _SPACE.search(value):
            raise ValueError(
                f"{what} {value!r} (query {qid!r}) is empty or holds whitespace: a TREC run "
                "line cannot hold it"
            )


# ---------------------------------------------------------------------------- files


def _jsonl_name(source: Path) -> str:
    """``one.json`` -> ``one.jsonl``, ``one.json.gz`` -> ``one.jsonl.gz``."""
    plain = Path(_gz_less(source.name))
    return f"{plain.stem}.jsonl{source.name[len(plain.name) :]}"


def format_suffix(source: Path) -> str:
    """The extension that tells the format (``.gz`` aside), lower case."""
    return Path(_gz_less(source.name)).suffix.lower()


def _gz_less(name: str) -> str:
    """``name`` without a ``.gz`` ending (any case)."""
    return name[:-3] if name.lower().endswith(".gz") else name


def _is_gzip(source: Path) -> bool:
    with open(source, "rb") as handle:
        return handle.read(2) == _GZIP


def _open(source: Path, compressed: bool) -> IO[str]:
    if compressed:
        return gzip.open(source, "rt", encoding="utf-8-sig")
    return open(source, encoding="utf-8-sig")


@contextmanager
def _reading(source: Path) -> Iterator[None]:
    """A file that does not exist or is not UTF-8 (gzip) text: one RunFileError."""
    try:
        yield
    except FileNotFoundError:
        raise RunFileError(source, "", "does not exist", "check the path") from None
    except UnicodeDecodeError as exc:
        raise RunFileError(
            source, _undecodable(source), f"not UTF-8 text ({exc.reason})", "save it as UTF-8"
        ) from None
    except (OSError, EOFError, zlib.error) as exc:  # unreadable; a gzip file cut or corrupt
        reason = getattr(exc, "strerror", None) or exc
        raise RunFileError(source, "", f"cannot be read ({reason})", "check the file") from None


def _undecodable(source: Path) -> str:
    """Where the first byte that is not UTF-8 is: ``line N``."""
    opener: Any = gzip.open if _is_gzip(source) else open
    with opener(source, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return f"line {number}"
    return ""


def listed(ids: Iterable[str]) -> str:
    """The first few ids, quoted, and "..." when there are more."""
    chosen = list(ids)
    shown = ", ".join(repr(i) for i in chosen[:SHOWN])
    return shown + (", ..." if len(chosen) > SHOWN else "")
