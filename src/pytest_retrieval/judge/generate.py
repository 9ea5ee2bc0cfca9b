"""Requests that are not grades: "complete these messages with a JSON object of this schema".

``synth`` writes queries through the judge's own client (:meth:`Judge.complete
<pytest_retrieval.judge.client.Judge.complete>`), so they share its cache, retries, budgets,
deadline, circuit breaker and the Batch API. This module holds what is specific to such a
request: its description, its cache key and record, and the strict reading of an answer.

A request's cache key is computed from ``key_material`` (everything that changes the
answer: the prompt version, the document as sent, the style, the seed slot), never from the
messages, which carry a tag that is random per call. Keys start with ``completion-`` so a
Batch API output line is told from a verdict's by its ``custom_id``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .answers import JsonRefused, read_json, ungraded_from_record, ungraded_record

#: the record layout in the cache; a record of another version is a cache miss
COMPLETION_RECORD_VERSION = 1
#: every completion cache key starts with this (verdict keys are bare hex digests)
KEY_PREFIX = "completion-"

#: a check of a decoded answer: None when it is acceptable, else the cause
Check = Callable[[dict[str, Any]], "str | None"]


@dataclass(frozen=True)
class CompletionRequest:
    """One generic request: the messages to send, the strict JSON schema of the answer
    (named ``kind``), a check of the decoded answer, and the cache key's material."""

    kind: str
    messages: Sequence[Mapping[str, str]]
    schema: Mapping[str, Any]
    key_material: Sequence[Any]
    check: Check
    seed: int = 0
    temperature: float | None = None


@dataclass(frozen=True)
class Completion:
    """A request's answer: the checked JSON object, or why there is none."""

    data: dict[str, Any] | None = None
    error: str | None = None
    cached: bool = False
    model: str = ""
    usage: tuple[int, int] | None = None
    #: the error is the model's own answer (refused, malformed): cached as such
    answered: bool = False

    def to_record(self) -> dict[str, Any] | None:
        """What the cache keeps: the answer, or the cause of an answer the model gave that
        is none (None: nothing; a failure to get an answer is never cached)."""
        if self.data is None:
            if self.answered and self.error is not None:
                return ungraded_record(self.error, COMPLETION_RECORD_VERSION)
            return None
        return {
            "v": COMPLETION_RECORD_VERSION,
            "data": self.data,
            "model": self.model,
            "usage": None if self.usage is None else list(self.usage),
        }


def completion_key(model: str, request: CompletionRequest, key_version: int) -> str:
    """The cache key: model, the request's kind and its key material."""
    material = [key_version, "completion", model, request.kind, list(request.key_material)]
    text = json.dumps(material, ensure_ascii=False, sort_keys=True)
    # surrogatepass: a text that cannot be sent still has a key (its request is refused
    # before it is sent; see Judge.complete)
    return KEY_PREFIX + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def is_completion_key(key: str) -> bool:
    return key.startswith(KEY_PREFIX)


def from_record(record: Any, check: Check, retry_ungraded: bool = False) -> Completion | None:
    """A cached answer that still passes ``check``, or a cached unusable answer's cause
    (unless ``retry_ungraded``), else None (a miss: asked again)."""
    cause = ungraded_from_record(record, COMPLETION_RECORD_VERSION)
    if cause is not None:
        return None if retry_ungraded else Completion(error=cause, cached=True)
    if not isinstance(record, Mapping) or record.get("v") != COMPLETION_RECORD_VERSION:
        return None
    data = record.get("data")
    if not isinstance(data, dict) or check(data) is not None:
        return None
    model = record.get("model")
    return Completion(data=data, cached=True, model=model if isinstance(model, str) else "")


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def read_json_answer(response: Any) -> dict[str, Any] | str:
    """A chat completion's JSON object answer (SDK object or Batch API dict), or the cause
    it has none: no choices, a refusal, a cut or filtered output, text that is not a JSON
    object, or one naming a key twice. One Markdown code fence around the whole answer is
    removed."""
    choices = _field(response, "choices")
    if not isinstance(choices, Sequence) or isinstance(choices, str) or not choices:
        return "malformed response: no choices"
    message = _field(choices[0], "message")
    if message is None:
        return "malformed response: the choice has no message"
    if _field(message, "refusal"):
        return "the model refused"
    finish = _field(choices[0], "finish_reason")
    if finish == "length":
        return "truncated output (finish_reason=length)"
    if finish == "content_filter":
        return "blocked by the endpoint's content filter"
    content = _field(message, "content")
    if not isinstance(content, str) or not content.strip():
        return "malformed response: the message has no text"
    data = read_json(content)
    if isinstance(data, JsonRefused):
        return f"answer does not match the schema ({data.cause.removeprefix('answer: ')})"
    if not isinstance(data, dict):
        return "answer does not match the schema (not a JSON object)"
    return data
