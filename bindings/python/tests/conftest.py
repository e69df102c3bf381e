"""Shared helpers. Expected values in these tests come from SPEC.md, the
vectors in tests/vectors (hand-derived), or arithmetic done by hand in the
test itself, never from the code under test."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

import pacer

REPO_ROOT = Path(__file__).resolve().parents[3]
VECTORS = REPO_ROOT / "tests" / "vectors"


def load_vectors(name: str) -> Any:
    return json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))


class FakeClock:
    """A clock in seconds (like time.monotonic) set and advanced by hand in ms."""

    def __init__(self, ms: int = 0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry() -> pacer.NoticeRegistry:
    """A fresh notice registry, so tests see their own notices."""
    return pacer.NoticeRegistry()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """asyncio.run with a watchdog, so a broken admit fails instead of hanging."""

    async def guarded() -> Any:
        return await asyncio.wait_for(coro, 10)

    return asyncio.run(guarded())


class GateSleep:
    """An injected sleep: records the delays asked for and waits until opened."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self.started = asyncio.Event()
        self.gate = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        self.started.set()
        await self.gate.wait()
