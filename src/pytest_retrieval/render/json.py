"""The JSON report: the session's verdict, then every evaluation with its own (schema:
``schema/report.schema.json``). Compact, NaN-free and written atomically."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from itertools import chain, repeat
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

import numpy as np

from .._version import __version__
from ..hits import NUL, Ranking

if TYPE_CHECKING:
    from ..compare import ABGroup
    from ..metrics import FloatArray
    from ..results import EvaluationResult, QueryTable
    from ..verdicts import Verdict

REPORT_VERSION = 1


def json_report(
    results: Sequence[EvaluationResult],
    verdict: Verdict,
    groups: Sequence[ABGroup] = (),
    *,
    created: str = "",
    git: Mapping[str, Any] | None = None,
    queries: bool = True,
    shard: str | None = None,
) -> dict[str, Any]:
    """The JSON report: when (``created``, default now) and at which commit (``git``) it was
    made, the session's verdict, every evaluation (with its own), and each A/B comparison
    (every retriever against its group's reference, with the changed queries). Without
    ``queries`` the evaluations' query lists are empty (see :func:`report_text`). A CI
    shard's partial report names its ``shard`` (``"2/3"``) in its first bytes: no output of
    combine or eval replaces one it was not given (:func:`.shards.partial_report_of`)."""
    return {
        "version": REPORT_VERSION,
        **({} if shard is None else {"shard": shard}),
        "plugin_version": __version__,
        "created": created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": dict(git or {}),
        "passed": verdict.passed,
        "verdict": verdict.to_dict(),
        "evaluations": [result.to_dict(queries=queries) for result in results],
        "ab": [
            {
                "golden": group.reference.golden_name,
                "reference": group.reference.retriever_id,
                "retriever": other.retriever_id,
                "comparison": comparison.to_dict(other.golden_source),
            }
            for group in groups
            for other, comparison in group.others
        ],
    }


#: queries encoded at a time by :func:`report_text`
QUERY_CHUNK = 10_000


def report_text(
    results: Sequence[EvaluationResult],
    verdict: Verdict,
    groups: Sequence[ABGroup] = (),
    *,
    created: str = "",
    git: Mapping[str, Any] | None = None,
    shard: str | None = None,
) -> Iterator[str]:
    """:func:`json_report` as compact JSON text, a piece at a time: each evaluation's queries
    are encoded QUERY_CHUNK at a time into the rest, so a million-query report never holds
    all their dicts, nor one string of them, in memory. The same text as
    ``dumps(json_report(...))``."""
    document = json_report(
        results, verdict, groups, created=created, git=git, queries=False, shard=shard
    )
    token = f"pytest-retrieval-queries-{uuid.uuid4().hex}-"  # in no text a user wrote
    for index, evaluation in enumerate(document["evaluations"]):
        evaluation["queries"] = f"{token}{index}"
    rest = dumps(document)
    for index, result in enumerate(results):
        before, rest = rest.split(f'"{token}{index}"', 1)
        yield _surrogates_escaped(before + "[")
        for start in range(0, len(result.queries), QUERY_CHUNK):
            chunk = entries_text(result.table, start, start + QUERY_CHUNK)
            yield _surrogates_escaped(("," if start else "") + chunk)
        yield "]"
    yield _surrogates_escaped(rest)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogates_escaped(text: str) -> str:
    """``text`` with each lone surrogate (a retriever's text that is not valid Unicode: UTF-8
    cannot write it) as its JSON escape ``\\udXXX``: the file stays UTF-8 and reads back as
    the same string. Only inside JSON strings can such a character be."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def entries_text(table: QueryTable, start: int, stop: int) -> str:
    """``dumps(table.entries(start, stop))[1:-1]``: the same text, written from the
    table's columns -- each column's JSON pieces made by C loops (``map`` of the encoder's
    own functions), one format operation a query -- instead of a dict a query encoded
    whole: a third of the time, a million queries' report in seconds. Tables with a
    judge's verdicts, labels, texts, scores or criteria, or made of QueryResults, take the
    general path. ``test_fast_path`` checks the two agree."""
    c = table.columns
    if c is None or any(
        column is not None for column in (c.judgments, c.downstream, c.texts, c.scores, c.criteria)
    ):
        return dumps(table.entries(start, stop))[1:-1]
    rows = range(len(table))[start:stop]
    start, stop = rows.start, rows.stop
    if not rows:
        return ""
    ids, texts, tags = c.ids[start:stop], c.queries[start:stop], c.tags[start:stop]
    returned, relevant = c.returned[start:stop], c.relevant[start:stop]
    fingerprints = c.fingerprints[start:stop]
    shared_tags = set(tags)
    joined = [r.joined for r in returned if isinstance(r, Ranking)]
    tuples = [r for r in returned if not isinstance(r, Ranking)]
    strings = (ids, fingerprints, chain.from_iterable(tuples), chain.from_iterable(relevant))
    plain = all(map(_plain, (*strings, chain.from_iterable(shared_tags))))
    if not plain or _ESCAPED_BUT_NUL.search(NUL.join(joined)):
        return dumps(table.entries(start, stop))[1:-1]  # some need escaping: the encoder
    tags_text = {t: _plain_ids_text(t) for t in shared_tags}
    names = list(c.values)
    template = "{" + ",".join(f"{_quoted(name)}:%s" for name in names) + "}"
    columns = [_floats_text(column[start:stop]) for column in c.values.values()]
    metrics = map(template.__mod__, zip(*columns, strict=True)) if names else repeat("{}")
    errors = ["null"] * len(rows)
    for row, error in c.errors.items():
        if start <= row < stop:
            errors[row - start] = encode_basestring(error)
    duplicates = ["0"] * len(rows)
    for row, dropped in c.duplicates.items():
        if start <= row < stop:
            duplicates[row - start] = repr(dropped)
    latency = _floats_text(c.latency_ms[start:stop], 3)
    pieces = zip(
        ids,
        map(encode_basestring, texts),
        map(tags_text.__getitem__, tags),
        map(_plain_ranking_text, returned),
        _plain_judged_texts(relevant),
        metrics,
        latency,
        errors,
        duplicates,
        fingerprints,
        strict=True,
    )
    return ",".join(map(_ENTRY.__mod__, pieces))


_ENTRY = (
    '{"id":"%s","query":%s,"tags":%s,"returned":%s,"relevant":%s,"metrics":%s,"latency_ms":%s,'
    '"error":%s,"duplicates":%s,"fingerprint":"%s"}'
)
#: what the JSON encoder escapes in a string (ensure_ascii off): where none is, a string's
#: JSON is itself in quotes
_ESCAPED = re.compile(r'[\x00-\x1f\\"]')
_ESCAPED_BUT_NUL = re.compile(r'[\x01-\x1f\\"]')  # in joined rankings, NUL separates ids


def _plain(strings: Iterable[str]) -> bool:
    """Whether none of ``strings`` needs escaping (one search over all of them)."""
    return _ESCAPED.search("".join(strings)) is None


def _quoted(name: str) -> str:
    """``name`` as JSON, safe inside a %-format."""
    return encode_basestring(name).replace("%", "%%")


def _plain_ids_text(ids: Sequence[str]) -> str:
    """The JSON of ids none of which needs escaping."""
    return '["' + '","'.join(ids) + '"]' if ids else "[]"


def _plain_ranking_text(ids: Sequence[str]) -> str:
    """The JSON of ranked ids none of which needs escaping; a Ranking's without splitting
    it."""
    if not isinstance(ids, Ranking):
        return _plain_ids_text(ids)
    return '["' + ids.joined.replace(NUL, '","') + '"]' if ids else "[]"


def _plain_judged_texts(relevant: Sequence[Mapping[str, int]]) -> list[str]:
    """The JSON of each query's judgments, whose ids need no escaping: one encoder call
    for them all, each followed by a marker no plain id can hold (a backslash), to split
    the text where one ends."""
    between: list[object] = [_MARK] * (2 * len(relevant) - 1)
    between[::2] = relevant
    return dumps(between)[1:-1].split(f",{dumps(_MARK)},")


_MARK = "\x01"  # encoded "\u0001"


def _floats_text(values: FloatArray, digits: int | None = None) -> list[str]:
    """Each value (rounded to ``digits`` as ``round`` does) as the encoder writes it; NaN
    and infinities as null (as :func:`dumps`). Each distinct value is written once: a
    metric takes few values (precision@10 eleven), and ``repr`` of a float costs a
    microsecond."""
    if digits is not None:
        values = np.array(list(map(round, values.tolist(), repeat(digits))), dtype=np.float64)
    distinct, where = np.unique(values, return_inverse=True)
    written = list(map(float.__repr__, distinct.tolist()))
    texts = list(map(written.__getitem__, where.ravel().tolist()))
    if not np.isfinite(values).all():
        for row in np.flatnonzero(~np.isfinite(values)).tolist():
            texts[row] = "null"
    return texts


def dumps(document: Any) -> str:
    """Compact JSON (the C encoder: 10x faster than indented output on 100k queries), with
    NaN and infinities as null. ``python -m json.tool`` pretty-prints it."""
    options: dict[str, Any] = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}
    try:
        return json.dumps(document, **options)
    except ValueError:  # a NaN somewhere: only then pay for the walk
        return json.dumps(_finite(document), **options)


def _finite(value: Any) -> Any:
    """NaN and infinities become null: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
