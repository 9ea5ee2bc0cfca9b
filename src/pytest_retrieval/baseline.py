"""The baseline store: what main scored, committed next to the golden set.

One file holds entries keyed by ``golden key :: retriever id``, the golden key being the
golden set's path relative to the baseline file's folder (:func:`golden_key`), so golden sets
that share a file name can share one baseline file. Entries of older files, keyed by golden
name, are still found (:func:`find`) and replaced on the next update.

The JSON is deterministic (sorted keys, one query per line) so a refresh reads as a small git
diff. Metric values are stored at full precision (a float's repr reads back exactly), so an
unchanged run compares with differences of exactly 0; latencies, which jitter, are rounded.
Writes are atomic (temp file + ``os.replace``) and serialised by a file lock, so xdist
workers, concurrent CI jobs or a killed process never leave a torn or mixed file.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from pathlib import Path
from typing import Any, NoReturn

from ._internal.gc import paused_gc
from ._internal.io import BASELINE_SUFFIX, atomic_write, locked, relative
from ._internal.json import JsonProblem, loads
from ._version import __version__
from .errors import BaselineError as BaselineError
from .errors import RetrievalError
from .formats import default_qrels, has_surrogate_escape, lone_surrogate
from .metrics import DEFINITIONS_VERSION

FORMAT = "pytest-retrieval-baseline"
VERSION = 1
CI_DIGITS = 10  # CI bounds are estimates: digits beyond these are resampling noise in diffs
LATENCY_DIGITS = 3  # aggregate latency in ms to the microsecond: timer noise is no diff
LATENCY_SIGNIFICANT = 3  # per-query latency: enough for a paired test on log ratios


@dataclass
class BaselineQuery:
    """One query as recorded: its golden fingerprint, metric values, top k and latency.

    ``judged``: when a judge ran, its label of each hit of the top k of the deepest judge
    metric, by rank: 1/0 (binary) or the 0-3 grade, None for a hit it could not grade. Judge
    metrics are then compared on the slots graded in both runs (None: an older file, or no
    judge; the stored values are compared).
    """

    fingerprint: str
    metrics: dict[str, float]
    ranked: list[str]
    latency_ms: float | None = None
    judged: list[int | None] | None = None


@dataclass
class BaselineEntry:
    """One (golden set, retriever) as recorded.

    ``golden_key`` (see :func:`golden_key`) is empty for an entry of an older file, keyed by
    ``golden_name`` instead. ``metrics_version`` is the :data:`~.metrics.DEFINITIONS_VERSION`
    the values were computed under.
    """

    golden_name: str
    golden_fingerprint: str
    retriever_id: str
    k: int
    metrics: dict[str, float]
    ci: dict[str, tuple[float, float]]
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    queries: dict[str, BaselineQuery]
    plugin_version: str = __version__
    created: str = ""
    git: dict[str, Any] = field(default_factory=dict)
    judge: dict[str, Any] | None = None
    golden_key: str = ""
    metrics_version: int = DEFINITIONS_VERSION

    @property
    def key(self) -> str:
        """Its key in the file: ``golden key :: retriever`` (older files: golden name)."""
        return entry_key(self.golden_key or self.golden_name, self.retriever_id)


def entry_key(golden_key: str, retriever_id: str) -> str:
    """``golden.json::bm25``: the key of an entry in the file's ``entries``."""
    return f"{golden_key}::{retriever_id}"


def golden_key(golden_source: str | Path, baseline_path: Path) -> str:
    """The golden set's path relative to the baseline file's folder, with ``/`` separators:
    ``golden.json``, ``data/beir``, ``../golden.json``. Unlike the golden set's name (its file
    stem), it tells ``a/golden.json`` from ``b/golden.json`` in one shared baseline file.

    A BEIR folder and its default split are one golden set, keyed by the folder (``data/beir``
    for ``data/beir/qrels/test.tsv``); another split is keyed by its qrels file
    (``data/beir/qrels/dev.tsv``), so two splits sharing ``beir.baseline.json`` never clash.
    """
    source = Path(golden_source)
    if source.is_dir():
        source = default_qrels(source) or source
    if source.suffix == ".tsv" and source.parent.name == "qrels":
        folder = source.parent.parent
        if default_qrels(folder) == source:
            source = folder
    target, start = os.path.abspath(source), os.path.dirname(os.path.abspath(baseline_path))
    return Path(relative(target, start)).as_posix()  # absolute on another drive (Windows)


def find(
    entries: Mapping[str, BaselineEntry], golden_key: str, golden_name: str, retriever_id: str
) -> BaselineEntry | None:
    """The entry recorded for this golden set and retriever, or None.

    By its key first; else an entry of an older file (no golden key, keyed by golden name)
    with this golden name and retriever, when exactly one such entry exists.
    """
    exact = entries.get(entry_key(golden_key, retriever_id))
    return exact if exact is not None else _legacy(entries, golden_name, retriever_id)


def _legacy(
    entries: Mapping[str, BaselineEntry], golden_name: str, retriever_id: str
) -> BaselineEntry | None:
    """The one entry without a golden key for this name and retriever (None: none, or
    several, when none of them can be told to be this golden set's)."""
    found = [
        entry
        for entry in entries.values()
        if not entry.golden_key
        and entry.golden_name == golden_name
        and entry.retriever_id == retriever_id
    ]
    return found[0] if len(found) == 1 else None


def default_path(golden_source: str | Path) -> Path:
    """``golden.json`` -> ``golden.json.baseline.json`` beside it (also for BEIR folders)."""
    source = Path(golden_source)
    if source.suffix == ".tsv" and source.parent.name == "qrels":  # a BEIR split
        source = source.parent.parent
    return source.with_name(source.name + BASELINE_SUFFIX)


# ---------------------------------------------------------------------------- reading


def read(path: Path) -> dict[str, BaselineEntry]:
    """All entries of a baseline file; ``{}`` when the file does not exist.

    Every field is checked (type and range), so a hand edit is one error naming the field by
    its JSON pointer, never a traceback or a silently wrong comparison.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM, as Windows editors write
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(path, f"cannot be read ({exc})") from None
    with paused_gc():  # a large file makes objects by the million: collections find none
        return _entries(path, text)


def _entries(path: Path, text: str) -> dict[str, BaselineEntry]:
    try:
        document = loads(text)
    except JsonProblem as exc:
        if exc.where.startswith("/"):  # a key written twice, named by its pointer
            raise BaselineError(
                path, f"{exc.where}: this key appears twice in one object; keep one"
            ) from None
        if not exc.problem.startswith("invalid JSON: "):  # nested too deep, a huge number
            problem = f"{exc.where}: {exc.problem}" if exc.where else exc.problem
            if not is_ours(path, text):
                raise _foreign(path, f"not a pytest-retrieval baseline ({problem})") from None
            raise BaselineError(path, problem) from None
        place = f"at {exc.where}: {exc.problem.removeprefix('invalid JSON: ')}"
        if not is_ours(path, text):
            raise _foreign(path, f"not JSON ({place})") from None
        conflict = _CONFLICT.search(text)
        if conflict is not None:
            line = text.count("\n", 0, conflict.start()) + 1
            raise BaselineError(
                path,
                f"git merge-conflict markers (<<<<<<< at line {line})",
                fix=f"re-record it with --retrieval-update-baseline on the merged code (git "
                f"checkout --theirs -- {path} keeps the other side's)",
            ) from None
        where = "corrupt" if text.rstrip().endswith("}") else "truncated"
        raise BaselineError(path, f"{where} JSON {place}") from None
    surrogate = lone_surrogate(document) if has_surrogate_escape(text) else None
    if surrogate is not None:  # ids are written to reports: UTF-8 cannot write it
        raise BaselineError(path, f"{surrogate or '/'}: a lone surrogate escape (such as \\ud800)")
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        problem = f'not a pytest-retrieval baseline (no "format": "{FORMAT}")'
        raise (BaselineError(path, problem) if is_ours(path, text) else _foreign(path, problem))
    root = _Field(document, ())
    key = ""
    try:
        version = root.child("version").value
        whole = type(version) is int  # not a bool, not 1.0
        if whole and version > VERSION:
            raise BaselineError(
                path,
                f"/version: format version {version} is newer than this pytest-retrieval "
                f"understands ({VERSION})",
                fix="upgrade pytest-retrieval (a newer one wrote this file), or re-record it "
                "with --retrieval-update-baseline",
            )
        if not whole or version != VERSION:
            root.child("version").fail(f"is not a format version this plugin reads ({VERSION})")
        parsed = {}
        for key, raw in root.child("entries").items():
            parsed[key] = _entry(key, raw)
    except _Invalid as exc:
        where = f"entry {key!r} is malformed at " if exc.pointer.startswith("/entries/") else ""
        raise BaselineError(path, f"{where}{exc}") from None
    return parsed


def is_ours(path: Path, text: str) -> bool:
    """The file is a baseline, even damaged (a merge conflict, a cut): it is empty, or named
    as the default baseline is (``*.baseline.json``), or JSON whose top level says it is
    one, or damaged JSON (a ``{`` or a conflict's ``<<<<<<<`` first) that names the format.
    What recording may replace; anything else is someone's file (a run file, a test that
    quotes the format, a settings file that mentions it)."""
    if not text.strip() or path.name.endswith(BASELINE_SUFFIX):
        return True
    try:
        document = loads(text)
    except ValueError:  # damaged (JsonProblem is one): by its text
        return text.lstrip().startswith(("{", "<<<<<<<")) and bool(_FORMAT_FIELD.search(text))
    return isinstance(document, dict) and document.get("format") == FORMAT


_FORMAT_FIELD = re.compile(rf'"format"\s*:\s*"{FORMAT}"')
#: a git merge conflict's first marker, at the start of a line
_CONFLICT = re.compile(r"^<<<<<<< ", re.MULTILINE)


def _foreign(path: Path, problem: str) -> BaselineError:
    return BaselineError(
        path,
        problem,
        fix="name a baseline file as the baseline (--retrieval-baseline; --baseline for "
        "pytest-retrieval eval and combine): recording does not replace a file that is not "
        "one; without the option, the baseline is GOLDEN.baseline.json beside the golden set",
    )


_MISSING = object()


class _Invalid(RetrievalError):
    """A field of the file that is missing or has a bad value; ``pointer`` names it."""

    def __init__(self, pointer: str, problem: str) -> None:
        self.pointer = pointer
        super().__init__(f"{pointer}{problem}")


@dataclass(frozen=True)
class _Field:
    """A value in the parsed file and where it is, for messages naming the field."""

    value: Any
    path: tuple[str, ...]

    @property
    def pointer(self) -> str:
        """RFC 6901 JSON pointer, e.g. ``/entries/fruit::retriever/latency_ms/p95``."""
        return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in self.path)

    def fail(self, problem: str, *, show: bool = True) -> NoReturn:
        shown = f"{self.value!r} " if show else ""
        raise _Invalid(self.pointer, f": {shown}{problem}")

    def child(self, name: str, default: Any = _MISSING) -> _Field:
        mapping = self.mapping()
        found = _Field(mapping.get(name, default), (*self.path, name))
        if found.value is _MISSING:
            raise _Invalid(found.pointer, " is missing")
        return found

    def mapping(self) -> dict[str, Any]:
        if not isinstance(self.value, dict):
            self.fail("is not an object")
        return self.value

    def items(self) -> Iterator[tuple[str, _Field]]:
        for name, value in self.mapping().items():
            yield name, _Field(value, (*self.path, name))

    def elements(self) -> Iterator[_Field]:
        if not isinstance(self.value, list):
            self.fail("is not a list")
        for i, value in enumerate(self.value):
            yield _Field(value, (*self.path, str(i)))

    def string(self, *, empty: bool = True) -> str:
        if not isinstance(self.value, str) or not (empty or self.value):
            self.fail("is not a string" if empty else "is not a non-empty string")
        return self.value

    def number(self, low: float, high: float, problem: str, *, show: bool = True) -> float:
        """A number in [low, high]; null (an open query, an unmeasured latency) reads as NaN."""
        value = self.value
        if value is None:
            return math.nan
        number = isinstance(value, int | float) and not isinstance(value, bool)
        # compared with the largest float, not math.isinf(): a 400-digit int overflows it
        if not number or not low <= value <= high or not -_LARGEST <= value <= _LARGEST:
            self.fail(problem, show=show)
        return float(value)


def _metrics(field: _Field) -> dict[str, float]:
    """Metric name -> value in [0, 1] (every family is a rate or a normalised gain)."""
    from .metrics import MetricNameError, parse_metric

    values = {}
    for name, value in field.items():
        try:
            canonical = parse_metric(name).name
        except MetricNameError as exc:
            value.fail(str(exc), show=False)
        if canonical != name:
            value.fail(f"{name!r} is not how metric names are written: {canonical!r}", show=False)
        values[name] = value.number(
            0.0, 1.0, f"{name} is {value.value!r}, not a number in [0, 1] or null", show=False
        )
    return values


def _interval(field: _Field) -> tuple[float, float]:
    if not isinstance(field.value, list) or len(field.value) != 2:
        field.fail("is not a [low, high] pair")
    low, high = (
        bound.number(0.0, 1.0, "is not a number in [0, 1] or null") for bound in field.elements()
    )
    if low > high:
        field.fail(f"low {low} is above high {high}", show=False)
    return low, high


def _latency(field: _Field) -> float | None:
    value = field.number(0.0, math.inf, "is not a number of ms >= 0 or null")
    return None if math.isnan(value) else value


def _entry(key: str, raw: _Field) -> BaselineEntry:
    golden = raw.child("golden")
    name = golden.child("name").string(empty=False)
    retriever = raw.child("retriever").string(empty=False)
    path = golden.child("path", "")
    if path.value != "":
        path.string(empty=False)
        if key != entry_key(path.value, retriever):
            path.fail(f"does not match the entry's key {key!r} (golden path :: retriever id)")
    elif key != entry_key(name, retriever):  # an entry of an older file, keyed by name
        golden.child("name").fail(
            f"does not match the entry's key {key!r} (golden name :: retriever id)"
        )
    k = raw.child("k")
    if type(k.value) is not int or k.value < 1:
        k.fail("is not a whole number >= 1")
    version = raw.child("metrics_version", 1)  # absent: recorded before versions were
    if type(version.value) is not int or version.value < 1:
        version.fail("is not a metric definitions version (a whole number >= 1)")
    latency = raw.child("latency_ms", None)
    if latency.value is None:
        latency = _Field({}, latency.path)
    created = raw.child("created", "")
    if created.string():
        try:
            datetime.fromisoformat(created.value)
        except ValueError:
            created.fail("is not an ISO 8601 timestamp")
    git = raw.child("git", {})
    git.mapping()
    if "commit" in git.value:
        git.child("commit").string()
    if "dirty" in git.value and not isinstance(git.child("dirty").value, bool):
        git.child("dirty").fail("is not true or false")
    judge = raw.child("judge", None)
    if judge.value is not None and not isinstance(judge.value, dict):
        judge.fail("is not an object or null")
    entry = BaselineEntry(
        golden_name=name,
        golden_fingerprint=golden.child("fingerprint").string(empty=False),
        retriever_id=retriever,
        k=k.value,
        metrics=_metrics(raw.child("metrics")),
        ci={name: _interval(bounds) for name, bounds in raw.child("ci", {}).items()},
        latency_p50_ms=_latency(latency.child("p50", None)),
        latency_p95_ms=_latency(latency.child("p95", None)),
        queries=_plain_queries(raw.child("queries").mapping())
        or {query_id: _query(q) for query_id, q in raw.child("queries").items()},
        plugin_version=raw.child("plugin_version", "").string(),
        created=created.value,
        git=git.value,
        judge=judge.value,
        golden_key=path.value,
        metrics_version=version.value,
    )
    _check_means(raw.child("metrics"), entry)
    _check_latency(latency, entry)
    return entry


#: how far a recorded latency percentile may be from the one its queries' latencies give:
#: those are kept to 3 significant digits (0.05 %), the percentile to the microsecond
LATENCY_SLACK = 0.01


def _check_latency(field: _Field, entry: BaselineEntry) -> None:
    """The latency gate compares the recorded p50/p95 with this run's: one edited by hand
    (a p95 of 10^6 ms switches the gate off) is refused, as an edited metric is. Checked
    where every query kept its latency (the percentiles were taken over those)."""
    kept = [query.latency_ms for query in entry.queries.values()]
    if not kept or any(value is None for value in kept):
        return
    import numpy as np

    values = np.asarray(kept, dtype=np.float64)
    for name, stored in (("p50", entry.latency_p50_ms), ("p95", entry.latency_p95_ms)):
        if stored is None:
            continue
        expected = float(np.percentile(values, 50 if name == "p50" else 95))
        if abs(stored - expected) > LATENCY_SLACK * max(abs(expected), 1.0):
            field.child(name).fail(
                f"is not the {name} of the queries' latencies ({expected:.3f} ms): latencies "
                "are recorded, never edited (the latency gate compares them)"
            )


#: how far a recorded aggregate may be from the mean of its queries' values recomputed here:
#: the mean was taken in run order, it is taken again in the file's (query id) order, and
#: the two sums may differ in their last bits (under 1e-12 for 10^7 values in [0, 1]); far
#: below any number shown (4 decimals) or any drop a gate allows
MEAN_SLACK = 1e-9


def _check_means(field: _Field, entry: BaselineEntry) -> None:
    """Each aggregate metric is the mean of its queries' values (null: none has one), as
    recording writes it. The comparison gates on the per-query values while ``show`` and
    relative allowances use the aggregate: an aggregate edited by hand would be believed by
    one and ignored by the other, so it is refused."""
    recorded = [query.metrics for query in entry.queries.values()]
    valued = {name for m in recorded for name, value in m.items() if math.isfinite(value)}
    missing = sorted(valued - set(entry.metrics))
    if missing:  # a deleted aggregate: show drops the metric, the gate has no old value
        field.child(missing[0]).fail(
            "is missing, while the queries have values for it: aggregates are recorded, "
            "never deleted (the comparison reads them)"
        )
    if not entry.metrics:
        return
    import numpy as np

    names = list(entry.metrics)
    nan = math.nan
    count = len(recorded) * len(names)
    values = np.fromiter(
        (m.get(name, nan) for m in recorded for name in names), np.float64, count
    ).reshape(len(recorded), len(names))
    for column, name in enumerate(names):
        found = values[:, column]
        found = found[np.isfinite(found)]
        mean = float(found.mean()) if found.size else nan
        stored = entry.metrics[name]
        if math.isnan(stored) and math.isnan(mean):
            continue
        if math.isnan(stored) or math.isnan(mean) or abs(stored - mean) > MEAN_SLACK:
            value = field.child(name)
            value.fail(
                f"is not the mean of the queries' {name} values "
                f"({'null: none has one' if math.isnan(mean) else repr(mean)}): "
                "aggregates are recorded, never edited (the comparison reads the queries' values)"
            )


def _query(raw: _Field) -> BaselineQuery:
    plain = _plain_query(raw.value)
    if plain is not None:
        return plain
    judged = raw.child("judged", None)
    return BaselineQuery(
        raw.child("fingerprint").string(empty=False),
        _metrics(raw.child("metrics")),
        [doc.string() for doc in raw.child("ranked").elements()],
        _latency(raw.child("latency_ms", None)),
        None if judged.value is None else [_label(slot) for slot in judged.elements()],
    )


#: metric names already found canonical (a baseline repeats a dozen names in every query)
_CANONICAL_NAMES: set[str] = set()


def _plain_query(value: Any) -> BaselineQuery | None:
    """A query entry read by plain type checks (100,000 queries: a fifth of the time the
    field-by-field reading takes); None when one fails, and :func:`_query` reads it field
    by field to name the fault."""
    if type(value) is not dict:
        return None
    fingerprint, metrics = value.get("fingerprint"), value.get("metrics")
    ranked, latency = value.get("ranked"), value.get("latency_ms")
    judged = value.get("judged")
    if (
        type(fingerprint) is not str
        or not fingerprint
        or type(metrics) is not dict
        or type(ranked) is not list
        or not _STRINGS.issuperset(map(type, ranked))
        or not (latency is None or (type(latency) in (int, float) and 0 <= latency <= _LARGEST))
        or not (judged is None or (type(judged) is list and all(map(_is_label, judged))))
        or not _rates(list(metrics.values()))
        or not _canonical(metrics)
    ):
        return None
    return BaselineQuery(
        fingerprint,
        {name: math.nan if v is None else float(v) for name, v in metrics.items()},
        ranked,
        None if latency is None else float(latency),
        judged,
    )


def _plain_queries(values: dict[str, Any]) -> dict[str, BaselineQuery] | None:
    """Every query entry at once, read by :func:`_plain_query`'s checks run over all the
    queries together, in C loops where they can be (100,000 queries: under half the time
    that query-by-query checks take); None when one fails (or nothing is there to read), and
    they are read one by one, which names the entry at fault."""
    entries = list(values.values())
    if not entries or not _DICTS.issuperset(map(type, entries)):
        return None
    fingerprints = [entry.get("fingerprint") for entry in entries]
    metrics = [entry.get("metrics") for entry in entries]
    ranked = [entry.get("ranked") for entry in entries]
    latency = [entry.get("latency_ms") for entry in entries]
    judged = [entry.get("judged") for entry in entries]
    if (
        not _STRINGS.issuperset(map(type, fingerprints))
        or "" in fingerprints
        or not _DICTS.issuperset(map(type, metrics))
        or not _LISTS.issuperset(map(type, ranked))
        or not _STRINGS.issuperset(map(type, chain.from_iterable(ranked)))
        or not all(x is None or (type(x) in (int, float) and 0 <= x <= _LARGEST) for x in latency)
        or not all(j is None or (type(j) is list and all(map(_is_label, j))) for j in judged)
    ):
        return None
    values_of = list(chain.from_iterable(map(dict.values, metrics)))
    if not _rates(values_of) or not _canonical(set(chain.from_iterable(metrics))):
        return None
    if not _FLOATS.issuperset(map(type, values_of)):  # nulls (NaN) or integers: converted
        metrics = [{n: math.nan if v is None else float(v) for n, v in m.items()} for m in metrics]
    if not _FLOATS.issuperset(map(type, latency)):
        latency = [None if x is None else float(x) for x in latency]
    return dict(
        zip(values, map(BaselineQuery, fingerprints, metrics, ranked, latency, judged), strict=True)
    )


_DICTS = frozenset({dict})
_LISTS = frozenset({list})
_FLOATS = frozenset({float})
_STRINGS = frozenset({str})
_LARGEST = sys.float_info.max  # an int beyond it has no float: compared, never converted
_NUMBERS = frozenset({float, int})


def _rates(values: list[Any]) -> bool:
    """Whether every value is null or a number in [0, 1] (not a bool): in C loops when
    none is null (a finite sum rules out NaN and infinities), else value by value."""
    if not _NUMBERS.issuperset(map(type, values)):
        return all(map(_is_rate, values))
    if not values:
        return True
    low, high = min(values), max(values)  # NaN may hide from them: the sum finds it
    return low >= 0 and high <= 1 and math.isfinite(sum(values))


def _is_rate(value: Any) -> bool:
    """null, or a number in [0, 1] (not a bool)."""
    return value is None or (type(value) in (float, int) and 0 <= value <= 1)


def _is_label(value: Any) -> bool:
    return value is None or (type(value) is int and 0 <= value <= 3)


def _canonical(names: Iterable[str]) -> bool:
    """Whether every name is a metric name as written canonically (remembered if so)."""
    from .metrics import MetricNameError, parse_metric

    for name in names:  # no set difference: a query holds a dozen names, all known by now
        if name not in _CANONICAL_NAMES:
            try:
                if parse_metric(name).name != name:
                    return False
            except MetricNameError:
                return False
            _CANONICAL_NAMES.add(name)
    return True


def _label(slot: _Field) -> int | None:
    """A judge's label of one slot: null (ungraded), or a whole number from 0 to 3."""
    if slot.value is not None and (type(slot.value) is not int or not 0 <= slot.value <= 3):
        slot.fail("is not a judge label (0 or 1, a grade 0-3, or null for ungraded)")
    return slot.value


# ---------------------------------------------------------------------------- writing


def _finite(value: float | None) -> float | None:
    """``value`` as stored: a float at full precision; NaN (unscored) as null."""
    return value if value is not None and math.isfinite(value) else None


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None and math.isfinite(value) else None


def _significant(value: float | None, digits: int = LATENCY_SIGNIFICANT) -> float | None:
    """``value`` to ``digits`` significant digits: 12.3456 -> 12.3, 0.0012345 -> 0.00123."""
    return float(f"{value:.{digits}g}") if value is not None and math.isfinite(value) else None


def _metric_values(metrics: Mapping[str, float]) -> dict[str, float | None]:
    return {name: _finite(value) for name, value in metrics.items()}


def _query_dict(query: BaselineQuery) -> dict[str, Any]:
    row: dict[str, Any] = {
        "fingerprint": query.fingerprint,
        "metrics": _metric_values(query.metrics),
        "ranked": query.ranked,
    }
    latency = _significant(query.latency_ms)
    if latency is not None:  # absent rather than null: files without latencies stay as they were
        row["latency_ms"] = latency
    if query.judged is not None:  # only when a judge ran
        row["judged"] = query.judged
    return row


def _entry_dict(entry: BaselineEntry) -> dict[str, Any]:
    golden = {"name": entry.golden_name, "fingerprint": entry.golden_fingerprint}
    if entry.golden_key:
        golden["path"] = entry.golden_key
    return {
        "golden": golden,
        "retriever": entry.retriever_id,
        "k": entry.k,
        "metrics_version": entry.metrics_version,
        "metrics": _metric_values(entry.metrics),
        "ci": {
            name: [_round(lo, CI_DIGITS), _round(hi, CI_DIGITS)]
            for name, (lo, hi) in entry.ci.items()
        },
        "latency_ms": {
            "p50": _round(entry.latency_p50_ms, LATENCY_DIGITS),
            "p95": _round(entry.latency_p95_ms, LATENCY_DIGITS),
        },
        "plugin_version": entry.plugin_version,
        "created": entry.created,
        "git": entry.git,
        "judge": entry.judge,
        "queries": {query_id: _query_dict(q) for query_id, q in entry.queries.items()},
    }


def render(entries: Mapping[str, BaselineEntry]) -> str:
    """Deterministic text: sorted keys, one query per line."""
    lines = ["{", f'  "format": "{FORMAT}",', f'  "version": {VERSION},', '  "entries": {']
    keys = sorted(entries)
    for i, key in enumerate(keys):
        body = _entry_dict(entries[key])
        queries = body.pop("queries")
        head = json.dumps(body, sort_keys=True, ensure_ascii=False, indent=2, allow_nan=False)
        head_lines = head.splitlines()[:-1]  # drop the closing brace: queries follow
        lines.append(f"    {json.dumps(key)}: " + head_lines[0])
        lines.extend("    " + line for line in head_lines[1:])
        lines[-1] += ","
        lines.append('      "queries": {')
        query_ids = sorted(queries)
        for j, query_id in enumerate(query_ids):
            row = json.dumps(
                queries[query_id],
                sort_keys=True,
                ensure_ascii=False,
                separators=(", ", ": "),
                allow_nan=False,
            )
            comma = "," if j < len(query_ids) - 1 else ""
            lines.append(f"        {json.dumps(query_id)}: {row}{comma}")
        lines.append("      }")
        lines.append("    }" + ("," if i < len(keys) - 1 else ""))
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def update(path: Path, new_entries: Sequence[BaselineEntry], *, replace_corrupt: bool) -> None:
    """Merge ``new_entries`` into the file under a lock, then replace it atomically.

    Entries of other golden sets or retrievers already in the file are kept; an entry of an
    older file (keyed by golden name) that a new entry stands for (see :func:`find`) is
    removed. Two new entries with one key are refused: one would silently overwrite the other.
    A corrupt file is only replaced when ``replace_corrupt`` (the user asked for an update).
    """
    by_key: dict[str, BaselineEntry] = {}
    for entry in new_entries:
        other = by_key.setdefault(entry.key, entry)
        if other is not entry:
            raise BaselineError(
                path,
                f"two results would be recorded as the entry {entry.key!r}: "
                f"{_described(other)} and {_described(entry)}",
                fix="give each evaluated retriever its own id, and evaluate each golden set "
                "once per run",
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path, timeout=120):
        try:
            entries = read(path)
        except BaselineError:
            if not replace_corrupt or not is_ours(path, _text(path)):
                raise  # someone's file (a run file, a test) is not replaced, even asked to
            entries = {}
        for entry in new_entries:
            if entry.golden_key:
                legacy = _legacy(entries, entry.golden_name, entry.retriever_id)
                if legacy is not None:
                    del entries[legacy.key]
            entries[entry.key] = entry
        atomic_write(path, render(entries))


def _text(path: Path) -> str:
    """The file's text, bytes that are not UTF-8 replaced ("" when it cannot be read)."""
    try:
        return path.read_bytes().decode("utf-8-sig", errors="replace")
    except OSError:
        return ""


def _described(entry: BaselineEntry) -> str:
    """A result to be recorded, as a message names it: its golden set and what it holds."""
    golden = entry.golden_key or entry.golden_name
    return (
        f"golden set {golden} (fingerprint {entry.golden_fingerprint}, "
        f"{len(entry.queries)} queries) with retriever {entry.retriever_id}"
    )
