"""The public API, pinned: what users name in code and ``except`` clauses. A name added to or
dropped from ``pytest_retrieval.__all__`` is a decision, so it fails here until this list says
so; every name resolves; the errors derive from one root; and the names a user needs without
evaluating anything (the errors, the label-source protocol, the verdict) load without numpy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest_retrieval

PINNED = {
    # inputs
    "load_golden", "GoldenSet", "GoldenQuery", "read_run", "Run",
    # evaluate, score, check
    "evaluate", "with_metrics", "batched", "compute", "assert_thresholds", "assert_no_regression",
    # results and the verdict
    "EvaluationResult", "QueryResult", "Comparison", "ChangeStatus", "Threshold", "Allowance",
    "Verdict", "Reason",
    # labels: the protocol a new source implements, and the golden qrels' own source
    "LabelSource", "LabelRequest", "Labelled", "GoldenLabels",
    # errors
    "RetrievalError", "ConfigError", "UsageError", "InputError", "RetrieverError", "JudgeError",
    "GoldenError", "BaselineError", "ThresholdError", "AllowanceError", "MetricNameError",
    "OverwriteError", "RunFileError", "HitError",
    "__version__",
}  # fmt: skip

#: loaded without numpy, pydantic, jsonschema or openai
LIGHT = {
    "RetrievalError", "ConfigError", "UsageError", "InputError", "RetrieverError", "JudgeError",
    "GoldenError", "BaselineError", "ThresholdError", "AllowanceError", "MetricNameError",
    "OverwriteError", "HitError", "RunFileError",
    "LabelSource", "LabelRequest", "Labelled", "GoldenLabels",
    "Verdict", "Reason", "__version__",
}  # fmt: skip


def test_all_is_the_pinned_list() -> None:
    assert set(pytest_retrieval.__all__) == PINNED
    assert len(pytest_retrieval.__all__) == len(PINNED)  # no name twice


def test_every_name_resolves_and_an_unknown_one_says_so() -> None:
    for name in PINNED:
        assert getattr(pytest_retrieval, name) is not None, name
    try:
        pytest_retrieval.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")


def test_the_exported_errors_share_one_root() -> None:
    errors = [getattr(pytest_retrieval, n) for n in PINNED if n.endswith("Error")]
    assert len(errors) == 14
    assert all(issubclass(error, pytest_retrieval.RetrievalError) for error in errors)


def test_the_light_names_load_without_numpy() -> None:
    code = (
        "import json, sys\n"
        "import pytest_retrieval\n"
        "heavy = ('numpy', 'pydantic', 'jsonschema', 'openai')\n"
        f"for name in {sorted(LIGHT)!r}:\n"
        "    getattr(pytest_retrieval, name)\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_heavy_names_do_load_numpy() -> None:
    """The check above can fail: evaluate's import brings numpy in."""
    code = "import sys, pytest_retrieval; pytest_retrieval.evaluate; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
