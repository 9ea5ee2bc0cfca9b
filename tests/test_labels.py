"""Labels are a protocol: a new label source plugs into ``evaluate()`` unchanged.

The two sources here live in this file only: human grades from a dict (golden labels for a
golden set that has none) and evidence strings matched in a hit's text (on-topic labels,
the LLM judge's kind, with no judge). ``evaluate()`` knows neither.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from helpers import DOCS

from pytest_retrieval import evaluate
from pytest_retrieval.downstream import DownstreamRunner
from pytest_retrieval.errors import ThresholdError
from pytest_retrieval.evaluation import with_metrics
from pytest_retrieval.golden import GoldenSet
from pytest_retrieval.labels import GoldenLabels, JudgeLabels, Labelled, LabelRequest
from pytest_retrieval.metrics import Metric, compute


def search(query: str, k: int) -> list[dict[str, str]]:
    """Docs sharing the most words with the query, with their texts (d6 without one)."""
    words = set(query.split())
    ranked = sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))
    return [{"id": d, **({"text": DOCS[d]} if d != "d6" else {})} for d in ranked[:k]]


@dataclass
class HumanLabels:
    """Golden labels from people, kept apart from the golden file: ``{qid: {doc: grade}}``."""

    grades: Mapping[str, Mapping[str, int]]
    name: str = "human labels"
    kinds: Collection[str] = ("golden",)
    asked: list[int] = field(default_factory=list)

    def defaults(self, golden: GoldenSet, k: int) -> Sequence[str]:
        return [f"ndcg_exp@{k}"]

    def check(self, golden: GoldenSet, wanted: Sequence[Metric]) -> None:
        unlabelled = [q.id for q in golden.queries if q.id not in self.grades]
        if unlabelled:
            raise ThresholdError(f"no human labels for {unlabelled}: label them first")

    def label(self, request: LabelRequest) -> Labelled:
        self.asked.append(request.depth)
        return Labelled(labels={"golden": [dict(self.grades[q.id]) for q in request.queries]})


@dataclass
class EvidenceLabels:
    """On topic when the hit's text holds the query's evidence string; a hit without text
    has no label (NaN), so it is left out of OTR as an ungraded hit is."""

    evidence: Mapping[str, str]
    name: str = "evidence"
    kinds: Collection[str] = ("on_topic",)

    def defaults(self, golden: GoldenSet, k: int) -> Sequence[str]:
        return [f"otr@{k}"]

    def check(self, golden: GoldenSet, wanted: Sequence[Metric]) -> None:
        pass

    def label(self, request: LabelRequest) -> Labelled:
        labels: list[dict[str, float]] = []
        holes: list[dict[str, str]] = []
        for row, (query, run) in enumerate(zip(request.queries, request.runs, strict=True)):
            mine, missing = {}, {}
            for doc in run.ids[: request.depth]:
                text = request.text(row, doc)
                if text is None:
                    mine[doc], missing[doc] = math.nan, "no text"
                else:
                    mine[doc] = float(self.evidence[query.id] in text)
            labels.append(mine)
            holes.append(missing)
        return Labelled(labels={"on_topic": labels}, holes=holes)


@pytest.fixture
def open_golden(tmp_path: Path) -> Path:
    """Three queries without judgments: only a label source can score them."""
    path = tmp_path / "golden.json"
    queries = [
        {"id": "apple", "query": "apple"},
        {"id": "bread", "query": "bread recipe"},
        {"id": "cherry", "query": "cherry"},
    ]
    path.write_text(json.dumps({"name": "open", "k": 3, "queries": queries}), encoding="utf-8")
    return path


HUMAN = {"apple": {"d1": 2, "d4": 1}, "bread": {"d2": 1, "d9": 1}, "cherry": {"d3": 1, "d5": 0}}


def test_a_new_source_of_golden_labels_scores_an_open_golden_set(open_golden: Path) -> None:
    human = HumanLabels(HUMAN)
    result = evaluate(search, open_golden, labels=[human])
    assert {"recall@3", "ndcg@3", "ndcg_exp@3"} <= set(result.metrics)  # with its default
    assert "judged@3" not in result.metrics  # the golden qrels' default: they are not asked
    assert human.asked == [3]
    runs = [q.returned for q in result.queries]
    expected = compute(["recall@3", "ndcg_exp@3"], runs, [HUMAN[q.id] for q in result.queries])
    for name, values in expected.items():
        assert result.metrics[name] == pytest.approx(float(np.mean(values)), abs=1e-12)
    assert result.queries[1].metrics["recall@3"] == 0.5  # d2 found, d9 never returned
    assert [q.relevant for q in result.queries] == [HUMAN[q.id] for q in result.queries]
    again = with_metrics(result, ["mrr@3"])  # from what the result keeps of the labels
    assert again.metrics["recall@3"] == result.metrics["recall@3"]
    assert again.metrics["mrr@3"] == 1.0 and again.metrics["recall@3"] == (1 + 0.5 + 1) / 3


def test_a_new_source_of_on_topic_labels_feeds_otr_with_its_holes_left_out(
    open_golden: Path,
) -> None:
    evidence = EvidenceLabels({"apple": "apple", "bread": "bread", "cherry": "cherry"})
    result = evaluate(search, open_golden, labels=[evidence], metrics=["otr@3"])
    # apple: d1, d4 hold "apple", d2 not -> 2/3; bread: d2, d5 and d1 -> 2 of 3 (d1 is
    # "apple pie recipe"); cherry: d3 holds it, d6 has no text (left out), d1 not -> 1/2
    assert tuple(result.queries[2].returned) == ("d3", "d6", "d1")
    values = [q.metrics["otr@3"] for q in result.queries]
    assert values == pytest.approx([2 / 3, 2 / 3, 1 / 2])
    assert result.label_coverage["otr@3"] == (8, 9)
    assert result.judge is None  # no LLM judge ran, nor a summary made up for one


def test_a_metric_no_source_labels_names_what_would() -> None:
    golden = GoldenSet(name="g", source="g.json", queries=())
    with pytest.raises(ThresholdError, match="otr@3 needs an LLM judge: run with --retrieval"):
        evaluate(search, golden, metrics=["otr@3"])
    with pytest.raises(ThresholdError, match="erag_mrr@3 needs downstream labels: define"):
        evaluate(search, golden, metrics=["erag_mrr@3"], labels=[EvidenceLabels({})])


def test_two_sources_of_one_kind_are_refused(open_golden: Path) -> None:
    with pytest.raises(ThresholdError, match="two label sources give 'golden' labels"):
        evaluate(search, open_golden, labels=[HumanLabels(HUMAN), GoldenLabels()])
    with pytest.raises(ThresholdError, match=r"'on_topic' labels \(evidence and judge\)"):
        evaluate(search, open_golden, labels=[EvidenceLabels({}), JudgeLabels(object())])  # type: ignore[arg-type]


def test_a_source_can_refuse_before_anything_is_searched(open_golden: Path) -> None:
    calls: list[str] = []

    def counted(query: str, k: int) -> list[str]:
        calls.append(query)
        return []

    with pytest.raises(ThresholdError, match=r"no human labels for \['cherry'\]"):
        evaluate(counted, open_golden, labels=[HumanLabels({"apple": {}, "bread": {}})])
    assert calls == []


def test_downstream_runner_is_a_label_source_like_any_other(
    open_golden: Path, tmp_path: Path
) -> None:
    """``downstream=`` is a name for one of ``labels=``: the same result either way."""

    def score(query: str, doc: object, entry: object) -> float:
        return 1.0 if query.split()[0] in (getattr(doc, "text", None) or "") else 0.0

    named = evaluate(search, open_golden, downstream=DownstreamRunner(score))
    listed = evaluate(search, open_golden, labels=[DownstreamRunner(score)])
    erag = [name for name in named.metrics if name.startswith("erag_")]
    assert len(erag) == 4 and named.erag == listed.erag and named.erag is not None
    assert [named.metrics[m] for m in erag] == [listed.metrics[m] for m in erag]
    assert named.metrics["erag_hit_rate@3"] == 1.0 and named.erag["calls"] == 9


def test_the_protocol_imports_no_scoring_stack() -> None:
    loaded = "sorted({'numpy', 'pydantic'} & set(sys.modules))"
    code = f"import sys, pytest_retrieval.labels; print({loaded})"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"
