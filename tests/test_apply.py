"""`pytest-retrieval apply`: decisions merged as graded judgments with provenance, hand labels
kept, the file's formatting kept, and only the changed queries re-judged."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER, write_golden

from pytest_retrieval.builder import apply
from pytest_retrieval.builder.review_file import Decision, Proposal, read_review, write_review
from pytest_retrieval.cli import main
from pytest_retrieval.golden import load_golden

AT = "2024-01-02T03:04:05Z"
#: how provenance writes every time: UTC to the second, as baselines and reports do
AT_UTC = "2024-01-02T03:04:05+00:00"
HEADER: dict[str, Any] = {
    "golden": "golden.json",
    "golden_fingerprint": "x",
    "k": 10,
    "reports": ["a.json"],
    "judge": {"model": "gpt-test", "prompt_version": "v1", "scale": "0-3"},
    "created": AT,
}
QUERIES = {q["id"]: q["query"] for q in GOLDEN["queries"]}


def proposal(
    query_id: str,
    doc_id: str,
    grade: int,
    decision: tuple[str, int | None] | None = None,
    *,
    kind: str = "add",
    current: int | None = None,
    confidence: float | None = 0.9,
) -> Proposal:
    return Proposal(
        query_id=query_id,
        query=QUERIES[query_id],
        doc_id=doc_id,
        text="text",
        kind=kind,
        current=current,
        grade=grade,
        reason=f"reason {doc_id}",
        confidence=confidence,
        rank=1,
        sources=("a.json:bm25",),
        decision=None if decision is None else Decision(decision[0], decision[1], "ann", AT),
    )


#: apple: accept d2 (judge 1); bread: grade d3 as 0 (judge 2); cherry: reject d1, skip d2;
#: juice: undecided d3 (judge 3, conf 0.9) and d4 (judge 1, conf 0.5); bread: remove d2
#: accepted by a person (3 -> 0)
REVIEW = [
    proposal("apple", "d2", 1, ("accept", None)),
    proposal("bread", "d3", 2, ("grade", 0)),
    proposal("bread", "d2", 0, ("accept", None), kind="remove", current=3),
    proposal("cherry", "d1", 1, ("reject", None)),
    proposal("cherry", "d2", 2, ("skip", None)),
    proposal("juice", "d3", 3),
    proposal("juice", "d4", 1, confidence=0.5),
    proposal("juice", "d6", 0, kind="remove", current=1),
]


def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(text, encoding="utf-8")
    write_review(tmp_path / "review.jsonl", {**HEADER, "golden": name}, REVIEW)


def indented(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def test_decisions_become_graded_labels_with_provenance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(tmp_path, monkeypatch, indented(GOLDEN), "golden.json")
    before = load_golden("golden.json")
    assert main(["apply", "review.jsonl", "golden.json"]) == 0
    after = load_golden("golden.json")
    relevant = {q.id: q.relevant for q in after.queries}
    assert relevant == {
        "apple": {"d1": 1, "d4": 1, "d2": 1},
        "bread": {"d2": 0, "d5": 1, "d1": 0, "d3": 0},
        "cherry": {"d3": 1, "d6": 1},
        "juice": {"d6": 1},
    }
    labels = {q.id: q.metadata.get("labels") for q in after.queries}
    assert labels["apple"] == {
        "d2": {
            "grade": 1,
            "by": "review:ann",
            "judge_grade": 1,
            "judge_model": "gpt-test",
            "confidence": 0.9,
            "reason": "reason d2",
            "at": AT_UTC,
        }
    }
    assert labels["bread"]["d2"]["previous"] == 3
    assert labels["bread"]["d2"]["grade"] == 0
    assert labels["bread"]["d3"]["by"] == "review:ann"
    assert labels["cherry"] is None and labels["juice"] is None
    old, new = before.query_fingerprints, after.query_fingerprints
    assert sorted(q for q in new if new[q] != old[q]) == ["apple", "bread"]
    # an indent=2 file stays one: the exact text json.dumps gives for the new data
    data = json.loads(Path("golden.json").read_text(encoding="utf-8"))
    assert Path("golden.json").read_text(encoding="utf-8") == indented(data)
    assert list(data["queries"][0]) == ["id", "query", "relevant", "tags", "metadata"]
    out = capsys.readouterr().out
    assert "golden.json: 2 labels added (1 graded 0, kept as judged not relevant), 1 " in out
    assert "removal applied; 2 queries changed" in out
    assert (
        "not applied: 1 rejected, 1 skipped (revisit with pytest-retrieval review), "
        "3 undecided" in out
    )


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_one_line_entries_keep_every_other_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bom: str
) -> None:
    settings = bom + '{\n  "name": "fruit",\n  "k": 3,\n  "metrics": ["recall@3", "mrr@3"],\n'
    entries = ",\n".join("    " + json.dumps(q) for q in GOLDEN["queries"])
    text = settings + '  "queries": [\n' + entries + "\n  ]\n}"  # no final newline
    setup(tmp_path, monkeypatch, text, "golden.json")
    assert main(["apply", "review.jsonl", "golden.json"]) == 0
    new = Path("golden.json").read_text(encoding="utf-8")
    old_lines, new_lines = text.split("\n"), new.split("\n")
    assert len(new_lines) == len(old_lines)
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b]
    assert changed == [5, 6]  # the apple and bread entries, nothing else
    assert new_lines[5].startswith('    {"id": "apple", "query": "apple", "relevant": {"d1": 1')
    assert new_lines[5].endswith("},")
    assert not new.endswith("\n")


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_jsonl_changes_only_the_changed_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bom: str
) -> None:
    text = bom + "".join(json.dumps(q, separators=(",", ":")) + "\n" for q in GOLDEN["queries"])
    setup(tmp_path, monkeypatch, text, "golden.jsonl")
    assert main(["apply", "review.jsonl", "golden.jsonl"]) == 0
    old_lines = text.split("\n")
    new_lines = Path("golden.jsonl").read_text(encoding="utf-8").split("\n")
    assert [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b] == [
        0,
        1,
    ]
    assert new_lines[0].startswith(bom + '{"id":"apple","query":"apple","relevant":{"d1":1,"d4":1,')
    assert load_golden("golden.jsonl").queries[0].relevant == {"d1": 1, "d4": 1, "d2": 1}


def test_accept_judge_takes_undecided_additions_never_removals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(tmp_path, monkeypatch, indented(GOLDEN), "golden.json")
    argv = ["apply", "review.jsonl", "golden.json", "--accept-judge", "--min-confidence", "0.8"]
    assert main(argv) == 0
    juice = load_golden("golden.json").queries[3]
    assert juice.relevant == {"d6": 1, "d3": 3}  # d4 (0.5) left, the d6 removal never taken
    assert juice.metadata["labels"]["d3"]["by"] == "judge:gpt-test"
    assert juice.metadata["labels"]["d3"]["judge_model"] == "gpt-test"
    # the judge's labels carry their time in the reviewer's format
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", juice.metadata["labels"]["d3"]["at"]
    )
    cherry = load_golden("golden.json").queries[2]
    assert "d2" not in cherry.relevant  # skipped by a person: not the judge's to decide
    out = capsys.readouterr().out
    assert "1 undecided, 1 below --min-confidence" in out
    assert "3 queries changed" in out


def test_hand_labels_are_kept_and_a_second_apply_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    golden: dict[str, Any] = json.loads(json.dumps(GOLDEN))
    golden["queries"][0]["relevant"] = {"d1": 1, "d4": 1, "d2": 3}  # labelled by hand since
    setup(tmp_path, monkeypatch, indented(golden), "golden.json")
    assert main(["apply", "review.jsonl", "golden.json"]) == 0
    assert load_golden("golden.json").queries[0].relevant["d2"] == 3
    assert "1 labelled by hand since pool (hand label kept)" in capsys.readouterr().out
    first = Path("golden.json").read_bytes()
    assert main(["apply", "review.jsonl", "golden.json"]) == 0
    assert Path("golden.json").read_bytes() == first
    out = capsys.readouterr().out
    assert "0 labels added" in out and "2 already in the golden set" in out


def test_dry_run_and_output_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(tmp_path, monkeypatch, indented(GOLDEN), "golden.json")
    assert main(["apply", "review.jsonl", "golden.json", "--dry-run"]) == 0
    assert Path("golden.json").read_text(encoding="utf-8") == indented(GOLDEN)
    out = capsys.readouterr().out
    assert "dry run: golden.json: 2 labels added" in out and "nothing written" in out
    assert main(["apply", "review.jsonl", "golden.json", "-o", "new.json"]) == 0
    assert Path("golden.json").read_text(encoding="utf-8") == indented(GOLDEN)
    assert load_golden("new.json").queries[0].relevant == {"d1": 1, "d4": 1, "d2": 1}


def test_a_review_file_of_another_golden_set_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    golden: dict[str, Any] = json.loads(json.dumps(GOLDEN))
    golden["queries"][1]["query"] = "bread"
    del golden["queries"][3]
    setup(tmp_path, monkeypatch, indented(golden), "golden.json")
    assert main(["apply", "review.jsonl", "golden.json"]) == 1
    err = capsys.readouterr().err
    assert "review.jsonl was made for another golden set than golden.json" in err
    assert "query 'bread' reads 'bread recipe' in the review file but 'bread' in the golden" in err
    assert "query 'juice' is not in the golden set" in err
    assert Path("golden.json").read_text(encoding="utf-8") == indented(golden)


def test_trec_and_beir_are_refused_with_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(tmp_path, monkeypatch, "apple 0 d1 1\n", "golden.qrels")
    assert main(["apply", "review.jsonl", "golden.qrels"]) == 1
    assert "convert it first: pytest-retrieval convert golden.qrels -o golden.json" in (
        capsys.readouterr().err
    )


def test_the_baseline_reports_exactly_the_applied_queries_as_rejudged(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    args = ["--retrieval-golden", "golden.json", "-p", "no:randomly"]
    pytester.runpytest(*args, "--retrieval-update-baseline").assert_outcomes(passed=1)
    write_review(pytester.path / "review.jsonl", HEADER, REVIEW)
    assert (
        main(["apply", str(pytester.path / "review.jsonl"), str(pytester.path / "golden.json")])
        == 0
    )
    # the review recorded nothing for cherry and juice: their fingerprints stay
    result = pytester.runpytest(*args)
    result.stdout.fnmatch_lines(
        [
            "*golden set changed since: 0 added, 0 removed, 2 re-judged; compared on the 2 "
            "unchanged queries*",
            "*re-judged: apple, bread",
        ]
    )
    stored = read_review(pytester.path / "review.jsonl")
    assert [p.decision for p in stored.proposals] == [p.decision for p in REVIEW]


@pytest.mark.parametrize(
    ("at", "written"),
    [
        ("2024-01-02T03:04:05+00:00", "2024-01-02T03:04:05+00:00"),
        ("2024-01-02T03:04:05.123456Z", "2024-01-02T03:04:05+00:00"),
        ("2024-01-02T05:04:05+02:00", "2024-01-02T03:04:05+00:00"),
        ("2024-01-02T03:04:05", "2024-01-02T03:04:05+00:00"),
        ("yesterday", "yesterday"),
    ],
)
def test_provenance_times_read_alike(at: str, written: str) -> None:
    assert apply.utc(at) == written


def test_a_decision_leaving_a_query_no_relevant_document_is_refused_the_rest_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    golden: dict[str, Any] = json.loads(json.dumps(GOLDEN))
    golden["queries"].append({"id": "open", "query": "open"})  # no labels yet
    golden["queries"].append({"id": "pair", "query": "pair", "relevant": {"d1": 1, "d2": 1}})
    monkeypatch.chdir(tmp_path)
    Path("golden.json").write_text(indented(golden), encoding="utf-8")
    accepted = ("accept", None)
    open_zero = replace(proposal("apple", "d3", 0, accepted), query_id="open", query="open")
    pair = [
        replace(
            proposal("apple", doc, 0, accepted, kind="remove", current=1),
            query_id="pair",
            query="pair",
        )
        for doc in ("d1", "d2")
    ]
    review = [
        proposal("apple", "d2", 1, accepted),
        # juice's only relevant label, removed: refused
        proposal("juice", "d6", 0, accepted, kind="remove", current=1),
        # cherry loses d3 but keeps d6: applied
        proposal("cherry", "d3", 0, accepted, kind="remove", current=1),
        # bread loses both relevant labels but gains d6 graded 2: applied
        proposal("bread", "d2", 0, accepted, kind="remove", current=3),
        proposal("bread", "d5", 0, accepted, kind="remove", current=1),
        proposal("bread", "d6", 2, accepted),
        # an open query given only a grade 0: refused
        open_zero,
        # pair's two relevant labels, removed together: both refused, each naming the other
        *pair,
    ]
    write_review(tmp_path / "review.jsonl", HEADER, review)
    # a person's decision refused: exit status 1 (a script notices), the rest still written
    assert main(["apply", "review.jsonl", "golden.json"]) == 1
    relevant = {
        q.id: q.relevant for q in load_golden("golden.json", require_relevant=False).queries
    }
    assert relevant == {
        "apple": {"d1": 1, "d4": 1, "d2": 1},
        "bread": {"d2": 0, "d5": 0, "d1": 0, "d6": 2},
        "cherry": {"d3": 0, "d6": 1},
        "juice": {"d6": 1},
        "open": {},
        "pair": {"d1": 1, "d2": 1},
    }
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "refused: review.jsonl:3: removing 'd6' would leave query 'juice' with no relevant "
        "document; reject this decision, or first give another document of 'juice' a grade "
        ">= 1 (in the review or the golden set)",
        "refused: review.jsonl:8: query 'open' has no relevant document, and grade 0 for 'd3' "
        "would make it a judged query without one; grade a relevant document of 'open' 1-3 in "
        "the review (or the golden set), or reject this decision",
        "refused: review.jsonl:9: removing 'd1', with review.jsonl:10 removing 'd2', would "
        "leave query 'pair' with no relevant document; reject one of these decisions, or "
        "first give another document of 'pair' a grade >= 1 (in the review or the golden set)",
        "refused: review.jsonl:10: removing 'd2', with review.jsonl:9 removing 'd1', would "
        "leave query 'pair' with no relevant document; reject one of these decisions, or "
        "first give another document of 'pair' a grade >= 1 (in the review or the golden set)",
        "4 decisions refused (see above), the rest applied: exit status 1",
    ]
    assert "golden.json: 2 labels added (0 graded 0, kept as judged not relevant), 3 " in (
        captured.out
    )
    assert "not applied: 4 refused (see above)" in captured.out
    # a dry run refuses the same: the same exit status
    assert main(["apply", "review.jsonl", "golden.json", "--dry-run"]) == 1
    assert capsys.readouterr().err.endswith(
        "4 decisions refused (see above), the rest would be applied: exit status 1\n"
    )


def test_the_judge_grading_an_open_query_all_0_leaves_it_open_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    golden: dict[str, Any] = json.loads(json.dumps(GOLDEN))
    golden["queries"] += [{"id": "open", "query": "open"}, {"id": "open2", "query": "open2"}]
    monkeypatch.chdir(tmp_path)
    Path("golden.json").write_text(indented(golden), encoding="utf-8")
    review = [
        proposal("apple", "d2", 1),
        *(
            replace(proposal("apple", doc, 0), query_id="open", query="open")
            for doc in ("d1", "d2")
        ),
        replace(proposal("apple", "d1", 0), query_id="open2", query="open2"),
        # graded relevant but not confident enough to take: open2 stays open
        replace(proposal("apple", "d2", 2, confidence=0.5), query_id="open2", query="open2"),
    ]
    write_review(tmp_path / "review.jsonl", HEADER, review)
    argv = ["apply", "review.jsonl", "golden.json", "--accept-judge", "--min-confidence", "0.8"]
    assert main(argv) == 0  # no person decided anything: nothing refused
    captured = capsys.readouterr()
    assert captured.err == ""
    assert [line for line in captured.out.splitlines() if line.startswith("left open")] == [
        "left open: the judge graded all 2 pooled documents of 'open' 0",
        "left open: the judge graded 1 pooled document of 'open2' 0",
    ]
    assert "not applied: 3 graded 0 by the judge on queries left open (see above), 1 below " in (
        captured.out
    )
    relevant = {
        q.id: q.relevant for q in load_golden("golden.json", require_relevant=False).queries
    }
    assert relevant["open"] == {} and relevant["open2"] == {}
    assert relevant["apple"] == {"d1": 1, "d4": 1, "d2": 1}


def test_help_states_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["apply", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0 every decision applied" in out
    assert "1 a person's decision was refused because it would leave a query without a " in out


def test_a_broken_edit_names_the_output_never_a_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    setup(tmp_path, monkeypatch, indented(GOLDEN), "golden.json")
    monkeypatch.setattr(apply, "edit_json", lambda text, labels: text.replace('"d4"', '"d1"'))
    assert main(["apply", "review.jsonl", "golden.json"]) == 1
    err = capsys.readouterr().err
    assert "internal error, nothing written to golden.json: the edited golden set would not " in err
    assert "/queries/0/relevant: a doc id is listed twice)" in err
    assert ".apply-" not in err
    assert Path("golden.json").read_text(encoding="utf-8") == indented(GOLDEN)


def one_line_entries(data: Any) -> str:
    entries = ",\n".join("  " + json.dumps(q) for q in data["queries"])
    return '{"name": "fruit", "k": 3, "queries": [\n' + entries + "\n]}\n"


def jsonl(data: Any) -> str:
    return "".join(json.dumps(q) + "\n" for q in data["queries"])


@pytest.mark.parametrize(
    ("name", "render"),
    [("golden.json", indented), ("golden.json", one_line_entries), ("golden.jsonl", jsonl)],
)
def test_crlf_files_keep_every_crlf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, render: Any
) -> None:
    setup(tmp_path, monkeypatch, render(GOLDEN), name)
    assert main(["apply", "review.jsonl", name]) == 0
    with_lf = Path(name).read_bytes()
    Path(name).write_bytes(render(GOLDEN).replace("\n", "\r\n").encode())
    assert main(["apply", "review.jsonl", name]) == 0
    # the same edit, every line ending a CRLF (the rewritten entries' too)
    assert Path(name).read_bytes() == with_lf.replace(b"\n", b"\r\n")
