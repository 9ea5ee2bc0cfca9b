"""What the judge's unit tests share: the test server with a key in the environment, a
judge pointed at it, pairs to grade, and backoff sleeps that take no time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from judge_server import JudgeServer, serve

from pytest_retrieval.judge import Judge, JudgeConfig, JudgePair

QUERY = "apple pie recipe"
ON = "a classic apple pie recipe with butter crust"
OFF = "bread machine manual and warranty"


@contextmanager
def served(monkeypatch: pytest.MonkeyPatch, key: str) -> Iterator[JudgeServer]:
    """The test server requiring ``key``, which is the only credential in the environment."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with serve(api_key=key) as running:
        yield running


def make(server: JudgeServer, tmp_path: Path | None = None, **options: Any) -> Judge:
    """A judge of ``server``; with ``tmp_path``, its cache lives there."""
    options.setdefault("cache_dir", tmp_path / "cache" if tmp_path else None)
    options.setdefault("use_cache", tmp_path is not None)
    return Judge(JudgeConfig(base_url=server.base_url, **options))


def pairs(n: int, text: str = ON) -> list[JudgePair]:
    """``n`` distinct pairs of QUERY with ``text`` (numbered, so none shares a cache key)."""
    return [JudgePair(QUERY, None, f"d{i}", f"{text} {i}") for i in range(n)]


def record_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The judge's sleeps (backoff, pauses), recorded and skipped."""
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float, *args: Any) -> None:
        slept.append(delay)
        await real_sleep(0)

    monkeypatch.setattr("pytest_retrieval.judge.client.asyncio.sleep", fake_sleep)
    return slept
