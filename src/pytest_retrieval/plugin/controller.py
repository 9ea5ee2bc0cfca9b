"""The controller: on the main process (or the xdist controller) only, it receives every
evaluation from the test reports, decides from the items which golden sets ran in full, and
prints the summary, records baselines and writes the outputs once, rendering one verdict.

When no evaluation could run (a usage error, a collection error, a retriever fixture that
raised), the outputs are written all the same, with a failed verdict whose reasons say what
failed and where: a failed CI job keeps an artifact that explains it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._internal.io import counted, relative
from ..verdicts import CALIBRATION, NO_RESULT, PARTIAL_RUN, USAGE, Reason, Verdict
from .options import Outputs, output_paths
from .session import SessionState, layered_allowances
from .xdist import receive_collected, received

if TYPE_CHECKING:
    from ..results import EvaluationResult


class Reporter:
    """The controller's role (registered on the main process or the xdist controller, never
    on a worker): collects evaluation payloads from test reports (local, or a worker's:
    :mod:`.xdist`), prints the summary, records baselines, writes the outputs."""

    def __init__(self, config: pytest.Config, state: SessionState) -> None:
        self.config = config
        self.state = state
        #: node id -> (declaration order, that item's evaluations from its latest attempt;
        #: reruns replace)
        self.received: dict[str, tuple[int, list[EvaluationResult | dict[str, Any]]]] = {}
        #: why the session fails beyond its evaluations (baseline not written, outputs...)
        self.reasons: list[Reason] = []
        #: node id -> (" at setup" or "", its error), for tests that failed without an
        #: evaluation (a retriever fixture that raised or is missing, bad settings)
        self.broken: dict[str, tuple[str, str]] = {}
        #: node ids of golden evaluations whose test body ran (passed or failed)
        self.ran: set[str] = set()
        #: node ids pytest reported on (run, skipped or errored) or deselected
        self.reported: set[str] = set()
        #: why no test ran: the collection errors that stopped the session
        self.collection: list[Reason] = []
        self.notes: list[str] = []  # printed at the end of the summary section
        #: golden set sources split across workers whose parts did not all run
        self.incomplete: set[str] = set()
        self.rerun: set[str] = set()  # node ids whose current attempt will be run again
        self._results: list[tuple[str, EvaluationResult]] | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if str(report.outcome) == "rerun" or report.nodeid in self.rerun:  # rerunfailures
            self._drop_attempt(report)
            return
        payloads, order = received(report, self.state)
        self.reported.add(report.nodeid)
        if report.failed and not payloads:  # e.g. the retriever fixture raised in setup
            # (a crashed xdist worker's report has "???" for when: no phase to name)
            when = f" at {report.when}" if report.when in ("setup", "teardown") else ""
            self.broken.setdefault(report.nodeid, (when, _error_text(report)))
        if report.when != "call":
            return
        if payloads:
            self.broken.pop(report.nodeid, None)
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

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A collection error stops the session before any test runs (unless
        --continue-on-collection-errors): no golden set is evaluated."""
        if report.failed and not self.config.option.continue_on_collection_errors:
            self.collection.append(
                Reason(
                    NO_RESULT,
                    f"collection error in {report.nodeid or '.'} (no test ran): "
                    + _error_text(report),
                )
            )

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        self.reported.update(item.nodeid for item in items)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """A new attempt starts (older rerunfailures log no teardown for a rerun attempt)."""
        self.rerun.discard(nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist: tell each worker how items are distributed (:mod:`.split`)."""
        if self.state.anchors:  # golden sets to split, maybe
            from .split import tell_worker

            tell_worker(self.config, node.workerinput)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist: the golden items each worker collected, for the partial-run check, and the
        usage errors it found (a bad marker: found where items are collected)."""
        receive_collected(self.config, self.state, node)

    def close(self) -> None:
        """Let go of the evaluations once the outputs are written: results kept alive cost
        each of pytest's closing garbage collections a traversal (100,000 queries: 0.049 s
        a collection with them, 0.017 s without)."""
        self.received.clear()
        self._results = None

    def results(self, nodeids: set[str] | None = None) -> list[EvaluationResult]:
        """Every evaluation of the session (or of the items ``nodeids``), in declaration
        order (the same under xdist); rebuilt from worker payloads once."""
        from ..results import EvaluationResult

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
        from ..gate import session_verdict

        return session_verdict(
            self.results(self.golden_ids()), [*self.stopped(), *self.reasons], self._unrun_shard()
        )

    def _unrun_shard(self) -> list[Reason]:
        """Under --retrieval-shard, a warning for each golden set this shard did not run whole
        (evaluations deselected, a sample): its partial report says so, and ``combine``
        records no baseline from it, as this run would not."""
        if self.state.settings.shard is None:
            return []
        from ..shards import shard_name

        start = self.config.invocation_params.dir
        return [
            Reason(
                PARTIAL_RUN,
                f"{shard_name(Path(source), start)}: this shard ran part of it "
                f"({'; '.join(why)}): combine records no baseline from it unless forced "
                "(--update-baseline=force)",
            )
            for source, why in self.unrun().items()
        ]

    def _empty_shard(self) -> list[str]:
        """Under --retrieval-shard, a warning when no evaluation ran (-k, -m, --lf, node ids
        or paths left every one out): no partial report is written (there is nothing to
        stamp it with), ``combine`` would only say that the file is missing, or take an
        earlier run's for this shard's."""
        shard, report = self.state.settings.shard, self.state.settings.report
        if shard is None:
            return []
        left_out = sorted(set().union(*self.state.expected.values()))
        if not (left_out or self.state.settings.goldens):
            return []
        from ..shards import partial_report_of

        shown = ", ".join(left_out[:3]) + (", ..." if len(left_out) > 3 else "")
        what = shown or f"every evaluation of {self._configured()}"
        note = (
            f"warning: shard {shard} ran no evaluation (-k, -m, --lf, node ids or paths left "
            f"out {what}): it writes no partial report"
        )
        earlier = None if report is None else partial_report_of(report)
        if report is not None and earlier is not None:
            note += (
                f"; {relative(report)} is an earlier run's ({earlier}): delete it, or combine "
                "takes it for this one's"
            )
        elif report is not None:
            note += f" ({relative(report)}), and combine needs every shard's"
        return [note]

    def _tests_only_shard(self) -> list[str]:
        """Under --retrieval-shard, a warning when only ``retrieval_eval`` tests ran (a path
        or node id left the golden sets out): its report holds no part for ``combine``."""
        report = self.state.settings.report
        written = f" ({relative(report)})" if report is not None else ""
        return [
            f"warning: shard {self.state.settings.shard} ran no golden-set evaluation, only "
            f"retrieval_eval tests, which shards do not split (node ids or paths left out "
            f"{self._configured() or 'the golden sets'}): combine refuses its report{written}"
        ]

    def _configured(self) -> str:
        """The golden sets the options and ini name, as the warnings show them."""
        return ", ".join(sorted({relative(path) for path in self.state.settings.goldens}))

    def stopped(self) -> list[Reason]:
        """Why golden-set evaluations did not run, in the words the terminal shows: usage
        errors found after start-up, collection errors, evaluations that failed before they
        produced a result."""
        usage = [Reason(USAGE, message) for message in self.state.usage]
        return [*usage, *self.collection, *self._broken()]

    def _broken(self) -> list[Reason]:
        golden = self.golden_ids()
        return [
            Reason(NO_RESULT, f"{nodeid} failed{when} before it produced an evaluation: {text}")
            for nodeid, (when, text) in sorted(self.broken.items())
            if nodeid in golden
        ]

    def _nothing_to_say(self) -> bool:
        """Nothing of ours ran and nothing stopped it (e.g. only unit tests were selected)."""
        return not self.received and not self.reasons and not self.stopped()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self._nothing_to_say() and not self.notes:
            return
        from ..render.terminal import ab_lines, summary_lines

        results = self.results()
        terminalreporter.section("retrieval")
        verbose = self.config.getoption("verbose") > 0
        kept_in = self.state.settings.errors_kept_in
        for result in results:
            for line in summary_lines(result, verbose=verbose, kept_in=kept_in):
                terminalreporter.write_line(line)
            terminalreporter.write_line("")
        for line in ab_lines(self._groups(results)):
            terminalreporter.write_line(line)
        for note in self.notes:
            terminalreporter.write_line(note)
        if self._nothing_to_say():
            return  # notes only (a shard that ran nothing): no verdict was reached
        for reason in self.stopped():
            terminalreporter.write_line(f"{reason.kind}: {reason.message}")
        verdict = self.verdict()
        word = verdict.word
        if self.state.settings.shard is not None and verdict.passed:  # "PASSED" read as a pass
            word = "not gated in a shard (pytest-retrieval combine decides)"
        terminalreporter.write_line(
            f"retrieval verdict: {word}"
            + (
                f" ({counted(len(verdict.reasons), 'reason')}, listed above)"
                if verdict.reasons
                else ""
            )
        )

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: global properties
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.config.option.collectonly:
            return
        self._stopped_early(session)
        self._merge_parts()
        if self.state.usage and session.exitstatus in (
            pytest.ExitCode.OK,
            pytest.ExitCode.NO_TESTS_COLLECTED,  # xdist workers ran nothing, as without -n
        ):
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        updating = self.state.settings.update is not None and bool(self.state.anchors)
        if self._nothing_to_say():
            self.notes += self._empty_shard()
        if self._nothing_to_say() and not updating:  # an update refuses a run that left
            return  # its golden sets out; else nothing of ours ran (only unit tests, say)
        settings = self.state.settings
        if settings.judge is not None and settings.judge.validate is not None:
            self._calibrate(session, settings.judge.validate)
        self._groups(self.results(), session)  # an unknown --retrieval-compare-to: a reason
        if settings.update is not None:
            self._update_baselines(session)
        if settings.shard is not None:
            from ..shards import shard_notes

            self.notes += shard_notes(self.results(self.golden_ids()), settings.report)
            unrun = self._unrun_shard()
            self.notes += [f"warning: {w.message}" for w in unrun]
            ran = self.results()  # none: the evaluations failed, as the reasons say
            if not unrun and ran and all(result.part is None for result in ran):
                self.notes += self._tests_only_shard()
        if settings.export_run is not None:  # here, on the controller: workers never race
            from .runtest import export_runs

            junit = self.config.getoption("xmlpath", None)
            others = [
                ("--retrieval-report", settings.report),
                ("--retrieval-markdown", settings.markdown),
                ("--retrieval-html", settings.html),
                ("--junitxml", Path(junit) if junit else None),
            ]
            outputs = {path.resolve(): option for option, path in others if path is not None}
            notes, problems = export_runs(settings.export_run, self.results(), outputs)
            self.notes += notes + [f"{problem.kind}: {problem.message}" for problem in problems]
            self.reasons += problems  # before the outputs are written, so they say it
            if problems:
                self._fail(session)
        self._write_outputs(session)
        verdict = self.verdict()
        self._junit_properties(verdict)
        if self.state.anchors:  # a golden set may have been split
            from .split import junit_merged

            junit_merged(self.config, self.received)
        if not verdict.passed:
            self._fail(session)

    def _stopped_early(self, session: pytest.Session) -> None:
        """-x, --maxfail or an interrupt stopped the session before golden-set evaluations
        ran: the gate did not run, so no output may say it passed."""
        why = session.shouldfail or session.shouldstop
        if not why and session.exitstatus == pytest.ExitCode.INTERRUPTED:
            why = "interrupted"
        unrun = sorted(self.golden_ids() - self.reported)
        if not why or not unrun or self.stopped():
            return
        shown = ", ".join(unrun[:3]) + (", ..." if len(unrun) > 3 else "")
        reason = Reason(
            NO_RESULT,
            f"{counted(len(unrun), 'golden-set evaluation')} did not run ({shown}): the "
            f"session stopped early ({why})",
        )
        self.reasons.append(reason)
        self.notes.append(f"{reason.kind}: {reason.message}")  # the summary lists it

    def _merge_parts(self) -> None:
        """pytest -n: the parts of each golden set split across workers, as one evaluation
        compared with its baseline and decided (:mod:`.split`)."""
        if not self.state.anchors:
            return  # no golden set, nothing split
        from .split import fail_together, merge_received

        merged = merge_received(self.config, self.state, self.received, set(self.broken))
        if merged is not None:
            fail_together(self.config, merged.failed)
            self.received, self._results = merged.received, None
            self.reasons += merged.reasons
            self.notes += merged.notes
            self.incomplete = merged.incomplete

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
        from ..judge.calibration import LabelsError, calibrate

        try:
            calibration = calibrate(self.state.judge(), labels)
        except LabelsError as exc:
            self._fail(session, Reason(CALIBRATION, f"judge calibration NOT run: {exc}"))
            return
        self.notes.append(calibration.line(relative(labels)))

    def _write_outputs(self, session: pytest.Session) -> None:
        """JSON, Markdown (and the GitHub step summary) and HTML, each only when asked for."""
        settings = self.state.settings
        results = self.results()
        verdict = self.verdict()
        outputs = Outputs(settings.report, settings.markdown, settings.html)
        if settings.shard is not None:  # a part's summary would read as the gate's
            outputs = Outputs(settings.report)
            if settings.markdown is not None or settings.html is not None:
                self.notes.append(
                    f"shard {settings.shard}: no Markdown or HTML summary of a part; "
                    "`pytest-retrieval combine --markdown/--html` writes them for the whole"
                )
        problems = write_outputs(
            self.config,
            outputs,
            results,
            verdict,
            groups=self._groups(results),
            baselines=lambda: self._baselines(results),
            step_summary=settings.shard is None,
            corpora={golden.source: golden.corpus for golden in self.state.goldens.values()},
            shard=None if settings.shard is None else str(settings.shard),
        )
        for problem in problems:
            self._fail(session, problem)

    def _groups(
        self, results: list[EvaluationResult], session: pytest.Session | None = None
    ) -> list[Any]:
        """The A/B groups; an unknown --retrieval-compare-to is a usage error of the session
        (reported once, at session finish) and no group is compared. A CI shard compares
        none: its parts are compared as wholes by `pytest-retrieval combine`."""
        from ..compare import UnknownReference, ab_groups

        settings = self.state.settings
        if settings.shard is not None:
            return []
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

    def _baselines(self, results: list[EvaluationResult]) -> dict[int, Any]:
        """Index in ``results`` -> the stored baseline entry it was compared with (the HTML
        draws its per-query values, rankings and curves)."""
        from ..baseline import find, golden_key

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
        return baselines

    def partial(self) -> dict[str, list[str]]:
        """Golden set source -> why this run cannot stand for the whole set (absent when it
        can): :meth:`unrun`, and failed retriever calls."""
        from ..finish import incomplete_result

        reasons = self.unrun()
        for result in self.results():
            why = incomplete_result(result)
            if why:
                reasons.setdefault(result.golden_source, []).extend(why)
        return reasons

    def unrun(self) -> dict[str, list[str]]:
        """Golden set source -> why not all of it ran (absent when all did). Decided from
        the items: was each evaluation of the set collected and run? And on a sample?"""
        reasons: dict[str, list[str]] = {}
        for path, ids in self.state.expected.items():
            golden = self.state.goldens.get(path)
            if golden is None:
                continue
            missing = sorted(ids - self.ran)
            if missing:
                reasons.setdefault(golden.source, []).append(
                    f"{len(missing)} of {len(ids)} evaluations of {relative(golden.source)} "
                    f"were deselected or did not run ({', '.join(missing[:3])})"
                )
            if golden.sampled_from is not None:
                reasons.setdefault(golden.source, []).append("--retrieval-sample")
        return reasons

    def _update_baselines(self, session: pytest.Session) -> None:
        from .._internal.io import git_info, now
        from ..baseline import golden_key
        from ..finish import incomplete_fixes, record_baselines, sentence

        partial = {} if self.state.settings.update == "force" else self.partial()
        for source in self.incomplete:  # forcing cannot help: there is nothing whole to record
            partial.pop(source, None)
        if self.incomplete:
            self._fail(
                session,
                Reason(
                    PARTIAL_RUN,
                    "baseline NOT updated for "
                    + ", ".join(sorted(relative(s) for s in self.incomplete))
                    + ": its evaluation across the workers is incomplete (a part failed or did "
                    "not run); a baseline is recorded only from a whole evaluation, forced or "
                    "not: run every part",
                ),
            )
        refused = sorted({reason for reasons in partial.values() for reason in reasons})
        if refused:
            fixes = incomplete_fixes(r for r in self.results() if r.golden_source in partial)
            fixes += ["run the whole golden set"] if self.unrun() or not fixes else []
            message = (
                "baseline NOT updated for "
                + ", ".join(sorted(relative(s) for s in partial))
                + ": this run is partial ("
                + "; ".join(refused)
                + f"). {sentence(fixes)}, or force it with --retrieval-update-baseline=force"
            )
            self._fail(session, Reason(PARTIAL_RUN, message))
        chosen = [
            (result, path, golden_key(result.golden_source, path))
            for result in self.results()
            if result.baseline_path is not None and result.golden_source not in partial
            for path in [Path(result.baseline_path)]
        ]
        notes, problems = record_baselines(chosen, git_info(self.config.rootpath), now())
        self.notes += notes
        for problem in problems:
            self._fail(session, problem)


def write_outputs(
    config: pytest.Config,
    outputs: Outputs,
    results: list[EvaluationResult],
    verdict: Verdict,
    *,
    groups: Sequence[Any] = (),
    baselines: Callable[[], Mapping[int, Any]] | None = None,
    step_summary: bool = True,
    goldens: Sequence[Path] = (),
    corpora: Mapping[str, str | None] | None = None,
    shard: str | None = None,
) -> list[Reason]:
    """The session's outputs (:func:`..finish.write_outputs`: JSON, Markdown and the GitHub
    step summary unless not ``step_summary``, HTML), paths relative to where pytest started.
    Returns an output reason for each file that could not be written."""
    from .. import finish

    return finish.write_outputs(
        finish.Outputs(
            outputs.report,
            outputs.markdown,
            outputs.html,
            options=("--retrieval-report", "--retrieval-html"),
        ),
        results,
        verdict,
        root=config.rootpath,
        start=config.invocation_params.dir,
        groups=groups,
        baselines=baselines,
        step_summary=step_summary,
        goldens=goldens,
        corpora=corpora,
        shard=shard,
    )


def startup_failed(
    config: pytest.Config, message: str, given: argparse.Namespace | None = None
) -> list[Reason]:
    """The outputs of a session that stopped before it began (a usage error: a golden set
    or baseline that does not load, a bad option or ini line, a conftest that does not
    import): no evaluation, a failed verdict whose one reason is ``message``, the words the
    terminal shows. ``given``: the options parsed so far, when ``config.option`` is not
    filled yet. Returns an output reason for each file that could not be written."""
    from ..gate import session_verdict

    verdict = session_verdict([], [Reason(USAGE, message)])
    goldens = _named_goldens(config, given)
    return write_outputs(config, output_paths(config, given), [], verdict, goldens=goldens)


def _named_goldens(config: pytest.Config, given: argparse.Namespace | None) -> list[Path]:
    """The golden sets the options or ini name, as far as they were read (never raises):
    a failed start's outputs overwrite none of their files."""
    options = config.option if given is None else given
    named = getattr(options, "retrieval_golden", None) or []
    try:
        named = named or list(config.getini("retrieval_golden"))
    except ValueError:  # the ini key is not known yet (the plugin's options were not added)
        return []
    start = config.invocation_params.dir
    return [start / path for path in map(Path, named)]


def _error_text(report: pytest.TestReport | pytest.CollectReport) -> str:
    """What a failed test or collector shows of its error, in one place: a message of ours
    (``pytest.fail(..., pytrace=False)``, a missing fixture) as written; a collection error
    as its ``E`` lines; an exception as ``file:line: Type: message``."""
    longrepr = report.longrepr
    text = str(longrepr).strip()
    if isinstance(report, pytest.CollectReport):
        shown = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
        return "\n".join(shown) or text
    crash = getattr(longrepr, "reprcrash", None)
    style = getattr(getattr(longrepr, "reprtraceback", None), "style", None)
    if crash is not None and style != "value":
        return f"{relative(crash.path)}:{crash.lineno}: {crash.message}"
    return text
