"""Thresholds: parse them, merge their sources, and decide pass/fail. Pure: no I/O.

A threshold names a metric and optionally a tag: ``recall@10=0.8`` or
``recall@10[errors]=0.7`` (only the queries tagged ``errors``). Sources are layered; a later
layer replaces an earlier one key by key: golden file < ini < marker < command line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .metrics import Metric, MetricNameError, parse_metric

_KEY = re.compile(r"^\s*(?P<metric>[^\[\]=\s]+)\s*(?:\[(?P<tag>[^\]]+)\])?\s*$")


class ThresholdError(ValueError):
    """A threshold that cannot be used; the message says what to write instead."""


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


@dataclass(frozen=True)
class GateOutcome:
    """One threshold checked against one evaluation."""

    threshold: Threshold
    value: float
    ci: tuple[float, float] | None
    passed: bool


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


def check(
    thresholds: Iterable[Threshold],
    values: Mapping[str, float],
    tag_values: Mapping[str, Mapping[str, float]],
    intervals: Mapping[str, tuple[float, float]],
) -> list[GateOutcome]:
    """Compare each threshold with the aggregate (or per-tag) value; NaN never passes."""
    outcomes = []
    for threshold in thresholds:
        name = threshold.metric.name
        if threshold.tag is None:
            value, ci = values[name], intervals.get(name)
        else:
            if threshold.tag not in tag_values:
                known = ", ".join(sorted(tag_values)) or "none"
                raise ThresholdError(
                    f"threshold {threshold.key} ({threshold.source}): no query has the tag "
                    f"{threshold.tag!r} (tags in this golden set: {known})"
                )
            value, ci = tag_values[threshold.tag][name], None
        passed = not math.isnan(value) and value >= threshold.minimum
        outcomes.append(GateOutcome(threshold, value, ci, passed))
    return outcomes
