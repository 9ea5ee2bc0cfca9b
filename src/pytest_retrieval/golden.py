"""Golden sets: the model (:class:`GoldenQuery`, :class:`GoldenSet`), validation and building.

The file formats (JSON, JSONL, BEIR folders, TREC qrels, corpus files) are read by
:mod:`.formats`; this module checks what they read and builds the set.

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

Query ids: an entry without ``"id"`` gets one derived from its content (:func:`content_id`),
not its position, so deleting or inserting a query leaves the others' ids, and the baseline's
per-query values, where they were.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Collection, Container, Mapping, Sequence
from functools import cached_property, lru_cache
from importlib import resources
from itertools import chain, repeat
from json.encoder import encode_basestring
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

from ._internal.gc import paused_gc
from ._internal.io import relative
from .errors import GoldenError as GoldenError
from .formats import MAX_GRADE as MAX_GRADE
from .formats import RawGolden, read_golden, read_trec, shown
from .formats import default_qrels as default_qrels
from .formats import load_corpus as load_corpus
from .formats import load_corpus_ids as load_corpus_ids
from .metrics import MAX_K

DEFAULT_K = 10
SCHEMA_FILE = "golden.schema.json"


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

    @classmethod
    def of_plain(
        cls, id: str, query: str, relevant: dict[str, int], tags: tuple[str, ...]
    ) -> GoldenQuery:
        """What ``model_construct`` gives for a plain entry (no criteria, params or
        metadata), at a fifth of its cost: a million queries load in seconds.
        ``test_golden`` checks the two are equal."""
        built = cls.__new__(cls)
        fields = {
            "id": id,
            "query": query,
            "relevant": relevant,
            "tags": tags,
            "criteria": None,
            "params": {},
            "metadata": {},
        }
        object.__setattr__(built, "__dict__", fields)
        object.__setattr__(built, "__pydantic_fields_set__", _QUERY_FIELDS)
        object.__setattr__(built, "__pydantic_extra__", None)
        object.__setattr__(built, "__pydantic_private__", None)
        return built

    @property
    def relevant_ids(self) -> list[str]:
        """Ids judged relevant (grade >= 1), best grade first."""
        return [d for d, g in sorted(self.relevant.items(), key=lambda kv: -kv[1]) if g > 0]

    @property
    def fingerprint(self) -> str:
        """Hash of what decides this query's scores: text, judgments, params and criteria."""
        if self.params or self.criteria is not None:
            return _digest([self.query, sorted(self.relevant.items()), self.params, self.criteria])
        return _judged_digest(self.query, self.relevant)


_QUERY_FIELDS = frozenset(GoldenQuery.model_fields)


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
    #: metrics gated against the baseline (empty: the default set; see gate.gated_metrics)
    gate: tuple[str, ...] = ()
    corpus: str | None = None
    #: size of the full set when this is a ``--retrieval-sample`` of it (None: the full set)
    sampled_from: int | None = None
    #: TREC qrels read without a queries file: where one was looked for. Each query's text is
    #: its id, so only a precomputed run may evaluate it (:func:`check_texts`)
    texts_missing: str | None = None

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
        """Content hash of queries and judgments; independent of file format and order.
        ``_digest(sorted(query_fingerprints.items()))``, its canonical JSON written directly
        (a query fingerprint is hex digits: nothing to escape), at a third of the cost."""
        pairs = sorted(self.query_fingerprints.items())
        text = ",".join([f'[{encode_basestring(qid)},"{digest}"]' for qid, digest in pairs])
        return hashlib.sha256(f"[{text}]".encode()).hexdigest()[:16]

    @property
    def tags(self) -> list[str]:
        return sorted({t for q in self.queries for t in q.tags})

    def __len__(self) -> int:
        return len(self.queries)


def _digest(value: Any) -> str:
    """16 hex digits of the SHA-256 of ``value``'s canonical JSON (one reused encoder: half
    the cost of ``json.dumps`` with options, which builds an encoder per call)."""
    return hashlib.sha256(_CANONICAL.encode(value).encode()).hexdigest()[:16]


def _judged_digest(query: str, relevant: Mapping[str, int]) -> str:
    """``_digest([query, sorted(relevant.items()), {}, None])`` -- a query without params or
    criteria -- with its canonical JSON written directly: the same text at half the cost
    (100,000 queries: 0.4 s instead of 0.8 s). ``test_golden`` checks the two agree."""
    judged = ",".join([f"[{encode_basestring(d)},{g!r}]" for d, g in sorted(relevant.items())])
    text = f"[{encode_basestring(query)},[{judged}],{{}},null]"
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


def load_golden(
    path: str | Path, *, require_relevant: bool = True, require_texts: bool = True
) -> GoldenSet:
    """Load a golden set from a JSON/JSONL file, a BEIR folder or a TREC qrels file.

    ``require_relevant=False`` accepts entries without ``relevant`` (open queries, only
    useful to an LLM judge). ``require_texts=False`` (a precomputed run: nothing is searched)
    accepts TREC qrels without a queries file, each query's text its id, which
    :func:`evaluate` refuses to search. Raises :class:`GoldenError` naming the file, place
    and fix.
    """
    with paused_gc():
        golden = _build(read_golden(Path(path)), require_relevant)
    if require_texts:
        check_texts(golden)
    return golden


def check_texts(golden: GoldenSet, reader: str = "") -> None:
    """Raise :class:`GoldenError` when the golden set has no query texts (TREC qrels without
    a queries file, each text its id): what searches or grades it would be asked for "1".
    ``reader``: what needs them, when not a retriever (the LLM judge, downstream labels)."""
    if golden.texts_missing is not None:
        from .formats import no_queries_file

        raise no_queries_file(Path(golden.source), Path(golden.texts_missing), reader)


def load_trec(
    qrels: str | Path, queries: str | Path | None = None, *, require_relevant: bool = True
) -> GoldenSet:
    """TREC qrels plus a ``QUERY_ID<TAB>TEXT`` queries file (default: found beside them)."""
    with paused_gc():
        raw = read_trec(Path(qrels), Path(queries) if queries else None)
        golden = _build(raw, require_relevant)
    check_texts(golden)
    return golden


def content_id(query: str, params: Mapping[str, Any]) -> str:
    """The id of an entry written without one: ``q-`` and 12 hex digits of the SHA-256 of
    its query text and params (what the retriever is asked).

    Not its position, so deleting or inserting another query keeps it; not its judgments, so
    a re-judged query keeps it and is reported as re-judged. 48 bits make an accidental clash
    in a 100,000-query set about 1 in 50,000 (and a clash is a clear duplicate-id error).
    """
    # the canonical JSON of [query, params]; without params (the usual case) written directly,
    # the same text at a third of the cost (100,000 ids: 0.12 s of CPU instead of 0.39 s)
    text = _CANONICAL.encode([query, params]) if params else f"[{encode_basestring(query)},{{}}]"
    return "q-" + hashlib.sha256(text.encode()).hexdigest()[:12]


_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _check_settings(source: Path, document: dict[str, Any]) -> None:
    """Validate everything but the entries with jsonschema -- unless :func:`_plain_settings`
    vouches for them: importing jsonschema alone takes 0.17 s, a third of a small run."""
    if _plain_settings(document):
        return
    if (
        "queries" not in document
        and document
        and not document.keys() & _SETTINGS
        and all(map(_is_hits, itertools.islice(document.values(), 20)))
    ):  # {qid: hits}: the arguments swapped
        raise GoldenError(
            source,
            "/",
            "a run file ({query id: hits}), not a golden set: it has no 'queries'",
            "pass the golden set where one goes and this file as the run: pytest-retrieval "
            "eval GOLDEN RUN, or pytest --retrieval-golden GOLDEN --retrieval-run RUN",
        )
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


_METRIC_NAME = re.compile("^[a-z_]+@[0-9]+$")  # the schema's patterns, searched as it does
_THRESHOLD_KEY = re.compile("^[a-z_]+@[0-9]+(\\[[^\\]]+\\])?$")
_SETTINGS = frozenset(
    {"$schema", "name", "description", "k", "metrics", "gate", "thresholds", "max_drop", "corpus"}
)


def _plain_settings(document: dict[str, Any]) -> bool:
    """Whether the settings surely pass the schema's ``goldenSet`` (with ``queries`` a list):
    each key known and of its exact type, as the schema words it (a bool is no number, a
    pattern is searched); False leaves the decision, and the message, to jsonschema. A
    property test checks that nothing it passes is refused by the schema."""
    if "queries" not in document or type(document["queries"]) is not list:
        return False
    for key, value in document.items():
        if key == "queries":
            continue
        if key not in _SETTINGS:
            return False
        if key in ("$schema", "description"):
            ok = type(value) is str
        elif key in ("name", "corpus"):
            ok = type(value) is str and len(value) >= 1
        elif key == "k":
            ok = type(value) is int and 1 <= value <= MAX_K
        elif key in ("metrics", "gate"):
            ok = type(value) is list and all(
                type(name) is str and _METRIC_NAME.search(name) for name in value
            )
        elif key == "thresholds":
            ok = type(value) is dict and all(
                _THRESHOLD_KEY.search(name) and _number(bound) and not (bound < 0 or bound > 1)
                for name, bound in value.items()
            )
        else:  # max_drop
            ok = type(value) is dict and all(
                _number(drop) or type(drop) is str for drop in value.values()
            )
        if not ok:
            return False
    return True


def _number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _build(raw: RawGolden, require_relevant: bool) -> GoldenSet:
    source, settings, prefix, lines = raw.source, raw.settings, raw.prefix, raw.lines
    if raw.document is not None:
        _check_settings(source, raw.document)
    plain = _plain_queries(raw.entries)
    if plain is not None:
        _check_gates(source, settings, plain)
        return _golden_set(source, settings, plain, raw.texts_missing)
    try:
        parsed = _ENTRIES.validate_python(raw.entries)
    except ValidationError as exc:
        raise _explain(source, raw.entries, exc, prefix, lines) from None
    queries: list[GoldenQuery] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(parsed):
        where = _where(prefix, index, lines)
        query_id = content_id(entry.query, entry.params) if entry.id is None else str(entry.id)
        if query_id in seen:
            raise _duplicate_id(raw, parsed, seen[query_id], index, query_id)
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
    return _golden_set(source, settings, queries, raw.texts_missing)


_PLAIN_KEYS = frozenset({"id", "query", "relevant", "tags"})
_ABSENT: Any = object()  # a key an entry does not have (its value may be null)


def _plain_queries(entries: Any) -> list[GoldenQuery] | None:
    """The queries, when every entry is plain: a non-empty string ``query`` and ``id`` (or no
    id), ``relevant`` a list of distinct non-empty ids or an ``{id: grade}`` with an integer
    grade 0..MAX_GRADE and one of them >= 1, ``tags`` non-empty strings; nothing else, and
    no id twice. Checked with exact types (``type(x) is str``: no bool for an int) so that
    what passes here is what the pydantic model accepts, and gets the same values (checked
    by a property test against it); anything else -- including every error -- takes the
    model's path, which says what is wrong and where.

    Checked column by column, each check one C loop over all entries (``map`` over a
    column, ``set`` of its types), not entry by entry in Python: 100,000 entries in a
    tenth of a second."""
    if type(entries) is not list or not entries or set(map(type, entries)) != {dict}:
        return None
    if not all(map(_PLAIN_KEYS.issuperset, entries)):  # iterating a dict gives its keys
        return None
    texts: list[Any] = list(map(dict.get, entries, repeat("query")))
    given: list[Any] = list(map(dict.get, entries, repeat("id"), repeat(_ABSENT)))
    relevants: list[Any] = list(map(dict.get, entries, repeat("relevant")))
    tag_lists: list[Any] = list(map(dict.get, entries, repeat("tags"), repeat(_NO_TAGS)))
    if not _plain_ids(texts) or set(map(type, tag_lists)) != {list}:
        return None
    named = [query_id for query_id in given if query_id is not _ABSENT]
    kinds = set(map(type, relevants))
    if not _plain_ids(named) or not kinds <= {list, dict} or not all(relevants):
        return None
    try:  # a list of ids becomes {id: 1}; an unhashable id is the model's to explain
        judgments = [r if type(r) is dict else dict.fromkeys(r, 1) for r in relevants]
    except TypeError:
        return None
    if list in kinds and list(map(len, judgments)) != list(map(len, relevants)):
        return None  # an id listed twice
    docs = list(chain.from_iterable(judgments))
    tags = list(chain.from_iterable(tag_lists))
    if not _plain_ids(docs) or not _plain_ids(tags):
        return None
    graded = [r for r in relevants if type(r) is dict]
    if graded and not _plain_grades(graded):
        return None
    try:  # a lone surrogate ("\ud800" is valid JSON): the model's error, not a crash
        for column in (texts, named, docs, tags):
            "".join(column).encode()
    except UnicodeEncodeError:
        return None
    if len(named) < len(given):  # ids from the content of the entries that have none
        given = [
            content_id(q, {}) if i is _ABSENT else i for q, i in zip(texts, given, strict=True)
        ]
    if len(set(given)) != len(given):
        return None
    shared: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple per combination of tags
    tag_tuples = [shared.setdefault(t, t) for t in map(tuple, tag_lists)]
    return list(map(GoldenQuery.of_plain, given, texts, judgments, tag_tuples))


_NO_TAGS: list[str] = []


def _plain_ids(ids: list[Any]) -> bool:
    """Every item a non-empty ``str`` (exactly: no subclass), by C-level loops (``all``: an
    empty string is the only false one)."""
    return not ids or (set(map(type, ids)) == {str} and all(ids))


def _plain_grades(graded: list[dict[str, Any]]) -> bool:
    """Every grade an ``int`` (exactly: no bool) from 0 to MAX_GRADE, and in every query one
    of them at least 1."""
    grades = list(chain.from_iterable(map(dict.values, graded)))
    return (
        set(map(type, grades)) == {int}
        and min(grades) >= 0
        and max(grades) <= MAX_GRADE
        and min(map(max, map(dict.values, graded))) >= 1
    )


def _golden_set(
    source: Path,
    settings: Mapping[str, Any],
    queries: Sequence[GoldenQuery],
    texts_missing: Path | None = None,
) -> GoldenSet:
    corpus = settings.get("corpus")
    return GoldenSet.model_construct(
        name=settings.get("name") or source.stem,
        source=str(source),
        queries=tuple(queries),
        k=int(settings.get("k", DEFAULT_K)),  # the schema allows 5.0 for 5
        metrics=tuple(settings.get("metrics", ())),
        thresholds=dict(settings.get("thresholds", {})),
        max_drop=dict(settings.get("max_drop", {})),
        gate=tuple(settings.get("gate", ())),
        corpus=str((source.parent / corpus).resolve()) if corpus else None,
        texts_missing=None if texts_missing is None else str(texts_missing),
    )


def _duplicate_id(
    raw: RawGolden, entries: Sequence[_Entry], first: int, index: int, query_id: str
) -> GoldenError:
    """Entry ``index`` has the id of entry ``first``. Two entries without ids and with the
    same text and params are one query asked twice: counted twice, and with two sets of
    judgments for one ranking, so an error rather than a suffixed id."""
    earlier, later = entries[first], entries[index]
    where = _where(raw.prefix, index, raw.lines)
    same = (earlier.query, earlier.params) == (later.query, later.params)
    if earlier.id is None and later.id is None and same:
        return GoldenError(
            raw.source,
            where,
            f"the same query text and params as {_where(raw.prefix, first, raw.lines)}: "
            f"both have no id, so both would be {query_id!r}",
            "delete one of the two; if both are meant (other criteria or judgments), "
            'give each an "id"',
        )
    derived = earlier.id is None or later.id is None
    note = "; an entry without an id gets one from its query text and params" if derived else ""
    return GoldenError(
        raw.source,
        where if later.id is None else where + "/id",
        f"duplicate query id {query_id!r} (first used by entry {first}){note}",
        "give every query a unique id",
    )


def _check_gates(source: Path, settings: Mapping[str, Any], queries: Sequence[GoldenQuery]) -> None:
    """What the schema cannot say about the stored metrics, thresholds and max_drop, in the
    words the command line uses for the same mistakes: known metric families, cutoffs up to
    MAX_K, values in range, and thresholds only on tags that some query has."""
    if not any(settings.get(key) for key in ("metrics", "gate", "thresholds", "max_drop")):
        return
    from .limits import AllowanceError, make_threshold, parse_allowance
    from .metrics import parse_metric

    for key in ("metrics", "gate"):
        for index, name in enumerate(settings.get(key, ())):
            try:
                parse_metric(name)  # also refuses a k above MAX_K
            except ValueError as exc:
                raise GoldenError(source, f"/{key}/{index}", str(exc), _FIXES[key]) from None
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


def _is_hits(value: Any) -> bool:
    """A run's hits of a query: ``{doc: score}`` or ``[doc, ...]``."""
    if isinstance(value, dict):
        return all(isinstance(v, int | float) for v in value.values())
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


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
    "gate": 'list the metrics a regression may fail on, such as ["recall@10", "ndcg@10"]',
    "thresholds": 'write thresholds as {"recall@10": 0.8} with values between 0 and 1',
    "max_drop": 'write max_drop as {"recall@10": 0.02} (absolute) or {"ndcg@10": "2%"} '
    "(relative to the baseline)",
    "name": "use a non-empty string",
    "queries": 'a golden set holds "queries": [{"id": "q1", "query": "...", "relevant": '
    '["doc-1"]}, ...]',
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
        message = shown(error.instance) + message[len(written) :]
    if field == "relevant" and error.validator == "oneOf":
        problem = "'relevant' must be a non-empty list of doc-id strings or {doc_id: grade >= 0}"
    elif field in {"relevant"} and path and path[-1] != "relevant":
        problem = f"{message} (doc ids are strings, grades whole numbers from 0 to {MAX_GRADE})"
    else:
        problem = message
    return GoldenError(source, pointer, problem, _FIXES.get(field or "", ""))


def corpus_file(golden: GoldenSet) -> str:
    """The corpus file the golden set names (it names one). One that is not there (a golden
    set copied without it) is a GoldenError naming the golden file and its "corpus" key,
    the path as written and where it was looked for."""
    corpus = golden.corpus
    if corpus is None:
        raise ValueError(f"golden set {golden.source} names no corpus")
    if Path(corpus).is_file():
        return corpus
    written = relative(corpus, Path(golden.source).parent)
    raise GoldenError(
        golden.source,
        "/corpus",
        f"the corpus it names, {written}, does not exist ({corpus})",
        'correct the "corpus" path (relative to the golden file) or remove it',
    )


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
