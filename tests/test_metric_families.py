"""One record per metric family (issue 40): :data:`~pytest_retrieval.metrics.FAMILIES`
holds each family's definition, trec_eval name, label source, formula and citation, where
four parallel dicts held them; names, order, label sources and kernels are as they were."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_retrieval import metrics
from pytest_retrieval.errors import MetricNameError
from pytest_retrieval.metrics import FAMILIES, GOLDEN_FAMILIES, Family, parse_metric

#: family -> (label source, kernel), as the parallel dicts said before the registry
BEFORE = {
    "recall": ("golden", "recall"),
    "precision": ("golden", "precision"),
    "hit_rate": ("golden", "hit_rate"),
    "mrr": ("golden", "mrr"),
    "ndcg": ("golden", "ndcg"),
    "ndcg_exp": ("golden", "ndcg_exp"),
    "map": ("golden", "map"),
    "judged": ("golden", "judged"),
    "otr": ("on_topic", "precision"),
    "llm_precision": ("llm_grade", "precision"),
    "llm_mrr": ("llm_grade", "mrr"),
    "llm_ndcg": ("llm_grade", "ndcg"),
    "erag_precision": ("downstream", "precision"),
    "erag_hit_rate": ("downstream", "hit_rate"),
    "erag_mrr": ("downstream", "mrr"),
    "erag_ndcg": ("downstream_gain", "ndcg"),
}


def test_the_families_their_order_labels_and_kernels_are_unchanged() -> None:
    assert list(FAMILIES) == list(BEFORE)
    for name, (labels, kernel) in BEFORE.items():
        metric = parse_metric(f"{name}@5")
        assert (metric.labels, metric.kernel) == (labels, kernel), name
    assert [parse_metric(f"{n}@1").sort_key[0] for n in BEFORE] == list(range(len(BEFORE)))


def test_the_trec_eval_families_are_the_golden_ones_but_judged() -> None:
    assert GOLDEN_FAMILIES == ("recall", "precision", "hit_rate", "mrr", "ndcg", "ndcg_exp", "map")
    assert FAMILIES["precision"].trec_eval == "P"
    assert FAMILIES["judged"].trec_eval is None


def test_every_record_is_complete() -> None:
    for family in FAMILIES.values():
        assert family.definition and family.citation, family.name
        own = FAMILIES[family.kernel].formula
        assert callable(own), family.name


def test_the_registry_is_read_only() -> None:
    with pytest.raises(TypeError):
        FAMILIES["mine"] = FAMILIES["recall"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        FAMILIES["recall"].labels = "on_topic"  # type: ignore[misc]


def test_a_family_with_no_formula_to_run_is_refused() -> None:
    with pytest.raises(TypeError, match="metric family odd: give it either a formula"):
        metrics._registry(Family("odd", "no formula", "nobody"))
    with pytest.raises(TypeError, match="metric family odd"):
        metrics._registry(Family("odd", "runs a missing one", "nobody", like="missing"))


def test_an_unknown_family_names_every_known_one() -> None:
    with pytest.raises(MetricNameError) as raised:
        parse_metric("recal@10")
    assert ", ".join(BEFORE) in str(raised.value)
