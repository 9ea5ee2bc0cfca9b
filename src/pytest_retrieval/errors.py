"""The project's errors, in one leaf module so every other module can raise them.

``RetrievalError`` is the root: every exception class of the package derives from it, so one
``except RetrievalError`` catches all of ours (the command line's ``main`` does, mapping each
family to an exit status). Its families:

- ``ConfigError``: a bad input or setting of the user's (a golden set, a baseline file, a run
  file, an option's value), shown as a pytest usage error with what to fix, never a traceback;
- ``UsageError``: a bad command line found after parsing it (an output path that is a folder,
  an option no value of which fits the others): pytest's ``UsageError`` in a test session,
  argparse's usage and exit status 2 on the command line. Named as pytest's because it means
  what pytest's means; it is apart from ``ConfigError`` so that no ``except ConfigError``
  words a bad command line as a bad input;
- ``InputError``: a file a command reads or writes that it cannot use (not readable, not what
  it should be, not writable), said in one line naming it;
- ``RetrieverError``: the retriever under test misbehaved (returned no ranked hits);
- ``JudgeError``: the LLM judge cannot run or its API refused a call.

Built-in bases that callers' ``except`` clauses rely on are kept beside the root
(``ConfigError`` is a ``ValueError``, a lock that cannot be had an ``OSError``). Nothing here
imports from the package, so no module that raises these pulls in another's dependencies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_RESTORE = (
    "restore it from git (git checkout -- {path}) or re-record it with --retrieval-update-baseline"
)


class RetrievalError(Exception):
    """Any error pytest-retrieval raises on purpose."""


class ConfigError(RetrievalError, ValueError):
    """A bad input or setting of the user's: a usage error naming it and the fix (a
    ``ValueError`` too, as the library API raised before this hierarchy)."""


class UsageError(RetrievalError):
    """A bad command line found only after parsing it: an option's value that does not fit
    (a folder for an output file, a port out of range, a query id the report does not hold).
    The plugin raises it as ``pytest.UsageError``, the command line as argparse's error."""


class InputError(RetrievalError):
    """A file a command reads or writes that it cannot use -- not readable, not what it
    should be (a report, a state file), not writable -- in one line naming it and the fix."""


class RetrieverError(RetrievalError):
    """The retriever under test misbehaved: its answer is not a ranked list of hits."""


class JudgeError(RetrievalError):
    """The LLM judge cannot run as configured, or its API refused a call."""


class OverwriteError(ConfigError):
    """An output path is one of the inputs (or another output): nothing is written, not even
    the outputs that say why the session stopped -- writing them is the problem."""


class MetricNameError(ConfigError):
    """A metric name that is not ``family@k`` with a known family and k >= 1."""


class ThresholdError(ConfigError):
    """A threshold that cannot be used; the message says what to write instead."""


class AllowanceError(ConfigError):
    """A max-drop setting that cannot be used; the message says what to write."""


class GoldenError(ConfigError):
    """A golden set that cannot be used, with where the problem is and how to fix it."""

    def __init__(
        self, source: str | Path, where: str, problem: str, fix: str = "", kind: str = "golden set"
    ) -> None:
        self.source = str(source)
        self.where = where
        self.problem = problem
        self.fix = fix
        self.kind = kind  # what ``source`` is: a golden set, or the corpus it names
        super().__init__(str(self))

    def __str__(self) -> str:
        place = f"{self.source}, {self.where}" if self.where else self.source
        text = f"{self.kind} {place}: {self.problem}"
        return f"{text}\n  fix: {self.fix}" if self.fix else text


class BaselineError(ConfigError):
    """A baseline file that cannot be trusted or written; says which file, what is wrong,
    what to do (by default: restore it from git, or re-record it)."""

    def __init__(self, path: Path, problem: str, *, fix: str | None = None) -> None:
        self.path = path
        self.problem = problem
        self.fix = _RESTORE.format(path=path) if fix is None else fix
        super().__init__(f"baseline {path}: {problem}\n  fix: {self.fix}")


@contextmanager
def warning_made_error(message: str, category: str) -> Iterator[None]:
    """Around issuing a warning: one that the warning filters in force make an error is a
    ConfigError in its words with the way back (a usage error at start-up, a failed
    evaluation in a test, one line from a command), not a traceback out of the plugin."""
    try:
        yield
    except Warning:
        raise ConfigError(f"{message}\n  {made_an_error(category)}") from None


def made_an_error(category: str = "pytest.PytestWarning") -> str:
    """Said after a warning that the warning filters in force (``-W error``,
    ``filterwarnings = error``) turn into an error, with the way back."""
    return (
        "(a warning, which the warning filters in force make an error: -W or filterwarnings; "
        f"fix its cause, or let it be a warning: -W default::{category})"
    )


class RunFileError(ConfigError):
    """A run file that cannot be used: which file, where, what is wrong, what to do."""

    def __init__(self, path: str | Path, where: str, problem: str, fix: str = "") -> None:
        self.path = str(path)
        self.where = where
        self.problem = problem
        self.fix = fix
        super().__init__(str(self))

    def __str__(self) -> str:
        place = f"{self.path}, {self.where}" if self.where else self.path
        text = f"run file {place}: {self.problem}"
        return f"{text}\n  fix: {self.fix}" if self.fix else text
