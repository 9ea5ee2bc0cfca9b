"""Issue 39, points 1 and 2: no secret reaches an output, and downstream labels are kept
the moment each exists.

The keys below are fake and live only here: each run gets them through environment
variables, so no file of a test project holds them (the conftests read them from there),
and every file a run writes is grepped for them, with stdout and stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from judge_server import JudgeServer, serve

#: end-to-end runs (pytest processes, xdist, a local judge server): out of the fast
#: subset, `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

#: the judge's key (OPENAI_API_KEY), which every fault below echoes
KEY = "sk-test-secrets-7Qf2Lx9Vb4Nc1Rz8Kd3Hs6Tw0Pm5Yj"
#: an Azure-style key (AZURE_OPENAI_API_KEY): 32 hex digits, no shape to catch
AZURE = "5e0b9c7d3a1f48e6b2c4d8a0f7e9c1b3"
#: a key of the same shape in a variable whose name says nothing: only its shape betrays it
SHAPED = "sk-proj-test-Zq8Wm3Kx7Bn2Vc5Lr9Td4Gh1Fs6Jy0"
#: a bearer token in a variable whose name says nothing: only the header betrays it
TOKEN = "tok-test-9Hb3Xk7Qm1Vz5Rc8Lw2Nd6Pf4"

SECRETS = {
    "OPENAI_API_KEY": KEY,
    "AZURE_OPENAI_API_KEY": AZURE,
    "PROBE_SHAPED": SHAPED,
    "PROBE_BEARER": TOKEN,
}


def needles() -> dict[str, str]:
    """What no output may hold: each secret, and each one's body without its prefix."""
    found = {}
    for name, secret in SECRETS.items():
        found[name] = secret
        body = secret.removeprefix("sk-proj-test-").removeprefix("sk-test-")
        found[f"{name} body"] = body.removeprefix("tok-test-")
    return found


def leaks(folder: Path, *texts: str) -> list[str]:
    """Every file under ``folder`` (and each text given) holding a secret or its body."""
    places = {f"text {i}": text.encode() for i, text in enumerate(texts)}
    for path in folder.rglob("*"):
        if path.is_file():
            places[str(path.relative_to(folder))] = path.read_bytes()
    return [
        f"{place}: {name}"
        for place, data in places.items()
        for name, needle in needles().items()
        if needle.encode() in data
    ]


@pytest.fixture
def secrets_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets in the environment, the only place they are (no judge endpoint set)."""
    for name in ("OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT", "OPENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def server(secrets_env: None) -> Iterator[JudgeServer]:
    """The test judge, requiring KEY and echoing it in its errors, reasons and model."""
    with serve(api_key=KEY, echo_auth=True) as running:
        yield running


# ---------------------------------------------------------------- the projects

DOCS = {
    "d1": "apple pie recipe",
    "d2": "banana bread recipe",
    "d3": "cherry tart [[400]]",  # the judge's answer: a 400 echoing the key
    "d4": "apple cider vinegar",
    "d5": "bread machine manual [[500]]",  # a 500 echoing the key, retried, given up
    "d6": "tart cherry juice",
}

#: a retriever (and labeller) whose errors carry the secrets in every way a client's do:
#: the key in the message, the headers in the repr of an HTTP error, a chained cause holding
#: the bare token; each kind once (so each keeps its traceback)
FAULTY = f'''
import os

import pytest

DOCS = {DOCS!r}


class FakeHTTPError(Exception):
    """An HTTP client's error: its repr shows the request's headers."""

    def __init__(self, url, status):
        super().__init__(f"{{status}} from {{url}}")
        self.headers = {{
            "Authorization": "Bearer " + os.environ["PROBE_BEARER"],
            "api-key": os.environ["AZURE_OPENAI_API_KEY"],
        }}

    def __repr__(self):
        return f"FakeHTTPError({{self.args[0]!r}}, headers={{self.headers!r}})"


def search(query, k, **params):
    if query == "boom key":
        raise RuntimeError(
            "embedding failed: OPENAI_API_KEY=" + os.environ["OPENAI_API_KEY"] + " was refused"
        )
    if query == "boom headers":
        raise ValueError(f"vector store said {{FakeHTTPError('https://vectors.example/q', 401)!r}}")
    if query == "boom chained":
        try:
            raise ConnectionError("token " + os.environ["PROBE_BEARER"] + " expired")
        except ConnectionError as cause:
            raise FakeHTTPError("https://vectors.example/q", 403) from cause
    if query == "boom shaped":
        raise PermissionError("bad key " + os.environ["PROBE_SHAPED"])
    words = set(query.split())
    ranked = sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))
    return [{{"id": d, "text": DOCS[d]}} for d in ranked[:k]]


@pytest.fixture(scope="session")
def retriever():
    return search


@pytest.fixture(scope="session")
def retrieval_downstream():
    def score(query, doc, entry):
        if doc.id == "d1":
            raise RuntimeError(
                "POST https://api.openai.com/v1/chat/completions: 401 "
                "OPENAI_API_KEY=" + os.environ["OPENAI_API_KEY"]
            )
        if doc.id == "d2":
            try:
                raise OSError("Authorization: Bearer " + os.environ["PROBE_BEARER"])
            except OSError as cause:
                raise FakeHTTPError("https://rag.example/answer", 500) from cause
        if doc.id == "d4":
            return {{"answer": "vinegar", "key": os.environ["PROBE_SHAPED"]}}  # not a number
        return 1.0

    return score
'''

GOLDEN = {
    "name": "fruit",
    "k": 3,
    "queries": [
        {"id": "apple", "query": "apple", "relevant": ["d1", "d4"]},
        {"id": "bread", "query": "bread recipe", "relevant": ["d2"]},
        {"id": "cherry", "query": "cherry", "relevant": ["d3", "d6"]},
        {"id": "juice", "query": "juice", "relevant": ["d6"]},
        {"id": "key", "query": "boom key", "relevant": ["d1"]},
        {"id": "headers", "query": "boom headers", "relevant": ["d1"]},
        {"id": "chained", "query": "boom chained", "relevant": ["d1"]},
        {"id": "shaped", "query": "boom shaped", "relevant": ["d1"]},
    ],
}


def project(pytester: pytest.Pytester, conftest: str = FAULTY) -> None:
    pytester.makeconftest(conftest)
    (pytester.path / "golden.json").write_text(json.dumps(GOLDEN), encoding="utf-8")


#: every output the plugin writes
OUTPUTS = (
    *("--junitxml", "junit.xml", "--retrieval-report", "r.json"),
    *("--retrieval-markdown", "r.md", "--retrieval-html", "r.html"),
    *("--retrieval-export-run", "run.trec"),
)


def run_everything(
    pytester: pytest.Pytester, *more: str, update_baseline: bool = True
) -> pytest.RunResult:
    """One run with every output (the tracebacks shown, -v), then the CLI reading them."""
    baseline = ("--retrieval-update-baseline",) if update_baseline else ()
    result = pytester.runpytest_subprocess(
        "--retrieval-golden",
        "golden.json",
        "-v",
        "-rA",
        "--retrieval-max-failures",
        "0",
        *OUTPUTS,
        *baseline,
        *more,
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    return result


def cli(pytester: pytest.Pytester, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_retrieval", *args],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


# ---------------------------------------------------------------- point 1


def test_a_labeller_raising_with_the_key_shows_the_error_without_it(
    pytester: pytest.Pytester, secrets_env: None
) -> None:
    """The issue's repro: a ``retrieval_downstream`` whose HTTP client puts
    ``OPENAI_API_KEY=sk-...`` in its error; terminal, JSON, JUnit and Markdown said it."""
    project(pytester)
    result = run_everything(pytester, "-p", "no:cacheprovider", update_baseline=False)
    result.assert_outcomes(failed=1)
    report = json.loads((pytester.path / "r.json").read_text("utf-8"))
    failures = report["evaluations"][0]["erag"]["failures"]
    # the message is kept, the key is not
    assert failures["apple / d1"] == (
        "retrieval_downstream raised RuntimeError: POST "
        "https://api.openai.com/v1/chat/completions: 401 OPENAI_API_KEY=***"
    )
    assert "returned {'answer': 'vinegar', 'key': 'sk-***'}" in failures["apple / d4"]
    assert leaks(pytester.path, result.stdout.str(), result.stderr.str()) == []


def test_a_retriever_raising_with_the_key_shows_the_errors_without_it(
    pytester: pytest.Pytester, secrets_env: None
) -> None:
    """In the message, in an HTTP error's repr of its headers, in a chained cause (the
    tracebacks, shown with -v and kept in the report)."""
    project(pytester)
    result = run_everything(pytester, "-p", "no:cacheprovider", update_baseline=False)
    report = json.loads((pytester.path / "r.json").read_text("utf-8"))
    evaluation = report["evaluations"][0]
    errors = {q["id"]: q["error"] for q in evaluation["queries"] if q["error"]}
    assert errors["key"] == (
        "the retriever raised RuntimeError: embedding failed: OPENAI_API_KEY=*** was refused"
    )
    assert "'Authorization': 'Bearer ***', 'api-key': '***'" in errors["headers"]
    assert errors["shaped"] == "the retriever raised PermissionError: bad key sk-***"
    tracebacks = "\n".join(g["traceback"] or "" for g in evaluation["error_groups"])
    assert "ConnectionError: token *** expired" in tracebacks  # the cause, kept, masked
    assert "The above exception was the direct cause" in tracebacks
    assert "ConnectionError: token" in result.stdout.str()  # -v shows them
    assert leaks(pytester.path, result.stdout.str(), result.stderr.str()) == []


NOISY = FAULTY.replace(
    "def search(query, k, **params):\n",
    """def search(query, k, **params):
    import logging, warnings
    key = os.environ["OPENAI_API_KEY"]
    warnings.warn("client said OPENAI_API_KEY=" + key)
    logging.getLogger("client").error("request headers {'Authorization': 'Bearer %s'}", key)
    try:
        raise RuntimeError("refused " + key.upper())
    except RuntimeError:
        logging.getLogger("client").exception("retrying")
    print("key was " + key[:10] + "\\n" + key[10:20] + "\\n" + key[20:])
""",
)


def test_what_the_retriever_warns_logs_and_prints_shows_without_the_key(
    pytester: pytest.Pytester, secrets_env: None
) -> None:
    """The warnings summary, the live log, ``--log-file`` and the captured output, with the
    key whole, in a logged traceback, in capitals and cut across lines."""
    project(pytester, NOISY)
    result = run_everything(
        pytester,
        "-p",
        "no:cacheprovider",
        "--log-cli-level=INFO",
        "--log-file=run.log",
        "--log-file-level=DEBUG",
        update_baseline=False,
    )
    out = result.stdout.str()
    assert "UserWarning: client said OPENAI_API_KEY=***" in out  # the summary, masked
    assert "request headers {'Authorization': 'Bearer ***'}" in out  # the live log
    assert "RuntimeError: refused ***" in (pytester.path / "run.log").read_text("utf-8")
    assert "key was ***" in out
    upper = [needle.upper() for needle in needles().values()]
    assert [n for n in upper if n in out] == []
    assert leaks(pytester.path, out, result.stderr.str()) == []


SETUP_FAILS = """
import logging
import os

import pytest


@pytest.fixture(scope="session")
def retriever():
    key = os.environ["AZURE_OPENAI_API_KEY"]
    logging.getLogger("vectors").warning("connecting with api-key: %s", key)
    token = os.environ["PROBE_BEARER"]
    print("token", token, "sent as Authorization: Bearer", token)
    raise RuntimeError("client init failed: OPENAI_API_KEY=" + os.environ["OPENAI_API_KEY"])
"""


def test_a_retriever_fixture_failing_at_setup_shows_its_error_without_the_key(
    pytester: pytest.Pytester, secrets_env: None
) -> None:
    """pytest's own traceback of the golden set's test, and what it captured (printed,
    logged), shown and stored in JUnit (with every captured section)."""
    project(pytester, SETUP_FAILS)
    result = run_everything(
        pytester, "-p", "no:cacheprovider", "-o", "junit_logging=all", update_baseline=False
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "E   *RuntimeError: client init failed: OPENAI_API_KEY=[*][*][*]",
            "token [*][*][*] sent as Authorization: Bearer [*][*][*]",
            "*connecting with api-key: [*][*][*]",
        ]
    )
    junit = (pytester.path / "junit.xml").read_text("utf-8")
    assert "client init failed: OPENAI_API_KEY=***" in junit
    assert leaks(pytester.path, result.stdout.str(), result.stderr.str()) == []


@pytest.mark.parametrize("fault", [None, "401", "quota"])
def test_no_output_of_the_judge_labeller_and_retriever_fault_suites_holds_the_key(
    pytester: pytest.Pytester, server: JudgeServer, fault: str | None
) -> None:
    """The grep: a judge whose errors, reasons and model name echo the key (a 400 and a 500
    per pair, or a 401 / no quota for all), a labeller and a retriever raising with the
    secrets; every output on (JUnit, JSON, Markdown, HTML, the exported run, the baseline,
    the judge and label caches, pytest's cache), then the CLI reading them back; every file
    and every stream grepped."""
    server.fault = fault
    project(pytester)
    (pytester.path / "step-summary.md").write_text("", encoding="utf-8")
    result = run_everything(
        pytester,
        "--retrieval-judge",
        "--retrieval-judge-base-url",
        server.base_url,
        "--retrieval-judge-cache",
        "c",
        "--retrieval-judge-max-wait",
        "0.05",
    )
    assert server.requests and all(s.authorized for s in server.requests)
    texts = [result.stdout.str(), result.stderr.str()]
    report = json.loads((pytester.path / "r.json").read_text("utf-8"))
    evaluation = report["evaluations"][0]
    judge = evaluation["judge"]
    assert judge["pairs"] > judge["graded"]  # the faults were met
    if fault is None:  # answers echoing the key in their reasons, graded
        assert judge["graded"] > 0
        reasons = [
            v["reason"] for q in evaluation["queries"] for v in q.get("judgments", {}).values()
        ]
        assert any("Bearer ***" in str(r) for r in reasons)
    assert evaluation["erag"]["failed"] >= 2
    assert len(evaluation["error_groups"]) == 4
    assert sorted(p.name for p in (pytester.path / "c").glob("*.sqlite")) == [
        "downstream.sqlite",
        "judge.sqlite",
    ]
    env = {"GITHUB_STEP_SUMMARY": str(pytester.path / "step-summary.md")}
    for command in (
        ["show", "r.json", "--worst", "8"],
        ["show", "golden.json.baseline.json"],
        ["diff", "r.json", "r.json"],
        ["pool", "golden.json", "r.json", "-o", "review.json", "--base-url", server.base_url],
        ["eval", "golden.json", "run.trec", "--report", "eval.json", "--markdown", "eval.md"],
    ):
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            texts.append(cli(pytester, *command))
    assert leaks(pytester.path, *texts) == []


# ---------------------------------------------------------------- the scrubber's rules


@pytest.fixture
def fresh_scrubber(monkeypatch: pytest.MonkeyPatch) -> None:
    """No secret in the environment, none seen by earlier tests of this process."""
    from pytest_retrieval._internal import scrub as _scrub

    for name in list(os.environ):
        if _scrub._SECRET_NAME.search(name):
            monkeypatch.delenv(name)
    monkeypatch.setattr(_scrub, "_seen", {})
    monkeypatch.setattr(_scrub, "_cache", {})


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Authorization: Bearer abc.def-123", "Authorization: Bearer ***"),
        ("{'api-key': 'c0ffee00c0ffee00'}", "{'api-key': '***'}"),
        ("X-Api-Key: 1234abcd5678", "X-Api-Key: ***"),
        ("MY_SERVICE_API_KEY=hunter2hunter2 failed", "MY_SERVICE_API_KEY=*** failed"),
        ("postgresql://app:pa55w0rd-x@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("key sk-abc123def456ghi7 refused", "key sk-*** refused"),
        ("key sk-proj-Ab12Cd34Ef56Gh78 refused", "key sk-*** refused"),
        ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "jwt ***"),
        ("github ghp_" + "a1B2" * 9, "github ***"),
        # doc ids, words and numbers stay as they were
        ("doc sk-1234 and task-0123456789abcdef", "doc sk-1234 and task-0123456789abcdef"),
        ("docs sk-glossary-entries and desk-lamp-2024-09", "same"),
        ("ids doc-sk-0123456789abc, wiki_sk-0123456789abc", "same"),
        ("Bearer of bad news; basic retrieval; max_tokens=300", "same"),
        ("the token budget: 1500 tokens; a secret: none", "same"),
    ],
)
def test_the_scrubbers_rules(text: str, shown: str, fresh_scrubber: None) -> None:
    from pytest_retrieval._internal.scrub import scrub

    assert scrub(text) == (text if shown == "same" else shown)


def test_known_secrets_are_masked_whole_without_their_prefix_and_in_pieces(
    monkeypatch: pytest.MonkeyPatch, fresh_scrubber: None
) -> None:
    from pytest_retrieval._internal.scrub import scrub

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("PINECONE_API_KEY", AZURE)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false-but-long")  # not a secret's name
    body = KEY.removeprefix("sk-")
    text = f"a {AZURE} b {body} c {KEY[:20]}... d {AZURE[4:20]} e false-but-long"
    assert scrub(text) == "a *** b *** c ***... d *** e false-but-long"
    # a header value seen once is masked wherever it shows up afterwards
    assert scrub("Authorization: Bearer Zx81Qw73Lp") == "Authorization: Bearer ***"
    assert scrub("it was Zx81Qw73Lp") == "it was ***"


# ---------------------------------------------------------------- point 2

#: a labeller that counts its calls in ``calls.txt`` and, while ``HOLD_AFTER`` is set,
#: answers that many and then hangs every later call (the run is killed meanwhile)
COUNTED = """
import os
import threading
import time
from pathlib import Path

import pytest

DOCS = {docs!r}
lock = threading.Lock()
done = 0


def search(query, k, **params):
    words = set(query.split())
    ranked = sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))
    return [{{"id": d, "text": DOCS[d]}} for d in ranked[:k]]


@pytest.fixture(scope="session")
def retriever():
    return search


@pytest.fixture(scope="session")
def retrieval_downstream():
    global done
    hold = int(os.environ.get("HOLD_AFTER", "0"))

    def score(query, doc, entry):
        global done
        with lock:
            with open("calls.txt", "a", encoding="utf-8") as calls:
                calls.write(f"{{query}} / {{doc.id}}\\n")
            turn = done
            done += 1
        if hold and turn >= hold:
            time.sleep(600)  # killed meanwhile
        return 1.0 if doc.id[1:] == query.split()[0][1:] else 0.25

    return score
"""


def calls(folder: Path) -> list[str]:
    path = folder / "calls.txt"
    return path.read_text("utf-8").splitlines() if path.exists() else []


def label_rows(folder: Path) -> int:
    """The labels in the downstream cache under ``folder`` (pytest's cache)."""
    found = list(folder.rglob("downstream.sqlite"))
    if not found:
        return 0
    with sqlite3.connect(found[0]) as db:
        return int(db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])


@pytest.mark.timeout(300)
def test_a_killed_labelling_keeps_each_label_and_the_rerun_asks_only_the_missing(
    pytester: pytest.Pytester,
) -> None:
    """32 labels (8 queries x 4 hits), 4 at a time; SIGKILL once 14 are done (and the next
    4 hang): the 14 are in the cache, and the rerun calls the labeller 18 times."""
    docs = {f"d{i}": f"t{i} t{(i + 1) % 8} t{(i + 2) % 8} t{(i + 3) % 8}" for i in range(8)}
    pytester.makeconftest(COUNTED.format(docs=docs))
    golden = {
        "name": "labels",
        "k": 4,
        "queries": [
            {"id": f"q{i}", "query": f"t{i} topic", "relevant": [f"d{i}"]} for i in range(8)
        ],
    }
    (pytester.path / "golden.json").write_text(json.dumps(golden), encoding="utf-8")
    args = ["--retrieval-golden", "golden.json", "--retrieval-concurrency", "4"]
    args += ["--retrieval-report", "r.json"]
    done, concurrency, pairs = 14, 4, 32
    command = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:asyncio", *args]
    run = subprocess.Popen(
        command,
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HOLD_AFTER": str(done)},
    )
    try:
        # every worker is in a hung call: each had stored its last label before taking it
        # (the test's timeout guards this wait)
        while len(calls(pytester.path)) < done + concurrency and run.poll() is None:
            time.sleep(0.05)
        assert run.poll() is None, "the run ended instead of hanging"
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    assert len(calls(pytester.path)) == done + concurrency
    assert label_rows(pytester.path / ".pytest_cache") == done
    (pytester.path / "calls.txt").unlink()
    rerun = pytester.runpytest_subprocess(*args)
    rerun.assert_outcomes(passed=1)
    assert len(calls(pytester.path)) == pairs - done
    erag = json.loads((pytester.path / "r.json").read_text("utf-8"))["evaluations"][0]["erag"]
    assert (erag["calls"], erag["cache_hits"], erag["failed"]) == (pairs - done, done, 0)
    assert label_rows(pytester.path / ".pytest_cache") == pairs
