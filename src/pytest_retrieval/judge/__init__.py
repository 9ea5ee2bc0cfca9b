"""LLM judge for retrieval results: on-topic rate (OTR@K) and graded relevance.

Importing this package imports neither ``openai`` nor anything heavy; the client is
created when the first request is made. See ``client.py`` for retries, budgets and
failure handling, ``prompts.py`` for the (versioned) instructions and injection defences.
"""

from .client import (
    PRICES,
    Judge,
    JudgeConfig,
    JudgeConfigError,
    JudgePair,
    NoCredentials,
    Verdict,
    judge_from_args,
)
from .prompts import PROMPT_VERSION

__all__ = [
    "PRICES",
    "PROMPT_VERSION",
    "Judge",
    "JudgeConfig",
    "JudgeConfigError",
    "JudgePair",
    "NoCredentials",
    "Verdict",
    "judge_from_args",
]
