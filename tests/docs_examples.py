"""The code blocks of the README and the docs site, found by name.

A fenced block of a checked language (Python, shell, YAML, TOML, JSON, ...) is preceded by
one marker, an HTML comment that neither GitHub nor MkDocs shows:

    <!-- example: quickstart-conftest -->   a test runs it: ``example("quickstart-conftest")``
    <!-- illustrative -->                    shown, not run (its syntax and options are checked)

``tests/test_docs.py`` fails on a block with neither, on a named block no test asks for, and
on a block whose syntax or ``--option`` does not parse; the named ones run in the tests that
ask for them (the recipes, the Quick start, the shards matrix...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: Languages whose blocks must carry a marker; output (``text``, ``console``) need not.
CHECKED = {"python", "py", "bash", "sh", "shell", "yaml", "yml", "toml", "json", "jsonl", "ini"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<info>[^\n`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?:example:\s*(?P<name>[\w.-]+)|(?P<ill>illustrative))\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its marker, its text (dedented)."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    name: str | None
    illustrative: bool
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def markdown_files() -> list[Path]:
    """The README and every page of the docs site (snippet includes are not pages)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "snippets" not in p.parts)
    return [ROOT / "README.md", *pages]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        language = (opening["info"].split() or [""])[0].lower()
        body: list[str] = []
        end = index + 1
        while end < len(lines):
            closing = lines[end].strip()
            if closing.startswith(fence[0] * len(fence)) and not closing.strip(fence[0]):
                break
            body.append(lines[end][len(indent) :] if lines[end].startswith(indent) else lines[end])
            end += 1
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = _MARKER.match(previous)
        found.append(
            Block(
                path=path,
                line=index + 1,
                language=language,
                name=marker["name"] if marker else None,
                illustrative=bool(marker and marker["ill"]),
                code="\n".join(body) + "\n",
            )
        )
        index = end + 1
    return found


@cache
def all_blocks() -> tuple[Block, ...]:
    return tuple(block for path in markdown_files() for block in blocks_of(path))


def example(name: str) -> str:
    """The text of the block marked ``<!-- example: NAME -->`` (exactly one must be)."""
    matches = [block for block in all_blocks() if block.name == name]
    if len(matches) != 1:
        where = ", ".join(block.where for block in matches) or "nowhere"
        raise LookupError(f"example {name!r} must be marked once in the docs; found {where}")
    return matches[0].code
