"""Progress of long evaluations: a live line on a terminal, plain lines in a CI log.

Short evaluations print nothing (the first report waits ``delay`` seconds), so quick runs and
test suites stay quiet. On a terminal one line is rewritten in place (``\\r``) and erased at
the end; in a log (no terminal) a plain line appears at most every ``interval`` seconds, with
no control characters, and a last line when the phase ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class ProgressPrinter:
    """Call ``update(phase, done, total, detail)`` as work advances; thread-safe enough for
    one caller at a time (the runner reports from one thread)."""

    def __init__(
        self,
        label: str,
        write: Callable[[str], None],
        *,
        live: bool,
        delay: float = 2.0,
        interval: float | None = None,
        width: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.write = write
        self.live = live
        self.delay = delay
        self.interval = interval if interval is not None else (0.2 if live else 10.0)
        self.width = width
        self.clock = clock
        self.started: dict[str, float] = {}
        self.last_shown = -float("inf")
        self.shown_width = 0  # chars of the live line on screen (0: none)
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
        line = self._line(phase, done, total, detail, now - start)
        if self.live:
            text = line[: self.width - 1]
            pad = max(0, self.shown_width - len(text))
            self.write("\r" + text + " " * pad)
            self.shown_width = len(text)
            if finished:
                self.clear()
        else:
            self.write(line + "\n")
        self.printed_any = True

    def clear(self) -> None:
        """Erase the live line (before pytest prints anything else on it)."""
        if self.live and self.shown_width:
            self.write("\r" + " " * self.shown_width + "\r")
            self.shown_width = 0

    def _line(self, phase: str, done: int, total: int, detail: str, elapsed: float) -> str:
        percent = 100.0 * done / total if total else 100.0
        parts = [f"retrieval {self.label}: {phase} {done}/{total} ({percent:.0f}%)"]
        if detail:
            parts.append(detail)
        if done >= total:
            parts.append(f"done in {_duration(elapsed)}")
        elif done:
            parts.append(f"ETA {_duration(elapsed * (total - done) / done)}")
        return " · ".join(parts)
