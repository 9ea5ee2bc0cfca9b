"""The strict JSON reader every file and answer goes through: depth, duplicate keys,
syntax, each one JsonProblem naming the place."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_retrieval._internal.json import MAX_DEPTH, JsonProblem, depth_beyond, loads


def test_deep_nesting_is_one_problem_not_a_recursion_error() -> None:
    with pytest.raises(JsonProblem, match=f"nested deeper than {MAX_DEPTH} levels"):
        loads("[" * 100_000)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": "[" * 500, "b": ["\\" + '"' + "{" * 300]})
    assert loads(text)["a"] == "[" * 500


def test_nesting_at_the_limit_reads() -> None:
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(JsonProblem, match=f"line 2, column {MAX_DEPTH + 1}"):
        loads("\n" + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_a_duplicate_key_is_named_by_its_pointer() -> None:
    with pytest.raises(JsonProblem) as caught:
        loads('{"queries": [{"id": "q1", "relevant": ["d9"], "relevant": ["d1"]}]}')
    assert caught.value.where == "/queries/0/relevant"


def test_a_line_of_jsonl_is_named_by_the_file_line() -> None:
    with pytest.raises(JsonProblem, match="line 7, column 5"):
        loads("[1, }", line=7)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
    )
)
def test_depth_scan_agrees_with_the_parsed_depth(value: object) -> None:
    def depth(v: object) -> int:
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        return 0

    text = json.dumps(value).encode()
    for limit in range(0, 6):
        assert (depth_beyond(text, limit) is None) == (depth(value) <= limit)
