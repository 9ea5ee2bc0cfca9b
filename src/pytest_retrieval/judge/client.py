"""The LLM judge: grades (query, document) pairs through the official ``openai`` client.

Concurrency is bounded by a semaphore on a private event loop (so it works whether or not
the caller runs one). The SDK's own retries are off: this module retries 429/5xx/timeouts
itself, honouring Retry-After even beyond the SDK's 120 s cap (up to ``max_retry_wait``),
and counts every request. A pair that cannot be graded — refusal, malformed or truncated
output, exhausted retries, auth error, budget spent — gets a Verdict with ``error`` set:
failures are never turned into "off topic".
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import math
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .._loop import run_private
from ..cache import JsonCache
from ..errors import ConfigError
from .prompts import Prompt

ProgressCallback = Callable[[int, int], None]

#: US$ per million tokens (input, output); override with ``JudgeConfig.prices``
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
}

MAX_OUTPUT_TOKENS = 200
REASON_CHARS = 300
GRADED_ON_TOPIC = 2  # on the 0-3 scale, "moderately relevant" and up count as on topic


#: packages whose exceptions are transport failures (a timeout, a reset connection)
TRANSPORT_PACKAGES = frozenset({"httpx", "httpx2", "httpcore", "httpcore2", "h11", "anyio"})


def is_transport_error(exc: BaseException) -> bool:
    """A transport error some httpx / httpcore versions let through the SDK unwrapped (seen:
    ``httpcore2.ReadTimeout`` from a server that accepts and never answers), told by the
    package that raised it: its classes can be loaded twice in one process (pytester
    re-imports), so an ``isinstance`` against classes held from earlier can miss."""
    return isinstance(exc, OSError) or any(
        cls.__module__.split(".")[0] in TRANSPORT_PACKAGES for cls in type(exc).__mro__
    )


class JudgeConfigError(ConfigError):
    """The judge cannot run as configured (no credentials, unreadable prompt file...)."""


@dataclass(frozen=True)
class JudgeConfig:
    model: str = "gpt-4.1-mini"
    base_url: str | None = None
    scale: Literal["binary", "0-3"] | str = "binary"
    min_score: float = 0.5
    min_coverage: float = 0.95
    concurrency: int = 16
    timeout: float = 60.0
    max_retries: int = 4
    max_retry_wait: float = 300.0
    cache_dir: Path | None = None
    use_cache: bool = True
    cache_only: bool = False
    max_calls: int | None = None
    max_tokens_budget: int | None = None
    prompt_file: Path | None = None
    text_budget_chars: int = 4000
    prices: Mapping[str, tuple[float, float]] | None = None


@dataclass(frozen=True)
class JudgePair:
    """One hit to grade: the query (with its criteria) and the document's text."""

    query: str
    criteria: str | None
    doc_id: str
    text: str


#: the fields of a :class:`Verdict` that its record keeps
_RECORDED = ("on_topic", "score", "grade", "reason", "error")


@dataclass
class Verdict:
    on_topic: bool | None = None
    score: float | None = None
    grade: int | None = None
    reason: str = ""
    error: str | None = None  # why it is ungraded; None when graded
    cached: bool = False
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The verdict as cached and reported (``cached``/``truncated`` describe this run)."""
        return {name: getattr(self, name) for name in _RECORDED}


class BinaryAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    on_topic: bool
    score: float
    reason: str


class GradedAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grade: int
    reason: str


def _strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in the strict form OpenAI's structured outputs require."""
    schema = model.model_json_schema()
    for prop in schema["properties"].values():
        prop.pop("title", None)
        prop.pop("maximum", None)
        prop.pop("minimum", None)
    schema.pop("title", None)
    schema["additionalProperties"] = False
    schema["required"] = list(schema["properties"])
    return schema


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_KEYLIKE = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{6,})")


class _Fatal(Exception):
    """Stops every remaining call: the endpoint refuses us (auth, unknown model)."""


class Judge:
    """Grades pairs; keeps counts for the summary. One per process; not thread-safe to
    share across concurrent ``judge`` calls."""

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        if config.scale not in {"binary", "0-3"}:
            raise JudgeConfigError(f"unknown scale {config.scale!r}: use binary or 0-3")
        try:
            self.prompt = Prompt.load(self.graded, config.prompt_file)
        except OSError as exc:
            raise JudgeConfigError(
                f"cannot read the prompt file {config.prompt_file}: {exc.strerror}"
            ) from None
        self._client_args = {} if config.cache_only else self._credentials()
        self.cache = (
            JsonCache(config.cache_dir, "judge")
            if config.use_cache and config.cache_dir is not None
            else None
        )
        self.counts: Counter[str] = Counter()
        self.causes: Counter[str] = Counter()
        self.json_schema_supported = True
        self._fatal: str | None = None

    # ------------------------------------------------------------------ configuration

    @property
    def graded(self) -> bool:
        return self.config.scale == "0-3"

    @property
    def min_coverage(self) -> float:
        return self.config.min_coverage

    def _credentials(self) -> dict[str, Any]:
        """Client arguments from the config and environment; never stored anywhere else."""
        base_url = self.config.base_url or os.environ.get("OPENAI_BASE_URL")
        key = os.environ.get("OPENAI_API_KEY")
        azure_key = os.environ.get("AZURE_OPENAI_API_KEY")
        azure_endpoint = os.environ.get("AZURE_OPENAI_ENDPOINT")
        if azure_key and azure_endpoint and not base_url:
            return {"azure": True}
        if key:
            return {"api_key": key, "base_url": base_url}
        if base_url:  # a local server (vLLM, Ollama) usually wants no key
            return {"api_key": "not-needed", "base_url": base_url}
        raise JudgeConfigError(
            "no credentials for the LLM judge: set OPENAI_API_KEY (OpenAI), "
            "AZURE_OPENAI_API_KEY + AZURE_OPENAI_ENDPOINT + OPENAI_API_VERSION (Azure OpenAI), "
            "or --retrieval-judge-base-url / OPENAI_BASE_URL for an OpenAI-compatible server; "
            "or use --retrieval-judge-cache-only to grade from the cache alone"
        )

    def sync_client(self) -> Any:
        """A blocking client with the same credentials (for the Batch API)."""
        import openai

        args = self._client_args
        if not args:
            raise JudgeConfigError(
                "the Batch API needs credentials, not --retrieval-judge-cache-only"
            )
        if args.get("azure"):
            return openai.AzureOpenAI(timeout=self.config.timeout)
        return openai.OpenAI(
            api_key=args["api_key"], base_url=args["base_url"], timeout=self.config.timeout
        )

    def request_body(self, pair: JudgePair) -> dict[str, Any]:
        """The chat-completions request for one pair, as the Batch API takes it."""
        model = GradedAnswer if self.graded else BinaryAnswer
        messages, _ = self.prompt.messages(pair.query, pair.criteria, self._budgeted(pair.text)[0])
        return {
            "model": self.config.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": MAX_OUTPUT_TOKENS,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "strict": True, "schema": _strict_schema(model)},
            },
        }

    def verdict_from_body(self, body: Mapping[str, Any]) -> Verdict:
        """A verdict from a chat-completion response body (a Batch API output line)."""
        from openai.types.chat import ChatCompletion

        try:
            response = ChatCompletion.model_validate(body)
        except ValidationError:
            return self._ungraded("malformed response: not a chat completion")
        return self._read(response, truncated=False)

    def store(self, key: str, verdict: Verdict) -> None:
        if self.cache is not None and verdict.error is None:
            self.cache.put(key, verdict.to_dict())

    def _client(self) -> Any:
        import openai

        args = self._client_args
        timeout, retries = self.config.timeout, 0  # we retry ourselves, and count
        if args.get("azure"):
            return openai.AsyncAzureOpenAI(timeout=timeout, max_retries=retries)
        return openai.AsyncOpenAI(
            api_key=args["api_key"],
            base_url=args["base_url"],
            timeout=timeout,
            max_retries=retries,
        )

    # ------------------------------------------------------------------ public API

    def pair(self, query: Any, doc_id: str, text: str) -> JudgePair:
        """A pair for a golden query (anything with ``query`` and ``criteria``)."""
        return JudgePair(query.query, getattr(query, "criteria", None), doc_id, text)

    def cache_key(self, pair: JudgePair) -> str:
        material = [
            self.config.model,
            self.prompt.version,
            self.config.scale,
            {"temperature": 0, "max_tokens": MAX_OUTPUT_TOKENS},
            pair.query,
            pair.criteria,
            self._budgeted(pair.text)[0],
        ]
        text = json.dumps(material, ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def _budgeted(self, text: str) -> tuple[str, bool]:
        budget = self.config.text_budget_chars
        return (text, False) if len(text) <= budget else (text[:budget] + " [...]", True)

    def judge(
        self, pairs: Sequence[JudgePair], progress: ProgressCallback | None = None
    ) -> list[Verdict]:
        """A verdict per pair, in order: from the cache, else from the endpoint."""
        verdicts: list[Verdict | None] = [None] * len(pairs)
        todo: list[int] = []
        for index, pair in enumerate(pairs):
            cached = self.cache.get(self.cache_key(pair)) if self.cache else None
            truncated = self._budgeted(pair.text)[1]
            self.counts["truncated"] += truncated
            if cached is not None:
                verdicts[index] = self._verdict(cached, cached=True, truncated=truncated)
                self.counts["cache_hits"] += 1
            elif self.config.cache_only:
                verdicts[index] = self._ungraded("not in the cache (--retrieval-judge-cache-only)")
            else:
                todo.append(index)
                self.counts["cache_misses"] += 1
        done = len(pairs) - len(todo)
        if progress is not None and pairs:
            progress(done, len(pairs))
        if todo:
            asked = [pairs[i] for i in todo]
            fresh = run_private(
                lambda: self._gather(asked, done, len(pairs), progress), "pytest-retrieval-judge"
            )
            for index, verdict in zip(todo, fresh, strict=True):
                verdicts[index] = verdict
            if self.cache is not None:
                self.cache.put_many(
                    [
                        (self.cache_key(pairs[i]), v.to_dict())
                        for i, v in zip(todo, fresh, strict=True)
                        if v.error is None
                    ]
                )
        result = [v if v is not None else self._ungraded("internal: no verdict") for v in verdicts]
        self.counts["graded"] += sum(1 for v in result if v.error is None)
        self.counts["ungraded"] += sum(1 for v in result if v.error is not None)
        return result

    def summary(self) -> dict[str, Any]:
        prices = {**PRICES, **(self.config.prices or {})}
        price = prices.get(self.config.model)
        cost = None
        if price is not None:
            cost = (
                self.counts["prompt_tokens"] * price[0]
                + self.counts["completion_tokens"] * price[1]
            ) / 1e6
        return {
            "model": self.config.model,
            "prompt_version": self.prompt.version,
            "scale": self.config.scale,
            "min_score": self.config.min_score,
            "calls": self.counts["calls"],
            "retries": self.counts["retries"],
            "cache_hits": self.counts["cache_hits"],
            "cache_misses": self.counts["cache_misses"],
            "graded": self.counts["graded"],
            "ungraded": self.counts["ungraded"],
            "causes": dict(self.causes),
            "prompt_tokens": self.counts["prompt_tokens"],
            "completion_tokens": self.counts["completion_tokens"],
            "estimated_cost_usd": cost,
            "truncated_docs": self.counts["truncated"],
            "structured_output": "json_schema" if self.json_schema_supported else "json_object",
        }

    # ------------------------------------------------------------------ verdicts

    def _ungraded(self, cause: str) -> Verdict:
        self.causes[cause] += 1
        return Verdict(error=cause)

    def _verdict(self, data: Mapping[str, Any], *, cached: bool, truncated: bool) -> Verdict:
        """From a validated answer (or a cached one): clamp, and decide on-topic in code."""
        reason = _CONTROL.sub(" ", str(data.get("reason", ""))).strip()[:REASON_CHARS]
        if self.graded:
            grade = min(3, max(0, int(data["grade"])))
            return Verdict(
                on_topic=grade >= GRADED_ON_TOPIC,
                score=grade / 3,
                grade=grade,
                reason=reason,
                cached=cached,
                truncated=truncated,
            )
        raw = float(data["score"])
        score = min(1.0, max(0.0, raw)) if math.isfinite(raw) else 0.0
        decided = bool(data["on_topic"])
        return Verdict(
            on_topic=decided and score >= self.config.min_score,
            score=score,
            reason=reason,
            cached=cached,
            truncated=truncated,
        )

    # ------------------------------------------------------------------ the calls

    async def _gather(
        self,
        pairs: Sequence[JudgePair],
        done_before: int,
        total: int,
        progress: ProgressCallback | None,
    ) -> list[Verdict]:
        client = self._client()
        limit = asyncio.Semaphore(self.config.concurrency)
        done = done_before

        async def one(pair: JudgePair) -> Verdict:
            nonlocal done
            async with limit:
                verdict = await self._grade(client, pair)
            done += 1
            if progress is not None:
                progress(done, total)
            return verdict

        try:
            return list(await asyncio.gather(*(one(pair) for pair in pairs)))
        finally:
            await client.close()

    def _spend_allowed(self) -> str | None:
        """Why no more requests may be made, or None."""
        if self._fatal is not None:
            return self._fatal
        budget = self.config.max_calls
        if budget is not None and self.counts["calls"] >= budget:
            return f"call budget exhausted (--retrieval-judge-max-calls {budget})"
        tokens = self.config.max_tokens_budget
        spent = self.counts["prompt_tokens"] + self.counts["completion_tokens"]
        if tokens is not None and spent >= tokens:
            return f"token budget exhausted (--retrieval-judge-max-tokens {tokens})"
        return None

    async def _grade(self, client: Any, pair: JudgePair) -> Verdict:
        import openai

        text, truncated = self._budgeted(pair.text)
        attempt = 0
        while True:
            stop = self._spend_allowed()
            if stop is not None:
                return self._ungraded(stop)
            messages, _ = self.prompt.messages(pair.query, pair.criteria, text)
            self.counts["calls"] += 1
            try:
                response = await self._create(client, messages)
            except openai.AuthenticationError:
                self._fatal = "401 from the judge endpoint: check OPENAI_API_KEY"
                return self._ungraded(self._fatal)
            except openai.PermissionDeniedError:
                self._fatal = "403 from the judge endpoint: this key may not use the model"
                return self._ungraded(self._fatal)
            except openai.NotFoundError:
                self._fatal = (
                    f"404 from the judge endpoint: no model {self.config.model!r} there "
                    "(check --retrieval-judge-model and the base URL)"
                )
                return self._ungraded(self._fatal)
            except (openai.RateLimitError, openai.InternalServerError) as exc:
                wait = self._retry_wait(exc, attempt)
                cause = f"HTTP {exc.status_code} from the judge endpoint"
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                wait, cause = self._backoff(attempt), self._transient(exc)
            except openai.APIStatusError as exc:
                return self._ungraded(f"HTTP {exc.status_code} from the judge endpoint")
            except (openai.APIError, ValueError) as exc:  # e.g. a body that is not JSON
                return self._ungraded(f"malformed response: {_scrub(str(exc))[:120]}")
            except Exception as exc:
                if not is_transport_error(exc):
                    raise
                wait, cause = self._backoff(attempt), self._transient(exc)
            else:
                return self._read(response, truncated)
            if attempt >= self.config.max_retries:
                return self._ungraded(f"{cause}; gave up after {attempt + 1} attempts")
            if wait > self.config.max_retry_wait:
                return self._ungraded(
                    f"{cause}; Retry-After {wait:g} s exceeds --retrieval-judge-max-wait "
                    f"{self.config.max_retry_wait:g}"
                )
            attempt += 1
            self.counts["retries"] += 1
            await asyncio.sleep(wait)

    def _transient(self, exc: BaseException) -> str:
        """Why a call that may succeed when retried failed: a timeout, or no connection."""
        if "Timeout" in type(exc).__name__:  # openai.APITimeoutError, httpcore's ReadTimeout
            return f"no answer within {self.config.timeout:g} s (--retrieval-judge-timeout)"
        return "cannot connect to the judge endpoint"

    async def _create(self, client: Any, messages: list[dict[str, str]]) -> Any:
        """One request; structured output, falling back to JSON mode once a server says it
        does not support json_schema (remembered for the rest of the run)."""
        import openai

        model = GradedAnswer if self.graded else BinaryAnswer
        if self.json_schema_supported:
            response_format: dict[str, Any] = {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "strict": True, "schema": _strict_schema(model)},
            }
            try:
                return await client.chat.completions.create(
                    model=self.config.model,
                    messages=messages,
                    temperature=0,
                    max_tokens=MAX_OUTPUT_TOKENS,
                    response_format=response_format,
                )
            except openai.BadRequestError as exc:
                if "response_format" not in str(exc) and "json_schema" not in str(exc):
                    raise
                self.json_schema_supported = False
                self.counts["calls"] += 1
        fields = ", ".join(model.model_fields)
        fallback = [
            {**messages[0], "content": messages[0]["content"] + f"\nReply as JSON with {fields}."},
            messages[1],
        ]
        return await client.chat.completions.create(
            model=self.config.model,
            messages=fallback,
            temperature=0,
            max_tokens=MAX_OUTPUT_TOKENS,
            response_format={"type": "json_object"},
        )

    def _read(self, response: Any, truncated: bool) -> Verdict:
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.counts["prompt_tokens"] += int(usage.prompt_tokens or 0)
            self.counts["completion_tokens"] += int(usage.completion_tokens or 0)
        if not response.choices:
            return self._ungraded("malformed response: no choices")
        choice = response.choices[0]
        message = choice.message
        if getattr(message, "refusal", None):
            return self._ungraded("the judge refused to grade")
        if choice.finish_reason == "length":
            return self._ungraded("truncated output (finish_reason=length)")
        if choice.finish_reason == "content_filter":
            return self._ungraded("blocked by the endpoint's content filter")
        model = GradedAnswer if self.graded else BinaryAnswer
        try:
            answer = model.model_validate_json(message.content or "")
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "answer"
            return self._ungraded(f"verdict does not match the schema ({where}: {problem['msg']})")
        if self.graded and not 0 <= answer.model_dump()["grade"] <= 3:
            return self._ungraded("verdict does not match the schema (grade outside 0-3)")
        return self._verdict(answer.model_dump(), cached=False, truncated=truncated)

    def _backoff(self, attempt: int) -> float:
        return min(self.config.max_retry_wait, 0.5 * 2.0**attempt) * (0.5 + random.random() / 2)

    def _retry_wait(self, exc: Any, attempt: int) -> float:
        """Retry-After (seconds or an HTTP date; also retry-after-ms), else backoff."""
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        milliseconds = headers.get("retry-after-ms")
        if milliseconds:
            try:
                return float(str(milliseconds)) / 1000
            except ValueError:
                pass
        value = headers.get("retry-after")
        if value:
            try:
                return max(0.0, float(value))
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                if when is not None:
                    return max(0.0, when.timestamp() - time.time())
        return self._backoff(attempt)


def _scrub(text: str) -> str:
    """No API key, whole or partial, in anything we print or store."""
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY"):
        secret = os.environ.get(name)
        if secret:
            text = text.replace(secret, "***")
    return _KEYLIKE.sub("sk-***", text)
