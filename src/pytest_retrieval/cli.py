"""``python -m pytest_retrieval`` / ``pytest-retrieval``: golden-set and report tools.

Subcommands: ``validate`` (schema and sanity report of golden sets), ``convert`` (BEIR,
TREC qrels or CSV to golden JSON), ``diff`` (the gate's paired comparison between two JSON
reports), ``show`` (a baseline file, readable), ``judge-batch`` (fill the judge's cache
through OpenAI's Batch API). Exit status: 0 fine, 1 a problem found
(invalid golden set, a regression, an unreadable file), 2 bad command-line arguments.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .validators import alpha_arg, positive_int

Command = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A problem to report in one line (no traceback), exit status 1."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    command: Command = args.command
    try:
        return command(args)
    except CliError as exc:
        print(f"pytest-retrieval {args.command_name}: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pytest-retrieval",
        description="Golden-set and report tools for pytest-retrieval.",
    )
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    for add in (_add_validate, _add_convert, _add_diff, _add_show, _add_judge_batch):
        add(commands)
    return parser


def _command(commands: Any, name: str, run: Command, **options: Any) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = commands.add_parser(name, **options)
    sub.set_defaults(command=run, command_name=name)
    return sub


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
    sub.add_argument("golden", nargs="+", type=Path, help="golden file or BEIR folder")
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
    from .golden import GoldenError, load_golden
    from .sanity import corpus_check, sanity, sanity_text

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
    sub.add_argument("source", type=Path, help="BEIR folder, qrels file or .csv")
    sub.add_argument("-o", "--output", required=True, help="output .json, or - for stdout")
    sub.add_argument("--queries", type=Path, help="TREC queries file (QUERY_ID<TAB>TEXT)")
    sub.add_argument("--name", help="golden set name (default: from the source)")
    sub.add_argument("--k", type=int, default=None, help="default cutoff to store")
    sub.add_argument("--force", action="store_true", help="overwrite an existing output")


def _convert(args: argparse.Namespace) -> int:
    from .golden import GoldenError, load_golden, load_trec

    source: Path = args.source
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
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    output = Path(args.output)
    if output.exists() and not args.force:
        raise CliError(f"{output} exists; pass --force to overwrite it")
    from ._io import atomic_write

    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(output, text)
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


def _golden_from_csv(path: Path) -> Any:
    """Rows -> golden entries, validated by the same loader as every other format."""
    import tempfile

    from .golden import GoldenError, load_golden

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
        "one-sided test and Holm correction as the baseline gate. Exit 1 on a regression.",
    )
    sub.add_argument("report_a", type=Path, metavar="REPORT_A", help="the reference run")
    sub.add_argument("report_b", type=Path, metavar="REPORT_B", help="the run to judge")
    sub.add_argument(
        "--max-drop",
        action="append",
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
        default=None,
        metavar="METRIC",
        help="a gated metric (repeatable); default: the gated set REPORT_B was run with",
    )


def _read_report(path: Path) -> list[Any]:
    from .results import EvaluationResult

    data = _json_object(path)
    if not isinstance(data.get("evaluations"), list):
        raise CliError(f"{path}: not a pytest-retrieval report (no 'evaluations' list)")
    try:
        return [EvaluationResult.from_dict(entry) for entry in data["evaluations"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CliError(f"{path}: a malformed evaluation entry ({exc!r})") from None


def _counterpart(result: Any, earlier: Sequence[Any], path: Path) -> Any:
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

    from .baseline import entry_key
    from .compare import compare_to_baseline, entry_from_result
    from .gate import AllowanceError, decide, merge_allowances, parse_allowance_assignment
    from .metrics import MetricNameError, parse_metric
    from .render.terminal import regression_lines

    try:
        allowances = merge_allowances(
            [parse_allowance_assignment(text, "--max-drop") for text in args.max_drop]
        )
        gate = None if args.gate is None else tuple(parse_metric(m).name for m in args.gate)
    except (AllowanceError, MetricNameError) as exc:
        raise CliError(str(exc)) from None
    earlier = _read_report(args.report_a)
    after = _read_report(args.report_b)
    failed = compared = 0
    for result in after:
        key = entry_key(result.golden_name, result.retriever_id)
        reference = _counterpart(result, earlier, args.report_a)
        if reference is None:
            print(f"{key}: not in {args.report_a}; skipped")
            continue
        if gate is not None:
            result = replace(result, gated=tuple(m for m in result.metrics if m in gate))
        entry = entry_from_result(reference, {}, "")
        comparison = compare_to_baseline(
            result, entry, allowances, alpha=args.alpha, reference=f"report {args.report_a}"
        )
        result = decide(replace(result, comparison=comparison, baseline_note=""))
        compared += 1
        print(f"{key}: {len(result.queries)} queries")
        for line in regression_lines(result, comparison):
            print(line)
        print(f"  verdict: {result.verdict.word}")
        for reason in result.verdict.reasons:
            print(f"    {reason.kind}: {reason.message}")
        failed += not result.verdict.passed
    if compared == 0:
        raise CliError(f"no evaluation of {args.report_b} is in {args.report_a}")
    print(f"{failed} of {compared} evaluations failed")
    return 1 if failed else 0


# ---------------------------------------------------------------------------- show


def _add_show(commands: Any) -> None:
    sub = _command(commands, "show", _show, help="print a baseline file readably")
    sub.add_argument("baseline", type=Path, help="a <golden>.baseline.json file")


def _show(args: argparse.Namespace) -> int:
    from .baseline import BaselineError, read
    from .metrics import parse_metric
    from .render.text import ci, num, text_table

    if not args.baseline.is_file():
        raise CliError(f"{args.baseline}: no such baseline file")
    try:
        entries = read(args.baseline)
    except BaselineError as exc:
        raise CliError(str(exc)) from None
    print(f"{args.baseline}: {len(entries)} entries")
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


# ---------------------------------------------------------------------------- judge-batch

DEFAULT_JUDGE_CACHE = Path(".pytest_cache") / "d" / "retrieval-judge"


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
    sub.add_argument("source", type=Path, help="submit: a JSON report; collect: the state file")
    sub.add_argument("-o", "--state", type=Path, help="submit: where to write the state file")
    sub.add_argument("--corpus", type=Path, help="doc texts (default: the golden set's corpus)")
    sub.add_argument("--model", default="gpt-4.1-mini")
    sub.add_argument("--scale", choices=["binary", "0-3"], default="binary")
    sub.add_argument("--min-score", type=float, default=0.5)
    sub.add_argument("--base-url", default=None)
    sub.add_argument("--prompt", type=Path, default=None)
    sub.add_argument("--text-budget", type=int, default=4000)
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
    from .judge import Judge, JudgeConfig, JudgeConfigError

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
    from .judge.batch import BatchAPIError

    try:
        if args.action == "collect":
            return _batch_collect(args)
        return _batch_submit(args)
    except BatchAPIError as exc:
        print(f"pytest-retrieval judge-batch: {exc}", file=sys.stderr)
        return 2 if exc.usage_like else 1


def _batch_submit(args: argparse.Namespace) -> int:
    from .judge.batch import pairs_from_report, save_state, submit

    if args.state is None:
        raise CliError("submit needs -o STATE.json (where to remember the batch ids)")
    report = _json_object(args.source)
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
    save_state(args.state, submitted, {"report": str(args.source), "judge": settings})
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
    from .judge.batch import batch_ids, collect

    state = _json_object(args.source)
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
        raise CliError(
            "--base-url has a password in it, and the state file would keep it: give the "
            "credentials as OPENAI_API_KEY and the URL without them"
        )
    return url


def _json_object(path: Path) -> dict[str, Any]:
    """A JSON file holding an object (a report, a batch state), or one clear CliError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"{path}: cannot read it ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise CliError(f"{path}: not JSON (line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise CliError(f"{path}: not a JSON object")
    return data


def _batch_corpus(args: argparse.Namespace, report: dict[str, Any]) -> dict[str, str]:
    from .golden import GoldenError, load_corpus, load_golden

    try:
        if args.corpus is not None:
            return load_corpus(args.corpus)
        sources = {e["golden"]["source"] for e in report.get("evaluations", [])}
        corpus: dict[str, str] = {}
        for source in sources:
            golden = load_golden(source, require_relevant=False)
            if golden.corpus is None:
                raise CliError(f"{source} names no corpus; pass --corpus")
            corpus.update(load_corpus(golden.corpus))
        return corpus
    except GoldenError as exc:
        raise CliError(str(exc)) from None
