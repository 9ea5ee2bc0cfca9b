"""benchmarks/bench_gate.py: its drop maker, its shortcut past the p-values, and a tiny run."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pytest_retrieval.compare import judge_changes

pytest.importorskip("bm25s")
pytest.importorskip("Stemmer")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gate.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    """The script's globals (run_path keeps it in sys.modules while its dataclasses build)."""
    return SimpleNamespace(**runpy.run_path(str(SCRIPT), run_name="_bench_gate"))


@pytest.fixture(scope="module")
def population(bench: Any) -> Any:
    return bench.Population.load(bench.load_regression())


def test_choose_moves_hits_the_target_as_closely_as_the_steps_allow(bench: Any) -> None:
    rng = np.random.default_rng(0)
    picked = bench.choose_moves(np.full(100, 0.01), 0.05, rng)
    assert len(set(picked.tolist())) == len(picked) == 5
    sizes = np.array([0.5, 0.3, 0.2, 0.1])
    for _ in range(50):  # random orders; first fit alone ends at 0.3 for 0.4 after 0.2, 0.1
        for target in (0.1, 0.2, 0.4, 0.6, 0.9, 1.1):
            picked = bench.choose_moves(sizes, target, rng)
            assert len(set(picked.tolist())) == len(picked)
            assert sizes[picked].sum() == pytest.approx(target), target
    # 0.65 is reachable only to within half the smallest step
    assert abs(sizes[bench.choose_moves(sizes, 0.65, rng)].sum() - 0.65) <= 0.05 + 1e-12
    # recall steps of 30 queries with 1..39 relevant docs: within half the smallest step
    for _ in range(200):
        steps = 1 / (30 * rng.choice([1, 2, 3, 5, 8, 13, 21, 39], size=70))
        for target in (0.005, 0.01, 0.05, 0.14):
            made = steps[bench.choose_moves(steps, target, rng)].sum()
            assert abs(made - target) <= steps.min() / 2 + 1e-12
    with pytest.raises(RuntimeError, match=r"only 1\.1000 to remove"):
        bench.choose_moves(sizes, 1.2, rng)


def test_a_move_is_scenario_c_step(bench: Any, population: Any) -> None:
    """Population.moved on a BM25 list equals bench_regression's one-step demotion."""
    query = next(q for q in range(len(population.ids)) if population.grades[q, :3].any())
    k = population.k
    rank = int(np.flatnonzero(population.grades[query, :k] > 0)[0])
    order = np.arange(population.grades.shape[1])
    ranked = population.runs[query]
    relevant = {d for d, g in population.qrels[query].items() if g > 0}
    filler = next(d for d in ranked[k:] if d not in relevant)
    top = [d for d in ranked[:k] if d != ranked[rank]] + [filler]
    expected = top + [ranked[rank] if d == filler else d for d in ranked[k:]]
    moved = population.moved(query, order, [rank])
    assert [ranked[j] for j in moved] == expected


def test_scoring_matches_the_plugin_on_id_lists(bench: Any, population: Any) -> None:
    assert bench.check_scoring(population, seed=3) is None


def test_shortcut_never_hides_a_regression(bench: Any, population: Any) -> None:
    """Where beyond_allowance says no, judge_changes says no "regressed" either; and a large
    drop is both beyond the allowance and regressed."""
    skipped = 0
    for trial in range(30):
        rng = np.random.default_rng([7, trial])
        draws = rng.integers(len(population.ids), size=60)
        before = population.score(draws, population.noisy(draws, rng))
        order = population.noisy(draws, rng)
        for drop in (0.0, 0.005, 0.01, 0.05):
            after = population.score(draws, population.demote(draws, order, drop, rng))
            changes = judge_changes(before, after, {}, population.alpha, population.gated)
            regressed = any(c.verdict == "regressed" for c in changes)
            if not bench.beyond_allowance(before, after, population.gated):
                skipped += 1
                assert not regressed, (trial, drop)
    assert skipped > 20  # the shortcut is exercised
    rng = np.random.default_rng(1)
    draws = rng.integers(len(population.ids), size=500)
    order = population.noisy(draws, rng)
    before = population.score(draws, order)
    after = population.score(draws, population.demote(draws, order, 0.1, rng))
    assert bench.beyond_allowance(before, after, population.gated)
    changes = judge_changes(before, after, {}, population.alpha, population.gated)
    assert {c.metric for c in changes if c.verdict == "regressed"} >= {"recall@10"}


def test_a_small_run(bench: Any, population: Any) -> None:
    row = bench.run_all(population, {200: 6}, seed=0, jobs=1)[0]
    assert [c.trials for c in row.gate + row.power] == [6] * (
        len(bench.MULTIPLES) + len(bench.FRACTIONS)
    )
    assert row.gate[0].drops["recall@10"] == [0.0] * 6
    for cell in row.gate[1:] + row.power:  # 200 queries: steps of at most 1/200
        assert np.allclose(cell.drops["recall@10"], cell.target, atol=0.0025)
    assert row.gate[-1].rate == 1.0  # a 5-point drop on 200 queries fails every session
    assert row.detectable == pytest.approx(0.0112, abs=1e-4)  # the plugin's power line
    # run_all split the trials in chunks; in one go they give the same cells
    whole = bench.run_trials(population, 200, range(6), seed=0)
    assert [c.drops for c in whole.gate + whole.power] == [c.drops for c in row.gate + row.power]
    assert [c.failed for c in whole.gate + whole.power] == [c.failed for c in row.gate + row.power]


def test_main_prints_the_table(bench: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--sizes", "30", "--trials", "4", "--jobs", "1", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| queries | drop 0 | drop 0.005 | drop 0.01 | drop 0.02 | drop 0.05 |" in out
    assert "false alarms 0/4" in out
    assert "CHECK FAILED" not in out


def test_the_chart_has_a_line_per_size(bench: Any) -> None:
    """operating_svg on a made-up table: valid XML, one polyline per size (smallest first),
    the allowance and the 80% line, labelled axes and a legend."""
    import xml.etree.ElementTree as ET

    series = {
        200: [(0.0, 0.02), (0.01, 0.6), (0.02, 1.0)],
        30: [(0.0, 0.0), (0.02, 0.3), (0.05, 0.95)],
    }
    svg = bench.operating_svg(series, 0.01)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert root.get("width") == "700"
    lines = root.findall(f".//{ns}polyline")
    assert [line.findtext(f"{ns}title") for line in lines] == ["30 queries", "200 queries"]
    assert [len(line.get("points", "").split()) for line in lines] == [3, 3]
    texts = [t.text for t in root.iter(f"{ns}text")]
    for label in ("true drop in mean recall@10", "sessions failed", "allowance 0.01", "80%"):
        assert label in texts, label
    assert "30 queries" in texts and "200 queries" in texts  # the legend
    dashed = [
        e.get("stroke-dasharray") for e in root.iter(f"{ns}line") if e.get("stroke-dasharray")
    ]
    assert len(dashed) == 2  # the allowance (dashed) and 80% (dotted)


def test_main_takes_drops_and_draws_the_chart(
    bench: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import xml.etree.ElementTree as ET

    chart = tmp_path / "oc.svg"
    argv = ["--sizes", "30", "--trials", "2", "--jobs", "1", "--markdown"]
    assert bench.main([*argv, "--drops", "0.03", "0.01", "--svg", str(chart)]) == 0
    out = capsys.readouterr().out
    assert "| queries | drop 0.01 | drop 0.03 | gate 80% at |" in out
    assert "false alarms not measured (no drop 0)" in out
    root = ET.fromstring(chart.read_text(encoding="utf-8"))
    assert len(root.findall(".//{http://www.w3.org/2000/svg}polyline")) == 1
