"""Test configuration: pytester, and a ready-made project fixture."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import KEYWORD_RETRIEVER, write_golden

# Import the heavy modules once in this process: pytester's in-process runs restore
# sys.modules afterwards, and numpy cannot be imported a second time in one process.
import pytest_retrieval.evaluation
import pytest_retrieval.report  # noqa: F401

pytest_plugins = ["pytester"]


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """Inner runs keep their collection order: pytest-randomly (a dev dependency, tested on
    purpose in test_compat.py) would otherwise shuffle the output that tests match."""
    for name in ("runpytest_inprocess", "runpytest_subprocess"):
        run = getattr(pytester, name)

        def ordered(*args: Any, _run: Any = run, **kwargs: Any) -> pytest.RunResult:
            if not any("randomly" in str(arg) for arg in args):
                args = ("-p", "no:randomly", *args)
            result: pytest.RunResult = _run(*args, **kwargs)
            return result

        monkeypatch.setattr(pytester, name, ordered)
    return pytester


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the keyword retriever and the fruit golden set."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    return pytester
