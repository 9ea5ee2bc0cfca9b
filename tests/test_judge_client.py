"""The judge client's parts one by one: reading answers, request shapes, retry waits, the
cache's claims and repair, samples, deadlines (the end-to-end faults: test_judge_faults)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import PROC_FD, held_open, opened_since
from judge_kit import ON, QUERY, make, pairs, record_sleeps, served
from judge_server import JudgeServer

from pytest_retrieval._internal.cache import CacheWarning, JsonCache
from pytest_retrieval.judge import Judge, JudgeConfig, JudgeConfigError, JudgePair
from pytest_retrieval.judge.answers import (
    SPLIT,
    Observation,
    Verdict,
    apply_policy,
    combine,
    read_completion,
    read_usage,
)
from pytest_retrieval.judge.calibration import calibrate
from pytest_retrieval.judge.calls import RequestShape, classify, retry_after, scrub

KEY = "sk-test-CLIENT-0123456789abcdef"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[JudgeServer]:
    with served(monkeypatch, KEY) as running:
        yield running


def completion(content: Any, **extra: Any) -> dict[str, Any]:
    message = None if content is None else {"role": "assistant", "content": content}
    return {
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        **extra,
    }


# ---------------------------------------------------------------------------- reading


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        ({"reason": "r", "on_topic": True, "score": 1.7}, "score: Input should be less than"),
        ({"reason": "r", "on_topic": True, "score": float("nan")}, "score: Input should be"),
        ({"reason": "r", "on_topic": "yes", "score": 0.9}, "on_topic: Input should be a valid"),
        ({"reason": "r", "on_topic": True, "score": "0.5"}, "score: Input should be a valid"),
        ({"reason": "r", "on_topic": True}, "score: Field required"),
        (["not", "an", "object"], "answer: not a JSON object"),
    ],
)
def test_out_of_range_and_wrong_types_are_ungraded_never_coerced(answer: Any, cause: str) -> None:
    outcome = read_completion(completion(json.dumps(answer)), graded=False)
    assert isinstance(outcome, str)
    assert outcome.startswith("verdict does not match the schema") and cause in outcome


def test_grades_out_of_range_are_ungraded_like_scores() -> None:
    for grade in (7, -1, 2.0, "2"):
        answer = json.dumps({"reason": "r", "grade": grade, "confidence": 0.5})
        outcome = read_completion(completion(answer), graded=True)
        assert isinstance(outcome, str) and outcome.startswith("verdict does not match")


def test_extra_keys_are_ignored_and_confidence_is_optional() -> None:
    answer = {"reason": "ok", "on_topic": True, "score": 0.8, "explanation": "more"}
    outcome = read_completion(completion(json.dumps(answer)), graded=False)
    assert outcome == Observation(reason="ok", on_topic=True, score=0.8, model="m")
    graded = read_completion(completion('{"reason": "x", "grade": 2}'), graded=True)
    assert isinstance(graded, Observation) and graded.confidence is None


@pytest.mark.parametrize(
    ("response", "cause"),
    [
        (completion(None), "malformed response: the choice has no message"),
        ({"choices": []}, "malformed response: no choices"),
        ({"choices": "nope"}, "malformed response: no choices"),
        (completion(""), "malformed response: the message has no text"),
        (completion("{not json"), "verdict does not match the schema (answer: not JSON)"),
    ],
)
def test_odd_response_shapes_are_a_cause_not_a_crash(response: Any, cause: str) -> None:
    assert read_completion(response, graded=False) == cause


def test_usage_that_is_not_numbers_is_unreadable_not_an_error() -> None:
    assert read_usage({"usage": {"prompt_tokens": 10, "completion_tokens": 3}}) == (10, 3)
    assert read_usage({"usage": {"prompt_tokens": "many", "completion_tokens": 3}}) is None
    assert read_usage({"usage": {"prompt_tokens": True, "completion_tokens": 3}}) is None
    assert read_usage({}) is None


def test_policy_is_applied_on_read() -> None:
    seen = Observation(reason="r", on_topic=True, score=0.6)
    assert apply_policy(seen, graded=False, min_score=0.5, relevance_level=2).on_topic
    assert not apply_policy(seen, graded=False, min_score=0.7, relevance_level=2).on_topic
    grade = Observation(reason="r", grade=1, confidence=0.9)
    assert not apply_policy(grade, graded=True, min_score=0.5, relevance_level=2).on_topic
    assert apply_policy(grade, graded=True, min_score=0.5, relevance_level=1).on_topic


# ---------------------------------------------------------------------------- requests


def test_reasoning_models_get_no_sampling_parameters() -> None:
    for model in ("gpt-5-mini", "gpt-5-nano", "o3-mini", "o4-mini", "azure/o1"):
        params = RequestShape.for_model(model).params(0)
        assert "temperature" not in params and "max_tokens" not in params, model
        assert params["max_completion_tokens"] >= 1000  # thinking is paid from it
    params = RequestShape.for_model("gpt-4.1-mini").params(2)
    assert params == {"max_completion_tokens": 300, "temperature": 0, "seed": 2}


def test_request_shape_learns_from_the_specific_400() -> None:
    shape = RequestShape.for_model("my-deployment")
    message = (
        "Unsupported value: 'temperature' does not support 0 with this model. "
        "Only the default (1) value is supported."
    )
    assert shape.adapt(400, message, "temperature") and "temperature" not in shape.params(0)
    old_azure = "Unrecognized request argument supplied: max_completion_tokens"
    assert shape.adapt(400, old_azure, None) and "max_tokens" in shape.params(0)
    assert not shape.adapt(400, old_azure, None)  # no third spelling: the pair's error
    assert not shape.adapt(400, "Invalid 'messages[1].content': string too long", None)
    assert not shape.adapt(500, message, "temperature")


def test_retry_after_garbage_is_ignored() -> None:
    class Response:
        def __init__(self, headers: dict[str, str]) -> None:
            self.headers = headers

    class Exc:
        def __init__(self, headers: dict[str, str]) -> None:
            self.response = Response(headers)

    assert retry_after(Exc({"retry-after": "soon"})) is None
    assert retry_after(Exc({"retry-after": "nan"})) is None
    assert retry_after(Exc({"retry-after": "2"})) == 2.0
    assert retry_after(Exc({"retry-after-ms": "250"})) == 0.25
    assert retry_after(Exc({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0


def test_quota_is_fatal_and_keeps_the_servers_words(monkeypatch: pytest.MonkeyPatch) -> None:
    import openai

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    body = {
        "message": f"You exceeded your current quota (key {KEY}, Bearer {KEY}).",
        "type": "insufficient_quota",
        "code": "insufficient_quota",
    }
    response = httpx.Response(429, request=request, json={"error": body})
    error = openai.RateLimitError("quota", response=response, body=body)
    failure = classify(error, "gpt-4.1-mini", 60, 0)
    assert failure.action == "fatal" and "insufficient_quota" in failure.cause
    assert "You exceeded your current quota" in failure.cause and KEY not in failure.cause


def test_scrub_masks_keys_and_bearer_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "plain-secret-value")
    text = scrub("a plain-secret-value b Bearer abc.def sk-live-123456789 c")
    assert text == "a *** b Bearer *** sk-*** c"


def test_azure_without_api_version_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-key")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example.openai.azure.com")
    with pytest.raises(JudgeConfigError, match="OPENAI_API_VERSION"):
        Judge(JudgeConfig())
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-10-21")
    assert Judge(JudgeConfig()).endpoint == "https://example.openai.azure.com"


# ---------------------------------------------------------------------------- samples


def test_samples_ask_n_times_and_report_agreement(server: JudgeServer, tmp_path: Path) -> None:
    judge = make(server, tmp_path, samples=3)
    verdicts = judge.judge(pairs(4))
    assert len(server.requests) == 12
    assert sorted({r.body.get("seed") for r in server.requests}) == [0, 1, 2]
    assert all(v.on_topic and v.agreement == 1.0 for v in verdicts)
    summary = judge.summary()
    assert (summary["samples"], summary["agreement"], summary["unanimous"]) == (3, 1.0, 4)
    assert summary["sampled"] == 4
    make(server, tmp_path, samples=1).judge(pairs(4))  # sample 0 is the one-sample answer
    assert len(server.requests) == 12


def test_combining_samples_takes_the_majority_and_measures_agreement() -> None:
    yes = Verdict(on_topic=True, score=0.9, reason="yes")
    no = Verdict(on_topic=False, score=0.1, reason="no")
    broken = Verdict(error="the judge refused to grade")
    two_to_one = combine([yes, no, yes], graded=False)
    assert two_to_one.on_topic and two_to_one.agreement == pytest.approx(2 / 3)
    assert two_to_one.score == pytest.approx((0.9 + 0.1 + 0.9) / 3)
    tie = combine([yes, no, broken], graded=False)
    assert tie.error == SPLIT and tie.on_topic is None
    assert combine([broken, broken], graded=False).error == broken.error
    alone = combine([yes, broken], graded=False)  # one answer: nothing to agree with
    assert alone.on_topic and alone.agreement is None
    grades = [Verdict(on_topic=g >= 2, grade=g, score=g / 3) for g in (3, 1, 2, 2)]
    median = combine(grades, graded=True)
    assert (median.grade, median.agreement) == (2, 0.5)


def test_calibration_reports_the_judges_agreement_with_itself(
    server: JudgeServer, tmp_path: Path
) -> None:
    labels = tmp_path / "labels.json"
    labels.write_text(
        json.dumps([{"query": QUERY, "text": ON, "on_topic": True}] * 2), encoding="utf-8"
    )
    result = calibrate(make(server, samples=3), labels)
    assert (result.samples, result.self_agreement, result.unanimous) == (3, 1.0, 2)
    assert len(server.requests) == 3  # the same pair twice is asked once per sample
    assert (
        "asked 3 times, it gave the same answer every time on 2 of 2 pairs, and on average "
        "100.0% of its answers matched its majority verdict" in result.line("labels.json")
    )


# ---------------------------------------------------------------------------- the cache


@pytest.mark.timeout(120)  # the held call is never answered: only the deadline ends it
def test_answers_are_committed_as_they_arrive_and_the_deadline_ends_the_phase(
    server: JudgeServer, tmp_path: Path
) -> None:
    server.hold_after = 5
    judge = make(server, tmp_path, concurrency=1, deadline=5, timeout=3600)
    verdicts = judge.judge(pairs(20))
    assert sum(v.error is None for v in verdicts) == 5
    assert {v.error for v in verdicts[5:]} == {
        "judge deadline of 5 s reached (--retrieval-judge-deadline)"
    }
    assert judge.summary()["stopped"] == verdicts[-1].error
    assert len(JsonCache(tmp_path / "cache", "judge")) == 5


def test_min_score_change_with_a_warm_cache_equals_a_cold_run(
    server: JudgeServer, tmp_path: Path
) -> None:
    partly = [JudgePair(QUERY, None, "d", "apple pie")]  # 2 of 3 terms: score 0.667
    assert make(server, tmp_path, min_score=0.9).judge(partly)[0].on_topic is False
    warm = make(server, tmp_path, min_score=0.5).judge(partly)[0]
    cold = make(server, min_score=0.5).judge(partly)[0]
    assert (warm.cached, warm.on_topic) == (True, cold.on_topic) == (True, True)


def test_a_corrupt_cache_file_is_set_aside_with_a_warning(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "judge.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.warns(CacheWarning, match=r"judge\.sqlite.*moved it aside to .*\.corrupt"):
        cache = JsonCache(folder, "judge")
    cache.put("k", {"v": 1})
    assert cache.get("k") == {"v": 1}
    assert (folder / "judge.sqlite.corrupt").read_bytes().startswith(b"this is not")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("value", ["not json", '{"on_topic": "yes"}'], ids=["text", "schema"])
def test_an_unreadable_cache_row_is_asked_again_at_once(
    server: JudgeServer, tmp_path: Path, value: str
) -> None:
    """A row that does not read (hand-edited, or written by another version) is a miss,
    and the key is asked again -- not waited on till the deadline as if another process
    were answering it."""
    make(server, tmp_path).judge(pairs(3))
    db = sqlite3.connect(tmp_path / "cache" / "judge.sqlite")
    with db:
        db.execute("UPDATE entries SET value = ? WHERE rowid = 1", (value,))
    db.close()
    # a key waited on as if another process answered it would wait out the hour's deadline
    verdicts = make(server, tmp_path, deadline=3600).judge(pairs(3))
    assert [v.error for v in verdicts] == [None, None, None]
    assert sorted(v.cached for v in verdicts) == [False, True, True]
    again = make(server, tmp_path).judge(pairs(3))  # the row was replaced by the answer
    assert all(v.cached for v in again)


def test_a_cache_that_breaks_mid_run_turns_itself_off(tmp_path: Path) -> None:
    cache = JsonCache(tmp_path, "judge")
    cache.put("k", 1)
    cache._db().execute("DROP TABLE entries")  # as if another tool broke the file
    with pytest.warns(CacheWarning, match="cache off for this run"):
        assert cache.get("k") is None
    cache.put("k", 2)  # no error: the run goes on without a cache
    assert cache.broken is not None


def test_claims_let_one_process_ask_and_expire_with_their_owner(tmp_path: Path) -> None:
    first, second = JsonCache(tmp_path, "judge"), JsonCache(tmp_path, "judge")
    assert first.claim(["a", "b"], stale_after=60) == {"a", "b"}
    assert second.claim(["a", "c"], stale_after=60) == {"c"}
    first.put("a", {"answer": 1})  # answered: read it, nobody asks again
    assert second.claim(["a"], stale_after=60) == set()
    assert first.claim(["d"], stale_after=60) == {"d"}
    first.release(["d"])  # given up unanswered: free for the next one
    assert second.claim(["d"], stale_after=60) == {"d"}
    assert second.claim(["b"], stale_after=0) == {"b"}  # held too long: stale
    db0 = sqlite3.connect(tmp_path / "judge.sqlite")
    db0.execute("INSERT INTO claims VALUES ('e', 'ci-runner-7:4242:abc', ?)", (time.time(),))
    db0.commit()
    assert second.claim(["e"], stale_after=60) == {"e"}  # another host: a restored cache
    reused = f"{os.uname().nodename}:1:not-its-start-time:x"  # pid 1 lives, another process
    db0.execute("INSERT INTO claims VALUES ('g', ?, ?)", (reused, time.time()))
    db0.commit()
    assert second.claim(["g"], stale_after=60) == {"g"}
    db = sqlite3.connect(tmp_path / "judge.sqlite")
    dead = f"{os.uname().nodename}:999999999:x"
    db.execute("UPDATE claims SET owner = ? WHERE key = 'c'", (dead,))
    db.commit()
    assert first.claim(["c"], stale_after=60) == {"c"}  # its owner's process is gone


def test_a_400_about_max_tokens_naming_the_other_parameter_changes_nothing() -> None:
    shape = RequestShape.for_model("gpt-5-mini")
    message = (
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead."
    )
    assert not shape.adapt(400, message, "max_tokens")  # we never sent it: not ours
    assert shape.params(0)["max_completion_tokens"] == 4000 and not shape.learned


# ---------------------------------------------------------------------------- review fixes


@pytest.mark.parametrize(
    ("fault", "graded"), [("fenced", True), ("deep", False), ("hugeusage", True)]
)
def test_answers_of_any_size_or_wrapping_never_crash(
    server: JudgeServer, fault: str, graded: bool
) -> None:
    server.fault = fault
    judge = make(server)
    verdicts = judge.judge(pairs(3))
    assert all((v.error is None) is graded for v in verdicts), verdicts[0].error
    if not graded:  # a counted cause, not a task that died
        assert {v.error for v in verdicts} == {
            "verdict does not match the schema (answer: not JSON)"
        }
    summary = judge.summary()  # a count of 1e30 tokens would overflow the cost
    assert summary["graded"] == (3 if graded else 0)
    if fault == "hugeusage":
        assert summary["usage_unreadable"] == 3 and summary["prompt_tokens"] == 0


def test_a_content_filter_400_is_the_pairs_and_never_stops_the_run(server: JudgeServer) -> None:
    filtered = [JudgePair(QUERY, None, f"f{i}", f"{ON} {i} [[filtered]]") for i in range(4)]
    judge = make(server, concurrency=1)
    verdicts = judge.judge(filtered + pairs(3))
    assert judge.stopped is None
    assert all("content management policy" in (v.error or "") for v in verdicts[:4])
    assert all(v.error is None for v in verdicts[4:])


def test_408_is_retried_like_a_5xx(server: JudgeServer) -> None:
    server.script = ["408"]
    judge = make(server, concurrency=1)
    assert judge.judge(pairs(1))[0].error is None and len(server.requests) == 2


def test_a_retry_after_beyond_the_max_wait_stops_every_call(server: JudgeServer) -> None:
    server.fault = "429:3600"
    judge = make(server, concurrency=2)
    verdicts = judge.judge(pairs(40))
    assert len(server.requests) <= 2  # not one request a pair
    assert {v.error for v in verdicts} == {judge.stopped}
    assert "Retry-After 3600 s exceeds --retrieval-judge-max-wait 300" in str(judge.stopped)


def test_a_retry_after_of_zero_still_backs_off(
    server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept = record_sleeps(monkeypatch)
    server.script = ["429:0", "429:0"]
    assert make(server, concurrency=1).judge(pairs(1))[0].error is None
    assert len(slept) == 2 and slept[0] >= 0.25 and slept[1] >= 0.5


class _LaterClock:
    """The judge client's ``time`` module, its monotonic clock moved on by ``offset``."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


def test_the_deadline_counts_judging_only(
    server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    later = _LaterClock()
    monkeypatch.setattr("pytest_retrieval.judge.client.time", later)
    judge = make(server, deadline=60)
    assert all(v.error is None for v in judge.judge(pairs(3)))
    later.offset += 3600  # an hour retrieving the next golden set: not the judge's time
    assert all(v.error is None for v in judge.judge(pairs(6)[3:]))
    assert judge.stopped is None


@pytest.mark.timeout(120)  # a run that waited for the hung call would take an hour
def test_a_breaker_cancels_the_calls_still_in_flight(server: JudgeServer) -> None:
    hung = JudgePair(QUERY, None, "hung", f"{ON} [[never]]")  # never answered
    failing = [JudgePair(f"{QUERY} {i}", None, "failing", f"{ON} [[500]]") for i in range(2)]
    judge = make(server, concurrency=2, timeout=3600, max_failures=2, deadline=None)
    verdicts = judge.judge([hung, *failing, *pairs(5)])
    assert "2 consecutive failures" in str(judge.stopped)
    assert verdicts[0].error == judge.stopped


def test_one_query_the_endpoint_always_fails_does_not_trip_the_breaker(
    server: JudgeServer,
) -> None:
    """Its hits are asked among other queries' (not all at once, filling every slot), and
    the breaker wants failures of several queries in a row: a healthy endpoint with one bad
    query grades every other hit, run after run, and stays open for the next evaluation."""
    hits = [
        JudgePair(f"{QUERY} {q}", None, f"d{i}", f"{ON} {i}" + (" [[500]]" if q == 3 else ""))
        for q in range(30)
        for i in range(10)
    ]
    judge = make(server, max_failures=8)  # 16 calls at a time
    verdicts = judge.judge(hits)
    assert judge.stopped is None
    assert sum(v.error is None for v in verdicts) == 290
    assert all("gave up after" in str(v.error) for v in verdicts[30:40])


def test_credentials_in_the_base_url_are_never_shown(
    server: JudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    monkeypatch.delenv("OPENAI_API_KEY")
    server.api_key, server.echo_auth = None, True  # httpx sends them as basic auth: echoed
    url = server.base_url.replace("http://", "http://user:pw-SECRET-77@")
    judge = Judge(JudgeConfig(base_url=url, use_cache=False, concurrency=2))
    verdicts = judge.judge([*pairs(4), JudgePair(QUERY, None, "x", f"{ON} [[500]]")])
    basic = base64.b64encode(b"user:pw-SECRET-77").decode()
    shown = json.dumps([v.to_dict() for v in verdicts]) + json.dumps(judge.summary())
    assert "Basic ***" in shown and "pw-SECRET-77" not in shown and basic not in shown
    assert judge.endpoint == server.base_url


def test_a_reasoning_model_behind_another_name_gets_the_thinking_budget() -> None:
    shape = RequestShape.for_model("my-azure-deployment")
    refused = (
        "Unsupported value: 'temperature' does not support 0 with this model. "
        "Only the default (1) value is supported."
    )
    assert shape.adapt(400, refused, "temperature")
    assert shape.params(0)["max_completion_tokens"] == 4000


def test_the_cache_record_keeps_usage_and_scrubs_the_model(
    server: JudgeServer, tmp_path: Path
) -> None:
    server.echo_auth = True
    make(server, tmp_path).judge(pairs(1))
    record = next(
        iter(JsonCache(tmp_path / "cache", "judge")._db().execute("SELECT value FROM entries"))
    )[0]
    assert json.loads(record)["usage"] == [100, 20]
    assert KEY not in record and "Bearer ***" in record


@pytest.mark.timeout(120)
def test_a_429_that_never_clears_trips_the_breaker(server: JudgeServer) -> None:
    server.fault = "429:0"
    judge = make(server, concurrency=2, max_failures=3)
    verdicts = judge.judge([JudgePair(f"{QUERY} {i}", None, "d", ON) for i in range(40)])
    assert len(server.requests) < 20  # 40 pairs, each retried: the calls stopped early
    # 3 or more: the breaker also waits for failures from BREAKER_GROUPS queries, and with
    # retries and two calls in flight, more can come before the third query's first
    counted = re.search(r"(\d+) consecutive failures \(last: HTTP 429", str(judge.stopped))
    assert counted is not None and int(counted[1]) >= 3, judge.stopped
    assert {v.error for v in verdicts} == {judge.stopped}


@pytest.mark.skipif(not os.path.isdir(PROC_FD), reason="lists /proc/self/fd")
def test_cache_close_closes_every_threads_connection(tmp_path: Path) -> None:
    """Each thread has its own connection; close() (from the owner's thread) closes them all,
    and the cache still works after it."""
    before = held_open()
    cache = JsonCache(tmp_path, "judge")
    threads = [threading.Thread(target=cache.put, args=(f"key{i}", {"i": i})) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert held_open() != before
    cache.close()
    assert opened_since(before) == []
    assert cache.get("key2") == {"i": 2}  # a fresh connection
    cache.close()
    assert opened_since(before) == []
