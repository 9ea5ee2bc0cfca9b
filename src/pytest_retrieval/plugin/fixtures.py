"""The fixtures the plugin offers a user's own tests: ``retrieval_golden`` (the golden set
named by the test's marker, or the only configured one) and ``retrieval_eval`` (evaluate any
retriever inside a test, with the session's settings layered under the test's)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._internal.io import relative
from .runtest import golden_for, run_evaluation
from .session import STATE, as_test_failure, layered_thresholds

if TYPE_CHECKING:
    from ..golden import GoldenSet
    from ..results import EvaluationResult


@pytest.fixture
def retrieval_golden(request: pytest.FixtureRequest) -> GoldenSet:
    """The golden set named by the test's retrieval marker, or the only configured one."""
    state = request.config.stash[STATE]
    with as_test_failure():
        return golden_for(request, state, None)


@pytest.fixture
def retrieval_eval(request: pytest.FixtureRequest) -> Callable[..., EvaluationResult]:
    """Evaluate any retriever inside your own test::

    result = retrieval_eval(my_search, golden="golden.json")
    assert result.metrics["recall@10"] > 0.8
    assert_thresholds(result, {"mrr@5": 0.6})  # from pytest_retrieval import assert_thresholds
    """
    state = request.config.stash[STATE]
    marker = request.node.get_closest_marker("retrieval")
    options = dict(marker.kwargs) if marker else {}

    def run(
        retriever: Any,
        golden: str | Path | GoldenSet | None = None,
        *,
        thresholds: Mapping[str, float] | None = None,
        metrics: Iterable[str] = (),
        k: int | None = None,
        retriever_id: str | None = None,
    ) -> EvaluationResult:

        with as_test_failure():
            return _run(
                retriever, golden, thresholds=thresholds, metrics=metrics, k=k, rid=retriever_id
            )

    def _run(
        retriever: Any,
        golden: str | Path | GoldenSet | None,
        *,
        thresholds: Mapping[str, float] | None,
        metrics: Iterable[str],
        k: int | None,
        rid: str | None,
    ) -> EvaluationResult:
        from ..golden import GoldenSet

        chosen = golden if isinstance(golden, GoldenSet) else golden_for(request, state, golden)
        layered = layered_thresholds(
            state.settings, chosen, options.get("thresholds", {}), thresholds
        )
        return run_evaluation(
            request,
            retriever,
            chosen,
            layered,
            state,
            metrics=[*options.get("metrics", ()), *metrics],
            k=k or options.get("k"),
            retriever_id=rid or getattr(retriever, "__name__", None),
            marker=options,
            # the test names its set (a path, its marker's, one it loaded), or took the
            # configured one (golden=None, or the retrieval_golden fixture's: loaded then)
            rerun=_rerun(
                request,
                chosen,
                given=bool(options.get("golden"))
                or (golden is not None and golden is not state.configured_golden(load=False)),
            ),
        )

    return run


def _rerun(request: pytest.FixtureRequest, golden: GoldenSet, *, given: bool) -> str:
    """``pytest`` naming this test: what records its baseline entry. When the test took the
    set ``--retrieval-golden`` configured (not ``given`` by the test or its marker), that
    set is named as an ini value (``-o``): named by the option, it would also be evaluated
    on its own, with a ``retriever`` fixture this test may not see, and re-recorded. One
    from the ini file is found without."""
    import shlex

    node = request.node
    config = request.config
    words = ["pytest", shlex.quote(f"{relative(node.path)}::{node.nodeid.split('::', 1)[-1]}")]
    if not given and config.getoption("retrieval_golden"):
        ini = config.inipath  # pytest reads an ini path relative to the ini file's folder
        base = ini.parent if ini is not None else config.invocation_params.dir
        value = shlex.quote(relative(golden.source, base))
        words += ["-o", shlex.quote(f"retrieval_golden={value}")]
    return " ".join(words)
