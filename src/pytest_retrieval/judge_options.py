"""The ``--retrieval-judge-*`` options (the LLM judge's), declared apart from the core
options so each list stays readable; resolved by :func:`~.options.settings_from_config`."""

from __future__ import annotations

from typing import Any

from .validators import existing_file, fraction, positive_float, positive_int, seconds_or_zero

DEFAULT_JUDGE_MODEL = "gpt-4.1-mini"
#: seconds of judging (all evaluations of a process together) before the judge stops (0: never)
DEFAULT_DEADLINE = 1800.0


def add_judge_options(group: Any) -> None:
    group.addoption(
        "--retrieval-judge",
        action="store_true",
        default=False,
        help="grade the returned hits with an LLM judge: on-topic rate otr@k (needs "
        "OPENAI_API_KEY, Azure OpenAI variables, or --retrieval-judge-base-url)",
    )
    group.addoption(
        "--retrieval-judge-model",
        metavar="MODEL",
        default=None,
        help=f"judge model (default {DEFAULT_JUDGE_MODEL}). ini: retrieval_judge_model",
    )
    group.addoption(
        "--retrieval-judge-base-url",
        metavar="URL",
        default=None,
        help="OpenAI-compatible endpoint (vLLM, Ollama, ...); default $OPENAI_BASE_URL",
    )
    group.addoption(
        "--retrieval-judge-scale",
        choices=["binary", "0-3"],
        default="binary",
        help="binary on-topic verdicts (otr@k), or 0-3 grades that add llm_ndcg@k, llm_mrr@k, "
        "llm_precision@k",
    )
    group.addoption(
        "--retrieval-judge-min-score",
        type=fraction,
        metavar="SCORE",
        default=0.5,
        help="a hit is on topic when the judge says yes with at least this score (default 0.5)",
    )
    group.addoption(
        "--retrieval-judge-relevance-level",
        type=int,
        choices=[1, 2, 3],
        default=2,
        help="on the 0-3 scale, the lowest grade that counts as relevant / on topic for "
        "otr@k, llm_precision@k and llm_mrr@k (default 2: grade 1 would not satisfy the "
        "searcher)",
    )
    group.addoption(
        "--retrieval-judge-samples",
        type=positive_int,
        metavar="N",
        default=1,
        help="ask N times per hit (seeds 0..N-1) and report how often the answers agree; "
        "the verdict is the majority (default 1)",
    )
    group.addoption(
        "--retrieval-judge-min-coverage",
        type=fraction,
        metavar="FRACTION",
        default=0.95,
        help="fail when fewer of the hits than this were graded (default 0.95)",
    )
    group.addoption(
        "--retrieval-judge-concurrency",
        type=positive_int,
        metavar="N",
        default=16,
        help="judge requests in flight at once (default 16)",
    )
    group.addoption(
        "--retrieval-judge-timeout",
        type=positive_float,
        metavar="SECONDS",
        default=60.0,
        help="timeout of one judge request (default 60)",
    )
    group.addoption(
        "--retrieval-judge-deadline",
        type=seconds_or_zero,
        metavar="SECONDS",
        default=None,
        help=f"stop calling the judge after this many seconds of judging in this process "
        f"(all evaluations together; retrieval does not count); the hits left count "
        f"as ungraded (default {DEFAULT_DEADLINE:g}; 0: no deadline). ini: "
        "retrieval_judge_deadline",
    )
    group.addoption(
        "--retrieval-judge-max-failures",
        type=positive_int,
        metavar="N",
        default=8,
        help="circuit breaker: stop calling the judge after N consecutive connection "
        "errors, timeouts or 5xx answers (default 8)",
    )
    group.addoption(
        "--retrieval-judge-max-wait",
        type=positive_float,
        metavar="SECONDS",
        default=300.0,
        help="longest Retry-After the judge honours before giving a pair up (default 300)",
    )
    group.addoption(
        "--retrieval-judge-cache",
        metavar="DIR",
        default=None,
        help="verdict cache folder (default: under pytest's cache dir). ini: retrieval_judge_cache",
    )
    group.addoption(
        "--retrieval-judge-fallback",
        choices=["error", "cache-only"],
        default=None,
        help="without credentials (a fork's PR): error (default), or cache-only: use cached "
        "verdicts with a warning. ini: retrieval_judge_fallback",
    )
    group.addoption(
        "--retrieval-judge-no-cache",
        action="store_true",
        default=False,
        help="neither read nor write the verdict cache",
    )
    group.addoption(
        "--retrieval-judge-retry-ungraded",
        action="store_true",
        default=False,
        help="ask again about the hits whose cached answer was ungraded (a refusal, a "
        "malformed or out-of-schema answer); without it they are read from the cache as "
        "what they were, at no cost",
    )
    group.addoption(
        "--retrieval-judge-cache-only",
        action="store_true",
        default=False,
        help="offline: use cached verdicts only, never call the judge (uncached hits count "
        "as ungraded); for pre-commit",
    )
    group.addoption(
        "--retrieval-judge-max-calls",
        type=positive_int,
        metavar="N",
        default=None,
        help="stop calling the judge after N requests (the rest count as ungraded)",
    )
    group.addoption(
        "--retrieval-judge-max-tokens",
        type=positive_int,
        metavar="N",
        default=None,
        help="stop calling the judge once N tokens (prompt + completion) were spent",
    )
    group.addoption(
        "--retrieval-judge-prompt",
        type=existing_file,
        metavar="FILE",
        default=None,
        help="your own judge instructions (system message); versioned by content hash",
    )
    group.addoption(
        "--retrieval-judge-text-budget",
        type=positive_int,
        metavar="CHARS",
        default=4000,
        help="documents longer than this are cut before judging (default 4000 characters)",
    )
    group.addoption(
        "--retrieval-judge-validate",
        type=existing_file,
        metavar="LABELS",
        default=None,
        help="human-labelled (query, doc, on_topic) pairs: report the judge's accuracy and "
        "Cohen's kappa against them",
    )


# ---------------------------------------------------------------------------- settings
