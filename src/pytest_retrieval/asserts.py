"""Assertions on an evaluation, for a test written by hand: each raises ``AssertionError``
with the terminal's failure text (the verdict's reasons, then the evidence).

Functions over :class:`~.results.EvaluationResult` rather than its methods, so the results
(a leaf every renderer reads) import neither the evaluation nor the renderers: this module
sits above both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .evaluation import with_metrics
from .gate import decide
from .limits import from_mapping
from .render.terminal import failure_text
from .results import EvaluationResult
from .verdicts import DOWNSTREAM_LABELS, JUDGE_COVERAGE, RETRIEVER_ERRORS, THRESHOLD


def assert_thresholds(
    result: EvaluationResult, thresholds: Mapping[str, float] | None = None
) -> None:
    """Raise AssertionError with the gate table when ``result``'s verdict failed on a
    threshold, failed calls or judge coverage. ``thresholds`` (``{"recall@10": 0.8}``)
    replace the evaluation's own: the verdict is decided anew for them, computing from the
    stored rankings the metrics they name that the evaluation lacks."""
    if thresholds is not None:
        chosen = from_mapping(thresholds, "assert_thresholds()")
        needed = {t.metric.name for t in chosen} - set(result.metrics)
        rescored = with_metrics(result, sorted(needed)) if needed else result
        result = decide(replace(rescored, thresholds=chosen, comparison=None))
    if result.verdict.of_kind(THRESHOLD) or any(
        r.kind in {RETRIEVER_ERRORS, JUDGE_COVERAGE, DOWNSTREAM_LABELS}
        for r in result.verdict.reasons
    ):
        raise AssertionError(failure_text(result))


def assert_no_regression(result: EvaluationResult) -> None:
    """Raise AssertionError with the regression table when a gated metric of ``result``
    regressed against its baseline."""
    if result.regressed:
        raise AssertionError(failure_text(result))
