"""benchmarks/bench_regression.py still runs: its simulation at 3 seeds (a few seconds)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

pytest.importorskip("bm25s")
pytest.importorskip("Stemmer")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_regression.py"


@pytest.fixture(scope="module")
def bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_regression", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


@pytest.fixture(scope="module")
def bench(bench_module: ModuleType) -> Any:
    return bench_module.Bench.load()


def test_transformations_keep_the_ids(bench_module: ModuleType, bench: Any) -> None:
    rng = np.random.default_rng(0)
    dropped, steps = bench_module.inject_drop(bench, bench.bm25, 0.03, rng)
    assert steps > 0
    assert bench.recall(bench.bm25) - bench.recall(dropped) >= 0.03 - 1e-12
    assert bench.recall(dropped, 100) == pytest.approx(bench.recall(bench.bm25, 100))
    swapped, _ = bench_module.swap_nonrelevant(bench, bench.bm25, rng)
    noisy, _ = bench_module.swap_top(bench.bm25, rng)
    for run in (dropped, swapped, noisy):
        assert all(sorted(run[q]) == sorted(bench.bm25[q]) for q in bench.bm25)


def test_simulation_small(bench_module: ModuleType, bench: Any) -> None:
    outcome = bench_module.simulate(bench, seeds=3)
    assert outcome.alarms_a == []
    assert outcome.max_change_a == 0
    assert outcome.detected == [0, 1, 2]
    assert all(drop >= 0.03 - 1e-9 for drop in outcome.drops_c)
    text = bench_module.report(outcome, bench, 0.0, 1.0)
    assert "detection" in text and "false alarms" in text
