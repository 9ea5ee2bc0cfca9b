"""The retriever contract as most search code meets it: ``(doc_id, score)`` pairs and dicts
keyed ``doc_id`` are hits; only what the evaluation needs is read from what a retriever
returns (an endless generator, a list of millions); and when the calls failed, that is the
first thing every output says."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from helpers import DOCS, GOLDEN, KEYWORD_RETRIEVER, write_golden

#: a keyword retriever over the helpers' documents whose hits have the shape ``SHAPE``
SHAPED = f"""
import pytest

DOCS = {DOCS!r}

def ranked(query, k):
    words = set(query.split())
    order = sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]
    return [(d, float(len(words & set(DOCS[d].split()))) + 0.5) for d in order]

@pytest.fixture(scope="session")
def retriever():
    def search(query, k):
        return [SHAPE for doc, score in ranked(query, k)]
    return search
"""


@pytest.mark.parametrize(
    "shape",
    [
        "(doc, score)",  # rank_bm25 / FAISS glue, most search() functions
        "[doc, score]",
        "{'doc_id': doc, 'score': score}",
        "{'doc_id': doc, 'score': score, 'text': DOCS[doc]}",
    ],
)
def test_pairs_and_doc_id_dicts_are_hits_with_their_scores(
    pytester: pytest.Pytester, shape: str
) -> None:
    pytester.makeconftest(SHAPED.replace("SHAPE", shape))
    write_golden(pytester)
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-export-run", "out.trec"
    )
    result.assert_outcomes(passed=1)
    lines = (pytester.path / "out.trec").read_text(encoding="utf-8").splitlines()
    first = lines[0].split()
    assert first[:3] == ["apple", "Q0", "d1"]
    assert float(first[4]) == 1.5  # the retriever's own score, not a rank-made one


def test_a_pair_whose_first_item_is_no_id_is_refused_with_the_shapes_accepted(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(SHAPED.replace("SHAPE", "(score, doc)"))
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*hit at rank 1 has no usable id*(id, score) pairs*"])


ALWAYS_DOWN = """
import pytest

@pytest.fixture(scope="session")
def retriever():
    def search(query, k):
        raise ConnectionError("connection refused: search backend down")
    return search
"""


def test_failed_calls_are_the_first_reason_in_every_output(pytester: pytest.Pytester) -> None:
    """Every call failed and every threshold fails with it: the calls are the cause, and
    the first line CI shows (terminal, JUnit's message, JSON, Markdown) says so."""
    pytester.makeconftest(ALWAYS_DOWN)
    thresholds = {"recall@3": 0.35, "mrr@3": 0.3, "ndcg@3": 0.3, "precision@3": 0.1}
    write_golden(pytester, {**GOLDEN, "thresholds": thresholds})
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", "r.json",
        "--retrieval-markdown", "s.md", "--junitxml", "j.xml",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    gate_lines = [line for line in out.splitlines() if "retrieval gate failed: " in line]
    assert gate_lines, out
    assert gate_lines[0].split("retrieval gate failed: ", 1)[1].startswith("retriever errors: ")
    listed = out.splitlines()[out.splitlines().index("  verdict: FAILED") + 1]
    assert listed.startswith("    retriever errors: "), out
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    for verdict in (report["verdict"], report["evaluations"][0]["verdict"]):
        kinds = [reason["kind"] for reason in verdict["reasons"]]
        assert kinds[0] == "retriever errors", kinds
        assert "threshold" in kinds[1:]
    failure = ET.parse(pytester.path / "j.xml").getroot().find(".//failure")
    assert failure is not None
    message = failure.get("message", "").removeprefix("Failed: ")
    assert message.startswith("retrieval gate failed: retriever errors: "), message
    markdown = (pytester.path / "s.md").read_text(encoding="utf-8")
    reasons = [line for line in markdown.splitlines() if "retriever errors" in line or (
        "is below" in line)]  # fmt: skip
    assert reasons and "retriever errors" in reasons[0], markdown


#: retrievers that return more than any evaluation needs; each records, in ``read.txt``,
#: how many hits its calls handed out at most (written as the session ends)
ENDLESS = """
import asyncio
import itertools
import pytest

PULLED = []

def counted(hits):
    pulled = [0]  # this call's count (async calls interleave)
    PULLED.append(pulled)
    for hit in hits:
        pulled[0] += 1
        yield hit

def pytest_sessionfinish(session):
    with open("read.txt", "w") as out:
        out.write(str(max((n for n, in PULLED), default=-1)))

def endless_generator(query, k):
    return counted(itertools.chain(["d1", "d4", "d2", "d3", "d6"],
                                   (f"x{i}" for i in itertools.count())))

async def endless_stream(query, k):
    for hit in counted(itertools.chain(["d1", "d4", "d2", "d3", "d6"],
                                       (f"x{i}" for i in itertools.count()))):
        yield hit
        await asyncio.sleep(0)

def huge_list(query, k):
    # the same few ids again and again, a bad hit far down: nothing past the limit is read
    return ["d1", "d4", "d2", "d3", "d6"] + ["d1"] * 2_000_000 + [17]

class Endless(list):  # a list that iterates forever
    def __iter__(self):
        return counted(f"x{i}" for i in itertools.count())

def endless_list(query, k):
    return Endless()

@pytest.fixture(scope="session")
def retriever():
    return RETRIEVER
"""


@pytest.mark.parametrize("retriever", ["endless_generator", "endless_stream", "endless_list"])
def test_an_endless_iterable_is_read_only_as_far_as_the_evaluation_needs(
    pytester: pytest.Pytester, retriever: str
) -> None:
    """k=3: the first 3 distinct ids, then room for repeats (k more, at least 100 in all
    past k): never the whole, which would never end. Guarded by the subprocess timeout."""
    pytester.makeconftest(ENDLESS.replace("RETRIEVER", retriever))
    write_golden(pytester)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--retrieval-report", "r.json", timeout=120
    )
    result.assert_outcomes(passed=1)
    assert (pytester.path / "read.txt").read_text() == "103"


def test_a_huge_list_is_read_only_as_far_as_the_evaluation_needs(
    pytester: pytest.Pytester,
) -> None:
    """Its repeats past the limit are not counted, and its bad hit at rank 2,000,006 not
    seen: neither is read."""
    pytester.makeconftest(ENDLESS.replace("RETRIEVER", "huge_list"))
    write_golden(pytester)
    result = pytester.runpytest_subprocess(
        "--retrieval-golden", "golden.json", "--retrieval-report", "r.json", timeout=120
    )
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    evaluation = report["evaluations"][0]
    assert evaluation["duplicates_dropped"] == 4 * (103 - 5)


#: a LangChain chain (a Runnable without a top-k knob) that returns every document it has:
#: the good ones, then a million repeats, then one that is no Document
CHAIN = """
import pytest
from langchain_core.documents import Document

class Chain:
    def invoke(self, query):
        docs = [Document(page_content="x", metadata={"id": d}) for d in ("d1", "d4", "d2")]
        return docs + [docs[0]] * 1_000_000 + ["not a Document"]

    async def ainvoke(self, query):
        return self.invoke(query)

@pytest.fixture(scope="session")
def retriever():
    return Chain()
"""


def test_a_framework_answer_is_converted_only_as_far_as_it_is_read(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("langchain_core")
    pytester.makeconftest(CHAIN)
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert report["evaluations"][0]["errors"] == 0


TABLE = KEYWORD_RETRIEVER.replace(
    "def search(",
    """class Frame:
    \"\"\"A pandas DataFrame as PyTerrier's search() returns one: iterating it gives
    its column names.\"\"\"

    columns = ["qid", "docno", "score"]

    def __iter__(self):
        return iter(self.columns)

    def itertuples(self):
        return iter([])


def search(query, k, **params):
    return Frame()


def _unused(""",
)


def test_a_table_is_refused_not_read_as_its_column_names(pytester: pytest.Pytester) -> None:
    """A DataFrame iterates over its column names: read as doc ids, every query scored 0
    with no error, and the gate blamed the thresholds."""
    pytester.makeconftest(TABLE)
    write_golden(pytester)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-report", "r.json")
    result.assert_outcomes(failed=1)
    report = json.loads((pytester.path / "r.json").read_text("utf-8"))
    errors = [q["error"] for q in report["evaluations"][0]["queries"]]
    assert errors and all("the retriever returned a Frame (a table" in e for e in errors)
