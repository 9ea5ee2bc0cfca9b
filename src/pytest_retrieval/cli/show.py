"""``pytest-retrieval show``: a baseline file, or a report's evaluations and chosen queries
(rendered by :mod:`..render.show`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.io import BASELINE_SUFFIX
from .._internal.json import JsonProblem, loads
from ..errors import InputError, UsageError
from ..validators import metric_arg, positive_int
from .common import (
    check_inputs,
    cut_short,
    decode_error,
    is_syntax_error,
    read_report,
    unknown,
    why_empty,
)

if TYPE_CHECKING:
    from ..results import EvaluationResult


def add_arguments(sub: argparse.ArgumentParser) -> None:
    sub.description = (
        "A baseline file (<golden>.baseline.json): its entries and metrics. A JSON "
        "report (--retrieval-report): each evaluation's summary; with --query, --worst or "
        "--tag, each chosen query's ranked hits with their relevance marks and golden "
        "grades, the judge's verdicts and, when the run was compared with a baseline, "
        "where each hit ranked there and the relevant documents that left the top k."
    )
    sub.add_argument(
        "file",
        type=Path,
        metavar="FILE",
        help="a JSON report or a <golden>.baseline.json file",
    )
    pick = sub.add_mutually_exclusive_group()
    pick.add_argument("--query", action="append", metavar="ID", help="a query id (repeatable)")
    pick.add_argument(
        "--worst",
        type=positive_int,
        metavar="N",
        help="the N queries that dropped most on --metric against the baseline (without "
        "a comparison: the N lowest)",
    )
    sub.add_argument(
        "--tag", metavar="TAG", help="the queries with this tag, worst first (with --worst: N)"
    )
    sub.add_argument(
        "--retriever", metavar="ID", help="only this retriever's evaluation (of several)"
    )
    sub.add_argument(
        "--metric",
        type=metric_arg,
        metavar="METRIC",
        help="what worst means (default: the first regressed metric, else the first gated one)",
    )
    sub.add_argument(
        "--depth", type=positive_int, metavar="N", help="hits listed (default: the report's k)"
    )


def run(args: argparse.Namespace) -> int:
    """A baseline or a report, told apart by their content; anything else is refused with
    what it looks like and what ``show`` reads."""
    from ..baseline import FORMAT

    check_inputs(args, ["file"])
    path: Path = args.file
    try:
        text = path.read_text(encoding="utf-8")
        data: Any = loads(text)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror})") from None
    except (UnicodeDecodeError, JsonProblem) as exc:
        if path.name.endswith(BASELINE_SUFFIX):
            return _show_baseline(args)  # the baseline reader says what is wrong with it
        if isinstance(exc, JsonProblem) and not is_syntax_error(exc):  # too deep, a key twice
            raise UsageError(f"{path}, {exc}; {SHOW_READS}") from None
        syntax = decode_error(text) if isinstance(exc, JsonProblem) else None
        if syntax is not None and cut_short(syntax):
            raise UsageError(
                f"{path} ends before its JSON does (line {syntax.lineno}, column "
                f"{syntax.colno}): cut short by an interrupted run, write or upload; {SHOW_READS}"
            ) from None
        where = exc.where if isinstance(exc, JsonProblem) else "not UTF-8 text"
        raise UsageError(f"{path} is not JSON ({where}); {SHOW_READS}") from None
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return _show_baseline(args)
    if isinstance(data, dict) and isinstance(data.get("evaluations"), list):
        if not data["evaluations"]:  # the session failed before any evaluation ran
            if args.query or args.worst or args.tag or args.retriever:
                raise UsageError(f"{path} holds no evaluation: {why_empty(data)}")
            print(f"{path}: no evaluation ran: {why_empty(data)}")
            return 0
        return _show_report(args, _with_ab(read_report(path, data), data))
    raise UsageError(f"{path} is {_looks_like(data)}, not a report or a baseline; {SHOW_READS}")


#: what a partial report's evaluation is for, as show says
PART_GATED_BY = "a partial report: gated only with every shard's, by pytest-retrieval combine"


SHOW_READS = (
    "show reads a JSON report (pytest --retrieval-report FILE) or a <golden>.baseline.json file"
)


def _looks_like(data: Any) -> str:
    """What a JSON document that ``show`` cannot read seems to be, for its message."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}"
    if "queries" in data:
        return "a golden set (check it with: pytest-retrieval validate FILE)"
    if "batch_ids" in data or "batch_id" in data:
        return "a judge-batch state file (pytest-retrieval judge-batch collect FILE)"
    return "a JSON object with neither 'evaluations' nor 'format'"


def _show_baseline(args: argparse.Namespace) -> int:
    from ..baseline import BaselineError, read
    from ..render.show import baseline_lines

    given = [
        option
        for option, value in (("--query", args.query), ("--worst", args.worst), ("--tag", args.tag))
        if value
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)}: {args.file} is a baseline, which keeps metrics, not ranked "
            "hits; give a JSON report (pytest --retrieval-report FILE)"
        )
    try:
        entries = read(args.file)
    except BaselineError as exc:
        raise InputError(str(exc)) from None
    print("\n".join(baseline_lines(args.file, entries)))
    return 0


def _show_report(args: argparse.Namespace, results: list[EvaluationResult]) -> int:
    """Each chosen evaluation: its summary, or (``--query``/``--worst``/``--tag``) the
    chosen queries' hits."""
    from ..baseline import entry_key
    from ..render.show import evaluation_lines
    from ..render.terminal import summary_lines

    if args.query and args.tag:
        raise UsageError("--query picks queries by id; leave out --tag (or use --tag alone)")
    chosen = results
    if args.retriever is not None:
        chosen = [
            r
            for r in results
            if args.retriever in (r.retriever_id, entry_key(r.golden_name, r.retriever_id))
        ]
        if not chosen:
            known = sorted({r.retriever_id for r in results})
            raise UsageError(unknown("retriever", args.retriever, known, args.file))
    if not (args.query or args.worst or args.tag):
        for result in chosen:
            lines = summary_lines(result)
            if result.part is not None:  # under its header: not a gate's summary
                lines.insert(1, f"  {result.part.described} ({PART_GATED_BY})")
            print("\n".join(lines))
        print(
            f"ranked hits: pytest-retrieval show {args.file} --query ID (or --worst N, --tag TAG)"
        )
        return 0
    _check_picks(args, chosen)
    for result in chosen:
        lines = evaluation_lines(
            result,
            query_ids=args.query,
            worst=args.worst,
            tag=args.tag,
            metric=args.metric,
            depth=args.depth,
        )
        print("\n".join(lines))
    return 0


def _with_ab(results: list[EvaluationResult], data: dict[str, Any]) -> list[EvaluationResult]:
    """An A/B run's retrievers with their comparison against the reference (the report's
    ``ab``), where no baseline comparison is theirs: ``show`` then ranks by the drop
    against the reference and puts its ranks beside the hits."""
    from dataclasses import replace

    from ..results import Comparison

    found: dict[tuple[Any, Any], dict[str, Any]] = {
        (entry.get("golden"), entry.get("retriever")): entry["comparison"]
        for entry in data.get("ab") or []
        if isinstance(entry, dict) and isinstance(entry.get("comparison"), dict)
    }
    return [
        replace(result, comparison=Comparison.from_dict(found[key]))
        if result.comparison is None and key in found
        else result
        for result in results
        for key in [(result.golden_name, result.retriever_id)]
    ]


def _check_picks(args: argparse.Namespace, chosen: Sequence[EvaluationResult]) -> None:
    """Every ``--query`` id and the ``--tag`` exist in one of the chosen evaluations, and
    ``--metric`` in all of them; else a usage error with the close matches."""
    ids = list(dict.fromkeys(q.id for r in chosen for q in r.queries))
    for wanted in args.query or ():
        if wanted not in ids:
            raise UsageError(unknown("query id", wanted, ids, args.file))
    tags = sorted({tag for r in chosen for q in r.queries for tag in q.tags})
    if args.tag is not None and args.tag not in tags:
        raise UsageError(unknown("tag", args.tag, tags, args.file))
    for result in chosen:
        if args.metric is not None and args.metric not in result.metrics:
            raise UsageError(unknown("metric", args.metric, list(result.metrics), args.file))
