"""Issue 11: the LLM judge against an endpoint that misbehaves, end to end (pytester runs
against tests/judge_server.py). Each test is one bullet of the issue: a fault is never a
verdict, paid answers are never lost, a dead endpoint stops fast, current models work."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden
from judge_server import JudgeServer, serve

#: end-to-end runs (pytest processes, xdist, a local judge server): out of the fast
#: subset, `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

KEY = "sk-test-faults-0123456789"

#: the fruit retriever, returning texts (so the judge needs no corpus)
TEXT_RETRIEVER = KEYWORD_RETRIEVER.replace(
    "    return ranked[:k]",
    '    return [{"id": d, "text": DOCS[d]} for d in ranked[:k]]',
)

#: a retriever over ``docs.json``: every hit shares at least one term with its query, so the
#: test server finds every hit on topic (score 0.5 or 1.0)
MANY_RETRIEVER = """
import json
from pathlib import Path

import pytest

DOCS = json.loads((Path(__file__).parent / "docs.json").read_text("utf-8"))

def search(query, k, **params):
    words = set(query.split())
    ranked = sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), int(d[1:])))
    return [{"id": d, "text": DOCS[d]} for d in ranked[:k]]

@pytest.fixture(scope="session")
def retriever():
    return search
"""


def many_pairs(pytester: pytest.Pytester, queries: int = 40, k: int = 5) -> int:
    """A project with ``queries`` distinct queries (at most 40) of ``k`` hits: as many
    distinct (query, document) pairs. Returns their number."""
    docs = {f"d{i}": f"topic{i % 8} shade{i % 5} item{i}" for i in range(80)}
    (pytester.path / "docs.json").write_text(json.dumps(docs), encoding="utf-8")
    pytester.makeconftest(MANY_RETRIEVER)
    golden = {
        "name": "many",
        "k": k,
        "queries": [
            {"id": f"q{j}", "query": f"topic{j % 8} shade{j % 5}", "relevant": [f"d{j}"]}
            for j in range(queries)
        ],
    }
    write_golden(pytester, golden)
    return queries * k


def fruit(pytester: pytest.Pytester, retriever: str = TEXT_RETRIEVER) -> int:
    """The fruit golden set (4 queries, k=3): 12 distinct pairs."""
    pytester.makeconftest(retriever)
    write_golden(pytester)
    return 12


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "AZURE_OPENAI_API_KEY",
        "AZURE_OPENAI_ENDPOINT",
        "OPENAI_API_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)
    with serve() as running:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        yield running


def judge_args(server: JudgeServer, *more: str) -> list[str]:
    """A judged run of golden.json against the server, reported to r.json; without a
    verdict cache unless ``more`` names one."""
    cache = [] if "--retrieval-judge-cache" in more else ["--retrieval-judge-no-cache"]
    return [
        "--retrieval-golden",
        "golden.json",
        "--retrieval-judge",
        "--retrieval-judge-base-url",
        server.base_url,
        "--retrieval-report",
        "r.json",
        "-p",
        "no:cacheprovider",
        *cache,
        *more,
    ]


def evaluation(pytester: pytest.Pytester, name: str = "r.json") -> dict[str, Any]:
    report = json.loads((pytester.path / name).read_text("utf-8"))
    first: dict[str, Any] = report["evaluations"][0]
    return first


def verdicts(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    """Every verdict of the report, one per hit."""
    return [
        query["judgments"][doc]
        for query in evaluation(pytester)["queries"]
        for doc in query["returned"]
        if doc in query.get("judgments", {})
    ]


def output(result: pytest.RunResult) -> str:
    return result.stdout.str() + "\n" + result.stderr.str()


def assert_no_crash(result: pytest.RunResult) -> None:
    """No INTERNALERROR, no traceback, and no test failed with an exception of the plugin
    (an in-process run shows it as ``FAILED golden.json::retrieval - AttributeError: ...``)."""
    text = output(result)
    assert "INTERNALERROR" not in text and "Traceback" not in text, text[-3000:]
    raised = [
        line
        for line in result.stdout.lines
        if line.startswith(("FAILED", "ERROR")) and re.search(r" - \w+(Error|Exception)\b", line)
    ]
    assert raised == [], text[-3000:]
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), text[-3000:]


def guarded_subprocess(
    pytester: pytest.Pytester, args: list[str], timeout: float = 180
) -> pytest.RunResult:
    """A subprocess run; one over ``timeout`` (a hang guard, generous for a loaded box's
    start-up) fails the test."""
    try:
        return pytester.runpytest_subprocess(*args, timeout=timeout)
    except pytester.TimeoutExpired:
        pytest.fail(f"the run did not end within {timeout:g} s")


def metric_line(result: pytest.RunResult, metric: str) -> str:
    lines = [line for line in result.stdout.lines if line.strip().startswith(metric + " ")]
    assert lines, f"no {metric} line in:\n{result.stdout.str()}"
    return lines[0]


# ---------------------------------------------------------------- ungraded is not a label


def test_five_percent_refusals_against_a_baseline_of_the_same_judge_pass(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pairs = many_pairs(pytester)
    gated = ("--retrieval-gate", "otr@5")
    recorded = pytester.runpytest(*judge_args(server, *gated, "--retrieval-update-baseline"))
    recorded.assert_outcomes(passed=1)
    assert evaluation(pytester)["metrics"]["otr@5"] == 1.0  # every hit is on topic
    server.refuse_share = 0.035  # picks 9 of the 200 pairs: 4.5%
    again = pytester.runpytest(*judge_args(server, *gated))
    refused = sum(1 for s in server.requests[pairs:] if s.status == 200 and server.refuses(s))
    assert 0.03 * pairs <= refused <= 0.05 * pairs  # above the 95% coverage floor
    assert not [line for line in again.stdout.lines if "regression" in line.lower()]
    assert again.ret == pytest.ExitCode.OK, again.stdout.str()
    # over the graded hits only: every one of them is on topic, as in the baseline
    assert evaluation(pytester)["metrics"]["otr@5"] == 1.0
    line = metric_line(again, "otr@5")  # the coverage beside the metric
    assert f"{pairs - refused}/{pairs}" in line or f"{(pairs - refused) / pairs:.1%}" in line


def test_zero_coverage_prints_na_and_fails_on_judge_coverage(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    fruit(pytester)
    server.refuse_share = 1.0
    result = pytester.runpytest(*judge_args(server, "--junitxml", "junit.xml"))
    result.assert_outcomes(failed=1)
    line = metric_line(result, "otr@3")
    assert "n/a" in line and "0.0000" not in line
    result.stdout.fnmatch_lines(
        ["*the LLM judge graded 0*% of the hits, below the required 95%*refused*"]
    )
    assert evaluation(pytester)["metrics"].get("otr@3") is None
    junit = (pytester.path / "junit.xml").read_text("utf-8")
    assert '<property name="retrieval.otr@3" value="n/a" />' in junit


# ---------------------------------------------------------------- cache the observation


def test_min_score_change_with_a_warm_cache_equals_the_cold_result(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    fruit(pytester)
    server.override = {"on_topic": True, "score": 0.5}
    strict = pytester.runpytest(
        *judge_args(server, "--retrieval-judge-cache", "warm", "--retrieval-judge-min-score", "0.9")
    )
    strict.assert_outcomes(passed=1)
    assert evaluation(pytester)["metrics"]["otr@3"] == 0.0
    asked = len(server.requests)
    warm = pytester.runpytest(
        *judge_args(server, "--retrieval-judge-cache", "warm", "--retrieval-judge-min-score", "0.1")
    )
    warm.assert_outcomes(passed=1)
    assert len(server.requests) == asked  # answered from the cache
    assert evaluation(pytester)["metrics"]["otr@3"] == 1.0
    cold = pytester.runpytest(
        *judge_args(server, "--retrieval-judge-cache", "cold", "--retrieval-judge-min-score", "0.1")
    )
    cold.assert_outcomes(passed=1)
    assert evaluation(pytester)["metrics"]["otr@3"] == 1.0


# ---------------------------------------------------------------- stop fast, lose nothing


@pytest.mark.parametrize("fault", ["500", "503html", "reset"])
def test_dead_endpoint_on_200_pairs_stops_fast_with_one_message(
    pytester: pytest.Pytester, server: JudgeServer, fault: str
) -> None:
    pairs = many_pairs(pytester)
    server.fault = fault
    result = guarded_subprocess(pytester, judge_args(server))
    assert_no_crash(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # judge coverage
    text = output(result)
    assert f"stopped calling the judge at {server.base_url}: " in text
    assert "consecutive failures" in text
    # one message (the report may repeat it), not one a pair
    stops = re.findall(
        r"stopped calling the judge at \S+: \d+ consecutive failures \(last: [^)]*\)", text
    )
    assert len(set(stops)) == 1
    assert text.count("stopped calling the judge at") < 20
    assert len(server.requests) < pairs / 2  # far fewer than 5 requests a pair


def test_never_answering_endpoint_ends_at_the_deadline(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    fruit(pytester)
    server.fault = "never"
    # a request never answered, with an hour's request timeout: only the deadline ends the
    # run (a run that waited for the calls in flight would outlast the hang guard)
    result = guarded_subprocess(
        pytester,
        judge_args(
            server, "--retrieval-judge-deadline", "5", "--retrieval-judge-timeout", "3600"
        ),
    )
    assert_no_crash(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # nothing graded
    assert "judge deadline of 5 s reached (--retrieval-judge-deadline)" in output(result)


def test_retry_after_is_one_shared_pause(pytester: pytest.Pytester, server: JudgeServer) -> None:
    many_pairs(pytester, queries=16)  # 80 pairs: 1 s of requests at 4 at a time
    server.latency = 0.05
    server.script = ["429:2"]
    result = pytester.runpytest(*judge_args(server, "--retrieval-judge-concurrency", "4"))
    result.assert_outcomes(passed=1)
    limited = [s for s in server.requests if s.status == 429]
    assert len(limited) == 1
    # Between the 429 going out and 2 s on, only the calls already in flight beside it can
    # arrive (3 at most, however late a busy machine lets them arrive): a task that sent
    # anything while the endpoint asked us to wait would add more (the pause starts when the
    # client reads the 429, after it went out, so no call after the pause lands in here).
    paused = limited[0].finished
    during = [s for s in server.requests if paused < s.arrived < paused + 2]
    assert len(during) <= 4 - 1, during
    retried = [s for s in server.requests if s.arrived > paused and s.query == limited[0].query]
    assert any(s.document == limited[0].document for s in retried)
    assert all(v["error"] is None for v in verdicts(pytester))


def test_insufficient_quota_is_fatal_at_once_with_the_server_message(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    fruit(pytester)
    server.fault = "quota"
    result = pytester.runpytest(
        *judge_args(
            server, "--retrieval-judge-concurrency", "1", "--retrieval-judge-max-wait", "0.05"
        )
    )
    assert_no_crash(result)
    assert len(server.requests) == 1  # not retried, and no other pair tried
    text = output(result)
    assert "insufficient_quota" in text
    assert "You exceeded your current quota" in text


def test_backoff_does_not_hold_a_concurrency_slot(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    fruit(pytester)
    server.latency = 0.02
    server.script = ["500"]
    result = pytester.runpytest(*judge_args(server, "--retrieval-judge-concurrency", "1"))
    result.assert_outcomes(passed=1)
    failed = server.requests[0]
    assert failed.status == 500
    retry = next(
        s for s in server.requests[1:] if (s.query, s.document) == (failed.query, failed.document)
    )
    others = [s for s in server.requests if failed.finished < s.arrived < retry.arrived]
    assert others, "nothing was sent while the failed pair waited to retry"
    assert all(v["error"] is None for v in verdicts(pytester))


@pytest.mark.timeout(300)
def test_a_killed_run_keeps_what_was_paid_for(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pairs = many_pairs(pytester, queries=8)  # 40 pairs
    paid, concurrency = 20, 2
    server.hold_after = paid
    args = judge_args(
        server,
        "--retrieval-judge-cache",
        "c",
        "--retrieval-judge-concurrency",
        str(concurrency),
    )
    command = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:asyncio", *args]
    run = subprocess.Popen(
        command, cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:  # (the test's timeout guards these waits)
        while server.answers < paid and run.poll() is None:
            time.sleep(0.05)
        assert server.answers == paid, "the run never got its answers"
        # the answers are committed while the run still waits on its held calls (a batched
        # commit may lag a little: waited for, not timed)
        while cache_rows(pytester.path / "c") < paid - concurrency and run.poll() is None:
            time.sleep(0.05)
        assert run.poll() is None, "the run ended instead of waiting on its held calls"
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    rows = cache_rows(pytester.path / "c")
    assert rows >= paid - concurrency
    server.hold_after = None
    server._release.set()  # let the held handlers go
    before = len(server.requests)
    rerun = pytester.runpytest_subprocess(*args)
    rerun.assert_outcomes(passed=1)
    assert len(server.requests) - before <= pairs - paid + concurrency
    assert len(server.requests) - before == pairs - rows


def cache_rows(folder: Path) -> int:
    """The verdicts stored in the judge cache's SQLite file(s) under ``folder``."""
    rows = 0
    for path in folder.glob("*.sqlite"):
        with sqlite3.connect(path) as db:
            rows += db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    return rows


# ---------------------------------------------------------------- every response shape


@pytest.mark.parametrize("fault", ["nullmsg", "badusage", "retrysoon"])
def test_odd_response_shapes_never_crash(
    pytester: pytest.Pytester, server: JudgeServer, fault: str
) -> None:
    pairs = fruit(pytester)
    if fault == "retrysoon":
        server.script = ["retrysoon"]  # once, then answers
    else:
        server.fault = fault
    result = pytester.runpytest(*judge_args(server))
    assert_no_crash(result)
    judged = verdicts(pytester)
    assert len(judged) == pairs
    for verdict in judged:
        if verdict["error"] is None:
            assert isinstance(verdict["on_topic"], bool)
        else:
            assert verdict["on_topic"] is None and verdict["error"].strip()
    summary = evaluation(pytester)["judge"]
    assert sum(summary["causes"].values()) == summary["ungraded"]  # every ungraded has a cause
    if fault == "nullmsg":
        assert summary["ungraded"] == pairs
    else:  # usage is not the verdict, and a garbage Retry-After is a backoff
        assert summary["graded"] == pairs


ECHO_KEY = "sk-proj-EchoMe7f3a9c1d5e2b8f4a6c0d9e1f"
AZURE_LIKE_KEY = "0f3c9a8b7d6e5f4a3b2c1d0e9f8a7b6c"  # no sk- prefix for a pattern to catch


@pytest.mark.parametrize("key", [ECHO_KEY, AZURE_LIKE_KEY])
def test_a_server_echoing_the_key_leaks_it_nowhere(
    pytester: pytest.Pytester, server: JudgeServer, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", key)
    server.api_key, server.echo_auth = key, True
    # errors that carry the server's message (with the echoed header) on two documents
    fruit(pytester, TEXT_RETRIEVER.replace("'cherry tart'", "'cherry tart [[400]]'"))
    outputs = {
        "junit.xml": "--junitxml",
        "r.md": "--retrieval-markdown",
        "r.html": "--retrieval-html",
    }
    args = [item for name, option in outputs.items() for item in (option, name)]
    result = pytester.runpytest_subprocess(
        *judge_args(
            server,
            "--retrieval-judge-cache",
            "c",
            "--retrieval-threshold",
            "otr@3=0.99",  # fails, so the worst queries and their reasons are shown
            *args,
        )
    )
    assert_no_crash(result)
    assert server.requests and all(s.authorized for s in server.requests)
    assert any("Bearer ***" in v["reason"] for v in verdicts(pytester))
    secret = key.removeprefix("sk-proj-")
    places = {"stdout": result.stdout.str(), "stderr": result.stderr.str()}
    for name in [*outputs, "r.json"]:
        places[name] = (pytester.path / name).read_text("utf-8")
    for path in (pytester.path / "c").rglob("*"):
        if path.is_file():
            places[str(path)] = path.read_bytes().decode("latin-1")
    assert any(str(p).endswith(".sqlite") for p in places)
    leaked = [name for name, text in places.items() if secret in text]
    assert leaked == []


# ---------------------------------------------------------------- current models


def test_reasoning_model_gpt_5_mini_is_graded(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pairs = fruit(pytester)
    server.reasoning = True
    result = pytester.runpytest(*judge_args(server, "--retrieval-judge-model", "gpt-5-mini"))
    result.assert_outcomes(passed=1)
    assert evaluation(pytester)["judge"]["graded"] == pairs
    assert len(server.requests) == pairs  # no request was rejected first
    for seen in server.requests:
        assert seen.status == 200
        assert "max_completion_tokens" in seen.body and "max_tokens" not in seen.body
        assert "temperature" not in seen.body


def test_unknown_model_on_a_reasoning_endpoint_falls_back_on_the_400(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pairs = fruit(pytester)
    server.reasoning = True
    result = pytester.runpytest(
        *judge_args(
            server,
            "--retrieval-judge-model",
            "acme-reasoner-2",
            "--retrieval-judge-concurrency",
            "2",
        )
    )
    result.assert_outcomes(passed=1)
    assert evaluation(pytester)["judge"]["graded"] == pairs
    rejected = [s for s in server.requests if s.status == 400]
    assert 1 <= len(rejected) <= 2 * 2  # each parameter learnt once (a few in flight)
    # every pair answered once, only the rejected re-sent. (Not "the last half answered":
    # under load a rejected call in flight beside the other slot was answered 9th of 14.)
    assert len(server.requests) == pairs + len(rejected)
    result.stdout.fnmatch_lines(
        ["*the endpoint refused some request parameters; sent without them: temperature*"]
    )


def test_requests_carry_seed_and_max_completion_tokens_and_ask_the_reason_first(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pairs = fruit(pytester)
    result = pytester.runpytest(*judge_args(server))
    result.assert_outcomes(passed=1)
    assert len(server.requests) == pairs
    for seen in server.requests:
        assert "max_completion_tokens" in seen.body and "max_tokens" not in seen.body
        assert "seed" in seen.body
        schema = seen.body["response_format"]["json_schema"]["schema"]
        assert next(iter(schema["properties"])) == "reason"  # the model reasons first


def test_samples_report_the_agreement_per_pair(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pairs = fruit(pytester)
    result = pytester.runpytest(*judge_args(server, "--retrieval-judge-samples", "3"))
    result.assert_outcomes(passed=1)
    assert len(server.requests) == 3 * pairs
    assert all(v["agreement"] == 1.0 for v in verdicts(pytester))  # the server is deterministic
    result.stdout.fnmatch_lines(
        [
            f"*asked 3 times a hit: every answer agreed on {pairs} of {pairs} hits (100.0%); "
            "on average 100.0% of a hit's answers matched its majority verdict"
        ]
    )


def test_a_repeated_identical_400_stops_calls_with_the_server_message(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pairs = many_pairs(pytester)
    server.fault = "400"
    result = pytester.runpytest(*judge_args(server, "--retrieval-judge-concurrency", "2"))
    assert_no_crash(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = output(result)
    assert f"stopped calling the judge at {server.base_url}: the same HTTP 400 " in text
    assert "This model is not available for chat completions on this project." in text
    assert len(server.requests) < pairs / 10


# ---------------------------------------------------------------- graded relevance


def test_graded_precision_and_mrr_do_not_count_grade_1(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    fruit(pytester)
    server.override = {"grade": 1}  # "would not satisfy the searcher", on every hit
    result = pytester.runpytest(*judge_args(server, "--retrieval-judge-scale", "0-3"))
    result.assert_outcomes(passed=1)
    metrics = evaluation(pytester)["metrics"]
    assert metrics["otr@3"] == 0.0
    assert metrics["llm_precision@3"] == 0.0
    assert metrics["llm_mrr@3"] == 0.0
    lenient = pytester.runpytest(
        *judge_args(
            server, "--retrieval-judge-scale", "0-3", "--retrieval-judge-relevance-level", "1"
        )
    )
    lenient.assert_outcomes(passed=1)
    metrics = evaluation(pytester)["metrics"]
    assert metrics["otr@3"] == metrics["llm_precision@3"] == metrics["llm_mrr@3"] == 1.0


@pytest.mark.parametrize(
    ("override", "scale"),
    [
        ({"score": 1.7}, "binary"),
        ({"score": float("nan")}, "binary"),
        ({"on_topic": "yes"}, "binary"),
        ({"score": "0.5"}, "binary"),
        ({"grade": 7}, "0-3"),
    ],
    ids=["score-1.7", "score-NaN", "on_topic-yes", "score-string", "grade-7"],
)
def test_out_of_range_or_wrong_type_answers_are_ungraded(
    pytester: pytest.Pytester, server: JudgeServer, override: dict[str, Any], scale: str
) -> None:
    pairs = fruit(pytester)
    server.override = override
    result = pytester.runpytest(*judge_args(server, "--retrieval-judge-scale", scale))
    assert_no_crash(result)
    judged = verdicts(pytester)
    assert len(judged) == pairs
    for verdict in judged:
        assert verdict["on_topic"] is None
        assert verdict["error"].startswith("verdict does not match the schema")
    result.assert_outcomes(failed=1)  # 0% judge coverage


# ---------------------------------------------------------------- cache and configuration


def test_a_corrupt_cache_file_is_a_warning_and_the_run_goes_on(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pairs = fruit(pytester)
    args = judge_args(server, "--retrieval-judge-cache", "c")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
    files = sorted((pytester.path / "c").glob("*.sqlite"))
    assert files
    for path in (pytester.path / "c").iterdir():
        if path.name.endswith(("-wal", "-shm")):
            path.unlink()
    broken = files[0]
    broken.write_bytes(b"this is not a database, it was overwritten\n" * 100)
    result = pytester.runpytest_subprocess(*args)
    assert_no_crash(result)
    result.assert_outcomes(passed=1)
    text = output(result)
    assert str(broken) in text or broken.name in text
    assert f"{broken.name}.corrupt" in text
    assert broken.with_name(broken.name + ".corrupt").exists()
    assert evaluation(pytester)["judge"]["graded"] == pairs


def test_azure_without_openai_api_version_is_a_usage_error(
    pytester: pytest.Pytester, server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fruit(pytester)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-key-0123456789")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", f"http://127.0.0.1:{server.port}")
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--retrieval-judge", "--retrieval-judge-no-cache"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "OPENAI_API_VERSION" in result.stderr.str()
    assert "Traceback" not in output(result)
    assert server.requests == []


def test_pairs_shared_by_two_golden_sets_under_xdist_are_judged_once(
    pytester: pytest.Pytester, server: JudgeServer
) -> None:
    pytest.importorskip("xdist")
    pairs = fruit(pytester)
    write_golden(pytester, {**GOLDEN, "name": "fruit2"}, name="golden2.json")
    server.latency = 0.1  # both workers judge at the same time
    result = pytester.runpytest_subprocess(
        *judge_args(
            server,
            "--retrieval-golden",
            "golden2.json",
            "--retrieval-judge-cache",
            "shared",
            "--retrieval-judge-concurrency",
            "2",
            "-n",
            "2",
        )
    )
    result.assert_outcomes(passed=2)
    asked = [(s.query, s.document) for s in server.requests]
    assert len(asked) == len(set(asked)) == pairs


def test_the_bill_says_how_many_more_causes_it_does_not_list() -> None:
    """Three causes are listed, the commonest first; the rest are counted, not dropped (the
    JSON report's ``judge.causes`` has them all)."""
    from types import SimpleNamespace

    from pytest_retrieval.render.rows import judge_bill

    causes = {"HTTP 500": 40, "timeout": 20, "no text to judge": 10, "HTTP 429": 7, "x": 3}
    judge = {"model": "m", "graded": 20, "pairs": 100, "coverage": 0.2, "causes": causes}
    lines = judge_bill(SimpleNamespace(judge=judge))  # type: ignore[arg-type]
    assert [line for line in lines if line.startswith("ungraded")] == [
        "ungraded 40x: HTTP 500",
        "ungraded 20x: timeout",
        "ungraded 10x: no text to judge",
        "ungraded 10x more, for 2 other causes (the JSON report's judge.causes lists them)",
    ]
