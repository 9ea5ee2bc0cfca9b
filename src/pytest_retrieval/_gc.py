"""Pause the cyclic garbage collector around bulk object building.

Building 100,000 golden queries or results allocates millions of container objects; with the
collector on, each allocation burst triggers full passes over the whole (growing) heap, which
costs more than the work itself. Nothing built there forms reference cycles, so pausing loses
nothing; the collector runs again as soon as the block ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic GC for the block; restore its previous state after (nests)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Move everything alive now out of the collector's sight for the block.

    For a block that runs user code (so the collector must stay on) but allocates a lot of
    our own objects: collections then scan only what the block created, not the large golden
    set and index already in memory. Afterwards the objects return to the oldest generation.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
