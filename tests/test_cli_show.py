"""`pytest-retrieval show REPORT --query/--worst/--tag`: one query's ranked hits, with the
baseline's ranks beside them when the report compared the run with a baseline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER
from test_cli import _report, run, usage_error, write

#: the keyword retriever, and a "worse" mode in which "apple" ranks d5, d1, d2 (its baseline:
#: d1, d4, d2): d1 falls from #1 to #2, the relevant d4 leaves the top 3, d5 comes in
CONFTEST = KEYWORD_RETRIEVER.replace(
    "    return ranked[:k]",
    '    if os.environ.get("RETRIEVAL_MODE") == "worse" and query == "apple":\n'
    '        return ["d5", "d1", "d2"][:k]\n'
    '    if os.environ.get("ALSO_JUICE") and query == "juice":\n'
    '        return ["d1", "d2", "d5"][:k]\n'
    "    return ranked[:k]",
).replace("import pytest", "import os\nimport pytest")


@pytest.fixture
def compared(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real JSON report of a run compared with its recorded baseline ("apple" got worse)."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("RETRIEVAL_MODE", "good")
    pytester.makeconftest(CONFTEST)
    write(pytester.path / "golden.json", GOLDEN)
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline"
    )
    assert recorded.ret == 0, recorded.stdout.str()
    os.environ["RETRIEVAL_MODE"] = "worse"  # restored by monkeypatch
    ran = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    assert ran.ret == 0, ran.stdout.str()  # 4 queries: a drop is never significant
    return pytester.path / "r.json"


def rows(out: str) -> list[list[str]]:
    """The printed lines split into cells (two or more spaces apart)."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]


def table(out: str, header: list[str], n: int) -> list[list[str]]:
    """The ``n`` rows under the first line whose cells are ``header``, cut at the header's
    column starts (so empty cells stay in place)."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if re.split(r"\s{2,}", line.strip()) == header)
    starts = [lines[at].index(f"  {name}") + 2 for name in header]
    bounds = [*starts[1:], None]
    return [
        [line[a:b].strip() for a, b in zip(starts, bounds, strict=True)]
        for line in lines[at + 1 : at + 1 + n]
    ]


def test_a_query_beside_its_baseline_ranking(
    compared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(capsys, "show", str(compared), "--query", "apple")
    assert status == 0, err
    cells = rows(out)
    assert out.startswith("fruit [retriever] · 4 queries · vs baseline ")
    assert "apple: apple" in out and "  tags: fruit" in out
    assert ["metric", "value", "before", "Δ"] in cells
    assert ["mrr@3", "0.5000", "1.0000", "-0.5000"] in cells
    assert ["precision@3", "0.3333"] in cells  # not gated: no shift, no before
    assert table(out, ["rank", "doc", "relevant", "baseline"], 3) == [
        ["1", "d5", "", "below #3"],
        ["2", "d1", "yes", "#1"],
        ["3", "d2", "", "#3"],
    ]
    assert "  left the top 3: d4 #2 → below #3" in out
    assert "  relevant, not in the 3 hits retrieved: d4" in out


def test_worst_and_tag_order_by_the_drop_and_unchanged_queries_say_so(
    compared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys, "show", str(compared), "--worst", "3")
    assert status == 0
    assert "the largest drops on recall@3: the 1 query that dropped (of 3 asked for)" in out
    assert "apple: apple" in out and "cherry: cherry" not in out
    status, out, _ = run(capsys, "show", str(compared), "--tag", "fruit")
    assert out.index("apple: apple") < out.index("cherry: cherry")
    status, out, _ = run(capsys, "show", str(compared), "--query", "bread")
    # no baseline column: nothing moved
    assert table(out, ["rank", "doc", "relevant"], 3) == [
        ["1", "d2", "yes (3)"],
        ["2", "d1", "no (0)"],
        ["3", "d5", "yes (1)"],
    ]
    assert "unchanged on recall@3, mrr@3, ndcg@3 against the baseline " in out


def test_worst_says_how_many_dropped_beyond_those_shown(
    compared: Path, pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--worst 1`` when two queries dropped shows the larger drop and says it is one of
    two: "1 query dropped" would hide the other."""
    os.environ["ALSO_JUICE"] = "1"
    try:
        ran = pytester.runpytest(
            "--retrieval-golden", "golden.json", "--retrieval-report", "r2.json"
        )
    finally:
        del os.environ["ALSO_JUICE"]
    assert ran.ret == 0, ran.stdout.str()
    status, out, _ = run(capsys, "show", str(pytester.path / "r2.json"), "--worst", "1")
    assert status == 0
    assert "the largest drops on recall@3: 1 of the 2 queries that dropped" in out
    assert "juice: juice" in out and "apple: apple" not in out
    status, out, _ = run(capsys, "show", str(pytester.path / "r2.json"), "--worst", "2")
    assert "the largest drops on recall@3: the 2 queries that dropped" in out
    assert out.index("juice: juice") < out.index("apple: apple")


def test_worst_ranks_by_a_metric_on_which_a_query_got_worse(
    compared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--metric`` and nothing regressed, "worst" means the first gated metric on
    which a query got worse; the first one with shifts, where none did, said "none
    dropped" while another metric dropped. (The report is edited: recall@3 moved nobody.)"""
    data = json.loads(compared.read_text(encoding="utf-8"))
    shifts = data["evaluations"][0]["baseline"]["comparison"]["shifts"]
    assert next(iter(shifts)) == "recall@3" and shifts["mrr@3"]["worse"] == 1
    shifts["recall@3"].update(worse=0, unchanged=4, queries=[])
    compared.write_text(json.dumps(data), encoding="utf-8")
    status, out, _ = run(capsys, "show", str(compared), "--worst", "2")
    assert status == 0
    assert "the largest drops on mrr@3: the 1 query that dropped (of 2 asked for)" in out


def test_judge_verdicts_and_several_retrievers(
    compared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(compared.read_text(encoding="utf-8"))
    evaluation = data["evaluations"][0]
    evaluation["judge"] = {"model": "m", "scale": "binary"}
    apple = next(q for q in evaluation["queries"] if q["id"] == "apple")
    apple["judgments"] = {
        "d5": {"on_topic": False, "score": 0.1, "reason": "a bread machine\nmanual", "error": None},
        "d1": {"on_topic": True, "score": 0.9, "reason": "x" * 200, "error": None},
        "d2": {"on_topic": None, "error": "timeout after 60 s"},
    }
    data["evaluations"].append({**evaluation, "retriever": "dense"})
    both = write(compared.with_name("both.json"), data)
    status, out, _ = run(capsys, "show", str(both), "--query", "apple")
    assert status == 0 and out.count("apple: apple") == 2
    assert "fruit [dense]" in out
    assert table(out, ["rank", "doc", "relevant", "judge", "baseline"], 3) == [
        ["1", "d5", "", "no: a bread machine manual", "below #3"],
        ["2", "d1", "yes", "yes: " + "x" * 57 + "...", "#1"],
        ["3", "d2", "", "ungraded: timeout after 60 s", "#3"],
    ]
    status, out, _ = run(capsys, "show", str(both), "--query", "apple", "--retriever", "dense")
    assert out.count("apple: apple") == 1 and "fruit [dense]" in out
    message = usage_error(capsys, "show", str(both), "--tag", "fruit", "--retriever", "dens")
    assert message == f"no retriever 'dens' in {both} (2 retrievers: dense, retriever)\n"


def test_unknown_query_tag_or_metric_is_a_usage_error_with_close_matches(
    compared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    message = usage_error(capsys, "show", str(compared), "--query", "aple")
    assert (
        message == f"no query id 'aple' in {compared} (4 query ids: apple, bread, cherry, juice)\n"
    )
    message = usage_error(capsys, "show", str(compared), "--tag", "fruits")
    assert message == f"no tag 'fruits' in {compared} (2 tags: drink, fruit)\n"
    message = usage_error(capsys, "show", str(compared), "--worst", "2", "--metric", "recall@7")
    assert message.startswith(f"no metric 'recall@7' in {compared} (7 metrics: recall@3, ")
    big = _report(tmp_path, "big", degrade=False)
    message = usage_error(capsys, "show", str(big), "--query", "2255")
    assert message.startswith(f"no query id '2255' in {big} (225 query ids; close matches: 225")
    message = usage_error(capsys, "show", str(big), "--query", "1", "--tag", "short")
    assert message.startswith("--query picks queries by id")


def test_worst_without_a_comparison_is_the_lowest_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _report(tmp_path, "worse", degrade=True)
    status, out, _ = run(capsys, "show", str(report), "--worst", "4", "--metric", "mrr@10")
    assert status == 0 and "worst first by mrr@10" in out
    values = [float(c[1]) for c in rows(out) if c[0] == "mrr@10"]
    assert len(values) == 4 and values == sorted(values) and values[0] < 1.0
    data: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    lowest = min(q["metrics"]["mrr@10"] for q in data["evaluations"][0]["queries"])
    assert values[0] == pytest.approx(lowest, abs=1e-4)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (json.dumps(GOLDEN), "is a golden set (check it with: pytest-retrieval validate FILE)"),
        (json.dumps({"batch_ids": ["b1"]}), "is a judge-batch state file"),
        (json.dumps([1, 2]), "is a JSON list"),
        ("id,query\nq1,apple\n", "is not JSON (line 1, column 1)"),
        ('{"evaluations": [{"golden": "ab', "ends before its JSON does (line 1, column 29)"),
    ],
)
def test_show_refuses_what_is_neither_a_report_nor_a_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    path = tmp_path / "thing.json"
    path.write_text(content, encoding="utf-8")
    message = usage_error(capsys, "show", str(path))
    assert message.startswith(f"{path} {expected}")
    reads = "a JSON report (pytest --retrieval-report FILE) or a <golden>.baseline.json file"
    assert message.endswith(f"show reads {reads}\n")
    assert "git checkout" not in message


def test_a_baseline_has_no_hits_to_show(compared: Path, capsys: pytest.CaptureFixture[str]) -> None:
    baseline = compared.with_name("golden.json.baseline.json")
    message = usage_error(capsys, "show", str(baseline), "--worst", "2")
    assert message.startswith(f"--worst: {baseline} is a baseline, which keeps metrics")
    status, out, _ = run(capsys, "show", str(compared))
    assert status == 0 and "queries that changed:" in out
    assert f"ranked hits: pytest-retrieval show {compared} --query ID" in out


def test_output_cut_short_by_a_closed_pipe_is_no_traceback(tmp_path: Path) -> None:
    report = _report(tmp_path, "worse", degrade=True)
    show = subprocess.Popen(
        [sys.executable, "-m", "pytest_retrieval", "show", str(report), "--worst", "225"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert show.stdout is not None and show.stderr is not None
    assert show.stdout.readline().startswith(b"cranfield [bm25]")
    show.stdout.close()  # `| head -1`
    err = show.stderr.read().decode()
    assert show.wait() == 1 and err == ""
