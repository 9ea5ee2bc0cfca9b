"""The layering of ARCHITECTURE.md, enforced: an import graph of ``src/pytest_retrieval`` read
from the source (every import counts: module-level, inside functions, under TYPE_CHECKING).

Components: each subpackage (``_internal``, ``retrieval``, ``judge``, ``render``, ``builder``,
``plugin``, ``cli``) is one; each top-level module is one. Rules:

- no cycle between components;
- ``pytest`` (and ``_pytest``, ``pluggy``, ``xdist``) only in ``plugin/``; ``openai`` only in
  ``judge/``;
- the front-ends are imported by nobody: ``plugin/`` is found through its entry point, ``cli/``
  only by ``__main__``; so neither imports the other;
- ``_internal/`` imports nothing of ours but ``errors``;
- nothing imports the package root (its lazy exports are for users).
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "pytest_retrieval"
SOURCE = Path(__file__).resolve().parent.parent / "src" / PACKAGE
SUBSYSTEMS = ("_internal", "retrieval", "judge", "render", "builder")
FRONT_ENDS = ("plugin", "cli")
ONLY_IN = {"pytest": "plugin", "_pytest": "plugin", "pluggy": "plugin", "xdist": "plugin"}
ONLY_IN |= {"openai": "judge"}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module
    imported: str  # dotted module (ours) or top-level name (third party)
    line: int


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``root`` (the package folder)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(root: Path) -> list[Import]:
    """Every import of every module, resolved to the module it loads: statements, and calls
    of ``import_module``/``__import__``. A call whose name is computed (a command table, the
    lazy exports) counts as importing every module the file names in a string."""
    known = modules(root)
    found = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            targets = _targets(node, package, known)
            if targets is None and _dynamic_import(node):
                targets = [
                    f"{PACKAGE}.{c.value}" if f"{PACKAGE}.{c.value}" in known else c.value
                    for c in ast.walk(tree)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                    if f"{PACKAGE}.{c.value}" in known or c.value in known
                ]
            for target in targets or ():
                if target == PACKAGE or target.startswith(PACKAGE + "."):
                    while target not in known:
                        target = target.rpartition(".")[0]
                else:
                    target = target.partition(".")[0]
                if target != name:
                    found.append(Import(name, target, getattr(node, "lineno", 0)))
    return found


def _targets(node: ast.AST, package: str, known: Mapping[str, Path]) -> list[str] | None:
    """The modules an import statement, or an import call with a literal name, loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        module = _absolute(node.module or "", node.level, package)
        submodules = [f"{module}.{a.name}" for a in node.names]
        targets = [m for m in submodules if m in known]
        return [*targets, module] if len(targets) < len(submodules) else targets
    if isinstance(node, ast.Call) and _is_import_call(node) and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            level = len(first.value) - len(first.value.lstrip("."))
            return [_absolute(first.value[level:], level, package)]
    return None


def _absolute(module: str, level: int, package: str) -> str:
    if not level:
        return module
    base = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join(base + ([module] if module else []))


def _is_import_call(node: ast.Call) -> bool:
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name in ("import_module", "__import__")


def _dynamic_import(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _is_import_call(node) and _targets(node, "", {}) is None


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return found


#: imports that break a rule today, each to be removed by the change that fixes it (issue 40);
#: an entry that no longer matches an import fails :func:`test_the_known_breaks_still_exist`
KNOWN: frozenset[tuple[str, str]] = frozenset(
    (f"{PACKAGE}.{importer}", imported if imported in ONLY_IN else f"{PACKAGE}.{imported}")
    for importer, imported in []
)


def violations(
    found: Iterable[Import], known: frozenset[tuple[str, str]] = frozenset()
) -> list[str]:
    """Every broken rule, one line each, naming the file and line that breaks it."""
    found = [imp for imp in found if (imp.importer, imp.imported) not in known]
    problems = []
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], Import] = {}
    for imp in found:
        source = component(imp.importer)
        if not imp.imported.startswith(PACKAGE):
            home = ONLY_IN.get(imp.imported)
            if home is not None and source != home:
                problems.append(
                    f"{imp.importer}:{imp.line} imports {imp.imported} (only {home}/ may)"
                )
            continue
        target = component(imp.imported)
        if imp.imported == PACKAGE:
            problems.append(f"{imp.importer}:{imp.line} imports the package root")
            continue
        if target in FRONT_ENDS and source != target and imp.importer != f"{PACKAGE}.__main__":
            problems.append(f"{imp.importer}:{imp.line} imports the front-end {imp.imported}")
        if source == "_internal" and target not in ("_internal", "errors"):
            problems.append(
                f"{imp.importer}:{imp.line} imports {imp.imported} (_internal/ is the floor)"
            )
        if source != target and source != "<root>":
            graph.setdefault(source, set()).add(target)
            where.setdefault((source, target), imp)
    for members in cycles(graph):
        inside = [
            f"{where[s, t].importer}:{where[s, t].line} -> {t}"
            for s in members
            for t in sorted(graph[s])
            if t in members
        ]
        problems.append(f"cycle between {', '.join(members)}: " + "; ".join(inside))
    return problems


def test_the_package_keeps_its_layers() -> None:
    assert violations(imports(SOURCE), KNOWN) == []


def test_the_known_breaks_still_exist() -> None:
    found = {(i.importer, i.imported) for i in imports(SOURCE)}
    assert sorted(KNOWN - found) == []


def test_the_graph_sees_function_local_and_type_checking_imports() -> None:
    found = {(i.importer, i.imported) for i in imports(SOURCE)}
    assert (f"{PACKAGE}.plugin", "pytest") in found
    # a sample of each kind, so a reader that skips one fails here rather than passing vacuously
    local = [i for i in imports(SOURCE) if i.importer == f"{PACKAGE}.evaluation"]
    assert len({i.imported for i in local}) >= 8


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        (
            "stats.py",
            "\ndef _planted():\n    from .gate import decide\n",
            "cycle between gate, stats",
        ),
        ("render/text.py", "\ndef _planted():\n    from ..plugin import session\n", "front-end"),
        ("golden.py", "\nimport pytest\n", "imports pytest (only plugin/ may)"),
        ("results.py", "\nimport openai\n", "imports openai (only judge/ may)"),
        ("builder/corpus.py", "\nfrom ..cli import main\n", "front-end"),
        ("plugin/session.py", "\nfrom .. import cli\n", "front-end"),
        (
            "golden.py",
            "\nimport importlib\nimportlib.import_module('pytest_retrieval.cli')\n",
            "front-end",
        ),
        (
            "stats.py",
            "\nfrom importlib import import_module\nimport_module('.plugin', 'pytest_retrieval')\n",
            "front-end",
        ),
        ("results.py", "\n__import__('openai')\n", "imports openai (only judge/ may)"),
        (
            "metrics.py",
            "\nimport importlib\nNAME = 'plugin.session'\nimportlib.import_module(NAME)\n",
            "front-end",
        ),
        ("_internal/io.py", "\nfrom ..golden import GoldenSet\n", "floor"),
        ("metrics.py", "\nfrom pytest_retrieval import evaluate\n", "package root"),
    ],
)
@pytest.mark.slow  # a fresh interpreter per plant
def test_a_planted_violation_fails(tmp_path: Path, module: str, line: str, expected: str) -> None:
    copy = tmp_path / PACKAGE
    shutil.copytree(SOURCE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(imports(copy), KNOWN) == []
    with (copy / module).open("a", encoding="utf-8") as file:
        file.write(line)
    problems = violations(imports(copy), KNOWN)
    assert any(expected in problem for problem in problems), problems
