"""``python -m pytest_retrieval`` / ``pytest-retrieval``: golden-set and report tools.

Subcommands: ``validate`` (schema and sanity report of golden sets), ``convert`` (BEIR,
TREC qrels or CSV to golden JSON), ``diff`` (the gate's paired comparison between two JSON
reports), ``show`` (a baseline file, or a report's queries with their ranked hits),
``judge-batch`` (fill the judge's cache through OpenAI's Batch API), ``combine`` (gate the
partial reports of CI shards as one run) and ``eval`` (gate a precomputed run), both
through :mod:`.offline`. Exit status: 0 fine,
1 a problem found (invalid golden set, a regression, nothing to compare, an unreadable
file), 2 bad command-line arguments (argparse's message, also for problems found after
parsing: an output path that is a folder, an unknown query id; for ``combine`` and ``eval``
also inputs that cannot be gated, said in the outputs asked for too).
"""

from __future__ import annotations

import argparse
import csv
import difflib
import importlib
import io
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.io import BASELINE_SUFFIX, counted, relative
from .._internal.json import JsonProblem, loads
from .._version import __version__
from ..errors import ConfigError, RetrievalError
from ..judge_args import DEFAULT_JUDGE_CACHE
from ..validators import (
    alpha_arg,
    cutoff,
    fraction,
    metric_arg,
    positive_int,
    retriever_id_arg,
    threshold_arg,
)

if TYPE_CHECKING:
    from ..gate import Allowance
    from ..results import Comparison, EvaluationResult, QueryChange, QueryResult

Command = Callable[[argparse.Namespace], int]


class CliError(RetrievalError):
    """A problem to report in one line (no traceback), exit status 1."""


class UsageError(Exception):
    """A bad command line found only after parsing (an output path that is a folder, a query
    id the report does not hold): argparse's usage and message, exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # "→" and "Δ" on a cp1252 pipe: "?", not a crash
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the fix a note prints reruns it
    command: Command = args.command
    try:
        _check_links(args)
        return command(args)
    except UsageError as exc:
        sub: argparse.ArgumentParser = args.parser
        sub.print_usage(sys.stderr)
        print(f"{sub.prog}: error: {exc}", file=sys.stderr)
        return 2
    except (CliError, ConfigError) as exc:  # ConfigError: a cache warning -W error raises
        print(f"pytest-retrieval {args.command_name}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `show ... | head` closed the pipe: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:  # what the command opened (a judge's cache): closed, not left to exit
        for opened in getattr(args, "opened", ()):
            opened.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytest-retrieval",
        description="Golden-set and report tools for pytest-retrieval.",
    )
    parser.add_argument("--version", action="version", version=f"pytest-retrieval {__version__}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    for add in (
        _add_validate,
        _add_convert,
        _add_diff,
        _add_show,
        _add_judge_batch,
        _add_combine,
        _add_eval,
    ):
        add(commands)
    for name, module, summary in _BUILDERS:
        _add_builder(commands, name, module, summary)
    return parser


#: the commands that build a golden set ("Start from nothing" in the README): each module
#: has ``add_arguments(parser)`` and ``run(args) -> int``, imported when the parser is built
_BUILDERS = (
    ("synth", "builder.synth", "generate a golden set's queries from a corpus with an LLM"),
    (
        "pool",
        "builder.pool",
        "judge the unjudged top hits of one or more reports into a review file",
    ),
    ("review", "builder.review_server", "review a review file's proposed labels on a local page"),
    ("apply", "builder.apply", "merge a review file's decisions into the golden set"),
)


def _add_builder(commands: Any, name: str, module: str, summary: str) -> None:
    builder = importlib.import_module(f"pytest_retrieval.{module}")
    sub = _command(commands, name, builder.run, help=summary, description=summary)
    builder.add_arguments(sub)


def _command(commands: Any, name: str, run: Command, **options: Any) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = commands.add_parser(name, **options)
    sub.set_defaults(command=run, command_name=name, parser=sub)
    sub.add_argument(
        ALLOW_LINKS,
        action="store_true",
        help="let an output be written through a symlink to a place outside the project "
        "(the working directory): refused by default",
    )
    return sub


ALLOW_LINKS = "--allow-outside-links"
#: the paths the commands write (argparse dest -> the option that names it)
WRITTEN = {
    "output": "-o",
    "state": "-o",
    "report": "--report",
    "markdown": "--markdown",
    "html": "--html",
    "junit_xml": "--junit-xml",
}


def _check_links(args: argparse.Namespace) -> None:
    """The project of a command is the working directory: an output that would be written
    through a symlink out of it is a usage error before any work (:func:`~._io.link_problem`),
    unless ``--allow-outside-links``; a file known only later is refused as it is written."""
    from .._internal.io import cache_outputs, link_problem, set_link_policy

    set_link_policy(Path.cwd(), bool(getattr(args, "allow_outside_links", False)), ALLOW_LINKS)
    named = [(option, getattr(args, dest, None)) for dest, option in WRITTEN.items()]
    cache = getattr(args, "cache", None)
    if isinstance(cache, Path) and not getattr(args, "no_cache", False):
        named += cache_outputs("--cache", cache)
    if getattr(args, "update_baseline", None) is not None:
        named.append(("--baseline", getattr(args, "baseline", None)))
        if args.command_name == "eval" and args.baseline is None:  # beside the golden set
            from ..baseline import default_path

            named.append(("the baseline to record", default_path(args.golden)))
    if args.command_name == "review":
        named.append(("the review file", args.review))
    if args.command_name == "apply" and args.output is None:
        named.append(("the golden set (written in place)", args.golden))
    if args.command_name == "synth" and args.output is not None:
        named.append(("its summary", args.output.with_name(args.output.name + ".synth.json")))
    for option, path in named:
        if path is None or str(path) == "-":
            continue
        problem = link_problem(option, Path(path))
        if problem is not None:
            raise UsageError(problem)


def _inputs(args: argparse.Namespace, files: Sequence[str], paths: Sequence[str] = ()) -> None:
    """The input arguments ``files`` (files) and ``paths`` (a file or a folder: a BEIR
    folder, a corpus) exist, else argparse's message for the first that does not. Checked
    when the command runs, not by ``type=``, so parsing a command line never reads disks."""
    for dest in (*files, *paths):
        values = getattr(args, dest)
        for path in values if isinstance(values, list) else [values]:
            if path is None:
                continue
            label = f"--{dest.replace('_', '-')}" if dest in OPTIONS else dest.upper()
            if dest in files and path.is_dir():
                raise UsageError(f"argument {label}: {str(path)!r} is a folder, not a file")
            if not path.exists():
                what = "file" if dest in files else "file or folder"
                raise UsageError(f"argument {label}: no such {what}: {str(path)!r}")


#: input arguments given as options (the rest are positional)
OPTIONS = frozenset({"queries", "corpus", "prompt"})


def _max_drop(text: str) -> Allowance:
    """``type=`` of ``diff --max-drop``: the allowance, or argparse's error saying what to
    write."""
    from ..gate import parse_allowance_assignment

    try:
        return parse_allowance_assignment(text, "--max-drop")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _unknown(kind: str, wanted: str, known: Sequence[str], where: Path | str) -> str:
    """``no query id 'q12' in r.json (225 query ids; close matches: q1, q120)``: what to
    type instead, without printing thousands of ids."""
    listed = f": {', '.join(known)}" if len(known) <= 8 else ""
    close = difflib.get_close_matches(wanted, known, n=5, cutoff=0.6)
    hint = f"; close matches: {', '.join(close)}" if close and len(known) > 8 else ""
    count = f"{len(known)} {kind}{'' if len(known) == 1 else 's'}"
    return f"no {kind} {wanted!r} in {where} ({count}{listed}{hint})"


# ---------------------------------------------------------------------------- validate


def _add_validate(commands: Any) -> None:
    sub = _command(
        commands,
        "validate",
        _validate,
        help="check golden sets: schema, then counts, duplicates and balance",
        description="Load each golden set exactly as the plugin does (same messages), check "
        'its relevant doc ids against its corpus when it has one (the "corpus" path, or '
        "corpus.jsonl in a BEIR folder), then report counts, duplicate and near-duplicate "
        "query texts, queries with a single relevant document and tag balance. "
        "Near-duplicates: word sets (ignoring order, case and punctuation) within one added, "
        "removed or swapped word and a Jaccard similarity of at least 0.8.",
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


def _validate(args: argparse.Namespace) -> int:
    from ..golden import GoldenError, load_golden
    from ..sanity import corpus_check, sanity, sanity_text

    _inputs(args, (), ["golden"])
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


# ---------------------------------------------------------------------------- convert

CSV_HELP = """\
CSV: a header row, then one row per query. Columns: query (required), relevant (required:
doc ids separated by ';', each optionally with a grade as id:grade), id (optional, default:
derived from the query text, q- and 12 hex digits, unchanged when other rows are added or
removed), tags (optional, separated by ';'). Example:
  id,query,relevant,tags
  q1,how to reset a password,doc-12;doc-40:2,account
"""


def _add_convert(commands: Any) -> None:
    sub = _command(
        commands,
        "convert",
        _convert,
        help="BEIR folder, TREC qrels or CSV -> golden JSON",
        description="Convert a BEIR folder (queries.jsonl + qrels/<split>.tsv), TREC qrels "
        "(with --queries, or a queries.tsv beside them) or a CSV file into the golden JSON "
        "object form.",
        epilog=CSV_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.add_argument("source", type=Path, metavar="SOURCE", help="BEIR folder, qrels file or .csv")
    sub.add_argument("-o", "--output", required=True, help="output .json, or - for stdout")
    sub.add_argument("--queries", type=Path, help="TREC queries file (QUERY_ID<TAB>TEXT)")
    sub.add_argument("--name", help="golden set name (default: from the source)")
    sub.add_argument("--k", type=cutoff, default=None, help="default cutoff to store")
    sub.add_argument("--force", action="store_true", help="overwrite an existing output")


def _convert(args: argparse.Namespace) -> int:
    from ..golden import GoldenError, load_golden, load_trec

    _inputs(args, ["queries"], ["source"])
    source: Path = args.source
    output = None if args.output == "-" else _output_file(Path(args.output), args.force)
    try:
        if source.suffix.lower() == ".csv":
            golden = _golden_from_csv(source)
        elif args.queries is not None:
            golden = load_trec(source, args.queries)
        else:
            golden = load_golden(source)
    except GoldenError as exc:
        raise CliError(str(exc)) from None
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
        raise CliError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"wrote {output}: {len(golden.queries)} queries (fingerprint {golden.fingerprint})")
    return 0


def _output_file(output: Path, force: bool, example: str = "golden.json") -> Path:
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


def _entry(query: Any) -> dict[str, Any]:
    grades = query.relevant
    relevant: Any = list(grades) if set(grades.values()) == {1} else dict(grades)
    entry: dict[str, Any] = {"id": query.id, "query": query.query, "relevant": relevant}
    if query.tags:
        entry["tags"] = list(query.tags)
    if query.metadata:
        entry["metadata"] = query.metadata
    return entry


def _golden_from_csv(path: Path) -> Any:
    """Rows -> golden entries, validated by the same loader as every other format."""
    import tempfile

    from ..golden import GoldenError, load_golden

    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise GoldenError(path, "", f"cannot read it as CSV ({exc})") from None
    entries = []
    for number, row in enumerate(rows, start=2):  # line 1 is the header
        if not row.get("query") or not row.get("relevant"):
            raise GoldenError(
                path,
                f"line {number}",
                "a row needs 'query' and 'relevant' columns with values",
                "see `pytest-retrieval convert --help` for the CSV layout",
            )
        relevant: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in row["relevant"].split(";"))):
            doc, _, grade = item.rpartition(":") if ":" in item else (item, "", "1")
            try:
                relevant[doc] = int(grade)
            except ValueError:
                raise GoldenError(
                    path, f"line {number}", f"bad grade in {item!r}", "write id:grade, e.g. d1:2"
                ) from None
        entry: dict[str, Any] = {"query": row["query"], "relevant": relevant}
        if row.get("id"):
            entry["id"] = row["id"]
        if row.get("tags"):
            entry["tags"] = [t.strip() for t in row["tags"].split(";") if t.strip()]
        entries.append(entry)
    with tempfile.TemporaryDirectory() as folder:
        staged = Path(folder) / f"{path.stem}.json"
        staged.write_text(json.dumps({"name": path.stem, "queries": entries}), "utf-8")
        try:
            golden = load_golden(staged)
        except GoldenError as exc:
            raise GoldenError(path, exc.where, exc.problem, exc.fix) from None
    return golden.model_copy(update={"source": str(path)})


# ---------------------------------------------------------------------------- diff


def _add_diff(commands: Any) -> None:
    sub = _command(
        commands,
        "diff",
        _diff,
        help="compare two JSON reports with the gate's paired test",
        description="Compare REPORT_B with REPORT_A (both written by --retrieval-report): "
        "per evaluation matched by golden set and retriever, the same allowances, paired "
        "one-sided test and Holm correction as the baseline gate. Exit 1 on a regression, "
        "or when nothing could be compared (no evaluation, query or gated metric in common).",
    )
    sub.add_argument("report_a", type=Path, metavar="REPORT_A", help="the reference run")
    sub.add_argument("report_b", type=Path, metavar="REPORT_B", help="the run to judge")
    sub.add_argument(
        "--max-drop",
        action="append",
        type=_max_drop,
        default=[],
        metavar="METRIC=DROP",
        help="allowed drop, absolute (0.01) or relative (2%%); repeatable; default 0.01",
    )
    sub.add_argument(
        "--alpha", type=alpha_arg, default=0.05, help="significance level, in (0, 1] (0.05)"
    )
    sub.add_argument(
        "--gate",
        action="append",
        type=metric_arg,
        default=None,
        metavar="METRIC",
        help="a gated metric (repeatable); default: the gated set REPORT_B was run with",
    )


def _readable(paths: Iterable[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """The reports among ``paths`` that read, each with its document (the others skipped)."""
    found = []
    for path in paths:
        try:
            found.append((path, _report_data(path)))
        except (CliError, OSError):
            continue
    return found


def _report_data(path: Path) -> dict[str, Any]:
    """A JSON report's document, or one clear CliError (not JSON, not a report)."""
    data = _json_object(path)
    if not isinstance(data.get("evaluations"), list):
        raise CliError(f"{path}: not a pytest-retrieval report (no 'evaluations' list)")
    return data


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


def _why_empty(data: dict[str, Any]) -> str:
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


def _read_report(path: Path, data: dict[str, Any] | None = None) -> list[EvaluationResult]:
    """The evaluations of a report (``data``: its document, when already read)."""
    from ..results import result_from_dict

    evaluations = (data if data is not None else _report_data(path))["evaluations"]
    try:
        results = [result_from_dict(entry) for entry in evaluations]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CliError(f"{path}: a malformed evaluation entry ({exc!r})") from None
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
            raise CliError(f"{where}/metrics: {exc}; {fix}") from None
    for tag, means in result.per_tag.items():  # a report writes every metric's mean per tag
        missing = [name for name in result.metrics if name not in means]
        if missing:
            raise CliError(
                f"{where}/per_tag/{tag}/metrics: no mean of {missing[0]!r}, a metric of the "
                f"evaluation; {fix}"
            )


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
            raise CliError(
                f"{path}: {len(found)} evaluations of {result.golden_source} "
                f"[{result.retriever_id}]; compare reports with one evaluation each"
            )
        if found:
            return found[0]
    return None


def _diff(args: argparse.Namespace) -> int:
    """REPORT_B gated as if REPORT_A were its baseline: the same comparison and the same
    verdict (:func:`~pytest_retrieval.gate.decide`) as the plugin, rendered the same way."""
    from dataclasses import replace

    from ..baseline import entry_key
    from ..gate import decide
    from ..render.terminal import regression_lines

    _inputs(args, ["report_a", "report_b"])
    documents = [_report_data(args.report_a), _report_data(args.report_b)]
    for path, document in zip((args.report_a, args.report_b), documents, strict=True):
        if not document["evaluations"]:
            raise CliError(
                f"nothing to compare: {path} holds no evaluation, its session stopped "
                f"before any ran ({_why_empty(document)}); fix that run and write it again"
            )
    earlier = _read_report(args.report_a, documents[0])
    after = _read_report(args.report_b, documents[1])
    for path, results in ((args.report_a, earlier), (args.report_b, after)):
        part = next((r for r in results if r.part is not None), None)
        if part is not None and part.part is not None:
            raise CliError(
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
        raise CliError(
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
    from ..gate import merge_allowances

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


#: MetricChange verdicts of a metric that was not compared
UNCOMPARED = ("not in baseline", "judge changed", "not tested")


def _nothing_compared(
    result: EvaluationResult, comparison: Comparison, report_a: Path
) -> str | None:
    """Why the comparison compared no gated metric (None: it compared some): no query in
    common, other metric definitions, a judge that changed, gated metrics only one report has."""
    from ..results import LATENCY

    if comparison.n_common == 0:
        return (
            f"no query in common: every query is new or re-judged since {report_a} "
            f"({len(comparison.added)} added, {len(comparison.removed)} removed, "
            f"{len(comparison.rejudged)} re-judged)"
        )
    if comparison.stale:
        return str(comparison.stale).replace("the baseline", str(report_a))
    compared = [c for c in comparison.changes if c.verdict not in UNCOMPARED]
    if any(c.gated for c in compared if c.metric != LATENCY) or (not result.gated and compared):
        return None
    return f"none of the gated metrics ({', '.join(result.gated)}) is in {report_a}"


def _names(metrics: Iterable[str]) -> str:
    """Metric names in their display order, the first six: what a report has."""
    from ..metrics import parse_metric

    ordered = sorted(metrics, key=lambda m: parse_metric(m).sort_key)
    more = f" (+{len(ordered) - 6} more)" if len(ordered) > 6 else ""
    return ", ".join(ordered[:6]) + more if ordered else "no metrics"


# ---------------------------------------------------------------------------- show


def _add_show(commands: Any) -> None:
    sub = _command(
        commands,
        "show",
        _show,
        help="print a baseline file, or a report's queries with their ranked hits",
        description="A baseline file (<golden>.baseline.json): its entries and metrics. A JSON "
        "report (--retrieval-report): each evaluation's summary; with --query, --worst or "
        "--tag, each chosen query's ranked hits with their relevance marks and golden "
        "grades, the judge's verdicts and, when the run was compared with a baseline, "
        "where each hit ranked there and the relevant documents that left the top k.",
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


def _show(args: argparse.Namespace) -> int:
    """A baseline or a report, told apart by their content; anything else is refused with
    what it looks like and what ``show`` reads."""
    from ..baseline import FORMAT

    _inputs(args, ["file"])
    path: Path = args.file
    try:
        text = path.read_text(encoding="utf-8")
        data: Any = loads(text)
    except OSError as exc:
        raise CliError(f"{path}: cannot read it ({exc.strerror})") from None
    except (UnicodeDecodeError, JsonProblem) as exc:
        if path.name.endswith(BASELINE_SUFFIX):
            return _show_baseline(args)  # the baseline reader says what is wrong with it
        if isinstance(exc, JsonProblem) and not _syntax(exc):  # too deep, a key twice
            raise UsageError(f"{path}, {exc}; {SHOW_READS}") from None
        syntax = _decode_error(text) if isinstance(exc, JsonProblem) else None
        if syntax is not None and _cut_short(syntax):
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
                raise UsageError(f"{path} holds no evaluation: {_why_empty(data)}")
            print(f"{path}: no evaluation ran: {_why_empty(data)}")
            return 0
        return _show_report(args, _with_ab(_read_report(path, data), data))
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
    from ..metrics import parse_metric
    from ..render.text import ci, num, text_table

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
        raise CliError(str(exc)) from None
    print(f"{args.file}: {len(entries)} entries")
    for key, entry in entries.items():
        commit = str(entry.git.get("commit", ""))[:12]
        dirty = " (dirty)" if entry.git.get("dirty") else ""
        print(
            f"{key}: golden {entry.golden_name} (fingerprint {entry.golden_fingerprint}), "
            f"k={entry.k}, {len(entry.queries)} queries, recorded {entry.created or '?'}"
            + (f", commit {commit}{dirty}" if commit else "")
            + f", plugin {entry.plugin_version}"
        )
        if entry.judge:
            print(f"  judge: {entry.judge}")
        rows = [["metric", "value", "95% CI"]]
        ordered = sorted(entry.metrics, key=lambda m: parse_metric(m).sort_key)
        rows += [[m, num(entry.metrics[m]), ci(entry.ci.get(m))] for m in ordered]
        for line in text_table(rows):
            print(line)
        if entry.latency_p95_ms is not None:
            print(f"  latency p50 {entry.latency_p50_ms} ms, p95 {entry.latency_p95_ms} ms")
    return 0


def _show_report(args: argparse.Namespace, results: list[EvaluationResult]) -> int:
    """Each chosen evaluation: its summary, or (``--query``/``--worst``/``--tag``) the
    chosen queries' hits."""
    from ..baseline import entry_key
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
            raise UsageError(_unknown("retriever", args.retriever, known, args.file))
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
        for line in _evaluation_lines(result, args):
            print(line)
    return 0


def _check_picks(args: argparse.Namespace, chosen: Sequence[EvaluationResult]) -> None:
    """Every ``--query`` id and the ``--tag`` exist in one of the chosen evaluations, and
    ``--metric`` in all of them; else a usage error with the close matches."""
    ids = list(dict.fromkeys(q.id for r in chosen for q in r.queries))
    for wanted in args.query or ():
        if wanted not in ids:
            raise UsageError(_unknown("query id", wanted, ids, args.file))
    tags = sorted({tag for r in chosen for q in r.queries for tag in q.tags})
    if args.tag is not None and args.tag not in tags:
        raise UsageError(_unknown("tag", args.tag, tags, args.file))
    for result in chosen:
        if args.metric is not None and args.metric not in result.metrics:
            raise UsageError(_unknown("metric", args.metric, list(result.metrics), args.file))


def _evaluation_lines(result: EvaluationResult, args: argparse.Namespace) -> list[str]:
    """One evaluation's chosen queries, each with its hits, worst first."""
    from ..render.text import title

    metric = _ranking_metric(result, args.metric)
    comparison = result.comparison
    shift = comparison.shifts.get(metric) if comparison is not None else None
    lines = [title(result) + (f" · vs {comparison.reference}" if comparison else "")]
    queries = [q for q in result.queries if args.tag is None or args.tag in q.tags]
    if args.query:
        by_id = {q.id: q for q in result.queries}
        queries = [by_id[i] for i in args.query if i in by_id]
    elif shift is not None:
        change = {c.id: c.delta for c in shift.queries}
        queries.sort(key=lambda q: (change.get(q.id, 0.0), _value(q, metric), q.id))
        if args.worst:
            dropped = [q for q in queries if change.get(q.id, 0.0) < 0]
            queries = dropped[: args.worst]
            lines.append(f"  the largest drops on {metric}: {_drops(len(dropped), args.worst)}")
        else:
            lines.append(f"  worst first: the largest drop on {metric} first")
    else:
        queries.sort(key=lambda q: (_value(q, metric), q.id))
        queries = queries[: args.worst] if args.worst else queries
        if args.worst or args.tag:
            lines.append(f"  worst first by {metric}")
    if not queries:
        lines.append("  (none here)")
    for query in queries:
        lines.extend(_query_lines(result, query, args.depth or result.k))
    return lines


def _drops(dropped: int, asked: int) -> str:
    """How the queries shown stand to all that dropped: "1 of the 2 queries that dropped",
    "the 1 query that dropped (of 3 asked for)"."""
    if not dropped:
        return "none dropped"
    them = f"quer{'y' if dropped == 1 else 'ies'} that dropped"
    if asked < dropped:
        return f"{asked} of the {dropped} {them}"
    return f"the {dropped} {them}" + (f" (of {asked} asked for)" if dropped < asked else "")


def _ranking_metric(result: EvaluationResult, wanted: str | None) -> str:
    """What "worst" means: ``--metric``, else the first metric that regressed, else the first
    gated one on which a query got worse, else the first with shifts, else the first gated,
    else the first computed."""
    from ..metrics import parse_metric

    if wanted is not None:
        return wanted
    comparison = result.comparison
    if comparison is not None and comparison.shifts:
        regressed = [c.metric for c in comparison.regressed if c.metric in comparison.shifts]
        worse = [name for name, shift in comparison.shifts.items() if shift.worse]
        return next(iter([*regressed, *worse, *comparison.shifts]))
    gated = [m for m in result.gated if m in result.metrics]
    ordered = sorted(result.metrics, key=lambda m: parse_metric(m).sort_key)
    return gated[0] if gated else ordered[0]


def _value(query: QueryResult, metric: str) -> float:
    """The query's value of ``metric``; a query without one (open, NaN) sorts last."""
    value = query.metrics.get(metric, math.nan)
    return math.inf if math.isnan(value) else value


def _query_lines(result: EvaluationResult, query: QueryResult, depth: int) -> list[str]:
    """id, text, tags, metrics (before → after where it changed), the ranked hits as a
    table, where the relevant documents went, and the relevant ones never retrieved."""
    from ..metrics import parse_metric
    from ..render.rows import depth_note, move_lines
    from ..render.text import delta, num, text_table

    comparison = result.comparison
    changes: dict[str, QueryChange] = {}
    known = 0
    if comparison is not None:
        for name, shift in comparison.shifts.items():
            for change in shift.queries:
                if change.id == query.id:
                    changes[name] = change
                    known = shift.depth
    lines = ["", f"{query.id}: {query.query}", f"  tags: {', '.join(query.tags) or 'none'}"]
    if query.error is not None:
        lines.append(f"  error: {query.error}")
    rows = [["metric", "value"] + (["before", "Δ"] if changes else [])]
    for name in sorted(query.metrics, key=lambda m: parse_metric(m).sort_key):
        row = [name, num(query.metrics[name])]
        if changes:
            moved = changes.get(name)
            row += [num(moved.before), delta(moved.delta, 4)] if moved else ["", ""]
        rows.append(row)
    lines.extend(text_table(rows))
    reference = next((c.reference_ranked for c in changes.values() if c.reference_ranked), ())
    column = (
        "baseline" if comparison and comparison.reference.startswith("baseline") else "reference"
    )
    lines.extend(text_table(_hit_rows(result, query, depth, (column, reference), known)))
    if comparison is not None and not changes:
        lines.append(_unchanged_note(comparison, query.id))
    seen_k: set[int] = set()
    for name, change in changes.items():
        if parse_metric(name).k not in seen_k:  # mrr@10 and ndcg@10 moved the same docs
            seen_k.add(parse_metric(name).k)
            lines.extend(f"  {line}" for line in move_lines(change, known))
            if comparison is not None and (note := depth_note(comparison.shifts[name])):
                lines.append(f"  ({note})")
    deeper = [f"{d} #{r}" for d, r in query.found_ranks.items() if r > depth]
    if deeper:
        lines.append(f"  relevant below rank {depth}: {', '.join(deeper)}")
    if query.missed:
        missed = [
            d if query.relevant[d] == 1 else f"{d} (grade {query.relevant[d]})"
            for d in query.missed
        ]
        where = f"not in the {len(query.returned)} hits retrieved"
        lines.append(f"  relevant, {where}: {', '.join(missed)}")
    return lines


def _hit_rows(
    result: EvaluationResult,
    query: QueryResult,
    depth: int,
    ranked: tuple[str, Sequence[str]],
    known: int,
) -> list[list[str]]:
    """rank | doc | score | relevant | judge | baseline | text: the columns this report has
    data for (``ranked``: the reference column's name and the reference's ranking, maybe
    empty)."""
    from ..render.rows import rank_text
    from ..render.text import short

    column, reference = ranked
    judged = result.judge is not None or bool(query.judgments)
    graded = any(grade > 1 for grade in query.relevant.values())
    was = {doc: rank for rank, doc in enumerate(reference, 1)}
    head = ["rank", "doc"] + (["score"] if query.scores else []) + ["relevant"]
    head += (["judge"] if judged else []) + ([column] if reference else [])
    head += ["text"] if query.texts else []
    rows = [head]
    for rank, doc in enumerate(query.returned[:depth], 1):
        grade = query.relevant.get(doc)
        mark = "" if grade is None else "no (0)" if grade == 0 else "yes"
        if graded and grade:
            mark += f" ({grade})"
        row = [str(rank), doc]
        if query.scores:
            score = query.scores.get(doc)
            row.append("" if score is None else f"{score:.4g}")
        row.append(mark)
        if judged:
            row.append(_judge_text(query.judgments.get(doc)))
        if reference:
            row.append(rank_text(was.get(doc), known=known or len(reference)))
        if query.texts:
            row.append(short(query.texts.get(doc, ""), 50))
        rows.append(row)
    if len(rows) == 1:
        rows.append(["", "(no hits)"] + [""] * (len(head) - 2))
    return rows


def _judge_text(verdict: dict[str, Any] | None) -> str:
    """``yes: mentions the recipe`` / ``grade 2: ...`` / ``ungraded: timeout``."""
    from ..render.text import short
    from ..results import is_graded

    if not verdict:
        return ""
    if not is_graded(verdict):
        return f"ungraded: {short(str(verdict.get('error') or 'no decision'), 40)}"
    grade = verdict.get("grade")
    label = f"grade {grade}" if type(grade) is int else ("yes" if verdict["on_topic"] else "no")
    reason = verdict.get("reason")
    return f"{label}: {short(' '.join(str(reason).split()), 60)}" if reason else label


def _unchanged_note(comparison: Comparison, query_id: str) -> str:
    """Why a query of a compared run has no baseline ranks beside its hits."""
    if query_id in comparison.added:
        return f"  new since the {comparison.reference}: no ranks to compare"
    if query_id in comparison.rejudged:
        return f"  re-judged since the {comparison.reference}: not compared"
    if comparison.stale or not comparison.shifts:
        return f"  not compared query by query against the {comparison.reference}"
    return f"  unchanged on {', '.join(comparison.shifts)} against the {comparison.reference}"


# ---------------------------------------------------------------------------- judge-batch


def _add_judge_batch(commands: Any) -> None:
    sub = _command(
        commands,
        "judge-batch",
        _judge_batch,
        help="grade a report's hits through OpenAI's Batch API, into the judge cache",
        description="submit: send every uncached top-k hit of a --retrieval-report file "
        "(with its query's criteria) as Batch API jobs, split at the per-batch request and "
        "file-size limits, and write a state file listing them; collect: store the verdicts "
        "of every batch that has ended in the judge cache, including the partial output of a "
        "batch that expired or was cancelled, and count what failed or never ran. Submitting "
        "the same report again sends only the pairs not in the cache. Then run pytest with "
        "--retrieval-judge (--retrieval-judge-cache-only to make sure nothing else is "
        "called), with the same model, scale and cache folder.",
        epilog="exit status: 0 done (every batch completed; requests that failed inside a "
        "completed batch are counted, not fatal); 1 a batch failed, expired or was "
        "cancelled (submit again for the missing pairs), an unreadable file, or an API error "
        "worth retrying (429, 5xx, no connection); 2 bad arguments or an API error that "
        "repeating cannot fix (400, 401, 403, 404, 413, 422); 3 collect: a batch is still "
        "running (validating, in_progress, finalizing, cancelling), collect again later.",
    )
    sub.add_argument("action", choices=["submit", "collect"])
    sub.add_argument(
        "source",
        type=Path,
        metavar="SOURCE",
        help="submit: a JSON report; collect: the state file",
    )
    sub.add_argument("-o", "--state", type=Path, help="submit: where to write the state file")
    sub.add_argument("--corpus", type=Path, help="doc texts (default: the golden set's corpus)")
    sub.add_argument("--model", default="gpt-4.1-mini")
    sub.add_argument("--scale", choices=["binary", "0-3"], default="binary")
    sub.add_argument("--min-score", type=fraction, default=0.5)
    sub.add_argument("--base-url", default=None)
    sub.add_argument("--prompt", type=Path, default=None)
    sub.add_argument("--text-budget", type=positive_int, default=4000)
    sub.add_argument(
        "--samples",
        type=positive_int,
        default=1,
        help="answers per hit, as --retrieval-judge-samples in the pytest run (default 1)",
    )
    sub.add_argument(
        "--cache", type=Path, default=DEFAULT_JUDGE_CACHE, help=f"default {DEFAULT_JUDGE_CACHE}"
    )


STILL_RUNNING = 3  # judge-batch collect: exit status while a batch has not ended


def _batch_judge(settings: dict[str, Any]) -> Any:
    from ..judge import Judge, JudgeConfig, JudgeConfigError

    try:
        return Judge(
            JudgeConfig(
                model=settings["model"],
                scale=settings["scale"],
                min_score=settings["min_score"],
                base_url=settings["base_url"],
                prompt_file=Path(settings["prompt"]) if settings["prompt"] else None,
                text_budget_chars=settings["text_budget"],
                cache_dir=Path(settings["cache"]),
                samples=int(settings.get("samples", 1)),
            )
        )
    except JudgeConfigError as exc:
        raise CliError(str(exc)) from None


def _judge_batch(args: argparse.Namespace) -> int:
    from ..judge.batch import BatchAPIError

    _inputs(args, ["source", "prompt"], ["corpus"])
    try:
        if args.action == "collect":
            return _batch_collect(args)
        return _batch_submit(args)
    except BatchAPIError as exc:
        print(f"pytest-retrieval judge-batch: {exc}", file=sys.stderr)
        return 2 if exc.usage_like else 1


def _batch_submit(args: argparse.Namespace) -> int:
    from ..judge.batch import pairs_from_report, save_state, submit

    if args.state is None:
        raise UsageError("submit needs -o STATE.json (where to remember the batch ids)")
    _output_file(args.state, force=True, example="state.json")  # checked before any batch
    report = _report_data(args.source)
    settings = {
        "model": args.model,
        "scale": args.scale,
        "min_score": args.min_score,
        "base_url": _no_password(args.base_url),
        "prompt": str(args.prompt) if args.prompt else None,
        "text_budget": args.text_budget,
        "cache": str(args.cache),
        "samples": args.samples,
    }
    try:
        pairs = pairs_from_report(report, _batch_corpus(args, report))
    except (KeyError, TypeError, AttributeError) as exc:
        raise CliError(f"{args.source}: not a pytest-retrieval report ({exc!r})") from None
    try:
        submitted = submit(_batch_judge(settings), pairs)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if not submitted.batch_ids:
        print(f"nothing to submit: all {submitted.cached} hits are in the cache")
        return 0
    try:
        args.state.parent.mkdir(parents=True, exist_ok=True)
        save_state(args.state, submitted, {"report": str(args.source), "judge": settings})
    except OSError as exc:
        raise CliError(
            f"cannot write {args.state} ({exc.strerror or exc}); the batches were submitted: "
            f"{', '.join(submitted.batch_ids)}"
        ) from None
    count = len(submitted.batch_ids)
    print(
        f"submitted {count} batch{'es' if count > 1 else ''} "
        f"({', '.join(submitted.batch_ids)}): {submitted.requests} requests "
        f"({submitted.cached} already cached); collect with: "
        f"pytest-retrieval judge-batch collect {args.state}"
    )
    if submitted.error is None:
        return 0
    print(
        f"pytest-retrieval judge-batch: {submitted.error}; {submitted.unsent} requests not "
        f"sent: collect {args.state}, then submit again to send them",
        file=sys.stderr,
    )
    return 2 if submitted.error.usage_like else 1


def _batch_collect(args: argparse.Namespace) -> int:
    """Every batch of the state file in turn, then the sum and what to do next."""
    from ..judge.batch import batch_ids, collect

    state = _json_object(args.source)
    if isinstance(state.get("evaluations"), list):
        raise CliError(f"{args.source} is a report; collect reads the state file of submit -o")
    try:
        ids = batch_ids(state)
        judge = _batch_judge(state["judge"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(f"{args.source}: not a judge-batch state file ({exc})") from None
    stored = never_run = 0
    failed: Counter[str] = Counter()
    running = ended_early = 0
    for batch_id in ids:
        outcome = collect(judge, batch_id)
        stored += outcome.stored
        failed.update(outcome.failed)
        never_run += outcome.never_run or 0
        if outcome.running:
            running += 1
            done = "" if outcome.done is None else f" ({outcome.done} of {outcome.total} done)"
            print(f"batch {batch_id}: still {outcome.status}{done}; collect again later")
            continue
        ended_early += outcome.status != "completed"
        print(f"batch {batch_id}: {outcome.status}: {_batch_counts(outcome)}")
        for error in outcome.errors:
            print(f"  batch error: {error}")
    if len(ids) > 1:
        print(
            f"{len(ids)} batches: "
            + _batch_counts_text(stored, failed, never_run if ended_early else None)
        )
    print(f"verdicts are in {state['judge']['cache']}")
    if running:
        print(f"{running} still running: pytest-retrieval judge-batch collect {args.source}")
        return STILL_RUNNING
    if ended_early or failed:
        report = state.get("report", "REPORT")
        print(
            "to send the missing pairs again (stored verdicts are cache hits): "
            f"pytest-retrieval judge-batch submit {report} -o NEW_STATE.json"
        )
    return 1 if ended_early else 0


def _batch_counts(outcome: Any) -> str:
    never_run = None if outcome.status == "completed" else outcome.never_run
    return _batch_counts_text(outcome.stored, outcome.failed, never_run)


def _batch_counts_text(stored: int, failed: Counter[str], never_run: int | None) -> str:
    """E.g. ``120 verdicts stored, 5 failed: HTTP 400: too long (3); refusal (2), 7 never run``."""
    text = f"{stored} verdicts stored, {sum(failed.values())} failed"
    if failed:
        top = failed.most_common(3)
        if len(top) == 1:
            text += f": {top[0][0]}"
        else:
            text += ": " + "; ".join(f"{cause} ({n})" for cause, n in top)
            if len(failed) > 3:
                text += f"; {len(failed) - 3} more causes"
    if never_run is not None:
        text += f", {never_run} never run"
    return text


def _no_password(url: str | None) -> str | None:
    """``--base-url`` goes into the state file (often a CI artifact): never a password."""
    from urllib.parse import urlsplit

    if url and urlsplit(url).password:
        raise UsageError(
            "--base-url has a password in it, and the state file would keep it: give the "
            "credentials as OPENAI_API_KEY and the URL without them"
        )
    return url


def _json_object(path: Path) -> dict[str, Any]:
    """A JSON file holding an object (a report, a batch state), or one clear CliError."""
    try:
        text = path.read_text(encoding="utf-8")
        data = loads(text)
    except OSError as exc:
        raise CliError(f"{path}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not JSON (not UTF-8 text)") from None
    except JsonProblem as problem:
        if not _syntax(problem):  # too deep, a key twice: not a file we wrote
            fix = "give the file as pytest-retrieval wrote it"
            raise CliError(f"{path}, {problem}; {fix}") from None
        syntax = _decode_error(text)
        where = problem.where
        if syntax is not None and _cut_short(syntax):
            raise CliError(
                f"{path}: ends before its JSON does ({where}); give the file as "
                "pytest-retrieval wrote it (one cut short by an interrupted run, write or "
                "upload: run that job again)"
            ) from None
        raise CliError(
            f"{path}: not JSON ({where}); give a file pytest-retrieval wrote (a JSON report)"
        ) from None
    if not isinstance(data, dict):
        raise CliError(f"{path}: not a JSON object")
    return data


def _syntax(problem: JsonProblem) -> bool:
    """Whether ``problem`` is a syntax error (not a nesting too deep or a key twice)."""
    return problem.problem.startswith("invalid JSON: ")


def _decode_error(text: str) -> json.JSONDecodeError | None:
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


def _cut_short(exc: json.JSONDecodeError) -> bool:
    """Our files are one JSON object: one that starts as one but does not end with "}", or
    stops at its end or inside a string, was cut short."""
    text = exc.doc.strip()
    return (
        exc.pos > 0
        and text.startswith("{")
        and (not text.endswith("}") or exc.pos >= len(text) or "Unterminated" in exc.msg)
    )


def _batch_corpus(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, str]:
    from ..golden import GoldenError, corpus_file, load_corpus, load_golden

    try:
        if args.corpus is not None:
            for evaluation in report.get("evaluations", []):
                source = (evaluation.get("golden") or {}).get("source")
                if source and Path(source).exists():  # the judge reads the query texts:
                    load_golden(source, require_relevant=False)  # TREC qrels have them?
            return load_corpus(args.corpus)
        sources = {e["golden"]["source"] for e in report.get("evaluations", [])}
        corpus: dict[str, str] = {}
        for source in sources:
            golden = load_golden(source, require_relevant=False)
            if golden.corpus is None:
                raise CliError(f"{source} names no corpus; pass --corpus")
            corpus.update(load_corpus(corpus_file(golden)))
        return corpus
    except GoldenError as exc:
        raise CliError(str(exc)) from None


# ---------------------------------------------------------------------------- combine, eval


def _add_gate_options(sub: argparse.ArgumentParser) -> None:
    """The options ``combine`` and ``eval`` share with a pytest run's gate and outputs."""
    sub.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        help="baseline file to compare with and update (default: the one the run used, or "
        "<golden>.baseline.json beside the golden set)",
    )
    sub.add_argument(
        "--update-baseline",
        nargs="?",
        const="safe",
        choices=["safe", "force"],
        default=None,
        help="record the whole as the baseline (refused on failed retriever calls unless "
        "=force), as --retrieval-update-baseline",
    )
    sub.add_argument("--report", type=Path, metavar="PATH", help="write the JSON report")
    sub.add_argument(
        "--markdown",
        type=Path,
        metavar="PATH",
        help="write the Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set)",
    )
    sub.add_argument("--html", type=Path, metavar="PATH", help="write the HTML report")
    sub.add_argument("--junit-xml", type=Path, metavar="PATH", help="write a JUnit XML file")
    sub.add_argument(
        "-v", "--verbose", action="store_true", help="more changed queries and tracebacks"
    )


OFFLINE_STATUS = (
    "exit status: 0 the gate passed; 1 it failed (thresholds, regressions, failed retriever "
    "calls, as a pytest run fails); 2 bad arguments or inputs that cannot be gated (the "
    "outputs asked for are written all the same, saying why)."
)


def _add_combine(commands: Any) -> None:
    sub = _command(
        commands,
        "combine",
        _combine,
        help="gate the partial reports of CI shards (--retrieval-shard) as one run",
        description="Join the partial reports of every shard of `pytest --retrieval-shard I/N "
        "--retrieval-report PATH` and gate the whole exactly as one run would: each "
        "evaluation's parts merged in golden order (every number computed again), compared "
        "with its baseline and decided with the thresholds, allowances, alpha and gated "
        "metrics the shards ran with. Refused: a shard missing or given twice, or shards of "
        "another golden set, retriever, option or commit.",
        epilog=OFFLINE_STATUS,
    )
    sub.add_argument(
        "partial", nargs="+", type=Path, metavar="PARTIAL", help="one shard's partial report"
    )
    _add_gate_options(sub)


def _combine(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..formats import corpus_input, declared_corpus, golden_inputs
    from ..shards import SettingsDiffer, ShardError, combine, named_by, read_partial

    outputs = _offline_outputs(args, [("a shard's partial report", p) for p in args.partial])
    start = Path.cwd()
    documents: list[tuple[Path, Any]] = []
    try:
        _inputs(args, ["partial"])  # a shard that died before its upload: outputs say so
        for path in args.partial:  # one given twice too
            documents.append((path, _report_data(path)))
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
    except (ShardError, CliError, UsageError) as exc:  # none over a file the shards name
        return _refuse(args, outputs, str(exc), named_by(_readable(args.partial), start))
    _check_overwrites(  # the golden sets and baselines the shards named, found only now
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
    wholes = [replace(w, result=replace(w.result, rerun=_typed(args))) for w in wholes]
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
        return _gate_offline(args, wholes, outputs, note, unrun)
    except MALFORMED as exc:  # a value of the wrong type, found on the way
        return _refuse(args, outputs, str(_malformed(documents, exc)))


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


def _typed(args: argparse.Namespace) -> str:
    """The command line as typed, quoted for a shell."""
    import shlex

    return shlex.join(["pytest-retrieval", *args.argv])


#: the option a baseline file's fix names: eval's and combine's is --update-baseline
PYTEST_UPDATE = "--retrieval-update-baseline"

#: what a value of the wrong type in a partial report raises on its way through combine
MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def _add_eval(commands: Any) -> None:
    sub = _command(
        commands,
        "eval",
        _eval,
        help="gate a precomputed run (TREC, JSON or JSONL) on a golden set, without pytest",
        description="Evaluate RUN (a TREC run file, {qid: {doc: score}} or {qid: [doc, ...]} "
        "JSON, or JSONL) on GOLDEN and gate it as `pytest --retrieval-golden GOLDEN "
        "--retrieval-run RUN` would: thresholds (golden file, then --threshold), the baseline "
        "comparison and its paired tests, outputs. A golden query the run lacks scores 0 "
        "(said in the summary).",
        epilog=OFFLINE_STATUS,
    )
    sub.add_argument("golden", type=Path, metavar="GOLDEN", help="golden file or BEIR folder")
    sub.add_argument("run", type=Path, metavar="RUN", help="the ranked lists to evaluate")
    sub.add_argument(
        "--retriever",
        type=retriever_id_arg,
        metavar="ID",
        help="the retriever's id in the baseline and outputs (default: the run file's name "
        "without extension, as under --retrieval-run: runs/bm25.trec is bm25)",
    )
    sub.add_argument("--k", type=cutoff, default=None, help="default cutoff (the golden file's)")
    sub.add_argument(
        "--metric",
        action="append",
        type=metric_arg,
        default=[],
        metavar="METRIC",
        help="extra metric to compute, e.g. ndcg_exp@20; repeatable",
    )
    sub.add_argument(
        "--threshold",
        action="append",
        type=threshold_arg,
        default=[],
        metavar="METRIC=VALUE",
        help="minimum for a metric, e.g. recall@10=0.8 or recall@10[errors]=0.7; repeatable; "
        "wins over the golden file's",
    )
    sub.add_argument(
        "--max-drop",
        action="append",
        type=_max_drop,
        default=[],
        metavar="METRIC=DROP",
        help="allowed drop against the baseline, absolute (0.01) or relative (2%%); "
        "repeatable; wins over the golden file's; default 0.01",
    )
    sub.add_argument(
        "--alpha", type=alpha_arg, default=0.05, help="significance level, in (0, 1] (0.05)"
    )
    sub.add_argument(
        "--gate",
        action="append",
        type=metric_arg,
        default=None,
        metavar="METRIC",
        help="a metric whose drop fails the gate (repeatable; default: the golden file's, "
        "else recall, mrr and ndcg at k)",
    )
    sub.add_argument(
        "--strict-baseline",
        action="store_true",
        help="a missing or stale baseline fails the gate (default: a warning)",
    )
    _add_gate_options(sub)


def _eval(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..baseline import default_path, golden_key
    from ..baseline import default_path as baseline_of
    from ..evaluation import evaluate
    from ..finish import GateSettings, Whole
    from ..formats import corpus_input, golden_inputs
    from ..gate import from_mapping, merge, merge_allowances, parse_allowance, parse_assignment
    from ..golden import load_golden
    from ..labels import JUDGE_ADVICE
    from ..plugin.ini_check import unread_gate_settings
    from ..runfile import missing_queries, read_run, runs_for, ties_warning

    outputs = _offline_outputs(
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
        _inputs(args, ["run"], ["golden"])  # a run never produced: the outputs say so
        golden = load_golden(source, require_texts=False)  # qrels and a run, as trec_eval
    except (ConfigError, UsageError) as exc:
        return _refuse(args, outputs, str(exc))
    _check_overwrites(args, corpus_input(relative(args.golden), golden.corpus), [])  # in it
    try:
        thresholds = merge(
            from_mapping(golden.thresholds, f"{golden.source} thresholds"),
            [parse_assignment(text, "--threshold") for text in args.threshold],
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
        return _refuse(args, outputs, str(exc).replace(JUDGE_ADVICE, advice))
    # as pytest names it
    result = replace(
        result,
        run_file=str(start / args.run),
        run_missing=missing_queries(golden, run),
        run_format=run.format,
        rerun=_typed(args),
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
    return _gate_offline(args, [Whole(result, settings, path, key, nodeid)], outputs, "")


def _offline_outputs(args: argparse.Namespace, inputs: list[tuple[str, Path | None]]) -> Any:
    """The outputs asked for, checked before any work: a folder, or a file that is one of
    the ``inputs`` (or another output), is a usage error; nothing is written then."""
    from ..finish import Outputs

    for name in OUTPUT_OPTIONS:
        path = getattr(args, name)
        if path is not None and path.is_dir():
            option = "--" + name.replace("_", "-")
            raise UsageError(f"argument {option}: {str(path)!r} is a folder, not a file")
    if args.baseline is not None and args.baseline.is_dir():
        raise UsageError(f"argument --baseline: {str(args.baseline)!r} is a folder, not a file")
    _check_overwrites(args, inputs, [("--baseline", args.baseline)])
    return Outputs(args.report, args.markdown, args.html, args.junit_xml)


def _check_overwrites(
    args: argparse.Namespace,
    inputs: list[tuple[str, Path | None]],
    baselines: list[tuple[str, Path | None]],
) -> None:
    """A usage error when an output would overwrite one of the ``inputs`` or ``baselines``
    (which are outputs too under --update-baseline), or another output."""
    from .._internal.io import overwrite_problem

    written = [("--" + n.replace("_", "-"), getattr(args, n)) for n in OUTPUT_OPTIONS]
    records: list[Path | None] = []
    if args.update_baseline is None:
        inputs = [*inputs, *baselines]
    else:
        written += baselines
        records = [path for _, path in baselines]
    problem = overwrite_problem(written, inputs, records)
    if problem is not None:
        raise UsageError(problem)
    from ..shards import partial_report_of

    given = {path.resolve() for _, path in inputs if path is not None}
    for option, path in written:
        if path is not None and path.resolve() not in given:
            shard = partial_report_of(path)
            if shard is not None:
                fix = "give it as a PARTIAL, or " if args.command_name == "combine" else ""
                raise UsageError(
                    f"{option} {relative(path)} is a shard's partial report ({shard}), not one "
                    f"given to {args.command_name}: writing it would overwrite it; {fix}write "
                    "the output to another path"
                )


#: the offline commands' output options (argparse dests)
OUTPUT_OPTIONS = ("report", "markdown", "html", "junit_xml")


def _refuse(
    args: argparse.Namespace,
    outputs: Any,
    message: str,
    named: tuple[Sequence[Path], Sequence[Path]] = ((), ()),
) -> int:
    """Inputs that cannot be gated: the outputs say why (as after a pytest usage error), and
    so does stderr; exit status 2. ``named``: the golden sets and other files the inputs
    name, which the outputs do not overwrite (eval's golden set is its argument)."""
    from ..finish import refused

    start = Path.cwd()
    goldens, others = named
    golden = getattr(args, "golden", None)  # eval's: its corpus is not overwritten either
    goldens = [*goldens, *([golden] if isinstance(golden, Path) else [])]
    written = refused(outputs, message, root=start, start=start, goldens=goldens, others=others)
    for problem in written:
        print(f"pytest-retrieval {args.command_name}: {problem.message}", file=sys.stderr)
    print(f"pytest-retrieval {args.command_name}: error: {message}", file=sys.stderr)
    return 2


def _gate_offline(
    args: argparse.Namespace,
    wholes: Sequence[Any],
    outputs: Any,
    note: str = "",
    unrun: Mapping[str, Sequence[str]] | None = None,
) -> int:
    """Gate the wholes (baseline comparison, A/B, verdict), record the baseline when asked,
    write the outputs and print the summary; the exit status of the verdict."""
    from dataclasses import replace

    from ..finish import gate, record, summary, write_outputs

    start = Path.cwd()
    try:
        gated = gate(wholes, recording=args.update_baseline is not None)
    except ConfigError as exc:  # a baseline file that does not read: its fix in our words
        return _refuse(args, outputs, str(exc).replace(PYTEST_UPDATE, "--update-baseline"))
    if note:
        gated.notes.append(note)
    if args.update_baseline is not None:
        force = args.update_baseline == "force"
        record(gated, wholes, force=force, root=start, unrun=unrun)
    problems = write_outputs(
        replace(outputs, cases=tuple(w.nodeid for w in wholes)),
        gated.results,
        gated.verdict,
        root=start,
        start=start,
        groups=gated.groups,
        baselines=lambda: gated.found,
    )
    gated.reasons += problems
    verdict = gated.verdict
    for line in summary(gated, verdict, verbose=args.verbose, report=outputs.report):
        print(line)
    return 0 if verdict.passed else 1
