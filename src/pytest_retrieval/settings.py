"""Every setting of pytest-retrieval, declared once: its name, parser, default, help, ini key
and the ``pytest-retrieval`` commands that take it.

Both front-ends are generated from :data:`OPTIONS`: the plugin's ``pytest_addoption``
(``--retrieval-NAME`` and the ini keys) and the command line's flags (``--NAME``, or the
spelling a command gives it in :class:`Flag`), so a name, a default or a help text cannot drift
between them. No pytest here (the command line imports this too), and nothing heavy: parsers
import what they need when they run. The judge's settings are one frozen
:class:`JudgeConfig`, the same object whether a pytest run, a builder or ``judge-batch`` made it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from .validators import (
    alpha_arg,
    cutoff,
    existing_file,
    fraction,
    max_drop_arg,
    max_failures_arg,
    metric_arg,
    positive_float,
    positive_int,
    seconds_or_zero,
    shard_arg,
    split_min_arg,
    threshold_arg,
    update_mode,
)

# ---------------------------------------------------------------------------- defaults

DEFAULT_FIXTURE = "retriever"
#: retriever calls in flight at once; :mod:`.retrieval` takes it from here
DEFAULT_CONCURRENCY = 8
#: failed retriever calls in a row after which no further call is made (0: never): a backend
#: that is down would cost a timeout for every query (1,394 queries at 30 s held a CI job
#: for hours)
DEFAULT_MAX_FAILURES = 25
#: Golden sets at least this large are split under ``-n`` (:mod:`.plugin.split`). A split
#: costs one more aggregation, on the controller (the merge: about 0.2 ms a query while the
#: CIs are bootstrapped, 0.45 s for 2,000 queries on a 2-core machine), and a retriever
#: fixture built on every worker (an index in memory N times); it saves half the retrieval
#: time of a CPU-bound retriever on 2 workers. Below 2,000 queries a 1 ms retriever saves
#: under a second.
DEFAULT_SPLIT_MIN = 2000
DEFAULT_ALPHA = 0.05
DEFAULT_PROGRESS = "auto"
DEFAULT_JUDGE_MODEL = "gpt-4.1-mini"
#: seconds of judging (all evaluations of a process together) before the judge stops (0: never)
DEFAULT_DEADLINE = 1800.0
#: where a pytest run keeps its judge cache (pytest's cache dir), so a command and a later
#: run share answers
DEFAULT_JUDGE_CACHE = Path(".pytest_cache") / "d" / "retrieval-judge"
DEFAULT_JUDGE_CONCURRENCY = 16
DEFAULT_JUDGE_TIMEOUT = 60.0
DEFAULT_JUDGE_MAX_WAIT = 300.0
DEFAULT_MIN_SCORE = 0.5
DEFAULT_MIN_COVERAGE = 0.95
DEFAULT_TEXT_BUDGET = 4000
DEFAULT_JUDGE_MAX_FAILURES = 8
DEFAULT_RELEVANCE_LEVEL = 2

# ---------------------------------------------------------------------------- the records
# (tuples, not dataclasses: a dataclass costs about 1 ms to create, at every pytest start)

#: "not overridden" in a :class:`Flag`
SAME: Any = object()
#: the builders (synth, pool) take the judge's flags as one group: :func:`add_judge_arguments`
BUILDERS = "builders"
#: every command of ``pytest-retrieval``
EVERY = "*"


class Ini(NamedTuple):
    """An ini key: its help in ``pytest --help`` and its kind (how pytest reads it)."""

    key: str
    help: str
    kind: Literal["string", "number", "bool", "linelist", "paths"] = "string"
    #: the help of the option names the key (``... ini: retrieval_x``)
    in_help: bool = True


class Flag(NamedTuple):
    """How a ``pytest-retrieval`` command spells an option where it differs from the pytest
    one: its flag, help, parser, metavar, default or choices (:data:`SAME`: as the option)."""

    flag: str = SAME
    help: str = SAME
    parse: Any = SAME
    metavar: Any = SAME
    default: Any = SAME
    choices: Any = SAME


class Option(NamedTuple):
    """One setting. ``name``: its pytest dest without the ``retrieval_`` prefix;
    ``default``: its value when neither the command line nor the ini file gives one."""

    name: str
    concern: Literal["run", "gate", "output", "judge"]
    help: str = ""
    parse: Callable[..., Any] | None = None
    default: Any = None
    metavar: str | None = None
    action: str | None = None
    choices: tuple[Any, ...] | None = None
    nargs: str | None = None
    const: Any = None
    ini: Ini | None = None
    #: the parser wants the flag as it was typed (its messages name it): ``parse(text, flag)``
    sourced: bool = False
    #: a pytest option (False: an ini key only)
    pytest: bool = True
    #: the commands that take it -> how each spells it
    cli: Mapping[str, Flag] = MappingProxyType({})

    @property
    def pytest_flag(self) -> str:
        return "--retrieval-" + self.name.replace("_", "-")

    def pytest_help(self) -> str:
        if self.ini is not None and self.ini.in_help:
            return f"{self.help}. ini: {self.ini.key}"
        return self.help

    def pytest_arguments(self) -> dict[str, Any]:
        """``addoption``'s keywords. An option with an ini key defaults to None on the
        command line: "not given", so the ini file (then :attr:`default`) decides."""
        return _arguments(
            self,
            self.pytest_flag,
            help=self.pytest_help(),
            parse=self.parse,
            metavar=self.metavar,
            default=None if self.ini is not None else self.default,
            choices=self.choices,
        )

    def cli_flag(self, command: str) -> str:
        spelled = self._flag_for(command)
        if spelled is not None and spelled.flag is not SAME:
            return str(spelled.flag)
        return "--" + self.name.removeprefix("judge_").replace("_", "-")

    def cli_arguments(self, command: str) -> dict[str, Any]:
        """``add_argument``'s keywords for ``command`` (no ini there: :attr:`default` is the
        default)."""
        spelled = self._flag_for(command) or Flag()

        def given(value: Any, otherwise: Any) -> Any:
            return otherwise if value is SAME else value

        return _arguments(
            self,
            self.cli_flag(command),
            help=given(spelled.help, self.help),
            parse=given(spelled.parse, self.parse),
            metavar=given(spelled.metavar, self.metavar),
            default=given(spelled.default, self.default),
            choices=given(spelled.choices, self.choices),
        )

    def takes(self, command: str) -> bool:
        """Whether ``command`` (or the builders' judge group) has this option."""
        return command in self.cli or (EVERY in self.cli and command != BUILDERS)

    def _flag_for(self, command: str) -> Flag | None:
        return self.cli.get(command, self.cli.get(EVERY))


def _arguments(
    option: Option, flag: str, help: str, parse: Any, metavar: Any, default: Any, choices: Any
) -> dict[str, Any]:
    """argparse's keywords, only those that apply (``store_true`` takes no ``type=``)."""
    found: dict[str, Any] = {"help": help, "default": default}
    if option.action is not None:
        found["action"] = option.action
    if option.action != "store_true":
        if parse is not None:
            found["type"] = _sourced(parse, flag) if option.sourced else parse
        if metavar is not None:
            found["metavar"] = metavar
        if choices is not None:
            found["choices"] = list(choices)
        if option.nargs is not None:
            found["nargs"] = option.nargs
            found["const"] = option.const
    return found


def _sourced(parse: Callable[[str, str], Any], flag: str) -> Callable[[str], Any]:
    def parsed(text: str) -> Any:
        return parse(text, flag)

    parsed.__name__ = getattr(parse, "__name__", "value")  # argparse's "invalid X value"
    return parsed


# ---------------------------------------------------------------------------- the options

_LINKS_HELP = (
    "let an output be written through a symlink to a place outside the project (the working "
    "directory): refused by default"
)
_EVAL = ("eval",)
_OFFLINE = ("eval", "combine")


def _on(commands: tuple[str, ...], **spelled: Any) -> dict[str, Flag]:
    return {command: Flag(**spelled) for command in commands}


#: in ``pytest --help`` order; the ini keys of options first, then the keys of no option
OPTIONS: tuple[Option, ...] = (
    Option(
        "golden",
        "run",
        "golden set to evaluate the retriever fixture on (.json, .jsonl, .csv, BEIR folder, "
        "TREC qrels); repeatable",
        action="append",
        metavar="PATH",
        ini=Ini("retrieval_golden", "golden sets to evaluate", "paths"),
    ),
    Option(
        "threshold",
        "gate",
        "minimum for a metric, e.g. recall@10=0.8 or recall@10[errors]=0.7 (tag); "
        "repeatable; wins over ini, marker and golden file",
        parse=threshold_arg,
        sourced=True,
        action="append",
        metavar="METRIC=VALUE",
        ini=Ini(
            "retrieval_thresholds", "METRIC=VALUE lines, e.g. recall@10=0.8", "linelist", False
        ),
        cli=_on(
            _EVAL,
            default=[],
            help="minimum for a metric, e.g. recall@10=0.8 or recall@10[errors]=0.7; "
            "repeatable; wins over the golden file's",
        ),
    ),
    Option(
        "metric",
        "run",
        "extra metric to compute and show, e.g. ndcg_exp@20; repeatable",
        parse=metric_arg,
        action="append",
        metavar="METRIC",
        cli=_on(_EVAL, default=[]),
    ),
    Option(
        "k",
        "run",
        "default cutoff k (overrides the golden file's k)",
        parse=cutoff,
        metavar="K",
        cli={"eval": Flag(), "convert": Flag(help="default cutoff to store")},
    ),
    Option(
        "concurrency",
        "run",
        f"retriever calls in flight at once (default {DEFAULT_CONCURRENCY})",
        parse=positive_int,
        default=DEFAULT_CONCURRENCY,
        metavar="N",
        ini=Ini("retrieval_concurrency", "retriever calls in flight at once", "number"),
    ),
    Option(
        "timeout",
        "run",
        "per-call timeout for the retriever (default: none)",
        parse=positive_float,
        metavar="SECONDS",
        ini=Ini("retrieval_timeout", "per-call retriever timeout in seconds", "number"),
    ),
    Option(
        "max_failures",
        "run",
        "stop calling the retriever after N failed calls in a row, a backend that is down; the "
        f"queries left are not answered (default {DEFAULT_MAX_FAILURES}; 0: never stop)",
        parse=max_failures_arg,
        default=DEFAULT_MAX_FAILURES,
        metavar="N",
        ini=Ini(
            "retrieval_max_failures",
            "failed retriever calls in a row after which the calls stop (0: never)",
            "number",
        ),
    ),
    Option(
        "report",
        "output",
        "write a JSON report of every evaluation (metrics, CIs, per-query results)",
        metavar="PATH",
        ini=Ini("retrieval_report", "path of the JSON report"),
        cli=_on(_OFFLINE, parse=Path, help="write the JSON report"),
    ),
    Option(
        "shard",
        "run",
        "CI sharding: evaluate only the queries whose id hashes to shard I of N and write a "
        "partial report (needs --retrieval-report); nothing is gated until `pytest-retrieval "
        "combine` joins every shard's report",
        parse=shard_arg,
        metavar="I/N",
    ),
    Option(
        "baseline",
        "gate",
        "baseline file to compare with and update (default: <golden>.baseline.json beside "
        "each golden set)",
        metavar="PATH",
        ini=Ini("retrieval_baseline", "baseline file path"),
        cli=_on(
            _OFFLINE,
            parse=Path,
            metavar="FILE",
            help="baseline file to compare with and update (default: the one the run used, "
            "or <golden>.baseline.json beside the golden set)",
        ),
    ),
    Option(
        "update_baseline",
        "gate",
        "record this run as the baseline (refused on a partial run or failed retriever calls "
        "unless =force)",
        parse=update_mode,
        sourced=True,
        nargs="?",
        const="safe",
        metavar="{safe,force}",
        cli=_on(
            _OFFLINE,
            parse=None,
            metavar=None,
            choices=("safe", "force"),
            help="record the whole as the baseline (refused on failed retriever calls unless "
            "=force), as --retrieval-update-baseline",
        ),
    ),
    Option(
        "max_drop",
        "gate",
        "allowed drop against the baseline, absolute (recall@10=0.01) or relative "
        "(ndcg@10=2%%, latency_p95=20%%); repeatable; default 0.01 for every metric",
        parse=max_drop_arg,
        sourced=True,
        action="append",
        metavar="METRIC=DROP",
        ini=Ini("retrieval_max_drop", "METRIC=DROP lines, e.g. recall@10=0.01", "linelist", False),
        cli={
            "eval": Flag(
                default=[],
                help="allowed drop against the baseline, absolute (0.01) or relative (2%%); "
                "repeatable; wins over the golden file's; default 0.01",
            ),
            "diff": Flag(
                default=[],
                help="allowed drop, absolute (0.01) or relative (2%%); repeatable; default 0.01",
            ),
        },
    ),
    Option(
        "alpha",
        "gate",
        "significance level of the paired test a regression must pass (default "
        f"{DEFAULT_ALPHA}; 1 turns it off)",
        parse=alpha_arg,
        default=DEFAULT_ALPHA,
        metavar="ALPHA",
        ini=Ini("retrieval_alpha", "significance level for regressions", "number"),
        cli=_on(("diff", "eval")),
    ),
    Option(
        "gate",
        "gate",
        "a metric whose drop against the baseline fails the run; repeatable; replaces the "
        "default set (recall, mrr and ndcg at k). Metrics with a threshold or a max drop are "
        "always gated",
        parse=metric_arg,
        action="append",
        metavar="METRIC",
        ini=Ini("retrieval_gate", "metrics gated against the baseline", "linelist"),
        cli={
            "eval": Flag(
                help="a metric whose drop fails the gate (repeatable; default: the golden "
                "file's, else recall, mrr and ndcg at k)"
            ),
            "diff": Flag(
                help="a gated metric (repeatable); default: the gated set REPORT_B was run with"
            ),
        },
    ),
    Option(
        "strict_baseline",
        "gate",
        "a missing or stale baseline fails the run (default: a warning); for CI",
        action="store_true",
        default=False,
        ini=Ini("retrieval_strict_baseline", "a missing or stale baseline fails the run", "bool"),
        cli=_on(_EVAL, help="a missing or stale baseline fails the gate (default: a warning)"),
    ),
    Option(
        "compare_to",
        "gate",
        "in an A/B run, the retriever the others are compared with (default: first)",
        metavar="RETRIEVER_ID",
    ),
    Option(
        "markdown",
        "output",
        "write a GitHub-flavoured Markdown summary (also appended to $GITHUB_STEP_SUMMARY when "
        "set)",
        metavar="PATH",
        ini=Ini("retrieval_markdown", "path of the Markdown summary"),
        cli=_on(
            _OFFLINE,
            parse=Path,
            help="write the Markdown summary (also appended to $GITHUB_STEP_SUMMARY when set)",
        ),
    ),
    Option(
        "html",
        "output",
        "write a self-contained HTML report with plots and a per-query table",
        metavar="PATH",
        ini=Ini("retrieval_html", "path of the HTML report"),
        cli=_on(_OFFLINE, parse=Path, help="write the HTML report"),
    ),
    Option(
        "sample",
        "run",
        "evaluate a seeded sample of N queries, stratified by tag (a fast local check; never "
        "updates a baseline)",
        parse=positive_int,
        metavar="N",
    ),
    Option(
        "sample_seed",
        "run",
        "seed of --retrieval-sample (default 0)",
        parse=int,
        default=0,
        metavar="SEED",
    ),
    Option(
        "progress",
        "output",
        "progress of long evaluations: live line on a terminal, plain lines in CI logs (auto "
        "picks by whether the output is a terminal)",
        default=DEFAULT_PROGRESS,
        choices=("auto", "live", "lines", "off"),
    ),
    Option(
        "only",
        "run",
        "run the golden-set evaluations and nothing else (other tests are deselected; with no "
        "path arguments only the golden sets are collected)",
        action="store_true",
        default=False,
    ),
    Option(
        "strict",
        "run",
        "golden-set problems that are warnings by default (relevant ids missing from the "
        "corpus) are errors",
        action="store_true",
        default=False,
        ini=Ini(
            "retrieval_strict",
            "golden-set warnings (ids missing from the corpus) are errors",
            "bool",
        ),
    ),
    Option(
        "doc_id_key",
        "run",
        "metadata key holding the doc id of LangChain / Haystack Documents and LlamaIndex nodes "
        "(default: the object's own id, then metadata 'id', 'doc_id')",
        metavar="KEY",
        ini=Ini("retrieval_doc_id_key", "metadata key holding a hit's doc id"),
    ),
    Option(
        "split_min",
        "run",
        "under pytest-xdist (-n), a golden set of at least N queries is evaluated as one item "
        f"per worker and merged into one evaluation (default {DEFAULT_SPLIT_MIN}; 0: never)",
        parse=split_min_arg,
        default=DEFAULT_SPLIT_MIN,
        metavar="N",
        ini=Ini(
            "retrieval_split_min", "fewest queries a golden set has to be split under -n", "number"
        ),
    ),
    Option(
        "run",
        "run",
        "evaluate the golden sets on this precomputed run (TREC run, JSON {qid: {doc: score}} "
        "or {qid: [doc, ...]}, JSONL) instead of the retriever fixture; repeatable (one "
        "evaluation per file, its id the file name: an A/B run)",
        action="append",
        metavar="FILE",
        ini=Ini(
            "retrieval_run", "precomputed run files to evaluate instead of the retriever", "paths"
        ),
    ),
    Option(
        "export_run",
        "output",
        "write what each evaluation's retriever returned as a TREC run (ranks and scores, for "
        "trec_eval, ranx, ir_measures); several evaluations: one file each, named after the "
        "golden set and retriever",
        metavar="FILE",
        ini=Ini("retrieval_export_run", "path of the exported TREC run"),
    ),
    Option(
        "allow_outside_links",
        "output",
        "let an output (report, baseline, judge cache, ...) be written through a symlink to a "
        "place outside the project (pytest's rootdir): refused by default",
        action="store_true",
        default=False,
        ini=Ini(
            "retrieval_allow_outside_links",
            "outputs may be written through symlinks to places outside the project",
            "bool",
        ),
        cli={EVERY: Flag(help=_LINKS_HELP)},
    ),
    # ------------------------------------------------------------------------ the judge
    Option(
        "judge",
        "judge",
        "grade the returned hits with an LLM judge: on-topic rate otr@k (needs OPENAI_API_KEY, "
        "Azure OpenAI variables, or --retrieval-judge-base-url)",
        action="store_true",
        default=False,
    ),
    Option(
        "judge_model",
        "judge",
        f"judge model (default {DEFAULT_JUDGE_MODEL})",
        default=DEFAULT_JUDGE_MODEL,
        metavar="MODEL",
        ini=Ini("retrieval_judge_model", "LLM judge model"),
        cli={BUILDERS: Flag(flag="--judge-model"), "judge-batch": Flag(flag="--model")},
    ),
    Option(
        "judge_base_url",
        "judge",
        "OpenAI-compatible endpoint (vLLM, Ollama, ...); default $OPENAI_BASE_URL",
        metavar="URL",
        cli=_on((BUILDERS, "judge-batch")),
    ),
    Option(
        "judge_scale",
        "judge",
        "binary on-topic verdicts (otr@k), or 0-3 grades that add llm_ndcg@k, llm_mrr@k, "
        "llm_precision@k",
        default="binary",
        choices=("binary", "0-3"),
        cli=_on(("judge-batch",)),
    ),
    Option(
        "judge_min_score",
        "judge",
        "a hit is on topic when the judge says yes with at least this score (default "
        f"{DEFAULT_MIN_SCORE})",
        parse=fraction,
        default=DEFAULT_MIN_SCORE,
        metavar="SCORE",
        cli=_on(("judge-batch",)),
    ),
    Option(
        "judge_relevance_level",
        "judge",
        "on the 0-3 scale, the lowest grade that counts as relevant / on topic for otr@k, "
        f"llm_precision@k and llm_mrr@k (default {DEFAULT_RELEVANCE_LEVEL}: grade 1 would not "
        "satisfy the searcher)",
        parse=int,
        default=DEFAULT_RELEVANCE_LEVEL,
        choices=(1, 2, 3),
    ),
    Option(
        "judge_samples",
        "judge",
        "ask N times per hit (seeds 0..N-1) and report how often the answers agree; the "
        "verdict is the majority (default 1)",
        parse=positive_int,
        default=1,
        metavar="N",
        cli=_on(
            ("judge-batch",),
            help="answers per hit, as --retrieval-judge-samples in the pytest run (default 1)",
        ),
    ),
    Option(
        "judge_min_coverage",
        "judge",
        f"fail when fewer of the hits than this were graded (default {DEFAULT_MIN_COVERAGE})",
        parse=fraction,
        default=DEFAULT_MIN_COVERAGE,
        metavar="FRACTION",
        cli=_on(
            (BUILDERS,),
            help="share of the judge's answers needed, else the command fails (default "
            f"{DEFAULT_MIN_COVERAGE})",
        ),
    ),
    Option(
        "judge_concurrency",
        "judge",
        f"judge requests in flight at once (default {DEFAULT_JUDGE_CONCURRENCY})",
        parse=positive_int,
        default=DEFAULT_JUDGE_CONCURRENCY,
        metavar="N",
        cli=_on((BUILDERS,)),
    ),
    Option(
        "judge_timeout",
        "judge",
        f"timeout of one judge request (default {DEFAULT_JUDGE_TIMEOUT:g})",
        parse=positive_float,
        default=DEFAULT_JUDGE_TIMEOUT,
        metavar="SECONDS",
        cli=_on((BUILDERS,)),
    ),
    Option(
        "judge_deadline",
        "judge",
        "stop calling the judge after this many seconds of judging in this process (all "
        "evaluations together; retrieval does not count); the hits left count as ungraded "
        f"(default {DEFAULT_DEADLINE:g}; 0: no deadline)",
        parse=seconds_or_zero,
        default=DEFAULT_DEADLINE,
        metavar="SECONDS",
        ini=Ini(
            "retrieval_judge_deadline",
            "seconds of judging after which the LLM judge stops calling (0: no deadline)",
            "number",
        ),
        cli=_on(
            (BUILDERS,),
            help=f"seconds of judging before it stops, 0: none (default {DEFAULT_DEADLINE:g})",
        ),
    ),
    Option(
        "judge_max_failures",
        "judge",
        "circuit breaker: stop calling the judge after N consecutive connection errors, "
        f"timeouts or 5xx answers (default {DEFAULT_JUDGE_MAX_FAILURES})",
        parse=positive_int,
        default=DEFAULT_JUDGE_MAX_FAILURES,
        metavar="N",
    ),
    Option(
        "judge_max_wait",
        "judge",
        "longest Retry-After the judge honours before giving a pair up (default "
        f"{DEFAULT_JUDGE_MAX_WAIT:g})",
        parse=positive_float,
        default=DEFAULT_JUDGE_MAX_WAIT,
        metavar="SECONDS",
    ),
    Option(
        "judge_cache",
        "judge",
        "verdict cache folder (default: under pytest's cache dir)",
        default=DEFAULT_JUDGE_CACHE,
        metavar="DIR",
        ini=Ini("retrieval_judge_cache", "LLM judge cache folder"),
        cli=_on(
            (BUILDERS, "judge-batch"),
            flag="--cache",
            parse=Path,
            help=f"answer cache folder, shared with pytest runs (default {DEFAULT_JUDGE_CACHE})",
        ),
    ),
    Option(
        "judge_fallback",
        "judge",
        "without credentials (a fork's PR): error (default), or cache-only: use cached "
        "verdicts with a warning",
        default="error",
        choices=("error", "cache-only"),
        ini=Ini(
            "retrieval_judge_fallback",
            "what the judge does without credentials: error (default) or cache-only",
        ),
    ),
    Option(
        "judge_no_cache",
        "judge",
        "neither read nor write the verdict cache",
        action="store_true",
        default=False,
        cli=_on((BUILDERS,), help="neither read nor write the cache"),
    ),
    Option(
        "judge_retry_ungraded",
        "judge",
        "ask again about the hits whose cached answer was ungraded (a refusal, a malformed or "
        "out-of-schema answer); without it they are read from the cache as what they were, at "
        "no cost",
        action="store_true",
        default=False,
        cli=_on(
            (BUILDERS,),
            help="ask again where the cached answer was unusable (a refusal, a malformed "
            "answer); without it that answer is read from the cache as it was, at no cost",
        ),
    ),
    Option(
        "judge_cache_only",
        "judge",
        "offline: use cached verdicts only, never call the judge (uncached hits count as "
        "ungraded); for pre-commit",
        action="store_true",
        default=False,
        cli=_on((BUILDERS,), help="answer from the cache only; call nothing"),
    ),
    Option(
        "judge_max_calls",
        "judge",
        "stop calling the judge after N requests (the rest count as ungraded)",
        parse=positive_int,
        metavar="N",
        cli=_on((BUILDERS,)),
    ),
    Option(
        "judge_max_tokens",
        "judge",
        "stop calling the judge once N tokens (prompt + completion) were spent",
        parse=positive_int,
        metavar="N",
        cli=_on((BUILDERS,)),
    ),
    Option(
        "judge_prompt",
        "judge",
        "your own judge instructions (system message); versioned by content hash",
        parse=existing_file,
        metavar="FILE",
        cli=_on((BUILDERS, "judge-batch"), parse=Path),  # read when it runs, not when parsed
    ),
    Option(
        "judge_text_budget",
        "judge",
        "documents longer than this are cut before judging (default "
        f"{DEFAULT_TEXT_BUDGET} characters)",
        parse=positive_int,
        default=DEFAULT_TEXT_BUDGET,
        metavar="CHARS",
        cli=_on((BUILDERS, "judge-batch")),
    ),
    Option(
        "judge_validate",
        "judge",
        "human-labelled (query, doc, on_topic) pairs: report the judge's accuracy and Cohen's "
        "kappa against them",
        parse=existing_file,
        metavar="LABELS",
    ),
    # ------------------------------------------------------------------------ ini keys only
    Option(
        "fixture",
        "run",
        default=DEFAULT_FIXTURE,
        pytest=False,
        ini=Ini("retrieval_fixture", f"name of the retriever fixture (default {DEFAULT_FIXTURE})"),
    ),
    Option(
        "judge_prices",
        "judge",
        pytest=False,
        ini=Ini(
            "retrieval_judge_prices",
            "MODEL=INPUT,OUTPUT lines: US$ per million tokens, for the cost estimate",
            "linelist",
        ),
    ),
)

BY_NAME: Mapping[str, Option] = {option.name: option for option in OPTIONS}


def add_cli_options(parser: argparse.ArgumentParser | Any, command: str) -> None:
    """The options ``command`` of ``pytest-retrieval`` takes, in :data:`OPTIONS` order
    (``parser``: a parser or an argument group)."""
    first = sorted(OPTIONS, key=lambda option: EVERY not in option.cli)  # what all commands take
    for option in first:
        if option.takes(command):
            parser.add_argument(option.cli_flag(command), **option.cli_arguments(command))


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The judge's client, cache, budget and limits for the commands that build a golden set
    with it (``synth``, ``pool``), in one group."""
    group = parser.add_argument_group(
        "LLM judge",
        "the client, cache, retries and budget of --retrieval-judge (OPENAI_API_KEY, Azure "
        "OpenAI variables, or --base-url for a local OpenAI-compatible server)",
    )
    add_cli_options(group, BUILDERS)


# ---------------------------------------------------------------------------- the judge


@dataclass(frozen=True)
class JudgeConfig:
    """The LLM judge's settings: one object for a pytest run (``--retrieval-judge-*``), the
    builders (:func:`judge_config`) and ``judge-batch``; its defaults are the options'."""

    model: str = DEFAULT_JUDGE_MODEL
    base_url: str | None = None
    scale: Literal["binary", "0-3"] | str = "binary"
    min_score: float = DEFAULT_MIN_SCORE
    min_coverage: float = DEFAULT_MIN_COVERAGE
    concurrency: int = DEFAULT_JUDGE_CONCURRENCY
    timeout: float = DEFAULT_JUDGE_TIMEOUT
    max_retries: int = 4
    max_retry_wait: float = DEFAULT_JUDGE_MAX_WAIT
    cache_dir: Path | None = None  # None (or use_cache False): no cache
    use_cache: bool = True
    cache_only: bool = False
    max_calls: int | None = None
    max_tokens_budget: int | None = None
    prompt_file: Path | None = None
    text_budget_chars: int = DEFAULT_TEXT_BUDGET
    #: US$ per million tokens (input, output) per model, over the judge's own table
    prices: Mapping[str, tuple[float, float]] | None = None
    #: on the 0-3 scale, the lowest grade that counts as relevant / on topic
    relevance_level: int = DEFAULT_RELEVANCE_LEVEL
    #: ask this many times per pair and report the agreement (majority verdict)
    samples: int = 1
    #: seconds of judging (all ``judge`` calls of the process) before it stops (None: never)
    deadline: float | None = DEFAULT_DEADLINE
    #: consecutive transport / 5xx failures that stop every call
    max_failures: int = DEFAULT_JUDGE_MAX_FAILURES
    #: ask again about the pairs whose cached answer was ungraded (a refusal, a malformed
    #: answer); without it such an answer is read from the cache as what it was
    retry_ungraded: bool = False
    #: the option that sets ``retry_ungraded``, as the caller spells it (for messages)
    retry_option: str = "--retrieval-judge-retry-ungraded"
    #: without credentials (a fork's PR): "error", or "cache-only" with a warning
    fallback: str = "error"
    #: human labels to report the judge's agreement with (``--retrieval-judge-validate``)
    validate: Path | None = None


def judge_config(args: argparse.Namespace, scale: str = "0-3") -> JudgeConfig:
    """The :class:`JudgeConfig` a builder's arguments (:func:`add_judge_arguments`) describe."""
    return JudgeConfig(
        model=args.judge_model,
        base_url=args.base_url,
        scale=scale,
        min_coverage=args.min_coverage,
        concurrency=args.concurrency,
        timeout=args.timeout,
        cache_dir=args.cache,
        use_cache=not args.no_cache,
        cache_only=args.cache_only,
        max_calls=args.max_calls,
        max_tokens_budget=args.max_tokens,
        prompt_file=args.prompt,
        text_budget_chars=args.text_budget,
        deadline=args.deadline or None,
        retry_ungraded=args.retry_ungraded,
        retry_option="--retry-ungraded",
    )
