"""Load and validate golden sets: JSON (list or object form), JSONL, BEIR folders, TREC qrels.

The JSON Schema in ``schema/golden.schema.json`` is the contract. Checking 100,000 entries with
``jsonschema`` costs seconds, so every entry is first checked by an equivalent strict pydantic
model (compiled, ~50x faster); only when that rejects something does ``jsonschema`` run, to
word the message with a JSON pointer. ``tests/test_golden.py`` keeps the two in step.

The settings stored with the queries (``k``, ``metrics``, ``thresholds``, ``max_drop``) are
checked at load time too, with the same rules as the command line's, so ``pytest-retrieval
validate`` and the plugin reject the same files with the same message. Bounds: a cutoff ``k``
is at most :data:`MAX_K` (a grade matrix holds queries x k cells), a grade at most
:data:`MAX_GRADE` (``ndcg_exp`` gains are ``2**grade - 1``: 2**100 still sums without
overflow, 2**1024 does not exist as a float).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Callable, Collection, Container, Iterator, Mapping, Sequence
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from ._gc import paused_gc
from .metrics import MAX_K

DEFAULT_K = 10
#: the largest cutoff a golden file may ask for (k, or the @k of a metric name)
#: the largest judgment grade (0-3 or 0-4 are usual; 100 allows percentage-like scales)
MAX_GRADE = 100
SCHEMA_FILE = "golden.schema.json"


class GoldenError(Exception):
    """A golden set that cannot be used, with where the problem is and how to fix it."""

    def __init__(self, source: str | Path, where: str, problem: str, fix: str = "") -> None:
        self.source = str(source)
        self.where = where
        self.problem = problem
        self.fix = fix
        super().__init__(str(self))

    def __str__(self) -> str:
        place = f"{self.source}, {self.where}" if self.where else self.source
        text = f"golden set {place}: {self.problem}"
        return f"{text}\n  fix: {self.fix}" if self.fix else text


def _integral(value: Any) -> Any:
    """JSON Schema counts 2.0 as an integer; so do we (stored as 2). Anything else is left
    for the strict int check to accept or reject."""
    return int(value) if type(value) is float and value.is_integer() else value


NonEmptyStr = Annotated[StrictStr, Field(min_length=1)]
Integral = Annotated[StrictInt, BeforeValidator(_integral)]
Grade = Annotated[Integral, Field(ge=0, le=MAX_GRADE)]


class _Entry(BaseModel):
    """One raw golden entry, exactly as the schema allows (strict: no coercion)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: NonEmptyStr | Integral | None = None
    query: NonEmptyStr
    relevant: (
        Annotated[list[NonEmptyStr], Field(min_length=1)]
        | Annotated[dict[NonEmptyStr, Grade], Field(min_length=1)]
        | None
    ) = None
    tags: list[NonEmptyStr] = Field(default_factory=list)
    criteria: StrictStr | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _absent_not_null(cls, data: Any) -> Any:
        """An optional key may be left out but not set to null (as in the schema)."""
        if isinstance(data, dict) and None in (
            data.get("id", 0),
            data.get("relevant", 0),
            data.get("criteria", 0),
        ):
            raise ValueError("null is not allowed")
        return data


_ENTRIES = TypeAdapter(list[_Entry])


class GoldenQuery(BaseModel):
    """A query of the golden set with its judgments ``{doc_id: grade}`` (grade >= 1 relevant)."""

    model_config = ConfigDict(frozen=True)

    id: str
    query: str
    relevant: dict[str, int]
    tags: tuple[str, ...] = ()
    criteria: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def relevant_ids(self) -> list[str]:
        """Ids judged relevant (grade >= 1), best grade first."""
        return [d for d, g in sorted(self.relevant.items(), key=lambda kv: -kv[1]) if g > 0]

    @property
    def fingerprint(self) -> str:
        """Hash of what decides this query's scores: text, judgments, params and criteria."""
        return _digest([self.query, sorted(self.relevant.items()), self.params, self.criteria])


class GoldenSet(BaseModel):
    """A loaded golden set: the queries plus the settings stored with them."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    source: str
    queries: tuple[GoldenQuery, ...]
    k: int = DEFAULT_K
    metrics: tuple[str, ...] = ()
    thresholds: dict[str, float] = Field(default_factory=dict)
    max_drop: dict[str, float | str] = Field(default_factory=dict)
    corpus: str | None = None
    #: size of the full set when this is a ``--retrieval-sample`` of it (None: the full set)
    sampled_from: int | None = None

    def sample(self, n: int, seed: int = 0) -> GoldenSet:
        """``n`` queries drawn without replacement, stratified by first tag, in golden order.

        Each tag's share is kept (largest remainder), so a sample of a set that is 10% "errors"
        is 10% "errors"; the same seed gives the same sample on every machine.
        """
        if n >= len(self.queries):
            return self
        import random

        strata: dict[str, list[int]] = {}
        for index, query in enumerate(self.queries):
            strata.setdefault(query.tags[0] if query.tags else "", []).append(index)
        total = len(self.queries)
        exact = {tag: n * len(rows) / total for tag, rows in strata.items()}
        quota = {tag: int(share) for tag, share in exact.items()}
        by_remainder = sorted(exact, key=lambda tag: (quota[tag] - exact[tag], tag))
        for tag in by_remainder[: n - sum(quota.values())]:
            quota[tag] += 1
        rng = random.Random(seed)
        chosen = sorted(
            index for tag, rows in sorted(strata.items()) for index in rng.sample(rows, quota[tag])
        )
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        fields.update(queries=tuple(self.queries[i] for i in chosen), sampled_from=total)
        return type(self).model_construct(**fields)  # not model_copy: it keeps cached hashes

    @cached_property
    def query_fingerprints(self) -> dict[str, str]:
        """Query id -> hash of what decides its scores (to spot re-judged queries)."""
        return {q.id: q.fingerprint for q in self.queries}

    @cached_property
    def fingerprint(self) -> str:
        """Content hash of queries and judgments; independent of file format and order."""
        return _digest(sorted(self.query_fingerprints.items()))

    @property
    def tags(self) -> list[str]:
        return sorted({t for q in self.queries for t in q.tags})

    def __len__(self) -> int:
        return len(self.queries)


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def golden_schema() -> dict[str, Any]:
    """The golden-set JSON Schema shipped with the package."""
    folder = resources.files("pytest_retrieval").joinpath("schema")
    text = folder.joinpath(SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


# --------------------------------------------------------------------------------------------
# entry point


def load_golden(path: str | Path, *, require_relevant: bool = True) -> GoldenSet:
    """Load a golden set from a JSON/JSONL file, a BEIR folder or a TREC qrels file.

    ``require_relevant=False`` accepts entries without ``relevant`` (open queries, only
    useful to an LLM judge). Raises :class:`GoldenError` naming the file, place and fix.
    """
    with paused_gc():
        return _load_any(Path(path), require_relevant)


def _load_any(source: Path, require_relevant: bool) -> GoldenSet:
    if not source.exists():
        raise GoldenError(
            source, "", "no such file or folder", "check the path given to --retrieval-golden"
        )
    if source.is_dir():
        return _load_beir(source, split=None, require_relevant=require_relevant)
    if source.suffix == ".tsv" and source.parent.name == "qrels":
        return _load_beir(
            source.parent.parent, split=source.stem, require_relevant=require_relevant
        )
    if source.suffix == ".jsonl":
        return _load_jsonl(source, require_relevant)
    if source.suffix == ".json":
        return _load_json(source, require_relevant)
    if source.suffix in {".qrels", ".trec", ".txt"} or "qrels" in source.name:
        return _load_trec(source, require_relevant)
    raise GoldenError(
        source,
        "",
        f"unknown golden-set format {source.suffix!r}",
        "use .json, .jsonl, a BEIR folder (queries.jsonl + qrels/<split>.tsv) "
        "or a TREC qrels file (.qrels) with a queries.tsv beside it",
    )


def _read_text(source: Path) -> str:
    """The file's text; a UTF-8 byte-order mark (as Windows editors write) is dropped."""
    try:
        return source.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GoldenError(
            source, f"byte {exc.start}", "not UTF-8 text", "save it as UTF-8"
        ) from exc
    except OSError as exc:
        raise GoldenError(source, "", f"cannot read it ({exc.strerror})") from exc


def _parse_json(source: Path, text: str, line: int | None = None) -> Any:
    """``text`` parsed; ``line`` is its line number when it is one line of a JSONL file."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise GoldenError(
            source,
            f"line {exc.lineno + (line or 1) - 1}, column {exc.colno}",
            f"invalid JSON: {exc.msg}",
            "fix the JSON syntax there (a trailing comma or a missing quote is typical)",
        ) from exc
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, arrays nested 10^5 deep
        where = f"line {line}" if line else ""
        raise GoldenError(source, where, f"unreadable JSON: {exc}", "shorten that value") from None


def _load_json(source: Path, require_relevant: bool) -> GoldenSet:
    document = _parse_json(source, _read_text(source))
    entries: Any
    if isinstance(document, list):
        if document:
            _refuse_other_files(source, document[0])
        settings: dict[str, Any] = {}
        entries, prefix = document, ""
    elif isinstance(document, dict):
        if "queries" not in document:
            _refuse_other_files(source, document)
        settings = {key: value for key, value in document.items() if key != "queries"}
        _check_settings(source, document)
        entries, prefix = document.get("queries"), "/queries"
    else:
        raise GoldenError(
            source,
            "/",
            f"the document is a JSON {type(document).__name__}",
            'write a list of queries, or an object {"queries": [...]}',
        )
    return _build(source, entries, settings, prefix, require_relevant)


def _load_jsonl(source: Path, require_relevant: bool) -> GoldenSet:
    entries: list[Any] = []
    lines: list[int] = []
    for number, line in enumerate(_read_text(source).splitlines(), start=1):
        if line.strip():
            entries.append(_parse_json(source, line, line=number))
            lines.append(number)
            if len(entries) == 1:
                _refuse_other_files(source, entries[0])
    return _build(source, entries, {}, "", require_relevant, lines=lines)


_REPORT_KEYS = frozenset({"version", "plugin_version", "created", "evaluations"})


def _refuse_other_files(source: Path, first: Any) -> None:
    """Files that sit beside golden sets and may be handed over by mistake (a glob, a
    pre-commit pattern): a baseline, a JSON report, BEIR documents or queries. ``first`` is
    the document (a JSON object without "queries") or its first entry. Say what the file is
    instead of listing schema errors about it."""
    if not isinstance(first, dict):
        return
    if first.get("format") == "pytest-retrieval-baseline":
        golden = source.name.removesuffix(".baseline.json")
        named = f" ({golden})" if golden != source.name else ""
        raise GoldenError(
            source,
            "",
            "this is a baseline file (written by --retrieval-update-baseline), not a golden set",
            f"pass the golden set it was recorded from{named}; `pytest-retrieval show` reads "
            "a baseline",
        )
    if first.keys() >= _REPORT_KEYS:
        raise GoldenError(
            source,
            "",
            "this is a pytest-retrieval JSON report (--retrieval-report), not a golden set",
            "pass the golden set that was evaluated; `pytest-retrieval diff` compares reports",
        )
    if "_id" in first and "query" not in first:
        corpus = source.name == "corpus.jsonl" or (
            "title" in first and source.name != "queries.jsonl"
        )
        kind = "corpus" if corpus else "queries"
        what = "documents" if kind == "corpus" else "query texts without judgments"
        raise GoldenError(
            source,
            "",
            f"this is a BEIR {kind} file ({what}), not a golden set",
            f"pass the BEIR folder {source.parent}/ instead (queries.jsonl + "
            "qrels/<split>.tsv); its corpus.jsonl is found there",
        )


def _check_settings(source: Path, document: dict[str, Any]) -> None:
    """Validate everything but the entries with jsonschema (small and cheap)."""
    from jsonschema import Draft202012Validator

    schema = golden_schema()
    settings_schema = dict(schema["$defs"]["goldenSet"])
    settings_schema["properties"] = dict(settings_schema["properties"], queries={"type": "array"})
    settings_schema["$defs"] = schema["$defs"]
    errors = sorted(
        Draft202012Validator(settings_schema).iter_errors(document),
        key=lambda e: list(e.absolute_path),
    )
    if errors:
        raise _schema_error(source, errors[0], lines=None, prefix="")


def _build(
    source: Path,
    entries: Any,
    settings: Mapping[str, Any],
    prefix: str,
    require_relevant: bool,
    lines: Sequence[int] | None = None,
) -> GoldenSet:
    try:
        parsed = _ENTRIES.validate_python(entries)
    except ValidationError as exc:
        raise _explain(source, entries, exc, prefix, lines) from None
    queries: list[GoldenQuery] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(parsed):
        where = _where(prefix, index, lines)
        query_id = str(index) if entry.id is None else str(entry.id)
        if query_id in seen:
            raise GoldenError(
                source,
                where + "/id",
                f"duplicate query id {query_id!r} (first used by entry {seen[query_id]})",
                "give every query a unique id",
            )
        seen[query_id] = index
        if entry.relevant is None:
            relevant: dict[str, int] = {}
        elif isinstance(entry.relevant, list):
            if len(set(entry.relevant)) != len(entry.relevant):
                raise GoldenError(
                    source, where + "/relevant", "a doc id is listed twice", "list each id once"
                )
            relevant = dict.fromkeys(entry.relevant, 1)
        else:
            relevant = entry.relevant
        if not any(grade > 0 for grade in relevant.values()):
            if entry.relevant is not None:
                raise GoldenError(
                    source,
                    where + "/relevant",
                    f"query {query_id!r} has no relevant document: every grade is 0",
                    "give at least one doc a grade >= 1 (0 means judged not relevant)",
                )
            if require_relevant:
                raise GoldenError(
                    source,
                    where,
                    f"query {query_id!r} has no 'relevant' doc ids",
                    'add "relevant": ["doc-id", ...], or enable an LLM judge '
                    "(--retrieval-judge) to score open queries",
                )
        queries.append(
            GoldenQuery.model_construct(
                id=query_id,
                query=entry.query,
                relevant=relevant,
                tags=tuple(entry.tags),
                criteria=entry.criteria,
                params=entry.params,
                metadata=entry.metadata,
            )
        )
    if not queries:
        raise GoldenError(source, prefix or "/", "the golden set has no queries", "add queries")
    _check_gates(source, settings, queries)
    corpus = settings.get("corpus")
    return GoldenSet.model_construct(
        name=settings.get("name") or source.stem,
        source=str(source),
        queries=tuple(queries),
        k=int(settings.get("k", DEFAULT_K)),  # the schema allows 5.0 for 5
        metrics=tuple(settings.get("metrics", ())),
        thresholds=dict(settings.get("thresholds", {})),
        max_drop=dict(settings.get("max_drop", {})),
        corpus=str((source.parent / corpus).resolve()) if corpus else None,
    )


def _check_gates(source: Path, settings: Mapping[str, Any], queries: Sequence[GoldenQuery]) -> None:
    """What the schema cannot say about the stored metrics, thresholds and max_drop, in the
    words the command line uses for the same mistakes: known metric families, cutoffs up to
    MAX_K, values in range, and thresholds only on tags that some query has."""
    if not any(settings.get(key) for key in ("metrics", "thresholds", "max_drop")):
        return
    from .gate import make_threshold
    from .metrics import parse_metric

    for index, name in enumerate(settings.get("metrics", ())):
        where = f"/metrics/{index}"
        try:
            parse_metric(name)  # also refuses a k above MAX_K
        except ValueError as exc:
            raise GoldenError(source, where, str(exc), _FIXES["metrics"]) from None
    tags: set[str] | None = None
    for key, value in settings.get("thresholds", {}).items():
        where = "/thresholds/" + _pointer(key)
        try:
            threshold = make_threshold(key, value, f"{source} thresholds")
        except ValueError as exc:
            raise GoldenError(source, where, str(exc), _FIXES["thresholds"]) from None
        if threshold.tag is None:
            continue
        tags = {t for q in queries for t in q.tags} if tags is None else tags
        if threshold.tag not in tags:
            raise GoldenError(
                source,
                where,
                f"no query has the tag {threshold.tag!r} "
                f"(tags in this golden set: {', '.join(sorted(tags)) or 'none'})",
                f'add "tags": ["{threshold.tag}"] to the queries it is about, or fix the tag name',
            )
    drops = settings.get("max_drop", {})
    if drops:
        from .compare import AllowanceError, parse_allowance

        for metric_name, value in drops.items():
            try:
                parse_allowance(metric_name, value, f"{source} max_drop")
            except AllowanceError as exc:
                where = "/max_drop/" + _pointer(metric_name)
                raise GoldenError(source, where, str(exc), _FIXES["max_drop"]) from None


def _pointer(key: str) -> str:
    """``key`` as one JSON-pointer step (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _where(prefix: str, index: int, lines: Sequence[int] | None) -> str:
    return f"line {lines[index]}" if lines is not None else f"{prefix}/{index}"


def _explain(
    source: Path,
    entries: Any,
    exc: ValidationError,
    prefix: str,
    lines: Sequence[int] | None,
) -> GoldenError:
    """Turn the first pydantic rejection into jsonschema's wording with a JSON pointer."""
    from jsonschema import Draft202012Validator

    schema = golden_schema()
    if not isinstance(entries, list):
        return GoldenError(
            source, prefix or "/", "'queries' must be a list of query objects", "write a list"
        )
    first = exc.errors()[0]["loc"]
    index = first[0] if first and isinstance(first[0], int) else 0
    entry_schema = {"$defs": schema["$defs"], "$ref": "#/$defs/query"}
    errors = list(Draft202012Validator(entry_schema).iter_errors(entries[index]))
    if not errors:  # schema and model disagree: still say something precise
        detail = exc.errors()[0]
        path = "/".join(str(p) for p in detail["loc"][1:])
        return GoldenError(source, f"{_where(prefix, index, lines)}/{path}", detail["msg"])
    error = _specific(min(errors, key=lambda e: (len(e.absolute_path), str(e.absolute_path))))
    return _schema_error(source, error, lines=lines, prefix=prefix, index=index)


def _specific(error: Any) -> Any:
    """A oneOf failure says little; when only one branch fits the value's type, that
    branch's own error (e.g. a fractional grade inside a graded object) says more."""
    if error.validator != "oneOf" or not error.context:
        return error
    branches: dict[Any, list[Any]] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    fitting = [
        subs
        for subs in branches.values()
        if not any(e.validator == "type" and not e.relative_path for e in subs)
    ]
    if len(fitting) != 1:
        return error
    return max(fitting[0], key=lambda e: len(e.absolute_path))


_FIXES = {
    "query": 'add a non-empty "query" string with the text sent to the retriever',
    "relevant": 'write "relevant": ["doc-1", "doc-2"] or graded {"doc-1": 3, "doc-2": 1}',
    "id": "use a non-empty string (or an integer) as the query id",
    "tags": 'write "tags": ["tag-a", "tag-b"]',
    "criteria": "write the judging criteria as one string",
    "params": "write params as an object of keyword arguments for the retriever",
    "metadata": "write metadata as an object",
    "k": f"k is the default cutoff, a whole number from 1 to {MAX_K}",
    "metrics": 'list metric names such as ["recall@10", "ndcg@10"]',
    "thresholds": 'write thresholds as {"recall@10": 0.8} with values between 0 and 1',
    "max_drop": 'write max_drop as {"recall@10": 0.02} (absolute) or {"ndcg@10": "2%"} '
    "(relative to the baseline)",
    "name": "use a non-empty string",
}


def _schema_error(
    source: Path,
    error: Any,
    *,
    lines: Sequence[int] | None,
    prefix: str,
    index: int | None = None,
) -> GoldenError:
    path = [str(p) for p in error.absolute_path]
    if index is not None:
        where = _where(prefix, index, lines)
        pointer = where + ("/" + "/".join(path) if path else "")
    else:
        pointer = "/" + "/".join(path)
    field = next((p for p in reversed(path) if not p.isdigit() and p in _FIXES), None)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        field = missing or field
    if error.validator == "additionalProperties" and field is None:
        known = ", ".join(sorted(error.schema.get("properties", {})))
        return GoldenError(source, pointer, error.message, f"allowed keys are: {known}")
    message = error.message
    written = repr(error.instance)
    if message.startswith(written):
        message = _shown(error.instance) + message[len(written) :]
    if field == "relevant" and error.validator == "oneOf":
        problem = "'relevant' must be a non-empty list of doc-id strings or {doc_id: grade >= 0}"
    elif field in {"relevant"} and path and path[-1] != "relevant":
        problem = f"{message} (doc ids are strings, grades whole numbers from 0 to {MAX_GRADE})"
    else:
        problem = message
    return GoldenError(source, pointer, problem, _FIXES.get(field or "", ""))


def _shown(value: Any) -> str:
    """``value`` as written in the JSON file (true, null, NaN), cut short when long (a
    400-digit grade)."""
    as_json = value is None or isinstance(value, bool)
    as_json = as_json or (isinstance(value, float) and not math.isfinite(value))
    text = json.dumps(value) if as_json else repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


# --------------------------------------------------------------------------------------------
# BEIR and TREC


def default_qrels(folder: Path) -> Path | None:
    """The qrels file a BEIR folder stands for: ``qrels/test.tsv``, else its only split."""
    splits = sorted((folder / "qrels").glob("*.tsv"))
    tests = [path for path in splits if path.stem == "test"]
    return tests[0] if tests else splits[0] if len(splits) == 1 else None


def _load_beir(folder: Path, split: str | None, require_relevant: bool) -> GoldenSet:
    queries_file = folder / "queries.jsonl"
    qrels_dir = folder / "qrels"
    if not queries_file.is_file() or not qrels_dir.is_dir():
        raise GoldenError(
            folder,
            "",
            "a golden-set folder must be in BEIR layout",
            "put queries.jsonl and qrels/<split>.tsv in it (corpus.jsonl optional)",
        )
    if split is None:
        chosen = default_qrels(folder)
        if chosen is None:
            splits = sorted(p.stem for p in qrels_dir.glob("*.tsv"))
            raise GoldenError(
                qrels_dir,
                "",
                f"cannot choose a split among {splits or 'no .tsv files'}",
                f"point --retrieval-golden at {qrels_dir}/<split>.tsv",
            )
        split = chosen.stem
    qrels_file = qrels_dir / f"{split}.tsv"
    judgments = _read_beir_qrels(qrels_file)
    texts: dict[str, tuple[str, dict[str, Any]]] = {}
    for number, line in enumerate(_read_text(queries_file).splitlines(), start=1):
        if not line.strip():
            continue
        record = _parse_json(queries_file, line, line=number)
        if not isinstance(record, dict) or not isinstance(record.get("_id"), str | int):
            raise GoldenError(
                queries_file,
                f"line {number}",
                "expected an object with '_id' and 'text'",
                'write {"_id": "q1", "text": "query text"}',
            )
        if not isinstance(record.get("text"), str) or not record["text"].strip():
            raise GoldenError(
                queries_file,
                f"line {number}/text",
                "missing or empty query text",
                'write {"_id": "q1", "text": "query text"}',
            )
        texts[str(record["_id"])] = (record["text"], record.get("metadata") or {})
    entries = []
    for query_id, relevant in judgments.items():
        if query_id not in texts:
            raise GoldenError(
                qrels_file,
                "",
                f"query id {query_id!r} has judgments but no text",
                f"add it to {queries_file}",
            )
        text, metadata = texts[query_id]
        entries.append({"id": query_id, "query": text, "relevant": relevant, "metadata": metadata})
    corpus = folder / "corpus.jsonl"
    settings = {
        "name": folder.name if split == "test" else f"{folder.name}-{split}",
        "corpus": str(corpus.resolve()) if corpus.is_file() else None,
    }
    return _build(qrels_file, entries, settings, "", require_relevant)


def _read_beir_qrels(path: Path) -> dict[str, dict[str, int]]:
    lines = _read_text(path).splitlines()

    def rows() -> Iterator[tuple[int, Sequence[str]]]:
        for number, row in enumerate(csv.reader(lines, delimiter="\t"), start=1):
            if not "".join(row).strip():
                continue
            if number == 1 and row[0].strip().lower() in {"query-id", "query_id", "qid"}:
                continue
            yield number, row

    return _judgments(path, rows, "query-id<TAB>corpus-id<TAB>score")


#: the rows of a qrels file, ``(line number, [query id, doc id, grade])``, from the start
Rows = Callable[[], Iterator[tuple[int, Sequence[str]]]]


def _judgments(path: Path, rows: Rows, layout: str) -> dict[str, dict[str, int]]:
    """Qrels rows -> ``{query: {doc: grade}}``.

    TREC uses negative grades for "judged not relevant": they are kept as judged, grade 0.
    A second line for the same query and doc is an error (which of the two would count?);
    only then are the rows read again, to name the first line.
    """
    judgments: dict[str, dict[str, int]] = {}
    for number, row in rows():
        if len(row) != 3:
            raise GoldenError(
                path, f"line {number}", f"expected 3 columns, got {len(row)}", f"write {layout}"
            )
        query_id, doc_id, grade_text = (cell.strip() for cell in row)
        try:
            grade = int(grade_text)
        except ValueError:
            raise GoldenError(
                path,
                f"line {number}",
                f"grade {_shown(grade_text)} is not a whole number",
                f"write {layout}",
            ) from None
        if grade > MAX_GRADE:
            raise GoldenError(
                path,
                f"line {number}",
                f"grade {_shown(grade_text)} is above the limit of {MAX_GRADE}",
                f"use grades from 0 to {MAX_GRADE} (0-3 is usual)",
            )
        judged = judgments.setdefault(query_id, {})
        if doc_id in judged:
            first = next(n for n, r in rows() if [r[0].strip(), r[1].strip()] == [query_id, doc_id])
            raise GoldenError(
                path,
                f"line {number}",
                f"query {query_id!r} judges doc {doc_id!r} a second time (first at line {first})",
                "keep one line per query and doc: delete one of the two",
            )
        judged[doc_id] = max(grade, 0)
    return judgments


def load_trec(
    qrels: str | Path, queries: str | Path | None = None, *, require_relevant: bool = True
) -> GoldenSet:
    """TREC qrels plus a ``QUERY_ID<TAB>TEXT`` queries file (default: found beside them)."""
    with paused_gc():
        return _load_trec(Path(qrels), require_relevant, Path(queries) if queries else None)


def _load_trec(source: Path, require_relevant: bool, queries_file: Path | None = None) -> GoldenSet:
    lines = _read_text(source).splitlines()

    def rows() -> Iterator[tuple[int, Sequence[str]]]:
        for number, fields in enumerate(map(str.split, lines), start=1):
            if fields:
                yield number, [fields[0], fields[2], fields[3]] if len(fields) == 4 else fields

    judgments = _judgments(source, rows, "QUERY_ID ITERATION DOC_ID GRADE")
    if queries_file is None:
        queries_file = _trec_queries_file(source)
    elif not queries_file.is_file():
        raise GoldenError(queries_file, "", "no such queries file", "check the --queries path")
    texts: dict[str, str] = {}
    for number, line in enumerate(_read_text(queries_file).splitlines(), start=1):
        if not line.strip():
            continue
        query_id, sep, text = line.partition("\t")
        if not sep or not text.strip():
            raise GoldenError(
                queries_file,
                f"line {number}",
                "expected QUERY_ID<TAB>TEXT",
                "write one query per line: id, a tab, the text",
            )
        texts[query_id.strip()] = text.strip()
    entries: list[dict[str, Any]] = []
    for query_id, relevant in judgments.items():
        if query_id not in texts:
            raise GoldenError(
                source,
                "",
                f"query id {query_id!r} has judgments but no text",
                f"add it to {queries_file}",
            )
        entries.append({"id": query_id, "query": texts[query_id], "relevant": relevant})
    return _build(source, entries, {"name": source.stem}, "", require_relevant)


def _trec_queries_file(qrels: Path) -> Path:
    stem = qrels.name.split(".")[0]
    candidates = [
        qrels.parent / f"{stem}.queries.tsv",
        qrels.parent / "queries.tsv",
        qrels.parent / "topics.tsv",
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise GoldenError(
        qrels,
        "",
        "TREC qrels need a queries file beside them",
        f"write {candidates[1]} with one QUERY_ID<TAB>TEXT line per query",
    )


def load_corpus(path: str | Path) -> dict[str, str]:
    """Doc id -> text, for the LLM judge: BEIR ``corpus.jsonl`` (``_id``, ``title``, ``text``
    per line; ``id`` also accepted) or a JSON object ``{"doc-id": "text", ...}``."""
    source = _corpus_file(path)
    if source.suffix == ".json":
        return _json_corpus(source)
    corpus: dict[str, str] = {}
    with paused_gc():
        for number, line in enumerate(_read_text(source).splitlines(), start=1):
            if line.strip():
                doc_id, body = _corpus_record(source, line, number)
                corpus[doc_id] = body
    return corpus


#: a BEIR corpus line that starts with a plain string (or integer) "_id"
_LEADING_ID = re.compile(r'\s*\{\s*"_id"\s*:\s*(?:"([^"\\]*)"|(-?[1-9][0-9]*|0))\s*[,}]')


def load_corpus_ids(path: str | Path) -> set[str]:
    """The doc ids of a corpus, exactly as :func:`load_corpus` keys them, without its texts.

    Made to be cheap on big corpora: the file is streamed, and a line that starts with its
    ``"_id"`` (as BEIR writes them) costs a regex match, not a JSON parse; the rest of such a
    line is not checked. Other lines are parsed and checked as :func:`load_corpus` does.
    """
    source = _corpus_file(path)
    if source.suffix == ".json":
        return set(_json_corpus(source))
    ids: set[str] = set()
    number = 0
    try:
        with source.open(encoding="utf-8-sig") as handle, paused_gc():
            for number, line in enumerate(handle, start=1):
                match = _LEADING_ID.match(line)
                if match is not None:
                    ids.add(match[1] if match[1] is not None else match[2])
                elif line.strip():
                    ids.add(_corpus_record(source, line, number)[0])
    except UnicodeDecodeError as exc:
        raise GoldenError(
            source, f"after line {number}", "not UTF-8 text", "save it as UTF-8"
        ) from exc
    except OSError as exc:
        raise GoldenError(source, "", f"cannot read it ({exc.strerror})") from exc
    return ids


def _corpus_file(path: str | Path) -> Path:
    source = Path(path)
    if not source.is_file():
        raise GoldenError(source, "", "no such corpus file", "fix the golden set's corpus path")
    return source


def _json_corpus(source: Path) -> dict[str, str]:
    document = _parse_json(source, _read_text(source))
    if not isinstance(document, dict) or not all(isinstance(v, str) for v in document.values()):
        raise GoldenError(
            source, "/", "a JSON corpus must be an object of doc id -> text", "fix its shape"
        )
    return {str(key): value for key, value in document.items()}


def _corpus_record(source: Path, line: str, number: int) -> tuple[str, str]:
    """One ``corpus.jsonl`` line -> (doc id, title and text)."""
    record = _parse_json(source, line, line=number)
    doc_id = record.get("_id", record.get("id")) if isinstance(record, dict) else None
    body = record.get("text") if isinstance(record, dict) else None
    if doc_id is None or not isinstance(body, str):
        raise GoldenError(
            source,
            f"line {number}",
            "a corpus line needs an id (_id or id) and a text",
            'write {"_id": "doc-1", "title": "...", "text": "..."}',
        )
    title = record.get("title")
    return str(doc_id), f"{title}\n{body}" if isinstance(title, str) and title else body


def missing_from_corpus(golden: GoldenSet, corpus_ids: Container[str]) -> list[str]:
    """The relevant doc ids (grade >= 1) that the corpus lacks, once each, in golden order."""
    missing: dict[str, None] = {}
    for query in golden.queries:
        for doc_id, grade in query.relevant.items():
            if grade > 0 and doc_id not in corpus_ids:
                missing[doc_id] = None
    return list(missing)


SHOWN_MISSING = 5


def corpus_problem(
    golden: GoldenSet, corpus_ids: Collection[str], corpus: str
) -> GoldenError | None:
    """The warning (an error when strict) for relevant ids missing from the corpus; ``corpus``
    names it in the message (its path, or "the retrieval_corpus fixture"). None: all there.

    A relevant id the corpus lacks can never be retrieved: recall has a ceiling below 1 that
    no retriever can lift, and the usual cause is a typo or a corpus of another version.
    """
    missing = missing_from_corpus(golden, corpus_ids)
    if not missing:
        return None
    relevant = len({d for q in golden.queries for d, grade in q.relevant.items() if grade > 0})
    shown = ", ".join(repr(doc_id) for doc_id in missing[:SHOWN_MISSING])
    more = f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
    return GoldenError(
        golden.source,
        "",
        f"{len(missing)} of {relevant} relevant doc ids are not in the corpus {corpus} "
        f"({len(corpus_ids)} documents): {shown}{more}",
        "add those documents to the corpus, or correct the ids in the golden set (a typo, or "
        "judgments made on another version of the corpus)",
    )
