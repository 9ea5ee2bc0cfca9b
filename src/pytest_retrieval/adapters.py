"""LangChain and LlamaIndex retriever objects used as they are (README "LangChain, LlamaIndex").

The plugin calls ``retriever(query, k, **params)``. A fixture may instead return a LangChain
retriever (or any Runnable giving Documents) or a LlamaIndex retriever: :func:`adapt` wraps it,
once per evaluation, into a callable of that contract. Detection is by duck typing and nothing
here imports either framework, so plugin start-up stays cheap and both stay optional. A
callable is returned untouched: the plain-function path pays one ``callable()`` test.

Decisions:

- **Sync or async.** The async method is used only when the object implements it natively,
  i.e. its async hook (LangChain ``_aget_relevant_documents``, LlamaIndex ``_aretrieve``) is
  defined outside the framework's base retriever. The base versions only run the sync code
  (LlamaIndex's even blocks the event loop, serialising every call), so for those the sync
  method runs in the plugin's worker threads, where concurrency and timeouts work.
- **k.** The object's own top-k knob is set to the evaluation depth on a shallow copy (the
  fixture's object is never changed): LlamaIndex ``similarity_top_k``; LangChain an int ``k``
  field (BM25Retriever, TimeWeightedVectorStoreRetriever: the number returned), else
  ``search_kwargs["k"]`` (vector-store retrievers); or ``k=`` when the retriever's
  ``_get_relevant_documents`` names a ``k`` parameter. Otherwise the object's own top k is used
  and the hits are cut to k.
- **params** of a golden query are passed as keyword arguments to a LangChain retriever whose
  ``_get_relevant_documents`` accepts them (vector-store retrievers merge them into
  ``search_kwargs``, e.g. ``filter``). Anything else is an error on the query, never silently
  dropped (LangChain's ``invoke`` drops keywords its retriever does not declare): LlamaIndex
  retrievers take the query only.
- **Doc ids** are strings, never coerced. LangChain ``Document.id``, else metadata ``id``, else
  metadata ``doc_id``; LlamaIndex ``node.node_id``. With ``doc_id_key`` set, only that metadata
  key. Hits carry the text and score (LangChain: metadata ``score`` or ``relevance_score``).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .retrieval import HitError, Retriever

#: metadata keys tried, in order, after the object's own id (when no doc_id_key is given)
DEFAULT_ID_KEYS = ("id", "doc_id")

#: metadata keys a LangChain Document's score may be under (rerankers use relevance_score)
_SCORE_KEYS = ("score", "relevance_score")

_ID_FIX = (
    "name the metadata key that holds the doc id with --retrieval-doc-id-key KEY "
    "(ini retrieval_doc_id_key; evaluate(..., doc_id_key=KEY))"
)

Hit = dict[str, Any]
HitConverter = Callable[[Any, "str | None"], list[Hit]]


class DocIdError(HitError):
    """A framework hit without a usable doc id."""


def adapt(retriever: Any, *, doc_id_key: str | None = None) -> Retriever:
    """The callable ``retriever(query, k, **params)`` for a fixture's return value.

    A callable comes back as it is; a LlamaIndex retriever (``retrieve``/``aretrieve``) or a
    LangChain Runnable (``invoke``) is wrapped; anything else comes back too, for
    :func:`~pytest_retrieval.retrieval.run_retriever` to reject.
    """
    if callable(retriever):
        return retriever  # type: ignore[no-any-return]
    if _has(retriever, "retrieve") and _has(retriever, "aretrieve"):
        return _llama_index(retriever, doc_id_key)
    if _has(retriever, "invoke") and _has(retriever, "ainvoke"):
        return _langchain(retriever, doc_id_key)
    return retriever  # type: ignore[no-any-return]


def _has(obj: Any, name: str) -> bool:
    return callable(getattr(obj, name, None))


@dataclass
class _Adapter:
    """A framework object behind the plugin's contract; :class:`_Sync`/:class:`_Async` call it.

    ``method`` is called as ``method(query, **params)`` (plus ``k=k`` when ``k_keyword``) on
    the object, or on a copy with attribute ``top_k`` set to k; ``accepts`` names the params
    it takes (None: any).
    """

    target: Any
    method: str
    convert: HitConverter
    doc_id_key: str | None
    top_k: str | None = None
    k_keyword: bool = False
    accepts: frozenset[str] | None = frozenset()
    _sized: dict[int, Any] = field(default_factory=dict, repr=False)

    def _prepare(self, k: int, params: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The bound method to call for depth ``k``, and its keyword arguments."""
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
        kwargs = {"k": k, **params} if self.k_keyword else dict(params)
        return getattr(target, self.method), kwargs

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
        method, kwargs = self._prepare(k, params)
        return self.convert(method(query, **kwargs), self.doc_id_key)


class _Async(_Adapter):
    async def __call__(self, query: str, k: int, **params: Any) -> list[Hit]:
        method, kwargs = self._prepare(k, params)
        return self.convert(await method(query, **kwargs), self.doc_id_key)


def _natively_async(obj: Any, hook: str, base_module: str) -> bool:
    """True when ``obj``'s async hook is implemented outside the framework's base class."""
    function = getattr(type(obj), hook, None)
    return function is not None and getattr(function, "__module__", None) != base_module


def _int_attribute(obj: Any, name: str) -> bool:
    value = getattr(obj, name, None)
    return isinstance(value, int) and not isinstance(value, bool)


def _llama_index(obj: Any, doc_id_key: str | None) -> _Sync | _Async:
    """A LlamaIndex ``BaseRetriever``: ``retrieve(query)`` gives ``NodeWithScore``s."""
    native = _natively_async(obj, "_aretrieve", "llama_index.core.base.base_retriever")
    factory: type[_Sync | _Async] = _Async if native else _Sync
    return factory(
        obj,
        "aretrieve" if native else "retrieve",
        _nodes_to_hits,
        doc_id_key,
        top_k="similarity_top_k" if _int_attribute(obj, "similarity_top_k") else None,
    )


def _langchain(obj: Any, doc_id_key: str | None) -> _Sync | _Async:
    """A LangChain ``BaseRetriever`` (or another Runnable): ``invoke(query)`` gives Documents."""
    hook = getattr(type(obj), "_get_relevant_documents", None)
    if hook is None:  # a chain: no knobs we know of
        return _Sync(obj, "invoke", _documents_to_hits, doc_id_key)
    parameters = inspect.signature(hook).parameters
    accepts = (
        None
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        else frozenset(parameters) - {"self", "query", "run_manager"}
    )
    k_keyword = "k" in parameters
    if k_keyword:
        top_k = None
    elif _int_attribute(obj, "k"):
        top_k = "k"
    elif isinstance(getattr(obj, "search_kwargs", None), Mapping):
        top_k = "search_kwargs"
    else:
        top_k = None
    native = _natively_async(obj, "_aget_relevant_documents", "langchain_core.retrievers")
    factory: type[_Sync | _Async] = _Async if native else _Sync
    return factory(
        obj,
        "ainvoke" if native else "invoke",
        _documents_to_hits,
        doc_id_key,
        top_k=top_k,
        k_keyword=k_keyword,
        accepts=accepts,
    )


def _sequence(raw: Any, kind: str) -> Iterable[Any]:
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        raise HitError(f"the retriever returned a {type(raw).__name__}, not a list of {kind}s")
    return raw


def _documents_to_hits(raw: Any, doc_id_key: str | None) -> list[Hit]:
    """LangChain Documents: ``id`` / metadata id, ``page_content``, metadata score."""
    hits = []
    for rank, doc in enumerate(_sequence(raw, "Document"), start=1):
        metadata = _metadata(doc, "metadata", rank, "Document")
        score = next((metadata[key] for key in _SCORE_KEYS if key in metadata), None)
        hits.append(
            {
                "id": _doc_id(rank, "Document", getattr(doc, "id", None), metadata, doc_id_key),
                "text": getattr(doc, "page_content", None),
                "score": score,
            }
        )
    return hits


def _nodes_to_hits(raw: Any, doc_id_key: str | None) -> list[Hit]:
    """LlamaIndex ``NodeWithScore``s: ``node.node_id`` / metadata, ``get_content()``, ``score``."""
    hits = []
    for rank, scored in enumerate(_sequence(raw, "NodeWithScore"), start=1):
        node = getattr(scored, "node", scored)
        metadata = _metadata(node, "metadata", rank, "node")
        hits.append(
            {
                "id": _doc_id(rank, "node", getattr(node, "node_id", None), metadata, doc_id_key),
                "text": node.get_content(),
                "score": getattr(scored, "score", None),
            }
        )
    return hits


def _metadata(hit: Any, attribute: str, rank: int, kind: str) -> Mapping[str, Any]:
    metadata = getattr(hit, attribute, None)
    if not isinstance(metadata, Mapping):
        raise HitError(f"hit at rank {rank} is a {type(hit).__name__}, not a {kind}")
    return metadata


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
