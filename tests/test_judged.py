"""judged@k: the share of the top k the golden set has judged (ir_measures' Judged@k), always
in the summary, and the warning every output shows when a run's judged@k is much lower than
its baseline's or its A/B reference's (its recall and nDCG may then be understated)."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import ir_measures
import jsonschema
import numpy as np
import pytest
from ir_measures import Judged

from pytest_retrieval.compare import (
    compare_runs,
    compare_to_baseline,
    entry_from_result,
    unjudged_hits,
)
from pytest_retrieval.evaluation import evaluate
from pytest_retrieval.metrics import (
    FAMILIES,
    GOLDEN_FAMILIES,
    GradeMatrix,
    Metric,
    compute,
    compute_from_matrix,
    grade_matrix,
    parse_metric,
)
from pytest_retrieval.results import JUDGED_GAP, Comparison, UnjudgedHits
from pytest_retrieval.verdicts import THRESHOLD

KS = (1, 2, 3, 5, 10, 20)
TOL = 1e-9


def random_case(rng: random.Random, pool: list[str]) -> tuple[list[str], dict[str, int]]:
    """A ranking (maybe empty, shorter or longer than the cutoffs) and judgments with
    negative, 0 and relevant grades, at least one relevant."""
    ranked = rng.sample(pool, rng.choice([0, 1, 2, 4, 7, 10, 15, 25]))
    judged = {doc: rng.choice([-1, 0, 0, 1, 2, 3]) for doc in rng.sample(pool, rng.randint(1, 15))}
    judged[rng.choice(pool)] = 2
    return ranked, judged


def ir_measures_judged(
    runs: list[list[str]], qrels: list[dict[str, int]], ks: tuple[int, ...]
) -> dict[tuple[int, int], float]:
    """(query index, k) -> ir_measures' Judged@k."""
    rows = [ir_measures.Qrel(f"q{i}", d, g) for i, q in enumerate(qrels) for d, g in q.items()]
    run = [  # distinct descending scores: ir_measures' order is the list's
        ir_measures.ScoredDoc(f"q{i}", doc, float(len(ranked) - rank))
        for i, ranked in enumerate(runs)
        for rank, doc in enumerate(ranked)
    ]
    return {
        (int(m.query_id[1:]), m.measure["cutoff"]): m.value
        for m in ir_measures.iter_calc([Judged @ k for k in ks], rows, run)
    }


def test_judged_matches_ir_measures() -> None:
    rng = random.Random(14)
    pool = [f"d{i}" for i in range(30)]
    cases = [random_case(rng, pool) for _ in range(400)]
    runs, qrels = [r for r, _ in cases], [q for _, q in cases]
    theirs = ir_measures_judged(runs, qrels, KS)
    ours = compute([f"judged@{k}" for k in KS], runs, qrels)
    checked = 0
    for k in KS:
        for i in range(len(runs)):
            value = ours[f"judged@{k}"][i]
            assert abs(value - theirs[(i, k)]) <= TOL, (i, k, runs[i], qrels[i])
            checked += 1
    assert checked == len(runs) * len(KS)
    assert any(not ranked for ranked in runs)  # an empty list: 0 in both
    # the same on the dict form (pytrec_eval / ranx style runs)
    by_qid = {
        f"q{i}": {doc: float(len(r) - rank) for rank, doc in enumerate(r)}
        for i, r in enumerate(runs)
    }
    dicts = compute(["judged@5"], by_qid, {f"q{i}": q for i, q in enumerate(qrels)})["judged@5"]
    np.testing.assert_array_equal(dicts, ours["judged@5"])


def test_judged_by_hand() -> None:
    qrel = {"a": 2, "b": 0, "c": 1}
    one = compute(
        ["judged@1", "judged@2", "judged@4", "judged@10"],
        [["a", "x", "b", "y", "c"], ["x", "a"], [], ["b", "b", "x"]],
        [qrel] * 4,
    )
    assert one["judged@1"].tolist()[:2] == [1.0, 0.0]
    assert one["judged@2"].tolist()[:2] == [0.5, 0.5]
    assert one["judged@4"][0] == 0.5  # a, b judged among a x b y (grade 0 counts)
    assert one["judged@10"][0] == 3 / 5  # fewer hits than k: divided by the 5 returned
    assert one["judged@10"][2] == 0.0  # nothing came back: 0, as ir_measures has it
    assert one["judged@10"][3] == 0.5  # the repeated b counts once: [b, x]


def test_judged_is_a_golden_metric_trec_eval_cannot_check() -> None:
    assert parse_metric("judged@10") == Metric("judged", 10)
    assert parse_metric("judged@10").labels == "golden"
    assert "judged" in FAMILIES and "judged" not in GOLDEN_FAMILIES


def test_a_dense_matrix_cannot_tell_judged_from_unjudged() -> None:
    matrix = grade_matrix([["a", "x"]], [{"a": 1, "x": 0}], depth=2)
    assert compute_from_matrix(matrix, [Metric("judged", 2)])["judged@2"].tolist() == [1.0]
    dense = GradeMatrix(matrix.grades, matrix.ideal, matrix.n_relevant, matrix.depth)
    with pytest.raises(ValueError, match="judged@k needs to know which docs are judged"):
        compute_from_matrix(dense, [Metric("judged", 2)])


# ---------------------------------------------------------------------------- evaluate

N = 40  # queries: one relevant doc and two judged not relevant each


def golden(path: Path) -> Path:
    queries = [
        {"id": f"q{i}", "query": f"query {i}", "relevant": {f"d{i}": 1, f"j{i}a": 0, f"j{i}b": 0}}
        for i in range(N)
    ]
    path.write_text(json.dumps({"name": "holes", "k": 3, "queries": queries}))
    return path


def judged_search(query: str, k: int) -> list[str]:
    i = query.split()[-1]
    return [f"d{i}", f"j{i}a", f"j{i}b"][:k]


def holey_search(query: str, k: int) -> list[str]:
    """The same relevant doc first, then two documents nobody judged."""
    i = query.split()[-1]
    return [f"d{i}", f"u{i}a", f"u{i}b"][:k]


def test_evaluate_always_reports_judged_at_k_ungated(tmp_path: Path) -> None:
    result = evaluate(holey_search, golden(tmp_path / "g.json"), retriever_id="holes")
    assert result.metrics["judged@3"] == pytest.approx(1 / 3)
    assert result.metrics["recall@3"] == 1.0
    assert "judged@3" not in result.gated
    assert result.passed
    low, high = result.ci["judged@3"]
    assert (low, high) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    # a threshold on it works like any other
    gated = evaluate(holey_search, tmp_path / "g.json", thresholds={"judged@3": 0.9})
    assert not gated.passed
    (reason,) = gated.verdict.of_kind(THRESHOLD)
    assert reason.message.startswith("judged@3 = 0.3333 is below 0.9")


def test_ab_comparison_warns_when_judged_at_k_is_much_lower(tmp_path: Path) -> None:
    path = golden(tmp_path / "g.json")
    reference = evaluate(judged_search, path, retriever_id="judged")
    other = evaluate(holey_search, path, retriever_id="holes")
    comparison = compare_runs(reference, other, {})
    assert comparison.unjudged == UnjudgedHits("judged@3", 1.0, pytest.approx(1 / 3))
    assert compare_runs(other, reference, {}).unjudged is None  # higher is no warning
    assert compare_runs(reference, reference, {}).unjudged is None
    message = comparison.unjudged.message(comparison.reference)
    assert message.startswith(
        "judged@3 is 0.3333 against 1.0000 for retriever judged (more than 0.1 lower): "
    )
    assert "recall@3 and ndcg@3 may be understated" in message
    # the JSON report's round trip keeps the decision, and says it in words
    stored = comparison.to_dict()
    pool = "pytest-retrieval pool GOLDEN REPORT.json -o review.jsonl"
    assert stored["unjudged"]["message"] == f"{message}: {pool}"
    named = comparison.to_dict(str(path))["unjudged"]["message"]  # the golden set's path
    assert named.endswith(
        f"pytest-retrieval pool {os.path.relpath(path)} REPORT.json -o review.jsonl"
    )
    assert Comparison.from_dict(json.loads(json.dumps(stored))).unjudged == comparison.unjudged
    assert Comparison.from_dict({**stored, "unjudged": None}).unjudged is None


def test_the_warning_needs_more_than_the_gap(tmp_path: Path) -> None:
    """10 of 40 queries lose one judged doc of 3: judged@3 drops by 1/12 < JUDGED_GAP;
    20 of 40 lose one: 1/6 > JUDGED_GAP."""
    path = golden(tmp_path / "g.json")
    reference = evaluate(judged_search, path, retriever_id="judged")

    def some_holes(every: int) -> object:
        def search(query: str, k: int) -> list[str]:
            i = int(query.split()[-1])
            return [f"d{i}", f"j{i}a", f"u{i}" if i % every == 0 else f"j{i}b"][:k]

        return search

    small = evaluate(some_holes(4), path, retriever_id="small")
    large = evaluate(some_holes(2), path, retriever_id="large")
    assert reference.metrics["judged@3"] - small.metrics["judged@3"] < JUDGED_GAP
    assert compare_runs(reference, small, {}).unjudged is None
    found = compare_runs(reference, large, {}).unjudged
    assert found is not None and found.current == pytest.approx(1 - 1 / 6)


def test_queries_that_returned_nothing_are_not_unjudged_documents(tmp_path: Path) -> None:
    """judged@k of an empty list is 0, yet it holds no unjudged document: a retriever that
    finds nothing (a broken index), for every query or for half of them, warned that its top
    k held documents the golden set had not judged, and advised pooling them. The rule is
    decided on the queries both runs answered, and says so when that is fewer."""
    path = golden(tmp_path / "g.json")
    reference = evaluate(judged_search, path, retriever_id="judged")
    recorded = entry_from_result(reference, {}, "2025-01-01T00:00:00Z")

    def half(search: Any) -> Any:
        return lambda query, k: search(query, k) if int(query.split()[-1]) % 2 else []

    for other in (lambda query, k: [], half(judged_search)):
        run = evaluate(other, path, retriever_id="empty")
        assert run.metrics["judged@3"] < reference.metrics["judged@3"] - JUDGED_GAP
        assert compare_runs(reference, run, {}).unjudged is None
        assert compare_to_baseline(run, recorded, {}).unjudged is None
        assert compare_runs(run, reference, {}).unjudged is None
    holey = evaluate(half(holey_search), path, retriever_id="holey")
    found = compare_to_baseline(holey, recorded, {}).unjudged
    assert found == UnjudgedHits("judged@3", 1.0, pytest.approx(1 / 3), queries=N // 2)
    assert compare_runs(reference, holey, {}).unjudged == found
    assert found.message("baseline b.json").startswith(
        "judged@3 is 0.3333 against 1.0000 for baseline b.json on the 20 queries both "
        "answered (more than 0.1 lower): its top 3 holds documents the golden set has not judged"
    )
    stored = found.to_dict()
    assert stored["queries"] == N // 2
    assert UnjudgedHits.from_dict(json.loads(json.dumps(stored))) == found
    assert UnjudgedHits.from_dict({**stored, "queries": None}).queries is None
    assert "both answered" not in UnjudgedHits.from_dict(
        {k: v for k, v in stored.items() if k != "queries"}
    ).message("b")  # a report written before the field: all the shared queries


def holes(reference: float, current: float) -> UnjudgedHits | None:
    """The warning for judged@10 of ``reference`` against ``current`` (one query)."""
    values = {"judged@10": np.array([reference])}, {"judged@10": np.array([current])}
    return unjudged_hits(*values, 10, [True])


ABSOLUTE = "(more than 0.1 lower)"
RELATIVE = "(more than 25% and at least 0.02 lower)"


@pytest.mark.parametrize(
    ("reference", "current", "words"),
    [
        (0.9, 0.8, None),  # exactly 0.1 lower, 11% lower: neither arm
        (0.9, 0.7999, ABSOLUTE),  # just over 0.1 lower
        (0.5, 0.4, None),  # 0.1 lower is exactly 20%: neither arm
        (0.08, 0.06, None),  # exactly a quarter lower (0.75 x), 0.02 lower
        (0.08, 0.0599, RELATIVE),  # just over a quarter lower, 0.0201 lower
        (0.04, 0.02, RELATIVE),  # half, exactly 0.02 lower: the floor is inclusive
        (0.04, 0.0201, None),  # half, 0.0199 lower: under the floor
        (0.0927, 0.0326, RELATIVE),  # the reviewer's synth A/B: 65% lower, 0.06
        (0.5, 0.36, ABSOLUTE),  # both arms: the absolute one is named
        (0.1, 0.1, None),
        (0.0, 0.0, None),
        (float("nan"), 0.0, None),
        (0.5, float("nan"), None),
    ],
)
def test_the_rule_has_an_absolute_and_a_relative_arm(
    reference: float, current: float, words: str | None
) -> None:
    found = holes(reference, current)
    if words is None:
        assert found is None
    else:
        assert found == UnjudgedHits("judged@10", reference, current)
        text = found.message("baseline b.json")
        assert text.startswith(f"judged@10 is {current:.4f} against {reference:.4f} for ")
        assert f"baseline b.json {words}: its top 10 holds" in text


def test_a_sparse_golden_set_warns_by_the_relative_arm(tmp_path: Path) -> None:
    """One judged doc per query (a fresh synth set): judged@10 <= 0.1, so only the relative
    arm can warn. 14 of 40 queries keep it in the top 10: 0.035 against 0.1."""
    queries = [{"id": f"q{i}", "query": f"query {i}", "relevant": {f"d{i}": 1}} for i in range(N)]
    path = tmp_path / "sparse.json"
    path.write_text(json.dumps({"name": "sparse", "k": 10, "queries": queries}))

    def search(keep: int) -> object:
        def run(query: str, k: int) -> list[str]:
            i = int(query.split()[-1])
            found = [f"d{i}"] if i % keep == 0 else []
            return (found + [f"u{i}-{n}" for n in range(k)])[:k]

        return run

    reference = evaluate(search(1), path, retriever_id="all")
    other = evaluate(search(3), path, retriever_id="third")
    assert reference.metrics["judged@10"] == pytest.approx(0.1)
    assert other.metrics["judged@10"] == pytest.approx(0.035)
    comparison = compare_runs(reference, other, {})
    assert comparison.unjudged == UnjudgedHits(
        "judged@10", pytest.approx(0.1), pytest.approx(0.035)
    )
    assert RELATIVE in comparison.unjudged.message(comparison.reference)


def test_baseline_without_judged_values_is_scored_from_its_rankings(tmp_path: Path) -> None:
    path = golden(tmp_path / "g.json")
    recorded = entry_from_result(evaluate(judged_search, path), {}, "2025-01-01T00:00:00Z")
    older = replace(  # a baseline recorded before judged@k existed
        recorded,
        metrics={m: v for m, v in recorded.metrics.items() if m != "judged@3"},
        queries={
            qid: replace(q, metrics={m: v for m, v in q.metrics.items() if m != "judged@3"})
            for qid, q in recorded.queries.items()
        },
    )
    now = evaluate(holey_search, path)
    for entry in (recorded, older):
        comparison = compare_to_baseline(now, entry, {})
        (change,) = [c for c in comparison.changes if c.metric == "judged@3"]
        assert (change.baseline, change.current) == (1.0, pytest.approx(1 / 3))
        assert change.verdict == "dropped" and not change.gated
        assert comparison.unjudged == UnjudgedHits("judged@3", 1.0, pytest.approx(1 / 3))
        assert not [c for c in comparison.changes if c.verdict == "regressed"]


# ---------------------------------------------------------------------------- every output

CONFTEST = """
import os, pytest

def judged(query, k):
    i = query.split()[-1]
    return [f"d{i}", f"j{i}a", f"j{i}b"][:k]

def holes(query, k):
    i = query.split()[-1]
    return [f"d{i}", f"u{i}a", f"u{i}b"][:k]

if os.environ.get("RETRIEVAL_AB"):
    @pytest.fixture(params=["judged", "holes"], scope="session")
    def retriever(request):
        return judged if request.param == "judged" else holes
else:
    @pytest.fixture(scope="session")
    def retriever():
        return holes if os.environ.get("RETRIEVAL_MODE") == "holes" else judged
"""

OUTPUTS = ("--retrieval-report", "r.json", "--retrieval-markdown", "m.md")
OUTPUTS += ("--retrieval-html", "h.html")
POOL = "pytest-retrieval pool golden.json REPORT.json -o review.jsonl"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("RETRIEVAL_AB", "RETRIEVAL_MODE", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST)
    golden(pytester.path / "golden.json")
    return pytester


def outputs(pytester: pytest.Pytester) -> tuple[dict[str, object], str, str]:
    report = json.loads((pytester.path / "r.json").read_text())
    markdown = (pytester.path / "m.md").read_text()
    html = (pytester.path / "h.html").read_text()
    return report, markdown, html


def test_every_output_warns_against_the_baseline(project: pytest.Pytester) -> None:
    recorded = project.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    assert recorded.ret == 0, recorded.stdout.str()
    steady = project.runpytest("--retrieval-golden", "golden.json", *OUTPUTS)
    assert steady.ret == 0
    assert "judged@3" in steady.stdout.str() and POOL not in steady.stdout.str()
    report, markdown, _ = outputs(project)
    (evaluation,) = report["evaluations"]  # type: ignore[misc]
    assert evaluation["metrics"]["judged@3"] == 1.0
    assert evaluation["baseline"]["comparison"]["unjudged"] is None
    assert POOL not in markdown

    os.environ["RETRIEVAL_MODE"] = "holes"  # restored by the fixture's monkeypatch
    result = project.runpytest("--retrieval-golden", "golden.json", *OUTPUTS)
    assert result.ret == 0  # a warning, not a failure: recall@3 did not move
    words = "judged@3 is 0.3333 against 1.0000 for baseline"
    result.stdout.fnmatch_lines(
        ["*judged@3*0.3333*", f"    WARNING: {words}*may be understated*: {POOL}"]
    )
    report, markdown, html = outputs(project)
    (evaluation,) = report["evaluations"]  # type: ignore[misc]
    unjudged = evaluation["baseline"]["comparison"]["unjudged"]
    assert unjudged["metric"] == "judged@3" and unjudged["reference"] == 1.0
    schema = Path(__file__).resolve().parents[1] / "src/pytest_retrieval/schema/report.schema.json"
    jsonschema.validate(report, json.loads(schema.read_text(encoding="utf-8")))
    bad = json.loads(json.dumps(report))  # the schema does check the warning's shape
    bad["evaluations"][0]["baseline"]["comparison"]["unjudged"] = {"metric": "judged@3"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, json.loads(schema.read_text(encoding="utf-8")))
    assert unjudged["current"] == pytest.approx(1 / 3)
    assert unjudged["message"].startswith(words)
    assert unjudged["message"].endswith(f"with: {POOL}")  # the golden set's path, as typed
    assert f"⚠️ {words}" in markdown and f"`{POOL}`" in markdown
    assert words in html and POOL in html


def test_every_output_warns_against_the_ab_reference(project: pytest.Pytester) -> None:
    os.environ["RETRIEVAL_AB"] = "1"  # restored by the fixture's monkeypatch
    asked = ("--retrieval-metric", "judged@1", "--retrieval-threshold", "judged@3=0.3")
    result = project.runpytest("--retrieval-golden", "golden.json", *OUTPUTS, *asked)
    result.assert_outcomes(passed=2)
    words = "holes: judged@3 is 0.3333 against 1.0000 for retriever judged"
    result.stdout.fnmatch_lines([f"  WARNING: {words}*: {POOL}"])
    assert result.stdout.str().count("WARNING: ") == 1
    report, markdown, html = outputs(project)
    (ab,) = report["ab"]  # type: ignore[misc]
    assert ab["retriever"] == "holes"
    assert ab["comparison"]["unjudged"]["current"] == pytest.approx(1 / 3)
    assert ab["comparison"]["unjudged"]["message"].endswith(f"with: {POOL}")
    assert f"⚠️ {words}" in markdown and f"`{POOL}`" in markdown
    assert words in html and POOL in html
    judged, holes = report["evaluations"]  # type: ignore[misc]
    assert (judged["metrics"]["judged@1"], holes["metrics"]["judged@1"]) == (1.0, 1.0)
    assert [t["metric"] for t in holes["thresholds"]] == ["judged@3"]
    assert holes["thresholds"][0]["passed"]
    assert holes["gated"] == ["recall@3", "mrr@3", "ndcg@3", "judged@3"]  # by its threshold
