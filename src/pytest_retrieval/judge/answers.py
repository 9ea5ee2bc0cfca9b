"""What the judge model said, read strictly, and the policy that turns it into a verdict.

The cache keeps the *observation* (the model's own answer: reason, yes/no and score, or
grade and confidence); the policy — ``--retrieval-judge-min-score``, the relevance level —
is applied each time a verdict is read, so changing a threshold never needs a new call.

Reading is strict and total: any response shape (a null message, a string where a number
belongs, a score of 1.7 or NaN, garbage usage) becomes either an observation or the cause
why the pair is ungraded. Out-of-range values are ungraded, never clamped: the model
answered a different question than the one asked. Strings are never coerced (``"yes"``,
``"0.5"``); keys the schema does not name are ignored; a key given twice
(``{"on_topic": true, "on_topic": false}``) is refused, never resolved to one of the two;
one Markdown code fence around the whole answer is removed.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._internal import json as _json

#: a reason is cut to this many characters (it is shown in reports, not parsed)
REASON_CHARS = 300
#: the cache record's layout; a record of another version is a cache miss
RECORD_VERSION = 2

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
#: one Markdown code fence around the whole answer (some JSON-mode servers add it)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)
#: more tokens than this in one answer's usage is not a count: the block is unreadable
MAX_TOKENS_COUNT = 10**9
#: a cached cause longer than this is not one of ours (a hand-edited row): a miss
MAX_CAUSE_CHARS = 500


class BinaryAnswer(BaseModel):
    """The binary scale's answer; ``reason`` first so the model reasons before deciding."""

    model_config = ConfigDict(extra="ignore", strict=True)
    reason: str
    on_topic: bool
    score: float = Field(ge=0, le=1, allow_inf_nan=False)


class GradedAnswer(BaseModel):
    """The 0-3 scale's answer, with the model's confidence in its grade (asked for; an
    answer without it is still a grade)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    reason: str
    grade: int = Field(ge=0, le=3)
    confidence: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)


def answer_model(graded: bool) -> type[BaseModel]:
    return GradedAnswer if graded else BinaryAnswer


@functools.cache
def strict_schema(graded: bool) -> dict[str, Any]:
    """The answer's JSON schema in the strict form OpenAI's structured outputs require
    (bounds are checked here on reading, since not every server accepts them)."""
    schema = answer_model(graded).model_json_schema()
    for name, prop in schema["properties"].items():
        for key in ("title", "maximum", "minimum", "default"):
            prop.pop(key, None)
        if "anyOf" in prop:  # the optional confidence: a plain number in the request
            schema["properties"][name] = {"type": "number"}
    schema.pop("title", None)
    schema.pop("description", None)
    schema["additionalProperties"] = False
    schema["required"] = list(schema["properties"])
    return schema


@dataclass(frozen=True)
class Observation:
    """One answer of the model, as it gave it (after the reason was cleaned)."""

    reason: str
    on_topic: bool | None = None  # binary: the model's yes / no
    score: float | None = None  # binary: its relevance score in [0, 1]
    grade: int | None = None  # 0-3 scale
    confidence: float | None = None  # 0-3 scale
    model: str = ""  # the model that answered, as the endpoint named it
    usage: tuple[int, int] | None = None  # (prompt, completion) tokens, when readable

    def to_record(self) -> dict[str, Any]:
        """The cache record: the answer only (never a key, header or request)."""
        return {
            "v": RECORD_VERSION,
            "reason": self.reason,
            "on_topic": self.on_topic,
            "score": self.score,
            "grade": self.grade,
            "confidence": self.confidence,
            "model": self.model,
            "usage": None if self.usage is None else list(self.usage),
        }

    @classmethod
    def from_record(cls, record: Any, graded: bool) -> Observation | None:
        """A cached observation, or None when the record is not one of this scale's (or
        is an ungraded answer: see :func:`ungraded_from_record`)."""
        if not isinstance(record, Mapping) or record.get("v") != RECORD_VERSION:
            return None
        if "ungraded" in record:
            return None
        answer = parse_answer(dict(record), graded)
        if isinstance(answer, str):
            return None
        model, usage = record.get("model"), record.get("usage")
        if not (isinstance(usage, list) and len(usage) == 2 and all(type(n) is int for n in usage)):
            usage = None
        return replace(
            answer,
            model=model if isinstance(model, str) else "",
            usage=None if usage is None else (usage[0], usage[1]),
        )


def ungraded_record(cause: str, version: int = RECORD_VERSION) -> dict[str, Any]:
    """The cache record of an answer the model gave that is no verdict (a refusal, a
    malformed or out-of-schema answer): paid for, so kept as what it is, with its cause."""
    return {"v": version, "ungraded": cause[:MAX_CAUSE_CHARS]}


def ungraded_from_record(record: Any, version: int = RECORD_VERSION) -> str | None:
    """The cause of a cached ungraded answer, or None when ``record`` is not one."""
    if not isinstance(record, Mapping) or record.get("v") != version:
        return None
    cause = record.get("ungraded")
    if not isinstance(cause, str) or len(cause) > MAX_CAUSE_CHARS:
        return None
    cause = _CONTROL.sub(" ", cause).strip()  # a shared cache is input: no terminal escapes
    return cause or None


@dataclass
class Verdict:
    """A pair's verdict under the run's policy; ``error`` says why it is ungraded."""

    on_topic: bool | None = None
    score: float | None = None
    grade: int | None = None
    reason: str = ""
    error: str | None = None  # why it is ungraded; None when graded
    confidence: float | None = None
    agreement: float | None = None  # with several samples: the share that agree
    cached: bool = False
    truncated: bool = False
    observation: Observation | None = None  # what to cache (a single fresh answer)
    #: the error is the model's own answer (refused, malformed): cached as such, unlike
    #: a failure to get an answer at all (timeout, 5xx, 429, budget, deadline)
    answered: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The verdict as reported (``cached``/``truncated`` describe this run)."""
        return {
            "on_topic": self.on_topic,
            "score": self.score,
            "grade": self.grade,
            "reason": self.reason,
            "error": self.error,
            "confidence": self.confidence,
            "agreement": self.agreement,
        }


def clean_reason(text: str) -> str:
    return _CONTROL.sub(" ", text).strip()[:REASON_CHARS]


def parse_answer(data: Any, graded: bool) -> Observation | str:
    """The answer object (already decoded from JSON), validated strictly; else the cause."""
    if not isinstance(data, dict):
        return "verdict does not match the schema (answer: not a JSON object)"
    try:
        answer = answer_model(graded).model_validate(data)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"]) or "answer"
        return f"verdict does not match the schema ({where}: {problem['msg']})"
    values = answer.model_dump()
    values["reason"] = clean_reason(values["reason"])
    return Observation(**values)


def _field(obj: Any, name: str) -> Any:
    """A field of an SDK object or of a plain dict (Batch API output), else None."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def read_completion(response: Any, graded: bool) -> Observation | str:
    """A chat completion (SDK object or dict) as an observation, or the cause it is not one."""
    choices = _field(response, "choices")
    if not isinstance(choices, Sequence) or isinstance(choices, str) or not choices:
        return "malformed response: no choices"
    choice = choices[0]
    message = _field(choice, "message")
    if message is None:
        return "malformed response: the choice has no message"
    if _field(message, "refusal"):
        return "the judge refused to grade"
    finish = _field(choice, "finish_reason")
    if finish == "length":
        return "truncated output (finish_reason=length)"
    if finish == "content_filter":
        return "blocked by the endpoint's content filter"
    content = _field(message, "content")
    if not isinstance(content, str) or not content.strip():
        return "malformed response: the message has no text"
    data = read_json(content)
    if isinstance(data, JsonRefused):
        return f"verdict does not match the schema ({data.cause})"
    parsed = parse_answer(data, graded)
    if isinstance(parsed, str):
        return parsed
    model = _field(response, "model")
    return replace(parsed, model=model if isinstance(model, str) else "")


@dataclass(frozen=True)
class JsonRefused:
    """Why a model's text is not one JSON value we accept (for its request's cause)."""

    cause: str


def read_json(content: str) -> Any:
    """The JSON value of a model's answer text (one Markdown code fence around it removed),
    read strictly (:mod:`.._json`): a key given twice, nesting past any answer's depth or text
    that is not JSON is a :class:`JsonRefused` naming which, never a guess."""
    fenced = _FENCE.fullmatch(content.strip())
    try:
        return _json.loads(fenced.group(1) if fenced else content)
    except _json.JsonProblem as exc:
        if "twice" in exc.problem:  # the place is the model's own key: keep the cause short
            where = exc.where if len(exc.where) <= 60 else exc.where[:57] + "..."
            return JsonRefused(f"the key {where} appears twice in the answer")
        return JsonRefused("answer: not JSON")  # invalid, or nested past any answer's depth
    except (ValueError, RecursionError):  # anything else json itself refuses
        return JsonRefused("answer: not JSON")


def read_usage(response: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens; None when the usage block is missing or unreadable."""
    usage = _field(response, "usage")
    if usage is None:
        return None
    counts = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = _field(usage, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not math.isfinite(value) or not 0 <= value <= MAX_TOKENS_COUNT:
            return None
        counts.append(int(value))
    return counts[0], counts[1]


def apply_policy(
    observation: Observation,
    *,
    graded: bool,
    min_score: float,
    relevance_level: int,
    cached: bool = False,
    truncated: bool = False,
) -> Verdict:
    """On topic, decided in code: yes with score >= min score; or grade >= the level."""
    if graded:
        grade = int(observation.grade or 0)
        return Verdict(
            on_topic=grade >= relevance_level,
            score=grade / 3,
            grade=grade,
            reason=observation.reason,
            confidence=observation.confidence,
            cached=cached,
            truncated=truncated,
        )
    score = float(observation.score or 0.0)
    return Verdict(
        on_topic=bool(observation.on_topic) and score >= min_score,
        score=score,
        reason=observation.reason,
        cached=cached,
        truncated=truncated,
    )


SPLIT = "the judge's samples split evenly"


def combine(samples: Sequence[Verdict], graded: bool) -> Verdict:
    """One verdict from several samples of the same pair: the majority decision (the lower
    median grade on the 0-3 scale), with the share of graded samples that agree with it
    (None with fewer than two: nothing to agree). A pair with no graded sample keeps the
    first sample's cause; an even split is ungraded."""
    if len(samples) == 1:
        return samples[0]
    graded_samples = [v for v in samples if v.error is None]
    if not graded_samples:
        return samples[0]
    if len(graded_samples) == 1:
        return replace(graded_samples[0], cached=all(v.cached for v in samples))
    cached, truncated = all(v.cached for v in samples), graded_samples[0].truncated
    if graded:
        grade = statistics.median_low(int(v.grade or 0) for v in graded_samples)
        agreeing = [v for v in graded_samples if v.grade == grade]
        chosen = agreeing[0]
        return Verdict(
            on_topic=chosen.on_topic,
            score=grade / 3,
            grade=grade,
            reason=chosen.reason,
            confidence=chosen.confidence,
            agreement=len(agreeing) / len(graded_samples),
            cached=cached,
            truncated=truncated,
        )
    yes = [v for v in graded_samples if v.on_topic]
    no = [v for v in graded_samples if not v.on_topic]
    if len(yes) == len(no):
        return Verdict(error=SPLIT, agreement=0.5, cached=cached, truncated=truncated)
    majority = yes if len(yes) > len(no) else no
    return Verdict(
        on_topic=majority is yes,
        score=sum(float(v.score or 0.0) for v in graded_samples) / len(graded_samples),
        reason=majority[0].reason,
        agreement=len(majority) / len(graded_samples),
        cached=cached,
        truncated=truncated,
    )
