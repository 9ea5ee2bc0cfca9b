"""Issue 12, point 5: when no evaluation could run (a golden set that does not load, a retriever
fixture that raises or is missing, a collection error, a conftest that does not import), the
JSON report, the HTML, the Markdown and the GitHub step summary are still written, fail, and
say what failed and where, in the words the terminal shows."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import KEYWORD_RETRIEVER, write_golden

SCHEMA = Path(__file__).resolve().parents[1] / "src/pytest_retrieval/schema/report.schema.json"
OUTPUTS = (
    "--retrieval-report",
    "out/r.json",
    "--retrieval-html",
    "out/r.html",
    "--retrieval-markdown",
    "out/r.md",
)
BAD_GOLDEN = """{"name": "fruit", "k": 3,
 "queries": [
  {"id": "a", "query": "apple", "relevant": ["d1"]},
  {"id": "b", "query": "pear"}
 ]}
"""


@dataclass
class Written:
    run: pytest.RunResult
    report: dict[str, Any]
    html: str
    markdown: str
    summary: str

    def reasons(self) -> list[tuple[str, str]]:
        return [(r["kind"], r["message"]) for r in self.report["verdict"]["reasons"]]


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> Written:
    summary = pytester.path / "step-summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("--retrieval-golden", "golden.json", *OUTPUTS, *args)
    out = pytester.path / "out"
    for name in ("r.json", "r.html", "r.md"):
        assert (out / name).is_file(), f"{name} not written:\n{result.stdout.str()}"
    report = json.loads((out / "r.json").read_text(encoding="utf-8"))
    jsonschema.validate(report, json.loads(SCHEMA.read_text(encoding="utf-8")))
    written = Written(
        result,
        report,
        (out / "r.html").read_text(encoding="utf-8"),
        (out / "r.md").read_text(encoding="utf-8"),
        summary.read_text(encoding="utf-8"),
    )
    assert report["passed"] is False and report["verdict"]["passed"] is False
    assert report["evaluations"] == []
    assert written.summary == "earlier step\n" + written.markdown + "\n"  # appended
    assert "failed" in written.markdown.splitlines()[0]
    for kind, message in written.reasons():
        # the same words in every output (Markdown and HTML escape some punctuation)
        first = message.splitlines()[0]
        assert first in html.unescape(written.html), first
        assert kind in written.markdown
    return written


def unescaped(markdown: str) -> str:
    """The text of the Markdown: no backslash escapes, no word joiners (they keep GitHub
    from turning file names into links)."""
    return markdown.replace("\\", "").replace("\u2060", "")


def test_a_golden_set_that_does_not_load_still_writes_every_output(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    (pytester.path / "golden.json").write_text(BAD_GOLDEN, encoding="utf-8")
    written = run(pytester, monkeypatch)
    assert written.run.ret == pytest.ExitCode.USAGE_ERROR
    shown = "\n".join(
        line.removeprefix("ERROR: ") for line in written.run.stderr.lines if line.strip()
    )
    assert written.reasons() == [("usage", shown)]  # the terminal's message, word for word
    assert "/queries/1: query 'b' has no 'relevant' doc ids" in shown
    assert 'fix: add "relevant"' in shown
    assert "/queries/1: query 'b' has no 'relevant' doc ids" in unescaped(written.markdown)


def test_a_bad_ini_line_is_a_usage_error_that_still_writes_the_outputs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settings do not resolve, the output paths still do. (A bad command-line value is
    refused by argparse before any plugin runs: nothing can be written then.)"""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    pytester.makeini("[pytest]\nretrieval_thresholds = recall@3=80\n")
    written = run(pytester, monkeypatch)
    assert written.run.ret == pytest.ExitCode.USAGE_ERROR
    assert written.reasons() == [
        (
            "usage",
            "ini option retrieval_thresholds: threshold recall@3 = 80: outside [0, 1]; metrics "
            "are fractions, write e.g. recall@3=0.8 rather than 80",
        )
    ]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["local", "xdist"])
def test_a_retriever_fixture_that_raises_is_named_with_its_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture\ndef retriever():\n"
        "    raise RuntimeError('index not built')\n"
    )
    write_golden(pytester)
    written = run(pytester, monkeypatch, *workers)
    assert written.run.ret == pytest.ExitCode.TESTS_FAILED
    [(kind, message)] = written.reasons()
    assert kind == "no result"
    assert message == (
        "golden.json::retrieval failed at setup before it produced an evaluation: "
        "conftest.py:5: RuntimeError: index not built"
    )
    written.run.stdout.fnmatch_lines(
        [f"no result: {message}", "retrieval verdict: FAILED (1 reason, listed above)"]
    )
    assert "conftest.py:5: RuntimeError: index not built" in unescaped(written.markdown)


def test_a_missing_retriever_fixture_says_where_to_define_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_golden(pytester)
    written = run(pytester, monkeypatch)
    [(kind, message)] = written.reasons()
    assert kind == "no result"
    assert message.startswith(
        "golden.json::retrieval failed at setup before it produced an evaluation: "
        "no fixture named 'retriever': the retrieval evaluation of golden.json calls it"
    )
    assert "fix: define it in a conftest.py that covers this golden set (conftest.py)" in message
    assert "fix: define it in a conftest.py" in unescaped(written.markdown)


def test_a_retriever_that_is_not_callable_is_named_with_the_failure_text(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest("import pytest\n\n@pytest.fixture\ndef retriever():\n    return 42\n")
    write_golden(pytester)
    written = run(pytester, monkeypatch)
    [(kind, message)] = written.reasons()
    assert kind == "no result"
    assert message.startswith("golden.json::retrieval failed before it produced an evaluation: ")
    assert "golden.json: the retriever fixture returned a int, not a callable" in message
    assert "runtest.py" not in message  # pytest.fail(pytrace=False): the text, not our line


def test_a_collection_error_in_a_test_file_still_writes_every_output(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    pytester.makepyfile(test_broken="import no_such_module\n\ndef test_x():\n    pass\n")
    written = run(pytester, monkeypatch, ".")
    assert written.run.ret == pytest.ExitCode.INTERRUPTED
    [(kind, message)] = written.reasons()
    assert kind == "no result"
    assert message == (
        "collection error in test_broken.py (no test ran): "
        "ModuleNotFoundError: No module named 'no_such_module'"
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["local", "xdist"])
def test_a_usage_error_found_at_collection_still_writes_every_output(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    """Under xdist the marker is checked on the workers, where raising a usage error crashed
    the session (INTERNALERROR, no outputs): the workers now run nothing and the controller
    reports it, with the same exit status and words."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    pytester.makepyfile(
        test_marked="import pytest\n\n@pytest.mark.retrieval(colour=1)\ndef test_x():\n    pass\n"
    )
    written = run(pytester, monkeypatch, ".", *workers)
    assert written.run.ret == pytest.ExitCode.USAGE_ERROR
    [(kind, message)] = written.reasons()
    assert kind == "usage"
    assert message.startswith("test_marked.py::test_x: @pytest.mark.retrieval: unknown argument")
    if workers:
        written.run.stdout.fnmatch_lines([f"usage: {message}"])
        assert "INTERNALERROR" not in written.run.stdout.str() + written.run.stderr.str()
    else:
        written.run.stderr.fnmatch_lines([f"ERROR: {message}"])


def test_a_conftest_that_does_not_import_still_writes_every_output(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest("import no_such_module\n")
    write_golden(pytester)
    written = run(pytester, monkeypatch)
    assert written.run.ret == pytest.ExitCode.USAGE_ERROR
    [(kind, message)] = written.reasons()
    assert kind == "usage"
    assert message == (
        "ImportError while loading conftest conftest.py: "
        "ModuleNotFoundError: No module named 'no_such_module'"
    )


def test_a_run_stopped_before_its_evaluation_does_not_pass(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-x stops at a failing unit test collected first: the gate never ran, so no output
    may say it passed."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    pytester.makepyfile(test_a_first="def test_x():\n    assert False\n")
    written = run(pytester, monkeypatch, "test_a_first.py", "-x")
    assert written.run.ret == pytest.ExitCode.TESTS_FAILED
    [(kind, message)] = written.reasons()
    assert kind == "no result"
    assert message == (
        "1 golden-set evaluation did not run (golden.json::retrieval): the session stopped "
        "early (stopping after 1 failures)"
    )
    # the terminal lists the reason its verdict line points to ("1 reason, listed above")
    written.run.stdout.fnmatch_lines([f"no result: {message}", "*1 reason, listed above*"])


def test_only_unit_tests_selected_writes_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Golden sets from ini are not scheduled for ``pytest tests/test_x.py``: nothing of ours
    ran and nothing failed, so no output is written (as before)."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    pytester.makeini("[pytest]\nretrieval_golden = golden.json\n")
    pytester.makepyfile(test_unit="def test_x():\n    pass\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary.md"))
    result = pytester.runpytest("test_unit.py", *OUTPUTS)
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "out").exists()
    assert not (pytester.path / "summary.md").exists()
