"""Evaluate a retriever on a golden set: retrieve, score, aggregate. Usable without pytest."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import gate, stats
from . import metrics as kernels
from ._gc import frozen_heap, paused_gc
from .adapters import adapt
from .gate import GateOutcome, Threshold
from .golden import GoldenQuery, GoldenSet, load_golden
from .metrics import FloatArray
from .retrieval import (
    DEFAULT_CONCURRENCY,
    ProgressCallback,
    QueryRun,
    Retriever,
    error_key,
    run_retriever,
)

if TYPE_CHECKING:
    from .compare import Comparison

DEFAULT_FAMILIES = ("recall", "precision", "hit_rate", "mrr", "ndcg", "map")


@dataclass
class QueryResult:
    """One golden query: what came back, how it scored, how long it took."""

    id: str
    query: str
    tags: tuple[str, ...]
    relevant: dict[str, int]
    returned: list[str]
    metrics: dict[str, float]
    latency_ms: float
    error: str | None = None
    duplicates: int = 0
    fingerprint: str = ""
    #: doc id -> the LLM judge's verdict on it (``{"on_topic", "score", "grade", "reason",
    #: "error"}``), for the top-k hits it was asked about; empty without a judge
    judgments: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: doc id -> downstream (eRAG) label in [0, 1], for the top-k hits; empty without one
    downstream: dict[str, float] = field(default_factory=dict)

    @property
    def missed(self) -> list[str]:
        """Relevant ids (grade >= 1) not in what came back, best grade first."""
        got = set(self.returned)
        ranked = sorted(self.relevant.items(), key=lambda kv: (-kv[1], kv[0]))
        return [doc for doc, grade in ranked if grade > 0 and doc not in got]

    @property
    def found_ranks(self) -> dict[str, int]:
        """Relevant id -> 1-based rank, for the relevant ids that came back."""
        return {d: r for r, d in enumerate(self.returned, 1) if self.relevant.get(d, 0) > 0}

    @property
    def error_key(self) -> str:
        """Its error's kind (:func:`~pytest_retrieval.retrieval.error_key`); "" without one."""
        return "" if self.error is None else error_key(self.error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "query": self.query,
            "tags": list(self.tags),
            "returned": self.returned,
            "relevant": self.relevant,
            "metrics": self.metrics,
            "latency_ms": round(self.latency_ms, 3),
            "error": self.error,
            "duplicates": self.duplicates,
            "fingerprint": self.fingerprint,
            "judgments": self.judgments,
            "downstream": self.downstream,
        }


@dataclass
class ErrorGroup:
    """Failed queries whose errors differ at most in numbers: one bug, reported once."""

    error: str  # the first query's message
    queries: list[str]  # their ids, in golden order
    traceback: str | None  # the first traceback the run kept of this kind of error
    uniform: bool  # every message is the same (not only up to numbers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": self.error,
            "count": len(self.queries),
            "queries": self.queries,
            "traceback": self.traceback,
        }


@dataclass
class ShortResults:
    """Most queries got fewer hits than the deepest metric's k (a retriever ignoring k?)."""

    metric: str  # the deepest metric (recall's when several share that k)
    k: int
    short: int  # answered queries with fewer than k hits
    answered: int  # queries whose call did not fail
    median: float  # hits per answered query

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "k": self.k,
            "queries": self.short,
            "of": self.answered,
            "median_hits": self.median,
        }


@dataclass
class EvaluationResult:
    """Aggregate and per-query metrics of one retriever on one golden set."""

    golden_name: str
    golden_source: str
    fingerprint: str
    retriever_id: str
    k: int
    metrics: dict[str, float]
    ci: dict[str, tuple[float, float]]
    ci_method: str
    per_tag: dict[str, dict[str, float]]
    tag_counts: dict[str, int]
    queries: list[QueryResult]
    latency_p50_ms: float
    latency_p95_ms: float
    thresholds: list[Threshold] = field(default_factory=list)
    #: set by the pytest plugin: the stored baseline this run was compared with, if any
    baseline_path: str | None = None
    baseline_note: str = ""
    comparison: Comparison | None = None
    #: metric -> (drop detectable with 80% power, allowed drop), when the plugin gates it
    power: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: the LLM judge's run summary (model, prompt version, calls, cache hits, tokens, cost,
    #: coverage, ungraded causes); None when no judge ran
    judge: dict[str, Any] | None = None
    #: the full golden set's size when only a ``--retrieval-sample`` of it ran
    sampled_from: int | None = None
    #: the downstream (eRAG) labeller's run summary (calls, cache hits, failures); None
    #: without one
    erag: dict[str, Any] | None = None
    #: error kind (``QueryResult.error_key``) -> the first traceback the run kept of it
    tracebacks: dict[str, str] = field(default_factory=dict)

    @property
    def regressed(self) -> bool:
        return self.comparison is not None and bool(self.comparison.regressed)

    def assert_no_regression(self) -> None:
        """Raise AssertionError with the regression table when a gated metric regressed."""
        if self.regressed:
            from .report import failure_text

            raise AssertionError(failure_text(self, self.gate()))

    @property
    def errors(self) -> list[QueryResult]:
        """Queries whose retriever call failed (they scored 0)."""
        return [q for q in self.queries if q.error is not None]

    @property
    def error_groups(self) -> list[ErrorGroup]:
        """The failed queries grouped by kind of error, the most frequent first."""
        groups: dict[str, list[QueryResult]] = {}
        for query in self.errors:
            groups.setdefault(query.error_key, []).append(query)
        return [
            ErrorGroup(
                error=members[0].error or "",
                queries=[q.id for q in members],
                traceback=self.tracebacks.get(key),
                uniform=all(q.error == members[0].error for q in members),
            )
            for key, members in sorted(groups.items(), key=lambda kv: -len(kv[1]))
        ]

    @property
    def short_results(self) -> ShortResults | None:
        """Set when more than half of the answered queries got fewer hits than the deepest
        metric's k, and some of those missed a relevant document: the missing ranks count as
        misses, often because the retriever ignores k (or slices to a fixed number)."""
        depths = {name: kernels.parse_metric(name).k for name in self.metrics}
        if not depths:
            return None
        k = max(depths.values())
        deepest = [name for name, depth in depths.items() if depth == k]
        metric = next((name for name in deepest if name.startswith("recall@")), deepest[0])
        answered = [q for q in self.queries if q.error is None]
        short = [q for q in answered if len(q.returned) < k]
        if len(short) * 2 <= len(answered) or not any(q.missed for q in short):
            return None
        median = float(np.median([len(q.returned) for q in answered]))
        return ShortResults(metric, k, len(short), len(answered), median)

    @property
    def duplicates(self) -> int:
        return sum(q.duplicates for q in self.queries)

    def gate(self, thresholds: Iterable[Threshold] | None = None) -> list[GateOutcome]:
        """Check ``thresholds`` (default: the ones this evaluation was run with)."""
        chosen = list(self.thresholds if thresholds is None else thresholds)
        missing = [t.metric.name for t in chosen if t.metric.name not in self.metrics]
        if missing:
            raise gate.ThresholdError(f"metrics not computed in this evaluation: {missing}")
        return gate.check(chosen, self.metrics, self.per_tag, self.ci)

    @property
    def passed(self) -> bool:
        return (
            not self.errors
            and self.judge_problem is None
            and all(outcome.passed for outcome in self.gate())
        )

    @property
    def judge_problem(self) -> str | None:
        """Why the LLM or downstream labels cannot be trusted, or None."""
        if self.erag and self.erag.get("failed"):
            first, why = next(iter(self.erag["failures"].items()))
            return (
                f"{self.erag['failed']} downstream labels failed (they count as 0); "
                f"first: {first}: {why}"
            )
        if not self.judge:
            return None
        coverage, needed = self.judge.get("coverage", 1.0), self.judge.get("min_coverage", 0.0)
        if coverage >= needed:
            return None
        causes = sorted((self.judge.get("causes") or {}).items(), key=lambda kv: -kv[1])
        why = f"; most often: {causes[0][0]} ({causes[0][1]}x)" if causes else ""
        return (
            f"the LLM judge graded {coverage:.1%} of the hits, below the required {needed:.0%} "
            f"(--retrieval-judge-min-coverage){why}"
        )

    @property
    def open_queries(self) -> int:
        """Queries without golden judgments (scored by the judge or downstream labels only)."""
        return sum(1 for q in self.queries if not q.relevant)

    def assert_thresholds(self, thresholds: Mapping[str, float] | None = None) -> None:
        """Raise AssertionError with the gate table when a threshold fails or a call failed.

        ``thresholds`` (``{"recall@10": 0.8, "mrr@5[faq]": 0.5}``) replaces the evaluation's
        own thresholds; metrics it names that were not computed are computed here.
        """
        from .report import failure_text

        result = self
        chosen = self.thresholds
        if thresholds is not None:
            chosen = gate.from_mapping(thresholds, "assert_thresholds()")
            needed = {t.metric.name for t in chosen} - set(self.metrics)
            if needed:
                result = self.with_metrics(sorted(needed))
        outcomes = result.gate(chosen)
        if result.errors or result.judge_problem or not all(o.passed for o in outcomes):
            raise AssertionError(failure_text(result, outcomes))

    def with_metrics(self, names: Sequence[str]) -> EvaluationResult:
        """A copy with more metrics, from the stored rankings (no retriever calls)."""
        result = self._rescored(names)
        result.sampled_from, result.judge, result.erag = self.sampled_from, self.judge, self.erag
        result.tracebacks = dict(self.tracebacks)
        return result

    def _rescored(self, names: Sequence[str]) -> EvaluationResult:
        runs = [q.returned for q in self.queries]
        qrels = [q.relevant for q in self.queries]
        wanted = sorted(
            {*self.metrics, *names}, key=lambda name: kernels.parse_metric(name).sort_key
        )
        return _aggregate(
            name=self.golden_name,
            source=self.golden_source,
            fingerprint=self.fingerprint,
            retriever_id=self.retriever_id,
            k=self.k,
            base=[replace(q, metrics={}) for q in self.queries],
            runs=runs,
            qrels=qrels,
            wanted=wanted,
            thresholds=self.thresholds,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationResult:
        return result_from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report entry (schema: ``schema/report.schema.json``)."""
        with paused_gc():
            return self._to_dict()

    def _to_dict(self) -> dict[str, Any]:
        short = self.short_results
        return {
            "golden": {
                "name": self.golden_name,
                "source": self.golden_source,
                "fingerprint": self.fingerprint,
            },
            "retriever": self.retriever_id,
            "k": self.k,
            "n_queries": len(self.queries),
            "metrics": self.metrics,
            "ci": {name: list(bounds) for name, bounds in self.ci.items()},
            "ci_method": self.ci_method,
            "per_tag": {
                tag: {"n_queries": self.tag_counts[tag], "metrics": values}
                for tag, values in self.per_tag.items()
            },
            "latency_ms": {"p50": self.latency_p50_ms, "p95": self.latency_p95_ms},
            "thresholds": [
                {
                    "metric": o.threshold.key,
                    "minimum": o.threshold.minimum,
                    "value": o.value,
                    "passed": o.passed,
                    "source": o.threshold.source,
                }
                for o in self.gate()
            ],
            "errors": len(self.errors),
            "error_groups": [group.to_dict() for group in self.error_groups],
            "short_results": None if short is None else short.to_dict(),
            "duplicates_dropped": self.duplicates,
            "passed": self.passed,
            "baseline": {
                "path": self.baseline_path,
                "note": self.baseline_note,
                "comparison": None if self.comparison is None else self.comparison.to_dict(),
                "power": {name: list(pair) for name, pair in self.power.items()},
            },
            "judge": self.judge,
            "sampled_from": self.sampled_from,
            "erag": self.erag,
            "queries": [q.to_dict() for q in self.queries],
        }


def _threshold_from_dict(entry: Mapping[str, Any]) -> Threshold:
    metric, tag = gate.parse_key(entry["metric"])
    return Threshold(metric, float(entry["minimum"]), tag, entry.get("source", ""))


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def result_from_dict(data: Mapping[str, Any]) -> EvaluationResult:
    """Rebuild an :class:`EvaluationResult` from its report entry (``to_dict``)."""
    with paused_gc():
        return _result_from_dict(data)


def _result_from_dict(data: Mapping[str, Any]) -> EvaluationResult:
    from .compare import Comparison

    baseline = data.get("baseline") or {}
    stored = baseline.get("comparison")
    queries = [
        QueryResult(
            id=q["id"],
            query=q["query"],
            tags=tuple(q["tags"]),
            relevant=dict(q["relevant"]),
            returned=list(q["returned"]),
            metrics={name: _nan(v) for name, v in q["metrics"].items()},
            latency_ms=_nan(q["latency_ms"]),
            error=q["error"],
            duplicates=q["duplicates"],
            fingerprint=q.get("fingerprint", ""),
            judgments=dict(q.get("judgments") or {}),
            downstream=dict(q.get("downstream") or {}),
        )
        for q in data["queries"]
    ]
    return EvaluationResult(
        golden_name=data["golden"]["name"],
        golden_source=data["golden"]["source"],
        fingerprint=data["golden"]["fingerprint"],
        retriever_id=data["retriever"],
        k=data["k"],
        metrics={name: _nan(v) for name, v in data["metrics"].items()},
        ci={name: (_nan(lo), _nan(hi)) for name, (lo, hi) in data["ci"].items()},
        ci_method=data["ci_method"],
        per_tag={tag: dict(entry["metrics"]) for tag, entry in data["per_tag"].items()},
        tag_counts={tag: entry["n_queries"] for tag, entry in data["per_tag"].items()},
        queries=queries,
        latency_p50_ms=_nan(data["latency_ms"]["p50"]),
        latency_p95_ms=_nan(data["latency_ms"]["p95"]),
        thresholds=[_threshold_from_dict(t) for t in data["thresholds"]],
        baseline_path=baseline.get("path"),
        baseline_note=baseline.get("note", ""),
        comparison=None if stored is None else Comparison.from_dict(stored),
        power={name: (_nan(d), _nan(a)) for name, (d, a) in baseline.get("power", {}).items()},
        judge=data.get("judge"),
        sampled_from=data.get("sampled_from"),
        erag=data.get("erag"),
        tracebacks={
            error_key(group["error"]): group["traceback"]
            for group in data.get("error_groups") or []
            if group.get("traceback")
        },
    )


def metric_names(
    golden: GoldenSet, k: int, extra: Iterable[str], thresholds: Iterable[Threshold]
) -> list[str]:
    """What to compute: the golden set's list (or the default families at k), plus every
    metric a threshold or the caller names; sorted by family then k."""
    names = set(golden.metrics) or {f"{family}@{k}" for family in DEFAULT_FAMILIES}
    names |= set(extra) | {t.metric.name for t in thresholds}
    return sorted(names, key=lambda name: kernels.parse_metric(name).sort_key)


def evaluate(
    retriever: Retriever,
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
    downstream: DownstreamLabeller | None = None,
    doc_id_key: str | None = None,
) -> EvaluationResult:
    """Run ``retriever(query, k, **params)`` over the golden set and score it.

    ``thresholds`` default to the golden file's; metrics default to the golden file's list or
    recall/precision/hit_rate/mrr/ndcg/map at its k. With a ``judge`` (see
    :mod:`pytest_retrieval.judge`) the top-k hits are graded too and ``otr@k`` (and, on the 0-3
    scale, ``llm_*@k``) added; hit texts come from the hits or from ``corpus`` (id -> text).
    With ``downstream`` (a :class:`DownstreamLabeller`) each top-k hit gets an eRAG label and
    ``erag_*@k`` are added. Open queries (no ``relevant``) need one of the two.
    ``retriever`` may also be a LangChain, LlamaIndex or Haystack retriever object (see
    :mod:`pytest_retrieval.adapters`); ``doc_id_key`` names the metadata key of its doc ids.
    """
    golden_set = (
        golden
        if isinstance(golden, GoldenSet)
        else load_golden(golden, require_relevant=judge is None and downstream is None)
    )
    if thresholds is None:
        chosen = gate.from_mapping(golden_set.thresholds, f"{golden_set.source} thresholds")
    elif isinstance(thresholds, Mapping):
        chosen = gate.from_mapping(thresholds, "evaluate(thresholds=...)")
    else:
        chosen = list(thresholds)
    cutoff = k or golden_set.k
    for name in metrics:
        _check_name(name)
    defaults: list[str] = []
    if judge is not None:
        defaults.append(f"otr@{cutoff}")
        if judge.graded:
            defaults += [f"llm_{family}@{cutoff}" for family in ("precision", "mrr", "ndcg")]
    if downstream is not None:
        defaults += [f"erag_{f}@{cutoff}" for f in ("precision", "hit_rate", "mrr", "ndcg")]
    wanted = metric_names(golden_set, cutoff, [*defaults, *metrics], chosen)
    _check_labels(golden_set, wanted, judge, downstream)
    depth = max([cutoff, *(_check_name(name).k for name in wanted)])
    retriever = adapt(retriever, doc_id_key=doc_id_key)  # LangChain, LlamaIndex, Haystack
    with frozen_heap():
        runs = run_retriever(
            retriever,
            golden_set.queries,
            depth,
            concurrency=concurrency,
            timeout=timeout,
            progress=progress,
        )
    label_depth = {
        source: max(
            (m.k for m in map(kernels.parse_metric, wanted) if m.labels in kinds), default=0
        )
        for source, kinds in (("judge", {"on_topic", "llm_grade"}), ("downstream", DOWNSTREAM))
    }
    judgments: list[dict[str, dict[str, Any]]] = [{} for _ in runs]
    downstream_labels: list[dict[str, float]] = [{} for _ in runs]
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
            golden_set, runs, retriever_id, cutoff, wanted, chosen, judgments, downstream_labels
        )
    result.judge = summary
    if downstream is not None:
        result.erag = downstream.summary()
    return result


DOWNSTREAM = {"downstream", "downstream_gain"}


class Judge(Protocol):
    """What :func:`evaluate` needs of an LLM judge (``pytest_retrieval.judge.Judge``)."""

    @property
    def graded(self) -> bool:
        """True on the 0-3 scale (adds llm_* metrics), False for binary verdicts."""

    @property
    def min_coverage(self) -> float: ...

    def judge(
        self, pairs: Sequence[Any], progress: ProgressCallback | None = None
    ) -> Sequence[Any]: ...

    def pair(self, query: GoldenQuery, doc_id: str, text: str) -> Any: ...

    def summary(self) -> dict[str, Any]: ...


class DownstreamLabeller(Protocol):
    """Gives each top-k hit a downstream (eRAG) label in [0, 1]."""

    def label(
        self,
        queries: Sequence[GoldenQuery],
        runs: Sequence[QueryRun],
        depth: int,
        corpus: Mapping[str, str] | None,
    ) -> list[dict[str, float]]: ...

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
    )
    return judgments, summary


def _since(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``after`` with its counters (numbers, and the causes tally) less ``before``."""
    summary = dict(after)
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, int | float) and isinstance(old, int | float):
            if not isinstance(value, bool) and key != "min_score":
                summary[key] = value - old
        elif key == "causes" and isinstance(value, Mapping):
            earlier = before.get("causes") or {}
            summary[key] = {
                c: n - earlier.get(c, 0) for c, n in value.items() if n > earlier.get(c, 0)
            }
    return summary


def _check_labels(
    golden: GoldenSet, wanted: Sequence[str], judge: Judge | None, downstream: Any
) -> None:
    """A judge metric needs a judge, a downstream metric a labeller, an open query either."""
    for name in wanted:
        source = kernels.parse_metric(name).labels
        if source in {"on_topic", "llm_grade"} and judge is None:
            raise gate.ThresholdError(f"{name} needs an LLM judge: run with --retrieval-judge")
        if source == "llm_grade" and judge is not None and not judge.graded:
            raise gate.ThresholdError(
                f"{name} needs graded verdicts: add --retrieval-judge-scale 0-3"
            )
        if source in DOWNSTREAM and downstream is None:
            raise gate.ThresholdError(
                f"{name} needs downstream labels: define a retrieval_downstream fixture"
            )


def _score(
    golden_set: GoldenSet,
    runs: Sequence[QueryRun],
    retriever_id: str,
    cutoff: int,
    wanted: Sequence[str],
    chosen: Sequence[Threshold],
    judgments: Sequence[dict[str, dict[str, Any]]],
    downstream: Sequence[dict[str, float]],
) -> EvaluationResult:
    base = [
        QueryResult(
            id=q.id,
            query=q.query,
            tags=q.tags,
            relevant=q.relevant,
            returned=run.ids,
            metrics={},
            latency_ms=run.latency * 1000.0,
            error=run.error,
            duplicates=run.duplicates,
            fingerprint=golden_set.query_fingerprints[q.id],
            judgments=verdicts,
            downstream=labels,
        )
        for q, run, verdicts, labels in zip(
            golden_set.queries, runs, judgments, downstream, strict=True
        )
    ]
    result = _aggregate(
        name=golden_set.name,
        source=golden_set.source,
        fingerprint=golden_set.fingerprint,
        retriever_id=retriever_id,
        k=cutoff,
        base=base,
        runs=[run.ids for run in runs],
        qrels=[q.relevant for q in golden_set.queries],
        wanted=wanted,
        thresholds=chosen,
    )
    result.sampled_from = golden_set.sampled_from
    for run in runs:
        if run.error is not None and run.traceback is not None:
            result.tracebacks.setdefault(error_key(run.error), run.traceback)
    return result


def _check_name(name: str) -> kernels.Metric:
    try:
        return kernels.parse_metric(name)
    except kernels.MetricNameError as exc:
        raise gate.ThresholdError(str(exc)) from None


def _aggregate(
    *,
    name: str,
    source: str,
    fingerprint: str,
    retriever_id: str,
    k: int,
    base: Sequence[QueryResult],
    runs: Sequence[Sequence[str]],
    qrels: Sequence[Mapping[str, int]],
    wanted: Sequence[str],
    thresholds: Sequence[Threshold],
) -> EvaluationResult:
    parsed = [kernels.parse_metric(metric) for metric in wanted]
    labelled = any(m.labels != "golden" for m in parsed)
    open_rows = np.array([not qrel for qrel in qrels], dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_query = kernels.compute(
            parsed,
            runs,
            [qrel or {"": 1} for qrel in qrels],  # open queries: masked out just below
            _labels_of(base) if labelled else None,
        )
    human = {m.name for m in parsed if m.labels == "golden"}
    if open_rows.any():
        for metric in human:
            per_query[metric][open_rows] = np.nan
    intervals, method = stats.bootstrap_ci(
        {m: v[~open_rows] for m, v in per_query.items() if m in human}
    )
    judged, _ = stats.bootstrap_ci({m: v for m, v in per_query.items() if m not in human})
    intervals.update(judged)
    for rate in parsed:
        if rate.family == "otr":  # a rate over k slots per query: Wilson, as in the paper
            on_topic = float(per_query[rate.name].sum()) * rate.k
            intervals[rate.name] = stats.wilson_interval(on_topic, rate.k * len(base))
    columns = [(metric, values.tolist()) for metric, values in per_query.items()]
    for i, q in enumerate(base):  # base is ours to fill: fresh from evaluate or copied
        q.metrics = {metric: column[i] for metric, column in columns}
    queries = list(base)
    by_tag: dict[str, list[int]] = {}
    for i, q in enumerate(base):
        for tag in q.tags:
            by_tag.setdefault(tag, []).append(i)
    per_tag = {
        tag: {metric: _mean(values[rows]) for metric, values in per_query.items()}
        for tag, rows in sorted(by_tag.items())
    }
    latencies = np.array([q.latency_ms for q in base if q.error is None], dtype=np.float64)
    return EvaluationResult(
        golden_name=name,
        golden_source=source,
        fingerprint=fingerprint,
        retriever_id=retriever_id,
        k=k,
        metrics={metric: _mean(values) for metric, values in per_query.items()},
        ci=intervals,
        ci_method=method,
        per_tag=per_tag,
        tag_counts={tag: len(rows) for tag, rows in sorted(by_tag.items())},
        queries=queries,
        latency_p50_ms=stats.percentile(latencies, 50),
        latency_p95_ms=stats.percentile(latencies, 95),
        thresholds=list(thresholds),
    )


__all__ = ["ErrorGroup", "EvaluationResult", "QueryResult", "QueryRun", "ShortResults", "evaluate"]


def _mean(values: FloatArray) -> float:
    """Mean over the queries that have the metric (open queries have no golden metrics)."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else float("nan")


def _labels_of(queries: Sequence[QueryResult]) -> dict[str, list[dict[str, float]]]:
    """The judge's and the downstream labels of each query's hits, as the kernels take them."""
    return {
        "on_topic": [
            {doc: float(v.get("on_topic") is True) for doc, v in q.judgments.items()}
            for q in queries
        ],
        "llm_grade": [
            {doc: float(v["grade"]) for doc, v in q.judgments.items() if v.get("grade")}
            for q in queries
        ],
        "downstream": [dict(q.downstream) for q in queries],
    }
