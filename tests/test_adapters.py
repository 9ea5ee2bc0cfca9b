"""LangChain, LlamaIndex and Haystack retrievers as the ``retriever`` fixture, with no glue code.

Everything runs against the real packages (dev extra), offline: keyword retrievers written
on the frameworks' base classes and their own in-memory vector stores (``framework_retrievers``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import framework_retrievers as fr
import pytest
from helpers import DOCS, GOLDEN, write_golden
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

from pytest_retrieval import evaluate
from pytest_retrieval.golden import GoldenQuery, GoldenSet
from pytest_retrieval.hits import QueryRun
from pytest_retrieval.retrieval import is_async, run_retriever
from pytest_retrieval.retrieval.adapters import adapt

TESTS = Path(__file__).parent


def call(retriever: Any, query: str = "apple pie", k: int = 5, **params: Any) -> list[str]:
    """The ids the adapted ``retriever`` returns, through the plugin's runner."""
    (run,) = runs(retriever, k, GoldenQuery(id="q", query=query, relevant={"d1": 1}, params=params))
    assert run.error is None, run.error
    return list(run.ids)


def runs(retriever: Any, k: int, *queries: GoldenQuery, **adapt_options: Any) -> list[QueryRun]:
    return run_retriever(adapt(retriever, **adapt_options), queries, k)


def error_of(retriever: Any, **adapt_options: Any) -> str:
    """The error recorded for one query (the hits are converted inside the call)."""
    query = GoldenQuery(id="q", query="apple", relevant={"d1": 1})
    (run,) = runs(retriever, 3, query, **adapt_options)
    assert run.error is not None
    return run.error


class Fixed(BaseRetriever):
    """Returns the given Documents whatever the query (no top-k knob of any kind)."""

    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return self.docs


class Filtered(BaseRetriever):
    """Declares a ``lang`` argument and a ``k`` argument: params and k are passed by name."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: Any, k: int, lang: str = "en"
    ) -> list[Document]:
        return [Document(page_content=lang, id=d) for d in fr.keyword(query, k)]


class NoRunManager(BaseRetriever):
    """An old-style retriever: LangChain installs an executor-backed async hook on it."""

    def _get_relevant_documents(self, query: str) -> list[Document]:  # type: ignore[override]
        return [Document(page_content="", id=d) for d in fr.keyword(query, 6)]


# --- detection --------------------------------------------------------------------------------


async def _async_search(query: str, k: int) -> list[str]:
    return fr.keyword(query, k)


class _CallableWithInvoke:
    """Callable and Runnable-like: the plugin's own contract wins."""

    def __call__(self, query: str, k: int) -> list[str]:
        return fr.keyword(query, k)

    def invoke(self, query: str) -> list[str]:
        raise AssertionError("invoke must not be used")

    async def ainvoke(self, query: str) -> list[str]:
        raise AssertionError("ainvoke must not be used")


@pytest.mark.parametrize("retriever", [fr.keyword, _async_search, _CallableWithInvoke()])
def test_callables_are_returned_untouched(retriever: Any) -> None:
    assert adapt(retriever, doc_id_key="x") is retriever


def test_anything_else_is_left_for_the_runner_to_reject() -> None:
    thing = object()
    assert adapt(thing) is thing
    with pytest.raises(TypeError, match="not a callable"):
        run_retriever(adapt(thing), [], 3)


@pytest.mark.parametrize(
    ("make", "natively_async"),
    [
        (fr.KeywordRetriever, False),
        (fr.AsyncKeywordRetriever, True),
        (lambda: fr.langchain_store().as_retriever(), True),
        (NoRunManager, False),
        (fr.LlamaKeywordRetriever, False),
        (fr.LlamaAsyncKeywordRetriever, True),
        (lambda: fr.llama_index().as_retriever(), True),
        (fr.HaystackKeywordRetriever, False),
        (fr.haystack_bm25, True),
    ],
    ids=[
        "langchain",
        "langchain-async",
        "langchain-vectorstore",
        "langchain-no-run-manager",
        "llama-index",
        "llama-index-async",
        "llama-index-vectorstore",
        "haystack",
        "haystack-bm25",
    ],
)
def test_async_method_only_when_natively_async(
    make: Callable[[], Any], natively_async: bool
) -> None:
    """The base classes' async hooks only wrap the sync code (LlamaIndex's blocks the loop).

    The chosen path works: the ``Async*`` retrievers' sync path would raise."""
    retriever = make()
    assert is_async(adapt(retriever)) is natively_async
    assert len(call(retriever, "apple pie recipe", 3)) == 3


# --- k and params -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "knob"),
    [
        (lambda: fr.KeywordRetriever(k=2), lambda r: r.k),
        (
            lambda: fr.langchain_store().as_retriever(search_kwargs={"k": 1}),
            lambda r: r.search_kwargs,
        ),
        (lambda: fr.LlamaKeywordRetriever(similarity_top_k=2), lambda r: r.similarity_top_k),
        (lambda: fr.llama_index().as_retriever(), lambda r: r.similarity_top_k),
    ],
    ids=["langchain-k", "langchain-search-kwargs", "llama-index", "llama-index-vectorstore"],
)
def test_k_is_set_on_a_copy_of_the_object(
    make: Callable[[], Any], knob: Callable[[Any], Any]
) -> None:
    retriever = make()
    before = knob(retriever)
    assert len(call(retriever, "apple pie", 5)) == 5
    assert len(call(retriever, "apple pie", 4)) == 4
    assert knob(retriever) == before  # the fixture's object is never changed


def test_k_is_passed_by_name_when_the_retriever_declares_it() -> None:
    assert call(Filtered(), "apple pie", 4) == fr.keyword("apple pie", 4)
    assert call(fr.HaystackKeywordRetriever(), "apple pie", 4) == fr.keyword("apple pie", 4)
    bm25 = fr.haystack_bm25(top_k=1)
    assert len(call(bm25, "apple bread cherry", 4)) == 4
    assert bm25.top_k == 1


def test_without_a_knob_the_objects_own_top_k_is_cut_to_k() -> None:
    docs = [Document(page_content=DOCS[d], id=d) for d in sorted(DOCS)]
    assert call(Fixed(docs=docs), k=2) == ["d1", "d2"]
    chain = fr.KeywordRetriever(k=6) | RunnableLambda(lambda found: found[::-1])
    assert call(chain, "apple pie", 2) == ["d6", "d5"]


def test_params_reach_a_retriever_that_declares_them() -> None:
    query = GoldenQuery(id="q", query="apple", relevant={"d1": 1}, params={"lang": "de"})
    (run,) = runs(Filtered(), 2, query)
    assert run.texts == {"d1": "de", "d4": "de"}
    (run,) = runs(fr.HaystackKeywordRetriever(), 1, query)
    assert run.texts == {"d1": "[de] apple pie recipe"}


def test_params_merge_into_a_vector_store_retrievers_search_kwargs() -> None:
    retriever = fr.langchain_store().as_retriever()
    only_d3: Callable[[Document], bool] = lambda doc: doc.id == "d3"  # noqa: E731
    assert call(retriever, "apple", 3, filter=only_d3) == ["d3"]


@pytest.mark.parametrize(
    ("retriever", "takes"),
    [
        (Filtered(), "takes k, lang"),
        (fr.KeywordRetriever(), "takes the query only"),  # invoke() would drop it silently
        (fr.LlamaKeywordRetriever(), "takes the query only"),
        (fr.HaystackKeywordRetriever(), "takes lang, top_k"),
    ],
)
def test_params_it_does_not_take_are_an_error_not_ignored(retriever: Any, takes: str) -> None:
    query = GoldenQuery(id="q", query="apple", relevant={"d1": 1}, params={"year": 2020})
    (run,) = runs(retriever, 3, query)
    assert run.error is not None
    assert "golden query params ['year'] cannot be passed to" in run.error
    assert takes in run.error
    assert "return a function search(query, k, **params)" in run.error


# --- doc ids, text, score ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "doc_id_key", "expected"),
    [
        (Document(page_content="", id="own", metadata={"id": "m", "doc_id": "n"}), None, "own"),
        (Document(page_content="", metadata={"id": "m", "doc_id": "n"}), None, "m"),
        (Document(page_content="", metadata={"doc_id": "n"}), None, "n"),
        (Document(page_content="", id="own", metadata={"source": "s", "id": "m"}), "source", "s"),
    ],
)
def test_langchain_doc_id_lookup_order(
    doc: Document, doc_id_key: str | None, expected: str
) -> None:
    (run,) = runs(
        Fixed(docs=[doc]),
        3,
        GoldenQuery(id="q", query="x", relevant={"x": 1}),
        doc_id_key=doc_id_key,
    )
    assert run.ids == (expected,)


@pytest.mark.parametrize("retriever", [fr.LlamaKeywordRetriever(), fr.HaystackKeywordRetriever()])
def test_own_id_or_the_metadata_key(retriever: Any) -> None:
    """LlamaIndex ``node.node_id`` / Haystack ``Document.id``, or ``metadata[doc_id_key]``."""
    assert call(retriever, "apple", 2) == ["d1", "d4"]
    query = GoldenQuery(id="q", query="apple", relevant={"d1": 1})
    (run,) = runs(retriever, 2, query, doc_id_key="source_id")
    assert run.ids == ("src-d1", "src-d4")


def test_document_without_id_names_the_option() -> None:
    doc = Document(page_content="", metadata={"source": "a.txt", "page": 2})
    assert error_of(Fixed(docs=[doc])) == (
        "the retriever raised DocIdError: the Document at rank 1 has no id and no metadata "
        "'id' or 'doc_id' (its metadata keys: 'page', 'source'): name the metadata key that "
        "holds the doc id with --retrieval-doc-id-key KEY (ini retrieval_doc_id_key; "
        "evaluate(..., doc_id_key=KEY))"
    )
    assert error_of(fr.LlamaKeywordRetriever(), doc_id_key="doc") == (
        "the retriever raised DocIdError: the node at rank 1 has no metadata 'doc' "
        "(--retrieval-doc-id-key) (its metadata keys: 'source_id'): check the key, or store "
        "the doc id under it when indexing"
    )


def test_doc_ids_are_never_coerced() -> None:
    doc = Document(page_content="", metadata={"id": 7})
    assert error_of(Fixed(docs=[doc])) == (
        "the retriever raised DocIdError: metadata 'id' of the Document at rank 1 is int 7, "
        "not a string: store doc ids as strings (they are never coerced)"
    )


def test_not_documents_is_an_error_on_the_query() -> None:
    chain = fr.KeywordRetriever() | RunnableLambda(
        lambda docs: " ".join(d.page_content for d in docs)
    )
    assert "returned a str, not a list of Documents" in error_of(chain)
    strings = fr.KeywordRetriever() | RunnableLambda(lambda docs: [d.page_content for d in docs])
    assert "hit at rank 1 is a str, not a Document" in error_of(strings)


@pytest.mark.parametrize(
    "retriever",
    [
        fr.KeywordRetriever(),
        fr.LlamaKeywordRetriever(),
        fr.LlamaAsyncKeywordRetriever(),
        fr.HaystackKeywordRetriever(),
    ],
)
def test_hits_carry_text_and_score_for_the_judge(retriever: Any) -> None:
    query = GoldenQuery(id="q", query="apple pie", relevant={"d1": 1})
    (run,) = runs(retriever, 2, query)
    assert run.texts == {"d1": "apple pie recipe", "d4": "apple cider vinegar"}
    assert run.scores == {"d1": 2.0, "d4": 1.0}


def test_evaluate_takes_doc_id_key() -> None:
    query = GoldenQuery(id="apple", query="apple", relevant={"src-d1": 1, "src-d4": 1})
    golden = GoldenSet(name="sources", source="test", queries=(query,), k=2)
    result = evaluate(fr.LlamaKeywordRetriever(), golden, doc_id_key="source_id")
    assert result.metrics["recall@2"] == 1.0
    assert evaluate(fr.LlamaKeywordRetriever(), golden).metrics["recall@2"] == 0.0


def test_plugin_and_plain_evaluation_import_no_framework() -> None:
    code = (
        "import sys, pytest_retrieval.plugin\n"
        "from pytest_retrieval import evaluate\n"
        "from pytest_retrieval.golden import GoldenQuery, GoldenSet\n"
        "query = GoldenQuery(id='q', query='q', relevant={'a': 1})\n"
        "golden = GoldenSet(name='g', source='test', queries=(query,))\n"
        "assert evaluate(lambda q, k: ['a'], golden).metrics['recall@10'] == 1.0\n"
        "loaded = [m for m in ('langchain_core', 'llama_index', 'haystack') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# --- end to end -------------------------------------------------------------------------------

#: the ``retriever`` fixture returns the framework object as it is, or a plain function giving
#: the same ranked lists; one run evaluates both side by side
E2E_CONFTEST = """
import pytest
from framework_retrievers import *

STORE = langchain_store()
INDEX = llama_index()
BM25 = haystack_bm25()

def store_search(query, k):
    return [doc.id for doc in STORE.similarity_search(query, k=k)]

def index_search(query, k):
    return [hit.node.node_id for hit in INDEX.as_retriever(similarity_top_k=k).retrieve(query)]

def bm25_search(query, k):
    return [doc.id for doc in BM25.run(query=query, top_k=k)["documents"]]

@pytest.fixture(scope="session", params=["framework", "plain"])
def retriever(request):
    return {framework} if request.param == "framework" else {plain}
"""

E2E = {
    "langchain": ("KeywordRetriever()", "keyword"),
    "langchain-async": ("AsyncKeywordRetriever()", "keyword"),
    "langchain-vectorstore": ('STORE.as_retriever(search_kwargs={"k": 1})', "store_search"),
    "llama-index": ("LlamaKeywordRetriever()", "keyword"),
    "llama-index-async": ("LlamaAsyncKeywordRetriever()", "keyword"),
    "llama-index-vectorstore": ("INDEX.as_retriever()", "index_search"),
    "haystack": ("HaystackKeywordRetriever()", "keyword"),
    "haystack-bm25": ("BM25", "bm25_search"),
}


@pytest.mark.parametrize("variant", E2E)
def test_fixture_returns_the_framework_object(pytester: pytest.Pytester, variant: str) -> None:
    """Same ranked lists and metrics as a plain function, at a k above the objects' own."""
    framework, plain = E2E[variant]
    pytester.makeconftest(E2E_CONFTEST.format(framework=framework, plain=plain))
    pytester.syspathinsert(TESTS)
    write_golden(pytester, dict(GOLDEN, k=5))
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    result.assert_outcomes(passed=2)
    ours, reference = json.loads((pytester.path / "r.json").read_text())["evaluations"]
    assert (ours["retriever"], reference["retriever"]) == ("framework", "plain")
    assert [q["returned"] for q in ours["queries"]] == [q["returned"] for q in reference["queries"]]
    assert ours["metrics"] == reference["metrics"]
    assert 0 < ours["metrics"]["ndcg@5"] < 1
    if plain == "keyword":
        assert ours["metrics"]["recall@5"] == 1.0 and ours["metrics"]["mrr@5"] == 1.0


def test_document_without_id_fails_the_evaluation_naming_the_option(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        """
import pytest
from langchain_core.documents import Document
from framework_retrievers import KeywordRetriever

class BySource(KeywordRetriever):
    def _get_relevant_documents(self, query, *, run_manager):
        found = super()._get_relevant_documents(query, run_manager=run_manager)
        return [Document(page_content="", metadata={"source": d.metadata["doc_id"]}) for d in found]

@pytest.fixture(scope="session")
def retriever():
    return BySource()
"""
    )
    pytester.syspathinsert(TESTS)
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*has no id and no metadata 'id' or 'doc_id' (its metadata keys: 'source'): name the "
            "metadata key that holds the doc id with --retrieval-doc-id-key KEY*"
        ]
    )
    assert "Traceback" not in result.stdout.str()
    fixed = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-doc-id-key", "source"
    )
    fixed.assert_outcomes(passed=1)


def test_haystack_pipeline_or_embedding_retriever_says_what_to_write() -> None:
    from haystack import Pipeline
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever

    with pytest.raises(TypeError) as pipeline:
        adapt(Pipeline())
    assert str(pipeline.value).startswith(
        "the retriever fixture returned a Haystack Pipeline: which of its components gets the "
        "query is your wiring; return a function from the retriever fixture that runs it, e.g."
    )
    assert 'out["retriever"]["documents"]' in str(pipeline.value)
    store = fr.haystack_bm25().document_store
    with pytest.raises(TypeError) as embedding:
        adapt(InMemoryEmbeddingRetriever(store))
    assert str(embedding.value).startswith(
        "the retriever fixture returned a Haystack InMemoryEmbeddingRetriever, whose run() "
        "takes filters, query_embedding, return_embedding, scale_score, top_k but no query "
        "(an embedding retriever needs a text embedder before it): put both in a Pipeline and "
        "return a function"
    )


def test_haystack_pipeline_fails_the_evaluation_cleanly(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
import pytest
from haystack import Pipeline

@pytest.fixture(scope="session")
def retriever():
    return Pipeline()
"""
    )
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*golden.json: the retriever fixture returned a Haystack Pipeline: which of its "
            "components gets the query is your wiring*",
            '*out = pipeline.run({"embedder": {"text": query}, "retriever": {"top_k": k}})',
        ]
    )
    assert "Traceback" not in result.stdout.str()
