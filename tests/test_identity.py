"""Query identity end to end: golden sets written without ids keep each query's id when
another query is deleted or inserted, so the baseline still compares query by query."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden

from pytest_retrieval import load_golden
from pytest_retrieval.cli import main
from pytest_retrieval.golden import content_id


def _without_ids(queries: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(GOLDEN, queries=[{k: v for k, v in q.items() if k != "id"} for q in queries])


def test_deleting_a_query_leaves_the_others_compared(pytester: pytest.Pytester) -> None:
    """With position ids, deleting "bread recipe" moved "cherry" and "juice" onto the ids of
    the queries before them: reported as re-judged and left out of the comparison."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    queries: list[dict[str, Any]] = GOLDEN["queries"]
    write_golden(pytester, _without_ids(queries))
    recorded = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-update-baseline"
    )
    recorded.assert_outcomes(passed=1)
    write_golden(pytester, _without_ids([q for q in queries if q["id"] != "bread"]))
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*golden set changed since: 0 added, 1 removed, 0 re-judged; compared on the 3 "
            "unchanged queries*",
            f"*removed: {content_id('bread recipe', {})}*",
        ]
    )


def test_csv_rows_without_ids_convert_to_stable_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = ["apple pie,d1;d2:2", "cherry,d3", "juice,d6"]

    def converted(name: str, kept: list[str]) -> list[tuple[str, str]]:
        table = tmp_path / f"{name}.csv"
        table.write_text("query,relevant\n" + "\n".join(kept) + "\n", encoding="utf-8")
        out = tmp_path / f"{name}.json"
        assert main(["convert", str(table), "-o", str(out)]) == 0
        written = json.loads(out.read_text(encoding="utf-8"))["queries"]
        assert [q.id for q in load_golden(out).queries] == [q["id"] for q in written]
        return [(q["id"], q["query"]) for q in written]

    full = converted("full", rows)
    assert full == [(content_id(text, {}), text) for text in ("apple pie", "cherry", "juice")]
    assert converted("fewer", rows[1:]) == full[1:]
    capsys.readouterr()
