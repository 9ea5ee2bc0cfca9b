"""``python -m pytest_retrieval`` / ``pytest-retrieval``: golden-set and report tools.

The subcommands are the rows of :data:`.commands.COMMANDS`, one module each (``cli/<name>.py``,
or ``builder/`` for those that build a golden set); ``combine`` and ``eval`` gate through
:mod:`.gating`. Exit status: 0 fine,
1 a problem found (invalid golden set, a regression, nothing to compare, an unreadable
file), 2 bad command-line arguments (argparse's message, also for problems found after
parsing: an output path that is a folder, an unknown query id; for ``combine`` and ``eval``
also inputs that cannot be gated, said in the outputs asked for too).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .._version import __version__
from ..errors import RetrievalError, UsageError

Command = Callable[[argparse.Namespace], int]


#: the exit status of each of the library's errors, found by the error's nearest class here:
#: a bad command line found after parsing is argparse's 2, shown with the usage; any other
#: (a bad input or setting, a file that does not read, the judge or the retriever failing)
#: is 1, in one line naming the command, never a traceback
EXIT_STATUS: Mapping[type[RetrievalError], int] = {UsageError: 2, RetrievalError: 1}


def exit_status(error: RetrievalError) -> int:
    """``error``'s exit status: that of the first of its classes (nearest first) listed."""
    return next(EXIT_STATUS[cls] for cls in type(error).__mro__ if cls in EXIT_STATUS)


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # "→" and "Δ" on a cp1252 pipe: "?", not a crash
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")
    parser = _parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the fix a note prints reruns it
    command: Command = args.command
    try:
        _check_links(args)
        return command(args)
    except RetrievalError as exc:  # the library's errors, each class to its exit status
        status = exit_status(exc)
        if isinstance(exc, UsageError):  # as argparse says it
            sub: argparse.ArgumentParser = args.parser
            sub.print_usage(sys.stderr)
            print(f"{sub.prog}: error: {exc}", file=sys.stderr)
        else:
            print(f"pytest-retrieval {args.command_name}: {exc}", file=sys.stderr)
        return status
    except BrokenPipeError:  # `show ... | head` closed the pipe: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:  # what the command opened (a judge's cache): closed, not left to exit
        for opened in getattr(args, "opened", ()):
            opened.close()


def _parser() -> argparse.ArgumentParser:
    """``pytest-retrieval`` and a subcommand for each row of :data:`.commands.COMMANDS`."""
    from .commands import parser

    return parser(__version__)


ALLOW_LINKS = "--allow-outside-links"
#: the paths the commands write (argparse dest -> the option that names it)
WRITTEN = {
    "output": "-o",
    "state": "-o",
    "report": "--report",
    "markdown": "--markdown",
    "html": "--html",
    "junit_xml": "--junit-xml",
}


def _check_links(args: argparse.Namespace) -> None:
    """The project of a command is the working directory: an output that would be written
    through a symlink out of it is a usage error before any work
    (:func:`~.._internal.io.link_problem`), unless ``--allow-outside-links``; a file known
    only later is refused as it is written."""
    from .._internal.io import cache_outputs, link_problem, set_link_policy

    set_link_policy(Path.cwd(), bool(getattr(args, "allow_outside_links", False)), ALLOW_LINKS)
    named = [(option, getattr(args, dest, None)) for dest, option in WRITTEN.items()]
    cache = getattr(args, "cache", None)
    if isinstance(cache, Path) and not getattr(args, "no_cache", False):
        named += cache_outputs("--cache", cache)
    if getattr(args, "update_baseline", None) is not None:
        named.append(("--baseline", getattr(args, "baseline", None)))
        if args.command_name == "eval" and args.baseline is None:  # beside the golden set
            from ..baseline import default_path

            named.append(("the baseline to record", default_path(args.golden)))
    if args.command_name == "review":
        named.append(("the review file", args.review))
    if args.command_name == "apply" and args.output is None:
        named.append(("the golden set (written in place)", args.golden))
    if args.command_name == "synth" and args.output is not None:
        named.append(("its summary", args.output.with_name(args.output.name + ".synth.json")))
    for option, path in named:
        if path is None or str(path) == "-":
            continue
        problem = link_problem(option, Path(path))
        if problem is not None:
            raise UsageError(problem)
