"""The LLM judge: grades (query, document) pairs through the official ``openai`` client.

Built to be left running in CI:

- **Faults are never verdicts.** A pair that cannot be graded — refusal, malformed or
  out-of-range answer, exhausted retries, budget or deadline spent — gets a Verdict with
  ``error`` set, and the metrics leave it out (see :mod:`.answers` for the reading rules).
- **Paid answers are never lost.** Each answer is committed to the cache as it arrives;
  the cache keeps the model's observation and the policy (min score, relevance level) is
  applied on reading, so a threshold change never needs a new call. Processes sharing the
  cache claim a pair before asking, so xdist workers do not pay twice.
- **A dead endpoint stops fast.** Consecutive transport/5xx failures open a circuit
  breaker; an identical 4xx repeating stops the calls; fatal errors (bad key, unknown model,
  no quota) stop them at once; a deadline ends the phase. A 429 pauses every task at once
  (one shared pause), and a backing-off task does not hold a concurrency slot.

Concurrency is bounded by a semaphore on a private event loop (so it works whether or not
the caller runs one). The SDK's own retries are off: this module retries and counts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import itertools
import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

from .._internal.cache import JsonCache, folder_problem
from .._internal.loop import run_private
from ..errors import ConfigError, JudgeError
from ..settings import JudgeConfig, judge_config
from .answers import (
    Observation,
    Verdict,
    apply_policy,
    combine,
    read_completion,
    read_usage,
    strict_schema,
    ungraded_from_record,
    ungraded_record,
)
from .calls import ANSWER_TOKENS, Failure, RequestShape, classify, is_transport_error, scrub
from .generate import (
    Check,
    Completion,
    CompletionRequest,
    completion_key,
    from_record,
    read_json_answer,
)
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

#: the same 4xx (status and message) this many times in a row stops every call
REPEATED_4XX = 3
#: the breaker trips on failures of this many queries in a row at least: one query the
#: endpoint always fails (its hits retried together at the end of a run) is not a dead endpoint
BREAKER_GROUPS = 3
#: the cache key's layout; bump when what it covers changes
KEY_VERSION = 2


class JudgeConfigError(ConfigError, JudgeError):
    """The judge cannot run as configured (no credentials, unreadable prompt file...)."""


class NoCredentials(JudgeConfigError):
    """No credentials at all (a fork's PR): the one error ``--retrieval-judge-fallback
    cache-only`` turns into a warning. Credentials given but incomplete (Azure without
    ``OPENAI_API_VERSION``) are a plain :class:`JudgeConfigError`: a usage error."""


@dataclass(frozen=True)
class JudgePair:
    """One hit to grade: the query (with its criteria) and the document's text."""

    query: str
    criteria: str | None
    doc_id: str
    text: str


#: a unit of work: the pair, and which of its samples
_Unit = tuple[JudgePair, int]

R = TypeVar("R")


@dataclass(frozen=True)
class _Work(Generic[R]):
    """How one kind of request is sent, read and cached (verdicts, or generic completions),
    so both go through the same calls, retries, budgets and deadline."""

    body: Callable[[str], dict[str, Any]]  # key -> request body (built again per attempt)
    read: Callable[[str, Any], R]  # key, response -> result (never raises)
    failed: Callable[[str], R]  # a cause -> an unanswered result
    record: Callable[[R], dict[str, Any] | None]  # what to cache (None: nothing)
    cached: Callable[[str, Any], R | None]  # key, cache record -> result (None: unusable)
    #: key -> what a failure is a failure of (a verdict's query): the breaker wants several
    group: Callable[[str], str] = str


class Judge:
    """Grades pairs; keeps counts for the summary. One per process; not thread-safe to
    share across concurrent ``judge`` calls."""

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        if config.scale not in {"binary", "0-3"}:
            raise JudgeConfigError(f"unknown scale {config.scale!r}: use binary or 0-3")
        if config.relevance_level not in {1, 2, 3}:
            raise JudgeConfigError(
                f"relevance level {config.relevance_level!r}: use 1, 2 or 3 (grades 0-3)"
            )
        if config.samples < 1:
            raise JudgeConfigError(f"samples {config.samples!r}: ask at least once")
        try:
            self.prompt = Prompt.load(self.graded, config.prompt_file)
        except OSError as exc:
            raise JudgeConfigError(
                f"cannot read the prompt file {config.prompt_file}: {exc.strerror}"
            ) from None
        if config.use_cache and config.cache_dir is not None:
            problem = folder_problem(config.cache_dir)
            if problem is not None:
                raise JudgeConfigError(
                    f"the cache folder {problem}: name the folder to keep the cache in "
                    "(judge.sqlite is made inside it)"
                )
        self._client_args = {} if config.cache_only else self._credentials()
        self._cache: JsonCache | None = None
        self.counts: Counter[str] = Counter()
        self.causes: Counter[str] = Counter()
        self.shape = RequestShape.for_model(config.model)
        self.stopped: str | None = None  # why no more calls are made in this process
        self._failures = 0  # consecutive transport / 5xx failures
        self._failing: set[str] = set()  # the groups (queries) those failures came from
        self._repeat: tuple[str, int] = ("", 0)  # the last 4xx and how often in a row
        self._pause_until = 0.0  # monotonic time before which nobody calls (a 429)
        self._judged_for = 0.0  # seconds spent in earlier judge phases of this process
        self._phase_started: float | None = None  # monotonic start of the current phase
        self._wake: asyncio.Event | None = None  # set when calls stop: cancel the rest
        self._limited = False  # the last answer was a 429: one request asks if it lifted
        self._probing = False  # that one request is in flight
        self._reserved = 0  # tokens the calls in flight reserved (with a token cap)
        self._holding = 0  # calls in flight holding a reservation
        self._largest_call: int | None = None  # the most tokens one call cost so far
        self._changed: asyncio.Event | None = None  # set when a call ends: waiters look again
        self._agreement: list[float] = []

    # ------------------------------------------------------------------ configuration

    @property
    def graded(self) -> bool:
        return self.config.scale == "0-3"

    @property
    def min_coverage(self) -> float:
        return self.config.min_coverage

    @property
    def relevance_level(self) -> int:
        return self.config.relevance_level

    @property
    def endpoint(self) -> str:
        """Where requests go, for messages: without user, password or query string."""
        if self._client_args.get("azure"):
            url = os.environ.get("AZURE_OPENAI_ENDPOINT", "Azure OpenAI")
        else:
            url = str(self._client_args.get("base_url") or "https://api.openai.com/v1")
        parts = urlsplit(url)
        if parts.hostname is None:
            return url
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, host, parts.path, "", ""))

    @property
    def cache(self) -> JsonCache | None:
        """The verdict cache, opened on first use (so a warning about a broken file is
        raised inside the run that meets it)."""
        if self._cache is None and self.config.use_cache and self.config.cache_dir is not None:
            self._cache = JsonCache(self.config.cache_dir, "judge")
        return self._cache

    def close(self) -> None:
        """Close the cache's connections (a later call reopens them)."""
        if self._cache is not None:
            self._cache.close()

    def _credentials(self) -> dict[str, Any]:
        """Client arguments from the config and environment; never stored anywhere else."""
        base_url = self.config.base_url or os.environ.get("OPENAI_BASE_URL")
        key = os.environ.get("OPENAI_API_KEY")
        azure_key = os.environ.get("AZURE_OPENAI_API_KEY")
        azure_endpoint = os.environ.get("AZURE_OPENAI_ENDPOINT")
        if azure_key and azure_endpoint and not base_url:
            if not os.environ.get("OPENAI_API_VERSION"):
                raise JudgeConfigError(
                    "Azure OpenAI needs OPENAI_API_VERSION as well as AZURE_OPENAI_API_KEY "
                    "and AZURE_OPENAI_ENDPOINT: set it to the API version of your deployment "
                    "(e.g. OPENAI_API_VERSION=2024-10-21)"
                )
            return {"azure": True}
        if key:
            return {"api_key": key, "base_url": base_url}
        if base_url:  # a local server (vLLM, Ollama) usually wants no key
            return {"api_key": "not-needed", "base_url": base_url}
        raise NoCredentials(
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

    # ------------------------------------------------------------------ requests

    def request_body(self, pair: JudgePair, sample: int = 0) -> dict[str, Any]:
        """The chat-completions request for one pair (as sent, and as the Batch API takes
        it): the prompt with the query, criteria and document, and this model's parameters."""
        messages, _ = self.prompt.messages(pair.query, pair.criteria, self._budgeted(pair.text)[0])
        return self._body(
            messages, "verdict", strict_schema(self.graded), self.shape.params(sample)
        )

    def _body(
        self,
        messages: list[dict[str, Any]],
        name: str,
        schema: Mapping[str, Any],
        params: Mapping[str, Any],
    ) -> dict[str, Any]:
        """A chat-completions body asking for a JSON object of ``schema``: a strict JSON
        schema where the model takes one, else JSON mode with the fields named in the
        system message."""
        if self.shape.json_schema:
            response_format: dict[str, Any] = {
                "type": "json_schema",
                "json_schema": {"name": name, "strict": True, "schema": schema},
            }
        else:
            fields = ", ".join(schema.get("properties", {}))
            messages[0] = {
                **messages[0],
                "content": messages[0]["content"] + f"\nReply as JSON with {fields}.",
            }
            response_format = {"type": "json_object"}
        return {
            "model": self.config.model,
            "messages": messages,
            **params,
            "response_format": response_format,
        }

    def verdict_from_body(self, body: Mapping[str, Any]) -> Verdict:
        """A verdict from a chat-completion response body (a Batch API output line)."""
        return self._read(body, truncated=False)

    def store(self, key: str, verdict: Verdict) -> None:
        """Keep a fresh answer under ``key``: its observation, or the cause of an answer
        that is no verdict (nothing for a failure to get an answer)."""
        cache = self.cache
        record = _verdict_record(verdict)
        if cache is not None and record is not None:
            cache.put(key, record)

    # ------------------------------------------------------------------ public API

    def pair(self, query: Any, doc_id: str, text: str) -> JudgePair:
        """A pair for a golden query (anything with ``query`` and ``criteria``)."""
        return JudgePair(query.query, getattr(query, "criteria", None), doc_id, text)

    def cache_key(self, pair: JudgePair, sample: int = 0) -> str:
        """What changes the model's answer: model, prompt (version and scale), the pair as
        sent, and which sample. Not the min score or relevance level (applied on reading),
        nor timeouts, concurrency or the parameter shape a server forced on us."""
        material: list[Any] = [
            KEY_VERSION,
            self.config.model,
            self.prompt.version,
            self.config.scale,
            pair.query,
            pair.criteria,
            self._budgeted(pair.text)[0],
        ]
        if sample:
            material.append({"sample": sample})
        text = json.dumps(material, ensure_ascii=False, sort_keys=True)
        # surrogatepass: a pair that cannot be sent still has a key (it is ungraded before
        # any request; see unsendable), and every valid text keeps the key it always had
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def unsendable(self, pair: JudgePair) -> str | None:
        """Why ``pair`` cannot be sent at all (text that is not valid Unicode), else None."""
        return unsendable(
            ("query", pair.query), ("criteria", pair.criteria), ("document", pair.text)
        )

    def budgeted(self, text: str) -> str:
        """``text`` as sent: cut to the text budget (marked ``[...]``) when longer."""
        return self._budgeted(text)[0]

    def _budgeted(self, text: str) -> tuple[str, bool]:
        budget = self.config.text_budget_chars
        return (text, False) if len(text) <= budget else (text[:budget] + " [...]", True)

    def judge(
        self, pairs: Sequence[JudgePair], progress: ProgressCallback | None = None
    ) -> list[Verdict]:
        """A verdict per pair, in order: from the cache, else from the endpoint."""
        samples = self.config.samples
        found: list[list[Verdict | None]] = [[None] * samples for _ in pairs]
        waiting: dict[str, list[tuple[int, int]]] = {}  # key -> (pair, sample) slots
        todo: dict[str, _Unit] = {}
        for index, pair in enumerate(pairs):
            truncated = self._budgeted(pair.text)[1]
            self.counts["truncated"] += truncated
            bad = self.unsendable(pair)  # this hit's own cause; the others go on
            for sample in range(samples):
                if bad is not None:
                    found[index][sample] = Verdict(error=bad)
                    continue
                key = self.cache_key(pair, sample)
                if key in waiting:  # the same pair twice in one call: asked once
                    waiting[key].append((index, sample))
                    continue
                cached = self._from_cache(key, truncated)
                if cached is not None:
                    found[index][sample] = cached
                elif self.config.cache_only:
                    found[index][sample] = Verdict(
                        error="not in the cache (--retrieval-judge-cache-only)"
                    )
                else:
                    waiting[key] = [(index, sample)]
                    todo[key] = (pair, sample)
                    self.counts["cache_misses"] += 1
        total = len(pairs) * samples
        done = total - sum(len(slots) for slots in waiting.values())
        if progress is not None and pairs:
            progress(done, total)
        if todo:
            work: _Work[Verdict] = _Work(
                body=lambda key: self.request_body(*todo[key]),
                read=lambda key, response: self._read(
                    response, self._budgeted(todo[key][0].text)[1]
                ),
                failed=lambda error: Verdict(error=error),
                record=_verdict_record,
                cached=lambda key, record: self._cached_verdict(record),
                group=lambda key: todo[key][0].query,
            )
            weights = {key: len(slots) for key, slots in waiting.items()}
            order = _interleaved(list(todo), work.group)
            fresh = run_private(
                lambda: self._gather(order, weights, work, done, total, progress),
                "pytest-retrieval-judge",
            )
            for key, slots in waiting.items():
                for index, sample in slots:
                    truncated = self._budgeted(pairs[index].text)[1]
                    found[index][sample] = replace(fresh[key], truncated=truncated)
        result = [
            combine([v or Verdict(error="internal: no verdict") for v in row], self.graded)
            for row in found
        ]
        for verdict in result:
            if verdict.error is None:
                self.counts["graded"] += 1
            else:
                self.counts["ungraded"] += 1
                self.causes[verdict.error] += 1
            if samples > 1 and verdict.agreement is not None:
                self._agreement.append(verdict.agreement)
        return result

    def completion_key(self, request: CompletionRequest) -> str:
        """The cache key of a generic request (see :mod:`.generate`)."""
        return completion_key(self.config.model, request, KEY_VERSION)

    def completion_body(self, request: CompletionRequest) -> dict[str, Any]:
        """The chat-completions request for a generic request (as sent, and as the Batch
        API takes it): its messages, its schema, and this model's parameters."""
        messages = [dict(m) for m in request.messages]
        params = self.shape.params(request.seed)
        if request.temperature is not None and "temperature" in params:
            params["temperature"] = request.temperature
        return self._body(messages, request.kind, request.schema, params)

    def completion_from_body(self, body: Mapping[str, Any]) -> Completion:
        """A generic answer from a response body (a Batch API output line): any JSON
        object; its request's check is applied when it is read from the cache."""
        return self._read_completion(None, body)

    def store_completion(self, key: str, completion: Completion) -> None:
        """Keep a fresh generic answer under ``key`` (nothing for an unanswered one)."""
        record = completion.to_record()
        if self.cache is not None and record is not None:
            self.cache.put(key, record)

    def complete(
        self, requests: Sequence[CompletionRequest], progress: ProgressCallback | None = None
    ) -> list[Completion]:
        """An answer per request, in order: from the cache, else from the endpoint, with
        the judge's retries, budgets, deadline and breaker (a request the same as an earlier
        one in the list is asked once)."""
        keys = [self.completion_key(request) for request in requests]
        found: dict[str, Completion] = {}
        todo: dict[str, CompletionRequest] = {}
        weights: Counter[str] = Counter(keys)
        retry = self.config.retry_ungraded
        for key, request in zip(keys, requests, strict=True):
            if key in found or key in todo:
                continue
            bad = unsendable(*(("message", m.get("content")) for m in request.messages))
            if bad is not None:
                found[key] = Completion(error=bad)
                continue
            hit = from_record(self.cache.get(key), request.check, retry) if self.cache else None
            if hit is not None:
                found[key] = hit
                self.counts["cache_hits"] += 1
                self.counts["cached_ungraded"] += hit.error is not None
            elif self.config.cache_only:
                found[key] = Completion(error="not in the cache (cache only)")
            else:
                todo[key] = request
                self.counts["cache_misses"] += 1
        total = len(requests)
        done = sum(weights[key] for key in found)
        if progress is not None and requests:
            progress(done, total)
        if todo:
            work: _Work[Completion] = _Work(
                body=lambda key: self.completion_body(todo[key]),
                read=lambda key, response: self._read_completion(todo[key].check, response),
                failed=lambda error: Completion(error=error),
                record=Completion.to_record,
                cached=lambda key, record: from_record(record, todo[key].check, retry),
            )
            found.update(
                run_private(
                    lambda: self._gather(list(todo), weights, work, done, total, progress),
                    "pytest-retrieval-judge",
                )
            )
        result = [found[key] for key in keys]
        for completion in result:
            if completion.error is None:
                self.counts["completed"] += 1
            else:
                self.counts["incomplete"] += 1
                self.causes[completion.error] += 1
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
        agreement = self._agreement
        return {
            "model": self.config.model,
            "prompt_version": self.prompt.version,
            "scale": self.config.scale,
            "min_score": self.config.min_score,
            "relevance_level": self.config.relevance_level,
            "samples": self.config.samples,
            "text_budget": self.config.text_budget_chars,
            # where a custom prompt is (its version is a hash): the re-record command names it
            "prompt_file": None
            if self.config.prompt_file is None
            else str(self.config.prompt_file),
            "agreement": sum(agreement) / len(agreement) if agreement else None,
            "unanimous": sum(1 for a in agreement if a == 1.0),
            "sampled": len(agreement),  # hits asked more than once that got an answer
            "deadline": self.config.deadline,
            "stopped": self.stopped,
            "calls": self.counts["calls"],
            "retries": self.counts["retries"],
            "cache_hits": self.counts["cache_hits"],
            "cache_misses": self.counts["cache_misses"],
            "graded": self.counts["graded"],
            "ungraded": self.counts["ungraded"],
            "causes": dict(self.causes),
            "prompt_tokens": self.counts["prompt_tokens"],
            "completion_tokens": self.counts["completion_tokens"],
            "usage_unreadable": self.counts["usage_unreadable"],
            # tokens of answers without readable usage, estimated from their requests:
            # counted against the token cap, not in the cost
            "tokens_estimated": self.counts["tokens_estimated"],
            # ungraded answers read from the cache (retry_option asks them again)
            "cached_ungraded": self.counts["cached_ungraded"],
            "retry_option": self.config.retry_option,
            "estimated_cost_usd": cost,
            "truncated_docs": self.counts["truncated"],
            "structured_output": "json_schema" if self.shape.json_schema else "json_object",
            "request_shape": list(self.shape.learned),
        }

    # ------------------------------------------------------------------ verdicts

    def _from_cache(self, key: str, truncated: bool) -> Verdict | None:
        """The cached verdict of ``key`` (counted as a cache hit), else None."""
        cache = self.cache
        if cache is None:
            return None
        verdict = self._cached_verdict(cache.get(key))
        if verdict is None:
            return None
        self.counts["cache_hits"] += 1
        self.counts["cached_ungraded"] += verdict.error is not None
        return replace(verdict, truncated=truncated)

    def _cached_verdict(self, record: Any) -> Verdict | None:
        """A cache record as a verdict: an observation under this run's policy, or an
        ungraded answer's cause (unless asked to retry those); None: ask."""
        observation = Observation.from_record(record, self.graded)
        if observation is not None:
            return self._policy(observation, True, False)
        cause = ungraded_from_record(record)
        if cause is None or self.config.retry_ungraded:
            return None
        return Verdict(error=cause, cached=True)

    def _policy(self, observation: Observation, cached: bool, truncated: bool) -> Verdict:
        return apply_policy(
            observation,
            graded=self.graded,
            min_score=self.config.min_score,
            relevance_level=self.config.relevance_level,
            cached=cached,
            truncated=truncated,
        )

    def _count_usage(self, response: Any) -> tuple[int, int] | None:
        """The response's (prompt, completion) tokens, added to the budget's counts."""
        try:
            usage = read_usage(response)
        except Exception:  # a shape no rule foresaw: unreadable, not a crash
            usage = None
        if usage is None:
            self.counts["usage_unreadable"] += 1
        else:
            self.counts["prompt_tokens"] += usage[0]
            self.counts["completion_tokens"] += usage[1]
        return usage

    def _read_completion(self, check: Check | None, response: Any) -> Completion:
        """A response as a generic answer, checked by ``check`` when given; total: whatever
        it holds, this never raises."""
        usage = self._count_usage(response)
        try:
            data = read_json_answer(response)
            if isinstance(data, str):
                problem: str | None = data
            else:
                problem = None if check is None else check(data)
        except Exception as exc:  # a shape no rule foresaw (a bug of ours?): not cached
            cause = f"malformed response: {type(exc).__name__}"
            return Completion(error=scrub(cause, *self._secrets()))
        if problem is not None or isinstance(data, str):  # the model's own answer: cached
            return Completion(error=scrub(str(problem), *self._secrets()), answered=True)
        if isinstance(response, Mapping):
            model = response.get("model")
        else:
            model = getattr(response, "model", "")
        return Completion(
            data=data,
            model=scrub(model if isinstance(model, str) else "", *self._secrets())[:100],
            usage=usage,
        )

    def _read(self, response: Any, truncated: bool) -> Verdict:
        """A response as a verdict; total: whatever it holds, this never raises."""
        usage = self._count_usage(response)
        secrets = self._secrets()
        try:
            observation = read_completion(response, self.graded)
        except Exception as exc:  # a shape no rule foresaw (a bug of ours?): not cached
            return Verdict(error=f"malformed response: {type(exc).__name__}")
        if isinstance(observation, str):  # the model's own answer, refused: cached as such
            return Verdict(error=scrub(observation, *secrets), answered=True)
        observation = replace(  # what an endpoint echoes back is never stored as it came
            observation,
            reason=scrub(observation.reason, *secrets),
            model=scrub(observation.model, *secrets)[:100],
            usage=usage,
        )
        return replace(self._policy(observation, False, truncated), observation=observation)

    def _secrets(self) -> tuple[str, ...]:
        """What must never be printed or stored: the key, and a password in the base URL."""
        key = self._client_args.get("api_key")
        found = [key] if isinstance(key, str) and key != "not-needed" else []
        base_url = self._client_args.get("base_url")
        if isinstance(base_url, str):
            parts = urlsplit(base_url)
            if parts.password:  # httpx sends it as basic auth, which endpoints echo too
                pair = f"{parts.username or ''}:{parts.password}".encode()
                found += [parts.password, base64.b64encode(pair).decode()]
        return tuple(found)

    # ------------------------------------------------------------------ the calls

    async def _gather(
        self,
        todo: Sequence[str],
        weights: Mapping[str, int],
        work: _Work[R],
        done_before: int,
        total: int,
        progress: ProgressCallback | None,
    ) -> dict[str, R]:
        """Ask for every key in ``todo`` (claiming it in the shared cache first); a key
        stands for ``weights[key]`` of the ``total`` in progress reports. When calls stop
        (breaker, fatal error, deadline), the requests in flight are cancelled and what is
        left is unanswered with the reason."""
        client = self._client()
        limit = asyncio.Semaphore(self.config.concurrency)
        out: dict[str, R] = {}
        cache = self.cache
        stale_after = self.config.timeout * (self.config.max_retries + 1) + 60
        done = done_before
        self._phase_started = time.monotonic()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._probing, self._reserved, self._holding = False, 0, 0
        if self.stopped is not None:
            self._wake.set()

        def finish(key: str, result: R) -> None:
            nonlocal done
            out[key] = result
            done += weights[key]
            if progress is not None:
                progress(done, total)

        async def ask(key: str) -> None:
            try:
                result = await self._call(client, limit, key, work)
            except Exception as exc:  # a bug of ours: this pair's cause, the others go on
                result = work.failed(f"internal error in the judge: {type(exc).__name__}")
            record = work.record(result)
            if cache is not None:
                if record is None:
                    cache.release([key])
                else:  # committed now: a killed run keeps what it paid for
                    cache.put(key, record)
            finish(key, result)

        async def await_others(keys: list[str]) -> None:
            """Keys another process claimed: wait for its answers, or take them over
            when it gives up or dies."""
            asked: list[asyncio.Task[None]] = []
            left = set(keys)
            first = True
            while left and self.stopped is None:
                if not first:
                    await asyncio.sleep(0.2)
                first = False
                for key in sorted(left):
                    answered = None if cache is None else work.cached(key, cache.get(key))
                    if answered is not None:
                        left.discard(key)
                        self.counts["cache_hits"] += 1
                        self.counts["cache_misses"] -= 1
                        finish(key, answered)
                    elif cache is not None and cache.claim([key], stale_after, usable):
                        left.discard(key)
                        asked.append(asyncio.ensure_future(ask(key)))
            await asyncio.gather(*asked)

        def usable(key: str, value: Any) -> bool:
            return work.cached(key, value) is not None

        claimed = set(todo) if cache is None else cache.claim(todo, stale_after, usable)
        mine = [key for key in todo if key in claimed]
        theirs = [key for key in todo if key not in claimed]
        tasks = [asyncio.ensure_future(ask(key)) for key in mine]
        if theirs:
            tasks.append(asyncio.ensure_future(await_others(theirs)))
        stopping = asyncio.ensure_future(self._wake.wait())
        try:
            pending: set[asyncio.Future[Any]] = set(tasks)
            while pending and not stopping.done():
                left = self._time_left()
                if left is not None and left <= 0:
                    self._stop(self._deadline_message())
                    break
                _, pending = await asyncio.wait(
                    {*pending, stopping}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(stopping)
            for task in pending:  # stopped (breaker, fatal, deadline): in-flight calls too
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            stopping.cancel()
            self._judged_for += time.monotonic() - self._phase_started
            self._phase_started = self._wake = self._changed = None
            if cache is not None:
                cache.release(todo)
            await client.close()
        for key in todo:
            if key not in out:
                out[key] = work.failed(self.stopped or "internal: no answer")
        return out

    def _time_left(self) -> float | None:
        """Seconds of judging left in this process (judge phases only, not the retrieval
        between them); None without a deadline."""
        if self.config.deadline is None:
            return None
        spent = self._judged_for
        if self._phase_started is not None:
            spent += time.monotonic() - self._phase_started
        return max(0.0, self.config.deadline - spent)

    def _deadline_message(self) -> str:
        return f"judge deadline of {self.config.deadline:g} s reached (--retrieval-judge-deadline)"

    def _stop(self, why: str) -> None:
        """No more calls in this process (the first reason given is kept); the requests in
        flight are cancelled."""
        if self.stopped is None:
            self.stopped = why
        if self._wake is not None:
            self._wake.set()

    def _spend_allowed(self) -> str | None:
        """Why no more requests may be made, or None."""
        if self.stopped is not None:
            return self.stopped
        if self._time_left() == 0:
            self._stop(self._deadline_message())
            return self.stopped
        budget = self.config.max_calls
        if budget is not None and self.counts["calls"] >= budget:
            return f"call budget exhausted (--retrieval-judge-max-calls {budget})"
        tokens = self.config.max_tokens_budget
        if tokens is not None and self._spent() >= tokens:
            estimated = self.counts["tokens_estimated"]
            return f"token budget exhausted (--retrieval-judge-max-tokens {tokens})" + (
                f"; {estimated} of the tokens counted were estimated from the requests "
                "(the endpoint sent no readable usage)"
                if estimated
                else ""
            )
        return None

    # ------------------------------------------------------------------ the token cap
    #
    # A call starts only while the tokens spent plus those reserved by the calls in flight
    # are below --retrieval-judge-max-tokens. Each call reserves the larger of an estimate
    # of its request and the most tokens any call cost so far, and with a cap the first call
    # runs alone (nothing is known of a call's cost before it). So the tokens spent stay
    # within the cap plus one call's reservation, as long as no call costs more than the
    # largest of those before it and its own estimate. An answer without readable usage is
    # counted at its estimate: the cap never switches off.

    def _spent(self) -> int:
        """Tokens spent: as the endpoint counted them, or estimated where it did not."""
        counts = self.counts
        return counts["prompt_tokens"] + counts["completion_tokens"] + counts["tokens_estimated"]

    @staticmethod
    def _estimate(body: Mapping[str, Any]) -> int:
        """A request's tokens before it is sent: its text at 3 characters a token (English
        runs near 4, other scripts fewer), plus all the output it may use."""
        messages = body.get("messages") or []
        chars = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, Mapping))
        chars += len(json.dumps(body.get("response_format") or {}))
        output = body.get("max_completion_tokens") or body.get("max_tokens") or ANSWER_TOKENS
        return chars // 3 + 4 * len(messages) + int(output)

    def _reserve(self, estimate: int) -> int:
        """Reserve a starting call's tokens (0 without a cap)."""
        if self.config.max_tokens_budget is None:
            return 0
        held = max(estimate, self._largest_call or 0)
        self._reserved += held
        self._holding += 1
        return held

    def _settle(self, held: int, cost: int | None) -> None:
        """A call ended: free its reservation; ``cost``: the tokens it spent, when answered."""
        if self.config.max_tokens_budget is not None:
            self._reserved -= held
            self._holding -= 1
            if cost is not None:
                self._largest_call = max(self._largest_call or 0, cost)
        self._notify()

    def _cost(self, response: Any, estimate: int) -> int:
        """An answer's tokens: its usage, or (unreadable) its request's estimate, counted."""
        try:
            usage = read_usage(response)
        except Exception:  # a shape no rule foresaw: unreadable
            usage = None
        if usage is not None:
            return usage[0] + usage[1]
        self.counts["tokens_estimated"] += estimate
        return estimate

    def _unseen_cost(self, estimate: int) -> None:
        """A request that was sent and may be billed, whose answer we never saw (timed
        out, cancelled): under a token cap it counts at its estimate, so calls that time
        out again and again cannot spend past the cap unseen."""
        if self.config.max_tokens_budget is not None:
            self.counts["tokens_estimated"] += estimate

    def _notify(self) -> None:
        """Wake the tasks waiting for a call to end (they look again)."""
        if self._changed is not None:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    def _turn(self) -> asyncio.Event | None:
        """What a task must wait for before it sends (None: nothing): the one request
        asking whether a rate limit lifted; with a token cap, the first call (its cost is
        unknown), or a call in flight whose reservation leaves no room below the cap."""
        if self._changed is None:
            return None
        if self._limited and self._probing:
            return self._changed
        cap = self.config.max_tokens_budget
        if cap is None or self._holding == 0:
            return None
        if self._largest_call is None or self._spent() < cap <= self._spent() + self._reserved:
            return self._changed
        return None

    async def _call(self, client: Any, limit: asyncio.Semaphore, key: str, work: _Work[R]) -> R:
        """One request: ask, retrying what may succeed; never raises (it is cancelled when
        calls stop)."""
        attempt = 0
        rested = 0.0  # the end of the last shared pause this task waited out
        while True:
            if self._pause_until > rested:  # a 429's pause: everyone waits, holding no slot
                rested = self._pause_until
                if (pause := rested - time.monotonic()) > 0:
                    await asyncio.sleep(pause)
            if (turn := self._turn()) is not None:  # holding no slot either
                await turn.wait()
                continue
            async with limit:
                if self._pause_until > rested or self._turn() is not None:
                    continue  # a 429, a probe or a reservation came while this task queued
                stop = self._spend_allowed()
                if stop is not None:
                    return work.failed(stop)
                body = work.body(key)
                estimate = self._estimate(body)
                probing = self._limited  # this request asks whether the rate limit lifted
                self._probing = self._probing or probing
                held = self._reserve(estimate)
                shape = self.shape.version()
                self.counts["calls"] += 1  # sent: counted, also when cancelled later
                try:
                    response = await client.chat.completions.create(**body)
                except asyncio.CancelledError:  # stopped: the endpoint may still bill it
                    self._unseen_cost(estimate)
                    self._settle(held, None)
                    if probing:
                        self._probing = False
                    raise
                except Exception as exc:
                    failure = classify(exc, self.config.model, self.config.timeout, attempt)
                    failure = replace(failure, cause=scrub(failure.cause, *self._secrets()))
                    if failure.maybe_billed:  # an answer we stopped waiting for
                        self._unseen_cost(estimate)
                    self._settle(held, None)
                else:
                    self._failures, self._repeat = 0, ("", 0)
                    self._failing.clear()
                    self._limited = False
                    if probing:
                        self._probing = False
                    # settled first, so a reservation never outlives its call; no task
                    # runs before read has counted the answer's usage (no await between)
                    self._settle(held, self._cost(response, estimate))
                    return work.read(key, response)
            try:  # the probe ends once its outcome (a new pause, say) is decided
                if failure.rate_limited:
                    self._limited = True
                outcome = self._after(failure, shape, work.group(key))
                if outcome == "again":
                    continue
                if outcome is not None:
                    return work.failed(outcome)
                if attempt >= self.config.max_retries:
                    return work.failed(f"{failure.cause}; gave up after {attempt + 1} attempts")
                wait = self._backoff(attempt)  # at least: a Retry-After of 0 is no invitation
                if failure.wait is not None:  # to hammer the endpoint
                    wait = max(wait, failure.wait)
                if wait > self.config.max_retry_wait:  # the pause is everyone's: stop them all
                    self._stop(
                        f"stopped calling the judge at {self.endpoint}: {failure.cause}; "
                        f"Retry-After {wait:g} s exceeds --retrieval-judge-max-wait "
                        f"{self.config.max_retry_wait:g}"
                    )
                    return work.failed(self.stopped or failure.cause)
                attempt += 1
                self.counts["retries"] += 1
                if failure.rate_limited:
                    self._pause_until = max(self._pause_until, time.monotonic() + wait)
                    rested = self._pause_until
            finally:
                if probing:
                    self._probing = False
                    self._notify()
            await asyncio.sleep(wait)  # outside the slot: others go on meanwhile

    def _after(self, failure: Failure, shape: int, group: str) -> str | None:
        """Decide on a failed request: "again" (re-send at once: the request shape was
        adapted, now or by another task since it was sent), the pair's cause (give it
        up), or None (retry after a wait)."""
        if failure.shape is not None and (
            self.shape.version() != shape or self.shape.adapt(*failure.shape)
        ):
            return "again"
        if failure.action == "fatal":
            self._stop(f"stopped calling the judge at {self.endpoint}: {failure.cause}")
            return self.stopped
        if failure.signature is not None:
            last, times = self._repeat
            times = times + 1 if last == failure.signature else 1
            self._repeat = (failure.signature, times)
            if times >= REPEATED_4XX:
                status, message, _ = failure.shape or (0, failure.cause, None)
                self._stop(
                    f"stopped calling the judge at {self.endpoint}: the same HTTP {status} "
                    f"{times} times: {scrub(message, *self._secrets())}"
                )
            return failure.cause
        if failure.action == "pair":
            return failure.cause
        # a transport error or 5xx, or a 429 that came after the last pause was waited out
        # (one per pause, so a burst of 429s is one; after a pause one request asks whether
        # the limit lifted, so 429 forever counts one a pause): no answer in between, the
        # breaker counts. A 429 is the endpoint's state, not one query's content: it needs
        # no failures of several queries.
        if failure.counts or (failure.rate_limited and time.monotonic() >= self._pause_until):
            self._failures += 1
            self._failing.add(group)
            if self._failures >= self.config.max_failures and (
                failure.rate_limited
                or len(self._failing) >= min(BREAKER_GROUPS, self.config.max_failures)
            ):
                self._stop(
                    f"stopped calling the judge at {self.endpoint}: {self._failures} "
                    f"consecutive failures (last: {failure.cause})"
                )
                return self.stopped
        return None

    def _backoff(self, attempt: int) -> float:
        return min(self.config.max_retry_wait, 0.5 * 2.0**attempt) * (0.5 + random.random() / 2)


def judge_from_args(args: argparse.Namespace, scale: str = "0-3") -> Judge:
    """The judge a builder's arguments (:func:`~..settings.add_judge_arguments`) describe, or
    :class:`JudgeConfigError` (a one-line message) for a bad setting such as a missing API
    key; closed when the command ends."""
    judge = Judge(judge_config(args, scale))
    args.opened = [*getattr(args, "opened", ()), judge]
    return judge


def _verdict_record(verdict: Verdict) -> dict[str, Any] | None:
    """What the cache keeps of a fresh verdict: the model's observation, or the cause of an
    answer it gave that is no verdict; nothing for a failure to get an answer."""
    if verdict.observation is not None:
        return verdict.observation.to_record()
    if verdict.answered and verdict.error is not None:
        return ungraded_record(verdict.error)
    return None


def unsendable(*texts: tuple[str, str | None]) -> str | None:
    """Why one of the named ``texts`` cannot be sent, else None: a lone surrogate (a JSON
    ``"\\ud800"`` escape, a bad decode) is no Unicode text, UTF-8 cannot encode it, and the
    request, its cache key and the report would fail on it."""
    for name, text in texts:
        if text is None:
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (
                f"the {name} is not valid Unicode text (a lone surrogate, such as "
                f"U+{ord(text[exc.start]):04X}): it cannot be sent; fix the text where it is "
                "read or made"
            )
    return None


def _interleaved(keys: list[str], group: Callable[[str], str]) -> list[str]:
    """``keys`` taking turns between their groups (a query's hits): the calls in flight at
    any moment are of several queries, so one query the endpoint always fails cannot fill
    every slot with failures that read as consecutive and trip the breaker on an endpoint
    that answers every other query."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(group(key), []).append(key)
    rounds = itertools.zip_longest(*groups.values())
    return [key for turn in rounds for key in turn if key is not None]


__all__ = [
    "PRICES",
    "Judge",
    "JudgeConfig",
    "JudgeConfigError",
    "JudgePair",
    "Verdict",
    "is_transport_error",
    "judge_from_args",
    "scrub",
]
