"""Real LangChain, LlamaIndex and Haystack retrievers over ``helpers.DOCS``, offline.

The keyword ones rank like ``helpers.KEYWORD_RETRIEVER`` (so their metrics are known); the
vector-store ones use the frameworks' own in-memory stores with deterministic embeddings.
The ``Async*`` variants implement only the async hook natively: their sync path raises, so a
test passing through them proves the adapter awaited the async method.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no network, ever

from haystack import Document as HaystackDocument
from haystack import component
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore
from helpers import DOCS
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun
from langchain_core.callbacks import CallbackManagerForRetrieverRun as RunManager
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever as LangChainRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever as LlamaIndexRetriever
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode


def keyword(query: str, k: int) -> list[str]:
    """The ids ``helpers.KEYWORD_RETRIEVER`` returns: most shared words first, then by id."""
    return _scored(query)[:k]


def _scored(query: str) -> list[str]:
    words = set(query.split())
    return sorted(DOCS, key=lambda d: (-_overlap(words, d), d))


def _overlap(words: set[str], doc: str) -> int:
    return len(words & set(DOCS[doc].split()))


class SyncOnly(RuntimeError):
    """Raised by the sync path of the async-only retrievers."""


# --- LangChain -------------------------------------------------------------------------------


class KeywordRetriever(LangChainRetriever):
    """Returns ``k`` Documents, the doc id in metadata ``doc_id`` and the overlap as score."""

    k: int = 2

    def _get_relevant_documents(self, query: str, *, run_manager: RunManager) -> list[Document]:
        words = set(query.split())
        return [
            Document(page_content=DOCS[d], metadata={"doc_id": d, "score": _overlap(words, d)})
            for d in keyword(query, self.k)
        ]


class AsyncKeywordRetriever(KeywordRetriever):
    """A natively async retriever (an async client, say): only the async hook works."""

    def _get_relevant_documents(self, query: str, *, run_manager: RunManager) -> list[Document]:
        raise SyncOnly("the sync path was called")

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return KeywordRetriever._get_relevant_documents(self, query, run_manager=None)  # type: ignore[arg-type]


def langchain_store() -> InMemoryVectorStore:
    """LangChain's in-memory vector store over DOCS, doc ids as ``Document.id``."""
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    store.add_documents([Document(page_content=text, id=d) for d, text in DOCS.items()])
    return store


# --- LlamaIndex ------------------------------------------------------------------------------


class LlamaKeywordRetriever(LlamaIndexRetriever):
    """Sync only (``_aretrieve`` is the base one): ``similarity_top_k`` NodeWithScores."""

    def __init__(self, similarity_top_k: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.similarity_top_k = similarity_top_k

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        words = set(query_bundle.query_str.split())
        return [
            NodeWithScore(
                node=TextNode(id_=d, text=DOCS[d], metadata={"source_id": f"src-{d}"}),
                score=float(_overlap(words, d)),
            )
            for d in keyword(query_bundle.query_str, self.similarity_top_k)
        ]


class LlamaAsyncKeywordRetriever(LlamaKeywordRetriever):
    """A natively async LlamaIndex retriever: only ``_aretrieve`` works."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        raise SyncOnly("the sync path was called")

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return LlamaKeywordRetriever._retrieve(self, query_bundle)


def _embed(text: str, size: int = 32) -> list[float]:
    """A deterministic bag-of-words embedding: each word a fixed pseudo-random vector."""
    vector = [0.0] * size
    for word in text.split():
        digest = hashlib.sha256(word.encode()).digest()
        for i in range(size):
            vector[i] += digest[i] - 127.5
    return vector


class WordEmbedding(BaseEmbedding):
    """Offline embedding model for LlamaIndex (its default would call OpenAI)."""

    def _get_query_embedding(self, query: str) -> list[float]:
        return _embed(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return _embed(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return _embed(query)


def llama_index() -> VectorStoreIndex:
    """LlamaIndex's in-memory vector index over DOCS, doc ids as node ids."""
    nodes = [TextNode(id_=d, text=text) for d, text in DOCS.items()]
    return VectorStoreIndex(nodes, embed_model=WordEmbedding())


# --- Haystack --------------------------------------------------------------------------------


@component
class HaystackKeywordRetriever:
    """A sync-only Haystack retriever component taking ``top_k`` and a ``lang`` parameter."""

    @component.output_types(documents=list[HaystackDocument])
    def run(self, query: str, top_k: int = 2, lang: str = "en") -> dict[str, Any]:
        words = set(query.split())
        found = [
            HaystackDocument(
                id=d,
                content=DOCS[d] if lang == "en" else f"[{lang}] {DOCS[d]}",
                meta={"source_id": f"src-{d}"},
                score=_overlap(words, d),
            )
            for d in keyword(query, top_k)
        ]
        return {"documents": found}


def haystack_bm25(top_k: int = 1) -> InMemoryBM25Retriever:
    """Haystack's in-memory BM25 retriever (it has a native ``run_async``) over DOCS."""
    store = InMemoryDocumentStore()
    store.write_documents([HaystackDocument(id=d, content=text) for d, text in DOCS.items()])
    return InMemoryBM25Retriever(store, top_k=top_k)
