"""Golden-set formats, fingerprints, and the fast validator agreeing with the JSON Schema."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from pytest_retrieval import GoldenError, load_golden
from pytest_retrieval.golden import MAX_GRADE, golden_schema

ENTRIES = [
    {"id": "q1", "query": "apple pie", "relevant": ["d1", "d2"], "tags": ["food"]},
    {"id": "q2", "query": "banana", "relevant": {"d3": 2, "d4": 0}},
]


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_list_and_object_forms(tmp_path: Path) -> None:
    bare = load_golden(_write(tmp_path / "bare.json", ENTRIES))
    assert bare.name == "bare"
    assert bare.k == 10
    assert [q.id for q in bare.queries] == ["q1", "q2"]
    assert bare.queries[0].relevant == {"d1": 1, "d2": 1}
    assert bare.queries[1].relevant == {"d3": 2, "d4": 0}
    assert bare.queries[1].relevant_ids == ["d3"]

    full = load_golden(
        _write(
            tmp_path / "full.json",
            {
                "name": "faq",
                "k": 5,
                "metrics": ["ndcg@5"],
                "thresholds": {"recall@5": 0.5},
                "queries": ENTRIES,
            },
        )
    )
    assert (full.name, full.k, full.metrics, full.thresholds) == (
        "faq",
        5,
        ("ndcg@5",),
        {"recall@5": 0.5},
    )
    assert full.fingerprint == bare.fingerprint  # same queries and judgments


def test_an_entry_without_id_gets_one_from_its_text_and_params(tmp_path: Path) -> None:
    golden = load_golden(
        _write(
            tmp_path / "g.json",
            [
                {"query": "a", "relevant": ["x"]},
                {"query": "b", "relevant": ["y"], "id": 7},
                {"query": "a", "relevant": ["x"], "params": {"namespace": "eu"}},
            ],
        )
    )
    canonical = ['["a",{}]', '["a",{"namespace":"eu"}]']
    expected = ["q-" + hashlib.sha256(text.encode()).hexdigest()[:12] for text in canonical]
    assert [q.id for q in golden.queries] == [expected[0], "7", expected[1]]
    assert expected[0] == "q-41cbca84a458"  # the same id on every machine and version


def test_the_same_query_twice_without_ids_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text(
        '{"query": "a", "relevant": ["x"]}\n{"query": "b", "relevant": ["y"]}\n'
        '{"query": "a", "relevant": ["z"], "tags": ["t"]}\n'
    )
    with pytest.raises(GoldenError) as caught:
        load_golden(path)
    assert str(caught.value) == (
        f"golden set {path}, line 3: the same query text and params as line 1: both have no "
        "id, so both would be 'q-41cbca84a458'\n"
        "  fix: delete one of the two; if both are meant (other criteria or judgments), give "
        'each an "id"'
    )


def test_an_explicit_id_equal_to_a_derived_one_is_a_duplicate(tmp_path: Path) -> None:
    entries = [{"query": "a", "relevant": ["x"]}, {"id": "q-41cbca84a458", "query": "b"}]
    with pytest.raises(GoldenError) as caught:
        load_golden(_write(tmp_path / "g.json", entries), require_relevant=False)
    assert caught.value.where == "/1/id"
    assert caught.value.problem == (
        "duplicate query id 'q-41cbca84a458' (first used by entry 0); an entry without an id "
        "gets one from its query text and params"
    )


def _ids_by_text(path: Path) -> dict[str, str]:
    return {q.query: q.id for q in load_golden(path).queries}


@pytest.mark.parametrize("form", ["list", "object", "jsonl"])
def test_deleting_or_inserting_a_query_keeps_the_other_ids(tmp_path: Path, form: str) -> None:
    """Position ids renumbered every query after an edit, so the baseline matched nothing
    and the gate stopped gating; ids from the content stay put."""
    entries = [{"query": f"question {i}", "relevant": [f"d{i}"]} for i in range(5)]

    def write(name: str, rows: list[dict[str, Any]]) -> Path:
        if form == "jsonl":
            path = tmp_path / f"{name}.jsonl"
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
            return path
        return _write(tmp_path / f"{name}.json", rows if form == "list" else {"queries": rows})

    before = _ids_by_text(write("before", entries))
    deleted = _ids_by_text(write("deleted", entries[:1] + entries[2:]))
    inserted = _ids_by_text(write("inserted", [{"query": "new", "relevant": ["d9"]}, *entries]))
    assert len(set(before.values())) == 5
    assert deleted == {text: id_ for text, id_ in before.items() if text != "question 1"}
    assert {text: inserted[text] for text in before} == before
    rejudged = [dict(entries[0], relevant=["d0", "d7"]), *entries[1:]]
    assert _ids_by_text(write("rejudged", rejudged)) == before  # re-judged: same id


def test_formats_reads_files_without_the_golden_model() -> None:
    """formats.py must not import golden.py (nor pydantic): the dependency points one way."""
    code = (
        "import sys; import pytest_retrieval.formats; "
        "print(sorted(m for m in sys.modules if m.startswith(('pytest_retrieval', 'pydantic'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str(
        ["pytest_retrieval", "pytest_retrieval._internal", "pytest_retrieval._internal.gc",
         "pytest_retrieval._internal.io",
         "pytest_retrieval._internal.json", "pytest_retrieval._version", "pytest_retrieval.errors",
         "pytest_retrieval.formats"]
    )  # fmt: skip


def test_optional_fields(tmp_path: Path) -> None:
    golden = load_golden(
        _write(
            tmp_path / "g.json",
            [
                {
                    "query": "a",
                    "relevant": ["x"],
                    "criteria": "must mention pricing",
                    "params": {"namespace": "eu"},
                    "metadata": {"answer": "42"},
                }
            ],
        )
    )
    query = golden.queries[0]
    assert query.criteria == "must mention pricing"
    assert query.params == {"namespace": "eu"}
    assert query.metadata == {"answer": "42"}


def test_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in ENTRIES) + "\n\n", encoding="utf-8")
    golden = load_golden(path)
    assert [q.id for q in golden.queries] == ["q1", "q2"]
    assert golden.fingerprint == load_golden(_write(tmp_path / "g.json", ENTRIES)).fingerprint


def test_beir_folder(tmp_path: Path) -> None:
    folder = tmp_path / "scifact"
    (folder / "qrels").mkdir(parents=True)
    (folder / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "apple pie"}\n{"_id": "q2", "text": "banana"}\n'
        '{"_id": "q3", "text": "unjudged query"}\n'
    )
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "apple"}\n')
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t1\nq2\td3\t2\nq2\td4\t0\n"
    )
    golden = load_golden(folder)
    assert golden.name == "scifact"
    assert [q.id for q in golden.queries] == ["q1", "q2"]  # like BEIR: judged queries only
    assert golden.queries[1].relevant == {"d3": 2, "d4": 0}
    assert golden.corpus == str((folder / "corpus.jsonl").resolve())
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td1\t1\n")
    dev = load_golden(folder / "qrels" / "dev.tsv")
    assert dev.name == "scifact-dev"
    assert [q.id for q in dev.queries] == ["q3"]


def test_beir_bad_qrels_line(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    (folder / "qrels").mkdir(parents=True)
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\n")
    with pytest.raises(GoldenError, match=r"test.tsv, line 2: expected 3 columns, got 2"):
        load_golden(folder)


def test_trec_qrels_with_queries_file(tmp_path: Path) -> None:
    (tmp_path / "run.qrels").write_text("1 0 d1 2\n1 0 d2 -1\n2 0 d3 1   \n\n\n")
    (tmp_path / "queries.tsv").write_text("1\tapple pie\n2\tbanana\n")
    golden = load_golden(tmp_path / "run.qrels")
    assert [(q.id, q.query, q.relevant) for q in golden.queries] == [
        ("1", "apple pie", {"d1": 2, "d2": 0}),  # negative grade: judged not relevant
        ("2", "banana", {"d3": 1}),
    ]


def test_trec_without_queries_file_explains(tmp_path: Path) -> None:
    (tmp_path / "run.qrels").write_text("1 0 d1 2\n")
    with pytest.raises(GoldenError, match=r"(?s)need a queries file.*QUERY_ID<TAB>TEXT"):
        load_golden(tmp_path / "run.qrels")


def test_fingerprint_tracks_judgments_not_order(tmp_path: Path) -> None:
    base = load_golden(_write(tmp_path / "a.json", ENTRIES)).fingerprint
    reordered = load_golden(_write(tmp_path / "b.json", ENTRIES[::-1])).fingerprint
    changed = [dict(ENTRIES[0], relevant=["d1"]), ENTRIES[1]]
    rejudged = load_golden(_write(tmp_path / "c.json", changed)).fingerprint
    assert base == reordered
    assert base != rejudged


@settings(max_examples=300, deadline=None)
@given(
    query=st.text(min_size=1),
    relevant=st.dictionaries(st.text(min_size=1), st.integers(0, MAX_GRADE), min_size=1),
)
@example(query='a "quoted"\\ line\n', relevant={"\u2028\x00é": 3, "b": 0})
def test_the_direct_fingerprint_is_the_canonical_jsons(
    query: str, relevant: dict[str, int]
) -> None:
    """A query without params or criteria is hashed from its canonical JSON written
    directly; it must be the text the JSON encoder writes, or every stored baseline would
    see every query as re-judged."""
    from pytest_retrieval.golden import GoldenQuery, _digest

    written = GoldenQuery(id="q", query=query, relevant=relevant).fingerprint
    assert written == _digest([query, sorted(relevant.items()), {}, None])
    canonical = json.dumps(  # as the first releases computed it, spelled out
        [query, sorted(relevant.items()), {}, None],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    assert written == hashlib.sha256(canonical.encode()).hexdigest()[:16]


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.text(min_size=1), min_size=1, max_size=20, unique=True))
@example(ids=['a "quoted"\\ id\n', "\u2028\x00é", "b"])
def test_the_direct_set_fingerprint_is_the_canonical_jsons(ids: list[str]) -> None:
    """The golden set's fingerprint hashes its sorted (query id, query fingerprint) pairs
    from their canonical JSON written directly; stored baselines compare it, so it must be
    the text the JSON encoder writes."""
    from pytest_retrieval.golden import GoldenQuery, GoldenSet

    queries = tuple(
        GoldenQuery(id=qid, query=f"query {n}", relevant={f"d{n}": 1}) for n, qid in enumerate(ids)
    )
    golden = GoldenSet(name="g", source="g.json", queries=queries)
    canonical = json.dumps(  # as the first releases computed it, spelled out
        sorted(golden.query_fingerprints.items()),
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    assert golden.fingerprint == hashlib.sha256(canonical.encode()).hexdigest()[:16]


def test_unknown_extension(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text("x")
    with pytest.raises(GoldenError, match=r"unknown golden-set format '\.yaml'"):
        load_golden(tmp_path / "g.yaml")


# The fast pydantic path must accept exactly what the published JSON Schema accepts.

_doc_ids = st.one_of(st.text(max_size=3), st.integers(-1, 2))
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 3),
    st.floats(allow_nan=False, width=16),
    st.text(max_size=3),
    st.lists(_doc_ids, max_size=3),
    st.dictionaries(
        st.text(max_size=3),
        st.one_of(
            st.integers(-1, 3),
            st.sampled_from([MAX_GRADE, MAX_GRADE + 1, 10**400]),
            st.floats(0, 2),
            st.floats(MAX_GRADE, 1e308),
            st.booleans(),
        ),
        max_size=3,
    ),
)
_entries = st.dictionaries(
    st.sampled_from(["id", "query", "relevant", "tags", "criteria", "params", "metadata", "extra"]),
    _values,
    max_size=7,
)


@settings(max_examples=400, deadline=None)
@given(entry=_entries)
@example(entry={"query": "a", "relevant": {"d1": 1.0}, "id": 2.0})
@example(entry={"query": "a", "relevant": {"d1": 1.5}})
@example(entry={"query": "a", "relevant": {"d1": True}})
@example(entry={"query": "a", "relevant": {"d1": 100.0}})
@example(entry={"query": "a", "relevant": {"d1": 1e308}})
@example(entry={"query": "", "relevant": ["d1"]})
@example(entry={"query": "a", "relevant": ["d1"], "id": ""})
def test_fast_validator_agrees_with_json_schema(
    entry: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    schema = {"$defs": golden_schema()["$defs"], "$ref": "#/$defs/query"}
    schema_ok = Draft202012Validator(schema).is_valid(entry)
    path = tmp_path_factory.mktemp("h") / "g.json"
    path.write_text(json.dumps([entry]))
    try:
        load_golden(path, require_relevant=False)
        loader_ok = True
    except GoldenError as exc:
        loader_ok = False
        semantic = ("listed twice", "every grade is 0")
        if schema_ok:  # only checks the schema cannot express may reject a valid entry
            assert any(s in exc.problem for s in semantic), exc
    if loader_ok:
        assert schema_ok, entry


_odd = st.one_of(  # values of every JSON type, and the edges of each rule
    st.none(),
    st.booleans(),
    st.integers(-2, 3),
    st.integers(9_999, 10_002),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.sampled_from(["recall@10", "ndcg@5[faq]", "recall@10\n", "Recall@10", "x@", "2%"]),
)
_metric_names = st.lists(
    st.one_of(st.sampled_from(["recall@10", "mrr@5", "recall@10\n", "Recall@1", "a@"]), _odd),
    max_size=3,
)
_bounds = st.dictionaries(
    st.sampled_from(["recall@10", "ndcg@5[faq]", "ndcg@5[]", "recall@10\n", "x"]),
    st.one_of(st.floats(-0.5, 1.5), st.integers(-1, 2), _odd),
    max_size=3,
)
_settings = st.fixed_dictionaries(  # each key's value more often valid than not
    {},
    optional={
        "$schema": st.one_of(st.text(max_size=4), _odd),
        "name": st.one_of(st.text(max_size=4), _odd),
        "description": st.one_of(st.text(max_size=4), _odd),
        "k": st.one_of(st.integers(-1, 10_001), _odd),
        "metrics": st.one_of(_metric_names, _odd),
        "gate": st.one_of(_metric_names, _odd),
        "thresholds": st.one_of(_bounds, _odd),
        "max_drop": st.one_of(_bounds, _odd),
        "corpus": st.one_of(st.text(max_size=4), _odd),
        "other": _odd,
    },
)


@settings(max_examples=500, deadline=None)
@given(document=_settings, queries=st.one_of(st.just([]), st.just({}), st.none()))
@example(document={"thresholds": {"recall@10": float("nan")}}, queries=[])
@example(document={"metrics": ["recall@10\n"], "k": True}, queries=[])
@example(document={"name": "", "max_drop": {"recall@10": "2%", "mrr@5": 0.1}}, queries=[])
@example(document={"name": "n", "k": 5, "thresholds": {"recall@10": 0.5}}, queries=[])
@example(document={"thresholds": {"recall@10": 1.5}}, queries=[])
@example(document={"thresholds": {"recall@10": -0.1}}, queries=[])
@example(document={"k": 0}, queries=[])
@example(document={"k": 10_001}, queries=[])
@example(document={"name": ""}, queries=[])
@example(document={"gate": ["Recall@10"]}, queries=[])
def test_settings_passed_without_jsonschema_pass_the_schema(
    document: dict[str, Any], queries: Any
) -> None:
    """jsonschema costs 0.17 s to import; settings the quick check passes must be settings
    the schema passes (what it does not pass, the schema decides and words)."""
    from pytest_retrieval.golden import _plain_settings

    whole = {**document, "queries": queries} if queries is not None else dict(document)
    schema = golden_schema()
    settings_schema = dict(schema["$defs"]["goldenSet"])
    settings_schema["properties"] = dict(settings_schema["properties"], queries={"type": "array"})
    settings_schema["$defs"] = schema["$defs"]
    refused = list(Draft202012Validator(settings_schema).iter_errors(whole))
    if _plain_settings(whole):
        assert not refused, refused[0].message


def test_common_settings_do_not_import_jsonschema(tmp_path: Path) -> None:
    golden = tmp_path / "g.json"
    document = {
        "name": "g",
        "description": "d",
        "k": 10,
        "corpus": "corpus.jsonl",
        "metrics": ["recall@10", "ndcg@10"],
        "gate": ["recall@10"],
        "thresholds": {"recall@10": 0.5, "mrr@10[faq]": 0.2},
        "max_drop": {"recall@10": 0.02, "ndcg@10": "2%"},
        "queries": [{"query": "a", "relevant": ["d"], "tags": ["faq"]}],
    }
    golden.write_text(json.dumps(document), encoding="utf-8")
    code = (
        "import sys\nfrom pytest_retrieval import load_golden\n"
        f"load_golden({str(golden)!r})\nprint('jsonschema' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
