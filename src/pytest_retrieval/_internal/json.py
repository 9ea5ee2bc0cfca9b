"""Strict JSON reading for every file and answer we read: one place that refuses what
``json.loads`` lets through silently or crashes on.

- nesting deeper than :data:`MAX_DEPTH` (``[`` x 100,000 is a ``RecursionError`` inside
  ``json``, an INTERNALERROR for whoever called it);
- a key written twice in one object (``json`` keeps the last: a merge conflict kept both
  sides, a model answered ``"on_topic"`` twice);
- invalid JSON, and values ``json`` cannot build (a 5,000-digit number).

Each is one :class:`JsonProblem` with where (line and column, or the JSON pointer of the
duplicated key) and what to do; each reader wraps it in its own error naming its file. A
leaf: it imports nothing from the package but the error root.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..errors import RetrievalError

#: deeper than any file or answer of ours nests (a report: 6 levels); far below the
#: interpreter's recursion limit, so nothing that walks a value read here recurses too deep
MAX_DEPTH = 100


class JsonProblem(RetrievalError, ValueError):
    """JSON that cannot be read as it is: ``where`` (``line 3, column 7`` or a JSON
    pointer), ``problem``, ``fix``. A ``ValueError`` too, as ``json``'s own errors are, so
    a reader that caught those catches this."""

    def __init__(self, where: str, problem: str, fix: str) -> None:
        self.where = where
        self.problem = problem
        self.fix = fix
        super().__init__(f"{where}: {problem}" if where else problem)


def loads(text: str | bytes, *, line: int | None = None) -> Any:
    """``text`` parsed strictly (see the module's docstring). ``line``: its line number when
    it is one line of a JSONL file, so the place named is the file's."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    too_deep = depth_beyond(data, MAX_DEPTH)
    if too_deep is not None:
        where = _place(data, too_deep, line)
        raise JsonProblem(
            where,
            f"nested deeper than {MAX_DEPTH} levels",
            "this is not a file of ours: restore it, or write it again with the tool that made it",
        )
    duplicated = False

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal duplicated
        result = dict(pairs)
        if len(result) == len(pairs):
            return result
        duplicated = True
        counts = Counter(key for key, _ in pairs)
        return _Duplicated(result, next(key for key, n in counts.items() if n > 1))

    try:
        document = json.loads(text, object_pairs_hook=pairs_hook)
    except json.JSONDecodeError as exc:
        lineno = exc.lineno + (line or 1) - 1
        raise JsonProblem(
            f"line {lineno}, column {exc.colno}",
            f"invalid JSON: {exc.msg}",
            "fix the JSON syntax there (a trailing comma or a missing quote is typical)",
        ) from None
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:  # a 5000-digit number
        where = f"line {line}" if line else ""
        raise JsonProblem(
            where, f"unreadable JSON: {_short(str(exc))}", "shorten that value"
        ) from None
    if duplicated:
        pointer = _first_duplicate(document, "")
        where = f"line {line}, {pointer}" if line else pointer
        raise JsonProblem(
            where or "/",
            "this key appears twice in one object (JSON readers keep one of the two silently)",
            "keep one of the two",
        )
    return document


def depth_beyond(data: bytes, limit: int) -> int | None:
    """The byte offset where the nesting of ``data`` first goes deeper than ``limit``
    (brackets inside strings do not count), or None. Vectorised: a 100 MB run file costs a
    few passes of numpy, not a Python loop over its bytes."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return None
    import numpy as np

    array = np.frombuffer(data, dtype=np.uint8)
    quotes = np.flatnonzero(array == 0x22)
    after_backslash = quotes[(quotes > 0) & (array[np.maximum(quotes - 1, 0)] == 0x5C)]
    if after_backslash.size:  # rare: drop the quotes that an odd run of backslashes escapes
        escaped = [q for q in after_backslash.tolist() if _escaped(data, q)]
        quotes = np.setdiff1d(quotes, np.asarray(escaped, dtype=quotes.dtype))
    opens = (array == 0x5B) | (array == 0x7B)
    brackets = np.flatnonzero(opens | (array == 0x5D) | (array == 0x7D))
    outside = np.searchsorted(quotes, brackets) % 2 == 0
    brackets = brackets[outside]
    steps = np.where(opens[brackets], 1, -1)
    beyond = np.flatnonzero(np.cumsum(steps) > limit)
    return int(brackets[beyond[0]]) if beyond.size else None


def _escaped(data: bytes, offset: int) -> bool:
    """Whether the quote at ``offset`` follows an odd run of backslashes."""
    run = 0
    while offset - run - 1 >= 0 and data[offset - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1


def _place(data: bytes, offset: int, line: int | None) -> str:
    """``line L, column C`` of byte ``offset`` (columns count bytes)."""
    lineno = data.count(b"\n", 0, offset) + (line or 1)
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {lineno}, column {column}"


class _Duplicated(dict[str, Any]):
    """An object of the document that holds ``key`` twice."""

    def __init__(self, values: dict[str, Any], key: str) -> None:
        super().__init__(values)
        self.key = key


def _first_duplicate(value: Any, pointer: str) -> str:
    """The JSON pointer of the first duplicated key under ``value``, in document order."""
    if isinstance(value, _Duplicated):
        return f"{pointer}/{_escape(value.key)}"
    children: Any = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        found = _first_duplicate(child, f"{pointer}/{_escape(str(key))}")
        if found:
            return found
    return ""


def _escape(token: str) -> str:
    """A JSON pointer reference token (RFC 6901): ``~`` and ``/`` escaped."""
    return token.replace("~", "~0").replace("/", "~1")


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
