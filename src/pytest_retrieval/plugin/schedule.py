"""Which golden sets a run evaluates, and the way pytest's walk takes to each.

A golden set is collected like a test file: its *anchor* (the file itself, or a BEIR folder's
qrels) is added to pytest's arguments unless a given path covers it; one in a folder pytest
skips (dot folders, ``build``, ``--ignore``...) gets a detour opened to it and to nothing
else there. The evaluations' declaration order, the A/B reference when pytest-randomly
shuffles the items, is noted here too (:func:`note_order`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..errors import ConfigError
from .paths import collected_spelling
from .session import STATE, SessionState

if TYPE_CHECKING:
    from .options import Settings


def _anchor(golden: Path) -> Path:
    """The file pytest collects for a golden set: itself, or for a BEIR folder the qrels file
    of its split (so ``beir`` and ``beir/qrels/test.tsv`` are one golden set, evaluated once)."""
    if not golden.is_dir():
        return golden
    from ..golden import default_qrels

    return default_qrels(golden) or golden / "queries.jsonl"


def schedule(
    config: pytest.Config, settings: Settings, state: SessionState
) -> list[tuple[Path, Path]]:
    """The golden sets this run evaluates, adding to pytest's path arguments those that none
    covers. Named with --retrieval-golden, or with --retrieval-only: always. From ini: only
    when pytest was given no paths, so ``pytest tests/unit/test_x.py`` does not build the index
    and evaluate. Returns (anchor file, golden set path) pairs."""
    if settings.only and not settings.goldens:
        raise ConfigError(
            "--retrieval-only: no golden set is configured; pass --retrieval-golden PATH or set "
            "retrieval_golden in the [pytest] ini section"
        )
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    if settings.only and not explicit:
        config.args[:] = []  # collect the golden sets and nothing else
    here = config.invocation_params.dir
    given = [collected_spelling(here / arg.split("::")[0]) for arg in config.args]
    named = {Path(p).resolve() for p in config.getoption("retrieval_golden") or []}
    chosen: list[tuple[Path, Path]] = []
    anchors: dict[Path, Path] = {}
    detours: list[tuple[list[Path], int]] = []
    for golden in settings.goldens:  # the same golden set twice (any spelling): once
        anchors.setdefault(_anchor(golden).resolve(), golden)
    for real, golden in anchors.items():
        spelled = collected_spelling(_anchor(golden))
        covered = _covered(spelled, real, given)
        detour = None if covered is None or covered[0] == covered[1] else _detour(*covered, config)
        if detour is not None and hasattr(pytest, "Dir"):  # pytest 8+: its walk asks the hook
            detours.append(detour)
        elif detour is not None:  # pytest 7: collected as a path argument of its own
            covered = (spelled, spelled) if spelled in given else None
        if covered is not None:  # collected as pytest spells it from the paths given
            chosen.append((covered[0], golden))
        elif golden.resolve() in named or not explicit or settings.only:
            config.args.append(str(spelled))
            given.append(spelled)
            chosen.append((spelled, golden))
    for way, first in detours:  # opened once every way is known (the hook reads them)
        state.detour.update(way)
        state.skipped.update(way[first:-1])
    return chosen


def _covered(spelled: Path, real: Path, given: list[Path]) -> tuple[Path, Path] | None:
    """The golden set's file as pytest will spell it when it collects one of the ``given``
    paths, and that path (None: none holds it): as configured, or through a link (a linked
    folder, or a link to the file) when a given path leads to its real location."""
    for path in given:  # a folder first: pytest 8+ drops a path argument inside another one
        if path in spelled.parents:
            return spelled, path
    if spelled in given:
        return spelled, spelled
    for path in given:
        target = path.resolve()
        if target == real or target in real.parents:
            return path / real.relative_to(target), path
    return None


def _detour(file: Path, top: Path, config: pytest.Config) -> tuple[list[Path], int] | None:
    """The way from the folder ``top`` down to ``file`` and the index of the first step of
    it that pytest's walk skips; None when the walk reaches ``file``. pytest 8+ skips what
    its ``pytest_ignore_collect`` says (``--ignore``, ``--ignore-glob``, a conftest's
    ``collect_ignore``, virtualenvs, ``norecursedirs``: dot folders, ``build``...); a golden
    set there was silently not evaluated."""
    way = [*reversed(list(itertools.takewhile(lambda p: p != top, file.parents))), file]
    skips = (
        (lambda path: config.hook.pytest_ignore_collect(collection_path=path, config=config))
        if hasattr(pytest, "Dir")
        else (lambda path: _skipped_by_pytest_7(path, path != file, config))
    )
    return next(((way, index) for index, path in enumerate(way) if skips(path)), None)


def _skipped_by_pytest_7(path: Path, folder: bool, config: pytest.Config) -> bool:
    """pytest 7's tests, but a conftest's ``collect_ignore``: its hook imports the conftest
    files on the way, too early (a broken one was an INTERNALERROR, not a collection error)."""
    import fnmatch

    from _pytest import main as pytest_main
    from _pytest.pathlib import fnmatch_ex

    if path in {Path(os.path.abspath(p)) for p in config.getoption("ignore") or []}:
        return True
    globs = config.getoption("ignore_glob") or []
    if any(fnmatch.fnmatch(str(path), os.path.abspath(glob)) for glob in globs):
        return True
    if not folder:
        return False
    in_venv: Callable[[Path], bool] = getattr(pytest_main, "_in_venv", lambda _: False)
    patterns = config.getini("norecursedirs")
    return (
        (not config.getoption("collect_in_virtualenv") and in_venv(path))
        or path.name == "__pycache__"
        or any(fnmatch_ex(pattern, path) for pattern in patterns)
    )


def opened(collection_path: Path, config: pytest.Config) -> bool | None:
    """``pytest_ignore_collect``'s answer: the way to a golden set in a folder pytest's walk
    skips (:func:`_detour`) is opened, and only that way: the rest of such a folder stays out
    (a ``build`` copy of the tests, a virtualenv). None: pytest decides."""
    state = config.stash.get(STATE, None)
    if state is None or not state.detour:
        return None
    if collection_path in state.detour:
        return False
    return True if collection_path.parent in state.skipped else None


def note_order(
    state: SessionState, items: Sequence[pytest.Item], golden: Sequence[tuple[pytest.Item, Path]]
) -> None:
    """Each item's place in declaration order, the A/B reference (pytest-randomly shuffled
    them): the golden-set items (``golden``: with their golden set's path) take the places
    the golden items hold, in their declared order (:func:`_declared`)."""
    order = {item.nodeid: index for index, item in enumerate(items)}
    rank = {path: index for index, path in enumerate(state.anchors.values())}
    declared = sorted(golden, key=lambda pair: _declared(pair[0], pair[1], rank))
    order.update(
        zip(
            [item.nodeid for item, _ in declared],
            sorted(order[item.nodeid] for item, _ in golden),
            strict=True,
        )
    )
    state.order.update(order)


def _declared(
    item: pytest.Item, golden_path: Path, rank: Mapping[Path, int]
) -> tuple[int, tuple[int, ...], str]:
    """A golden-set item's place in declaration order: its golden set's (as configured), then
    its parameters' (the retriever fixture's params, the run files), the same on every worker."""
    spec = getattr(item, "callspec", None)
    indices = tuple(spec.indices.values()) if spec is not None else ()
    return rank.get(golden_path, len(rank)), indices, item.nodeid
