"""Keep the cyclic garbage collector off our bulk-built objects.

Building 100,000 golden queries or results allocates millions of container objects; with the
collector on, each allocation burst triggers passes over the young objects, and then full
passes over the whole (growing) heap, which cost more than the work itself. Nothing built
there forms reference cycles, so pausing loses nothing; and what is still alive when the
building ends is kept for long (a golden set, an evaluation), so it goes straight to the
oldest generation (:func:`promote`), where only a full collection looks at it.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_frozen = 0  # frozen_heap blocks open: what they froze stays frozen until the last ends


def promote() -> None:
    """Move every object alive now to the oldest generation without a collection (inside a
    :func:`frozen_heap` block: freeze it with the rest). 100,000 golden queries: the young
    collections would traverse them twice more, for nothing (0.1 s), and a promotion does not
    count towards the next full collection. (Objects someone else froze are unfrozen too:
    they move to the oldest generation, where they would be had they never been frozen.)"""
    with _lock:
        gc.freeze()
        if not _frozen:
            gc.unfreeze()


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic GC for the block, then :func:`promote` what it built and restore
    its previous state (nests)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        promote()
        if was_enabled:
            gc.enable()


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Move everything alive now out of the collector's sight for the block.

    For a block that runs user code (so the collector must stay on) but allocates a lot of
    our own objects: collections then scan only what the block created, not the large golden
    set and index already in memory. Afterwards the objects return to the oldest generation.
    """
    global _frozen
    with _lock:
        gc.freeze()
        _frozen += 1
    try:
        yield
    finally:
        with _lock:
            _frozen -= 1
            if not _frozen:
                gc.unfreeze()
