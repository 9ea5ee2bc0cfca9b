"""The gate's specification, parsed: thresholds (a metric's floor, on all queries or on a
tag) and allowances (how far a metric may drop against the baseline). Pure values and their
parsers, below the golden set, the results and the gate, which all read them; no I/O.

A threshold names a metric and optionally a tag: ``recall@10=0.8`` or
``recall@10[errors]=0.7`` (only the queries tagged ``errors``). An allowance says how far a
metric may drop against the baseline: ``0.01`` absolute or ``2%`` of the baseline value.
Sources are layered; a later layer replaces an earlier one key by key: golden file < ini <
marker < command line (:func:`merge`, :func:`merge_allowances`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import AllowanceError as AllowanceError  # raised here; public from here too
from .errors import MetricNameError
from .errors import ThresholdError as ThresholdError
from .metrics import Metric, parse_metric

#: the pseudo-metric of the latency gate: p95 of the calls' latency, in milliseconds
LATENCY = "latency_p95"


@dataclass(frozen=True)
class Threshold:
    """``metric`` (over the queries with ``tag``, or all) must be at least ``minimum``."""

    metric: Metric
    minimum: float
    tag: str | None = None
    source: str = ""

    @property
    def key(self) -> str:
        return f"{self.metric.name}[{self.tag}]" if self.tag else self.metric.name


_KEY = re.compile(r"^\s*(?P<metric>[^\[\]=\s]+)\s*(?:\[(?P<tag>[^\]]+)\])?\s*$")


def parse_key(key: str) -> tuple[Metric, str | None]:
    """``recall@10[errors]`` -> (recall@10, "errors")."""
    match = _KEY.match(key)
    if match is None:
        raise ThresholdError(
            f"{key!r} is not a threshold key: write METRIC@K or METRIC@K[TAG], e.g. recall@10"
        )
    try:
        metric = parse_metric(match["metric"])
    except MetricNameError as exc:
        raise ThresholdError(str(exc)) from None
    return metric, (match["tag"].strip() if match["tag"] else None)


def make_threshold(key: str, value: object, source: str) -> Threshold:
    """Validate one ``key: value`` pair; ``value`` must be a number in [0, 1]."""
    metric, tag = parse_key(key)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ThresholdError(f"threshold {key} = {value!r}: the value must be a number in [0, 1]")
    try:
        minimum = float(value)
    except ValueError:
        raise ThresholdError(
            f"threshold {key} = {value!r}: the value must be a number in [0, 1]"
        ) from None
    if not (0.0 <= minimum <= 1.0) or math.isnan(minimum):
        raise ThresholdError(
            f"threshold {key} = {value}: outside [0, 1]; metrics are fractions, "
            f"write e.g. {key}=0.8 rather than 80"
        )
    return Threshold(metric, minimum, tag, source)


def parse_assignment(text: str, source: str) -> Threshold:
    """``METRIC@K[TAG]=VALUE`` as written on the command line or in ini."""
    key, sep, value = text.partition("=")
    if not sep or not value.strip():
        raise ThresholdError(
            f"{text!r} is not METRIC@K=VALUE (e.g. recall@10=0.8 or recall@10[errors]=0.7)"
        )
    return make_threshold(key.strip(), value.strip(), source)


def from_mapping(values: Mapping[str, object], source: str) -> list[Threshold]:
    return [make_threshold(key, value, source) for key, value in values.items()]


def merge(*layers: Iterable[Threshold]) -> list[Threshold]:
    """Later layers win per key (metric + tag); order of first appearance is kept."""
    merged: dict[str, Threshold] = {}
    for layer in layers:
        for threshold in layer:
            merged[threshold.key] = threshold
    return list(merged.values())


# ---------------------------------------------------------------------------- allowances

DEFAULT_MAX_DROP = 0.01
_DROP = re.compile(r"^\s*(?P<amount>[0-9]*\.?[0-9]+)\s*(?P<percent>%?)\s*$")


@dataclass(frozen=True)
class Allowance:
    """How far ``metric`` may drop: an absolute amount, or a fraction of the baseline."""

    metric: str
    amount: float
    relative: bool = False
    source: str = "default"

    def allowed(self, baseline_value: float) -> float:
        return self.amount * abs(baseline_value) if self.relative else self.amount

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"


def default_allowance(metric: str) -> Allowance:
    return Allowance(metric, DEFAULT_MAX_DROP)


def parse_allowance(metric: str, value: object, source: str) -> Allowance:
    """``0.01`` (absolute) or ``"2%"`` (relative to the baseline value, at most 100%)."""
    if metric != LATENCY:
        try:
            parse_metric(metric)
        except MetricNameError as exc:
            raise AllowanceError(f"max drop for {metric!r}: {exc}") from None
    text = str(value) if not isinstance(value, bool) else "x"
    match = _DROP.match(text)
    if match is None:
        raise AllowanceError(
            f"max drop {metric}={value!r}: write an absolute amount like 0.01 or a percentage "
            "like 2%"
        )
    amount = float(match["amount"])
    relative = bool(match["percent"])
    if relative:
        amount /= 100.0
        if amount > 1 and metric != LATENCY:
            raise AllowanceError(
                f"max drop {metric}={value}: a metric cannot drop more than 100% of its value; "
                "write e.g. 5%"
            )
    elif metric != LATENCY and amount > 1:
        raise AllowanceError(
            f"max drop {metric}={value}: metrics are fractions in [0, 1]; write 0.02 or 2%"
        )
    if metric == LATENCY and not relative:
        source += " (milliseconds)"
    return Allowance(metric, amount, relative, source)


def parse_allowance_assignment(text: str, source: str) -> Allowance:
    metric, sep, value = text.partition("=")
    if not sep:
        raise AllowanceError(f"{text!r} is not METRIC=DROP (e.g. recall@10=0.01 or ndcg@10=2%)")
    return parse_allowance(metric.strip(), value.strip(), source)


def merge_allowances(*layers: Iterable[Allowance]) -> dict[str, Allowance]:
    merged: dict[str, Allowance] = {}
    for layer in layers:
        for allowance in layer:
            merged[allowance.metric] = allowance
    return merged
