"""What ``pytest-retrieval validate`` reports about a golden set beyond its schema: counts,
graded vs binary, relevant docs per query, tag balance, duplicate and near-duplicate query
texts, and its relevant ids against its corpus. Pure: no printing, no exit codes."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .golden import GoldenError, GoldenSet


def corpus_check(golden: GoldenSet) -> tuple[dict[str, Any] | None, GoldenError | None]:
    """The golden set's relevant ids against its corpus: a JSON-able summary (None: it has no
    corpus) and the GoldenError to warn with (None: nothing missing). An unreadable corpus
    is a problem too: the ids cannot be checked."""
    from .golden import (
        SHOWN_MISSING,
        GoldenError,
        corpus_file,
        corpus_problem,
        load_corpus_ids,
        missing_from_corpus,
    )

    if golden.corpus is None:
        return None, None
    summary: dict[str, Any] = {"path": golden.corpus, "documents": None, "missing": None}
    try:
        ids = load_corpus_ids(corpus_file(golden))
    except GoldenError as exc:
        return summary, exc
    missing = missing_from_corpus(golden, ids)
    summary.update(documents=len(ids), missing=len(missing), missing_ids=missing[:SHOWN_MISSING])
    return summary, corpus_problem(golden, ids, golden.corpus)


_WORD = re.compile(r"\w+")


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


NEAR = 0.8  # Jaccard similarity of word sets


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b)


def near_duplicates(texts: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Groups of query ids whose word sets are near-identical (Jaccard >= 0.8).

    Each word set is indexed under itself and under every one-word-smaller subset, so two
    sets within one insertion or substitution of each other share a key; only those pairs
    are compared: linear in the number of words, never every pair.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    buckets: dict[frozenset[str], str] = {}
    seen: dict[str, frozenset[str]] = {}
    for query_id, text in texts:
        words = _words(text)
        if not words:
            continue
        keys = [words] + ([words - {w} for w in words] if len(words) > 2 else [])
        for key in keys:
            other = buckets.setdefault(key, query_id)
            if other != query_id and _jaccard(words, seen[other]) >= NEAR:
                parent[find(query_id)] = find(other)
        seen[query_id] = words
    groups: dict[str, list[str]] = {}
    for query_id, _ in texts:
        if query_id in parent:
            groups.setdefault(find(query_id), []).append(query_id)
    return [ids for ids in groups.values() if len(ids) > 1]


def sanity(golden: Any) -> dict[str, Any]:
    """Counts and warnings about a loaded golden set (JSON-able)."""
    queries = golden.queries
    relevant = [sum(1 for g in q.relevant.values() if g > 0) for q in queries]
    labelled = [n for n in relevant if n]
    graded = sum(1 for q in queries if any(g > 1 for g in q.relevant.values()))
    by_text: dict[str, list[str]] = {}
    for q in queries:
        by_text.setdefault(" ".join(q.query.lower().split()), []).append(q.id)
    duplicates = [ids for ids in by_text.values() if len(ids) > 1]
    exact = {id_ for ids in duplicates for id_ in ids}
    near = [
        ids for ids in near_duplicates([(q.id, q.query) for q in queries]) if not set(ids) <= exact
    ]
    single = [q.id for q, n in zip(queries, relevant, strict=True) if n == 1]
    tags = Counter(tag for q in queries for tag in q.tags)
    untagged = sum(1 for q in queries if not q.tags)
    warnings = []
    if duplicates:
        warnings.append(f"{len(duplicates)} query texts appear more than once")
    if near:
        warnings.append(f"{len(near)} groups of near-duplicate queries")
    if labelled and len(single) > len(queries) / 2:
        warnings.append(
            f"{len(single)} of {len(queries)} queries have a single relevant document: "
            "recall@k is 0 or 1 for them, so aggregates move in big steps"
        )
    if tags and min(tags.values()) < 5:
        small = sorted(tag for tag, n in tags.items() if n < 5)
        warnings.append(f"tags with fewer than 5 queries (noisy per-tag metrics): {small}")
    open_queries = len(queries) - len(labelled)
    return {
        "source": golden.source,
        "name": golden.name,
        "fingerprint": golden.fingerprint,
        "k": golden.k,
        "queries": len(queries),
        "labelled": len(labelled),
        "open": open_queries,
        "graded": graded,
        "relevant_per_query": {
            "min": min(labelled, default=0),
            "median": statistics.median(labelled) if labelled else 0,
            "max": max(labelled, default=0),
        },
        "single_relevant": single,
        "duplicate_queries": duplicates,
        "near_duplicate_queries": near,
        "tags": dict(sorted(tags.items())),
        "untagged": untagged,
        "warnings": warnings,
    }


def sanity_text(report: dict[str, Any]) -> str:
    per = report["relevant_per_query"]
    lines = [
        f"{report['source']}: valid golden set {report['name']!r} "
        f"(fingerprint {report['fingerprint']}, k={report['k']})",
        f"  {report['queries']} queries: {report['labelled']} labelled, {report['open']} open; "
        f"{report['graded']} with graded judgments",
        f"  relevant docs per query: min {per['min']}, median {per['median']:g}, max {per['max']}",
    ]
    if report["tags"]:
        tags = ", ".join(f"{tag} {n}" for tag, n in report["tags"].items())
        lines.append(f"  tags: {tags}; untagged {report['untagged']}")
    for ids in report["duplicate_queries"][:5]:
        lines.append(f"  duplicate query text: {', '.join(ids)}")
    for ids in report["near_duplicate_queries"][:5]:
        lines.append(f"  near-duplicate queries: {', '.join(ids)}")
    corpus = report.get("corpus")
    if corpus and corpus["documents"] is not None:
        lines.append(
            f"  corpus {corpus['path']}: {corpus['documents']} documents, "
            f"{corpus['missing']} relevant ids missing"
        )
    lines += [f"  warning: {w}" for w in report["warnings"]]
    return "\n".join(lines)
