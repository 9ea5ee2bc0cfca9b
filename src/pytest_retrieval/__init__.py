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

_EXPORTS = {
    "load_golden": "golden",
    "GoldenSet": "golden",
    "GoldenQuery": "golden",
    "GoldenError": "golden",
    "evaluate": "evaluation",
    "with_metrics": "evaluation",
    "assert_thresholds": "asserts",
    "assert_no_regression": "asserts",
    "EvaluationResult": "results",
    "QueryResult": "results",
    "Comparison": "results",
    "ChangeStatus": "results",
    "Threshold": "limits",
    "ThresholdError": "errors",
    "Verdict": "verdicts",
    "Reason": "verdicts",
    "RetrievalError": "errors",
    "ConfigError": "errors",
    "compute": "metrics",
    "batched": "retrieval.batches",
}

__all__ = [
    "ChangeStatus",
    "Comparison",
    "ConfigError",
    "EvaluationResult",
    "GoldenError",
    "GoldenQuery",
    "GoldenSet",
    "QueryResult",
    "Reason",
    "RetrievalError",
    "Threshold",
    "ThresholdError",
    "Verdict",
    "__version__",
    "assert_no_regression",
    "assert_thresholds",
    "batched",
    "compute",
    "evaluate",
    "load_golden",
    "with_metrics",
]

if TYPE_CHECKING:
    from .asserts import assert_no_regression, assert_thresholds
    from .errors import ConfigError, RetrievalError, ThresholdError
    from .evaluation import evaluate, with_metrics
    from .golden import GoldenError, GoldenQuery, GoldenSet, load_golden
    from .limits import Threshold
    from .metrics import compute
    from .results import ChangeStatus, Comparison, EvaluationResult, QueryResult
    from .retrieval.batches import batched
    from .verdicts import Reason, Verdict


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_retrieval' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
