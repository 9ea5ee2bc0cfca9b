"""Evaluate a retriever on a golden set: retrieve, score, aggregate. Usable without pytest."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import gate, limits, stats
from . import metrics as kernels
from ._internal.gc import frozen_heap, paused_gc
from .errors import RetrievalError
from .golden import GoldenQuery, GoldenSet, check_texts, load_golden
from .hits import NOT_RETURNED, QueryRun, error_key
from .limits import Threshold
from .metrics import FloatArray
from .results import (
    HIT_DETAIL,
    HIT_TEXT,
    EvaluationResult,
    QueryColumns,
    QueryResult,
    QueryTable,
    is_graded,
    shared_floats,
)
from .retrieval import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_FAILURES,
    ProgressCallback,
    Retriever,
    run_retriever,
)
from .retrieval.adapters import adapt

if TYPE_CHECKING:
    from .downstream import DownstreamRunner

DEFAULT_FAMILIES = ("recall", "precision", "hit_rate", "mrr", "ndcg", "map")


def with_metrics(result: EvaluationResult, names: Sequence[str]) -> EvaluationResult:
    """A copy of ``result`` with more metrics (``names``), scored from its stored rankings
    (no retriever calls), its verdict decided again."""
    wanted = sorted({*result.metrics, *names}, key=lambda name: kernels.parse_metric(name).sort_key)
    rescored = _rescore(result, result.queries, wanted)
    return gate.decide(
        replace(
            result,
            metrics=rescored.metrics,
            ci=rescored.ci,
            ci_method=rescored.ci_method,
            per_tag=rescored.per_tag,
            queries=rescored.queries,
            label_coverage=rescored.label_coverage,
        )
    )


class PartsMismatch(RetrievalError, ValueError):
    """Evaluations that are not disjoint parts of one evaluation (another golden set,
    retriever, k, metric list or thresholds, or a query in two parts)."""


def merge_parts(
    parts: Sequence[EvaluationResult], order: Sequence[str] | None = None
) -> EvaluationResult:
    """One evaluation from evaluations of disjoint parts of one golden set (CI shards, xdist
    workers): the queries joined -- in ``order`` (query ids, the golden set's order) when
    given, else part after part -- and every number (means, CIs, per-tag, coverage) computed
    again over the union, so the result is the one a single run would give. Judge and eRAG
    summaries add up. No baseline comparison is carried over: attach one to the whole."""
    if not parts:
        raise PartsMismatch("no parts to merge")
    first = parts[0]
    for part in parts[1:]:
        for what, mine, theirs in (
            ("golden set", first.golden_name, part.golden_name),
            ("golden fingerprint", first.fingerprint, part.fingerprint),
            ("retriever", first.retriever_id, part.retriever_id),
            ("k", first.k, part.k),
            ("metrics", sorted(first.metrics), sorted(part.metrics)),
            ("thresholds", first.thresholds, part.thresholds),
            ("relevance level", first.relevance_level, part.relevance_level),
        ):
            if mine != theirs:
                raise PartsMismatch(f"parts differ in {what}: {mine!r} vs {theirs!r}")
    queries = [q for part in parts for q in part.queries]
    seen: dict[str, int] = {}
    for q in queries:
        seen[q.id] = seen.get(q.id, 0) + 1
    twice = [qid for qid, n in seen.items() if n > 1]
    if twice:
        raise PartsMismatch(f"query {twice[0]!r} is in more than one part ({len(twice)} such)")
    if order is not None:
        position = {qid: i for i, qid in enumerate(order)}
        queries.sort(key=lambda q: position.get(q.id, len(position)))
    merged = _rescore(first, queries, list(first.metrics))
    missing = {qid for part in parts for qid in part.run_missing}
    owner = {q.id: part for part in parts for q in part.queries}
    tracebacks: dict[str, str] = {}
    for q in queries:  # golden order: a single run keeps its first failure's traceback
        if q.error is not None:
            text = owner[q.id].tracebacks.get(error_key(q.error))
            if text is not None:
                tracebacks.setdefault(error_key(q.error), text)
    return gate.decide(
        replace(
            merged,
            gated=tuple(dict.fromkeys(m for part in parts for m in part.gated)),
            judge=_add_summaries([p.judge for p in parts]),
            erag=_add_summaries([p.erag for p in parts]),
            sampled_from=first.sampled_from,
            run_file=first.run_file,
            run_missing=tuple(q.id for q in queries if q.id in missing),
            run_format=first.run_format,
            tracebacks=tracebacks,
        )
    )


def _add_summaries(summaries: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Run summaries (judge, eRAG) of parts as one: counters and cause tallies added, the
    rest (settings, model) from the first; shares (coverage, agreement) weighted again."""
    present = [s for s in summaries if s is not None]
    if not present:
        return None
    total = dict(present[0])
    for summary in present[1:]:
        for key, value in summary.items():
            old = total.get(key)
            if key == "causes" and isinstance(value, Mapping):
                causes = dict(old or {})
                for cause, n in value.items():
                    causes[cause] = causes.get(cause, 0) + n
                total[key] = causes
            elif (
                isinstance(value, int | float)
                and isinstance(old, int | float)
                and not isinstance(value, bool)
                and key not in _NOT_COUNTERS
                and key != "coverage"
            ):
                total[key] = old + value
            elif key not in total or (key == "stopped" and old is None):  # a later stop
                total[key] = value
    if "pairs" in total and "graded" in total:
        total["coverage"] = total["graded"] / total["pairs"] if total["pairs"] else 1.0
    if "agreement" in total:  # the mean over the hits asked more than once, of every part
        agreed = [(s.get("agreement"), s.get("sampled") or 0) for s in present]
        weight = sum(n for a, n in agreed if a is not None)
        total["agreement"] = (
            sum(a * n for a, n in agreed if a is not None) / weight if weight else None
        )
    return total


def metric_names(
    golden: GoldenSet, k: int, extra: Iterable[str], thresholds: Iterable[Threshold]
) -> list[str]:
    """What to compute: the golden set's list (or the default families at k), plus every
    metric a threshold or the caller names; sorted by family then k."""
    names = set(golden.metrics) or {f"{family}@{k}" for family in DEFAULT_FAMILIES}
    names |= set(extra) | {t.metric.name for t in thresholds}
    return sorted(names, key=lambda name: kernels.parse_metric(name).sort_key)


def evaluate(
    retriever: Retriever | None,
    golden: GoldenSet | str | Path,
    *,
    metrics: Iterable[str] = (),
    thresholds: Mapping[str, float] | Iterable[Threshold] | None = None,
    k: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float | None = None,
    retriever_id: str = "retriever",
    progress: ProgressCallback | None = None,
    judge: Judge | None = None,
    corpus: Mapping[str, str] | None = None,
    judge_progress: ProgressCallback | None = None,
    downstream: DownstreamRunner | None = None,
    doc_id_key: str | None = None,
    gated: Iterable[str] | None = None,
    runs: Sequence[QueryRun] | None = None,
    all_scores: bool = False,
    max_failures: int = DEFAULT_MAX_FAILURES,
) -> EvaluationResult:
    """Run ``retriever(query, k, **params)`` over the golden set and score it.

    With ``runs`` (one :class:`QueryRun` per golden query, in golden order: a precomputed
    run file) the retriever is not called (pass None) and the rest is the same.
    ``all_scores``: keep every hit's score, not the first ``HIT_DETAIL`` hits' (for an
    export of the run: ``--retrieval-export-run``). After ``max_failures`` failed calls in a
    row (0: never) no further call is made, and the queries left are errors that say so.

    ``thresholds`` default to the golden file's; metrics default to the golden file's list or
    recall/precision/hit_rate/mrr/ndcg/map at its k, and judged@k (the share of the top k the
    golden set has judged: how far recall and nDCG can be trusted) is always added, not
    gated. With a ``judge`` (see
    :mod:`pytest_retrieval.judge`) the top-k hits are graded too and ``otr@k`` (and, on the 0-3
    scale, ``llm_*@k``) added, over the hits it graded (a hit it could not grade is left out,
    never counted off topic; ``label_coverage`` says how many slots were graded); hit texts
    come from the hits or from ``corpus`` (id -> text).
    With ``downstream`` (a :class:`~pytest_retrieval.downstream.DownstreamRunner`) each top-k
    hit gets an eRAG label and ``erag_*@k`` are added. Open queries (no ``relevant``) need
    one of the two.
    ``retriever`` may also be a LangChain, LlamaIndex or Haystack retriever object (see
    :mod:`.retrieval.adapters`); ``doc_id_key`` names the metadata key of its doc ids.
    ``gated`` names the metrics a baseline comparison may fail on (default: recall, mrr and
    ndcg at k, plus every metric with a threshold). The result carries its verdict.
    """
    golden_set = (
        golden
        if isinstance(golden, GoldenSet)
        else load_golden(  # texts: checked below, where something searches or grades it
            golden, require_relevant=judge is None and downstream is None, require_texts=False
        )
    )
    if thresholds is None:
        chosen = limits.from_mapping(golden_set.thresholds, f"{golden_set.source} thresholds")
    elif isinstance(thresholds, Mapping):
        chosen = limits.from_mapping(thresholds, "evaluate(thresholds=...)")
    else:
        chosen = list(thresholds)
    cutoff = k or golden_set.k
    for name in metrics:
        _check_name(name)
    defaults: list[str] = []
    if any(q.relevant for q in golden_set.queries):  # the summary's judged@k (cheap, not gated)
        defaults.append(f"{kernels.JUDGED_FAMILY}@{cutoff}")
    if judge is not None:
        defaults.append(f"otr@{cutoff}")
        if judge.graded:
            defaults += [f"llm_{family}@{cutoff}" for family in ("precision", "mrr", "ndcg")]
    if downstream is not None:
        defaults += [f"erag_{f}@{cutoff}" for f in ("precision", "hit_rate", "mrr", "ndcg")]
    wanted = metric_names(golden_set, cutoff, [*defaults, *metrics], chosen)
    _check_labels(golden_set, wanted, judge, downstream)
    depth = max([cutoff, *(_check_name(name).k for name in wanted)])
    if runs is None:  # TREC qrels without texts: it would be asked for "1"
        check_texts(golden_set)
    elif judge is not None or downstream is not None:
        check_texts(golden_set, "the LLM judge" if judge is not None else "downstream labelling")
    if runs is None:
        if retriever is None:
            raise TypeError("evaluate() needs a retriever, or runs=")
        retriever = adapt(retriever, doc_id_key=doc_id_key)  # LangChain, LlamaIndex, Haystack
        with frozen_heap():
            runs = run_retriever(
                retriever,
                golden_set.queries,
                depth,
                concurrency=concurrency,
                timeout=timeout,
                progress=progress,
                ranks=True,
                max_failures=max_failures,
            )
    elif len(runs) != len(golden_set.queries):
        raise ValueError(f"{len(runs)} runs for {len(golden_set.queries)} golden queries")
    else:  # a run file may hold more hits than the metrics read: cut as a retriever's are
        runs = [run if len(run.ids) <= depth else replace(run, ids=run.ids[:depth]) for run in runs]
    label_depth = {
        source: max(
            (m.k for m in map(kernels.parse_metric, wanted) if m.labels in kinds), default=0
        )
        for source, kinds in (("judge", {"on_topic", "llm_grade"}), ("downstream", DOWNSTREAM))
    }
    judgments: list[dict[str, dict[str, Any]]] | None = None  # None: no judge
    downstream_labels: list[dict[str, float]] | None = None
    summary: dict[str, Any] | None = None
    if judge is not None and label_depth["judge"]:
        judgments, summary = _judge_hits(
            judge, golden_set, runs, label_depth["judge"], corpus, judge_progress
        )
    if downstream is not None and label_depth["downstream"]:
        downstream_labels = downstream.label(
            golden_set.queries, runs, label_depth["downstream"], corpus
        )
    with paused_gc():
        result = _score(
            golden_set,
            runs,
            retriever_id,
            cutoff,
            wanted,
            chosen,
            judgments,
            downstream_labels,
            kernels.DEFAULT_RELEVANCE_LEVEL if judge is None else judge.relevance_level,
            depth if all_scores else HIT_DETAIL,
        )
    result = replace(
        result,
        judge=summary,
        erag=None if downstream is None else downstream.summary(),
        gated=gate.gated_metrics(result.metrics, cutoff, chosen, {}, gated),
    )
    return gate.decide(result)


DOWNSTREAM = {"downstream", "downstream_gain"}


class Judge(Protocol):
    """What :func:`evaluate` needs of an LLM judge (``pytest_retrieval.judge.Judge``)."""

    @property
    def graded(self) -> bool:
        """True on the 0-3 scale (adds llm_* metrics), False for binary verdicts."""

    @property
    def min_coverage(self) -> float: ...

    @property
    def relevance_level(self) -> int:
        """The grade (0-3 scale) from which a hit counts as relevant and on topic."""

    def judge(
        self, pairs: Sequence[Any], progress: ProgressCallback | None = None
    ) -> Sequence[Any]: ...

    def pair(self, query: GoldenQuery, doc_id: str, text: str) -> Any: ...

    def summary(self) -> dict[str, Any]: ...


NO_TEXT = (
    "no text to judge: the hit has no 'text' and no corpus has this id "
    "(return hits with 'text', or give a corpus)"
)


def _judge_hits(
    judge: Judge,
    golden: GoldenSet,
    runs: Sequence[QueryRun],
    depth: int,
    corpus: Mapping[str, str] | None,
    progress: ProgressCallback | None,
) -> tuple[list[dict[str, dict[str, Any]]], dict[str, Any]]:
    """Ask the judge about every top-``depth`` hit; hits without text are ungraded."""
    judgments: list[dict[str, dict[str, Any]]] = [{} for _ in runs]
    pairs, where = [], []
    no_text = 0
    for row, (query, run) in enumerate(zip(golden.queries, runs, strict=True)):
        for doc in run.ids[:depth]:
            text = run.texts.get(doc)
            if text is None and corpus is not None:
                text = corpus.get(doc)
            if text is None:
                judgments[row][doc] = {
                    "on_topic": None,
                    "score": None,
                    "grade": None,
                    "reason": "",
                    "error": NO_TEXT,
                }
                no_text += 1
                continue
            pairs.append(judge.pair(query, doc, text))
            where.append((row, doc))
    before = judge.summary()  # the judge counts for its whole process: keep only ours
    verdicts = judge.judge(pairs, progress) if pairs else []
    for (row, doc), verdict in zip(where, verdicts, strict=True):
        judgments[row][doc] = verdict.to_dict()
    summary = _since(before, judge.summary())
    total = len(pairs) + no_text
    graded = sum(1 for v in verdicts if v.error is None)
    shares = [a for v in judgments for d in v.values() if (a := d.get("agreement")) is not None]
    if shares:  # the judge's own average covers its whole process: this evaluation's
        summary["agreement"] = sum(shares) / len(shares)
    causes = dict(summary.get("causes") or {})
    if no_text:
        causes[NO_TEXT] = causes.get(NO_TEXT, 0) + no_text
    summary.update(
        pairs=total,
        graded=graded,
        ungraded=total - graded,
        causes=causes,
        coverage=graded / total if total else 1.0,
        min_coverage=judge.min_coverage,
        relevance_level=judge.relevance_level,
    )
    return judgments, summary


#: numbers of the judge's summary that are settings or averages, not counters to difference
_NOT_COUNTERS = frozenset(
    {
        "min_score",
        "min_coverage",
        "relevance_level",
        "samples",
        "text_budget",
        "deadline",
        "agreement",
    }
)


def _since(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``after`` with its counters (numbers, and the causes tally) less ``before``."""
    summary = dict(after)
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, int | float) and isinstance(old, int | float):
            if not isinstance(value, bool) and key not in _NOT_COUNTERS:
                summary[key] = value - old
        elif key == "causes" and isinstance(value, Mapping):
            earlier = before.get("causes") or {}
            summary[key] = {
                c: n - earlier.get(c, 0) for c, n in value.items() if n > earlier.get(c, 0)
            }
    return summary


#: how a judge metric gets its judge (``eval``, which has none, says otherwise)
JUDGE_ADVICE = "run with --retrieval-judge"


def _check_labels(
    golden: GoldenSet, wanted: Sequence[str], judge: Judge | None, downstream: Any
) -> None:
    """A judge metric needs a judge, a downstream metric a labeller, an open query either."""
    for name in wanted:
        source = kernels.parse_metric(name).labels
        if source in {"on_topic", "llm_grade"} and judge is None:
            raise limits.ThresholdError(f"{name} needs an LLM judge: {JUDGE_ADVICE}")
        if source == "llm_grade" and judge is not None and not judge.graded:
            raise limits.ThresholdError(
                f"{name} needs graded verdicts: add --retrieval-judge-scale 0-3"
            )
        if source in DOWNSTREAM and downstream is None:
            raise limits.ThresholdError(
                f"{name} needs downstream labels: define a retrieval_downstream fixture"
            )


def _texts(run: QueryRun) -> dict[str, str]:
    """The first hits' texts as a report keeps them: cut, whitespace runs folded."""
    kept = {}
    for doc in run.ids[:HIT_DETAIL]:
        text = run.texts.get(doc)
        if text is not None:
            folded = " ".join(text[: HIT_TEXT * 2].split())
            kept[doc] = folded if len(folded) <= HIT_TEXT else folded[: HIT_TEXT - 1] + "…"
    return kept


def _score(
    golden_set: GoldenSet,
    runs: Sequence[QueryRun],
    retriever_id: str,
    cutoff: int,
    wanted: Sequence[str],
    chosen: Sequence[Threshold],
    judgments: Sequence[dict[str, dict[str, Any]]] | None,
    downstream: Sequence[dict[str, float]] | None,
    level: int,
    scored: int,
) -> EvaluationResult:
    """The scored evaluation, built column by column (:class:`QueryColumns`): no object per
    query is made until something asks for one."""
    queries = golden_set.queries
    n = len(queries)
    returned = list(map(_IDS, runs))
    latency_ms = np.fromiter(map(_LATENCY, runs), dtype=np.float64, count=n) * 1000.0
    errors = {row: run.error for row, run in enumerate(runs) if run.error is not None}
    relevant = list(map(_RELEVANT, queries))
    tags = list(map(_TAGS, queries))
    columns = _Columns(
        returned=returned,
        relevant=relevant,
        tags=tags,
        judgments=judgments,
        downstream=downstream,
        answered_latency_ms=np.delete(latency_ms, list(errors)) if errors else latency_ms,
    )
    measured = _measure(columns, wanted, level, ranks=_found_ranks(queries, runs))
    fingerprints = golden_set.query_fingerprints
    ids = list(map(_ID, queries))
    criteria = list(map(_CRITERIA, queries))
    table = QueryColumns(
        ids=ids,
        queries=list(map(_QUERY, queries)),
        tags=tags,
        relevant=relevant,
        returned=returned,
        values=measured.values,
        latency_ms=latency_ms,
        errors=errors,
        duplicates={row: run.duplicates for row, run in enumerate(runs) if run.duplicates},
        fingerprints=list(map(fingerprints.__getitem__, ids)),
        criteria=criteria if any(c is not None for c in criteria) else None,
        judgments=judgments,
        downstream=downstream,
        texts=[_texts(run) if run.texts else _NOTHING for run in runs]
        if any(run.texts for run in runs)
        else None,
        scores=[_scores(run, scored) if run.scores else _NOTHING for run in runs]
        if any(run.scores for run in runs)
        else None,
    )
    tracebacks: dict[str, str] = {}
    for run in runs:
        if run.error is not None and run.traceback is not None:
            tracebacks.setdefault(error_key(run.error), run.traceback)
    return measured.result(
        name=golden_set.name,
        source=golden_set.source,
        fingerprint=golden_set.fingerprint,
        retriever_id=retriever_id,
        k=cutoff,
        thresholds=chosen,
        queries=QueryTable(columns=table),
        sampled_from=golden_set.sampled_from,
        tracebacks=tracebacks,
    )


_IDS = attrgetter("ids")
_LATENCY = attrgetter("latency")
_ID, _QUERY, _RELEVANT, _TAGS, _CRITERIA = map(
    attrgetter, ("id", "query", "relevant", "tags", "criteria")
)


#: a query's judgments, labels, texts or scores when it has none: one dict shared by all,
#: never written to (results are frozen), instead of four per query (0.25 GB a million)
_NOTHING: dict[str, Any] = {}


def _found_ranks(
    queries: Sequence[GoldenQuery], runs: Sequence[QueryRun]
) -> list[tuple[int, ...]] | None:
    """Each query's judged ranks as the calls found them (:attr:`QueryRun.ranks`), in the
    kernels' terms (an open query is scored on a placeholder judgment, never found); None
    when a call did not find them (a run file: the kernels do)."""
    found: list[tuple[int, ...]] = []
    for query, run in zip(queries, runs, strict=True):
        if not query.relevant:
            found.append(_UNSEEN)
        elif run.ranks is not None:
            found.append(run.ranks)
        elif not run.ids:  # a failed call: nothing came back
            found.append((NOT_RETURNED,) * len(query.relevant))
        else:
            return None
    return found


_UNSEEN = (NOT_RETURNED,)


def _scores(run: QueryRun, depth: int) -> dict[str, float]:
    """The scores of the first ``depth`` hits that have one."""
    return {d: run.scores[d] for d in run.ids[:depth] if d in run.scores}


def _check_name(name: str) -> kernels.Metric:
    try:
        return kernels.parse_metric(name)
    except kernels.MetricNameError as exc:
        raise limits.ThresholdError(str(exc)) from None


@dataclass(frozen=True)
class _Columns:
    """What scoring reads of each query."""

    returned: Sequence[Sequence[str]]
    relevant: Sequence[Mapping[str, int]]
    tags: Sequence[tuple[str, ...]]
    judgments: Sequence[Mapping[str, Mapping[str, Any]]] | None  # None: no judge
    downstream: Sequence[Mapping[str, float]] | None  # None: no downstream labels
    answered_latency_ms: FloatArray  # of the calls that did not fail

    @classmethod
    def of(cls, queries: Sequence[QueryResult]) -> _Columns:
        return cls(
            returned=[q.returned for q in queries],
            relevant=[q.relevant for q in queries],
            tags=[q.tags for q in queries],
            judgments=[q.judgments for q in queries],
            downstream=[q.downstream for q in queries],
            answered_latency_ms=np.fromiter(
                (q.latency_ms for q in queries if q.error is None), dtype=np.float64
            ),
        )


@dataclass(frozen=True)
class _Measured:
    """Every metric of every query, and what is made of them: means, intervals, per tag."""

    values: dict[str, FloatArray]
    metrics: dict[str, float]
    ci: dict[str, tuple[float, float]]
    ci_method: str
    per_tag: dict[str, dict[str, float]]
    tag_counts: dict[str, int]
    coverage: dict[str, tuple[int, int]]
    latency_p50_ms: float
    latency_p95_ms: float

    def result(
        self,
        *,
        name: str,
        source: str,
        fingerprint: str,
        retriever_id: str,
        k: int,
        thresholds: Sequence[Threshold],
        queries: Sequence[QueryResult],
        **more: Any,
    ) -> EvaluationResult:
        return EvaluationResult(
            golden_name=name,
            golden_source=source,
            fingerprint=fingerprint,
            retriever_id=retriever_id,
            k=k,
            metrics=self.metrics,
            ci=self.ci,
            ci_method=self.ci_method,
            per_tag=self.per_tag,
            tag_counts=self.tag_counts,
            queries=queries,
            latency_p50_ms=self.latency_p50_ms,
            latency_p95_ms=self.latency_p95_ms,
            thresholds=list(thresholds),
            label_coverage=self.coverage,
            **more,
        )


def _rescore(
    template: EvaluationResult, base: Sequence[QueryResult], wanted: Sequence[str]
) -> EvaluationResult:
    """``base``'s queries (their rankings and labels) scored again on ``wanted``, with the
    means, intervals, per-tag means and latencies: a fresh evaluation of ``template``'s
    golden set, retriever, k and thresholds (merged parts, metrics added)."""
    measured = _measure(_Columns.of(base), wanted, template.relevance_level)
    names = list(measured.values)
    rows = zip(*map(shared_floats, measured.values.values()), strict=True)
    scored = (dict(zip(names, row, strict=True)) for row in rows)
    queries = [  # a part's query scored alike is kept: a copy of each costs 10 us
        q if q.metrics == metrics else replace(q, metrics=metrics)
        for q, metrics in zip(base, scored, strict=True)
    ]
    if not names:
        queries = [replace(q, metrics={}) for q in base]
    return measured.result(
        name=template.golden_name,
        source=template.golden_source,
        fingerprint=template.fingerprint,
        retriever_id=template.retriever_id,
        k=template.k,
        thresholds=template.thresholds,
        queries=queries,
    )


def _measure(
    columns: _Columns,
    wanted: Sequence[str],
    relevance_level: int,
    ranks: Sequence[Sequence[int]] | None = None,
) -> _Measured:
    """Every metric of every query (their rankings and labels), then the means, intervals,
    per-tag means and latencies: column by column, one array per metric. ``ranks``: where
    each query's judged docs came back, found already (see :func:`_found_ranks`)."""
    parsed = [kernels.parse_metric(metric) for metric in wanted]
    judged = [m for m in parsed if m.labels in kernels.JUDGED]
    others = [m for m in parsed if m.labels not in kernels.JUDGED]
    runs = columns.returned
    n = len(runs)
    open_rows = np.fromiter((not r for r in columns.relevant), dtype=bool, count=n)
    downstream = columns.downstream or [_NOTHING] * n
    with np.errstate(invalid="ignore", divide="ignore"):
        found = kernels.compute(
            others,
            runs,
            [r or _OPEN for r in columns.relevant],  # open queries: masked out just below
            {"downstream": downstream} if any(m.labels != "golden" for m in others) else None,
            unique=True,  # every ranking is deduplicated (normalize_hits, stored reports)
            ranks=ranks,
        )
    coverage: dict[str, tuple[int, int]] = {}
    graded: dict[str, np.ndarray] = {}
    if judged:
        depth = max(m.k for m in judged)
        verdicts = columns.judgments or [_NOTHING] * n
        for kind, labels in _judge_labels(runs, verdicts, depth).items():
            group = [m for m in judged if m.labels == kind]
            if not group:
                continue
            slots = kernels.slot_matrix(runs, labels, depth)
            found.update(kernels.slot_values(group, slots, relevance_level))
            for m in group:
                graded[m.name] = slots.graded(m.k)
                coverage[m.name] = (int(graded[m.name].sum()), m.k * n)
    per_query = {m.name: found[m.name] for m in parsed}
    human = {m.name for m in parsed if m.labels == "golden"}
    has_open = bool(open_rows.any())
    if has_open:
        for metric in human:
            per_query[metric][open_rows] = np.nan
    intervals, method = stats.bootstrap_ci(
        {m: v[~open_rows] if has_open else v for m, v in per_query.items() if m in human}
    )
    for m in parsed:  # the others, over the queries that have a value (none: no interval)
        values = per_query[m.name]
        defined = values[np.isfinite(values)]
        if m.name not in human and defined.size:
            intervals.update(stats.bootstrap_ci({m.name: defined})[0])
        if m.family == "otr" and defined.size:  # a rate over graded slots: Wilson, as in the paper
            counted = graded[m.name][np.isfinite(values)]
            on_topic = float(np.rint(defined * counted).sum())
            intervals[m.name] = stats.wilson_interval(on_topic, float(counted.sum()))
    by_tag: dict[str, list[int]] = {}
    for row, tags in enumerate(columns.tags):
        for tag in tags:
            by_tag.setdefault(tag, []).append(row)
    latencies = columns.answered_latency_ms
    return _Measured(
        values=per_query,
        metrics={metric: _mean(values) for metric, values in per_query.items()},
        ci=intervals,
        ci_method=method,
        per_tag={
            tag: {metric: _mean(values[rows_of]) for metric, values in per_query.items()}
            for tag, rows_of in sorted(by_tag.items())
        },
        tag_counts={tag: len(rows_of) for tag, rows_of in sorted(by_tag.items())},
        coverage=coverage,
        latency_p50_ms=stats.percentile(latencies, 50),
        latency_p95_ms=stats.percentile(latencies, 95),
    )


_OPEN = {"": 1}  # an open query's placeholder judgment: never found, its values masked out


__all__ = ["EvaluationResult", "QueryResult", "QueryRun", "evaluate"]


def _mean(values: FloatArray) -> float:
    """Mean over the queries that have the metric (open queries have no golden metrics)."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def _judge_labels(
    runs: Sequence[Sequence[str]], judgments: Sequence[Mapping[str, Mapping[str, Any]]], depth: int
) -> dict[str, list[dict[str, float]]]:
    """The judge's labels of each query's top ``depth`` hits, as the slot kernels take them:
    on topic 1/0 and the 0-3 grade; NaN for a hit it did not grade (an error, or no verdict:
    a deeper metric than the judge was asked about), which the judge metrics leave out."""
    on_topic: list[dict[str, float]] = []
    grades: list[dict[str, float]] = []
    for returned, verdicts in zip(runs, judgments, strict=True):
        binary, graded = {}, {}
        for doc in returned[:depth]:
            verdict = verdicts.get(doc) or {}
            decided = is_graded(verdict)
            grade = verdict.get("grade")
            binary[doc] = float(verdict["on_topic"]) if decided else math.nan
            graded[doc] = float(grade) if decided and isinstance(grade, int) else math.nan
        on_topic.append(binary)
        grades.append(graded)
    return {"on_topic": on_topic, "llm_grade": grades}
