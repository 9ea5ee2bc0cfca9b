"""Judge metrics over graded slots only: ungraded hits are neither on nor off topic, a metric
nothing graded is n/a (never 0), coverage is shown beside it, graded metrics count grade >=
the relevance level, and a baseline compares judge metrics on the slots graded in both runs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import count_built_rows

from pytest_retrieval import baseline, gate, stats
from pytest_retrieval.compare import compare_runs, compare_to_baseline, entry_from_result
from pytest_retrieval.evaluation import evaluate, with_metrics
from pytest_retrieval.golden import GoldenQuery, GoldenSet
from pytest_retrieval.judge.answers import Verdict
from pytest_retrieval.metrics import compute
from pytest_retrieval.render.html import render_html
from pytest_retrieval.render.json import dumps, json_report
from pytest_retrieval.render.markdown import render_markdown
from pytest_retrieval.render.terminal import summary_lines
from pytest_retrieval.results import EvaluationResult, result_from_dict
from pytest_retrieval.verdicts import JUDGE_COVERAGE, REGRESSION, THRESHOLD

REFUSED = "the model refused to answer"


#: (query id, doc id) -> grade (0-3), True/False (binary), or None (the judge fails on it)
Rule = Callable[[str, str], "int | bool | None"]


class FakeJudge:
    """What ``evaluate`` needs of a judge, answering by ``rule``."""

    def __init__(
        self,
        rule: Rule,
        *,
        graded: bool = False,
        relevance_level: int = 2,
        min_coverage: float = 0.0,
        stopped: str | None = None,
    ) -> None:
        self.rule = rule
        self.graded = graded
        self.relevance_level = relevance_level
        self.min_coverage = min_coverage
        self.stopped = stopped
        self.counts = {"calls": 0, "graded": 0, "ungraded": 0}
        self.causes: dict[str, int] = {}

    def pair(self, query: GoldenQuery, doc_id: str, text: str) -> tuple[str, str]:
        return query.id, doc_id

    def judge(self, pairs: Sequence[tuple[str, str]], progress: Any = None) -> list[Verdict]:
        verdicts = []
        for qid, doc in pairs:
            self.counts["calls"] += 1
            answer = self.rule(qid, doc)
            if answer is None:
                self.counts["ungraded"] += 1
                self.causes[REFUSED] = self.causes.get(REFUSED, 0) + 1
                verdicts.append(Verdict(error=REFUSED))
                continue
            self.counts["graded"] += 1
            if self.graded:
                grade = int(answer)
                verdicts.append(Verdict(grade >= self.relevance_level, grade / 3, grade, "graded"))
            else:
                verdicts.append(Verdict(bool(answer), float(answer), None, "binary"))
            verdicts[-1].agreement = None if answer is None else 0.5
        return verdicts

    def summary(self) -> dict[str, Any]:
        return {
            "model": "fake-model",
            "prompt_version": "v1",
            "scale": "0-3" if self.graded else "binary",
            "min_score": 0.5,
            "relevance_level": self.relevance_level,
            "samples": 3,
            "deadline": 1800.0,
            "agreement": 0.9,  # over the judge's whole process
            "stopped": self.stopped,
            "causes": dict(self.causes),
            **self.counts,
        }


def golden(n: int, *, k: int = 10, criteria: str | None = None) -> GoldenSet:
    queries = tuple(
        GoldenQuery(id=f"q{i}", query=f"query {i}", relevant={f"q{i}-d0": 1}, criteria=criteria)
        for i in range(n)
    )
    return GoldenSet(name="g", source="g.json", queries=queries, k=k)


def retriever(lengths: dict[str, int] | None = None, default: int = 10) -> Any:
    """Query ``query i`` gets hits ``qi-d0`` ... (``lengths[qi]`` of them), each with text."""

    def run(query: str, k: int) -> list[dict[str, str]]:
        qid = "q" + query.split()[-1]
        count = (lengths or {}).get(qid, default)
        return [{"id": f"{qid}-d{r}", "text": f"text {r}"} for r in range(min(k, count))]

    return run


def rank(doc: str) -> int:
    return int(doc.rsplit("-d", 1)[1])


# ---------------------------------------------------------------------------- binary


def test_ungraded_hits_are_left_out_of_otr_and_missing_slots_count_as_misses() -> None:
    def rule(qid: str, doc: str) -> bool | None:
        r = rank(doc)
        if qid == "q0":  # 2 of 10 ungraded, 4 on topic: 4 / 8
            return None if r < 2 else r < 6
        return None if r == 0 else r < 3  # 5 hits, 1 ungraded, 2 on topic: 2 / (10 - 1)

    result = evaluate(retriever({"q1": 5}), golden(2), judge=FakeJudge(rule))
    assert [q.metrics["otr@10"] for q in result.queries] == [0.5, pytest.approx(2 / 9)]
    assert result.metrics["otr@10"] == pytest.approx((0.5 + 2 / 9) / 2)
    assert result.label_coverage == {"otr@10": (17, 20)}
    # Wilson over the pooled graded slots: 6 on topic of 17, not of k x queries
    assert result.ci["otr@10"] == pytest.approx(stats.wilson_interval(6, 17))
    (row,) = [line for line in summary_lines(result) if line.startswith("  otr@10 ")]
    assert row.split()[1:4] == ["0.3611", "·", "graded"] and "17/20" in row


def test_all_ungraded_is_na_everywhere_never_zero() -> None:
    judge = FakeJudge(lambda qid, doc: None, graded=True)
    result = evaluate(
        retriever(), golden(1), judge=judge, thresholds={"otr@10": 0.0, "recall@10": 0.5}
    )
    for name in ("otr@10", "llm_precision@10", "llm_mrr@10", "llm_ndcg@10"):
        assert math.isnan(result.metrics[name]), name
        assert math.isnan(result.queries[0].metrics[name]), name
        assert name not in result.ci  # no interval for n/a
        assert result.label_coverage[name] == (0, 10)
    assert result.metrics["recall@10"] == 1.0
    # even a threshold of 0 fails on n/a, saying why
    (reason,) = result.verdict.of_kind(THRESHOLD)
    assert reason.metric == "otr@10"
    assert reason.message.startswith("otr@10 is n/a (nothing was graded")
    rows = [line.split() for line in summary_lines(result) if "@10 " in line]
    judged = {row[0]: row[1:5] for row in rows if row[0].startswith(("otr", "llm"))}
    assert judged == {name: ["n/a", "·", "graded", "0/10"] for name in result.label_coverage}
    assert next(row for row in rows if row[0] == "otr@10")[-3:] == [">=", "0", "FAIL"]
    markdown = render_markdown([result], [], result.verdict)
    assert "| `otr@10` | n/a · graded 0/10 |  | ≥ 0 |" in markdown
    assert "| `llm_ndcg@10` | n/a · graded 0/10 |" in markdown
    html = render_html([result], verdict=result.verdict)
    assert "<td><code>llm_mrr@10</code></td><td>n/a · graded 0/10</td>" in html
    report = json.loads(dumps(json_report([result], result.verdict)))["evaluations"][0]
    assert report["metrics"]["otr@10"] is None
    assert report["queries"][0]["metrics"]["llm_mrr@10"] is None
    assert report["coverage"]["otr@10"] == {"graded": 0, "slots": 10}
    assert "otr@10" not in report["ci"]


def test_empty_list_scores_zero_and_its_slots_are_graded() -> None:
    result = evaluate(retriever({"q0": 0}), golden(1), judge=FakeJudge(lambda q, d: 3, graded=True))
    for name in ("otr@10", "llm_precision@10", "llm_mrr@10", "llm_ndcg@10"):
        assert result.metrics[name] == 0.0, name
        assert result.label_coverage[name] == (10, 10)


def test_judge_coverage_reason_names_why_the_judge_stopped_and_the_causes() -> None:
    stopped = "judge deadline of 5 s reached (--retrieval-judge-deadline)"
    judge = FakeJudge(
        lambda q, d: None if rank(d) < 5 else True, min_coverage=0.95, stopped=stopped
    )
    result = evaluate(retriever(), golden(2), judge=judge)
    (reason,) = result.verdict.of_kind(JUDGE_COVERAGE)
    assert "graded 50.0% of the hits" in reason.message
    assert stopped in reason.message
    assert f"{REFUSED} (10x)" in reason.message


# ---------------------------------------------------------------------------- graded


def test_graded_metrics_count_grade_at_the_relevance_level_on_the_condensed_list() -> None:
    grades = {"q0": [1, 2, 0, 3, 1], "q1": [None, 3, 0, 2]}

    def rule(qid: str, doc: str) -> int | None:
        return grades[qid][rank(doc)]

    judge = FakeJudge(rule, graded=True)
    result = evaluate(retriever({"q0": 5, "q1": 4}), golden(2, k=5), judge=judge)
    q0, q1 = (q.metrics for q in result.queries)
    assert q0["llm_precision@5"] == pytest.approx(2 / 5)  # grades 2 and 3; not the 1s
    assert q0["llm_mrr@5"] == 0.5  # rank 1 has grade 1: not relevant
    assert q0["otr@5"] == pytest.approx(2 / 5)
    # q1: the ungraded rank 1 is removed, the rest move up (Sakai's condensed list)
    assert q1["llm_precision@5"] == pytest.approx(2 / 4)
    assert q1["llm_mrr@5"] == 1.0
    ideal = 3 + 2 / math.log2(3)
    assert q1["llm_ndcg@5"] == pytest.approx((3 + 2 / math.log2(4)) / ideal)
    assert result.label_coverage["llm_ndcg@5"] == (9, 10)
    # a stored report recomputes with the recorded level
    again = result_from_dict(json.loads(dumps(result.to_dict())))
    assert again.label_coverage == result.label_coverage
    wider = with_metrics(again, ["llm_precision@3"])
    assert wider.metrics["llm_precision@3"] == pytest.approx((1 / 3 + 1 / 2) / 2)


def test_relevance_level_one_counts_grade_one() -> None:
    judge = FakeJudge(lambda q, d: [1, 0][rank(d)], graded=True, relevance_level=1)
    result = evaluate(retriever(default=2), golden(1, k=2), judge=judge)
    assert result.metrics["llm_precision@2"] == 0.5
    assert result.metrics["llm_mrr@2"] == 1.0
    assert result.judge is not None and result.judge["relevance_level"] == 1


def test_compute_takes_nan_as_ungraded_and_a_relevance_level() -> None:
    runs = [["a", "b", "c"]]
    values = compute(
        ["otr@3", "llm_precision@3", "llm_mrr@3"],
        runs,
        [{"a": 1}],
        {
            "on_topic": [{"a": math.nan, "b": 1.0, "c": 0.0}],
            "llm_grade": [{"a": math.nan, "b": 1.0, "c": 2.0}],
        },
    )
    assert values["otr@3"].tolist() == [0.5]
    assert values["llm_precision@3"].tolist() == [0.5]
    assert values["llm_mrr@3"].tolist() == [0.5]  # condensed: c is second among b, c
    lenient = compute(
        ["llm_mrr@3"], runs, [{"a": 1}], {"llm_grade": [{"b": 1.0}]}, relevance_level=1
    )
    assert lenient["llm_mrr@3"].tolist() == [0.5]


# ---------------------------------------------------------------------------- baselines


def on_topic_rule(refused: set[tuple[str, str]] | None = None, graded: bool = False) -> Rule:
    def rule(qid: str, doc: str) -> int | bool | None:
        if refused and (qid, doc) in refused:
            return None
        r, q = rank(doc), int(qid[1:])
        if graded:
            return (r + q) % 4
        return (r + q) % 3 != 0

    return rule


def every_twentieth() -> set[tuple[str, str]]:
    """5% of the 200 pairs of 20 queries x 10 hits, spread over 10 queries."""
    return {(f"q{q}", f"q{q}-d{(q * 3) % 10}") for q in range(0, 20, 2)}


def judged_run(judge: FakeJudge, n: int = 20) -> EvaluationResult:
    return evaluate(
        retriever(), golden(n), judge=judge, gated=["otr@10", "llm_ndcg@10", "recall@10"]
    )


def test_five_percent_refusals_against_a_full_baseline_is_no_regression(tmp_path: Path) -> None:
    full = judged_run(FakeJudge(on_topic_rule()))
    path = tmp_path / "g.json.baseline.json"
    baseline.update(
        path, [entry_from_result(full, {}, "2024-01-01T00:00:00")], replace_corrupt=False
    )
    (entry,) = baseline.read(path).values()
    assert entry.queries["q0"].judged == [0, 1, 1, 0, 1, 1, 0, 1, 1, 0]
    refusing = judged_run(FakeJudge(on_topic_rule(every_twentieth())))
    assert refusing.metrics["otr@10"] != full.metrics["otr@10"]
    comparison = compare_to_baseline(refusing, entry, {})
    change = next(c for c in comparison.changes if c.metric == "otr@10")
    assert change.verdict == "ok" and change.gated
    assert change.baseline == change.current  # identical on the common graded slots
    decided = gate.decide(replace(refusing, comparison=comparison))
    assert not decided.verdict.of_kind(REGRESSION)
    # a real drop on the common slots is still found
    worse = judged_run(FakeJudge(lambda q, d: rank(d) % 2 == 0 and on_topic_rule()(q, d)))
    dropped = compare_to_baseline(worse, entry, {})
    assert next(c for c in dropped.changes if c.metric == "otr@10").verdict == "regressed"


def test_graded_refusals_compare_on_common_slots_and_ab_too() -> None:
    full = judged_run(FakeJudge(on_topic_rule(graded=True), graded=True))
    refusing = judged_run(FakeJudge(on_topic_rule(every_twentieth(), graded=True), graded=True))
    entry = entry_from_result(full, {}, "2024-01-01T00:00:00")
    assert entry.queries["q1"].judged == [1, 2, 3, 0, 1, 2, 3, 0, 1, 2]
    for comparison in (compare_to_baseline(refusing, entry, {}), compare_runs(full, refusing, {})):
        for name in ("otr@10", "llm_precision@10", "llm_mrr@10", "llm_ndcg@10"):
            change = next(c for c in comparison.changes if c.metric == name)
            assert change.baseline == pytest.approx(change.current), (comparison.reference, name)
            assert change.verdict == "ok"


def test_judge_labels_are_compared_from_the_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge's labels of every compared query are read off the run's columns: only the
    queries that moved are built as objects (here none: refusals move nothing on the
    common slots), for a baseline and for A/B alike."""
    full = judged_run(FakeJudge(on_topic_rule()))
    refusing = judged_run(FakeJudge(on_topic_rule(every_twentieth())))
    entry = entry_from_result(full, {}, "2024-01-01T00:00:00")
    fresh = judged_run(FakeJudge(on_topic_rule()))
    built = count_built_rows(monkeypatch)
    compare_to_baseline(refusing, entry, {})
    compare_runs(fresh, refusing, {})
    assert built == [] and refusing.table.columns is not None


def test_a_baseline_without_slot_labels_still_compares(tmp_path: Path) -> None:
    full = judged_run(FakeJudge(on_topic_rule()))
    entry = entry_from_result(full, {}, "2024-01-01T00:00:00")
    path = tmp_path / "b.json"
    baseline.update(path, [entry], replace_corrupt=False)
    document = json.loads(path.read_text())
    for query in next(iter(document["entries"].values()))["queries"].values():
        del query["judged"]
    path.write_text(json.dumps(document))
    (old,) = baseline.read(path).values()
    assert old.queries["q0"].judged is None
    refusing = judged_run(FakeJudge(on_topic_rule(every_twentieth())))
    change = next(c for c in compare_to_baseline(refusing, old, {}).changes if c.metric == "otr@10")
    assert change.baseline == pytest.approx(full.metrics["otr@10"])  # the stored values
    assert change.current == pytest.approx(refusing.metrics["otr@10"])
    assert change.verdict not in ("judge changed", "not in baseline")


def test_judge_metrics_of_an_older_definition_or_level_are_judge_changed() -> None:
    full = judged_run(FakeJudge(on_topic_rule(graded=True), graded=True))
    entry = entry_from_result(full, {}, "2024-01-01T00:00:00")
    assert entry.judge is not None
    stricter = judged_run(FakeJudge(on_topic_rule(graded=True), graded=True, relevance_level=3))
    older = {k: v for k, v in entry.judge.items() if k != "judge_metrics_version"}
    without_level = {k: v for k, v in entry.judge.items() if k != "relevance_level"}
    for result, judge in ((stricter, entry.judge), (full, older), (full, without_level)):
        comparison = compare_to_baseline(result, replace(entry, judge=judge), {})
        verdicts = {c.metric: c.verdict for c in comparison.changes}
        assert verdicts["otr@10"] == "judge changed"
        assert verdicts["llm_precision@10"] == "judge changed"
        assert verdicts["recall@10"] == "ok"  # human metrics still compare
    comparison = compare_to_baseline(stricter, entry, {})
    assert comparison.judge_changed["relevance_level"] == [2, 3]


def test_the_judges_samples_and_text_budget_are_part_of_its_definition() -> None:
    """Either changes the labels: a baseline judged otherwise is "judge changed". A baseline
    recorded before they were kept had them at the defaults of then (1 and 4000)."""
    full = judged_run(FakeJudge(on_topic_rule()))
    entry = entry_from_result(full, {}, "2024-01-01T00:00:00")
    assert entry.judge is not None
    assert (entry.judge["samples"], entry.judge["text_budget"]) == (3, 4000)
    for key, other in (("samples", 1), ("text_budget", 300)):
        changed = replace(entry, judge={**entry.judge, key: other})
        comparison = compare_to_baseline(full, changed, {})
        assert {c.metric: c.verdict for c in comparison.changes}["otr@10"] == "judge changed"
        assert comparison.judge_changed == {key: [other, entry.judge[key]]}
    older = {k: v for k, v in entry.judge.items() if k != "text_budget"}
    comparison = compare_to_baseline(full, replace(entry, judge=older), {})
    assert {c.metric: c.verdict for c in comparison.changes}["otr@10"] == "ok"
    assert comparison.judge_changed == {}


# ---------------------------------------------------------------------------- the report


def test_criteria_and_coverage_round_trip_through_the_report() -> None:
    result = evaluate(
        retriever(), golden(1, criteria="only recipes"), judge=FakeJudge(on_topic_rule())
    )
    assert result.queries[0].criteria == "only recipes"
    entry = json.loads(dumps(result.to_dict()))
    assert entry["queries"][0]["criteria"] == "only recipes"
    assert entry["coverage"] == {"otr@10": {"graded": 10, "slots": 10}}
    again = result_from_dict(entry)
    assert again.queries[0].criteria == "only recipes"
    assert again.label_coverage == {"otr@10": (10, 10)}
    np.testing.assert_allclose(again.metrics["otr@10"], result.metrics["otr@10"])


def test_a_bad_slot_label_in_the_baseline_file_names_its_place(tmp_path: Path) -> None:
    result = evaluate(retriever(), golden(1), judge=FakeJudge(on_topic_rule()))
    path = tmp_path / "b.json"
    baseline.update(path, [entry_from_result(result, {}, "")], replace_corrupt=False)
    path.write_text(path.read_text().replace('"judged": [0, ', '"judged": [7, '))
    with pytest.raises(baseline.BaselineError, match=r"/queries/q0/judged/0: 7 is not a judge"):
        baseline.read(path)


def test_each_evaluation_keeps_the_judges_settings_and_its_own_counts() -> None:
    judge = FakeJudge(on_topic_rule())
    evaluate(retriever(), golden(2), judge=judge)
    second = evaluate(retriever(), golden(1), judge=judge).judge
    assert second is not None
    assert (second["calls"], second["graded"], second["pairs"]) == (10, 10, 10)
    assert (second["samples"], second["deadline"], second["relevance_level"]) == (3, 1800.0, 2)
    assert second["agreement"] == 0.5  # of this evaluation's verdicts


def test_a_metric_with_no_value_on_either_side_is_not_ok_but_na() -> None:
    """Nothing graded in one run or the other: nothing was compared, so the verdict says
    n/a (JUnit carried "ok" for it)."""
    from pytest_retrieval.compare import judge_changes

    nothing = np.array([math.nan, math.nan])
    some = np.array([0.5, 0.7])
    changes = judge_changes({"otr@10": nothing}, {"otr@10": some}, {}, 0.05, ["otr@10"])
    assert [c.verdict for c in changes] == ["n/a"]
    changes = judge_changes({"otr@10": some}, {"otr@10": some}, {}, 0.05, ["otr@10"])
    assert [c.verdict for c in changes] == ["ok"]
