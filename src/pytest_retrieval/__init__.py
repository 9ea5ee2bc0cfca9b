"""pytest-retrieval: retrieval quality (recall@k, MRR, nDCG, ...) as a pytest gate.

Usable without pytest::

    from pytest_retrieval import load_golden, evaluate
    result = evaluate(my_search, "golden.json")
    print(result.metrics["recall@10"])

Exports load lazily so that pytest loading the plugin entry point does not import numpy,
pydantic or jsonschema in runs that never evaluate anything.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

#: what users name in code and ``except`` clauses, and the module each loads from (lazily:
#: ``import pytest_retrieval`` imports none of them). Pinned by tests/test_public_api.py.
_EXPORTS = {
    "load_golden": "golden",
    "GoldenSet": "golden",
    "GoldenQuery": "golden",
    "read_run": "runfile",
    "Run": "runfile",
    "evaluate": "evaluation",
    "with_metrics": "evaluation",
    "batched": "retrieval.batches",
    "compute": "metrics",
    "assert_thresholds": "asserts",
    "assert_no_regression": "asserts",
    "EvaluationResult": "results",
    "QueryResult": "results",
    "Comparison": "results",
    "ChangeStatus": "results",
    "Threshold": "limits",
    "Allowance": "limits",
    "Verdict": "verdicts",
    "Reason": "verdicts",
    "LabelSource": "labels",
    "LabelRequest": "labels",
    "Labelled": "labels",
    "GoldenLabels": "labels",
    "RetrievalError": "errors",
    "ConfigError": "errors",
    "UsageError": "errors",
    "InputError": "errors",
    "RetrieverError": "errors",
    "JudgeError": "errors",
    "GoldenError": "errors",
    "BaselineError": "errors",
    "ThresholdError": "errors",
    "AllowanceError": "errors",
    "MetricNameError": "errors",
    "OverwriteError": "errors",
    "RunFileError": "errors",
    "HitError": "hits",
}

__all__ = [
    "Allowance",
    "AllowanceError",
    "BaselineError",
    "ChangeStatus",
    "Comparison",
    "ConfigError",
    "EvaluationResult",
    "GoldenError",
    "GoldenLabels",
    "GoldenQuery",
    "GoldenSet",
    "HitError",
    "InputError",
    "JudgeError",
    "LabelRequest",
    "LabelSource",
    "Labelled",
    "MetricNameError",
    "OverwriteError",
    "QueryResult",
    "Reason",
    "RetrievalError",
    "RetrieverError",
    "Run",
    "RunFileError",
    "Threshold",
    "ThresholdError",
    "UsageError",
    "Verdict",
    "__version__",
    "assert_no_regression",
    "assert_thresholds",
    "batched",
    "compute",
    "evaluate",
    "load_golden",
    "read_run",
    "with_metrics",
]

if TYPE_CHECKING:
    from .asserts import assert_no_regression, assert_thresholds
    from .errors import (
        AllowanceError,
        BaselineError,
        ConfigError,
        GoldenError,
        InputError,
        JudgeError,
        MetricNameError,
        OverwriteError,
        RetrievalError,
        RetrieverError,
        RunFileError,
        ThresholdError,
        UsageError,
    )
    from .evaluation import evaluate, with_metrics
    from .golden import GoldenQuery, GoldenSet, load_golden
    from .hits import HitError
    from .labels import GoldenLabels, Labelled, LabelRequest, LabelSource
    from .limits import Allowance, Threshold
    from .metrics import compute
    from .results import ChangeStatus, Comparison, EvaluationResult, QueryResult
    from .retrieval.batches import batched
    from .runfile import Run, read_run
    from .verdicts import Reason, Verdict


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_retrieval' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
