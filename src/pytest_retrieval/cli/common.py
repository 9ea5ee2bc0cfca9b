"""Helpers every command shares: its inputs checked, reports and JSON files read, messages
that name what to type instead."""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.json import JsonProblem, loads
from ..errors import InputError, UsageError

if TYPE_CHECKING:
    from ..results import EvaluationResult


def check_inputs(args: argparse.Namespace, files: Sequence[str], paths: Sequence[str] = ()) -> None:
    """The input arguments ``files`` (files) and ``paths`` (a file or a folder: a BEIR
    folder, a corpus) exist, else argparse's message for the first that does not. Checked
    when the command runs, not by ``type=``, so parsing a command line never reads disks."""
    for dest in (*files, *paths):
        values = getattr(args, dest)
        for path in values if isinstance(values, list) else [values]:
            if path is None:
                continue
            label = f"--{dest.replace('_', '-')}" if dest in INPUT_OPTIONS else dest.upper()
            if dest in files and path.is_dir():
                raise UsageError(f"argument {label}: {str(path)!r} is a folder, not a file")
            if not path.exists():
                what = "file" if dest in files else "file or folder"
                raise UsageError(f"argument {label}: no such {what}: {str(path)!r}")


#: input arguments given as options (the rest are positional)
INPUT_OPTIONS = frozenset({"queries", "corpus", "prompt"})


def unknown(kind: str, wanted: str, known: Sequence[str], where: Path | str) -> str:
    """``no query id 'q12' in r.json (225 query ids; close matches: q1, q120)``: what to
    type instead, without printing thousands of ids."""
    listed = f": {', '.join(known)}" if len(known) <= 8 else ""
    close = difflib.get_close_matches(wanted, known, n=5, cutoff=0.6)
    hint = f"; close matches: {', '.join(close)}" if close and len(known) > 8 else ""
    count = f"{len(known)} {kind}{'' if len(known) == 1 else 's'}"
    return f"no {kind} {wanted!r} in {where} ({count}{listed}{hint})"


def output_file(output: Path, force: bool, example: str = "golden.json") -> Path:
    """``-o``, checked before any work: a file path that may be written (a folder, a path
    under a file, or an existing file without ``--force`` is a usage error)."""
    if output.is_dir():
        raise UsageError(
            f"-o {output} is a folder; give the file to write, e.g. -o {output / example}"
        )
    for parent in output.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"-o {output}: {parent} is a file, not a folder")
            break
    if output.exists() and not force:
        raise UsageError(f"{output} exists; pass --force to overwrite it")
    return output


def readable(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """The reports among ``paths`` that read, each with its document (the others skipped)."""
    found = []
    for path in paths:
        try:
            found.append((path, report_data(path)))
        except (InputError, OSError):
            continue
    return found


def report_data(path: Path) -> dict[str, Any]:
    """A JSON report's document, or one clear InputError (not JSON, not a report)."""
    data = json_object(path)
    if not isinstance(data.get("evaluations"), list):
        raise InputError(f"{path}: not a pytest-retrieval report (no 'evaluations' list)")
    return data


def why_empty(data: dict[str, Any]) -> str:
    """A report without evaluations: its session's reasons (what stopped it), quoted."""
    verdict = data.get("verdict")
    found = verdict.get("reasons") if isinstance(verdict, dict) else None
    reasons = [
        f"{r.get('kind')}: {r.get('message')}"
        for r in (found if isinstance(found, list) else [])
        if isinstance(r, dict)
    ]
    text = "; ".join(reasons) or "no reason recorded"
    return "".join(c if c.isprintable() else " " for c in text)  # a file's text, not escapes


def read_report(path: Path, data: dict[str, Any] | None = None) -> list[EvaluationResult]:
    """The evaluations of a report (``data``: its document, when already read)."""
    from ..results import result_from_dict

    evaluations = (data if data is not None else report_data(path))["evaluations"]
    try:
        results = [result_from_dict(entry) for entry in evaluations]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: a malformed evaluation entry ({exc!r})") from None
    for index, result in enumerate(results):
        _check_metric_names(path, index, result)
    return results


def _check_metric_names(path: Path, index: int, result: EvaluationResult) -> None:
    """The metric names of a report's evaluation are metric names, each with its mean per
    tag: a report edited or damaged there is one message naming the file and field, not an
    error (or a KeyError) about a metric the command line never named."""
    from ..metrics import MetricNameError, parse_metric

    where = f"{path}: /evaluations/{index}"
    fix = "give the report as pytest --retrieval-report wrote it"
    for name in result.metrics:
        try:
            parse_metric(name)
        except MetricNameError as exc:
            raise InputError(f"{where}/metrics: {exc}; {fix}") from None
    for tag, means in result.per_tag.items():  # a report writes every metric's mean per tag
        missing = [name for name in result.metrics if name not in means]
        if missing:
            raise InputError(
                f"{where}/per_tag/{tag}/metrics: no mean of {missing[0]!r}, a metric of the "
                f"evaluation; {fix}"
            )


def json_object(path: Path) -> dict[str, Any]:
    """A JSON file holding an object (a report, a batch state), or one clear InputError."""
    try:
        text = path.read_text(encoding="utf-8")
        data = loads(text)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not JSON (not UTF-8 text)") from None
    except JsonProblem as problem:
        if not is_syntax_error(problem):  # too deep, a key twice: not a file we wrote
            fix = "give the file as pytest-retrieval wrote it"
            raise InputError(f"{path}, {problem}; {fix}") from None
        syntax = decode_error(text)
        where = problem.where
        if syntax is not None and cut_short(syntax):
            raise InputError(
                f"{path}: ends before its JSON does ({where}); give the file as "
                "pytest-retrieval wrote it (one cut short by an interrupted run, write or "
                "upload: run that job again)"
            ) from None
        raise InputError(
            f"{path}: not JSON ({where}); give a file pytest-retrieval wrote (a JSON report)"
        ) from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    return data


def is_syntax_error(problem: JsonProblem) -> bool:
    """Whether ``problem`` is a syntax error (not a nesting too deep or a key twice)."""
    return problem.problem.startswith("invalid JSON: ")


def decode_error(text: str) -> json.JSONDecodeError | None:
    """The standard decoder's error on ``text``, whose strict reading found a syntax error
    (so its nesting is bounded: no recursion too deep here): its offset says whether the
    file was cut short."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc
    except ValueError:
        return None
    return None


def cut_short(exc: json.JSONDecodeError) -> bool:
    """Our files are one JSON object: one that starts as one but does not end with "}", or
    stops at its end or inside a string, was cut short."""
    text = exc.doc.strip()
    return (
        exc.pos > 0
        and text.startswith("{")
        and (not text.endswith("}") or exc.pos >= len(text) or "Unterminated" in exc.msg)
    )


def command_line(args: argparse.Namespace) -> str:
    """The command line as typed, quoted for a shell."""
    import shlex

    return shlex.join(["pytest-retrieval", *args.argv])
