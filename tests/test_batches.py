"""Issue 13, point 1 (calling in columnar form): a ``@pytest_retrieval.batched`` retriever is
called a batch of queries at a time and answers with row numbers into its doc-id table.
What it gives must score exactly as the same hits given one query at a time as doc-id
strings, and every way it can misbehave is an error on the queries it touched."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import gc
import json
import pickle
import threading
import time
import tracemalloc
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers import write_golden
from test_shards import evaluations

import pytest_retrieval
from pytest_retrieval import evaluate
from pytest_retrieval.golden import GoldenQuery, GoldenSet
from pytest_retrieval.results import from_wire, to_wire
from pytest_retrieval.retrieval import run_retriever
from pytest_retrieval.retrieval.batches import BatchRetriever, RowRanking

NAMES = [f"doc{i}" for i in range(40)]


def _golden(n: int, seed: int = 0) -> GoldenSet:
    """``n`` queries "q <i>", 1-4 graded judgments each; one in five judges a doc no row of
    the table holds."""
    rng = np.random.default_rng(seed)
    queries = []
    for i in range(n):
        docs = rng.choice(len(NAMES), size=int(rng.integers(1, 5)), replace=False)
        relevant = {NAMES[d]: int(rng.integers(0, 4)) for d in docs}
        relevant[NAMES[int(docs[0])]] = 2  # at least one relevant
        if i % 5 == 0:
            relevant["not-in-the-index"] = 1
        queries.append(GoldenQuery(id=f"q{i}", query=f"q {i}", relevant=relevant, tags=("t",)))
    return GoldenSet(name="b", source="b.json", k=5, queries=queries)


def _rows(n: int, width: int, seed: int = 1) -> np.ndarray:
    """Each query's row numbers: some rows padded with -1 (fewer hits, as faiss pads),
    some repeating a row number (a duplicate hit)."""
    rng = np.random.default_rng(seed)
    rows = np.stack([rng.permutation(len(NAMES))[:width] for _ in range(n)]).astype(np.int64)
    rows[::7, width - 2 :] = -1
    rows[3::9, 2] = rows[3::9, 0]
    return rows


def _pair(rows: np.ndarray, batch_size: int = 8) -> tuple[BatchRetriever, Any]:
    """The batched retriever over ``rows`` and the same hits one query at a time."""

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=batch_size)
    def search(queries: list[str], k: int) -> np.ndarray:
        return rows[[int(q.split()[1]) for q in queries]]  # every column, more than k too

    def one(query: str, k: int) -> list[str]:
        return [NAMES[r] for r in rows[int(query.split()[1])].tolist() if r >= 0]

    return search, one


@pytest.mark.parametrize("width", [3, 5, 9])
def test_a_batched_retriever_scores_exactly_as_the_same_hits_given_one_query_at_a_time(
    width: int,
) -> None:
    golden = _golden(60)
    rows = _rows(60, width)
    batched, one = _pair(rows)
    metrics = ["recall@5", "precision@5", "mrr@5", "ndcg@5", "map@5", "hit_rate@5", "ndcg@3"]
    got = evaluate(batched, golden, metrics=metrics, concurrency=1)
    want = evaluate(one, golden, metrics=metrics, concurrency=1)
    assert got.metrics == want.metrics
    assert got.ci == want.ci
    for mine, theirs in zip(got.queries, want.queries, strict=True):
        assert tuple(mine.returned) == tuple(theirs.returned)
        assert mine.metrics == theirs.metrics
        assert mine.duplicates == theirs.duplicates
    assert got.passed


def test_its_numbers_match_pytrec_eval() -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    golden = _golden(50, seed=3)
    rows = _rows(50, 10, seed=4)
    batched, one = _pair(rows)
    got = evaluate(batched, golden, metrics=["recall@10", "mrr@10", "ndcg@10"], concurrency=1)
    qrels = {q.id: dict(q.relevant) for q in golden.queries}
    run = {}
    for q in golden.queries:
        hits = list(dict.fromkeys(one(q.query, 10)))
        run[q.id] = {doc: float(len(hits) - rank) for rank, doc in enumerate(hits)}
    measures = {"recall_10", "recip_rank", "ndcg_cut_10"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    for q in got.queries:
        assert q.metrics["recall@10"] == pytest.approx(theirs[q.id]["recall_10"], abs=1e-12)
        assert q.metrics["mrr@10"] == pytest.approx(theirs[q.id]["recip_rank"], abs=1e-12)
        assert q.metrics["ndcg@10"] == pytest.approx(theirs[q.id]["ndcg_cut_10"], abs=1e-12)


def test_rows_stay_arrays_until_read_and_read_as_the_ids_they_number() -> None:
    golden = _golden(10)
    rows = _rows(10, 5)
    rows[0] = [4, 3, 2, 1, 0]
    batched, _ = _pair(rows)
    result = evaluate(batched, golden, concurrency=1)
    returned = result.queries[0].returned
    assert isinstance(returned, RowRanking)
    assert returned == ("doc4", "doc3", "doc2", "doc1", "doc0")
    assert list(returned) == ["doc4", "doc3", "doc2", "doc1", "doc0"]
    assert returned.joined == "doc4\x00doc3\x00doc2\x00doc1\x00doc0"
    assert returned[1] == "doc3" and "doc0" in returned and len(returned) == 5
    assert hash(returned) == hash(("doc4", "doc3", "doc2", "doc1", "doc0"))
    report = json.loads(json.dumps(result.to_dict(), default=list))
    assert report["queries"][0]["returned"] == ["doc4", "doc3", "doc2", "doc1", "doc0"]


def test_calls_go_a_batch_at_a_time_queries_of_one_params_together() -> None:
    """Spread over the golden set or not (a multilingual set), one params' queries share
    calls; the results come back in golden order."""
    calls: list[tuple[list[str], dict[str, Any]]] = []

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=3)
    def search(queries: list[str], k: int, **params: Any) -> np.ndarray:
        calls.append((queries, params))
        return np.array([[int(q.split()[1]), 39] for q in queries])  # query i finds doc i

    langs = [{}, {"lang": "de"}, {}, {}, {"lang": "de"}, {}, {}, {"lang": "de"}, {}]
    queries = [
        GoldenQuery(id=f"q{i}", query=f"q {i}", relevant={f"doc{i}": 1}, params=params)
        for i, params in enumerate(langs)
    ]
    result = evaluate(search, GoldenSet(name="p", source="p.json", k=2, queries=queries))
    assert calls == [
        (["q 0", "q 2", "q 3"], {}),
        (["q 5", "q 6", "q 8"], {}),
        (["q 1", "q 4", "q 7"], {"lang": "de"}),
    ]
    assert [q.returned[0] for q in result.queries] == [f"doc{i}" for i in range(9)]
    assert result.metrics["recall@2"] == 1.0


def test_a_query_latency_is_its_call_over_the_queries_in_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch call of 4 queries that takes 200 ms: each query's latency is 50 ms (on a
    clock the call moves, not the machine's)."""
    now = [1000.0]

    class Clock:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        @staticmethod
        def perf_counter() -> float:
            return now[0]

    monkeypatch.setattr("pytest_retrieval.retrieval.batches.time", Clock())

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=4)
    def search(queries: list[str], k: int) -> np.ndarray:
        now[0] += 0.2
        return np.zeros((len(queries), k), dtype=np.int32)

    result = evaluate(search, _golden(8))
    assert [q.latency_ms for q in result.queries] == [pytest.approx(50.0)] * 8
    assert result.latency_p50_ms == pytest.approx(50.0)


def test_an_async_batch_function_is_awaited() -> None:
    rows = _rows(12, 5)

    @pytest_retrieval.batched(doc_ids=NAMES)
    async def search(queries: list[str], k: int) -> np.ndarray:
        await asyncio.sleep(0)
        return rows[[int(q.split()[1]) for q in queries], :k]

    _, one = _pair(rows)
    golden = _golden(12)
    assert evaluate(search, golden).metrics == evaluate(one, golden, concurrency=1).metrics


def test_one_query_at_a_time_it_is_a_plain_retriever() -> None:
    rows = _rows(5, 6)
    rows[2] = [5, -1, 7, 5, 1, 0]
    batched, _ = _pair(rows)
    # what it returned, -1 dropped: repeats and hits past k go as any retriever's do
    assert batched("q 2", 4) == ["doc5", "doc7", "doc5", "doc1", "doc0"]
    assert batched.__name__ == "search"


def test_doc_ids_may_be_a_numpy_array_and_come_back_as_plain_strings() -> None:
    rows = _rows(6, 5)

    @pytest_retrieval.batched(doc_ids=np.array(NAMES))
    def search(queries: list[str], k: int) -> np.ndarray:
        return rows[[int(q.split()[1]) for q in queries]]

    result = evaluate(search, _golden(6))
    returned = [doc for q in result.queries for doc in q.returned]
    assert returned and {type(doc) for doc in returned} == {str}
    assert json.dumps(result.to_dict(), default=list)


def test_a_search_that_reuses_its_output_array_keeps_each_querys_hits() -> None:
    """faiss writes into a caller's array (index.search(x, k, I=out)): the rows handed over
    are read at once, not later from memory the next call overwrote."""
    out = np.zeros((2, 3), dtype=np.int64)

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=2)
    def search(queries: list[str], k: int) -> np.ndarray:
        for row, query in enumerate(queries):
            i = int(query.split()[1])
            out[row] = [i, 30 + i % 2, 32]
        return out[: len(queries)]

    queries = [GoldenQuery(id=f"q{i}", query=f"q {i}", relevant={f"doc{i}": 1}) for i in range(5)]
    result = evaluate(search, GoldenSet(name="r", source="r.json", k=3, queries=queries))
    assert [q.returned[0] for q in result.queries] == ["doc0", "doc1", "doc2", "doc3", "doc4"]
    assert [tuple(q.returned) for q in result.queries][:2] == [
        ("doc0", "doc30", "doc32"),
        ("doc1", "doc31", "doc32"),
    ]


def test_an_answer_with_no_columns_is_no_hits() -> None:
    """An empty faiss index answers min(k, ntotal) = 0 columns: every query found nothing."""

    @pytest_retrieval.batched(doc_ids=NAMES)
    def search(queries: list[str], k: int) -> np.ndarray:
        return np.empty((len(queries), 0), dtype=np.int64)

    result = evaluate(search, _golden(6))
    assert [q.error for q in result.queries] == [None] * 6
    assert result.metrics["recall@5"] == result.metrics["ndcg@5"] == 0.0


def test_a_kept_doc_again_past_k_counts_as_a_repeat_as_in_a_list() -> None:
    """normalize_hits counts a top-k doc the list repeats past k (not one that comes only
    past k): so does a row whose first k are distinct."""
    rows = np.array([[1, 2, 3, 1, 9, 9], [5, 6, 7, 8, 9, 10]])
    batched, one = _pair(rows)
    golden = GoldenSet(name="b", source="b.json", k=3, queries=_golden(2).queries)
    got, want = evaluate(batched, golden), evaluate(one, golden, concurrency=1)
    assert [q.duplicates for q in got.queries] == [q.duplicates for q in want.queries] == [1, 0]
    assert got.metrics == want.metrics


def test_the_judged_ranks_of_many_judged_docs_and_a_deep_k_fit_in_little_memory() -> None:
    """1024 queries x 200 judged docs x 1000 hits: no matrix of judged docs x hits."""
    rng = np.random.default_rng(5)
    names = [f"d{i}" for i in range(5000)]
    rows = np.stack([rng.permutation(5000)[:1000] for _ in range(256)])
    queries = [
        GoldenQuery(
            id=f"q{i}",
            query=f"q {i}",
            relevant={names[d]: 1 for d in rng.choice(5000, 200, replace=False).tolist()},
        )
        for i in range(256)
    ]

    @pytest_retrieval.batched(doc_ids=names)
    def search(queries: list[str], k: int) -> np.ndarray:
        return rows[[int(q.split()[1]) for q in queries]]

    golden = GoldenSet(name="deep", source="d.json", k=1000, queries=queries)
    tracemalloc.start()
    try:
        result = evaluate(search, golden, metrics=["recall@1000"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 60e6, f"{peak / 1e6:.0f} MB"
    want = [
        len(set(rows[i].tolist()) & {int(d[1:]) for d in q.relevant}) / 200
        for i, q in enumerate(queries)
    ]
    assert [q.metrics["recall@1000"] for q in result.queries] == pytest.approx(want)


@pytest.mark.parametrize("through", ["evaluate", "run_retriever"])
def test_garbage_the_calls_leave_is_collected_while_the_calls_go_on(through: str) -> None:
    """A search that leaves reference cycles (a model, a client) must not have them kept for
    the whole evaluation; nor when run_retriever calls it straight (synth --retriever does),
    without a frozen heap around the calls."""
    alive: weakref.WeakSet[Any] = weakref.WeakSet()
    seen: list[int] = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=2)
    def search(queries: list[str], k: int) -> np.ndarray:
        seen.append(len(alive))
        alive.add(Cycle())
        return np.zeros((len(queries), k), dtype=np.int32)

    if through == "evaluate":
        evaluate(search, _golden(80))
    else:
        run_retriever(search, _golden(80).queries, 5)
    assert len(seen) == 40 and max(seen) <= 3, seen


def test_the_heap_is_left_as_it_was_frozen_or_not() -> None:
    """The plugin moves its objects with gc.freeze only when nobody else froze anything: a
    server that froze its heap before forking finds it frozen still."""
    rows = _rows(20, 5)
    batched, _ = _pair(rows, batch_size=4)
    golden = _golden(20)
    gc.collect()
    assert gc.get_freeze_count() == 0
    evaluate(batched, golden)
    assert gc.get_freeze_count() == 0
    kept = [object()]
    gc.freeze()
    try:
        evaluate(batched, golden)
        assert not any(o is kept for o in gc.get_objects())  # still frozen: out of sight
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())


def test_doc_ids_holding_a_nul_come_back_whole() -> None:
    names = ["a\x00b", "c", "d"]

    @pytest_retrieval.batched(doc_ids=names)
    def search(queries: list[str], k: int) -> np.ndarray:
        return np.array([[0, 1, 2]] * len(queries))

    query = GoldenQuery(id="q", query="q", relevant={"c": 1})
    result = evaluate(search, GoldenSet(name="n", source="n.json", k=3, queries=[query]))
    assert tuple(result.queries[0].returned) == ("a\x00b", "c", "d")
    assert result.queries[0].metrics["mrr@3"] == 0.5
    entry = from_wire(to_wire(result))
    assert list(entry["queries"][0]["returned"]) == ["a\x00b", "c", "d"]


def test_a_masked_array_s_masked_hits_are_no_hits() -> None:
    @pytest_retrieval.batched(doc_ids=NAMES)
    def search(queries: list[str], k: int) -> Any:
        data = np.array([[0, 1, 2]] * len(queries))
        return np.ma.masked_array(data, mask=[[False, True, False]] * len(queries))

    query = GoldenQuery(id="q", query="q", relevant={"doc1": 1, "doc2": 1})
    result = evaluate(search, GoldenSet(name="m", source="m.json", k=3, queries=[query]))
    assert tuple(result.queries[0].returned) == ("doc0", "doc2")


def test_an_async_search_keeps_its_event_loop_from_call_to_call() -> None:
    """A client opened on the first call (the README's advice for async clients) is bound to
    the loop it was opened on: every call runs on the same loop."""
    loops: list[asyncio.AbstractEventLoop] = []

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=5)
    async def search(queries: list[str], k: int) -> np.ndarray:
        loop = asyncio.get_running_loop()
        if loops and loops[0] is not loop:
            raise RuntimeError("the client is attached to a different loop")
        loops.append(loop)
        await asyncio.sleep(0)
        return np.zeros((len(queries), k), dtype=np.int32)

    for timeout in (None, 5.0):
        result = evaluate(search, _golden(20), timeout=timeout)
        assert [q.error for q in result.queries] == [None] * 20
    assert len(loops) == 8


def test_an_async_search_past_the_timeout_is_cancelled() -> None:
    cancelled = threading.Event()

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=2)
    async def search(queries: list[str], k: int) -> np.ndarray:
        if "q 2" in queries:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        return np.zeros((len(queries), k), dtype=np.int32)

    errors = _errors(search, _golden(6), timeout=0.3)
    assert errors == [
        None,
        None,
        *["the retriever did not answer within 0.3 s (--retrieval-timeout)"] * 2,
        None,
        None,
    ]
    assert cancelled.wait(5)


def test_a_callable_object_s_own_attributes_do_not_change_the_settings() -> None:
    class Index:
        batch_size = 8
        names = ("x",)

        def __init__(self) -> None:
            self.doc_ids = {"not": "these"}
            self.calls: list[int] = []

        def __call__(self, queries: list[str], k: int) -> np.ndarray:
            self.calls.append(len(queries))
            return np.zeros((len(queries), k), dtype=np.int32)

    index = Index()
    search = pytest_retrieval.batched(doc_ids=NAMES, batch_size=50)(index)
    result = evaluate(search, _golden(60))
    assert index.calls == [50, 10]
    assert result.queries[0].returned[0] == "doc0"


def test_a_result_copies_and_pickles_as_a_one_query_result_does() -> None:
    rows = _rows(12, 5)
    batched, one = _pair(rows)
    got, want = evaluate(batched, _golden(12)), evaluate(one, _golden(12), concurrency=1)
    for copied in (copy.deepcopy(got), pickle.loads(pickle.dumps(got))):
        assert [tuple(q.returned) for q in copied.queries] == [
            tuple(q.returned) for q in want.queries
        ]
        assert copied.metrics == got.metrics
    assert len(pickle.dumps(got.queries[0].returned)) < 500  # not the batch, not the table
    dataclasses.asdict(got)


def test_garbage_left_before_an_evaluation_is_not_kept_by_it() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    rows = _rows(6, 5)
    batched, _ = _pair(rows)
    for search in (batched, _pair(rows)[1]):
        gone = Cycle()
        ref = weakref.ref(gone)
        del gone
        evaluate(search, _golden(6), concurrency=1)
        assert ref() is None


@pytest.mark.parametrize("judged", [3, 40])  # compared with the rows, or searched in them
def test_queries_with_many_judged_docs_score_as_one_query_at_a_time(judged: int) -> None:
    rng = np.random.default_rng(judged)
    names = [f"d{i}" for i in range(300)]
    rows = np.stack([rng.permutation(300)[:60] for _ in range(30)])
    rows[::4, 50:] = -1
    queries = [
        GoldenQuery(
            id=f"q{i}",
            query=f"q {i}",
            relevant={
                names[d]: int(rng.integers(1, 4))
                for d in rng.choice(300, judged, replace=False).tolist()
            },
        )
        for i in range(30)
    ]
    golden = GoldenSet(name="many", source="m.json", k=50, queries=queries)

    @pytest_retrieval.batched(doc_ids=names, batch_size=7)
    def search(texts: list[str], k: int) -> np.ndarray:
        return rows[[int(t.split()[1]) for t in texts]]

    def one(text: str, k: int) -> list[str]:
        return [names[r] for r in rows[int(text.split()[1])].tolist() if r >= 0]

    metrics = ["recall@50", "ndcg@50", "map@50", "mrr@10", "precision@20"]
    got, want = (
        evaluate(search, golden, metrics=metrics),
        evaluate(one, golden, metrics=metrics, concurrency=1),
    )
    assert got.metrics == want.metrics
    assert [q.metrics for q in got.queries] == [q.metrics for q in want.queries]


def test_failures_in_a_row_are_counted_per_params() -> None:
    """One params value the backend refuses (an unsupported language) does not stop the
    calls of the others."""

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=2)
    def search(queries: list[str], k: int, **params: Any) -> np.ndarray:
        if params.get("lang") == "de":
            raise ValueError("no German index")
        return np.array([[int(q.split()[1])] for q in queries])

    queries = [
        GoldenQuery(
            id=f"q{i}",
            query=f"q {i}",
            relevant={f"doc{i}": 1},
            params={"lang": "de"} if i % 3 == 0 else {},
        )
        for i in range(30)
    ]
    result = evaluate(
        search, GoldenSet(name="p", source="p.json", k=1, queries=queries), max_failures=3
    )
    errors = [q.error or "" for q in result.queries]
    assert all(errors[i] == "" for i in range(30) if i % 3)
    german = [errors[i] for i in range(30) if i % 3 == 0]
    assert german[:4] == ["the retriever raised ValueError: no German index"] * 4
    assert all(e.startswith("not answered: the calls stopped") for e in german[4:])


def test_params_equal_in_python_but_not_in_json_go_to_different_calls() -> None:
    seen: dict[str, dict[str, Any]] = {}

    @pytest_retrieval.batched(doc_ids=NAMES)
    def search(queries: list[str], k: int, **params: Any) -> np.ndarray:
        seen.update(dict.fromkeys(queries, params))
        return np.zeros((len(queries), k), dtype=np.int32)

    values: list[Any] = [1, 1.0, True, 1, {"1": 2}, {1: 2}]
    queries = [
        GoldenQuery(id=f"q{i}", query=f"q {i}", relevant={"doc0": 1}, params={"v": v})
        for i, v in enumerate(values)
    ]
    with contextlib.suppress(TypeError):  # {1: 2} has no JSON fingerprint
        evaluate(search, GoldenSet(name="p", source="p.json", k=1, queries=queries))
    for i, v in enumerate(values):
        assert type(seen[f"q {i}"]["v"]) is type(v) and seen[f"q {i}"]["v"] == v
    assert seen["q 4"]["v"] == {"1": 2} and seen["q 5"]["v"] == {1: 2}
    assert list(seen["q 5"]["v"]) == [1]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.int8, np.int64])
def test_a_masked_array_of_any_integer_type(dtype: Any) -> None:
    @pytest_retrieval.batched(doc_ids=NAMES)
    def search(queries: list[str], k: int) -> Any:
        data = np.array([[0, 1, 2]] * len(queries), dtype=dtype)
        return np.ma.masked_array(data, mask=[[False, True, False]] * len(queries))

    result = evaluate(search, _golden(3))
    assert [tuple(q.returned) for q in result.queries] == [("doc0", "doc2")] * 3


def test_doc_ids_without_an_order_are_refused_and_a_grown_table_is_read_again() -> None:
    with pytest.raises(TypeError, match=r"not a set\Z"):
        pytest_retrieval.batched(doc_ids=set(NAMES))(lambda queries, k: None)
    with pytest.raises(TypeError, match=r"not a dict\Z"):
        pytest_retrieval.batched(doc_ids=dict.fromkeys(NAMES))(lambda queries, k: None)
    table = ["doc0", "doc1"]

    @pytest_retrieval.batched(doc_ids=table)
    def search(queries: list[str], k: int) -> np.ndarray:
        return np.array([[len(table) - 1]] * len(queries))

    query = GoldenQuery(id="q", query="q", relevant={"doc2": 1})
    golden = GoldenSet(name="g", source="g.json", k=1, queries=[query])
    assert evaluate(search, golden).metrics["recall@1"] == 0.0
    table.append("doc2")  # the index took a document
    assert evaluate(search, golden).metrics["recall@1"] == 1.0


# ------------------------------------------------------------------ misbehaving


def _errors(search: Any, golden: GoldenSet | None = None, **options: Any) -> list[str | None]:
    result = evaluate(search, golden or _golden(6), **options)
    assert not result.passed
    return [q.error for q in result.queries]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (lambda n, k: np.zeros((n, k)), "float64 array of shape (3, 5)"),
        (lambda n, k: np.zeros((n + 1, k), dtype=int), "int64 array of shape (4, 5)"),
        (lambda n, k: np.zeros(n, dtype=int), "int64 array of shape (3,)"),
        (lambda n, k: [["doc1"]] * n, "<U4 array of shape (3, 1)"),
        (lambda n, k: None, "NoneType"),
        (lambda n, k: np.zeros((n, k), dtype=bool), "bool array of shape (3, 5)"),
    ],
)
def test_an_answer_that_is_not_an_integer_array_fails_its_batch_and_says_what_to_return(
    answer: Any, said: str
) -> None:
    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=3)
    def search(queries: list[str], k: int) -> Any:
        return answer(len(queries), k)

    errors = _errors(search)
    assert len(set(errors)) == 1
    error = errors[0] or ""
    assert f"for 3 queries the retriever returned a {said}" in error
    assert "integer array of shape (len(queries), k): row numbers into its doc_ids" in error


@pytest.mark.parametrize(("column", "value"), [(3, 40), (7, 41), (1, -3)])
def test_a_row_number_outside_the_table_fails_its_query_only(column: int, value: int) -> None:
    """Below the first k hits too: a bad hit further down is still a broken contract."""
    rows = _rows(6, 9)
    rows[2, column] = value
    batched, _ = _pair(rows)
    errors = _errors(batched)
    assert errors[2] == (
        f"hit at rank {column + 1} is row {value} of doc_ids, which holds rows 0 to 39; a "
        "@batched retriever "
        "returns an integer array of shape (len(queries), k): row numbers into its doc_ids, "
        "-1 for no hit (as faiss's index.search(...)[1])"
    )
    assert [e for i, e in enumerate(errors) if i != 2] == [None] * 5


def test_a_batch_that_raises_fails_each_of_its_queries_with_the_traceback_kept() -> None:
    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=4)
    def search(queries: list[str], k: int) -> np.ndarray:
        if "q 5" in queries:
            raise ConnectionError("index server gone")
        return np.zeros((len(queries), k), dtype=np.int32)

    result = evaluate(search, _golden(10))
    errors = [q.error for q in result.queries]
    raised = "the retriever raised ConnectionError: index server gone"
    assert errors == [None] * 4 + [raised] * 4 + [None] * 2
    assert "index server gone" in (result.tracebacks[next(iter(result.tracebacks))] or "")
    assert "in search" in next(iter(result.tracebacks.values()))


@pytest.mark.parametrize(
    ("doc_ids", "said"),
    [
        (["a", "b", "a"], "doc_ids holds 'a' twice: batched(doc_ids=...) needs one id per row"),
        (["a", 7], "doc_ids[1] is 7: batched(doc_ids=...) holds each row's doc id, a non-empty"),
        (["a", ""], "doc_ids[1] is '': batched(doc_ids=...)"),
        ([], "doc_ids is empty: batched(doc_ids=...) holds each row's doc id"),
        ((d for d in ["a", "a"]), "doc_ids holds 'a' twice"),
    ],
)
def test_a_bad_doc_id_table_fails_every_query_before_any_call(
    doc_ids: list[Any], said: str
) -> None:
    calls = []

    @pytest_retrieval.batched(doc_ids=doc_ids)
    def search(queries: list[str], k: int) -> np.ndarray:
        calls.append(queries)
        return np.zeros((len(queries), k), dtype=np.int32)

    errors = _errors(search)
    assert all(said in (e or "") for e in errors), errors[0]
    assert calls == []


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "8", None])
def test_a_batch_size_that_is_not_a_whole_number_is_refused(size: Any) -> None:
    with pytest.raises(ValueError, match=r"batched\(batch_size=...\) must be a whole number >= 1"):
        pytest_retrieval.batched(doc_ids=NAMES, batch_size=size)(lambda queries, k: None)


def test_a_numpy_whole_number_is_a_batch_size() -> None:
    search = pytest_retrieval.batched(doc_ids=NAMES, batch_size=np.int64(2))(lambda q, k: None)
    assert search.batch_size == 2 and type(search.batch_size) is int


@pytest.mark.parametrize(("doc_ids", "what"), [(None, "NoneType"), ("abc", "str"), (7, "int")])
def test_doc_ids_that_are_not_a_table_are_refused_where_they_are_given(
    doc_ids: Any, what: str
) -> None:
    with pytest.raises(
        TypeError, match=rf"batched\(doc_ids=...\) takes each row's doc id .* not a {what}$"
    ):
        pytest_retrieval.batched(doc_ids=doc_ids)(lambda queries, k: None)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


@pytest.mark.timeout(60)
def test_a_batch_past_the_timeout_is_abandoned_and_its_queries_time_out(
    release: threading.Event,
) -> None:
    stuck: list[str] = []

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=3)
    def search(queries: list[str], k: int) -> np.ndarray:
        if "q 4" in queries:
            stuck.append("began")
            release.wait()  # set at teardown: a run that waited for it would hang
            stuck.append("returned")
        return np.zeros((len(queries), k), dtype=np.int32)

    result = evaluate(search, _golden(7), timeout=0.3)
    assert stuck == ["began"]  # abandoned, not waited for
    said = "the retriever did not answer within 0.3 s (--retrieval-timeout)"
    assert [q.error for q in result.queries] == [None] * 3 + [said] * 3 + [None]
    assert [q.latency_ms for q in result.queries][3:6] == [pytest.approx(100.0)] * 3


@pytest.mark.timeout(60)
def test_ctrl_c_in_a_batch_stops_the_run_with_or_without_a_timeout() -> None:
    @pytest_retrieval.batched(doc_ids=NAMES)
    def search(queries: list[str], k: int) -> np.ndarray:
        raise KeyboardInterrupt

    for timeout in (None, 3600.0):  # a run that waited out the timeout would hang
        with pytest.raises(KeyboardInterrupt):
            evaluate(search, _golden(4), timeout=timeout)


def test_failed_calls_in_a_row_stop_the_calls() -> None:
    calls = []

    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=2)
    def search(queries: list[str], k: int) -> np.ndarray:
        calls.append(queries)
        raise ConnectionError("down")

    result = evaluate(search, _golden(10), max_failures=3)
    assert len(calls) == 2  # 2 + 2 failed queries in a row reach 3 during the second call
    errors = [q.error or "" for q in result.queries]
    assert errors[:4] == ["the retriever raised ConnectionError: down"] * 4  # all called
    assert all(
        e.startswith("not answered: the calls stopped after the retriever failed 3")
        for e in errors[4:]
    )
    assert result.failed_calls == (
        "4 of 10 retriever calls failed; the calls stopped, leaving 6 queries unanswered"
    )


# ------------------------------------------------------------------ in a pytest run

BATCHED_CONFTEST = """
import numpy as np
import pytest
import pytest_retrieval

DOCS = {docs!r}
NAMES = sorted(DOCS)

@pytest.fixture(scope="session")
def retriever():
    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=2)
    def search(queries, k):
        rows = []
        for query in queries:
            words = set(query.split())
            shared = [len(words & set(DOCS[name].split())) for name in NAMES]
            ranked = sorted(range(len(NAMES)), key=lambda r: (-shared[r], NAMES[r]))
            rows.append(ranked[:k])
        return np.array(rows)
    return search
"""


def test_a_batched_fixture_in_tests_conftest_gates_as_the_one_query_retriever_does(
    pytester: pytest.Pytester,
) -> None:
    from helpers import DOCS, KEYWORD_RETRIEVER

    tests = pytester.mkdir("tests")
    write_golden(pytester, name="tests/golden.json")
    (tests / "conftest.py").write_text(BATCHED_CONFTEST.format(docs=DOCS), encoding="utf-8")
    batched = pytester.runpytest(
        "--retrieval-golden", "tests/golden.json", "--retrieval-report", "b.json"
    )
    batched.assert_outcomes(passed=1)
    (tests / "conftest.py").write_text(KEYWORD_RETRIEVER, encoding="utf-8")
    plain = pytester.runpytest(
        "--retrieval-golden", "tests/golden.json", "--retrieval-report", "p.json"
    )
    plain.assert_outcomes(passed=1)
    mine = json.loads((pytester.path / "b.json").read_text(encoding="utf-8"))
    theirs = json.loads((pytester.path / "p.json").read_text(encoding="utf-8"))
    for report in (mine, theirs):
        for evaluation in report["evaluations"]:
            del evaluation["latency_ms"]
            for query in evaluation["queries"]:
                del query["latency_ms"]
    assert mine["evaluations"] == theirs["evaluations"]


#: 150 queries over 60 docs: each query's judged docs land at seeded ranks, some past k
MANY_CONFTEST = """
import numpy as np
import pytest
import pytest_retrieval

NAMES = [f"d{i}" for i in range(60)]

@pytest.fixture(scope="session")
def retriever():
    @pytest_retrieval.batched(doc_ids=NAMES, batch_size=16)
    def search(queries, k):
        rows = []
        for query in queries:
            i = int(query.split()[1])
            rows.append(np.random.default_rng(i).permutation(60)[:k])
        return np.array(rows)
    return search
"""
MANY = {
    "name": "many",
    "k": 10,
    "queries": [
        {"id": f"q{i}", "query": f"query {i}", "relevant": {f"d{i % 60}": 2, f"d{(i * 7) % 60}": 1}}
        for i in range(150)
    ],
}


def test_split_over_workers_and_shards_combined_equal_one_run(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("xdist")
    from pytest_retrieval.cli import main

    pytester.makeconftest(MANY_CONFTEST)
    write_golden(pytester, MANY)
    golden = ("--retrieval-golden", "golden.json")
    pytester.runpytest(*golden, "-p", "no:xdist", "--retrieval-report", "one.json").assert_outcomes(
        passed=1
    )
    split = pytester.runpytest_subprocess(
        *golden, "-n", "2", "--retrieval-split-min", "100", "--retrieval-report", "split.json"
    )
    split.assert_outcomes(passed=2)
    for i in (1, 2):
        shard = pytester.runpytest(
            *golden,
            "-p",
            "no:xdist",
            "--retrieval-shard",
            f"{i}/2",
            "--retrieval-report",
            f"p{i}.json",
        )
        assert shard.ret == 0
    capsys.readouterr()
    assert main(["combine", "p1.json", "p2.json", "--report", "combined.json"]) == 0
    one = evaluations(pytester.path / "one.json")
    assert 0 < one[0]["metrics"]["recall@10"] < 1
    assert evaluations(pytester.path / "split.json") == one
    assert evaluations(pytester.path / "combined.json") == one
