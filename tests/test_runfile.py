"""Run files: every format read to the same ranked lists, every malformed input a message
naming the file, the place and the fix, trec_eval's ordering rule versus list order, and the
TREC export read back by pytrec_eval with the same metrics as ours."""

from __future__ import annotations

import gzip
import json
import math
import random
import tempfile
import warnings
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_retrieval.errors import ConfigError
from pytest_retrieval.golden import GoldenSet, load_golden
from pytest_retrieval.hits import QueryRun, normalize_hits
from pytest_retrieval.metrics import compute, trec_order
from pytest_retrieval.runfile import (
    Run,
    RunFileError,
    export_paths,
    missing_queries,
    read_run,
    runs_for,
    sorts_after,
    trec_scores,
    write_trec,
)

#: one ranking, written in every format: q1 by score (with a tie), q2 as given; comment
#: and blank lines are skipped (as trec_eval 10 skips them)
TREC = """\
# run: bm25 k1=0.9 b=0.4
q1 Q0 d2 1 0.5 bm25
q1 Q0 d9 2 2.5 bm25
q1 Q0 d3 3 0.5 bm25

  # six words: q9 Q0 d1 1
q2 Q0 b 7 10 bm25
q2 Q0 a 1 -3e-1 other-tag
"""
#: trec_eval's order of TREC: q1 by score, the 0.5 tie by doc id descending (d3 > d2)
EXPECTED = {"q1": ["d9", "d3", "d2"], "q2": ["b", "a"]}
SCORES = {"q1": {"d2": 0.5, "d9": 2.5, "d3": 0.5}, "q2": {"b": 10.0, "a": -0.3}}


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def ranked(run: Run) -> dict[str, list[str]]:
    return {qid: list(hits.ids) for qid, hits in run.queries.items()}


# ---------------------------------------------------------------------------- formats


def test_trec_is_ranked_as_trec_eval_ranks_it(tmp_path: Path) -> None:
    run = read_run(write(tmp_path, "bm25.trec", TREC))
    assert (run.format, run.name) == ("trec", "bm25")
    assert ranked(run) == EXPECTED  # the rank column (7, 1) and the tags are not read
    assert {qid: hits.scores for qid, hits in run.queries.items()} == SCORES
    assert run.tied == 1  # q1's 0.5s


def test_trec_order_is_trec_evals_own(tmp_path: Path) -> None:
    """The order read is the one pytrec_eval (trec_eval's C code) scores: with one relevant
    doc, its reciprocal rank names its place."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    lines = [
        f"q Q0 {doc} 1 {score} t"
        for doc, score in [("a", 1), ("B", 1), ("c", 2), ("aa", 1), ("ä", 1), ("b", 1), ("d", -1)]
    ]
    run = read_run(write(tmp_path, "r.trec", "\n".join(lines)))
    order = run.queries["q"].ids
    assert order == ("c", "ä", "b", "aa", "a", "B", "d")
    for rank, doc in enumerate(order, start=1):
        evaluator = pytrec_eval.RelevanceEvaluator({"q": {doc: 1}}, {"recip_rank"})
        assert evaluator.evaluate({"q": run.queries["q"].scores})["q"]["recip_rank"] == 1 / rank


def test_json_scores_are_ranked_like_trec(tmp_path: Path) -> None:
    run = read_run(write(tmp_path, "run.json", json.dumps(SCORES)))
    assert run.format == "json"
    assert ranked(run) == EXPECTED
    assert run.tied == 1


def test_lists_keep_their_order_and_scores_never_reorder(tmp_path: Path) -> None:
    data = {
        "q1": ["d2", {"id": "d9", "score": 9.0, "text": "nine"}, {"id": "d3", "score": 99}],
        "q2": [],
    }
    run = read_run(write(tmp_path, "lists.json", json.dumps(data)))
    assert ranked(run) == {"q1": ["d2", "d9", "d3"], "q2": []}
    assert run.queries["q1"].scores == {"d9": 9.0, "d3": 99.0}
    assert run.queries["q1"].texts == {"d9": "nine"}
    assert run.tied == 0


def test_a_repeated_doc_in_a_list_counts_at_its_first_rank(tmp_path: Path) -> None:
    """As in a retriever's answer (hits.normalize_hits): dropped and counted."""
    run = read_run(write(tmp_path, "r.json", '{"q": ["a", "b", "a", {"id": "b"}, "c"]}'))
    assert run.queries["q"].ids == ("a", "b", "c")
    assert run.queries["q"].duplicates == 2


hit_lists = st.lists(
    st.sampled_from(["a", "b", "c", "é"])
    | st.fixed_dictionaries(
        {"id": st.sampled_from(["a", "b", "c", "é"])},
        optional={
            "score": st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False),
            "text": st.text(max_size=3),
        },
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(hit_lists)
def test_a_list_reads_as_the_retriever_path_reads_it(hits: list[Any]) -> None:
    """A hit list in a run file is what the same list returned by a retriever is
    (hits.normalize_hits): ids at their first rank, repeats counted, scores, texts."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.jsonl"
        path.write_text(json.dumps({"id": "q", "hits": hits}) + "\n", encoding="utf-8")
        got = read_run(path).queries["q"]
    expected = normalize_hits(hits, 1000)
    assert (got.ids, got.duplicates, got.texts) == (
        expected.ids,
        expected.duplicates,
        expected.texts,
    )
    assert got.scores == expected.scores
    assert all(type(score) is float for score in got.scores.values())


@pytest.mark.parametrize("name", ["run.jsonl", "run.ndjson", "run.txt", "run"])
def test_jsonl_by_name_or_by_content(tmp_path: Path, name: str) -> None:
    lines = [
        {"id": "q1", "query": "ignored", "hits": {"d2": 0.5, "d9": 2.5, "d3": 0.5}},
        {"id": "q2", "hits": ["b", {"id": "a", "score": -0.3}]},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n\n"
    run = read_run(write(tmp_path, name, text))
    assert run.format == "jsonl"
    assert ranked(run) == EXPECTED


def test_one_line_jsonl_needs_its_name(tmp_path: Path) -> None:
    text = '{"id": "q1", "hits": ["d1"]}\n'
    assert ranked(read_run(write(tmp_path, "one.jsonl", text))) == {"q1": ["d1"]}
    with pytest.raises(RunFileError) as raised:  # as JSON: a run of queries "id" and "hits"
        read_run(write(tmp_path, "one.json", text))
    assert str(raised.value).endswith(
        '/: one query\'s record, as a line of a JSONL run holds it ({"id", "hits"}); a '
        ".json run is one object by query id\n  fix: name it one.jsonl (one query a line), or "
        'write {"q1": ["d3", "d1"]}'
    )
    gz = tmp_path / "one.json.gz"  # with more keys, compressed
    gz.write_bytes(gzip.compress(b'{"id": "q1", "query": "apple", "hits": ["d1"]}'))
    with pytest.raises(RunFileError, match=r"fix: name it one\.jsonl\.gz \(one query a line\)"):
        read_run(gz)
    # queries that are named "id" and "hits" are still a JSON run
    both = '{"id": ["d1"], "hits": ["d2"]}'
    assert ranked(read_run(write(tmp_path, "two.json", both))) == {"id": ["d1"], "hits": ["d2"]}


def test_gzip_and_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "run.trec.gz"
    path.write_bytes(gzip.compress(("\ufeff" + TREC).encode("utf-8")))
    run = read_run(path)
    assert (run.name, ranked(run)) == ("run", EXPECTED)
    jsonl = tmp_path / "run.jsonl.gz"
    jsonl.write_bytes(gzip.compress(b'{"id": "q", "hits": ["x"]}\n'))
    assert (read_run(jsonl).format, read_run(jsonl).name) == ("jsonl", "run")


@pytest.mark.parametrize(
    ("name", "expected"),
    [("bm25.trec", "bm25"), ("bm25-k1.2.trec", "bm25-k1.2"), ("x.jsonl.gz", "x"), ("run", "run")],
)
def test_run_name_is_the_file_name_without_extension(name: str, expected: str) -> None:
    assert Run(Path("runs") / name, "trec", {}).name == expected


# ---------------------------------------------------------------------------- bad input

BAD: list[tuple[str, str | bytes, str]] = [
    ("r.trec", "q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4\n", "r.trec, line 2: 5 fields"),
    ("r.trec", "q1 0 d1 1\n", "line 1: 4 fields ('q1 0 d1 1'); a TREC run line has 6"),
    ("r.trec", "q1 0 d1 1\n", "is this the golden set's qrels?"),
    ("r.trec", "q1 Q0 d1 1 0.5 t extra\n", "line 1: 7 fields"),
    ("r.trec", "\nq1 Q0 d1 1 high t\n", "line 2: score 'high' (the 5th field) is not a decimal"),
    ("r.trec", "q1 Q0 d1 1 1_0 t\n", "score '1_0' (the 5th field) is not a decimal number in"),
    ("r.trec", "q1 Q0 d1 1 0x10 t\n", "score '0x10' (the 5th field) is not a decimal number"),
    ("r.trec", "q1 Q0 d1 1 \u0661\u0660 t\n", "score '\u0661\u0660' (the 5th field) is not a"),
    ("r.trec", "q1 Q0 d1 1 nan t\n", "line 1: score 'nan' is not a finite number"),
    ("r.trec", "q1 Q0 d1 1 -inf t\n", "line 1: score '-inf' is not a finite number"),
    (
        "r.trec",
        "q1 Q0 d1 1 3 t\nq2 Q0 d1 1 3 t\nq1 Q0 d1 2 2 t\n",
        "line 3: doc 'd1' is listed twice for query 'q1' (first on line 1)",
    ),
    ("r.trec", "", "r.trec: is empty"),
    ("r.trec", " \n\t\n", "r.trec: is empty"),
    ("r.trec", b"q1 Q0 d1 1 1 t\nq1 Q0 \xff 2 0 t\n", "r.trec, line 2: not UTF-8 text"),
    ("r.json", '{"q1": ["d1",]}', "r.json, line 1, column 14: invalid JSON"),
    ("r.json", '{"q1": ["d1"]}\n{"q2": []}', "line 2, column 1: more JSON after the first"),
    ("r.json", '["d1", "d2"]', "r.json, /: a JSON list; a JSON run is an object by query id"),
    ("r.json", "{}", "r.json, /: holds no queries"),
    ("r.json", '"hello"', "r.json, /: a JSON string; a JSON run is an object by query id"),
    ("r.JSON", "  42\n", "r.JSON, /: a JSON number; a JSON run is an object by query id"),
    ("r.json", "q1 Q0 d1 1 1 t\n", "r.json, line 1: a TREC run line in a file named as JSON"),
    ("r.json", "q1 Q0 d1\n", "r.json, line 1, column 1: invalid JSON: Expecting value"),
    ("r.jsonl", '"q1"\n', "line 1: expected an object with a query id string 'id'"),
    ("r.json", '{"q1": 3}', "/q1: a query's hits are a list or a {doc: score} object, got 3"),
    ("r.json", '{"q1": {"d1": "0.5"}}', '/q1/d1: score "0.5" is not a number'),
    ("r.json", '{"q1": {"d1": true}}', "/q1/d1: score true is not a number"),
    ("r.json", '{"q1": {"d1": NaN}}', "/q1/d1: score NaN is not a finite number"),
    ("r.json", '{"q1": {"d1": 1e400}}', "/q1/d1: score Infinity is not a finite number"),
    ("r.json", '{"q1": {"d1": 1' + "0" * 400 + "}}", "/q1/d1: score 1000000"),
    ("r.json", '{"q1": {"d1": 1, "d1": 2}}', "/q1/d1: doc 'd1' is given twice"),
    ("r.json", '{"a/b~": {"": 1}}', "/a~1b~0/: an empty doc id"),
    ("r.json", '{"q1": ["a"], "q1": ["b"]}', "/q1: query 'q1' is given twice"),
    ("r.json", '{"": ["a"]}', "r.json, /: an empty query id"),
    ("r.json", '{"q1": ["a", 7]}', "/q1/1: a hit needs a doc id string, got 7"),
    ("r.json", '{"q1": [{"doc": "a"}]}', '/q1/0: a hit needs a doc id string, got {"doc": "a"}'),
    ("r.json", '{"q1": [{"id": "a", "text": 1}]}', "/q1/0/text: text 1 is not a string"),
    ("r.json", '{"q1": [{"id": "a", "score": "x"}]}', '/q1/0/score: score "x" is not a number'),
    ("r.jsonl", '{"id": "q1", "hits": []}\n{"id": "q2", "hits": [}\n', "r.jsonl, line 2, column"),
    ("r.jsonl", '{"hits": ["a"]}\n', "line 1: expected an object with a query id string 'id'"),
    ("r.jsonl", '{"id": 7, "hits": ["a"]}\n', 'got {"id": 7, "hits": ["a"]}'),
    ("r.jsonl", '["q1", ["a"]]\n', "line 1: expected an object"),
    (
        "r.jsonl",
        '{"id": "q1", "hits": []}\n\n{"id": "q1", "hits": ["a"]}\n',
        "line 3: query 'q1' again (first on line 1)",
    ),
    ("r.jsonl", '{"id": "q", "hits": ["a", {"id": ""}]}\n', "line 1, /hits/1: a hit needs"),
    ("r.jsonl", '{"id": "q", "hits": {"a": null}}\n', "line 1, /hits/a: score null"),
    ("r.jsonl", "\n\n", "r.jsonl: is empty"),
]


@pytest.mark.parametrize(("name", "text", "expected"), BAD)
def test_bad_input_names_file_place_and_fix(
    tmp_path: Path, name: str, text: str | bytes, expected: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(RunFileError) as caught:
        read_run(path)
    message = str(caught.value)
    assert message.startswith(f"run file {path}")
    assert expected in message
    assert "\n  fix: " in message
    assert isinstance(caught.value, ConfigError)  # a usage error in the plugin


def test_jsonl_errors_are_named_by_line_in_long_files(tmp_path: Path) -> None:
    """Lines are parsed a batch at a time: an error still names its own line."""
    lines = [json.dumps({"id": f"q{i}", "hits": [f"d{i}"]}) for i in range(1, 5001)]
    lines[4499] = '{"id": "q4500", "hits": ["d1",]}'
    with pytest.raises(RunFileError, match=r"r\.jsonl, line 4500, column 31: invalid JSON"):
        read_run(write(tmp_path, "r.jsonl", "\n".join(lines)))
    lines[4499] = '{"id": "q4500", "hits": []} {"id": "q0", "hits": []}'
    with pytest.raises(RunFileError) as caught:
        read_run(write(tmp_path, "r.jsonl", "\n".join(lines)))
    assert "line 4500, column 29: more JSON after the first value" in str(caught.value)
    assert str(caught.value).endswith('fix: write one {"id", "hits"} object a line')
    lines[4499] = '{"id": "q4500", "hits": [7]}'
    with pytest.raises(RunFileError, match="line 4500, /hits/0: a hit needs a doc id string"):
        read_run(write(tmp_path, "r.jsonl", "\n".join(lines)))


def test_missing_folder_and_broken_gzip(tmp_path: Path) -> None:
    with pytest.raises(RunFileError, match=r"nope\.trec: does not exist"):
        read_run(tmp_path / "nope.trec")
    with pytest.raises(RunFileError, match="is a folder"):
        read_run(tmp_path)
    cut = write(tmp_path, "cut.trec.gz", gzip.compress(TREC.encode())[:-12])
    with pytest.raises(RunFileError, match=r"cut\.trec\.gz: cannot be read"):
        read_run(cut)


# ---------------------------------------------------------------------------- golden sets


def golden_set(tmp_path: Path, ids: list[str]) -> GoldenSet:
    queries = [{"id": qid, "query": f"text {qid}", "relevant": ["d1"]} for qid in ids]
    path = tmp_path / "golden.json"
    path.write_text(json.dumps({"name": "g", "queries": queries}), encoding="utf-8")
    return load_golden(path)


def test_runs_for_follows_the_golden_order(tmp_path: Path) -> None:
    run = read_run(write(tmp_path, "r.trec", TREC + "q9 Q0 x 1 1 t\n"))
    golden = golden_set(tmp_path, ["q2", "q0", "q1"])
    runs = runs_for(golden, run)
    assert [r.ids for r in runs] == [("b", "a"), (), ("d9", "d3", "d2")]
    assert isinstance(runs[1], QueryRun) and runs[1].error is None  # returned nothing
    assert missing_queries(golden, run) == ("q0",)  # q9, not in the golden set: ignored
    assert missing_queries(golden_set(tmp_path, ["q1"]), run) == ()


def test_a_run_for_another_golden_set_is_refused(tmp_path: Path) -> None:
    run = read_run(write(tmp_path, "r.trec", TREC))
    golden = golden_set(tmp_path, ["1", "2", "3", "4"])
    with pytest.raises(RunFileError) as caught:
        runs_for(golden, run)
    assert "none of its 2 query ids is a query of golden set g" in str(caught.value)
    assert "the run has 'q1', 'q2'; the golden set '1', '2', '3', ..." in str(caught.value)
    assert [r.ids for r in runs_for(golden, run, part=True)] == [(), (), (), ()]  # a shard


# ---------------------------------------------------------------------------- order

doc_ids = st.text(alphabet="abAB0äé", min_size=1, max_size=3)
tied_scores = st.sampled_from([-1.0, 0.0, 0.5, 0.5, 1.0, 2.0, 1e17])


@given(st.dictionaries(doc_ids, tied_scores, min_size=1, max_size=12))
def test_sorts_after_is_trec_order_pairwise(scores: dict[str, float]) -> None:
    order = trec_order(scores)
    for above, below in pairwise(order):
        assert sorts_after(scores[below], below, scores[above], above)
        assert not sorts_after(scores[above], above, scores[below], below)


def test_trec_scores_keep_what_already_keeps_the_order() -> None:
    assert trec_scores(["a", "b", "c"], {"a": 3.0, "b": 2.0, "c": -1.0}) == (
        [3.0, 2.0, -1.0],
        False,
    )
    # a tie, even in trec_eval's order (doc ids descending): other tools break ties otherwise
    assert trec_scores(["b", "a"], {"a": 1.0, "b": 1.0}) == ([1.0, below32(1.0)], True)
    # no scores: n, n-1, ..., 1
    assert trec_scores(["x", "y", "z"], {}) == ([3.0, 2.0, 1.0], False)


def single(value: float) -> float:
    """``value`` as a 32-bit float, as pytrec_eval (and trec_eval 9) holds it (+-inf beyond
    its range)."""
    with np.errstate(over="ignore"):
        return float(np.float32(value))


def below32(value: float) -> float:
    """The largest 32-bit float below ``value``."""
    return float(np.nextafter(np.float32(value), np.float32(-np.inf)))


def test_trec_scores_adjust_what_trec_eval_would_reorder() -> None:
    # a tie in the wrong id order: the 32-bit float below
    assert trec_scores(["a", "b"], {"a": 1.0, "b": 1.0}) == ([1.0, below32(1.0)], True)
    # rising scores (a distance): each just below the one above; later lower scores kept
    values, changed = trec_scores(["a", "b", "c"], {"a": 1.0, "b": 5.0, "c": 0.25})
    assert (values, changed) == ([1.0, below32(1.0), 0.25], True)
    # a hit without a score: 1 below the one above; where 1 is lost (1e17), the float below
    assert trec_scores(["a", "b"], {"a": 0.5}) == ([0.5, -0.5], False)
    assert trec_scores(["a", "b"], {"a": 1e17}) == ([1e17, below32(1e17)], False)
    # a NaN score from a retriever is no score
    assert trec_scores(["a", "b"], {"a": math.nan, "b": 1.0}) == ([2.0, 1.0], False)


def test_scores_apart_only_in_64_bits_are_adjusted_for_pytrec_eval() -> None:
    """pytrec_eval holds scores as 32-bit floats: 1.0 and the next double down tie there
    and go by doc id, so "a" above "b" needs a lower score for "b"; "b" above "a" does not."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    close = math.nextafter(1.0, -math.inf)
    tie = pytrec_eval.RelevanceEvaluator({"q": {"a": 1}}, {"recip_rank"})
    assert tie.evaluate({"q": {"a": 1.0, "b": close}})["q"]["recip_rank"] == 0.5  # b first
    values, changed = trec_scores(["a", "b"], {"a": 1.0, "b": close})
    assert (values, changed) == ([1.0, below32(1.0)], True)
    assert tie.evaluate({"q": dict(zip("ab", values, strict=True))})["q"]["recip_rank"] == 1.0
    assert trec_scores(["b", "a"], {"b": 1.0, "a": close}) == ([1.0, below32(1.0)], True)
    # beyond a 32-bit float's range every score is infinite there: brought into range
    assert trec_scores(["a", "b"], {"a": 1e300, "b": 1e299}) == ([1e300, below32(np.inf)], True)


def test_scores_beyond_a_32_bit_floats_range_are_brought_into_it() -> None:
    """Below -3.4e38 (or above 3.4e38) every score is infinite in 32 bits: pytrec_eval ties
    them all and orders them by doc id, so they cannot be kept."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    ids = ["a", "b", "c"]  # tied, trec_eval puts "c" first
    evaluator = pytrec_eval.RelevanceEvaluator({"q": {"a": 1}}, {"recip_rank"})
    for scores in ({"a": -1e39, "b": -2e39, "c": -3e39}, {"a": -3e38, "b": -1e300}):
        values, changed = trec_scores(ids, scores)
        assert changed
        assert trec_order({doc: single(v) for doc, v in zip(ids, values, strict=True)}) == ids
        assert evaluator.evaluate({"q": dict(zip(ids, values, strict=True))})["q"] == {
            "recip_rank": 1.0
        }
    # one such score at the end ties with nothing: every score is kept
    assert trec_scores(["a", "b", "c", "d"], {"a": 10.0, "b": 5.0, "d": -1e39}) == (
        [10.0, 5.0, 4.0, -1e39],
        False,
    )
    assert trec_scores(["a", "b", "c"], {"a": 1e300, "b": 1e299, "c": -1e300}) == (
        [1e300, below32(np.inf), -1e300],
        True,
    )


def test_scores_at_the_lowest_32_bit_float_export_without_a_warning(tmp_path: Path) -> None:
    """FAISS scores a missing inner-product hit -3.4028235e38, the lowest 32-bit float: the
    next one down overflows, which must not warn (a warning is an error under -W error)."""
    lowest = float(np.finfo(np.float32).min)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values, changed = trec_scores(["a", "b"], {"a": lowest, "b": lowest})
    assert changed and trec_order({"a": single(values[0]), "b": single(values[1])}) == ["a", "b"]


rankings = st.lists(doc_ids, min_size=1, max_size=12, unique=True)
near = st.sampled_from(
    [0.5, math.nextafter(0.5, 1), math.nextafter(0.5, 0), 0.5000001, 3e38, -3.3e38, -1e39]
)


@settings(max_examples=300, deadline=None)
@given(rankings, st.data())
def test_written_runs_read_back_in_list_order(ids: list[str], data: st.DataObject) -> None:
    """In 64 bits (trec_eval, ranx, read_run) and in 32 (pytrec_eval, older trec_eval)."""
    scored = data.draw(st.lists(st.sampled_from(ids), unique=True))
    scores = {doc: data.draw(tied_scores | near) for doc in scored}
    values, changed = trec_scores(ids, scores)
    assert trec_order(dict(zip(ids, values, strict=True))) == ids
    assert trec_order({doc: single(v) for doc, v in zip(ids, values, strict=True)}) == ids
    assert all(single(a) > single(b) for a, b in pairwise(values))  # no tie left
    kept = [v == scores[doc] for doc, v in zip(ids, values, strict=True) if doc in scores]
    assert changed == (not all(kept))


def test_write_trec_lines_and_read_back(tmp_path: Path) -> None:
    runs = [
        QueryRun(ids=["b", "a"], scores={"a": 1.0, "b": 1.0}),  # a tie: no tool's rule decides
        QueryRun(),  # returned nothing: no line
        QueryRun(ids=["é", "z"], scores={"é": 0.1, "z": 0.2}),
    ]
    written = write_trec(tmp_path / "out" / "x.trec", ["q1", "q2", "q3"], runs, "my run")
    assert (written.queries, written.hits, written.adjusted) == (2, 4, 2)
    lines = written.path.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["q1 Q0 b 1 1.0 my_run", f"q1 Q0 a 2 {below32(1.0)!r} my_run"]
    assert lines[2:] == ["q3 Q0 é 1 0.1 my_run", f"q3 Q0 z 2 {below32(0.1)!r} my_run"]
    assert ranked(read_run(written.path)) == {"q1": ["b", "a"], "q3": ["é", "z"]}
    assert list(tmp_path.joinpath("out").iterdir()) == [written.path]  # no temporary left


def test_write_trec_refuses_ids_a_line_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"doc id 'a b' \(query 'q'\) is empty or holds"):
        write_trec(tmp_path / "x.trec", ["q"], [QueryRun(ids=["a b"])], "t")
    with pytest.raises(ValueError, match="query id 'q 1'"):
        write_trec(tmp_path / "x.trec", ["q 1"], [QueryRun(ids=["a"])], "t")
    with pytest.raises(ValueError, match="doc id ''"):
        write_trec(tmp_path / "x.trec", ["q", "r"], [QueryRun(ids=["a"]), QueryRun(ids=[""])], "t")
    assert list(tmp_path.iterdir()) == []  # nothing half written


def test_export_paths() -> None:
    out = Path("runs/out.trec")
    assert export_paths(out, [("fruit", "bm25")]) == [out]
    assert export_paths(out, [("fruit", "bm25"), ("fruit", "dense[v2]")]) == [
        Path("runs/out.bm25.trec"),
        Path("runs/out.dense_v2_.trec"),
    ]
    assert export_paths(out, [("fruit", "r"), ("veg", "r")]) == [
        Path("runs/out.fruit.trec"),
        Path("runs/out.veg.trec"),
    ]
    assert export_paths(out, [("a", "x"), ("b", "y"), ("a", "x")]) == [
        Path("runs/out.a.x.trec"),
        Path("runs/out.b.y.trec"),
        Path("runs/out.a.x-2.trec"),
    ]


# ---------------------------------------------------------------------------- pytrec_eval

MEASURES = {  # our family -> trec_eval measure at k
    "recall": "recall",
    "precision": "P",
    "hit_rate": "success",
    "ndcg": "ndcg_cut",
    "map": "map_cut",
}


def awkward_lists() -> tuple[list[str], dict[str, list[str]], dict[str, dict[str, float]], Any]:
    """60 queries whose own scores tools would reorder or tie (ties, rising, missing
    scores), with graded judgments: (query ids, lists, scores, qrels)."""
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(40)] + ["é1", "Z", "z"]
    qids = [f"q{i}" for i in range(60)]
    lists, scores, qrels = {}, {}, {}
    for n, qid in enumerate(qids):
        ranking = rng.sample(docs, rng.randint(1, 10))
        style = n % 4
        if style == 0:  # ties
            given: dict[str, float] = {doc: float(rng.randint(0, 2)) for doc in ranking}
        elif style == 1:  # rising (a distance)
            given = {doc: rank * 0.1 for rank, doc in enumerate(ranking)}
        elif style == 2:  # some missing
            given = {doc: rng.random() for doc in ranking if rng.random() < 0.5}
        else:
            given = {}
        lists[qid], scores[qid] = ranking, given
        qrels[qid] = {doc: rng.randint(0, 3) for doc in rng.sample(docs, 6)}
    return qids, lists, scores, qrels


def test_export_round_trip_through_pytrec_eval(tmp_path: Path) -> None:
    """Lists whose own scores trec_eval would reorder (ties, rising, missing scores), written
    by write_trec, parsed by pytrec_eval.parse_run and evaluated: the same per-query values as
    our metrics on the lists, to 1e-9."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qids, lists, scores, qrels = awkward_lists()
    path = tmp_path / "export.trec"
    written = write_trec(path, qids, [QueryRun(ids=lists[q], scores=scores[q]) for q in qids], "t")
    assert written.adjusted > 0
    with path.open(encoding="utf-8") as handle:
        parsed = pytrec_eval.parse_run(handle)
    assert set(parsed) == set(qids)
    names = [f"{family}@{k}" for family in MEASURES for k in (1, 5, 10)]
    ours = compute(names, [lists[q] for q in qids], [qrels[q] for q in qids])
    for name in names:
        family, k = name.split("@")
        measure = f"{MEASURES[family]}.{k}"
        theirs = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(parsed)
        key = measure.replace(".", "_")
        for row, qid in enumerate(qids):
            assert abs(ours[name][row] - theirs[qid][key]) <= 1e-9, (name, qid)
    mrr = compute(["mrr@10"], [lists[q] for q in qids], [qrels[q] for q in qids])["mrr@10"]
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(parsed)
    assert all(abs(mrr[i] - rr[q]["recip_rank"]) <= 1e-9 for i, q in enumerate(qids))
    assert float(ours["ndcg@10"].mean()) > 0  # not vacuous


def test_export_round_trip_through_ir_measures(tmp_path: Path) -> None:
    """ir_measures breaks ties its own way: its RR@k (the MS MARCO provider) puts the smaller
    doc id first, where trec_eval puts the larger. An export that kept an exact tie in
    trec_eval's order (d911, d430 at 4.0) gave RR@10 1/3 there for the plugin's 1.0; the
    written scores now fall strictly, so every tool reads the evaluated list."""
    ir_measures = pytest.importorskip("ir_measures")
    from ir_measures import AP, RR, R, nDCG

    qids, lists, scores, qrels = awkward_lists()
    lists["tie"], scores["tie"], qrels["tie"] = (
        ["d911", "d430", "d41"],
        dict.fromkeys(["d911", "d430", "d41"], 4.0),
        {"d911": 1},
    )
    qids = [*qids, "tie"]
    path = tmp_path / "export.trec"
    write_trec(path, qids, [QueryRun(ids=lists[q], scores=scores[q]) for q in qids], "t")
    measures = {"mrr@10": RR @ 10, "ndcg@10": nDCG @ 10, "recall@10": R @ 10, "map@10": AP @ 10}
    ours = compute(list(measures), [lists[q] for q in qids], [qrels[q] for q in qids])
    run = list(ir_measures.read_trec_run(str(path)))
    judged = [ir_measures.Qrel(q, d, g) for q in qids for d, g in qrels[q].items()]
    theirs = {
        (m.query_id, m.measure): m.value
        for m in ir_measures.iter_calc(measures.values(), judged, run)
    }
    for name, measure in measures.items():
        for row, qid in enumerate(qids):
            assert abs(ours[name][row] - theirs.get((qid, measure), 0.0)) <= 1e-9, (name, qid)
    assert theirs[("tie", RR @ 10)] == 1.0


def test_read_run_of_an_export_is_what_was_written(tmp_path: Path) -> None:
    data: dict[str, Any] = {"q1": ["c", "a", "b"], "q2": [{"id": "x", "score": 0.1}, "y"]}
    source = read_run(write(tmp_path, "lists.json", json.dumps(data)))
    golden = golden_set(tmp_path, ["q1", "q2"])
    path = write_trec(tmp_path / "x.trec", ["q1", "q2"], runs_for(golden, source), "t").path
    assert ranked(read_run(path)) == {"q1": ["c", "a", "b"], "q2": ["x", "y"]}


def test_json_lines_may_hold_unicode_line_separators(tmp_path: Path) -> None:
    """JSON allows U+2028, U+2029 and U+0085 unescaped in strings (``json.dumps(...,
    ensure_ascii=False)`` writes them so; web and PDF text holds them): a JSONL file is
    split at line feeds only, not where ``str.splitlines`` splits. Run files, golden sets,
    BEIR queries and corpora."""
    from pytest_retrieval.builder.corpus import read_corpus
    from pytest_retrieval.golden import load_corpus

    odd = "a\u2028b\u2029c\x85d\x1ce\x0bf"
    run = tmp_path / "run.jsonl"
    record = {"id": "q1", "hits": [{"id": "d1", "text": odd}, {"id": "d2"}]}
    run.write_text(json.dumps(record, ensure_ascii=False) + "\r\n", encoding="utf-8")
    assert read_run(run).queries["q1"].texts == {"d1": odd}
    golden = tmp_path / "golden.jsonl"
    query = {"id": "q1", "query": odd, "relevant": ["d1"]}
    golden.write_text(json.dumps(query, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_golden(golden).queries[0].query == odd
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (beir / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": odd}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    corpus_line = json.dumps({"_id": "d1", "text": odd}, ensure_ascii=False) + "\n"
    (beir / "corpus.jsonl").write_text(corpus_line, encoding="utf-8")
    assert load_golden(beir).queries[0].query == odd
    assert load_corpus(beir / "corpus.jsonl") == {"d1": odd}
    assert [d.text for d in read_corpus(beir / "corpus.jsonl")] == [odd]


def test_a_query_id_trec_readers_take_for_a_comment_is_not_exported(tmp_path: Path) -> None:
    """``#1 Q0 a 1 3.0 run`` is a comment to trec_eval 10 and to this reader: the query would
    vanish on the way back (recall 1.0 read back as 0.5), so the export refuses it as it
    refuses an id with whitespace."""
    with pytest.raises(ValueError, match=r"query id '#1' .*starts with '#'.*comment"):
        write_trec(tmp_path / "r.trec", ["#1"], [QueryRun(ids=("a",))], "run")
    assert not (tmp_path / "r.trec").exists()
    written = write_trec(tmp_path / "r.trec", ["q#1"], [QueryRun(ids=("#a",))], "run")
    assert written.queries == 1  # '#' elsewhere is fine


@pytest.mark.parametrize("form", ["object", "list"])
def test_huge_integer_scores_that_cancel_out_are_not_finite_numbers(
    tmp_path: Path, form: str
) -> None:
    """The quick check summed the scores: 10**400 and -10**400 sum to 0, then float() of
    each raised OverflowError (an INTERNALERROR under pytest)."""
    big = "1" + "0" * 400
    hits = (
        f'{{"d1": {big}, "d2": -{big}}}'
        if form == "object"
        else f'[{{"id": "d1", "score": {big}}}, {{"id": "d2", "score": -{big}}}]'
    )
    path = tmp_path / "run.json"
    path.write_text(f'{{"q1": {hits}}}')
    with pytest.raises(RunFileError, match=r"is not a finite number"):
        read_run(path)


def test_a_golden_set_without_ids_is_told_to_give_the_runs_ids(tmp_path: Path) -> None:
    """Entries without "id" get one derived from their text (q-41cbca84a458): a run keyed by
    the team's own ids then shares none, and the message said only which ids each has."""
    run = read_run(write(tmp_path, "r.trec", TREC))
    path = tmp_path / "noid.json"
    path.write_text(json.dumps([{"query": "a", "relevant": ["d1"]}]), encoding="utf-8")
    with pytest.raises(RunFileError) as caught:
        runs_for(load_golden(path), run)
    assert (
        'its entries have no "id", so each has one made from its query text (q-...): give each '
        "entry the id the run uses"
    ) in str(caught.value)
    named = golden_set(tmp_path, ["1", "2"])
    with pytest.raises(RunFileError) as caught:
        runs_for(named, run)
    assert '"id"' not in str(caught.value)  # ids of its own: nothing to say of them


def test_evaluate_takes_the_path_of_qrels_without_texts_for_a_run(tmp_path: Path) -> None:
    """``evaluate(None, "x.qrels", runs=...)`` was refused (the path was loaded needing
    texts) where the same set loaded first was accepted; a retriever is still refused."""
    from pytest_retrieval import evaluate
    from pytest_retrieval.errors import GoldenError

    qrels = tmp_path / "x.qrels"
    qrels.write_text("q1 0 d1 1\nq2 0 d3 1\n", encoding="utf-8")
    run = read_run(write(tmp_path, "r.trec", TREC))
    golden = load_golden(qrels, require_texts=False)
    result = evaluate(None, qrels, runs=runs_for(golden, run), retriever_id="r")
    assert (
        result.metrics["recall@10"]
        == evaluate(None, golden, runs=runs_for(golden, run)).metrics["recall@10"]
    )
    with pytest.raises(GoldenError, match="TREC qrels need a queries file beside them"):
        evaluate(lambda query, k: ["d1"], qrels)
