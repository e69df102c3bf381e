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


#: Keys no keyed call takes (not a str, int or bytes; a bool is not an int here).
BAD_KEYS = ({}, [], 1.5, True, (1, 2), object())


def check_keyed_calls_refuse_bad_keys(p: Any) -> None:
    """Each of BAD_KEYS is a TypeError naming the key for each keyed call of
    ``p`` (a Pacer or a SharedPacer): admit, admit_blocking and forget."""
    for key in BAD_KEYS:
        with pytest.raises(TypeError, match="key"):
            run(p.admit(key=key))
        with pytest.raises(TypeError, match="key"):
            p.admit_blocking(key=key)
        with pytest.raises(TypeError, match="key"):
            p.forget(key)


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
