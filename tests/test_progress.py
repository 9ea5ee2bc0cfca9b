"""Live progress on a real terminal: a pty at 80 (and 60) columns, its raw output replayed
through a terminal emulator (pyte), and the final screen compared with the same run without
progress. The line must redraw several times, never wrap, and leave no trace: pytest's dots,
PASSED words and summary exactly where they would have been."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pexpect
import pyte
import pytest
from helpers import write_golden

from pytest_retrieval.render.progress import ProgressPrinter, clip, display_width

#: end-to-end runs (pytest processes, xdist, a local judge server): out of the fast
#: subset, `pytest tests -n 2 -m "not slow"` (README, Set up)
pytestmark = pytest.mark.slow

# a slow retriever (time per call from the environment: the reference run needs no wait); it
# raises KeyboardInterrupt at the call STOP_AT, as Ctrl-C would
SLOW_RETRIEVER = """
import os, time, pytest

@pytest.fixture(scope="session")
def retriever():
    pause = float(os.environ.get("RETRIEVER_PAUSE", "0.03"))
    stop_at = int(os.environ.get("STOP_AT", "0"))
    calls = []
    def search(query, k):
        calls.append(query)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        time.sleep(pause)
        return ["d1", "x", "d2"][:k]
    return search
"""

# long enough that the progress line must be clipped at 80 columns
NAME = "a-golden-set-with-a-long-name-that-crowds-the-progress-line"
GOLDEN = {
    "name": NAME,
    "k": 3,
    "queries": [{"id": f"q{i}", "query": f"query {i}", "relevant": ["d1"]} for i in range(120)],
}
FAST_TESTS = """
import pytest

@pytest.mark.parametrize("i", range(12))
def test_fast(i):
    pass
"""
# the golden set runs between other tests: dots before it on its line, and after it
ARGS = ["test_fast.py", "golden.json", "test_later.py", "--retrieval-golden", "golden.json"]
ARGS += ["--retrieval-concurrency", "1"]
DRAW = re.compile(r"\r(retrieval [^\r\n\x1b]*?) *(?=[\r\n\x1b]|$)")  # one live draw, unpadded


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(SLOW_RETRIEVER)
    pytester.makepyfile(test_fast=FAST_TESTS, test_later="def test_one(): pass\n")
    write_golden(pytester, GOLDEN)
    return pytester


def run_in_pty(
    path: Path, args: list[str], columns: int, env: dict[str, str] | None = None
) -> tuple[str, list[str]]:
    """pytest in a pty of ``columns`` columns (24 rows: the output scrolls, as it does on a
    real terminal); its raw output, and every row it leaves (scrolled-off ones first)."""
    addopts = "-p no:cacheprovider -p no:randomly -p no:asyncio -p no:langsmith_plugin"
    environ = dict(os.environ, PYTEST_ADDOPTS=addopts)
    for name in ("COLUMNS", "LINES", "RETRIEVER_PAUSE", "STOP_AT"):
        environ.pop(name, None)  # the size comes from the pty, as on a real terminal
    environ.update(env or {})
    rows = 24
    child = pexpect.spawn(
        sys.executable,
        ["-m", "pytest", *args],
        cwd=str(path),
        env=environ,
        encoding="utf-8",
        use_poll=True,  # select() fails once the process holds 1,024 fds (a long -n worker)
        timeout=120,
        dimensions=(rows, columns),
    )
    child.expect(pexpect.EOF)
    child.close()
    out: str = child.before
    screen = pyte.HistoryScreen(columns, rows, history=1000)
    pyte.Stream(screen).feed(out)
    scrolled = ["".join(line[x].data for x in range(columns)) for line in screen.history.top]
    shown = [*scrolled, *screen.display]
    while shown and not shown[-1].strip():
        shown.pop()
    return out, [row.rstrip() for row in shown]


def timeless(rows: list[str]) -> list[str]:
    """Rows with durations and the ``=`` runs that centre them evened out."""
    return [re.sub(r"=+", "=", re.sub(r"\d+(\.\d+)? ?m?s\b", "T", row)) for row in rows]


@pytest.mark.parametrize("verbosity", ["-q", "", "-v", "-qq"])
def test_live_progress_leaves_the_screen_as_pytest_left_it(
    project: pytest.Pytester, verbosity: str
) -> None:
    args = [*ARGS, *([verbosity] if verbosity else [])]
    out, screen = run_in_pty(project.path, args, 80)
    draws = DRAW.findall(out)
    assert len(draws) >= 3, out  # the line really was redrawn several times
    assert all(display_width(text) <= 79 for text in draws), draws  # never wraps
    assert all(re.search(r": queries \d+/120 \(\d+%\)", text) for text in draws), draws
    assert any("…" in text for text in draws)  # the long label was clipped, not wrapped
    assert not [row for row in screen if ": queries" in row], screen  # no stale fragment
    reference = ["--retrieval-progress", "off", *args]
    _, without = run_in_pty(project.path, reference, 80, {"RETRIEVER_PAUSE": "0"})
    assert timeless(screen) == timeless(without)
    if verbosity.startswith("-q"):  # every dot on the dots line, none overwritten
        assert re.fullmatch(r"\.{14} +\[100%\]", screen[0]) and len(screen[0]) == 79, screen
    if verbosity == "-v":
        assert "golden.json::retrieval PASSED" in "\n".join(screen)


def test_live_progress_fits_a_narrow_terminal_sized_by_the_pty(project: pytest.Pytester) -> None:
    """No COLUMNS: the width is the pty's, read while pytest's capturing is suspended (during
    the test, file descriptor 1 is a capture file whose 'size' is the 80-column fallback)."""
    out, screen = run_in_pty(project.path, [*ARGS, "-q"], 60)
    draws = DRAW.findall(out)
    assert len(draws) >= 3, out
    assert max(display_width(text) for text in draws) == 59, draws
    assert not [row for row in screen if ": queries" in row], screen
    assert re.fullmatch(r"\.{14} +\[100%\]", screen[0]), screen


def test_an_interrupted_evaluation_erases_its_line(project: pytest.Pytester) -> None:
    out, screen = run_in_pty(project.path, ARGS, 80, {"STOP_AT": "100"})
    assert len(DRAW.findall(out)) >= 3, out
    assert not [row for row in screen if ": queries" in row], screen
    assert any("KeyboardInterrupt" in row for row in screen), screen


def test_with_s_the_terminal_gets_plain_lines(project: pytest.Pytester) -> None:
    """-s: the tests' own prints share the screen, so auto uses plain lines, not a live one."""
    out, screen = run_in_pty(project.path, [*ARGS, "-s"], 80)
    assert not DRAW.findall(out), out
    assert any(": queries 120/120 (100%) · done in" in row for row in screen), screen


def test_live_progress_under_xdist_says_why_it_is_off(project: pytest.Pytester) -> None:
    notice = (
        "retrieval: --retrieval-progress live is off under -n 2: xdist workers cannot send "
        "progress mid-test, so each evaluation shows only when its test ends (run without -n "
        "to see it)"
    )
    result = project.runpytest_subprocess(*ARGS, "-n", "2", "-q", "--retrieval-progress", "live")
    result.assert_outcomes(passed=14)
    out = result.stdout.str()
    assert out.splitlines().count(notice) == 1, out
    assert ": queries" not in out
    quiet = project.runpytest_subprocess(*ARGS, "-n", "2", "-q")  # auto: nothing to explain
    quiet.assert_outcomes(passed=14)
    assert "--retrieval-progress" not in quiet.stdout.str()


# the printer alone, on a fake clock and a fake terminal


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def printer(
    width: int, column: int, label: str = "fruit [retriever]"
) -> tuple[ProgressPrinter, list[str], Clock]:
    written: list[str] = []
    clock = Clock()
    made = ProgressPrinter(
        label,
        written.append,
        live=True,
        delay=0,
        interval=0,
        width=lambda: width,
        column=lambda: column,
        clock=clock,
    )
    return made, written, clock


@pytest.mark.parametrize("width", [20, 40, 61, 80, 200])
def test_every_draw_fits_and_keeps_the_counts(width: int) -> None:
    made, written, clock = printer(width, 0, label="黄金データ " + "x" * 60)  # wide characters
    for done in range(0, 50, 7):
        clock.now += 1
        made.update("judge", done, 50, "31 calls, 12 cache hits, 4100 tokens")
    draws = [text.lstrip("\r").rstrip() for text in written]
    assert len(draws) == 8
    assert all(display_width(text) <= width - 1 for text in draws), draws
    if width >= 40:
        assert all(re.search(r": judge \d+/50 \(\d+%\)", text) for text in draws), draws
        assert "ETA" in draws[-1]
    if width == 200:
        assert draws[-1].endswith("· 31 calls, 12 cache hits, 4100 tokens · ETA 0s")


def test_the_detail_gives_way_before_the_label() -> None:
    made, written, _ = printer(80, 0)
    made.update("judge", 3, 10, "31 calls, 12 cache hits, " + "9" * 60)
    assert written[0] == "\r" + (
        "retrieval fruit [retriever]: judge 3/10 (30%) · 31 calls, 12 cache hi… · ETA 0s"
    )
    assert display_width(written[0]) == 80  # the \r, and 79 columns


def test_after_dots_the_line_opens_a_row_and_returns_to_their_end() -> None:
    made, written, clock = printer(80, 15)  # -q: 15 dots on the current line
    made.update("queries", 1, 4)
    clock.now += 1
    made.update("queries", 2, 4)
    made.update("queries", 4, 4)
    assert written[0].startswith("\n\rretrieval fruit [retriever]: queries 1/4 (25%)")
    assert written[1].startswith("\rretrieval")  # redrawn in place
    assert written[-1] == "\r" + " " * display_width(written[-2].lstrip("\r")) + "\r\x1b[A\x1b[15C"


@pytest.mark.parametrize("column", [-1, 80, 95])
def test_a_line_of_unknown_or_full_width_is_left_below(column: int) -> None:
    made, written, _ = printer(80, column)
    made.update("queries", 4, 4)
    assert written[0].startswith("\n\r")
    assert "\x1b[A" not in written[-1]


def test_on_an_empty_row_the_line_stays_on_it() -> None:
    made, written, _ = printer(80, 0)
    made.update("queries", 4, 4)
    assert written[0].startswith("\rretrieval") and "\x1b" not in "".join(written)
    made.clear()  # erasing twice writes nothing more
    assert len(written) == 2


def test_a_shorter_redraw_erases_the_longer_one() -> None:
    made, written, clock = printer(80, 0)
    made.update("judge", 1, 10, "a long detail of many words")
    clock.now += 1
    made.update("judge", 2, 10, "short")
    assert display_width(written[1]) == display_width(written[0])


def test_control_characters_in_a_name_cannot_move_the_cursor() -> None:
    made, written, _ = printer(80, 0, label="two\nlines\x1b[2J")
    made.update("queries", 4, 4)
    assert written[0].startswith("\rretrieval two lines [2J: queries 4/4")


def test_clip() -> None:
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abcdef", 4) == "abc…"
    assert clip("黄金データ", 5) == "黄金…"
    assert clip("abc", 0) == ""
