"""The JSON report: the session's verdict, then every evaluation with its own (schema:
``schema/report.schema.json``). Compact, NaN-free and written atomically."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .._version import __version__

if TYPE_CHECKING:
    from ..compare import ABGroup
    from ..results import EvaluationResult
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
) -> dict[str, Any]:
    """The JSON report: when (``created``, default now) and at which commit (``git``) it was
    made, the session's verdict, every evaluation (with its own), and each A/B comparison
    (every retriever against its group's reference, with the changed queries). Without
    ``queries`` the evaluations' query lists are empty (see :func:`report_text`)."""
    return {
        "version": REPORT_VERSION,
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
) -> Iterator[str]:
    """:func:`json_report` as compact JSON text, a piece at a time: each evaluation's queries
    are encoded QUERY_CHUNK at a time into the rest, so a million-query report never holds
    all their dicts, nor one string of them, in memory. The same text as
    ``dumps(json_report(...))``."""
    document = json_report(results, verdict, groups, created=created, git=git, queries=False)
    token = f"pytest-retrieval-queries-{uuid.uuid4().hex}-"  # in no text a user wrote
    for index, evaluation in enumerate(document["evaluations"]):
        evaluation["queries"] = f"{token}{index}"
    rest = dumps(document)
    for index, result in enumerate(results):
        before, rest = rest.split(f'"{token}{index}"', 1)
        yield before + "["
        for start in range(0, len(result.queries), QUERY_CHUNK):
            chunk = result.queries[start : start + QUERY_CHUNK]
            yield ("," if start else "") + dumps([q.to_dict() for q in chunk])[1:-1]
        yield "]"
    yield rest


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
