"""Where a stuck call is: the line of user code that a thread or a coroutine is at.

A call past its deadline, or one blocking the event loop, is named by that line in its error
and its warning (``conftest.py:12 in search``): the innermost frame of user code inside the
retriever call, library frames (stdlib, site-packages) skipped when user code is below them.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import sysconfig
import traceback
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import NamedTuple

from .io import leads_out, relative
from .scrub import scrub


class Place(NamedTuple):
    """A line of code (taken when seen: a running frame moves on)."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        """``conftest.py:12 in search`` (relative to the working directory when inside it)"""
        shown = relative(self.file)
        if leads_out(shown):  # outside, or on another drive
            shown = self.file
        return f"{shown}:{self.line} in {self.function}"


def place(frames: Iterable[FrameType]) -> Place | None:
    """Where a stuck call is (frames innermost first): the innermost frame of user code, else
    the innermost frame, inside the retriever (our own frames mark where the call began)."""
    inside = list(itertools.takewhile(lambda f: not _path(f).startswith(_OURS), frames))
    if not inside:
        return None
    libraries = _library_paths()
    frame = next((f for f in inside if not _path(f).startswith(libraries)), inside[0])
    return Place(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def where(frames: Iterable[FrameType]) -> str:
    """``conftest.py:12 in search`` for a message; "" when unknown."""
    return str(place(frames) or "")


def thread_frames(ident: int) -> list[FrameType]:
    """The Python stack of the thread ``ident`` right now, innermost frame first."""
    frame = sys._current_frames().get(ident)
    stack = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    return stack


@functools.cache
def _library_paths() -> tuple[str, ...]:
    """The stdlib and site-packages folders: a frame there is skipped for one of user code."""
    paths = sysconfig.get_paths()
    found = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    return tuple(os.path.join(os.path.realpath(path), "") for path in found)


#: this package's folder: its frames are where the retriever call began
_OURS = os.path.join(os.path.dirname(os.path.realpath(__file__)), "")


def _path(frame: FrameType) -> str:
    return os.path.realpath(frame.f_code.co_filename)


def format_traceback(exc: BaseException, tb: TracebackType | None) -> str:
    """``traceback.format_exception`` without the caret lines (``^^^^``) of Python 3.11+.

    Computing carets parses source with ``ast``, and on CPython 3.11 two threads building
    ASTs at once corrupt each other (gh-106905: "AST constructor recursion depth mismatch",
    seen in CI in pytest's assertion rewriter). This runs in retriever threads, some of them
    abandoned and still running, so it must not parse anything. Chained causes are kept.
    Secrets are masked (:func:`~pytest_retrieval._internal.scrub.scrub`): a traceback is shown and
    stored.
    """
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        lines = ["Traceback (most recent call last):\n"] if tb is not None else []
        for frame in traceback.extract_tb(tb):
            lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n')
            if frame.line:
                lines.append(f"    {frame.line.strip()}\n")
        lines += traceback.format_exception_only(type(current), current)
        parts.insert(0, "".join(lines))
        if current.__cause__ is not None:
            link = "\nThe above exception was the direct cause of the following exception:\n\n"
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            link = "\nDuring handling of the above exception, another exception occurred:\n\n"
            current = current.__context__
        else:
            break
        parts.insert(0, link)
        tb = current.__traceback__
    return scrub("".join(parts))  # whole: a token named in one part is masked in all
