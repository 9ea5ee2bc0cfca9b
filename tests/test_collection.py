"""Golden sets are collected through pytest's own tree, as in a team's existing repository:
fixtures in nested conftest files, files outside the rootdir, re-runnable node ids, markers,
``--retrieval-only``, and partial runs decided from the items."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import GOLDEN, KEYWORD_RETRIEVER

#: a retriever fixture with two parameters; "broken" finds nothing
PARAMETRIZED = """
import pytest

DOCS = {"d1": "apple pie", "d2": "bread recipe", "d3": "cherry tart", "d4": "apple cider",
        "d5": "bread machine", "d6": "cherry juice"}

def search(query, k):
    words = set(query.split())
    return sorted(DOCS, key=lambda d: (-len(words & set(DOCS[d].split())), d))[:k]

@pytest.fixture(scope="session", params=["keyword", "broken"])
def retriever(request):
    return search if request.param == "keyword" else (lambda query, k: [])
"""


def _golden(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(GOLDEN), encoding="utf-8")
    return path


def _repo(pytester: pytest.Pytester, conftest_dir: str = "tests") -> Path:
    """A team's layout: unit tests, the retriever fixture in a nested conftest.py."""
    (pytester.path / conftest_dir).mkdir(parents=True, exist_ok=True)
    (pytester.path / conftest_dir / "conftest.py").write_text(KEYWORD_RETRIEVER)
    (pytester.path / "tests" / "test_unit.py").write_text("def test_unit():\n    pass\n")
    return _golden(pytester.path / "tests" / "retrieval" / "golden.json")


@pytest.mark.parametrize("conftest_dir", ["tests", "tests/retrieval"])
def test_fixture_in_a_nested_conftest_is_found(
    pytester: pytest.Pytester, conftest_dir: str
) -> None:
    _repo(pytester, conftest_dir)
    result = pytester.runpytest("--retrieval-golden", "tests/retrieval/golden.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*verdict: PASSED*"])


def test_missing_fixture_names_the_conftest_files_that_would_cover_it(
    pytester: pytest.Pytester,
) -> None:
    _golden(pytester.path / "evals" / "golden.json")
    result = pytester.runpytest("--retrieval-golden", "evals/golden.json")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*no fixture named 'retriever'*", "*conftest.py, evals/conftest.py*"]
    )
    assert "INTERNALERROR" not in result.stdout.str()


@pytest.mark.parametrize("ini", [False, True])
def test_a_fixture_in_a_conftest_that_does_not_cover_the_golden_set_is_named(
    pytester: pytest.Pytester, ini: bool
) -> None:
    """The first thing a team tries: golden.json at the root, the retriever fixture in
    tests/conftest.py. pytest cannot see it from the root, whether tests/ was collected
    (its conftest.py imported: the ini's testpaths) or not (the golden file as the only
    path); the message names where it is and the two ways to fix it."""
    _golden(pytester.path / "golden.json")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "conftest.py").write_text(KEYWORD_RETRIEVER)
    (pytester.path / "tests" / "test_unit.py").write_text("def test_unit():\n    pass\n")
    (pytester.path / "evals").mkdir()  # one more, named through name=: also found
    (pytester.path / "evals" / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture(name='retriever')\ndef _search():\n"
        "    return lambda query, k: []\n"
    )
    (pytester.path / ".venv" / "lib").mkdir(parents=True)  # not walked into
    (pytester.path / ".venv" / "lib" / "conftest.py").write_text(KEYWORD_RETRIEVER)
    if ini:
        pytester.makeini(
            "[pytest]\nretrieval_golden = golden.json\ntestpaths = tests golden.json\n"
        )
        result = pytester.runpytest()
    else:
        result = pytester.runpytest("--retrieval-golden=golden.json", "golden.json")
    result.assert_outcomes(errors=1, passed=1 if ini else 0)
    result.stdout.fnmatch_lines(
        [
            "*no fixture named 'retriever'*",
            "  a fixture named 'retriever' is defined in evals/conftest.py and "
            "tests/conftest.py, which pytest applies only to the tests under their own "
            "folder: golden.json is not under one.",
            "  fix: move the golden set into one of those folders (e.g. evals/golden.json), "
            "or the fixture into conftest.py",
        ]
    )
    assert ".venv" not in result.stdout.str()


def test_a_fixture_pytest_did_not_apply_where_it_covers_is_not_misnamed(
    pytester: pytest.Pytester,
) -> None:
    """A conftest.py in the golden set's own folders that defines the fixture yet was not
    applied (a fixture method in a class, --noconftest) is not "elsewhere": moving the
    golden set "into that folder" would be no fix; the generic message stays. One far down
    a deep tree beside tests/ does not hide tests/conftest.py (the walk goes level by
    level)."""
    _golden(pytester.path / "golden.json")
    (pytester.path / "conftest.py").write_text(
        "import pytest\n\nclass Helpers:\n    @pytest.fixture\n    def retriever(self):\n"
        "        return lambda query, k: []\n"
    )
    result = pytester.runpytest("--retrieval-golden=golden.json", "golden.json")
    result.assert_outcomes(errors=1)
    assert "is defined in" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*fix: define it in a conftest.py that covers this golden set*"])
    (pytester.path / "conftest.py").unlink()
    deep = pytester.path / "data"
    for a in range(80):
        for b in range(70):
            (deep / f"a{a}" / f"b{b}").mkdir(parents=True)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "conftest.py").write_text(KEYWORD_RETRIEVER)
    result = pytester.runpytest("--retrieval-golden=golden.json", "golden.json")
    result.stdout.fnmatch_lines(["*a fixture named 'retriever' is defined in tests/conftest.py*"])


def test_golden_file_outside_the_rootdir(pytester: pytest.Pytester) -> None:
    project = pytester.path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(KEYWORD_RETRIEVER)
    (project / "pytest.ini").write_text("[pytest]\n")
    outside = _golden(pytester.path / "shared" / "golden.json")
    pytester.chdir()
    result = pytester.runpytest(
        "--rootdir",
        str(project),
        "-c",
        str(project / "pytest.ini"),
        str(project),
        "--retrieval-golden",
        str(outside),
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*verdict: PASSED*"])


@pytest.mark.parametrize("xdist", [False, True], ids=["inprocess", "xdist"])
def test_golden_sets_outside_the_rootdir_keep_their_own_node_ids(
    pytester: pytest.Pytester, xdist: bool
) -> None:
    """Two golden sets in a shared checkout beside the project: each its own item, node id
    and result (pytest names a file outside the rootdir given as an argument ``::name``: both
    were ``::retrieval``, one evaluation was lost from the report and a failed gate was
    reported passed)."""
    project = pytester.path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(KEYWORD_RETRIEVER)
    (project / "pytest.ini").write_text("[pytest]\n")
    _golden(pytester.path / "shared" / "passes.json")
    failing = dict(GOLDEN, name="strict", thresholds={"precision@5": 1.0})
    (pytester.path / "shared" / "fails.json").write_text(json.dumps(failing), encoding="utf-8")
    os.chdir(project)
    args = ["--retrieval-golden=../shared/passes.json", "--retrieval-golden=../shared/fails.json"]
    args += ["--retrieval-report", "r.json", "--junitxml", "j.xml", "-v"]
    if xdist:
        pytest.importorskip("xdist")
        result = pytester.runpytest_subprocess(*args, "-n", "2")
    else:
        result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*retrieval verdict: FAILED*"])
    assert "PASSED ../shared/passes.json::retrieval" in result.stdout.str() or (
        "../shared/passes.json::retrieval PASSED" in result.stdout.str()
    )
    report = json.loads((project / "r.json").read_text())
    assert report["verdict"]["passed"] is False
    assert sorted((e["golden"]["name"], e["passed"]) for e in report["evaluations"]) == [
        ("fruit", True),
        ("strict", False),
    ]
    junit = (project / "j.xml").read_text()
    assert junit.count("<testcase ") == 2 and 'classname=""' not in junit
    # the node id selects one of them (both were ``::retrieval``: --deselect took both)
    again = pytester.runpytest(*args[:2], "--deselect", "../shared/fails.json::retrieval")
    again.assert_outcomes(passed=1)


def test_a_golden_set_on_another_drive_is_named_by_its_absolute_path(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows: ``os.path.relpath`` raises ValueError for a file on another drive than the
    rootdir or working directory (a golden set on ``D:``). Every place that names the file
    -- node id, baseline key, messages, reports, the re-run command -- names it absolutely
    instead of an INTERNALERROR. Here ``D/`` plays the other drive."""
    drive = pytester.path / "D"
    real_relpath = os.path.relpath

    def relpath(path: str, start: str | None = None) -> str:
        ends = [os.path.abspath(path), os.path.abspath(start or os.curdir)]
        if sum(Path(end).is_relative_to(drive) for end in ends) == 1:
            raise ValueError(f"path is on mount 'D:', start on mount 'C:' ({path})")
        return real_relpath(path, start)

    project = pytester.path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(KEYWORD_RETRIEVER)
    (project / "pytest.ini").write_text("[pytest]\n")
    passing = _golden(drive / "shared" / "golden.json")
    os.chdir(project)
    monkeypatch.setattr(os.path, "relpath", relpath)
    outputs = ["--retrieval-report=r.json", "--retrieval-markdown=r.md", "--junitxml=j.xml"]
    golden = [f"--retrieval-golden={passing}", "--retrieval-baseline=base.json", "-v"]
    first = pytester.runpytest(*golden, "--retrieval-update-baseline")
    assert "INTERNALERROR" not in first.stdout.str() + first.stderr.str()
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines([f"{passing.as_posix()}::retrieval PASSED*"])
    assert passing.as_posix() in (project / "base.json").read_text()  # the baseline's key
    failing = dict(GOLDEN, thresholds={"precision@5": 1.0})
    passing.write_text(json.dumps(failing), encoding="utf-8")
    second = pytester.runpytest(*golden, *outputs)
    assert "INTERNALERROR" not in second.stdout.str() + second.stderr.str()
    assert second.ret == pytest.ExitCode.TESTS_FAILED, second.stdout.str()
    second.stdout.fnmatch_lines([f"*{passing.as_posix()}::retrieval FAILED*"])
    report = json.loads((project / "r.json").read_text())
    assert report["verdict"]["passed"] is False  # and every other output says so too
    assert "Retrieval evaluation: ❌ 1 of 1 failed" in (project / "r.md").read_text("utf-8")
    assert "<failure " in (project / "j.xml").read_text("utf-8")


def test_files_are_named_through_one_helper() -> None:
    """``os.path.relpath`` raises on Windows for a file on another drive: every place that
    names a file goes through ``_io.relative`` (the test above covers a few end to end)."""
    package = Path(__file__).resolve().parents[1] / "src" / "pytest_retrieval"
    calls = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if "os.path.relpath(" in line and path != package / "_internal" / "io.py"
    ]
    assert not calls, f"use _io.relative, not os.path.relpath: {calls}"
    guesses = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if 'startswith("..")' in line or "startswith(os.pardir)" in line
    ]
    assert not guesses, f"'..data/x' is inside: use _io.leads_out: {guesses}"


@pytest.mark.parametrize(
    ("shown", "out"),
    [
        ("..", True),
        ("../x", True),
        (f"..{os.sep}x", True),
        ("..data/x", False),
        ("...", False),
        ("a/../b", False),
        ("golden.json", False),
        (os.path.abspath("x"), True),
    ],
)
def test_what_leads_out_of_a_folder(shown: str, out: bool) -> None:
    from pytest_retrieval._internal.io import leads_out

    assert leads_out(shown) is out


@pytest.mark.parametrize(
    ("layout", "nodeid"),
    [
        ("outside", "../shared/fails.json::retrieval"),
        ("outside, through a linked folder", "../shared/fails.json::retrieval"),
        ("inside, through a linked checkout", "fails.json::retrieval"),
    ],
)
def test_lf_and_deselect_find_a_golden_set_named_outside_the_rootdir(
    pytester: pytest.Pytester, layout: str, nodeid: str
) -> None:
    """A golden set named by a path outside the rootdir -- in a shared folder, a linked one,
    or the rootdir itself reached through a link (a CI cache, macOS's /tmp) -- has a node id
    that --deselect takes, and --lf re-runs it when it failed. pytest looks for --lf's files
    at rootdir / node id: ``../`` unnormalised, or the link's other side, was never the file,
    which it skipped, failed gate and all."""
    project = pytester.path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "conftest.py").write_text(KEYWORD_RETRIEVER)
    (project / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    (project / "tests" / "test_unit.py").write_text(
        "def test_fails():\n    assert False\n\n\ndef test_passes():\n    pass\n"
    )
    if layout.startswith("inside"):
        folder, named = project, pytester.path / "link"
        named.symlink_to(project, target_is_directory=True)
    elif layout == "outside":
        folder = named = pytester.path / "shared"
    else:
        folder, named = pytester.path / "data" / "real", pytester.path / "shared"
        folder.mkdir(parents=True)
        named.symlink_to(folder, target_is_directory=True)
    _golden(folder / "passes.json")
    failing = dict(GOLDEN, name="strict", thresholds={"precision@5": 1.0})
    (folder / "fails.json").write_text(json.dumps(failing), encoding="utf-8")
    os.chdir(project)
    shown = "../shared" if layout.startswith("outside") else str(named)
    args = [f"--retrieval-golden={shown}/passes.json", f"--retrieval-golden={shown}/fails.json"]
    first = pytester.runpytest(*args, "-v")
    first.assert_outcomes(passed=2, failed=2)
    first.stdout.fnmatch_lines([f"{nodeid} FAILED*"])
    again = pytester.runpytest(*args, "--lf", "-v")
    again.assert_outcomes(failed=2)  # and nothing else: passes.json and test_passes skipped
    again.stdout.fnmatch_lines([f"{nodeid} FAILED*"])
    pytester.runpytest(*args, "--deselect", nodeid).assert_outcomes(passed=2, failed=1)


def test_printed_node_id_reruns_one_evaluation(pytester: pytest.Pytester) -> None:
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "conftest.py").write_text(PARAMETRIZED)
    _golden(pytester.path / "tests" / "retrieval" / "golden.json")
    pytester.makeini("[pytest]\nretrieval_golden = tests/retrieval/golden.json\n")
    listed = pytester.runpytest("--collect-only", "-q")
    listed.stdout.fnmatch_lines(
        [
            "tests/retrieval/golden.json::retrieval[[]keyword[]]",
            "tests/retrieval/golden.json::retrieval[[]broken[]]",
        ]
    )
    again = pytester.runpytest("tests/retrieval/golden.json::retrieval[keyword]")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["fruit [[]keyword[]] · 4 queries"])


def test_golden_file_as_a_path_argument_runs_it(pytester: pytest.Pytester) -> None:
    _repo(pytester)
    pytester.makeini("[pytest]\nretrieval_golden = tests/retrieval/golden.json\n")
    result = pytester.runpytest("tests/retrieval/golden.json")
    result.assert_outcomes(passed=1)


def test_same_golden_file_twice_is_evaluated_once(pytester: pytest.Pytester) -> None:
    _repo(pytester)
    golden = "tests/retrieval/golden.json"
    result = pytester.runpytest(
        "--retrieval-golden", golden, "--retrieval-golden", f"./{golden}", golden
    )
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("target", ["shared/golden_v3.json", "data/golden_v3.json"])
def test_golden_file_as_a_symlink_is_evaluated_once_under_its_own_name(
    pytester: pytest.Pytester, target: str
) -> None:
    """A team's golden.json linked to a versioned file, in a shared checkout outside the
    project or in its own data folder: one evaluation, shown under the name given."""
    project = pytester.path / "project"
    project.mkdir()
    (project / "conftest.py").write_text(KEYWORD_RETRIEVER)
    (project / "pytest.ini").write_text("[pytest]\n")
    real = _golden((project if target.startswith("data") else pytester.path) / target)
    (project / "golden.json").symlink_to(real)
    pytester.chdir()
    os.chdir(project)
    result = pytester.runpytest("--retrieval-golden", "golden.json", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["golden.json::retrieval PASSED*"])
    if target.startswith("data"):  # the link's target given as a path: that name, once
        (project / "pytest.ini").write_text("[pytest]\nretrieval_golden = golden.json\n")
        again = pytester.runpytest(target, "-v")
        again.assert_outcomes(passed=1)
        again.stdout.fnmatch_lines([f"{target}::retrieval PASSED*"])


def test_a_golden_set_reached_through_a_link_given_as_a_path_runs_once(
    pytester: pytest.Pytester,
) -> None:
    """The ini names data/golden_v3.json; the paths given reach it through a linked folder
    or a linked file: it runs once, under the name pytest collects it by."""
    pytester.makeconftest(KEYWORD_RETRIEVER)
    _golden(pytester.path / "data" / "golden_v3.json")
    (pytester.path / "datalink").symlink_to(pytester.path / "data")
    (pytester.path / "golden.json").symlink_to(pytester.path / "data" / "golden_v3.json")
    pytester.makeini("[pytest]\nretrieval_golden = data/golden_v3.json\n")
    for given, shown in [
        (["datalink"], "datalink/golden_v3.json"),
        (["datalink/golden_v3.json"], "datalink/golden_v3.json"),
        (["golden.json"], "golden.json"),
        (["--retrieval-golden", "data/golden_v3.json", "golden.json"], "golden.json"),
    ]:
        result = pytester.runpytest(*given, "-v")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines([f"{shown}::retrieval PASSED*"])


def test_retrieval_marker_selects_and_deselects(pytester: pytest.Pytester) -> None:
    _repo(pytester)
    golden = "tests/retrieval/golden.json"
    only = pytester.runpytest("--retrieval-golden", golden, "-m", "retrieval")
    only.assert_outcomes(passed=1, deselected=1)
    only.stdout.fnmatch_lines(["*verdict: PASSED*"])
    others = pytester.runpytest("--retrieval-golden", golden, "-m", "not retrieval")
    others.assert_outcomes(passed=1, deselected=1)
    assert "= retrieval =" not in others.stdout.str()


def test_retrieval_only_runs_the_golden_evaluations_and_nothing_else(
    pytester: pytest.Pytester,
) -> None:
    _repo(pytester)
    (pytester.path / "tests" / "test_broken.py").write_text("def test_fails():\n    assert 0\n")
    pytester.makeini("[pytest]\nretrieval_golden = tests/retrieval/golden.json\n")
    result = pytester.runpytest("--retrieval-only")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*collected 1 item*"])
    with_paths = pytester.runpytest("tests", "--retrieval-only")
    with_paths.assert_outcomes(passed=1, deselected=2)


def test_retrieval_only_without_a_golden_set_is_a_usage_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    result = pytester.runpytest("--retrieval-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--retrieval-only: no golden set is configured*"])


def test_one_unit_test_does_not_evaluate_the_ini_golden_set(pytester: pytest.Pytester) -> None:
    _repo(pytester)
    (pytester.path / "tests" / "conftest.py").write_text(
        KEYWORD_RETRIEVER.replace(
            "def retriever():", "def retriever():\n    raise RuntimeError('index built')"
        )
    )
    pytester.makeini("[pytest]\nretrieval_golden = tests/retrieval/golden.json\n")
    one = pytester.runpytest("tests/test_unit.py")
    one.assert_outcomes(passed=1)
    assert "index built" not in one.stdout.str()
    everything = pytester.runpytest()  # no paths: the ini golden set is part of the run
    everything.assert_outcomes(passed=1, errors=1)


def test_golden_set_outside_testpaths_runs_with_plain_pytest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_unit.py").write_text("def test_unit():\n    pass\n")
    _golden(pytester.path / "evals" / "golden.json")
    pytester.makeini("[pytest]\ntestpaths = tests\nretrieval_golden = evals/golden.json\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize(
    ("folder", "ini"),
    [
        (".golden", ""),  # a dot folder: pytest's norecursedirs
        ("build/eval", ""),
        ("data", "addopts = --ignore=data\n"),  # kept out of pytest's walk on purpose
        ("data", "addopts = --ignore-glob=dat*\n"),  # made absolute from the working folder
        ("venv/eval", ""),  # a folder pytest takes for a virtualenv
        pytest.param(  # the conftest's collect_ignore
            "ignored",
            "",
            marks=pytest.mark.skipif(
                not hasattr(pytest, "Dir"), reason="pytest 7: collect_ignore is not read"
            ),
        ),
    ],
)
@pytest.mark.parametrize("named", ["ini", "option"])
def test_a_golden_set_in_a_folder_pytest_does_not_walk_into_is_still_evaluated(
    pytester: pytest.Pytester, folder: str, ini: str, named: str
) -> None:
    """A golden set the user configured is evaluated, once, wherever it is kept. pytest's
    walk of the folder it was given skips dot folders, ``build``, virtualenvs and what
    ``--ignore`` or ``collect_ignore`` names; the golden set in one of them was silently not
    evaluated, and a plain ``pytest`` passed without the gate."""
    pytester.makeconftest(KEYWORD_RETRIEVER + '\ncollect_ignore = ["ignored"]\n')
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_unit.py").write_text("def test_unit():\n    pass\n")
    _golden(pytester.path / folder / "golden.json")
    if folder.startswith("venv"):
        (pytester.path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
        for script in ("bin/activate", "Scripts/activate"):  # as pytest 7 recognises one
            (pytester.path / "venv" / script).parent.mkdir(exist_ok=True)
            (pytester.path / "venv" / script).write_text("")
    stale = "def test_stale():\n    assert False, 'collected from a folder pytest skips'\n"
    for place in {folder, folder.split("/")[0]}:  # the rest of such a folder stays out
        (pytester.path / place / "test_stale.py").write_text(stale)
    golden = f"{folder}/golden.json"
    if named == "ini":
        pytester.makeini(f"[pytest]\n{ini}retrieval_golden = {golden}\n")
        result = pytester.runpytest("-v")
    else:
        pytester.makeini(f"[pytest]\n{ini}")
        result = pytester.runpytest("-v", "--retrieval-golden", golden)
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count(f"{golden}::retrieval PASSED") == 1
    result.stdout.fnmatch_lines(["*verdict: PASSED*"])
    again = pytester.runpytest("-v", ".", golden, "--retrieval-golden", golden)
    # named as a path too, beside its folder: once (pytest 7 keeps duplicate arguments;
    # pytest 8.0-8.3 then collect the path alone, test_unit.py not: theirs, not ours)
    assert again.stdout.str().count(f"{golden}::retrieval PASSED") == 1


def _baseline_run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    result = pytester.runpytest(
        "--retrieval-golden", "tests/retrieval/golden.json", "--retrieval-update-baseline", *args
    )
    assert "INTERNALERROR" not in result.stdout.str()
    return result


def test_deselecting_one_evaluation_of_a_set_is_a_partial_run(pytester: pytest.Pytester) -> None:
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "conftest.py").write_text(PARAMETRIZED)
    _golden(pytester.path / "tests" / "retrieval" / "golden.json")
    result = _baseline_run(pytester, "-k", "keyword")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*baseline NOT updated for tests/retrieval/golden.json: this run is partial (1 of 2 "
            "evaluations*were deselected or did not run*"
        ]
    )
    assert not (pytester.path / "tests" / "retrieval" / "golden.json.baseline.json").exists()


def test_a_failed_first_test_with_x_makes_the_run_partial(pytester: pytest.Pytester) -> None:
    _repo(pytester)
    (pytester.path / "tests" / "test_a_first.py").write_text("def test_fails():\n    assert 0\n")
    result = _baseline_run(pytester, "-x", "-p", "no:randomly", "tests/test_a_first.py")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not (pytester.path / "tests" / "retrieval" / "golden.json.baseline.json").exists()


def test_deselecting_unit_tests_is_a_full_run_for_the_golden_set(
    pytester: pytest.Pytester,
) -> None:
    _repo(pytester)
    result = _baseline_run(pytester, "-k", "retrieval")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert (pytester.path / "tests" / "retrieval" / "golden.json.baseline.json").exists()


def test_bad_marker_settings_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    _golden(pytester.path / "golden.json")
    pytester.makepyfile(
        test_marked="""
import pytest

@pytest.mark.retrieval(golden="golden.json", thresholds={"recal@10": 0.5})
def test_it(retrieval_eval, retriever):
    retrieval_eval(retriever)
"""
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_marked.py::test_it: @pytest.mark.retrieval*recal*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("k=10**12", "*k=1000000000000*k must be a whole number from 1 to 10000*"),
        ("metrics=['recall@x']", "*recall@x*"),
        ("thresholds={'recall@3': 'high'}", "*recall@3*"),
        ("colour='red'", "*unknown argument colour*"),
        ("thresholds=['recall@3']", "*thresholds must be a dict, e.g. thresholds=*"),
        ("max_drop='2%'", "*max_drop must be a dict*"),
        ("max_drop={'recall@3': 'abc'}", "*max drop*recall@3*"),
        ("metrics='recall@3'", "*metrics must be a list of metric names*"),
        ("thresholds={'recall@3[nope]': 0.5}", "*no query of golden.json has the tag 'nope'*"),
    ],
)
def test_marker_setting_errors_name_the_test_and_the_fix(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    _golden(pytester.path / "golden.json")
    pytester.makepyfile(
        test_marked=f"""
import pytest

@pytest.mark.retrieval({marker})
def test_it():
    pass
"""
    )
    result = pytester.runpytest("--retrieval-golden", "golden.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


@pytest.mark.parametrize("where", ["cli", "ini"])
def test_threshold_on_an_unknown_tag_is_a_usage_error(
    pytester: pytest.Pytester, where: str
) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    _golden(pytester.path / "golden.json")
    args = ["--retrieval-golden", "golden.json"]
    if where == "cli":
        args += ["--retrieval-threshold", "recall@3[nope]=0.5"]
    else:
        pytester.makeini("[pytest]\nretrieval_thresholds = recall@3[nope]=0.5\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*threshold recall@3[[]nope[]]*no query of golden.json has the "
            "tag 'nope' (its tags: drink, fruit)*"
        ]
    )


def test_a_beir_folder_and_its_qrels_file_are_one_golden_set(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(KEYWORD_RETRIEVER)
    beir = pytester.path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "apple"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    result = pytester.runpytest(
        "--retrieval-golden", "beir", "--retrieval-golden", "beir/qrels/test.tsv", "-v"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["beir/qrels/test.tsv::retrieval PASSED*"])


def test_retrieval_only_with_paths_still_evaluates_the_ini_golden_sets(
    pytester: pytest.Pytester,
) -> None:
    _repo(pytester)
    pytester.makeini("[pytest]\nretrieval_golden = tests/retrieval/golden.json\n")
    result = pytester.runpytest("tests/test_unit.py", "--retrieval-only")
    result.assert_outcomes(passed=1, deselected=1)


@pytest.mark.parametrize("isatty", [True, False])
def test_isatty_shim_reads_the_attribute_and_the_method(isatty: bool) -> None:
    """pytest < 9 has ``TerminalReporter.isatty`` as a bool, pytest 9 as a method."""
    from types import SimpleNamespace

    from pytest_retrieval.plugin.runtest import isatty as read_isatty

    assert read_isatty(SimpleNamespace(isatty=isatty)) is isatty
    assert read_isatty(SimpleNamespace(isatty=lambda: isatty)) is isatty


def test_a_broken_conftest_beside_the_golden_set_is_a_collection_error(
    pytester: pytest.Pytester,
) -> None:
    """Finding the way to a golden set must not import the conftest files on it early (on
    pytest 7 that turned a broken one into an INTERNALERROR)."""
    _repo(pytester)
    (pytester.path / "tests" / "retrieval" / "conftest.py").write_text("import no_such_module\n")
    pytester.makeini("[pytest]\nretrieval_golden = tests/retrieval/golden.json\n")
    result = pytester.runpytest()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*ModuleNotFoundError: No module named 'no_such_module'*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED
