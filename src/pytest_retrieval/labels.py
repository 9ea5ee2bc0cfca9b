"""Label sources: where the labels a metric is computed on come from, behind one interface.

Every metric reads one *kind* of label (the metric registry's ``Metric.labels``): "golden"
(recall, nDCG, ...: graded judgments), "on_topic" and "llm_grade" (OTR and llm_*: an LLM
judge's verdicts), "downstream" / "downstream_gain" (eRAG: a RAG pipeline's score of each
hit). A :class:`LabelSource` gives one or more kinds; :func:`~.evaluation.evaluate` takes a
list of them and asks each, with no knowledge of which it is. The golden set's own qrels
(:class:`GoldenLabels`), the LLM judge (:class:`JudgeLabels`) and downstream labels
(:class:`~.downstream.DownstreamRunner`) are sources; so can be evidence spans or a
human-calibrated judge, without a change to ``evaluate``.

What a source gives (:class:`Labelled`): per query ``{doc_id: label}``. A doc it leaves out
is *unjudged*, and how a metric counts it is the kind's rule, not the source's: golden and
downstream kinds count it not relevant (trec_eval), the judge kinds leave a NaN label out of
their slots (an ungraded hit is neither on nor off topic). ``holes`` says, where the source
knows, why a doc it was asked about has no label.

Importing this module imports neither numpy nor pydantic: a source is written against it
without loading the scoring stack.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .errors import ThresholdError
from .hits import NOT_RETURNED, QueryRun

if TYPE_CHECKING:
    from .golden import GoldenQuery, GoldenSet
    from .metrics import Metric

#: ``progress(done, total)`` of a labelling phase
Progress = Callable[[int, int], None]

#: how a judge metric gets its judge (``eval``, which has none, says otherwise)
JUDGE_ADVICE = "run with --retrieval-judge"

#: label kind -> what a metric of that kind needs when no source gives it, and how to get it
NEEDS: dict[str, str] = {
    "on_topic": f"an LLM judge: {JUDGE_ADVICE}",
    "llm_grade": f"an LLM judge: {JUDGE_ADVICE}",
    "downstream": "downstream labels: define a retrieval_downstream fixture",
    "downstream_gain": "downstream labels: define a retrieval_downstream fixture",
}

#: numbers of a source's summary that are settings or averages, not counters: neither
#: differenced (one evaluation's share of a judge's process) nor added (merged parts)
NOT_COUNTERS = frozenset(
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


@dataclass(frozen=True)
class LabelRequest:
    """What a source is asked to label: each golden query's ranked hits (golden order), to
    ``depth`` -- the deepest cutoff of a wanted metric it feeds (0: none; a source may still
    have something to keep, as the golden judgments shown beside each query)."""

    queries: Sequence[GoldenQuery]
    runs: Sequence[QueryRun]
    depth: int
    #: doc id -> text, for hits that came back without one
    corpus: Mapping[str, str] | None = None

    def text(self, row: int, doc: str) -> str | None:
        """The text of query ``row``'s hit ``doc``: the hit's own, else the corpus's."""
        text = self.runs[row].texts.get(doc)
        if text is None and self.corpus is not None:
            text = self.corpus.get(doc)
        return text


@dataclass(frozen=True)
class Labelled:
    """What one source made of an evaluation's runs."""

    #: kind -> one ``{doc_id: label}`` per query (golden order); NaN: asked, no label
    labels: Mapping[str, Sequence[Mapping[str, float]]]
    #: per query, ``{doc_id: why it has no label}`` for the docs it was asked about and
    #: could not label (None: the source does not say)
    holes: Sequence[Mapping[str, str]] | None = None
    #: what the per-query table keeps of them: ``QueryColumns`` field -> one value per query
    columns: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    #: the ``EvaluationResult`` fields it fills: its run summary (calls, cost, coverage)
    fields: Mapping[str, Any] = field(default_factory=dict)
    #: the grade from which a graded label counts relevant (None: the default)
    relevance_level: int | None = None
    #: where each query's "golden" labelled docs came back, found already (a fast path the
    #: retriever's calls give; None: the kernels search the rankings)
    ranks: Sequence[Sequence[int]] | None = None


class LabelSource(Protocol):
    """Anything :func:`~.evaluation.evaluate` can take labels from."""

    @property
    def name(self) -> str:
        """What it is called in messages ("judge", "downstream")."""

    @property
    def kinds(self) -> Collection[str]:
        """The label kinds it gives (``Metric.labels``): the metric families it feeds."""

    def defaults(self, golden: GoldenSet, k: int) -> Sequence[str]:
        """The metrics it adds at cutoff ``k`` when none are named."""

    def check(self, golden: GoldenSet, wanted: Sequence[Metric]) -> None:
        """Before anything runs: raise an error naming the fix if it cannot label
        ``golden`` for the ``wanted`` metrics of its kinds (a scale it lacks, no texts)."""

    def label(self, request: LabelRequest) -> Labelled:
        """Label the ranked hits of ``request``."""


def label_sources(
    given: Sequence[LabelSource] = (),
    *,
    judge: Judge | None = None,
    judge_progress: Progress | None = None,
    downstream: LabelSource | None = None,
) -> list[LabelSource]:
    """The sources of one evaluation: ``given``, the judge and downstream labeller named as
    keyword arguments, and the golden set's qrels unless a source gives golden labels. Two
    sources of one kind are an error (which one would a metric read?)."""
    sources = list(given)
    if judge is not None:
        sources.append(JudgeLabels(judge, judge_progress))
    if downstream is not None:
        sources.append(downstream)
    if not any("golden" in s.kinds for s in sources):
        sources.insert(0, GoldenLabels())
    owner: dict[str, str] = {}
    for source in sources:
        for kind in source.kinds:
            if kind in owner:
                raise ThresholdError(
                    f"two label sources give {kind!r} labels ({owner[kind]} and "
                    f"{source.name}): pass evaluate() one of them"
                )
            owner[kind] = source.name
    return sources


def check_sources(wanted: Sequence[Metric], sources: Sequence[LabelSource]) -> None:
    """Every wanted metric has a source of its labels."""
    given = {kind for source in sources for kind in source.kinds}
    for metric in wanted:
        if metric.labels not in given:
            needs = NEEDS.get(
                metric.labels, f"{metric.labels!r} labels: pass evaluate() a source of them"
            )
            raise ThresholdError(f"{metric.name} needs {needs}")


def depth_of(source: LabelSource, wanted: Sequence[Metric]) -> int:
    """The deepest cutoff of the wanted metrics ``source`` feeds (0: none)."""
    return max((m.k for m in wanted if m.labels in source.kinds), default=0)


# ---------------------------------------------------------------------------------------
# the golden set's qrels


@dataclass(frozen=True)
class GoldenLabels:
    """The golden set's own judgments (``relevant``): recall, precision, nDCG, ... An open
    query (no judgments) has none, and the golden metrics leave it out."""

    name: str = "golden qrels"
    kinds: Collection[str] = ("golden",)

    def defaults(self, golden: GoldenSet, k: int) -> Sequence[str]:
        """judged@k, the share of the top k judged (cheap, not gated), when any query is."""
        from .metrics import JUDGED_FAMILY

        return [f"{JUDGED_FAMILY}@{k}"] if any(q.relevant for q in golden.queries) else []

    def check(self, golden: GoldenSet, wanted: Sequence[Metric]) -> None:
        """Nothing to check: the golden set was validated when it was read."""

    def label(self, request: LabelRequest) -> Labelled:
        return Labelled(
            labels={"golden": [q.relevant for q in request.queries]},
            ranks=_found_ranks(request.queries, request.runs),
        )


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


# ---------------------------------------------------------------------------------------
# the LLM judge


class Judge(Protocol):
    """What :class:`JudgeLabels` needs of an LLM judge (``pytest_retrieval.judge.Judge``)."""

    @property
    def graded(self) -> bool:
        """True on the 0-3 scale (adds llm_* metrics), False for binary verdicts."""

    @property
    def min_coverage(self) -> float: ...

    @property
    def relevance_level(self) -> int:
        """The grade (0-3 scale) from which a hit counts as relevant and on topic."""

    def judge(self, pairs: Sequence[Any], progress: Progress | None = None) -> Sequence[Any]: ...

    def pair(self, query: GoldenQuery, doc_id: str, text: str) -> Any: ...

    def summary(self) -> dict[str, Any]: ...


NO_TEXT = (
    "no text to judge: the hit has no 'text' and no corpus has this id "
    "(return hits with 'text', or give a corpus)"
)


@dataclass(frozen=True)
class JudgeLabels:
    """An LLM judge's verdicts on the top hits: on topic (OTR) and, on the 0-3 scale, the
    grade (llm_*). A hit it could not grade (no text, an error) is a NaN label, left out of
    the judge metrics; its summary (calls, cache hits, cost, coverage) is this evaluation's
    share of the judge's, which counts for its whole process."""

    judge: Judge
    progress: Progress | None = None
    name: str = "judge"
    kinds: Collection[str] = ("on_topic", "llm_grade")

    def defaults(self, golden: GoldenSet, k: int) -> Sequence[str]:
        graded = [f"llm_{family}@{k}" for family in ("precision", "mrr", "ndcg")]
        return [f"otr@{k}", *(graded if self.judge.graded else ())]

    def check(self, golden: GoldenSet, wanted: Sequence[Metric]) -> None:
        from .golden import check_texts

        for metric in wanted:
            if metric.labels == "llm_grade" and not self.judge.graded:
                raise ThresholdError(
                    f"{metric.name} needs graded verdicts: add --retrieval-judge-scale 0-3"
                )
        check_texts(golden, "the LLM judge")

    def label(self, request: LabelRequest) -> Labelled:
        judgments, summary = self._judge_hits(request)
        ids = [run.ids for run in request.runs]
        return Labelled(
            labels=judge_labels(ids, judgments, request.depth),
            holes=[
                {doc: v["error"] for doc, v in verdicts.items() if v.get("error") is not None}
                for verdicts in judgments
            ],
            columns={"judgments": judgments},
            fields={"judge": summary},
            relevance_level=self.judge.relevance_level,
        )

    def _judge_hits(
        self, request: LabelRequest
    ) -> tuple[list[dict[str, dict[str, Any]]], dict[str, Any]]:
        """Ask the judge about every top-``depth`` hit; hits without text are ungraded."""
        judge = self.judge
        judgments: list[dict[str, dict[str, Any]]] = [{} for _ in request.runs]
        pairs, where = [], []
        no_text = 0
        for row, (query, run) in enumerate(zip(request.queries, request.runs, strict=True)):
            for doc in run.ids[: request.depth]:
                text = request.text(row, doc)
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
        verdicts = judge.judge(pairs, self.progress) if pairs else []
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


def _since(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``after`` with its counters (numbers, and the causes tally) less ``before``."""
    summary = dict(after)
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, int | float) and isinstance(old, int | float):
            if not isinstance(value, bool) and key not in NOT_COUNTERS:
                summary[key] = value - old
        elif key == "causes" and isinstance(value, Mapping):
            earlier = before.get("causes") or {}
            summary[key] = {
                c: n - earlier.get(c, 0) for c, n in value.items() if n > earlier.get(c, 0)
            }
    return summary


def judge_labels(
    runs: Sequence[Sequence[str]], judgments: Sequence[Mapping[str, Mapping[str, Any]]], depth: int
) -> dict[str, list[dict[str, float]]]:
    """The judge's labels of each query's top ``depth`` hits from its verdicts (as a report
    stores them): on topic 1/0 and the 0-3 grade; NaN for a hit it did not grade (an error,
    or no verdict: a deeper metric than the judge was asked about)."""
    from .results import is_graded

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
