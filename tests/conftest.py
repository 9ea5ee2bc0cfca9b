"""Test configuration: pytester, and a ready-made project fixture."""

from __future__ import annotations

import os
from typing import Any

# Import the heavy modules once in this process: pytester's in-process runs restore
# sys.modules afterwards, numpy cannot be imported a second time in one process, and an inner
# run's hypothesis plugin importing hypothesis deep in the stack trips CPython 3.11 ("AST
# constructor recursion depth mismatch", seen on pytest 7.4).
import hypothesis  # noqa: F401
import pytest
from helpers import KEYWORD_RETRIEVER, asyncio_reads_loop_scope, write_golden

# the shared event loop: kept across inner runs, as in one process
import pytest_retrieval._internal.loop
import pytest_retrieval.evaluation
import pytest_retrieval.render.terminal  # noqa: F401

pytest_plugins = ["pytester"]

#: plugins of the dev venv that inner runs leave out (:func:`pytester`)
QUIET_PLUGINS = (
    *("-p", "no:randomly", "-p", "no:asyncio", "-p", "no:langsmith_plugin"),
    *("-p", "no:rerunfailures"),
)
#: and pytest processes the tests start themselves (pre-commit hooks, the docs' commands):
#: langsmith's plugin alone, which nothing here tests (pytester's own runs drop this variable)
os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} -p no:langsmith_plugin"


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> pytest.Pytester:
    """Inner runs without the dev extra's pytest-randomly (it shuffles the output that tests
    match), pytest-asyncio (its config warning changes warning counts), langsmith's plugin
    (langchain-core's dependency: 1.2 s of imports in every pytest process, three a ``-n 2``
    run) and pytest-rerunfailures (beside xdist it opens a listening socket in every session
    and never closes it: an xdist worker of this suite held about 600). test_compat.py runs
    them on purpose, marked ``keep_plugins``."""
    if request.node.get_closest_marker("keep_plugins"):
        # pytest-asyncio's default loop scope said, as pyproject.toml says it, or every inner
        # run warns (a test's own makeini replaces this file); not to a pytest-asyncio before
        # 0.24 (the lowest pytest's), which does not know the key
        if asyncio_reads_loop_scope():
            pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
        return pytester
    for name in ("runpytest_inprocess", "runpytest_subprocess"):
        run = getattr(pytester, name)

        def quiet(*args: Any, _run: Any = run, **kwargs: Any) -> pytest.RunResult:
            quieter = (*QUIET_PLUGINS, *args)
            result: pytest.RunResult = _run(*quieter, **kwargs)
            return result

        monkeypatch.setattr(pytester, name, quiet)
    return pytester


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the keyword retriever and the fruit golden set."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    return pytester
