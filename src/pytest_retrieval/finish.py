"""The gate without pytest: a whole evaluation compared with its baseline file and decided,
the baselines recorded, and the outputs written (JSON, Markdown and the GitHub step summary,
HTML, JUnit) -- what the plugin does at the end of a run, for ``pytest-retrieval combine``
(CI shards joined) and ``pytest-retrieval eval`` (a precomputed run).

The plugin uses the same functions (:func:`compare_with_baseline` after each evaluation,
:func:`write_outputs` and :func:`record_baselines` at the end of the session), so an offline
gate and a pytest run cannot disagree. Nothing here imports pytest.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._internal.io import relative
from .errors import ConfigError
from .settings import DEFAULT_ALPHA
from .verdicts import OUTPUT, PARTIAL_RUN, USAGE, Reason, Verdict

if TYPE_CHECKING:
    from .baseline import BaselineEntry
    from .compare import ABGroup
    from .limits import Allowance, Threshold
    from .results import EvaluationResult


# ---------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class GateSettings:
    """What gates one whole evaluation beyond its own numbers: thresholds, allowed drops,
    the gated metrics, the paired test's alpha, how a missing baseline counts, where the
    baseline is, and the A/B reference. A CI shard records them in its partial report (a
    part cannot apply them), so ``combine`` gates the whole exactly as one run would."""

    thresholds: tuple[Threshold, ...] = ()
    allowances: dict[str, Allowance] = field(default_factory=dict)
    gate: tuple[str, ...] | None = None  # None: the default gated set
    alpha: float = DEFAULT_ALPHA
    strict_baseline: bool = False
    baseline: str = ""  # the baseline file, as the run named it
    baseline_key: str = ""  # the golden set's key in it (:func:`.baseline.golden_key`)
    compare_to: str | None = None
    #: a shard found its evaluation's entry in the baseline (None: not recorded): the gate
    #: of the whole must find it too, or it would pass as "no baseline"
    baseline_seen: bool | None = None
    #: the shards' warning filters made a stale baseline's warning an error (-W error): the
    #: whole fails on it, as one run with those filters does
    stale_fails: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "thresholds": [
                {"metric": t.key, "minimum": t.minimum, "source": t.source} for t in self.thresholds
            ],
            "allowances": {
                metric: {"amount": a.amount, "relative": a.relative, "source": a.source}
                for metric, a in sorted(self.allowances.items())
            },
            "gate": None if self.gate is None else list(self.gate),
            "alpha": self.alpha,
            "strict_baseline": self.strict_baseline,
            "baseline": self.baseline,
            "baseline_key": self.baseline_key,
            "compare_to": self.compare_to,
            "baseline_seen": self.baseline_seen,
            "stale_fails": self.stale_fails,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateSettings:
        """Read back :meth:`to_dict`; a malformed entry raises KeyError, TypeError or
        ValueError (the caller names the file)."""
        from .limits import Allowance, Threshold, parse_key

        thresholds = []
        for entry in data["thresholds"]:
            metric, tag = parse_key(str(entry["metric"]))
            thresholds.append(Threshold(metric, float(entry["minimum"]), tag, entry["source"]))
        allowances = {
            metric: Allowance(metric, float(a["amount"]), bool(a["relative"]), str(a["source"]))
            for metric, a in data["allowances"].items()
        }
        gate = data["gate"]
        return cls(
            thresholds=tuple(thresholds),
            allowances=allowances,
            gate=None if gate is None else tuple(str(name) for name in gate),
            alpha=float(data["alpha"]),
            strict_baseline=bool(data["strict_baseline"]),
            baseline=str(data["baseline"]),
            baseline_key=str(data["baseline_key"]),
            compare_to=data["compare_to"],
            baseline_seen=data.get("baseline_seen"),
            stale_fails=bool(data.get("stale_fails", False)),
        )


# ---------------------------------------------------------------------------- the gate


def compare_with_baseline(
    result: EvaluationResult,
    path: Path,
    entries: Mapping[str, BaselineEntry] | None,
    key: str,
    *,
    allowances: Mapping[str, Allowance],
    chosen: Sequence[str] | None,
    alpha: float,
    strict_baseline: bool,
    stale_fails: bool = False,
) -> EvaluationResult:
    """``result`` compared with its stored baseline, with the gated set, the power of the
    gate and its verdict. ``entries``: the baseline file at ``path`` (None: this run records
    one, so nothing is compared); ``key``: the golden set's key in it; ``chosen``: the gated
    metrics asked for (None: the default set). A sample is compared on its own queries."""
    from .baseline import find
    from .compare import compare_to_baseline, power_table
    from .gate import decide, gated_metrics

    gated = gated_metrics(result.metrics, result.k, result.thresholds, allowances, chosen)
    result = replace(result, baseline_path=str(path), gated=gated)
    entry = None
    if entries is None:
        result = replace(result, baseline_note="recording")
    else:
        entry = find(entries, key, result.golden_name, result.retriever_id)
        result = replace(result, baseline_note="missing" if entry is None else "")
        if entry is not None and result.sampled_from is not None:  # the rest is not "removed"
            ids = {q.id for q in result.queries}
            entry = replace(entry, queries={q: v for q, v in entry.queries.items() if q in ids})
    if entry is not None:
        comparison = compare_to_baseline(
            result,
            entry,
            allowances,
            alpha=alpha,
            reference=f"baseline {relative(path)}",
        )
        result = replace(result, comparison=comparison)
    result = replace(result, power=power_table(result, entry, allowances, alpha))
    result = decide(result, strict_baseline=strict_baseline)
    return stale_as_error(result) if stale_fails else result


#: a stale baseline's fix, as the warning and the failure say it
REFRESH = "refresh it with --retrieval-update-baseline"


def stale_as_error(result: EvaluationResult) -> EvaluationResult:
    """``result`` with its stale-baseline warnings as reasons: the warning filters in force
    (``-W error``, ``filterwarnings = error``) make that warning an error."""
    from .errors import made_an_error
    from .gate import promote
    from .verdicts import STALE_BASELINE

    verdict = result.verdict
    if not any(w.kind == STALE_BASELINE for w in verdict.warnings):
        return result
    why = f"{REFRESH} {made_an_error()}"
    return replace(result, verdict=promote(verdict, STALE_BASELINE, why))


@dataclass(frozen=True)
class Whole:
    """One whole evaluation to gate offline: its result (thresholds set, not yet compared),
    its settings, the baseline file and key it is compared with, and its JUnit test name."""

    result: EvaluationResult
    settings: GateSettings
    baseline: Path
    key: str
    nodeid: str
    #: the shards found this entry in their baseline: the file named here must hold it,
    #: else the whole would pass as "no baseline" (:func:`gate` refuses)
    entry_expected: bool = False
    #: the golden set as the shards named it (:func:`~.shards.shard_name`; "": not sharded)
    shard_golden: str = ""
    #: why a baseline recorded here would land where no run reads it (None: it would not)
    cannot_record: str | None = None
    #: why this whole's baseline entry cannot be told here (None: it can)
    cannot_gate: str | None = None
    #: the shards' golden set as found here (None: not found, or not sharded): a baseline
    #: is recorded only when it is the set they evaluated
    local_golden: Path | None = None


@dataclass
class Gated:
    """Wholes after the gate: results with their verdicts, the A/B groups, the stored
    baseline entry each was compared with (by index, for the HTML), the session's own
    reasons and the notes to print."""

    results: list[EvaluationResult]
    groups: list[ABGroup]
    found: dict[int, BaselineEntry]
    reasons: list[Reason] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        from .gate import session_verdict

        return session_verdict(self.results, self.reasons)


def gate(wholes: Sequence[Whole], *, recording: bool) -> Gated:
    """Each whole compared with its baseline (unless ``recording``) and decided, and the A/B
    groups compared, as the plugin does. A baseline file that cannot be read raises
    :class:`~.errors.BaselineError`; one without the entry the shards found raises
    :class:`~.errors.ConfigError`."""
    from .baseline import entry_key, find
    from .compare import UnknownReference, ab_groups

    files: dict[Path, dict[str, BaselineEntry]] = {}
    here: dict[Path, str] = {}  # local golden set -> its fingerprint (A/B: one load)
    results, found = [], {}
    for index, whole in enumerate(wholes):
        why = whole.cannot_gate or (whole.cannot_record if recording else None)
        if why is None and recording and whole.local_golden is not None:
            why = _another_golden(whole.local_golden, whole.result.fingerprint, here)
        if why is not None:
            raise ConfigError(f"{whole.nodeid}: {why}")
        entries = None
        if not recording or whole.entry_expected:  # recording: still the shards' file?
            if whole.baseline not in files:
                files[whole.baseline] = _stored(whole.baseline, recording)
            stored = files[whole.baseline]
            entry = find(stored, whole.key, whole.result.golden_name, whole.result.retriever_id)
            if entry is not None and not recording:
                found[index] = entry
            elif entry is None and whole.entry_expected and stored is not _UNREADABLE:
                raise ConfigError(
                    f"{whole.nodeid}: the shards found their baseline entry "
                    f"{entry_key(whole.key, whole.result.retriever_id)} in "
                    f"{whole.settings.baseline!r}, but {whole.baseline} "
                    f"{'does not hold it' if whole.baseline.exists() else 'does not exist'}: run "
                    "combine in the folder the shards ran pytest in, or pass the baseline they "
                    "used with --baseline"
                    + (" (recording here would write a new file beside it)" if recording else "")
                )
            entries = None if recording else stored
        s = whole.settings
        results.append(
            compare_with_baseline(
                replace(whole.result, thresholds=list(s.thresholds)),
                whole.baseline,
                entries,
                whole.key,
                allowances=s.allowances,
                chosen=s.gate,
                alpha=s.alpha,
                strict_baseline=s.strict_baseline,
                stale_fails=s.stale_fails,
            )
        )
    gated = Gated(results, [], found)
    if wholes:
        first = wholes[0].settings  # the A/B reference and alpha are the session's
        allowances = {w.result.golden_source: w.settings.allowances for w in wholes}
        try:
            gated.groups = ab_groups(results, first.compare_to, first.alpha, allowances)
        except UnknownReference as exc:
            gated.reasons.append(Reason(USAGE, str(exc)))
    return gated


#: what :func:`_stored` gives for a baseline file a recording run cannot read (it replaces it)
_UNREADABLE: dict[str, BaselineEntry] = {}


def _stored(path: Path, recording: bool) -> dict[str, BaselineEntry]:
    """The entries of the baseline file at ``path`` (none: no file). Recording, a file that
    cannot be read gives :data:`_UNREADABLE`: recording replaces it, as the plugin does."""
    from .baseline import read
    from .errors import BaselineError

    try:
        return read(path)
    except BaselineError:
        if recording:
            return _UNREADABLE
        raise


def _another_golden(path: Path, evaluated: str, loaded: dict[Path, str]) -> str | None:
    """Why the shards' numbers cannot be recorded as the baseline of the golden set at
    ``path`` (None: it is the one they evaluated, by fingerprint): the gate job runs on
    another commit than theirs. ``loaded``: fingerprints already read, by path."""
    from .golden import load_golden

    if path not in loaded:
        # shards of a precomputed run may evaluate TREC qrels without query texts
        loaded[path] = load_golden(path, require_relevant=False, require_texts=False).fingerprint
    here = loaded[path]
    if here == evaluated:
        return None
    return (
        f"the golden set here, {relative(path)}, is not the one the shards evaluated "
        f"(fingerprint {here} here, {evaluated} theirs): a baseline recorded from them would "
        "not be its; run combine on the commit the shards ran"
    )


def incomplete_result(result: EvaluationResult) -> list[str]:
    """Why ``result`` cannot stand for its golden set as a baseline, in words: failed
    retriever calls (they score 0), queries its JSON or JSONL run file lacks (they score 0
    too: a truncated run would lower the bar every later run is held to). A TREC run's
    missing queries are not a reason: it has no line for a query that found nothing.
    Empty: it can."""
    why = []
    if result.errors:
        why.append(f"{result.golden_name} [{result.retriever_id}]: {result.failed_calls}")
    if _lacks_queries(result):
        why.append(
            f"run file {Path(result.run_file or '').name} lacks {len(result.run_missing)} of "
            f"the {len(result.queries)} queries of {result.golden_name} [{result.retriever_id}]"
        )
    return why


def _lacks_queries(result: EvaluationResult) -> bool:
    """A run file that could list a query with no hits (JSON, JSONL) lacks golden queries."""
    return bool(result.run_missing) and result.run_format not in (None, "trec")


def incomplete_fixes(results: Iterable[EvaluationResult]) -> list[str]:
    """How to make results :func:`incomplete_result` refuses whole."""
    results = list(results)
    fixes = ["fix the failed calls"] if any(r.errors for r in results) else []
    if any(map(_lacks_queries, results)):
        fixes.append("give the run file every query (an empty list for one that found nothing)")
    return fixes


def sentence(parts: Sequence[str]) -> str:
    """``["fix a", "run b"]`` -> ``Fix a and run b``."""
    text = " and ".join(parts)
    return text[:1].upper() + text[1:]


def record(
    gated: Gated,
    wholes: Sequence[Whole],
    *,
    force: bool,
    root: Path,
    unrun: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Record each whole as its baseline entry, as ``--retrieval-update-baseline`` does: a
    golden set with failed retriever calls, or that the shards ran only part of (``unrun``:
    the golden set as they named it -> why), is refused (a partial-run reason) unless
    ``force``; the others are recorded. Notes and problems go into ``gated``."""
    from ._internal.io import git_info, now

    partial: dict[str, list[str]] = {}  # golden set, as shown -> why it is not recorded
    refused: set[str] = set()  # their sources
    if not force:
        named = {w.shard_golden: w.result.golden_source for w in wholes}
        for golden, why in (unrun or {}).items():
            # "": a warning not read as a shard writes it, so every golden set; a name with
            # no whole: none of its evaluations ran (refused, with nothing to record)
            sources = list(named.values()) if not golden else [named.get(golden, golden)]
            for source in sources:
                partial.setdefault(relative(source), []).extend(why)
                refused.add(source)
        for r in gated.results:
            why = incomplete_result(r)
            if why:
                partial.setdefault(relative(r.golden_source), []).extend(why)
                refused.add(r.golden_source)
    if partial:
        fixes = incomplete_fixes(gated.results)
        if unrun:
            fixes.append("run every shard without -k, -m or --lf leaving an evaluation out")
        gated.reasons.append(
            Reason(
                PARTIAL_RUN,
                "baseline NOT updated for "
                + ", ".join(sorted(partial))
                + ": this run is partial ("
                + "; ".join(dict.fromkeys(why for whys in partial.values() for why in whys))
                + f"). {sentence(fixes)}, or force it with --update-baseline=force",
            )
        )
    chosen = [
        (r, w.baseline, w.key)
        for r, w in zip(gated.results, wholes, strict=True)
        if r.golden_source not in refused
    ]
    notes, problems = record_baselines(chosen, git_info(root), now())
    gated.notes += notes
    gated.reasons += problems


def record_baselines(
    chosen: Sequence[tuple[EvaluationResult, Path, str]], git: Mapping[str, Any], created: str
) -> tuple[list[str], list[Reason]]:
    """Write each result as the baseline entry (file, golden key) it is recorded under,
    keeping a previous entry's latencies when they did not change significantly. Returns
    the notes (files written) and a reason for each file that could not be written."""
    from .baseline import BaselineError, find, read, update
    from .compare import entry_from_result

    by_path: dict[Path, list[BaselineEntry]] = {}
    for result, path, key in chosen:
        try:
            old = read(path)
        except BaselineError:  # a corrupt file is replaced below; nothing to keep
            old = {}
        previous = find(old, key, result.golden_name, result.retriever_id)
        entry = entry_from_result(result, git, created, golden_key=key, previous=previous)
        by_path.setdefault(path, []).append(entry)
    notes: list[str] = []
    problems: list[Reason] = []
    for path, entries in by_path.items():
        try:
            update(path, entries, replace_corrupt=True)
        except (BaselineError, OSError) as exc:
            problems.append(Reason(OUTPUT, f"baseline NOT updated: {exc}"))
            continue
        keys = ", ".join(e.key for e in entries)
        notes.append(f"baseline written: {relative(path)} ({keys})")
    return notes, problems


def summary(
    gated: Gated, verdict: Verdict, *, verbose: bool = False, report: Path | None = None
) -> list[str]:
    """The terminal summary, as the plugin's ``retrieval`` section prints it (``report``:
    the JSON report being written, where failed calls' tracebacks are kept)."""
    from .render.terminal import ab_lines, summary_lines

    lines: list[str] = []
    for result in gated.results:
        lines += [*summary_lines(result, verbose=verbose, kept_in=kept_in(report)), ""]
    lines += ab_lines(gated.groups)
    lines += gated.notes
    lines += [f"{r.kind}: {r.message}" for r in gated.reasons]
    count = len(verdict.reasons)
    listed = f" ({count} reason{'' if count == 1 else 's'}, listed above)" if count else ""
    return [*lines, f"retrieval verdict: {verdict.word}{listed}"]


def kept_in(report: Path | None) -> str:
    """:func:`.render.terminal.kept_in` with eval's and combine's ``--report``."""
    from .render import terminal

    return terminal.kept_in(report, "--report")


# ---------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Outputs:
    """The files to write (None: not asked for), relative to ``start``; ``cases``: each
    evaluation's test node id, for the JUnit file."""

    report: Path | None = None
    markdown: Path | None = None
    html: Path | None = None
    junit: Path | None = None
    cases: tuple[str, ...] = ()
    #: the options that write the JSON report and the HTML page, which the Markdown names
    #: when they were not written (pytest's are ``--retrieval-report``, ``--retrieval-html``)
    options: tuple[str, str] = ("--report", "--html")


def read_by(
    results: Sequence[EvaluationResult],
    goldens: Sequence[Path] = (),
    others: Sequence[Path] = (),
    corpora: Mapping[str, str | None] | None = None,
) -> dict[Path, str]:
    """The files the evaluations read (golden sets and their files, baselines, run files),
    resolved, with why no output may overwrite them: the last guard, at writing time, for
    what start-up could not check (a golden set named in a test's marker). ``goldens``: the
    golden sets of a session that stopped before it evaluated any (one that does not load),
    with the corpus each names; ``others``: more files its inputs name (a baseline);
    ``corpora``: golden set source -> the corpus it names, as loaded (a source not in it is
    read for it; None: the corpora were checked at start-up)."""
    from .formats import declared_corpus, golden_files

    read: dict[Path, str] = {path.resolve(): "its inputs name it" for path in others}
    if corpora is not None:
        for source, name in {r.golden_source: r.golden_name for r in results}.items():
            corpus = corpora[source] if source in corpora else declared_corpus(Path(source))
            if corpus:
                read.setdefault(
                    Path(corpus).resolve(), f"it is the corpus of the golden set {name}"
                )
    for golden in goldens:
        corpus = declared_corpus(golden)
        for path in [*golden_files(golden), *([Path(corpus)] if corpus else [])]:
            read.setdefault(path.resolve(), f"it is a file of the golden set {relative(golden)}")
    for result in results:
        for path in golden_files(Path(result.golden_source)):
            read.setdefault(path.resolve(), f"it is a file of the golden set {result.golden_name}")
        if result.baseline_path:
            read.setdefault(Path(result.baseline_path).resolve(), "it is a baseline file")
        if result.run_file:
            read.setdefault(Path(result.run_file).resolve(), "it is a run file")
    return read


def write_outputs(
    outputs: Outputs,
    results: Sequence[EvaluationResult],
    verdict: Verdict,
    *,
    root: Path,
    start: Path,
    groups: Sequence[ABGroup] = (),
    baselines: Callable[[], Mapping[int, BaselineEntry]] | None = None,
    step_summary: bool = True,
    goldens: Sequence[Path] = (),
    others: Sequence[Path] = (),
    corpora: Mapping[str, str | None] | None = None,
    shard: str | None = None,
) -> list[Reason]:
    """JSON, Markdown (appended to ``$GITHUB_STEP_SUMMARY`` too, unless not
    ``step_summary``), HTML and JUnit, each only when asked for, each stamped with the same
    time and the commit of ``root``; ``baselines`` gives the HTML the stored baselines the
    results were compared with; ``shard`` (``"2/3"``) marks a CI shard's partial report.
    Returns an output reason for each file that could not be written."""
    from ._internal.io import git_info, now

    stamped = outputs.report is not None or outputs.html is not None
    created, git = now(), git_info(root) if stamped else {}
    renderers: list[tuple[Path, Callable[[], str | Iterable[str]]]] = []
    if outputs.report is not None:
        from .render.json import report_text

        def report() -> Iterator[str]:  # streamed: a million queries' dicts never at once
            yield from report_text(results, verdict, groups, created=created, git=git, shard=shard)
            yield "\n"

        renderers.append((outputs.report, report))
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY") if step_summary else None
    markdown = ""
    if outputs.markdown is not None or summary_file:
        from .render.markdown import render_markdown

        markdown = render_markdown(
            results,
            groups,
            verdict,
            report=None if outputs.report is None else relative(outputs.report),
            html=None if outputs.html is None else relative(outputs.html),
            options=outputs.options,
        )
        if outputs.markdown is not None:
            renderers.append((outputs.markdown, lambda: markdown))
    if outputs.html is not None:
        from .render.html import render_html

        def page() -> str:
            found = baselines() if baselines is not None else None
            return render_html(results, groups, found, verdict=verdict, created=created, git=git)

        renderers.append((outputs.html, page))
    if outputs.junit is not None:
        from .render.junit import junit_xml

        cases = outputs.cases
        renderers.append(
            (outputs.junit, lambda: junit_xml(results, verdict, cases, created, outputs.report))
        )
    problems: list[Reason] = []
    read = read_by(results, goldens, others, corpora)
    for path, render in renderers:
        target = path if path.is_absolute() else start / path
        clash = read.get(target.resolve())
        if clash is not None:  # a golden set named only in a test's marker, its baseline
            problems.append(Reason(OUTPUT, f"{relative(target)} NOT written: {clash}"))
            continue
        problems += _write(target, render)
    if summary_file:  # appended, as GitHub expects: other steps write there too
        try:
            with open(summary_file, "a", encoding="utf-8") as handle:
                handle.write(markdown + "\n")
        except OSError as exc:
            problems.append(_output_failed(Path(summary_file), exc))
    return problems


def _write(path: Path, render: Callable[[], str | Iterable[str]]) -> list[Reason]:
    from ._internal.io import atomic_write

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = render()
        atomic_write(path, _writable(text) if isinstance(text, str) else map(_writable, text))
    except OSError as exc:
        return [_output_failed(path, exc)]
    return []


def _writable(text: str) -> str:
    """``text`` with any lone surrogate (a retriever's text that is not valid Unicode, which
    UTF-8 cannot write) as U+FFFD: one bad document never costs the whole output. (The JSON
    report escapes them itself, so it reads back the same.)"""
    if text.isascii():
        return text
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def _output_failed(path: Path, exc: OSError) -> Reason:
    message = (
        f"could not write {path}: {exc.strerror or exc}; check the folder exists and is writable"
    )
    return Reason(OUTPUT, message)


def refused(
    outputs: Outputs,
    message: str,
    *,
    root: Path,
    start: Path,
    goldens: Sequence[Path] = (),
    others: Sequence[Path] = (),
) -> list[Reason]:
    """The outputs of an offline gate that could not run (inputs that cannot be combined, a
    baseline file that does not read): no evaluation, a failed verdict saying why, as the
    plugin writes them after a usage error (none over a file of the ``goldens`` or one of
    the ``others``). Returns the files that could not be written."""
    from .gate import session_verdict

    verdict = session_verdict([], [Reason(USAGE, message)])
    outputs = replace(outputs, cases=())
    return write_outputs(
        outputs, [], verdict, root=root, start=start, goldens=goldens, others=others
    )
