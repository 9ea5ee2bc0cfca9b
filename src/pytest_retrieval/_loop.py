"""Run a coroutine to completion on a private event loop in a helper thread.

A private thread works whether or not the caller already runs an event loop (pytest-asyncio,
an async test calling ``evaluate``, a notebook): ``asyncio.run`` there would fail.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_private(make: Callable[[], Coroutine[Any, Any, T]], name: str) -> T:
    """``asyncio.run(make())`` in a daemon thread; its exception is re-raised here."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
