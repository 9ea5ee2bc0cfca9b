"""The Guide pages' examples run as written: docs/golden-sets.md, docs/retriever.md and
docs/metrics.md (each block is fetched by its ``<!-- example: NAME -->`` marker)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from docs_examples import example

from pytest_retrieval import evaluate, load_golden

#: a toy index for the examples: ranks docs by the words they share with the query
TOY_INDEX = """

DOCS = {
    "doc_1234": "how to handle EADDRINUSE address already in use",
    "doc_5678": "EADDRINUSE when a port is taken",
    "doc_2291": "Postgres connection pooling with pgbouncer",
    "doc_17": "connection pooling basics",
    "doc_99": "billing and invoices",
}


def _words(text):
    return set(text.lower().split())


class _Hit:
    def __init__(self, doc_id):
        self.id = doc_id


class _Index:
    def search(self, query, top_k):
        shared = {d: len(_words(query) & _words(t)) for d, t in DOCS.items()}
        ranked = sorted(DOCS, key=lambda d: (-shared[d], d))
        return [_Hit(d) for d in ranked[:top_k]]


def build_my_index():
    return _Index()


def load_embeddings():
    import numpy as np

    vocabulary = sorted(set().union(*map(_words, DOCS.values())))
    doc_ids = sorted(DOCS)
    vectors = np.array([[w in _words(DOCS[d]) for w in vocabulary] for d in doc_ids], float)
    load_embeddings.vocabulary = vocabulary
    return doc_ids, vectors


def embed(queries):
    import numpy as np

    vocabulary = load_embeddings.vocabulary
    return np.array([[w in _words(q) for w in vocabulary] for q in queries], float)
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------- golden-sets.md


def test_the_json_golden_set(tmp_path: Path) -> None:
    golden = load_golden(write(tmp_path / "golden.json", example("golden-json")))
    assert golden.name == "support-faq" and golden.k == 10
    assert golden.thresholds == {"recall@10": 0.85, "mrr@5": 0.6}
    first, second = golden.queries
    assert (first.id, first.relevant, first.tags) == (
        "q1",
        {"doc_1234": 1, "doc_5678": 1},
        ("errors",),
    )
    assert (second.id, second.relevant) == ("q2", {"doc_2291": 3, "doc_17": 1})


def test_the_bare_list_and_jsonl_forms(tmp_path: Path) -> None:
    listed = load_golden(write(tmp_path / "faq.json", example("golden-bare-list")))
    assert (listed.name, listed.k, len(listed.queries)) == ("faq", 10, 2)
    assert all(q.id.startswith("q-") and len(q.id) == 14 for q in listed.queries)
    lines = load_golden(write(tmp_path / "golden.jsonl", example("golden-jsonl")))
    whole = load_golden(write(tmp_path / "golden.json", example("golden-json")))
    assert lines.name == "golden" and lines.k == 10
    assert lines.fingerprint == whole.fingerprint  # the same queries in another format


def test_the_csv_form(tmp_path: Path) -> None:
    golden = load_golden(write(tmp_path / "golden.csv", example("golden-csv")))
    assert [(q.id, q.relevant, q.tags) for q in golden.queries] == [
        ("q1", {"doc-12": 1, "doc-40": 2}, ("account",)),
        ("q2", {"doc-7": 1}, ("billing", "export")),
    ]


def test_the_trec_form_and_its_fingerprint(tmp_path: Path) -> None:
    """The block shows two files; a negative grade is kept as judged (0); the fingerprint
    does not depend on the format."""
    files: dict[str, list[str]] = {}
    current: list[str] = []
    for line in example("golden-trec").splitlines():
        if line.endswith(":") and " " not in line:
            current = files.setdefault(line[:-1], [])
        elif line.strip():
            current.append(line)
    assert set(files) == {"faq.qrels", "queries.tsv"}
    for name, lines in files.items():
        write(tmp_path / name, "\n".join(lines) + "\n")
    golden = load_golden(tmp_path / "faq.qrels")
    assert golden.name == "faq"
    assert [(q.id, q.query, q.relevant) for q in golden.queries] == [
        ("q1", "how to reset a password", {"doc-12": 1}),
        ("q2", "export invoices", {"doc-40": 2, "doc-41": 0}),
    ]
    same = [
        {"id": "q2", "query": "export invoices", "relevant": {"doc-41": 0, "doc-40": 2}},
        {"id": "q1", "query": "how to reset a password", "relevant": ["doc-12"]},
    ]
    as_json = load_golden(write(tmp_path / "other.json", json.dumps(same)))
    assert as_json.fingerprint == golden.fingerprint


# --------------------------------------------------------------------------- retriever.md


def test_the_common_retriever_passes_the_golden_set(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(example("retriever-conftest") + TOY_INDEX)
    write(pytester.path / "golden.json", example("golden-json"))
    result = pytester.runpytest_inprocess(
        "--retrieval-golden", "golden.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*verdict: PASSED*"])


def test_every_hit_shape_scores_the_same(tmp_path: Path) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(example("retriever-hit-shapes"), "retriever-hit-shapes", "exec"), namespace)
    golden = load_golden(write(tmp_path / "golden.json", example("golden-json")))
    names = ["ids", "pairs", "mappings", "streamed", "remote", "remote_streamed"]
    results = [evaluate(namespace[name], golden, concurrency=2) for name in names]
    for name, result in zip(names, results, strict=True):
        assert [q.returned for q in result.queries] == [("doc_1234", "doc_17", "doc_5678")] * 2
        assert result.metrics == results[0].metrics, name
    assert results[0].metrics["recall@10"] == pytest.approx(0.75)


def test_the_batched_numpy_retriever(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(example("retriever-batched-numpy") + TOY_INDEX)
    write(pytester.path / "golden.json", example("golden-json"))
    result = pytester.runpytest_inprocess(
        "--retrieval-golden", "golden.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*recall@10*1.0000*", "*verdict: PASSED*"])


# ----------------------------------------------------------------------------- metrics.md


def test_the_worked_example() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(example("metrics-by-hand"), "metrics-by-hand", "exec"), namespace)
    values = {name: column.tolist() for name, column in namespace["values"].items()}
    ndcg = (2 / math.log2(3)) / (2 / math.log2(2) + 1 / math.log2(3))
    expected = {
        "recall@3": [0.5, 0.0],
        "precision@3": [1 / 3, 0.0],
        "mrr@3": [0.5, 0.0],
        "ndcg@3": [ndcg, 0.0],
        "map@3": [0.25, 0.0],
        "judged@3": [1 / 3, 0.0],
    }
    assert values.keys() == expected.keys()
    for name, column in expected.items():
        assert values[name] == pytest.approx(column, abs=1e-12), name
    assert round(ndcg, 4) == 0.4796
