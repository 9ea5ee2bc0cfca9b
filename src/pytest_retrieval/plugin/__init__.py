"""pytest's hooks for pytest-retrieval (the entry point ``pytest_retrieval.plugin``): each one
delegates, and pytest finds them here by name, with the fixtures of :mod:`.fixtures`.

Where the work is:

- :mod:`.start`: the start and end of a session (settings, outputs against inputs, golden
  sets scheduled and loaded, the reporter registered; outputs written when it stops first);
- :mod:`.schedule`, :mod:`.paths`: which golden sets run, the way pytest's walk takes to each,
  how pytest spells them, their declaration order (the A/B reference);
- :mod:`.collect`: a golden set as a test module, its items, what they mean for the session;
- :mod:`.runtest`, :mod:`.shard`, :mod:`.split`: one evaluation inside a test, a CI shard's
  part, a golden set split across xdist workers;
- :mod:`.report`: what a test report carries, scrubbed of secrets;
- :mod:`.xdist`: what crosses from a worker to the controller, both ends;
- :mod:`.controller`: the controller, which alone prints, records baselines and writes;
- :mod:`.session`: the per-process state and the checks made before anything runs;
- :mod:`.options`, :mod:`.ini_check`: command-line options and ini keys.

Imports stay light: a pytest run that uses no retrieval option never imports numpy,
pydantic or jsonschema (the modules above import those inside functions).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .._internal.io import relative
from .collect import collect_file, generate_tests, is_golden, note_items
from .fixtures import retrieval_eval, retrieval_golden  # noqa: F401 - found by pytest
from .options import pytest_addoption  # noqa: F401 - a hook, found by name
from .paths import last_failed_outside_rootdir
from .report import scrub_warning, settle
from .runtest import announce_progress
from .schedule import opened
from .session import STATE
from .start import configure, conftest_failed, unconfigure

if TYPE_CHECKING:
    import warnings

    from .collect import GoldenModule


def pytest_configure(config: pytest.Config) -> None:
    configure(config)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    """A conftest.py that does not import: the outputs written all the same
    (:func:`~.start.conftest_failed`)."""
    try:
        yield
    except Exception as exc:
        conftest_failed(early_config, exc)
        raise


def pytest_unconfigure(config: pytest.Config) -> None:
    unconfigure(config)


@pytest.hookimpl(wrapper=True)  # after pytest's header and xdist's workers line
def pytest_sessionstart(session: pytest.Session) -> Generator[None, None, None]:
    if (state := session.config.stash.get(STATE, None)) is not None:
        last_failed_outside_rootdir(session.config, state.anchors)
    yield
    announce_progress(session.config)  # why --retrieval-progress shows nothing under xdist


@pytest.hookimpl(tryfirst=True)
def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Open the way to a golden set in a folder pytest's walk skips, and only that way."""
    return opened(collection_path, config)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> GoldenModule | None:
    return collect_file(file_path, parent)


@pytest.hookimpl(trylast=True)  # after the retriever fixture's params: retrieval[bm25-part1/2]
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    generate_tests(metafunc)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Before -k/-m/--lf filter the items (:func:`~.collect.note_items`)."""
    note_items(config, items)


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_spread(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After pytest's own ordering (fixtures, -k): a split golden set's parts far apart."""
    if config.stash[STATE].anchors:
        from .split import spread

        spread(config, items)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """A golden set's test runs the user's code, whose log records reach the live log and
    ``--log-file`` as they are made: each is scrubbed of secrets when it is made."""
    if not is_golden(item):
        return (yield)
    from .._internal.scrub import scrubbed_log_records

    with scrubbed_log_records():
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_warning_recorded(warning_message: warnings.WarningMessage) -> None:
    scrub_warning(warning_message)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    settle(item, call, report)
    return report


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(STATE, None)
    if state is None or not state.goldens:
        return None
    return [
        f"retrieval: {g.name} ({len(g)} queries, {relative(g.source)})"
        for g in state.goldens.values()
    ]
