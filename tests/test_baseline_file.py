"""Baseline files as people edit them: every bad field is one usage error naming the file and
the field, the file stays as it was; writes round latency and clear a killed writer's temp files."""

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

from pytest_retrieval.baseline import BaselineError, read, update

ENTRY = "/entries/fruit::retriever"


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
    ("/version", DELETE, "/version is missing"),
    ("/entries", [], "/entries: [] is not an object"),
    (f"{ENTRY}/latency_ms/p95", "fast", "latency_ms/p95: 'fast' is not a number of ms"),
    (f"{ENTRY}/latency_ms/p50", -1, "latency_ms/p50: -1 is not a number of ms >= 0"),
    (f"{ENTRY}/latency_ms", 5, "latency_ms: 5 is not an object"),
    (f"{ENTRY}/k", 10.9, "/k: 10.9 is not a whole number >= 1"),
    (f"{ENTRY}/k", 0, "/k: 0 is not a whole number >= 1"),
    (f"{ENTRY}/k", True, "/k: True is not a whole number >= 1"),
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
    (f"{ENTRY}/queries/apple/fingerprint", DELETE, "queries/apple/fingerprint is missing"),
    (f"{ENTRY}/queries", [], "/queries: [] is not an object"),
    (f"{ENTRY}/golden/name", "other", "/golden/name: 'other' does not match the entry's key"),
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
    """The document with the field at ``pointer`` set to ``value`` (or deleted), as text."""
    copy = json.loads(json.dumps(document))
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
    entry = read(path)["fruit::retriever"]
    assert entry.k == 3 and sorted(entry.queries) == ["apple", "bread", "cherry", "juice"]


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
    with pytest.raises(
        BaselineError, match=r"format version 2 is newer .*; upgrade pytest-retrieval"
    ):
        read(path)


def test_refresh_of_an_unchanged_retriever_changes_only_created_git_and_latency(
    pytester: pytest.Pytester,
) -> None:
    """Latency is stored at 0.001 ms, so float noise in the timer is no diff; every other
    field of a refresh is byte-identical."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    baseline = pytester.path / "golden.json.baseline.json"
    runs = []
    for _ in range(2):
        pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-update-baseline")
        runs.append(json.loads(baseline.read_text()))
    for document in runs:
        entry = document["entries"]["fruit::retriever"]
        for value in entry["latency_ms"].values():
            assert value == round(value, 3)
        for field in ("created", "git", "latency_ms"):
            del entry[field]
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
        "from pytest_retrieval import baseline\n"
        "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "baseline.atomic_write(pathlib.Path(sys.argv[1]), 'x' * 1_000_000)\n"
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
