"""``pytest-retrieval review``: the page in a real headless Chromium (the keyboard flow, a
reload resuming at the first undecided proposal, document text shown as text), the API's
refusals over plain HTTP (each a 4xx with a message, the file unchanged), writes from many
threads and a command line at once, and the command's start and Ctrl-C."""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers import BROWSER_ARGS, CHROMIUM

from pytest_retrieval.builder.review_file import (
    Decision,
    Proposal,
    read_review,
    record_decision,
    write_review,
)
from pytest_retrieval.builder.review_server import ReviewHandler, ReviewServer, loopback_host

#: end-to-end runs (pytest processes, xdist, a local judge server): out of the fast
#: subset, `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

HOSTILE = "<img src=x onerror=\"document.title='pwned'\"></script><b>bold</b> & more"
HEADER = {
    "golden": "golden.json",
    "golden_fingerprint": "abc123",
    "k": 10,
    "reports": ["run-a.json"],
    "judge": {"model": "test-judge", "prompt_version": "1", "scale": "0-3"},
    "created": "2026-01-01T00:00:00+00:00",
}


def proposal(
    query_id: str, doc_id: str, *, kind: str = "add", grade: int = 2, text: str = "", **extra: Any
) -> Proposal:
    fields: dict[str, Any] = {
        "query_id": query_id,
        "query": f"query {query_id}",
        "doc_id": doc_id,
        "text": text or f"the text of {doc_id}",
        "kind": kind,
        "current": 2 if kind == "remove" else None,
        "grade": grade,
        "reason": f"reason for {doc_id}",
        "confidence": 0.9,
        "rank": 3,
        "sources": ("run-a.json:bm25",),
        "decision": None,
    }
    fields.update(extra)
    return Proposal(**fields)


PROPOSALS = (
    proposal("q1", "d1", grade=2),
    proposal("q1", "d2", grade=0, text=HOSTILE),
    proposal("q2", "d3", kind="remove", grade=0, reason="about something else"),
    proposal("q2", "d4", grade=3, confidence=None),
    proposal("q3", "d5", grade=1),
)


@pytest.fixture
def review_path(tmp_path: Path) -> Path:
    path = tmp_path / "review.jsonl"
    write_review(path, HEADER, PROPOSALS)
    return path


@pytest.fixture
def server(review_path: Path) -> Iterator[ReviewServer]:
    serving = ReviewServer(review_path, "127.0.0.1", 0, by="tester")
    thread = threading.Thread(target=serving.serve_forever, daemon=True)
    thread.start()
    try:
        yield serving
    finally:
        serving.shutdown()
        serving.server_close()
        thread.join(5)


def decisions(path: Path) -> dict[tuple[str, str, str], tuple[str, int | None, str] | None]:
    return {
        p.key: None if p.decision is None else (p.decision.action, p.decision.grade, p.decision.by)
        for p in read_review(path).proposals
    }


# --------------------------------------------------------------------------------------------
# plain HTTP


def call(
    server: ReviewServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = "",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request; ``token=""`` sends the server's token, None sends none."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(host), int(port), timeout=10)
    sent = {"Host": f"127.0.0.1:{port}"}
    if token is not None:
        sent["X-Review-Token"] = token or server.token
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    sent.update(headers or {})
    try:
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def error_of(body: bytes) -> str:
    message: str = json.loads(body)["error"]
    return message


def test_the_page_needs_the_token_and_sends_a_strict_csp(server: ReviewServer) -> None:
    status, _, body = call(server, "GET", "/", token=None)
    assert status == 403 and "token" in error_of(body)
    status, _, body = call(server, "GET", "/?token=wrong", token=None)
    assert status == 403
    status, headers, body = call(server, "GET", f"/?token={server.token}", token=None)
    assert status == 200
    assert headers["Content-Security-Policy"].startswith("default-src 'self';")
    page = body.decode()
    assert f'content="{server.token}"' in page and "__REVIEW_TOKEN__" not in page
    assert "http" not in page.replace("http-equiv", "")  # nothing from the network
    for asset in ("/app.js", "/style.css"):
        status, headers, body = call(server, "GET", asset, token=None)
        assert (
            status == 200 and b"http" not in body and headers["X-Content-Type-Options"] == "nosniff"
        )


def test_the_api_lists_proposals_progress_and_where_to_resume(
    server: ReviewServer, review_path: Path
) -> None:
    record_decision(review_path, ("q1", "d1", "add"), Decision("accept", None, "cli", "t"))
    record_decision(review_path, ("q1", "d2", "add"), Decision("skip", None, "cli", "t"))
    status, _, body = call(server, "GET", "/api/review")
    assert status == 200
    data = json.loads(body)
    assert data["progress"] == {"total": 5, "decided": 1, "skipped": 1, "undecided": 3}
    assert data["resume"] == 2  # the first with no decision; the skipped one comes later
    assert data["header"]["judge"]["model"] == "test-judge"
    first = data["proposals"][0]
    assert first["key"] == ["q1", "d1", "add"] and first["final_grade"] == 2
    assert first["decision"]["by"] == "cli"
    assert data["proposals"][1]["text"] == HOSTILE


def test_any_text_reaches_the_page(server: ReviewServer, review_path: Path) -> None:
    """A lone surrogate (valid in a JSON string escape) and a line separator go through."""
    odd = "half \ud800 of a pair\u2028next line é"
    write_review(review_path, HEADER, (proposal("q1", "d1", text=odd),))
    status, _, body = call(server, "GET", "/api/review")
    assert status == 200 and json.loads(body)["proposals"][0]["text"] == odd


@pytest.mark.parametrize(
    ("request_body", "status", "message"),
    [
        ({"key": ["q9", "d1", "add"], "action": "accept"}, 409, "no proposal ['q9', 'd1', 'add']"),
        ({"key": ["q1", "d1", "remove"], "action": "accept"}, 409, "reload"),
        ({"key": ["q1", "d1"], "action": "accept"}, 400, '"key" must be [query_id, doc_id, kind]'),
        ({"key": "q1", "action": "accept"}, 400, '"key" must be'),
        ({"key": ["q1", "d1", "add"], "action": "grade", "grade": 5}, 400, "grade 0-3"),
        ({"key": ["q1", "d1", "add"], "action": "grade", "grade": "2"}, 400, "grade 0-3"),
        ({"key": ["q1", "d1", "add"], "action": "grade", "grade": True}, 400, "grade 0-3"),
        ({"key": ["q1", "d1", "add"], "action": "grade"}, 400, "grade 0-3"),
        ({"key": ["q1", "d1", "add"], "action": "accept", "grade": 1}, 400, "takes no grade"),
        ({"key": ["q1", "d1", "add"], "action": "undo", "grade": 1}, 400, "takes no grade"),
        ({"key": ["q1", "d1", "add"], "action": "delete"}, 400, "skip, or 'undo' to clear"),
        (["q1", "d1", "add"], 400, "a JSON object"),
        (b"{not json", 400, "not JSON"),
        (b'{"key": ["q1", "d1", "add"], "action": "skip", "action": "accept"}', 400, "twice"),
        (b"[" * 5_000, 400, "nested deeper"),
    ],
)
def test_bad_decisions_are_refused_and_the_file_is_unchanged(
    server: ReviewServer, review_path: Path, request_body: Any, status: int, message: str
) -> None:
    before = review_path.read_bytes()
    got, _, body = call(server, "POST", "/api/decision", request_body)
    assert (got, message in error_of(body)) == (status, True), error_of(body)
    assert review_path.read_bytes() == before


GOOD = {"key": ["q1", "d1", "add"], "action": "accept"}


@pytest.mark.parametrize(
    ("method", "path", "options", "status", "message"),
    [
        (
            "GET",
            "/api/review",
            {"headers": {"Host": "evil.example:80"}},
            403,
            "Host 'evil.example:80'",
        ),
        ("POST", "/api/decision", {"headers": {"Host": "evil.example"}}, 403, "not this server's"),
        ("GET", "/api/review", {"token": None}, 403, "X-Review-Token"),
        ("POST", "/api/decision", {"token": None}, 403, "X-Review-Token"),
        ("POST", "/api/decision", {"token": "guess"}, 403, "X-Review-Token"),
        ("POST", "/api/decision", {"token": "gu\xe9ss"}, 403, "X-Review-Token"),
        ("GET", "/?token=%C3%A9", {"token": None}, 403, "token in the URL"),
        ("POST", "/api/decision", {"headers": {"Origin": "http://evil.example"}}, 403, "Origin"),
        ("POST", "/api/decision", {"headers": {"Content-Type": "text/plain"}}, 415, "json"),
        ("POST", "/api/other", {}, 404, "no such endpoint"),
        ("POST", "/api/decision", {"headers": {"Content-Length": "\xb2"}}, 411, "Content-Length"),
        ("GET", "/etc/passwd", {}, 404, "no such page"),
    ],
)
def test_requests_from_elsewhere_are_refused(
    server: ReviewServer,
    review_path: Path,
    method: str,
    path: str,
    options: dict[str, Any],
    status: int,
    message: str,
) -> None:
    before = review_path.read_bytes()
    got, _, body = call(server, method, path, GOOD if method == "POST" else None, **options)
    assert got == status and message in error_of(body), error_of(body)
    assert review_path.read_bytes() == before


def test_a_body_too_large_or_without_length_is_refused(server: ReviewServer) -> None:
    got, _, body = call(server, "POST", "/api/decision", b"x" * 70_000)
    assert got == 413 and "at most" in error_of(body)
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(host), int(port), timeout=10)
    connection.putrequest("POST", "/api/decision", skip_host=True)
    for name, value in (
        ("Host", f"127.0.0.1:{port}"),
        ("X-Review-Token", server.token),
        ("Content-Type", "application/json"),
    ):
        connection.putheader(name, value)
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 411 and "Content-Length" in error_of(response.read())
    connection.close()


def test_the_page_opened_as_localhost_may_write(server: ReviewServer, review_path: Path) -> None:
    port = server.server_address[1]
    local = {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}
    got, _, body = call(server, "POST", "/api/decision", GOOD, headers=local)
    assert got == 200, body
    assert decisions(review_path)[("q1", "d1", "add")] == ("accept", None, "tester")


def test_a_decision_is_written_and_undone(server: ReviewServer, review_path: Path) -> None:
    got, _, body = call(
        server,
        "POST",
        "/api/decision",
        {"key": ["q2", "d3", "remove"], "action": "grade", "grade": 1},
    )
    assert got == 200
    answer = json.loads(body)
    assert answer["proposal"]["final_grade"] == 1
    assert answer["progress"] == {"total": 5, "decided": 1, "skipped": 0, "undecided": 4}
    assert decisions(review_path)[("q2", "d3", "remove")] == ("grade", 1, "tester")
    got, _, body = call(
        server, "POST", "/api/decision", {"key": ["q2", "d3", "remove"], "action": "undo"}
    )
    assert got == 200 and json.loads(body)["proposal"]["decision"] is None
    assert decisions(review_path)[("q2", "d3", "remove")] is None


def test_writes_from_the_page_and_a_command_line_at_once_are_all_kept(
    server: ReviewServer, review_path: Path
) -> None:
    """Ten page requests in threads and ten direct ``record_decision`` calls, all at once:
    the lock serialises read-change-write, so no decision overwrites another's file."""
    many = tuple(proposal(f"q{i}", f"d{i}") for i in range(20))
    write_review(review_path, HEADER, many)
    barrier = threading.Barrier(20)
    statuses: list[int] = []

    def page(index: int) -> None:
        barrier.wait()
        body = {"key": [f"q{index}", f"d{index}", "add"], "action": "grade", "grade": index % 4}
        statuses.append(call(server, "POST", "/api/decision", body)[0])

    def command_line(index: int) -> None:
        barrier.wait()
        record_decision(
            review_path, (f"q{index}", f"d{index}", "add"), Decision("reject", None, "cli", "t")
        )

    threads = [threading.Thread(target=page, args=(i,)) for i in range(10)]
    threads += [threading.Thread(target=command_line, args=(i,)) for i in range(10, 20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert statuses == [200] * 10
    got = decisions(review_path)
    assert got == {
        **{(f"q{i}", f"d{i}", "add"): ("grade", i % 4, "tester") for i in range(10)},
        **{(f"q{i}", f"d{i}", "add"): ("reject", None, "cli") for i in range(10, 20)},
    }


# --------------------------------------------------------------------------------------------
# the command


#: ``python -m pytest_retrieval review`` with Ctrl-C deliverable, as in a terminal: a child
#: inherits an ignored SIGINT (a test run started in the background by a script ignores it),
#: and Python then leaves it ignored, so the command could not be stopped
REVIEW = [
    sys.executable,
    "-c",
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('pytest_retrieval', run_name='__main__', alter_sys=True)",
    "review",
]


def start(review: Path, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*REVIEW, str(review), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def stopped(process: subprocess.Popen[str]) -> tuple[str, str]:
    """Its output once it has exited; a process still running after 60 s (a hang guard) is
    killed (not left serving after the test) and the test fails."""
    try:
        return process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"review did not stop on Ctrl-C within 60 s; stderr: {err[-2000:]}")


def test_the_command_prints_the_url_serves_and_stops_on_ctrl_c(review_path: Path) -> None:
    process = start(review_path, "--no-open", "--by", "ana")
    try:
        assert process.stdout is not None
        summary = process.stdout.readline()
        assert summary.startswith(f"Reviewing {review_path}: 5 proposals, 0 decided, 0 skipped")
        line = process.stdout.readline()
        assert line.startswith("Open http://127.0.0.1:") and "(Ctrl-C to stop)" in line
        url = urlsplit(line.split()[1])
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
        connection.request("GET", f"/?{url.query}")
        response = connection.getresponse()
        assert response.status == 200 and b"review-token" in response.read()
        connection.close()
    finally:
        process.send_signal(signal.SIGINT)
        out, err = stopped(process)
    assert process.returncode == 0, err
    assert "Stopped. Decisions are in the review file" in out and "Traceback" not in err


def test_ctrl_c_while_the_browser_opens_stops_cleanly(
    review_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C right after the URL is printed, while the browser's thread starts (a reviewer
    found it escaped as a traceback, exit -2): the same clean stop as during serving."""
    from pytest_retrieval import cli
    from pytest_retrieval.builder import review_server

    def interrupted(url: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(review_server, "open_browser", interrupted)
    try:
        code = cli.main(["review", str(review_path), "--by", "ana"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C while the browser opened escaped the command")
    assert code == 0
    assert "Stopped. Decisions are in the review file" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_the_command_opens_the_browser_with_the_url(review_path: Path, tmp_path: Path) -> None:
    """Without --no-open, ``webbrowser`` gets the URL (here $BROWSER is a script writing it
    down); the server serves meanwhile."""
    opened = tmp_path / "opened.txt"
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    script.chmod(0o755)
    process = subprocess.Popen(
        [*REVIEW, str(review_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "BROWSER": str(script)},
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()
        url = process.stdout.readline().split()[1]
        # waited for, not timed: the test's timeout guards this
        while not (opened.exists() and opened.read_text()) and process.poll() is None:
            time.sleep(0.1)
        assert opened.read_text().strip() == url
    finally:
        process.send_signal(signal.SIGINT)
        _, err = stopped(process)
    assert process.returncode == 0, err


@pytest.mark.parametrize(
    ("options", "status", "message"),
    [
        (["--host", "0.0.0.0"], 2, "--host 0.0.0.0: not a loopback address"),
        (["--host", "example.com"], 2, "not a loopback address"),
        (["--port", "70000"], 2, "--port 70000: not a port number"),
    ],
)
def test_bad_command_lines_are_usage_errors(
    review_path: Path, options: list[str], status: int, message: str
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_retrieval",
            "review",
            str(review_path),
            "--no-open",
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == status and message in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("host", "bind"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.2", "127.0.0.2"),
        ("localhost", "127.0.0.1"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("0.0.0.0", None),
        ("::", None),
        ("192.168.1.2", None),
        ("example.com", None),
    ],
)
def test_only_loopback_addresses_are_bound(host: str, bind: str | None) -> None:
    assert loopback_host(host) == bind


def test_an_ipv6_loopback_server_checks_its_own_host(review_path: Path) -> None:
    try:
        serving = ReviewServer(review_path, "::1", 0, by="tester")
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here ({exc})")
    port = serving.server_address[1]
    try:
        assert serving.url.startswith(f"http://[::1]:{port}/?token=")
        assert serving.hosts == {f"[::1]:{port}"}
    finally:
        serving.server_close()


def test_a_port_in_use_is_one_line(review_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*REVIEW, str(review_path), "--no-open", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port 0" in done.stderr


def test_a_bad_review_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"pytest_retrieval_review": 1, "golden": "g.json"}\n{oops\n')
    for path, message in ((missing, "no such review file"), (broken, "broken.jsonl:2: not JSON")):
        done = subprocess.run(
            [*REVIEW, str(path), "--no-open"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------------------------
# the page in Chromium

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def open_page(browser: Any, server: ReviewServer, problems: list[str], width: int = 1280) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    origin = server.url.split("/?")[0]
    page.on("request", lambda r: None if r.url.startswith(origin) else problems.append(r.url))
    page.goto(server.url)
    page.wait_for_selector("#card:not([hidden])")
    return page


def shown(page: Any) -> dict[str, str]:
    return {
        name: page.inner_text(f"#{name}")
        for name in ("position", "decided", "skipped", "query", "doc-id", "decision")
    }


def press(page: Any, key: str, decided: int | None = None, position: str | None = None) -> None:
    """Press ``key`` and wait for the counts it should leave (the page's CSP forbids the
    string evaluation ``wait_for_function`` needs, so this waits on the text)."""
    from playwright.sync_api import expect

    page.keyboard.press(key)
    if decided is not None:
        expect(page.locator("#decided")).to_have_text(str(decided))
    if position is not None:
        expect(page.locator("#position")).to_have_text(position)


@needs_chromium
def test_keyboard_flow_reload_and_resume(
    browser: Any, server: ReviewServer, review_path: Path, tmp_path: Path
) -> None:
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        assert shown(page) == {
            "position": "1 of 5",
            "decided": "0",
            "skipped": "0",
            "query": "query q1",
            "doc-id": "d1",
            "decision": "none yet",
        }
        assert page.inner_text("#judge-grade") == "2 moderately relevant"
        assert page.inner_text("#current") == "unjudged"
        assert "a" in page.inner_text("#keys") and "undo" in page.inner_text("#keys")

        press(page, "a", decided=1, position="2 of 5")  # accept q1/d1 -> the next
        # the hostile document is text: no element was made from it, no script ran
        assert page.text_content("#text") == HOSTILE
        assert page.evaluate("document.querySelectorAll('#text *').length") == 0
        assert page.title() == "Review · pytest-retrieval"

        press(page, "1", decided=2, position="3 of 5")  # grade q1/d2 as 1
        assert page.inner_text("#kind") == "remove"
        assert "Accept sets 0, reject keeps 2" in page.inner_text("#kind-help")
        press(page, "r", decided=3, position="4 of 5")  # reject the removal of q2/d3
        press(page, "u", decided=2, position="3 of 5")  # undo: back to q2/d3, undecided
        assert page.inner_text("#decision") == "none yet"
        press(page, "r", decided=3, position="4 of 5")  # reject it again
        press(page, "s", position="5 of 5")  # skip q2/d4: on to q3/d5, the next undecided
        assert shown(page)["skipped"] == "1"

        page.reload()
        page.wait_for_selector("#card:not([hidden])")
        assert shown(page) == {
            "position": "5 of 5",  # the first proposal with no decision
            "decided": "3",
            "skipped": "1",
            "query": "query q3",
            "doc-id": "d5",
            "decision": "none yet",
        }
        press(page, "k", position="4 of 5")
        assert page.inner_text("#decision").startswith("skipped (by tester, ")
        press(page, "ArrowLeft", position="3 of 5")
        assert page.inner_text("#decision").startswith("rejected: the golden label stays")
        press(page, "j", position="4 of 5")
        press(page, "ArrowRight", position="5 of 5")
        assert page.locator("#done").is_hidden()
        assert problems == []
        page.screenshot(path=str(tmp_path / "review.png"))
    finally:
        page.close()
    assert decisions(review_path) == {
        ("q1", "d1", "add"): ("accept", None, "tester"),
        ("q1", "d2", "add"): ("grade", 1, "tester"),
        ("q2", "d3", "remove"): ("reject", None, "tester"),
        ("q2", "d4", "add"): ("skip", None, "tester"),
        ("q3", "d5", "add"): None,
    }


@needs_chromium
def test_deciding_the_last_ones_by_mouse_at_400_px(
    browser: Any, server: ReviewServer, review_path: Path
) -> None:
    """Buttons do what the keys do; the skipped proposal comes back after the undecided ones;
    the page says when all are decided, and never scrolls sideways on a phone."""
    from playwright.sync_api import expect

    for key in PROPOSALS[:3]:
        record_decision(review_path, key.key, Decision("reject", None, "cli", "t"))
    record_decision(review_path, PROPOSALS[3].key, Decision("skip", None, "cli", "t"))
    problems: list[str] = []
    page = open_page(browser, server, problems, width=400)
    try:
        assert shown(page)["position"] == "5 of 5"
        page.click("button[data-grade='3']")
        expect(page.locator("#decided")).to_have_text("4")
        assert shown(page)["position"] == "4 of 5"  # back to the skipped one
        page.click("button[data-action='accept']")
        page.wait_for_selector("#done:not([hidden])")
        widths = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert widths[0] <= widths[1], widths
        assert problems == []
    finally:
        page.close()
    got = decisions(review_path)
    assert got[("q3", "d5", "add")] == ("grade", 3, "tester")
    assert got[("q2", "d4", "add")] == ("accept", None, "tester")


@needs_chromium
def test_a_refused_write_is_shown_and_nothing_moves(
    browser: Any, server: ReviewServer, review_path: Path
) -> None:
    """The file made again by ``pool`` under an open page: the decision is refused (409) and
    the page says so instead of pretending it saved."""
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        write_review(review_path, HEADER, PROPOSALS[1:])
        page.keyboard.press("a")
        page.wait_for_selector("#message:not([hidden])")
        assert "Not saved" in page.inner_text("#message") and "reload" in page.inner_text(
            "#message"
        )
        assert shown(page)["position"] == "1 of 5" and shown(page)["decided"] == "0"
    finally:
        page.close()
    assert all(value is None for value in decisions(review_path).values())


@needs_chromium
def test_a_held_key_decides_once(browser: Any, server: ReviewServer, review_path: Path) -> None:
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        page.keyboard.down("a")
        page.keyboard.down("a")  # auto-repeat while held
        page.keyboard.down("a")
        page.keyboard.up("a")
        press(page, "k", decided=1, position="1 of 5")  # queued after any decision
        assert problems == []
    finally:
        page.close()
    assert [d for d in decisions(review_path).values() if d] == [("accept", None, "tester")]


@needs_chromium
def test_decisions_written_elsewhere_are_picked_up(
    browser: Any, server: ReviewServer, review_path: Path
) -> None:
    """A decision made from the command line while the page is open: the page's next write
    sees the file's counts differ from its own, reloads the list, and does not send the
    reviewer to the proposal already decided."""
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        record_decision(review_path, PROPOSALS[1].key, Decision("reject", None, "cli", "t"))
        press(page, "a", decided=2, position="3 of 5")  # not 2: q1/d2 is decided
        press(page, "k", position="2 of 5")
        assert page.inner_text("#decision").startswith("rejected: no label recorded (by cli")
        assert problems == []
    finally:
        page.close()


@needs_chromium
def test_the_query_words_are_marked_in_the_text(
    browser: Any, server: ReviewServer, review_path: Path
) -> None:
    text = "Heating <i>and</i> TRANSFER of heat; a heater's theat"
    write_review(
        review_path, HEADER, (proposal("q1", "d1", text=text, query="heat transfer, at Mach 7"),)
    )
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        assert page.text_content("#text") == text
        marks = page.evaluate(
            "[...document.querySelectorAll('#text mark')].map(m => m.textContent)"
        )
        assert marks == ["Heat", "TRANSFER", "heat", "heat"]  # at a word's start only
        assert page.evaluate("document.querySelectorAll('#text *:not(mark)').length") == 0
        assert problems == []
    finally:
        page.close()


@needs_chromium
def test_undo_after_a_reload_clears_the_proposal_shown(
    browser: Any, server: ReviewServer, review_path: Path
) -> None:
    """With no decision made in this page, ``u`` clears the one on screen; on an undecided
    proposal it says there is nothing to undo and writes nothing."""
    record_decision(review_path, PROPOSALS[0].key, Decision("grade", 3, "cli", "t"))
    problems: list[str] = []
    page = open_page(browser, server, problems)
    try:
        assert shown(page)["position"] == "2 of 5"
        press(page, "ArrowUp", position="1 of 5")
        assert page.inner_text("#decision").startswith("graded: grade 3 highly relevant (by cli")
        press(page, "u", decided=0, position="1 of 5")
        assert page.inner_text("#decision") == "none yet"
        before = review_path.read_bytes()
        page.keyboard.press("u")
        page.wait_for_selector("#message:not([hidden])")
        assert page.inner_text("#message") == "Nothing to undo here."
        assert review_path.read_bytes() == before
        assert problems == []
    finally:
        page.close()
    assert all(value is None for value in decisions(review_path).values())


@needs_chromium
def test_an_empty_review_file(browser: Any, server: ReviewServer, review_path: Path) -> None:
    write_review(review_path, HEADER, ())
    problems: list[str] = []
    page = browser.new_page()
    try:
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(server.url)
        page.wait_for_selector("#loading", state="hidden")
        assert page.inner_text("#position") == "none (the review file has no proposals)"
        assert page.locator("#card").is_hidden() and page.locator("#done").is_hidden()
        page.keyboard.press("a")
        page.keyboard.press("j")
        assert page.inner_text("#decided") == "0" and problems == []
    finally:
        page.close()


def test_a_client_trickling_bytes_is_cut_off_at_the_connection_limit(
    server: ReviewServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte every 0.2 s never stalls a read for the socket timeout; the whole connection
    is limited all the same (here to 1 s; the client gives up after 30 s of trickling)."""
    monkeypatch.setattr(ReviewHandler, "connection_limit", 1.0, raising=False)
    host, port = server.server_address[:2]
    client = socket.create_connection((str(host), int(port)), timeout=30)
    client.sendall(b"GET /app.js HTTP/1.1\r\nX-Slow: ")
    closed = False
    for _ in range(150):
        try:
            client.sendall(b"a")
        except OSError:  # reset: cut off
            closed = True
            break
        readable, _, _ = select.select([client], [], [], 0.2)
        if readable:  # the server ended the connection (it never answers half a request)
            try:
                closed = client.recv(1024) == b""
            except OSError:
                closed = True
            break
    client.close()
    assert closed, "the trickling client was still served after 30 s"
