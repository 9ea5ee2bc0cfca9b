"""The baseline store: what main scored, committed next to the golden set.

One file holds entries keyed by ``golden name :: retriever id``. The JSON is deterministic
(sorted keys, rounded floats, one query per line) so a refresh reads as a small git diff.
Writes are atomic (temp file + ``os.replace``) and serialised by a file lock, so xdist
workers, concurrent CI jobs or a killed process never leave a torn or mixed file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from . import __version__

FORMAT = "pytest-retrieval-baseline"
VERSION = 1
DIGITS = 10  # per-query floats are rounded so diffs show real changes, not float noise
LATENCY_DIGITS = 3  # latency in ms to the microsecond: timer noise below that is no diff
STRAY_AFTER_S = 60  # a writer's temp file this old is left over from a killed process


class BaselineError(Exception):
    """A baseline file that cannot be trusted; says which file, what is wrong, what to do."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(
            f"baseline {path}: {problem}\n  fix: restore it from git (git checkout -- {path}) "
            "or re-record it with --retrieval-update-baseline"
        )


@dataclass
class BaselineQuery:
    fingerprint: str
    metrics: dict[str, float]
    ranked: list[str]


@dataclass
class BaselineEntry:
    """One (golden set, retriever) as recorded."""

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

    @property
    def key(self) -> str:
        return entry_key(self.golden_name, self.retriever_id)


def entry_key(golden_name: str, retriever_id: str) -> str:
    return f"{golden_name}::{retriever_id}"


def default_path(golden_source: str | Path) -> Path:
    """``golden.json`` -> ``golden.json.baseline.json`` beside it (also for BEIR folders)."""
    source = Path(golden_source)
    if source.suffix == ".tsv" and source.parent.name == "qrels":  # a BEIR split
        source = source.parent.parent
    return source.with_name(source.name + ".baseline.json")


# ---------------------------------------------------------------------------- reading


def read(path: Path) -> dict[str, BaselineEntry]:
    """All entries of a baseline file; ``{}`` when the file does not exist.

    Every field is checked (type and range), so a hand edit is one error naming the field by
    its JSON pointer, never a traceback or a silently wrong comparison.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(path, f"cannot be read ({exc})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        where = "corrupt" if text.rstrip().endswith("}") else "truncated"
        raise BaselineError(
            path, f"{where} JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BaselineError(path, f'not a pytest-retrieval baseline (no "format": "{FORMAT}")')
    root = _Field(document, ())
    key = ""
    try:
        version = root.child("version").value
        whole = type(version) is int  # not a bool, not 1.0
        if whole and version > VERSION:
            raise BaselineError(
                path,
                f"format version {version} is newer than this pytest-retrieval understands "
                f"({VERSION}); upgrade pytest-retrieval",
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


_MISSING = object()


class _Invalid(Exception):
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
        if not number or not low <= value <= high or math.isinf(value):
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
    if key != entry_key(name, retriever):
        golden.child("name").fail(
            f"does not match the entry's key {key!r} (golden name :: retriever id)"
        )
    k = raw.child("k")
    if type(k.value) is not int or k.value < 1:
        k.fail("is not a whole number >= 1")
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
    return BaselineEntry(
        golden_name=name,
        golden_fingerprint=golden.child("fingerprint").string(empty=False),
        retriever_id=retriever,
        k=k.value,
        metrics=_metrics(raw.child("metrics")),
        ci={name: _interval(bounds) for name, bounds in raw.child("ci", {}).items()},
        latency_p50_ms=_latency(latency.child("p50", None)),
        latency_p95_ms=_latency(latency.child("p95", None)),
        queries={query_id: _query(q) for query_id, q in raw.child("queries").items()},
        plugin_version=raw.child("plugin_version", "").string(),
        created=created.value,
        git=git.value,
        judge=judge.value,
    )


def _query(raw: _Field) -> BaselineQuery:
    return BaselineQuery(
        raw.child("fingerprint").string(empty=False),
        _metrics(raw.child("metrics")),
        [doc.string() for doc in raw.child("ranked").elements()],
    )


# ---------------------------------------------------------------------------- writing


def _round(value: float | None, digits: int = DIGITS) -> float | None:
    return round(value, digits) if value is not None and math.isfinite(value) else None


def _entry_dict(entry: BaselineEntry) -> dict[str, Any]:
    return {
        "golden": {"name": entry.golden_name, "fingerprint": entry.golden_fingerprint},
        "retriever": entry.retriever_id,
        "k": entry.k,
        "metrics": {name: _round(v) for name, v in entry.metrics.items()},
        "ci": {name: [_round(lo), _round(hi)] for name, (lo, hi) in entry.ci.items()},
        "latency_ms": {
            "p50": _round(entry.latency_p50_ms, LATENCY_DIGITS),
            "p95": _round(entry.latency_p95_ms, LATENCY_DIGITS),
        },
        "plugin_version": entry.plugin_version,
        "created": entry.created,
        "git": entry.git,
        "judge": entry.judge,
        "queries": {
            query_id: {
                "fingerprint": q.fingerprint,
                "metrics": {name: _round(v) for name, v in q.metrics.items()},
                "ranked": q.ranked,
            }
            for query_id, q in entry.queries.items()
        },
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

    Entries of other golden sets or retrievers already in the file are kept. A corrupt file
    is only replaced when ``replace_corrupt`` (the user asked for an update).
    """
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_path(path)), timeout=120):
        try:
            entries = read(path)
        except BaselineError:
            if not replace_corrupt:
                raise
            entries = {}
        for entry in new_entries:
            entries[entry.key] = entry
        atomic_write(path, render(entries))


def lock_path(path: Path) -> Path:
    """The lock for writing ``path``: in the temp dir, so no ``.lock`` file litters the
    user's repository; keyed by the absolute path, so every process agrees on it."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]
    folder = Path(tempfile.gettempdir()) / "pytest-retrieval-locks"
    folder.mkdir(exist_ok=True)
    return folder / f"{digest}.lock"


def atomic_write(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``.

    The new file gets the old one's permissions, or the usual umask-based ones for a new
    file (mkstemp alone would leave it readable by its owner only). Temp files of this
    target left by a writer killed before its rename are removed first.
    """
    _remove_stray_temp_files(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _remove_stray_temp_files(path: Path) -> None:
    """Delete ``.NAME.XXXXXXXX.tmp`` files (mkstemp's pattern in :func:`atomic_write`) of
    ``path`` older than a minute: a live writer renames its file within seconds."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp")
    cutoff = time.time() - STRAY_AFTER_S
    try:
        candidates = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    except OSError:
        return
    for candidate in candidates:
        try:
            if candidate.is_file() and candidate.stat().st_mtime < cutoff:
                candidate.unlink()
        except OSError:  # gone already, or not ours to remove: the write goes on
            continue


def git_info(folder: Path) -> dict[str, Any]:
    """Commit and dirty flag of the repository holding ``folder``, when there is one."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            return {}
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
