"""Issue 39: every reader of a file a user hands over, fuzzed. Any bytes, any JSON-ish text,
and files we wrote with one thing broken (nested 2,000 deep, a key twice, a quote in an id,
an odd grade, a lone surrogate, a NUL, a BOM, CRLF, cut short) give a result or exactly one
:class:`RetrievalError` whose message names the file: never another exception, a
RecursionError or a hang. Bounded: few examples, no deadline (a loaded machine is slow, and
no test here times anything); FUZZ_EXAMPLES=1000 in the environment searches longer."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS, GOLDEN
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_retrieval import evaluate, load_golden
from pytest_retrieval.baseline import read as read_baseline
from pytest_retrieval.baseline import render
from pytest_retrieval.builder.corpus import read_corpus
from pytest_retrieval.builder.pool import read_report
from pytest_retrieval.builder.review_file import HEADER_KEY, REVIEW_VERSION, read_review
from pytest_retrieval.cli import main
from pytest_retrieval.compare import entry_from_result
from pytest_retrieval.errors import RetrievalError
from pytest_retrieval.formats import load_corpus, load_corpus_ids
from pytest_retrieval.gate import session_verdict
from pytest_retrieval.judge.calibration import load_labels
from pytest_retrieval.render.json import dumps, json_report
from pytest_retrieval.runfile import read_run

#: the two inputs no run may miss: nesting past the decoder's recursion limit, a key twice
DEEP = b'{"queries": ' + b"[" * 100_000
TWICE = b'{"queries": [], "evaluations": [], "format": "x", "format": "y"}'

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "40")),
    # the same examples on every CI run (a gate stays green or red for a reason);
    # FUZZ_EXAMPLES=2500 draws fresh ones
    derandomize="FUZZ_EXAMPLES" not in os.environ,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ------------------------------------------------------------------------------ strategies

#: ids and texts as careless exports and attackers write them
IDS = st.sampled_from(
    ["q1", "q2", "d1", "d2", 'd"1', '"', "", " ", "q\x00", "\ud800", "a\tb", "\u2028", "é", "0"]
)
GRADES = st.sampled_from(
    ["0", "1", "2", "-1", "+3", "1_0", "\uff12", "1.0", "1e2", "", "9" * 40, "NaN", " 1", "\x00"]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats()
    | st.text(max_size=6)
    | IDS
)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(IDS, inner, max_size=3)
)
#: pieces that JSON-ish text is made of
PIECES = st.sampled_from(
    [
        *'[]{}",:0123456789.-+eE \t\r\n\\/',
        *("true", "false", "null", "NaN", "Infinity", "\x00", "\ufeff", "\u2028", "\\ud800"),
        *('"id"', '"query"', '"relevant"', '"queries"', '"_id"', '"text"', '"hits"', '"score"'),
        *('"format"', '"pytest-retrieval-baseline"', '"evaluations"'),
    ]
)
JSONISH = st.lists(PIECES, max_size=60).map("".join)

#: what breaks a file we wrote: (kind, where in it)
MUTATIONS = st.tuples(
    st.sampled_from(
        ["none", "bom", "crlf", "nul", "cut", "twice", "deep", "deep-closed", "surrogate", "junk"]
    ),
    st.integers(0, 1 << 20),
    st.sampled_from([1, 99, 101, 1_500, 100_000]),  # at, past our limit; past the decoder's
)


def mutated(text: str, mutation: tuple[str, int, int]) -> bytes:
    """``text`` with one thing broken, as the bytes of a file."""
    kind, at, depth = mutation
    at = at % (len(text) + 1)
    if kind == "bom":
        text = "\ufeff" + text
    elif kind == "crlf":
        text = text.replace("\n", "\r\n")
    elif kind == "nul":
        text = text[:at] + "\x00" + text[at:]
    elif kind == "cut":
        text = text[:at]
    elif kind == "twice":  # the first key of some object, written twice
        brace = text.find('{"', at) if text.find('{"', at) >= 0 else text.find('{"')
        end = text.find(",", brace)
        if brace >= 0 and end > brace:
            text = text[: end + 1] + " " + text[brace + 1 : end + 1] + text[end + 1 :]
    elif kind == "deep":
        text = text[:at] + "[" * depth + text[at:]
    elif kind == "deep-closed":
        text = text[:at] + "[" * depth + "]" * depth + text[at:]
    elif kind == "surrogate":
        text = text[:at] + "\ud800" + text[at:]
    elif kind == "junk":
        text = text[:at] + '"]}{\t' + text[at:]
    return text.encode("utf-8", "surrogatepass")


def json_file(values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Files of ``values`` as JSON (some ASCII-escaped, some not), each broken one way;
    random bytes; JSON-ish text."""
    written = st.builds(
        lambda value, ascii_only, mutation: mutated(
            json.dumps(value, ensure_ascii=ascii_only, indent=1 if ascii_only else None), mutation
        ),
        values,
        st.booleans(),
        MUTATIONS,
    )
    return written | st.binary(max_size=200) | JSONISH.map(_encoded)


def lines_file(lines: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Files of ``lines`` (one broken one way), random bytes, JSON-ish text."""
    written = st.builds(
        lambda rows, mutation: mutated("\n".join(rows) + "\n", mutation),
        st.lists(lines, min_size=1, max_size=6),
        MUTATIONS,
    )
    return written | st.binary(max_size=200) | JSONISH.map(_encoded)


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


ENTRY = st.fixed_dictionaries(
    {"query": IDS | st.text(max_size=8)},
    optional={
        "id": IDS | st.integers(0, 3),
        "relevant": st.lists(IDS, max_size=3) | st.dictionaries(IDS, st.integers(-2, 5)) | VALUES,
        "tags": st.lists(IDS, max_size=2),
        "params": st.dictionaries(IDS, SCALARS, max_size=2),
        "metadata": VALUES,
    },
)
GOLDEN_JSON = json_file(
    st.fixed_dictionaries(
        {"queries": st.lists(ENTRY, max_size=4)},
        optional={"k": st.integers(-1, 200) | SCALARS, "name": SCALARS, "metrics": VALUES},
    )
    | st.lists(ENTRY, max_size=4)
    | VALUES
)
GOLDEN_LINES = lines_file(ENTRY.map(json.dumps) | VALUES.map(json.dumps))
HITS = (
    st.lists(IDS, max_size=4)
    | st.dictionaries(IDS, st.floats() | st.integers() | SCALARS, max_size=4)
    | st.lists(st.fixed_dictionaries({"id": IDS}, optional={"score": SCALARS, "text": SCALARS}))
    | VALUES
)
RUN_JSON = json_file(st.dictionaries(IDS, HITS, max_size=4) | VALUES)
RUN_LINES = lines_file(
    st.fixed_dictionaries({"id": IDS, "hits": HITS}).map(json.dumps) | VALUES.map(json.dumps)
)
FIELD = IDS | GRADES | st.sampled_from(["Q0", "0", "1.5", "-inf", "nan", "1e400", "#", "run"])
TREC_RUN = lines_file(st.lists(FIELD, min_size=0, max_size=7).map(" ".join))
QRELS = lines_file(
    st.tuples(IDS, st.sampled_from(["0", "Q0", "x"]), IDS, GRADES).map(" ".join)
    | st.lists(FIELD, max_size=6).map(" ".join)
)
BEIR_QRELS = lines_file(
    st.tuples(IDS, IDS, GRADES).map("\t".join) | st.lists(FIELD, max_size=4).map("\t".join)
)
QUERIES_TSV = lines_file(st.tuples(IDS, IDS | st.text(max_size=6)).map("\t".join) | JSONISH)
BEIR_QUERIES = lines_file(
    st.fixed_dictionaries({"_id": IDS | st.integers(0, 3), "text": IDS | SCALARS}).map(json.dumps)
    | VALUES.map(json.dumps)
)
LABELS = json_file(
    st.lists(
        st.fixed_dictionaries(
            {"query": IDS, "text": IDS, "on_topic": st.booleans() | SCALARS},
            optional={"criteria": SCALARS, "doc_id": SCALARS},
        ),
        max_size=3,
    )
    | VALUES
)
CORPUS_LINES = lines_file(
    st.fixed_dictionaries({"_id": IDS | SCALARS, "text": IDS | SCALARS}).map(json.dumps)
    | VALUES.map(json.dumps)
)


@cache
def _recorded() -> tuple[str, str]:
    """A real report and a real baseline of the keyword retriever on the helpers' golden set."""
    folder = Path(tempfile.mkdtemp())
    (folder / "golden.json").write_text(json.dumps(GOLDEN), "utf-8")
    golden = load_golden(folder / "golden.json")

    def search(query: str, k: int) -> list[str]:
        words = set(query.split())
        return sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]

    result = evaluate(search, golden, retriever_id="kw")
    report = dumps(json_report([result], session_verdict([result], ())))
    entry = entry_from_result(result, {}, "2026-01-01T00:00:00", golden_key="golden.json")
    return report, render({entry.key: entry})


def recorded_file(which: int) -> st.SearchStrategy[bytes]:
    """A file we wrote (0: a report, 1: a baseline), broken one way or with a value replaced."""
    edited = st.builds(_replace_value, st.integers(0, 1 << 20), VALUES)
    return st.builds(
        lambda mutation, edit: mutated(edit(_recorded()[which]), mutation),
        MUTATIONS,
        st.just(lambda text: text) | edited,
    )


def _replace_value(at: int, value: Any) -> Callable[[str], str]:
    """An edit: the JSON value after the ``at``-th colon replaced by ``value``."""

    def edit(text: str) -> str:
        colons = [i for i, c in enumerate(text) if c == ":"]
        start = colons[at % len(colons)] + 1
        try:
            _, end = json.JSONDecoder().raw_decode(text, start + 1)
        except ValueError:
            return text
        return text[:start] + " " + json.dumps(value) + text[end:]

    return edit


REVIEW = lines_file(
    st.just(json.dumps({HEADER_KEY: REVIEW_VERSION, "golden": "golden.json"}))
    | st.fixed_dictionaries(
        {
            name: SCALARS
            for name in ("query_id", "query", "doc_id", "text", "kind", "current", "grade")
        }
        | {n: SCALARS for n in ("reason", "confidence", "rank", "sources", "decision")}
    ).map(json.dumps)
    | VALUES.map(json.dumps)
)

# ------------------------------------------------------------------------------ the check


@contextlib.contextmanager
def folder() -> Iterator[Path]:
    """A fresh working folder (hypothesis runs many examples in one test call)."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory() as name:
        os.chdir(name)
        try:
            yield Path(name)
        finally:
            os.chdir(before)


def read_or_one_error(named: Path, read: Callable[[], object]) -> None:
    """``read()`` returns, or raises one RetrievalError naming ``named``'s file; anything
    else (another exception, a RecursionError) fails the test as it is."""
    try:
        read()
    except RetrievalError as exc:
        assert named.name in str(exc), str(exc)


def command_or_one_message(named: Path, *argv: str) -> None:
    """The command exits 0, or exits 1 or 2 with a message naming the file, no traceback."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exc:
            status = int(exc.code or 0)
    message = err.getvalue()
    assert status in (0, 1, 2), message
    assert status == 0 or named.name in message, message
    assert "Traceback" not in message


# ------------------------------------------------------------------------------ the readers


@FUZZ
@example(DEEP)
@example(TWICE)
@given(GOLDEN_JSON)
def test_golden_json(data: bytes) -> None:
    with folder() as here:
        (here / "golden.json").write_bytes(data)
        read_or_one_error(here / "golden.json", lambda: load_golden(here / "golden.json"))


@FUZZ
@example(DEEP)
@example(TWICE)
@given(GOLDEN_LINES)
def test_golden_jsonl(data: bytes) -> None:
    with folder() as here:
        (here / "golden.jsonl").write_bytes(data)
        read_or_one_error(here / "golden.jsonl", lambda: load_golden(here / "golden.jsonl"))


@FUZZ
@given(BEIR_QUERIES, BEIR_QRELS, st.booleans())
def test_beir_folder(queries: bytes, qrels: bytes, fuzz_queries: bool) -> None:
    with folder() as here:
        (here / "b" / "qrels").mkdir(parents=True)
        good_queries = b'{"_id": "q1", "text": "apple"}\n'
        good_qrels = b"query-id\tcorpus-id\tscore\nq1\td1\t1\n"
        (here / "b" / "queries.jsonl").write_bytes(queries if fuzz_queries else good_queries)
        (here / "b" / "qrels" / "test.tsv").write_bytes(good_qrels if fuzz_queries else qrels)
        named = here / "b" / ("queries.jsonl" if fuzz_queries else "test.tsv")
        read_or_one_error(named, lambda: load_golden(here / "b"))


@FUZZ
@given(QRELS, QUERIES_TSV, st.booleans())
def test_trec_qrels_and_queries_tsv(qrels: bytes, queries: bytes, fuzz_queries: bool) -> None:
    with folder() as here:
        (here / "run.qrels").write_bytes(b"q1 0 d1 1\n" if fuzz_queries else qrels)
        (here / "queries.tsv").write_bytes(queries if fuzz_queries else b"q1\tapple\n")
        named = here / ("queries.tsv" if fuzz_queries else "run.qrels")
        read_or_one_error(named, lambda: load_golden(here / "run.qrels"))


@FUZZ
@given(TREC_RUN)
def test_trec_run(data: bytes) -> None:
    with folder() as here:
        (here / "bm25.trec").write_bytes(data)
        read_or_one_error(here / "bm25.trec", lambda: read_run(here / "bm25.trec"))


@FUZZ
@example(DEEP, "bm25.json")
@example(TWICE, "bm25.json")
@given(RUN_JSON, st.sampled_from(["bm25.json", "bm25.run"]))
def test_json_run(data: bytes, name: str) -> None:
    with folder() as here:
        (here / name).write_bytes(data)
        read_or_one_error(here / name, lambda: read_run(here / name))


@FUZZ
@example(DEEP)
@example(TWICE)
@given(RUN_LINES)
def test_jsonl_run(data: bytes) -> None:
    with folder() as here:
        (here / "bm25.jsonl").write_bytes(data)
        read_or_one_error(here / "bm25.jsonl", lambda: read_run(here / "bm25.jsonl"))


@FUZZ
@example(DEEP, "g.baseline.json")
@example(TWICE, "g.baseline.json")
@given(recorded_file(1) | json_file(VALUES), st.sampled_from(["g.baseline.json", "b.json"]))
def test_baseline(data: bytes, name: str) -> None:
    with folder() as here:
        (here / name).write_bytes(data)
        read_or_one_error(here / name, lambda: read_baseline(here / name))


@FUZZ
@example(DEEP)
@example(TWICE)
@given(recorded_file(0) | recorded_file(1) | json_file(VALUES))
def test_show(data: bytes) -> None:
    with folder() as here:
        (here / "file.json").write_bytes(data)
        command_or_one_message(here / "file.json", "show", "file.json")


@FUZZ
@example(DEEP, "combine")
@example(TWICE, "combine")
@given(recorded_file(0) | json_file(VALUES), st.sampled_from(["combine", "diff", "pool"]))
def test_reports_read_by_combine_diff_and_pool(data: bytes, command: str) -> None:
    with folder() as here:
        (here / "r.json").write_bytes(data)
        read_or_one_error(here / "r.json", lambda: read_report(here / "r.json"))
        if command == "combine":
            command_or_one_message(here / "r.json", "combine", "r.json")
        elif command == "diff":
            (here / "golden.json").write_text(json.dumps(GOLDEN), "utf-8")
            (here / "main.json").write_text(_recorded()[0], "utf-8")
            command_or_one_message(here / "r.json", "diff", "main.json", "r.json")


@FUZZ
@example(DEEP)
@example(TWICE)
@given(REVIEW)
def test_review_file(data: bytes) -> None:
    with folder() as here:
        (here / "review.jsonl").write_bytes(data)
        read_or_one_error(here / "review.jsonl", lambda: read_review(here / "review.jsonl"))


@FUZZ
@example(DEEP)
@example(TWICE)
@given(LABELS)
def test_judge_calibration_labels(data: bytes) -> None:
    with folder() as here:
        (here / "labels.json").write_bytes(data)
        read_or_one_error(here / "labels.json", lambda: load_labels(here / "labels.json"))


@FUZZ
@given(CORPUS_LINES | json_file(st.dictionaries(IDS, IDS | SCALARS) | VALUES), st.booleans())
def test_corpus_files(data: bytes, jsonl: bool) -> None:
    with folder() as here:
        corpus = here / ("corpus.jsonl" if jsonl else "corpus.json")
        corpus.write_bytes(data)
        read_or_one_error(corpus, lambda: load_corpus(corpus))
        read_or_one_error(corpus, lambda: load_corpus_ids(corpus))
        read_or_one_error(corpus, lambda: read_corpus(corpus))


@pytest.mark.parametrize("depth", [101, 5_000, 200_000])
def test_deep_nesting_in_every_reader_is_one_error(depth: int) -> None:
    """The case the fuzzing must never miss, in each reader, at three depths."""
    deep = ("[" * depth).encode()
    readers: list[tuple[str, Callable[[Path], object]]] = [
        ("golden.json", load_golden),
        ("golden.jsonl", load_golden),
        ("bm25.json", read_run),
        ("bm25.jsonl", read_run),
        ("g.baseline.json", read_baseline),
        ("r.json", read_report),
        ("review.jsonl", read_review),
        ("labels.json", load_labels),
        ("corpus.jsonl", load_corpus),
        ("corpus.json", read_corpus),
    ]
    with folder() as here:
        for name, reader in readers:
            (here / name).write_bytes(deep)
            with pytest.raises(RetrievalError, match="nested deeper than 100 levels") as caught:
                reader(here / name)
            assert name in str(caught.value)
