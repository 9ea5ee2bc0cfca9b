"""One error root (ARCHITECTURE.md, "Errors"): every exception class the package defines is a
:class:`~pytest_retrieval.errors.RetrievalError`, so a caller (and the command line's
``main``) catches all of ours with one ``except``; the command line maps them to exit codes
in one table; the pytest plugin shows the library's usage errors as pytest's."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
from types import ModuleType
from typing import Any

import pytest

import pytest_retrieval
from pytest_retrieval import errors
from pytest_retrieval.errors import ConfigError, RetrievalError, UsageError


def every_module() -> list[ModuleType]:
    """Every module of the package, none skipped (an import error fails the test)."""
    found = [pytest_retrieval]
    for info in pkgutil.walk_packages(pytest_retrieval.__path__, "pytest_retrieval."):
        found.append(importlib.import_module(info.name))
    return found


def defined_exceptions() -> list[type[BaseException]]:
    """The exception classes each module defines itself (not those it imports), nested
    ones included; warnings are categories to issue, not errors to raise, so left out."""
    found: list[type[BaseException]] = []
    for module in every_module():
        todo = [cls for _, cls in inspect.getmembers(module, inspect.isclass)]
        while todo:
            cls = todo.pop()
            if cls.__module__ != module.__name__ or cls in found:
                continue
            todo += [c for c in vars(cls).values() if inspect.isclass(c)]
            if issubclass(cls, BaseException) and not issubclass(cls, Warning):
                found.append(cls)
    return found


def test_the_walk_sees_every_module() -> None:
    names = {module.__name__ for module in every_module()}
    # one of each kind, so a walk that stops early fails here rather than passing vacuously
    for name in ("errors", "hits", "_internal.io", "builder.synth", "judge.batch", "cli"):
        assert f"pytest_retrieval.{name}" in names
    assert len(defined_exceptions()) >= 20


def test_every_exception_of_the_package_is_a_retrieval_error() -> None:
    outside = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in defined_exceptions()
        if not issubclass(cls, RetrievalError)
    ]
    assert outside == []


@pytest.mark.parametrize(
    ("name", "bases"),
    [  # the built-in bases callers' ``except`` clauses rely on, kept
        ("errors.ConfigError", (ValueError,)),
        ("errors.GoldenError", (ConfigError, ValueError)),
        ("hits.HitError", (errors.RetrieverError, ValueError)),
        ("retrieval.adapters.DocIdError", (errors.RetrieverError, ValueError)),
        ("judge.client.JudgeConfigError", (errors.JudgeError, ConfigError)),
        ("judge.batch.BatchAPIError", (errors.JudgeError,)),
        ("_internal.json.JsonProblem", (ValueError,)),
        ("_internal.io.LockError", (OSError,)),
        ("_internal.io.OutsideLinkError", (OSError,)),
        ("shards.ShardError", (ValueError,)),
        ("compare.UnknownReference", (ValueError,)),
    ],
)
def test_a_family_keeps_its_bases(name: str, bases: tuple[type, ...]) -> None:
    module, _, attribute = f"pytest_retrieval.{name}".rpartition(".")
    cls = getattr(importlib.import_module(module), attribute)
    assert issubclass(cls, (RetrievalError, *bases))
    assert all(issubclass(cls, base) for base in bases)


def test_a_usage_error_is_not_a_config_error() -> None:
    """Apart, so an ``except ConfigError`` that words a bad input never swallows a bad
    command line (exit status 2, with the usage) into a bad input (1)."""
    assert not issubclass(UsageError, ConfigError)
    assert not issubclass(ConfigError, UsageError)


def test_nothing_of_ours_is_named_as_pytest_usage_error_but_the_library_one() -> None:
    named = [cls for cls in defined_exceptions() if cls.__name__ == "UsageError"]
    assert named == [UsageError]


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (UsageError("--port 70000: not a port number"), 2),
        (ConfigError("golden set g.json: no queries"), 1),
        (errors.InputError("r.json: not a pytest-retrieval report"), 1),
        (errors.JudgeError("Batch API: 401 Unauthorized"), 1),
        (errors.RetrieverError("the retriever returned None"), 1),
        (RetrievalError("anything else of ours"), 1),
    ],
)
def test_the_command_line_maps_each_error_to_its_exit_status(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: Exception,
    status: int,
) -> None:
    from pytest_retrieval.cli import main

    def fails(args: object) -> int:
        raise error

    parse = argparse.ArgumentParser.parse_args

    def parse_then_fail(self: argparse.ArgumentParser, *given: Any) -> argparse.Namespace:
        args: argparse.Namespace = parse(self, *given)
        args.command = fails  # the command named, raising the error as it runs
        return args

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_fail)
    assert main(["show", "r.json"]) == status
    err = capsys.readouterr().err
    assert str(error) in err
    if status == 2:  # argparse's form: the usage, then "prog: error: message"
        assert err.startswith("usage: pytest-retrieval show")
        assert f"pytest-retrieval show: error: {error}" in err
    else:  # one line naming the command, never a traceback
        assert err == f"pytest-retrieval show: {error}\n"


def test_the_plugin_shows_a_library_usage_error_as_pytests() -> None:
    from pytest_retrieval.plugin.session import usage_errors

    for error in (UsageError("--x 1: bad"), ConfigError("g.json: bad")):
        with pytest.raises(pytest.UsageError, match=str(error)), usage_errors():
            raise error
