"""Shared helpers: a tiny corpus, golden sets and retrievers written into pytester projects."""

from __future__ import annotations

import json
from typing import Any

import pytest

# Import the heavy modules once in this process: pytester's in-process runs restore
# sys.modules afterwards, and numpy cannot be imported a second time in one process.
import pytest_retrieval.evaluation
import pytest_retrieval.report  # noqa: F401

pytest_plugins = ["pytester"]

#: a conftest with a deterministic keyword retriever over six documents
KEYWORD_RETRIEVER = """
import pytest

DOCS = {
    "d1": "apple pie recipe",
    "d2": "banana bread recipe",
    "d3": "cherry tart",
    "d4": "apple cider vinegar",
    "d5": "bread machine manual",
    "d6": "tart cherry juice",
}

def search(query, k, **params):
    words = set(query.split())
    ranked = sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))
    return ranked[:k]

@pytest.fixture(scope="session")
def retriever():
    return search
"""

GOLDEN: dict[str, Any] = {
    "name": "fruit",
    "k": 3,
    "queries": [
        {"id": "apple", "query": "apple", "relevant": ["d1", "d4"], "tags": ["fruit"]},
        {"id": "bread", "query": "bread recipe", "relevant": {"d2": 3, "d5": 1, "d1": 0}},
        {"id": "cherry", "query": "cherry", "relevant": ["d3", "d6"], "tags": ["fruit"]},
        {"id": "juice", "query": "juice", "relevant": ["d6"], "tags": ["drink"]},
    ],
}


def write_golden(pytester: pytest.Pytester, data: Any = None, name: str = "golden.json") -> str:
    path = pytester.path / name
    path.write_text(json.dumps(GOLDEN if data is None else data, indent=1), encoding="utf-8")
    return name


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the keyword retriever and the fruit golden set."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    return pytester
