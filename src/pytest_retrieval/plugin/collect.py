"""Golden sets as pytest collects them: a golden-set file is a :class:`GoldenModule` holding
one ``retrieval`` test, parametrized like the retriever fixture (and by run file, and by part
of a split golden set), so fixture scoping, params, ``-k``, ``-x`` and xdist work as for any
test; its parent is its folder's node, so conftest fixtures at every level that covers the
file are visible, and its node id is re-runnable. What the items mean for the session (each
golden set's evaluations, markers, ``--retrieval-only``) is noted by :func:`note_items`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..errors import ConfigError
from .paths import outside_nodeid
from .runtest import run_evaluation, run_files
from .schedule import note_order
from .session import (
    MARKER,
    STATE,
    as_test_failure,
    check_compare_to,
    check_item_marker,
    layered_thresholds,
    usage_errors,
)
from .xdist import is_worker, send_collected

#: the golden-set test's argument that carries its run file under --retrieval-run
RUN_ARG = "retrieval_run"


def is_golden(item: pytest.Item) -> bool:
    """``item`` is a golden set's evaluation (not a test of the user's)."""
    return isinstance(item.parent, GoldenModule)


def collect_file(file_path: Path, parent: pytest.Collector) -> GoldenModule | None:
    """``pytest_collect_file``: the golden set whose anchor is ``file_path``, else None."""
    state = parent.config.stash.get(STATE, None)
    if state is None or not any(a.name == file_path.name for a in state.anchors):
        return None  # cheap for the many files that are not golden sets
    golden_path = state.anchors.get(file_path)
    if golden_path is None:
        return None
    module: GoldenModule = GoldenModule.from_parent(
        parent, path=file_path, nodeid=outside_nodeid(file_path, parent.config.rootpath)
    )
    module.golden_path = golden_path
    module.add_marker(MARKER)
    return module


class GoldenModule(pytest.Module):
    """A golden set shown as a test module: one ``retrieval`` test, parametrized like the
    retriever fixture, so fixture scoping, params, -k, -x and xdist work as for any test."""

    golden_path: Path

    def _getobj(self) -> Any:
        import types

        from .split import parts

        module = types.ModuleType(f"retrieval_golden_{self.path.stem}")
        module.__file__ = str(self.path)
        state = self.config.stash[STATE]
        runs = run_files(self.config, state)
        module.retrieval = evaluation_function(  # type: ignore[attr-defined]
            RUN_ARG if runs else state.settings.fixture,
            self.golden_path,
            # a CI shard is one part already: under -n its evaluations are spread whole; a
            # run file has no retrieval to spread (a split would only add the merge)
            split=state.settings.shard is None
            and not runs
            and bool(parts(self.config, state, self.golden_path)),
        )
        if runs:  # one evaluation per run file instead of the retriever fixture's
            module.retrieval.pytestmark = [
                pytest.mark.parametrize(RUN_ARG, runs, ids=[run.name for run in runs])
            ]
        return module

    def funcnamefilter(self, name: str) -> bool:
        return name == "retrieval"

    def classnamefilter(self, name: str) -> bool:
        return False


def evaluation_function(
    fixture: str, golden_path: Path, split: bool = False
) -> Callable[..., None]:
    """The test body, with a signature naming the configured retriever fixture, or under
    --retrieval-run :data:`RUN_ARG` (and, for a golden set split across xdist workers, its
    part: :mod:`.split`)."""
    from .split import PART_ARG, run_part

    def retrieval(**fixtures: Any) -> None:
        request: pytest.FixtureRequest = fixtures["request"]
        state = request.config.stash[STATE]
        with as_test_failure():
            golden = state.golden(golden_path)
            chosen = layered_thresholds(state.settings, golden)
            if split:  # one part: merged with the others and decided on the controller
                run_part(request, fixtures[fixture], golden_path, chosen, state, fixtures[PART_ARG])
                return
            if state.settings.shard is not None:  # a part: `combine` gates the whole
                from .shard import run_shard

                result = run_shard(request, fixtures[fixture], golden, chosen, state)
            else:
                result = run_evaluation(request, fixtures[fixture], golden, chosen, state)
        if not result.verdict.passed:
            from ..render.terminal import failure_text

            verbose = request.config.getoption("verbose") > 0
            kept_in = request.config.stash[STATE].settings.errors_kept_in
            pytest.fail(failure_text(result, verbose=verbose, kept_in=kept_in), pytrace=False)

    retrieval.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for name in ("request", fixture, *([PART_ARG] if split else []))
        ]
    )
    return retrieval


def generate_tests(metafunc: pytest.Metafunc) -> None:
    """A split golden set's test parametrized by part (:mod:`.split`)."""
    module = metafunc.definition.parent
    if not isinstance(module, GoldenModule):
        return
    from .split import PART_ARG, parametrize

    if PART_ARG in metafunc.fixturenames:
        parametrize(metafunc, metafunc.config.stash[STATE], module.golden_path)


def note_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before -k/-m/--lf filter the items: note each golden set's evaluations (a run is
    partial for a set when one of them then does not run) and their declaration order,
    check retrieval markers, send a worker's collection to the controller, and with
    --retrieval-only deselect everything else."""
    state = config.stash[STATE]
    worker = is_worker(config)
    golden = [
        (item, item.parent.golden_path) for item in items if isinstance(item.parent, GoldenModule)
    ]
    note_order(state, items, golden)
    for item in items:
        if isinstance(item.parent, GoldenModule):
            state.expected.setdefault(item.parent.golden_path, set()).add(item.nodeid)
        elif worker:  # a usage error raised on an xdist worker crashes it: the controller says
            try:
                check_item_marker(item, state)
            except ConfigError as exc:
                state.usage.append(str(exc))
        else:
            with usage_errors(state):
                check_item_marker(item, state)
    if state.settings.compare_to is not None and not worker:
        from .split import retriever_param_id

        with usage_errors(state):  # before any evaluation runs (under xdist: at session end)
            check_compare_to(  # the parts -n lists under --collect-only: their retrievers'
                state.settings.compare_to,
                {retriever_param_id(item) for item, _ in golden} - {""},
            )
    if worker:
        send_collected(config, state, items)
    if state.settings.only:
        others = [item for item in items if not isinstance(item.parent, GoldenModule)]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if isinstance(item.parent, GoldenModule)]
