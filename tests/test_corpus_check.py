"""The golden set is checked against the corpus it is evaluated on, in the plugin: relevant ids
the corpus lacks are a warning, or a usage error / failure with --retrieval-strict (ini too)."""

from __future__ import annotations

import json

import pytest
from helpers import DOCS, GOLDEN, KEYWORD_RETRIEVER, write_golden

#: the corpus without d6, which two golden queries name as relevant
SHORT_CORPUS = {doc: text for doc, text in DOCS.items() if doc != "d6"}


@pytest.fixture
def with_corpus(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    lines = [json.dumps({"_id": doc, "text": text}) for doc, text in SHORT_CORPUS.items()]
    (pytester.path / "corpus.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_golden(pytester, dict(GOLDEN, corpus="corpus.jsonl"))
    return pytester


def test_missing_ids_are_a_warning(with_corpus: pytest.Pytester) -> None:
    result = with_corpus.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*golden set *golden.json: 1 of 6 relevant doc ids are not in the corpus *corpus.jsonl "
            "(5 documents): 'd6'*"
        ]
    )


def test_a_corpus_path_that_does_not_exist_names_the_golden_file_and_its_key(
    pytester: pytest.Pytester,
) -> None:
    """A golden set copied without its corpus (the bundled example into another repo): the
    warning named the corpus path as the golden set ("golden set .../corpus.jsonl: no such
    corpus file"); it names the golden file, its "corpus" key, the path as written and
    where it was looked for. With a judge needing texts, the evaluation fails saying the
    same."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester, dict(GOLDEN, corpus="cranfield/corpus.jsonl"))
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            f"*PytestWarning: golden set {pytester.path / 'golden.json'}, /corpus: the corpus "
            "it names, cranfield/corpus.jsonl, does not exist "
            f"({pytester.path / 'cranfield' / 'corpus.jsonl'})",
            '*fix: correct the "corpus" path (relative to the golden file) or remove it',
        ]
    )
    assert "no such" not in result.stdout.str()


@pytest.mark.parametrize(
    ("ini", "args"), [("", ["--retrieval-strict"]), ("retrieval_strict = true\n", [])]
)
def test_missing_ids_are_a_usage_error_when_strict(
    with_corpus: pytest.Pytester, ini: str, args: list[str]
) -> None:
    with_corpus.makeini("[pytest]\n" + ini)
    result = with_corpus.runpytest("--retrieval-golden", "golden.json", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*1 of 6 relevant doc ids are not in the corpus*'d6'*",
            "*fix: add those documents to the corpus*",
        ]
    )


def test_retrieval_corpus_fixture_is_checked(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        KEYWORD_RETRIEVER + f"\n\n@pytest.fixture(scope='session')\ndef retrieval_corpus():\n"
        f"    return {SHORT_CORPUS!r}\n"
    )
    write_golden(pytester)
    warned = pytester.runpytest("--retrieval-golden", "golden.json")
    warned.assert_outcomes(passed=1, warnings=1)
    warned.stdout.fnmatch_lines(["*not in the corpus of the retrieval_corpus fixture*'d6'*"])
    strict = pytester.runpytest("--retrieval-golden", "golden.json", "--retrieval-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(
        ["*not in the corpus of the retrieval_corpus fixture*", "*fix: *(--retrieval-strict)"]
    )
    # warnings as errors: the warning raised out of the evaluation, a traceback into the plugin
    errors = pytester.runpytest("--retrieval-golden", "golden.json", "-W", "error")
    errors.assert_outcomes(failed=1)
    assert "runtest.py" not in errors.stdout.str()  # no source listing of the plugin
    errors.stdout.fnmatch_lines(
        ["*not in the corpus of the retrieval_corpus fixture*",
         "*(a warning, which the warning filters in force make an error*"]
    )  # fmt: skip
