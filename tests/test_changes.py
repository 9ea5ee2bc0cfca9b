"""Issue 12, point 1: whenever a reference exists, which queries changed, and where their
relevant documents went, whatever the aggregate verdict says."""

from __future__ import annotations

import html
import json
import math
import sys
from importlib import resources

import jsonschema
import numpy as np
import pytest

from pytest_retrieval.results import Comparison, QueryResult
from pytest_retrieval.shifts import Reference, query_shifts

# twenty queries q0..q19, each with one relevant doc r<i>; the retriever reads a ranking
# plan from plan.json: query id -> the rank of its relevant doc (absent: not retrieved)
CONFTEST = """
import json, pathlib, pytest

def search(query, k):
    plan = json.loads(pathlib.Path("plan.json").read_text())
    qid = query.split()[-1]
    ranked = [f"x{qid}-{i}" for i in range(k)]
    rank = plan.get(qid)
    if rank is not None:
        ranked.insert(rank - 1, "r" + qid)
    return ranked[:k]

@pytest.fixture(scope="session")
def retriever():
    return search
"""


def golden() -> dict[str, object]:
    queries = [
        {
            "id": f"q{i}",
            "query": f"topic {'http://e.v' if i == 3 else 'plain'} q{i}",
            "relevant": [f"rq{i}"],
            "tags": ["odd" if i % 2 else "even"],
        }
        for i in range(20)
    ]
    return {"name": "shifts", "k": 5, "queries": queries}


def make_ab_project(pytester: pytest.Pytester) -> None:
    """An A/B pair: "main" (the plan's rankings) and "pr", which returns nothing for q4."""
    pytester.makeconftest(
        CONFTEST.replace('scope="session")', 'scope="session", params=["main", "pr"])')
        .replace("def retriever():", "def retriever(request):")
        .replace("    return search", "    return search if request.param == 'main' else worse")
        + "\ndef worse(query, k):\n    return [] if query.endswith('q4') else search(query, k)\n"
    )


def write_plan(pytester: pytest.Pytester, plan: dict[str, int | None]) -> None:
    (pytester.path / "plan.json").write_text(json.dumps(plan))


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "golden.json").write_text(json.dumps(golden()))
    write_plan(pytester, {f"q{i}": 1 for i in range(20)} | {"q7": 2, "q8": 3})
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    return pytester


def test_changed_queries_show_without_a_regression(project: pytest.Pytester) -> None:
    """Two queries got worse and one better: within noise, so the run passes, and still the
    terminal and the JSON report say which queries moved and where their documents went.
    (Before: only a regression listed queries, and only the worse ones.)"""
    plan = {f"q{i}": 1 for i in range(20)} | {"q7": 1, "q8": 3, "q1": 4, "q2": None}
    write_plan(project, plan)
    result = project.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*queries that changed:*",
            "*metric*worse*better*unchanged*",
            "*recall@5*1*0*19*",
            "*mrr@5*2*1*17*",
            "*1 worse on recall@5 (the 1 most changed):*",
            "*q2 'topic plain q2' [[]even] recall@5 1.0000 → 0.0000 · mrr@5 1.0000 → 0.0000*",
            "*left the top 5: rq2 #1 → below #5*",
            "*2 worse on mrr@5 (the 2 most changed, 1 of them listed above):*",
            "*q1 'topic plain q1' [[]odd] mrr@5 1.0000 → 0.2500 · ndcg@5 1.0000 → 0.4307*",
            "*moved within the top 5: rq1 #1 → #4*",
            "*1 better on mrr@5 (the 1 most changed):*",
            "*q7 'topic plain q7' [[]odd] mrr@5 0.5000 → 1.0000*",
        ]
    )
    report = json.loads((project.path / "r.json").read_text())
    schema = resources.files("pytest_retrieval").joinpath("schema/report.schema.json")
    jsonschema.validate(report, json.loads(schema.read_text()))
    shifts = report["evaluations"][0]["baseline"]["comparison"]["shifts"]
    assert set(shifts) == {"recall@5", "mrr@5", "ndcg@5"}  # the gated metrics
    mrr = shifts["mrr@5"]
    assert (mrr["worse"], mrr["better"], mrr["unchanged"], mrr["open"]) == (2, 1, 17, 0)
    assert [q["id"] for q in mrr["queries"]] == ["q2", "q1", "q7"]  # largest drop first
    q2, q1, q7 = mrr["queries"]
    assert q2["moves"] == [{"doc": "rq2", "before": 1, "after": None, "grade": 1}]
    assert q1["moves"] == [{"doc": "rq1", "before": 1, "after": 4, "grade": 1}]  # within top 5
    assert (q1["before"], q1["after"]) == (1.0, 0.25)
    assert q7["reference_ranked"][:2] == ["xq7-0", "rq7"]  # the baseline's stored top k
    assert q7["tags"] == ["odd"]
    comparison = Comparison.from_dict(report["evaluations"][0]["baseline"]["comparison"])
    assert comparison.shifts["mrr@5"].worst(5)[0].lost[0].doc == "rq2"


def test_a_relevant_doc_entering_the_top_k_is_listed_with_its_old_rank() -> None:
    """A document found now that the baseline had below its stored depth: its old rank is
    unknown (None, "below #N"), never invented."""
    query = QueryResult(
        "q", "text", ("t",), {"a": 2, "b": 1}, ["a", "z", "b"], {"recall@2": 1.0}, 1.0
    )
    reference = Reference(["z", "y"], labels=None)
    shift = query_shifts(
        "recall@2",
        ["q"],
        np.array([0.0]),
        np.array([0.5]),
        {"q": query},
        {"q": reference},
        {"q": None},
        depth=2,
        asked=3,
    )
    assert (shift.worse, shift.better, shift.unchanged) == (0, 1, 0)
    (change,) = shift.best(3)
    assert [(m.doc, m.before, m.after, m.grade) for m in change.gained] == [("a", None, 1, 2)]
    assert change.lost == []


def test_judge_labels_of_moved_hits_are_kept_and_nan_is_not_counted() -> None:
    judged = {"n": {"on_topic": True, "score": 0.9, "reason": "about it", "error": None}}
    query = QueryResult("q", "text", (), {}, ["n", "o"], {"otr@1": 1.0}, 1.0, judgments=judged)
    other = QueryResult("p", "text", (), {}, [], {"otr@1": math.nan}, 1.0)
    shift = query_shifts(
        "otr@1",
        ["q", "p"],
        np.array([0.0, 1.0]),
        np.array([1.0, math.nan]),
        {"q": query, "p": other},
        {"q": Reference(["o", "n"], labels=[0, 1]), "p": Reference(["m"], labels=[1])},
        {"q": [1, None], "p": []},
        depth=2,
        asked=2,
    )
    assert (shift.worse, shift.better, shift.unchanged, shift.open) == (0, 1, 0, 1)
    moves = {m.doc: m for m in shift.queries[0].moves}
    # "n" entered the top 1 (judged on topic now), "o" left it (judged off topic before)
    assert (moves["n"].before, moves["n"].after, moves["n"].judge_after) == (2, 1, 1)
    assert moves["n"].reason == "about it"
    assert (moves["o"].before, moves["o"].after, moves["o"].judge_before) == (1, 2, 0)


def test_an_ab_run_reports_each_retrievers_changed_queries(pytester: pytest.Pytester) -> None:
    """A/B: the JSON report holds each retriever's comparison with the reference, with its
    changed queries (before: A/B comparisons were in no JSON at all)."""
    make_ab_project(pytester)
    (pytester.path / "golden.json").write_text(json.dumps(golden()))
    write_plan(pytester, {f"q{i}": 1 for i in range(20)})
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    result.stdout.fnmatch_lines(["*pr against main:*", "*left the top 5: rq4 #1 → below #5*"])
    report = json.loads((pytester.path / "r.json").read_text())
    schema = resources.files("pytest_retrieval").joinpath("schema/report.schema.json")
    jsonschema.validate(report, json.loads(schema.read_text()))
    (ab,) = report["ab"]
    assert (ab["reference"], ab["retriever"]) == ("main", "pr")
    recall = ab["comparison"]["shifts"]["recall@5"]
    assert (recall["worse"], recall["better"], recall["unchanged"]) == (1, 0, 19)
    assert recall["queries"][0]["moves"] == [{"doc": "rq4", "before": 1, "after": None, "grade": 1}]


def test_the_report_keeps_the_first_hits_text_and_score_and_its_commit(
    pytester: pytest.Pytester,
) -> None:
    """What a reviewer reads of a hit (issue 12, point 3): its text, cut and folded, and its
    score, for the first 10 hits only; and the report says at which commit it was made."""
    pytester.makeconftest(
        """
import pytest

def search(query, k):
    return [{"id": f"d{i}", "text": f"doc {i}\\n\\n" + "word " * 100, "score": 10.0 - i}
            for i in range(k)]

@pytest.fixture(scope="session")
def retriever():
    return search
"""
    )
    queries = [{"id": "q", "query": "anything", "relevant": ["d1"]}]
    (pytester.path / "golden.json").write_text(json.dumps({"k": 12, "queries": queries}))
    pytester.run("git", "init", "-q")
    pytester.run(
        "git",
        "-c",
        "user.email=a@b",
        "-c",
        "user.name=a",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    commit = pytester.run("git", "rev-parse", "HEAD").outlines[0]
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-report",
        "r.json",
        "--retrieval-html",
        "r.html",
    )
    assert result.ret == 0, result.stdout.str()
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["git"]["commit"] == commit
    (query,) = report["evaluations"][0]["queries"]
    assert list(query["texts"]) == [f"d{i}" for i in range(10)]  # not d10, d11
    assert query["texts"]["d3"].startswith("doc 3 word word")  # whitespace folded
    assert len(query["texts"]["d3"]) == 200 and query["texts"]["d3"].endswith("…")
    assert query["scores"] == {f"d{i}": 10.0 - i for i in range(10)}
    html = (pytester.path / "r.html").read_text()
    assert commit[:12] in html
    # each text once, numbered; the page's script puts it under its doc id
    texts = json.loads(html.split('id="hit-texts">')[1].split("</script>")[0])
    number = html.split('<td>4</td><td data-t="')[1].split('"')[0]
    assert texts[int(number)].startswith("doc 3 word word")
    assert f'<td>4</td><td data-t="{number}">d3</td><td>7</td>' in html  # rank, id, score


def test_moves_never_claim_more_than_the_rankings_show() -> None:
    """Review of issue 12: a document below the depth this run retrieved was "not
    retrieved" (it may be at #25 of a full ranking), and with a gated metric deeper than the
    baseline's stored top k every document the baseline did not store "entered" the top k."""
    from pytest_retrieval.render.rows import depth_note, move_lines

    query = QueryResult("q", "text", (), {"a": 1, "b": 1}, ["n", "b"], {"recall@5": 0.5}, 1.0)
    shift = query_shifts(
        "recall@5",
        ["q"],
        np.array([1.0]),
        np.array([0.5]),
        {"q": query},
        {"q": Reference(["a", "x"])},  # a baseline that stores its top 2
        {"q": None},
        depth=2,
        asked=5,
    )
    (change,) = shift.worst(1)
    # "a" left (known at #1, not in this run's top 5); "n" and "b" may have been at #3..#5
    # of the baseline: neither is claimed to have entered
    assert [(m.doc, m.before, m.after) for m in change.moves] == [("a", 1, None)]
    assert move_lines(change) == ["left the top 5: a #1 → below #5"]
    assert depth_note(shift) == (
        "the reference's ranking is known to #2 only: a document below #2 in it that entered "
        "or left the top 5 of recall@5 cannot be shown"
    )


def test_show_ranks_an_ab_retriever_against_its_reference(pytester: pytest.Pytester) -> None:
    """Review of issue 12: show read only baseline comparisons, so in an A/B report --worst
    gave the lowest values, not the largest drops against the reference, and no ranks."""
    make_ab_project(pytester)
    (pytester.path / "golden.json").write_text(json.dumps(golden()))
    write_plan(pytester, {f"q{i}": 1 for i in range(20)} | {"q9": None})
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    shown = pytester.run(
        sys.executable,
        "-m",
        "pytest_retrieval",
        "show",
        "r.json",
        "--retriever",
        "pr",
        "--worst",
        "1",
    )
    assert shown.ret == 0, shown.stderr.str()
    out = shown.stdout.str()
    assert "q4" in out and "q9" not in out  # q4 dropped; q9 is lowest in both runs
    assert "left the top 5: rq4 #1 → below #5" in out


def test_every_output_says_when_the_baseline_is_known_less_deep_than_the_gate(
    pytester: pytest.Pytester,
) -> None:
    """Re-review of issue 12: the note that a baseline stores its top k only (so moves from
    below it cannot be shown) reached the terminal alone."""
    pytester.makeconftest(CONFTEST)
    (pytester.path / "golden.json").write_text(json.dumps(golden()))  # k = 5: stored top 5
    write_plan(pytester, {f"q{i}": 1 for i in range(20)})
    deeper = ("--retrieval-metric", "recall@10", "--retrieval-gate", "recall@10")
    pytester.runpytest("--retrieval-golden", "golden.json", *deeper, "--retrieval-update-baseline")
    write_plan(pytester, {f"q{i}": 1 for i in range(20)} | {"q2": None})
    result = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        *deeper,
        "--retrieval-report",
        "r.json",
        "--retrieval-markdown",
        "r.md",
        "--retrieval-html",
        "r.html",
    )
    note = "the reference's ranking is known to #5 only"
    result.stdout.fnmatch_lines([f"*({note}: a document below #5 in it*"])
    assert "ranking is known to \\#\u20605 only" in (pytester.path / "r.md").read_text()
    assert note in html.unescape((pytester.path / "r.html").read_text())
    shown = pytester.run(
        sys.executable, "-m", "pytest_retrieval", "show", "r.json", "--query", "q2"
    )
    assert note in shown.stdout.str()
