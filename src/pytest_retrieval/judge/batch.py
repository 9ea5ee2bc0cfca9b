"""The offline path for big golden sets: OpenAI's Batch API fills the verdict cache.

``submit`` writes one chat-completions request per uncached (query, hit) pair of a JSON
report (``custom_id`` = the cache key), uploads it and starts a batch; ``collect`` fetches
the results when the batch is done and stores every verdict in the same cache the pytest
run reads. Half the price of online calls, no rate limits to fight; the pytest run then
grades from the cache without calling the API (``--retrieval-judge-cache-only``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .client import Judge, JudgePair


@dataclass
class Submitted:
    batch_id: str
    requests: int
    cached: int


def pairs_from_report(
    report: Mapping[str, Any], corpus: Mapping[str, str], depth: int | None = None
) -> list[JudgePair]:
    """Every top-k hit of every evaluation in a ``--retrieval-report`` file that has text."""
    pairs: list[JudgePair] = []
    seen: set[tuple[str, str]] = set()
    for evaluation in report.get("evaluations", []):
        k = depth or int(evaluation.get("k", 10))
        for query in evaluation.get("queries", []):
            for doc in query.get("returned", [])[:k]:
                if doc in corpus and (query["query"], doc) not in seen:
                    seen.add((query["query"], doc))
                    criteria = query.get("criteria")
                    pairs.append(JudgePair(query["query"], criteria, doc, corpus[doc]))
    return pairs


def submit(judge: Judge, pairs: Sequence[JudgePair]) -> Submitted:
    """Upload the uncached pairs as a batch; returns its id (nothing to do: id "")."""
    lines = []
    cached = 0
    for pair in pairs:
        key = judge.cache_key(pair)
        if judge.cache is not None and judge.cache.get(key) is not None:
            cached += 1
            continue
        lines.append(
            json.dumps(
                {
                    "custom_id": key,
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": judge.request_body(pair),
                },
                ensure_ascii=False,
            )
        )
    if not lines:
        return Submitted("", 0, cached)
    client = judge.sync_client()
    upload = io.BytesIO(("\n".join(lines) + "\n").encode())
    uploaded = client.files.create(file=("judge-batch.jsonl", upload), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    return Submitted(str(batch.id), len(lines), cached)


@dataclass
class Collected:
    status: str
    stored: int = 0
    ungraded: int = 0


def collect(judge: Judge, batch_id: str) -> Collected:
    """Store the verdicts of a finished batch in the cache; report the status otherwise."""
    client = judge.sync_client()
    batch = client.batches.retrieve(batch_id)
    if batch.status != "completed":
        return Collected(str(batch.status))
    if judge.cache is None:
        raise ValueError("collecting a batch needs the verdict cache (not --no-cache)")
    outcome = Collected("completed")
    if not batch.output_file_id:
        return outcome
    content = client.files.content(batch.output_file_id)
    for line in content.text.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        response = record.get("response") or {}
        if response.get("status_code") != 200:
            outcome.ungraded += 1
            continue
        verdict = judge.verdict_from_body(response.get("body") or {})
        if verdict.error is None:
            judge.store(str(record["custom_id"]), verdict)
            outcome.stored += 1
        else:
            outcome.ungraded += 1
    return outcome


def save_state(path: Path, submitted: Submitted, settings: Mapping[str, Any]) -> None:
    path.write_text(
        json.dumps(
            {"batch_id": submitted.batch_id, "requests": submitted.requests, **settings}, indent=1
        )
        + "\n",
        encoding="utf-8",
    )
