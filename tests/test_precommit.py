"""Our two pre-commit hooks, run by the real ``pre-commit`` in scratch git repositories,
configured the way docs/recipes.md tells users to (``repo:`` + ``rev:``, overrides in the
config).

The hook repository is a commit of this working tree (manifest, package, and the README its
metadata names), so the tests see uncommitted changes. For ``pytest-retrieval-validate``
pre-commit builds a virtualenv and pip-installs the package from PyPI: slow, so the hook
repository and ``PRE_COMMIT_HOME`` are built once and shared by the tests and by the xdist
workers of one run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from filelock import FileLock
from helpers import GOLDEN, KEYWORD_RETRIEVER

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ["pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "src"]
TIMEOUT = 900  # seconds; the first run builds the hook's environment from PyPI

pytestmark = [pytest.mark.slow, pytest.mark.precommit]


@dataclass(frozen=True)
class HookRepo:
    path: Path
    rev: str
    env: dict[str, str]


def git(cwd: Path, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def isolated_env(pre_commit_home: Path) -> dict[str, str]:
    """The environment for git, pre-commit and the pytest it starts: this venv's ``pytest``
    first on PATH, no user git config, and none of the outer run's pytest, CI or judge
    variables."""
    dropped = ("PYTEST_", "OPENAI_", "AZURE_OPENAI_", "GITHUB_", "GIT_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        PRE_COMMIT_HOME=str(pre_commit_home),
        PRE_COMMIT_COLOR="never",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="test",
        GIT_AUTHOR_EMAIL="test@example.com",
        GIT_COMMITTER_NAME="test",
        GIT_COMMITTER_EMAIL="test@example.com",
    )
    return env


@pytest.fixture(scope="session")
def hook_repo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> HookRepo:
    """A git repository holding this working tree's hooks and package, built once per run."""
    shared = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):
        shared = shared.parent  # the xdist workers' base temps share this parent
    root = shared / "pre-commit-hooks"
    env = isolated_env(root / "home")
    with FileLock(f"{root}.lock"):
        rev_file = root / "rev"
        if not rev_file.exists():
            shutil.rmtree(root, ignore_errors=True)  # a build that died half-way
            repo = root / "repo"
            repo.mkdir(parents=True)
            for name in SNAPSHOT:
                source = ROOT / name
                if source.is_dir():
                    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
                    shutil.copytree(source, repo / name, ignore=ignore)
                else:
                    shutil.copy2(source, repo / name)
            git(repo, "init", "-q", env=env)
            git(repo, "add", ".", env=env)
            git(repo, "commit", "-q", "-m", "snapshot of the working tree", env=env)
            rev_file.write_text(git(repo, "rev-parse", "HEAD", env=env), encoding="utf-8")
    return HookRepo(root / "repo", rev_file.read_text(encoding="utf-8"), env)


class Scratch:
    """A user's repository with a .pre-commit-config.yaml naming one of our hooks."""

    def __init__(self, path: Path, hooks: HookRepo) -> None:
        self.path, self.hooks = path, hooks
        git(path, "init", "-q", env=hooks.env)

    def write(self, name: str, content: Any) -> None:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content, indent=1)
        target.write_text(text, encoding="utf-8")

    def run(self, hook_id: str, **overrides: Any) -> subprocess.CompletedProcess[str]:
        """``pre-commit run HOOK --all-files``, the hook configured with ``overrides``."""
        repo = {"repo": str(self.hooks.path), "rev": self.hooks.rev}
        config = {"repos": [{**repo, "hooks": [{"id": hook_id, **overrides}]}]}
        self.write(".pre-commit-config.yaml", yaml.safe_dump(config))
        git(self.path, "add", ".", env=self.hooks.env)
        command = [sys.executable, "-m", "pre_commit", "run", hook_id, "--all-files", "--verbose"]
        return subprocess.run(
            command,
            cwd=self.path,
            env=self.hooks.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT,
        )


@pytest.fixture
def scratch(tmp_path: Path, hook_repo: HookRepo) -> Scratch:
    return Scratch(tmp_path, hook_repo)


def test_validate_hook_checks_golden_sets_and_nothing_else(scratch: Scratch) -> None:
    """A golden set, its baseline, a report and a BEIR folder: the hook validates the golden
    set and the BEIR qrels (as their folder) and never reads the baseline, the report or the
    BEIR corpus and queries, none of which is a golden set. A broken golden set fails with
    the plugin's message; `files:` in the user's config picks other names."""
    scratch.write("golden.json", GOLDEN)
    scratch.write("golden.json.baseline.json", {"version": 1, "entries": {}})
    scratch.write("retrieval.json", {"evaluations": []})
    scratch.write("beir/corpus.jsonl", '{"_id": "d1", "title": "", "text": "apple pie"}\n')
    scratch.write("beir/queries.jsonl", '{"_id": "q1", "text": "apple"}\n')
    scratch.write("beir/qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    ran = scratch.run("pytest-retrieval-validate")
    assert ran.returncode == 0, ran.stdout
    assert "golden.json: valid golden set 'fruit'" in ran.stdout
    assert "valid golden set 'beir'" in ran.stdout
    checked = [line.split(":")[0] for line in ran.stdout.splitlines() if ": valid" in line]
    assert sorted(checked) == ["beir/qrels/test.tsv", "golden.json"], ran.stdout  # what it got
    assert "not a golden set" not in ran.stdout

    broken = {"queries": [{"query": "apple", "relevent": ["d1"]}]}
    scratch.write("golden.json", broken)
    ran = scratch.run("pytest-retrieval-validate")
    assert ran.returncode == 1, ran.stdout
    assert "golden set golden.json, /queries/0" in ran.stdout
    assert "relevent" in ran.stdout
    assert "Traceback" not in ran.stdout

    scratch.write("evals/support.json", GOLDEN)
    ran = scratch.run("pytest-retrieval-validate", files=r"^evals/.*\.json$")
    assert ran.returncode == 0, ran.stdout  # the broken golden.json no longer matches
    assert "evals/support.json: valid golden set 'fruit'" in ran.stdout


def test_gate_hook_runs_only_the_golden_evaluation(scratch: Scratch) -> None:
    """No golden set configured: the hook fails and says so (it used to run the whole suite
    and pass). Configured in the ini: it runs the golden evaluation alone (a failing unit
    test in the same repository does not run), and it fails when a threshold does."""
    scratch.write("conftest.py", KEYWORD_RETRIEVER)
    scratch.write("golden.json", GOLDEN)
    scratch.write("test_unit.py", "def test_unit():\n    assert False\n")
    ran = scratch.run("pytest-retrieval")
    assert ran.returncode != 0, ran.stdout
    assert "ERROR: --retrieval-only: no golden set is configured" in ran.stdout

    scratch.write("pytest.ini", "[pytest]\nretrieval_golden = golden.json\n")
    ran = scratch.run("pytest-retrieval")
    assert ran.returncode == 0, ran.stdout
    assert "fruit [retriever] · 4 queries" in ran.stdout
    assert "1 passed" in ran.stdout
    assert "test_unit" not in ran.stdout

    ran = scratch.run("pytest-retrieval", args=["--retrieval-threshold", "precision@3=0.9"])
    assert ran.returncode == 1, ran.stdout
    assert "FAILED golden.json::retrieval" in ran.stdout
