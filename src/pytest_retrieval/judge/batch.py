"""The offline path for big golden sets: OpenAI's Batch API fills the verdict cache.

``submit`` writes one chat-completions request per uncached (query, hit) pair of a JSON
report (``custom_id`` = the cache key, so criteria and everything else that changes the
answer are in it), splits them at the per-batch limits, uploads each part and starts a batch
per part; ``collect`` reads every batch that has ended — its output file and its error file,
also when the batch failed, expired or was cancelled — and stores each verdict in the same
cache the pytest run reads. Half the price of online calls, no rate limits to fight; the
pytest run then grades from the cache without calling the API
(``--retrieval-judge-cache-only``). Pairs that did not come back are simply not cached, so
submitting the same report again sends only those.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._internal.io import text_lines
from .._internal.json import loads
from ..errors import JudgeError
from .client import Judge, JudgePair, is_transport_error, scrub
from .generate import is_completion_key

# OpenAI's documented limits per batch: https://platform.openai.com/docs/guides/batch
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024  # of the uploaded JSONL input file

RUNNING = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})


class BatchAPIError(JudgeError):
    """The Batch API refused a call or could not be reached; the message is the server's
    own, scrubbed of secrets. ``status`` is the HTTP status (None: no answer at all)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def usage_like(self) -> bool:
        """A 4xx that repeating cannot fix (bad model, key, file): not 408, 409 or 429."""
        retryable = {408, 409, 429}
        return self.status is not None and 400 <= self.status < 500 and self.status not in retryable


@contextmanager
def api_errors(doing: str) -> Iterator[None]:
    """SDK and transport exceptions -> :class:`BatchAPIError` naming what was being done."""
    import openai

    try:
        yield
    except openai.APIStatusError as exc:
        body = exc.body
        message = body.get("message") if isinstance(body, Mapping) else None
        text = str(message) if message else exc.message
        raise BatchAPIError(
            scrub(f"{doing}: HTTP {exc.status_code}: {text}"), exc.status_code
        ) from None
    except openai.APIConnectionError as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        raise BatchAPIError(scrub(f"{doing}: {exc.message}{cause}")) from None
    except Exception as exc:
        if not is_transport_error(exc):
            raise
        raise BatchAPIError(scrub(f"{doing}: {type(exc).__name__}: {exc}")) from None


# ---------------------------------------------------------------------------- submit


@dataclass
class Submitted:
    batch_ids: list[str]
    requests: int  # in the batches that were created
    cached: int
    unsent: int = 0  # requests whose batch could not be created (see ``error``)
    error: BatchAPIError | None = None


def pairs_from_report(
    report: Mapping[str, Any], corpus: Mapping[str, str], depth: int | None = None
) -> list[JudgePair]:
    """Every top-k hit of every evaluation in a ``--retrieval-report`` file that has text,
    with its query's criteria (part of the cache key, as in the pytest run)."""
    pairs: list[JudgePair] = []
    seen: set[tuple[str, str | None, str]] = set()
    for evaluation in report.get("evaluations", []):
        k = depth or int(evaluation.get("k", 10))
        for query in evaluation.get("queries", []):
            criteria = query.get("criteria")
            for doc in query.get("returned", [])[:k]:
                if doc in corpus and (query["query"], criteria, doc) not in seen:
                    seen.add((query["query"], criteria, doc))
                    pairs.append(JudgePair(query["query"], criteria, doc, corpus[doc]))
    return pairs


def split(lines: Sequence[bytes], max_requests: int, max_bytes: int) -> list[list[bytes]]:
    """Consecutive parts of at most ``max_requests`` lines and ``max_bytes`` bytes each."""
    parts: list[list[bytes]] = []
    size = 0
    for line in lines:
        if len(line) > max_bytes:
            raise ValueError(
                f"one request is {len(line)} bytes, above the {max_bytes}-byte batch file "
                "limit; lower --text-budget"
            )
        if not parts or len(parts[-1]) >= max_requests or size + len(line) > max_bytes:
            parts.append([])
            size = 0
        parts[-1].append(line)
        size += len(line)
    return parts


def submit(
    judge: Judge,
    pairs: Sequence[JudgePair],
    *,
    max_requests: int = MAX_REQUESTS,
    max_bytes: int = MAX_BYTES,
) -> Submitted:
    """Upload the uncached pairs as one batch per part (see :func:`submit_requests`)."""
    requests: dict[str, dict[str, Any]] = {}
    cached = 0
    for pair in pairs:
        if judge.unsendable(pair) is not None:  # not valid Unicode: never sent, the run says why
            continue
        for sample in range(judge.config.samples):  # sample i: keyed and seeded as online
            key = judge.cache_key(pair, sample)
            if judge.cache is not None and judge.cache.get(key) is not None:
                cached += 1
            elif key not in requests:  # same query, criteria and text under two ids: once
                requests[key] = judge.request_body(pair, sample)
    return submit_requests(
        judge, requests, cached=cached, max_requests=max_requests, max_bytes=max_bytes
    )


def submit_requests(
    judge: Judge,
    requests: Mapping[str, Mapping[str, Any]],
    *,
    cached: int = 0,
    max_requests: int = MAX_REQUESTS,
    max_bytes: int = MAX_BYTES,
) -> Submitted:
    """Upload chat-completions request bodies (``custom_id`` = their cache key: a verdict's,
    or a generic completion's) as one batch per part (nothing to do: no ids). A batch that
    cannot be created ends the submission: the ones already running are in the result, with
    the error, so their ids are never lost."""
    lines = []
    for key, body in requests.items():
        request = {"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body}
        try:
            lines.append((json.dumps(request, ensure_ascii=False) + "\n").encode())
        except UnicodeEncodeError:  # text that is not valid Unicode: never sent (the online
            continue  # run gives the request its cause)
    submitted = Submitted([], 0, cached)
    if not lines:
        return submitted
    parts = split(lines, max_requests, max_bytes)
    client = judge.sync_client()
    for number, part in enumerate(parts, start=1):
        try:
            with api_errors(f"uploading batch file {number} of {len(parts)}"):
                upload = io.BytesIO(b"".join(part))
                uploaded = client.files.create(file=("judge-batch.jsonl", upload), purpose="batch")
            with api_errors(f"creating batch {number} of {len(parts)}"):
                batch = client.batches.create(
                    input_file_id=uploaded.id,
                    endpoint="/v1/chat/completions",
                    completion_window="24h",
                )
        except BatchAPIError as exc:
            if not submitted.batch_ids:
                raise
            submitted.error = exc
            submitted.unsent = sum(len(rest) for rest in parts[number - 1 :])
            break
        submitted.batch_ids.append(str(batch.id))
        submitted.requests += len(part)
    return submitted


def save_state(path: Path, submitted: Submitted, settings: Mapping[str, Any]) -> None:
    """The batch ids and the judge settings ``collect`` rebuilds the judge from. One batch
    is also written as ``batch_id``, the form older versions read."""
    state: dict[str, Any] = {"batch_ids": submitted.batch_ids, "requests": submitted.requests}
    if len(submitted.batch_ids) == 1:
        state["batch_id"] = submitted.batch_ids[0]
    path.write_text(json.dumps({**state, **settings}, indent=1) + "\n", encoding="utf-8")


def batch_ids(state: Mapping[str, Any]) -> list[str]:
    """The ids of a state file: ``batch_ids``, or ``batch_id`` (one batch, older files)."""
    ids = state.get("batch_ids")
    if ids is None:
        ids = [state["batch_id"]]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise ValueError("'batch_ids' is not a list of batch ids")
    return ids


# ---------------------------------------------------------------------------- collect


@dataclass
class Collected:
    """What one batch gave. ``failed`` counts unstored requests by cause; ``never_run`` is
    known when the batch reports its request counts; ``errors`` are the batch's own
    (a failed batch: why it never ran)."""

    batch_id: str
    status: str
    stored: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    never_run: int | None = None
    total: int | None = None
    done: int | None = None  # requests finished so far (a running batch)
    errors: list[str] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.status in RUNNING


def _count(batch: Any, name: str) -> int | None:
    counts = getattr(batch, "request_counts", None)
    value = getattr(counts, name, None) if counts is not None else None
    return value if isinstance(value, int) else None


def _line_error(record: Mapping[str, Any]) -> str | None:
    """Why an output or error-file line holds no verdict (None: a 200 with a body)."""
    error = record.get("error")
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("code") or "error without a message")
    if error:
        return str(error)
    response = record.get("response")
    if not isinstance(response, Mapping):
        return "no response"
    status = response.get("status_code")
    if status == 200:
        return None
    body = response.get("body")
    inner = body.get("error") if isinstance(body, Mapping) else None
    message = inner.get("message") if isinstance(inner, Mapping) else None
    return f"HTTP {status}: {message}" if message else f"HTTP {status}"


def _read_lines(judge: Judge, text: str, outcome: Collected) -> None:
    """Store each verdict of an output or error file; count every other line by cause."""
    for line in text_lines(text):
        if not line.strip():
            continue
        try:
            record = loads(line)
        except ValueError:  # not JSON, nested too deep, a key twice (JsonProblem is one)
            outcome.failed["malformed line in the batch's output"] += 1
            continue
        if not isinstance(record, Mapping):
            outcome.failed["malformed line in the batch's output"] += 1
            continue
        cause = _line_error(record)
        custom_id = record.get("custom_id")
        if cause is None:
            body = record["response"].get("body")
            body = body if isinstance(body, Mapping) else {}
            if isinstance(custom_id, str) and is_completion_key(custom_id):
                completion = judge.completion_from_body(body)
                cause = completion.error
                judge.store_completion(custom_id, completion)  # a refusal too: paid for
                if cause is None:
                    outcome.stored += 1
                    continue
            else:
                verdict = judge.verdict_from_body(body)
                cause = verdict.error
                if isinstance(custom_id, str):
                    judge.store(custom_id, verdict)  # a refusal too: paid for
                if cause is None and isinstance(custom_id, str):
                    outcome.stored += 1
                    continue
        outcome.failed[scrub(cause or "no custom_id")] += 1


def collect(judge: Judge, batch_id: str) -> Collected:
    """Store what an ended batch returned (any of completed, failed, expired, cancelled);
    a running one reports its progress and stores nothing yet."""
    if judge.cache is None:
        raise ValueError("collecting a batch needs the verdict cache (not --no-cache)")
    client = judge.sync_client()
    with api_errors(f"reading batch {batch_id}"):
        batch = client.batches.retrieve(batch_id)
    outcome = Collected(batch_id, str(batch.status), total=_count(batch, "total"))
    if outcome.running:
        outcome.done = _count(batch, "completed")
        return outcome
    errors = getattr(batch, "errors", None)
    for error in getattr(errors, "data", None) or []:
        where = f" (line {error.line})" if getattr(error, "line", None) else ""
        text = error.message or error.code or "no message"
        outcome.errors.append(scrub(f"{text}{where}"))
    for kind in ("output_file_id", "error_file_id"):
        file_id = getattr(batch, kind, None)
        if file_id:
            with api_errors(f"reading the {kind.replace('_id', '')} {file_id} of {batch_id}"):
                text = client.files.content(file_id).text
            _read_lines(judge, text, outcome)
    if outcome.total:  # a batch that failed validation may report 0: unknown
        outcome.never_run = max(0, outcome.total - outcome.stored - sum(outcome.failed.values()))
    return outcome
