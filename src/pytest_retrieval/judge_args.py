"""The LLM judge's command-line arguments for the commands that call it outside pytest
(``synth``, ``pool``): the same client, cache, retries, budget and deadline as
``--retrieval-judge-*`` in a pytest run, spelled without the ``--retrieval-judge-`` prefix."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .judge_options import DEFAULT_DEADLINE, DEFAULT_JUDGE_MODEL
from .validators import fraction, positive_float, positive_int, seconds_or_zero

if TYPE_CHECKING:
    from .judge import Judge, JudgeConfig

#: where the pytest run keeps its judge cache, so a CLI command and a later run share answers
DEFAULT_JUDGE_CACHE = Path(".pytest_cache") / "d" / "retrieval-judge"


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """``--judge-model``, ``--base-url``, ``--cache``, budgets and limits, in one group."""
    group = parser.add_argument_group(
        "LLM judge",
        "the client, cache, retries and budget of --retrieval-judge (OPENAI_API_KEY, Azure "
        "OpenAI variables, or --base-url for a local OpenAI-compatible server)",
    )
    group.add_argument(
        "--judge-model", default=DEFAULT_JUDGE_MODEL, help=f"default {DEFAULT_JUDGE_MODEL}"
    )
    group.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint")
    group.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_JUDGE_CACHE,
        help=f"answer cache folder, shared with pytest runs (default {DEFAULT_JUDGE_CACHE})",
    )
    group.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    group.add_argument(
        "--cache-only", action="store_true", help="answer from the cache only; call nothing"
    )
    group.add_argument(
        "--retry-ungraded",
        action="store_true",
        help="ask again where the cached answer was unusable (a refusal, a malformed answer); "
        "without it that answer is read from the cache as it was, at no cost",
    )
    group.add_argument("--max-calls", type=positive_int, default=None, help="request budget")
    group.add_argument("--max-tokens", type=positive_int, default=None, help="token budget")
    group.add_argument(
        "--min-coverage",
        type=fraction,
        default=0.95,
        help="share of the judge's answers needed, else the command fails (default 0.95)",
    )
    group.add_argument("--concurrency", type=positive_int, default=16, help="default 16")
    group.add_argument(
        "--timeout", type=positive_float, default=60.0, help="seconds per request (default 60)"
    )
    group.add_argument(
        "--deadline",
        type=seconds_or_zero,
        default=DEFAULT_DEADLINE,
        help=f"seconds of judging before it stops, 0: none (default {DEFAULT_DEADLINE:g})",
    )
    group.add_argument("--prompt", type=Path, default=None, help="your own judge prompt file")
    group.add_argument(
        "--text-budget",
        type=positive_int,
        default=4000,
        help="characters of document text sent (default 4000)",
    )


def judge_config(args: argparse.Namespace, scale: str = "0-3") -> JudgeConfig:
    """The :class:`JudgeConfig` the arguments describe (nothing is called yet)."""
    from .judge import JudgeConfig

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


def judge_from_args(args: argparse.Namespace, scale: str = "0-3") -> Judge:
    """The judge, or :class:`~.judge.JudgeConfigError` (a one-line message) for a bad
    setting such as a missing API key."""
    from .judge import Judge

    judge = Judge(judge_config(args, scale))
    args.opened = [*getattr(args, "opened", ()), judge]  # closed when the command ends
    return judge
