"""``pytest-retrieval combine``: the partial reports of CI shards gated as one run."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.io import counted, relative
from ..errors import InputError, UsageError
from .common import check_inputs, command_line, readable, report_data
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
        "Join the partial reports of every shard of `pytest --retrieval-shard I/N "
        "--retrieval-report PATH` and gate the whole exactly as one run would: each "
        "evaluation's parts merged in golden order (every number computed again), compared "
        "with its baseline and decided with the thresholds, allowances, alpha and gated "
        "metrics the shards ran with. Refused: a shard missing or given twice, or shards of "
        "another golden set, retriever, option or commit."
    )
    sub.epilog = OFFLINE_STATUS
    sub.add_argument(
        "partial", nargs="+", type=Path, metavar="PARTIAL", help="one shard's partial report"
    )
    add_gate_options(sub)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..formats import corpus_input, declared_corpus, golden_inputs
    from ..shards import SettingsDiffer, ShardError, combine, named_by, read_partial

    outputs = offline_outputs(args, [("a shard's partial report", p) for p in args.partial])
    start = Path.cwd()
    documents: list[tuple[Path, Any]] = []
    try:
        check_inputs(args, ["partial"])  # a shard that died before its upload: outputs say so
        for path in args.partial:  # one given twice too
            documents.append((path, report_data(path)))
        try:
            partials = [read_partial(path, document) for path, document in documents]
            wholes = combine(partials, baseline=args.baseline, start=start)
            goldens = {
                start / r.part.golden for p in partials for r in p.results if r.part is not None
            }
            goldens |= {Path(w.result.golden_source) for w in wholes}
        except MALFORMED as exc:
            if isinstance(exc, SettingsDiffer):  # a setting of the wrong type: edited
                raise _edited_settings(documents) or exc from None
            raise (exc if isinstance(exc, ShardError) else _malformed(documents, exc)) from None
    except (ShardError, InputError, UsageError) as exc:  # none over a file the shards name
        return refuse(args, outputs, str(exc), named_by(readable(args.partial), start))
    check_overwrites(  # the golden sets and baselines the shards named, found only now
        args,
        [
            item
            for golden in sorted(goldens)
            for item in [
                *golden_inputs(golden),
                *corpus_input(relative(golden), declared_corpus(golden)),
            ]
        ],
        [("the baseline", path) for path in dict.fromkeys(w.baseline for w in wholes)],
    )
    wholes = [replace(w, result=replace(w.result, rerun=command_line(args))) for w in wholes]
    shards = partials[0].shard.count
    note = f"combined {shards} shard{'' if shards == 1 else 's'}: " + ", ".join(
        f"{w.result.golden_name} [{w.result.retriever_id}] {len(w.result.queries)} queries"
        for w in wholes
    )
    if partials[0].left_out:
        note += (
            f"; left out: {counted(partials[0].left_out, 'evaluation')} of the shards' own tests "
            "(retrieval_eval calls are not sharded; run the shards with --retrieval-only)"
        )
    try:
        unrun: dict[str, list[str]] = {}
        for partial in partials:
            for golden, why in partial.unrun.items():
                known = unrun.setdefault(golden, [])
                known += [w for w in why if w not in known]
        return gate_offline(args, wholes, outputs, note, unrun)
    except MALFORMED as exc:  # a value of the wrong type, found on the way
        return refuse(args, outputs, str(_malformed(documents, exc)))


def _edited_settings(documents: Sequence[tuple[Path, Any]]) -> Exception | None:
    """What the report schema finds wrong in the partial reports, their queries left out:
    a value of the wrong type (``"k": "10"``) is what refused them, not a difference between
    shards. Without the queries the check takes no time, however many there are."""
    from ..shards import malformed

    def settings(document: Any) -> Any:
        if not isinstance(document, dict) or not isinstance(document.get("evaluations"), list):
            return document
        evaluations = [
            {**e, "queries": []} if isinstance(e, dict) else e for e in document["evaluations"]
        ]
        return {**document, "evaluations": evaluations}

    return malformed([(path, settings(document)) for path, document in documents])


def _malformed(documents: Sequence[tuple[Path, Any]], exc: Exception) -> Exception:
    """What is wrong in partial reports that broke combining them: the schema's finding, else
    the error itself, said as such (a value the schema allows but no shard writes)."""
    from ..shards import ShardError, malformed

    found = malformed(documents)
    if found is not None:
        return found
    names = ", ".join(str(path) for path, _ in documents)
    return ShardError(
        f"{names}: a value no shard writes ({type(exc).__name__}: {exc}): not partial reports "
        "as pytest-retrieval writes them (edited, or written by another tool); run the shards "
        "again"
    )


#: what a value of the wrong type in a partial report raises on its way through combine
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)
