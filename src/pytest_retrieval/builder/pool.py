"""``pytest-retrieval pool``: judge the holes of a golden set into a review file.

For each golden query, the union of the top k of one or more ``--retrieval-report`` files
(several retrievers, or versions of one) is pooled, as TREC does; every pooled document the
golden set has not judged is graded 0-3 by the LLM judge (with the query's criteria) and
becomes an ``add`` proposal, grade 0 included (a judged-not-relevant label is information).
With ``--propose-removals`` the pooled documents the golden set calls relevant are graded
too, and those the judge calls not relevant (grade 0, confidence >= 0.8 or none given)
become ``remove`` proposals.

Decisions (the rules the tests hold):

- document text: ``--corpus``, else the golden set's ``corpus`` setting, else the text the
  report stored for the hit (cut to 200 characters by the report; the summary says how many
  were judged on such a cut). A hit with no text anywhere is skipped and listed.
- budget, deadline, coverage: coverage is the share of the pooled pairs to judge that the
  judge graded, a pair without text counting as not graded. Below ``--min-coverage`` pool
  fails (exit 1) and writes nothing: before any call when too many pairs have no text (the
  fix: ``--corpus``), else after judging; every answer it got is in the judge's cache, so
  running it again (with a larger budget, later, or without ``--cache-only``) pays only for
  the rest. Above the coverage, the ungraded pairs are left out of the file and counted; a
  later run adds them.
- resumable: an existing ``-o`` file is read first; its decided proposals are kept as they
  are (not judged again) while they still apply to the golden set, and undecided ones are
  replaced by this run's. Decisions are never dropped silently: the summary counts those
  that no longer apply (their document was labelled since, or its label changed).
- Batch API: ``--batch-submit STATE`` sends the pairs not in the cache as Batch API jobs and
  writes the state file of ``judge-batch``; ``pytest-retrieval judge-batch collect STATE``
  stores the answers in the cache; the same ``pool`` command then runs from the cache.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.json import JsonProblem, loads
from ..errors import InputError, JudgeError, UsageError
from .review_file import Proposal, Review, ReviewFileError, read_review, write_review

if TYPE_CHECKING:
    from ..golden import GoldenQuery, GoldenSet
    from ..judge import Judge, JudgePair

#: a remove proposal needs the judge this sure that a golden-relevant document is not
REMOVE_CONFIDENCE = 0.8
#: hits listed by id in the summary when they have no text (the rest are counted)
LISTED = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Golden set, reports, output, depth, removals, corpus, Batch API and the judge's options."""
    from ..settings import add_judge_arguments
    from ..validators import positive_int

    parser.add_argument("golden", type=Path, metavar="GOLDEN", help="the golden set")
    parser.add_argument(
        "reports",
        type=Path,
        nargs="+",
        metavar="REPORT",
        help="--retrieval-report JSON files (every evaluation of this golden set is pooled)",
    )
    parser.add_argument(
        "-o", "--output", type=Path, required=True, help="the review file (resumed if it exists)"
    )
    parser.add_argument(
        "--k", type=positive_int, default=10, help="pool each run's top k (default 10)"
    )
    parser.add_argument(
        "--propose-removals",
        action="store_true",
        help="also judge pooled documents the golden set calls relevant, and propose "
        f"removing those the judge grades 0 (confidence >= {REMOVE_CONFIDENCE})",
    )
    parser.add_argument(
        "--corpus", type=Path, default=None, help="doc texts (default: the golden set's corpus)"
    )
    parser.add_argument(
        "--batch-submit",
        type=Path,
        default=None,
        metavar="STATE",
        help="send the uncached pairs through the Batch API and write its state file; then "
        "'pytest-retrieval judge-batch collect STATE' and run this pool command again",
    )
    add_judge_arguments(parser)


# --------------------------------------------------------------------------------------------
# pooling


@dataclass
class Pooled:
    """One (query, document) of the pool: its best rank and where it came from."""

    query: GoldenQuery
    doc_id: str
    kind: str
    rank: int
    sources: list[str] = field(default_factory=list)
    report_text: str | None = None  # the hit's text as a report stored it (cut)


@dataclass
class Pool:
    """The pooled pairs in golden order, plus what the reports said about themselves."""

    items: list[Pooled]
    evaluations: int
    left_out: list[str]  # notes on evaluations of other golden sets


def read_report(path: Path) -> list[Mapping[str, Any]]:
    """The evaluations of a ``--retrieval-report`` file; InputError naming the fix."""

    try:
        data = loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the report ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a JSON report (not UTF-8 text)") from None
    except JsonProblem as exc:
        what = f"not JSON ({exc.where})" if exc.problem.startswith("invalid JSON") else str(exc)
        raise InputError(
            f"{path}: {what}; give a report written by pytest --retrieval-report"
        ) from None
    evaluations = data.get("evaluations") if isinstance(data, dict) else None
    if not isinstance(evaluations, list):
        raise InputError(
            f"{path}: not a pytest-retrieval report (no 'evaluations' list); give a file "
            "written by pytest --retrieval-report"
        )
    return [e for e in evaluations if isinstance(e, Mapping)]


def pool_reports(
    golden: GoldenSet,
    reports: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    k: int,
    removals: bool,
) -> Pool:
    """The union of each evaluation's top ``k`` per golden query: unjudged documents as
    ``add``, with ``removals`` judged-relevant ones as ``remove``. Evaluations of another
    golden set (by name) are left out with a note; a query the golden set lacks, or whose
    text differs, is an error (the report was made for another version of the set)."""

    by_id = {q.id: q for q in golden.queries}
    found: dict[tuple[str, str], Pooled] = {}
    left_out: list[str] = []
    used = 0
    for label, evaluations in reports:
        for number, evaluation in enumerate(evaluations, start=1):
            try:
                name = evaluation["golden"]["name"]
                retriever = str(evaluation["retriever"])
                queries = evaluation["queries"]
            except (KeyError, TypeError):
                raise InputError(
                    f"{label}: evaluation {number} is not a pytest-retrieval report entry "
                    "(no golden name, retriever or queries)"
                ) from None
            if name != golden.name:
                left_out.append(
                    f"{label}: evaluation {number} ({retriever}) is of golden set {name!r}, "
                    f"not {golden.name!r}: left out"
                )
                continue
            used += 1
            source = f"{label}:{retriever}"
            for entry in queries:
                _pool_query(label, source, entry, by_id, k, removals, found)
    order = {q.id: i for i, q in enumerate(golden.queries)}
    items = sorted(
        found.values(),
        key=lambda p: (order[p.query.id], p.kind != "add", p.rank, p.doc_id),
    )
    return Pool(items, used, left_out)


def _pool_query(
    label: str,
    source: str,
    entry: Mapping[str, Any],
    by_id: Mapping[str, GoldenQuery],
    k: int,
    removals: bool,
    found: dict[tuple[str, str], Pooled],
) -> None:
    query_id = str(entry.get("id"))
    query = by_id.get(query_id)
    if query is None:
        raise InputError(
            f"{label}: query {query_id!r} is not in the golden set; pool reports made with "
            "this golden set (or pass the golden set they were made with)"
        )
    if entry.get("query") != query.query:
        raise InputError(
            f"{label}: query {query_id!r} reads {entry.get('query')!r} in the report but "
            f"{query.query!r} in the golden set; run the retriever again on this golden set"
        )
    texts = entry.get("texts") or {}
    for rank, doc in enumerate(entry.get("returned") or [], start=1):
        if rank > k:
            break
        doc_id = str(doc)
        current = query.relevant.get(doc_id)
        if current is None:
            kind = "add"
        elif removals and current >= 1:
            kind = "remove"
        else:
            continue
        item = found.get((query_id, doc_id))
        if item is None:
            item = found[(query_id, doc_id)] = Pooled(query, doc_id, kind, rank)
        item.rank = min(item.rank, rank)
        if source not in item.sources:
            item.sources.append(source)
        text = texts.get(doc_id) if isinstance(texts, Mapping) else None
        if item.report_text is None and isinstance(text, str) and text:
            item.report_text = text


# --------------------------------------------------------------------------------------------
# the command


def run(args: argparse.Namespace) -> int:
    """Pool, judge, and write (or resume) the review file; or submit a Batch API job."""
    from ..golden import load_golden

    golden = load_golden(args.golden, require_relevant=False)
    reports = [(str(path), read_report(path)) for path in args.reports]
    pool = pool_reports(golden, reports, args.k, args.propose_removals)
    for note in pool.left_out:
        print(note, file=sys.stderr)
    if not pool.evaluations:
        raise InputError(
            f"no evaluation of golden set {golden.name!r} in "
            f"{', '.join(str(p) for p in args.reports)}; pool reports made with {args.golden}"
        )
    previous = _previous(args.output, golden)
    kept, stale = _kept_decisions(previous, golden)
    corpus = _corpus(args, golden)
    todo, texts, no_text, cut = _to_judge(pool.items, kept, corpus)
    asked = len(todo) + len(no_text)
    if asked and len(todo) / asked < args.min_coverage:
        raise InputError(
            f"{len(no_text)} of the {asked} pairs to judge have no text ({_listed(no_text)}), "
            f"so at most {len(todo) / asked:.0%} could be graded, below --min-coverage "
            f"{args.min_coverage:.0%}; nothing judged or written to {args.output}. "
            f"{_add_texts(args.corpus or golden.corpus, 'their documents', capital=True)} "
            "(or a lower --min-coverage to skip them)"
        )
    judge = _judge(args)
    pairs = [_pair(item, texts[i]) for i, item in enumerate(todo)]
    if args.batch_submit is not None:
        return _submit(args, judge, pairs)
    verdicts = judge.judge(pairs)
    graded = sum(1 for v in verdicts if v.error is None)
    coverage = graded / asked if asked else 1.0
    if coverage < args.min_coverage:
        raise JudgeError(_not_covered(args, judge, graded, asked, len(no_text)))
    fresh: list[Proposal] = []
    ungraded = 0
    for item, text, verdict in zip(todo, texts, verdicts, strict=True):
        if verdict.error is not None or verdict.grade is None:
            ungraded += 1
            continue
        proposal = _proposal(item, text, verdict.grade, verdict.reason, verdict.confidence)
        if proposal is not None:
            fresh.append(proposal)
    proposals = _merge(golden, kept, fresh)
    header = _header(args, golden, judge, previous)
    try:
        write_review(args.output, header, proposals)
    except OSError as exc:
        raise InputError(f"cannot write {args.output} ({exc.strerror or exc})") from None
    _print_summary(
        args,
        pool,
        proposals,
        judge,
        len(kept),
        stale,
        ungraded,
        no_text,
        cut,
        len(pairs),
        args.corpus or golden.corpus,
    )
    return 0


def _not_covered(
    args: argparse.Namespace, judge: Judge, graded: int, asked: int, no_text: int
) -> str:
    """Why coverage fell short, in this command's option names, and the fix."""
    from .synth import cli_words

    why = f" ({cli_words(judge.stopped)})" if judge.stopped else ""
    causes = "; ".join(f"{cli_words(c)} ({n})" for c, n in judge.causes.most_common(3))
    skipped = f", {no_text} without text" if no_text else ""
    fix = (
        "run pool again without --cache-only to ask the judge for the rest"
        if args.cache_only
        else "run pool again (a larger --max-calls/--deadline, or later) to judge only the rest"
    )
    return (
        f"the judge graded {graded} of {asked} pairs{skipped} ({graded / asked:.0%}, below "
        f"--min-coverage {args.min_coverage:.0%}){why}{': ' + causes if causes else ''}; "
        f"nothing written to {args.output}. {_rerun(graded, fix)}"
    )


def _rerun(graded: int, fix: str) -> str:
    """The fix, after what a rerun reuses: the answers already got (none: the fix alone)."""
    if not graded:
        return fix[0].upper() + fix[1:]
    return f"The {'answer is' if graded == 1 else f'{graded} answers are'} cached: {fix}"


def _add_texts(path: str | Path | None, what: str, *, capital: bool = False) -> str:
    """Where missing texts go: the corpus file in use (--corpus, else the golden set's),
    else ``--corpus``."""
    text = f"add {what} to {path}" if path is not None else f"pass --corpus with {what}"
    return text[0].upper() + text[1:] if capital else text


def _listed(names: Sequence[str]) -> str:
    """The first few names, then a count."""
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more


def _previous(path: Path, golden: GoldenSet) -> Review | None:
    """The review file to resume, checked against the golden set (None: a new file)."""
    if not path.exists():
        return None
    if path.is_dir():
        raise InputError(f"{path} is a folder; give -o a file name such as review.jsonl")
    try:
        review = read_review(path)
    except ReviewFileError as exc:
        raise InputError(
            f"{exc} (pool resumes an existing -o review file; give another -o to start anew)"
        ) from None
    problems = mismatches(review, golden)
    if problems:
        raise InputError(
            f"{path} was made for another golden set than {golden.source}: "
            + "; ".join(problems)
            + "; give another -o to start a new review file"
        )
    return review


def mismatches(review: Review, golden: GoldenSet, limit: int = LISTED) -> list[str]:
    """One line per query of ``review`` that ``golden`` lacks or words differently (at most
    ``limit``, then a count): a review file belongs to one golden set."""
    by_id = {q.id: q for q in golden.queries}
    problems: list[str] = []
    seen: set[str] = set()
    for proposal in review.proposals:
        if proposal.query_id in seen:
            continue
        seen.add(proposal.query_id)
        query = by_id.get(proposal.query_id)
        if query is None:
            problems.append(f"query {proposal.query_id!r} is not in the golden set")
        elif query.query != proposal.query:
            problems.append(
                f"query {proposal.query_id!r} reads {proposal.query!r} in the review file but "
                f"{query.query!r} in the golden set"
            )
    if len(problems) > limit:
        problems[limit:] = [f"and {len(problems) - limit} more queries"]
    return problems


def _kept_decisions(previous: Review | None, golden: GoldenSet) -> tuple[list[Proposal], int]:
    """The decided proposals of the previous file that still apply (the document still
    unjudged for ``add``, its golden grade unchanged for ``remove``), and how many do not."""
    if previous is None:
        return [], 0
    by_id = {q.id: q for q in golden.queries}
    kept: list[Proposal] = []
    stale = 0
    for proposal in previous.proposals:
        if proposal.decision is None:
            continue
        current = by_id[proposal.query_id].relevant.get(proposal.doc_id)
        if current == proposal.current:
            kept.append(proposal)
        else:
            stale += 1
    return kept, stale


def _corpus(args: argparse.Namespace, golden: GoldenSet) -> Mapping[str, str]:
    from ..golden import corpus_file, load_corpus

    path = args.corpus or (None if golden.corpus is None else corpus_file(golden))
    return {} if path is None else load_corpus(path)


def _to_judge(
    items: Sequence[Pooled], kept: Iterable[Proposal], corpus: Mapping[str, str]
) -> tuple[list[Pooled], list[str], list[str], int]:
    """The pooled items to judge (not already decided) with their texts; the ``query/doc``
    of those without text; how many texts are a report's cut."""
    decided = {(p.query_id, p.doc_id) for p in kept}
    todo: list[Pooled] = []
    texts: list[str] = []
    no_text: list[str] = []
    cut = 0
    for item in items:
        if (item.query.id, item.doc_id) in decided:
            continue
        text = corpus.get(item.doc_id)
        if text is None and item.report_text is not None:
            text = item.report_text
            cut += 1
        if text is None:
            no_text.append(f"{item.query.id}/{item.doc_id}")
            continue
        todo.append(item)
        texts.append(text)
    return todo, texts, no_text, cut


def _judge(args: argparse.Namespace) -> Judge:
    from ..judge import judge_from_args

    return judge_from_args(args, scale="0-3")


def _pair(item: Pooled, text: str) -> JudgePair:
    from ..judge import JudgePair

    return JudgePair(item.query.query, item.query.criteria, item.doc_id, text)


def _proposal(
    item: Pooled, text: str, grade: int, reason: str, confidence: float | None
) -> Proposal | None:
    """The proposal a verdict makes: every ``add``; a ``remove`` only when the judge is sure
    the labelled document is not relevant."""
    if item.kind == "remove" and not (
        grade == 0 and (confidence is None or confidence >= REMOVE_CONFIDENCE)
    ):
        return None
    current = None if item.kind == "add" else item.query.relevant[item.doc_id]
    return Proposal(
        query_id=item.query.id,
        query=item.query.query,
        doc_id=item.doc_id,
        text=text,
        kind=item.kind,
        current=current,
        grade=grade,
        reason=reason,
        confidence=confidence,
        rank=item.rank,
        sources=tuple(item.sources),
        decision=None,
    )


def _merge(
    golden: GoldenSet, kept: Sequence[Proposal], fresh: Sequence[Proposal]
) -> list[Proposal]:
    """Kept decisions and fresh proposals in golden order, then adds before removals, rank."""
    order = {q.id: i for i, q in enumerate(golden.queries)}
    merged = {p.key: p for p in fresh}
    merged.update({p.key: p for p in kept})
    return sorted(
        merged.values(), key=lambda p: (order[p.query_id], p.kind != "add", p.rank, p.doc_id)
    )


def _header(
    args: argparse.Namespace, golden: GoldenSet, judge: Judge, previous: Review | None
) -> dict[str, Any]:
    from .._internal.io import now

    created = previous.header.get("created") if previous is not None else None
    if not isinstance(created, str):
        created = now()
    return {
        "golden": str(args.golden),
        "golden_fingerprint": golden.fingerprint,
        "k": args.k,
        "reports": [str(p) for p in args.reports],
        "judge": {
            "model": judge.config.model,
            "prompt_version": judge.prompt.version,
            "scale": judge.config.scale,
        },
        "created": created,
    }


def _submit(args: argparse.Namespace, judge: Judge, pairs: Sequence[JudgePair]) -> int:
    """Send the uncached pairs as Batch API jobs; the state file is ``judge-batch``'s."""
    from urllib.parse import urlsplit

    from ..judge.batch import BatchAPIError, save_state, submit

    if args.base_url and urlsplit(args.base_url).password:
        raise UsageError(
            "--base-url has a password in it, and the state file would keep it: give the "
            "credentials as OPENAI_API_KEY and the URL without them"
        )
    try:
        submitted = submit(judge, pairs)
    except BatchAPIError as exc:
        raise JudgeError(f"Batch API: {exc}") from None
    except ValueError as exc:
        raise JudgeError(str(exc)) from None
    if not submitted.batch_ids:
        print(f"nothing to submit: all {submitted.cached} pairs are in the cache; run pool")
        return 0
    settings = {
        "model": judge.config.model,
        "scale": judge.config.scale,
        "min_score": judge.config.min_score,
        "base_url": args.base_url,
        "prompt": str(args.prompt) if args.prompt else None,
        "text_budget": judge.config.text_budget_chars,
        "cache": str(args.cache),
        "samples": judge.config.samples,
    }
    try:
        save_state(args.batch_submit, submitted, {"judge": settings})
    except OSError as exc:
        raise InputError(
            f"cannot write {args.batch_submit} ({exc.strerror or exc}); the batches were "
            f"submitted: {', '.join(submitted.batch_ids)}"
        ) from None
    print(
        f"submitted {submitted.requests} pairs ({submitted.cached} already cached) in "
        f"{len(submitted.batch_ids)} batch(es): {', '.join(submitted.batch_ids)}; next: "
        f"pytest-retrieval judge-batch collect {args.batch_submit}, then run this pool "
        "command again (it judges from the cache)"
    )
    if submitted.error is not None:
        print(
            f"pytest-retrieval pool: {submitted.error}; {submitted.unsent} pairs not sent: "
            "collect, then submit again to send them",
            file=sys.stderr,
        )
        return 1
    return 0


def _print_summary(
    args: argparse.Namespace,
    pool: Pool,
    proposals: Sequence[Proposal],
    judge: Judge,
    kept: int,
    stale: int,
    ungraded: int,
    no_text: Sequence[str],
    cut: int,
    asked: int,
    corpus: str | Path | None,
) -> None:
    adds = [p for p in proposals if p.kind == "add"]
    removes = len(proposals) - len(adds)
    relevant = sum(1 for p in adds if p.grade >= 1)
    undecided = sum(1 for p in proposals if p.decision is None)
    print(
        f"pooled {len(pool.items)} unjudged or disputed hits from {pool.evaluations} "
        f"evaluation(s), top {args.k}; judged {asked}"
    )
    print(
        f"wrote {args.output}: {len(adds)} proposed additions ({relevant} graded relevant, "
        f"{len(adds) - relevant} graded 0), {removes} proposed removals; "
        f"{undecided} to review, {kept} decisions kept"
    )
    summary = judge.summary()
    cost = summary["estimated_cost_usd"]
    print(
        f"judge {summary['model']}: {summary['calls']} calls, {summary['cache_hits']} from "
        f"the cache" + ("" if cost is None else f", about ${cost:.4f}")
    )
    if stale:
        print(f"{stale} earlier decisions dropped: the golden set's labels of those changed since")
    if ungraded:
        print(f"{ungraded} pairs the judge did not grade were left out; run pool again later")
    if cut:
        print(
            f"{cut} documents judged on the report's cut text: "
            f"{_add_texts(corpus, 'their full text')}"
        )
    if no_text:
        print(
            f"{len(no_text)} hits skipped, no text for them ({_listed(no_text)}): "
            f"{_add_texts(corpus, 'their documents')}"
        )
    print(f"next: pytest-retrieval review {args.output}")
