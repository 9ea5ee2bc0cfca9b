"""What crosses from a pytest-xdist worker to the controller, both ends in one place.

Two roles (as pytest-xdist keeps ``remote.py`` and ``dsession.py`` apart): a **worker**
evaluates its items and sends, on each test report, the evaluations as JSON text
(:func:`attach`), and at the end of its collection, in its ``workeroutput``, the golden-set
items it collected, the usage errors it found and the parts of a split golden set
(:func:`send_collected`). The **controller** (:class:`~.controller.Reporter`) reads both back
(:func:`received`, :func:`receive_collected`) and is the only process that prints, records
and writes. Without ``-n`` one process plays both, and the evaluations travel as objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..results import EvaluationResult
    from .session import SessionState

#: where a worker leaves the golden items it collected, for the controller
EXPECTED_KEY = "retrieval_expected"
USAGE_KEY = "retrieval_usage"  # usage errors an xdist worker found, for the controller


def is_worker(config: pytest.Config) -> bool:
    """This process is an xdist worker (its controller prints and writes)."""
    return hasattr(config, "workerinput")


# ---------------------------------------------------------------------------- worker


def attach(item: pytest.Item, report: pytest.TestReport, results: list[EvaluationResult]) -> None:
    """An item's evaluations on its call report: as JSON text with its declaration order on
    a worker (xdist ships reports to the controller), as the objects themselves in one
    process (no round trip through dicts)."""
    if is_worker(item.config):
        from ..results import to_wire
        from .session import STATE

        report.retrieval = list(map(to_wire, results))  # type: ignore[attr-defined]
        report.retrieval_order = item.config.stash[STATE].order.get(  # type: ignore[attr-defined]
            item.nodeid
        )
    else:
        report.retrieval_results = results  # type: ignore[attr-defined]


def send_collected(config: pytest.Config, state: SessionState, items: list[pytest.Item]) -> None:
    """A worker's collection, for the controller, which decides partial runs from what the
    workers collected and says the usage errors they found; a worker that found one runs
    nothing (as without ``-n``: every worker sees it)."""
    config.workeroutput[EXPECTED_KEY] = {  # type: ignore[attr-defined]
        str(path): sorted(ids) for path, ids in state.expected.items()
    }
    config.workeroutput[USAGE_KEY] = list(state.usage)  # type: ignore[attr-defined]
    if state.anchors:  # a golden set may be split (the split's code: only then)
        from .split import PARTS_KEY, part_items

        config.workeroutput[PARTS_KEY] = part_items(items)  # type: ignore[attr-defined]
    if state.usage:
        config.hook.pytest_deselected(items=list(items))
        items[:] = []


# ---------------------------------------------------------------------------- controller


def received(
    report: pytest.TestReport, state: SessionState
) -> tuple[list[EvaluationResult | dict[str, Any]], int]:
    """The evaluations a test report carries (a worker's, as dicts; this process's, taken
    off the report, which pytest keeps till the end) and the item's declaration order."""
    wired = getattr(report, "retrieval", None) or []
    if wired:
        from ..results import from_wire

        wired = list(map(from_wire, wired))
    payloads: list[EvaluationResult | dict[str, Any]] = [
        *wired,
        *(vars(report).pop("retrieval_results", None) or []),
    ]
    order = getattr(report, "retrieval_order", None)
    if order is None:
        order = state.order.get(report.nodeid, len(state.order))
    return payloads, order


def receive_collected(config: pytest.Config, state: SessionState, node: Any) -> None:
    """A worker's collection (:func:`send_collected`), when it goes down: its golden items
    for the partial-run check, its usage errors, its parts of split golden sets."""
    output: Mapping[str, Any] = getattr(node, "workeroutput", {}) or {}
    for path, ids in output.get(EXPECTED_KEY, {}).items():
        state.expected.setdefault(Path(path), set()).update(ids)
    for message in output.get(USAGE_KEY, []):
        if message not in state.usage:
            state.usage.append(message)
    if state.anchors:
        from .split import receive

        receive(config, output)
