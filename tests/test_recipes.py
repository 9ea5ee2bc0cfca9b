"""The recipes of ``docs/recipes.md`` work as written: CI files and hook configs that GitHub,
GitLab and pre-commit accept, commands whose every option exists, caches and baselines that
line up between the steps that write and read them, and the CI commands themselves run end to
end in the layout the recipes assume (``tests/retrieval/golden.json``, the retriever fixture
in ``tests/conftest.py``)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from docs_examples import DOCS, blocks_of, example
from helpers import write_golden
from judge_server import serve
from packaging.requirements import Requirement
from pre_commit.clientlib import load_config, load_manifest
from test_judge_plugin import KEY, TEXT_RETRIEVER

from pytest_retrieval.cli import _parser as cli_parser

ROOT = Path(__file__).resolve().parents[1]
#: the recipes page: its marked blocks are read with ``example(NAME)``, its prose for the
#: commands and options it names (the fast local checks are a section of it)
PAGE = DOCS / "recipes.md"
RECIPES = PAGE.read_text(encoding="utf-8")
HOOKS = ROOT / ".pre-commit-hooks.yaml"
VALIDATE = next(h for h in load_manifest(str(HOOKS)) if h["id"] == "pytest-retrieval-validate")
INSTALL = "pytest-retrieval @ git+https://github.com/OWNER/pytest-retrieval@REF"


def example_yaml(name: str) -> Any:
    return yaml.safe_load(example(name))


def ini() -> dict[str, str]:
    """The recipes' ``[tool.pytest.ini_options]`` keys and raw values."""
    block = example("recipes-pyproject")
    assert "[tool.pytest.ini_options]" in block
    return dict(re.findall(r"^(\w+) = (.+?)(?:\s+#.*)?$", block, re.MULTILINE))


def judge_cache_dir() -> str:
    return ini()["retrieval_judge_cache"].strip('"')


def github_steps() -> list[dict[str, Any]]:
    (job,) = example_yaml("recipes-github-actions")["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def gitlab_jobs() -> dict[str, dict[str, Any]]:
    """GitLab's jobs with ``extends`` applied as GitLab does (hashes merged deeply)."""
    document = example_yaml("recipes-gitlab")

    def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        merged = dict(base)
        for key, value in over.items():
            both = isinstance(value, dict) and isinstance(base.get(key), dict)
            merged[key] = merge(base[key], value) if both else value
        return merged

    jobs = {}
    for name, job in document.items():
        if not name.startswith("."):
            parent = job.get("extends")
            jobs[name] = merge(document[parent], job) if parent else job
    return jobs


def commands(program: str) -> list[list[str]]:
    """Every ``program`` command line of the recipes: CI steps and scripts, the hook
    manifest's entries (with their file argument), inline code in the prose."""
    lines = [step["run"] for step in github_steps() if "run" in step]
    for job in gitlab_jobs().values():
        lines += job["script"] + job.get("before_script", [])
    for hook in load_manifest(str(HOOKS)):
        lines.append(hook["entry"] + (" golden.json" if hook["pass_filenames"] else ""))
    prose = re.sub(r"^\s*```.*?^\s*```", "", RECIPES, flags=re.MULTILINE | re.DOTALL)
    lines += re.findall(r"`([^`]+)`", prose)
    found = []
    for line in lines:
        words = shlex.split(line.replace("\n", " "))
        if len(words) > 1 and words[0] == program:
            found.append(words[1:])
    return found


def test_every_recipe_block_parses() -> None:
    blocks = [block for block in blocks_of(PAGE) if block.language == "yaml"]
    assert len(blocks) >= 3
    for block in blocks:
        assert isinstance(yaml.safe_load(block.code), dict), block.where


def test_github_workflow_has_the_shape_github_expects() -> None:
    workflow = example_yaml("recipes-github-actions")
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"pull_request", "push", "schedule", "workflow_dispatch"}
    assert triggers["push"] == {"branches": ["main"]}
    assert [len(entry["cron"].split()) for entry in triggers["schedule"]] == [5]
    assert workflow["permissions"] == {"contents": "read"}  # no step writes to the repository
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    ids = {step["id"] for step in github_steps() if "id" in step}
    for step in github_steps():
        assert ("uses" in step) != ("run" in step), step
        assert set(step) <= {"name", "id", "if", "uses", "with", "run", "env"}, step
        if "uses" in step:
            assert re.fullmatch(r"actions/[a-z-]+(/[a-z]+)?@v\d+", step["uses"]), step
        for used in re.findall(r"steps\.([\w-]+)\.outputs", str(step.get("if", ""))):
            assert used in ids, f"{step} reads the outputs of an unknown step {used!r}"


def github_caches(path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The restore and the save steps of the cache holding ``path``."""
    steps = [s for s in github_steps() if s.get("with", {}).get("path") == path]
    restore = [s for s in steps if s["uses"].startswith("actions/cache/restore@")]
    save = [s for s in steps if s["uses"].startswith("actions/cache/save@")]
    return restore, save


def test_github_caches_meet_between_main_and_pull_requests() -> None:
    """Each cache is saved under a key per run and found again by its restore prefix; the
    judge cache is the ini's folder, the baseline the file the pytest commands use."""
    pytest_lines = [c for c in commands("pytest") if "--retrieval-baseline" in c]
    (baseline,) = {line[line.index("--retrieval-baseline") + 1] for line in pytest_lines}
    for path in (judge_cache_dir(), baseline):
        restore, save = github_caches(path)
        assert restore and save, f"{path} is restored and saved"
        for saved in save:
            assert "${{ github.run_id }}" in saved["with"]["key"]
            assert all(saved["with"]["key"].startswith(r["with"]["restore-keys"]) for r in restore)
    restore, save = github_caches(baseline)
    assert [s["if"] for s in restore] == ["github.event_name == 'pull_request'"]
    assert [s["if"] for s in save] == ["github.event_name != 'pull_request'"]  # main's, if green


def test_github_pull_requests_fall_back_to_cached_verdicts_and_main_records() -> None:
    gate = {step.get("name"): step for step in github_steps()}
    pull_request, record = gate["Retrieval gate"], gate["Record the baseline"]
    assert pull_request["if"] == "github.event_name == 'pull_request'"
    assert record["if"] == "github.event_name != 'pull_request'"
    assert "--retrieval-judge-fallback cache-only" in pull_request["run"]
    assert "--retrieval-strict-baseline" in pull_request["run"]  # no baseline: no silent pass
    assert "--retrieval-strict-baseline" not in record["run"]
    assert "--retrieval-update-baseline" in record["run"]
    assert "--retrieval-judge-fallback" not in record["run"]  # main without the secret: error
    for step in (pull_request, record):
        assert step["env"] == {"OPENAI_API_KEY": "${{ secrets.OPENAI_API_KEY }}"}


def test_gitlab_ci_has_the_shape_gitlab_expects() -> None:
    jobs = gitlab_jobs()
    assert set(jobs) == {"retrieval-baseline", "retrieval"}
    allowed = {"extends", "image", "before_script", "script", "rules", "cache", "artifacts"}
    allowed.add("resource_group")
    for name, job in jobs.items():
        assert set(job) <= allowed, name
        assert all(isinstance(line, str) for line in job["script"] + job["before_script"]), name
        assert all(set(rule) == {"if"} for rule in job["rules"]), name
        assert job["artifacts"]["reports"] == {"junit": "junit.xml"}
        for cache in job["cache"]:
            assert set(cache) <= {"key", "paths", "policy", "when", "unprotect", "fallback_keys"}
            assert cache["unprotect"] is True  # merge requests read what protected main wrote
            assert cache.get("policy", "pull-push") in {"pull", "push", "pull-push"}
            assert cache.get("when", "on_success") in {"on_success", "on_failure", "always"}
    main, merge_request = jobs["retrieval-baseline"], jobs["retrieval"]
    assert main["rules"] == [{"if": "$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"}]
    assert merge_request["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'}]
    assert "--retrieval-update-baseline" in main["script"][-1]
    assert "--retrieval-judge-fallback cache-only" in merge_request["script"][-1]
    main_keys = {c["key"]: c for c in main["cache"]}
    for cache in merge_request["cache"]:  # a merge request finds what main pushed
        key = next(k for k in [cache["key"], *cache.get("fallback_keys", [])] if k in main_keys)
        assert cache["paths"] == main_keys[key]["paths"]
        assert main_keys[key].get("policy", "pull-push") == "pull-push"
    assert [judge_cache_dir()] in [c["paths"] for c in main["cache"]]
    baseline = {
        "key": "retrieval-baseline",
        "paths": ["retrieval-baseline.json"],
        "unprotect": True,
    }
    assert baseline in main["cache"]  # cached only when main's job succeeds (default `when`)


def test_installs_name_the_git_repository() -> None:
    """The package is not on PyPI: every install names it by URL, with the placeholders."""
    installs = {tuple(line) for line in commands("pip") if line[0] == "install"}
    assert len(installs) == 1  # GitHub's step and GitLab's before_script, alike
    for line in installs:
        named = [word for word in line if word.startswith("pytest-retrieval")]
        assert named == [INSTALL]
        assert Requirement(INSTALL).url == "git+https://github.com/OWNER/pytest-retrieval@REF"
    assert "`OWNER/pytest-retrieval`" in RECIPES and "`REF`" in RECIPES


def test_precommit_recipe_is_a_valid_config_of_our_hooks(tmp_path: Path) -> None:
    config = tmp_path / ".pre-commit-config.yaml"
    config.write_text(example("recipes-pre-commit"), encoding="utf-8")
    (repo,) = load_config(str(config))["repos"]  # pre-commit's own schema check
    assert repo["repo"] == "https://github.com/OWNER/pytest-retrieval" and repo["rev"] == "REF"
    ids = {hook["id"] for hook in load_manifest(str(HOOKS))}
    assert {hook["id"] for hook in repo["hooks"]} == ids


def test_every_pytest_command_parses(pytester: pytest.Pytester) -> None:
    """Each command line is accepted by pytest's own parser (options and their choices)."""
    found = commands("pytest")
    assert len(found) >= 6
    for line in found:
        pytester.parseconfig(*line)


def test_every_retrieval_option_and_ini_key_exists(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    known = set(re.findall(r"--retrieval-[a-z-]*[a-z]", result.stdout.str()))
    mentioned = set(re.findall(r"--retrieval-[a-z-]*[a-z]", RECIPES))
    assert mentioned and mentioned <= known, mentioned - known
    config = pytester.parseconfig()
    for key in ini():
        config.getini(key)  # ValueError for an unknown key


def test_every_cli_command_parses() -> None:
    found = commands("pytest-retrieval")
    assert {line[0] for line in found} == {"validate"}
    for line in found:
        cli_parser().parse_args(line)


@pytest.mark.parametrize(
    ("path", "golden"),
    [
        ("golden.json", True),
        ("golden.jsonl", True),
        ("tests/golden.json", True),
        ("evals/support.golden.json", True),
        ("evals/support.golden.jsonl", True),
        ("golden/faq.golden.json", True),
        ("golden/faq.json", False),  # corpora, reports and renamed baselines live there too
        ("tests/retrieval/golden/docs.jsonl", False),
        ("golden/retrieval-report.json", False),
        ("golden/retrieval-baseline.json", False),
        ("data/scifact/qrels/test.tsv", True),
        ("data/robust04.qrels", True),
        ("golden.json.baseline.json", False),
        ("tests/golden/faq.json.baseline.json", False),
        ("evals/support.golden.json.baseline.json", False),
        ("retrieval-baseline.json", False),
        ("data/scifact/corpus.jsonl", False),
        ("data/scifact/queries.jsonl", False),
        ("golden/corpus.jsonl", False),
        ("golden/queries.jsonl", False),
        ("retrieval.json", False),
        ("golden-report.json", False),
        ("package.json", False),
        ("tests/golden_ratio.py", False),
        ("golden/README.md", False),
        ("golden/scifact/qrels.json", False),
        (".retrieval-judge-cache/verdicts.json", False),
    ],
)
def test_validate_hook_matches_golden_names_only(path: str, golden: bool) -> None:
    """The filter pre-commit applies: ``files`` searched, then ``exclude`` searched."""
    chosen = re.search(VALIDATE["files"], path) and not re.search(VALIDATE["exclude"], path)
    assert bool(chosen) is golden


@pytest.fixture
def judge_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A local judge endpoint; the test decides when the credentials are set."""
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "AZURE_OPENAI_API_KEY",
        "GITHUB_STEP_SUMMARY",
    ):
        monkeypatch.delenv(name, raising=False)
    with serve() as running:
        yield running.base_url


def ci_commands(ci: str) -> tuple[list[str], list[str]]:
    """(main's recording command, the pull request's gate command) of one recipe."""
    if ci == "github":
        lines = [shlex.split(step["run"]) for step in github_steps() if "run" in step]
    else:
        lines = [shlex.split(job["script"][-1]) for job in gitlab_jobs().values()]
    pytest_lines = [line[1:] for line in lines if line and line[0] == "pytest"]
    (record,) = [line for line in pytest_lines if "--retrieval-update-baseline" in line]
    (gate,) = [line for line in pytest_lines if "--retrieval-update-baseline" not in line]
    return record, gate


def test_gitlab_runs_the_same_commands_as_github() -> None:
    assert ci_commands("gitlab") == ci_commands("github")


@pytest.mark.slow  # six pytest processes
def test_ci_commands_run_as_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, judge_env: str
) -> None:
    """In a project configured with the recipes' ini block, in the layout they assume (the
    golden set in tests/retrieval/, the fixture in tests/conftest.py): main records the
    baseline and fills the judge cache; a pull request without the secret is graded from that
    cache with a warning and compared with the baseline; main without the secret stops with a
    usage error. A failing unit test in the project never runs."""
    (pytester.path / "pyproject.toml").write_text(example("recipes-pyproject"), encoding="utf-8")
    (golden,) = ini()["retrieval_golden"].strip("[]").split(",")
    golden = golden.strip().strip('"')
    assert golden == "tests/retrieval/golden.json"
    (pytester.path / "tests" / "retrieval").mkdir(parents=True)
    (pytester.path / "tests" / "conftest.py").write_text(TEXT_RETRIEVER, encoding="utf-8")
    write_golden(pytester, name=golden)
    pytester.makepyfile(**{"tests/test_unit": "def test_unit():\n    assert False\n"})
    record, gate = ci_commands("github")

    result = pytester.runpytest_subprocess(*record)
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # no secret on main: say so, do not degrade
    result.stderr.fnmatch_lines(["*--retrieval-judge: no credentials for the LLM judge*"])

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", judge_env)
    result = pytester.runpytest_subprocess(*record)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*baseline written: retrieval-baseline.json*"])
    assert (pytester.path / judge_cache_dir()).is_dir()

    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    result = pytester.runpytest_subprocess(*gate)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*--retrieval-judge-fallback cache-only: using cached verdicts only*",
            "*otr@3 *",
            "*vs baseline retrieval-baseline.json*",
        ]
    )
    assert "test_unit" not in result.stdout.str()
    for output in ("retrieval.json", "retrieval.html", "junit.xml"):
        assert (pytester.path / output).is_file(), output
