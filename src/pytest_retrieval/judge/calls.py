"""How one judge request is shaped, and what a failed one means.

``RequestShape`` holds the optional parameters sent with every request. Reasoning models
(the o-series, gpt-5) reject ``temperature`` and ``max_tokens``; older servers reject
``max_completion_tokens`` or ``json_schema``. The shape starts from the model family and
learns from the endpoint's 400s: a 400 naming a parameter we can drop or rename changes the
shape for the rest of the run, and the request is sent again.

``classify`` turns an exception from the SDK (or a transport error it let through) into a
:class:`Failure`: retry (timeouts, resets, 5xx, 429), give up this pair (a 400 about this
request), or stop every call (bad key, unknown model, no quota). Every message passes
through :func:`scrub` first (the package's one scrubber, :mod:`pytest_retrieval._internal.scrub`).
"""

from __future__ import annotations

import email.utils
import html
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._internal.scrub import scrub as scrub  # the one scrubber; client.py, batch.py import it here

#: output tokens for an answer; reasoning models spend their thinking from the same budget
ANSWER_TOKENS = 300
REASONING_TOKENS = 4000

_REASONING = re.compile(r"^(o\d|gpt-5)", re.IGNORECASE)

#: packages whose exceptions are transport failures (a timeout, a reset connection)
TRANSPORT_PACKAGES = frozenset({"httpx", "httpx2", "httpcore", "httpcore2", "h11", "anyio"})

_TAGS = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def is_reasoning_model(model: str) -> bool:
    """o1/o3/o4-mini, gpt-5*: no sampling parameters, thinking counts as output tokens."""
    return bool(_REASONING.match(model.rsplit("/", 1)[-1]))


@dataclass
class RequestShape:
    """The optional parameters this endpoint and model take (learned from their 400s)."""

    reasoning: bool
    temperature: bool = True
    seed: bool = True
    tokens_param: str = "max_completion_tokens"
    reasoning_effort: bool = True
    json_schema: bool = True
    learned: list[str] = field(default_factory=list)

    @classmethod
    def for_model(cls, model: str) -> RequestShape:
        reasoning = is_reasoning_model(model)
        return cls(reasoning=reasoning, temperature=not reasoning, seed=not reasoning)

    def params(self, sample: int) -> dict[str, Any]:
        """Sampling and length parameters (sample ``i`` of several sends seed ``i``)."""
        params: dict[str, Any] = {
            self.tokens_param: REASONING_TOKENS if self.reasoning else ANSWER_TOKENS
        }
        if self.temperature:
            params["temperature"] = 0
        if self.seed:
            params["seed"] = sample
        if self.reasoning and self.reasoning_effort:
            params["reasoning_effort"] = "low"
        return params

    def version(self) -> int:
        """How many times the shape changed: a 400 about a request sent with an older
        shape is answered by sending it again as it is now."""
        return len(self.learned)

    def adapt(self, status: int, message: str, param: str | None) -> bool:
        """Change the shape after a 400 that names one of our optional parameters; False
        when the 400 is about something else (then it is the pair's error)."""
        if status != 400:
            return False
        text = message.lower()

        def names(name: str) -> bool:
            """The 400 is about ``name``: its ``param`` says so, or (servers that give no
            param) its message quotes the name or calls it unsupported/unrecognized."""
            if param is not None:
                return param == name
            return (
                f"'{name}'" in text
                or f'"{name}"' in text
                or (f" {name}" in text and ("unsupported" in text or "unrecognized" in text))
            )

        if self.json_schema and (
            names("response_format") or "response_format" in text or "json_schema" in text
        ):
            self.json_schema = False
            self.learned.append("json_schema (JSON mode instead)")
        elif self.temperature and names("temperature"):
            self.temperature = False
            self.learned.append("temperature")
            if "default" in text:  # "only the default (1) value": a reasoning model, so
                self.reasoning = True  # its thinking needs the larger token budget
        elif self.seed and names("seed"):
            self.seed = False
            self.learned.append("seed")
        elif self.reasoning and self.reasoning_effort and names("reasoning_effort"):
            self.reasoning_effort = False
            self.learned.append("reasoning_effort")
        elif names(self.tokens_param):
            if self.tokens_param != "max_completion_tokens":
                return False  # max_tokens refused too: not ours to fix
            self.learned.append("max_completion_tokens (max_tokens instead)")
            self.tokens_param = "max_tokens"
        else:
            return False
        return True


Action = Literal["retry", "pair", "fatal"]

#: 4xx the SDK itself would retry: a request timeout, a conflict
RETRIED_4XX = frozenset({408, 409})
#: 400 codes about one request's content (a filter, a policy): the pair's, however often
ABOUT_THE_PAIR = frozenset(
    {"content_filter", "content_policy_violation", "invalid_prompt", "string_above_max_length"}
)


@dataclass(frozen=True)
class Failure:
    """What a failed request means.

    ``action``: retry it (after ``wait`` seconds, or backoff), give this pair up, or stop
    every call. ``counts`` says whether it counts towards the circuit breaker's consecutive
    failures (transport errors and 5xx); ``signature`` identifies a 4xx so a repeating one
    stops the run; ``shape`` (status, message, param) is offered to :meth:`RequestShape.adapt`.
    """

    action: Action
    cause: str
    wait: float | None = None
    counts: bool = False
    signature: str | None = None
    shape: tuple[int, str, str | None] | None = None
    rate_limited: bool = False
    maybe_billed: bool = False  # the endpoint may have answered (and billed) after we gave up


def is_transport_error(exc: BaseException) -> bool:
    """A transport error some httpx / httpcore versions let through the SDK unwrapped (seen:
    ``httpcore2.ReadTimeout`` from a server that accepts and never answers), told by the
    package that raised it: its classes can be loaded twice in one process (pytester
    re-imports), so an ``isinstance`` against classes held from earlier can miss."""
    return isinstance(exc, OSError) or any(
        cls.__module__.split(".")[0] in TRANSPORT_PACKAGES for cls in type(exc).__mro__
    )


def server_message(exc: Any) -> str:
    """The endpoint's own words (its JSON error message, or an HTML page's text), scrubbed,
    on one line and at most 200 characters."""
    body = getattr(exc, "body", None)
    text = ""
    if isinstance(body, Mapping):
        inner = _inner(body)
        text = str(inner.get("message") or "")
    elif isinstance(body, str):
        text = html.unescape(_TAGS.sub(" ", body))
    if not text:
        response = getattr(exc, "response", None)
        raw = getattr(response, "text", "") if response is not None else ""
        text = html.unescape(_TAGS.sub(" ", raw)) if isinstance(raw, str) else ""
    if not text:
        text = str(getattr(exc, "message", "") or exc)
    text = _SPACE.sub(" ", scrub(text)).strip()
    return text[:200] + ("..." if len(text) > 200 else "")


def _inner(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The error object of an error body (``{"error": {...}}``, or the object itself)."""
    inner = body.get("error")
    return inner if isinstance(inner, Mapping) else body


def _error_code(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = _inner(body)
        for key in ("code", "type"):
            if isinstance(inner.get(key), str):
                return str(inner[key])
    return str(getattr(exc, "code", "") or "")


def classify(exc: BaseException, model: str, timeout: float, attempt: int) -> Failure:
    """What an exception from one request means (see :class:`Failure`)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = server_message(exc)
        code = _error_code(exc)
        said = f"HTTP {status} from the judge endpoint: {message}"
        if status == 401:
            return Failure("fatal", f"{said} (check OPENAI_API_KEY)")
        if status == 403:
            return Failure("fatal", f"{said} (this key may not use the model {model!r})")
        if status == 404:
            return Failure(
                "fatal",
                f"{said} (no model {model!r} there? check --retrieval-judge-model and "
                "the base URL)",
            )
        if status == 429:
            if "insufficient_quota" in (code, getattr(exc, "type", None)) or (
                "quota" in message.lower() and "exceeded" in message.lower()
            ):
                return Failure("fatal", f"HTTP 429 insufficient_quota: {message}")
            return Failure("retry", said, retry_after(exc), rate_limited=True)
        if status >= 500 or status in RETRIED_4XX:
            return Failure("retry", said, counts=True)
        if code == "context_length_exceeded":
            return Failure("pair", f"{said} (lower --retrieval-judge-text-budget)")
        if code in ABOUT_THE_PAIR:  # this document's content, not the configuration
            return Failure("pair", said)
        param = getattr(exc, "param", None)
        return Failure(
            "pair",
            said,
            signature=f"{status} {message}",
            shape=(status, message, param if isinstance(param, str) else None),
        )
    if isinstance(exc, openai.APITimeoutError) or (
        is_transport_error(exc) and "Timeout" in type(exc).__name__
    ):
        return Failure(
            "retry",
            f"no answer within {timeout:g} s (--retrieval-judge-timeout)",
            counts=True,
            maybe_billed=True,
        )
    if isinstance(exc, openai.APIConnectionError) or is_transport_error(exc):
        return Failure("retry", "cannot connect to the judge endpoint", counts=True)
    if isinstance(exc, openai.APIError | ValueError | RecursionError):  # e.g. a 200 whose
        # body is not JSON, or JSON nested too deep for the SDK's parser
        text = _SPACE.sub(" ", scrub(str(exc)))[:120]
        return Failure("pair", f"malformed response: {text}")
    text = _SPACE.sub(" ", scrub(str(exc)))[:160]
    return Failure("pair", f"internal error in the judge: {type(exc).__name__}: {text}")


def retry_after(exc: Any) -> float | None:
    """Retry-After (seconds or an HTTP date; also retry-after-ms) if readable, else None."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(0.0, float(str(milliseconds)) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(str(value))
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        try:
            return max(0.0, when.timestamp() - time.time())
        except (OverflowError, ValueError, OSError):
            return None
    return max(0.0, seconds) if seconds == seconds and seconds != float("inf") else None
