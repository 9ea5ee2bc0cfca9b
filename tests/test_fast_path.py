"""The fast paths for large golden sets (issue 13) give what the general paths give.

- Golden loading: plain entries skip the pydantic model; a property test checks that whatever
  the fast check accepts, the model accepts too, with equal queries (and that the model's
  errors are still what the user sees).
- Scoring: deduplicated rankings skip the duplicate check; metric values equal the general
  kernels' and pytrec_eval's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
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
