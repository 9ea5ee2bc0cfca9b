"""``pytest-retrieval judge-batch``: a report's hits graded through OpenAI's Batch API, into
the judge cache."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, UsageError
from .common import check_inputs, json_object, output_file, report_data

if TYPE_CHECKING:
    pass


def add_arguments(sub: argparse.ArgumentParser) -> None:
    sub.description = (
        "submit: send every uncached top-k hit of a --retrieval-report file "
        "(with its query's criteria) as Batch API jobs, split at the per-batch request and "
        "file-size limits, and write a state file listing them; collect: store the verdicts "
        "of every batch that has ended in the judge cache, including the partial output of a "
        "batch that expired or was cancelled, and count what failed or never ran. Submitting "
        "the same report again sends only the pairs not in the cache. Then run pytest with "
        "--retrieval-judge (--retrieval-judge-cache-only to make sure nothing else is "
        "called), with the same model, scale and cache folder."
    )
    sub.epilog = (
        "exit status: 0 done (every batch completed; requests that failed inside a "
        "completed batch are counted, not fatal); 1 a batch failed, expired or was "
        "cancelled (submit again for the missing pairs), an unreadable file, or an API error "
        "worth retrying (429, 5xx, no connection); 2 bad arguments or an API error that "
        "repeating cannot fix (400, 401, 403, 404, 413, 422); 3 collect: a batch is still "
        "running (validating, in_progress, finalizing, cancelling), collect again later."
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
        raise InputError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from ..judge.batch import BatchAPIError

    check_inputs(args, ["source", "prompt"], ["corpus"])
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
    output_file(args.state, force=True, example="state.json")  # checked before any batch
    report = report_data(args.source)
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
        raise InputError(f"{args.source}: not a pytest-retrieval report ({exc!r})") from None
    try:
        submitted = submit(_batch_judge(settings), pairs)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not submitted.batch_ids:
        print(f"nothing to submit: all {submitted.cached} hits are in the cache")
        return 0
    try:
        args.state.parent.mkdir(parents=True, exist_ok=True)
        save_state(args.state, submitted, {"report": str(args.source), "judge": settings})
    except OSError as exc:
        raise InputError(
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

    state = json_object(args.source)
    if isinstance(state.get("evaluations"), list):
        raise InputError(f"{args.source} is a report; collect reads the state file of submit -o")
    try:
        ids = batch_ids(state)
        judge = _batch_judge(state["judge"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{args.source}: not a judge-batch state file ({exc})") from None
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
                raise InputError(f"{source} names no corpus; pass --corpus")
            corpus.update(load_corpus(corpus_file(golden)))
        return corpus
    except GoldenError as exc:
        raise InputError(str(exc)) from None
