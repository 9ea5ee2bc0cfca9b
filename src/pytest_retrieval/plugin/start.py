"""The start and the end of a session: settings read and checked, the outputs checked
against the inputs (no output may overwrite a golden set, run file or baseline), the golden
sets scheduled (:mod:`.schedule`) and loaded, the controller's reporter registered; and, when
the session stops before it starts (a usage error, a conftest that does not import), the
outputs written all the same, saying why.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from .._internal.io import (
    LINKS,
    LinkPolicy,
    cache_outputs,
    overwrite_problem,
    relative,
    set_link_policy,
)
from ..errors import ConfigError, OverwriteError
from .controller import Reporter
from .ini_check import check_ini_read
from .options import Settings, check_export_name, flag, settings_from_config
from .runtest import check_runs
from .schedule import schedule
from .session import (
    MARKER,
    STATE,
    SessionState,
    check_tags,
    corpus_check,
    layered_allowances,
    layered_thresholds,
    usage_errors,
    warn_at_start,
)
from .xdist import is_worker

REPORTER = "retrieval-reporter"
#: the link policy before this session set its own (:func:`~.._internal.io.set_link_policy`)
LINK_POLICY = pytest.StashKey[LinkPolicy]()


def configure(config: pytest.Config) -> None:
    """``pytest_configure``: the marker declared, then every bad setting or file a usage
    error now, before any worker starts, with the outputs written saying so."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(golden=PATH, thresholds={{...}}, metrics=[...], k=N, max_drop={{...}}, "
        "gate=[...]): "
        "settings for the retrieval_eval fixture in this test; golden-set evaluations carry it",
    )
    try:
        with usage_errors():
            _configure(config)
    except pytest.UsageError as exc:  # raised before the session: its end never comes
        if not is_worker(config) and not isinstance(exc.__context__, OverwriteError):
            _startup_failed(config, str(exc))
        raise


def conftest_failed(early_config: pytest.Config, exc: Exception) -> None:
    """A conftest.py that does not import stops pytest before it configures: the outputs
    are written here, from the options parsed so far. When pytest left the ini file unread
    because of one of our options, that is the cause to show (a conftest often needs the
    ini's ``pythonpath``), with the fix: raised as the usage error. (Called while ``exc`` is
    handled; the caller raises it again.)"""
    given = early_config.known_args_namespace
    if type(exc).__name__ == "ConftestImportFailure" and not (given.help or given.version):
        path = relative(getattr(exc, "path", "conftest.py"))
        cause = exc.__cause__ or exc
        failure = f"{type(cause).__name__}: {cause}"
        unread = _unread_ini(early_config)
        if unread is not None:
            message = f"{unread} ({path} then failed to import: {failure})"
            _startup_failed(early_config, message, given)
            raise pytest.UsageError(message) from None
        _startup_failed(
            early_config, f"ImportError while loading conftest {path}: {failure}", given
        )


def unconfigure(config: pytest.Config) -> None:
    """The link policy as it was, the state's resources closed, the reporter let go of
    (pytester runs sessions in one process)."""
    if (policy := config.stash.get(LINK_POLICY, None)) is not None:
        set_link_policy(policy.root, policy.allowed, policy.option)
    if (state := config.stash.get(STATE, None)) is not None:
        state.close()
    reporter = config.pluginmanager.get_plugin(REPORTER)
    if reporter is not None:
        reporter.close()
        config.pluginmanager.unregister(reporter)


def _unread_ini(config: pytest.Config) -> str | None:
    """:func:`check_ini_read`'s message, or None; None too when its replay fails here, half
    way through pytest's start-up: the import error is then the one to show."""
    try:
        check_ini_read(config)
    except ConfigError as exc:
        return str(exc)
    except Exception:
        return None
    return None


def _startup_failed(config: pytest.Config, message: str, given: Any = None) -> None:
    """Write the outputs of a session that stops before it starts; an output that cannot be
    written is said on stderr (pytest is about to print the usage error there)."""
    from .controller import startup_failed

    for problem in startup_failed(config, message, given):
        print(f"retrieval: {problem.message}", file=sys.stderr)


def _configure(config: pytest.Config) -> None:
    """Settings read and checked, outputs against inputs, golden sets scheduled, loaded and
    checked, the judge made, and on the controller the run files checked and the reporter
    registered."""
    if not is_worker(config):
        check_ini_read(config)
    config.stash[LINK_POLICY] = replace(LINKS)  # restored at unconfigure (pytester: in-process)
    allowed = "--retrieval-allow-outside-links"
    set_link_policy(config.rootpath, flag(config, "retrieval_allow_outside_links"), allowed)
    settings = settings_from_config(config)
    ini = config.inipath if config.inipath and config.inipath.is_file() else None  # -c /dev/null
    read = [*_inputs(settings), ("the ini file pytest read", ini)]
    records = _baselines(settings) if settings.update is not None else []
    problem = overwrite_problem(_outputs(config, settings), read, records)
    if problem is not None:
        raise OverwriteError(problem)
    state = SessionState(settings)
    config.stash[STATE] = state
    for anchor, path in schedule(config, settings, state):
        state.anchors[anchor] = path
        golden = state.golden(path)
        if golden.corpus is not None:  # named inside the golden set: known only now
            from ..formats import corpus_input

            problem = overwrite_problem(
                _outputs(config, settings), corpus_input(relative(path), golden.corpus), records
            )
            if problem is not None:
                raise OverwriteError(problem)
        problem = None if is_worker(config) else corpus_check(golden, settings)
        if problem is not None:
            warn_at_start(config, problem)
        check_tags(layered_thresholds(settings, golden), golden, "")
        layered_allowances(settings, golden)
        if settings.update is None:
            state.baseline_entries(state.baseline_path(golden))
    state.judge(config)  # missing credentials: now, not a failure per evaluation
    if not is_worker(config):
        check_runs(config, state)  # a bad run file: a usage error before any worker starts
        check_export_name(config, settings)
        config.pluginmanager.register(Reporter(config, state), REPORTER)


def _outputs(config: pytest.Config, settings: Settings) -> list[tuple[str, Path | None]]:
    """What the session writes, named as the user set it."""
    junit = config.getoption("xmlpath", None)
    written: list[tuple[str, Path | None]] = [
        ("--retrieval-report", settings.report),
        ("--retrieval-markdown", settings.markdown),
        ("--retrieval-html", settings.html),
        ("--retrieval-export-run", settings.export_run),
        ("--junitxml", Path(junit) if junit else None),
    ]
    if settings.update is not None:
        written += [("the baseline to record", path) for path in _baselines(settings)]
    if settings.judge is not None and settings.judge.cache_dir is not None:
        written += cache_outputs("the judge cache", settings.judge.cache_dir)
    return written


def _inputs(settings: Settings) -> list[tuple[str, Path | None]]:
    """What the session reads and must not overwrite: golden sets, run files, baselines."""
    read: list[tuple[str, Path | None]] = []
    if settings.goldens:
        from ..formats import golden_inputs

        for golden in settings.goldens:
            read += golden_inputs(golden)
    read += [("the run file", run) for run in settings.runs]
    if settings.update is None:
        read += [("the baseline", path) for path in _baselines(settings)]
    return read


def _baselines(settings: Settings) -> list[Path]:
    """The golden sets' baseline files, each once (golden sets may share one)."""
    if not settings.goldens:
        return []
    from ..baseline import default_path

    return list(dict.fromkeys(settings.baseline or default_path(g) for g in settings.goldens))
