"""``pytest-retrieval synth``: a golden set written by an LLM from the user's own corpus.

The pipeline, each step counted in the summary (printed, and written beside the output as
``<output>.synth.json``, since a golden file has no room for it):

1. **Sample.** Documents (empty ones left out) in a seeded order; with ``--stratify-by`` the
   order is stratified at every prefix (each stratum's documents are spread evenly through
   it), so any number taken from the front covers the strata in proportion (a field no
   document has is a usage error; the summary counts each stratum's documents, sampled
   documents and output queries). A corpus of empty documents only is an error. Documents
   already the ``source_doc`` of a ``--golden`` query are left out (counted). Each document
   gets ``--per-doc`` styles, rotated through ``--styles`` within its stratum (from a seeded
   offset), so the styles stay balanced in every stratum.
2. **Write** one query per (document, style) through the judge's client
   (:meth:`~pytest_retrieval.judge.Judge.complete`): its cache, retries, budgets, deadline
   and Batch API. The cache key holds the model, ``SYNTH_PROMPT_VERSION``, the document as
   sent, the style and the seed.
3. **Near-duplicates** are dropped: two queries whose sets of content words (lower-cased
   letters and digits, stop words left out) have a Jaccard similarity of at least 0.8 are
   near-duplicates; the later one goes (against ``--golden EXISTING`` too). Before the judge,
   so no call is paid for a duplicate.
4. **Answerability**: the judge grades (query, source document) on the 0-3 scale; a query
   is kept when the grade is at the judge's relevance level (2) or above, and the grade is
   its judgment (``relevant = {source_doc: grade}``).
5. **Difficulty** (optional): the source document's rank for the query, from
   ``--retriever module:function`` (its top 100) or ``--difficulty-report`` (a
   ``--retrieval-report`` of a pytest run over an earlier synth output): easy = rank 1,
   medium = 2-10, hard = below 10 or not found; ``--quota`` picks the output by those shares.

Rounds: more documents are taken until enough queries survive (the pool: ``--queries``, or
``--pool``; 1.5 times ``--queries`` with ``--quota``) or the corpus runs out. A round is
sized by the keep rate of the round before (0.8 assumed at first) and grows at most twofold,
so a round that keeps little costs a few doubling rounds, not the whole corpus. The pool is,
per stratum, the first ones kept up to the stratum's share of its documents (largest
remainders; a stratum short of its share is filled from the others' next ones), so the
output is in proportion to the strata even when the filters drop more of one; unstratified,
the first ones kept.

Failure rules: when the judge covers less than ``--min-coverage`` of what a step asked (a
budget or deadline stopped it, an endpoint failed), or the corpus yields fewer queries than
asked, synth fails and writes nothing to ``-o``; every answer received is in the cache, so
running again asks only for the rest. The output has no timestamps: the same seed and a
warm cache give the same bytes, with no request made.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import math
import os
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._internal.io import relative
from .._internal.json import loads
from ..errors import InputError, JudgeError, RetrievalError, RetrieverError, UsageError
from ..settings import add_judge_arguments
from ..validators import positive_int

if TYPE_CHECKING:
    from ..judge import Judge
    from ..judge.generate import CompletionRequest
    from .corpus import Document

STYLES = ("keyword", "question", "paraphrase", "constraint")
DIFFICULTIES = ("easy", "medium", "hard")
#: near-duplicates: Jaccard similarity of the content-word sets at or above this
NEAR_DUPLICATE = 0.8
#: how deep a retriever is asked for the source document's rank
RANK_DEPTH = 100
#: sampling temperature of the query writer (variety; the cache makes reruns identical)
TEMPERATURE = 0.7
#: the pool is this many times --queries when --quota picks from it
QUOTA_POOL = 1.5
#: longest query accepted from the writer, in characters
MAX_QUERY_CHARS = 300
_STOP = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from"}
    | {"how", "in", "is", "it", "of", "on", "or", "the", "to", "what", "when", "where"}
    | {"which", "who", "why", "with"}
)
_WORD = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s+")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The corpus, the output, sampling, styles, filters, batch and judge arguments."""
    parser.description = (
        "Write a golden set's queries from a corpus with an LLM: sample documents, write "
        "queries of several styles, drop near-duplicates and queries the judge does not "
        "find answered by their document, optionally tag difficulty and keep quotas."
    )
    parser.add_argument(
        "corpus",
        type=Path,
        metavar="CORPUS",
        help="BEIR corpus.jsonl (or its folder), a .json id -> text file, or a folder of "
        "text files (ids: paths without suffix)",
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="golden JSON to write")
    parser.add_argument("--queries", type=positive_int, required=True, help="how many queries")
    parser.add_argument("--seed", type=int, default=0, help="sampling and writing seed")
    parser.add_argument(
        "--styles",
        default=",".join(STYLES),
        help=f"comma-separated, of {', '.join(STYLES)} (default: all)",
    )
    parser.add_argument(
        "--per-doc", type=positive_int, default=1, help="styles per document (default 1)"
    )
    parser.add_argument(
        "--stratify-by",
        metavar="FIELD|length|source",
        help="sample in proportion to a metadata field's values, length quartiles, or the "
        "source (the corpus file, or a folder corpus's first folder; a metadata field "
        "named 'source' is not this one: rename it)",
    )
    parser.add_argument(
        "--golden",
        type=Path,
        help="an existing golden set: no near-duplicates of its queries, and no query from a "
        "document one of its queries was written from (metadata.source_doc)",
    )
    parser.add_argument(
        "--retriever", metavar="MODULE:FUNCTION", help="ranks queries for difficulty tags"
    )
    parser.add_argument(
        "--difficulty-report",
        type=Path,
        metavar="REPORT",
        help="a --retrieval-report JSON of a run over an earlier synth output (same seed)",
    )
    parser.add_argument(
        "--quota", help="difficulty shares of the output, e.g. easy=0.3,medium=0.4,hard=0.3"
    )
    parser.add_argument(
        "--pool",
        type=positive_int,
        help="queries to write and filter before --quota picks (default: 1.5 x --queries "
        "with --quota, else --queries)",
    )
    parser.add_argument(
        "--batch",
        choices=["submit", "collect"],
        help="submit: send the next step's uncached requests through the Batch API; "
        "collect: store the answers of the batches in --batch-state in the cache",
    )
    parser.add_argument("--batch-state", type=Path, help="the batch ids' file (with --batch)")
    parser.add_argument("--force", action="store_true", help="overwrite -o if it exists")
    add_judge_arguments(parser)


# ---------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    """The command line, checked."""

    styles: tuple[str, ...]
    per_doc: int
    quota: dict[str, float] | None
    pool: int


def _settings(args: argparse.Namespace) -> Settings:
    styles = tuple(s.strip() for s in args.styles.split(",") if s.strip())
    unknown = [s for s in styles if s not in STYLES]
    if unknown or not styles:
        raise UsageError(f"--styles {args.styles!r}: use some of {', '.join(STYLES)}")
    if len(set(styles)) != len(styles):
        raise UsageError(f"--styles {args.styles!r} names a style twice")
    if args.per_doc > len(styles):
        raise UsageError(f"--per-doc {args.per_doc}: at most the {len(styles)} styles given")
    quota = None if args.quota is None else parse_quota(args.quota)
    if quota is not None and args.retriever is None and args.difficulty_report is None:
        raise UsageError("--quota needs --retriever or --difficulty-report (the ranks)")
    if args.retriever is not None and args.difficulty_report is not None:
        raise UsageError("give --retriever or --difficulty-report, not both")
    if (args.batch is None) != (args.batch_state is None):
        raise UsageError("--batch and --batch-state go together")
    pool = args.pool or (math.ceil(args.queries * QUOTA_POOL) if quota else args.queries)
    if pool < args.queries:
        raise UsageError(f"--pool {pool} is below --queries {args.queries}")
    return Settings(styles, args.per_doc, quota, pool)


def parse_quota(text: str) -> dict[str, float]:
    """``easy=0.3,medium=0.4,hard=0.3`` -> shares that add up to 1 (a level left out: 0)."""
    shares: dict[str, float] = dict.fromkeys(DIFFICULTIES, 0.0)
    for part in text.split(","):
        name, _, value = part.partition("=")
        name = name.strip()
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if name not in DIFFICULTIES or not 0 <= share <= 1:
            raise UsageError(
                f"--quota {text!r}: {part.strip()!r} is not LEVEL=SHARE (levels easy, medium, "
                "hard; shares from 0 to 1), e.g. easy=0.3,medium=0.4,hard=0.3"
            )
        shares[name] = share
    if abs(sum(shares.values()) - 1) > 1e-6:
        raise UsageError(f"--quota {text!r}: the shares add up to {sum(shares.values()):g}, not 1")
    return shares


# ---------------------------------------------------------------------------- sampling


def stratum_of(document: Document, by: str | None, length_cuts: Sequence[int]) -> str:
    """The stratum a document samples in: a metadata field's value, its length quartile,
    its source, or one stratum for all."""
    if by is None:
        return ""
    if by == "source":
        return document.source
    if by == "length":
        size = len(document.text)
        return f"q{sum(size > cut for cut in length_cuts) + 1}"
    value = document.metadata.get(by)
    return "(none)" if value is None else json.dumps(value, sort_keys=True, ensure_ascii=False)


def strata_of(documents: Sequence[Document], by: str | None) -> list[str]:
    """Each document's stratum (length quartiles cut at these documents' lengths)."""
    sizes = sorted(len(d.text) for d in documents)
    cuts = [sizes[len(sizes) * q // 4] for q in (1, 2, 3)] if sizes else []
    return [stratum_of(document, by, cuts) for document in documents]


def sample_order(documents: Sequence[Document], by: str | None, seed: int) -> list[Document]:
    """Documents in a seeded order; stratified, every prefix holds the strata in proportion
    (a document's place is (its rank in its shuffled stratum + a random offset) / stratum
    size, so a stratum's documents are spread evenly through the order)."""
    rng = random.Random(f"synth-sample-{seed}")
    strata: dict[str, list[Document]] = {}
    for document, stratum in zip(documents, strata_of(documents, by), strict=True):
        strata.setdefault(stratum, []).append(document)
    placed: list[tuple[float, int, Document]] = []
    for number, name in enumerate(sorted(strata)):
        members = strata[name]
        rng.shuffle(members)
        offset = rng.random()
        for rank, document in enumerate(members):
            placed.append(((rank + offset) / len(members), number, document))
    placed.sort(key=lambda item: (item[0], item[1]))
    return [document for _, _, document in placed]


@dataclass(frozen=True)
class Task:
    """One query to write: a document and a style, at its place in the sampling order."""

    document: Document
    style: str

    @property
    def query_id(self) -> str:
        digest = hashlib.sha256(f"{self.document.id}\n{self.style}".encode()).hexdigest()
        return f"synth-{digest[:12]}"


def check_stratify_by(documents: Sequence[Document], by: str | None, corpus: Path) -> None:
    """A metadata field no document has would put every document in one stratum, silently:
    a usage error listing the fields the documents do have."""
    if by is None or by in ("length", "source") or any(by in d.metadata for d in documents):
        return
    fields = sorted({name for d in documents for name in d.metadata})
    listed = (
        f"the documents' metadata fields: {', '.join(fields)} (or use length or source)"
        if fields
        else "the documents have no metadata fields (use length or source)"
    )
    raise UsageError(f"--stratify-by {by!r}: no document of {corpus} has it; {listed}")


def tasks_for(
    order: Sequence[Document],
    strata: Mapping[str, str],
    styles: Sequence[str],
    per_doc: int,
    seed: int,
) -> list[Task]:
    """``per_doc`` styles per document, rotated through ``styles`` within each stratum (by
    the document's rank among its stratum's documents in the order, from a seeded offset
    per stratum): the stratified order cycles through equal strata, so styles handed out by
    place in the whole order would give each stratum one style."""
    rng = random.Random(f"synth-styles-{seed}")
    offsets = {name: rng.randrange(len(styles)) for name in sorted(set(strata.values()))}
    ranks: Counter[str] = Counter()
    tasks = []
    for document in order:
        stratum = strata[document.id]
        first = offsets[stratum] + ranks[stratum] * per_doc
        ranks[stratum] += 1
        for slot in range(per_doc):
            tasks.append(Task(document, styles[(first + slot) % len(styles)]))
    return tasks


def trim(
    kept: Sequence[Candidate], n: int, strata: Mapping[str, str], shares: Mapping[str, int]
) -> list[Candidate]:
    """``n`` of the kept queries, in order: each stratum its share of ``n`` (in proportion
    to ``shares``, its documents; largest remainders), its first ones; a stratum short of
    its share is filled from the others' next ones. Unstratified: the first ``n``."""
    total = sum(shares.values())
    exact = {name: n * size / total for name, size in shares.items()}
    wanted = {name: math.floor(share) for name, share in exact.items()}
    by_remainder = sorted(sorted(shares), key=lambda name: wanted[name] - exact[name])
    for name in by_remainder[: n - sum(wanted.values())]:
        wanted[name] += 1
    taken: Counter[str] = Counter()
    chosen: set[int] = set()
    for index, candidate in enumerate(kept):
        stratum = strata[candidate.task.document.id]
        if taken[stratum] < wanted[stratum]:
            taken[stratum] += 1
            chosen.add(index)
    rest = [i for i in range(len(kept)) if i not in chosen]
    chosen.update(rest[: n - len(chosen)])
    return [kept[i] for i in sorted(chosen)]


# ---------------------------------------------------------------------------- near-duplicates


def content_words(query: str) -> frozenset[str]:
    words = frozenset(w for w in _WORD.findall(query.lower()) if w not in _STOP)
    return words or frozenset([_SPACE.sub(" ", query.lower()).strip()])


class Duplicates:
    """Queries seen so far, to tell whether a new one is a near-duplicate (content-word
    Jaccard >= NEAR_DUPLICATE), through an index from word to the queries holding it."""

    def __init__(self) -> None:
        self.words: list[frozenset[str]] = []
        self.index: dict[str, list[int]] = {}

    def add(self, query: str) -> None:
        words = content_words(query)
        for word in words:
            self.index.setdefault(word, []).append(len(self.words))
        self.words.append(words)

    def near(self, query: str) -> bool:
        words = content_words(query)
        shared: Counter[int] = Counter()
        for word in words:
            shared.update(self.index.get(word, ()))
        return any(
            common / (len(words) + len(self.words[other]) - common) >= NEAR_DUPLICATE
            for other, common in shared.items()
        )


# ---------------------------------------------------------------------------- candidates


@dataclass
class Candidate:
    task: Task
    query: str
    grade: int | None = None
    reason: str = ""
    rank: int | None = None  # the source document's rank (None: not found, or unknown)
    difficulty: str | None = None


@dataclass
class Counts:
    """What each step did (the summary)."""

    documents: int = 0
    empty_documents: int = 0
    sampled_documents: int = 0
    #: documents left out as already a ``source_doc`` of a ``--golden`` query
    golden_sources: int = 0
    asked: int = 0
    written: int = 0
    not_written: Counter[str] = field(default_factory=Counter)
    near_duplicates: int = 0
    near_duplicates_of_existing: int = 0
    graded: int = 0
    not_graded: Counter[str] = field(default_factory=Counter)
    unanswerable: int = 0
    kept: int = 0
    rounds: int = 0
    difficulty: Counter[str] = field(default_factory=Counter)
    quota_short: dict[str, int] = field(default_factory=dict)
    output: int = 0
    #: with --stratify-by: per stratum, its documents, those sampled, its output queries
    strata: dict[str, dict[str, int]] = field(default_factory=dict)


class Submitted(RetrievalError):
    """``--batch submit`` sent a step's requests: the run stops here."""


class Pipeline:
    """Rounds of writing, de-duplicating and grading until the pool is full."""

    def __init__(
        self,
        judge: Judge,
        settings: Settings,
        seed: int,
        existing: Iterable[str],
        submit: Callable[[dict[str, dict[str, Any]], str], None] | None,
    ) -> None:
        self.judge = judge
        self.settings = settings
        self.seed = seed
        self.counts = Counts()
        self.duplicates = Duplicates()
        self.existing = Duplicates()
        for query in existing:
            self.existing.add(query)
        self.submit = submit

    def run(self, tasks: Sequence[Task], target: int) -> list[Candidate]:
        """Every query kept by the rounds that took the kept ones to ``target`` (or more)."""
        pool: list[Candidate] = []
        start = 0
        size = 0
        rate: float | None = None
        while len(pool) < target and start < len(tasks):
            size = next_round(target - len(pool), rate, size)
            chunk = tasks[start : start + size]
            start += len(chunk)
            self.counts.rounds += 1
            kept = self.round(chunk)
            pool.extend(kept)
            rate = len(kept) / len(chunk)
        self.counts.sampled_documents = len({t.document.id for t in tasks[:start]})
        return pool

    def round(self, tasks: Sequence[Task]) -> list[Candidate]:
        from ..judge import JudgePair

        written = self.write(tasks)
        fresh: list[Candidate] = []
        for candidate in written:
            if self.existing.near(candidate.query):
                self.counts.near_duplicates_of_existing += 1
            elif self.duplicates.near(candidate.query):
                self.counts.near_duplicates += 1
            else:
                self.duplicates.add(candidate.query)
                fresh.append(candidate)
        pairs = [JudgePair(c.query, None, c.task.document.id, c.task.document.text) for c in fresh]
        self.send(
            {self.judge.cache_key(p): self.judge.request_body(p) for p in pairs}, "answerability"
        )
        verdicts = self.judge.judge(pairs)
        self.covered(len(pairs), sum(v.error is None for v in verdicts), "grading")
        kept = []
        for candidate, verdict in zip(fresh, verdicts, strict=True):
            if verdict.error is not None:
                self.counts.not_graded[verdict.error] += 1
                continue
            self.counts.graded += 1
            if verdict.grade is None or verdict.grade < self.judge.relevance_level:
                self.counts.unanswerable += 1
                continue
            kept.append(replace(candidate, grade=verdict.grade, reason=verdict.reason))
        self.counts.kept += len(kept)
        return kept

    def write(self, tasks: Sequence[Task]) -> list[Candidate]:
        requests = [self.request(task) for task in tasks]
        bodies = {self.judge.completion_key(r): self.judge.completion_body(r) for r in requests}
        self.send(bodies, "query writing")
        answers = self.judge.complete(requests)
        self.counts.asked += len(tasks)
        self.covered(len(tasks), sum(a.error is None for a in answers), "query writing")
        written = []
        for task, answer in zip(tasks, answers, strict=True):
            if answer.data is None:
                self.counts.not_written[answer.error or "no answer"] += 1
                continue
            self.counts.written += 1
            written.append(Candidate(task, clean_query(answer.data["query"])))
        return written

    def request(self, task: Task) -> CompletionRequest:
        from ..judge.generate import CompletionRequest
        from ..judge.prompts import SYNTH_PROMPT_VERSION, SYNTH_SCHEMA, synth_messages

        text = self.judge.budgeted(task.document.text)
        return CompletionRequest(
            kind="synth_query",
            messages=synth_messages(task.style, text),
            schema=SYNTH_SCHEMA,
            key_material=[SYNTH_PROMPT_VERSION, task.style, self.seed, text],
            check=check_answer,
            seed=self.seed,
            temperature=TEMPERATURE,
        )

    def send(self, requests: dict[str, dict[str, Any]], step: str) -> None:
        """With ``--batch submit``: the step's uncached requests go to the Batch API and the
        run stops (nothing uncached: the run goes on to the next step)."""
        if self.submit is None:
            return
        cache = self.judge.cache
        uncached = {k: body for k, body in requests.items() if cache is None or not cache.get(k)}
        if uncached:
            self.submit(uncached, step)
            raise Submitted(step)

    def covered(self, asked: int, answered: int, step: str) -> None:
        """Fail (nothing written) when the judge answered less than its min coverage."""
        if asked == 0 or answered / asked >= self.judge.min_coverage:
            return
        causes = self.judge.causes.most_common(1)
        cause = causes[0][0] if causes else "no answer"
        cached = self.judge.counts["cached_ungraded"]
        raise JudgeError(
            f"{step}: the LLM answered {answered} of {asked} requests "
            f"({answered / asked:.0%}), below --min-coverage {self.judge.min_coverage:g}; "
            f"most common cause: {cli_words(cause)}. Nothing was written to -o; the answers "
            "received are in the cache, so running again asks only for the rest"
            + (
                f" ({cached} unusable answers were read from the cache: --retry-ungraded "
                "asks again)"
                if cached
                else ""
            )
        )


def next_round(missing: int, rate: float | None, previous: int) -> int:
    """Tasks for the next round: the missing queries at the last round's keep rate (``None``
    before the first round: 0.8), plus 10%; at least 8, at most twice the last round (a
    round that kept little, e.g. all near-duplicates of ``--golden``, says little about
    the next)."""
    if rate is None:
        return max(8, math.ceil(missing / 0.8 * 1.1))
    wanted = math.ceil(missing / rate * 1.1) if rate > 0 else 2 * previous
    return max(8, min(wanted, 2 * previous))


def cli_words(text: str) -> str:
    """A judge message as this command spells its options (--max-calls, not
    --retrieval-judge-max-calls)."""
    return text.replace("--retrieval-judge-", "--")


def clean_query(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def check_answer(data: dict[str, Any]) -> str | None:
    """A written query is one non-empty line of text of at most MAX_QUERY_CHARS."""
    query = data.get("query")
    if not isinstance(query, str) or not clean_query(query):
        return "answer does not match the schema (query: not a non-empty string)"
    if len(clean_query(query)) > MAX_QUERY_CHARS:
        return f"query longer than {MAX_QUERY_CHARS} characters"
    return None


# ---------------------------------------------------------------------------- difficulty


def difficulty_of(rank: int | None) -> str:
    """easy = rank 1, medium = 2-10, hard = below 10 or not found."""
    if rank == 1:
        return "easy"
    if rank is not None and rank <= 10:
        return "medium"
    return "hard"


def ranks_from_retriever(spec: str, candidates: Sequence[Candidate]) -> list[int | None]:
    """The source document's rank in ``module:function``'s top RANK_DEPTH for each query.
    A function without required arguments is a factory: called once for the retriever."""
    from ..golden import GoldenQuery
    from ..retrieval import run_retriever
    from ..retrieval.adapters import adapt

    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise UsageError(f"--retriever {spec!r}: write MODULE:FUNCTION, e.g. conftest:search")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise RetrieverError(f"--retriever {spec}: cannot load it ({exc})") from None
    try:
        factory = not any(
            p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in inspect.signature(function).parameters.values()
        )
    except (TypeError, ValueError):
        factory = False
    retriever = adapt(function() if factory else function)
    queries = [GoldenQuery.of_plain(c.task.query_id, c.query, {}, ()) for c in candidates]
    try:
        runs = run_retriever(retriever, queries, RANK_DEPTH)
    except TypeError as exc:
        raise RetrieverError(f"--retriever {spec}: {exc}") from None
    failed = [run for run in runs if run.error is not None]
    if failed:
        raise RetrieverError(
            f"--retriever {spec}: {len(failed)} of {len(runs)} queries failed "
            f"(first: {failed[0].error})"
        )
    return [
        run.ids.index(c.task.document.id) + 1 if c.task.document.id in run.ids else None
        for c, run in zip(candidates, runs, strict=True)
    ]


def ranks_from_report(path: Path, candidates: Sequence[Candidate]) -> list[int | str | None]:
    """The source document's rank in a report's first evaluation, by query id ("unknown"
    for a query the report does not hold). A query whose text differs is an error: the
    report is of another synth run (another seed, corpus or model)."""
    try:
        report = loads(path.read_text(encoding="utf-8"))
        evaluation = report["evaluations"][0]
        found = {str(q["id"]): q for q in evaluation["queries"]}
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise InputError(
            f"--difficulty-report {path}: not a pytest-retrieval JSON report ({exc!r}); "
            "write one with pytest --retrieval-golden CANDIDATES --retrieval-report FILE"
        ) from None
    ranks: list[int | str | None] = []
    for candidate in candidates:
        entry = found.get(candidate.task.query_id)
        if entry is None:
            ranks.append("unknown")
            continue
        if entry.get("query") != candidate.query:
            raise InputError(
                f"--difficulty-report {path}: query {candidate.task.query_id} reads "
                f"{entry.get('query')!r} there but {candidate.query!r} now; run synth with the "
                "same corpus, seed, styles, model and cache as the candidates file it ranked"
            )
        returned = [str(doc) for doc in entry.get("returned", [])]
        doc = candidate.task.document.id
        ranks.append(returned.index(doc) + 1 if doc in returned else None)
    return ranks


def pick(
    pool: Sequence[Candidate], n: int, quota: Mapping[str, float] | None
) -> tuple[list[Candidate], dict[str, int]]:
    """The output: the first ``n`` of the pool, or by quota (largest remainders), in pool
    order; a level short of its quota is filled from the rest of the pool, and the
    shortfall per level is returned."""
    if quota is None:
        return list(pool[:n]), {}
    exact = {level: quota[level] * n for level in DIFFICULTIES}
    wanted = {level: math.floor(share) for level, share in exact.items()}
    by_remainder = sorted(DIFFICULTIES, key=lambda level: wanted[level] - exact[level])
    for level in by_remainder[: n - sum(wanted.values())]:
        wanted[level] += 1
    chosen: set[int] = set()
    short: dict[str, int] = {}
    for level in DIFFICULTIES:
        matching = [i for i, c in enumerate(pool) if c.difficulty == level][: wanted[level]]
        chosen.update(matching)
        if len(matching) < wanted[level]:
            short[level] = wanted[level] - len(matching)
    rest = [i for i in range(len(pool)) if i not in chosen]
    chosen.update(rest[: n - len(chosen)])
    return [pool[i] for i in sorted(chosen)], short


# ---------------------------------------------------------------------------- output


def golden_document(
    picked: Sequence[Candidate], corpus: Path, output: Path, model: str, seed: int
) -> dict[str, Any]:
    from ..judge.prompts import SYNTH_PROMPT_VERSION

    document: dict[str, Any] = {
        "description": f"Synthetic queries written by pytest-retrieval synth from {corpus.name} "
        f"(seed {seed}, model {model}, prompt {SYNTH_PROMPT_VERSION}); the filters' counts are "
        f"in {output.name}.synth.json",
    }
    corpus_file = corpus / "corpus.jsonl" if corpus.is_dir() else corpus
    if corpus_file.is_file():
        document["corpus"] = Path(
            relative(corpus_file.resolve(), output.resolve().parent)
        ).as_posix()
    queries = []
    for candidate in picked:
        task = candidate.task
        tags = [f"style:{task.style}"]
        metadata: dict[str, Any] = {
            "source_doc": task.document.id,
            "style": task.style,
            "generator": {"model": model, "prompt_version": SYNTH_PROMPT_VERSION},
            "status": "synthetic",
            "seed": seed,
            "judge_reason": candidate.reason,
        }
        if candidate.difficulty is not None:
            tags.append(f"difficulty:{candidate.difficulty}")
            metadata["source_rank"] = candidate.rank
        queries.append(
            {
                "id": task.query_id,
                "query": candidate.query,
                "relevant": {task.document.id: candidate.grade},
                "tags": tags,
                "metadata": metadata,
            }
        )
    document["queries"] = queries
    return document


def summary_lines(
    counts: Counts,
    settings: Settings,
    requested: int,
    by: str | None = None,
    golden: Path | None = None,
) -> list[str]:
    sources = (
        "" if golden is None else f"; {counts.golden_sources} already sources of {golden}, left out"
    )
    lines = [
        f"documents: {counts.documents} ({counts.empty_documents} empty, left out{sources}); "
        f"sampled {counts.sampled_documents} in {counts.rounds} round(s)",
        f"queries written: {counts.written} of {counts.asked} asked" + _causes(counts.not_written),
        f"near-duplicates dropped (content-word Jaccard >= {NEAR_DUPLICATE}): "
        f"{counts.near_duplicates} among themselves, {counts.near_duplicates_of_existing} "
        "of the existing golden set",
        f"answerability: {counts.graded} graded, {counts.unanswerable} dropped (the judge "
        f"graded the source document below relevant)" + _causes(counts.not_graded),
        f"kept: {counts.kept} (pool {settings.pool})",
    ]
    if counts.strata:
        strata = "; ".join(
            f"{name} {c['documents']}, {c['sampled']}, {c['output']}"
            for name, c in counts.strata.items()
        )
        lines.append(f"strata by {by} (documents, sampled, in the output): {strata}")
    if counts.difficulty:
        levels = ", ".join(f"{k} {counts.difficulty[k]}" for k in (*DIFFICULTIES, "unknown"))
        lines.append(f"difficulty of the pool: {levels}")
    if counts.quota_short:
        shorts = ", ".join(f"{k} {v}" for k, v in counts.quota_short.items())
        lines.append(f"quota short by: {shorts} (filled from the other levels)")
    lines.append(f"written: {counts.output} queries (asked for {requested})")
    return lines


def _causes(causes: Counter[str]) -> str:
    if not causes:
        return ""
    return "; not answered: " + "; ".join(
        f"{cli_words(cause)} ({count})" for cause, count in causes.most_common()
    )


def sidecar(counts: Counts, settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """What the run did and with which settings (no timings, no call counts: the same for a
    cold and a warm run)."""
    from ..judge.prompts import SYNTH_PROMPT_VERSION

    return {
        "pytest_retrieval_synth": 1,
        "settings": {
            "corpus": str(args.corpus),
            "queries": args.queries,
            "seed": args.seed,
            "styles": list(settings.styles),
            "per_doc": settings.per_doc,
            "stratify_by": args.stratify_by,
            "pool": settings.pool,
            "quota": settings.quota,
            "golden": None if args.golden is None else str(args.golden),
            "model": args.judge_model,
            "prompt_version": SYNTH_PROMPT_VERSION,
            "near_duplicate": {"measure": "content-word Jaccard", "threshold": NEAR_DUPLICATE},
            "answerable": "judge grade >= 2 (0-3 scale)",
        },
        "counts": {
            "documents": counts.documents,
            "empty_documents": counts.empty_documents,
            "golden_sources": counts.golden_sources,
            "sampled_documents": counts.sampled_documents,
            "rounds": counts.rounds,
            "asked": counts.asked,
            "written": counts.written,
            "not_written": dict(sorted(counts.not_written.items())),
            "near_duplicates": counts.near_duplicates,
            "near_duplicates_of_existing": counts.near_duplicates_of_existing,
            "graded": counts.graded,
            "not_graded": dict(sorted(counts.not_graded.items())),
            "unanswerable": counts.unanswerable,
            "kept": counts.kept,
            "difficulty": dict(sorted(counts.difficulty.items())),
            "quota_short": counts.quota_short,
            "output": counts.output,
            "strata": counts.strata,
        },
    }


# ---------------------------------------------------------------------------- run


def run(args: argparse.Namespace) -> int:
    """Read, sample, write, filter, tag, pick; write the golden set and its summary."""
    from .._internal.io import atomic_write
    from ..judge import JudgeConfigError, judge_from_args
    from .corpus import CorpusError, read_corpus

    settings = _settings(args)
    if args.batch is None and args.output.exists() and not args.force:
        raise UsageError(f"{args.output} exists; pass --force to overwrite it")
    try:
        judge = judge_from_args(args, "0-3")
    except JudgeConfigError as exc:
        raise JudgeConfigError(cli_words(str(exc))) from None
    if args.batch == "collect":
        return collect(judge, args.batch_state)
    documents = read_corpus(args.corpus)
    usable = [d for d in documents if d.text.strip()]
    if not usable:
        empty = (
            "its only document is empty"
            if len(documents) == 1
            else f"all {len(documents)} documents are empty"
        )
        raise CorpusError(
            args.corpus,
            "",
            f"{empty} (no text, no title)",
            f"give {'it' if len(documents) == 1 else 'the documents'} their text (BEIR: "
            'the "text" field; a folder: the files\' contents)',
        )
    check_stratify_by(usable, args.stratify_by, args.corpus)
    existing, sources = existing_queries(args.golden)
    strata = dict(zip((d.id for d in usable), strata_of(usable, args.stratify_by), strict=True))
    order = [d for d in sample_order(usable, args.stratify_by, args.seed) if d.id not in sources]
    if not order:  # every usable document already has a query of --golden
        raise InputError(
            f"all {len(usable)} usable documents of {args.corpus} are already sources of "
            f"{args.golden} (its queries' metadata.source_doc): nothing is left to sample; "
            "use a larger corpus, or leave out --golden. Nothing was written"
        )
    tasks = tasks_for(order, strata, settings.styles, settings.per_doc, args.seed)
    submit = None if args.batch is None else batch_submitter(judge, args.batch_state)
    pipeline = Pipeline(judge, settings, args.seed, existing, submit)
    pipeline.counts.documents = len(documents)
    pipeline.counts.empty_documents = len(documents) - len(usable)
    pipeline.counts.golden_sources = len(usable) - len(order)
    try:
        kept = pipeline.run(tasks, settings.pool)
    except Submitted:
        return 0
    pool = trim(kept, settings.pool, strata, Counter(strata.values()))
    counts = pipeline.counts
    if args.batch is not None:
        print("nothing to submit: every request is in the cache; run without --batch")
        return 0
    sampled = order[: counts.sampled_documents]
    if args.stratify_by is not None:  # "in the output": the survivors, if too few
        counts.strata = strata_counts(usable, sampled, pool, args.stratify_by)
    if len(pool) < args.queries:
        raise RetrievalError(
            f"only {len(pool)} of the {args.queries} queries asked for survive the filters "
            f"from the {len(order)} documents of {args.corpus} open to sampling (see the "
            "counts below); ask for fewer with --queries, or more per document with --per-doc. "
            "Nothing was written\n"
            + "\n".join(
                summary_lines(counts, settings, args.queries, args.stratify_by, args.golden)
            )
        )
    tag_difficulty(args, pool, counts)
    picked, counts.quota_short = pick(pool, args.queries, settings.quota)
    counts.output = len(picked)
    if args.stratify_by is not None:
        counts.strata = strata_counts(usable, sampled, picked, args.stratify_by)
    document = golden_document(picked, args.corpus, args.output, args.judge_model, args.seed)
    try:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.output, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        atomic_write(
            args.output.with_name(args.output.name + ".synth.json"),
            json.dumps(sidecar(counts, settings, args), indent=2, ensure_ascii=False) + "\n",
        )
    except OSError as exc:
        raise InputError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    for line in summary_lines(counts, settings, args.queries, args.stratify_by, args.golden):
        print(line)
    usage = judge.summary()
    print(
        f"LLM: {usage['calls']} requests, {usage['cache_hits']} cache hits"
        + (f", about ${usage['estimated_cost_usd']:.4f}" if usage["estimated_cost_usd"] else "")
    )
    print(f"wrote {args.output} ({counts.output} queries) and {args.output.name}.synth.json")
    return 0


def strata_counts(
    usable: Sequence[Document],
    sampled: Sequence[Document],
    picked: Sequence[Candidate],
    by: str,
) -> dict[str, dict[str, int]]:
    """Per stratum (sorted by name): its documents, those sampled, its output queries."""
    stratum = dict(zip((d.id for d in usable), strata_of(usable, by), strict=True))
    documents = Counter(stratum.values())
    taken = Counter(stratum[d.id] for d in sampled)
    output = Counter(stratum[c.task.document.id] for c in picked)
    return {
        name: {"documents": documents[name], "sampled": taken[name], "output": output[name]}
        for name in sorted(documents)
    }


def tag_difficulty(args: argparse.Namespace, pool: list[Candidate], counts: Counts) -> None:
    ranks: Sequence[int | str | None]
    if args.retriever is not None:
        ranks = ranks_from_retriever(args.retriever, pool)
    elif args.difficulty_report is not None:
        ranks = ranks_from_report(args.difficulty_report, pool)
    else:
        return
    for candidate, rank in zip(pool, ranks, strict=True):
        if isinstance(rank, str):
            counts.difficulty["unknown"] += 1
            continue
        candidate.rank = rank
        candidate.difficulty = difficulty_of(rank)
        counts.difficulty[candidate.difficulty] += 1


def existing_queries(path: Path | None) -> tuple[list[str], set[str]]:
    """The ``--golden`` set's query texts (no near-duplicates of them) and the documents its
    queries were written from (``metadata.source_doc``: no new query from them)."""
    from ..golden import load_golden

    if path is None:
        return [], set()
    queries = load_golden(path, require_relevant=False).queries
    sources = {str(q.metadata["source_doc"]) for q in queries if "source_doc" in q.metadata}
    return [q.query for q in queries], sources


def batch_submitter(judge: Judge, state: Path) -> Callable[[dict[str, dict[str, Any]], str], None]:
    """Send a step's requests as Batch API jobs and write their ids to ``state``."""

    def send(requests: dict[str, dict[str, Any]], step: str) -> None:
        from ..judge.batch import BatchAPIError, save_state, submit_requests

        try:
            submitted = submit_requests(judge, requests)
        except (BatchAPIError, ValueError) as exc:
            raise JudgeError(str(exc)) from None
        try:
            save_state(state, submitted, {"step": step})
        except OSError as exc:
            raise InputError(
                f"cannot write {state} ({exc.strerror or exc}); the batches were submitted: "
                f"{', '.join(submitted.batch_ids)}"
            ) from None
        print(
            f"{step}: submitted {submitted.requests} requests in "
            f"{len(submitted.batch_ids)} batch(es) ({', '.join(submitted.batch_ids)}); "
            f"next: the same command with --batch collect, then --batch submit again until "
            "nothing is left to submit, then without --batch"
        )
        if submitted.error is not None:
            raise JudgeError(f"{submitted.error}; {submitted.unsent} requests not sent")

    return send


def collect(judge: Judge, state_path: Path) -> int:
    """Store the answers of every batch in the state file; 3 while one is still running."""
    from ..judge.batch import BatchAPIError, batch_ids
    from ..judge.batch import collect as collect_batch

    try:
        state = loads(state_path.read_text(encoding="utf-8"))
        ids = batch_ids(state)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"--batch-state {state_path}: not a batch state file ({exc})") from None
    running = 0
    for batch_id in ids:
        try:
            outcome = collect_batch(judge, batch_id)
        except (BatchAPIError, ValueError) as exc:
            raise JudgeError(str(exc)) from None
        if outcome.running:
            running += 1
            print(f"batch {batch_id}: still {outcome.status}; collect again later")
            continue
        failed = sum(outcome.failed.values())
        print(f"batch {batch_id}: {outcome.status}: {outcome.stored} stored, {failed} failed")
    return 3 if running else 0
