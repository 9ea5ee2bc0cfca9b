"""A metric's change against its reference has one of a fixed set of statuses
(``ChangeStatus``, issue 40): a typo is a NameError, not a silent non-regression; the JSON
report still writes the plain strings, and its schema lists exactly them."""

from __future__ import annotations

import ast
import json
import math
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from pytest_retrieval.render.json import dumps
from pytest_retrieval.results import ChangeStatus, Comparison, MetricChange

SOURCE = Path(__file__).resolve().parent.parent / "src" / "pytest_retrieval"

#: the strings reports have always held, byte for byte
WRITTEN = {
    "regressed",
    "within noise",
    "improved",
    "dropped",
    "rose",
    "ok",
    "n/a",
    "not in baseline",
    "judge changed",
    "not tested",
    "worse",
    "better",
}


def test_the_statuses_are_the_strings_reports_hold() -> None:
    assert {status.value for status in ChangeStatus} == WRITTEN


def test_the_schema_lists_every_status() -> None:
    schema = json.loads(
        resources.files("pytest_retrieval").joinpath("schema/report.schema.json").read_text()
    )
    change = schema["$defs"]["comparison"]["properties"]["changes"]["items"]
    assert set(change["properties"]["verdict"]["enum"]) == WRITTEN
    jsonschema.validate("regressed", change["properties"]["verdict"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate("regresed", change["properties"]["verdict"])


def test_a_status_is_written_and_read_as_its_string() -> None:
    change = MetricChange("recall@10", 0.9, 0.8, 0.01, verdict=ChangeStatus.WITHIN_NOISE)
    comparison = Comparison("baseline b.json", 3, changes=[change])
    text = dumps(comparison.to_dict())
    assert '"verdict":"within noise"' in text
    assert f"{change.verdict}" == str(change.verdict) == "within noise"
    back = Comparison.from_dict(json.loads(text)).changes[0]
    assert back.verdict is ChangeStatus.WITHIN_NOISE
    assert back == change


def test_a_string_becomes_its_status_and_a_typo_is_refused() -> None:
    assert MetricChange("m@1", 0, 0, 0, verdict="rose").verdict is ChangeStatus.ROSE  # type: ignore[arg-type]
    assert MetricChange("m@1", math.nan, 0, 0).verdict is ChangeStatus.OK
    with pytest.raises(ValueError, match="'regresed' is not a metric change status"):
        MetricChange("m@1", 0, 0, 0, verdict="regresed")  # type: ignore[arg-type]


def test_no_status_is_written_as_a_string_literal_in_the_source() -> None:
    """Every use of a status is the enum's member: a literal compared or assigned would be a
    second spelling the type checker cannot see. ("ok", "n/a", "worse" and "better" are
    words of other things too -- a formatted NaN, the directions of query shifts -- and
    are left to review.)"""
    defining = SOURCE / "results.py"
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        enum_body = set()
        if path == defining:
            enum = next(
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.ClassDef) and n.name == "ChangeStatus"
            )
            enum_body = {id(n) for n in ast.walk(enum)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and node.value in WRITTEN - {"ok", "n/a", "worse", "better"}
                and id(node) not in enum_body
            ):
                found.append(f"{path.relative_to(SOURCE)}:{node.lineno} {node.value!r}")
    assert found == []


def test_junit_properties_hold_the_plain_string() -> None:
    """pytest-xdist sends a test's properties to the controller with execnet, which refuses
    a str subclass: a status there is its plain string."""
    from dataclasses import replace

    from pytest_retrieval.render.junit import junit_properties
    from pytest_retrieval.results import EvaluationResult

    change = MetricChange("recall@3", 0.9, 0.5, 0.01, verdict=ChangeStatus.REGRESSED)
    result = replace(
        EvaluationResult.from_dict(_entry()),
        comparison=Comparison("baseline b", 1, changes=[change]),
    )
    (value,) = [v for k, v in junit_properties(result, 1) if k == "retrieval.recall@3.verdict"]
    assert type(value) is str and value == "regressed"


def _entry() -> dict[str, object]:
    """The smallest report entry: one query, one metric."""
    return {
        "golden": {"name": "g", "source": "g.json", "fingerprint": ""},
        "retriever": "r",
        "k": 3,
        "metrics": {"recall@3": 0.5},
        "ci": {},
        "ci_method": "bootstrap",
        "per_tag": {},
        "latency_ms": {"p50": 1.0, "p95": 1.0},
        "queries": [
            {
                "id": "q",
                "query": "q",
                "tags": [],
                "relevant": {"d": 1},
                "returned": ["d"],
                "metrics": {"recall@3": 0.5},
                "latency_ms": 1.0,
                "error": None,
                "duplicates": 0,
            }
        ],
    }
