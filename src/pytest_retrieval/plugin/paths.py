"""How pytest spells the files it collects, and node ids for golden sets outside the rootdir.

pytest names a collected file by its absolute path, unresolved (a link keeps the name the user
gave), and its node id by its path from the rootdir; a golden set named outside the rootdir
needs a node id of its own (:func:`outside_nodeid`), and ``--lf`` a way back to it
(:func:`last_failed_outside_rootdir`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from .._internal.io import relative


def collected_spelling(path: Path) -> Path:
    """``path`` as pytest spells the files it collects: absolute, not resolved. A golden.json
    that links to golden_v3.json (or to a shared checkout outside the rootdir) is collected
    once, under the name the user gave, not again under its target's."""
    return Path(os.path.abspath(path))


def outside_nodeid(path: Path, rootpath: Path) -> str | None:
    """A node id for a golden set named by a path outside the rootdir: its path from the
    rootdir as named (``../shared/golden.json``, a link in it kept), or, when the path leads
    into the rootdir through a link (a checkout reached by a link, macOS's /tmp), its place
    there. pytest names a file outside the rootdir that was given as an argument by its path
    from that argument, which is empty: two such golden sets were both ``::retrieval``, and
    one result hid the other. None: pytest's own (under the rootdir)."""
    if path.is_relative_to(rootpath):
        return None
    real, root = path.parent.resolve() / path.name, rootpath.resolve()
    if real.is_relative_to(root):
        return real.relative_to(root).as_posix()
    return Path(relative(path, rootpath)).as_posix()


def last_failed_outside_rootdir(config: pytest.Config, anchors: Iterable[Path]) -> None:
    """--lf re-runs the files at rootdir / node id. For a golden set named outside the
    rootdir (:func:`outside_nodeid`) that is not the file pytest collects (``../``
    unnormalised, or the other side of a link), which it then skipped, failed gate and all.
    Adds the collected files (``anchors``) whose node id failed to the set pytest keeps them
    in (a private one: nothing is done where it is not)."""
    paths = getattr(config.pluginmanager.get_plugin("lfplugin"), "_last_failed_paths", None)
    if not isinstance(paths, set):
        return
    rootpath = config.rootpath
    for anchor in anchors:
        nodeid = outside_nodeid(anchor, rootpath)
        if nodeid is not None and rootpath / nodeid in paths:
            paths.add(anchor)
