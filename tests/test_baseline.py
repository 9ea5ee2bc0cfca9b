"""Baselines: record on main, compare on a PR, catch real drops, ignore noise, never lose data."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import write_golden

from pytest_retrieval import stats
from pytest_retrieval.baseline import BaselineError, read

N = 200

# The retriever's behaviour is chosen by RETRIEVER_MODE so one project can play main and PR.
MODED_RETRIEVER = """
import os
import pytest

def search(query, k):
    i = int(query.split()[1])
    mode = os.environ.get("RETRIEVER_MODE", "main")
    relevant = [f"d{i}a", f"d{i}b"]
    if mode in ("main", "degraded") and i % 5 == 0:
        relevant = relevant[:1]                       # main misses one doc on 20% of queries
    if mode == "degraded" and i % 10 == 1:
        relevant = []                                 # the PR also loses everything on 10%
    if mode == "improved":
        pass                                          # finds both everywhere
    filler = [f"x{i}-{j}" for j in range(10)]
    if mode == "noisy" and i % 2:
        filler[2], filler[3] = filler[3], filler[2]   # swaps two non-relevant hits
    if mode == "slow":
        import time; time.sleep(0.004)
    return (relevant + filler)[:k]

@pytest.fixture(scope="session")
def retriever():
    return search
"""


def _golden(n: int = N) -> dict[str, object]:
    return {
        "name": "synthetic",
        "k": 10,
        "metrics": ["recall@10", "mrr@10", "ndcg@10"],
        "queries": [
            {"id": f"q{i}", "query": f"topic {i}", "relevant": [f"d{i}a", f"d{i}b"]}
            for i in range(n)
        ],
    }


@pytest.fixture
def moded(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(MODED_RETRIEVER)
    write_golden(pytester, _golden())
    monkeypatch.setenv("RETRIEVER_MODE", "main")
    return pytester


def _run(
    pytester: pytest.Pytester, mode: str, monkeypatch: pytest.MonkeyPatch, *args: str
) -> pytest.RunResult:
    monkeypatch.setenv("RETRIEVER_MODE", mode)
    result = pytester.runpytest("--retrieval-golden", "golden.json", *args)
    assert "INTERNALERROR" not in result.stdout.str()
    return result


def test_record_compare_regress_update_improve(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = _run(moded, "main", monkeypatch)
    missing.assert_outcomes(passed=1)
    missing.stdout.fnmatch_lines(
        [
            "*no baseline for synthetic::retriever in golden.json.baseline.json; record one on "
            "main with: pytest --retrieval-golden=golden.json --retrieval-update-baseline*"
        ]
    )

    recorded = _run(moded, "main", monkeypatch, "--retrieval-update-baseline")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(
        ["*baseline written: golden.json.baseline.json (golden.json::retriever)*"]
    )
    baseline = moded.path / "golden.json.baseline.json"
    entry = read(baseline)["golden.json::retriever"]
    assert entry.metrics["recall@10"] == pytest.approx(0.9)
    assert entry.queries["q0"].ranked[:2] == ["d0a", "x0-0"]

    same = _run(moded, "main", monkeypatch)
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*vs baseline golden.json.baseline.json*", "*recall@10*ok*"])

    degraded = _run(moded, "degraded", monkeypatch)
    degraded.assert_outcomes(failed=1)
    degraded.stdout.fnmatch_lines(
        [
            "retrieval regression: recall@10 dropped*",
            "*metric*baseline*current*Δ*allowed*p*verdict*",
            "*recall@10*0.9000*0.8000*-0.1000*0.0100*regressed*",
            "*REGRESSION: recall@10 dropped 0.1000 (allowed 0.0100, p=*< 0.05)*",
            "*queries that changed:*",
            "*recall@10*20*0*180*",
            "*20 worse on recall@10 (the 5 most changed):*",
            "*q1 'topic 1' recall@10 1.0000 → 0.0000 · mrr@10 1.0000 → 0.0000*",
            "*left the top 10: d1a #1 → below #10; d1b #2 → below #10*",
        ]
    )
    assert baseline.read_text() == baseline.read_text()  # untouched by a compare run
    assert read(baseline)["golden.json::retriever"].metrics == entry.metrics

    _run(moded, "degraded", monkeypatch, "--retrieval-update-baseline").assert_outcomes(passed=1)
    _run(moded, "degraded", monkeypatch).assert_outcomes(passed=1)

    improved = _run(moded, "improved", monkeypatch)
    improved.assert_outcomes(passed=1)
    improved.stdout.fnmatch_lines(
        [
            "*recall@10*0.8000*1.0000*+0.2000*improved*",
            "*improved significantly beyond the allowance (recall@10 +0.2000*ratchet the baseline "
            "up with pytest --retrieval-golden=golden.json --retrieval-update-baseline*",
        ]
    )


def test_noise_does_not_fail(moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(moded, "main", monkeypatch, "--retrieval-update-baseline").assert_outcomes(passed=1)
    _run(moded, "noisy", monkeypatch).assert_outcomes(passed=1)


def test_drop_within_noise_is_not_a_regression(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 queries, one loses a doc: a 0.025 drop, above the allowance but not significant."""
    pytester.makeconftest(MODED_RETRIEVER)
    write_golden(pytester, _golden(20))
    _run(pytester, "improved", monkeypatch, "--retrieval-update-baseline")
    result = _run(pytester, "main", monkeypatch)  # q0, q5, q10, q15 lose one doc
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*recall@10*1.0000*0.9000*within noise*"])
    strict = _run(pytester, "main", monkeypatch, "--retrieval-alpha", "1")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*REGRESSION: recall@10 dropped 0.1000 (allowed 0.0100)*"])


def test_max_drop_layers_and_relative(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(moded, "main", monkeypatch, "--retrieval-update-baseline")
    golden = _golden()
    golden["max_drop"] = {"recall@10": 0.1, "mrr@10": 0.1, "ndcg@10": 0.1}
    write_golden(moded, golden)
    # the golden set changed its settings, not its queries: the baseline still applies
    _run(moded, "degraded", monkeypatch).assert_outcomes(passed=1)
    # a relative 5% on the command line overrides the file's 0.1 for recall@10
    result = _run(moded, "degraded", monkeypatch, "--retrieval-max-drop", "recall@10=5%")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*recall@10*0.9000*0.8000*0.0450*regressed*"])


def test_latency_gate(moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(moded, "main", monkeypatch, "--retrieval-update-baseline")
    result = _run(
        moded,
        "slow",
        monkeypatch,
        "--retrieval-max-drop",
        "latency_p95=20%",
        "--retrieval-concurrency",
        "1",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*latency_p95*ms*ms*regressed*"])


def test_golden_drift_compares_unchanged_subset(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(moded, "main", monkeypatch, "--retrieval-update-baseline")
    golden = _golden()
    queries = golden["queries"]
    assert isinstance(queries, list)
    queries[1]["relevant"] = ["d1a"]  # re-judged
    del queries[2]  # removed
    queries.append({"id": "new", "query": "topic 999", "relevant": ["d999a"]})  # added
    write_golden(moded, golden)
    result = _run(moded, "main", monkeypatch)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*golden set changed since: 1 added, 1 removed, 1 re-judged; compared on the 198 "
            "unchanged queries*",
            "*added: new*",
            "*removed: q2*",
            "*re-judged: q1*",
        ]
    )


def test_stale_baseline_is_reported_not_compared(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _run(moded, "main", monkeypatch, "--retrieval-update-baseline")
    golden = _golden()
    for query in golden["queries"]:  # type: ignore[union-attr]
        query["id"] = "new-" + query["id"]
    write_golden(moded, golden)
    result = _run(moded, "degraded", monkeypatch)
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*STALE baseline: no query of the golden set is unchanged since the baseline was "
            "recorded. Not compared. Refresh it with: pytest --retrieval-golden=golden.json "
            "--retrieval-update-baseline*"
        ]
    )


@pytest.mark.parametrize(
    "args", [["-k", "retrieval"], ["-m", "not slow"], ["-k", "retrieval or not retrieval"]]
)
def test_filters_that_keep_the_evaluation_are_a_full_run(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """Partial is decided from the items, not from which flags were given."""
    moded.makepyfile(test_unit="def test_unit():\n    pass\n")
    result = _run(moded, "main", monkeypatch, "--retrieval-update-baseline", *args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*baseline written: golden.json.baseline.json*"])


def test_failed_retriever_calls_do_not_update(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(
        "import pytest\n@pytest.fixture\ndef retriever():\n"
        "    def search(q, k):\n        if q == 'topic 3': raise OSError('down')\n"
        "        return ['d1a']\n    return search\n"
    )
    write_golden(pytester, _golden(5))
    result = _run(
        pytester, "main", monkeypatch, "--retrieval-update-baseline", "--retrieval-markdown", "m.md"
    )
    markdown = (pytester.path / "m.md").read_text(encoding="utf-8")
    assert "recording the baseline" not in markdown and "to be recorded in" in markdown
    result.stdout.fnmatch_lines(
        [
            # the evaluation's own lines do not say it is being recorded: it is not
            "  not compared with a baseline: this run is to be recorded in "
            "golden.json.baseline.json",
            "*baseline NOT updated for golden.json: this run is partial "
            "(synthetic*: 1 of * retriever calls failed). Fix the failed calls, or force it "
            "with --retrieval-update-baseline=force",
        ]
    )
    assert "recording baseline" not in result.stdout.str()
    assert not (pytester.path / "golden.json.baseline.json").exists()


RESTORE = "fix: restore it from git"


@pytest.mark.parametrize(
    ("content", "problem", "fix"),
    [
        ('{"format": "pytest-retrieval-baseline", "version": 1, "entr', "truncated JSON", RESTORE),
        ("{not json}", "corrupt JSON at line 1, column 2", RESTORE),
        (
            '{\n  "format": "pytest-retrieval-baseline",\n<<<<<<< HEAD\n  "version": 1,\n'
            '=======\n  "version": 1, "entries": {}\n>>>>>>> main\n}\n',
            "git merge-conflict markers (<<<<<<< at line 3)",
            "fix: re-record it with --retrieval-update-baseline on the merged code",
        ),
        (
            '{"format": "pytest-retrieval-baseline", "version": 99, "entries": {}}',
            "/version: format version 99 is newer than this pytest-retrieval understands",
            "fix: upgrade pytest-retrieval",
        ),
        ('{"hello": 1}', "not a pytest-retrieval baseline", RESTORE),
        (
            '{"format": "pytest-retrieval-baseline", "version": 1, "entries": {"x::y": {}}}',
            "entry 'x::y' is malformed",
            RESTORE,
        ),
    ],
)
def test_bad_baseline_file(
    moded: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    content: str,
    problem: str,
    fix: str,
) -> None:
    baseline = moded.path / "golden.json.baseline.json"
    baseline.write_text(content)
    result = _run(moded, "main", monkeypatch)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    assert f"ERROR: baseline {baseline}: {problem}" in output
    assert fix in output
    assert "Traceback" not in output
    assert baseline.read_text() == content  # never overwritten without the update flag
    # with the flag, it is replaced by a good one
    _run(moded, "main", monkeypatch, "--retrieval-update-baseline").assert_outcomes(passed=1)
    assert [entry.golden_name for entry in read(baseline).values()] == ["synthetic"]


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("run.trec", "q1 Q0 d1 1 2.0 bm25\n", "not JSON (at line 1, column 1"),
        ("test_user.py", "def test_x():\n    pass\n", "not JSON (at line 1, column 1"),
        ("other.json", '{"hello": 1}', "not a pytest-retrieval baseline"),
        ("quoting.txt", 'BASE = {"format": "pytest-retrieval-baseline"}\n', "not JSON (at"),
        (
            "settings.json",
            '{"tools": {"x": {"format": "pytest-retrieval-baseline"}}}',
            "not a pytest-retrieval baseline",
        ),
    ],
)
def test_recording_never_replaces_a_file_that_is_not_a_baseline(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, content: str, problem: str
) -> None:
    """A file named by --retrieval-baseline by mistake is someone's: refused even when the
    update is asked for, where a damaged baseline is replaced (test_bad_baseline_file)."""
    target = moded.path / name
    target.write_text(content)
    checked = _run(moded, "main", monkeypatch, "--retrieval-baseline", name)
    assert checked.ret == pytest.ExitCode.USAGE_ERROR
    recorded = _run(
        moded, "main", monkeypatch, "--retrieval-baseline", name, "--retrieval-update-baseline"
    )
    if name.endswith(".py"):  # a file of the project: refused before the run
        assert recorded.ret == pytest.ExitCode.USAGE_ERROR
        assert f"the baseline to record {name} is a file of the project" in recorded.stderr.str()
    else:
        assert recorded.ret == pytest.ExitCode.TESTS_FAILED
        output = checked.stdout.str() + checked.stderr.str() + recorded.stdout.str()
        assert f"baseline NOT updated: baseline {target}: {problem}" in output
        assert "fix: name a baseline file as the baseline (--retrieval-baseline;" in output
        assert "re-record it with --retrieval-update-baseline" not in output
    assert f"ERROR: baseline {target}: {problem}" in checked.stderr.str()
    assert target.read_text() == content


def test_a_damaged_baseline_under_another_name_is_still_replaced(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written compactly and cut short, named by --retrieval-baseline: it says it is one."""
    target = moded.path / "main.json"
    target.write_text('{"format":"pytest-retrieval-baseline","version":1,"entries":{"g')
    result = _run(
        moded,
        "main",
        monkeypatch,
        "--retrieval-baseline",
        "main.json",
        "--retrieval-update-baseline",
    )
    result.assert_outcomes(passed=1)
    assert [entry.golden_name for entry in read(target).values()] == ["synthetic"]


def test_hand_edited_value_is_named(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(
        json.dumps(
            {
                "format": "pytest-retrieval-baseline",
                "version": 1,
                "entries": {
                    "g::r": {
                        "golden": {"name": "g", "fingerprint": "f"},
                        "retriever": "r",
                        "k": 10,
                        "metrics": {"recall@10": "high"},
                        "queries": {},
                    }
                },
            }
        )
    )
    with pytest.raises(BaselineError, match=r"entry 'g::r' is malformed.*recall@10 is 'high'"):
        read(path)


def test_file_is_deterministic_and_diffable(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline = moded.path / "golden.json.baseline.json"
    _run(moded, "main", monkeypatch, "--retrieval-update-baseline")
    first = baseline.read_text().splitlines()
    _run(moded, "degraded", monkeypatch, "--retrieval-update-baseline")
    second = baseline.read_text().splitlines()
    assert len(first) == len(second)
    changed = [(a, b) for a, b in zip(first, second, strict=True) if a != b]
    query_lines = [line for line in first if line.strip().startswith('"q') and '"ranked"' in line]
    changed_queries = [a for a, _ in changed if a in query_lines]
    assert len(query_lines) == N
    assert len(changed_queries) == N // 10  # one line per query that changed


def test_several_goldens_under_xdist_share_one_baseline(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(MODED_RETRIEVER)
    names = []
    for i in range(4):
        golden = _golden(50)
        golden["name"] = f"set{i}"
        names.append(write_golden(pytester, golden, name=f"set{i}.json"))
    args = [a for name in names for a in ("--retrieval-golden", name)]
    monkeypatch.setenv("RETRIEVER_MODE", "main")
    result = pytester.runpytest_subprocess(
        *args,
        "-n",
        "4",
        "--retrieval-baseline",
        "shared.baseline.json",
        "--retrieval-update-baseline",
    )
    result.assert_outcomes(passed=4)
    entries = read(pytester.path / "shared.baseline.json")
    assert sorted(entries) == [f"set{i}.json::retriever" for i in range(4)]
    assert all(len(e.queries) == 50 for e in entries.values())
    again = pytester.runpytest_subprocess(
        *args, "-n", "4", "--retrieval-baseline", "shared.baseline.json"
    )
    again.assert_outcomes(passed=4)


def test_concurrent_processes_merge_their_entries(tmp_path: Path) -> None:
    """Two CI jobs updating one file at once: the lock serialises read-modify-write."""
    script = (
        "import sys\n"
        "from pytest_retrieval.baseline import BaselineEntry, BaselineQuery, update\n"
        "name = sys.argv[1]\n"
        "for i in range(30):\n"
        "    q = {f'q{j}': BaselineQuery('f', {'recall@10': 0.5}, ['d']) for j in range(200)}\n"
        "    e = BaselineEntry(name, 'fp', f'r{i}', 10, {'recall@10': 0.5}, {}, 1.0, 2.0, q)\n"
        "    update(__import__('pathlib').Path(sys.argv[2]), [e], replace_corrupt=False)\n"
    )
    path = tmp_path / "b.json"
    jobs = [
        subprocess.Popen([sys.executable, "-c", script, name, str(path)]) for name in ("a", "b")
    ]
    assert [job.wait(timeout=120) for job in jobs] == [0, 0]
    assert len(read(path)) == 60


def test_sigkill_mid_write_keeps_the_previous_baseline(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    script = (
        "import sys, pathlib\n"
        "from pytest_retrieval.baseline import BaselineEntry, BaselineQuery, update\n"
        "i = 0\n"
        "while True:\n"
        "    i += 1\n"
        "    m = {'recall@10': i / 1e6}  # the aggregate is the mean of the queries' values\n"
        "    q = {f'q{j}': BaselineQuery('f', m, ['d'] * 50) for j in range(5000)}\n"
        "    e = BaselineEntry('g', 'fp', 'r', 10, m, {}, 1.0, 2.0, q)\n"
        "    update(pathlib.Path(sys.argv[1]), [e], replace_corrupt=False)\n"
        "    print(i, flush=True)\n"
    )
    job = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert job.stdout is not None
    for _ in range(3):  # wait for a few complete writes, then kill mid-way through another
        job.stdout.readline()
    time.sleep(0.05)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    entries = read(path)  # parses: never torn
    assert entries["g::r"].metrics["recall@10"] >= 3 / 1e6
    assert len(entries["g::r"].queries) == 5000


def test_paired_test_agrees_with_scipy() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    before = rng.random(80)
    after = before - 0.02 + rng.normal(0, 0.1, 80)
    ours = stats.paired_pvalue(before, after, resamples=100_000)
    theirs = scipy_stats.permutation_test(
        (after, before),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        alternative="less",
        n_resamples=100_000,
        random_state=0,
        vectorized=True,
    ).pvalue
    assert 0.01 < theirs < 0.5
    assert ours == pytest.approx(theirs, abs=0.01)
    two = stats.paired_pvalue(before, after, alternative="two-sided", resamples=100_000)
    theirs_two = scipy_stats.permutation_test(
        (after, before),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        alternative="two-sided",
        n_resamples=100_000,
        random_state=0,
        vectorized=True,
    ).pvalue
    assert two == pytest.approx(theirs_two, abs=0.01)


def test_normal_approximation_agrees_with_exact_test() -> None:
    rng = np.random.default_rng(5)
    before = rng.random(30_000)
    after = before + rng.normal(-0.002, 0.1, 30_000)
    approx = stats.paired_pvalue(before, after)  # above the exact-test size
    exact = stats.paired_pvalue(before[:20_000], after[:20_000])
    assert 0 < approx < 1 and 0 < exact < 1
    scipy_stats = pytest.importorskip("scipy.stats")
    t = scipy_stats.ttest_rel(after, before, alternative="less").pvalue
    assert approx == pytest.approx(t, rel=0.05)


def test_bootstrap_ci_agrees_with_scipy() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    values = rng.random(150) ** 2
    intervals, method = stats.bootstrap_ci({"m": values}, resamples=20_000)
    assert method == "bootstrap"
    lo, hi = intervals["m"]
    ref = scipy_stats.bootstrap(
        (values,), np.mean, n_resamples=20_000, method="percentile", random_state=0
    ).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.005)
    assert hi == pytest.approx(ref.high, abs=0.005)


def test_holm_matches_statsmodels_definition() -> None:
    adjusted = stats.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    assert adjusted == pytest.approx({"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5})


def test_writes_keep_permissions_and_leave_no_lock_file_beside_the_baseline(
    tmp_path: Path,
) -> None:
    from pytest_retrieval._internal.io import atomic_write

    target = tmp_path / "golden.json.baseline.json"
    atomic_write(target, "{}\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600
    target.chmod(0o640)
    atomic_write(target, "{}\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_a_write_through_a_symlink_or_to_a_device_keeps_what_the_path_is(tmp_path: Path) -> None:
    """--retrieval-report=/dev/null (run as root, a rename replaced the device with a file;
    a named pipe stands for it here) and a report path that is a symlink (the link was
    replaced by a plain file)."""
    from pytest_retrieval._internal.io import atomic_write

    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(real)
    atomic_write(link, ["{", "}\n"])
    assert link.is_symlink() and real.read_text() == "{}\n"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        atomic_write(fifo, "through the pipe\n")
        assert os.read(reader, 100) == b"through the pipe\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # still a pipe, not a file put in its place


def test_a_baseline_saved_with_a_byte_order_mark_reads(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a Windows editor saves it; golden sets read with one too."""
    _run(moded, "main", monkeypatch, "--retrieval-update-baseline").assert_outcomes(passed=1)
    baseline = moded.path / "golden.json.baseline.json"
    baseline.write_bytes(b"\xef\xbb\xbf" + baseline.read_bytes())
    result = _run(moded, "main", monkeypatch)
    result.assert_outcomes(passed=1)
    assert "vs baseline" in result.stdout.str()


def test_a_gated_metric_the_baseline_lacks_is_a_stale_baseline(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--retrieval-gate ndcg@5`` against a baseline recorded without ndcg@5: nothing can
    gate its regression, which a gate must say (a warning; a failure with the strict
    flag), not pass as if compared -- in pytest and in ``eval``."""
    from pytest_retrieval.cli import main

    _run(moded, "main", monkeypatch, "--retrieval-update-baseline").assert_outcomes(passed=1)
    gate = ["--retrieval-gate", "ndcg@5", "--retrieval-gate", "recall@10"]
    warned = _run(moded, "degraded", monkeypatch, *gate, "--retrieval-gate", "mrr@10")
    warned.assert_outcomes(failed=1)  # recall@10 and mrr@10 still compared: they regressed
    warned.stdout.fnmatch_lines(
        [
            "*REGRESSION: recall@10 dropped*",
            "*stale baseline golden.json.baseline.json: it has no ndcg@5, which this run "
            "gates: its regression is not checked*; refresh it with --retrieval-update-baseline",
        ]
    )
    strict = _run(moded, "main", monkeypatch, *gate, "--retrieval-strict-baseline")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*  stale baseline: stale baseline * it has no ndcg@5, which*"])
    _run(moded, "main", monkeypatch, *gate).assert_outcomes(passed=1)  # a warning only

    export = _run(moded, "main", monkeypatch, "--retrieval-export-run", "main.trec")
    export.assert_outcomes(passed=1)
    monkeypatch.chdir(moded.path)
    capsys.readouterr()
    argv = ["eval", "golden.json", "main.trec", "--retriever", "retriever", "--gate", "ndcg@5"]
    assert main([*argv, "--strict-baseline"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"ndcg@5 +n/a +\d\.\d{4} .* not in baseline", out)  # computed now
    assert "stale baseline: stale baseline golden.json.baseline.json: it has no ndcg@5" in out
    assert main(argv) == 0


@pytest.mark.parametrize("how", [["--gate", "otr@10"], ["--threshold", "otr@10=0.5"], []])
def test_eval_refuses_a_judge_metric_it_cannot_compute(
    moded: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: list[str],
) -> None:
    """``eval`` has no judge: an on-topic rate gated from the command line or the golden
    file is refused with the way to gate it, never left out of a passing gate."""
    from pytest_retrieval.cli import main

    _run(moded, "main", monkeypatch, "--retrieval-export-run", "main.trec").assert_outcomes(
        passed=1
    )
    if not how:
        golden = json.loads((moded.path / "golden.json").read_text())
        (moded.path / "golden.json").write_text(json.dumps({**golden, "gate": ["otr@10"]}))
    monkeypatch.chdir(moded.path)
    capsys.readouterr()
    assert main(["eval", "golden.json", "main.trec", *how]) == 2
    assert (
        "otr@10 needs an LLM judge: eval has none; gate it in a pytest run with "
        "--retrieval-run RUN --retrieval-judge"
    ) in capsys.readouterr().err


def test_a_run_file_records_no_latency_and_keeps_the_recorded_one(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run file measured nothing: recording from one (``eval``, ``--retrieval-run``)
    writes no latency where there was none, and keeps the latencies a live run recorded
    -- not 0.0 ms, which made every later live run's latency look like a regression."""
    from pytest_retrieval.cli import main

    path = moded.path / "golden.json.baseline.json"
    _run(moded, "main", monkeypatch, "--retrieval-export-run", "retriever.trec").assert_outcomes(
        passed=1
    )
    monkeypatch.chdir(moded.path)
    argv = [
        "eval",
        "golden.json",
        "retriever.trec",
        "--retriever",
        "retriever",
        "--update-baseline",
    ]
    assert main(argv) == 0
    fresh = read(path)["golden.json::retriever"]
    assert (fresh.latency_p50_ms, fresh.latency_p95_ms) == (None, None)
    assert {q.latency_ms for q in fresh.queries.values()} == {None}
    assert '"latency_ms": {\n' not in path.read_text() or '"p95": null' in path.read_text()

    _run(moded, "main", monkeypatch, "--retrieval-update-baseline").assert_outcomes(passed=1)
    live = read(path)["golden.json::retriever"]
    assert live.latency_p95_ms is not None and live.latency_p95_ms > 0
    capsys.readouterr()
    assert main(argv) == 0  # a refresh from the run file
    kept = read(path)["golden.json::retriever"]
    assert (kept.latency_p50_ms, kept.latency_p95_ms) == (live.latency_p50_ms, live.latency_p95_ms)
    assert [q.latency_ms for q in kept.queries.values()] == [
        q.latency_ms for q in live.queries.values()
    ]
    again = _run(moded, "main", monkeypatch, "--retrieval-run", "retriever.trec",
                 "--retrieval-update-baseline")  # fmt: skip
    again.stdout.fnmatch_lines(["*baseline written: *(golden.json::retriever)*"])
    assert read(path)["golden.json::retriever"].latency_p95_ms == live.latency_p95_ms


@pytest.mark.parametrize("selection", [["-k", "nothing_matches"], ["-m", "not retrieval"]])
def test_an_update_that_evaluated_nothing_fails(
    moded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, selection: list[str]
) -> None:
    """``--retrieval-update-baseline`` on a main job whose selection left every golden-set
    evaluation out recorded nothing and passed (exit 0, no word): a mistyped ``-k`` kept
    the baseline from ever being recorded."""
    moded.makepyfile(test_unit="def test_unit():\n    pass\n")
    result = _run(moded, "main", monkeypatch, *selection, "--retrieval-update-baseline")
    # a failure; -k that selects nothing at all keeps pytest's own "no tests ran" (5)
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
    result.stdout.fnmatch_lines(
        [
            "*baseline NOT updated for golden.json: this run is partial (1 of 1 evaluations of "
            "golden.json were deselected or did not run*"
        ]
    )
    assert not (moded.path / "golden.json.baseline.json").exists()
