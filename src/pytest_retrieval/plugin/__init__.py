"""pytest glue: hooks, collection of golden sets into pytest's tree, fixtures.

Everything it decides is delegated to pure modules (golden, evaluation, gate, report) and to
the session controller (:mod:`.session`); those are imported inside hooks, so a pytest run that
uses no retrieval option never imports numpy, pydantic or jsonschema.

A golden set is collected like a test file: ``pytest_collect_file`` turns the configured file
into a :class:`GoldenModule` whose parent is its directory node, so conftest fixtures at every
level that covers the file are visible, node ids are re-runnable and ``-k``/``-m``/xdist work as
for any test. Golden sets named on the command line (and, when pytest was given no paths, those
in ini) are added to pytest's arguments unless a given path already covers them.

Data flow under xdist: each worker runs evaluations and attaches their results to the test
report as JSON text (``report.retrieval``); the controller, which receives every report, is the
only process that prints summaries and writes outputs.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._internal.io import (
    LINKS,
    LinkPolicy,
    cache_outputs,
    overwrite_problem,
    relative,
    set_link_policy,
)
from .._internal.scrub import scrub
from ..errors import ConfigError, OverwriteError
from .controller import Reporter
from .ini_check import check_ini_read
from .options import (  # noqa: F401 - pytest_addoption is a hook found by name
    Settings,
    check_export_name,
    flag,
    pytest_addoption,
    settings_from_config,
)
from .runtest import (
    RESULTS,
    announce_progress,
    check_runs,
    golden_for,
    no_fixture_message,
    run_evaluation,
    run_files,
)
from .session import (
    EXPECTED_KEY,
    MARKER,
    STATE,
    USAGE_KEY,
    SessionState,
    as_test_failure,
    check_compare_to,
    check_item_marker,
    check_tags,
    corpus_check,
    is_worker,
    layered_allowances,
    layered_thresholds,
    usage_errors,
    warn_at_start,
)

if TYPE_CHECKING:
    import warnings

    from ..golden import GoldenSet
    from ..results import EvaluationResult

REPORTER = "retrieval-reporter"
#: the link policy before this session set its own (:func:`~._io.set_link_policy`)
LINK_POLICY = pytest.StashKey[LinkPolicy]()
#: the golden-set test's argument that carries its run file under --retrieval-run
RUN_ARG = "retrieval_run"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(golden=PATH, thresholds={{...}}, metrics=[...], k=N, max_drop={{...}}, "
        "gate=[...]): "
        "settings for the retrieval_eval fixture in this test; golden-set evaluations carry it",
    )
    try:
        with usage_errors():  # every bad setting or file: a usage error now, before any worker
            _configure(config)
    except pytest.UsageError as exc:  # raised before the session: its end never comes
        if not is_worker(config) and not isinstance(exc.__context__, OverwriteError):
            _startup_failed(config, str(exc))
        raise


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> Generator[None, None, None]:
    """A conftest.py that does not import stops pytest before it configures: the outputs
    are written here, from the options parsed so far. When pytest left the ini file unread
    because of one of our options, that is the cause to show (a conftest often needs the
    ini's ``pythonpath``), with the fix."""
    try:
        yield
    except Exception as exc:
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
        raise


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
    for anchor, path in _schedule(config, settings, state):
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


def pytest_unconfigure(config: pytest.Config) -> None:
    if (policy := config.stash.get(LINK_POLICY, None)) is not None:
        set_link_policy(policy.root, policy.allowed, policy.option)
    if (state := config.stash.get(STATE, None)) is not None:
        state.close()
    reporter = config.pluginmanager.get_plugin(REPORTER)
    if reporter is not None:
        reporter.close()
        config.pluginmanager.unregister(reporter)


@pytest.hookimpl(wrapper=True)  # after pytest's header and xdist's workers line
def pytest_sessionstart(session: pytest.Session) -> Generator[None, None, None]:
    if (state := session.config.stash.get(STATE, None)) is not None:
        _last_failed_outside_rootdir(session.config, state.anchors)
    yield
    announce_progress(session.config)  # why --retrieval-progress shows nothing under xdist


def _last_failed_outside_rootdir(config: pytest.Config, anchors: Iterable[Path]) -> None:
    """--lf re-runs the files at rootdir / node id. For a golden set named outside the
    rootdir (:func:`_outside_nodeid`) that is not the file pytest collects (``../``
    unnormalised, or the other side of a link), which it then skipped, failed gate and all.
    Adds the collected files (``anchors``) whose node id failed to the set pytest keeps them
    in (a private one: nothing is done where it is not)."""
    paths = getattr(config.pluginmanager.get_plugin("lfplugin"), "_last_failed_paths", None)
    if not isinstance(paths, set):
        return
    rootpath = config.rootpath
    for anchor in anchors:
        nodeid = _outside_nodeid(anchor, rootpath)
        if nodeid is not None and rootpath / nodeid in paths:
            paths.add(anchor)


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


def _anchor(golden: Path) -> Path:
    """The file pytest collects for a golden set: itself, or for a BEIR folder the qrels file
    of its split (so ``beir`` and ``beir/qrels/test.tsv`` are one golden set, evaluated once)."""
    if not golden.is_dir():
        return golden
    from ..golden import default_qrels

    return default_qrels(golden) or golden / "queries.jsonl"


def _schedule(
    config: pytest.Config, settings: Settings, state: SessionState
) -> list[tuple[Path, Path]]:
    """The golden sets this run evaluates, adding to pytest's path arguments those that none
    covers. Named with --retrieval-golden, or with --retrieval-only: always. From ini: only
    when pytest was given no paths, so ``pytest tests/unit/test_x.py`` does not build the index
    and evaluate. Returns (anchor file, golden set path) pairs."""
    if settings.only and not settings.goldens:
        raise ConfigError(
            "--retrieval-only: no golden set is configured; pass --retrieval-golden PATH or set "
            "retrieval_golden in the [pytest] ini section"
        )
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    if settings.only and not explicit:
        config.args[:] = []  # collect the golden sets and nothing else
    here = config.invocation_params.dir
    given = [_spelled(here / arg.split("::")[0]) for arg in config.args]
    named = {Path(p).resolve() for p in config.getoption("retrieval_golden") or []}
    chosen: list[tuple[Path, Path]] = []
    anchors: dict[Path, Path] = {}
    detours: list[tuple[list[Path], int]] = []
    for golden in settings.goldens:  # the same golden set twice (any spelling): once
        anchors.setdefault(_anchor(golden).resolve(), golden)
    for real, golden in anchors.items():
        spelled = _spelled(_anchor(golden))
        covered = _covered(spelled, real, given)
        detour = None if covered is None or covered[0] == covered[1] else _detour(*covered, config)
        if detour is not None and hasattr(pytest, "Dir"):  # pytest 8+: its walk asks the hook
            detours.append(detour)
        elif detour is not None:  # pytest 7: collected as a path argument of its own
            covered = (spelled, spelled) if spelled in given else None
        if covered is not None:  # collected as pytest spells it from the paths given
            chosen.append((covered[0], golden))
        elif golden.resolve() in named or not explicit or settings.only:
            config.args.append(str(spelled))
            given.append(spelled)
            chosen.append((spelled, golden))
    for way, first in detours:  # opened once every way is known (the hook reads them)
        state.detour.update(way)
        state.skipped.update(way[first:-1])
    return chosen


def _covered(spelled: Path, real: Path, given: list[Path]) -> tuple[Path, Path] | None:
    """The golden set's file as pytest will spell it when it collects one of the ``given``
    paths, and that path (None: none holds it): as configured, or through a link (a linked
    folder, or a link to the file) when a given path leads to its real location."""
    for path in given:  # a folder first: pytest 8+ drops a path argument inside another one
        if path in spelled.parents:
            return spelled, path
    if spelled in given:
        return spelled, spelled
    for path in given:
        target = path.resolve()
        if target == real or target in real.parents:
            return path / real.relative_to(target), path
    return None


def _detour(file: Path, top: Path, config: pytest.Config) -> tuple[list[Path], int] | None:
    """The way from the folder ``top`` down to ``file`` and the index of the first step of
    it that pytest's walk skips; None when the walk reaches ``file``. pytest 8+ skips what
    its ``pytest_ignore_collect`` says (``--ignore``, ``--ignore-glob``, a conftest's
    ``collect_ignore``, virtualenvs, ``norecursedirs``: dot folders, ``build``...); a golden
    set there was silently not evaluated."""
    way = [*reversed(list(itertools.takewhile(lambda p: p != top, file.parents))), file]
    skips = (
        (lambda path: config.hook.pytest_ignore_collect(collection_path=path, config=config))
        if hasattr(pytest, "Dir")
        else (lambda path: _skipped_by_pytest_7(path, path != file, config))
    )
    return next(((way, index) for index, path in enumerate(way) if skips(path)), None)


def _skipped_by_pytest_7(path: Path, folder: bool, config: pytest.Config) -> bool:
    """pytest 7's tests, but a conftest's ``collect_ignore``: its hook imports the conftest
    files on the way, too early (a broken one was an INTERNALERROR, not a collection error)."""
    import fnmatch

    from _pytest import main as pytest_main
    from _pytest.pathlib import fnmatch_ex

    if path in {Path(os.path.abspath(p)) for p in config.getoption("ignore") or []}:
        return True
    globs = config.getoption("ignore_glob") or []
    if any(fnmatch.fnmatch(str(path), os.path.abspath(glob)) for glob in globs):
        return True
    if not folder:
        return False
    in_venv: Callable[[Path], bool] = getattr(pytest_main, "_in_venv", lambda _: False)
    patterns = config.getini("norecursedirs")
    return (
        (not config.getoption("collect_in_virtualenv") and in_venv(path))
        or path.name == "__pycache__"
        or any(fnmatch_ex(pattern, path) for pattern in patterns)
    )


@pytest.hookimpl(tryfirst=True)
def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Open the way to a golden set in a folder pytest's walk skips (:func:`_detour`), and
    only that way: the rest of such a folder stays out (a ``build`` copy of the tests, a
    virtualenv)."""
    state = config.stash.get(STATE, None)
    if state is None or not state.detour:
        return None
    if collection_path in state.detour:
        return False
    return True if collection_path.parent in state.skipped else None


def _spelled(path: Path) -> Path:
    """``path`` as pytest spells the files it collects: absolute, not resolved. A golden.json
    that links to golden_v3.json (or to a shared checkout outside the rootdir) is collected
    once, under the name the user gave, not again under its target's."""
    return Path(os.path.abspath(path))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> GoldenModule | None:
    state = parent.config.stash.get(STATE, None)
    if state is None or not any(a.name == file_path.name for a in state.anchors):
        return None  # cheap for the many files that are not golden sets
    golden_path = state.anchors.get(file_path)
    if golden_path is None:
        return None
    module: GoldenModule = GoldenModule.from_parent(
        parent, path=file_path, nodeid=_outside_nodeid(file_path, parent.config.rootpath)
    )
    module.golden_path = golden_path
    module.add_marker(MARKER)
    return module


def _outside_nodeid(path: Path, rootpath: Path) -> str | None:
    """A node id for a golden set named by a path outside the rootdir: its path from the
    rootdir as named (``../shared/golden.json``, a link in it kept), or, when the path leads
    into the rootdir through a link (a checkout reached by a link, macOS's /tmp), its place
    there. pytest names a file outside the rootdir that was given as an argument by its path
    from that argument, which is empty: two such golden sets were both ``::retrieval``, and
    one result hid the other. None: pytest's own (under the rootdir)."""
    if path.is_relative_to(rootpath):
        return None
    real, root = path.parent.resolve() / path.name, rootpath.resolve()
    if real.is_relative_to(root):
        return real.relative_to(root).as_posix()
    return Path(relative(path, rootpath)).as_posix()


class GoldenModule(pytest.Module):
    """A golden set shown as a test module: one ``retrieval`` test, parametrized like the
    retriever fixture, so fixture scoping, params, -k, -x and xdist work as for any test."""

    golden_path: Path

    def _getobj(self) -> Any:
        import types

        from .split import parts

        module = types.ModuleType(f"retrieval_golden_{self.path.stem}")
        module.__file__ = str(self.path)
        state = self.config.stash[STATE]
        runs = run_files(self.config, state)
        module.retrieval = _evaluation_function(  # type: ignore[attr-defined]
            RUN_ARG if runs else state.settings.fixture,
            self.golden_path,
            # a CI shard is one part already: under -n its evaluations are spread whole; a
            # run file has no retrieval to spread (a split would only add the merge)
            split=state.settings.shard is None
            and not runs
            and bool(parts(self.config, state, self.golden_path)),
        )
        if runs:  # one evaluation per run file instead of the retriever fixture's
            module.retrieval.pytestmark = [
                pytest.mark.parametrize(RUN_ARG, runs, ids=[run.name for run in runs])
            ]
        return module

    def funcnamefilter(self, name: str) -> bool:
        return name == "retrieval"

    def classnamefilter(self, name: str) -> bool:
        return False


def _evaluation_function(
    fixture: str, golden_path: Path, split: bool = False
) -> Callable[..., None]:
    """The test body, with a signature naming the configured retriever fixture, or under
    --retrieval-run :data:`RUN_ARG` (and, for a golden set split across xdist workers, its
    part: :mod:`.split`)."""
    from .split import PART_ARG, run_part

    def retrieval(**fixtures: Any) -> None:
        request: pytest.FixtureRequest = fixtures["request"]
        state = request.config.stash[STATE]
        with as_test_failure():
            golden = state.golden(golden_path)
            chosen = layered_thresholds(state.settings, golden)
            if split:  # one part: merged with the others and decided on the controller
                run_part(request, fixtures[fixture], golden_path, chosen, state, fixtures[PART_ARG])
                return
            if state.settings.shard is not None:  # a part: `combine` gates the whole
                from .shard import run_shard

                result = run_shard(request, fixtures[fixture], golden, chosen, state)
            else:
                result = run_evaluation(request, fixtures[fixture], golden, chosen, state)
        if not result.verdict.passed:
            from ..render.terminal import failure_text

            verbose = request.config.getoption("verbose") > 0
            kept_in = request.config.stash[STATE].settings.errors_kept_in
            pytest.fail(failure_text(result, verbose=verbose, kept_in=kept_in), pytrace=False)

    retrieval.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for name in ("request", fixture, *([PART_ARG] if split else []))
        ]
    )
    return retrieval


@pytest.hookimpl(trylast=True)  # after the retriever fixture's params: retrieval[bm25-part1/2]
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.definition.parent
    if not isinstance(module, GoldenModule):
        return
    from .split import PART_ARG, parametrize

    if PART_ARG in metafunc.fixturenames:
        parametrize(metafunc, metafunc.config.stash[STATE], module.golden_path)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Before -k/-m/--lf filter the items: note each golden set's evaluations (a run is
    partial for a set when one of them then does not run), check retrieval markers, and
    with --retrieval-only deselect everything else."""
    state = config.stash[STATE]
    worker = is_worker(config)
    # golden items' positions in declaration order (pytest-randomly shuffled them): A/B reference
    order = {item.nodeid: index for index, item in enumerate(items)}
    golden = [item for item in items if isinstance(item.parent, GoldenModule)]
    rank = {path: index for index, path in enumerate(state.anchors.values())}
    declared = sorted(golden, key=lambda item: _declared(item, rank))
    order.update(
        zip([i.nodeid for i in declared], sorted(order[i.nodeid] for i in golden), strict=True)
    )
    state.order.update(order)
    for item in items:
        if isinstance(item.parent, GoldenModule):
            state.expected.setdefault(item.parent.golden_path, set()).add(item.nodeid)
        elif worker:  # a usage error raised on an xdist worker crashes it: the controller says
            try:
                check_item_marker(item, state)
            except ConfigError as exc:
                state.usage.append(str(exc))
        else:
            with usage_errors(state):
                check_item_marker(item, state)
    if state.settings.compare_to is not None and not is_worker(config):
        from .split import retriever_param_id

        with usage_errors(state):  # before any evaluation runs (under xdist: at session end)
            check_compare_to(  # the parts -n lists under --collect-only: their retrievers'
                state.settings.compare_to,
                {
                    retriever_param_id(item)
                    for item in items
                    if isinstance(item.parent, GoldenModule)
                }
                - {""},
            )
    if worker:  # the controller decides partial runs from what workers collected
        config.workeroutput[EXPECTED_KEY] = {  # type: ignore[attr-defined]
            str(path): sorted(ids) for path, ids in state.expected.items()
        }
        config.workeroutput[USAGE_KEY] = list(state.usage)  # type: ignore[attr-defined]
        if state.anchors:  # a golden set may be split (the split's code: only then)
            from .split import PARTS_KEY, part_items

            config.workeroutput[PARTS_KEY] = part_items(items)  # type: ignore[attr-defined]
        if state.usage:  # as without -n, a usage error runs nothing (every worker sees it)
            config.hook.pytest_deselected(items=list(items))
            items[:] = []
    if state.settings.only:
        others = [item for item in items if not isinstance(item.parent, GoldenModule)]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if isinstance(item.parent, GoldenModule)]


def _declared(item: pytest.Item, rank: Mapping[Path, int]) -> tuple[int, tuple[int, ...], str]:
    """A golden-set item's place in declaration order: its golden set's (as configured), then
    its parameters' (the retriever fixture's params, the run files), the same on every worker."""
    module = item.parent
    assert isinstance(module, GoldenModule)
    spec = getattr(item, "callspec", None)
    indices = tuple(spec.indices.values()) if spec is not None else ()
    return rank.get(module.golden_path, len(rank)), indices, item.nodeid


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
    if not isinstance(item.parent, GoldenModule):
        return (yield)
    from .._internal.scrub import scrubbed_log_records

    with scrubbed_log_records():
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_warning_recorded(warning_message: warnings.WarningMessage) -> None:
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "setup":  # a new attempt (pytest-rerunfailures): only its results count
        item.stash[RESULTS] = []
        item.user_properties[:] = [
            p for p in item.user_properties if not str(p[0]).startswith("retrieval.")
        ]
    results = item.stash.get(RESULTS, [])
    if call.when == "call" and results:
        if is_worker(item.config):  # xdist ships reports to the controller
            from ..results import to_wire

            report.retrieval = list(map(to_wire, results))  # type: ignore[attr-defined]
            report.retrieval_order = item.config.stash[STATE].order.get(  # type: ignore[attr-defined]
                item.nodeid
            )
        else:  # same process: hand over the objects, no round trip through dicts
            report.retrieval_results = results  # type: ignore[attr-defined]
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
    return report


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


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def retrieval_golden(request: pytest.FixtureRequest) -> GoldenSet:
    """The golden set named by the test's retrieval marker, or the only configured one."""
    state = request.config.stash[STATE]
    with as_test_failure():
        return golden_for(request, state, None)


@pytest.fixture
def retrieval_eval(request: pytest.FixtureRequest) -> Callable[..., EvaluationResult]:
    """Evaluate any retriever inside your own test::

    result = retrieval_eval(my_search, golden="golden.json")
    assert result.metrics["recall@10"] > 0.8
    result.assert_thresholds({"mrr@5": 0.6})
    """
    state = request.config.stash[STATE]
    marker = request.node.get_closest_marker("retrieval")
    options = dict(marker.kwargs) if marker else {}

    def run(
        retriever: Any,
        golden: str | Path | GoldenSet | None = None,
        *,
        thresholds: Mapping[str, float] | None = None,
        metrics: Iterable[str] = (),
        k: int | None = None,
        retriever_id: str | None = None,
    ) -> EvaluationResult:

        with as_test_failure():
            return _run(
                retriever, golden, thresholds=thresholds, metrics=metrics, k=k, rid=retriever_id
            )

    def _run(
        retriever: Any,
        golden: str | Path | GoldenSet | None,
        *,
        thresholds: Mapping[str, float] | None,
        metrics: Iterable[str],
        k: int | None,
        rid: str | None,
    ) -> EvaluationResult:
        from ..golden import GoldenSet

        chosen = golden if isinstance(golden, GoldenSet) else golden_for(request, state, golden)
        layered = layered_thresholds(
            state.settings, chosen, options.get("thresholds", {}), thresholds
        )
        return run_evaluation(
            request,
            retriever,
            chosen,
            layered,
            state,
            metrics=[*options.get("metrics", ()), *metrics],
            k=k or options.get("k"),
            retriever_id=rid or getattr(retriever, "__name__", None),
            marker=options,
            # the test names its set (a path, its marker's, one it loaded), or took the
            # configured one (golden=None, or the retrieval_golden fixture's: loaded then)
            rerun=_rerun(
                request,
                chosen,
                given=bool(options.get("golden"))
                or (golden is not None and golden is not state.configured_golden(load=False)),
            ),
        )

    return run


def _rerun(request: pytest.FixtureRequest, golden: GoldenSet, *, given: bool) -> str:
    """``pytest`` naming this test: what records its baseline entry. When the test took the
    set ``--retrieval-golden`` configured (not ``given`` by the test or its marker), that
    set is named as an ini value (``-o``): named by the option, it would also be evaluated
    on its own, with a ``retriever`` fixture this test may not see, and re-recorded. One
    from the ini file is found without."""
    import shlex

    node = request.node
    config = request.config
    words = ["pytest", shlex.quote(f"{relative(node.path)}::{node.nodeid.split('::', 1)[-1]}")]
    if not given and config.getoption("retrieval_golden"):
        ini = config.inipath  # pytest reads an ini path relative to the ini file's folder
        base = ini.parent if ini is not None else config.invocation_params.dir
        value = shlex.quote(relative(golden.source, base))
        words += ["-o", shlex.quote(f"retrieval_golden={value}")]
    return " ".join(words)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(STATE, None)
    if state is None or not state.goldens:
        return None
    return [
        f"retrieval: {g.name} ({len(g)} queries, {relative(g.source)})"
        for g in state.goldens.values()
    ]
