"""``pytest-retrieval convert``: a BEIR folder, TREC qrels or CSV file written as golden
JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .common import check_inputs, output_file

if TYPE_CHECKING:
    pass


def add_arguments(sub: argparse.ArgumentParser) -> None:
    from ..formats import CSV_HELP

    sub.description = (
        "Convert a BEIR folder (queries.jsonl + qrels/<split>.tsv), TREC qrels "
        "(with --queries, or a queries.tsv beside them) or a CSV file into the golden JSON "
        "object form."
    )
    sub.epilog = CSV_HELP  # the reader's layout, from formats
    sub.formatter_class = argparse.RawDescriptionHelpFormatter
    sub.add_argument("source", type=Path, metavar="SOURCE", help="BEIR folder, qrels file or .csv")
    sub.add_argument("-o", "--output", required=True, help="output .json, or - for stdout")
    sub.add_argument("--queries", type=Path, help="TREC queries file (QUERY_ID<TAB>TEXT)")
    sub.add_argument("--name", help="golden set name (default: from the source)")
    sub.add_argument("--force", action="store_true", help="overwrite an existing output")


def run(args: argparse.Namespace) -> int:
    from ..golden import GoldenError, load_golden, load_trec

    check_inputs(args, ["queries"], ["source"])
    source: Path = args.source
    output = None if args.output == "-" else output_file(Path(args.output), args.force)
    try:
        if args.queries is not None:
            golden = load_trec(source, args.queries)
        else:
            golden = load_golden(source)
    except GoldenError as exc:
        raise InputError(str(exc)) from None
    document: dict[str, Any] = {"name": args.name or golden.name, "k": args.k or golden.k}
    document["queries"] = [_entry(q) for q in golden.queries]
    text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    if output is None:
        sys.stdout.write(text)
        return 0
    from .._internal.io import atomic_write

    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(output, text)
    except OSError as exc:
        raise InputError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output}: {len(golden.queries)} queries (fingerprint {golden.fingerprint})")
    return 0


def _entry(query: Any) -> dict[str, Any]:
    grades = query.relevant
    relevant: Any = list(grades) if set(grades.values()) == {1} else dict(grades)
    entry: dict[str, Any] = {"id": query.id, "query": query.query, "relevant": relevant}
    if query.tags:
        entry["tags"] = list(query.tags)
    if query.metadata:
        entry["metadata"] = query.metadata
    return entry
