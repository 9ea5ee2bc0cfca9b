"""The example retriever the README uses: BM25 over the bundled Cranfield collection.

pytest-retrieval evaluates whatever the session-scoped ``retriever`` fixture returns: a callable
``search(query, k)`` giving ranked hits. Here that is a BM25 index (``bm25s``, English stopwords,
Snowball English stemmer from PyStemmer) over the title and abstract of the 1400 documents in
``example_golden/cranfield/corpus.jsonl``; try it with::

    pip install -e ".[example]"
    pytest --retrieval-golden example_golden/cranfield.json

The index is built once per session, and ``bm25s`` is imported only when the fixture is used,
so this file costs nothing to test runs that do not ask for ``retriever``.
``tests/test_cranfield_conformance.py`` reuses :func:`build_bm25_search`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest


def _asyncio_reads_loop_scope() -> bool:
    """Whether the installed pytest-asyncio declares ``asyncio_default_fixture_loop_scope``
    (0.24 on; the lowest pytest we test, 7.4, gets 0.23, which does not)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(part) for part in version("pytest-asyncio").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (0, 24)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """pyproject.toml sets pytest-asyncio's ``asyncio_default_fixture_loop_scope`` (else the
    dev venv warns at every run); where no pytest-asyncio reads it (the example extra,
    ``-p no:asyncio``, or a pytest-asyncio before 0.24) the key is declared here, so that
    pytest does not warn of an unknown config option."""
    if not (pluginmanager.has_plugin("asyncio") and _asyncio_reads_loop_scope()):
        parser.addini(
            "asyncio_default_fixture_loop_scope", "read by pytest-asyncio (dev extra) only"
        )


CORPUS = Path(__file__).resolve().parent / "example_golden" / "cranfield" / "corpus.jsonl"

Hit = dict[str, object]
Search = Callable[[str, int], list[Hit]]


def build_bm25_search(corpus_path: str | Path = CORPUS) -> Search:
    """Index a BEIR ``corpus.jsonl`` (title + text) with BM25 and return ``search(query, k)``.

    ``search`` returns at most ``k`` hits ``{"id", "text", "score"}``, best first; documents
    sharing no term with the query (score 0) are left out. It is safe to call from threads.
    """
    import bm25s
    import numpy as np
    import Stemmer

    ids: list[str] = []
    texts: list[str] = []
    with Path(corpus_path).open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                doc = json.loads(line)
                ids.append(str(doc["_id"]))
                texts.append("\n".join(p for p in (doc.get("title"), doc.get("text")) if p))

    stemmer = Stemmer.Stemmer("english")
    index = bm25s.BM25()
    index.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    lock = threading.Lock()  # a PyStemmer stemmer is not thread-safe

    def search(query: str, k: int) -> list[Hit]:
        """The top ``k`` documents for ``query`` by BM25 score."""
        k = min(k, len(ids))
        if k < 1:
            return []
        with lock:
            tokens = bm25s.tokenize(
                [query], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
            )
            scores = index.get_scores(tokens[0])
        # best first, equal scores in corpus order: bm25s' own top-k leaves the order of
        # ties to numpy's partition, which differs between versions (and so would the
        # committed baseline's rankings)
        top = np.lexsort((np.arange(len(ids)), -scores))[:k]
        return [
            {"id": ids[doc], "text": texts[doc], "score": float(scores[doc])}
            for doc in top.tolist()
            if scores[doc] > 0
        ]

    return search


@pytest.fixture(scope="session")
def retriever() -> Search:
    """BM25 over the Cranfield example corpus (built once per session)."""
    return build_bm25_search(CORPUS)
