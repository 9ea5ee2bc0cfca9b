"""No output is written through a symlink to a place outside the project (pytest's rootdir;
the working directory for the command line) unless the user says so: a link committed to a
repository (``reports/ -> ~``, ``golden.json.baseline.json -> ~/.bashrc``) would otherwise
make CI overwrite what it points to. The refusal is a usage error before anything is
written, naming the option, the link, its target and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import KEYWORD_RETRIEVER, write_golden

PRECIOUS = "export PATH=$HOME/bin:$PATH\n"
RUN = "apple Q0 d1 1 2.0 bm25\napple Q0 d4 2 1.0 bm25\n"


@pytest.fixture
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside every project of these tests, with a file someone cares about."""
    folder = tmp_path_factory.mktemp("home")
    (folder / ".bashrc").write_text(PRECIOUS, encoding="utf-8")
    return folder


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    write_golden(pytester)
    (pytester.path / "in.trec").write_text(RUN, encoding="utf-8")
    return pytester.path


def refused(result: pytest.RunResult, option: str, link: str, target: Path) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(
        [
            f"ERROR: {option} * would be written through the symlink {link} to {target}, "
            "outside the project (*): nothing is written; remove the link, write the output "
            "inside the project, or pass --retrieval-allow-outside-links if the link is meant"
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize(
    ("args", "option", "link"),
    [
        (["--retrieval-update-baseline"], "the baseline to record", "golden.json.baseline.json"),
        (
            ["--retrieval-baseline", "base.json", "--retrieval-update-baseline"],
            "the baseline to record",
            "base.json",
        ),
        (["--retrieval-report", "r.json"], "--retrieval-report", "r.json"),
        (["--retrieval-markdown", "r.json"], "--retrieval-markdown", "r.json"),
        (["--retrieval-html", "r.json"], "--retrieval-html", "r.json"),
        (["--retrieval-export-run", "r.json"], "--retrieval-export-run", "r.json"),
        (["--junitxml", "r.json"], "--junitxml", "r.json"),
    ],
)
def test_pytest_refuses_to_write_through_a_link_out_of_the_project(
    pytester: pytest.Pytester,
    project: Path,
    outside: Path,
    args: list[str],
    option: str,
    link: str,
) -> None:
    (project / link).symlink_to(outside / ".bashrc")
    result = pytester.runpytest("--retrieval-golden", "golden.json", *args)
    refused(result, option, link, outside / ".bashrc")
    assert (outside / ".bashrc").read_text(encoding="utf-8") == PRECIOUS
    assert sorted(p.name for p in outside.iterdir()) == [".bashrc"]


def test_a_folder_link_out_of_the_project_is_refused_too(
    pytester: pytest.Pytester, project: Path, outside: Path
) -> None:
    (project / "reports").symlink_to(outside)
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", "reports/r.json"
    )
    refused(result, "--retrieval-report", "reports", outside / "r.json")
    assert sorted(p.name for p in outside.iterdir()) == [".bashrc"]


@pytest.mark.parametrize("link", ["cache", "cache/judge.sqlite"])
def test_the_judge_cache_is_an_output_too(
    pytester: pytest.Pytester, project: Path, outside: Path, link: str
) -> None:
    """The folder, or a file SQLite would open in it (a link there is followed by SQLite)."""
    if link == "cache":
        (project / "cache").symlink_to(outside)
        target = outside
    else:
        (project / "cache").mkdir()
        (project / link).symlink_to(outside / ".bashrc")
        target = outside / ".bashrc"
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-judge",
        "--retrieval-judge-fallback", "cache-only", "--retrieval-judge-cache", "cache",
    )  # fmt: skip
    refused(result, "the judge cache", link, target)
    assert sorted(p.name for p in outside.iterdir()) == [".bashrc"]
    assert (outside / ".bashrc").read_text(encoding="utf-8") == PRECIOUS


@pytest.mark.parametrize("how", ["option", "ini"])
def test_asked_for_the_link_is_written_through(
    pytester: pytest.Pytester, project: Path, outside: Path, how: str
) -> None:
    (project / "base.json").symlink_to(outside / "shared.baseline.json")
    args = ["--retrieval-baseline", "base.json", "--retrieval-update-baseline"]
    if how == "option":
        args.append("--retrieval-allow-outside-links")
    else:
        pytester.makeini("[pytest]\nretrieval_allow_outside_links = true\n")
    result = pytester.runpytest("--retrieval-golden", "golden.json", *args)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert (project / "base.json").is_symlink()
    assert json.loads((outside / "shared.baseline.json").read_text())["entries"]


def test_a_link_inside_the_project_is_written_through(
    pytester: pytest.Pytester, project: Path
) -> None:
    (project / "baselines").mkdir()
    (project / "base.json").symlink_to(project / "baselines" / "main.json")
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-baseline", "base.json",
        "--retrieval-update-baseline",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert json.loads((project / "baselines" / "main.json").read_text())["entries"]


# ---------------------------------------------------------------- the command line


def cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_retrieval", *argv], cwd=cwd, capture_output=True,
        text=True, timeout=120, env={**os.environ, "OPENAI_API_KEY": ""},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["eval", "golden.json", "in.trec", "--report", "link.json"], "--report"),
        (["eval", "golden.json", "in.trec", "--html", "link.json"], "--html"),
        (
            ["eval", "golden.json", "in.trec", "--baseline", "link.json", "--update-baseline"],
            "--baseline",
        ),
        (["convert", "golden.json", "-o", "link.json", "--force"], "-o"),
        (["eval", "golden.json", "in.trec", "--update-baseline"], "the baseline to record"),
        (["synth", "corpus.jsonl", "--queries", "5", "-o", "link.json", "--force"], "-o"),
        (["pool", "golden.json", "r.json", "-o", "link.json"], "-o"),
        (["apply", "review.jsonl", "golden.json", "-o", "link.json"], "-o"),
    ],
)
def test_commands_refuse_to_write_through_a_link_out_of_the_working_directory(
    project: Path, outside: Path, argv: list[str], option: str
) -> None:
    link = "golden.json.baseline.json" if "the baseline" in option else "link.json"
    (project / link).symlink_to(outside / ".bashrc")
    (project / "corpus.jsonl").write_text('{"_id": "d1", "text": "apple"}\n', encoding="utf-8")
    done = cli(project, *argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"{option} {link} would be written through the symlink {link} to "
        f"{outside / '.bashrc'}, outside the project ({project.resolve()}): nothing is "
        "written; remove the link, write the output inside the project, or pass "
        "--allow-outside-links if the link is meant"
    ) in done.stderr
    assert "Traceback" not in done.stderr
    assert (outside / ".bashrc").read_text(encoding="utf-8") == PRECIOUS


def test_a_command_asked_writes_through_the_link(project: Path, outside: Path) -> None:
    (project / "link.json").symlink_to(outside / "report.json")
    done = cli(project, "eval", "golden.json", "in.trec", "--report", "link.json",
               "--allow-outside-links")  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    assert json.loads((outside / "report.json").read_text())["evaluations"]


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to own a link as another"
)
def test_a_link_another_user_planted_outside_the_project_is_refused(
    pytester: pytest.Pytester, project: Path, outside: Path
) -> None:
    """An output named outside the project (/tmp/report.json) may be a link of this user's
    or root's (/dev/stdout), not one another user planted there to make it write elsewhere."""
    pytester.makeini("[pytest]\n")  # the rootdir, whatever the paths given
    planted = outside / "report.json"
    planted.symlink_to(outside / ".bashrc")
    os.lchown(planted, 65534, 65534)
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", str(planted)
    )
    refused(result, "--retrieval-report", str(planted), outside / ".bashrc")
    assert (outside / ".bashrc").read_text(encoding="utf-8") == PRECIOUS
    os.lchown(planted, os.getuid(), os.getgid())  # the user's own link: followed
    result = pytester.runpytest(
        "--retrieval-golden", "golden.json", "--retrieval-report", str(planted)
    )
    assert result.ret == 0, result.stderr.str()
    assert json.loads((outside / ".bashrc").read_text())["evaluations"]


DOWNSTREAM = (
    KEYWORD_RETRIEVER
    + """

@pytest.fixture(scope="session")
def retrieval_downstream():
    return lambda query, doc_id, text: 1.0
"""
)


def test_the_downstream_label_cache_is_not_written_through_a_link_out(
    pytester: pytest.Pytester, outside: Path
) -> None:
    """Without a judge the labels are cached under pytest's cache dir: a link planted
    there (``.pytest_cache/d/retrieval-labels -> ~``) made SQLite write outside."""
    pytester.makeconftest(DOWNSTREAM)
    write_golden(pytester)
    (pytester.path / ".pytest_cache" / "d").mkdir(parents=True)
    (pytester.path / ".pytest_cache" / "d" / "retrieval-labels").symlink_to(outside)
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*the downstream label cache * would be written through the symlink*"]
    )
    assert sorted(p.name for p in outside.iterdir()) == [".bashrc"]
