"""Reading and serving never wait forever on what they are given: a run file without line
ends (``/dev/zero``) is refused at a bounded line, a review-page client that stalls is
dropped (and one that goes away is no traceback), and the locks of one user never stand in
another user's way."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden

from pytest_retrieval.builder.review_file import Proposal, write_review

CLI = [sys.executable, "-m", "pytest_retrieval"]
ZERO = "/dev/zero"
needs_dev_zero = pytest.mark.skipif(not os.path.exists(ZERO), reason="no /dev/zero here")


def cli(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own: one that hangs fails the test, not the suite."""
    return subprocess.run(
        [*CLI, *argv], cwd=cwd, capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@needs_dev_zero
@pytest.mark.parametrize("name", [ZERO, "zero.json", "zero.trec"])
def test_a_run_file_without_line_ends_is_a_usage_error_naming_its_line(
    pytester: pytest.Pytester, name: str
) -> None:
    """``/dev/zero`` as it is, or behind a name read as JSON or as TREC."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    if name != ZERO:
        (pytester.path / name).symlink_to(ZERO)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--retrieval-run", name, timeout=120
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: run file *{name}, line 1: *not * run file*", "  fix: *"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@needs_dev_zero
def test_eval_refuses_a_run_file_without_line_ends(tmp_path: Path) -> None:
    (tmp_path / "golden.json").write_text(json.dumps(GOLDEN), encoding="utf-8")
    done = cli("eval", "golden.json", ZERO, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"run file {ZERO}, line 1: " in done.stderr
    assert "Traceback" not in done.stderr


def test_a_long_line_is_refused_by_its_number(tmp_path: Path) -> None:
    """A run with good lines, then one just over the 64 MiB bound."""
    (tmp_path / "golden.json").write_text(json.dumps(GOLDEN), encoding="utf-8")
    long = tmp_path / "long.trec"
    with open(long, "w", encoding="ascii") as out:
        out.write("apple Q0 d1 1 2.0 bm25\napple Q0 d4 2 1.0 bm25\n")
        out.write("x" * (64 * 2**20 + 10) + "\n")
    try:
        done = cli("eval", "golden.json", "long.trec", cwd=tmp_path)
    finally:
        long.unlink()  # 64 MiB: not left in the kept temp folders
    assert done.returncode == 2, done.stderr
    assert "run file long.trec, line 3: line is longer than 67,108,864 characters" in done.stderr


# ---------------------------------------------------------------- the review server


PROPOSAL: dict[str, Any] = {
    "query": "a query", "kind": "add", "current": None, "grade": 2, "reason": "why",
    "confidence": 0.9, "rank": 1, "sources": ("run-a.json:bm25",), "decision": None,
}  # fmt: skip


def review_file(path: Path, texts: int = 3, size: int = 100) -> Path:
    proposals = [
        Proposal(**PROPOSAL, query_id=f"q{i}", doc_id=f"d{i}", text="t" * size)
        for i in range(texts)
    ]
    header = {"golden": "golden.json", "golden_fingerprint": "abc", "k": 10, "reports": [],
              "created": "2026-01-01T00:00:00+00:00"}  # fmt: skip
    write_review(path, header, proposals)
    return path


def serve(review: Path) -> tuple[subprocess.Popen[str], str, int, str]:
    process = subprocess.Popen(
        [*CLI, "review", str(review), "--no-open"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    process.stdout.readline()
    url = urlsplit(process.stdout.readline().split()[1])
    return process, url.hostname or "", url.port or 0, url.query.removeprefix("token=")


def stop(process: subprocess.Popen[str]) -> str:
    """Its stderr after Ctrl-C."""
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[1] + "\n(did not stop on Ctrl-C)"


def test_a_stalled_client_is_dropped(tmp_path: Path) -> None:
    """Half a request, then nothing: the server closes the connection (its thread ends)
    instead of waiting forever; the client's own 120 s limit only guards the test."""
    process, host, port, _ = serve(review_file(tmp_path / "review.jsonl"))
    try:
        stalled = socket.create_connection((host, port), timeout=120)
        stalled.sendall(b"GET /app.js HTTP/1.1\r\nHost: ")
        try:
            assert stalled.recv(1024) == b""  # closed by the server
        except TimeoutError:
            pytest.fail("the server kept a stalled client for 120 s")
        finally:
            stalled.close()
    finally:
        err = stop(process)
    assert "Traceback" not in err, err


def reset(connection: socket.socket) -> None:
    """Close with a TCP reset, as a crashed browser or a dropped network does."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def test_clients_that_go_away_print_no_traceback(tmp_path: Path) -> None:
    """A client gone before its 4 MB answer is read (a reload, a closed tab), and one gone
    half-way through its request: the server goes on, and says nothing of them."""
    review = review_file(tmp_path / "review.jsonl", texts=200, size=20_000)
    process, host, port, token = serve(review)
    request = (
        f"GET /api/review HTTP/1.1\r\nHost: {host}:{port}\r\nX-Review-Token: {token}\r\n\r\n"
    ).encode()
    try:
        for _ in range(3):
            gone = socket.create_connection((host, port), timeout=30)
            gone.sendall(request)
            gone.recv(1)  # the answer started
            reset(gone)
            half = socket.create_connection((host, port), timeout=30)
            half.sendall(b"GET /api/review HTTP/1.1\r\nHo")
            time.sleep(0.05)  # an ordering, not a duration that is checked
            reset(half)
        alive = socket.create_connection((host, port), timeout=30)  # still serving
        alive.sendall(request)
        assert alive.recv(12).startswith(b"HTTP/1.0 200")
        alive.close()
    finally:
        err = stop(process)
    assert "Traceback" not in err and "Error" not in err, err


# ---------------------------------------------------------------- the lock folder


def recorded(tmp_path: Path, temp: Path) -> subprocess.CompletedProcess[str]:
    """``eval --update-baseline`` (a baseline is written under its lock) with ``temp`` as
    the temp dir, where the lock folder is."""
    (tmp_path / "golden.json").write_text(json.dumps(GOLDEN), encoding="utf-8")
    (tmp_path / "in.trec").write_text("apple Q0 d1 1 2.0 bm25\n", encoding="utf-8")
    return cli("eval", "golden.json", "in.trec", "--update-baseline=force", cwd=tmp_path,
               env={"TMPDIR": str(temp)})  # fmt: skip


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX users")
def test_the_lock_folder_is_the_users_own(tmp_path: Path) -> None:
    """Another user's folder of locks (``pytest-retrieval-locks``, as every user shared it)
    blocks nobody; this user's is private (0700)."""
    temp = tmp_path / "temp"
    temp.mkdir()
    shared = temp / "pytest-retrieval-locks"
    shared.write_text("another user's, or anything: not ours to use\n")
    done = recorded(tmp_path, temp)
    assert done.returncode in (0, 1), done.stderr + done.stdout
    assert "baseline written: golden.json.baseline.json" in done.stdout, done.stdout
    own = temp / f"pytest-retrieval-locks-{os.getuid()}"
    assert own.is_dir() and (own.stat().st_mode & 0o777) == 0o700


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX users")
def test_a_lock_folder_planted_by_someone_else_is_refused_by_name(tmp_path: Path) -> None:
    """A link where this user's folder goes (a trap: the locks would be made elsewhere) is
    not used; the message names it and the fix, and the baseline is not written."""
    temp = tmp_path / "temp"
    (tmp_path / "elsewhere").mkdir(parents=True)
    temp.mkdir()
    planted = temp / f"pytest-retrieval-locks-{os.getuid()}"
    planted.symlink_to(tmp_path / "elsewhere")
    done = recorded(tmp_path, temp)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert f"the lock folder {planted} is a symlink: it is not used; remove it" in output, output
    assert "TMPDIR" in output and "Traceback" not in output
    assert not (tmp_path / "golden.json.baseline.json").exists()
    assert not list((tmp_path / "elsewhere").iterdir())
