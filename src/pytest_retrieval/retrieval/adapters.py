"""Retriever objects of LangChain, LlamaIndex and Haystack, used as they are.

The plugin calls ``retriever(query, k, **params)``. A fixture may instead return a LangChain
retriever (or any Runnable giving Documents), a LlamaIndex retriever or a Haystack retriever
component: :func:`adapt` wraps it, once per evaluation, into a callable of that contract.
Detection is by duck typing and nothing here imports a framework, so plugin start-up stays
cheap and all three stay optional. A callable is returned untouched: the plain-function path
pays one ``callable()`` test. The user's view: docs/retriever.md, "LangChain, LlamaIndex,
Haystack".

Decisions:

- **Sync or async.** The async method is used only when the object implements it natively:
  its async hook (LangChain ``_aget_relevant_documents``, LlamaIndex ``_aretrieve``) is defined
  outside the framework's base retriever, or (Haystack) it has a ``run_async``. The base
  versions only run the sync code (LlamaIndex's even blocks the event loop, serialising every
  call), so for those the sync method runs in the plugin's worker threads, where concurrency
  and timeouts work.
- **k.** Haystack gets ``top_k=k``; a LangChain retriever whose ``_get_relevant_documents``
  declares ``k`` gets ``k=k``. Otherwise the object's own top-k knob is set to the evaluation
  depth on a shallow copy (the fixture's object is never changed): LlamaIndex
  ``similarity_top_k``; LangChain an int ``k`` field (BM25Retriever, TimeWeighted...: the
  number returned), else ``search_kwargs["k"]`` (vector-store retrievers). Without any of
  these the object's own top k is used and the hits are cut to k.
- **params** of a golden query are passed as keyword arguments where the object declares
  them (Haystack ``run``, e.g. ``filters``; LangChain ``_get_relevant_documents``, and
  vector-store retrievers merge any into ``search_kwargs``). Anything else is an error on the
  query, never silently dropped (LangChain's ``invoke`` drops keywords its retriever does not
  declare); LlamaIndex retrievers take the query only.
- **Doc ids** are strings, never coerced: the object's own id (LangChain ``Document.id``,
  LlamaIndex ``node.node_id``, Haystack ``Document.id``), else metadata ``id``, else metadata
  ``doc_id``; with ``doc_id_key`` set, only that metadata key. Hits carry the text and score
  (LangChain's score from metadata ``score`` or ``relevance_score``) for the LLM judge.
- **Haystack Pipelines** are not adapted: which component gets the query (a text embedder's
  ``text``, a retriever's ``query``) and whose ``documents`` to read is the user's wiring, so
  the error shows the three-line function to write instead.
"""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..hits import HitError, read_limit
from . import Retriever

#: metadata keys tried, in order, after the object's own id (when no doc_id_key is given)
DEFAULT_ID_KEYS = ("id", "doc_id")

#: metadata keys a LangChain Document's score may be under (rerankers use relevance_score)
_SCORE_KEYS = ("score", "relevance_score")

_ID_FIX = (
    "name the metadata key that holds the doc id with --retrieval-doc-id-key KEY "
    "(ini retrieval_doc_id_key; evaluate(..., doc_id_key=KEY))"
)

_PIPELINE_FIX = """return a function from the retriever fixture that runs it, e.g.

    def search(query, k):
        out = pipeline.run({"embedder": {"text": query}, "retriever": {"top_k": k}})
        return out["retriever"]["documents"]"""

Hit = dict[str, Any]
#: a hit's (own id, metadata, text, score)
Fields = tuple[Any, Any, Any, Any]


class DocIdError(HitError):
    """A framework hit without a usable doc id."""


def adapt(retriever: Any, *, doc_id_key: str | None = None) -> Retriever:
    """The callable ``retriever(query, k, **params)`` for a fixture's return value.

    A callable comes back as it is; a LlamaIndex retriever (``retrieve``/``aretrieve``), a
    LangChain Runnable (``invoke``/``ainvoke``) or a Haystack component taking a ``query`` is
    wrapped; a Haystack Pipeline or a component without ``query`` raises TypeError saying what
    to write instead; anything else comes back for
    :func:`~pytest_retrieval.retrieval.run_retriever` to reject.
    """
    if callable(retriever):
        return retriever  # type: ignore[no-any-return]
    if _has(retriever, "retrieve") and _has(retriever, "aretrieve"):
        return _llama_index(retriever, doc_id_key)
    if _has(retriever, "invoke") and _has(retriever, "ainvoke"):
        return _langchain(retriever, doc_id_key)
    if _has(retriever, "run") and hasattr(retriever, "__haystack_input__"):
        return _haystack(retriever, doc_id_key)
    if _has(retriever, "run") and _has(retriever, "add_component"):
        raise TypeError(
            f"the retriever fixture returned a Haystack {type(retriever).__name__}: which of "
            f"its components gets the query is your wiring; {_PIPELINE_FIX}"
        )
    return retriever  # type: ignore[no-any-return]


def _has(obj: Any, name: str) -> bool:
    return callable(getattr(obj, name, None))


@dataclass
class _Adapter:
    """A framework object behind the plugin's contract; :class:`_Sync`/:class:`_Async` call it.

    ``method`` is called on the object (or on a copy whose attribute ``top_k`` is k) with the
    query (first, or as keyword ``query_name``), k as keyword ``k_name`` if set, and the
    golden query's params, which must be among ``accepts`` (None: any).
    """

    target: Any
    method: str
    convert: Callable[[Any, str | None], list[Hit]]
    doc_id_key: str | None
    top_k: str | None = None
    k_name: str | None = None
    query_name: str | None = None
    accepts: frozenset[str] | None = frozenset()
    _sized: dict[int, Any] = field(default_factory=dict, repr=False)

    def _prepare(
        self, query: str, k: int, params: Mapping[str, Any]
    ) -> tuple[Callable[..., Any], tuple[str, ...], dict[str, Any]]:
        """The bound method to call for depth ``k``, and its arguments."""
        if params and self.accepts is not None and not self.accepts.issuperset(params):
            raise TypeError(
                f"golden query params {sorted(set(params) - self.accepts)} cannot be passed to "
                f"{type(self.target).__name__}.{self.method}() (it takes "
                f"{', '.join(sorted(self.accepts)) or 'the query only'}): drop them from the "
                "golden set, or return a function search(query, k, **params) from the "
                "retriever fixture that uses them"
            )
        target = self.target
        if self.top_k is not None:
            target = self._sized.get(k)
            if target is None:  # first call at this depth (a race only makes a spare copy)
                target = self._sized.setdefault(k, self._resized(k))
        kwargs = dict(params)
        if self.k_name is not None:
            kwargs[self.k_name] = k
        if self.query_name is not None:
            kwargs[self.query_name] = query
            return getattr(target, self.method), (), kwargs
        return getattr(target, self.method), (query,), kwargs

    def _resized(self, k: int) -> Any:
        """A shallow copy of the object whose top-k knob is ``k``."""
        clone = copy.copy(self.target)
        if self.top_k == "search_kwargs":
            clone.search_kwargs = {**self.target.search_kwargs, "k": k}
        else:
            setattr(clone, str(self.top_k), k)
        return clone


class _Sync(_Adapter):
    def __call__(self, query: str, k: int, **params: Any) -> list[Hit]:
        method, args, kwargs = self._prepare(query, k, params)
        return self.convert(_bounded(method(*args, **kwargs), k), self.doc_id_key)


class _Async(_Adapter):
    async def __call__(self, query: str, k: int, **params: Any) -> list[Hit]:
        method, args, kwargs = self._prepare(query, k, params)
        return self.convert(_bounded(await method(*args, **kwargs), k), self.doc_id_key)


def _bounded(raw: Any, k: int) -> Any:
    """The first :func:`~.hits.read_limit` hits of a framework's answer (a chain without a
    top-k knob may return them all): only those are converted, as only those are read.
    Anything that is not a list of hits comes back as it is, for the converter's message."""
    limit = read_limit(k)
    if isinstance(raw, list):
        return raw[:limit]
    if isinstance(raw, Mapping) and isinstance(raw.get("documents"), list):  # Haystack's
        return {**raw, "documents": raw["documents"][:limit]}
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        return raw
    return list(itertools.islice(raw, limit))


def _flavour(native: bool, sync: str, asynchronous: str) -> tuple[type[_Sync | _Async], str]:
    """The adapter class and the method to wrap: the async one only where it is ``native``."""
    return (_Async, asynchronous) if native else (_Sync, sync)


def _natively_async(obj: Any, hook: str, base_module: str) -> bool:
    """True when ``obj``'s async hook is implemented outside the framework's base class."""
    function = getattr(type(obj), hook, None)
    return function is not None and getattr(function, "__module__", None) != base_module


def _int_attribute(obj: Any, name: str) -> bool:
    value = getattr(obj, name, None)
    return isinstance(value, int) and not isinstance(value, bool)


def _keywords(function: Any, positional: set[str]) -> tuple[set[str], frozenset[str] | None]:
    """A method's parameter names, and the ones params may use (None: any, it has **kwargs)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return set(parameters), None
    return set(parameters), frozenset(parameters) - positional


def _llama_index(obj: Any, doc_id_key: str | None) -> _Sync | _Async:
    """A LlamaIndex ``BaseRetriever``: ``retrieve(query)`` gives ``NodeWithScore``s."""
    native = _natively_async(obj, "_aretrieve", "llama_index.core.base.base_retriever")
    adapter, method = _flavour(native, "retrieve", "aretrieve")
    top_k = "similarity_top_k" if _int_attribute(obj, "similarity_top_k") else None
    return adapter(obj, method, _nodes_to_hits, doc_id_key, top_k=top_k)


def _langchain(obj: Any, doc_id_key: str | None) -> _Sync | _Async:
    """A LangChain ``BaseRetriever`` (or another Runnable): ``invoke(query)`` gives Documents."""
    hook = getattr(type(obj), "_get_relevant_documents", None)
    if hook is None:  # a chain: no knobs we know of
        return _Sync(obj, "invoke", _documents_to_hits, doc_id_key)
    names, accepts = _keywords(hook, {"self", "query", "run_manager"})
    top_k = None
    if "k" not in names and _int_attribute(obj, "k"):
        top_k = "k"
    elif "k" not in names and isinstance(getattr(obj, "search_kwargs", None), Mapping):
        top_k = "search_kwargs"
    native = _natively_async(obj, "_aget_relevant_documents", "langchain_core.retrievers")
    adapter, method = _flavour(native, "invoke", "ainvoke")
    k_name = "k" if "k" in names else None
    return adapter(
        obj, method, _documents_to_hits, doc_id_key, top_k=top_k, k_name=k_name, accepts=accepts
    )


def _haystack(obj: Any, doc_id_key: str | None) -> _Sync | _Async:
    """A Haystack component: ``run(query=..., top_k=...)`` gives ``{"documents": [...]}``."""
    native = _has(obj, "run_async")
    names, accepts = _keywords(obj.run_async if native else obj.run, {"query"})
    if "query" not in names:
        raise TypeError(
            f"the retriever fixture returned a Haystack {type(obj).__name__}, whose run() takes "
            f"{', '.join(sorted(names))} but no query (an embedding retriever needs a text "
            f"embedder before it): put both in a Pipeline and {_PIPELINE_FIX}"
        )
    adapter, method = _flavour(native, "run", "run_async")
    k_name = "top_k" if "top_k" in names else None
    return adapter(
        obj,
        method,
        _haystack_to_hits,
        doc_id_key,
        k_name=k_name,
        query_name="query",
        accepts=accepts,
    )


def _documents_to_hits(raw: Any, doc_id_key: str | None) -> list[Hit]:
    return _to_hits(raw, "Document", _langchain_fields, doc_id_key)


def _nodes_to_hits(raw: Any, doc_id_key: str | None) -> list[Hit]:
    return _to_hits(raw, "node", _llama_index_fields, doc_id_key)


def _haystack_to_hits(raw: Any, doc_id_key: str | None) -> list[Hit]:
    documents = raw.get("documents") if isinstance(raw, Mapping) else None
    if documents is None:
        raise HitError(f"the component returned a {type(raw).__name__}, not {{'documents': [...]}}")
    return _to_hits(documents, "Document", _haystack_fields, doc_id_key)


def _langchain_fields(doc: Any) -> Fields:
    metadata = getattr(doc, "metadata", None)
    scores = metadata if isinstance(metadata, Mapping) else {}
    score = next((scores[key] for key in _SCORE_KEYS if key in scores), None)
    return getattr(doc, "id", None), metadata, getattr(doc, "page_content", None), score


def _llama_index_fields(scored: Any) -> Fields:
    node = getattr(scored, "node", None)
    if node is None:
        return None, None, None, None
    text = node.get_content()
    metadata = getattr(node, "metadata", None)
    return getattr(node, "node_id", None), metadata, text, getattr(scored, "score", None)


def _haystack_fields(doc: Any) -> Fields:
    return (
        getattr(doc, "id", None),
        getattr(doc, "meta", None),
        getattr(doc, "content", None),
        getattr(doc, "score", None),
    )


def _to_hits(
    raw: Any, kind: str, fields: Callable[[Any], Fields], doc_id_key: str | None
) -> list[Hit]:
    """The plugin's hit dicts ``{"id", "text", "score"}`` for a framework's ranked list."""
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        raise HitError(f"the retriever returned a {type(raw).__name__}, not a list of {kind}s")
    hits = []
    for rank, hit in enumerate(raw, start=1):
        own_id, metadata, text, score = fields(hit)
        if not isinstance(metadata, Mapping):
            raise HitError(f"hit at rank {rank} is a {type(hit).__name__}, not a {kind}")
        doc_id = _doc_id(rank, kind, own_id, metadata, doc_id_key)
        hits.append({"id": doc_id, "text": text, "score": score})
    return hits


def _doc_id(
    rank: int, kind: str, own: Any, metadata: Mapping[str, Any], doc_id_key: str | None
) -> str:
    """The hit's doc id: its own id then the default metadata keys, or ``doc_id_key`` only."""
    if doc_id_key is None:
        candidates = [("its id", own)]
        candidates += [(f"metadata {key!r}", metadata.get(key)) for key in DEFAULT_ID_KEYS]
    else:
        candidates = [(f"metadata {doc_id_key!r}", metadata.get(doc_id_key))]
    for where, value in candidates:
        if isinstance(value, str) and value:
            return value
        if value is not None and value != "":
            raise DocIdError(
                f"{where} of the {kind} at rank {rank} is {type(value).__name__} "
                f"{value!r:.60}, not a string: store doc ids as strings (they are never coerced)"
            )
    keys = ", ".join(map(repr, sorted(metadata, key=str))) or "none"
    if doc_id_key is None:
        missing = f"no id and no metadata {' or '.join(map(repr, DEFAULT_ID_KEYS))}"
        fix = _ID_FIX
    else:
        missing = f"no metadata {doc_id_key!r} (--retrieval-doc-id-key)"
        fix = "check the key, or store the doc id under it when indexing"
    raise DocIdError(f"the {kind} at rank {rank} has {missing} (its metadata keys: {keys}): {fix}")
