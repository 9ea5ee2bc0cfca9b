"""The fast paths for large golden sets (issue 13) give what the general paths give.

- Golden loading: plain entries skip the pydantic model; a property test checks that whatever
  the fast check accepts, the model accepts too, with equal queries (and that the model's
  errors are still what the user sees).
- Scoring: deduplicated rankings skip the duplicate check; metric values equal the general
  kernels' and pytrec_eval's.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import count_built_rows
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_retrieval import golden as golden_module
from pytest_retrieval.errors import GoldenError
from pytest_retrieval.golden import GoldenQuery, load_golden
from pytest_retrieval.hits import normalize_hits
from pytest_retrieval.metrics import compute, grade_matrix

_ids = st.one_of(st.text(max_size=3), st.integers(-1, 2), st.booleans())
_grades = st.one_of(st.integers(-1, 4), st.sampled_from([100, 101]), st.floats(0, 3), st.booleans())
_entry = st.fixed_dictionaries(
    {"query": st.one_of(st.text(max_size=3), st.integers(0, 1))},
    optional={
        "id": _ids,
        "relevant": st.one_of(
            st.lists(_ids, max_size=3),
            st.dictionaries(st.text(max_size=3), _grades, max_size=3),
            st.none(),
        ),
        "tags": st.one_of(st.lists(st.text(max_size=2), max_size=2), st.text(max_size=2)),
        "criteria": st.one_of(st.none(), st.text(max_size=2)),
    },
)


_name = st.text(st.characters(codec="utf-8"), min_size=1, max_size=3)
_plain_entry = st.fixed_dictionaries(
    {
        "query": _name,
        "relevant": st.one_of(
            st.lists(_name, min_size=1, max_size=3),  # a repeat: the model's error
            st.dictionaries(_name, st.integers(0, 101), min_size=1, max_size=3),
        ),
    },
    optional={"id": st.one_of(_name, st.just("")), "tags": st.lists(_name, max_size=2)},
)


def _load(path: Path, fast: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The golden set through the fast path (when it applies) or the model's path only."""
    with monkeypatch.context() as patched:
        if not fast:
            patched.setattr(golden_module, "_plain_queries", lambda entries: None)
        try:
            return load_golden(path)
        except GoldenError as exc:
            return f"GoldenError: {exc}"


@settings(max_examples=500, deadline=None)
@given(entries=st.lists(st.one_of(_plain_entry, _entry), min_size=1, max_size=3))
@example(entries=[{"query": "a", "relevant": {"d": 1}}, {"query": "a", "relevant": ["e"]}])
@example(entries=[{"query": "a", "relevant": {"d": True}}])
@example(entries=[{"query": "a", "relevant": {"d": 0}}])
@example(entries=[{"query": "a", "relevant": ["d", "d"]}])
@example(entries=[{"query": "a", "relevant": {"": 1}}])
@example(entries=[{"query": "a", "id": 1, "relevant": ["d"]}])
@example(entries=[{"query": "a", "relevant": {"d": 101}}])
@example(entries=[{"query": "\ud800", "relevant": ["d"]}])
@example(entries=[{"query": "a", "relevant": ["d"], "tags": ["\udfff"]}])
def test_plain_entries_load_as_the_model_loads_them(
    entries: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("g") / "golden.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast = _load(path, True, monkeypatch)
        model = _load(path, False, monkeypatch)
    if isinstance(model, str) or isinstance(fast, str):
        assert fast == model  # the same error, word for word
        return
    assert fast.queries == model.queries
    assert fast.query_fingerprints == model.query_fingerprints
    assert fast.fingerprint == model.fingerprint


def test_the_fast_path_is_taken_for_plain_entries() -> None:
    entries = [{"id": "q1", "query": "a", "relevant": {"d": 2}, "tags": ["t"]}]
    fast = golden_module._plain_queries(entries)
    assert fast is not None
    assert fast[0] == GoldenQuery.model_construct(
        id="q1", query="a", relevant={"d": 2}, tags=("t",), criteria=None, params={}, metadata={}
    )
    assert golden_module._plain_queries([{**entries[0], "criteria": "x"}]) is None


def test_unique_rankings_score_as_the_general_kernels_do() -> None:
    rng = random.Random(3)
    runs, qrels = [], []
    for _ in range(300):
        docs = [f"d{rng.randrange(60)}" for _ in range(rng.randint(0, 30))]
        runs.append(normalize_hits(docs, 20).ids)  # deduplicated, cut at 20
        judged = rng.sample(range(60), rng.randint(1, 12))  # > 8 judged: the dict lookup
        qrels.append({f"d{d}": rng.randint(0, 3) for d in judged} | {f"d{judged[0]}": 1})
    names = [f"{f}@{k}" for f in ("recall", "precision", "mrr", "ndcg", "map") for k in (5, 20)]
    fast = compute(names, runs, qrels, unique=True)
    general = compute(names, runs, qrels)
    for name in names:
        np.testing.assert_array_equal(fast[name], general[name])


def test_dense_matrices_are_made_only_when_asked_for() -> None:
    matrix = grade_matrix([["a", "b", "c"]], [{"c": 2, "a": 1, "z": 3}], depth=4)
    assert "grades" not in vars(matrix)
    np.testing.assert_array_equal(matrix.grades, [[1, 0, 2, 0]])
    np.testing.assert_array_equal(matrix.ideal, [[3, 2, 1, 0]])


def test_the_streamed_report_is_the_whole_report_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large report is written in pieces (QUERY_CHUNK queries at a time); joined, they are
    exactly the one-piece text, for several evaluations."""
    from pytest_retrieval import evaluate
    from pytest_retrieval.render import json as report_module
    from pytest_retrieval.verdicts import Verdict

    path = Path(__file__).parent.parent / "example_golden" / "tiny.json"
    golden = load_golden(path)
    results = [
        evaluate(lambda query, k: ["d1", "d2"], golden, retriever_id="a"),
        evaluate(lambda query, k: [] if "a" in query else ["d3"], golden, retriever_id="b"),
    ]
    monkeypatch.setattr(report_module, "QUERY_CHUNK", 2)
    verdict = Verdict()
    pieces = list(report_module.report_text(results, verdict, created="t", git={}))
    assert len(pieces) > 2 * (1 + 2)  # the queries came in several chunks
    whole = report_module.dumps(report_module.json_report(results, verdict, created="t", git={}))
    assert "".join(pieces) == whole
    assert json.loads(whole)["evaluations"][1]["queries"][0]["id"] == golden.queries[0].id


def test_the_power_table_counts_hits_from_precision_as_the_kernels_do() -> None:
    """With precision@k among the metrics, the relevant hits in each top k are read from
    it (k * p@k); without, the kernels count them: the same detectable drops."""
    from dataclasses import replace

    from pytest_retrieval import evaluate
    from pytest_retrieval.compare import power_table

    golden = load_golden(Path(__file__).parent.parent / "example_golden" / "tiny.json")
    ranked = {
        q.query: [*list(q.relevant)[::3], "x1", *list(q.relevant)[1::2]] for q in golden.queries
    }
    result = evaluate(
        lambda query, k: ranked[query],
        golden,
        metrics=["recall@5", "precision@5", "mrr@5"],
        gated=["recall@5", "mrr@5"],
    )
    without = replace(
        result,
        metrics={m: v for m, v in result.metrics.items() if not m.startswith("precision")},
    )
    read, counted = power_table(result, None, {}, 0.05), power_table(without, None, {}, 0.05)
    assert read and read == counted


_doc = st.sampled_from([f"d{i}" for i in range(12)])
_hit = st.one_of(_doc, st.builds(lambda d: {"id": d, "text": "t"}, _doc))


@settings(max_examples=200, deadline=None)
@given(
    cases=st.lists(
        st.tuples(
            st.one_of(st.lists(_hit, max_size=15), st.none()),  # None: the call raises
            st.dictionaries(_doc, st.integers(0, 3), max_size=6),  # {}: an open query
        ),
        min_size=1,
        max_size=8,
    ),
    k=st.integers(1, 12),
)
def test_ranks_found_by_the_calls_score_as_the_kernels_own_search(
    cases: list[tuple[list[Any] | None, dict[str, int]]], k: int
) -> None:
    """Each judged doc's rank is found as its call returns (hits.normalize_hits with the
    golden query's judgments); the scores equal the kernels' search over the stored
    rankings, whatever the hits: repeats, dict hits (the general path), lists longer than k,
    failed calls, judged-not-relevant docs, open queries."""
    from pytest_retrieval import evaluate, with_metrics
    from pytest_retrieval.golden import GoldenSet

    queries = [  # every judged query has a relevant doc ("r" when none of its grades is >= 1)
        GoldenQuery(
            id=f"q{i}",
            query=f"q{i}",
            relevant=relevant if not relevant or max(relevant.values()) else {**relevant, "r": 1},
        )
        for i, (_, relevant) in enumerate(cases)
    ]
    hits = {q.query: raw for q, (raw, _) in zip(queries, cases, strict=True)}

    def search(query: str, k: int) -> list[Any]:
        raw = hits[query]
        if raw is None:
            raise ConnectionError("down")
        return [*raw, "r"] if query.endswith(("1", "5")) else raw

    golden = GoldenSet(name="g", source="g.json", queries=tuple(queries))
    names = [f"{f}@{c}" for f in ("recall", "precision", "mrr", "ndcg", "map") for c in (1, k)]
    with pytest.MonkeyPatch.context() as patch:  # open queries are only scored with a judge
        patch.setattr("pytest_retrieval.evaluation._check_labels", lambda *a: None)
        result = evaluate(search, golden, metrics=names, concurrency=1)
    assert [q.returned for q in result.queries]  # the rankings the kernels search again
    again = with_metrics(result, [])  # scored from the stored rankings, ranks not given
    for query, other in zip(result.queries, again.queries, strict=True):
        for name, value in query.metrics.items():
            both_nan = math.isnan(value) and math.isnan(other.metrics[name])
            assert value == other.metrics[name] or both_nan, (query.id, name)


def test_a_query_table_is_the_query_results_it_stands_for() -> None:
    """An evaluation keeps its queries as columns (results.QueryTable); the QueryResults
    built from them, their report entries written straight from the columns, a slice, and
    each column read back are what the QueryResults say -- with failed calls, repeated ids,
    texts, scores and criteria (an empty one too) in the mix."""
    from pytest_retrieval import evaluate
    from pytest_retrieval.golden import GoldenSet
    from pytest_retrieval.results import QueryTable

    queries = tuple(
        GoldenQuery(
            id=f"q{i}",
            query=f"q{i}",
            relevant={f"d{i % 4}": 1 + i % 3, "d9": 0},
            tags=("odd",) if i % 2 else (),
            criteria=[None, "", "about d1"][i % 3],
        )
        for i in range(12)
    )

    def search(query: str, k: int) -> list[Any]:
        i = int(query[1:])
        if i == 5:
            raise ConnectionError("down")
        if i % 4 == 1:
            return [{"id": "d1", "text": "one", "score": 2.0}, "d2"]
        return ["d0", "d1", "d0", "d3"] if i % 3 else ["d2"]

    result = evaluate(search, GoldenSet(name="g", source="g.json", queries=queries))
    table = result.table
    assert isinstance(result.queries, QueryTable) and table._built is None
    entries, head = table.entries(), table.entries(3, 7)
    columns = {m: table.values(m) for m in result.metrics}
    failed, lengths = dict(table.error_rows()), [len(r) for r in table.returned]
    assert table._built is None  # none of that built a QueryResult
    sliced, fifth = table[2:9], table[5]
    assert table._built is None and table[5] is fifth  # one query built, and kept
    built = table.rows
    assert built[5] is fifth and table[5] is fifth and result.errors[0] is fifth
    assert sliced == built[2:9]
    assert entries == [q.to_dict() for q in built]
    assert head == entries[3:7]
    assert len(table) == len(built) == 12 and table == built and table[-1] == built[-1]
    assert failed == {5: built[5].error} and "down" in str(built[5].error)
    assert lengths == [len(q.returned) for q in built]
    assert table.duplicates() == sum(q.duplicates for q in built) > 0
    assert [q.texts for q in built][1] == {"d1": "one"} and built[1].scores == {"d1": 2.0}
    assert [q.criteria for q in built][:3] == [None, "", "about d1"]
    for metric, column in columns.items():
        assert column.tolist() == [q.metrics[metric] for q in built]


_any_id = st.one_of(
    st.sampled_from(["d1", "d2", 'q"uote', "back\\slash", "tab\t", "é", "%s", "\x00"]),
    st.text(min_size=1, max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(
    cases=st.lists(
        st.tuples(
            st.one_of(st.lists(_any_id, max_size=6), st.none()),  # None: the call raises
            st.dictionaries(_any_id, st.integers(0, 3), min_size=1, max_size=4),
            st.lists(st.sampled_from(["t", "ü", 'a"b']), max_size=2, unique=True),
        ),
        min_size=1,
        max_size=7,
    ),
    cut=st.tuples(st.integers(0, 8), st.integers(0, 8)),
    open_query=st.booleans(),
)
def test_the_report_written_from_columns_is_the_encoders_text(
    cases: list[tuple[list[str] | None, dict[str, int], list[str]]],
    cut: tuple[int, int],
    open_query: bool,
) -> None:
    """The JSON report's queries are written from the table's columns
    (render.json.entries_text); the text must be the encoder's on the same entries, byte
    for byte, whatever the ids (quotes, backslashes, control characters, %), values (NaN
    for an open query's golden metrics), failed calls and repeats -- and for any chunk."""
    from pytest_retrieval import evaluate
    from pytest_retrieval.golden import GoldenSet
    from pytest_retrieval.render.json import dumps, entries_text

    queries = tuple(
        GoldenQuery(
            id=f"q{i}",
            query=f"q{i}",
            relevant={} if open_query and i == 0 else relevant | {"r": 1},
            tags=tuple(tags),
        )
        for i, (_, relevant, tags) in enumerate(cases)
    )
    hits = {q.query: raw for q, (raw, _, _) in zip(queries, cases, strict=True)}

    def search(query: str, k: int) -> list[str]:
        raw = hits[query]
        if raw is None:
            raise ValueError('no "index" \\ here')
        return raw

    with pytest.MonkeyPatch.context() as patch:  # open queries are only scored with a judge
        patch.setattr("pytest_retrieval.evaluation._check_labels", lambda *a: None)
        result = evaluate(search, GoldenSet(name="g", source="g.json", queries=queries))
    start, stop = sorted(cut)
    written = entries_text(result.table, start, stop)
    assert result.table.columns is not None  # the fast path was the one taken
    assert written == dumps(result.table.entries(start, stop))[1:-1]
    assert written == dumps([q.to_dict() for q in result.queries[start:stop]])[1:-1]


def test_a_gate_reading_failed_and_short_queries_keeps_no_query_result() -> None:
    """The summary and the gate read the failed calls and whether short lists missed
    relevant documents: on a large set that must not build, and keep, a QueryResult per
    query (a retriever with a score cut-off returns fewer than k hits on most queries)."""
    from pytest_retrieval import evaluate
    from pytest_retrieval.golden import GoldenSet

    queries = tuple(
        GoldenQuery(id=f"q{i}", query=f"q{i}", relevant={f"d{i}": 1}) for i in range(400)
    )

    def search(query: str, k: int) -> list[str]:
        if query == "q7":
            raise ConnectionError("down")
        return [f"d{query[1:]}", "x"]  # 2 hits of 10, the relevant one among them

    golden = GoldenSet(name="g", source="g.json", queries=queries)
    result = evaluate(search, golden, metrics=["recall@10"], concurrency=1)
    table = result.table
    assert result.short_results is None  # short, but nothing missed: no warning
    assert [q.id for q in result.errors] == ["q7"] and "down" in str(result.errors[0].error)
    assert table._built is None and not table._single
    missed = evaluate(lambda q, k: ["x"], golden, metrics=["recall@10"], concurrency=1)
    assert missed.short_results is not None and missed.short_results.short == 400
    assert missed.table._built is None and not missed.table._single


RELEASED = """
import gc, json, pytest

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # pytest's own cleanups (gc.collect, more than once) run after this: what is alive now
    # is traversed by each of them, then again at interpreter exit
    kinds = ("GoldenQuery", "EvaluationResult", "QueryTable", "Ranking")
    alive = {kind: 0 for kind in kinds}
    for o in gc.get_objects():
        if type(o).__name__ in alive:
            alive[type(o).__name__] += 1
    with open("alive.json", "w") as out:
        json.dump(alive, out)
"""


def test_the_golden_sets_are_released_before_pytest_cleans_up(pytester: pytest.Pytester) -> None:
    """A million golden queries, and their results, kept alive to the end cost pytest's
    closing garbage collections and the interpreter's exit a traversal each; nothing reads
    them after the outputs are written, so the session lets them go when it closes."""
    from helpers import KEYWORD_RETRIEVER, write_golden

    pytester.makeconftest(KEYWORD_RETRIEVER + RELEASED)
    write_golden(pytester)
    result = pytester.runpytest_subprocess("--retrieval-golden", "golden.json")
    result.assert_outcomes(passed=1)
    alive = json.loads((pytester.path / "alive.json").read_text())
    assert alive == dict.fromkeys(alive, 0) and len(alive) == 4


def test_a_comparison_with_a_baseline_builds_only_the_queries_that_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Comparing 100,000 queries with their baseline reads the run's columns: a QueryResult
    is built for each query that moved (the report explains those), not for every query.
    The comparison is the one made from QueryResults (a report read back), and the power
    table reads the baseline's relevant hits from its precision@k as the kernels count them."""
    from dataclasses import replace

    from pytest_retrieval import evaluate
    from pytest_retrieval.compare import compare_to_baseline, entry_from_result, power_table
    from pytest_retrieval.gate import Allowance
    from pytest_retrieval.golden import GoldenSet
    from pytest_retrieval.results import QueryTable

    queries = tuple(
        GoldenQuery(id=f"q{i}", query=f"q{i}", relevant={f"d{i}": 1 + i % 3, "x": 1})
        for i in range(300)
    )
    golden = GoldenSet(name="g", source="g.json", queries=queries)
    metrics = ["recall@5", "precision@5", "mrr@5", "ndcg@5"]

    def before(query: str, k: int) -> list[str]:
        return ["y", f"d{query[1:]}", "x"]

    def after(query: str, k: int) -> list[str]:  # three queries lose their relevant doc
        return ["y", "x"] if query in ("q3", "q100", "q299") else before(query, k)

    gated = ["recall@5", "mrr@5"]
    entry = entry_from_result(
        evaluate(before, golden, metrics=metrics, gated=gated, concurrency=1), {}, "now"
    )
    result = evaluate(after, golden, metrics=metrics, gated=gated, concurrency=1)
    allowances = {"latency_ms": Allowance("latency_ms", 1000.0)}
    built = count_built_rows(monkeypatch)
    comparison = compare_to_baseline(result, entry, allowances)
    assert result.table.columns is not None  # not built whole
    assert sorted(built) == [3, 100, 299]
    moved = {q.id for shift in comparison.shifts.values() for q in shift.queries}
    assert moved == {"q3", "q100", "q299"}
    assert comparison.changes[0].metric == "recall@5" and comparison.n_common == 300
    read_back = replace(result, queries=QueryTable(rows=list(result.queries)))
    assert repr(compare_to_baseline(read_back, entry, allowances)) == repr(comparison)
    recorded = replace(
        entry,
        queries={
            qid: replace(q, metrics={m: v for m, v in q.metrics.items() if "precision" not in m})
            for qid, q in entry.queries.items()
        },
    )
    compared = replace(result, comparison=comparison)
    powers = power_table(compared, entry, {}, 0.05)
    assert powers and powers == power_table(compared, recorded, {}, 0.05)


def test_an_ab_comparison_builds_only_the_queries_that_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two retrievers on one large golden set are compared on their columns too: objects
    are built for the queries that moved, on both sides, and the comparison is the one
    made from QueryResults."""
    from dataclasses import replace

    from pytest_retrieval import evaluate
    from pytest_retrieval.compare import compare_runs
    from pytest_retrieval.golden import GoldenSet
    from pytest_retrieval.results import QueryTable

    queries = tuple(
        GoldenQuery(id=f"q{i}", query=f"q{i}", relevant={f"d{i}": 1 + i % 3}) for i in range(300)
    )
    golden = GoldenSet(name="g", source="g.json", queries=queries)

    def first(query: str, k: int) -> list[str]:
        return ["y", f"d{query[1:]}"]

    def second(query: str, k: int) -> list[str]:  # two queries find their doc first
        return first(query, k)[::-1] if query in ("q5", "q250") else first(query, k)

    ours, theirs = (
        evaluate(search, golden, metrics=["mrr@5", "recall@5"], concurrency=1)
        for search in (first, second)
    )
    built = count_built_rows(monkeypatch)
    comparison = compare_runs(ours, theirs, {})
    assert ours.table.columns is not None and theirs.table.columns is not None
    assert sorted(built) == [5, 5, 250, 250]  # each side's moved queries
    assert {q.id for s in comparison.shifts.values() for q in s.queries} == {"q5", "q250"}
    rows_of = [replace(r, queries=QueryTable(rows=list(r.queries))) for r in (ours, theirs)]
    assert repr(compare_runs(*rows_of, {})) == repr(comparison)


def test_a_repeated_query_id_is_compared_once() -> None:
    """A golden set built in Python may repeat an id (a file may not): the comparison takes
    the id once, at its last entry's values, as it always has."""
    from pytest_retrieval import evaluate
    from pytest_retrieval.compare import compare_to_baseline, entry_from_result
    from pytest_retrieval.golden import GoldenSet

    queries = [GoldenQuery(id=f"q{i}", query=f"t{i}", relevant={"d": 1}) for i in range(6)]
    queries.append(GoldenQuery(id="q0", query="again", relevant={"d": 1}))
    golden = GoldenSet(name="g", source="g.json", queries=tuple(queries), k=3)
    kept = evaluate(lambda q, k: ["d"], golden, concurrency=1, metrics=["mrr@3"], gated=["mrr@3"])
    worse = evaluate(
        lambda q, k: ["x", "d"] if q != "t3" else ["x"],
        golden,
        concurrency=1,
        metrics=["mrr@3"],
        gated=["mrr@3"],
    )
    comparison = compare_to_baseline(worse, entry_from_result(kept, {}, "now"), {})
    assert comparison.n_common == 6
    shift = comparison.shifts["mrr@3"]
    assert (shift.worse, shift.unchanged) == (6, 0)


def test_the_power_line_counts_relevant_hits_below_the_stored_rankings() -> None:
    """A baseline stores each query's top k (the golden set's k) but a gated metric may look
    deeper (recall@5 of a k = 2 set): its relevant hits are k * its stored precision@5, as
    the run itself counts them, not a recount of the stored top 2, which missed the hits at
    ranks 3 to 5 (0.085 instead of 0.031 here)."""
    from dataclasses import replace

    from pytest_retrieval import evaluate
    from pytest_retrieval.compare import compare_to_baseline, entry_from_result, power_table
    from pytest_retrieval.golden import GoldenSet

    queries = tuple(
        GoldenQuery(id=f"q{i}", query=f"q{i}", relevant={f"d{i}": 1, f"e{i}": 1, f"f{i}": 2})
        for i in range(60)
    )
    golden = GoldenSet(name="g", source="g.json", queries=queries, k=2)

    def search(query: str, k: int) -> list[str]:
        i = int(query[1:])
        hits = ["x", f"d{i}", "y", f"e{i}", f"f{i}"] if i % 3 else ["x", "y", "z", f"d{i}"]
        return hits[:k]

    metrics, gated = ["recall@5", "precision@5", "mrr@2"], ["recall@5"]
    result = evaluate(search, golden, metrics=metrics, gated=gated, concurrency=1)
    entry = entry_from_result(result, {}, "now")
    assert {len(q.ranked) for q in entry.queries.values()} == {2}
    compared = replace(result, comparison=compare_to_baseline(result, entry, {}))
    assert power_table(compared, entry, {}, 0.05) == power_table(result, None, {}, 0.05)
