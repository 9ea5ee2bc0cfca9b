"""One evaluation inside a pytest test: the retriever's doc texts and labels, progress on the
terminal, the baseline comparison and verdict, and JUnit properties.

Called from the golden-set test body (:mod:`.collect`) and the ``retrieval_eval`` fixture
(:mod:`.fixtures`); the decisions it hands on are made by pure modules (:mod:`.evaluation`,
:mod:`.compare`, :mod:`.gate`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._internal.io import relative
from .._internal.scrub import scrub
from ..errors import ConfigError, GoldenError
from .session import (
    AS_ERROR,
    STATE,
    SessionState,
    layered_allowances,
    load,
    warn_at_start,
    warned,
)
from .xdist import is_worker

if TYPE_CHECKING:
    from ..golden import GoldenSet
    from ..limits import Threshold
    from ..results import EvaluationResult
    from ..runfile import Run
    from ..verdicts import Reason

#: an item's evaluations, for its test report (the controller collects them from there)
RESULTS = pytest.StashKey[list["EvaluationResult"]]()


def _retriever_id(request: pytest.FixtureRequest, default: str) -> str:
    callspec = getattr(request.node, "callspec", None)
    return str(callspec.id) if callspec is not None and callspec.id else default


def run_evaluation(
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
    part_of: GoldenSet | None = None,
    rerun: str = "",
) -> EvaluationResult:
    """``part_of``: the whole golden set when ``golden`` is one part of it (:mod:`.split`):
    the part carries the whole's fingerprint and stays undecided (the controller merges the
    parts, then compares and decides). ``rerun``: the command that runs this evaluation
    again, when it is not the golden set's own (a ``retrieval_eval`` test)."""
    from ..evaluation import evaluate
    from ..labels import label_sources
    from ..limits import ThresholdError
    from ..metrics import JUDGED_FAMILY
    from ..runfile import Run, missing_queries, runs_for

    settings = state.settings
    if part_of is not None and any(q.relevant for q in part_of.queries):
        # as the whole computes it, also on a part with no judged query (or none at all)
        metrics = [*metrics, f"{JUDGED_FAMILY}@{k or settings.k or part_of.k}"]
    runs, default_id, run_file, run_format = None, settings.fixture, None, None
    run_missing: tuple[str, ...] = ()
    if isinstance(retriever, Run):  # a precomputed run (--retrieval-run): nothing to call
        runs = runs_for(golden, retriever, part=part_of is not None)
        run_missing = missing_queries(golden, retriever)
        run_format = retriever.format
        retriever, default_id, run_file = None, retriever.name, str(retriever.path)
    chosen_id = retriever_id or _retriever_id(request, default_id)
    printer = progress_printer(request.config, f"{golden.name} [{chosen_id}]")
    judge = state.judge()
    downstream = _downstream(request, state)
    corpus = _corpus(request, part_of or golden, state, texts_needed=bool(judge or downstream))
    problem: str | None = None
    try:
        result = evaluate(
            retriever,
            golden,
            metrics=[*settings.metrics, *metrics, *(chosen_gate(state, golden, marker) or ())],
            thresholds=chosen_thresholds,
            k=k or settings.k,
            concurrency=settings.concurrency,
            timeout=settings.timeout,
            retriever_id=chosen_id,
            progress=None if printer is None else printer.queries,
            labels=label_sources(
                judge=judge,
                judge_progress=None if printer is None or not judge else printer.judge_of(judge),
                downstream=downstream,
            ),
            corpus=corpus,
            doc_id_key=settings.doc_id_key,
            runs=runs,
            all_scores=settings.export_run is not None,  # exported as the retriever gave them
            max_failures=settings.max_failures,
        )
    except (TypeError, ThresholdError) as exc:
        problem = f"{golden.source}: {exc}"
    except GoldenError as exc:  # no query texts to search (it names the file)
        problem = str(exc)
    finally:
        if printer is not None:
            printer.close()
        if downstream is not None:
            downstream.close()
    if problem is not None:  # outside the except block: no "During handling of..." chain
        pytest.fail(scrub(problem), pytrace=False)  # a TypeError may quote the retriever
    if run_file is not None:
        result = replace(result, run_file=run_file, run_missing=run_missing, run_format=run_format)
    if rerun:
        result = replace(result, rerun=rerun)
    if part_of is not None:
        result = replace(result, fingerprint=part_of.fingerprint)
        request.node.stash.setdefault(RESULTS, []).append(result)
        return result
    result = attach_baseline(result, golden, state, marker or {})
    results = request.node.stash.setdefault(RESULTS, [])
    results.append(result)
    record_properties(request.node, result, len(results))
    return result


def _downstream(request: pytest.FixtureRequest, state: SessionState) -> Any:
    """The user's ``retrieval_downstream`` fixture wrapped for concurrency and caching."""
    try:
        fn = request.getfixturevalue("retrieval_downstream")
    except pytest.FixtureLookupError:
        return None
    from ..downstream import DownstreamRunner

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
        from ..golden import corpus_file, load_corpus

        try:
            state.corpora[golden.corpus] = load_corpus(corpus_file(golden))
        except GoldenError as exc:
            pytest.fail(str(exc), pytrace=False)
    return state.corpora[golden.corpus]


def _check_fixture_corpus(
    golden: GoldenSet, corpus: Mapping[str, str], state: SessionState
) -> None:
    """Relevant ids the ``retrieval_corpus`` fixture lacks: a warning, or with
    --retrieval-strict a failure (the fixture exists only at run time)."""
    from ..golden import corpus_problem

    problem = corpus_problem(golden, corpus.keys(), "of the retrieval_corpus fixture")
    if problem is not None and state.settings.strict:
        pytest.fail(f"{problem} (--retrieval-strict)", pytrace=False)
    if problem is not None and not warned(str(problem)):
        pytest.fail(f"{problem}\n  {AS_ERROR}", pytrace=False)


def record_properties(node: pytest.Item, result: EvaluationResult, nth: int) -> None:
    """Metrics as JUnit ``<property>`` elements (``--junitxml``), like ``record_property``;
    ``user_properties`` travel with the report, so this works under xdist too. The same
    properties as ``pytest-retrieval combine --junit-xml`` writes
    (:func:`~..render.junit.junit_properties`)."""
    from ..render.junit import junit_properties

    node.user_properties.extend(junit_properties(result, nth))


def progress_printer(config: pytest.Config, label: str) -> Progress | None:
    """Live progress for this evaluation, or None (``--retrieval-progress off``, an xdist
    worker whose output nobody sees, or no terminal reporter). ``auto`` draws a live line only
    on a terminal whose output pytest captures: with ``-s`` the tests' own prints share the
    screen, so the line could not be erased cleanly, and plain lines are used."""
    mode = config.stash[STATE].settings.progress
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if mode == "off" or is_worker(config) or reporter is None:
        return None
    if mode == "auto":
        live = isatty(reporter) and config.getoption("capture", "fd") in ("fd", "sys")
    else:
        live = mode == "live"
    return Progress(config, reporter, label, live=live)


def progress_notice(config: pytest.Config) -> str | None:
    """Why ``--retrieval-progress live`` (or ``lines``) shows nothing in this run, or None.

    Under xdist the evaluations run on workers, and a worker can send the controller only
    what pytest-xdist knows (test reports, warnings, log start/finish; any other message
    makes the controller drop the worker), and only at those moments. Progress from inside a
    running test would have to pose as one of them and would show up as a test report or a
    warning in every other plugin (JUnit, the summary counts), so there is none."""
    state = config.stash.get(STATE, None)
    mode = None if state is None else state.settings.progress
    if mode not in ("live", "lines") or not config.pluginmanager.has_plugin("dsession"):
        return None
    workers = config.getoption("numprocesses", None)
    flag = f"-n {workers}" if workers is not None else "xdist"
    return (
        f"retrieval: --retrieval-progress {mode} is off under {flag}: xdist workers cannot send "
        "progress mid-test, so each evaluation shows only when its test ends (run without -n to "
        "see it)"
    )


def announce_progress(config: pytest.Config) -> None:
    """Print :func:`progress_notice`, if any, on the controller's terminal (also under -q:
    the user asked for progress by name)."""
    notice = progress_notice(config)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if notice is None or reporter is None:
        return
    if config.get_terminal_writer().width_of_current_line != 0:  # after xdist's status
        reporter.write("\n")
    reporter.write_line(notice)


class Progress:
    """Writes progress past pytest's output capturing.

    A live line is written raw, outside pytest's count of the current line: it is erased and
    the cursor put back before pytest writes again, so pytest's next dot or PASSED lands
    where it would have. Plain lines are written like pytest's own, from a fresh line (``-v``
    writes the test's name again before its result; ``-q`` dots go on below)."""

    def __init__(self, config: pytest.Config, reporter: Any, label: str, live: bool) -> None:
        from ..render.progress import ProgressPrinter

        self.reporter = reporter
        self.terminal = config.get_terminal_writer()
        self.capture = config.pluginmanager.get_plugin("capturemanager")
        self.live = live
        self.printer = ProgressPrinter(
            label,
            self._write,
            live=live,
            width=self._width,
            column=lambda: int(self.terminal.width_of_current_line),
        )
        self.started = False

    def _uncaptured(self) -> AbstractContextManager[None]:
        from contextlib import nullcontext

        if self.capture is None:
            return nullcontext()
        return self.capture.global_and_fixture_disabled()  # type: ignore[no-any-return]

    def _width(self) -> int:
        """The terminal's width now. Read with capturing suspended: while the test runs, file
        descriptor 1 is pytest's capture file, whose size is the 80-column fallback. Below 40
        columns pytest assumes 80 (its guard against bogus sizes); the real size wins then."""
        import shutil

        with self._uncaptured():
            pytest_width = int(self.terminal.fullwidth)
            columns = shutil.get_terminal_size((0, 0)).columns
        return min(pytest_width, columns) if columns > 0 else pytest_width

    def _write(self, text: str) -> None:
        with self._uncaptured():
            if self.live:
                self._write_raw(text)
                return
            if not self.started:
                self.reporter.ensure_newline()
                if self.terminal.width_of_current_line != 0:  # -q: after the dots
                    self.reporter.write("\n")
                self.started = True
            self.reporter.write(text, flush=True)

    def _write_raw(self, text: str) -> None:
        """``text`` to the terminal without touching pytest's count of the current line."""
        write_raw = getattr(self.terminal, "write_raw", None)  # pytest 9 and later
        if write_raw is not None:
            write_raw(text, flush=True)
            return
        stream = self.terminal._file  # before pytest 9 only here (those releases do not change)
        stream.write(text)
        stream.flush()

    def queries(self, done: int, total: int) -> None:
        self.printer.update("queries", done, total)

    def judge_of(self, judge: Any) -> Callable[[int, int], None]:
        """Progress of the judge phase, with its calls and cache hits so far."""

        def report(done: int, total: int) -> None:
            counts = judge.counts
            detail = f"{counts['calls']} calls, {counts['cache_hits']} cache hits"
            self.printer.update("judge", done, total, detail)

        return report

    def close(self) -> None:
        """Erase a live line left by an evaluation that stopped early (an exception, Ctrl-C)."""
        self.printer.clear()


def chosen_gate(
    state: SessionState, golden: GoldenSet, marker: Mapping[str, Any] | None
) -> tuple[str, ...] | None:
    """The metrics the user gates on (marker, else command line or ini, else the golden
    file); None: the default set. They are computed even when no other setting names them."""
    named = (marker or {}).get("gate") or state.settings.gate or golden.gate
    return tuple(str(name) for name in named) if named else None


def attach_baseline(
    result: EvaluationResult,
    golden: GoldenSet,
    state: SessionState,
    marker: Mapping[str, Any],
) -> EvaluationResult:
    """The result compared with its stored baseline (unless this run records one), with the
    gated set, the power of the gate and its verdict (:func:`..finish.compare_with_baseline`,
    which ``pytest-retrieval combine`` and ``eval`` use too)."""
    from ..baseline import golden_key
    from ..finish import REFRESH, compare_with_baseline, stale_as_error
    from ..verdicts import STALE_BASELINE

    settings = state.settings
    path = state.baseline_path(golden)
    result = compare_with_baseline(
        result,
        path,
        None if settings.update is not None else state.baseline_entries(path),
        golden_key(golden.source, path),
        allowances=layered_allowances(settings, golden, marker.get("max_drop")),
        chosen=chosen_gate(state, golden, marker),
        alpha=settings.alpha,
        strict_baseline=settings.strict_baseline,
    )
    stale = [w for w in result.verdict.warnings if w.kind == STALE_BASELINE]
    if stale and not all([warned(f"{w.message}; {REFRESH}") for w in stale]):
        result = stale_as_error(result)  # -W error: the gate fails on it, outputs kept
    return result


def isatty(reporter: Any) -> bool:
    """``TerminalReporter.isatty``: a method since pytest 9, a bool attribute before."""
    value = reporter.isatty
    return bool(value() if callable(value) else value)


def no_fixture_message(item: pytest.Item, fixture: str, golden: Path) -> str:
    """Name the conftest.py files that would cover this golden set: they are where to look.
    A conftest.py elsewhere that defines the fixture (golden.json at the root, the fixture
    in tests/conftest.py: the first layout teams try) is named, with the two ways out."""
    rootpath = item.config.rootpath
    folder = item.path.parent
    folders = [folder, *folder.parents]
    inside = [f for f in folders if f == rootpath or rootpath in f.parents] or [folder]
    places = ", ".join(relative(f / "conftest.py") for f in reversed(inside))
    missing = (
        f"no fixture named {fixture!r}: the retrieval evaluation of {relative(golden)} "
        f"calls it for every query.\n"
    )
    # one in the golden set's own folders would apply to it: not found there for another
    # reason (a fixture method in a class, --noconftest, --confcutdir): the generic message
    elsewhere = [p for p in fixture_homes(item.config, fixture) if p.parent not in folders]
    if elsewhere:
        shown = " and ".join(relative(path) for path in elsewhere)
        target = relative(elsewhere[0].parent / golden.name)
        where = (
            f"that folder ({target})"
            if len(elsewhere) == 1
            else f"one of those folders (e.g. {target})"
        )
        return (
            f"{missing}"
            f"  a fixture named {fixture!r} is defined in {shown}, which pytest applies only "
            f"to the tests under their own folder: {relative(golden)} is not under one.\n"
            f"  fix: move the golden set into {where}, or the fixture into "
            f"{relative(folder / 'conftest.py')}"
        )
    return (
        f"{missing}"
        f"  fix: define it in a conftest.py that covers this golden set ({places}), e.g.\n\n"
        f"    @pytest.fixture(scope='session')\n"
        f"    def {fixture}():\n"
        f"        return lambda query, k: my_index.search(query, k)  # ranked doc ids\n\n"
        f"  (or name your fixture in the ini option retrieval_fixture)"
    )


#: folders :func:`fixture_homes` looks into at most (it runs on the error path only)
MAX_FOLDERS = 5000


def fixture_homes(config: pytest.Config, fixture: str) -> list[Path]:
    """The conftest.py files under the rootdir that define ``fixture`` (by name or
    ``name=``), read without importing them: pytest imports only those on the paths it
    collects, so one under ``tests/`` is unknown to a run given ``golden.json``. The walk
    goes level by level (``tests/`` before ``data/a/b/``), skips what pytest's does
    (``norecursedirs``, virtualenvs, symlinked folders) and stops after
    :data:`MAX_FOLDERS` folders."""
    import fnmatch
    import os
    from collections import deque

    skipped = [str(pattern) for pattern in config.getini("norecursedirs")]
    found = []
    queue, visited = deque([str(config.rootpath)]), 0
    while queue and visited < MAX_FOLDERS:
        top = queue.popleft()
        visited += 1
        try:
            entries = sorted(os.scandir(top), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name == "conftest.py" and entry.is_file():
                if _defines_fixture(Path(entry.path), fixture):
                    found.append(Path(entry.path))
            elif (
                entry.is_dir(follow_symlinks=False)
                and not any(fnmatch.fnmatch(entry.name, pattern) for pattern in skipped)
                and not os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))
            ):
                queue.append(entry.path)
    return found  # shallowest first: the message suggests the first


def _defines_fixture(path: Path, fixture: str) -> bool:
    """Whether ``path`` (Python source) defines a fixture named ``fixture``: a function with
    that name or ``name=`` under a ``fixture`` decorator (``pytest.fixture``, bare or
    called). Unreadable or invalid source defines nothing (pytest will say why)."""
    import ast

    try:
        source = path.read_text(encoding="utf-8")
        if fixture not in source:
            return False
        tree = ast.parse(source, str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call is not None else decorator
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name != "fixture":
                continue
            named = next(
                (
                    keyword.value.value
                    for keyword in (call.keywords if call is not None else [])
                    if keyword.arg == "name" and isinstance(keyword.value, ast.Constant)
                ),
                node.name,
            )
            if named == fixture:
                return True
    return False


def golden_for(
    request: pytest.FixtureRequest, state: SessionState, golden: str | Path | None
) -> GoldenSet:
    """The golden set a ``retrieval_eval`` call or the ``retrieval_golden`` fixture means:
    the one named (relative to the test file), the marker's, or the only configured one."""
    marker = request.node.get_closest_marker("retrieval")
    chosen = golden or (marker.kwargs.get("golden") if marker else None)
    if chosen is None:
        configured = state.configured_golden()
        if configured is not None:
            return configured
        raise ConfigError(
            "no golden set for this test: pass golden=... to retrieval_eval, use "
            "@pytest.mark.retrieval(golden='golden.json'), or configure exactly one "
            "(--retrieval-golden, or the retrieval_golden ini key)"
        )
    path = Path(chosen)
    if not path.is_absolute():
        path = Path(str(request.path.parent)) / path
    if path not in state.goldens:
        state.goldens[path] = load(path)
    return state.goldens[path]


# ---------------------------------------------------------------------------- run files

#: this process's run files (--retrieval-run), each read once
RUN_FILES = pytest.StashKey[dict[Path, "Run"]]()


def run_files(config: pytest.Config, state: SessionState) -> list[Run]:
    """The --retrieval-run files, read once per process (a bad one is a ConfigError)."""
    if not state.settings.runs:
        return []
    from ..runfile import read_run

    cache = config.stash.setdefault(RUN_FILES, {})
    for path in state.settings.runs:
        if path not in cache:
            cache[path] = read_run(path)
    return [cache[path] for path in state.settings.runs]


def check_runs(config: pytest.Config, state: SessionState) -> None:
    """At start-up, on the controller: every run file reads, their retriever ids (file
    names) differ, and each shares queries with every golden set; golden queries a run
    lacks (they score 0: the verdict warns of them) and tied scores are warnings."""
    if not state.settings.runs:
        return
    from ..runfile import runs_for, ties_warning

    if not state.anchors:
        if config.getini("retrieval_golden"):  # set, but not where pytest was pointed
            raise ConfigError(
                "--retrieval-run: no golden set to evaluate the run on: those of "
                "retrieval_golden in the ini are evaluated when pytest is given a folder that "
                "holds them, and the paths given do not; pass --retrieval-golden PATH"
            )
        raise ConfigError(
            "--retrieval-run: no golden set to evaluate the run on; pass --retrieval-golden "
            "PATH or set retrieval_golden in the [pytest] ini section"
        )
    runs = run_files(config, state)
    named: dict[str, Path] = {}
    for run in runs:
        if run.name in named:
            raise ConfigError(
                f"--retrieval-run: {named[run.name]} and {run.path} are both named "
                f"{run.name!r}, the retriever id of their evaluations (and baselines): "
                "rename one file"
            )
        named[run.name] = run.path
    for run in runs:
        if run.tied:
            warn_at_start(config, ties_warning(run))
        for path in state.anchors.values():
            golden = state.golden(path)
            runs_for(golden, run)  # no query in common: a usage error


def export_runs(
    path: Path, results: list[EvaluationResult], outputs: Mapping[Path, str]
) -> tuple[list[str], list[Reason]]:
    """--retrieval-export-run: each evaluation's retrieved lists as a TREC run
    (:func:`.runfile.export_paths` names the files), none onto a golden set or run file read,
    nor onto another of ``outputs`` (resolved path -> its option). Returns the summary's
    notes and an output reason for each file that could not be written."""
    from ..finish import read_by
    from ..runfile import export_paths, write_result
    from ..verdicts import OUTPUT, Reason

    notes: list[str] = []
    problems: list[Reason] = []
    targets = export_paths(path, [(r.golden_name, r.retriever_id) for r in results])
    read = read_by(results)
    sources: dict[str, set[str]] = {}  # golden set name -> its files
    for result in results:
        sources.setdefault(result.golden_name, set()).add(result.golden_source)
    for result, target in zip(results, targets, strict=True):
        what = f"{result.golden_name} [{result.retriever_id}]"
        if len(sources[result.golden_name]) > 1:  # two golden sets of one name: which file
            what += f" of {relative(result.golden_source)}"
        clash = read.get(target.resolve())
        if clash is None and target.resolve() in outputs:
            clash = (
                f"the {outputs[target.resolve()]} output is written there; give "
                "--retrieval-export-run another name"
            )
        if clash is not None:
            problems.append(
                Reason(OUTPUT, f"run of {what} NOT exported to {relative(target)}: {clash}")
            )
            continue
        try:
            written = write_result(target, result)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            problems.append(
                Reason(OUTPUT, f"run of {what} NOT exported to {relative(target)}: {reason}")
            )
            continue
        note = (
            f"run exported: {relative(written.path)} ({what}: {written.queries} queries, "
            f"{written.hits} hits)"
        )
        if written.adjusted:
            note += (
                f"; scores of {written.adjusted} {'query' if written.adjusted == 1 else 'queries'} "
                "adjusted so that every tool keeps their order (tied or rising scores)"
            )
        if written.made_up:
            note += (
                f"; {written.made_up} hits had no score of the retriever's: written with "
                "falling scores of the export's making"
            )
        notes.append(note)
    return notes, problems
