"""Per-process state and the checks made before anything runs.

``SessionState`` lives in ``config.stash`` of every process (never module globals: pytester
runs in-process): settings, loaded golden sets, baselines, the judge. Here too: the settings
layered per golden set (thresholds, allowances), marker and tag checks, and the two places a
:class:`~.errors.ConfigError` is turned into what pytest shows (a usage error outside tests,
a failure inside). The controller that gathers results is :mod:`.controller`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._internal.io import relative
from ..errors import ConfigError, UsageError, made_an_error, warning_made_error
from ..settings import JudgeConfig
from .options import Settings
from .xdist import is_worker

if TYPE_CHECKING:
    from ..baseline import BaselineEntry
    from ..golden import GoldenSet
    from ..limits import Allowance, Threshold

MARKER = "retrieval"
MARKER_KEYS = {"golden", "thresholds", "metrics", "k", "max_drop", "gate"}


@dataclass
class SessionState:
    """Per-process state: settings, loaded golden sets, baselines, the judge."""

    settings: Settings
    goldens: dict[Path, GoldenSet] = field(default_factory=dict)
    #: the file pytest collects for each configured golden set -> that golden set's path
    anchors: dict[Path, Path] = field(default_factory=dict)
    #: the way pytest's walk takes to golden sets in folders it skips (dot folders, build,
    #: --ignore...): what is on it is collected; the rest of a skipped folder is not
    detour: set[Path] = field(default_factory=set)
    skipped: set[Path] = field(default_factory=set)
    #: golden set path -> node ids of its evaluations that were collected (before -k/-m/...)
    expected: dict[Path, set[str]] = field(default_factory=dict)
    baselines: dict[Path, dict[str, BaselineEntry]] = field(default_factory=dict)
    corpora: dict[str, dict[str, str]] = field(default_factory=dict)
    #: node id -> its index among the collected items (declaration order)
    order: dict[str, int] = field(default_factory=dict)
    #: usage errors raised after start-up (a marker's settings), for the outputs' verdict
    usage: list[str] = field(default_factory=list)
    _judge: Any = None

    def golden(self, path: Path) -> GoldenSet:
        """The golden set at ``path``, loaded (and sampled) once; a bad file is a usage error."""
        if path not in self.goldens:
            golden = load(path, require_relevant=self.settings.judge is None)
            if self.settings.sample is not None:
                golden = golden.sample(self.settings.sample, self.settings.sample_seed)
            self.goldens[path] = golden
        golden = self.goldens[path]
        if not self.settings.runs or self.settings.judge is not None:  # searched or judged
            from ..golden import check_texts

            # at start-up: a usage error, before anything runs
            check_texts(golden, "" if not self.settings.runs else "the LLM judge")
        return golden

    def configured_golden(self, *, load: bool = True) -> GoldenSet | None:
        """The golden set of a test that names none: the only one configured (command line
        or ini), also when pytest's paths left it unevaluated; None: none or several (or,
        without ``load``, not loaded yet)."""
        configured: dict[Path, Path] = {}
        for path in self.settings.goldens:  # the first spelling, as the schedule loads it
            configured.setdefault(path.resolve(), path)
        if len(configured) != 1:
            return None
        path = next(iter(configured.values()))
        return self.golden(path) if load else self.goldens.get(path)

    def judge(self, config: pytest.Config | None = None) -> Any:
        """This process's LLM judge (None without ``--retrieval-judge``), built once."""
        if self._judge is None and self.settings.judge is not None:
            self._judge = make_judge(self.settings.judge, config)
        return self._judge

    def close(self) -> None:
        """Give back what the session opened (the judge's cache connections) and let go of
        what it loaded: nothing reads the golden sets once the outputs are written, and a
        million queries kept alive cost pytest's closing garbage collections a traversal
        each (0.15 s at 100,000 queries)."""
        if self._judge is not None:
            self._judge.close()
        self.goldens.clear()
        self.corpora.clear()
        self.baselines.clear()

    def label_cache(self, config: pytest.Config) -> Path | None:
        """Where cached labels live: the judge's cache folder, or pytest's cache dir."""
        judge = self.settings.judge
        if judge is not None:
            return judge.cache_dir
        pytest_cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
        if pytest_cache is None:
            return None
        from .._internal.io import cache_outputs, link_problem

        folder: Path = pytest_cache.mkdir("retrieval-labels")
        for name, path in cache_outputs("the downstream label cache", folder):
            if (problem := link_problem(name, path)) is not None:  # SQLite would follow it
                raise ConfigError(problem)
        return folder

    def baseline_path(self, golden: GoldenSet) -> Path:
        from ..baseline import default_path

        return self.settings.baseline or default_path(golden.source)

    def baseline_entries(self, path: Path) -> dict[str, BaselineEntry]:
        """Read once per process; a bad file is a usage error naming it."""
        from ..baseline import read

        if path not in self.baselines:
            self.baselines[path] = read(path)
        return self.baselines[path]


#: this process's session state, in ``config.stash``
STATE = pytest.StashKey[SessionState]()


def make_judge(settings: JudgeConfig, config: pytest.Config | None = None) -> Any:
    """Build the judge; missing credentials or a bad prompt file are usage errors, unless
    ``--retrieval-judge-fallback cache-only`` turns missing credentials into a warning."""
    from dataclasses import replace

    from ..judge import Judge, JudgeConfigError, NoCredentials

    def build(cache_only: bool) -> Any:
        return Judge(replace(settings, cache_only=cache_only))

    try:
        return build(settings.cache_only)
    except NoCredentials as exc:  # none at all; given but incomplete is a usage error below
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
            if not is_worker(config):  # said once, by the controller, not by every worker
                warn_at_start(config, message)
        else:
            warnings.warn(pytest.PytestWarning(message), stacklevel=2)
        return judge
    except JudgeConfigError as exc:
        raise ConfigError(f"--retrieval-judge: {exc}") from None


#: said of a PytestWarning that the warning filters in force turn into an error
AS_ERROR = made_an_error()


def warn_at_start(config: pytest.Config, message: str) -> None:
    """A warning while pytest starts. One that the warning filters make an error is a usage
    error with its fix, not an INTERNALERROR traceback out of ``pytest_configure``."""
    with warning_made_error(message, "pytest.PytestWarning"):
        config.issue_config_time_warning(pytest.PytestWarning(message), stacklevel=3)


def warnings_fail(message: str) -> bool:
    """Whether the warning filters in force make a PytestWarning saying ``message`` an error,
    found without showing it (a shard stamps this, so ``combine`` decides as one run)."""
    with warnings.catch_warnings(record=True):
        return not warned(message)


def warned(message: str) -> bool:
    """``message`` as a PytestWarning, for pytest's warnings summary; False when the warning
    filters make it an error. The caller then fails in its own words, keeping what it
    computed: raised here, inside an evaluation or the controller's merge of a split, it
    was a traceback and lost the result and the outputs."""
    try:
        warnings.warn(pytest.PytestWarning(message), stacklevel=3)
    except Warning:
        return False
    return True


def corpus_check(golden: GoldenSet, settings: Settings) -> str | None:
    """Relevant ids missing from the golden set's own corpus (its ``"corpus"`` path or a BEIR
    folder's corpus.jsonl): a warning to return, or a usage error with --retrieval-strict."""
    from ..golden import GoldenError, corpus_file, corpus_problem, load_corpus_ids

    if golden.corpus is None:
        return None
    try:
        problem = corpus_problem(golden, load_corpus_ids(corpus_file(golden)), golden.corpus)
    except GoldenError as exc:  # a missing or unreadable corpus: nothing to check against
        problem = exc
    if problem is not None and settings.strict:
        raise ConfigError(f"{problem} (--retrieval-strict)")
    return None if problem is None else str(problem)


def load(path: Path, require_relevant: bool = True) -> GoldenSet:
    """The golden set at ``path``, TREC qrels without texts too: whether it is searched is
    known only once it is evaluated (:func:`.evaluation.evaluate` checks)."""
    from ..golden import load_golden

    return load_golden(path, require_relevant=require_relevant, require_texts=False)


def layered_allowances(
    settings: Settings, golden: GoldenSet, marker: Mapping[str, object] | None = None
) -> dict[str, Allowance]:
    """Allowed drops: golden file < ini < marker < command line, metric by metric."""
    from ..limits import AllowanceError, merge_allowances, parse_allowance

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
    from ..limits import ThresholdError, from_mapping, merge

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
    """A threshold on a tag that no query of the golden set has can never be checked (a
    sample may not have drawn a tag the full set has: its gate says so instead)."""
    tagged = [t for t in chosen if t.tag is not None]
    if not tagged or golden.sampled_from is not None:
        return
    tags = {tag for query in golden.queries for tag in query.tags}
    for threshold in tagged:
        if threshold.tag not in tags:
            raise ConfigError(
                f"{where + ': ' if where else ''}threshold {threshold.key} ({threshold.source}): "
                f"no query of {relative(golden.source)} has the tag {threshold.tag!r} "
                f"(its tags: {', '.join(sorted(tags)) or 'none'}); fix the tag name or tag the "
                "queries"
            )


def check_marker(options: Mapping[str, Any], where: str, golden: GoldenSet | None) -> None:
    """The settings of one ``@pytest.mark.retrieval(...)``: types, names, values and, when its
    golden set is known, the tags its thresholds name. Any mistake is a usage error."""
    from ..limits import AllowanceError, ThresholdError, from_mapping, parse_allowance
    from ..metrics import MAX_K, MetricNameError, parse_metric

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
def usage_errors(state: SessionState | None = None) -> Iterator[None]:
    """Where a :class:`~.errors.ConfigError` (a bad golden set, baseline file, option, ini
    line or marker setting) or the library's :class:`~.errors.UsageError` becomes pytest's
    usage error, outside tests (see :func:`as_test_failure` for inside): its message, which
    names the place and the fix, never a traceback. With ``state``, the message is kept for
    the outputs written at the end."""
    try:
        yield
    except (ConfigError, UsageError) as exc:
        if state is not None:
            state.usage.append(str(exc))
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
