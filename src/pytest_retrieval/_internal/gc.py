"""Keep the cyclic garbage collector off our bulk-built objects.

Building 100,000 golden queries or results allocates millions of container objects; with the
collector on, each allocation burst triggers passes over the young objects, and then full
passes over the whole (growing) heap, which cost more than the work itself. Nothing built
there forms reference cycles, so pausing loses nothing; and what is still alive when the
building ends is kept for long (a golden set, an evaluation), so it goes straight to the
oldest generation (:func:`promote`), where only a full collection looks at it.

``gc.freeze`` does the moving. It is global, so it is used only while nobody else has frozen
anything (a server that froze its heap before forking keeps it frozen as it was; what user
code freezes while an evaluation runs is unfrozen with the rest when it ends).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_frozen = 0  # frozen_heap blocks open: what they froze stays frozen until the last ends
_ours = False  # whether the open blocks froze the heap (False: someone else had frozen some)


def promote() -> None:
    """Move every object alive now to the oldest generation without a young collection:
    100,000 golden queries would be traversed twice more for nothing (0.1 s), and a promotion
    does not count towards the next full collection. Inside a :func:`frozen_heap` block they
    are frozen with the rest."""
    with _lock:
        if _frozen:
            if _ours:
                gc.freeze()
        elif not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()


def collect_recent() -> None:
    """Collect what is recent: the young generations, or inside a :func:`frozen_heap` block
    of ours everything not frozen (what was made since the block froze the rest). Little to
    look at, and the garbage of code that ran meanwhile (a retriever's calls) is not
    promoted or frozen with what comes next."""
    if _frozen and _ours:
        gc.collect()
    else:
        gc.collect(1)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic GC for the block, then :func:`promote` what it built and restore
    its previous state (nests). What is recent is collected first (:func:`collect_recent`):
    what the block promotes is its own objects, not someone else's garbage."""
    was_enabled = gc.isenabled()
    if was_enabled:
        collect_recent()
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
    global _frozen, _ours
    with _lock:
        if not _frozen:
            _ours = not gc.get_freeze_count()
        if _ours:
            gc.collect(1)  # young garbage is not frozen (and then kept past the block)
            gc.freeze()
        _frozen += 1
    try:
        yield
    finally:
        with _lock:
            _frozen -= 1
            if not _frozen and _ours:
                gc.unfreeze()
