"""pytest glue: options, ini keys, marker, fixtures, collection of evaluations, summaries.

The only module that imports pytest. Everything it decides is delegated to the pure modules
(golden, evaluation, gate, report); those are imported inside hooks, so a pytest run that uses
no retrieval option never imports numpy, pydantic or jsonschema.

Data flow under xdist: each worker runs evaluations and attaches their JSON-able results to
the test report (``report.retrieval``); the controller, which receives every report, is the
only process that prints summaries and writes the JSON report.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .options import (  # noqa: F401 - pytest_addoption is a hook found by name
    DEFAULT_FIXTURE,
    JudgeSettings,
    Settings,
    pytest_addoption,
    settings_from_config,
)

if TYPE_CHECKING:
    from .baseline import BaselineEntry
    from .compare import Allowance
    from .evaluation import EvaluationResult
    from .gate import Threshold
    from .golden import GoldenSet


@dataclass
class SessionState:
    """Per-process state in ``config.stash``; never module globals (pytester runs in-process)."""

    settings: Settings
    goldens: dict[Path, GoldenSet] = field(default_factory=dict)
    baselines: dict[Path, dict[str, BaselineEntry]] = field(default_factory=dict)

    corpora: dict[str, dict[str, str]] = field(default_factory=dict)
    _judge: Any = None

    def judge(self) -> Any:
        """This process's LLM judge (None without ``--retrieval-judge``), built once."""
        if self._judge is None and self.settings.judge is not None:
            self._judge = _make_judge(self.settings.judge)
        return self._judge

    def label_cache(self, config: pytest.Config) -> Path | None:
        """Where cached labels live: the judge's cache folder, or pytest's cache dir."""
        judge = self.settings.judge
        if judge is not None:
            return judge.cache_dir
        pytest_cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
        return None if pytest_cache is None else pytest_cache.mkdir("retrieval-labels")

    def baseline_path(self, golden: GoldenSet) -> Path:
        from .baseline import default_path

        return self.settings.baseline or default_path(golden.source)

    def baseline_entries(self, path: Path) -> dict[str, BaselineEntry]:
        """Read once per process; a bad file is a usage error naming it."""
        from .baseline import BaselineError, read

        if path not in self.baselines:
            try:
                self.baselines[path] = read(path)
            except BaselineError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self.baselines[path]


STATE = pytest.StashKey[SessionState]()
REPORTER = "retrieval-reporter"
RESULTS = pytest.StashKey[list["EvaluationResult"]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "retrieval(golden=PATH, thresholds={...}, metrics=[...], k=N): settings for the "
        "retrieval_eval fixture in this test",
    )
    settings = settings_from_config(config)
    state = SessionState(settings)
    config.stash[STATE] = state
    if settings.ini_thresholds:
        _ini_layer(settings)  # fail fast on a bad ini line
    for path in settings.goldens:  # usage errors surface here, before any worker starts
        golden = _load(path, require_relevant=settings.judge is None)
        if settings.sample is not None:
            golden = golden.sample(settings.sample, settings.sample_seed)
        state.goldens[path] = golden
        _thresholds(settings, golden)
        _allowances(settings, golden)
        if settings.update is None:
            state.baseline_entries(state.baseline_path(golden))
    state.judge()  # missing credentials: a usage error now, not a failure per evaluation
    if not _is_worker(config):
        config.pluginmanager.register(Reporter(config), REPORTER)


def pytest_unconfigure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin(REPORTER)
    if reporter is not None:
        config.pluginmanager.unregister(reporter)


def _make_judge(settings: JudgeSettings) -> Any:
    """Build the judge; missing credentials or a bad prompt file are usage errors."""
    from .judge import Judge, JudgeConfig, JudgeConfigError

    try:
        return Judge(
            JudgeConfig(
                model=settings.model,
                base_url=settings.base_url,
                scale=settings.scale,
                min_score=settings.min_score,
                min_coverage=settings.min_coverage,
                concurrency=settings.concurrency,
                timeout=settings.timeout,
                max_retry_wait=settings.max_wait,
                cache_dir=settings.cache_dir,
                use_cache=settings.cache_dir is not None,
                cache_only=settings.cache_only,
                max_calls=settings.max_calls,
                max_tokens_budget=settings.max_tokens,
                prompt_file=settings.prompt_file,
                text_budget_chars=settings.text_budget,
                prices=settings.prices,
            )
        )
    except JudgeConfigError as exc:
        raise pytest.UsageError(f"--retrieval-judge: {exc}") from None


def _load(path: Path, require_relevant: bool = True) -> GoldenSet:
    from .golden import GoldenError, load_golden

    try:
        return load_golden(path, require_relevant=require_relevant)
    except GoldenError as exc:
        raise pytest.UsageError(str(exc)) from None


def _ini_layer(settings: Settings) -> list[Threshold]:
    from .gate import ThresholdError, parse_assignment

    try:
        return [
            parse_assignment(line, "ini retrieval_thresholds") for line in settings.ini_thresholds
        ]
    except ThresholdError as exc:
        raise pytest.UsageError(f"ini option retrieval_thresholds: {exc}") from None


def _allowances(
    settings: Settings, golden: GoldenSet, marker: Mapping[str, object] | None = None
) -> dict[str, Allowance]:
    """Allowed drops: golden file < ini < marker < command line, metric by metric."""
    from .compare import AllowanceError, merge, parse_allowance, parse_assignment

    def layer(pairs: Iterable[tuple[str, object]], source: str) -> list[Allowance]:
        return [parse_allowance(metric, value, source) for metric, value in pairs]

    try:
        file_layer = layer(golden.max_drop.items(), f"{golden.source} max_drop")
    except AllowanceError as exc:
        raise pytest.UsageError(f"golden set {golden.source}, /max_drop: {exc}") from None
    try:
        ini_layer = [parse_assignment(t, "ini retrieval_max_drop") for t in settings.ini_max_drops]
    except AllowanceError as exc:
        raise pytest.UsageError(f"ini option retrieval_max_drop: {exc}") from None
    try:
        marker_layer = layer((marker or {}).items(), "the retrieval marker")
    except AllowanceError as exc:
        raise pytest.UsageError(f"@pytest.mark.retrieval(max_drop=...): {exc}") from None
    cli_layer = [parse_assignment(t, "--retrieval-max-drop") for t in settings.cli_max_drops]
    return merge(file_layer, ini_layer, marker_layer, cli_layer)


def _thresholds(
    settings: Settings, golden: GoldenSet, marker: Mapping[str, object] | None = None
) -> list[Threshold]:
    """golden file < ini < marker < command line, key by key."""
    from .compare import check_golden_gates
    from .gate import from_mapping, merge, parse_assignment
    from .golden import GoldenError

    try:
        check_golden_gates(golden)
    except GoldenError as exc:
        raise pytest.UsageError(str(exc)) from None
    file_layer = from_mapping(golden.thresholds, f"{golden.source} thresholds")
    marker_layer = from_mapping(marker or {}, "the retrieval marker")
    cli_layer = [parse_assignment(t, "--retrieval-threshold") for t in settings.cli_thresholds]
    return merge(file_layer, _ini_layer(settings), marker_layer, cli_layer)


# ---------------------------------------------------------------------------- collection


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
        golden = state.goldens[golden_path]
        thresholds = _thresholds(state.settings, golden)
        result = _run(request, fixtures[fixture], golden, thresholds, state)
        if not result.passed or result.regressed:
            from .report import failure_text

            pytest.fail(failure_text(result, result.gate()), pytrace=False)

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
    thresholds: list[Threshold],
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
    corpus = _corpus(request, golden, state) if judge or downstream else None
    try:
        result = evaluate(
            retriever,
            golden,
            metrics=[*settings.metrics, *metrics],
            thresholds=thresholds,
            k=k or settings.k,
            concurrency=settings.concurrency,
            timeout=settings.timeout,
            retriever_id=chosen_id,
            progress=None if printer is None else printer.queries,
            judge=judge,
            corpus=corpus,
            judge_progress=None if printer is None or judge is None else printer.judge_of(judge),
            downstream=downstream,
        )
        result.gate()  # a tag threshold naming an unknown tag fails here, clearly
    except (TypeError, ThresholdError) as exc:
        pytest.fail(f"{golden.source}: {exc}", pytrace=False)
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
    request: pytest.FixtureRequest, golden: GoldenSet, state: SessionState
) -> Mapping[str, str] | None:
    """Doc texts for the judge: a ``retrieval_corpus`` fixture, else the golden set's corpus
    (its ``"corpus"`` path, or ``corpus.jsonl`` in a BEIR folder)."""
    try:
        corpus: Mapping[str, str] = request.getfixturevalue("retrieval_corpus")
        return corpus
    except pytest.FixtureLookupError:
        pass
    if golden.corpus is None:
        return None
    if golden.corpus not in state.corpora:
        from .golden import GoldenError, load_corpus

        try:
            state.corpora[golden.corpus] = load_corpus(golden.corpus)
        except GoldenError as exc:
            pytest.fail(str(exc), pytrace=False)
    return state.corpora[golden.corpus]


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
    properties.append((prefix + "latency_p95_ms", round(result.latency_p95_ms, 3)))
    properties.append((prefix + "passed", result.passed and not result.regressed))
    node.user_properties.extend(properties)


def _progress_printer(config: pytest.Config, label: str) -> _Progress | None:
    """Live progress for this evaluation, or None (``--retrieval-progress off``, an xdist
    worker whose output nobody sees, or no terminal reporter)."""
    mode = config.stash[STATE].settings.progress
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if mode == "off" or _is_worker(config) or reporter is None:
        return None
    return _Progress(
        config, reporter, label, live=reporter.isatty() if mode == "auto" else mode == "live"
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
            self.reporter._tw.write(text, flush=True)

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
    allowances = _allowances(state.settings, golden, marker_drops)
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
            allowances,
            alpha=state.settings.alpha,
            reference=f"baseline {os.path.relpath(path)}",
        )
    result.power = power_table(result, allowances, state.settings.alpha)
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add one evaluation per golden set before -k/-m/--lf filter the items."""
    state = config.stash[STATE]
    for path in state.settings.goldens:
        module = GoldenModule.from_parent(session, path=path)
        module.golden_path = path
        report = module.ihook.pytest_make_collect_report(collector=module)
        module.ihook.pytest_collectreport(report=report)  # counted and shown like any module
        for node in report.result if report.passed else []:
            if isinstance(node, pytest.Item):
                items.append(node)
                node.ihook.pytest_itemcollected(item=node)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    results = item.stash.get(RESULTS, [])
    if call.when == "call" and results:
        if _is_worker(item.config):  # xdist ships reports as JSON to the controller
            report.retrieval = [  # type: ignore[attr-defined]
                dict(result.to_dict(), nodeid=item.nodeid) for result in results
            ]
        else:  # same process: hand over the objects, no round trip through dicts
            report.retrieval_results = [  # type: ignore[attr-defined]
                (item.nodeid, result) for result in results
            ]
    if (
        call.when == "setup"
        and isinstance(item, pytest.Function)
        and isinstance(item.parent, GoldenModule)
        and call.excinfo is not None
        and call.excinfo.errisinstance(pytest.FixtureLookupError)
    ):
        fixture = item.config.stash[STATE].settings.fixture
        if getattr(call.excinfo.value, "argname", None) == fixture:
            report.longrepr = (
                f"no fixture named {fixture!r}: the retrieval evaluation of "
                f"{item.parent.golden_path} calls it for every query.\n"
                f"  fix: define it in a conftest.py that covers this golden set, e.g.\n\n"
                f"    @pytest.fixture(scope='session')\n"
                f"    def {fixture}():\n"
                f"        return lambda query, k: my_index.search(query, k)  # ranked doc ids\n\n"
                f"  (or name your fixture in the ini option retrieval_fixture)"
            )
    return report


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
        state.goldens[path] = _load(path)
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
        layered = _thresholds(
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


# ---------------------------------------------------------------------------- reporting


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class Reporter:
    """Collects evaluation payloads from test reports (local or from xdist workers) and,
    on the controller only, prints the summary, records baselines, writes the JSON report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.received: list[tuple[str, EvaluationResult | dict[str, Any]]] = []
        self.notes: list[str] = []  # printed at the end of the summary section
        self._results: list[EvaluationResult] | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payloads = getattr(report, "retrieval", None) or []
        self.received.extend((p["nodeid"], p) for p in payloads)
        self.received.extend(getattr(report, "retrieval_results", None) or [])
        if payloads or getattr(report, "retrieval_results", None):
            self._results = None

    def results(self) -> list[EvaluationResult]:
        """Every evaluation of the session, in node id order (stable under xdist)."""
        from .evaluation import EvaluationResult

        if self._results is None:
            ordered = sorted(self.received, key=lambda pair: pair[0])
            self._results = [
                r if isinstance(r, EvaluationResult) else EvaluationResult.from_dict(r)
                for _, r in ordered
            ]
        return self._results

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.received and not self.notes:
            return
        from .report import ab_lines, summary_lines

        state = self.config.stash[STATE]
        results = self.results()
        terminalreporter.section("retrieval")
        for result in results:
            for line in summary_lines(result):
                terminalreporter.write_line(line)
            terminalreporter.write_line("")
        for line in ab_lines(self._groups(results, state)):
            terminalreporter.write_line(line)
        for note in self.notes:
            terminalreporter.write_line(note)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.config.option.collectonly or not self.received:
            return
        state = self.config.stash[STATE]
        if state.settings.update is not None:
            self._update_baselines(session, state)
        self._write_outputs(session, state)
        if state.settings.judge is not None and state.settings.judge.validate is not None:
            self._calibrate(session, state, state.settings.judge.validate)

    def _calibrate(self, session: pytest.Session, state: SessionState, labels: Path) -> None:
        """``--retrieval-judge-validate``: the judge against human labels, in the summary."""
        from .judge.calibration import LabelsError, calibrate

        try:
            calibration = calibrate(state.judge(), labels)
        except LabelsError as exc:
            self.notes.append(f"judge calibration NOT run: {exc}")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        self.notes.append(calibration.line(os.path.relpath(labels)))

    def _write_outputs(self, session: pytest.Session, state: SessionState) -> None:
        """JSON, Markdown (and the GitHub step summary) and HTML, each only when asked for."""
        settings = state.settings
        results = self.results()
        renderers: list[tuple[Path, Callable[[], str]]] = []
        if settings.report is not None:
            from .report import dumps, json_report

            renderers.append((settings.report, lambda: dumps(json_report(results)) + "\n"))
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if settings.markdown is not None or step_summary:
            markdown = self._markdown(results, state)
            if settings.markdown is not None:
                renderers.append((settings.markdown, lambda: markdown))
        if settings.html is not None:
            renderers.append((settings.html, lambda: self._html(results, state)))
        for path, render in renderers:
            target = path if path.is_absolute() else self.config.invocation_params.dir / path
            self._write(session, target, render)
        if step_summary:  # appended, as GitHub expects: other steps write there too
            try:
                with open(step_summary, "a", encoding="utf-8") as handle:
                    handle.write(markdown + "\n")
            except OSError as exc:
                self._output_failed(session, Path(step_summary), exc)

    def _write(self, session: pytest.Session, path: Path, render: Callable[[], str]) -> None:
        from .baseline import atomic_write

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, render())
        except OSError as exc:
            self._output_failed(session, path, exc)

    def _output_failed(self, session: pytest.Session, path: Path, exc: OSError) -> None:
        self.notes.append(
            f"could not write {path}: {exc.strerror or exc}; check the folder exists and is "
            "writable"
        )
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _groups(self, results: list[EvaluationResult], state: SessionState) -> list[Any]:
        from .compare import ab_groups

        return ab_groups(results, state.settings.compare_to, state.settings.alpha)

    def _html(self, results: list[EvaluationResult], state: SessionState) -> str:
        from .baseline import entry_key
        from .html_report import render_html

        baselines = {}
        for index, result in enumerate(results):
            if result.baseline_path is None or state.settings.update is not None:
                continue
            entries = state.baseline_entries(Path(result.baseline_path))
            entry = entries.get(entry_key(result.golden_name, result.retriever_id))
            if entry is not None:
                baselines[index] = entry
        return render_html(results, self._groups(results, state), baselines)

    def _markdown(self, results: list[EvaluationResult], state: SessionState) -> str:
        from .markdown import render_markdown

        return render_markdown(results, self._groups(results, state))

    def _partial(self, results: list[EvaluationResult], state: SessionState) -> list[str]:
        """Why this run cannot stand for the whole golden set (empty when it can)."""
        option = self.config.option
        reasons = [
            flag
            for flag, used in [
                ("-k", getattr(option, "keyword", "")),
                ("-m", getattr(option, "markexpr", "")),
                ("--lf", getattr(option, "lf", False)),
                ("--sw", getattr(option, "stepwise", False)),
                ("--deselect", getattr(option, "deselect", None)),
                ("--retrieval-sample", state.settings.sample),
            ]
            if used
        ]
        ran = {r.golden_source for r in results}
        reasons += [
            f"{g.source} did not run" for g in state.goldens.values() if g.source not in ran
        ]
        reasons += [
            f"{len(r.errors)} failed retriever calls in {r.golden_name} [{r.retriever_id}]"
            for r in results
            if r.errors
        ]
        return reasons

    def _update_baselines(self, session: pytest.Session, state: SessionState) -> None:
        from .baseline import BaselineError, git_info, now, update
        from .compare import entry_from_result

        results = self.results()
        reasons = self._partial(results, state)
        if reasons and state.settings.update != "force":
            self.notes.append(
                "baseline NOT updated: this run is partial (" + "; ".join(reasons) + "). "
                "Run the whole golden set, or force it with --retrieval-update-baseline=force"
            )
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        git = git_info(self.config.rootpath)
        created = now()
        by_path: dict[Path, list[Any]] = {}
        for result in results:
            if result.baseline_path is not None:
                entry = entry_from_result(result, git, created)
                by_path.setdefault(Path(result.baseline_path), []).append(entry)
        for path, entries in by_path.items():
            try:
                update(path, entries, replace_corrupt=True)
            except (BaselineError, OSError) as exc:
                self.notes.append(f"baseline NOT updated: {exc}")
                continue
            keys = ", ".join(e.key for e in entries)
            self.notes.append(f"baseline written: {os.path.relpath(path)} ({keys})")


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(STATE, None)
    if state is None or not state.goldens:
        return None
    return [
        f"retrieval: {g.name} ({len(g)} queries, {os.path.relpath(g.source)})"
        for g in state.goldens.values()
    ]
