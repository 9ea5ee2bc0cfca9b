"""Downstream (eRAG) labels: the user's own RAG pipeline scores each retrieved document.

eRAG (Salemi & Zamani) labels a document by what it does for the answer: run the generator
on that single document and score its output against the expected answer. The user supplies
``retrieval_downstream(query, doc, entry) -> float`` in [0, 1]; this module calls it for every
top-k hit, concurrently, and caches the labels on disk (SQLite) so an unchanged hit is never
scored twice. The cache key includes a version of the function (its ``version`` attribute, or
a hash of its source), so editing the function invalidates its labels.

Each label is committed to the cache the moment it exists (a label may cost a generation, as
a judge verdict does): a killed run keeps every label it made, and the rerun asks only for
the others. A failure's message is scrubbed of secrets before it is kept: the user's RAG
pipeline calls paid APIs, and their clients put keys in their errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._internal.cache import JsonCache
from ._internal.loop import awaited
from ._internal.scrub import scrub
from .golden import GoldenQuery, GoldenSet, check_texts
from .labels import Labelled, LabelRequest

if TYPE_CHECKING:
    from .metrics import Metric

DownstreamFn = Callable[..., Any]


@dataclass(frozen=True)
class Hit:
    """What the downstream function gets as ``doc``."""

    id: str
    text: str | None
    rank: int
    score: float | None = None


def function_version(fn: DownstreamFn) -> str:
    """``fn.version`` if set, else a hash of its source (so an edit invalidates the cache)."""
    declared = getattr(fn, "version", None)
    if declared is not None:
        return str(declared)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = getattr(fn, "__qualname__", type(fn).__qualname__)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


class DownstreamRunner:
    """Labels every top-k hit with ``fn(query, doc, entry)``; see the module docstring. A
    label source (:class:`~.labels.LabelSource`) of the eRAG metrics."""

    name = "downstream"
    kinds = ("downstream", "downstream_gain")  # binarised at 0.5, and as graded gains

    def __init__(
        self,
        fn: DownstreamFn,
        *,
        concurrency: int = 8,
        cache_dir: Path | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(
                f"retrieval_downstream returned a {type(fn).__name__}, not a callable; return "
                "a function score(query, doc, entry) -> float in [0, 1]"
            )
        self.fn = fn
        self.concurrency = max(1, concurrency)
        self.cache = JsonCache(cache_dir, "downstream") if cache_dir is not None else None
        self.version = function_version(fn)
        self.calls = 0
        self.cache_hits = 0
        self.failures: dict[str, str] = {}  # "query id / doc id" -> what went wrong

    def close(self) -> None:
        """Close the cache's connections (a later call reopens them)."""
        if self.cache is not None:
            self.cache.close()

    def _key(self, query: GoldenQuery, hit: Hit) -> str:
        material = [self.version, query.query, query.criteria, query.metadata, hit.id, hit.text]
        text = json.dumps(material, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def _call(self, query: GoldenQuery, hit: Hit) -> float | str:
        """The label, or a message saying why there is none (scrubbed of secrets)."""
        try:
            value = self.fn(query.query, hit, query)
            if inspect.isawaitable(value):
                value = asyncio.run(awaited(value))
        except Exception as exc:
            return scrub(f"retrieval_downstream raised {type(exc).__name__}: {_text(exc)}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            shown = scrub(_text(value, repr))[:200]  # scrubbed whole, then cut
            return f"retrieval_downstream returned {shown}; return a number in [0, 1]"
        if not math.isfinite(value) or not 0 <= value <= 1:
            return f"retrieval_downstream returned {value!r}, outside [0, 1]"
        return float(value)

    def _label(self, item: tuple[int, GoldenQuery, Hit, str]) -> float | str:
        """One label, stored the moment it exists (committed before the next call starts on
        this thread: a killed run loses only the calls in flight)."""
        _, query, hit, key = item
        outcome = self._call(query, hit)
        if self.cache is not None and not isinstance(outcome, str):
            self.cache.put(key, outcome)
        return outcome

    def defaults(self, golden: GoldenSet, k: int) -> list[str]:
        return [f"erag_{family}@{k}" for family in ("precision", "hit_rate", "mrr", "ndcg")]

    def check(self, golden: GoldenSet, wanted: Sequence[Metric]) -> None:
        check_texts(golden, "downstream labelling")

    def label(self, request: LabelRequest) -> Labelled:
        """A label for each top-``depth`` hit; one whose call failed has none (it counts as
        not relevant), and the failure is kept for the report and the verdict."""
        runs, depth, corpus = request.runs, request.depth, request.corpus
        labels: list[dict[str, float]] = [{} for _ in runs]
        holes: list[dict[str, str]] = [{} for _ in runs]
        todo: list[tuple[int, GoldenQuery, Hit, str]] = []
        for row, (query, run) in enumerate(zip(request.queries, runs, strict=True)):
            for rank, doc in enumerate(run.ids[:depth], 1):
                text = run.texts.get(doc) or (corpus.get(doc) if corpus else None)
                hit = Hit(doc, text, rank, run.scores.get(doc))
                key = self._key(query, hit)
                cached = self.cache.get(key) if self.cache else None
                if cached is not None:
                    labels[row][doc] = float(cached)
                    self.cache_hits += 1
                else:
                    todo.append((row, query, hit, key))
        with ThreadPoolExecutor(self.concurrency, "pytest-retrieval-downstream") as pool:
            outcomes = list(pool.map(self._label, todo))
        self.calls += len(todo)
        for (row, query, hit, _), outcome in zip(todo, outcomes, strict=True):
            if isinstance(outcome, str):
                self.failures[f"{query.id} / {hit.id}"] = outcome
                holes[row][hit.id] = outcome
            else:
                labels[row][hit.id] = outcome
        return Labelled(
            labels={"downstream": labels},
            holes=holes,
            columns={"downstream": labels},
            fields={"erag": self.summary()},
        )

    def summary(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "failures": dict(list(self.failures.items())[:20]),
            "failed": len(self.failures),
        }


def _text(value: object, show: Callable[[object], str] = str) -> str:
    """``str(value)`` (or ``show``), or a placeholder when that raises."""
    try:
        return show(value)
    except Exception:
        return f"<a {type(value).__name__} whose {show.__name__}() raised>"
