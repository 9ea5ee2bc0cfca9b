"""The README and the docs site say what the code does: every code block is run by a test or
marked illustrative (and then still parses, with options that exist), every table renders as
a table on GitHub and on the site, and the generated reference pages match the code.

The README's own examples run here: the Quick start in a ``tests/retrieval/`` layout, the
record-on-main / gate-on-PR commands failing a real regression, the library snippets.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import markdown
import pytest
import yaml
from docs_examples import CHECKED, DOCS, ROOT, Block, all_blocks, example, markdown_files
from markdown_it import MarkdownIt

from pytest_retrieval.settings import OPTIONS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - mypy's own dependency on 3.10
    import tomli as tomllib

TESTS = Path(__file__).resolve().parent
README = ROOT / "README.md"
SNIPPET = re.compile(r'^(?P<indent>\s*)--8<-- "(?P<path>[^"]+)"\s*$', re.MULTILINE)


def with_snippets(code: str) -> str:
    """A block's text with its ``--8<-- "file"`` lines replaced by the file, as MkDocs does."""
    return SNIPPET.sub(lambda m: (ROOT / m["path"]).read_text(encoding="utf-8"), code)


def blocks(*languages: str) -> list[Block]:
    return [block for block in all_blocks() if block.language in languages]


def ids(found: list[Block]) -> list[str]:
    return [block.where for block in found]


# ---------------------------------------------------------------------------- every block


def test_the_docs_have_pages_and_blocks() -> None:
    """The checks below see the site (a glob that found nothing would pass them all)."""
    pages = {path.relative_to(DOCS).as_posix() for path in markdown_files()[1:]}
    assert {"index.md", "getting-started.md", "reference/options.md"} <= pages
    assert len([b for b in all_blocks() if b.language in CHECKED]) > 30


def test_every_code_block_is_run_by_a_test_or_marked_illustrative() -> None:
    unmarked = [
        block.where
        for block in all_blocks()
        if block.language in CHECKED and not (block.name or block.illustrative)
    ]
    assert not unmarked, (
        "code blocks without <!-- example: NAME --> (a test runs it) or <!-- illustrative -->"
        f" before their fence: {unmarked}"
    )


def test_every_named_example_is_asked_for_by_a_test() -> None:
    """A name must be a string in a test's code (``example("NAME")``, or a table of names a
    test passes to it), not only in a comment."""
    strings = {
        node.value
        for path in TESTS.glob("*.py")
        if path.name != "docs_examples.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    names = [block.name for block in all_blocks() if block.name]
    assert len(names) == len(set(names)), "an example name is marked twice"
    unused = [name for name in names if name not in strings]
    assert not unused, f"examples no test runs (no test's code names {unused})"


@pytest.mark.parametrize("block", blocks("python", "py"), ids=ids(blocks("python", "py")))
def test_python_blocks_compile(block: Block) -> None:
    ast.parse(with_snippets(block.code), filename=block.where)


@pytest.mark.parametrize("block", blocks("json"), ids=ids(blocks("json")))
def test_json_blocks_parse(block: Block) -> None:
    json.loads(with_snippets(block.code))


@pytest.mark.parametrize("block", blocks("jsonl"), ids=ids(blocks("jsonl")))
def test_jsonl_blocks_parse(block: Block) -> None:
    for line in with_snippets(block.code).splitlines():
        if line.strip():
            json.loads(line)


@pytest.mark.parametrize("block", blocks("yaml", "yml"), ids=ids(blocks("yaml", "yml")))
def test_yaml_blocks_parse(block: Block) -> None:
    yaml.safe_load(with_snippets(block.code))


@pytest.mark.parametrize("block", blocks("toml"), ids=ids(blocks("toml")))
def test_toml_blocks_parse(block: Block) -> None:
    tomllib.loads(with_snippets(block.code))


# ---------------------------------------------------------------------------- options named


def pytest_flags() -> set[str]:
    return {option.pytest_flag for option in OPTIONS if option.pytest}


def ini_keys() -> set[str]:
    return {option.ini.key for option in OPTIONS if option.ini}


def command_flags() -> dict[str, set[str]]:
    """Every ``pytest-retrieval`` command -> the flags its parser takes."""
    import argparse

    from pytest_retrieval.cli import _parser

    top = _parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: {flag for action in parser._actions for flag in action.option_strings}
        for name, parser in sub.choices.items()
    }


def markdown_text() -> list[tuple[Path, str]]:
    return [(path, path.read_text(encoding="utf-8")) for path in markdown_files()]


NOT_INI = {"retrieval_eval", "retrieval_golden", "retrieval_corpus", "retrieval_downstream"}


def unknown_names(pages: list[tuple[str, str]], shell_blocks: list[tuple[str, str]]) -> list[str]:
    """The ``--retrieval-*`` options and ``retrieval_*`` ini keys named in ``pages`` (where,
    text), and the ``pytest-retrieval COMMAND --flag`` lines of ``shell_blocks``, that do not
    exist."""
    flags, keys, commands = pytest_flags(), ini_keys(), command_flags()
    unknown: list[str] = []
    for where, text in pages:
        for flag in set(re.findall(r"--retrieval-[a-z][a-z0-9-]*[a-z0-9]", text)):
            if flag not in flags:
                unknown.append(f"{where}: {flag}")
        for key in set(re.findall(r"\bretrieval_[a-z_]+[a-z]\b", text)):
            if key not in keys | NOT_INI:
                unknown.append(f"{where}: {key}")
    for where, code in shell_blocks:
        text = re.sub(r"\\\n|>\n", " ", code)  # shell continuations, YAML's folded `>`
        for match in re.finditer(r"pytest-retrieval[ \t]+([a-z-]+)([^\n#&|;]*)", text):
            command, rest = match[1], match[2]
            if command not in commands:
                unknown.append(f"{where}: pytest-retrieval {command} (no such command)")
                continue
            for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", rest):
                if flag not in commands[command]:
                    unknown.append(f"{where}: pytest-retrieval {command} {flag}")
    return unknown


def test_every_option_the_docs_name_exists() -> None:
    """Anywhere in the README and docs (prose, tables, blocks), and in their command lines."""
    pages = [(str(path.relative_to(ROOT)), text) for path, text in markdown_text()]
    shell = [
        (block.where, block.code)
        for block in all_blocks()
        if block.language in ("bash", "sh", "shell", "yaml", "yml")
    ]
    unknown = unknown_names(pages, shell)
    assert not unknown, "options the docs name that do not exist:\n" + "\n".join(unknown)


def test_misspelt_options_in_the_docs_are_found() -> None:
    """The check above can fail: an option, an ini key, a command or a command's flag that a
    rename left behind in the docs."""
    prose = "Run `pytest --retrieval-treshold recall@10=0.8`; ini `retrieval_tresholds`."
    shell = "pytest-retrieval combne a.json\npytest-retrieval combine a.json --reprot x.json\n"
    assert unknown_names([("page.md", prose)], [("block", shell)]) == [
        "page.md: --retrieval-treshold",
        "page.md: retrieval_tresholds",
        "block: pytest-retrieval combne (no such command)",
        "block: pytest-retrieval combine --reprot",
    ]


# ---------------------------------------------------------------------------- tables


def _outside_fences(text: str) -> list[tuple[int, str]]:
    lines, inside, fence = [], False, ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if re.match(r"(```+|~~~+)", stripped):
            if not inside:
                inside, fence = True, stripped[:3]
            elif stripped.startswith(fence) and not stripped.strip(fence[0]):
                inside = False
            continue
        if not inside:
            lines.append((number, line))
    return lines


def table_lines(text: str) -> set[int]:
    """The 1-based lines that look like a table row (``| a | b |``) outside code blocks."""
    return {number for number, line in _outside_fences(text) if re.match(r"\s*\|.*\|\s*$", line)}


def github_table_lines(text: str) -> set[int]:
    """The lines GitHub renders inside a table (markdown-it's GFM tables)."""
    tokens = MarkdownIt("gfm-like").parse(text)
    rendered: set[int] = set()
    for token in tokens:
        if token.type == "table_open" and token.map:
            rendered.update(range(token.map[0] + 1, token.map[1] + 1))
    return rendered


def site_table_rows(text: str) -> int:
    """Rows the site's Markdown (Python-Markdown, MkDocs' extensions) renders as table rows."""
    html = markdown.Markdown(
        extensions=[
            "tables",
            "attr_list",
            "md_in_html",
            "admonition",
            "pymdownx.details",
            "pymdownx.superfences",
        ]
    ).convert(SNIPPET.sub("", text))
    return html.count("<tr>")


def broken_tables(text: str, github: bool = True) -> list[int]:
    """Table rows that render as text: on GitHub (the README's renderer; the line numbers),
    and on the site (line 0: Python-Markdown renders fewer rows than there are)."""
    rows = table_lines(text)
    broken = sorted(rows - github_table_lines(text)) if github else []
    # the site: every row line is a <tr>, the delimiter rows (|---|) are not
    delimiters = {n for n, line in _outside_fences(text) if re.match(r"\s*\|[\s:|-]+\|\s*$", line)}
    if site_table_rows(text) < len(rows - delimiters):
        broken.append(0)
    return broken


#: the site's pages, and the files they include whole (the changelog, the architecture)
TABLED = [*markdown_files(), ROOT / "CHANGELOG.md", ROOT / "ARCHITECTURE.md"]


@pytest.mark.parametrize("path", TABLED, ids=[str(p.relative_to(ROOT)) for p in TABLED])
def test_every_table_renders_as_a_table(path: Path) -> None:
    # the README is read on GitHub; the pages on the site (admonitions are not GitHub's)
    broken = broken_tables(path.read_text(encoding="utf-8"), github=path.parent == ROOT)
    assert not broken, (
        f"{path.relative_to(ROOT)}: table rows that render as text (line 0: on the site) at "
        f"lines {broken}: a table needs a blank line before it, no blank line inside, and a "
        "delimiter row (|---|) under its header"
    )


def test_a_table_broken_by_a_blank_line_is_found() -> None:
    """The README's old Command line table: a blank line cut it, its last rows were raw pipes."""
    good = "| command | does |\n|---|---|\n| `a` | x |\n| `b` | y |\n"
    broken = "| command | does |\n|---|---|\n| `a` | x |\n\n| `b` | y |\n"
    assert broken_tables(good) == []
    assert broken_tables(broken) == [5, 0]  # GitHub's line 5, and the site
    assert broken_tables(broken, github=False) == [0]


# ---------------------------------------------------------------------------- generated pages


def test_the_reference_pages_are_generated_from_the_code() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_a_drifted_option_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """An option whose help changed in the code, and a page that still says the old help."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_reference
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    import pytest_retrieval.settings as settings

    changed = tuple(
        option._replace(help="a new meaning") if option.name == "alpha" else option
        for option in settings.OPTIONS
    )
    monkeypatch.setattr(settings, "OPTIONS", changed)
    assert gen_reference.main(["--check"]) == 1


# ---------------------------------------------------------------------------- README: run them


FAKE_INDEX = '''
import types


def build_my_index():
    """The docs' ``build_my_index()``: a keyword index over ``tests/docs.json``."""
    import json
    import pathlib

    docs = json.loads((pathlib.Path(__file__).parent / "docs.json").read_text())

    class Index:
        def search(self, query, top_k):
            words = set(query.lower().split())
            scored = sorted(docs, key=lambda d: (-len(words & set(d["text"].split())), d["id"]))
            return [types.SimpleNamespace(id=d["id"]) for d in scored[:top_k]]

    return Index()
'''

QUICKSTART_DOCS = [
    {"id": "doc_1234", "text": "eaddrinuse address already in use how to handle the port"},
    {"id": "doc_5678", "text": "handle eaddrinuse by picking another port"},
    {"id": "doc_2291", "text": "postgres connection pooling with pgbouncer"},
    {"id": "doc_17", "text": "connection pooling in postgres drivers"},
    *({"id": f"doc_{n}", "text": f"unrelated page {n}"} for n in range(20)),
]


def commands(block: str, program: str) -> list[list[str]]:
    """The block's command lines that run ``program`` (comments and ``&&`` tails dropped)."""
    found = []
    for line in block.splitlines():
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words and words[0] == program:
                found.append(words[1:])
    return found


def quickstart_project(pytester: pytest.Pytester) -> None:
    (pytester.path / "tests" / "retrieval").mkdir(parents=True)
    conftest = example("quickstart-conftest")
    (pytester.path / "tests" / "conftest.py").write_text(FAKE_INDEX + conftest, encoding="utf-8")
    (pytester.path / "tests" / "docs.json").write_text(json.dumps(QUICKSTART_DOCS))
    golden = example("quickstart-golden")
    (pytester.path / "tests" / "retrieval" / "golden.json").write_text(golden, encoding="utf-8")
    (pytester.path / "pyproject.toml").write_text(example("quickstart-ini"), encoding="utf-8")


def test_the_quick_start_runs_as_written(pytester: pytest.Pytester) -> None:
    quickstart_project(pytester)
    pytester.makepyfile(**{"tests/test_unit.py": "def test_unit():\n    assert True\n"})
    runs = commands(example("quickstart-run"), "pytest")
    assert runs == [[], ["--retrieval-only"]]
    everything = pytester.runpytest_subprocess(*runs[0])
    everything.assert_outcomes(passed=2)
    everything.stdout.fnmatch_lines(["*support-faq*2 queries*", "retrieval verdict: PASSED"])
    alone = pytester.runpytest_subprocess(*runs[1])
    alone.assert_outcomes(passed=1)
    alone.stdout.fnmatch_lines(["retrieval verdict: PASSED"])


GATE_QUERIES = 60


def gate_project(pytester: pytest.Pytester) -> None:
    """The Quick start's layout with a golden set big enough for the paired test: 60 topics,
    each with two relevant documents among distractors."""
    quickstart_project(pytester)
    docs, queries = [], []
    for n in range(GATE_QUERIES):
        topic = f"topic{n}"
        docs += [
            {"id": f"d{n}a", "text": f"{topic} guide"},
            {"id": f"d{n}b", "text": f"{topic} reference"},
        ]
        queries.append(
            {"id": f"q{n}", "query": f"{topic} guide reference", "relevant": [f"d{n}a", f"d{n}b"]}
        )
    (pytester.path / "tests" / "docs.json").write_text(json.dumps(docs))
    golden = {"name": "support-faq", "k": 10, "queries": queries}
    (pytester.path / "tests" / "retrieval" / "golden.json").write_text(json.dumps(golden))


def test_record_on_main_then_a_pull_request_with_a_regression_fails(
    pytester: pytest.Pytester,
) -> None:
    """The README's record command on main, then its GitHub job's command on two pull
    requests: an unchanged retriever passes; one that lost a third of its relevant documents
    fails, naming the regression and the queries."""
    gate_project(pytester)
    workflow = yaml.safe_load(example("gate-github-actions"))
    (job,) = workflow["jobs"].values()
    (gate,) = [
        shlex.split(step["run"])[1:]
        for step in job["steps"]
        if step.get("run", "").startswith("pytest")
    ]
    # before main has a baseline, the job cannot compare: it fails rather than pass silently
    missing = pytester.runpytest_subprocess(*gate)
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*missing baseline*"])

    (record,) = commands(example("gate-record"), "pytest")
    recorded = pytester.runpytest_subprocess(*record)
    recorded.assert_outcomes(passed=1)
    assert (pytester.path / "tests/retrieval/golden.json.baseline.json").is_file()

    unchanged = pytester.runpytest_subprocess(*gate)
    unchanged.assert_outcomes(passed=1)

    docs = json.loads((pytester.path / "tests" / "docs.json").read_text())
    # the change under review drops the "reference" documents of two topics in three
    kept = [d for d in docs if not (d["id"].endswith("b") and int(d["id"][1:-1]) % 3)]
    (pytester.path / "tests" / "docs.json").write_text(json.dumps(kept))
    regressed = pytester.runpytest_subprocess(*gate)
    regressed.assert_outcomes(failed=1)
    assert regressed.ret == 1
    regressed.stdout.fnmatch_lines(
        [
            "retrieval regression: *recall@10 dropped*",
            "*worse on recall@10*",
            "retrieval verdict: FAILED*",
        ]
    )


def test_the_set_up_commands_run_the_example_and_the_ci_test_command() -> None:
    """The README's two set-up commands: the first's pytest run passes here as written
    (from the repository root, with this venv); the second's is the test command CI runs."""
    block = example("setup-commands")
    (example_run, suite_run) = commands(block.replace(".venv/bin/pytest", "pytest"), "pytest")
    assert suite_run == ["tests", "-n", "2"]
    assert "pytest tests -n 2\n" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert re.findall(r"install -e '\.\[(\w+)\]'", block) == ["example", "dev"]
    assert {"example", "dev"} <= extras.keys()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *example_run],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-2000:]
    assert "retrieval verdict: PASSED" in result.stdout


# ---------------------------------------------------------------------------- reference/api.md


PERFECT_RETRIEVER = """
import json
import pathlib

import pytest


@pytest.fixture(scope="session")
def retriever():
    golden = json.loads((pathlib.Path(__file__).parent / "golden.json").read_text())
    answers = {q["query"]: q["relevant"] for q in golden["queries"]}
    return lambda query, k: answers[query][:k]
"""

API_GOLDEN = {
    "name": "api",
    "k": 10,
    "queries": [{"id": f"q{n}", "query": f"question {n}", "relevant": [f"d{n}"]} for n in range(5)],
}


def test_the_marker_example_runs_in_a_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(PERFECT_RETRIEVER)
    (pytester.path / "golden.json").write_text(json.dumps(API_GOLDEN))
    pytester.makepyfile(test_search=example("api-marker-test"))
    result = pytester.runpytest_subprocess("test_search.py")
    result.assert_outcomes(passed=1)


def test_the_library_example_runs_without_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "golden.json").write_text(json.dumps(API_GOLDEN))
    monkeypatch.chdir(tmp_path)
    answers = {q["query"]: q["relevant"] for q in API_GOLDEN["queries"]}  # type: ignore[index]

    def search(query: str, k: int) -> list[str]:
        return answers[query][:k]

    exec(compile(example("api-library"), "api.md", "exec"), {"search": search})
    printed = capsys.readouterr().out.split()
    assert printed[0] == "1.0" and printed[-1] == "True"


# ---------------------------------------------------------------------------- links and facts


def anchors(page: Path) -> set[str]:
    """The ids the site gives ``page``'s headings (MkDocs' toc extension)."""
    html = markdown.Markdown(
        extensions=[
            "toc",
            "attr_list",
            "tables",
            "admonition",
            "pymdownx.details",
            "pymdownx.superfences",
            "md_in_html",
        ]
    ).convert(SNIPPET.sub("", page.read_text(encoding="utf-8")))
    return set(re.findall(r'id="([^"]+)"', html))


def test_the_readme_links_resolve() -> None:
    """The README is outside the site's build: its links to files and to headings of the
    docs pages are checked here."""
    text = "\n".join(line for _, line in _outside_fences(README.read_text(encoding="utf-8")))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path
        if not page.exists() or (anchor and anchor not in anchors(page)):
            broken.append(target)
    assert len(re.findall(r"\]\((docs/[^)]+)\)", text)) > 10
    assert not broken, f"README links to nothing: {broken}"


def test_a_broken_link_or_anchor_fails_the_ci_build(tmp_path: Path) -> None:
    """``.ci/run``'s own mkdocs command, on a copy of the site with one anchor misspelt."""
    (command,) = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if "mkdocs build" in line and not line.startswith("#")
    ]
    assert "--strict" in command and "--quiet" not in command
    for name in ("mkdocs.yml", "README.md", "CHANGELOG.md", "ARCHITECTURE.md"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    shutil.copytree(DOCS, tmp_path / "docs")
    schema = "src/pytest_retrieval/schema/report.schema.json"
    (tmp_path / schema).parent.mkdir(parents=True)
    (tmp_path / schema).write_bytes((ROOT / schema).read_bytes())
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def build() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    intact = build()
    assert intact.returncode == 0, intact.stderr[-3000:]
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text().replace("(gates.md)", "(gates.md#no-such-heading)"))
    broken = build()
    assert broken.returncode != 0
    assert "no-such-heading" in broken.stderr


def table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for _, line in _outside_fences(text)
        if re.match(r"\s*\|.*\|\s*$", line) and not re.match(r"\s*\|[\s:|-]+\|\s*$", line)
    ]


def test_the_metrics_page_names_trec_evals_measures_as_the_code_does() -> None:
    from pytest_retrieval.metrics import FAMILIES

    rows = {
        match[1]: row
        for row in table_rows((DOCS / "metrics.md").read_text(encoding="utf-8"))
        if (match := re.match(r"\[`(\w+)@k`\]", row[0]))
    }
    for name, family in FAMILIES.items():
        if family.labels != "golden":
            continue
        assert name in rows, f"metrics.md's table lacks {name}@k"
        if family.trec_eval:
            measure = family.trec_eval.split()[0]
            assert f"`{measure}" in rows[name][2], (name, family.trec_eval, rows[name][2])


def test_the_readme_size_table_is_the_measured_operating_characteristic() -> None:
    """The README's sizes are the "fails 80% at" column of the gates page's measured table."""
    readme = {
        row[0].split()[0]: row[1].split()[0]
        for row in table_rows(README.read_text(encoding="utf-8"))
        if row[0].endswith("queries")
    }
    measured = {
        row[0]: row[-1]
        for row in table_rows((DOCS / "gates.md").read_text(encoding="utf-8"))
        if row[0].replace(",", "").isdigit() and row[-1].startswith("~")
    }
    assert readme and readme.items() <= measured.items(), (readme, measured)
