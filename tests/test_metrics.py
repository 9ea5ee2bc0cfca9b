"""Metric kernels: conformance with trec_eval (via pytrec_eval) and hand-computed edge cases.

Part (a) checks every metric family at every cutoff in ``KS``, query by query, against
pytrec_eval on many random ranked lists (seeded, plus a hypothesis property test). Part (b)
pins the documented semantics with small examples whose expected values are worked out by hand.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_retrieval.metrics import (
    FAMILIES,
    GOLDEN_FAMILIES,
    GradeMatrix,
    Metric,
    MetricNameError,
    compute,
    compute_from_matrix,
    dedupe,
    grade_matrix,
    parse_metric,
    trec_order,
)

KS = (1, 3, 5, 10, 20)
ALL_METRICS = [f"{family}@{k}" for family in GOLDEN_FAMILIES for k in KS]
TOL = 1e-9

# ---------------------------------------------------------------------------------------------
# (a) conformance with trec_eval
# ---------------------------------------------------------------------------------------------


def trec_reference(
    runs: Sequence[Sequence[str]], qrels: Sequence[Mapping[str, int]], ks: Sequence[int] = KS
) -> dict[str, np.ndarray]:
    """The metrics of ``compute`` as trec_eval computes them; NaN where trec_eval has no value.

    trec_eval ranks by score, so each (deduplicated) list gets scores strictly decreasing with
    rank. It drops a query whose list is empty; that query stays NaN here.
    """
    qids = [f"q{i}" for i in range(len(runs))]
    trec_run = {
        qid: {doc: float(len(run) - rank) for rank, doc in enumerate(dedupe(run))}
        for qid, run in zip(qids, runs, strict=True)
        if run
    }
    trec_qrels = {qid: dict(qrel) for qid, qrel in zip(qids, qrels, strict=True)}
    measures = trec_measures(trec_run, trec_qrels, ks)
    return {
        name: np.array([by_qid.get(qid, np.nan) for qid in qids])
        for name, by_qid in measures.items()
    }


def trec_measures(
    trec_run: Mapping[str, Mapping[str, float]],
    trec_qrels: Mapping[str, Mapping[str, int]],
    ks: Sequence[int] = KS,
) -> dict[str, dict[str, float]]:
    """``{metric name: {qid: value}}`` from pytrec_eval on a run ``{qid: {doc: score}}``.

    The gain ``2**g - 1`` of ndcg_exp comes from rewritten judgments; mrr@k is trec_eval's
    uncut ``recip_rank`` where the first relevant rank (1 / rr) is within k, else 0.
    """
    pytrec_eval = pytest.importorskip("pytrec_eval")
    # a negative grade stays negative (trec_eval's gain 0) and int
    exp_qrels = {
        qid: {d: 2**g - 1 if g > 0 else g for d, g in qrel.items()}
        for qid, qrel in trec_qrels.items()
    }
    cuts = ",".join(map(str, ks))
    linear = pytrec_eval.RelevanceEvaluator(
        dict(trec_qrels),
        {
            f"P.{cuts}",
            f"recall.{cuts}",
            f"success.{cuts}",
            f"ndcg_cut.{cuts}",
            f"map_cut.{cuts}",
            "recip_rank",
        },
    ).evaluate(dict(trec_run))
    exponential = pytrec_eval.RelevanceEvaluator(exp_qrels, {f"ndcg_cut.{cuts}"}).evaluate(
        dict(trec_run)
    )

    def column(results: Mapping[str, Mapping[str, float]], measure: str) -> dict[str, float]:
        return {qid: values[measure] for qid, values in results.items()}

    def mrr(k: int) -> dict[str, float]:
        rr = column(linear, "recip_rank")
        return {qid: v if v > 0 and round(1 / v) <= k else 0.0 for qid, v in rr.items()}

    out: dict[str, dict[str, float]] = {}
    for k in ks:
        out[f"recall@{k}"] = column(linear, f"recall_{k}")
        out[f"precision@{k}"] = column(linear, f"P_{k}")
        out[f"hit_rate@{k}"] = column(linear, f"success_{k}")
        out[f"ndcg@{k}"] = column(linear, f"ndcg_cut_{k}")
        out[f"map@{k}"] = column(linear, f"map_cut_{k}")
        out[f"ndcg_exp@{k}"] = column(exponential, f"ndcg_cut_{k}")
        out[f"mrr@{k}"] = mrr(k)
    return out


def assert_matches_trec(runs: Sequence[Sequence[str]], qrels: Sequence[Mapping[str, int]]) -> None:
    ours = compute(ALL_METRICS, runs, qrels)
    reference = trec_reference(runs, qrels)
    assert set(ours) == set(reference) == set(ALL_METRICS)
    empty = np.array([len(run) == 0 for run in runs], dtype=bool)
    for name in ALL_METRICS:
        got, want = ours[name], reference[name]
        assert got.shape == (len(runs),) and got.dtype == np.float64, name
        # trec_eval drops queries with an empty list; ours must score them 0.
        assert np.isnan(want[empty]).all(), name
        assert (got[empty] == 0.0).all(), name
        bad = np.flatnonzero(np.abs(got[~empty] - want[~empty]) > TOL)
        if bad.size:
            i = int(np.flatnonzero(~empty)[bad[0]])
            pytest.fail(
                f"{name} query {i}: ours {got[i]!r} vs trec_eval {want[i]!r}\n"
                f"run={list(runs[i])!r}\nqrels={dict(qrels[i])!r}"
            )


def random_query(rng: random.Random, pool: Sequence[str]) -> tuple[list[str], dict[str, int]]:
    """A graded judgment set (grades -1 to 4, >= 1 relevant) and a ranked list with unjudged
    docs, a length anywhere from empty to well past the largest cutoff and, for half of the
    lists, duplicates."""
    judged = rng.sample(pool, rng.randint(1, 30))
    qrel = {doc: rng.choice((-1, 0, 0, 1, 1, 2, 3, 4)) for doc in judged}
    qrel[rng.choice(judged)] = rng.randint(1, 4)
    length = rng.choice((0, 1, 2, 4, 7, 12, 19, 20, 21, 35, 60))
    source = list(dict.fromkeys(judged + rng.sample(pool, 10))) if rng.random() < 0.7 else pool
    if rng.random() < 0.5:
        run = rng.sample(source, min(length, len(source)))
    else:
        run = [rng.choice(source) for _ in range(length)]
    return run, qrel


@pytest.mark.parametrize("seed", range(4))
def test_matches_trec_eval_on_seeded_random_lists(seed: int) -> None:
    rng = random.Random(seed)
    pool = [f"doc-{i}" for i in range(60)] + ["1", "01", "a b", "ü"]
    queries = [random_query(rng, pool) for _ in range(500)]
    runs = [run for run, _ in queries]
    qrels = [qrel for _, qrel in queries]
    assert any(not run for run in runs) and any(len(set(run)) < len(run) for run in runs)
    assert any(len(set(run)) == len(run) > max(KS) for run in runs)
    assert_matches_trec(runs, qrels)


doc_ids = st.sampled_from([f"d{i}" for i in range(25)])
judgments = st.dictionaries(doc_ids, st.integers(-2, 4), min_size=1, max_size=15).filter(
    lambda qrel: max(qrel.values()) >= 1
)
query = st.tuples(st.lists(doc_ids, max_size=30), judgments)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(query, min_size=1, max_size=12))
def test_matches_trec_eval_property(queries: list[tuple[list[str], dict[str, int]]]) -> None:
    assert_matches_trec([run for run, _ in queries], [qrel for _, qrel in queries])


def assert_dict_form_matches_trec(
    run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]]
) -> None:
    """``compute`` on pytrec_eval-style dicts equals pytrec_eval on the very same dicts."""
    ours = compute(ALL_METRICS, run, qrels)
    reference = trec_measures(run, qrels)
    for name in ALL_METRICS:
        assert ours[name].shape == (len(qrels),)
        for i, qid in enumerate(qrels):
            # trec_eval drops a query missing from the run; ours scores it 0 and counts it
            want = reference[name][qid] if qid in run else 0.0
            if abs(ours[name][i] - want) > TOL:
                pytest.fail(
                    f"{name} {qid}: ours {ours[name][i]!r} vs trec_eval {want!r}\n"
                    f"run={run.get(qid)!r}\nqrels={dict(qrels[qid])!r}"
                )


@pytest.mark.parametrize("seed", range(3))
def test_dict_form_matches_trec_eval_with_ties(seed: int) -> None:
    """Scores from a handful of values, so most lists have ties for trec_eval to break."""
    rng = random.Random(seed)
    pool = [f"doc-{i}" for i in range(50)] + ["1", "01", "a b", "ü", "Z", "z", "zz"]
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for i in range(300):
        ranked, qrels[f"q{i}"] = random_query(rng, pool)
        scores = rng.choice(((0.0, 1.0), (-1.5, 0.25, 0.25, 3.0), tuple(range(20))))
        run[f"q{i}"] = {doc: rng.choice(scores) for doc in ranked}
    del run["q7"], run["q8"]  # trec_eval drops these queries
    run["not-judged"] = {"doc-1": 1.0}  # ignored: no judgments
    assert any(not docs for docs in run.values())
    assert_dict_form_matches_trec(run, qrels)


scores = st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.dictionaries(doc_ids, scores, max_size=30), judgments), min_size=1))
def test_dict_form_matches_trec_eval_property(
    queries: list[tuple[dict[str, float], dict[str, int]]],
) -> None:
    run = {f"q{i}": docs for i, (docs, _) in enumerate(queries)}
    assert_dict_form_matches_trec(run, {f"q{i}": qrel for i, (_, qrel) in enumerate(queries)})


def test_trec_order_breaks_ties_by_doc_id_descending() -> None:
    scores = {"a": 1.0, "B": 1.0, "c": 2, "aa": 1.0, "ä": 1.0, "b": 1.0, "d": -1.0}
    assert trec_order(scores) == ["c", "ä", "b", "aa", "a", "B", "d"]
    # what trec_eval does with the same dict: the relevant doc's rank is its place above
    pytrec_eval = pytest.importorskip("pytrec_eval")
    for rank, doc in enumerate(trec_order(scores), start=1):
        rr = pytrec_eval.RelevanceEvaluator({"q": {doc: 1}}, {"recip_rank"}).evaluate({"q": scores})
        assert rr["q"]["recip_rank"] == 1 / rank, doc


def test_dict_form_follows_the_qrels_order_and_scores_missing_runs_zero() -> None:
    qrels = {"b": {"x": 1}, "a": {"y": 1}, "c": {"z": 2}}
    run = {"a": {"y": 0.5, "w": 0.9}, "c": {"z": 1.0}, "extra": {"x": 1.0}}
    values = compute(["mrr@2", "recall@1"], run, qrels)
    assert values["mrr@2"].tolist() == [0.0, 0.5, 1.0]
    assert values["recall@1"].tolist() == [0.0, 0.0, 1.0]


def test_dict_form_takes_labels_by_query_id() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 2.0, "b": 1.0}, "q2": {"a": 1.0, "b": 1.0}}  # q2 ties: b ranks first
    on_topic = {"q2": {"b": 1.0}, "q1": {"b": 1.0}}
    values = compute(["otr@1", "mrr@2"], run, qrels, {"on_topic": on_topic})
    assert values["otr@1"].tolist() == [0.0, 1.0]
    assert values["mrr@2"].tolist() == [1.0, 1.0]
    positional = compute(
        ["otr@1"],
        [["a", "b"], ["b", "a"]],
        [{"a": 1}, {"b": 1}],
        {"on_topic": [on_topic["q1"], on_topic["q2"]]},
    )
    np.testing.assert_array_equal(positional["otr@1"], values["otr@1"])


def test_dict_form_errors() -> None:
    with pytest.raises(TypeError, match=r"both be lists .* or both dicts by query id"):
        compute(["recall@5"], {"q": {"a": 1.0}}, [{"a": 1}])
    with pytest.raises(TypeError, match=r"both be lists .* or both dicts by query id"):
        compute(["recall@5"], [["a"]], {"q": {"a": 1}})
    with pytest.raises(TypeError, match=r"labels\['on_topic'\] must be a dict by query id"):
        compute(["otr@5"], {"q": {"a": 1.0}}, {"q": {"a": 1}}, {"on_topic": [{"a": 1.0}]})
    with pytest.raises(TypeError, match=r"labels\['on_topic'\] is by query id"):
        compute(["otr@5"], [["a"]], [{"a": 1}], {"on_topic": {"q": {"a": 1.0}}})
    with pytest.raises(ValueError, match="'b' has a NaN score"):
        compute(["recall@5"], {"q": {"a": 1.0, "b": math.nan}}, {"q": {"a": 1}})
    with pytest.raises(ValueError, match="no relevant document"):
        compute(["recall@5"], {"q": {"a": 1.0}}, {"q": {"a": 0}})


def test_matrix_path_equals_compute() -> None:
    rng = random.Random(7)
    pool = [f"doc-{i}" for i in range(40)]
    queries = [random_query(rng, pool) for _ in range(200)]
    runs, qrels = [r for r, _ in queries], [q for _, q in queries]
    direct = compute(ALL_METRICS, runs, qrels)
    matrix = grade_matrix(runs, qrels, depth=max(KS) + 5)
    via_matrix = compute_from_matrix(matrix, [parse_metric(m) for m in ALL_METRICS])
    for name in ALL_METRICS:
        np.testing.assert_array_equal(direct[name], via_matrix[name])
    # a matrix made by hand from the dense arrays (kernels find its cells themselves)
    by_hand = GradeMatrix(matrix.grades, matrix.ideal, matrix.n_relevant, matrix.depth)
    from_dense = compute_from_matrix(by_hand, [parse_metric(m) for m in ALL_METRICS])
    for name in ALL_METRICS:
        np.testing.assert_allclose(from_dense[name], via_matrix[name], rtol=0, atol=TOL)


def test_grade_matrix_contents() -> None:
    runs = [["x", "b", "b", "a", "z"], [], ["c"]]
    qrels = [{"a": 2, "b": 1, "z": 0, "q": 3}, {"a": 1}, {"c": 1, "d": 3, "e": 2}]
    matrix = grade_matrix(runs, qrels, depth=4)
    assert matrix.depth == 4
    # query 0 deduplicated to [x, b, a, z]; grades 0 past the end of a list
    np.testing.assert_array_equal(matrix.grades, [[0, 1, 2, 0], [0, 0, 0, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(matrix.ideal, [[3, 2, 1, 0], [1, 0, 0, 0], [3, 2, 1, 0]])
    np.testing.assert_array_equal(matrix.n_relevant, [3, 1, 3])
    assert matrix.grades.dtype == matrix.ideal.dtype == np.float64


# ---------------------------------------------------------------------------------------------
# (b) edge cases with hand-computed values
# ---------------------------------------------------------------------------------------------


def one(metric: str, run: Sequence[str], qrel: Mapping[str, int]) -> float:
    return float(compute([metric], [run], [qrel])[metric][0])


def test_duplicates_count_once_at_first_rank() -> None:
    qrel = {"a": 1, "b": 1}
    run = ["a", "a", "a", "b"]  # deduplicated to [a, b]: b is at rank 2
    assert one("recall@1", run, qrel) == 0.5
    assert one("recall@2", run, qrel) == 1.0
    assert one("recall@4", run, qrel) == 1.0  # never 2.0
    assert one("precision@4", run, qrel) == 0.5
    assert one("map@4", run, qrel) == 1.0
    assert one("ndcg@4", run, qrel) == pytest.approx(1.0, abs=TOL)
    # a repeat of one relevant doc never counts as a second hit
    assert one("recall@3", ["a", "a", "a"], {"a": 1, "b": 1}) == 0.5
    assert one("precision@3", ["a", "a", "a"], {"a": 1, "b": 1}) == pytest.approx(1 / 3)


def test_recall_never_exceeds_one_with_many_duplicates() -> None:
    qrel = {"a": 2, "b": 1, "c": 0}
    runs = [["a", "b", "a", "b", "a", "b", "c", "a"], ["b"] * 20, ["a", "b"] * 10]
    values = compute(["recall@20", "map@20", "ndcg@20", "precision@20"], runs, [qrel] * 3)
    assert (values["recall@20"] <= 1.0).all()
    np.testing.assert_allclose(values["recall@20"], [1.0, 0.5, 1.0])
    np.testing.assert_allclose(values["precision@20"], [2 / 20, 1 / 20, 2 / 20])
    assert (values["map@20"] <= 1.0).all() and (values["ndcg@20"] <= 1.0 + TOL).all()


def test_empty_run_scores_zero_and_counts_in_the_mean() -> None:
    names = [f"{family}@5" for family in GOLDEN_FAMILIES]
    values = compute(names, [[], ["a"]], [{"a": 1}, {"a": 1}])
    for name in names:
        assert values[name].tolist() == [0.0, pytest.approx(1.0 if name != "precision@5" else 0.2)]
    assert values["recall@5"].mean() == 0.5
    assert values["mrr@5"].mean() == 0.5


def test_all_empty_runs() -> None:
    values = compute(["recall@3", "ndcg@3", "mrr@3"], [[], []], [{"a": 1}, {"b": 2}])
    for array in values.values():
        assert array.tolist() == [0.0, 0.0]


def test_precision_divides_by_k_even_with_short_lists() -> None:
    qrel = {"a": 1, "b": 1}
    assert one("precision@10", ["a", "x"], qrel) == 0.1
    assert one("precision@10", ["a", "b"], qrel) == 0.2
    assert one("precision@1", ["a", "x"], qrel) == 1.0


def test_map_divides_by_all_relevant_docs() -> None:
    qrel = {"a": 1, "b": 1, "c": 1, "d": 1, "z": 0}
    run = ["a", "x", "b", "z"]  # relevant at ranks 1 and 3; c and d never retrieved
    assert one("map@1", run, qrel) == pytest.approx(1 / 4)
    assert one("map@3", run, qrel) == pytest.approx((1 / 1 + 2 / 3) / 4)  # 5/12, not 5/6
    assert one("map@10", run, qrel) == pytest.approx(5 / 12)
    # more relevant docs than k: still divides by all of them (trec_eval's map_cut)
    assert one("map@2", ["a", "b"], qrel) == pytest.approx(2 / 4)


def test_mrr_is_zero_when_first_relevant_is_beyond_k() -> None:
    qrel = {"a": 1}
    run = ["x", "y", "a"]
    assert one("mrr@1", run, qrel) == 0.0
    assert one("mrr@2", run, qrel) == 0.0
    assert one("mrr@3", run, qrel) == pytest.approx(1 / 3)
    assert one("mrr@10", run, qrel) == pytest.approx(1 / 3)
    assert one("mrr@10", ["x", "y"], qrel) == 0.0


def test_order_given_is_the_ranking() -> None:
    qrel = {"a": 1}
    assert one("mrr@5", ["a", "b", "c"], qrel) == 1.0
    assert one("mrr@5", ["c", "b", "a"], qrel) == pytest.approx(1 / 3)


def test_negative_grade_is_not_relevant_and_gains_nothing() -> None:
    # TREC qrels use negative grades for "judged not relevant"; trec_eval's nDCG gives them
    # gain 0 (not a negative gain), so a negative nDCG is impossible
    qrel = {"a": -1, "b": 1}
    run = ["a", "b"]
    assert one("ndcg@2", run, qrel) == pytest.approx(1 / math.log2(3), abs=TOL)
    assert one("ndcg_exp@2", run, qrel) == pytest.approx(1 / math.log2(3), abs=TOL)
    assert one("precision@2", run, qrel) == 0.5
    assert one("recall@2", run, qrel) == 1.0
    assert grade_matrix([run], [qrel], depth=2).grades.tolist() == [[0.0, 1.0]]
    with pytest.raises(ValueError, match="no relevant document"):
        compute(["ndcg@2"], [run], [{"a": -1}])


def test_grade_zero_is_judged_not_relevant() -> None:
    qrel = {"a": 0, "b": 1}
    run = ["a", "b"]
    assert one("hit_rate@1", run, qrel) == 0.0
    assert one("mrr@2", run, qrel) == 0.5
    assert one("recall@1", run, qrel) == 0.0
    assert one("recall@2", run, qrel) == 1.0  # 1 relevant doc in all, not 2 judged
    assert one("precision@2", run, qrel) == 0.5
    assert one("map@2", run, qrel) == 0.5
    assert one("ndcg@2", run, qrel) == pytest.approx(1 / math.log2(3))
    assert one("ndcg_exp@1", run, qrel) == 0.0


def test_ndcg_linear_versus_exponential_gain_by_hand() -> None:
    qrel = {"a": 3, "b": 2, "c": 1, "z": 0}
    run = ["c", "x", "a", "b"]
    # discounts 1/log2(rank + 1): rank 1 -> 1, rank 2 -> 1/log2(3), rank 3 -> 1/2
    # linear gains: run c=1, x=0, a=3 -> DCG@3 = 1 + 0 + 3/2 = 2.5
    #               ideal 3, 2, 1     -> IDCG@3 = 3 + 2/log2(3) + 1/2
    assert one("ndcg@3", run, qrel) == pytest.approx(2.5 / (3.5 + 2 / math.log2(3)), abs=TOL)
    # exponential gains 2**g - 1: c=1, a=7, b=3 -> DCG@3 = 1 + 0 + 7/2 = 4.5
    #                             ideal 7, 3, 1 -> IDCG@3 = 7 + 3/log2(3) + 1/2
    assert one("ndcg_exp@3", run, qrel) == pytest.approx(4.5 / (7.5 + 3 / math.log2(3)), abs=TOL)
    # at k=1 the top doc c (grade 1) against ideal a (grade 3)
    assert one("ndcg@1", run, qrel) == pytest.approx(1 / 3, abs=TOL)
    assert one("ndcg_exp@1", run, qrel) == pytest.approx(1 / 7, abs=TOL)
    # with k beyond the list, b at rank 4 joins: DCG@10 = 2.5 + 2/log2(5)
    ideal = 3 + 2 / math.log2(3) + 1 / 2
    assert one("ndcg@10", run, qrel) == pytest.approx((2.5 + 2 / math.log2(5)) / ideal, abs=TOL)
    # with binary grades both gains agree
    binary = {"a": 1, "b": 1}
    assert one("ndcg@3", ["x", "a"], binary) == one("ndcg_exp@3", ["x", "a"], binary)


def test_ideal_uses_relevant_docs_not_retrieved() -> None:
    # only one of four relevant docs retrieved, at rank 1: ndcg@1 is perfect, ndcg@4 is not
    qrel = {"a": 1, "b": 1, "c": 1, "d": 1}
    assert one("ndcg@1", ["a"], qrel) == 1.0
    ideal = sum(1 / math.log2(r + 1) for r in range(1, 5))
    assert one("ndcg@4", ["a"], qrel) == pytest.approx(1 / ideal, abs=TOL)


@pytest.mark.parametrize("qrel", [{}, {"a": 0}, {"a": 0, "b": 0}])
def test_query_without_relevant_doc_raises(qrel: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="no relevant document"):
        compute(["recall@5"], [["a"], ["a"]], [{"a": 1}, qrel])


def test_runs_and_qrels_lengths_must_agree() -> None:
    with pytest.raises(ValueError):
        compute(["recall@5"], [["a"]], [{"a": 1}, {"a": 1}])


def test_matrix_shallower_than_cutoff_raises() -> None:
    matrix = grade_matrix([["a"]], [{"a": 1}], depth=5)
    with pytest.raises(ValueError, match="depth"):
        compute_from_matrix(matrix, [parse_metric("recall@10")])


def test_no_metrics_and_no_queries() -> None:
    assert compute([], [["a"]], [{"a": 1}]) == {}
    values = compute(["ndcg@10"], [], [])
    assert values["ndcg@10"].shape == (0,)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ndcg@10", Metric("ndcg", 10)),
        ("recall@1", Metric("recall", 1)),
        ("ndcg_exp@5", Metric("ndcg_exp", 5)),
        ("map@100", Metric("map", 100)),
        (" mrr@3 ", Metric("mrr", 3)),
    ],
)
def test_parse_metric_accepts(name: str, expected: Metric) -> None:
    parsed = parse_metric(name)
    assert parsed == expected
    assert str(parsed) == parsed.name == f"{expected.family}@{expected.k}"


@pytest.mark.parametrize(
    "name", ["foo@10", "recall@0", "recall", "recall@x", "Recall@10", "recall@-1", "@10", ""]
)
def test_parse_metric_rejects_and_names_the_families(name: str) -> None:
    with pytest.raises(MetricNameError) as info:
        parse_metric(name)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert all(family in message for family in FAMILIES), message
    if name == "recall@0":
        assert ">= 1" in message


def test_compute_rejects_unknown_metric_name() -> None:
    with pytest.raises(MetricNameError, match="recall"):
        compute(["foo@10"], [["a"]], [{"a": 1}])


def test_doc_ids_are_strings_never_coerced() -> None:
    qrel = {"1": 1, "2": 1}
    assert one("recall@5", ["1"], qrel) == 0.5
    assert one("recall@5", [1], qrel) == 0.0  # type: ignore[list-item]
    assert one("recall@5", ["01", "1.0", " 1"], qrel) == 0.0
    # an int key in the judgments is relevant (so the query is valid) but never matches "1"
    assert one("recall@5", ["1"], {1: 1}) == 0.0  # type: ignore[dict-item]
    # 1 and "1" in one list are two different docs, not a duplicate
    assert one("precision@2", [1, "1"], qrel) == 0.5  # type: ignore[list-item]
