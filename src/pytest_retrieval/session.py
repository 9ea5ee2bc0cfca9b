"""The session side of the plugin: per-process state, and the controller that gathers results.

``SessionState`` lives in ``config.stash`` of every process (never module globals: pytester
runs in-process). ``Reporter`` is registered on the controller only (the main process, or the
xdist controller): it receives every evaluation from the test reports, decides from the items
which golden sets ran in full, and prints the summary, records baselines and writes outputs
once.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .errors import ConfigError
from .options import JudgeSettings, Settings
from .verdicts import (
    CALIBRATION,
    NO_RESULT,
    OUTPUT,
    PARTIAL_RUN,
    USAGE,
    Reason,
    Verdict,
)

if TYPE_CHECKING:
    from .baseline import BaselineEntry
    from .gate import Allowance
    from .golden import GoldenSet
    from .results import EvaluationResult, Threshold

#: where a worker leaves the golden items it collected, for the controller (xdist)
EXPECTED_KEY = "retrieval_expected"
MARKER = "retrieval"
MARKER_KEYS = {"golden", "thresholds", "metrics", "k", "max_drop", "gate"}


@dataclass
class SessionState:
    """Per-process state: settings, loaded golden sets, baselines, the judge."""

    settings: Settings
    goldens: dict[Path, GoldenSet] = field(default_factory=dict)
    #: the file pytest collects for each configured golden set -> that golden set's path
    anchors: dict[Path, Path] = field(default_factory=dict)
    #: golden set path -> node ids of its evaluations that were collected (before -k/-m/...)
    expected: dict[Path, set[str]] = field(default_factory=dict)
    baselines: dict[Path, dict[str, BaselineEntry]] = field(default_factory=dict)
    corpora: dict[str, dict[str, str]] = field(default_factory=dict)
    #: node id -> its index among the collected items (declaration order)
    order: dict[str, int] = field(default_factory=dict)
    _judge: Any = None

    def golden(self, path: Path) -> GoldenSet:
        """The golden set at ``path``, loaded (and sampled) once; a bad file is a usage error."""
        if path not in self.goldens:
            golden = load(path, require_relevant=self.settings.judge is None)
            if self.settings.sample is not None:
                golden = golden.sample(self.settings.sample, self.settings.sample_seed)
            self.goldens[path] = golden
        return self.goldens[path]

    def judge(self, config: pytest.Config | None = None) -> Any:
        """This process's LLM judge (None without ``--retrieval-judge``), built once."""
        if self._judge is None and self.settings.judge is not None:
            self._judge = make_judge(self.settings.judge, config)
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
        from .baseline import read

        if path not in self.baselines:
            self.baselines[path] = read(path)
        return self.baselines[path]


#: this process's session state, in ``config.stash``
STATE = pytest.StashKey[SessionState]()


def make_judge(settings: JudgeSettings, config: pytest.Config | None = None) -> Any:
    """Build the judge; missing credentials or a bad prompt file are usage errors, unless
    ``--retrieval-judge-fallback cache-only`` turns missing credentials into a warning."""
    from .judge import Judge, JudgeConfig, JudgeConfigError

    def build(cache_only: bool) -> Any:
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
                cache_only=cache_only,
                max_calls=settings.max_calls,
                max_tokens_budget=settings.max_tokens,
                prompt_file=settings.prompt_file,
                text_budget_chars=settings.text_budget,
                prices=settings.prices,
            )
        )

    try:
        return build(settings.cache_only)
    except JudgeConfigError as exc:
        if settings.fallback != "cache-only" or settings.cache_only:
            raise ConfigError(f"--retrieval-judge: {exc}") from None
        try:
            judge = build(cache_only=True)
        except JudgeConfigError as again:
            raise ConfigError(f"--retrieval-judge: {again}") from None
        message = (
            f"the LLM judge has no credentials ({exc}); --retrieval-judge-fallback cache-only: "
            "using cached verdicts only, uncached hits count as ungraded"
        )
        if config is not None:
            config.issue_config_time_warning(pytest.PytestWarning(message), stacklevel=2)
        else:
            warnings.warn(pytest.PytestWarning(message), stacklevel=2)
        return judge


def corpus_check(golden: GoldenSet, settings: Settings) -> str | None:
    """Relevant ids missing from the golden set's own corpus (its ``"corpus"`` path or a BEIR
    folder's corpus.jsonl): a warning to return, or a usage error with --retrieval-strict."""
    from .golden import GoldenError, corpus_problem, load_corpus_ids

    if golden.corpus is None:
        return None
    try:
        problem = corpus_problem(golden, load_corpus_ids(golden.corpus), golden.corpus)
    except GoldenError as exc:  # a missing or unreadable corpus: nothing to check against
        problem = exc
    if problem is not None and settings.strict:
        raise ConfigError(f"{problem} (--retrieval-strict)")
    return None if problem is None else str(problem)


def load(path: Path, require_relevant: bool = True) -> GoldenSet:
    from .golden import load_golden

    return load_golden(path, require_relevant=require_relevant)


def layered_allowances(
    settings: Settings, golden: GoldenSet, marker: Mapping[str, object] | None = None
) -> dict[str, Allowance]:
    """Allowed drops: golden file < ini < marker < command line, metric by metric."""
    from .gate import AllowanceError, merge_allowances, parse_allowance

    def layer(pairs: Iterable[tuple[str, object]], source: str) -> list[Allowance]:
        return [parse_allowance(metric, value, source) for metric, value in pairs]

    file_layer = layer(golden.max_drop.items(), f"{golden.source} max_drop")  # checked on load
    try:
        marker_layer = layer((marker or {}).items(), "the retrieval marker")
    except AllowanceError as exc:
        raise ConfigError(f"@pytest.mark.retrieval(max_drop=...): {exc}") from None
    return merge_allowances(
        file_layer, settings.ini_max_drops, marker_layer, settings.cli_max_drops
    )


def layered_thresholds(
    settings: Settings,
    golden: GoldenSet,
    marker: Mapping[str, object] | None = None,
    call: Mapping[str, object] | None = None,
) -> list[Threshold]:
    """golden file (checked when it was loaded) < ini < marker < ``retrieval_eval(
    thresholds=...)`` < command line, key by key; each threshold names its source."""
    from .gate import ThresholdError, from_mapping, merge

    layers = [from_mapping(golden.thresholds, f"{golden.source} thresholds")]
    layers.append(list(settings.ini_thresholds))
    for given, source, where in (
        (marker, "the retrieval marker", "@pytest.mark.retrieval(thresholds=...)"),
        (call, "retrieval_eval(thresholds=...)", "retrieval_eval(thresholds=...)"),
    ):
        try:
            layers.append(from_mapping(given or {}, source))
        except ThresholdError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return merge(*layers, settings.cli_thresholds)


def check_tags(chosen: Iterable[Threshold], golden: GoldenSet, where: str) -> None:
    """A threshold on a tag that no query of the golden set has can never be checked."""
    tagged = [t for t in chosen if t.tag is not None]
    if not tagged:
        return
    tags = {tag for query in golden.queries for tag in query.tags}
    for threshold in tagged:
        if threshold.tag not in tags:
            raise ConfigError(
                f"{where + ': ' if where else ''}threshold {threshold.key} ({threshold.source}): "
                f"no query of {os.path.relpath(golden.source)} has the tag {threshold.tag!r} "
                f"(its tags: {', '.join(sorted(tags)) or 'none'}); fix the tag name or tag the "
                "queries"
            )


def check_marker(options: Mapping[str, Any], where: str, golden: GoldenSet | None) -> None:
    """The settings of one ``@pytest.mark.retrieval(...)``: types, names, values and, when its
    golden set is known, the tags its thresholds name. Any mistake is a usage error."""
    from .gate import AllowanceError, ThresholdError, from_mapping, parse_allowance
    from .metrics import MAX_K, MetricNameError, parse_metric

    k = options.get("k")
    if k is not None and (type(k) is not int or not 1 <= k <= MAX_K):
        raise ConfigError(f"{where}(k={k!r}): k must be a whole number from 1 to {MAX_K}")
    for key in ("metrics", "gate"):
        names = options.get(key, ())
        if isinstance(names, str) or not isinstance(names, list | tuple):
            raise ConfigError(
                f"{where}({key}={names!r}): {key} must be a list of metric names, e.g. "
                f"{key}=['recall@10', 'mrr@5']"
            )
    examples = {"thresholds": "{'recall@10': 0.8}", "max_drop": "{'ndcg@10': '2%'}"}
    for key, example in examples.items():
        if not isinstance(options.get(key, {}), Mapping):
            raise ConfigError(
                f"{where}({key}={options[key]!r}): {key} must be a dict, e.g. {key}={example}"
            )
    try:
        for name in [*options.get("metrics", ()), *options.get("gate", ())]:
            parse_metric(str(name))
        chosen = from_mapping(options.get("thresholds", {}), "the retrieval marker")
        for metric, value in options.get("max_drop", {}).items():
            parse_allowance(str(metric), value, "the retrieval marker")
    except (MetricNameError, ThresholdError, AllowanceError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if golden is not None:
        check_tags(chosen, golden, where)


def check_item_marker(item: pytest.Item, state: SessionState) -> None:
    """``@pytest.mark.retrieval(...)`` settings of a test, checked before anything runs."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return
    where = f"{item.nodeid}: @pytest.mark.{MARKER}"
    if marker.args:
        raise ConfigError(
            f"{where} takes keyword arguments only ({', '.join(sorted(MARKER_KEYS))})"
        )
    unknown = sorted(set(marker.kwargs) - MARKER_KEYS)
    if unknown:
        raise ConfigError(
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


def check_compare_to(compare_to: str, ids: set[str]) -> None:
    """An A/B reference that names none of the retrievers being compared is a mistake:
    checked on the collected items, before any evaluation runs (under xdist, where the
    controller collects nothing, :func:`~.compare.ab_groups` catches it at the end)."""
    if len(ids) > 1 and compare_to not in ids:
        raise ConfigError(
            f"--retrieval-compare-to {compare_to!r}: no retriever of that id ran; the ids "
            f"are {', '.join(sorted(ids))}"
        )


@contextmanager
def usage_errors() -> Iterator[None]:
    """Where a :class:`~.errors.ConfigError` (a bad golden set, baseline file, option, ini
    line or marker setting) becomes a pytest usage error, outside tests (see
    :func:`as_test_failure` for inside): its message, which names the place and the fix, never
    a traceback."""
    try:
        yield
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


@contextmanager
def as_test_failure() -> Iterator[None]:
    """Inside a test (the evaluation body, ``retrieval_eval``, ``retrieval_golden``) the same
    mistakes fail that test with the message alone: a usage error there would show a
    traceback through the plugin."""
    try:
        yield
    except ConfigError as exc:  # "from None": no "during handling of" chain in the report
        raise pytest.fail.Exception(str(exc), pytrace=False) from None


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class Reporter:
    """Collects evaluation payloads from test reports (local or from xdist workers) and,
    on the controller only, prints the summary, records baselines, writes the outputs."""

    def __init__(self, config: pytest.Config, state: SessionState) -> None:
        self.config = config
        self.state = state
        #: node id -> (declaration order, that item's evaluations from its latest attempt;
        #: reruns replace)
        self.received: dict[str, tuple[int, list[EvaluationResult | dict[str, Any]]]] = {}
        #: why the session fails beyond its evaluations (baseline not written, outputs...)
        self.reasons: list[Reason] = []
        #: node ids of tests that failed without an evaluation (setup errors, bad settings)
        self.broken: set[str] = set()
        #: node ids of golden evaluations whose test body ran (passed or failed)
        self.ran: set[str] = set()
        self.notes: list[str] = []  # printed at the end of the summary section
        self.rerun: set[str] = set()  # node ids whose current attempt will be run again
        self._results: list[tuple[str, EvaluationResult]] | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if str(report.outcome) == "rerun" or report.nodeid in self.rerun:  # rerunfailures
            self._drop_attempt(report)
            return
        payloads: list[EvaluationResult | dict[str, Any]] = [
            *(getattr(report, "retrieval", None) or []),
            *(getattr(report, "retrieval_results", None) or []),
        ]
        if report.failed and not payloads:  # e.g. the retriever fixture raised in setup
            self.broken.add(report.nodeid)
        if report.when != "call":
            return
        if payloads:
            self.broken.discard(report.nodeid)
            order = getattr(report, "retrieval_order", None)
            if order is None:
                order = self.state.order.get(report.nodeid, len(self.state.order))
            self.received[report.nodeid] = (order, payloads)
            self._results = None
        elif report.nodeid in self.received:  # a rerun that evaluated nothing
            del self.received[report.nodeid]
            self._results = None
        if not report.skipped:
            self.ran.add(report.nodeid)

    def _drop_attempt(self, report: pytest.TestReport) -> None:
        """pytest-rerunfailures: only the last attempt counts, in JUnit too, which reads the
        properties from the attempt's teardown report (after this hook: tryfirst)."""
        report.user_properties = [
            p for p in report.user_properties if not str(p[0]).startswith("retrieval.")
        ]
        self.rerun.add(report.nodeid)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """A new attempt starts (older rerunfailures log no teardown for a rerun attempt)."""
        self.rerun.discard(nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist: the golden items each worker collected, for the partial-run check."""
        for path, ids in (getattr(node, "workeroutput", {}) or {}).get(EXPECTED_KEY, {}).items():
            self.state.expected.setdefault(Path(path), set()).update(ids)

    def results(self, nodeids: set[str] | None = None) -> list[EvaluationResult]:
        """Every evaluation of the session (or of the items ``nodeids``), in declaration
        order (the same under xdist); rebuilt from worker payloads once."""
        from .results import EvaluationResult

        if self._results is None:
            ordered = sorted(self.received.items(), key=lambda kv: (kv[1][0], kv[0]))
            self._results = [
                (nodeid, r if isinstance(r, EvaluationResult) else EvaluationResult.from_dict(r))
                for nodeid, (_, payloads) in ordered
                for r in payloads
            ]
        return [r for nodeid, r in self._results if nodeids is None or nodeid in nodeids]

    def golden_ids(self) -> set[str]:
        """Node ids of the golden-set evaluations collected (under xdist: by the workers)."""
        return set().union(*self.state.expected.values())

    def verdict(self) -> Verdict:
        """The session's verdict: the golden-set evaluations' reasons, a reason for each of
        them that failed before it produced a result, and the session's own. (What a test
        does with a ``retrieval_eval`` result is that test's decision: its outcome counts.)"""
        from .verdicts import session_verdict

        golden = self.golden_ids()
        missing = [
            Reason(NO_RESULT, f"{nodeid} failed before it produced an evaluation (see its error)")
            for nodeid in sorted(self.broken & golden)
        ]
        return session_verdict(self.results(golden), [*self.reasons, *missing])

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.received and not self.notes and not self.broken & self.golden_ids():
            return
        from .render.terminal import ab_lines, summary_lines

        results = self.results()
        terminalreporter.section("retrieval")
        verbose = self.config.getoption("verbose") > 0
        for result in results:
            for line in summary_lines(result, verbose=verbose):
                terminalreporter.write_line(line)
            terminalreporter.write_line("")
        for line in ab_lines(self._groups(results)):
            terminalreporter.write_line(line)
        for note in self.notes:
            terminalreporter.write_line(note)
        verdict = self.verdict()
        terminalreporter.write_line(
            f"retrieval verdict: {verdict.word}"
            + (
                f" ({_count(len(verdict.reasons), 'reason')}, listed above)"
                if verdict.reasons
                else ""
            )
        )

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: global properties
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.config.option.collectonly:
            return
        if not self.received and not self.broken & self.golden_ids():
            return  # nothing of ours ran (e.g. only unit tests were selected)
        settings = self.state.settings
        if settings.judge is not None and settings.judge.validate is not None:
            self._calibrate(session, settings.judge.validate)
        self._groups(self.results(), session)  # an unknown --retrieval-compare-to: a reason
        if settings.update is not None:
            self._update_baselines(session)
        self._write_outputs(session)
        verdict = self.verdict()
        self._junit_properties(verdict)
        if not verdict.passed:
            self._fail(session)

    def _junit_properties(self, verdict: Verdict) -> None:
        """The session's verdict as JUnit testsuite properties (``--junitxml``), so a reason
        with no failing test case (a refused baseline update, an unwritable output) shows."""
        for plugin in self.config.pluginmanager.get_plugins():
            add = getattr(plugin, "add_global_property", None)
            if callable(add):
                add("retrieval.passed", verdict.passed)
                for reason in verdict.reasons:
                    add("retrieval.reason", f"{reason.kind}: {reason.message}")

    def _fail(
        self, session: pytest.Session, reason: Reason | None = None, usage: bool = False
    ) -> None:
        """Record why, and escalate the exit status only from OK (never hide an interrupt or
        a usage error)."""
        if reason is not None:
            self.reasons.append(reason)
            self.notes.append(reason.message)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = (
                pytest.ExitCode.USAGE_ERROR if usage else pytest.ExitCode.TESTS_FAILED
            )

    def _calibrate(self, session: pytest.Session, labels: Path) -> None:
        """``--retrieval-judge-validate``: the judge against human labels, in the summary."""
        from .judge.calibration import LabelsError, calibrate

        try:
            calibration = calibrate(self.state.judge(), labels)
        except LabelsError as exc:
            self._fail(session, Reason(CALIBRATION, f"judge calibration NOT run: {exc}"))
            return
        self.notes.append(calibration.line(os.path.relpath(labels)))

    def _write_outputs(self, session: pytest.Session) -> None:
        """JSON, Markdown (and the GitHub step summary) and HTML, each only when asked for."""
        settings = self.state.settings
        results = self.results()
        verdict = self.verdict()
        renderers: list[tuple[Path, Callable[[], str]]] = []
        if settings.report is not None:
            from .render.json import dumps, json_report

            document = json_report(results, verdict)
            renderers.append((settings.report, lambda: dumps(document) + "\n"))
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if settings.markdown is not None or step_summary:
            from .render.markdown import render_markdown

            markdown = render_markdown(results, self._groups(results), verdict)
            if settings.markdown is not None:
                renderers.append((settings.markdown, lambda: markdown))
        if settings.html is not None:
            renderers.append((settings.html, lambda: self._html(results, verdict)))
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
        from ._io import atomic_write

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, render())
        except OSError as exc:
            self._output_failed(session, path, exc)

    def _output_failed(self, session: pytest.Session, path: Path, exc: OSError) -> None:
        message = (
            f"could not write {path}: {exc.strerror or exc}; check the folder exists and is "
            "writable"
        )
        self._fail(session, Reason(OUTPUT, message))

    def _groups(
        self, results: list[EvaluationResult], session: pytest.Session | None = None
    ) -> list[Any]:
        """The A/B groups; an unknown --retrieval-compare-to is a usage error of the session
        (reported once, at session finish) and no group is compared."""
        from .compare import UnknownReference, ab_groups

        settings = self.state.settings
        allowances = {
            golden.source: layered_allowances(settings, golden)
            for golden in self.state.goldens.values()
        }
        try:
            return ab_groups(results, settings.compare_to, settings.alpha, allowances)
        except UnknownReference as exc:
            if session is not None:
                self._fail(session, Reason(USAGE, str(exc)), usage=True)
            return []

    def _html(self, results: list[EvaluationResult], verdict: Verdict) -> str:
        from .baseline import find, golden_key
        from .render.html import render_html

        baselines = {}
        for index, result in enumerate(results):
            if result.baseline_path is None or self.state.settings.update is not None:
                continue
            path = Path(result.baseline_path)
            entries = self.state.baseline_entries(path)
            key = golden_key(result.golden_source, path)
            entry = find(entries, key, result.golden_name, result.retriever_id)
            if entry is not None:
                baselines[index] = entry
        return render_html(results, self._groups(results), baselines, verdict=verdict)

    def partial(self) -> dict[str, list[str]]:
        """Golden set source -> why this run cannot stand for the whole set (absent when it
        can). Decided from the items: was each evaluation of the set collected and run?"""
        reasons: dict[str, list[str]] = {}
        for path, ids in self.state.expected.items():
            golden = self.state.goldens.get(path)
            if golden is None:
                continue
            missing = sorted(ids - self.ran)
            if missing:
                reasons.setdefault(golden.source, []).append(
                    f"{len(missing)} of {len(ids)} evaluations of {os.path.relpath(golden.source)} "
                    f"were deselected or did not run ({', '.join(missing[:3])})"
                )
            if golden.sampled_from is not None:
                reasons.setdefault(golden.source, []).append("--retrieval-sample")
        for result in self.results():
            if result.errors:
                reasons.setdefault(result.golden_source, []).append(
                    f"{len(result.errors)} failed retriever calls in {result.golden_name} "
                    f"[{result.retriever_id}]"
                )
        return reasons

    def _update_baselines(self, session: pytest.Session) -> None:
        from ._io import git_info, now
        from .baseline import BaselineError, find, golden_key, read, update
        from .compare import entry_from_result

        partial = {} if self.state.settings.update == "force" else self.partial()
        refused = sorted({reason for reasons in partial.values() for reason in reasons})
        if refused:
            message = (
                "baseline NOT updated for "
                + ", ".join(sorted(os.path.relpath(s) for s in partial))
                + ": this run is partial ("
                + "; ".join(refused)
                + "). Run the whole golden set, or force it with "
                "--retrieval-update-baseline=force"
            )
            self._fail(session, Reason(PARTIAL_RUN, message))
        git = git_info(self.config.rootpath)
        created = now()
        by_path: dict[Path, list[Any]] = {}
        for result in self.results():
            if result.baseline_path is not None and result.golden_source not in partial:
                path = Path(result.baseline_path)
                key = golden_key(result.golden_source, path)
                try:
                    old = read(path)
                except BaselineError:  # a corrupt file is replaced below; nothing to keep
                    old = {}
                previous = find(old, key, result.golden_name, result.retriever_id)
                entry = entry_from_result(result, git, created, golden_key=key, previous=previous)
                by_path.setdefault(path, []).append(entry)
        for path, entries in by_path.items():
            try:
                update(path, entries, replace_corrupt=True)
            except (BaselineError, OSError) as exc:
                self._fail(session, Reason(OUTPUT, f"baseline NOT updated: {exc}"))
                continue
            keys = ", ".join(e.key for e in entries)
            self.notes.append(f"baseline written: {os.path.relpath(path)} ({keys})")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
