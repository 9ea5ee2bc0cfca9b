"""argparse ``type=`` functions for options and the command line: a bad value is an
argparse-style usage error (exit 4 under pytest, 2 from ``pytest-retrieval``) that names
the option and says what to write, never a failure deep inside a run."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import ConfigError


@contextmanager
def _argument() -> Iterator[None]:
    """A setting the parser rejects (a :class:`~.errors.ConfigError`) as argparse's error."""
    try:
        yield
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def threshold_arg(text: str) -> str:
    from .gate import parse_assignment

    with _argument():
        parse_assignment(text, "--retrieval-threshold")
    return text


def metric_arg(text: str) -> str:
    from .metrics import parse_metric

    with _argument():
        return parse_metric(text).name


def max_drop_arg(text: str) -> str:
    from .gate import parse_allowance_assignment

    with _argument():
        parse_allowance_assignment(text, "--retrieval-max-drop")
    return text


def alpha_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a significance level in (0, 1] (1 turns the test off)"
        )
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def cutoff(text: str) -> int:
    from .metrics import MAX_K

    value = positive_int(text)
    if value > MAX_K:
        raise argparse.ArgumentTypeError(f"{text!r} is above the largest cutoff k, {MAX_K}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number between 0 and 1")
    return value


def existing_file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text
