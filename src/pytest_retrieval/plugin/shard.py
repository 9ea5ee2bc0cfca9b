"""``pytest --retrieval-shard I/N``: the golden-set test of one CI shard, evaluating its part
of the golden set and stamping it with what ``pytest-retrieval combine`` needs to gate the
whole. The shard rule, the stamp and ``combine`` are pytest-free, in :mod:`..shards`; this is
the part that runs inside a pytest test (the request, the session's settings, its baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._internal.io import relative
from ..shards import cut, shard_name, stamp
from ..validators import Shard
from .runtest import RESULTS, chosen_gate, run_evaluation
from .session import SessionState, layered_allowances, warnings_fail

if TYPE_CHECKING:
    from ..finish import GateSettings
    from ..golden import GoldenSet
    from ..limits import Threshold
    from ..results import EvaluationResult


def run_shard(
    request: pytest.FixtureRequest,
    retriever: Any,
    golden: GoldenSet,
    thresholds: list[Threshold],
    state: SessionState,
) -> EvaluationResult:
    """The golden-set test under ``--retrieval-shard``: this shard's queries evaluated and
    stamped as a part of ``golden`` (:func:`~..shards.stamp`). Thresholds are not applied to a part,
    only recorded; the metrics they name are computed."""
    shard = state.settings.shard
    assert shard is not None  # the plugin calls this only under --retrieval-shard
    result, positions = evaluate_part(request, retriever, golden, shard, thresholds, state)
    stamped = stamp(
        result,
        shard,
        total=len(golden),
        positions=positions,
        golden=shard_name(Path(golden.source), request.config.invocation_params.dir),
        nodeid=request.node.nodeid,
        settings=shard_settings(
            request.config.invocation_params.dir, golden, thresholds, state, result.retriever_id
        ),
    )
    results = request.node.stash[RESULTS]
    results[next(i for i, r in enumerate(results) if r is result)] = stamped
    # not the part's metrics under the gate's test name: CI dashboards read those as the gate
    assert stamped.part is not None
    described = f"{stamped.part.described} (gated by pytest-retrieval combine)"
    request.node.user_properties.append(("retrieval.part", described))
    return stamped


def evaluate_part(
    request: pytest.FixtureRequest,
    retriever: Any,
    golden: GoldenSet,
    shard: Shard,
    thresholds: list[Threshold],
    state: SessionState,
    retriever_id: str | None = None,
) -> tuple[EvaluationResult, tuple[int, ...]]:
    """``shard``'s queries of ``golden`` evaluated, and their positions in it: the
    thresholds' metrics computed, the thresholds not applied -- a part decides nothing (the
    whole is decided once merged), and a tag they name may have no query in it."""
    part, positions = cut(golden, shard)
    result = run_evaluation(
        request,
        retriever,
        part,
        [],
        state,
        metrics=[t.metric.name for t in thresholds],
        retriever_id=retriever_id,
        part_of=golden,
    )
    return result, positions


def shard_settings(
    start: Path,
    golden: GoldenSet,
    thresholds: Sequence[Threshold],
    state: SessionState,
    retriever_id: str,
) -> GateSettings:
    """The gate's settings of a golden-set evaluation, as :func:`~.runtest.attach_baseline`
    would apply them to the whole (paths relative to ``start``, where pytest started), and
    whether the baseline holds its entry."""
    from ..baseline import find, golden_key
    from ..finish import GateSettings

    settings = state.settings
    path = state.baseline_path(golden)
    key = golden_key(golden.source, path)
    entry = find(state.baseline_entries(path), key, golden.name, retriever_id)
    return GateSettings(
        thresholds=tuple(thresholds),
        allowances=layered_allowances(settings, golden),
        gate=chosen_gate(state, golden, {}),
        alpha=settings.alpha,
        strict_baseline=settings.strict_baseline,
        baseline=shard_name(path, start),
        baseline_key=key,
        compare_to=settings.compare_to,
        baseline_seen=entry is not None,
        stale_fails=warnings_fail(f"stale baseline {relative(path)}"),
    )
