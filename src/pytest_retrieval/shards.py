"""One golden set across CI jobs: ``pytest --retrieval-shard I/N`` evaluates the queries whose
id hashes to shard I and writes a partial report; ``pytest-retrieval combine`` joins the
partial reports of all N shards and gates the whole exactly as one run would.

A query's shard is :func:`shard_of` its id: the first 8 bytes of the SHA-256 of the id's
UTF-8, big-endian, modulo N -- the same on every machine and Python version, so N jobs cut
the set into N disjoint parts without talking to each other, and a changed golden set moves
only the queries added or removed.

A part cannot be gated: a threshold or a regression is a statement about the whole set, and
a part's mean and confidence interval are not the whole's. So a shard run fails only on what
is broken whatever the other shards find (retriever calls that failed, a usage error, an
evaluation that could not run), and its partial report carries what the gate of the whole
needs (:class:`~.results.Part`): the whole set's fingerprint and size, each query's position
in it, and the gate's settings. ``combine`` refuses partial reports that do not make one
whole -- a shard missing or given twice, another golden set, retriever, option or commit --
merges each evaluation's parts (:func:`~.evaluation.merge_parts`: every number computed again
over the union, in golden order) and gates them with :mod:`.finish`.

Nothing here imports pytest: the test that evaluates a shard's part is ``plugin/shard.py``;
``combine`` is the CLI's.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._internal.io import leads_out, relative
from ._internal.json import loads
from .errors import RetrievalError
from .validators import Shard

if TYPE_CHECKING:
    from .finish import GateSettings, Whole
    from .golden import GoldenSet
    from .results import EvaluationResult


def shard_of(query_id: str, count: int) -> int:
    """The shard (0-based, of ``count``) a query belongs to: the first 8 bytes of the
    SHA-256 of its id's UTF-8, big-endian, modulo ``count``. Stable across machines and
    Python versions (``hash()`` is salted per process)."""
    digest = hashlib.sha256(query_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


# ---------------------------------------------------------------------------- a shard's part


def cut(golden: GoldenSet, shard: Shard) -> tuple[GoldenSet, tuple[int, ...]]:
    """The golden set's queries of ``shard``, in golden order, and their positions in the
    whole set."""
    positions = tuple(
        row
        for row, query in enumerate(golden.queries)
        if shard_of(query.id, shard.count) == shard.index
    )
    fields = {name: getattr(golden, name) for name in type(golden).model_fields}
    fields["queries"] = tuple(golden.queries[row] for row in positions)
    return type(golden).model_construct(**fields), positions  # not model_copy: cached hashes


def stamp(
    result: EvaluationResult,
    shard: Shard,
    *,
    total: int,
    positions: Sequence[int],
    golden: str,
    nodeid: str,
    settings: GateSettings,
) -> EvaluationResult:
    """A part's result as its partial report keeps it: stamped with the shard, the whole
    set's size and each query's position in it, and the gate's settings. Its verdict keeps
    only failed retriever calls (the whole has them too); thresholds, regressions and label
    coverage are decided on the whole."""
    from .gate import part_verdict
    from .results import Part

    part = Part(
        index=shard.index,
        count=shard.count,
        total=total,
        positions=tuple(positions),
        golden=golden,
        nodeid=nodeid,
        settings=settings.to_dict(),
    )
    return replace(result, part=part, verdict=part_verdict(result))


def shard_name(path: Path, start: Path) -> str:
    """``path`` relative to ``start`` when it is inside it (CI jobs check the repository out
    at different places), else absolute: how a shard names its golden set and baseline."""
    shown = relative(os.path.abspath(path), os.path.abspath(start))
    return str(os.path.abspath(path)) if leads_out(shown) else Path(shown).as_posix()


def shard_notes(results: Sequence[EvaluationResult], report: Path | None) -> list[str]:
    """What the terminal says of a shard run: which part of each golden set ran, and that the
    gate runs on the whole."""
    seen: dict[str, str] = {}
    for result in results:
        part = result.part
        if part is not None and part.golden not in seen:
            seen[part.golden] = (
                f"shard {Shard(part.index, part.count)}: {len(result.queries)} of {part.total} "
                f"queries of {part.golden}"
            )
    written = f"partial report {relative(report)}; " if report is not None else ""
    return [
        f"{line} ({written}not gated here: thresholds and baselines apply to the whole set; "
        "gate it with pytest-retrieval combine and every shard's report)"
        for line in seen.values()
    ]


# ---------------------------------------------------------------------------- combine


class ShardError(RetrievalError, ValueError):
    """Partial reports that do not make one whole; the message names the files, what is
    wrong and the fix."""


class SettingsDiffer(ShardError):
    """The shards' settings of one evaluation differ, or do not read: unless one was edited
    to a value no shard writes (``"k": "10"``), which the report schema then names."""


@dataclass(frozen=True)
class Partial:
    """One shard's partial report: its file, its shard and its evaluations (parts), and how
    many evaluations of its own tests (``retrieval_eval`` calls: never sharded) it left out."""

    path: Path
    shard: Shard
    results: list[EvaluationResult]
    left_out: int = 0
    version: str = ""  # the pytest-retrieval that wrote it
    commit: str = ""  # the git commit its shard ran on ("": not in a repository)
    #: golden set (as the shard named it) -> why its shard ran only part of its evaluations
    #: (-k, a sample): its verdict's partial-run warnings (:data:`UNRUN`), which keep
    #: ``combine`` from recording that golden set's baseline
    unrun: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


RERUN = "run every shard on the same commit with the same options"
#: a shard's partial-run warning (``Reporter._unrun_shard`` writes it): golden set, why
UNRUN = re.compile(r"(.+?): this shard ran part of it \((.*)\): combine records no baseline .*")


#: how a partial report says so near its start: the top-level ``"shard": "I/N"``, or its
#: first evaluation's part (written before the ``shard`` key was)
_PART_HEAD = re.compile(
    rb'"shard"\s*:\s*"(\d+)/(\d+)"'
    rb'|"evaluations"\s*:\s*\[\s*\{\s*"part"\s*:\s*\{\s*"index"\s*:\s*(\d+)\s*,'
    rb'\s*"count"\s*:\s*(\d+)'
)
#: a report this small is read whole when its head does not tell (keys sorted by a tool)
_READ_WHOLE = 32 << 20


def partial_report_of(path: Path) -> str | None:
    """``shard 3/3`` when ``path`` is an existing shard's partial report, else None, so that
    an output of ``combine`` or ``eval`` never replaces the report of a shard it was not
    given. Told by its first 64 KiB (a partial report of 300,000 queries is hundreds of MB),
    else, for a file under 32 MiB, by reading it whole."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(1 << 16)
            size = os.fstat(handle.fileno()).st_size
    except OSError:  # absent, a folder, unreadable: not one to keep
        return None
    found = _PART_HEAD.search(head)
    if found is not None:
        if found[1] is not None:
            return f"shard {int(found[1])}/{int(found[2])}"
        return f"shard {int(found[3]) + 1}/{int(found[4])}"
    if size > _READ_WHOLE or b"{" not in head[:64]:
        return None
    try:
        document = loads(path.read_bytes())
    except (OSError, ValueError):  # unreadable, not JSON, too deep, a key twice
        return None
    shard = document.get("shard") if isinstance(document, dict) else None
    if isinstance(shard, str):
        return f"shard {shard}"
    evaluations = document.get("evaluations") if isinstance(document, dict) else None
    for entry in evaluations if isinstance(evaluations, list) else ():
        part = entry.get("part") if isinstance(entry, dict) else None
        if isinstance(part, dict) and all(type(part.get(k)) is int for k in ("index", "count")):
            return f"shard {part['index'] + 1}/{part['count']}"
    return None


def read_partial(path: Path, document: Mapping[str, Any]) -> Partial:
    """A partial report (``--retrieval-shard ... --retrieval-report``), checked: it holds
    evaluations, each a part of one shard, and its session failed for no other reason."""
    from .gate import session_verdict
    from .render.json import REPORT_VERSION
    from .results import result_from_dict
    from .verdicts import PARTIAL_RUN

    version = document.get("version")
    if type(version) is not int or version != REPORT_VERSION:
        raise ShardError(
            f"{path}, /version: {version!r} is not the report format this pytest-retrieval "
            f"reads ({REPORT_VERSION}); run the shards and combine with one pytest-retrieval"
        )
    verdict = document.get("verdict") or {}
    stopped = [f"{r.get('kind')}: {r.get('message')}" for r in verdict.get("reasons") or []]
    entries = document["evaluations"]
    if not entries:
        raise ShardError(
            f"{path} holds no evaluation: its shard run stopped before any ran ("
            + ("; ".join(stopped) or "no reason recorded")
            + "); fix that run and run the shard again"
        )
    for entry in entries:  # before anything is merged, recorded or written
        _check_queries(entry.get("queries") if isinstance(entry, dict) else None)
    try:
        results = [result_from_dict(entry) for entry in entries]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # where, if the schema says
        where = malformed([(path, document)])
        raise where or ShardError(f"{path}: a malformed evaluation entry ({exc!r})") from None
    parts = [r for r in results if r.part is not None]
    if not parts and isinstance(shard := document.get("shard"), str):
        raise ShardError(
            f"{path}: shard {shard} ran no golden-set evaluation, only {_label(results[0])}"
            f"{'' if len(results) == 1 else f' and {len(results) - 1} more'} (retrieval_eval "
            "tests, which shards do not split): run every shard without -k, -m or --lf "
            "leaving its golden sets out"
        )
    if not parts:
        raise ShardError(
            f"{path}: {_label(results[0])} is not a part of a shard: the report was written "
            "without --retrieval-shard; combine reads the reports of `pytest --retrieval-shard "
            "I/N --retrieval-report PATH`, one per shard"
        )
    shards = sorted({(r.part.index, r.part.count) for r in parts if r.part is not None})
    if len(shards) > 1:
        raise ShardError(
            f"{path} holds parts of several shards ({', '.join(str(Shard(*s)) for s in shards)}): "
            "it is not one shard's report"
        )
    ours = {(r.kind, r.message) for r in session_verdict(results, []).reasons}
    other = [
        line
        for line, r in zip(stopped, verdict.get("reasons") or [], strict=True)
        if (r.get("kind"), r.get("message")) not in ours
    ]
    if other:
        raise ShardError(
            f"{path} (shard {Shard(*shards[0])}): its run failed beyond its evaluations ("
            + "; ".join(other)
            + "); fix that run and run the shard again"
        )
    version = str(document.get("plugin_version", ""))
    git = document.get("git")
    commit = str(git.get("commit") or "") if isinstance(git, dict) else ""
    unrun: dict[str, tuple[str, ...]] = {}
    for warning in verdict.get("warnings") or []:
        if isinstance(warning, dict) and warning.get("kind") == PARTIAL_RUN:
            found = UNRUN.fullmatch(str(warning.get("message")))
            golden, why = found.groups() if found else ("", str(warning.get("message")))
            unrun[golden] = (*unrun.get(golden, ()), why)  # "": no golden set named: all
    shard = Shard(*shards[0])
    return Partial(path, shard, parts, len(results) - len(parts), version, commit, unrun)


#: the types of a query's fields in a report, as its schema has them (None: JSON null)
_QUERY_FIELDS: dict[str, set[type]] = {
    "id": {str},
    "query": {str},
    "tags": {list},
    "relevant": {dict},
    "returned": {list},
    "metrics": {dict},
    "latency_ms": {int, float, type(None)},
    "error": {str, type(None)},
    "duplicates": {int},
}


def _check_queries(queries: Any) -> None:
    """TypeError unless every query entry has its fields of the report's types, the items of
    its lists and dicts too: column by column, in C loops (the schema takes a millisecond a
    query). What it finds, :func:`malformed` then places."""
    if type(queries) is not list or not set(map(type, queries)) <= {dict}:
        raise TypeError("queries")
    for name, types in _QUERY_FIELDS.items():
        column = [query.get(name, _ABSENT) for query in queries]
        if not set(map(type, column)) <= types:
            raise TypeError(name)
        if types == {list}:
            if not set(map(type, itertools.chain.from_iterable(column))) <= {str}:
                raise TypeError(name)
        elif types == {dict}:
            keys = set(map(type, itertools.chain.from_iterable(column)))
            values = set(map(type, itertools.chain.from_iterable(map(dict.values, column))))
            allowed = {int} if name == "relevant" else {int, float, type(None)}
            if not keys <= {str} or not values <= allowed:
                raise TypeError(name)
    _check_judgments(queries)


_ABSENT = object()

_NUMBER = {int, float, type(None)}
#: a judge's verdict in a query's ``judgments``, field by field (absent fields are fine)
_VERDICT_FIELDS: dict[str, set[type]] = {
    "on_topic": {bool, type(None)},
    "score": _NUMBER,
    "grade": {int, type(None)},
    "reason": {str},
    "error": {str, type(None)},
    "confidence": _NUMBER,
    "agreement": _NUMBER,
}


def _check_judgments(queries: list[dict[str, Any]]) -> None:
    """TypeError unless every query's ``judgments`` (doc id -> the judge's verdict) holds
    verdicts of the report's types: an edited one changed the on-topic rate silently."""
    column = [query["judgments"] for query in queries if "judgments" in query]
    if not set(map(type, column)) <= {dict}:
        raise TypeError("judgments")
    verdicts = list(itertools.chain.from_iterable(map(dict.values, column)))
    if not set(map(type, verdicts)) <= {dict}:
        raise TypeError("judgments")
    for name, types in _VERDICT_FIELDS.items():
        if not {type(v.get(name)) for v in verdicts if name in v} <= types:
            raise TypeError(f"judgments {name}")


def named_by(documents: Iterable[tuple[Path, Any]], start: Path) -> tuple[list[Path], list[Path]]:
    """The golden sets and baselines partial reports name, as read (nothing checked: they
    may be the reason for a refusal): as the shards named them, from ``start``, and where
    the shards found them. What no output may overwrite."""
    goldens: list[Path] = []
    baselines: list[Path] = []
    for _, document in documents:
        entries = document.get("evaluations") if isinstance(document, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            part = _object(entry.get("part"))
            named, settings = part.get("golden"), _object(part.get("settings"))
            source = _object(entry.get("golden")).get("source")
            # the folder the shard ran in: its golden set's path less the name it gave it
            origin = _origin(source, named) if isinstance(source, str) else None
            for found, name in (
                (goldens, named),
                (goldens, source),
                (baselines, settings.get("baseline")),
            ):
                if isinstance(name, str) and name:
                    found += [start / name, *([origin / name] if origin else [])]
    return list(dict.fromkeys(goldens)), list(dict.fromkeys(baselines))


def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a report read unchecked)."""
    return value if isinstance(value, dict) else {}


def _origin(source: str, named: Any) -> Path | None:
    """The folder ``source`` is ``named`` from (``/ci/repo/data/g.json`` named
    ``data/g.json``: ``/ci/repo``), or None when the name is not its tail."""
    if not isinstance(named, str) or not named or Path(named).is_absolute():
        return None
    whole, tail = Path(source).parts, Path(named).parts
    if len(tail) >= len(whole) or whole[-len(tail) :] != tail:
        return None
    return Path(*whole[: -len(tail)])


def malformed(documents: Iterable[tuple[Path, Mapping[str, Any]]]) -> ShardError | None:
    """The first thing the report schema finds wrong in the partial reports (file -> its
    document), with its JSON pointer (None: nothing). Asked only when combining them
    failed: the schema checks a query in about a millisecond, too slow for every combine
    of a million."""
    from importlib import resources

    from jsonschema import Draft202012Validator

    folder = resources.files("pytest_retrieval").joinpath("schema")
    validator = Draft202012Validator(
        json.loads(folder.joinpath("report.schema.json").read_text("utf-8"))
    )
    for path, document in documents:
        error = next(iter(validator.iter_errors(document)), None)
        if error is not None:
            pointer = "/" + "/".join(str(step) for step in error.absolute_path)
            return ShardError(
                f"{path}, {pointer}: {error.message}: not a partial report as pytest-retrieval "
                "writes it (edited, or written by another tool); run that shard again"
            )
    return None


def combine(partials: Sequence[Partial], *, baseline: Path | None, start: Path) -> list[Whole]:
    """Each evaluation's parts, one per shard, merged into the whole and made ready for the
    gate (:func:`.finish.gate`): its settings, baseline file (``baseline``, else the one the
    shards named, relative to ``start``) and key. Raises :class:`ShardError` unless the
    partial reports are exactly one of each shard of the same runs."""
    _check_shards(partials)
    first = partials[0]
    keys = [_key(r) for r in first.results]
    if len(set(keys)) != len(keys):
        raise ShardError(f"{first.path} holds an evaluation twice: it is not one shard's report")
    for partial in partials[1:]:
        theirs = [_key(r) for r in partial.results]
        for mine, other in ((keys, theirs), (theirs, keys)):
            missing = [key for key in mine if key not in other]
            if missing:
                has, lacks = (first, partial) if mine is keys else (partial, first)
                raise ShardError(
                    f"{_shown(missing[0])} is in {has.path} but not in {lacks.path} (which has "
                    f"{', '.join(_shown(k) for k in (theirs if lacks is partial else keys))}): "
                    f"every shard must run the same evaluations; {RERUN} (the same -k and -m too)"
                )
    ordered = sorted(partials, key=lambda p: p.shard.index)
    return [_whole([_find(p, key) for p in ordered], ordered, baseline, start) for key in keys]


def _check_shards(partials: Sequence[Partial]) -> None:
    """One report of each shard 1..N, all of the same N."""
    if not partials:
        raise ShardError("no partial report given")
    counts = {p.shard.count for p in partials}
    if len(counts) > 1:
        listed = ", ".join(f"{p.path} is shard {p.shard}" for p in partials)
        raise ShardError(f"the reports are of different shard counts ({listed}); {RERUN}")
    count = counts.pop()
    versions = {p.version for p in partials}
    if len(versions) > 1:
        listed = ", ".join(f"{p.path} by {p.version or 'an unknown version'}" for p in partials)
        raise ShardError(
            f"the reports were written by different pytest-retrieval versions ({listed}); "
            "run every shard with the same version"
        )
    if len({p.commit for p in partials if p.commit}) > 1:
        listed = ", ".join(f"{p.path} at {p.commit[:12] or 'no commit'}" for p in partials)
        raise ShardError(f"the shards ran on different commits ({listed}); {RERUN}")
    seen: dict[int, Partial] = {}
    for partial in partials:
        other = seen.setdefault(partial.shard.index, partial)
        if other is not partial:
            raise ShardError(
                f"shard {partial.shard} is given twice: {other.path} and {partial.path}; give "
                "each shard's report once"
            )
    missing = [str(Shard(i, count)) for i in range(count) if i not in seen]
    if missing:
        given = ", ".join(f"{p.shard} {p.path}" for p in sorted(partials, key=lambda p: p.shard))
        raise ShardError(
            f"shard {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing (given: "
            f"{given}): combine gates the whole golden set only; give every shard's report (a "
            "shard job that failed still uploads its report)"
        )


def _key(result: EvaluationResult) -> tuple[str, str]:
    assert result.part is not None  # read_partial checked it
    return result.part.golden, result.retriever_id


def _shown(key: tuple[str, str]) -> str:
    return f"{key[0]} [{key[1]}]"


def _label(result: EvaluationResult) -> str:
    return f"{result.golden_name} [{result.retriever_id}]"


def _find(partial: Partial, key: tuple[str, str]) -> EvaluationResult:
    return next(r for r in partial.results if _key(r) == key)


def _whole(
    parts: Sequence[EvaluationResult],
    partials: Sequence[Partial],
    baseline: Path | None,
    start: Path,
) -> Whole:
    """One evaluation's parts (in shard order) checked against each other and merged."""
    from .baseline import golden_key
    from .evaluation import PartsMismatch, merge_parts
    from .finish import GateSettings, Whole

    stamps = [r.part for r in parts if r.part is not None]
    label = _shown(_key(parts[0]))
    settings = []
    for stamp_, partial in zip(stamps, partials, strict=True):
        try:
            settings.append(GateSettings.from_dict(stamp_.settings))
        except (KeyError, TypeError, ValueError) as exc:
            raise SettingsDiffer(
                f"{partial.path}: {label}: malformed gate settings ({exc!r})"
            ) from None
    for result, gate, partial in zip(parts[1:], settings[1:], partials[1:], strict=True):
        difference = _difference((parts[0], settings[0]), (result, gate))
        if difference is not None:
            raise SettingsDiffer(
                f"{partials[0].path} and {partial.path} differ on {label}: {difference}; {RERUN}"
            )
    order: list[tuple[int, str]] = []
    for result, stamp_, partial in zip(parts, stamps, partials, strict=True):
        if len(stamp_.positions) != len(result.queries):
            raise ShardError(f"{partial.path}: {label}: its positions do not match its queries")
        if any(a >= b for a, b in itertools.pairwise(stamp_.positions)):  # cut in golden order
            raise ShardError(
                f"{partial.path}: {label}: its positions are not in increasing (golden) order, "
                f"as a shard writes them; {RERUN}"
            )
        for position, query in zip(stamp_.positions, result.queries, strict=True):
            if shard_of(query.id, stamp_.count) != stamp_.index:
                raise ShardError(
                    f"{partial.path}: {label}: query {query.id!r} is not in shard "
                    f"{Shard(stamp_.index, stamp_.count)} by the hash of its id: that shard was "
                    "cut by another rule (another pytest-retrieval version?); run every shard "
                    "with the same version"
                )
            order.append((position, query.id))
    total = stamps[0].total
    places = {p for p, _ in order}
    outside = sorted(places - set(range(total)))
    if outside:
        raise ShardError(
            f"{label}: the shards place a query at {outside[0]}, outside the golden set's "
            f"{total} positions (0 to {total - 1}); {RERUN}"
        )
    if len(order) != total or len(places) != total:
        raise ShardError(
            f"{label}: the shards hold {len(order)} queries at {len(places)} places, but the "
            f"golden set has {total}; {RERUN}"
        )
    try:
        merged = merge_parts(parts, [qid for _, qid in sorted(order)])
    except PartsMismatch as exc:
        raise ShardError(f"{label}: {exc}; {RERUN}") from None
    golden, named = _resolved(stamps[0].golden, start), stamps[0].golden
    theirs = settings[0].baseline  # the shards' baseline, as they named it
    if baseline is None:
        path, key = _resolved(theirs, start), settings[0].baseline_key
    else:  # keyed by where the golden set is; not found from here: the key the shards used
        path = baseline
        key = golden_key(golden, baseline) if golden.exists() else settings[0].baseline_key
    # the shards' own baseline (or one passed where their golden set is not found) must hold
    # the entry they found; another --baseline may rightly lack it (a first cached baseline)
    expected = bool(settings[0].baseline_seen) and (baseline is None or not golden.exists())
    cannot_record = cannot_gate = None
    if not golden.exists() and not expected:
        if baseline is None and not path.exists():
            cannot_record = (
                f"the shards ran pytest where their golden set is {named}, which is not in "
                f"{start}: the baseline they name, {theirs}, would be recorded here, where no "
                "run reads it; run combine in the folder the shards ran pytest in, or name "
                f"{theirs} in that folder with --baseline"
            )
        elif baseline is not None and not _laid_out_as_theirs(baseline, theirs, named):
            cannot_gate = (
                f"the shards' golden set, {named} as they name it, is not found from here "
                f"({start}), so its entry in {baseline} (keyed by the golden set's path "
                "relative to that file) cannot be told; run combine in the folder the shards "
                "ran pytest in"
            )
    return Whole(
        merged,
        settings[0],
        path,
        key,
        stamps[0].nodeid,
        expected,
        named,
        cannot_record=cannot_record,
        cannot_gate=cannot_gate,
        local_golden=golden if golden.exists() else None,
    )


def _laid_out_as_theirs(baseline: Path, theirs: str, golden: str) -> bool:
    """``baseline`` is the file the shards named ``theirs`` (relative to the folder they ran
    in), with their golden set where they named it: the key they used is its key."""
    named = Path(theirs).parts
    full = Path(os.path.abspath(baseline)).parts
    if Path(theirs).is_absolute() or len(full) <= len(named) or full[-len(named) :] != named:
        return False
    return Path(*full[: -len(named)], golden).exists()


def _difference(
    one: tuple[EvaluationResult, GateSettings], other: tuple[EvaluationResult, GateSettings]
) -> str | None:
    """What two parts of one evaluation disagree on (None: nothing): they must come from the
    same golden set, options (the judge's too) and commit. Thresholds and allowances are
    compared by value, not by the path in their source (checkouts may sit at different
    places)."""
    from .compare import judge_definition

    (a, a_gate), (b, b_gate) = one, other
    assert a.part is not None and b.part is not None
    pairs: list[tuple[str, Any, Any]] = [
        ("golden fingerprint", a.fingerprint, b.fingerprint),
        ("golden set size", a.part.total, b.part.total),
        ("k", a.k, b.k),
        ("metrics", sorted(a.metrics), sorted(b.metrics)),
        ("relevance level", a.relevance_level, b.relevance_level),
        ("test", a.part.nodeid, b.part.nodeid),
        ("thresholds", _thresholds(a_gate), _thresholds(b_gate)),
        ("max drops", _allowances(a_gate) or None, _allowances(b_gate) or None),
        ("gated metrics", a_gate.gate, b_gate.gate),
        ("alpha", a_gate.alpha, b_gate.alpha),
        ("strict baseline", a_gate.strict_baseline, b_gate.strict_baseline),
        ("baseline", a_gate.baseline, b_gate.baseline),
        ("A/B reference", a_gate.compare_to, b_gate.compare_to),
        # -W error in one shard's job: the whole would fail or pass on which shard is first
        ("a stale baseline is an error (-W)", a_gate.stale_fails, b_gate.stale_fails),
        # the whole takes one part's: a TREC run records a baseline, a JSON run lacking
        # queries does not (checkouts may sit at different places: the file's name)
        ("run file", _run_of(a), _run_of(b)),
    ]
    # labels of two judges do not make one on-topic rate: what a baseline compares of one
    a_judge, b_judge = judge_definition(a) or {}, judge_definition(b) or {}
    for key in dict.fromkeys([*a_judge, *b_judge]):
        pairs.append((f"judge {key}", a_judge.get(key), b_judge.get(key)))
    # a gate setting, not a label's: the whole takes one part's, so all must agree
    coverage = (a.judge or {}).get("min_coverage"), (b.judge or {}).get("min_coverage")
    pairs.append(("judge min_coverage", *coverage))
    for what, mine, theirs in pairs:
        if mine != theirs:
            return f"{what} {_spelled(mine)} vs {_spelled(theirs)}"
    return None


def _run_of(result: EvaluationResult) -> str | None:
    """A part's run file as parts are compared: its name and format (None: a retriever)."""
    if result.run_file is None:
        return None
    return f"{Path(result.run_file).name} ({result.run_format or 'format not recorded'})"


def _spelled(value: Any) -> str:
    """A setting as a message shows it: lists as items, None as the default."""
    if value is None:
        return "the default"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "none"
    return repr(value)


def _thresholds(settings: GateSettings) -> list[str]:
    return [f"{t.key}={t.minimum!r}" for t in settings.thresholds]


def _allowances(settings: GateSettings) -> list[str]:
    return [f"{metric}={a}" for metric, a in sorted(settings.allowances.items())]


def _resolved(name: str, start: Path) -> Path:
    path = Path(name)
    return path if path.is_absolute() else start / path
