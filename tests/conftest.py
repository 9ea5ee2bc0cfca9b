"""Test configuration: pytester, and a ready-made project fixture."""

from __future__ import annotations

import pytest
from helpers import KEYWORD_RETRIEVER, write_golden

# Import the heavy modules once in this process: pytester's in-process runs restore
# sys.modules afterwards, and numpy cannot be imported a second time in one process.
import pytest_retrieval.evaluation
import pytest_retrieval.report  # noqa: F401

pytest_plugins = ["pytester"]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project with the keyword retriever and the fruit golden set."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    return pytester
