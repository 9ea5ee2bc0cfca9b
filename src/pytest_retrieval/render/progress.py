"""Progress of long evaluations: a live line on a terminal, plain lines in a CI log.

Short evaluations print nothing (the first report waits ``delay`` seconds), so quick runs and
test suites stay quiet. In a log (no terminal) a plain line appears at most every ``interval``
seconds, with no control characters, and a last line when the phase ends.

On a terminal one line is rewritten in place (``\\r``). It must never wrap: ``\\r`` returns to
the start of the last screen row only, so each redraw of a wrapped line would leave its first
rows behind. So every draw fits ``width() - 1`` columns (the detail gives way first, then the
label). The line gets a row of its own below whatever the cursor was on (pytest's dots, or a
``-v`` test name awaiting its PASSED), and when the phase ends it is erased and the cursor goes
back to where it was: the screen and pytest's idea of it are as if nothing had been drawn.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable

#: cursor up one row, then right ``n`` columns (VT100; colorama translates both on Windows)
UP_AND_RIGHT = "\x1b[A\x1b[{n}C"
ELLIPSIS = "…"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("F", "W") else 1


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal (wide CJK characters count two, combining none)."""
    return sum(_char_width(char) for char in text)


def clip(text: str, columns: int) -> str:
    """``text`` cut to at most ``columns`` columns, ending in an ellipsis when cut."""
    if display_width(text) <= columns:
        return text
    kept: list[str] = []
    used = display_width(ELLIPSIS)
    for char in text:
        used += _char_width(char)
        if used > columns:
            break
        kept.append(char)
    return "".join(kept) + ELLIPSIS if columns >= display_width(ELLIPSIS) else ""


def printable(text: str) -> str:
    """``text`` with control characters (a newline in a golden set's name) as spaces: one of
    them on the live line would move the cursor and break the erase."""
    return "".join(" " if unicodedata.category(char) == "Cc" else char for char in text)


class ProgressPrinter:
    """Call ``update(phase, done, total, detail)`` as work advances and ``clear()`` when the
    work stops early; one caller at a time (the runner reports from one thread).

    ``width()`` is the terminal's width now (read at each draw: terminals get resized);
    ``column()`` is the cursor's column when a live line is about to appear (0: the start of
    an empty row; -1: unknown). ``write`` must not add anything to the text.
    """

    def __init__(
        self,
        label: str,
        write: Callable[[str], None],
        *,
        live: bool,
        delay: float = 2.0,
        interval: float | None = None,
        width: Callable[[], int] = lambda: 80,
        column: Callable[[], int] = lambda: 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = printable(label)
        self.write = write
        self.live = live
        self.delay = delay
        self.interval = interval if interval is not None else (0.2 if live else 10.0)
        self.width = width
        self.column = column
        self.clock = clock
        self.started: dict[str, float] = {}
        self.last_shown = -float("inf")
        self.shown_width = 0  # columns of the live line on screen
        self.on_screen = False  # a live line is drawn (its row is ours until clear())
        self.back_to: int | None = None  # the column to return to on the row above; None: stay
        self.printed_any = False

    def update(self, phase: str, done: int, total: int, detail: str = "") -> None:
        now = self.clock()
        start = self.started.setdefault(phase, now)
        finished = done >= total
        if now - start < self.delay and not (finished and self.printed_any):
            return
        if not finished and now - self.last_shown < self.interval:
            return
        self.last_shown = now
        if self.live:
            self._draw(phase, done, total, printable(detail), now - start)
            if finished:
                self.clear()
        else:
            self.write(self.line(phase, done, total, detail, now - start, None) + "\n")
        self.printed_any = True

    def clear(self) -> None:
        """Erase the live line and put the cursor back where it was before the line appeared."""
        if not self.on_screen:
            return
        text = "\r" + " " * self.shown_width + "\r"
        if self.back_to is not None:
            text += UP_AND_RIGHT.format(n=self.back_to)
        self.write(text)
        self.on_screen = False
        self.shown_width = 0

    def _draw(self, phase: str, done: int, total: int, detail: str, elapsed: float) -> None:
        width = self.width()
        room = max(1, width - 1)  # the last column would wrap on some terminals
        prefix = ""
        if not self.on_screen:
            column = self.column()
            # an empty row is ours as it is; otherwise open one below and come back at the end
            # (a column at or past the edge: the row has wrapped, no way back, stay below)
            prefix = "" if column == 0 else "\n"
            self.back_to = column if 0 < column < width else None
            self.on_screen = True
        text = self.line(phase, done, total, detail, elapsed, room)
        drawn = display_width(text)
        pad = max(0, min(self.shown_width, room) - drawn)  # erase the rest of a longer line
        self.write(prefix + "\r" + text + " " * pad)
        self.shown_width = drawn + pad

    def line(
        self,
        phase: str,
        done: int,
        total: int,
        detail: str,
        elapsed: float,
        room: int | None,
    ) -> str:
        """The progress text, fitted into ``room`` columns (None: any length): the counts
        and the ETA stay, the detail gives way first, then the label."""
        percent = 100.0 * done / total if total else 100.0
        counts = f"{phase} {done}/{total} ({percent:.0f}%)"
        if done >= total:
            tail = f"done in {_duration(elapsed)}"
        elif done:
            tail = f"ETA {_duration(elapsed * (total - done) / done)}"
        else:
            tail = ""

        def join(label: str, detail: str) -> str:
            head = f"retrieval {label}: {counts}" if label else f"retrieval: {counts}"
            return " · ".join(part for part in (head, detail, tail) if part)

        full = join(self.label, detail)
        if room is None or display_width(full) <= room:
            return full
        spare = room - display_width(join(self.label, "")) - len(" · ")
        if detail and spare >= 8:  # a few words of the detail are still worth showing
            return join(self.label, clip(detail, spare))
        spare = room - display_width(join("", "")) - len(" ")
        if spare >= 4:
            return join(clip(self.label, spare), "")
        return clip(join("", ""), room)
