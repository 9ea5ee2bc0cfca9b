"""The Markdown summary as GitHub takes it: under the step-summary size limit at any session
size (detail cut first, with a note), user text that never becomes a link, a mention or an
issue reference, the changed queries whenever a reference exists, and a summary even when
nothing ran."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from helpers import KEYWORD_RETRIEVER, write_golden
from markdown_it import MarkdownIt
from test_markdown import check_gfm

from pytest_retrieval.compare import ABGroup
from pytest_retrieval.gate import decide, session_verdict
from pytest_retrieval.limits import Threshold
from pytest_retrieval.metrics import parse_metric
from pytest_retrieval.render.markdown import MARKDOWN_BUDGET, render_markdown
from pytest_retrieval.render.rows import CHANGED_SHOWN
from pytest_retrieval.results import (
    Comparison,
    EvaluationResult,
    HitMove,
    MetricChange,
    QueryChange,
    QueryResult,
    QueryShifts,
)
from pytest_retrieval.verdicts import Reason, Verdict

#: GitHub's dialect with its autolinks: bare URLs, www. and e-mail addresses become links
LINKIFY = MarkdownIt("gfm-like", {"html": True, "linkify": True})

#: every kind of text GitHub turns into a link, a mention or a reference
LINKY = "see http://e.v or www.x.y, @team on #123 (GH-45), mail a.b@c.com, example.com"

METRICS = ("recall@10", "mrr@10", "ndcg@10", "precision@10")
GATED = ("recall@10", "mrr@10")
WJ = "\u2060"  # the word joiner the summary puts into would-be links


def readable(markdown: str) -> str:
    """The summary as a reader sees its text: without the joiners, ``\\#`` as ``#``."""
    return markdown.replace(WJ, "").replace("\\#", "#")


def changes(metric: str, n: int, tag: str, doc: str, query: str) -> tuple[QueryChange, ...]:
    """``n`` changed queries on ``metric``, the largest drop first, the largest gain last:
    the worse ones lost a relevant doc from #2, the better ones gained one at #1."""
    found = []
    for i in range(n):
        worse = i < n * 3 // 5
        size = (n - i) / n if worse else (i + 1) / n
        move = (
            HitMove(f"{doc}{i}", 2, None, 1, judge_before=1, judge_after=0, reason=f"{query} off")
            if worse
            else HitMove(f"{doc}{i}", None, 1, 2)
        )
        found.append(
            QueryChange(
                id=f"q{i}",
                query=f"{query} {i}",
                metric=metric,
                before=1.0 if worse else 1.0 - size,
                after=1.0 - size if worse else 1.0,
                tags=(f"{tag}{i % 300}", f"{tag}{(i + 1) % 300}"),
                moves=(move,),
            )
        )
    return tuple(sorted(found, key=lambda q: q.delta))


def comparison(reference: str, verdicts: dict[str, str], shifts: int, text: str) -> Comparison:
    """A comparison whose gated metrics moved (``verdicts``: metric -> verdict) with
    ``shifts`` changed queries each."""
    return Comparison(
        reference,
        20_000,
        changes=[
            MetricChange(m, 0.8, 0.75, 0.01, 0.001, 0.002, verdicts.get(m, "ok"), m in GATED)
            for m in METRICS
        ],
        shifts={
            m: QueryShifts(
                m,
                worse=shifts * 3 // 5,
                better=shifts - shifts * 3 // 5,
                unchanged=20_000 - shifts,
                open=0,
                depth=10,
                queries=changes(m, shifts, f"tag {text} ", f"doc {text} ", f"query {text}"),
            )
            for m in GATED
        },
        baseline_created="2025-01-02T03:04:05+00:00",
    )


def session(
    queries: int = 20_000, tags: int = 300, retrievers: int = 3, text: str = "text"
) -> tuple[list[EvaluationResult], list[ABGroup], Verdict]:
    """A synthetic session as big as asked: every retriever gated on a threshold per tag
    and metric (half of the tags failing), regressed on recall@10 against its baseline, and
    A/B-compared with the first; ``text`` is in every piece of user text."""
    names = [f"{text} product-area/category/subcategory/leaf {t:03d}" for t in range(tags)]
    per_tag = {
        name: {m: (0.5 if t % 2 else 0.9) - i / 100 for i, m in enumerate(METRICS)}
        for t, name in enumerate(names)
    }
    thresholds = [Threshold(parse_metric(m), 0.8) for m in GATED]
    thresholds += [
        Threshold(parse_metric(m), 0.7, name, "pyproject.toml") for name in names for m in METRICS
    ]
    rows = [
        QueryResult(
            id=f"{text} q{i}",
            query=f"{text} query {i} about the subject of the test, phrased at length",
            tags=(names[i % tags], names[(i * 7) % tags]),
            relevant={f"{text} d{i}": 1},
            returned=[f"{text} d{i + j}" for j in range(10)],
            metrics={m: (i * 37 % 100) / 100 for m in METRICS},
            latency_ms=1.0,
        )
        for i in range(queries)
    ]
    results = []
    for r in range(retrievers):
        result = EvaluationResult(
            golden_name=f"golden {text}",
            golden_source="golden.json",
            fingerprint="f",
            retriever_id=f"retriever {r} {text}",
            k=10,
            metrics={m: 0.75 for m in METRICS},
            ci={m: (0.74, 0.76) for m in METRICS},
            ci_method="bootstrap",
            per_tag=per_tag,
            tag_counts={name: queries // tags for name in names},
            queries=rows,
            latency_p50_ms=1.0,
            latency_p95_ms=2.0,
            thresholds=thresholds,
            gated=GATED,
            baseline_path="golden.json.baseline.json",
            comparison=comparison(
                "baseline golden.json.baseline.json", {"recall@10": "regressed"}, 500, text
            ),
        )
        results.append(decide(result))
    groups = [
        ABGroup(
            results[0],
            [
                (other, comparison(f"retriever {results[0].retriever_id}", {}, 300, text + " ab"))
                for other in results[1:]
            ],
        )
    ]
    return results, groups if retrievers > 1 else [], session_verdict(results, ())


# ---------------------------------------------------------------------------- size


def test_a_huge_session_fits_githubs_limit_with_the_detail_cut_first() -> None:
    results, groups, verdict = session()
    markdown = render_markdown(results, groups, verdict)  # timed by benchmarks/bench_outputs.py
    size = len(markdown.encode("utf-8"))
    assert MARKDOWN_BUDGET == 512 * 1024
    # GitHub rejects a step summary over 1 MiB; the budget is used, not cut to a stub
    assert 400 * 1024 < size <= MARKDOWN_BUDGET
    check_gfm(markdown)
    # what matters is all there: every verdict, the regression, the changed queries, tables
    assert markdown.startswith("## Retrieval evaluation: ❌ 3 of 3 failed")
    for r in range(3):
        section = markdown.split(f"### ❌ golden text \\[retriever {r} text\\]")[1]
        assert "❌ regressed: `recall@10` 0.8000 → 0.7500" in section.split("####")[0]
        assert "| `recall@10` | 300 | 200 | 19500 |" in section
    # and the cut detail says what was left out, and where it is
    cut = re.findall(r"(\d+) of 300 tags not shown", markdown)
    assert cut and all(int(n) > 0 for n in cut), cut
    assert (
        "in the HTML page (--retrieval-html, or eval's and combine's --html) and the JSON report "
        "(--retrieval-report, or eval's and combine's --report)"
    ) in markdown


def test_a_tight_budget_cuts_detail_before_changes_and_verdict() -> None:
    results, groups, verdict = session(queries=2_000, tags=300, retrievers=2)
    full = render_markdown(results, groups, verdict, budget=10 * 1024 * 1024)
    assert "tags not shown" not in full  # a generous budget cuts nothing
    markdown = render_markdown(results, groups, verdict, budget=60_000)
    assert len(markdown.encode("utf-8")) <= 60_000
    check_gfm(markdown)
    assert "300 of 300 tags not shown" in markdown  # per-tag detail went first
    assert markdown.count("| q0 |") >= 2 and "❌ regressed: `recall@10`" in markdown
    assert "| metric | value | 95% CI |" in markdown
    assert "- … 1,198 more reasons (1,197 threshold, 1 regression) in the HTML page" in markdown


def test_even_a_pathological_reason_cannot_break_the_budget() -> None:
    verdict = Verdict((Reason("usage", "x" * 2_000_000),) * 3)
    markdown = render_markdown([], [], verdict, budget=30_000)
    assert len(markdown.encode("utf-8")) <= 30_000
    check_gfm(markdown)
    assert markdown.startswith("## Retrieval evaluation: ❌ failed (3 reasons)")
    assert markdown.count("- ❌ usage: " + "x" * 997 + "...\n") == 3  # each one, cut short


def test_a_session_too_big_even_for_its_essentials_is_cut_whole() -> None:
    results, _, _ = session(queries=20, tags=2, retrievers=1)
    many = results * 100  # 100 evaluations: their headings and notes alone are too much
    markdown = render_markdown(many, [], session_verdict(many, ()), budget=30_000)
    assert len(markdown.encode("utf-8")) <= 30_000
    check_gfm(markdown)  # no <details> left open by the cut
    assert markdown.rstrip().endswith(
        "(the summary is cut here at 30000 bytes; every evaluation is in the HTML page "
        "(--retrieval-html, or eval's and combine's --html) and the JSON report "
        "(--retrieval-report, or eval's and combine's --report))"
    )


# ---------------------------------------------------------------------------- links


def rendered_links(markdown: str) -> list[str]:
    """Every link or e-mail GitHub-like autolinking makes of the summary."""
    html = LINKIFY.render(markdown)
    return re.findall(r"<a [^>]*>", html)


def prose(markdown: str) -> str:
    """The text GitHub scans for @mentions and #references once rendered: every text node
    and raw HTML (our <details> summaries) outside code, escapes and entities resolved."""
    found = []
    for token in LINKIFY.parse(markdown):
        if token.type == "html_block":
            found.append(re.sub(r"<[^>]*>", " ", token.content))
        for child in token.children or ():
            if child.type in ("text", "html_inline"):
                found.append(child.content)
    return "\n".join(found)


def test_user_text_never_becomes_a_link_mention_or_reference() -> None:
    results, groups, verdict = session(queries=40, tags=4, retrievers=2, text=LINKY)
    verdict = Verdict((*verdict.reasons, Reason("collection", f"tests/x.py: {LINKY}")))
    markdown = render_markdown(results, groups, verdict)
    assert rendered_links(markdown) == []
    check_gfm(markdown)
    # GitHub's own mentions and references are not markdown-it's: the text it scans decides
    text = prose(markdown)
    assert LINKY.replace("#", "") in text.replace(WJ, "").replace("#", "")  # it is scanned
    assert not re.search(r"(?<!\w)@\w", text)  # @team: a mention
    assert not re.search(r"#\d", text)  # #123: an issue reference
    assert not re.search(r"(?i)\bGH-\d", text)
    assert not re.search(r"(?i)://|www\.|@\w+\.\w", text)  # cmark-gfm's own autolinks
    # and nothing was taken away: without the invisible joiners the text reads as typed
    assert LINKY in readable(markdown) and "golden " + LINKY in readable(markdown)


def test_metric_names_and_our_own_text_stay_as_they_are() -> None:
    results, groups, verdict = session(queries=40, tags=4, retrievers=1)
    markdown = render_markdown(results, groups, verdict)
    assert not re.search(r"#\d", prose(markdown))  # ranks (#2) are no issue references
    assert re.sub("#" + WJ + r"\d", "", markdown).count(WJ) == 0  # nothing else needed one
    assert "recall@10 dropped 0.0500" in markdown  # "recall@10" is no e-mail nor mention


def test_escaping_still_holds_with_the_joiners() -> None:
    hostile = "a|b <script>x</script> `c` **b** [l](http://e.v) ![i](www.x.y) @x"
    results, groups, verdict = session(queries=12, tags=2, retrievers=1, text=hostile)
    markdown = render_markdown(results, groups, verdict)
    _, rendered = check_gfm(markdown)
    assert rendered_links(markdown) == []
    assert "&lt;script&gt;" in markdown  # and the tag names in code spans are inert
    assert "a\\|b" in markdown and "\\[l\\]" in markdown
    assert hostile in "".join(rendered.text).replace(WJ, "")


# ---------------------------------------------------------------------------- changed queries


def small(verdicts: dict[str, str], shifts: int = 30) -> EvaluationResult:
    results, _, _ = session(queries=40, tags=4, retrievers=1)
    compared = comparison("baseline golden.json.baseline.json", verdicts, shifts, "text")
    return decide(replace(results[0], comparison=compared, thresholds=[]))


def test_changed_queries_show_without_a_regression() -> None:
    result = small({"recall@10": "within noise"})
    markdown = render_markdown([result], [], session_verdict([result], ()))
    check_gfm(markdown)
    head = readable(markdown).split("| metric | value |")[0]  # before the metric table
    assert "| metric | worse | better | unchanged |" in head
    assert "| `recall@10` | 18 | 12 | 19970 |" in head and "| `mrr@10` | 18 | 12 | 19970 |" in head
    shifts = result.comparison.shifts["recall@10"]  # type: ignore[union-attr]
    worse_ids = [q.id for q in shifts.worst(CHANGED_SHOWN)]
    better_ids = [q.id for q in shifts.best(CHANGED_SHOWN)]
    assert len(worse_ids) == len(better_ids) == CHANGED_SHOWN
    section = head.split("recall@10: 18 queries worse")[1].split("mrr@10: 18 queries worse")[0]
    rows = [line for line in section.splitlines() if re.match(r"\| q\d", line)]
    assert [row.split(" | ")[0][2:] for row in rows] == worse_ids + better_ids
    first = shifts.worst(1)[0]
    assert rows[0].startswith(
        f"| {first.id} | query text {first.id[1:]} | tag text {first.id[1:]}, "
    )
    assert f"1.0000 → {first.after:.4f}" in rows[0]
    assert f"doc text {first.id[1:]} #2 → not retrieved · judge 1 → 0" in rows[0]
    assert f"doc text {first.id[1:]}: query text off" in rows[0]  # the judge's reason
    assert (
        "(showing 10 of 18 worse and 10 of 12 better; every changed query is in the JSON report"
        in section
    )


def test_a_changed_query_says_where_each_kind_of_document_went() -> None:
    moves = (
        HitMove("a", 1, None, 1),
        HitMove("b", 3, 12, 2),
        HitMove("c", None, 2, 1),
        HitMove("d", 4, 2, 1),
        HitMove("e", 5, 1, 3),
        HitMove("f", 7, None, None, judge_before=1, judge_after=None, reason="off topic"),
    )
    change = QueryChange("q", "text", "ndcg@5", 0.9, 0.4, ("t",), moves)
    shifts = QueryShifts("ndcg@5", 1, 0, 9, 0, 5, (change,))
    result = replace(
        small({}), comparison=Comparison("baseline b.json", 10, shifts={"ndcg@5": shifts})
    )
    row = next(
        line
        for line in readable(render_markdown([result], [], result.verdict)).splitlines()
        if line.startswith("| q |")
    )
    assert row == (
        "| q | text | t | ❌ 0.9000 → 0.4000 (-0.5000) | left the top 5: a #1 → not retrieved; "
        "b #3 → #12 (grade 2) · entered the top 5: c below #5 → #2 · moved within the "
        "top 5: d #4 → #2 · +2 more | f: off topic |"
    )


def test_first_screen_names_the_regression_and_the_lost_documents() -> None:
    results, groups, verdict = session(queries=2_000, tags=300, retrievers=3)
    markdown = render_markdown(results, groups, verdict)
    screen = readable("\n".join(markdown.splitlines()[:40]))
    assert "regressed: `recall@10` 0.8000 → 0.7500" in screen
    worst = results[0].comparison.shifts["recall@10"].worst(3)  # type: ignore[union-attr]
    for change in worst:
        assert f"| {change.id} |" in screen
        assert f"doc text {change.id[1:]} #2 → not retrieved" in screen


def test_ab_comparisons_show_changed_queries_in_the_other_retrievers_section() -> None:
    results, groups, _ = session(queries=40, tags=4, retrievers=2)
    results = [replace(r, comparison=None) for r in results]
    groups = [ABGroup(results[0], [(results[1], groups[0].others[0][1])])]
    markdown = render_markdown(results, groups, session_verdict(results, ()))
    check_gfm(markdown)
    first, second = re.split("^### ", markdown, flags=re.MULTILINE)[1:3]
    assert "queries worse" not in first  # the reference has nothing to compare with
    assert "against retriever retriever 0 text" in second
    assert "| `recall@10` | 180 | 120 | 19700 |" in second
    assert "| q0 | query text ab 0 |" in second


def test_no_comparison_no_changed_queries() -> None:
    result = replace(small({}), comparison=None)
    markdown = render_markdown([result], [], session_verdict([result], ()))
    assert "| metric | worse | better | unchanged |" not in markdown
    assert "Worst queries by recall@10" in markdown


def test_a_pr_within_noise_still_shows_where_the_documents_went(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
    one_worse = "return (ranked[::-1] if query == 'cherry' else ranked)[:k]"
    pytester.makeconftest(KEYWORD_RETRIEVER.replace("return ranked[:k]", one_worse))
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-markdown", "summary.md"
    )
    result.assert_outcomes(passed=1)  # one query of four: within noise, the gate passes
    markdown = (pytester.path / "summary.md").read_text("utf-8")
    check_gfm(markdown)
    screen = readable("\n".join(markdown.splitlines()[:40]))
    assert "#### Changed queries against baseline golden.json.baseline.json" in screen
    assert "| `recall@3` | 1 | 0 | 3 |" in screen
    assert "**recall@3: 1 query worse, 0 better**" in screen
    assert (
        "| cherry | cherry | fruit | ❌ 1.0000 → 0.0000 (-1.0000) | "
        "left the top 3: d3 #1 → below #3; d6 #2 → below #3 |"
    ) in screen


# ---------------------------------------------------------------------------- nothing ran


def test_nothing_ran_still_says_what_failed_and_where() -> None:
    verdict = Verdict(
        (
            Reason("usage", "golden.json: query 3 has no 'relevant'; add one, or tag it open"),
            Reason("collection", "tests/test_rag.py:12: ImportError: no module 'x'; install x"),
        )
    )
    markdown = render_markdown([], [], verdict)
    check_gfm(markdown)
    assert markdown.splitlines()[0] == "## Retrieval evaluation: ❌ failed (2 reasons)"
    assert "- ❌ usage: golden.json: query 3 has no 'relevant'; add one, or tag it open" in markdown
    assert "- ❌ collection: tests/test\\_rag.py:12: ImportError: no module 'x'; install x" in (
        markdown
    )
    assert "No evaluation ran: nothing was scored." in markdown


def test_nothing_ran_without_a_reason_is_a_warning() -> None:
    markdown = render_markdown([], [], Verdict())
    assert markdown == (
        "## Retrieval evaluation: ⚠️ no evaluations ran\n\nNo evaluation ran: nothing was scored.\n"
    )
