"""The verdict is built by the gate only (issue 40): an evaluation's by ``gate.decide``, a
session's by ``gate.session_verdict``, a shard part's and a promoted warning's by their gate
functions. Elsewhere a ``Verdict(...)`` by hand would be a second place deciding pass/fail:
this reads the source (AST) and names each one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "pytest_retrieval"
SOURCE = Path(__file__).resolve().parent.parent / "src" / PACKAGE

#: module -> why it may build a Verdict
ALLOWED = {
    "gate": "decides: decide, session_verdict, part_verdict, promote",
    "verdicts": "defines it (UNDECIDED: the fail-safe of a result nothing decided)",
    "results": "verdict_from_dict: reads back what a report stored, decides nothing",
}


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_verdicts(module: str, node: ast.ImportFrom, package: str) -> bool:
    """``node`` imports from ``pytest_retrieval.verdicts`` (relative or absolute)."""
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
        target = ".".join([*base, node.module or ""]).strip(".")
    else:
        target = (node.module or "").removeprefix(PACKAGE + ".") if node.module else ""
    return target == "verdicts"


def built_by_hand(root: Path) -> list[str]:
    """``module:line`` of every Verdict built outside :data:`ALLOWED`: a call of the name
    ``Verdict`` imported from ``verdicts`` (the judge's own ``Verdict`` is another class), of
    ``verdicts.Verdict``, or, in a module that imports from ``verdicts``, a
    ``dataclasses.replace`` of something named ``verdict``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module(path, root)
        if module in ALLOWED:
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: set[str] = set()
        ours = False
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _is_verdicts(module, node, package):
                names |= {a.asname or a.name for a in node.names if a.name == "Verdict"}
                ours = True
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            by_name = isinstance(func, ast.Name) and func.id in names
            by_attribute = (
                isinstance(func, ast.Attribute)
                and func.attr == "Verdict"
                and isinstance(func.value, ast.Name)
                and func.value.id == "verdicts"
            )
            first = node.args[0] if node.args else None
            replaced = (
                ours
                and isinstance(func, ast.Name | ast.Attribute)
                and (func.id if isinstance(func, ast.Name) else func.attr) == "replace"
                and (
                    (isinstance(first, ast.Name) and first.id == "verdict")
                    or (isinstance(first, ast.Attribute) and first.attr == "verdict")
                )
            )
            if by_name or by_attribute or replaced:
                found.append(f"{module or '<root>'}:{node.lineno}")
    return found


def test_only_the_gate_builds_a_verdict() -> None:
    assert built_by_hand(SOURCE) == []


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("finish.py", "\ndef _planted():\n    return Verdict(())\n"),
        (
            "render/text.py",
            "\ndef _planted():\n    from .. import verdicts\n    return verdicts.Verdict()\n",
        ),
        ("shards.py", "\ndef _planted(result):\n    return replace(result.verdict, reasons=())\n"),
    ],
)
def test_a_verdict_built_by_hand_is_named(tmp_path: Path, module: str, line: str) -> None:
    copy = tmp_path / PACKAGE
    copy.mkdir()
    target = copy / module
    target.parent.mkdir(parents=True, exist_ok=True)
    text = (SOURCE / module).read_text(encoding="utf-8")
    if "Verdict(" in line and "verdicts" not in line:
        text = "from .verdicts import Verdict\n" + text
    target.write_text(text + line, encoding="utf-8")
    found = built_by_hand(copy)
    expected = module.removesuffix(".py").replace("/", ".")
    assert [site.rpartition(":")[0] for site in found] == [expected], found


def test_the_judge_verdict_is_another_class() -> None:
    """judge/ builds its own ``Verdict`` (a hit's grade) everywhere: not counted."""
    judged = SOURCE / "judge" / "answers.py"
    assert "Verdict(" in judged.read_text(encoding="utf-8")
    assert not [s for s in built_by_hand(SOURCE) if s.startswith("judge.")]
