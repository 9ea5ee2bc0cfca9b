"""argparse ``type=`` functions for options and the command line: a bad value is an
argparse-style usage error (exit 4 under pytest, 2 from ``pytest-retrieval``) that names
the option and says what to write, never a failure deep inside a run."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .errors import ConfigError

if TYPE_CHECKING:
    from .limits import Allowance, Threshold

N = TypeVar("N", int, float)


@contextmanager
def _argument() -> Iterator[None]:
    """A setting the parser rejects (a :class:`~.errors.ConfigError`) as argparse's error."""
    try:
        yield
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def threshold_arg(text: str, source: str = "--retrieval-threshold") -> Threshold:
    """``METRIC=VALUE``: the threshold (``source``: the flag, as its messages name it)."""
    from .limits import parse_assignment

    with _argument():
        return parse_assignment(text, source)


def metric_arg(text: str) -> str:
    from .metrics import parse_metric

    with _argument():
        return parse_metric(text).name


def max_drop_arg(text: str, source: str = "--retrieval-max-drop") -> Allowance:
    """``METRIC=DROP``: the allowance (``source``: the flag, as its messages name it)."""
    from .limits import parse_allowance_assignment

    with _argument():
        return parse_allowance_assignment(text, source)


def _number(text: str, kind: Callable[[str], N], accept: Callable[[N], bool], want: str) -> N:
    """``text`` read as ``kind`` and accepted, or an argparse error saying what it should be."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {want}") from None
    if not accept(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {want}")
    return value


def alpha_arg(text: str) -> float:
    return _number(
        text,
        float,
        lambda v: 0 < v <= 1,
        "a significance level in (0, 1] (1 turns the test off)",
    )


def positive_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 1, "a whole number >= 1")


def cutoff(text: str) -> int:
    from .metrics import MAX_K

    value = positive_int(text)
    if value > MAX_K:
        raise argparse.ArgumentTypeError(f"{text!r} is above the largest cutoff k, {MAX_K}")
    return value


def positive_float(text: str) -> float:
    return _number(text, float, lambda v: v > 0, "a number of seconds > 0")


def seconds_or_zero(text: str) -> float:
    return _number(text, float, lambda v: 0 <= v < float("inf"), "a number of seconds >= 0")


def fraction(text: str) -> float:
    return _number(text, float, lambda v: 0 <= v <= 1, "a number between 0 and 1")


def existing_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


@dataclass(frozen=True, order=True)
class Shard:
    """Shard ``index`` (0-based) of ``count``; written 1-based, ``2/3``, as on the command
    line (``--retrieval-shard``; what a shard run does: :mod:`.shards`)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index + 1}/{self.count}"


def shard_arg(text: str) -> Shard:
    """``--retrieval-shard I/N``: shard I (1 to N) of N, or argparse's error saying what to
    write."""
    number, slash, count = text.partition("/")
    try:
        shard = Shard(int(number) - 1, int(count))
    except ValueError:
        shard = Shard(-1, 0)
    if not slash or shard.count < 1 or not 0 <= shard.index < shard.count:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shard I/N: N jobs share the golden set and this one runs part "
            "I, from 1 to N (e.g. --retrieval-shard 2/3)"
        )
    return shard


def max_failures_arg(text: str) -> int:
    """``--retrieval-max-failures``: a whole number >= 0 (0: never stop)."""
    return _whole_or_zero(
        text, "failed retriever calls in a row after which the calls stop; 0: never stop"
    )


def split_min_arg(text: str) -> int:
    """``--retrieval-split-min``: a whole number >= 0 (0: never split)."""
    return _whole_or_zero(
        text,
        "the fewest queries a golden set has to be split across xdist workers; 0: never split",
    )


def _whole_or_zero(text: str, meaning: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0 ({meaning})")
    return value


def retriever_id_arg(text: str) -> str:
    """``eval --retriever``: the id of the run's evaluation in baselines, reports and test
    names; not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "an empty retriever id names nothing in the baseline or the outputs; give one, or "
            "leave the option out (the run file's name)"
        )
    return text


def update_mode(text: str, source: str = "--retrieval-update-baseline") -> str:
    """``--retrieval-update-baseline``'s mode. A test path after the option is read as its
    mode (argparse's ``nargs="?"``): say so, and where to put it."""
    if text in ("safe", "force"):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not safe or force; a word after {source} is its mode: put test paths "
        f"before the option, or write {source}=safe"
    )
