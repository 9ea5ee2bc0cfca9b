"""``pytest-retrieval validate``: golden sets loaded as the plugin loads them, then their
sanity report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .common import check_inputs

if TYPE_CHECKING:
    pass


def add_arguments(sub: argparse.ArgumentParser) -> None:
    sub.description = (
        "Load each golden set exactly as the plugin does (same messages), check "
        'its relevant doc ids against its corpus when it has one (the "corpus" path, or '
        "corpus.jsonl in a BEIR folder), then report counts, duplicate and near-duplicate "
        "query texts, queries with a single relevant document and tag balance. "
        "Near-duplicates: word sets (ignoring order, case and punctuation) within one added, "
        "removed or swapped word and a Jaccard similarity of at least 0.8."
    )
    sub.add_argument(
        "golden",
        nargs="+",
        type=Path,
        metavar="GOLDEN",
        help="golden file or BEIR folder",
    )
    sub.add_argument("--json", action="store_true", help="machine-readable output")
    sub.add_argument(
        "--strict",
        action="store_true",
        help="relevant ids missing from the corpus are errors; exit 1 on any warning",
    )
    sub.add_argument(
        "--open", action="store_true", help="allow open queries (no relevant ids; judge only)"
    )


def run(args: argparse.Namespace) -> int:
    from ..golden import GoldenError, load_golden
    from ..sanity import corpus_check, sanity, sanity_text

    check_inputs(args, (), ["golden"])
    status = 0
    reports = []
    for path in args.golden:
        try:
            golden = load_golden(path, require_relevant=not args.open)
            corpus, problem = corpus_check(golden)
            if problem is not None and args.strict:
                raise problem
        except GoldenError as exc:
            print(str(exc), file=sys.stderr)
            status = 1
            continue
        report = sanity(golden)
        if corpus is not None:
            report["corpus"] = corpus
        if problem is not None:
            report["warnings"].append(str(problem).replace("\n  fix:", "; fix:"))
        reports.append(report)
        if args.strict and report["warnings"]:
            status = 1
        if not args.json:
            print(sanity_text(report))
    if args.json:
        print(json.dumps(reports, indent=1, ensure_ascii=False))
    return status
