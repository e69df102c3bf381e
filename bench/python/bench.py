"""The Python layer's benchmark: the binding's hot calls side by side with
what a Python user would pick instead (aiolimiter, limits, pyrate-limiter,
a plain Python token bucket). Run by bench/python/run.sh, which makes the
venv and installs everything first.

    python bench/python/bench.py            # ROUNDS rounds (default 3), JSON + a table
    python bench/python/bench.py --smoke    # a few hundred calls per case, answers checked

Every case is driven by a tight loop in this process. A round measures each
case once: five batches of N calls (N sized so a batch takes ~60 ms), the
median batch in ns per call; the JSON keeps one median per round. The loop
itself (``for ... in range``/``repeat``) is included in every row alike; the
``loop_empty`` row is its cost. gc stays enabled.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import aiolimiter
import limits
import limits.storage
import limits.strategies
import pyrate_limiter

import pacer
from pacer import _fast
from pacer._native import lib

REPO_ROOT = Path(__file__).resolve().parents[2]
BATCHES = 5
BATCH_SECONDS = 0.06
SMOKE_CALLS = 300
ALLOC_CALLS = 2000
#: Big enough that no competitor configured to admit ever reaches it.
UNREACHED = 10**12
now_ns = time.perf_counter_ns
repeat = itertools.repeat


class PyBucket:
    """A plain Python token bucket, written the straightforward way: integer
    math in units of 1/60000 of a token (the rate per minute is then the
    refill per ms), a burst cap, one token per admission."""

    __slots__ = ("rate_per_minute", "capacity", "tokens", "last_ms", "clock")

    def __init__(self, rate_per_minute: int, burst: int, now_ms: int, clock: Callable[[], int] | None = None) -> None:
        self.rate_per_minute = rate_per_minute
        self.capacity = burst * 60000
        self.tokens = self.capacity
        self.last_ms = now_ms
        self.clock = clock

    def try_take(self, now_ms: int) -> bool:
        tokens = self.tokens
        if now_ms > self.last_ms:
            tokens += (now_ms - self.last_ms) * self.rate_per_minute
            if tokens > self.capacity:
                tokens = self.capacity
            self.last_ms = now_ms
        if tokens >= 60000:
            self.tokens = tokens - 60000
            return True
        self.tokens = tokens
        return False

    async def admit(self) -> bool:
        """The asyncio shape of ``Pacer.admit``: read the clock (seconds) as
        whole ms, decide; it never sleeps here (the benchmark admits at once)."""
        return self.try_take(int(self.clock() * 1000))  # type: ignore[misc]


class Case:
    """One row: ``timed(n)`` makes n calls in a tight loop and returns the
    elapsed ns; ``kept(n)`` makes n calls and returns their results (for the
    allocation count and the smoke checks); ``check(results)`` raises
    AssertionError unless the answers are the ones configured."""

    id: str
    what: str
    #: What every call answers (``None`` or ``True``), for the ``check`` of a
    #: case that does not define its own.
    answer: Any

    def timed(self, n: int) -> int:
        raise NotImplementedError

    def kept(self, n: int) -> list[Any]:
        raise NotImplementedError

    def check(self, results: list[Any]) -> None:
        assert all(r is self.answer for r in results)


# ---------------------------------------------------------------- the cases


class LoopEmpty(Case):
    id = "loop_empty"
    what = "the benchmark loop alone (for ... in repeat), included in every row"
    answer = None

    def timed(self, n: int) -> int:
        start = now_ns()
        for _ in repeat(None, n):
            pass
        return now_ns() - start

    def kept(self, n: int) -> list[Any]:
        return [None for _ in repeat(None, n)]


class CallCase(Case):
    """A case whose calls are ``call()``, no arguments (``call`` is bound
    once, outside the loop)."""

    call: Callable[[], Any]

    def timed(self, n: int) -> int:
        call = self.call
        start = now_ns()
        for _ in repeat(None, n):
            call()
        return now_ns() - start

    def kept(self, n: int) -> list[Any]:
        call = self.call
        return [call() for _ in repeat(None, n)]


class FloorCffi(CallCase):
    id = "floor_cffi_noop"
    what = "pacer_abi_version() through the compiled cffi module: the cffi crossing floor"

    def __init__(self) -> None:
        self.call = lib.pacer_abi_version

    def check(self, results: list[Any]) -> None:
        assert all(r == pacer.ABI_VERSION for r in results)


class FloorC(CallCase):
    id = "floor_c_noop"
    what = "pacer._fast.noop(): the crossing floor of the binding's C extension (METH_NOARGS)"
    answer = None

    def __init__(self) -> None:
        self.call = _fast.noop


class StepCase(Case):
    """A case whose calls are ``step(now)``, one for each reading of
    ``_clock(n)`` (``step`` is bound once, outside the loop)."""

    step: Callable[[int], Any]

    def _clock(self, n: int) -> Iterable[int]:
        raise NotImplementedError

    def timed(self, n: int) -> int:
        step = self.step
        clock = self._clock(n)
        start = now_ns()
        for now in clock:
            step(now)
        return now_ns() - start

    def kept(self, n: int) -> list[Any]:
        step = self.step
        return [step(now) for now in self._clock(n)]


class AdvancingCase(StepCase):
    """A case whose calls each get a clock reading 1000 ms after the last."""

    now = 0

    def _clock(self, n: int) -> range:
        start, self.now = self.now, self.now + n * 1000
        return range(start, self.now, 1000)


class ReserveCase(StepCase):
    """``Pacer.reserve(now_ms)`` on a pacer at 60/min, burst 1 (the calls
    give the time: the pacer's own clock is not read)."""

    def __init__(self) -> None:
        self.pacer = pacer.Pacer(rate_per_minute=60, burst=1, clock=lambda: 0)
        self.step = self.pacer.reserve


class PacerReserve(AdvancingCase, ReserveCase):
    id = "pacer_reserve"
    what = "Pacer.reserve(now_ms) admitting (60/min, burst 1, clock +1000 ms per call): Admitted with a Ticket"

    def check(self, results: list[Any]) -> None:
        # One token a second at 60/min: every call admits at once, debiting one token.
        for r in results:
            assert isinstance(r, pacer.Admitted) and r.wait_ms == 0 and r.path is pacer.AdmitPath.PACED, r
            assert r.ticket is not None and r.ticket.debit_units == 60000 and not r.ticket.spent, r


class PacerRefuse(ReserveCase):
    id = "pacer_reserve_refuse"
    what = "Pacer.reserve(now_ms) on a drained pacer at a fixed clock: Refused"

    def __init__(self) -> None:
        super().__init__()
        # Default budget: wait bound 4833 ms, so admissions wait 0..4000 ms, then refusals.
        for _ in range(100):
            if isinstance(self.pacer.reserve(0), pacer.Refused):
                break
        else:  # pragma: no cover - the pacer never refused
            raise AssertionError("pacer_reserve_refuse: the pacer does not drain")

    def _clock(self, n: int) -> Iterable[int]:
        return repeat(0, n)  # a fixed clock

    def check(self, results: list[Any]) -> None:
        # The 6th admission would wait 5000 ms, past the 4833 ms bound; the hint is 5 s capped at 4 s.
        assert all(r == pacer.Refused(5000, 4, False) for r in results), results[:3]


class PyBucketCase(AdvancingCase):
    id = "py_bucket"
    what = "a plain Python token bucket (integer ms math), try_take(now_ms) admitting, clock +1000 ms per call"
    answer = True

    def __init__(self) -> None:
        self.bucket = PyBucket(60, 1, 0)
        self.step = self.bucket.try_take
        self.now = 0

    def check(self, results: list[Any]) -> None:
        super().check(results)
        drained = PyBucket(60, 1, 0)
        assert [drained.try_take(0), drained.try_take(999), drained.try_take(1000)] == [True, False, True]


class AsyncCase(Case):
    """A case awaited inside one running event loop (the same loop for every
    round): the loop runs one coroutine that awaits n calls and times itself."""

    loop: asyncio.AbstractEventLoop

    def timed(self, n: int) -> int:
        return self.loop.run_until_complete(self._timed(n))

    def kept(self, n: int) -> list[Any]:
        return self.loop.run_until_complete(self._kept(n))

    async def _timed(self, n: int) -> int:
        raise NotImplementedError

    async def _kept(self, n: int) -> list[Any]:
        raise NotImplementedError


class AwaitCase(AsyncCase):
    """An async case whose calls are ``await call()``, no arguments
    (``call`` is bound once, outside the loop)."""

    call: Callable[[], Awaitable[Any]]

    async def _timed(self, n: int) -> int:
        call = self.call
        start = now_ns()
        for _ in repeat(None, n):
            await call()
        return now_ns() - start

    async def _kept(self, n: int) -> list[Any]:
        call = self.call
        return [await call() for _ in repeat(None, n)]


async def _nothing() -> None:
    return None


class AwaitNoop(AwaitCase):
    id = "asyncio_await_noop"
    what = "await of a no-op coroutine in a running loop: the await cost inside every async row (not subtracted)"
    answer = None

    def __init__(self) -> None:
        self.call = _nothing


class AioLimiterAcquire(AwaitCase):
    id = "aiolimiter_acquire"
    what = "await AsyncLimiter.acquire() (aiolimiter), capacity never reached so it never waits"
    answer = None

    def __init__(self) -> None:
        # max_rate 10**12 per second: the leaky bucket's level never reaches it.
        self.limiter = aiolimiter.AsyncLimiter(UNREACHED, 1)
        self.call = self.limiter.acquire

    def check(self, results: list[Any]) -> None:
        super().check(results)
        assert self.limiter.has_capacity()
        # As configured for a pacer-like rate, it would make the second caller wait.
        small = aiolimiter.AsyncLimiter(1, 60)

        async def twice() -> tuple[bool, bool]:
            await small.acquire()
            return True, small.has_capacity()

        assert self.loop.run_until_complete(twice()) == (True, False)


class PacerAdmit(AwaitCase):
    id = "pacer_admit_async_e2e"
    what = "await Pacer.admit() end to end (clock read, reserve, no sleep): admits at once, clock +1 s per call"

    def __init__(self) -> None:
        # A clock in whole seconds, one second later at every read.
        self.pacer = pacer.Pacer(rate_per_minute=60, burst=1, clock=itertools.count().__next__)
        self.call = self.pacer.admit

    def check(self, results: list[Any]) -> None:
        for r in results:
            assert isinstance(r, pacer.Admitted) and r.wait_ms == 0 and r.ticket is not None, r


class PyBucketAdmit(AwaitCase):
    id = "py_bucket_admit_async_e2e"
    what = "await PyBucket.admit(): the plain bucket in the same asyncio shape, same clock"
    answer = True

    def __init__(self) -> None:
        clock = itertools.count().__next__
        self.bucket = PyBucket(60, 1, clock() * 1000, clock)
        self.call = self.bucket.admit


class LimitsHit(Case):
    id = "limits_hit"
    what = "limits FixedWindowRateLimiter.hit() over MemoryStorage, admitting (limit never reached)"
    answer = True

    def __init__(self) -> None:
        self.storage = limits.storage.MemoryStorage()
        self.limiter = limits.strategies.FixedWindowRateLimiter(self.storage)
        self.item = limits.RateLimitItemPerSecond(UNREACHED)

    def timed(self, n: int) -> int:
        hit, item = self.limiter.hit, self.item
        start = now_ns()
        for _ in repeat(None, n):
            hit(item, "bench")
        return now_ns() - start

    def kept(self, n: int) -> list[Any]:
        hit, item = self.limiter.hit, self.item
        return [hit(item, "bench") for _ in repeat(None, n)]

    def check(self, results: list[Any]) -> None:
        super().check(results)
        one = limits.RateLimitItemPerMinute(1)
        assert [self.limiter.hit(one, "check"), self.limiter.hit(one, "check")] == [True, False]


class PyrateTryAcquire(Case):
    id = "pyrate_try_acquire"
    what = "pyrate-limiter Limiter.try_acquire(blocking=False) on its default InMemoryBucket, admitting"
    answer = True

    def __init__(self) -> None:
        rate = pyrate_limiter.Rate(UNREACHED, pyrate_limiter.Duration.SECOND)
        self.limiter = pyrate_limiter.Limiter(rate)

    def timed(self, n: int) -> int:
        acquire = self.limiter.try_acquire
        start = now_ns()
        for _ in repeat(None, n):
            acquire("bench", blocking=False)
        return now_ns() - start

    def kept(self, n: int) -> list[Any]:
        acquire = self.limiter.try_acquire
        return [acquire("bench", blocking=False) for _ in repeat(None, n)]

    def check(self, results: list[Any]) -> None:
        super().check(results)
        small = pyrate_limiter.Limiter(pyrate_limiter.Rate(1, pyrate_limiter.Duration.MINUTE))
        assert [small.try_acquire("check", blocking=False), small.try_acquire("check", blocking=False)] == [True, False]


def make_cases(loop: asyncio.AbstractEventLoop) -> list[Case]:
    cases: list[Case] = [
        LoopEmpty(), FloorCffi(), FloorC(), PacerReserve(), PacerRefuse(), PyBucketCase(),
        AwaitNoop(), AioLimiterAcquire(), LimitsHit(), PyrateTryAcquire(), PacerAdmit(), PyBucketAdmit(),
    ]
    for case in cases:
        if isinstance(case, AsyncCase):
            case.loop = loop
    return cases


# ---------------------------------------------------------------- measuring


def batch_size(case: Case) -> int:
    """Calls per batch so that one batch takes about BATCH_SECONDS."""
    n = 1000
    while True:
        elapsed = case.timed(n)
        if elapsed >= 20_000_000 or n >= 1 << 26:
            return max(1000, int(n * BATCH_SECONDS * 1e9 / max(elapsed, 1)))
        n *= 4


def round_ns(case: Case, n: int) -> float:
    """The median of BATCHES batches of n calls, ns per call."""
    return statistics.median(case.timed(n) / n for _ in range(BATCHES))


def allocations(case: Case) -> tuple[float, float]:
    """(blocks, bytes) left allocated per call, the results kept alive:
    the objects a call hands back plus anything the limiter keeps. Blocks
    from sys.getallocatedblocks(), bytes from tracemalloc, each over
    ALLOC_CALLS calls in its own pass."""
    case.kept(ALLOC_CALLS)  # warm: caches, first-use allocations
    gc.collect()
    before = sys.getallocatedblocks()
    results = case.kept(ALLOC_CALLS)
    blocks = sys.getallocatedblocks() - before - 1  # the list itself
    del results
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        results = case.kept(ALLOC_CALLS)
        size = tracemalloc.get_traced_memory()[0] - start - sys.getsizeof(results)
    finally:
        tracemalloc.stop()
    del results
    return round(max(blocks, 0) / ALLOC_CALLS, 2), round(max(size, 0) / ALLOC_CALLS, 1)


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "pacer": pacer.__version__,
             "pacer_library": pacer.library_version()}
    for name in ("cffi", "aiolimiter", "limits", "pyrate-limiter"):
        found[name] = metadata.version(name)
    return found


NOTES = [
    "Every row is a tight loop in one process (`python bench/python/bench.py`), gc enabled; a round "
    "measures each case once as the median of 5 batches of N calls (N sized to ~60 ms a batch). "
    "The loop's own cost is in every row; `loop_empty` is that cost.",
    "`pacer_reserve` is the public `Pacer.reserve(now_ms)`: a C method (`pacer._fast`, the C base type of "
    "`Pacer`) that checks the int, calls `pacer_reserve` in the compiled cffi module through its address, "
    "and fills the `Admitted`/`Ticket` (or `Refused`) dataclass slots directly. 60/min, burst 1, the clock "
    "1000 ms later on every call, so each call admits at once with a ticket.",
    "`pacer_reserve_refuse`: the same pacer drained at a fixed clock (default budget: wait bound 4833 ms), "
    "so each call returns `Refused(5000, 4, False)`.",
    "Async rows run inside one running asyncio loop, a coroutine awaiting N calls; the await of a no-op "
    "coroutine (`asyncio_await_noop`) is part of each async row and is not subtracted.",
    "`aiolimiter_acquire`: `AsyncLimiter(10**12, 1)`, a capacity it never reaches, so `acquire()` never "
    "waits. The other competitors are configured the same way (a limit of 10**12 per second) so every call "
    "admits; the smoke run checks that each refuses at 1 per minute.",
    "`limits_hit`: `FixedWindowRateLimiter` (the default strategy of Flask-Limiter and the cheapest of "
    "limits') over `MemoryStorage`. The moving window keeps one entry per admission in a list it inserts "
    "into at the front, so admitting a million calls a second is not a setting it is meant for.",
    "`pyrate_try_acquire`: `Limiter(Rate(10**12, Duration.SECOND))`, its default in-memory bucket (a "
    "sliding log: one item kept per admission until its leaker drops it), `try_acquire(name, "
    "blocking=False)`.",
    "`py_bucket`: a plain Python token bucket (integer ms math, units of 1/60000 token), `try_take(now_ms)` "
    "returning a bool; it has no waits, tickets or refunds. `*_admit_async_e2e`: `await pacer.admit()` "
    "and the bucket's `await admit()` read the same kind of clock (an int in seconds, +1 s per read), so "
    "both admit at once; the pacer's includes its clock conversion and checks.",
    "`allocs_per_call`: net memory blocks per call (`sys.getallocatedblocks()`) over 2000 calls with "
    "every result kept alive, i.e. the objects a call hands back plus what the limiter keeps; "
    "`bytes_per_call`: the same from tracemalloc (Python allocator bytes, list of results excluded).",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="check each case's answers; no timing, no JSON")
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    try:
        cases = make_cases(loop)
        return smoke(cases) if args.smoke else full(cases)
    finally:
        loop.close()


def smoke(cases: list[Case]) -> int:
    failures = 0
    for case in cases:
        try:
            case.timed(SMOKE_CALLS)
            case.check(case.kept(SMOKE_CALLS))
        except Exception as error:  # noqa: BLE001 - report every case
            failures += 1
            print(f"bench-python smoke: {case.id} FAILED: {error!r}", file=sys.stderr)
    if failures:
        print(f"bench-python smoke: {failures} of {len(cases)} cases failed", file=sys.stderr)
        return 1
    print(f"bench-python smoke: {len(cases)} cases ok", file=sys.stderr)
    return 0


def full(cases: list[Case]) -> int:
    rounds = int(os.environ.get("ROUNDS", "3"))
    if rounds < 1:
        raise SystemExit("ROUNDS must be at least 1")
    for case in cases:  # the answers are checked once before anything is timed
        case.check(case.kept(SMOKE_CALLS))
    sizes = {case.id: batch_size(case) for case in cases}  # also the warm-up
    measured: dict[str, list[float]] = {case.id: [] for case in cases}
    for index in range(rounds):
        for case in cases:
            measured[case.id].append(round(round_ns(case, sizes[case.id]), 1))
        print(f"bench-python: round {index + 1}/{rounds} done", file=sys.stderr)
    rows = []
    for case in cases:
        blocks, size = allocations(case)
        rows.append({"id": case.id, "what": case.what, "threads": 1, "rounds_ns": measured[case.id],
                     "allocs_per_call": blocks, "bytes_per_call": size})
    report = {
        "layer": "python",
        "title": "Python binding",
        "command": "bash bench/python/run.sh",
        "rounds": rounds,
        "versions": versions(),
        "notes": NOTES,
        "rows": rows,
    }
    out_dir = Path(os.environ.get("BENCH_OUT") or REPO_ROOT / "target-bench" / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "python.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'case':<28} {'ns/call (rounds)':<28} {'median':>8} {'blocks':>7} {'bytes':>7}", file=sys.stderr)
    for row in rows:
        per_round = " ".join(f"{v:.0f}" for v in row["rounds_ns"])
        print(f"{row['id']:<28} {per_round:<28} {statistics.median(row['rounds_ns']):>8.0f} "
              f"{row['allocs_per_call']:>7} {row['bytes_per_call']:>7}", file=sys.stderr)
    print(f"bench-python: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
