"""What a test report carries: an item's evaluations (to the controller, :mod:`.xdist`), and,
for a golden set's test, which runs the user's fixtures, a failure text and captured output
scrubbed of secrets (:mod:`.._internal.scrub`), as pytest's warnings are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .._internal.scrub import scrub
from .collect import GoldenModule
from .runtest import RESULTS, no_fixture_message
from .session import STATE
from .xdist import attach

if TYPE_CHECKING:
    import warnings


def settle(item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
    """``pytest_runtest_makereport``, once pytest made ``report``: a new attempt's evaluations
    start afresh (pytest-rerunfailures: only its results count), the call's report carries
    them, a missing retriever fixture is said with its fix, and a golden set's report is
    scrubbed."""
    if call.when == "setup":
        item.stash[RESULTS] = []
        item.user_properties[:] = [
            p for p in item.user_properties if not str(p[0]).startswith("retrieval.")
        ]
    results = item.stash.get(RESULTS, [])
    if call.when == "call" and results:
        attach(item, report, results)
    if call.when == "teardown" and RESULTS in item.stash:
        # the call's report carries them (the last of its calls: each of pytest's subtests
        # is reported as one, with the evaluations so far); the item is kept till the end
        del item.stash[RESULTS]
    if (
        call.when == "setup"
        and isinstance(item.parent, GoldenModule)
        and call.excinfo is not None
        and call.excinfo.errisinstance(pytest.FixtureLookupError)
    ):
        fixture = item.config.stash[STATE].settings.fixture
        if getattr(call.excinfo.value, "argname", None) == fixture:
            report.longrepr = no_fixture_message(item, fixture, item.parent.golden_path)
    if isinstance(item.parent, GoldenModule):
        _scrub_report(report)


def scrub_warning(warning_message: warnings.WarningMessage) -> None:
    """A warning (a client warning about its request, headers and all) is shown in pytest's
    summary: its text is scrubbed of secrets first, whichever test raised it -- only secrets
    are masked, and a key in a CI log is a leak wherever it came from."""
    text = str(warning_message.message)
    clean = scrub(text)
    if clean != text:
        try:
            warning_message.message = warning_message.category(clean)
        except Exception:  # a warning class that takes other arguments
            warning_message.message = UserWarning(clean)


def _scrub_report(report: pytest.TestReport) -> None:
    """A golden set's test runs the user's fixtures (the retriever's client, made at setup)
    and captures their output and logs: pytest shows and stores those (terminal, JUnit),
    so the traceback and the captured sections are scrubbed of secrets as our own texts are
    (:mod:`._scrub`)."""
    if report.longrepr is not None:
        report.longrepr = _scrubbed(report.longrepr)
    if report.sections:
        report.sections = [(title, scrub(text)) for title, text in report.sections]


def _scrubbed(value: Any, depth: int = 0) -> Any:
    """``value`` (pytest's representation of a failure) with every string in it scrubbed:
    in place for pytest's own objects and lists, anew for strings and tuples."""
    if isinstance(value, str):
        return scrub(value)
    if depth > 10:
        return value
    if isinstance(value, tuple):
        return tuple(_scrubbed(item, depth + 1) for item in value)
    if isinstance(value, list):
        value[:] = [_scrubbed(item, depth + 1) for item in value]
    elif type(value).__module__.startswith("_pytest") and hasattr(value, "__dict__"):
        for name, item in list(vars(value).items()):
            object.__setattr__(value, name, _scrubbed(item, depth + 1))
    return value
