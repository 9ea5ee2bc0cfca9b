"""Every setting is declared once, in :data:`pytest_retrieval.settings.OPTIONS`: the pytest
options and ini keys and the ``pytest-retrieval`` flags they share are generated from it, and
their defaults are written nowhere else."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_retrieval.cli import _parser
from pytest_retrieval.settings import (
    BUILDERS,
    DEFAULT_DEADLINE,
    DEFAULT_JUDGE_MODEL,
    OPTIONS,
    JudgeConfig,
    add_judge_arguments,
)

SOURCE = Path(__file__).resolve().parent.parent / "src" / "pytest_retrieval"

#: every option and ini key of the release before the spec (issue 40): none may be lost
BEFORE = [
    "allow-outside-links",
    "alpha",
    "baseline",
    "compare-to",
    "concurrency",
    "doc-id-key",
    "export-run",
    "gate",
    "golden",
    "html",
    "judge",
    "judge-base-url",
    "judge-cache",
    "judge-cache-only",
    "judge-concurrency",
    "judge-deadline",
    "judge-fallback",
    "judge-max-calls",
    "judge-max-failures",
    "judge-max-tokens",
    "judge-max-wait",
    "judge-min-coverage",
    "judge-min-score",
    "judge-model",
    "judge-no-cache",
    "judge-prompt",
    "judge-relevance-level",
    "judge-retry-ungraded",
    "judge-samples",
    "judge-scale",
    "judge-text-budget",
    "judge-timeout",
    "judge-validate",
    "k",
    "markdown",
    "max-drop",
    "max-failures",
    "metric",
    "only",
    "progress",
    "report",
    "run",
    "sample",
    "sample-seed",
    "shard",
    "split-min",
    "strict",
    "strict-baseline",
    "threshold",
    "timeout",
    "update-baseline",
]
BEFORE_INI = [
    "allow_outside_links",
    "alpha",
    "baseline",
    "concurrency",
    "doc_id_key",
    "export_run",
    "fixture",
    "gate",
    "golden",
    "html",
    "judge_cache",
    "judge_deadline",
    "judge_fallback",
    "judge_model",
    "judge_prices",
    "markdown",
    "max_drop",
    "max_failures",
    "report",
    "run",
    "split_min",
    "strict",
    "strict_baseline",
    "thresholds",
    "timeout",
]
#: CLI flags that share a pytest option's name and mean something else
OTHER_MEANING = {("show", "--metric"), ("pool", "--k")}


def test_pytest_registers_exactly_the_specs_options_and_ini_keys(pytester: pytest.Pytester) -> None:
    shown = pytester.runpytest("--help").stdout.str()
    options = set(re.findall(r"^  (--retrieval-[a-z0-9-]+)", shown, re.MULTILINE))
    ini = set(re.findall(r"^  (retrieval_\w+) \(", shown, re.MULTILINE))
    assert options == {o.pytest_flag for o in OPTIONS if o.pytest}
    assert ini == {o.ini.key for o in OPTIONS if o.ini is not None}
    assert options == {f"--retrieval-{name}" for name in BEFORE}
    assert ini == {f"retrieval_{name}" for name in BEFORE_INI}


def _commands() -> dict[str, argparse.ArgumentParser]:
    subparsers = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(subparsers.choices)


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def _same(action: argparse.Action, wanted: dict[str, Any]) -> None:
    assert action.help == wanted["help"]
    assert action.default == wanted["default"]
    assert action.metavar == wanted.get("metavar")
    assert (action.choices is None) == ("choices" not in wanted)


def test_every_cli_flag_a_pytest_option_has_too_comes_from_the_spec() -> None:
    commands = _commands()
    judge_group = argparse.ArgumentParser()
    add_judge_arguments(judge_group)
    generated = 0
    for name, parser in commands.items():
        flags = _flags(parser)
        for option in OPTIONS:
            if option.takes(name):
                _same(flags[option.cli_flag(name)], option.cli_arguments(name))
                generated += 1
        builder = "--judge-model" in flags
        for option in OPTIONS:
            if builder and option.takes(BUILDERS):
                _same(flags[option.cli_flag(BUILDERS)], option.cli_arguments(BUILDERS))
        spelled = {o.cli_flag(c) for o in OPTIONS for c in o.cli} - {"--allow-outside-links"}
        for flag in flags.keys() & spelled:  # a flag named as one of the spec's
            assert (
                (name, flag) in OTHER_MEANING
                or any(o.takes(name) and o.cli_flag(name) == flag for o in OPTIONS)
                or (
                    builder
                    and any(o.takes(BUILDERS) and o.cli_flag(BUILDERS) == flag for o in OPTIONS)
                )
            ), f"pytest-retrieval {name} declares {flag} by hand: declare it in settings.OPTIONS"
    assert generated >= 40


def test_the_judge_config_defaults_are_the_options_defaults() -> None:
    config = JudgeConfig()
    fields = {
        "judge_model": config.model,
        "judge_scale": config.scale,
        "judge_min_score": config.min_score,
        "judge_min_coverage": config.min_coverage,
        "judge_concurrency": config.concurrency,
        "judge_timeout": config.timeout,
        "judge_max_wait": config.max_retry_wait,
        "judge_text_budget": config.text_budget_chars,
        "judge_relevance_level": config.relevance_level,
        "judge_samples": config.samples,
        "judge_deadline": config.deadline,
        "judge_max_failures": config.max_failures,
        "judge_fallback": config.fallback,
    }
    by_name = {o.name: o for o in OPTIONS}
    assert {name: by_name[name].default for name in fields} == fields


def _defaults_written(path: Path) -> list[tuple[int, Any]]:
    """Constants in the places a default is written: ``default=``, a parameter's default,
    a class attribute, a module constant."""
    found: list[ast.expr] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "default":
            found.append(node.value)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
        elif isinstance(node, ast.ClassDef | ast.Module):
            found += [
                n.value for n in node.body if isinstance(n, ast.Assign | ast.AnnAssign) and n.value
            ]
    return [
        (v.lineno, v.value)
        for v in found
        if isinstance(v, ast.Constant) and not isinstance(v.value, bool)
    ]


def test_no_default_is_written_twice() -> None:
    """The judge's model and deadline nowhere but the spec; none of the spec's defaults in
    the modules that read the options (where a copy would drift)."""
    spec = SOURCE / "settings.py"
    everywhere = {DEFAULT_JUDGE_MODEL, DEFAULT_DEADLINE}
    defaults = {
        o.default
        for o in OPTIONS
        if isinstance(o.default, str | int | float) and o.default not in (0, 1, 2, "")
    }
    readers = [*(SOURCE / "plugin").glob("*.py"), *(SOURCE / "cli").glob("*.py")]
    readers += [SOURCE / "judge" / "client.py", SOURCE / "inifile.py", SOURCE / "validators.py"]
    written = []
    for path in sorted(SOURCE.rglob("*.py")):
        if path == spec:
            continue
        wanted = defaults if path in readers else everywhere
        written += [
            f"{path.relative_to(SOURCE)}:{line}: {value!r}"
            for line, value in _defaults_written(path)
            if value in wanted and not isinstance(value, bool)
        ]
    assert written == []


def test_the_check_sees_a_default_written_twice(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text('def judge(model: str = "gpt-4.1-mini", deadline=1800.0): ...\n')
    assert [value for _, value in _defaults_written(planted)] == ["gpt-4.1-mini", 1800.0]
