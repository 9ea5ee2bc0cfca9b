"""The JUnit XML of ``pytest-retrieval combine`` and ``eval``, and the ``<property>`` pairs the
plugin attaches to its tests: what a pytest run's ``--junitxml`` holds for the same
evaluations, so a CI test viewer shows a gate run offline as it shows one run by pytest.

pytest is not imported (a library module; ``_pytest`` is private, and only the plugin may
import pytest): :func:`escape` is pytest's ``bin_xml_escape`` rule, and :func:`message` its
``message`` attribute, cut as pytest 9.2's ``shorten_message`` cuts it when the pytest
installed is 9.2 or later (older ones write it whole: the CLI's file and the plugin's agree
under either). ``tests/test_render_junit.py`` compares both with pytest's on every code point
class. (A pytest older than the fix of its issue 14483 shows characters above U+FFFF as
``#x1F600`` and keeps DEL, a slip in its pattern; ours is the rule it states.)
"""

from __future__ import annotations

import platform
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from ..results import EvaluationResult
    from ..verdicts import Verdict

#: what XML 1.0 holds (``Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] |
#: [#x10000-#x10FFFF]``) less DEL, which pytest escapes too; the rest is shown as ``#xNN``
_ILLEGAL = re.compile(
    "[^\u0009\u000a\u000d\u0020-\u007e\u0080-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
#: pytest 9.2's budget for a ``message`` attribute (the element text keeps the whole)
MESSAGE_BUDGET = 500
#: the first pytest that cuts the ``message`` attribute
SHORTENING_PYTEST = (9, 2)


def escape(value: object) -> str:
    """``value``'s text as pytest's JUnit writer puts it in XML: a character XML 1.0
    cannot hold (and DEL) shown as ``#x01`` (``#xFFFE`` above U+00FF) -- visible, not an
    XML character reference."""

    def shown(found: re.Match[str]) -> str:
        code = ord(found.group())
        return f"#x{code:02X}" if code <= 0xFF else f"#x{code:04X}"

    return _ILLEGAL.sub(shown, str(value))


def shorten(text: str, budget: int = MESSAGE_BUDGET) -> str:
    """``text`` cut as pytest 9.2 cuts a ``message`` attribute: whole lines while they fit
    in ``budget`` characters (a first line longer than that cut, with ``...``), then a line
    saying what was left out; unchanged when nothing was."""
    lines = text.splitlines() or [""]
    kept: list[str] = []
    size = 0
    for line in lines:
        if kept and size + len(line) + 1 > budget:
            break
        kept.append(line)
        size += len(line) + 1
    shortened = "\n".join(kept)
    first_line_cut = len(shortened) > budget
    if first_line_cut:
        shortened = shortened[:budget] + "..."
    remaining = len(lines) - len(kept)
    if remaining:
        note = f"+{remaining} more line{'s' if remaining > 1 else ''}"
    elif first_line_cut:
        note = "truncated"
    else:
        return text
    return f"{shortened}\n[{note}; full report in element text]"


def shortens(version: str) -> bool:
    """Whether the pytest of ``version`` cuts a ``message`` attribute (9.2 and later; a
    version that does not read as one: the newest behaviour)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        return True
    return (int(found[1]), int(found[2])) >= SHORTENING_PYTEST


@cache
def _installed_pytest_shortens() -> bool:
    """:func:`shortens` for the pytest installed, read from its metadata (not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return shortens(version("pytest"))
    except PackageNotFoundError:  # a dependency, but the newest behaviour if it is absent
        return True


def message(text: str) -> str:
    """A failure's ``message`` attribute as the pytest that is installed writes it: cut
    (:func:`shorten`) from pytest 9.2, whole before, then escaped."""
    return escape(shorten(text) if _installed_pytest_shortens() else text)


def junit_properties(result: EvaluationResult, nth: int) -> list[tuple[str, object]]:
    """An evaluation's metrics, baseline verdicts and reasons as JUnit ``<property>``
    pairs (``nth``: its place among its test's evaluations; the first has no number)."""
    prefix = "retrieval." if nth == 1 else f"retrieval.{nth}."
    properties: list[tuple[str, object]] = [
        (prefix + "golden", result.golden_name),
        (prefix + "retriever", result.retriever_id),
        (prefix + "queries", len(result.queries)),
    ]
    properties += [(prefix + name, _value(value)) for name, value in result.metrics.items()]
    for change in result.comparison.changes if result.comparison else []:
        properties.append((f"{prefix}{change.metric}.baseline", _value(change.baseline)))
        properties.append((f"{prefix}{change.metric}.verdict", change.verdict.value))
    if result.latency_p95_ms == result.latency_p95_ms:  # NaN when no call answered
        properties.append((prefix + "latency_p95_ms", round(result.latency_p95_ms, 3)))
    properties.append((prefix + "passed", result.verdict.passed))
    for reason in result.verdict.reasons:
        properties.append((prefix + "reason", f"{reason.kind}: {reason.message}"))
    return properties


def _value(value: float) -> object:
    """A metric as a JUnit property: rounded, or "n/a" (a judge metric nothing graded)."""
    return "n/a" if value != value else round(value, 6)


def junit_xml(
    results: Sequence[EvaluationResult],
    verdict: Verdict,
    cases: Sequence[str],
    created: str,
    report: Path | None = None,
) -> str:
    """The JUnit file a pytest run's ``--junitxml`` would hold for these evaluations: one
    test case each (named from ``cases``, the pytest node ids), with its properties and, when
    its verdict failed, the failure text leading with the reason; the session's verdict as
    suite properties. A gate that could not run (refused inputs: no evaluation) is one test
    case in error, so that a CI test viewer shows it red, not an empty passing suite."""
    from .terminal import failure_text, kept_in

    failed = sum(not r.verdict.passed for r in results)
    refused = not results and not verdict.passed
    suite = ET.Element(
        "testsuite",
        name="pytest",
        errors=str(int(refused)),
        failures=str(failed),
        skipped="0",
        tests=str(len(results) or int(refused)),
        time="0.000",
        timestamp=created,
        hostname=platform.node(),
    )
    session: list[tuple[str, object]] = [("retrieval.passed", verdict.passed)]
    session += [("retrieval.reason", f"{r.kind}: {r.message}") for r in verdict.reasons]
    _properties(suite, session)
    for result, nodeid in zip(results, cases, strict=True):
        *path, name = _address(nodeid)
        case = ET.SubElement(suite, "testcase", classname=".".join(path), name=escape(name))
        case.set("time", "0.000")
        _properties(case, junit_properties(result, 1))
        if not result.verdict.passed:
            text = failure_text(result, kept_in=kept_in(report, "--report"))
            # as pytest writes a pytest.fail(): the whole text, which CI viewers show
            failure = ET.SubElement(case, "failure", message=message(f"Failed: {text}"))
            failure.text = escape(text)
    if refused:
        case = ET.SubElement(suite, "testcase", classname="pytest-retrieval", name="gate")
        case.set("time", "0.000")
        text = "\n".join(f"{r.kind}: {r.message}" for r in verdict.reasons)
        error = ET.SubElement(case, "error", message=escape(text.splitlines()[0]))
        error.text = escape(text)
    root = ET.Element("testsuites", name="pytest tests")
    root.append(suite)
    return '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="unicode")


def _properties(parent: ET.Element, pairs: Sequence[tuple[str, object]]) -> None:
    if pairs:
        node = ET.SubElement(parent, "properties")
        for name, value in pairs:
            ET.SubElement(node, "property", name=name, value=escape(value))


def _address(nodeid: str) -> list[str]:
    """A node id as pytest's JUnit writer names it: the file as a dotted path, then names."""
    path, *names = nodeid.split("::")
    return [re.sub(r"\.py$", "", path.replace("/", ".")), *names]
