"""The verdict: passed or failed, and every reason with its kind. A leaf without numpy, so
the session controller can hold reasons before anything is evaluated.

Computed once per evaluation (:func:`pytest_retrieval.gate.decide`) and once per session
(:func:`pytest_retrieval.gate.session_verdict`); every output renders it and none
re-derives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._internal.scrub import scrub

if TYPE_CHECKING:
    from .limits import Threshold


#: kinds of reason; failed retriever calls come first in every verdict (:func:`causes_first`),
#: the others in the order they were found
RETRIEVER_ERRORS = "retriever errors"
THRESHOLD = "threshold"
REGRESSION = "regression"
JUDGE_COVERAGE = "judge coverage"
DOWNSTREAM_LABELS = "downstream labels"
STALE_BASELINE = "stale baseline"
MISSING_BASELINE = "missing baseline"
PARTIAL_RUN = "partial run"
RUN_COVERAGE = "run coverage"  # golden queries a precomputed run lacks (a warning)
NO_RESULT = "no result"
OUTPUT = "output"
CALIBRATION = "judge calibration"
USAGE = "usage"


@dataclass(frozen=True)
class Reason:
    """One reason a verdict failed (or, in ``Verdict.warnings``, one thing to know)."""

    kind: str
    message: str
    metric: str | None = None

    def __post_init__(self) -> None:
        """Every output renders reasons: whatever text went into one, no secret comes out."""
        object.__setattr__(self, "message", scrub(self.message))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "metric": self.metric}


@dataclass(frozen=True)
class GateOutcome:
    """One threshold checked against one evaluation."""

    threshold: Threshold
    value: float
    ci: tuple[float, float] | None
    passed: bool


@dataclass(frozen=True)
class Verdict:
    """Passed or failed, and why: computed once (:func:`pytest_retrieval.gate.decide`),
    rendered by every output (exit status, terminal, JSON, JUnit, Markdown, HTML, diff)."""

    reasons: tuple[Reason, ...] = ()
    warnings: tuple[Reason, ...] = ()
    #: every threshold, checked (failing ones are also reasons)
    outcomes: tuple[GateOutcome, ...] = ()
    decided: bool = True

    @property
    def passed(self) -> bool:
        return self.decided and not self.reasons

    def of_kind(self, kind: str) -> list[Reason]:
        return [reason for reason in self.reasons if reason.kind == kind]

    @property
    def notes(self) -> list[Reason]:
        """The warnings every output shows as notes beside the numbers (a stale or missing
        baseline has its own lines, with the command that refreshes it)."""
        return [w for w in self.warnings if w.kind in (THRESHOLD, RUN_COVERAGE)]

    @property
    def word(self) -> str:
        return "PASSED" if self.passed else "FAILED"

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reasons": [reason.to_dict() for reason in self.reasons],
            "warnings": [reason.to_dict() for reason in self.warnings],
        }


#: the verdict of a result nothing has decided yet: fails safe
UNDECIDED = Verdict(reasons=(Reason("undecided", "no verdict was computed"),), decided=False)


def causes_first(reasons: Sequence[Reason]) -> tuple[Reason, ...]:
    """``reasons`` with failed retriever calls first (in their order), then the rest: a
    threshold a failed call scored 0 on is its effect, and CI shows the first line only."""
    return tuple(
        sorted(reasons, key=lambda reason: reason.kind != RETRIEVER_ERRORS)  # stable
    )
