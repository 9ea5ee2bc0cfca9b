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
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__

FORMAT = "pytest-retrieval-baseline"
VERSION = 1
DIGITS = 10  # per-query floats are rounded so diffs show real changes, not float noise


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
    """All entries of a baseline file; ``{}`` when the file does not exist."""
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
    version = document.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise BaselineError(
            path,
            f"format version {version!r} is newer than this pytest-retrieval understands "
            f"({VERSION}); upgrade pytest-retrieval",
        )
    entries = document.get("entries")
    if not isinstance(entries, dict):
        raise BaselineError(path, '"entries" must be an object')
    parsed = {}
    for key, raw in entries.items():
        try:
            parsed[key] = _entry(raw)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(
                path, f"entry {key!r} is malformed ({type(exc).__name__}: {exc})"
            ) from None
    return parsed


def _floats(raw: Mapping[str, Any]) -> dict[str, float]:
    values = {}
    for name, value in raw.items():
        if value is None:  # an open query has no golden metrics (stored as null)
            values[str(name)] = math.nan
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"{name} is {value!r}, not a number")
        values[str(name)] = float(value)
    return values


def _entry(raw: Mapping[str, Any]) -> BaselineEntry:
    queries = {}
    for query_id, q in raw["queries"].items():
        ranked = q["ranked"]
        if not isinstance(ranked, list) or not all(isinstance(d, str) for d in ranked):
            raise ValueError(f"query {query_id}: 'ranked' must be a list of doc-id strings")
        queries[str(query_id)] = BaselineQuery(str(q["fingerprint"]), _floats(q["metrics"]), ranked)
    latency = raw.get("latency_ms") or {}
    return BaselineEntry(
        golden_name=str(raw["golden"]["name"]),
        golden_fingerprint=str(raw["golden"]["fingerprint"]),
        retriever_id=str(raw["retriever"]),
        k=int(raw["k"]),
        metrics=_floats(raw["metrics"]),
        ci={name: (float(lo), float(hi)) for name, (lo, hi) in raw.get("ci", {}).items()},
        latency_p50_ms=latency.get("p50"),
        latency_p95_ms=latency.get("p95"),
        queries=queries,
        plugin_version=str(raw.get("plugin_version", "")),
        created=str(raw.get("created", "")),
        git=dict(raw.get("git") or {}),
        judge=raw.get("judge"),
    )


# ---------------------------------------------------------------------------- writing


def _round(value: float) -> float | None:
    return round(value, DIGITS) if math.isfinite(value) else None


def _entry_dict(entry: BaselineEntry) -> dict[str, Any]:
    return {
        "golden": {"name": entry.golden_name, "fingerprint": entry.golden_fingerprint},
        "retriever": entry.retriever_id,
        "k": entry.k,
        "metrics": {name: _round(v) for name, v in entry.metrics.items()},
        "ci": {name: [_round(lo), _round(hi)] for name, (lo, hi) in entry.ci.items()},
        "latency_ms": {"p50": entry.latency_p50_ms, "p95": entry.latency_p95_ms},
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
    file (mkstemp alone would leave it readable by its owner only).
    """
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
