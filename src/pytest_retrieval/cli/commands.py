"""The one table of ``pytest-retrieval``'s subcommands, from which its parser is built.

Each row names a module with ``add_arguments(parser)`` and ``run(args) -> int``, imported
when the parser is built; the options a command shares with a pytest run come from
:mod:`..settings` (:func:`~..settings.add_cli_options`), added before its own.
"""

from __future__ import annotations

import argparse
import importlib
from typing import NamedTuple

from ..settings import add_cli_options


class Command(NamedTuple):
    name: str
    module: str  # under pytest_retrieval
    summary: str  # its line in ``pytest-retrieval --help`` (and its description by default)


COMMANDS = (
    Command(
        "validate",
        "cli.validate",
        "check golden sets: schema, then counts, duplicates and balance",
    ),
    Command("convert", "cli.convert", "BEIR folder, TREC qrels or CSV -> golden JSON"),
    Command("diff", "cli.diff", "compare two JSON reports with the gate's paired test"),
    Command(
        "show", "cli.show", "print a baseline file, or a report's queries with their ranked hits"
    ),
    Command(
        "judge-batch",
        "cli.judge_batch",
        "grade a report's hits through OpenAI's Batch API, into the judge cache",
    ),
    Command(
        "combine",
        "cli.combine",
        "gate the partial reports of CI shards (--retrieval-shard) as one run",
    ),
    Command(
        "eval",
        "cli.eval",
        "gate a precomputed run (TREC, JSON or JSONL) on a golden set, without pytest",
    ),
    # the commands that build a golden set (docs/building.md)
    Command("synth", "builder.synth", "generate a golden set's queries from a corpus with an LLM"),
    Command(
        "pool",
        "builder.pool",
        "judge the unjudged top hits of one or more reports into a review file",
    ),
    Command(
        "review", "builder.review_server", "review a review file's proposed labels on a local page"
    ),
    Command("apply", "builder.apply", "merge a review file's decisions into the golden set"),
)


def parser(version: str) -> argparse.ArgumentParser:
    """``pytest-retrieval`` with a subcommand per row of :data:`COMMANDS`."""
    top = argparse.ArgumentParser(
        prog="pytest-retrieval",
        description="Golden-set and report tools for pytest-retrieval.",
    )
    top.add_argument("--version", action="version", version=f"pytest-retrieval {version}")
    commands = top.add_subparsers(title="commands", required=True, metavar="COMMAND")
    for name, module, summary in COMMANDS:
        command = importlib.import_module(f"pytest_retrieval.{module}")
        sub: argparse.ArgumentParser = commands.add_parser(name, help=summary, description=summary)
        sub.set_defaults(command=command.run, command_name=name, parser=sub)
        add_cli_options(sub, name)  # --allow-outside-links, and what it shares with pytest
        command.add_arguments(sub)
    return top
