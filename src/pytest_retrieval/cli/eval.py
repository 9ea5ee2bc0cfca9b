"""``pytest-retrieval eval``: a precomputed run gated on a golden set, as a pytest run with
``--retrieval-run`` would gate it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._internal.io import relative
from ..errors import ConfigError, UsageError
from ..validators import retriever_id_arg
from .common import check_inputs, command_line
from .gating import (
    OFFLINE_STATUS,
    add_gate_options,
    check_overwrites,
    gate_offline,
    offline_outputs,
    refuse,
)

if TYPE_CHECKING:
    pass


def add_arguments(sub: argparse.ArgumentParser) -> None:
    sub.description = (
        "Evaluate RUN (a TREC run file, {qid: {doc: score}} or {qid: [doc, ...]} "
        "JSON, or JSONL) on GOLDEN and gate it as `pytest --retrieval-golden GOLDEN "
        "--retrieval-run RUN` would: thresholds (golden file, then --threshold), the baseline "
        "comparison and its paired tests, outputs. A golden query the run lacks scores 0 "
        "(said in the summary)."
    )
    sub.epilog = OFFLINE_STATUS
    sub.add_argument("golden", type=Path, metavar="GOLDEN", help="golden file or BEIR folder")
    sub.add_argument("run", type=Path, metavar="RUN", help="the ranked lists to evaluate")
    sub.add_argument(
        "--retriever",
        type=retriever_id_arg,
        metavar="ID",
        help="the retriever's id in the baseline and outputs (default: the run file's name "
        "without extension, as under --retrieval-run: runs/bm25.trec is bm25)",
    )
    add_gate_options(sub)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..baseline import default_path, golden_key
    from ..baseline import default_path as baseline_of
    from ..evaluation import evaluate
    from ..finish import GateSettings, Whole
    from ..formats import corpus_input, golden_inputs
    from ..golden import load_golden
    from ..inifile import unread_gate_settings
    from ..labels import JUDGE_ADVICE
    from ..limits import from_mapping, merge, merge_allowances, parse_allowance
    from ..runfile import missing_queries, read_run, runs_for, ties_warning

    outputs = offline_outputs(
        args,
        [
            *golden_inputs(args.golden),
            ("the run file", args.run),
            ("the baseline", None if args.baseline else baseline_of(args.golden)),
        ],
    )
    start = Path.cwd()
    source = args.golden if args.golden.is_absolute() else start / args.golden
    ini, unread = unread_gate_settings(start)
    typed = {word.split("=", 1)[0] for word in args.argv}
    unread = {what: option for what, option in unread.items() if option not in typed}
    if unread:  # a pytest run applies them: the same run could pass here and fail there
        where = f"{relative(ini)} sets" if ini is not None else "pytest is given"
        print(
            f"pytest-retrieval eval: warning: {where} {', '.join(unread)}, which a pytest run "
            "applies and eval does not read: give them on the command line "
            f"({', '.join(dict.fromkeys(unread.values()))}) for the same gate",
            file=sys.stderr,
        )
    try:
        check_inputs(args, ["run"], ["golden"])  # a run never produced: the outputs say so
        golden = load_golden(source, require_texts=False)  # qrels and a run, as trec_eval
    except (ConfigError, UsageError) as exc:
        return refuse(args, outputs, str(exc))
    check_overwrites(args, corpus_input(relative(args.golden), golden.corpus), [])  # in it
    try:
        thresholds = merge(
            from_mapping(golden.thresholds, f"{golden.source} thresholds"),
            args.threshold,
        )
        allowances = merge_allowances(
            [
                parse_allowance(m, v, f"{golden.source} max_drop")
                for m, v in golden.max_drop.items()
            ],
            args.max_drop,
        )
        run = read_run(args.run)
        if run.tied:
            print(f"pytest-retrieval eval: warning: {ties_warning(run)}", file=sys.stderr)
        retriever_id = args.retriever or run.name
        gate = tuple(args.gate) if args.gate else golden.gate or None
        result = evaluate(
            None,
            golden,
            runs=runs_for(golden, run),
            metrics=[*args.metric, *(gate or ())],  # computed even when nothing else names them
            thresholds=thresholds,
            k=args.k,
            retriever_id=retriever_id,
        )
    except (ConfigError, UsageError) as exc:
        advice = "eval has none; gate it in a pytest run with --retrieval-run RUN --retrieval-judge"
        return refuse(args, outputs, str(exc).replace(JUDGE_ADVICE, advice))
    # as pytest names it
    result = replace(
        result,
        run_file=str(start / args.run),
        run_missing=missing_queries(golden, run),
        run_format=run.format,
        rerun=command_line(args),
    )
    path = args.baseline or default_path(golden.source)
    key = golden_key(golden.source, path)
    settings = GateSettings(
        thresholds=tuple(thresholds),
        allowances=allowances,
        gate=gate,
        alpha=args.alpha,
        strict_baseline=args.strict_baseline,
        baseline=str(path),
        baseline_key=key,
    )
    nodeid = f"{Path(relative(source)).as_posix()}::retrieval[{retriever_id}]"
    return gate_offline(args, [Whole(result, settings, path, key, nodeid)], outputs, "")
