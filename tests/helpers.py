"""Shared test data: a tiny corpus with a keyword retriever, and a golden set over it; how
the browser tests start Debian's Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from typing import Any

import pytest

#: Debian's Chromium (None: the browser tests skip and say why)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: as root, with no network: without the background-networking flags Chromium's own
#: connections are refused many at a time
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: the six documents of the keyword retriever below
DOCS = {
    "d1": "apple pie recipe",
    "d2": "banana bread recipe",
    "d3": "cherry tart",
    "d4": "apple cider vinegar",
    "d5": "bread machine manual",
    "d6": "tart cherry juice",
}

#: a conftest with a deterministic keyword retriever over those six documents
KEYWORD_RETRIEVER = f"""
import pytest

DOCS = {DOCS!r}

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


PROC_FD = "/proc/self/fd"


def held_open() -> list[str]:
    """What this process holds open (files, sockets, pipes), from ``/proc`` (Linux)."""
    held = []
    for fd in os.listdir(PROC_FD):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed meanwhile
            held.append(os.readlink(f"{PROC_FD}/{fd}"))
    return sorted(held)


def opened_since(before: list[str]) -> list[str]:
    """What is held open now that was not in ``before`` (a :func:`held_open`): what was
    opened and left open. Not an equality: a descriptor something else closed meanwhile (an
    earlier test's socket, collected) is no leak -- that made these checks flaky under CI."""
    from collections import Counter

    return sorted((Counter(held_open()) - Counter(before)).elements())


def count_built_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows every QueryTable builds a QueryResult for from now on, as they are built
    (a check that a large evaluation's columns are read, not turned into objects)."""
    from pytest_retrieval.results import QueryTable

    built: list[int] = []
    build = QueryTable._build

    def counted(table: QueryTable, rows: range) -> Any:
        built.extend(rows)
        return build(table, rows)

    monkeypatch.setattr(QueryTable, "_build", counted)
    return built


def asyncio_reads_loop_scope() -> bool:
    """Whether the installed pytest-asyncio knows ``asyncio_default_fixture_loop_scope``
    (0.24 on; with pytest 7.4, the lowest we test, pip picks 0.23, which warns of the key)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = (int(part) for part in version("pytest-asyncio").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (0, 24)
