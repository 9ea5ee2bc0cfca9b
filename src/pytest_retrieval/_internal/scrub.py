"""The one scrubber of secrets: every error text that reaches an output passes through it.

Error texts come from code we do not control -- the retriever, the ``retrieval_downstream``
labeller, the judge's endpoint -- and HTTP clients put keys in them (``OPENAI_API_KEY=sk-...``
in a message, the request's headers in an error's repr, a token in a chained cause). They
are scrubbed where they enter results (:func:`pytest_retrieval.hits.describe_error`,
:class:`~pytest_retrieval.hits.HitError`, :func:`~.stacks.format_traceback`,
the labeller's messages in :mod:`~pytest_retrieval.downstream`, the judge's in
:mod:`~pytest_retrieval.judge.calls`, and every :class:`~pytest_retrieval.verdicts.Reason`),
so no renderer, report or cache ever sees a key. A leaf: it imports nothing of this package.

What is masked, as ``***``, in this order:

1. Known secrets, wherever they appear: the values of the environment variables named like
   a credential (``OPENAI_API_KEY``, ``AZURE_OPENAI_API_KEY``, and any name ending in
   ``API_KEY``, ``ACCESS_KEY``, ``_KEY``, ``SECRET``, ``TOKEN``, ``PASSWORD`` or ``PASSWD``),
   the ``secrets`` a caller passes (the judge: its key, its base URL's password), and every
   value rule 2 found in this or an earlier text ("seen") that holds a letter and a digit,
   as random keys do (not ``os.environ`` from a line of code). Also such a secret without its
   leading lowercase words (``sk-proj-AbC1...`` shown as ``proj-AbC1...`` or ``AbC1...``,
   when what is left holds a letter and a digit), and any run of 12 or more key characters
   (``[A-Za-z0-9_-]``) cut from one (a key shortened in a message). Values under 8
   characters are no key (``EMPTY``, ``x`` for a local server) and are left alone: masking
   them would garble every message. A known secret is also found written across lines or
   spaces, and in another case (``key.upper()``); an encoded one (base64) is not.
2. Values of credential headers and assignments, when they look like one (a digit, inner
   punctuation, or 8+ characters of both cases; or, after a name, 8+ characters):
   ``Bearer <v>``, ``Basic <v>``, ``Authorization: <v>``, ``api-key: <v>``, ``x-api-key``,
   any ``*api_key``, ``*access_key``, ``*secret``, ``*token``, ``*password`` followed by
   ``:`` or ``=`` (quoted or not, as in a header dict's repr; not `` = ``, a line of code
   in a traceback), and a URL's password (``scheme://user:<v>@host``). "Bearer of bad
   news", "basic retrieval" and "max_tokens=300" stay as they are.
3. Key-shaped tokens, which need no context (the first keeps its ``sk-``, so the reader
   knows what was there): ``sk-`` followed by 12 or more key characters holding a letter
   and a digit, the ``sk`` not glued to a preceding key character (OpenAI's ``sk-``,
   ``sk-proj-``, ``sk-svcacct-``, Anthropic's ``sk-ant-``; while ``task-0123456789ab``,
   ``doc-sk-0123456789abc``, ``sk-1234`` and ``sk-glossary-entries`` -- doc ids, words --
   are kept); GitHub tokens (``ghp_`` and kin, ``github_pat_``), Hugging Face (``hf_``),
   Google (``AIza``), AWS access key ids (``AKIA``), Slack (``xox?-``), and JWTs
   (``eyJ...``, three dot-separated parts). A bare random string (an Azure key is 32 hex
   digits) has no shape that tells it from a hash used as a doc id: it is masked only when
   known (rule 1).

Seen values are kept for the rest of the process (the last :data:`MAX_SEEN`), so a token
found once in a header is masked in every later text too: process state on purpose, as a
secret stays one for every run in the process. Only error texts are scrubbed, never the
data (doc ids, queries, hit texts), which outputs must show as they are.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: shortest value masked as a known secret (shorter ones are no key, and too common)
MIN_SECRET = 8
#: shortest run of key characters masked as a piece of a known secret
MIN_PIECE = 12
#: values seen in texts, kept to mask them everywhere afterwards
MAX_SEEN = 200

MASK = "***"

#: environment variables whose values are secrets, by name
_SECRET_NAME = re.compile(r"(?i)(?:API_?KEY|ACCESS_?KEY|(?:^|_)KEY|SECRET|TOKEN|PASSWORD|PASSWD)$")

#: a credential-looking value: a digit, or punctuation inside it, or 8+ characters of both
#: cases ("Bearer of bad news", "basic retrieval." and "a secret: none" are no credentials)
_CREDENTIAL = (
    r"(?=[A-Za-z0-9._~+/=-]*(?:[0-9]|[._~+/-][A-Za-z0-9])"
    r"|(?=[A-Za-z0-9._~+/=-]*[a-z])(?=[A-Za-z0-9._~+/=-]*[A-Z])[A-Za-z0-9._~+/=-]{8})"
)
_VALUE = r"[^\s\"',;()\[\]{}<>]+"
#: ``Bearer <v>`` / ``Basic <v>``
_SCHEME = re.compile(rf"\b((?i:bearer|basic))(\s+){_CREDENTIAL}([A-Za-z0-9._~+/-]+=*)")
#: a credential header or assignment: ``name: value``, ``name=value``, ``'name': 'value'``
#: (not ``name = value``: that is a line of code, as a traceback shows)
_NAMED = re.compile(
    r"(?i)((?:api[-_]?key|access[-_]?key|secret|token|password|passwd|authorization)"
    r"[\"']?(?:\s*:\s*|=)[\"']?)"
    rf"(?!(?:bearer|basic)\s)(?=[^\s\"',;()\[\]{{}}<>]*[0-9]|[^\s\"',;()\[\]{{}}<>]{{8}})"
    rf"({_VALUE})"
)
#: a URL's password: ``scheme://user:<v>@``
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:]*:)([^\s/@]+)@")
#: key-shaped tokens (see the module docstring)
_KEY_CHARS = "[A-Za-z0-9_-]"
_SK = re.compile(
    rf"(?<!{_KEY_CHARS})sk-(?={_KEY_CHARS}*[A-Za-z])(?={_KEY_CHARS}*[0-9]){_KEY_CHARS}{{12,}}"
)
_SHAPED = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|hf_[A-Za-z0-9]{30,}|AIza[0-9A-Za-z_-]{35}|AKIA[0-9A-Z]{16}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"
    r")(?![A-Za-z0-9_-])"
)
#: the header rules, whose values are remembered: (rule, its mask, the words in lowercase
#: one of which it needs: a text without any skips it, as Python's case-insensitive
#: alternations cost ~10 us a text); the value is each rule's last group
_HEADER_RULES = (
    (_SCHEME, r"\1\2***", ("bearer", "basic")),
    (_NAMED, r"\1***", ("key", "secret", "token", "passw", "authoriz")),
    (_URL_PASSWORD, r"\1***@", ("://",)),
)
#: runs of key characters, checked against the known secrets (pieces of a key)
_RUN = re.compile(rf"{_KEY_CHARS}{{{MIN_PIECE},}}")
#: a key's prefix words (``sk-proj-abc`` is also shown as ``proj-abc`` and ``abc``)
_PREFIX_WORD = re.compile(r"^[a-z]+-")
#: a body worth masking on its own holds a letter and a digit, as random keys do (a key
#: ``sk-test-0123456789`` does not make every ``0123456789`` a secret)
_RANDOM = re.compile(r"[A-Za-z].*[0-9]|[0-9].*[A-Za-z]")
#: whitespace, removed to find a secret written across lines
_SPACE = re.compile(r"\s+")


_names: tuple[frozenset[object], tuple[str, ...]] = (frozenset(), ())  # (raw names, secret)
_seen: dict[str, None] = {}  # insertion-ordered: the oldest go first past MAX_SEEN
_lock = threading.Lock()
_cache: dict[object, list[str]] = {}  # (environment secrets, seen state) -> known secrets


def remember(*secrets: str) -> None:
    """Mask these values (8 characters or more) in every text scrubbed from now on."""
    fresh = [s for s in secrets if len(s) >= MIN_SECRET and s not in _seen and MASK not in s]
    if not fresh:
        return
    with _lock:
        for secret in fresh:
            _seen[secret] = None
        while len(_seen) > MAX_SEEN:
            del _seen[next(iter(_seen))]
        _cache.clear()


def environment_secrets() -> tuple[str, ...]:
    """The values of the environment variables named like credentials (8+ characters).

    Read on every call (a key set meanwhile counts at once); the names are scanned again
    only when the set of names changed, checked on CPython's raw mapping (a C-speed set of
    bytes: reading all of ``os.environ`` costs 50 us a call, which every failed call of a
    large evaluation would pay)."""
    global _names
    raw = getattr(os.environ, "_data", None)
    current = frozenset(raw) if isinstance(raw, dict) else frozenset(os.environ)
    if _names[0] != current:
        _names = (current, tuple(n for n in os.environ if _SECRET_NAME.search(n)))
    values = (os.environ.get(name, "") for name in _names[1])
    return tuple(value for value in values if len(value) >= MIN_SECRET)


def scrub(text: str, *secrets: str) -> str:
    """``text`` with every secret masked (see the module docstring); ``secrets``: values
    the caller knows to be secret (remembered, as the values the rules find are)."""
    if not text:
        return text
    remember(*secrets)
    lower = text.lower()
    rules = [
        (rule, mask) for rule, mask, words in _HEADER_RULES if any(word in lower for word in words)
    ]
    if rules:  # their random-looking values, remembered before they are masked here
        found = (m[rule.groups] for rule, _ in rules for m in rule.finditer(text))
        remember(*(value for value in found if _RANDOM.search(value)))
    known = _known()
    if known:
        text = _spread(text, known)
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    if known:
        text = _RUN.sub(lambda m: MASK if any(m[0] in s for s in known) else m[0], text)
    for rule, mask in rules:
        text = rule.sub(mask, text)
    text = _SK.sub("sk-***", text)
    return _SHAPED.sub(MASK, text)


def _spread(text: str, known: list[str]) -> str:
    """``text`` with each known secret masked where it is written across lines or spaces
    (a wrapped message, pieces too short to be caught one by one) or in another case
    (``key.upper()``): looked for in the text without its whitespace, in lowercase, which
    costs a C-speed pass; the positions are mapped back only when one is there."""
    compact = _SPACE.sub("", text).lower()
    wanted = [s.lower() for s in known if s.lower() in compact]
    if not wanted:
        return text
    kept = [i for i, ch in enumerate(text) if not ch.isspace()]
    spans: list[tuple[int, int]] = []
    for secret in wanted:
        start = compact.find(secret)
        while start != -1:
            spans.append((kept[start], kept[start + len(secret) - 1] + 1))
            start = compact.find(secret, start + len(secret))
    pieces, end = [], 0
    for first, last in sorted(spans):
        if first >= end:
            pieces += [text[end:first], MASK]
        end = max(end, last)
    return "".join([*pieces, text[end:]])


def _known() -> list[str]:
    """Every known secret, and each without its key prefix words; longest first (a key is
    masked whole before its body is looked for)."""
    environment = environment_secrets()
    with _lock:
        key = (environment, len(_seen), next(reversed(_seen), None))
        known = _cache.get(key)
        if known is not None:
            return known
        values = {*environment, *_seen}
    for value in list(values):
        body = value
        while (shorter := _PREFIX_WORD.sub("", body, count=1)) != body:
            body = shorter
            if len(body) >= MIN_SECRET and _RANDOM.search(body):
                values.add(body)
    known = sorted(values, key=len, reverse=True)
    with _lock:
        _cache.clear()  # one entry: the environment rarely changes
        _cache[key] = known
    return known


@contextmanager
def scrubbed_log_records() -> Iterator[None]:
    """While inside: every log record made, in any thread, has its message (and the
    traceback it carries) scrubbed the moment it is made, before any handler -- pytest's
    live log, ``--log-file``, its capture -- formats it. A record that cannot be formatted
    is left as it is (logging reports that itself); the factory never raises."""
    import logging

    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
            clean = scrub(message)
            if clean != message:
                record.msg, record.args = clean, None
            if record.exc_info:
                record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
            if record.stack_info:
                record.stack_info = scrub(record.stack_info)
        except Exception:
            pass
        return record

    logging.setLogRecordFactory(factory)
    try:
        yield
    finally:
        if logging.getLogRecordFactory() is factory:  # else someone set theirs meanwhile
            logging.setLogRecordFactory(previous)
