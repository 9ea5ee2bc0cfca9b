"""Format-neutral text: how every output spells a number, a change, an interval, a p-value,
an evaluation's title and the command that refreshes its baseline, so that the terminal,
Markdown and HTML never disagree on a digit. A leaf: nothing here imports numpy."""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._internal.io import relative

if TYPE_CHECKING:
    from ..results import EvaluationResult


def num(value: float) -> str:
    """A metric value: four places, "n/a" for NaN (a metric nothing could score)."""
    return "n/a" if math.isnan(value) else f"{value:.4f}"


def ms(value: float) -> str:
    """A latency: one place, "n/a" for NaN (no call answered, or a run file: no timings)."""
    return "n/a" if math.isnan(value) else f"{value:.1f} ms"


def graded(result: EvaluationResult, metric: str) -> str:
    """A judge metric's coverage, ``graded 952/1000`` (its graded slots of all its slots),
    shown beside its value; empty for the other metrics."""
    counts = result.label_coverage.get(metric)
    return "" if counts is None else f"graded {counts[0]}/{counts[1]}"


def metric_value(result: EvaluationResult, metric: str, number: float) -> str:
    """A metric's value as the tables show it: the number, then a judge metric's coverage."""
    shown = graded(result, metric)
    return f"{num(number)} · {shown}" if shown else num(number)


def delta(value: float, places: int) -> str:
    """Signed, and never "-0.0000" for a difference that rounds to nothing."""
    if math.isnan(value):
        return ""
    rounded = round(value, places)
    return f"{rounded + 0.0:+.{places}f}"


def ci(bounds: tuple[float, float] | None) -> str:
    """A confidence interval as ``[low, high]``; empty when there is none."""
    return "" if bounds is None else f"[{num(bounds[0])}, {num(bounds[1])}]"


def p_value(value: float | None) -> str:
    """A p-value: four places, and small ones in scientific notation (never "0.0000")."""
    if value is None:
        return ""
    return f"{value:.4f}" if value >= 0.001 else f"{value:.1e}"


def text_table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Columns padded to their widest cell, two spaces apart, trailing blanks dropped."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with "..."."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def title(result: EvaluationResult) -> str:
    """``<golden> [<retriever>] · <n> queries`` (or the sample's size)."""
    size = f"{len(result.queries)} queries"
    if result.sampled_from is not None:
        size = f"sample of {len(result.queries)} of {result.sampled_from} queries"
    return f"{result.golden_name} [{result.retriever_id}] · {size}"


def command(result: EvaluationResult, extra: str) -> str:
    """The command that reruns this evaluation with ``extra`` options (the fix a note tells
    the reader to run): its golden set, run file and baseline file, paths relative to the
    working directory. A result made by ``eval``, ``combine`` or a ``retrieval_eval`` test
    is made again by the same command (:attr:`~.results.EvaluationResult.rerun`); so is a run
    evaluated under another id (``eval --retriever``): pytest names a run by its file."""
    from pathlib import Path

    from ..baseline import default_path
    from ..runfile import run_name

    test = result.rerun if result.rerun.startswith("pytest ") else ""  # retrieval_eval's
    if result.rerun and not test and extra == "--retrieval-update-baseline":
        typed, dashes, rest = result.rerun.partition(" -- ")  # options go before a "--"
        return f"{typed} --update-baseline{dashes}{rest}"
    golden = shlex.quote(relative(result.golden_source))
    run = shlex.quote(relative(result.run_file)) if result.run_file else None
    baseline = result.baseline_path
    if baseline is not None and Path(baseline) == default_path(result.golden_source):
        baseline = None  # the default: no option needed
    renamed = result.run_file and result.retriever_id != run_name(Path(result.run_file))
    shown = shlex.quote(relative(baseline)) if baseline else None
    if renamed and run and not test and extra == "--retrieval-update-baseline":
        words = ["pytest-retrieval eval", golden, run]
        words += ["--retriever", shlex.quote(result.retriever_id)]
        words += ["--baseline", shown] if shown else []
        return " ".join([*words, "--update-baseline"])
    if test:
        words = [test]
    else:
        words = ["pytest", _option("--retrieval-golden", golden)]
        words += [_option("--retrieval-run", run)] if run else []
    words += [_option("--retrieval-baseline", shown)] if shown else []
    return " ".join([*words, extra])


def judge_options(result: EvaluationResult) -> str:
    """``--retrieval-judge`` and the options that make the judge that labelled ``result``
    (those that change its labels and are not at their defaults): a baseline recorded with
    them is compared with this run."""
    from ..settings import JudgeConfig

    judge, defaults = result.judge or {}, JudgeConfig()  # the judge's defaults: one place
    words = ["--retrieval-judge"]
    for option, key, default in (
        ("--retrieval-judge-model", "model", defaults.model),
        ("--retrieval-judge-scale", "scale", defaults.scale),
        ("--retrieval-judge-min-score", "min_score", defaults.min_score),
        ("--retrieval-judge-samples", "samples", defaults.samples),
        ("--retrieval-judge-text-budget", "text_budget", defaults.text_budget_chars),
    ):
        value = judge.get(key, default)
        if value != default and value is not None:
            words += [option, shlex.quote(repr(value) if isinstance(value, float) else str(value))]
    if judge.get("scale") == "0-3" and result.relevance_level != defaults.relevance_level:
        words += ["--retrieval-judge-relevance-level", str(result.relevance_level)]
    if judge.get("prompt_file"):
        words.append(
            _option("--retrieval-judge-prompt", shlex.quote(relative(judge["prompt_file"])))
        )
    return " ".join(words)


def _option(name: str, path: str) -> str:
    """``name=path``: after a space pytest would take the path for a test path when it looks
    for its ini file (and read another one, or none: :mod:`..ini_check`)."""
    return f"{name}={path}"
