"""``pytest-retrieval diff``: two JSON reports compared with the gate's paired test."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._internal.io import counted
from ..errors import InputError
from .common import check_inputs, read_report, report_data, why_empty

if TYPE_CHECKING:
    from ..results import Comparison, EvaluationResult


def add_arguments(sub: argparse.ArgumentParser) -> None:
    sub.description = (
        "Compare REPORT_B with REPORT_A (both written by --retrieval-report): "
        "per evaluation matched by golden set and retriever, the same allowances, paired "
        "one-sided test and Holm correction as the baseline gate. Exit 1 on a regression, "
        "or when nothing could be compared (no evaluation, query or gated metric in common)."
    )
    sub.add_argument("report_a", type=Path, metavar="REPORT_A", help="the reference run")
    sub.add_argument("report_b", type=Path, metavar="REPORT_B", help="the run to judge")


def _counterpart(
    result: EvaluationResult, earlier: Sequence[EvaluationResult], path: Path
) -> EvaluationResult | None:
    """The evaluation of ``earlier`` that ``result`` is compared with: same golden source and
    retriever, else (reports from another checkout) the one with the same golden name and
    retriever; two candidates are an error, never a guess."""
    for field in ("golden_source", "golden_name"):
        wanted = (getattr(result, field), result.retriever_id)
        found = [r for r in earlier if (getattr(r, field), r.retriever_id) == wanted]
        if len(found) > 1:
            raise InputError(
                f"{path}: {len(found)} evaluations of {result.golden_source} "
                f"[{result.retriever_id}]; compare reports with one evaluation each"
            )
        if found:
            return found[0]
    return None


def run(args: argparse.Namespace) -> int:
    """REPORT_B gated as if REPORT_A were its baseline: the same comparison and the same
    verdict (:func:`~pytest_retrieval.gate.decide`) as the plugin, rendered the same way."""
    from dataclasses import replace

    from ..baseline import entry_key
    from ..gate import decide
    from ..render.terminal import regression_lines

    check_inputs(args, ["report_a", "report_b"])
    documents = [report_data(args.report_a), report_data(args.report_b)]
    for path, document in zip((args.report_a, args.report_b), documents, strict=True):
        if not document["evaluations"]:
            raise InputError(
                f"nothing to compare: {path} holds no evaluation, its session stopped "
                f"before any ran ({why_empty(document)}); fix that run and write it again"
            )
    earlier = read_report(args.report_a, documents[0])
    after = read_report(args.report_b, documents[1])
    for path, results in ((args.report_a, earlier), (args.report_b, after)):
        part = next((r for r in results if r.part is not None), None)
        if part is not None and part.part is not None:
            raise InputError(
                f"{path}: {part.golden_name} [{part.retriever_id}] is {part.part.described}, "
                "not gated alone: combine every shard's report (pytest-retrieval combine ... "
                "--report whole.json) and compare that"
            )
    failed = compared = 0
    why_not: list[str] = []
    for result in after:
        key = entry_key(result.golden_name, result.retriever_id)
        outcome = _compared(result, earlier, args)
        if isinstance(outcome, str):
            why_not.append(outcome)
            print(f"{key}: not compared: {outcome}")
            continue
        result, comparison = outcome
        result = decide(replace(result, comparison=comparison, baseline_note=""))
        compared += 1
        print(f"{key}: {len(result.queries)} queries")
        for line in regression_lines(result, comparison, advice=False):
            print(line)
        print(f"  verdict: {result.verdict.word}")
        for reason in result.verdict.reasons:
            print(f"    {reason.kind}: {reason.message}")
        failed += not result.verdict.passed
    if compared == 0:
        because = why_not[0] if len(why_not) == 1 else "see above"
        raise InputError(
            f"nothing compared between {args.report_a} and {args.report_b}: {because}. diff "
            "compares the evaluations both reports hold (same golden set and retriever) on "
            "their shared queries and gated metrics: write both reports from the same golden "
            "set and retriever, with the same metrics (--retrieval-metric)"
        )
    skipped = f"; {len(why_not)} not compared" if why_not else ""
    print(f"{failed} of {counted(compared, 'evaluation')} failed{skipped}")
    return 1 if failed else 0


def _compared(
    result: EvaluationResult, earlier: Sequence[EvaluationResult], args: argparse.Namespace
) -> tuple[EvaluationResult, Comparison] | str:
    """``result`` (gated as ``--gate`` says) and its comparison with its counterpart in
    ``earlier`` (REPORT_A's evaluations), or why nothing of it could be compared: no such
    evaluation, a ``--gate`` metric one report lacks, no metric or query in common, no gated
    metric compared."""
    from dataclasses import replace

    from ..baseline import entry_key
    from ..compare import compare_to_baseline, entry_from_result
    from ..limits import merge_allowances

    report_a, report_b = args.report_a, args.report_b
    reference = _counterpart(result, earlier, report_a)
    if reference is None:
        known = ", ".join(entry_key(r.golden_name, r.retriever_id) for r in earlier)
        key = entry_key(result.golden_name, result.retriever_id)
        return f"{key} is not in {report_a} (it has {known or 'no evaluations'})"
    for report, metrics in ((report_b, result.metrics), (report_a, reference.metrics)):
        absent = [m for m in args.gate or () if m not in metrics]
        if absent:
            return f"--gate {', '.join(absent)}: not in {report} (it has {_names(metrics)})"
    if not set(result.metrics) & set(reference.metrics):
        return (
            f"no metric in common: {report_a} has {_names(reference.metrics)}; "
            f"{report_b} has {_names(result.metrics)}"
        )
    if args.gate is not None:
        result = replace(result, gated=tuple(args.gate))
    comparison = compare_to_baseline(
        result,
        entry_from_result(reference, {}, ""),
        merge_allowances(args.max_drop),
        alpha=args.alpha,
        reference=f"report {report_a}",
    )
    why = _nothing_compared(result, comparison, report_a)
    return (result, comparison) if why is None else why


def _nothing_compared(
    result: EvaluationResult, comparison: Comparison, report_a: Path
) -> str | None:
    """Why the comparison compared no gated metric (None: it compared some): no query in
    common, other metric definitions, a judge that changed, gated metrics only one report has."""
    from ..limits import LATENCY

    if comparison.n_common == 0:
        return (
            f"no query in common: every query is new or re-judged since {report_a} "
            f"({len(comparison.added)} added, {len(comparison.removed)} removed, "
            f"{len(comparison.rejudged)} re-judged)"
        )
    if comparison.stale:
        return str(comparison.stale).replace("the baseline", str(report_a))
    compared = [c for c in comparison.changes if c.verdict.compared]
    if any(c.gated for c in compared if c.metric != LATENCY) or (not result.gated and compared):
        return None
    return f"none of the gated metrics ({', '.join(result.gated)}) is in {report_a}"


def _names(metrics: Iterable[str]) -> str:
    """Metric names in their display order, the first six: what a report has."""
    from ..metrics import parse_metric

    ordered = sorted(metrics, key=lambda m: parse_metric(m).sort_key)
    more = f" (+{len(ordered) - 6} more)" if len(ordered) > 6 else ""
    return ", ".join(ordered[:6]) + more if ordered else "no metrics"
