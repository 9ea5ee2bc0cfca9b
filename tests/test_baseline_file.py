"""Baseline files as people edit them: every bad field is one usage error naming the file and
the field, the file stays as it was; writes round latency and clear a killed writer's temp files.
Keys: the golden set's path (two ``golden.json`` in one shared file never collide), and entries
of older files, keyed by golden name, still found and replaced."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden

from pytest_retrieval.baseline import (
    BaselineEntry,
    BaselineError,
    BaselineQuery,
    entry_key,
    find,
    golden_key,
    read,
    update,
)
from pytest_retrieval.errors import ConfigError, GoldenError, RetrievalError
from pytest_retrieval.metrics import DEFINITIONS_VERSION

#: stands for the pointer of the recorded file's only entry (its key depends on the golden key)
ENTRY = "/entries/*"


class _Delete:
    """Marks a field to remove; a stable repr keeps test ids equal across xdist workers."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()

#: (JSON pointer to edit, new value or DELETE, fragment the message must contain)
HAND_EDITS: list[tuple[str, Any, str]] = [
    ("/version", 0, "/version: 0 is not a format version"),
    ("/version", "1", "/version: '1' is not a format version"),
    ("/version", 1.0, "/version: 1.0 is not a format version"),
    ("/version", True, "/version: True is not a format version"),
    ("/version", DELETE, "/version is missing"),
    ("/entries", [], "/entries: [] is not an object"),
    (f"{ENTRY}/latency_ms/p95", "fast", "latency_ms/p95: 'fast' is not a number of ms"),
    (f"{ENTRY}/latency_ms/p50", -1, "latency_ms/p50: -1 is not a number of ms >= 0"),
    (f"{ENTRY}/latency_ms", 5, "latency_ms: 5 is not an object"),
    (f"{ENTRY}/k", 10.9, "/k: 10.9 is not a whole number >= 1"),
    (f"{ENTRY}/k", 0, "/k: 0 is not a whole number >= 1"),
    (f"{ENTRY}/k", True, "/k: True is not a whole number >= 1"),
    (f"{ENTRY}/k", 3.0, "/k: 3.0 is not a whole number >= 1"),
    (f"{ENTRY}/metrics_version", 0, "/metrics_version: 0 is not a metric definitions version"),
    (f"{ENTRY}/metrics_version", "1", "/metrics_version: '1' is not a metric definitions"),
    (f"{ENTRY}/metrics_version", True, "/metrics_version: True is not a metric definitions"),
    (f"{ENTRY}/metrics_version", 1.5, "/metrics_version: 1.5 is not a metric definitions"),
    (f"{ENTRY}/metrics/mrr@3", -0.1, "metrics/mrr@3: mrr@3 is -0.1, not a number in [0, 1]"),
    (f"{ENTRY}/metrics/mrr@3", math.inf, "metrics/mrr@3: mrr@3 is inf, not a number in [0, 1]"),
    (f"{ENTRY}/metrics/recal@3", 0.5, "metrics/recal@3: unknown metric 'recal'"),
    (f"{ENTRY}/metrics/mrr@03", 0.5, "metrics/mrr@03: 'mrr@03' is not how metric names are"),
    (f"{ENTRY}/queries/a~1b~0c", {}, "/queries/a~1b~0c/fingerprint is missing"),
    (
        f"{ENTRY}/queries/apple/metrics/recall@3",
        7.5,
        "queries/apple/metrics/recall@3: recall@3 is 7.5, not a number in [0, 1]",
    ),
    (f"{ENTRY}/ci/mrr@3", [1.0], "ci/mrr@3: [1.0] is not a [low, high] pair"),
    (f"{ENTRY}/ci/ndcg@3", [1.0, 0.5], "ci/ndcg@3: low 1.0 is above high 0.5"),
    (f"{ENTRY}/ci/ndcg@3/1", "x", "ci/ndcg@3/1: 'x' is not a number in [0, 1]"),
    (f"{ENTRY}/queries/apple/ranked", ["d1", 3], "queries/apple/ranked/1: 3 is not a string"),
    (f"{ENTRY}/queries/apple/ranked", "d1", "queries/apple/ranked: 'd1' is not a list"),
    (f"{ENTRY}/queries/apple/metrics/recall@3", True, "apple/metrics/recall@3: recall@3 is True"),
    (f"{ENTRY}/queries/apple/metrics/recall@3", 10**400, "apple/metrics/recall@3: recall@3 is 1"),
    (
        f"{ENTRY}/queries/apple/metrics/recall@3",
        math.nan,
        "apple/metrics/recall@3: recall@3 is nan",
    ),
    (f"{ENTRY}/queries/apple/metrics/mrr@03", 0.5, "apple/metrics/mrr@03: 'mrr@03' is not how"),
    (f"{ENTRY}/queries/apple/metrics/recal@3", 0.5, "apple/metrics/recal@3: unknown metric"),
    (f"{ENTRY}/queries/apple/judged", [1, 4], "apple/judged/1: 4 is not a judge label"),
    (f"{ENTRY}/queries/apple/judged", [True], "apple/judged/0: True is not a judge label"),
    (f"{ENTRY}/queries/apple/judged", "1", "apple/judged: '1' is not a list"),
    (f"{ENTRY}/queries/apple/fingerprint", "", "apple/fingerprint: '' is not a non-empty"),
    (f"{ENTRY}/queries/apple/latency_ms", math.inf, "apple/latency_ms: inf is not a number"),
    (f"{ENTRY}/queries/apple/latency_ms", 10**400, "apple/latency_ms: 1000"),  # no float holds it
    (f"{ENTRY}/latency_ms/p50", 10**400, "latency_ms/p50: 1000"),
    (f"{ENTRY}/queries/apple", [], "/queries/apple: [] is not an object"),
    (f"{ENTRY}/queries/apple/fingerprint", DELETE, "queries/apple/fingerprint is missing"),
    (f"{ENTRY}/queries/apple/latency_ms", -1, "queries/apple/latency_ms: -1 is not a number of"),
    (f"{ENTRY}/queries/apple/latency_ms", "2", "queries/apple/latency_ms: '2' is not a number"),
    (f"{ENTRY}/queries/apple/latency_ms", False, "apple/latency_ms: False is not a number of ms"),
    (f"{ENTRY}/queries", [], "/queries: [] is not an object"),
    (f"{ENTRY}/golden/name", "", "/golden/name: '' is not a non-empty string"),
    (f"{ENTRY}/retriever", 5, "/retriever: 5 is not a non-empty string"),
    (f"{ENTRY}/git", "main", "/git: 'main' is not an object"),
    (f"{ENTRY}/git/dirty", "no", "/git/dirty: 'no' is not true or false"),
    (f"{ENTRY}/judge", [1], "/judge: [1] is not an object or null"),
    (f"{ENTRY}/created", "yesterday", "/created: 'yesterday' is not an ISO 8601 timestamp"),
    (f"{ENTRY}/plugin_version", 1, "/plugin_version: 1 is not a string"),
]
IDS = [f"{pointer.replace(ENTRY, '')}={value!r}" for pointer, value, _ in HAND_EDITS]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real baseline, recorded once with --retrieval-update-baseline, to hand-edit."""
    folder = tmp_path_factory.mktemp("recorded")
    (folder / "conftest.py").write_text(KEYWORD_RETRIEVER)
    (folder / "golden.json").write_text(json.dumps(GOLDEN))
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--retrieval-golden",
         "golden.json", "--retrieval-update-baseline"],
        cwd=folder, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    document: dict[str, Any] = json.loads((folder / "golden.json.baseline.json").read_text())
    return document


def _edited(document: dict[str, Any], pointer: str, value: Any) -> str:
    """The document with the field at ``pointer`` set to ``value`` (or deleted), as text;
    ``*`` in ``pointer`` is the document's only entry."""
    copy = json.loads(json.dumps(document))
    (key,) = copy["entries"]
    pointer = pointer.replace(ENTRY, "/entries/" + key.replace("~", "~0").replace("/", "~1"))
    *parents, last = (p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:])
    node = copy
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is DELETE:
        del node[last]
    else:
        node[last] = value
    return json.dumps(copy, indent=2)


def test_the_recorded_file_reads_back(recorded: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(recorded))
    (entry,) = read(path).values()
    assert entry.k == 3 and sorted(entry.queries) == ["apple", "bread", "cherry", "juice"]
    assert entry.metrics_version == DEFINITIONS_VERSION


@pytest.mark.parametrize("plain", [True, False], ids=["all-at-once", "one-by-one"])
def test_the_per_query_fast_path_reads_what_the_checked_path_reads(
    recorded: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain: bool
) -> None:
    """The query entries are read by plain type checks, all at once or one by one, and by
    the field-by-field path (which names the field at fault) only when one fails: the same
    entries either way, nulls, integers and judge labels included (``plain``: every query's
    values are floats, which the all-at-once path keeps as read)."""
    from pytest_retrieval import baseline

    document = json.loads(json.dumps(recorded))
    (entry,) = document["entries"].values()
    apple = entry["queries"]["apple"]
    apple["judged"] = [1, None, 0]
    if not plain:
        apple["metrics"]["recall@3"] = None  # an open query's golden metrics
        apple["metrics"]["mrr@3"] = 1  # an int, as another tool may write it
        apple["latency_ms"] = None
        entry["queries"]["bread"]["latency_ms"] = 0
    path = tmp_path / "b.json"
    path.write_text(json.dumps(document))
    fast = read(path)
    with monkeypatch.context() as patched:
        patched.setattr(baseline, "_plain_queries", lambda values: None)
        one_by_one = read(path)
    monkeypatch.setattr(baseline, "_plain_queries", lambda values: None)
    monkeypatch.setattr(baseline, "_plain_query", lambda value: None)
    checked = read(path)
    assert repr(fast) == repr(one_by_one) == repr(checked)
    assert fast.keys() == checked.keys()
    for key, entry_read in fast.items():
        for qid, query in entry_read.queries.items():
            other = checked[key].queries[qid]
            assert repr(query) == repr(other)  # NaN != NaN: compared as text
            assert [type(v) for v in query.metrics.values()] == [float] * len(query.metrics)


@pytest.mark.parametrize(("pointer", "value", "fragment"), HAND_EDITS, ids=IDS)
def test_hand_edit_is_one_error_naming_file_and_field(
    recorded: dict[str, Any], tmp_path: Path, pointer: str, value: Any, fragment: str
) -> None:
    path = tmp_path / "b.json"
    path.write_text(_edited(recorded, pointer, value))
    with pytest.raises(BaselineError) as caught:
        read(path)
    message = str(caught.value)
    assert message.startswith(f"baseline {path}: ")
    assert fragment in message
    assert "--retrieval-update-baseline" in message


@pytest.mark.parametrize(("pointer", "value", "fragment"), HAND_EDITS, ids=IDS)
def test_hand_edit_is_a_usage_error_and_the_file_stays(
    pytester: pytest.Pytester, recorded: dict[str, Any], pointer: str, value: Any, fragment: str
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    baseline = pytester.path / "golden.json.baseline.json"
    text = _edited(recorded, pointer, value)
    baseline.write_text(text)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    assert f"ERROR: baseline {baseline}: " in output
    assert fragment in output
    assert "re-record it with --retrieval-update-baseline" in output
    assert "Traceback" not in output and "INTERNALERROR" not in output
    assert baseline.read_text() == text


def test_a_newer_version_says_upgrade(recorded: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(_edited(recorded, "/version", 2))
    with pytest.raises(BaselineError) as caught:
        read(path)
    assert str(caught.value) == (
        f"baseline {path}: /version: format version 2 is newer than this pytest-retrieval "
        "understands (1)\n  fix: upgrade pytest-retrieval (a newer one wrote this file), or "
        "re-record it with --retrieval-update-baseline"
    )


def test_refresh_of_an_unchanged_retriever_changes_only_created_git_and_latency(
    pytester: pytest.Pytester,
) -> None:
    """Latency is stored at 0.001 ms (per query: to 3 significant digits), so float noise in
    the timer is a small diff; every other field of a refresh is byte-identical."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    baseline = pytester.path / "golden.json.baseline.json"
    runs = []
    for _ in range(2):
        pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
        runs.append(json.loads(baseline.read_text()))
    for document in runs:
        (entry,) = document["entries"].values()
        for value in entry["latency_ms"].values():
            assert value == round(value, 3)
        for field in ("created", "git", "latency_ms"):
            del entry[field]
        for query in entry["queries"].values():
            query.pop("latency_ms", None)
    assert runs[0] == runs[1]


def _stray(folder: Path, name: str, age_s: float) -> Path:
    path = folder / name
    path.write_text("half a baseline")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_the_next_write_removes_a_killed_writers_temp_files(tmp_path: Path) -> None:
    """A SIGKILL between write and rename leaves ``.NAME.XXXXXXXX.tmp``; the next write of that
    baseline removes such files once they are a minute old, and nothing else."""
    path = tmp_path / "b.json"
    killed = (
        "import os, pathlib, signal, sys\n"
        "from pytest_retrieval._internal import io as _io\n"
        "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "_io.atomic_write(pathlib.Path(sys.argv[1]), 'x' * 1_000_000)\n"
    )
    job = subprocess.run([sys.executable, "-c", killed, str(path)], timeout=60)
    assert job.returncode == -9
    (left,) = tmp_path.glob(".b.json.*.tmp")
    old = time.time() - 120
    os.utime(left, (old, old))
    fresh = _stray(tmp_path, ".b.json.abcd_123.tmp", 5)  # maybe a live writer: kept
    others = [
        _stray(tmp_path, name, 120)
        for name in (".c.json.abcd_123.tmp", ".b.json.notes.tmp", "b.json.abcd_123.tmp")
    ]
    update(path, [], replace_corrupt=False)
    assert not left.exists()
    assert fresh.exists() and all(p.exists() for p in others)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["b.json", fresh.name] + [p.name for p in others]
    )


# ---------------------------------------------------------------------------- keys and fields


def _entry(
    key: str = "golden.json",
    name: str = "golden",
    value: float = 0.5,
    queries: dict[str, BaselineQuery] | None = None,
    **fields: Any,
) -> BaselineEntry:
    """An entry for retriever "r" whose values are all ``value``; ``fields`` override."""
    defaults: dict[str, Any] = {
        "golden_name": name,
        "golden_fingerprint": f"fp-{value}",
        "retriever_id": "r",
        "k": 10,
        "metrics": {"recall@10": value},
        "ci": {},
        "latency_p50_ms": None,
        "latency_p95_ms": None,
        "queries": {"q1": BaselineQuery("f", {"recall@10": value}, ["d1"])},
        "golden_key": key,
    }
    if queries is not None:
        defaults["queries"] = queries
    return BaselineEntry(**(defaults | fields))


def test_golden_key_is_the_path_from_the_baseline_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    beir = tmp_path / "data" / "beir"
    (beir / "qrels").mkdir(parents=True)
    for split in ("test", "dev"):
        (beir / "qrels" / f"{split}.tsv").write_text("q1\td1\t1\n")
    shared = tmp_path / "shared.json"
    assert golden_key(tmp_path / "a" / "golden.json", shared) == "a/golden.json"
    assert golden_key(tmp_path / "golden.json", tmp_path / "ci" / "b.json") == "../golden.json"
    assert golden_key(beir / "qrels" / "test.tsv", shared) == "data/beir"  # the default split
    assert golden_key(beir, shared) == "data/beir"
    assert golden_key(beir / "qrels" / "dev.tsv", shared) == "data/beir/qrels/dev.tsv"
    monkeypatch.chdir(tmp_path / "data")
    assert golden_key("beir/qrels/test.tsv", shared) == "data/beir"  # relative to the cwd
    assert entry_key("data/beir", "bm25") == "data/beir::bm25"


def test_two_golden_files_named_alike_share_one_baseline_file(tmp_path: Path) -> None:
    """``a/golden.json`` and ``b/golden.json`` are both named "golden": keyed by name, the
    second overwrote the first in a shared file and was compared with its values."""
    shared = tmp_path / "shared.json"
    keys = [golden_key(tmp_path / folder / "golden.json", shared) for folder in ("a", "b")]
    update(
        shared,
        [_entry(keys[0], value=0.25), _entry(keys[1], value=0.75)],
        replace_corrupt=False,
    )
    entries = read(shared)
    assert sorted(entries) == ["a/golden.json::r", "b/golden.json::r"]
    found = [find(entries, key, "golden", "r") for key in keys]
    assert [entry.metrics["recall@10"] if entry else None for entry in found] == [0.25, 0.75]
    stored = json.loads(shared.read_text())["entries"]["b/golden.json::r"]["golden"]
    assert stored == {"fingerprint": "fp-0.75", "name": "golden", "path": "b/golden.json"}


def test_two_new_entries_with_one_key_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    first, second = _entry(value=0.25), _entry(value=0.75, queries={})
    with pytest.raises(BaselineError) as caught:
        update(path, [first, second], replace_corrupt=False)
    assert caught.value.problem == (
        "two results would be recorded as the entry 'golden.json::r': golden set golden.json "
        "(fingerprint fp-0.25, 1 queries) with retriever r and golden set golden.json "
        "(fingerprint fp-0.75, 0 queries) with retriever r"
    )
    assert "own id" in caught.value.fix
    assert not path.exists()


def _document(tmp_path: Path, *entries: BaselineEntry) -> dict[str, Any]:
    path = tmp_path / "rendered.json"
    update(path, entries, replace_corrupt=False)
    document: dict[str, Any] = json.loads(path.read_text())
    return document


@pytest.mark.parametrize(
    ("which", "pointer"),
    [
        ("version", "/version"),
        ("k", "/entries/a~1golden.json::r/k"),
        ("p95", "/entries/a~1golden.json::r/latency_ms/p95"),
        ("entry", "/entries/a~1golden.json::r"),
    ],
)
def test_a_key_written_twice_is_an_error_naming_it(
    tmp_path: Path, which: str, pointer: str
) -> None:
    """json keeps the last of two equal keys: a merge that kept both sides would pass."""
    document = _document(tmp_path, _entry("a/golden.json"))
    entry = json.dumps(document["entries"]["a/golden.json::r"], sort_keys=True)
    snippet = {
        "version": '"version": 1',
        "k": '"k": 10',
        "p95": '"p95": null',
        "entry": f'"a/golden.json::r": {entry}',
    }[which]
    text = json.dumps(document, sort_keys=True)
    assert text.count(snippet) == 1
    path = tmp_path / "b.json"
    path.write_text(text.replace(snippet, f"{snippet}, {snippet}"))
    with pytest.raises(BaselineError) as caught:
        read(path)
    assert caught.value.problem == f"{pointer}: this key appears twice in one object; keep one"


def test_an_older_file_keyed_by_golden_name_is_found_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    update(path, [_entry("", value=0.25), _entry("", name="other")], replace_corrupt=False)
    assert "path" not in path.read_text()  # as older versions wrote it
    entries = read(path)
    assert sorted(entries) == ["golden::r", "other::r"]
    legacy = find(entries, "sub/golden.json", "golden", "r")
    assert legacy is not None and legacy.metrics == {"recall@10": 0.25}
    assert find(entries, "sub/golden.json", "golden", "bm25") is None  # another retriever
    assert find(entries, "sub/nope.json", "nope", "r") is None

    update(path, [_entry("sub/golden.json", value=0.75)], replace_corrupt=False)
    entries = read(path)
    assert sorted(entries) == ["other::r", "sub/golden.json::r"]  # the legacy entry replaced
    exact = find(entries, "sub/golden.json", "golden", "r")
    assert exact is not None and exact.metrics == {"recall@10": 0.75}
    # an entry with a golden key is never taken for another file of the same name
    assert find(entries, "elsewhere/golden.json", "golden", "r") is None


@pytest.mark.parametrize(
    ("key", "field", "problem"),
    [
        ("golden::r", "name", "does not match the entry's key 'golden::r' (golden name :: "),
        ("g.json::r", "path", "does not match the entry's key 'g.json::r' (golden path :: "),
    ],
)
def test_an_entry_must_match_its_key(tmp_path: Path, key: str, field: str, problem: str) -> None:
    """An older entry is checked by its golden name, a newer one by its golden path."""
    document = _document(tmp_path, _entry("g.json" if field == "path" else ""))
    document["entries"][key]["golden"][field] = "other"
    path = tmp_path / "b.json"
    path.write_text(json.dumps(document))
    with pytest.raises(BaselineError) as caught:
        read(path)
    assert caught.value.problem == (
        f"entry {key!r} is malformed at /entries/{key}/golden/{field}: 'other' {problem}"
        "retriever id)"
    )


def test_metric_values_round_trip_exactly(tmp_path: Path) -> None:
    """Rounded to 10 digits, an unchanged run compared with differences of 1e-11, not 0."""
    path = tmp_path / "b.json"
    per_query = {"recall@10": 1 / 7, "mrr@10": math.nan}
    mean = (1 / 7 + (0.1 + 0.2)) / 2  # the aggregate is its queries' mean, as recorded
    entry = _entry(
        value=mean,
        queries={
            "q1": BaselineQuery("f", per_query, ["d1"]),
            "q2": BaselineQuery("f", {"recall@10": 0.1 + 0.2}, ["d1"]),
        },
        ci={"recall@10": (1 / 3, 2 / 3)},
    )
    update(path, [entry], replace_corrupt=False)
    (stored,) = read(path).values()
    assert stored.metrics["recall@10"] == mean
    assert stored.queries["q1"].metrics["recall@10"] == 1 / 7
    assert stored.queries["q2"].metrics["recall@10"] == 0.30000000000000004
    assert math.isnan(stored.queries["q1"].metrics["mrr@10"])  # unscored: null in the file
    assert stored.ci == {"recall@10": (0.3333333333, 0.6666666667)}  # estimates stay rounded


def test_per_query_latency_is_stored_to_three_significant_digits(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    latencies = {"a": 12.3456, "b": 0.00123456, "c": 123456.7, "d": None, "e": math.nan}
    queries = {q: BaselineQuery("f", {"recall@10": 1.0}, [], ms) for q, ms in latencies.items()}
    entry = _entry(value=1.0, queries=queries, latency_p50_ms=1.23456789, latency_p95_ms=2.0004)
    update(path, [entry], replace_corrupt=False)
    (stored,) = read(path).values()
    assert {q: v.latency_ms for q, v in stored.queries.items()} == {
        "a": 12.3,
        "b": 0.00123,
        "c": 123000.0,
        "d": None,
        "e": None,
    }
    assert (stored.latency_p50_ms, stored.latency_p95_ms) == (1.235, 2.0)
    rows = json.loads(path.read_text())["entries"]["golden.json::r"]["queries"]
    assert "latency_ms" not in rows["d"] and "latency_ms" not in rows["e"]


def test_metrics_version_is_stored_and_defaults_to_1(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    update(path, [_entry(), _entry("other.json", metrics_version=2)], replace_corrupt=False)
    document = json.loads(path.read_text())
    assert document["entries"]["golden.json::r"]["metrics_version"] == DEFINITIONS_VERSION == 1
    assert read(path)["other.json::r"].metrics_version == 2
    for entry in document["entries"].values():
        del entry["metrics_version"]  # a file recorded before the field existed
    path.write_text(json.dumps(document))
    assert [e.metrics_version for e in read(path).values()] == [1, 1]


def test_errors_share_one_root_and_keep_their_messages() -> None:
    baseline = BaselineError(Path("b.json"), "bad")
    assert str(baseline) == (
        "baseline b.json: bad\n  fix: restore it from git (git checkout -- b.json) or "
        "re-record it with --retrieval-update-baseline"
    )
    golden = GoldenError("g.json", "/0", "bad", "fix it")
    assert str(golden) == "golden set g.json, /0: bad\n  fix: fix it"
    for error in (baseline, golden):
        assert isinstance(error, ConfigError) and isinstance(error, RetrievalError)
