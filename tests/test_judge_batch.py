"""`pytest-retrieval judge-batch`: every Batch API state against the local test server."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import DOCS, GOLDEN, KEYWORD_RETRIEVER, write_golden
from judge_server import JudgeServer, serve

from pytest_retrieval.cli import main
from pytest_retrieval.judge import Judge, JudgeConfig, JudgePair, batch

KEY = "sk-test-batch-0123456789"
CRITERIA = "only baked goods count"
SUBMIT = ["judge-batch", "submit", "r.json", "-o", "state.json", "--corpus", "corpus.json"]
COLLECT = ["judge-batch", "collect", "state.json"]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[JudgeServer]:
    """The test server as OPENAI_BASE_URL, and a report of 12 pairs (2 queries x 6 docs) in
    a fresh working folder."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    queries = [
        {"query": "apple pie", "criteria": CRITERIA, "returned": sorted(DOCS)},
        {"query": "cherry juice", "returned": sorted(DOCS)},
    ]
    report = {"evaluations": [{"k": 6, "queries": queries}]}
    (tmp_path / "r.json").write_text(json.dumps(report), encoding="utf-8")
    (tmp_path / "corpus.json").write_text(json.dumps(DOCS), encoding="utf-8")
    with serve() as running:
        monkeypatch.setenv("OPENAI_BASE_URL", running.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield running


def cached(folder: Path) -> int:
    """Rows in a judge cache folder (0 when there is none)."""
    path = folder / "judge.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])


def judge(cache: Path) -> Judge:
    return Judge(JudgeConfig(model="gpt-4.1-mini", cache_dir=cache))


def report_pairs() -> list[JudgePair]:
    return [JudgePair("apple pie", CRITERIA, d, DOCS[d]) for d in sorted(DOCS)] + [
        JudgePair("cherry juice", None, d, DOCS[d]) for d in sorted(DOCS)
    ]


def test_criteria_reach_the_batch_and_its_keys_are_the_online_ones(
    pytester: pytest.Pytester, server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(pytester.path)  # the server fixture went to tmp_path
    pytester.makeconftest(KEYWORD_RETRIEVER)
    (pytester.path / "corpus.json").write_text(json.dumps(DOCS), encoding="utf-8")
    golden: dict[str, Any] = json.loads(json.dumps(GOLDEN))
    golden["queries"][0]["criteria"] = CRITERIA  # "apple"
    write_golden(pytester, {**golden, "corpus": "corpus.json"})
    pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    assert main(["judge-batch", "submit", "r.json", "-o", "state.json", "--cache", "jc"]) == 0
    lines = [json.loads(line) for line in server.files["file-1"].splitlines()]
    user = {r["custom_id"]: r["body"]["messages"][1]["content"] for r in lines}
    apple = {key for key, text in user.items() if re.search(r"-query>\napple\n</", text)}
    assert len(apple) == 3 and all(CRITERIA in user[key] for key in apple)
    assert not any(CRITERIA in text for key, text in user.items() if key not in apple)
    online = judge(pytester.path / "jc").cache_key(JudgePair("apple", CRITERIA, "d1", DOCS["d1"]))
    assert online in apple
    assert main(COLLECT) == 0
    offline = pytester.runpytest(
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-cache-only",
        "--retrieval-judge-cache",
        "jc",
    )
    offline.stdout.fnmatch_lines(["*: 0 calls, 12 cache hits*coverage 100.0%*"])
    assert server.requests == []


@pytest.mark.parametrize("status", ["validating", "in_progress", "finalizing", "cancelling"])
def test_a_running_batch_is_collected_later_with_exit_3(
    server: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], status: str
) -> None:
    server.batch_status = status
    assert main([*SUBMIT, "--cache", "jc"]) == 0
    assert main(COLLECT) == 3
    out = capsys.readouterr().out
    assert f"batch batch-1: still {status} (0 of 12 done); collect again later" in out
    assert cached(tmp_path / "jc") == 0
    server.batch_end("completed")
    assert main(COLLECT) == 0
    assert "batch batch-1: completed: 12 verdicts stored, 0 failed" in capsys.readouterr().out
    assert cached(tmp_path / "jc") == 12


def test_failed_lines_of_a_completed_batch_are_counted_from_the_error_file(
    server: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.batch_failed = 5
    assert main([*SUBMIT, "--cache", "jc"]) == 0
    assert main(COLLECT) == 0
    out = capsys.readouterr().out
    assert "completed: 7 verdicts stored, 5 failed: HTTP 400: injected line failure\n" in out
    assert "judge-batch submit r.json -o NEW_STATE.json" in out
    assert cached(tmp_path / "jc") == 7


@pytest.mark.parametrize("end", ["expired", "cancelled"])
def test_an_expired_or_cancelled_batch_keeps_its_partial_output(
    server: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], end: str
) -> None:
    server.batch_status, server.batch_ran, server.batch_failed = "in_progress", 6, 2
    assert main([*SUBMIT, "--cache", "jc"]) == 0
    server.batch_end(end)
    assert main(COLLECT) == 1
    out = capsys.readouterr().out
    assert (
        f"batch batch-1: {end}: 4 verdicts stored, 2 failed: HTTP 400: injected line failure, "
        "6 never run\n" in out
    )
    assert "to send the missing pairs again (stored verdicts are cache hits): " in out
    assert cached(tmp_path / "jc") == 4
    server.batch_status, server.batch_ran, server.batch_failed = "completed", None, 0
    assert (
        main(
            [
                "judge-batch",
                "submit",
                "r.json",
                "-o",
                "again.json",
                "--corpus",
                "corpus.json",
                "--cache",
                "jc",
            ]
        )
        == 0
    )
    assert "8 requests (4 already cached)" in capsys.readouterr().out
    assert main(["judge-batch", "collect", "again.json"]) == 0
    assert cached(tmp_path / "jc") == 12


def test_a_failed_batch_shows_its_errors_scrubbed(
    server: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.batch_status = "failed"
    server.batch_errors = [f"The model 'gpt-x' does not exist (key {KEY})"]
    assert main([*SUBMIT, "--cache", "jc"]) == 0
    assert main(COLLECT) == 1
    out = capsys.readouterr().out
    assert "batch batch-1: failed: 0 verdicts stored, 0 failed, 12 never run\n" in out
    assert "  batch error: The model 'gpt-x' does not exist (key ***) (line 1)\n" in out
    assert KEY not in out and cached(tmp_path / "jc") == 0


def test_inputs_are_split_at_the_limits_and_collect_sums_every_batch(
    server: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grader = judge(tmp_path / "jc")
    submitted = batch.submit(grader, report_pairs(), max_requests=5)
    assert submitted.batch_ids == ["batch-1", "batch-2", "batch-3"]
    sizes = [len(server.files[b["input_file_id"]].splitlines()) for b in server.batches.values()]
    assert sizes == [5, 5, 2] and submitted.requests == 12
    settings = {
        "judge": {
            "model": "gpt-4.1-mini",
            "scale": "binary",
            "min_score": 0.5,
            "base_url": None,
            "prompt": None,
            "text_budget": 4000,
            "cache": "jc",
        }
    }
    batch.save_state(tmp_path / "state.json", submitted, settings)
    assert main(COLLECT) == 0
    out = capsys.readouterr().out
    assert "3 batches: 12 verdicts stored, 0 failed\n" in out
    assert cached(tmp_path / "jc") == 12
    # the single-id state file of earlier versions still collects
    old = {"batch_id": "batch-2", "requests": 5, **settings}
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    assert main(["judge-batch", "collect", "old.json"]) == 0
    assert "batch batch-2: completed: 5 verdicts stored, 0 failed\n" in capsys.readouterr().out
    # bytes: every uploaded file stays within the limit
    lines = [b"x" * 10 + b"\n"] * 7
    assert [len(p) for p in batch.split(lines, 50_000, 33)] == [3, 3, 1]
    with pytest.raises(ValueError, match="above the 5-byte batch file limit; lower --text-budget"):
        batch.split(lines, 50_000, 5)
    fresh = judge(tmp_path / "other")
    by_size = batch.submit(fresh, report_pairs(), max_bytes=len(server.files["file-1"]) + 1)
    uploads = [server.files[server.batches[i]["input_file_id"]] for i in by_size.batch_ids]
    assert len(uploads) >= 2 and sum(len(u.splitlines()) for u in uploads) == 12
    assert all(len(u) <= len(server.files["file-1"]) + 1 for u in uploads)


def test_a_batch_that_cannot_be_created_keeps_the_ids_of_the_others(
    server: JudgeServer, tmp_path: Path
) -> None:
    server.batch_create_ok, server.batch_create_error = 1, (400, "Too many enqueued tokens")
    submitted = batch.submit(judge(tmp_path / "jc"), report_pairs(), max_requests=5)
    assert submitted.batch_ids == ["batch-1"] and submitted.unsent == 7
    assert isinstance(submitted.error, batch.BatchAPIError) and submitted.error.status == 400
    assert str(submitted.error) == "creating batch 2 of 3: HTTP 400: Too many enqueued tokens"


def test_api_errors_are_one_scrubbed_line_with_the_servers_message(
    server: JudgeServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server.batch_create_error = (400, "Invalid model; you sent {authorization}")
    assert main([*SUBMIT, "--cache", "jc"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "pytest-retrieval judge-batch: creating batch 1 of 1: HTTP 400: "
        "Invalid model; you sent Bearer ***\n"
    )
    assert KEY not in captured.out + captured.err and not (tmp_path / "state.json").exists()
    server.batch_create_error = None
    assert main([*SUBMIT, "--cache", "jc"]) == 0
    state = json.loads((tmp_path / "state.json").read_text("utf-8"))
    (tmp_path / "state.json").write_text(json.dumps({**state, "batch_ids": ["nope"]}), "utf-8")
    assert main(COLLECT) == 2
    assert capsys.readouterr().err == (
        "pytest-retrieval judge-batch: reading batch nope: HTTP 404: no /v1/batches/nope\n"
    )
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens
    (tmp_path / "state.json").write_text(json.dumps(state), "utf-8")
    assert main(COLLECT) == 1
    err = capsys.readouterr().err
    assert err.startswith("pytest-retrieval judge-batch: reading batch batch-1: ")
    assert "onnect" in err  # "Connection error." or the transport's ConnectError
    assert err.count("\n") == 1 and "Traceback" not in err


def test_samples_are_batched_keyed_and_seeded_as_the_online_run_asks_them(
    server: JudgeServer, tmp_path: Path
) -> None:
    assert main([*SUBMIT, "--cache", "jc", "--samples", "3"]) == 0
    lines = [json.loads(line) for line in server.files["file-1"].splitlines()]
    assert len(lines) == 36 and {r["body"]["seed"] for r in lines} == {0, 1, 2}
    assert main(COLLECT) == 0
    online = Judge(JudgeConfig(model="gpt-4.1-mini", cache_dir=tmp_path / "jc", samples=3))
    verdicts = online.judge(report_pairs())
    assert server.requests == [] and online.summary()["cache_hits"] == 36
    assert all(v.error is None and v.agreement == 1.0 for v in verdicts)


def test_a_password_in_the_base_url_never_reaches_the_state_file(
    server: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.base_url.replace("http://", "http://user:pw-SECRET-9@")
    assert main([*SUBMIT, "--cache", "jc", "--base-url", url]) == 2  # a bad argument
    assert "--base-url has a password in it" in capsys.readouterr().err
    assert not (tmp_path / "state.json").exists() and server.files == {}


def test_a_report_of_qrels_without_texts_is_not_sent_to_the_judge(
    server: JudgeServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`eval` takes TREC qrels without a queries file (each text its id); submitting its
    report with --corpus sent the judge "1", "2" as the queries (paid calls for nonsense
    grades). The golden set is checked, as without --corpus."""
    (tmp_path / "test.qrels").write_text("1 0 apple 1\n2 0 cherry 1\n", encoding="utf-8")
    (tmp_path / "run.trec").write_text(
        "1 Q0 apple 1 2.0 r\n1 Q0 cherry 2 1.0 r\n2 Q0 cherry 1 1.0 r\n", encoding="utf-8"
    )
    assert main(["eval", "test.qrels", "run.trec", "--report", "e.json"]) == 0
    capsys.readouterr()
    status = main(
        ["judge-batch", "submit", "e.json", "-o", "state.json", "--corpus", "corpus.json"]
    )
    _, err = capsys.readouterr()
    assert status != 0
    assert "test.qrels: TREC qrels need a queries file beside them" in err
    assert not server.requests and not (tmp_path / "state.json").exists()
