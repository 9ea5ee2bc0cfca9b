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
    parser.addini("retrieval_golden", "golden sets to evaluate", type="paths", default=[])
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


@dataclass
class SessionState:
    """Per-process state in ``config.stash``; never module globals (pytester runs in-process)."""

    settings: Settings
    goldens: dict[Path, GoldenSet] = field(default_factory=dict)


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
        state.goldens[path] = _load(path)
        _thresholds(settings, state.goldens[path])
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
        result = _run(request, fixtures[fixture], golden, thresholds, state.settings)
        if not result.passed:
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
    settings: Settings,
    *,
    metrics: Iterable[str] = (),
    k: int | None = None,
    retriever_id: str | None = None,
) -> EvaluationResult:
    from .evaluation import evaluate
    from .gate import ThresholdError

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
    request.node.stash.setdefault(RESULTS, []).append(result)
    return result


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
        report.retrieval = [  # type: ignore[attr-defined]
            dict(result.to_dict(), nodeid=item.nodeid) for result in results
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
            state.settings,
            metrics=[*options.get("metrics", ()), *metrics],
            k=k or options.get("k"),
            retriever_id=retriever_id or getattr(retriever, "__name__", None),
        )

    return run


# ---------------------------------------------------------------------------- reporting


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class Reporter:
    """Collects evaluation payloads from test reports (local or from xdist workers) and,
    on the controller only, prints the summary and writes the JSON report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.payloads: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.payloads.extend(getattr(report, "retrieval", None) or [])

    def results(self) -> list[EvaluationResult]:
        from .evaluation import EvaluationResult

        ordered = sorted(self.payloads, key=lambda p: p["nodeid"])
        return [EvaluationResult.from_dict(p) for p in ordered]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.payloads:
            return
        from .report import comparison_lines, summary_lines

        results = self.results()
        terminalreporter.section("retrieval")
        for result in results:
            for line in summary_lines(result):
                terminalreporter.write_line(line)
            terminalreporter.write_line("")
        groups: dict[tuple[str, str], list[EvaluationResult]] = {}
        for result in results:
            groups.setdefault((result.golden_source, result.fingerprint), []).append(result)
        for group in groups.values():
            if len({r.retriever_id for r in group}) > 1:
                for line in comparison_lines(group):
                    terminalreporter.write_line(line)
                terminalreporter.write_line("")

    def pytest_sessionfinish(self) -> None:
        path = self.config.stash[STATE].settings.report
        if path is None or not self.payloads or self.config.option.collectonly:
            return
        from .report import json_report, write_json

        if not path.is_absolute():
            path = self.config.invocation_params.dir / path
        write_json(path, json_report(self.results()))


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = config.stash.get(STATE, None)
    if state is None or not state.goldens:
        return None
    return [
        f"retrieval: {g.name} ({len(g)} queries, {os.path.relpath(g.source)})"
        for g in state.goldens.values()
    ]
