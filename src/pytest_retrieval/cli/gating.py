"""What ``combine`` and ``eval`` share: gating wholes outside pytest through :mod:`..finish`,
their outputs checked before any work, and inputs that cannot be gated refused in the outputs
too."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._internal.io import relative
from ..errors import ConfigError, UsageError


def add_gate_options(sub: argparse.ArgumentParser) -> None:
    """The options of ``combine`` and ``eval`` that a pytest run spells otherwise (the rest
    come from :mod:`..settings`)."""
    sub.add_argument("--junit-xml", type=Path, metavar="PATH", help="write a JUnit XML file")
    sub.add_argument(
        "-v", "--verbose", action="store_true", help="more changed queries and tracebacks"
    )


OFFLINE_STATUS = (
    "exit status: 0 the gate passed; 1 it failed (thresholds, regressions, failed retriever "
    "calls, as a pytest run fails); 2 bad arguments or inputs that cannot be gated (the "
    "outputs asked for are written all the same, saying why)."
)


#: the option a baseline file's fix names: eval's and combine's is --update-baseline
PYTEST_UPDATE = "--retrieval-update-baseline"


def offline_outputs(args: argparse.Namespace, inputs: list[tuple[str, Path | None]]) -> Any:
    """The outputs asked for, checked before any work: a folder, or a file that is one of
    the ``inputs`` (or another output), is a usage error; nothing is written then."""
    from ..finish import Outputs

    for name in OUTPUT_OPTIONS:
        path = getattr(args, name)
        if path is not None and path.is_dir():
            option = "--" + name.replace("_", "-")
            raise UsageError(f"argument {option}: {str(path)!r} is a folder, not a file")
    if args.baseline is not None and args.baseline.is_dir():
        raise UsageError(f"argument --baseline: {str(args.baseline)!r} is a folder, not a file")
    check_overwrites(args, inputs, [("--baseline", args.baseline)])
    return Outputs(args.report, args.markdown, args.html, args.junit_xml)


def check_overwrites(
    args: argparse.Namespace,
    inputs: list[tuple[str, Path | None]],
    baselines: list[tuple[str, Path | None]],
) -> None:
    """A usage error when an output would overwrite one of the ``inputs`` or ``baselines``
    (which are outputs too under --update-baseline), or another output."""
    from .._internal.io import overwrite_problem

    written = [("--" + n.replace("_", "-"), getattr(args, n)) for n in OUTPUT_OPTIONS]
    records: list[Path | None] = []
    if args.update_baseline is None:
        inputs = [*inputs, *baselines]
    else:
        written += baselines
        records = [path for _, path in baselines]
    problem = overwrite_problem(written, inputs, records)
    if problem is not None:
        raise UsageError(problem)
    from ..shards import partial_report_of

    given = {path.resolve() for _, path in inputs if path is not None}
    for option, path in written:
        if path is not None and path.resolve() not in given:
            shard = partial_report_of(path)
            if shard is not None:
                fix = "give it as a PARTIAL, or " if args.command_name == "combine" else ""
                raise UsageError(
                    f"{option} {relative(path)} is a shard's partial report ({shard}), not one "
                    f"given to {args.command_name}: writing it would overwrite it; {fix}write "
                    "the output to another path"
                )


#: the offline commands' output options (argparse dests)
OUTPUT_OPTIONS = ("report", "markdown", "html", "junit_xml")


def refuse(
    args: argparse.Namespace,
    outputs: Any,
    message: str,
    named: tuple[Sequence[Path], Sequence[Path]] = ((), ()),
) -> int:
    """Inputs that cannot be gated: the outputs say why (as after a pytest usage error), and
    so does stderr; exit status 2. ``named``: the golden sets and other files the inputs
    name, which the outputs do not overwrite (eval's golden set is its argument)."""
    from ..finish import refused

    start = Path.cwd()
    goldens, others = named
    golden = getattr(args, "golden", None)  # eval's: its corpus is not overwritten either
    goldens = [*goldens, *([golden] if isinstance(golden, Path) else [])]
    written = refused(outputs, message, root=start, start=start, goldens=goldens, others=others)
    for problem in written:
        print(f"pytest-retrieval {args.command_name}: {problem.message}", file=sys.stderr)
    print(f"pytest-retrieval {args.command_name}: error: {message}", file=sys.stderr)
    return 2


def gate_offline(
    args: argparse.Namespace,
    wholes: Sequence[Any],
    outputs: Any,
    note: str = "",
    unrun: Mapping[str, Sequence[str]] | None = None,
) -> int:
    """Gate the wholes (baseline comparison, A/B, verdict), record the baseline when asked,
    write the outputs and print the summary; the exit status of the verdict."""
    from dataclasses import replace

    from ..finish import gate, record, summary, write_outputs

    start = Path.cwd()
    try:
        gated = gate(wholes, recording=args.update_baseline is not None)
    except ConfigError as exc:  # a baseline file that does not read: its fix in our words
        return refuse(args, outputs, str(exc).replace(PYTEST_UPDATE, "--update-baseline"))
    if note:
        gated.notes.append(note)
    if args.update_baseline is not None:
        force = args.update_baseline == "force"
        record(gated, wholes, force=force, root=start, unrun=unrun)
    problems = write_outputs(
        replace(outputs, cases=tuple(w.nodeid for w in wholes)),
        gated.results,
        gated.verdict,
        root=start,
        start=start,
        groups=gated.groups,
        baselines=lambda: gated.found,
    )
    gated.reasons += problems
    verdict = gated.verdict
    for line in summary(gated, verdict, verbose=args.verbose, report=outputs.report):
        print(line)
    return 0 if verdict.passed else 1
