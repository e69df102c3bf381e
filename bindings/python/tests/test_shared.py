"""Shared pacers: one bucket, in a shared-memory file, for every process that
opens the same name. Expected numbers come from SPEC §2-§7 at the defaults
(rate 60, burst 10, idle 120000 ms, 5 retries): the burst admits 10 at once
and the 11th waits one slot, 1000 ms, less the time since the bucket was
full; the wait bound is floor((120000 - 2000·(2^5 - 1)) / (2·6)) = 4833 ms.

A shared pacer reads the machine's clock itself, so no test may expect a
wait that depends on how much time passed between two calls. Waits are
checked against the state the pacer reports (``state()``: the high-water
mark and the token level there) with SPEC §4 worked by hand (``debited``),
or as relations that hold however much time passes (slots at least one
interval apart, exactly one apart when a request waits). Where a test needs
a request that waits, it admits until one does (``admit_until_it_waits``):
each admission takes a whole token, so a wait comes as soon as two
admissions are less than one interval apart. Sleeping is injected.

Files go to a fresh temporary folder, or to PACER_SHM_TEST_DIR when set
(scripts/test-shm.sh sets it to /dev/shm). The smoke tests with a C process
run the helper named by PACER_SHM_HELPER (`test_shm debit PATH N`, built and
set by scripts/test-shm.sh) and are skipped without it."""

from __future__ import annotations

import asyncio
import gc
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT, GateSleep, run

import pacer
from pacer import AdmitPath, Admitted, Mode, PacerState, Refused, SharedPacer, SharedPacerError, shared_clock_ms

HELPER = os.environ.get("PACER_SHM_HELPER")
needs_helper = pytest.mark.skipif(not HELPER, reason="PACER_SHM_HELPER is unset (scripts/test-shm.sh sets it)")
QUIET = {"notice_registry": pacer.NoticeRegistry()}
FILE_SIZE = 65536 + 256


@pytest.fixture(scope="module")
def shm_dir() -> Iterator[Path]:
    configured = os.environ.get("PACER_SHM_TEST_DIR")
    if configured:
        yield Path(configured)
        return
    made = Path(tempfile.mkdtemp(prefix="pacer-py-"))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def shm_path(shm_dir: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh path (with a '/', so it is not looked up in /dev/shm) for one test."""
    path = shm_dir / f"pacer-py-{os.getpid()}-{request.node.name}"
    path.unlink(missing_ok=True)
    yield str(path)
    path.unlink(missing_ok=True)


def status_of(call) -> str:  # type: ignore[no-untyped-def]
    try:
        call()
    except SharedPacerError as error:
        return error.status_name
    return "no error"


def mappings_of(path: str) -> int:
    """How many of this process's mappings show `path` (Linux /proc)."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        return sum(1 for line in maps if line.rstrip("\n").endswith(path))


def debit(path: str, n: int) -> list[str]:
    assert HELPER is not None
    done = subprocess.run([HELPER, "debit", path, str(n)], capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.strip().splitlines()


def waited(line: str) -> int:
    match = re.fullmatch(r"admitted (\d+)", line)
    assert match, line
    return int(match.group(1))


TOKEN = 60_000  # units per connection; one ms refills `rate` units (SPEC §4)


def refilled(state: PacerState, at_ms: int, rate: int) -> int:
    """SPEC §4 step 2: the level of `state` refilled to `at_ms` (not before
    its high-water mark), capped at capacity."""
    assert at_ms >= state.high_water_ms
    return min(state.capacity_units, state.tokens_units + rate * (at_ms - state.high_water_ms))


def debited(before: PacerState, after: PacerState, rate: int) -> int:
    """The wait SPEC §4 gives the one whole-token admission that took the
    bucket from `before` to `after` (nothing else touched it): the level
    after is the level refilled to the reservation's time (the new
    high-water mark) less one token, and the wait is what a negative level
    needs to come back to zero, ceil(-level / rate) ms."""
    assert after.tokens_units == refilled(before, after.high_water_ms, rate) - TOKEN
    return 0 if after.tokens_units >= 0 else -(after.tokens_units // rate)


def open_quiet(path: str, **options: object) -> SharedPacer:
    return SharedPacer.open(path, notice_registry=pacer.NoticeRegistry(), **options)  # type: ignore[arg-type]


async def admit_until_it_waits(s: SharedPacer, sleep: GateSleep, admit=None,  # type: ignore[no-untyped-def]
                               attempts: int = 20) -> tuple[asyncio.Task, PacerState, PacerState]:
    """Admits on `s` (whose sleep is the closed gate `sleep`) until an
    admission has to wait: its task (blocked in the sleep), the state
    before its reservation and the state while it waits. Each admission
    that did not wait must have been given 0 ms."""
    admit = admit or s.admit
    for _ in range(attempts):
        before = s.state()
        task = asyncio.ensure_future(admit())
        started = asyncio.ensure_future(sleep.started.wait())
        await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if sleep.started.is_set():
            during = s.state()
            assert sleep.calls == [debited(before, during, s.config.rate_per_minute) / 1000]
            return task, before, during
        started.cancel()
        outcome = task.result()
        assert isinstance(outcome, Admitted) and outcome.wait_ms == 0
    raise AssertionError(f"no admission waited in {attempts} attempts")


# ---------------------------------------------------------------- one process


def test_two_handles_share_one_bucket(shm_path: str) -> None:
    old_umask = os.umask(0)  # the file is 0600 whatever the umask
    try:
        a = SharedPacer.open(shm_path, **QUIET)
    finally:
        os.umask(old_umask)
    b = SharedPacer.open(shm_path, **QUIET)
    try:
        # A fresh bucket is full (10 tokens) and refill only adds: 10 at once.
        first = b.reserve()
        after_first = a.state()
        decisions = [first] + [(a if i % 2 else b).reserve() for i in range(1, 10)]
        assert all(isinstance(d, Admitted) and d.wait_ms == 0 and d.path is AdmitPath.PACED for d in decisions)
        before = b.state()
        eleventh = a.reserve()
        after = b.state()  # through the other handle: one bucket
        assert isinstance(eleventh, Admitted) and eleventh.path is AdmitPath.PACED and eleventh.ticket is not None
        assert eleventh.wait_ms == debited(before, after, 60)
        # The burst refills from the first reservation on (before it, the
        # bucket sat full): the 11th's slot is one interval, 1000 ms, after
        # the first's, or now if that time has passed.
        slot = after_first.high_water_ms + 1000
        assert eleventh.wait_ms == max(0, slot - after.high_water_ms)
        assert a.state() == b.state() == after
        assert a.wait_bound_ms == b.wait_bound_ms == 4833
        assert a.mode is Mode.REFUSING and a.can_refuse and a.enabled
        assert a.config == b.config == pacer.PacerConfig(60, 10, 120000, 5, "refund")
        # The other handle (same file, same process) did not issue the ticket.
        assert b.release(eleventh.ticket) is False
        assert not eleventh.ticket.spent and b.state() == after
        assert a.release(eleventh.ticket) is True
        released = b.state()
        assert released.tokens_units == min(released.capacity_units,
                                            refilled(after, released.high_water_ms, 60) + TOKEN)
        assert a.release(eleventh.ticket) is False
        # The refund is b's too: its next reservation gets the same slot.
        again = b.reserve()
        again_state = a.state()
        assert isinstance(again, Admitted)
        assert again.wait_ms == debited(released, again_state, 60) == max(0, slot - again_state.high_water_ms)
        info = os.lstat(shm_path)
        assert stat.S_ISREG(info.st_mode)
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_size == FILE_SIZE
        assert info.st_uid == os.geteuid()
    finally:
        a.close()
        b.close()
    SharedPacer.unlink(shm_path)
    assert not os.path.exists(shm_path)


def test_handle_storage_is_aligned_and_closing_unmaps(shm_path: str) -> None:
    s = SharedPacer.open(shm_path, **QUIET)
    assert int(pacer._ffi.cast("uintptr_t", s._handle.ptr)) % 16 == 0
    assert mappings_of(shm_path) >= 1
    s.close()
    assert s.closed
    assert mappings_of(shm_path) == 0
    # A pacer dropped without close() is unmapped when collected.
    dropped = SharedPacer.open(shm_path, **QUIET)
    dropped.reserve()
    assert mappings_of(shm_path) >= 1
    del dropped
    gc.collect()
    assert mappings_of(shm_path) == 0


def test_a_shared_pacer_takes_no_clock(shm_path: str) -> None:
    for clock in (time.monotonic, lambda: 0.0, None):
        with pytest.raises(TypeError, match="takes no clock"):
            SharedPacer.open(shm_path, clock=clock)  # type: ignore[arg-type]
    assert not os.path.exists(shm_path)
    with pytest.raises(TypeError):
        SharedPacer()
    # The shared clock is CLOCK_MONOTONIC in whole ms, time.monotonic's clock on Linux.
    low = time.monotonic_ns() // 1_000_000
    now = shared_clock_ms()
    high = time.monotonic_ns() // 1_000_000
    assert type(now) is int and low <= now <= high
    with SharedPacer.open(shm_path, **QUIET) as s:
        assert high <= s.now_ms() <= shared_clock_ms()
        with pytest.raises(TypeError):
            s.reserve(0)  # type: ignore[call-arg]
        admitted = s.reserve()
        assert isinstance(admitted, Admitted)
        # Releasing at a time of the caller's choosing is a clock too.
        with pytest.raises(TypeError, match="takes no clock"):
            admitted.release(0)
        assert admitted.release() is True


def test_settings_are_checked_like_pacer(shm_path: str) -> None:
    with pytest.raises(ValueError, match="rate_per_minute"):
        SharedPacer.open(shm_path, rate_per_minute=601)
    with pytest.raises(TypeError, match="burst"):
        SharedPacer.open(shm_path, burst=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_retries"):
        SharedPacer.open(shm_path, idle_timeout_ms=10_000, max_retries=5)
    with pytest.raises(ValueError, match="release_policy"):
        SharedPacer.open(shm_path, release_policy="never")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sleep"):
        SharedPacer.open(shm_path, sleep=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path_or_name"):
        SharedPacer.open(b"/tmp/x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="path_or_name"):
        SharedPacer.open("")
    with pytest.raises(ValueError, match="path_or_name"):
        SharedPacer.open(shm_path + "\0x")
    assert not os.path.exists(shm_path)


def test_attaching_checks_the_file_and_changes_nothing(shm_path: str) -> None:
    SharedPacer.open(Path(shm_path), **QUIET).close()  # os.PathLike works too
    before = Path(shm_path).read_bytes()
    with pytest.raises(SharedPacerError, match="SHARED_CONFIG_MISMATCH") as caught:
        SharedPacer.open(shm_path, rate_per_minute=61, **QUIET)
    error = caught.value
    assert isinstance(error, OSError)
    assert error.status_name == "SHARED_CONFIG_MISMATCH"
    assert error.status == pacer._lib.PACER_STATUS_SHARED_CONFIG_MISMATCH
    assert error.filename == shm_path and error.errno is None
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.status_name, str(copy)) == (SharedPacerError, "SHARED_CONFIG_MISMATCH", str(error))
    # Every setting counts, the defaults included.
    assert status_of(lambda: SharedPacer.open(shm_path, burst=11, **QUIET)) == "SHARED_CONFIG_MISMATCH"
    assert status_of(lambda: SharedPacer.open(shm_path, max_retries=4, **QUIET)) == "SHARED_CONFIG_MISMATCH"
    assert status_of(lambda: SharedPacer.open(shm_path, release_policy="strict", **QUIET)) == \
        "SHARED_CONFIG_MISMATCH"
    assert status_of(lambda: SharedPacer.open(shm_path, idle_timeout_ms=119_999, **QUIET)) == \
        "SHARED_CONFIG_MISMATCH"

    link = shm_path + "-link"
    os.symlink(shm_path, link)
    try:
        assert status_of(lambda: SharedPacer.open(link, **QUIET)) == "SHARED_SYMLINK"
    finally:
        os.unlink(link)
    os.chmod(shm_path, 0o644)
    assert status_of(lambda: SharedPacer.open(shm_path, **QUIET)) == "SHARED_PERMISSIONS"
    os.chmod(shm_path, 0o600)
    Path(shm_path).write_bytes(b"NOTPACER" + before[8:])
    assert status_of(lambda: SharedPacer.open(shm_path, **QUIET)) == "SHARED_FOREIGN"
    Path(shm_path).write_bytes(before[:100])
    assert status_of(lambda: SharedPacer.open(shm_path, **QUIET)) == "SHARED_TRUNCATED"
    Path(shm_path).write_bytes(before)
    assert Path(shm_path).read_bytes() == before
    assert status_of(lambda: SharedPacer.open(os.path.dirname(shm_path) + "/", **QUIET)) == "SHARED_INVALID_NAME"
    assert status_of(lambda: SharedPacer.open("..", **QUIET)) == "SHARED_INVALID_NAME"

    SharedPacer.unlink(shm_path)
    assert status_of(lambda: SharedPacer.unlink(shm_path)) == "SHARED_NOT_FOUND"
    # A failing system call carries errno.
    with pytest.raises(SharedPacerError, match="SHARED_OS") as caught:
        SharedPacer.open(shm_path + "-missing-dir/pacer", **QUIET)
    assert caught.value.errno == 2 and caught.value.strerror == os.strerror(2)


def test_closed_handles_refuse_calls(shm_path: str) -> None:
    with SharedPacer.open(shm_path, **QUIET) as s:
        admitted = s.reserve()
        assert isinstance(admitted, Admitted) and admitted.ticket is not None
    assert s.closed
    s.close()  # idempotent
    for call in (s.reserve, s.counters, s.state, lambda: s.release(admitted.ticket), admitted.release,
                 lambda: s.admit_blocking(), lambda: run(s.admit())):
        assert status_of(call) == "SHARED_NOT_OPEN"
    assert "closed" in repr(s)
    # The file and its bucket stay: a new handle sees the debit.
    with SharedPacer.open(shm_path, **QUIET) as again:
        # One token (60000 units) of the ten was debited; refill adds at most one back here.
        assert 9 * 60_000 <= again.state().tokens_units <= 10 * 60_000
    SharedPacer.unlink(shm_path)


def test_close_waits_for_calls_in_other_threads(shm_path: str) -> None:
    s = SharedPacer.open(shm_path, rate_per_minute=600, burst=1000, idle_timeout_ms=3_600_000, **QUIET)
    outcomes: list[str] = []
    lock = threading.Lock()
    go = threading.Event()

    def hammer() -> None:
        go.wait()
        while True:
            try:
                s.reserve()
                s.state()
            except SharedPacerError as error:
                with lock:
                    outcomes.append(error.status_name)
                return

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    go.set()
    time.sleep(0.05)
    s.close()
    for t in threads:
        t.join(10)
    assert outcomes == ["SHARED_NOT_OPEN"] * 4
    assert mappings_of(shm_path) == 0


def test_bookings_are_not_available(shm_path: str) -> None:
    with SharedPacer.open(shm_path, **QUIET) as s:
        with pytest.raises(TypeError, match="bookings are not available on a shared pacer"):
            run(s.admit(key="a"))
        with pytest.raises(TypeError, match="bookings are not available on a shared pacer"):
            s.admit_blocking(key=1)
        assert not hasattr(s, "reserve_or_book") and not hasattr(s, "redeem")
        # Nothing was debited by the refused calls; plain ones work.
        assert s.counters().admitted == 0
        assert isinstance(run(s.admit()), Admitted)
        assert isinstance(s.admit_blocking(), Admitted)
        assert s.counters().admitted == 2


class BlockingSleep:
    """admit_blocking's sleep, injected (pacer._pacer._blocking_sleep):
    records the delays asked for, then returns at once, or, with a gate,
    signals `started` and waits for the gate, then raises `raises` if set."""

    def __init__(self, gated: bool = False, raises: BaseException | None = None) -> None:
        self.calls: list[float] = []
        self.gated = gated
        self.raises = raises
        self.started = threading.Event()
        self.gate = threading.Event()

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        if self.gated:
            self.started.set()
            assert self.gate.wait(30)
        if self.raises is not None:
            raise self.raises


class Interrupted(BaseException):
    """Stands for a KeyboardInterrupt raised in admit_blocking's sleep."""


def test_admit_waits_on_the_shared_clock(shm_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # rate 60, burst 1, idle 3600000: bound 15000; every admission takes a token.
    sleep = GateSleep()
    sleep.gate.set()
    s = open_quiet(shm_path, burst=1, idle_timeout_ms=3_600_000, sleep=sleep)
    try:
        async def scenario() -> None:
            first = await s.admit()  # a fresh bucket is full: at once
            assert isinstance(first, Admitted) and not first.queued and sleep.calls == []
            sleep.gate.clear()
            task, _, during = await admit_until_it_waits(s, sleep)
            sleep.gate.set()
            waited_for = await task
            assert isinstance(waited_for, Admitted) and waited_for.queued
            # The admission slept exactly the wait it was granted, on the shared clock's terms.
            assert [waited_for.wait_ms / 1000] == sleep.calls
            assert waited_for.wait_ms == -(during.tokens_units // 60)

        run(scenario())
        # admit_blocking sleeps the wait in the thread, with the same numbers.
        blocking = BlockingSleep()
        monkeypatch.setattr(pacer._pacer, "_blocking_sleep", blocking)
        for _ in range(20):
            before = s.state()
            outcome = s.admit_blocking()
            assert isinstance(outcome, Admitted)
            assert outcome.wait_ms == debited(before, s.state(), 60)
            if outcome.wait_ms:
                assert blocking.calls == [outcome.wait_ms / 1000]
                break
            assert blocking.calls == []
        else:
            raise AssertionError("no blocking admission waited")
        # A wait longer than the timeout is given back at once: no sleep, the
        # debit refunded (the level is as if it had never been taken).
        counters = s.counters()
        slept = list(blocking.calls)
        for _ in range(20):
            before = s.state()
            try:
                outcome = s.admit_blocking(timeout=0)
            except TimeoutError:
                after = s.state()
                assert after.tokens_units == refilled(before, after.high_water_ms, 60)
                break
            assert isinstance(outcome, Admitted) and outcome.wait_ms == 0
        else:
            raise AssertionError("no blocking admission had to wait")
        assert blocking.calls == slept
        now = s.counters()
        assert (now.released - counters.released, now.refunded - counters.refunded) == (1, 1)
    finally:
        s.close()


def test_cancelled_admit_gives_the_slot_back(shm_path: str) -> None:
    sleep = GateSleep()
    s = open_quiet(shm_path, burst=1, idle_timeout_ms=3_600_000, sleep=sleep)
    admits = 0

    async def scenario() -> None:
        nonlocal admits
        task, before, _ = await admit_until_it_waits(s, sleep)
        admits = s.counters().admitted
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = s.state()
        # The debit came back: the level is as if it had never been taken.
        assert after.tokens_units == refilled(before, after.high_water_ms, 60)

    try:
        run(scenario())
        counters = s.counters()
        assert admits >= 1 and (counters.admitted, counters.released, counters.refunded) == (admits, 1, 1)
    finally:
        s.close()


def test_refusing_and_disabled_modes(shm_path: str) -> None:
    # Rate 0: pacing off, everything admitted at once with no ticket.
    with SharedPacer.open(shm_path, rate_per_minute=0, **QUIET) as off:
        assert off.mode is Mode.DISABLED and not off.enabled
        d = off.reserve()
        assert isinstance(d, Admitted) and d.path is AdmitPath.DISABLED and d.ticket is None
    SharedPacer.unlink(shm_path)
    # Burst 1 at rate 60 (bound 4833, hint cap 4): each admission takes a
    # token, so the slots (reservation time + wait) are at least 1000 ms
    # apart, exactly 1000 when the request waits, and the k-th slot is at
    # most (k - 1) · 1000 ms after the first: the first five always fit the
    # bound. A request whose slot would be more than 4833 ms away is
    # refused, changing nothing. How far the slots run ahead of the clock
    # depends on how fast the reservations come; these relations do not.
    with SharedPacer.open(shm_path, burst=1, **QUIET) as slow:
        slots: list[int] = []
        for _ in range(50):
            before = slow.state()
            d = slow.reserve()
            after = slow.state()
            if isinstance(d, Refused):
                break
            assert isinstance(d, Admitted) and d.path is AdmitPath.PACED and d.wait_ms <= 4833
            assert d.wait_ms == debited(before, after, 60)
            slot = after.high_water_ms + d.wait_ms
            if slots:
                assert slot >= slots[-1] + 1000
                assert d.wait_ms == 0 or slot == slots[-1] + 1000
            slots.append(slot)
        else:
            raise AssertionError("50 reservations, each taking a token, were never refused")
        assert len(slots) >= 5
        assert after == before  # a refusal changes nothing
        # It needed its slot, one interval after the last, more than the bound away.
        assert 4833 < d.required_wait_ms <= slots[-1] + 1000 - before.high_water_ms
        assert d.retry_after_s == min(-(-d.required_wait_ms // 1000), 4)
        assert not d.clock_regressed


def test_status_names_come_from_the_header() -> None:
    # Every PACER_STATUS_* of include/pacer.h, the ABI 2 ones included, has
    # its name (without the prefix); an unknown number says so.
    header = (REPO_ROOT / "include" / "pacer.h").read_text(encoding="utf-8")
    statuses = re.findall(r"^  PACER_STATUS_([A-Z0-9_]+) = (\d+),$", header, re.MULTILINE)
    assert ("MISALIGNED", "26") in statuses and ("FOREIGN_TICKET", "27") in statuses
    for name, number in statuses:
        assert pacer.status_name(int(number)) == name
    assert len({int(n) for _, n in statuses}) == len(statuses)
    assert pacer.status_name(9999) == "UNKNOWN_9999"
    error = SharedPacerError("pacer_shared_release", 27, "/x")
    assert (error.status, error.status_name) == (27, "FOREIGN_TICKET")
    assert str(error).startswith("pacer: pacer_shared_release '/x': FOREIGN_TICKET (")


def test_counters_are_this_handles_calls(shm_path: str) -> None:
    # Two handles on one name in one process: one bucket (state), but each
    # handle counts the calls made through it; a fresh handle starts at 0.
    # The burst of 10 admits these 5 at once, however fast they come.
    a = open_quiet(shm_path)
    b = open_quiet(shm_path)
    try:
        first = a.reserve()
        assert isinstance(first, Admitted) and first.ticket is not None
        a.reserve()
        b.reserve()
        a.reserve()
        b.reserve()
        assert a.release(first.ticket) is True
        assert a.release(first.ticket) is False  # a second release of one ticket is no call to the library
        assert b.release(first.ticket) is False  # nor is another handle's ticket
        assert a.counters() == pacer.Counters(admitted=3, admitted_after_wait=0, refused=0, shaped=0,
                                              released=1, refunded=1, clock_regressions=0)
        assert b.counters() == pacer.Counters(admitted=2, admitted_after_wait=0, refused=0, shaped=0,
                                              released=0, refunded=0, clock_regressions=0)
        with open_quiet(shm_path) as c:
            assert c.counters() == pacer.Counters(0, 0, 0, 0, 0, 0, 0)
            # The state is the bucket's, the same through every handle.
            assert c.state() == a.state() == b.state()
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------- closing during a wait
#
# close() lets a call already running finish, and an admission waiting in
# admit()/admit_blocking() is such a call: it keeps the handle mapped until
# it ends. Cancelled or interrupted after the close, it gives its slot back
# and its caller sees its own cancellation, timeout or interruption; new
# calls after the close raise SHARED_NOT_OPEN at once.


@pytest.mark.parametrize("how", ["cancel", "timeout", "finish"])
def test_closing_while_admit_waits(shm_path: str, how: str) -> None:
    if how == "timeout" and sys.version_info < (3, 11):
        pytest.skip("asyncio.timeout is new in 3.11")
    sleep = GateSleep()
    s = open_quiet(shm_path, burst=1, idle_timeout_ms=3_600_000, sleep=sleep)
    watcher = open_quiet(shm_path, burst=1, idle_timeout_ms=3_600_000)
    deadlines: list = []

    async def admit_with_deadline() -> pacer.Decision:
        async with asyncio.timeout(None) as deadline:
            deadlines.append(deadline)
            return await s.admit()

    async def scenario() -> tuple[PacerState, pacer.Decision | None]:
        task, before, _ = await admit_until_it_waits(s, sleep, admit_with_deadline if how == "timeout" else None)
        s.close()
        assert s.closed
        assert status_of(s.reserve) == "SHARED_NOT_OPEN"
        with pytest.raises(SharedPacerError, match=r"^pacer: pacer_get_info after close\(\) '.*': SHARED_NOT_OPEN \("):
            s.state()
        assert s._handle._finalize.alive  # still mapped: the waiting admission holds it
        if how == "cancel":
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return before, None
        if how == "timeout":
            deadlines[-1].reschedule(asyncio.get_running_loop().time())
            with pytest.raises(TimeoutError):
                await task
            return before, None
        sleep.gate.set()
        return before, await task

    try:
        before, outcome = run(scenario())
        assert not s._handle._finalize.alive  # unmapped when the admission ended
        after = watcher.state()
        if outcome is None:
            # The slot came back: the level is as if the debit had never been taken.
            assert after.tokens_units == refilled(before, after.high_water_ms, 60)
        else:
            # Admitted after its wait: the admission is the caller's; the
            # handle is closed, so releasing it now is refused and changes nothing.
            assert isinstance(outcome, Admitted) and outcome.queued
            assert after.tokens_units == refilled(before, after.high_water_ms, 60) - TOKEN
            with pytest.raises(SharedPacerError, match="SHARED_NOT_OPEN"):
                outcome.release()
            assert not outcome.ticket.spent and watcher.state() == after  # type: ignore[union-attr]
    finally:
        s.close()
        watcher.close()


def test_closing_while_admit_blocking_waits(shm_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sleep = BlockingSleep(gated=True, raises=Interrupted())
    monkeypatch.setattr(pacer._pacer, "_blocking_sleep", sleep)
    s = open_quiet(shm_path, burst=1, idle_timeout_ms=3_600_000)
    watcher = open_quiet(shm_path, burst=1, idle_timeout_ms=3_600_000)
    states: list[PacerState] = []
    outcome: list[object] = []

    def request() -> None:
        try:
            for _ in range(20):
                states.append(s.state())
                s.admit_blocking()  # returns only when it did not wait
            outcome.append("never waited")
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    thread = threading.Thread(target=request)
    thread.start()
    try:
        assert sleep.started.wait(30)
        before = states[-1]
        during = watcher.state()
        assert sleep.calls == [debited(before, during, 60) / 1000]
        s.close()
        assert status_of(s.reserve) == "SHARED_NOT_OPEN"
        assert s._handle._finalize.alive
        sleep.gate.set()  # the sleep is interrupted
        thread.join(30)
        assert len(outcome) == 1 and type(outcome[0]) is Interrupted, outcome
        assert not s._handle._finalize.alive
        after = watcher.state()
        assert after.tokens_units == refilled(before, after.high_water_ms, 60)
    finally:
        sleep.gate.set()
        thread.join(30)
        s.close()
        watcher.close()


# ---------------------------------------------------------------- every failure is a SharedPacerError


def corrupt(s: SharedPacer) -> int:
    """Overwrites the first 8 bytes of the mapped pacer (its initialisation
    mark), as a stray write would; returns them to put back."""
    word = pacer._ffi.cast("uint64_t *", s._handle.pacer)
    saved = int(word[0])
    word[0] = saved ^ 0xFFFF_FFFF_FFFF_FFFF
    return saved


def test_a_corrupted_pacer_fails_every_call_with_a_shared_pacer_error(shm_path: str) -> None:
    s = open_quiet(shm_path, rate_per_minute=600, burst=2, idle_timeout_ms=3_600_000)
    try:
        admitted = s.reserve()
        assert isinstance(admitted, Admitted) and admitted.ticket is not None
        state = s.state()
        saved = corrupt(s)
        calls = {
            "pacer_shared_reserve": s.reserve,
            "pacer_get_info": s.state,
            "pacer_get_counters": s.counters,
            "pacer_shared_release": lambda: s.release(admitted.ticket),
            "pacer_shared_release ": admitted.release,
            "pacer_shared_reserve ": lambda: run(s.admit()),
            "pacer_shared_reserve  ": s.admit_blocking,
        }
        for function, call in calls.items():
            with pytest.raises(SharedPacerError) as caught:
                call()
            error = caught.value
            assert (error.status_name, error.status) == ("NOT_INITIALIZED", pacer._lib.PACER_STATUS_NOT_INITIALIZED)
            assert error.filename == shm_path and error.errno is None
            assert str(error).startswith(f"pacer: {function.strip()} {shm_path!r}: NOT_INITIALIZED ("), str(error)
        # Nothing changed: put the bytes back and everything is as before.
        pacer._ffi.cast("uint64_t *", s._handle.pacer)[0] = saved
        assert not admitted.ticket.spent
        assert s.state() == state
        assert s.counters().released == 0
        assert admitted.release() is True
    finally:
        s.close()


@pytest.mark.parametrize("function", ["_get_info", "_shared_reserve", "_shared_release", "_get_counters"])
def test_a_library_fault_in_a_shared_call_is_a_shared_pacer_error(shm_path: str, monkeypatch: pytest.MonkeyPatch,
                                                                 function: str) -> None:
    # A status the library gives for a fault (PACER_STATUS_PANIC), injected
    # in each C call a shared pacer makes after pacer_shared_open: opening
    # (which reads the state) and every method name the status, never a
    # plain PacerError.
    panic = pacer._lib.PACER_STATUS_PANIC
    monkeypatch.setattr(pacer._shared, function, lambda *args: panic)
    if function == "_get_info":
        with pytest.raises(SharedPacerError, match="PANIC") as caught:
            open_quiet(shm_path)
        assert caught.value.status_name == "PANIC" and caught.value.filename == shm_path
        return
    s = open_quiet(shm_path)
    try:
        if function == "_shared_release":
            admitted = s.reserve()
            assert isinstance(admitted, Admitted) and admitted.ticket is not None
            with pytest.raises(SharedPacerError, match="PANIC"):
                admitted.release()
            assert not admitted.ticket.spent  # it keeps its refund right
            return
        call = s.counters if function == "_get_counters" else s.reserve
        with pytest.raises(SharedPacerError, match="PANIC") as caught:
            call()
        assert caught.value.status_name == "PANIC"
    finally:
        s.close()


# ---------------------------------------------------------------- other processes


def test_another_python_process_shares_the_bucket(shm_path: str) -> None:
    child = (
        "import sys, pacer\n"
        "with pacer.SharedPacer.open(sys.argv[1]) as s:\n"
        "    print(' '.join(str(s.reserve().wait_ms) for _ in range(10)))\n"
    )
    start = shared_clock_ms()
    done = subprocess.run([sys.executable, "-c", child, shm_path], capture_output=True, text=True, timeout=60,
                          check=True)
    # A fresh bucket is full (10 tokens) and refill only adds: 10 at once.
    assert done.stdout.split() == ["0"] * 10
    with SharedPacer.open(shm_path, **QUIET) as s:
        before = s.state()
        # The child's ten tokens are gone: the level is what refill (60
        # units per ms) brought back since the child's first reservation,
        # no more than since this test started.
        assert before.high_water_ms >= start
        assert before.tokens_units <= 60 * (before.high_water_ms - start)
        d = s.reserve()
        assert isinstance(d, Admitted) and d.ticket is not None
        assert d.wait_ms == debited(before, s.state(), 60)


@needs_helper
def test_sees_the_debits_of_a_c_process_and_c_sees_ours(shm_path: str) -> None:
    start = shared_clock_ms()
    # A fresh bucket is full (10 tokens) and refill only adds: 10 at once.
    assert debit(shm_path, 10) == ["admitted 0"] * 10
    with SharedPacer.open(shm_path, **QUIET) as s:
        before = s.state()
        # The burst is gone: the level is what refill (60 units per ms)
        # brought back since C's first reservation, no more than since this
        # test started.
        assert before.high_water_ms >= start
        assert before.tokens_units <= 60 * (before.high_water_ms - start)
        d = s.reserve()
        ours = s.state()
        assert isinstance(d, Admitted) and d.wait_ms == debited(before, ours, 60)
        # And C sees this debit: its token is taken from the level ours left.
        [line] = debit(shm_path, 1)
        assert waited(line) == debited(ours, s.state(), 60), line
    # A plain Pacer is unaffected by the shared bucket.
    assert pacer.Pacer(**QUIET).reserve(0).wait_ms == 0  # type: ignore[union-attr]


@needs_helper
def test_a_pacer_python_created_is_one_c_attaches_to(shm_path: str) -> None:
    with SharedPacer.open(shm_path, **QUIET) as s:
        assert [s.reserve().wait_ms for _ in range(10)] == [0] * 10  # type: ignore[union-attr]
        # C attaches (it checks the header Python's library wrote) and takes
        # its token from the level Python's ten left.
        before = s.state()
        [line] = debit(shm_path, 1)
        assert waited(line) == debited(before, s.state(), 60), line
