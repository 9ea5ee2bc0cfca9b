"""The retriever runner: hit shapes, golden order under concurrency, limits, timeouts, async."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_retrieval.golden import GoldenQuery
from pytest_retrieval.hits import NOT_RETURNED, HitError, normalize_hits
from pytest_retrieval.retrieval import run_retriever


def _queries(n: int) -> list[GoldenQuery]:
    return [GoldenQuery(id=str(i), query=f"q{i}", relevant={"d": 1}) for i in range(n)]


@dataclass
class Doc:
    id: str
    text: str
    score: float


def test_hit_shapes() -> None:
    run = normalize_hits(
        ["a", {"id": "b", "text": "bee", "score": 2}, Doc("c", "sea", 0.5), "a", "d"], k=3
    )
    assert run.ids == ("a", "b", "c")
    assert run.texts == {"b": "bee", "c": "sea"}
    assert run.scores == {"b": 2.0, "c": 0.5}
    assert run.duplicates == 1


def test_numpy_scores_are_kept() -> None:
    """FAISS and most vector stores give float32 scores: not a Python float, still a score."""
    np = pytest.importorskip("numpy")
    hits = [
        {"id": "a", "score": np.float32(0.75)},
        Doc("b", "bee", np.float64(0.5)),  # type: ignore[arg-type]
        {"id": "c", "score": np.int64(3)},
        {"id": "d", "score": True},  # a bool is not a score
        {"id": "e", "score": "0.1"},  # nor is text
    ]
    assert normalize_hits(hits, k=5).scores == {"a": 0.75, "b": 0.5, "c": 3.0}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, "returned None"),
        ("doc1", "returned a str"),
        ({"id": "x"}, "returned a dict"),
        (42, "returned a int"),
        ([1], "rank 1 has no usable id (got int 1)"),
        (["a", {"id": 7}], "rank 2 has no usable id (got 7)"),
        (["a", ""], "rank 2 has no usable id (got '')"),
    ],
)
def test_bad_hits(raw: Any, message: str) -> None:
    with pytest.raises(HitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        normalize_hits(raw, k=5)


def test_golden_order_and_concurrency_limit() -> None:
    lock = threading.Lock()
    in_flight = peak = 0

    def search(query: str, k: int) -> list[str]:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(random.random() / 200)
        with lock:
            in_flight -= 1
        return [query]

    runs = run_retriever(search, _queries(200), 1, concurrency=4)
    assert [r.ids for r in runs] == [(f"q{i}",) for i in range(200)]
    assert peak == 4
    assert all(r.latency > 0 for r in runs)


def test_params_are_passed() -> None:
    seen: list[dict[str, Any]] = []
    query = GoldenQuery(id="x", query="q", relevant={"d": 1}, params={"namespace": "eu"})
    run_retriever(lambda q, k, **kw: seen.append(kw) or ["d"], [query], 3)
    assert seen == [{"namespace": "eu"}]


def test_async_limit_and_order_inside_a_running_loop() -> None:
    in_flight = peak = 0

    async def search(query: str, k: int) -> list[str]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(random.random() / 200)
        in_flight -= 1
        return [query]

    async def inside_loop() -> list[tuple[str, ...]]:  # e.g. an async test under pytest-asyncio
        return [r.ids for r in run_retriever(search, _queries(100), 1, concurrency=5)]

    assert asyncio.run(inside_loop()) == [(f"q{i}",) for i in range(100)]
    assert peak == 5


@pytest.mark.timeout(60)
def test_sync_timeout_does_not_hold_up_the_rest() -> None:
    release = threading.Event()
    returned: list[str] = []

    def search(query: str, k: int) -> list[str]:
        if query == "q1":
            release.wait()  # set below, after the run: a run that waited for it would hang
            returned.append(query)
        return ["d"]

    try:
        runs = run_retriever(search, _queries(10), 1, concurrency=2, timeout=0.2)
        assert returned == []  # the run ended while the call was still stuck: abandoned
    finally:
        release.set()
    assert runs[1].error is not None and "within 0.2 s" in runs[1].error
    assert [r.error for i, r in enumerate(runs) if i != 1] == [None] * 9


def test_async_timeout() -> None:
    async def search(query: str, k: int) -> list[str]:
        await asyncio.sleep(5 if query == "q0" else 0)
        return ["d"]

    runs = run_retriever(search, _queries(3), 1, timeout=0.2)
    assert runs[0].error is not None and "within 0.2 s" in runs[0].error
    assert runs[1].error is None


def test_exceptions_are_per_query() -> None:
    def search(query: str, k: int) -> list[str]:
        if query == "q2":
            raise RuntimeError("boom")
        return ["d"]

    runs = run_retriever(search, _queries(4), 1)
    assert runs[2].error == "the retriever raised RuntimeError: boom"
    assert sum(r.error is not None for r in runs) == 1


def test_library_api_without_pytest(tmp_path: Path) -> None:
    """`evaluate` works in a plain script: no pytest, no plugin involved."""
    (tmp_path / "g.json").write_text(
        '[{"query": "a", "relevant": ["d1"]}, {"query": "b", "relevant": ["d9"]}]'
    )
    script = (
        "import sys\n"
        "from pytest_retrieval import evaluate, load_golden\n"
        "golden = load_golden('g.json')\n"
        "result = evaluate(lambda q, k: ['d1', 'd2'], golden, thresholds={'recall@10': 0.4})\n"
        "print(result.metrics['recall@10'], result.passed, 'pytest' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["0.5", "True", "False"]


def test_a_retriever_calling_sys_exit_is_an_error_not_a_hang() -> None:
    import sys

    from pytest_retrieval.golden import GoldenQuery
    from pytest_retrieval.retrieval import run_retriever

    def search(query: str, k: int) -> list[str]:
        if query == "bad":
            sys.exit(3)
        return ["d1"]

    queries = [
        GoldenQuery(id=str(i), query=q, relevant={"d1": 1}) for i, q in enumerate(["ok", "bad"])
    ]
    runs = run_retriever(search, queries, 5, concurrency=2, timeout=5)
    assert runs[0].ids == ("d1",)
    assert runs[1].error == "the retriever raised SystemExit: 3"


def test_retriever_tracebacks_are_the_stdlibs_without_carets() -> None:
    """Formatted without parsing source (ast is not thread-safe on CPython 3.11, and this
    runs in retriever threads): the stdlib's text, chain included, less the ^^^ lines."""
    import traceback

    from pytest_retrieval._internal.stacks import format_traceback

    def inner() -> None:
        raise KeyError("x")

    def outer() -> None:
        try:
            inner()
        except KeyError as exc:
            raise RuntimeError("wrapped") from exc

    try:
        outer()
    except RuntimeError as exc:
        ours = format_traceback(exc, exc.__traceback__)
        stdlib = "".join(traceback.format_exception(exc))
    carets = {"^", "~"}
    expected = [
        line for line in stdlib.splitlines() if not line.strip() or set(line.strip()) - carets
    ]
    assert ours.splitlines() == expected
    assert "The above exception was the direct cause" in ours and 'raise KeyError("x")' in ours


_ID = st.text(alphabet="ab\x00é", min_size=1, max_size=3)


@settings(max_examples=500, deadline=None)
@given(data=st.data(), distinct=st.booleans())
def test_the_ranks_found_with_the_hits_are_their_places(
    data: st.DataObject, distinct: bool
) -> None:
    """Each judged doc's rank, found as the call returns, is its first place among the hits
    kept (NOT_RETURNED when absent): ids that are each other's prefixes or suffixes, hold
    the NUL that joins them, repeat, or run past k."""
    hits = data.draw(st.lists(_ID, max_size=12, unique=distinct), label="hits")
    judged = data.draw(
        st.lists(st.sampled_from(hits) | _ID if hits else _ID, max_size=5, unique=True),
        label="judged",
    )
    _check_ranks(hits, judged)


@pytest.mark.parametrize(
    ("hits", "judged"),
    [(["a", "aa"], ["a"]), (["aa", "a"], ["a", "aa"]), (["ba", "a", "ab"], ["ab", "b", "a"])],
)
def test_the_ranks_of_ids_inside_other_ids(hits: list[str], judged: list[str]) -> None:
    _check_ranks(hits, judged)


def _check_ranks(hits: list[str], judged: list[str]) -> None:
    run = normalize_hits(hits, k=8, judged=judged)
    kept = list(run.ids)
    assert kept == list(dict.fromkeys(hits))[:8]
    assert run.ranks == tuple(kept.index(d) if d in kept else NOT_RETURNED for d in judged)


def test_a_ranking_is_its_ids_kept_as_one_string() -> None:
    """Plain hit lists are kept as one NUL-joined string (hits.Ranking: no container for
    the garbage collector to traverse); to every reader it is the tuple of its ids."""
    from pytest_retrieval.hits import Ranking

    run = normalize_hits(["d3", "d1", "d2"], k=5, judged={"d1": 1, "x": 2})
    assert isinstance(run.ids, Ranking) and run.ids.joined == "d3\x00d1\x00d2"
    assert run.ids == ("d3", "d1", "d2") and run.ids == ("d3", "d1", "d2")
    assert [run.ids] == [("d3", "d1", "d2")] and run.ids != ["d3", "d1", "d2"]
    assert len(run.ids) == 3 and run.ids[1] == "d1" and run.ids[:2] == ("d3", "d1")
    assert list(run.ids) == ["d3", "d1", "d2"] and "d2" in run.ids and "d4" not in run.ids
    assert run.ids.index("d2") == 2 and hash(run.ids) == hash(("d3", "d1", "d2"))
    assert repr(run.ids) == "('d3', 'd1', 'd2')"
    assert list(reversed(run.ids)) == ["d2", "d1", "d3"]
    tuples = [("d3", "d1"), ("d3", "d1", "d2", "a"), ("a",), ("z",)]
    rankings = sorted([run.ids, normalize_hits(["d3", "d1"], 5).ids, *tuples[1:]])
    assert rankings == sorted([("d3", "d1", "d2"), *tuples])
    assert run.ids > ("d3", "d1") and run.ids >= run.ids and not run.ids < ("a",)
    with pytest.raises(TypeError):
        assert run.ids < ["d3"]
    assert run.ranks == (1, NOT_RETURNED)
    assert normalize_hits([], k=5).ids == ()
    # an id holding the separator, more hits than k, a repeat: a tuple, as before
    for raw, k in ((["a\x00b", "c"], 5), (["a", "b", "c"], 2), (["a", "b", "a"], 5)):
        assert type(normalize_hits(raw, k).ids) is tuple
    assert normalize_hits(["a\x00b", "c"], 5).ids == ("a\x00b", "c")
