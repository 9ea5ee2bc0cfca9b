"""pytest glue: hooks, collection of golden sets into pytest's tree, fixtures.

Everything it decides is delegated to pure modules (golden, evaluation, gate, report) and to
the session controller (:mod:`.session`); those are imported inside hooks, so a pytest run that
uses no retrieval option never imports numpy, pydantic or jsonschema.

A golden set is collected like a test file: ``pytest_collect_file`` turns the configured file
into a :class:`GoldenModule` whose parent is its directory node, so conftest fixtures at every
level that covers the file are visible, node ids are re-runnable and ``-k``/``-m``/xdist work as
for any test. Golden sets named on the command line (and, when pytest was given no paths, those
in ini) are added to pytest's arguments unless a given path already covers them.

Data flow under xdist: each worker runs evaluations and attaches their JSON-able results to
the test report (``report.retrieval``); the controller, which receives every report, is the
only process that prints summaries and writes outputs.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .options import (  # noqa: F401 - pytest_addoption is a hook found by name
    Settings,
    pytest_addoption,
    settings_from_config,
)
from .session import (
    EXPECTED_KEY,
    Reporter,
    SessionState,
    check_marker,
    check_tags,
    corpus_check,
    ini_thresholds,
    is_worker,
    layered_allowances,
    layered_thresholds,
    load,
)

if TYPE_CHECKING:
    from .evaluation import EvaluationResult
    from .gate import Threshold
    from .golden import GoldenSet


STATE = pytest.StashKey[SessionState]()
REPORTER = "retrieval-reporter"
RESULTS = pytest.StashKey[list["EvaluationResult"]]()
MARKER = "retrieval"
MARKER_KEYS = {"golden", "thresholds", "metrics", "k", "max_drop"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(golden=PATH, thresholds={{...}}, metrics=[...], k=N, max_drop={{...}}): "
        "settings for the retrieval_eval fixture in this test; golden-set evaluations carry it",
    )
    settings = settings_from_config(config)
    state = SessionState(settings)
    config.stash[STATE] = state
    if settings.ini_thresholds:
        ini_thresholds(settings)  # fail fast on a bad ini line
    for anchor, path in _schedule(config, settings):  # usage errors now, before any worker
        state.anchors[anchor] = path
        golden = state.golden(path)
        problem = None if is_worker(config) else corpus_check(golden, settings)
        if problem is not None:
            config.issue_config_time_warning(pytest.PytestWarning(problem), stacklevel=2)
        check_tags(layered_thresholds(settings, golden), golden, "")
        layered_allowances(settings, golden)
        if settings.update is None:
            state.baseline_entries(state.baseline_path(golden))
    state.judge(config)  # missing credentials: a usage error now, not a failure per evaluation
    if not is_worker(config):
        config.pluginmanager.register(Reporter(config, state), REPORTER)


def pytest_unconfigure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin(REPORTER)
    if reporter is not None:
        config.pluginmanager.unregister(reporter)


def _anchor(golden: Path) -> Path:
    """The file pytest collects for a golden set: itself, or for a BEIR folder the qrels file
    of its split (so ``beir`` and ``beir/qrels/test.tsv`` are one golden set, evaluated once)."""
    if not golden.is_dir():
        return golden
    from .golden import default_qrels

    return default_qrels(golden) or golden / "queries.jsonl"


def _schedule(config: pytest.Config, settings: Settings) -> list[tuple[Path, Path]]:
    """The golden sets this run evaluates, adding to pytest's path arguments those that none
    covers. Named with --retrieval-golden, or with --retrieval-only: always. From ini: only
    when pytest was given no paths, so ``pytest tests/unit/test_x.py`` does not build the index
    and evaluate. Returns (anchor file, golden set path) pairs."""
    if settings.only and not settings.goldens:
        raise pytest.UsageError(
            "--retrieval-only: no golden set is configured; pass --retrieval-golden PATH or set "
            "retrieval_golden in the [pytest] ini section"
        )
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    if settings.only and not explicit:
        config.args[:] = []  # collect the golden sets and nothing else
    here = config.invocation_params.dir
    given = [(here / arg.split("::")[0]).resolve() for arg in config.args]
    named = {Path(p).resolve() for p in config.getoption("retrieval_golden") or []}
    chosen: list[tuple[Path, Path]] = []
    anchors: dict[Path, Path] = {}
    for golden in settings.goldens:  # the same golden set twice (any spelling): once
        anchors.setdefault(_anchor(golden).resolve(), golden)
    for anchor, golden in anchors.items():
        if any(p == anchor or p in anchor.parents for p in given):
            chosen.append((anchor, golden))
        elif golden.resolve() in named or not explicit or settings.only:
            config.args.append(str(anchor))
            given.append(anchor)
            chosen.append((anchor, golden))
    return chosen


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> GoldenModule | None:
    state = parent.config.stash.get(STATE, None)
    if state is None or not any(a.name == file_path.name for a in state.anchors):
        return None  # cheap for the many files that are not golden sets: no resolve()
    golden_path = state.anchors.get(file_path.resolve())
    if golden_path is None:
        return None
    module: GoldenModule = GoldenModule.from_parent(parent, path=file_path)
    module.golden_path = golden_path
    module.add_marker(MARKER)
    return module


class GoldenModule(pytest.Module):
    """A golden set shown as a test module: one ``retrieval`` test, parametrized like the
    retriever fixture, so fixture scoping, params, -k, -x and xdist work as for any test."""

    golden_path: Path

    def _getobj(self) -> Any:
        import types

        module = types.ModuleType(f"retrieval_golden_{self.path.stem}")
        module.__file__ = str(self.path)
        module.retrieval = _evaluation_function(  # type: ignore[attr-defined]
            self.config.stash[STATE].settings.fixture, self.golden_path
        )
        return module

    def funcnamefilter(self, name: str) -> bool:
        return name == "retrieval"

    def classnamefilter(self, name: str) -> bool:
        return False


def _evaluation_function(fixture: str, golden_path: Path) -> Callable[..., None]:
    """The test body, with a signature naming the configured retriever fixture."""

    def retrieval(**fixtures: Any) -> None:
        request: pytest.FixtureRequest = fixtures["request"]
        state = request.config.stash[STATE]
        golden = state.golden(golden_path)
        chosen = layered_thresholds(state.settings, golden)
        result = _run(request, fixtures[fixture], golden, chosen, state)
        if not result.passed or result.regressed:
            from .report import failure_text

            verbose = request.config.getoption("verbose") > 0
            pytest.fail(failure_text(result, result.gate(), verbose=verbose), pytrace=False)

    retrieval.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for name in ("request", fixture)
        ]
    )
    return retrieval


def _retriever_id(request: pytest.FixtureRequest, default: str) -> str:
    callspec = getattr(request.node, "callspec", None)
    return str(callspec.id) if callspec is not None and callspec.id else default


def _run(
    request: pytest.FixtureRequest,
    retriever: Any,
    golden: GoldenSet,
    chosen_thresholds: list[Threshold],
    state: SessionState,
    *,
    metrics: Iterable[str] = (),
    k: int | None = None,
    retriever_id: str | None = None,
    marker: Mapping[str, Any] | None = None,
) -> EvaluationResult:
    from .evaluation import evaluate
    from .gate import ThresholdError

    settings = state.settings
    chosen_id = retriever_id or _retriever_id(request, settings.fixture)
    printer = _progress_printer(request.config, f"{golden.name} [{chosen_id}]")
    judge = state.judge()
    downstream = _downstream(request, state)
    corpus = _corpus(request, golden, state, texts_needed=bool(judge or downstream))
    problem: str | None = None
    try:
        result = evaluate(
            retriever,
            golden,
            metrics=[*settings.metrics, *metrics],
            thresholds=chosen_thresholds,
            k=k or settings.k,
            concurrency=settings.concurrency,
            timeout=settings.timeout,
            retriever_id=chosen_id,
            progress=None if printer is None else printer.queries,
            judge=judge,
            corpus=corpus,
            judge_progress=None if printer is None or judge is None else printer.judge_of(judge),
            downstream=downstream,
            doc_id_key=settings.doc_id_key,
        )
        result.gate()  # a tag threshold naming an unknown tag fails here, clearly
    except (TypeError, ThresholdError) as exc:
        problem = f"{golden.source}: {exc}"
    if problem is not None:  # outside the except block: no "During handling of..." chain
        pytest.fail(problem, pytrace=False)
    _attach_baseline(result, golden, state, (marker or {}).get("max_drop"))
    results = request.node.stash.setdefault(RESULTS, [])
    results.append(result)
    _record_properties(request.node, result, len(results))
    return result


def _downstream(request: pytest.FixtureRequest, state: SessionState) -> Any:
    """The user's ``retrieval_downstream`` fixture wrapped for concurrency and caching."""
    try:
        fn = request.getfixturevalue("retrieval_downstream")
    except pytest.FixtureLookupError:
        return None
    from .downstream import DownstreamRunner

    try:
        return DownstreamRunner(
            fn, concurrency=state.settings.concurrency, cache_dir=state.label_cache(request.config)
        )
    except TypeError as exc:
        pytest.fail(str(exc), pytrace=False)


def _corpus(
    request: pytest.FixtureRequest, golden: GoldenSet, state: SessionState, texts_needed: bool
) -> Mapping[str, str] | None:
    """Doc texts: a ``retrieval_corpus`` fixture (checked against the golden set whenever it
    exists), else, when the judge or eRAG needs texts, the golden set's own corpus (its
    ``"corpus"`` path, or ``corpus.jsonl`` in a BEIR folder)."""
    try:
        corpus: Mapping[str, str] = request.getfixturevalue("retrieval_corpus")
    except pytest.FixtureLookupError:
        pass
    else:
        _check_fixture_corpus(golden, corpus, state)
        return corpus
    if golden.corpus is None or not texts_needed:
        return None
    if golden.corpus not in state.corpora:
        from .golden import GoldenError, load_corpus

        try:
            state.corpora[golden.corpus] = load_corpus(golden.corpus)
        except GoldenError as exc:
            pytest.fail(str(exc), pytrace=False)
    return state.corpora[golden.corpus]


def _check_fixture_corpus(
    golden: GoldenSet, corpus: Mapping[str, str], state: SessionState
) -> None:
    """Relevant ids the ``retrieval_corpus`` fixture lacks: a warning, or with
    --retrieval-strict a failure (the fixture exists only at run time)."""
    import warnings

    from .golden import corpus_problem

    problem = corpus_problem(golden, corpus.keys(), "of the retrieval_corpus fixture")
    if problem is not None and state.settings.strict:
        pytest.fail(f"{problem} (--retrieval-strict)", pytrace=False)
    if problem is not None:
        warnings.warn(pytest.PytestWarning(str(problem)), stacklevel=1)


def _record_properties(node: pytest.Item, result: EvaluationResult, nth: int) -> None:
    """Metrics as JUnit ``<property>`` elements (``--junitxml``), like ``record_property``;
    ``user_properties`` travel with the report, so this works under xdist too."""
    prefix = "retrieval." if nth == 1 else f"retrieval.{nth}."
    properties: list[tuple[str, object]] = [
        (prefix + "golden", result.golden_name),
        (prefix + "retriever", result.retriever_id),
        (prefix + "queries", len(result.queries)),
    ]
    properties += [(prefix + name, round(value, 6)) for name, value in result.metrics.items()]
    for change in result.comparison.changes if result.comparison else []:
        properties.append((f"{prefix}{change.metric}.baseline", round(change.baseline, 6)))
        properties.append((f"{prefix}{change.metric}.verdict", change.verdict))
    if result.latency_p95_ms == result.latency_p95_ms:  # NaN when no call answered
        properties.append((prefix + "latency_p95_ms", round(result.latency_p95_ms, 3)))
    properties.append((prefix + "passed", result.passed and not result.regressed))
    node.user_properties.extend(properties)


def _progress_printer(config: pytest.Config, label: str) -> _Progress | None:
    """Live progress for this evaluation, or None (``--retrieval-progress off``, an xdist
    worker whose output nobody sees, or no terminal reporter)."""
    mode = config.stash[STATE].settings.progress
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if mode == "off" or is_worker(config) or reporter is None:
        return None
    return _Progress(
        config, reporter, label, live=_isatty(reporter) if mode == "auto" else mode == "live"
    )


class _Progress:
    """Writes progress past pytest's output capturing, on lines of its own."""

    def __init__(self, config: pytest.Config, reporter: Any, label: str, live: bool) -> None:
        from .progress import ProgressPrinter

        self.reporter = reporter
        self.capture = config.pluginmanager.get_plugin("capturemanager")
        self.printer = ProgressPrinter(label, self._write, live=live)
        self.started = False

    def _write(self, text: str) -> None:
        from contextlib import nullcontext

        suspended = self.capture.global_and_fixture_disabled() if self.capture else nullcontext()
        with suspended:
            if not self.started:
                self.reporter.ensure_newline()
                self.started = True
            self.reporter.write(text, flush=True)

    def queries(self, done: int, total: int) -> None:
        self.printer.update("queries", done, total)

    def judge_of(self, judge: Any) -> Callable[[int, int], None]:
        """Progress of the judge phase, with its calls and cache hits so far."""

        def report(done: int, total: int) -> None:
            counts = judge.counts
            detail = f"{counts['calls']} calls, {counts['cache_hits']} cache hits"
            self.printer.update("judge", done, total, detail)

        return report


def _attach_baseline(
    result: EvaluationResult,
    golden: GoldenSet,
    state: SessionState,
    marker_drops: Mapping[str, object] | None,
) -> None:
    """Compare with the stored baseline (unless this run records one)."""
    from .baseline import entry_key
    from .compare import compare_to_baseline, power_table

    path = state.baseline_path(golden)
    result.baseline_path = str(path)
    allowed = layered_allowances(state.settings, golden, marker_drops)
    entry = None
    if state.settings.update is not None:
        result.baseline_note = "recording"
    else:
        entry = state.baseline_entries(path).get(entry_key(golden.name, result.retriever_id))
        result.baseline_note = "missing" if entry is None else ""
        if entry is not None and golden.sampled_from is not None:  # the rest is not "removed"
            ids = golden.query_fingerprints
            entry = replace(entry, queries={q: v for q, v in entry.queries.items() if q in ids})
    if entry is not None:
        result.comparison = compare_to_baseline(
            result,
            entry,
            allowed,
            alpha=state.settings.alpha,
            reference=f"baseline {os.path.relpath(path)}",
        )
    result.power = power_table(result, allowed, state.settings.alpha)
    if entry is None or result.comparison is None:
        return
    if result.comparison.stale:
        import warnings

        warnings.warn(
            pytest.PytestWarning(
                f"stale retrieval baseline {path} for {entry.key}: {result.comparison.stale}; "
                "refresh it with --retrieval-update-baseline"
            ),
            stacklevel=1,
        )


def _isatty(reporter: Any) -> bool:
    """``TerminalReporter.isatty``: a method since pytest 9, a bool attribute before."""
    value = reporter.isatty
    return bool(value() if callable(value) else value)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Before -k/-m/--lf filter the items: note each golden set's evaluations (a run is
    partial for a set when one of them then does not run), check retrieval markers, and
    with --retrieval-only deselect everything else."""
    state = config.stash[STATE]
    for item in items:
        if isinstance(item.parent, GoldenModule):
            state.expected.setdefault(item.parent.golden_path, set()).add(item.nodeid)
        else:
            _check_marker(item, state)
    if is_worker(config):  # the controller decides partial runs from what workers collected
        config.workeroutput[EXPECTED_KEY] = {  # type: ignore[attr-defined]
            str(path): sorted(ids) for path, ids in state.expected.items()
        }
    if state.settings.only:
        others = [item for item in items if not isinstance(item.parent, GoldenModule)]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if isinstance(item.parent, GoldenModule)]


def _check_marker(item: pytest.Item, state: SessionState) -> None:
    """``@pytest.mark.retrieval(...)`` settings, checked before anything runs."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return
    where = f"{item.nodeid}: @pytest.mark.{MARKER}"
    if marker.args:
        raise pytest.UsageError(
            f"{where} takes keyword arguments only ({', '.join(sorted(MARKER_KEYS))})"
        )
    unknown = sorted(set(marker.kwargs) - MARKER_KEYS)
    if unknown:
        raise pytest.UsageError(
            f"{where}: unknown argument {', '.join(unknown)}; use {', '.join(sorted(MARKER_KEYS))}"
        )
    named = marker.kwargs.get("golden")
    golden = None
    if isinstance(named, str | Path):
        path = Path(named) if Path(named).is_absolute() else item.path.parent / named
        if path not in state.goldens:  # loaded once, as the retrieval_golden fixture does
            state.goldens[path] = load(path)
        golden = state.goldens[path]
    elif len(state.goldens) == 1:
        golden = next(iter(state.goldens.values()))
    check_marker(marker.kwargs, where, golden)


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
        if is_worker(item.config):  # xdist ships reports as JSON to the controller
            report.retrieval = [  # type: ignore[attr-defined]
                dict(result.to_dict(), nodeid=item.nodeid) for result in results
            ]
        else:  # same process: hand over the objects, no round trip through dicts
            report.retrieval_results = results  # type: ignore[attr-defined]
    if (
        call.when == "setup"
        and isinstance(item.parent, GoldenModule)
        and call.excinfo is not None
        and call.excinfo.errisinstance(pytest.FixtureLookupError)
    ):
        fixture = item.config.stash[STATE].settings.fixture
        if getattr(call.excinfo.value, "argname", None) == fixture:
            report.longrepr = _no_fixture_message(item, fixture, item.parent.golden_path)
    return report


def _no_fixture_message(item: pytest.Item, fixture: str, golden: Path) -> str:
    """Name the conftest.py files that would cover this golden set: they are where to look."""
    rootpath = item.config.rootpath
    folder = item.path.parent
    folders = [folder, *folder.parents]
    inside = [f for f in folders if f == rootpath or rootpath in f.parents] or [folder]
    places = ", ".join(os.path.relpath(f / "conftest.py") for f in reversed(inside))
    return (
        f"no fixture named {fixture!r}: the retrieval evaluation of {os.path.relpath(golden)} "
        f"calls it for every query.\n"
        f"  fix: define it in a conftest.py that covers this golden set ({places}), e.g.\n\n"
        f"    @pytest.fixture(scope='session')\n"
        f"    def {fixture}():\n"
        f"        return lambda query, k: my_index.search(query, k)  # ranked doc ids\n\n"
        f"  (or name your fixture in the ini option retrieval_fixture)"
    )


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def retrieval_golden(request: pytest.FixtureRequest) -> GoldenSet:
    """The golden set named by the test's retrieval marker, or the only configured one."""
    state = request.config.stash[STATE]
    return _golden_for(request, state, None)


def _golden_for(
    request: pytest.FixtureRequest, state: SessionState, golden: str | Path | None
) -> GoldenSet:
    marker = request.node.get_closest_marker("retrieval")
    chosen = golden or (marker.kwargs.get("golden") if marker else None)
    if chosen is None:
        if len(state.goldens) == 1:
            return next(iter(state.goldens.values()))
        raise pytest.UsageError(
            "no golden set for this test: pass golden=... to retrieval_eval, use "
            "@pytest.mark.retrieval(golden='golden.json'), or give exactly one "
            "--retrieval-golden"
        )
    path = Path(chosen)
    if not path.is_absolute():
        path = Path(str(request.path.parent)) / path
    if path not in state.goldens:
        state.goldens[path] = load(path)
    return state.goldens[path]


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
        from .golden import GoldenSet

        chosen = golden if isinstance(golden, GoldenSet) else _golden_for(request, state, golden)
        layered = layered_thresholds(
            state.settings, chosen, {**options.get("thresholds", {}), **(thresholds or {})}
        )
        return _run(
            request,
            retriever,
            chosen,
            layered,
            state,
            metrics=[*options.get("metrics", ()), *metrics],
            k=k or options.get("k"),
            retriever_id=retriever_id or getattr(retriever, "__name__", None),
            marker=options,
        )

    return run


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(STATE, None)
    if state is None or not state.goldens:
        return None
    return [
        f"retrieval: {g.name} ({len(g)} queries, {os.path.relpath(g.source)})"
        for g in state.goldens.values()
    ]
