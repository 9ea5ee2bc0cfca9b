"""Evaluate a retriever on a golden set: retrieve, score, aggregate. Usable without pytest."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

import numpy as np

from . import gate, limits, stats
from . import metrics as kernels
from ._internal.gc import frozen_heap, paused_gc
from .errors import RetrievalError
from .golden import GoldenSet, check_texts, load_golden
from .hits import QueryRun, error_key
from .labels import (
    NOT_COUNTERS,
    GoldenLabels,
    Judge,
    Labelled,
    LabelRequest,
    LabelSource,
    check_sources,
    depth_of,
    judge_labels,
    label_sources,
)
from .limits import Threshold
from .metrics import FloatArray
from .results import (
    HIT_DETAIL,
    HIT_TEXT,
    EvaluationResult,
    QueryColumns,
    QueryResult,
    QueryTable,
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
    missing = {qid for part in parts for qid in part.run_missing}
    owner = {q.id: part for part in parts for q in part.queries}
    tracebacks: dict[str, str] = {}
    for q in queries:  # golden order: a single run keeps its first failure's traceback
        if q.error is not None:
            text = owner[q.id].tracebacks.get(error_key(q.error))
            if text is not None:
                tracebacks.setdefault(error_key(q.error), text)
    return gate.decide(
        _rescore(
            first,
            queries,
            list(first.metrics),
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
                and key not in NOT_COUNTERS
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
    labels: Sequence[LabelSource] = (),
    corpus: Mapping[str, str] | None = None,
    judge: Judge | None = None,
    downstream: LabelSource | None = None,
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
    gated.

    ``labels``: where the labels of metrics other than the golden set's come from
    (:class:`~pytest_retrieval.labels.LabelSource`; a source of golden labels replaces the
    golden set's own). Each adds its metrics at k and labels the top hits; texts come from
    the hits or from ``corpus`` (id -> text). ``judge`` (see :mod:`pytest_retrieval.judge`)
    and ``downstream`` (a :class:`~pytest_retrieval.downstream.DownstreamRunner`) are two
    such sources by name: the judge grades the top-k hits and adds ``otr@k`` (and, on the
    0-3 scale, ``llm_*@k``), over the hits it graded (a hit it could not grade is left out,
    never counted off topic; ``label_coverage`` says how many slots were graded); downstream
    gives each hit an eRAG label and adds ``erag_*@k``. Open queries (no ``relevant``) need
    a source.
    ``retriever`` may also be a LangChain, LlamaIndex or Haystack retriever object (see
    :mod:`.retrieval.adapters`); ``doc_id_key`` names the metadata key of its doc ids.
    ``gated`` names the metrics a baseline comparison may fail on (default: recall, mrr and
    ndcg at k, plus every metric with a threshold). The result carries its verdict.
    """
    sources = label_sources(labels, judge=judge, downstream=downstream)
    golden_set = (
        golden
        if isinstance(golden, GoldenSet)
        else load_golden(  # texts: checked below, where something searches or grades it
            golden,  # an open query (no judgments) is labelled by another source, or an error
            require_relevant=all(isinstance(s, GoldenLabels) for s in sources),
            require_texts=False,
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
    defaults = [name for source in sources for name in source.defaults(golden_set, cutoff)]
    wanted = metric_names(golden_set, cutoff, [*defaults, *metrics], chosen)
    parsed = [_check_name(name) for name in wanted]
    _check_labels(golden_set, parsed, sources, runs is None)
    depth = max([cutoff, *(m.k for m in parsed)])
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
    labelled = [
        source.label(LabelRequest(golden_set.queries, runs, depth_of(source, parsed), corpus))
        for source in sources
    ]
    with paused_gc():
        result = _score(
            golden_set,
            runs,
            labelled,
            retriever_id=retriever_id,
            cutoff=cutoff,
            wanted=wanted,
            chosen=chosen,
            gated=gated,
            scored=depth if all_scores else HIT_DETAIL,
        )
    return gate.decide(result)


def _check_labels(
    golden: GoldenSet,
    wanted: Sequence[kernels.Metric],
    sources: Sequence[LabelSource],
    searched: bool = False,
) -> None:
    """Each wanted metric has a source of its labels that can label ``golden``; a golden
    set a retriever will search (``searched``) has the query texts it is asked for."""
    check_sources(wanted, sources)
    if searched:  # TREC qrels without texts: it would be asked for "1"
        check_texts(golden)
    for source in sources:
        source.check(golden, [m for m in wanted if m.labels in source.kinds])


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
    labelled: Sequence[Labelled],
    *,
    retriever_id: str,
    cutoff: int,
    wanted: Sequence[str],
    chosen: Sequence[Threshold],
    gated: Iterable[str] | None,
    scored: int,
) -> EvaluationResult:
    """The scored evaluation, built once, column by column (:class:`QueryColumns`): no
    object per query is made until something asks for one. Each source's labels feed the
    metrics of their kinds; its columns and fields (summaries) go into the result as they
    are."""
    queries = golden_set.queries
    n = len(queries)
    returned = list(map(_IDS, runs))
    latency_ms = np.fromiter(map(_LATENCY, runs), dtype=np.float64, count=n) * 1000.0
    errors = {row: run.error for row, run in enumerate(runs) if run.error is not None}
    labels = {kind: values for made in labelled for kind, values in made.labels.items()}
    stored = {name: values for made in labelled for name, values in made.columns.items()}
    relevant = cast("Sequence[dict[str, int]]", labels.pop("golden"))  # grades: whole numbers
    tags = list(map(_TAGS, queries))
    columns = _Columns(
        returned=returned,
        relevant=relevant,
        tags=tags,
        labels=labels,
        answered_latency_ms=np.delete(latency_ms, list(errors)) if errors else latency_ms,
    )
    levels = [made.relevance_level for made in labelled if made.relevance_level is not None]
    level = levels[0] if levels else kernels.DEFAULT_RELEVANCE_LEVEL
    ranks = next((made.ranks for made in labelled if "golden" in made.labels), None)
    measured = _measure(columns, wanted, level, ranks=ranks)
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
        texts=[_texts(run) if run.texts else _NOTHING for run in runs]
        if any(run.texts for run in runs)
        else None,
        scores=[_scores(run, scored) if run.scores else _NOTHING for run in runs]
        if any(run.scores for run in runs)
        else None,
        **stored,
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
        gated=gate.gated_metrics(measured.metrics, cutoff, chosen, {}, gated),
        **{name: value for made in labelled for name, value in made.fields.items()},
    )


_IDS = attrgetter("ids")
_LATENCY = attrgetter("latency")
_ID, _QUERY, _TAGS, _CRITERIA = map(attrgetter, ("id", "query", "tags", "criteria"))


#: a query's judgments, labels, texts or scores when it has none: one dict shared by all,
#: never written to (results are frozen), instead of four per query (0.25 GB a million)
_NOTHING: dict[str, Any] = {}


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
    #: label kind -> one ``{doc_id: label}`` per query, for the metrics not on ``relevant``
    labels: Mapping[str, Sequence[Mapping[str, float]]]
    answered_latency_ms: FloatArray  # of the calls that did not fail

    @classmethod
    def of(cls, queries: Sequence[QueryResult], kinds: Collection[str]) -> _Columns:
        """The columns of stored queries, with the labels of ``kinds`` read back from what
        a result keeps of them: the judge's verdicts and the downstream labels."""
        returned = [q.returned for q in queries]
        labels: dict[str, Sequence[Mapping[str, float]]] = {}
        if any(kind in kernels.JUDGED for kind in kinds):  # every stored hit, as deep as any
            deepest = max(map(len, returned), default=0)
            labels.update(judge_labels(returned, [q.judgments for q in queries], deepest))
        if any(kind.startswith("downstream") for kind in kinds):
            labels["downstream"] = [q.downstream for q in queries]
        return cls(
            returned=returned,
            relevant=[q.relevant for q in queries],
            tags=[q.tags for q in queries],
            labels=labels,
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
    template: EvaluationResult, base: Sequence[QueryResult], wanted: Sequence[str], **more: Any
) -> EvaluationResult:
    """``base``'s queries (their rankings and labels) scored again on ``wanted``, with the
    means, intervals, per-tag means and latencies: a fresh evaluation of ``template``'s
    golden set, retriever, k and thresholds (merged parts, metrics added), with ``more``
    of its fields."""
    kinds = {kernels.parse_metric(name).labels for name in wanted}
    measured = _measure(_Columns.of(base, kinds), wanted, template.relevance_level)
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
        **more,
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
    with np.errstate(invalid="ignore", divide="ignore"):
        found = kernels.compute(
            others,
            runs,
            [r or _OPEN for r in columns.relevant],  # open queries: masked out just below
            columns.labels if any(m.labels != "golden" for m in others) else None,
            unique=True,  # every ranking is deduplicated (normalize_hits, stored reports)
            ranks=ranks,
        )
    coverage: dict[str, tuple[int, int]] = {}
    graded: dict[str, np.ndarray] = {}
    if judged:  # slots a source could not label (NaN) are left out, and counted
        depth = max(m.k for m in judged)
        for kind in dict.fromkeys(m.labels for m in judged):
            group = [m for m in judged if m.labels == kind]
            slots = kernels.slot_matrix(runs, columns.labels[kind], depth)
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
