"""pytest glue: options, ini keys, marker, fixtures, collection of evaluations, summaries.

The only module that imports pytest. Everything it decides is delegated to the pure modules
(golden, evaluation, gate, report); those are imported inside hooks, so a pytest run that uses
no retrieval option never imports numpy, pydantic or jsonschema.

Data flow under xdist: each worker runs evaluations and attaches their JSON-able results to
the test report (``report.retrieval``); the controller, which receives every report, is the
only process that prints summaries and writes the JSON report.
"""

from __future__ import annotations

import argparse
import inspect
import os
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .baseline import BaselineEntry
    from .compare import Allowance
    from .evaluation import EvaluationResult
    from .gate import Threshold
    from .golden import GoldenSet

DEFAULT_FIXTURE = "retriever"
DEFAULT_CONCURRENCY = 8


# ---------------------------------------------------------------------------- options


def _threshold_arg(text: str) -> str:
    from .gate import ThresholdError, parse_assignment

    try:
        parse_assignment(text, "--retrieval-threshold")
    except ThresholdError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _metric_arg(text: str) -> str:
    from .metrics import MetricNameError, parse_metric

    try:
        return parse_metric(text).name
    except MetricNameError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _max_drop_arg(text: str) -> str:
    from .compare import AllowanceError, parse_assignment

    try:
        parse_assignment(text, "--retrieval-max-drop")
    except AllowanceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _alpha_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a significance level in (0, 1] (1 turns the test off)"
        )
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("retrieval", "retrieval evaluation (pytest-retrieval)")
    group.addoption(
        "--retrieval-golden",
        action="append",
        metavar="PATH",
        default=None,
        help="golden set to evaluate the retriever fixture on (.json, .jsonl, BEIR folder, "
        "TREC qrels); repeatable. ini: retrieval_golden",
    )
    group.addoption(
        "--retrieval-threshold",
        action="append",
        metavar="METRIC=VALUE",
        type=_threshold_arg,
        default=None,
        help="minimum for a metric, e.g. recall@10=0.8 or recall@10[errors]=0.7 (tag); "
        "repeatable; wins over ini, marker and golden file",
    )
    group.addoption(
        "--retrieval-metric",
        action="append",
        metavar="METRIC",
        type=_metric_arg,
        default=None,
        help="extra metric to compute and show, e.g. ndcg_exp@20; repeatable",
    )
    group.addoption(
        "--retrieval-k",
        type=_positive_int,
        metavar="K",
        default=None,
        help="default cutoff k (overrides the golden file's k)",
    )
    group.addoption(
        "--retrieval-concurrency",
        type=_positive_int,
        metavar="N",
        default=None,
        help=f"retriever calls in flight at once (default {DEFAULT_CONCURRENCY}). "
        "ini: retrieval_concurrency",
    )
    group.addoption(
        "--retrieval-timeout",
        type=_positive_float,
        metavar="SECONDS",
        default=None,
        help="per-call timeout for the retriever (default: none). ini: retrieval_timeout",
    )
    group.addoption(
        "--retrieval-report",
        metavar="PATH",
        default=None,
        help="write a JSON report of every evaluation (metrics, CIs, per-query results). "
        "ini: retrieval_report",
    )
    group.addoption(
        "--retrieval-baseline",
        metavar="PATH",
        default=None,
        help="baseline file to compare with and update (default: <golden>.baseline.json "
        "beside each golden set). ini: retrieval_baseline",
    )
    group.addoption(
        "--retrieval-update-baseline",
        nargs="?",
        const="safe",
        choices=["safe", "force"],
        default=None,
        help="record this run as the baseline (refused on a partial run or failed retriever "
        "calls unless =force)",
    )
    group.addoption(
        "--retrieval-max-drop",
        action="append",
        metavar="METRIC=DROP",
        type=_max_drop_arg,
        default=None,
        help="allowed drop against the baseline, absolute (recall@10=0.01) or relative "
        f"(ndcg@10=2%%, latency_p95=20%%); repeatable; default {0.01} for every metric",
    )
    group.addoption(
        "--retrieval-alpha",
        type=_alpha_arg,
        metavar="ALPHA",
        default=None,
        help="significance level of the paired test a regression must pass (default 0.05; "
        "1 turns it off). ini: retrieval_alpha",
    )
    group.addoption(
        "--retrieval-compare-to",
        metavar="RETRIEVER_ID",
        default=None,
        help="in an A/B run, the retriever the others are compared with (default: first)",
    )
    parser.addini("retrieval_golden", "golden sets to evaluate", type="paths", default=[])
    parser.addini("retrieval_baseline", "baseline file path", default="")
    parser.addini(
        "retrieval_max_drop",
        "METRIC=DROP lines, e.g. recall@10=0.01",
        type="linelist",
        default=[],
    )
    parser.addini("retrieval_alpha", "significance level for regressions", default="")
    parser.addini(
        "retrieval_thresholds",
        "METRIC=VALUE lines, e.g. recall@10=0.8",
        type="linelist",
        default=[],
    )
    parser.addini(
        "retrieval_fixture",
        f"name of the retriever fixture (default {DEFAULT_FIXTURE})",
        default=DEFAULT_FIXTURE,
    )
    parser.addini("retrieval_concurrency", "retriever calls in flight at once", default="")
    parser.addini("retrieval_timeout", "per-call retriever timeout in seconds", default="")
    parser.addini("retrieval_report", "path of the JSON report", default="")


# ---------------------------------------------------------------------------- settings


@dataclass
class Settings:
    """Everything the options and ini say, resolved once (CLI > ini > built-in default)."""

    goldens: list[Path]
    fixture: str
    concurrency: int
    timeout: float | None
    k: int | None
    metrics: list[str]
    ini_thresholds: list[str]
    cli_thresholds: list[str]
    report: Path | None
    baseline: Path | None
    update: str | None  # None, "safe" or "force"
    ini_max_drops: list[str]
    cli_max_drops: list[str]
    alpha: float
    compare_to: str | None


@dataclass
class SessionState:
    """Per-process state in ``config.stash``; never module globals (pytester runs in-process)."""

    settings: Settings
    goldens: dict[Path, GoldenSet] = field(default_factory=dict)
    baselines: dict[Path, dict[str, BaselineEntry]] = field(default_factory=dict)

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


def _ini_number(config: pytest.Config, name: str, kind: Callable[[str], Any]) -> Any:
    raw = str(config.getini(name)).strip()
    if not raw:
        return None
    try:
        return kind(raw)
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini option {name} = {raw!r}: {exc}") from None


def _resolve(config: pytest.Config, path: str, from_cli: bool) -> Path | None:
    """A path from the command line is relative to where pytest was started; from ini, to
    the ini file's folder."""
    if not path:
        return None
    base = (
        config.invocation_params.dir
        if from_cli
        else (config.inipath.parent if config.inipath else config.rootpath)
    )
    return base / path


def _settings(config: pytest.Config) -> Settings:
    cli_goldens = config.getoption("retrieval_golden") or []
    goldens = [
        Path(p) if Path(p).is_absolute() else config.invocation_params.dir / p for p in cli_goldens
    ] or list(config.getini("retrieval_golden"))
    concurrency = config.getoption("retrieval_concurrency") or _ini_number(
        config, "retrieval_concurrency", _positive_int
    )
    timeout = config.getoption("retrieval_timeout") or _ini_number(
        config, "retrieval_timeout", _positive_float
    )
    report = config.getoption("retrieval_report") or str(config.getini("retrieval_report"))
    baseline = config.getoption("retrieval_baseline") or str(config.getini("retrieval_baseline"))
    alpha = config.getoption("retrieval_alpha") or _ini_number(
        config, "retrieval_alpha", _alpha_arg
    )
    return Settings(
        goldens=goldens,
        fixture=str(config.getini("retrieval_fixture")).strip() or DEFAULT_FIXTURE,
        concurrency=concurrency or DEFAULT_CONCURRENCY,
        timeout=timeout,
        k=config.getoption("retrieval_k"),
        metrics=config.getoption("retrieval_metric") or [],
        ini_thresholds=list(config.getini("retrieval_thresholds")),
        cli_thresholds=config.getoption("retrieval_threshold") or [],
        report=Path(report) if report else None,
        baseline=_resolve(config, baseline, bool(config.getoption("retrieval_baseline"))),
        update=config.getoption("retrieval_update_baseline"),
        ini_max_drops=list(config.getini("retrieval_max_drop")),
        cli_max_drops=config.getoption("retrieval_max_drop") or [],
        alpha=alpha or 0.05,
        compare_to=config.getoption("retrieval_compare_to"),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "retrieval(golden=PATH, thresholds={...}, metrics=[...], k=N): settings for the "
        "retrieval_eval fixture in this test",
    )
    settings = _settings(config)
    state = SessionState(settings)
    config.stash[STATE] = state
    if settings.ini_thresholds:
        _ini_layer(settings)  # fail fast on a bad ini line
    for path in settings.goldens:  # usage errors surface here, before any worker starts
        golden = state.goldens[path] = _load(path)
        _thresholds(settings, golden)
        _allowances(settings, golden)
        if settings.update is None:
            state.baseline_entries(state.baseline_path(golden))
    if not _is_worker(config):
        config.pluginmanager.register(Reporter(config), REPORTER)


def pytest_unconfigure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin(REPORTER)
    if reporter is not None:
        config.pluginmanager.unregister(reporter)


def _load(path: Path) -> GoldenSet:
    from .golden import GoldenError, load_golden

    try:
        return load_golden(path)
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
    from .gate import ThresholdError, from_mapping, merge, parse_assignment

    try:
        file_layer = from_mapping(golden.thresholds, f"{golden.source} thresholds")
    except ThresholdError as exc:
        raise pytest.UsageError(f"golden set {golden.source}, /thresholds: {exc}") from None
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

    try:
        result = evaluate(
            retriever,
            golden,
            metrics=[*settings.metrics, *metrics],
            thresholds=thresholds,
            k=k or settings.k,
            concurrency=settings.concurrency,
            timeout=settings.timeout,
            retriever_id=retriever_id or _retriever_id(request, settings.fixture),
        )
        result.gate()  # a tag threshold naming an unknown tag fails here, clearly
    except (TypeError, ThresholdError) as exc:
        pytest.fail(f"{golden.source}: {exc}", pytrace=False)
    _attach_baseline(result, golden, state, (marker or {}).get("max_drop"))
    request.node.stash.setdefault(RESULTS, []).append(result)
    return result


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
        from .compare import ab_groups
        from .report import ab_lines, summary_lines

        state = self.config.stash[STATE]
        results = self.results()
        terminalreporter.section("retrieval")
        for result in results:
            for line in summary_lines(result):
                terminalreporter.write_line(line)
            terminalreporter.write_line("")
        groups = ab_groups(results, state.settings.compare_to, state.settings.alpha)
        for line in ab_lines(groups):
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
        path = state.settings.report
        if path is not None:
            from .report import json_report, write_json

            if not path.is_absolute():
                path = self.config.invocation_params.dir / path
            write_json(path, json_report(self.results()))

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
