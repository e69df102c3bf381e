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
run the helper named by PACER_SHM_HELPER (`test_shm debit PATH N`, and
`test_shm book PATH N` for bookings; built and set by scripts/test-shm.sh)
and are skipped without it.

Bookings (keyed admission on a shared bucket) have their own section at the
end, with their arithmetic worked out there."""

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
from conftest import REPO_ROOT, GateSleep, check_keyed_calls_refuse_bad_keys, run

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


def test_counters_are_the_buckets(shm_path: str) -> None:
    # Two handles on one name in one process: one bucket, and one set of
    # counts (layout 4: they live in the file), read the same through every
    # handle, a fresh one too. The burst of 10 admits these 5 at once,
    # however fast they come: admitted 5 (3 through a, 2 through b), no wait;
    # one release, refunded; the second release of the ticket and b's
    # release of a's ticket are no call to the library and count nothing.
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
        expected = pacer.Counters(admitted=5, admitted_after_wait=0, refused=0, shaped=0,
                                  released=1, refunded=1, clock_regressions=0)
        assert a.counters() == b.counters() == expected
        with open_quiet(shm_path) as c:
            assert c.counters() == expected
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
            "pacer_get_metrics": s.counters,
            "pacer_level_at": s.level_at,
            "pacer_level_at ": s.tokens,
            "pacer_shared_release": lambda: s.release(admitted.ticket),
            "pacer_shared_release ": admitted.release,
            "pacer_shared_reserve ": lambda: run(s.admit()),
            "pacer_shared_reserve  ": s.admit_blocking,
            "pacer_shared_reserve_or_book": lambda: s.admit_blocking(key="k"),
            "pacer_shared_reserve_or_book ": lambda: run(s.admit(key="k")),
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
        assert s.counters().released == 0 and s.pending_keys == 0
        assert admitted.release() is True
    finally:
        s.close()


@pytest.mark.parametrize("function", ["_get_info", "_shared_reserve", "_shared_release", "_get_metrics",
                                      "_level_at"])
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
        call = {"_get_metrics": s.counters, "_level_at": s.level_at}.get(function, s.reserve)
        with pytest.raises(SharedPacerError, match="PANIC") as caught:
            call()
        assert caught.value.status_name == "PANIC"
    finally:
        s.close()


# ---------------------------------------------------------------- adaptive pacing
#
# The rate in force lives in the file (SPEC §14). The shared clock runs, but
# a test runs well within the law's 60000 ms hold: before any throttle the
# default ceiling keeps the search at 60; a throttle with nothing counted
# ends the first search with L = 60 − max(1, ⌊60/16⌋) = 57 and, less than a
# minute after the file's creation t₀, pauses: the origin becomes t₀ +
# 60000 and until then the rate reads the lowest, max(floor 10, 3) = 10; a
# throttle or an opening in the hold changes nothing (core/src/adaptive.rs).

ADAPTIVE = {"adaptive_floor_per_min": 10}


def test_a_throttle_through_one_handle_slows_another(shm_path: str) -> None:
    """The shared clock runs, but the test runs well within a minute of the
    file's creation (t₀): before the first throttle the default ceiling holds
    the search at 60; a throttle with nothing counted ends the first search
    with L = 60 − max(1, ⌊60/16⌋) = 57 and pauses: the origin becomes
    max(now, t₀ + 60000) = t₀ + 60000 and until then every handle reads the
    lowest rate, max(floor 10, 3) = 10. A throttle or an opening then is
    observed at the origin (Δ = 0, in the hold): it changes nothing, and the
    answer, read at the caller's clock, is still the pause's 10. (The 57 from
    t₀ + 60000 on cannot be read without waiting a minute: the Pacer tests
    read it on a fake clock.)"""
    with open_quiet(shm_path, **ADAPTIVE) as one, open_quiet(shm_path, **ADAPTIVE) as two:
        assert two.rate_in_force() == 60
        assert one.observe("throttled") == 10  # L = 57, paused at the lowest
        assert two.rate_in_force() == 10
        assert two.observe(pacer.Outcome.THROTTLED) == 10  # within the hold: nothing changes
        assert two.observe("opened") == 10
        assert one.rate_in_force() == 10
        # A bad outcome raises before any call and changes nothing.
        with pytest.raises(ValueError, match="outcome"):
            one.observe("slow")
        with pytest.raises(TypeError, match="outcome"):
            one.observe(2)  # type: ignore[arg-type]
        # No clock but the shared one, even through the Pacer underneath.
        with pytest.raises(TypeError, match="takes no clock"):
            one._pacer.observe("opened", 0)
        with pytest.raises(TypeError, match="takes no clock"):
            one._pacer.rate_in_force(0)
        # The adaptive settings are the file's configuration.
        for other in ({}, {"adaptive_floor_per_min": 20}, {"adaptive_floor_per_min": 10,
                                                           "adaptive_ceiling_per_min": 90}):
            assert status_of(lambda: open_quiet(shm_path, **other)) == "SHARED_CONFIG_MISMATCH"  # noqa: B023
        assert "adaptive_floor_per_min=10" in repr(one)
    assert status_of(lambda: one.observe("throttled")) == "SHARED_NOT_OPEN"
    assert status_of(one.rate_in_force) == "SHARED_NOT_OPEN"


def test_another_python_process_sees_the_throttle(shm_path: str) -> None:
    """The child's throttle, with nothing counted, ends the first search
    within a minute of the file's creation: L = 60 − max(1, ⌊60/16⌋) = 57,
    paused at the lowest, max(floor 10, 3) = 10, which this process reads
    too."""
    child = (
        "import sys, pacer\n"
        "with pacer.SharedPacer.open(sys.argv[1], adaptive_floor_per_min=10) as s:\n"
        "    print(s.rate_in_force(), s.observe('throttled'))\n"
    )
    with open_quiet(shm_path, **ADAPTIVE) as s:
        assert s.rate_in_force() == 60
        done = subprocess.run([sys.executable, "-c", child, shm_path], capture_output=True, text=True,
                              timeout=60, check=True)
        assert done.stdout.split() == ["60", "10"]
        assert s.rate_in_force() == 10


def test_a_fixed_rate_shared_pacer_observes_nothing(shm_path: str) -> None:
    with open_quiet(shm_path) as s:
        assert s.observe("throttled") == 60 and s.observe("opened") == 60
        assert s.rate_in_force() == 60


def test_the_adaptive_settings_are_checked(shm_path: str) -> None:
    with pytest.raises(ValueError, match="adaptive_floor_per_min"):
        SharedPacer.open(shm_path, adaptive_floor_per_min=61)
    with pytest.raises(TypeError, match="adaptive_ceiling_per_min"):
        SharedPacer.open(shm_path, adaptive_floor_per_min=10, adaptive_ceiling_per_min=70.0)  # type: ignore[arg-type]
    assert not os.path.exists(shm_path)


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


# ---------------------------------------------------------------- bookings on a shared bucket
#
# Keyed admission (SPEC §11) on a shared pacer: admit(key=...) and
# admit_blocking(key=...) book through pacer_shared_reserve_or_book and
# redeem through pacer_shared_redeem; forget releases with
# pacer_shared_release. Keys are the handle's; the line is the bucket's.
#
# These tests use BOOKCFG, the configuration of the C helper's
# `test_shm book` mode: rate 600, burst 1, idle 3600000 ms, 5 retries,
# refund. By hand (SPEC §3, §11):
#
# * a token is 60000 units and rate 600 refills 600 units per ms: one token
#   per 60000/600 = 100 ms;
# * bound = min(15000, floor((3600000 − 2000·(2^5 − 1)) / (2·(5 + 1))))
#         = min(15000, floor(3538000 / 12)) = min(15000, 294833) = 15000 ms;
# * hint cap = floor(15000 / 1000) = 15 s; horizon with r retries left =
#   15000 + r·15·1000, so 90000 ms with 5;
# * the k-th debit on a fresh (full, one token) bucket leaves at most
#   60000 − k·60000 units (refill only adds), so it waits at most
#   (k − 1)·100 ms: the first 1 + 150 debits are admissions at any speed;
#   a debit whose wait is over 15000 ms is refused by §4 and, within the
#   horizon, booked;
# * deep in debt, a debit at time a with t units before it gets the slot
#   a + ceil((60000 − t)/600); the next debit, at a', finds
#   t − 60000 + (a' − a)·600 units, so its slot is exactly 100 ms later,
#   whatever a' is: for two debits anywhere on the bucket,
#   slot_b − slot_a = 100 · (seq_b − seq_a), seq being the bucket's debit
#   counter (the ticket's seq). That is the FIFO check.
#
# The clock is real, so how many debits are admitted before the first
# booking can vary by a few on a slow machine: every expectation is a
# relation that holds at any speed, or is worked out from the state the
# pacer reports (`debited`).

BOOKCFG = {"rate_per_minute": 600, "burst": 1, "idle_timeout_ms": 3_600_000, "max_retries": 5}
BOUND_MS = 15_000
CAP_S = 15
HORIZON_MS = 90_000
SLOT_MS = 100  # 60000 / 600


def hint(wait_ms: int) -> int:
    """SPEC §11's hint for a slot `wait_ms` away: clamp(ceil((wait − bound)/1000), 1, cap)."""
    return min(max(-(-(wait_ms - BOUND_MS) // 1000), 1), CAP_S)


def held(s: SharedPacer, key: pacer.Key) -> pacer.Booking:
    """The booking the keyed request `key` holds on `s` (the pacer's own record of it)."""
    entry = s._pacer._pending[key]
    assert entry.booking is not None
    return entry.booking


def drain(s: SharedPacer) -> int:
    """reserve() on a fresh BOOKCFG bucket until §4 refuses; the number admitted."""
    for n in range(2000):
        d = s.reserve()
        if isinstance(d, Refused):
            assert d.required_wait_ms > BOUND_MS
            assert n >= 151  # 1 + 150 at any speed (above)
            return n
        assert isinstance(d, Admitted) and d.wait_ms <= BOUND_MS
    raise AssertionError("2000 reservations taking a token each were never refused")


def keyed(s: SharedPacer, key: pacer.Key) -> tuple[pacer.Decision, int]:
    """One first attempt of `key` (admit_blocking, its sleep injected),
    checked against the state by hand: the debit's wait is `debited`; within
    the bound it is admitted after it (path PACED), beyond it booked and
    answered as Refused with the wait and hint(wait), the booking's slot
    being the decision's time plus the wait. Returns the decision and its
    slot (time + wait)."""
    before = s.state()
    d = s.admit_blocking(key=key)
    after = s.state()
    wait = debited(before, after, 600)
    slot = after.high_water_ms + wait
    if wait <= BOUND_MS:
        assert isinstance(d, Admitted) and (d.wait_ms, d.path) == (wait, AdmitPath.PACED)
        assert key not in s._pacer._pending
    else:
        assert d == Refused(wait, hint(wait), False)
        booking = held(s, key)
        assert booking.slot_ms == slot and booking.ticket.debit_units == TOKEN and not booking.spent
    return d, slot


def book_one(s: SharedPacer, prefix: str) -> tuple[str, list[int]]:
    """First attempts of keys prefix0, prefix1, ... on a drained bucket until
    one is booked (each debit goes 100 ms deeper, so one comes at once
    unless a call takes 100 ms); its key and the slots of all the debits."""
    slots = []
    for i in range(50):
        key = f"{prefix}{i}"
        d, slot = keyed(s, key)
        slots.append(slot)
        if isinstance(d, Refused):
            return key, slots
    raise AssertionError("50 keyed attempts were never booked")


def wait_for(ms: int) -> None:
    """Sleeps until the shared clock reads `ms` or later."""
    while (now := shared_clock_ms()) < ms:
        time.sleep(min(0.05, (ms - now) / 1000))


def test_keyed_admission_books_and_redeems(shm_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    blocking = BlockingSleep()
    monkeypatch.setattr(pacer._pacer, "_blocking_sleep", blocking)
    sleep = GateSleep()
    s = open_quiet(shm_path, sleep=sleep, **BOOKCFG)
    try:
        assert (s.wait_bound_ms, s.mode, s.pending_keys) == (BOUND_MS, Mode.REFUSING, 0)
        admitted = drain(s)
        c = s.counters()
        assert (c.admitted, c.refused, c.shaped, c.released, c.refunded, c.clock_regressions, c.booked) == (
            admitted, 1, 0, 0, 0, 0, 0)
        # Keyed first attempts until three are booked; every debit's slot is
        # 100 ms after the previous one (deep in debt), admitted or booked.
        keys: list[str] = []
        slots: list[int] = []
        while len(keys) < 3:
            key, more = book_one(s, f"k{len(keys)}-")
            keys.append(key)
            slots += more
        assert all(b - a == SLOT_MS for a, b in zip(slots, slots[1:]))
        assert s.pending_keys == 3
        first, second, last = (held(s, k) for k in keys)
        assert first.ticket._seq < second.ticket._seq < last.ticket._seq
        assert second.slot_ms - first.slot_ms == SLOT_MS * (second.ticket._seq - first.ticket._seq)
        assert last.slot_ms - second.slot_ms == SLOT_MS * (last.ticket._seq - second.ticket._seq)
        counters = s.counters()
        assert (counters.refused, counters.released) == (1 + 3, 0)

        # The last key retries: its booking is presented, nothing is debited
        # (the state does not change). Not due (slot more than the bound
        # away): Refused with the distance and its hint, the same booking.
        state = s.state()
        t0 = shared_clock_ms()
        d = s.admit_blocking(key=keys[2])
        t1 = shared_clock_ms()
        assert s.state() == state
        if last.slot_ms - t1 > BOUND_MS:
            assert isinstance(d, Refused)
            assert last.slot_ms - t1 <= d.required_wait_ms <= last.slot_ms - t0
            assert d.retry_after_s == hint(d.required_wait_ms) and not d.clock_regressed
            assert held(s, keys[2]) is last and not last.spent
            assert s.counters().refused == counters.refused + 1
        elif last.slot_ms - t0 <= BOUND_MS:  # only on a machine that stalled for seconds
            assert isinstance(d, Admitted) and d.path is AdmitPath.BOOKED

        # The first key, once its slot is within the bound: admitted after
        # the rest of the wait (path BOOKED), the booking's ticket now the
        # admission's. Cancelled during that wait, it refunds the booked
        # token and the key is gone.
        wait_for(first.slot_ms - BOUND_MS)

        async def redeem_then_cancel() -> tuple[PacerState, int, int]:
            before = s.state()
            t0 = shared_clock_ms()
            task = asyncio.ensure_future(s.admit(key=keys[0]))
            await sleep.started.wait()
            t1 = shared_clock_ms()
            assert s.state() == before  # redeeming debits nothing
            [seconds] = sleep.calls
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            wait = round(seconds * 1000)
            assert max(0, first.slot_ms - t1) <= wait <= min(BOUND_MS, first.slot_ms - t0)
            return before, t0, t1

        before, _, _ = run(redeem_then_cancel())
        assert first.spent and s.pending_keys == 2
        after = s.state()
        # The token came back: the level is as if it had never been booked.
        assert after.tokens_units == refilled(before, after.high_water_ms, 600) + TOKEN
        c = s.counters()
        assert (c.released, c.refunded) == (1, 1)
        assert s.forget(keys[0]) is False  # admitted (then cancelled): nothing held

        # The second key with admit_blocking and no time to wait: the wait
        # is longer than the timeout, so it is given back at once (no sleep).
        wait_for(second.slot_ms - BOUND_MS)
        before = s.state()
        slept = list(blocking.calls)
        t0 = shared_clock_ms()
        try:
            outcome: object = s.admit_blocking(timeout=0, key=keys[1])
        except TimeoutError as error:
            outcome = error
        t1 = shared_clock_ms()
        if second.slot_ms - t1 > 0:
            assert isinstance(outcome, TimeoutError)
            after = s.state()
            assert after.tokens_units == refilled(before, after.high_water_ms, 600) + TOKEN
            assert (s.counters().released, s.counters().refunded) == (2, 2)
        elif second.slot_ms - t0 <= 0:
            assert isinstance(outcome, Admitted) and (outcome.wait_ms, outcome.path) == (0, AdmitPath.BOOKED)
        assert blocking.calls == slept and second.spent and s.pending_keys == 1

        # The last key gives up: forget refunds its booking, once.
        before = s.state()
        assert s.forget(keys[2]) is True
        after = s.state()
        assert after.tokens_units == refilled(before, after.high_water_ms, 600) + TOKEN
        assert last.spent and s.pending_keys == 0
        assert s.forget(keys[2]) is False and s.forget("never seen") is False
        assert s.state() == after
    finally:
        s.close()


BOOK_CHILD = """
import sys
import pacer, pacer._pacer
pacer._pacer._blocking_sleep = lambda seconds: None  # an admission's wait is not slept here
s = pacer.SharedPacer.open(sys.argv[1], rate_per_minute=600, burst=1, idle_timeout_ms=3600000, max_retries=5,
                           notice_registry=pacer.NoticeRegistry())
for key in range(int(sys.argv[2])):
    d = s.admit_blocking(key=key)
    entry = s._pacer._pending.get(key)
    if isinstance(d, pacer.Admitted):
        print("admitted", d.wait_ms, d.ticket._seq)
    elif entry is not None and entry.booking is not None:
        print("booked", entry.booking.slot_ms, entry.booking.ticket._seq)
    else:
        print("refused", d.retry_after_s)
s.close()  # leaves with its bookings held: their slots stay taken
"""


def book_elsewhere(source: str, path: str, n: int) -> list[tuple[str, int, int]]:
    """`n` first attempts in another process: the C helper (`test_shm book
    PATH N`, reserve_or_book with 5 retries left) or a Python child (keyed
    admit_blocking, 5 retries left on a first attempt), each line
    ("admitted", wait, seq), ("booked", slot_ms, seq) or ("refused", hint, -1)."""
    command = [HELPER, "book", path, str(n)] if source == "c" else [sys.executable, "-c", BOOK_CHILD, path, str(n)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)  # type: ignore[arg-type]
    records = []
    for line in done.stdout.splitlines():
        match = re.fullmatch(r"(admitted|booked) (\d+) (\d+)|refused (\d+)", line)
        assert match, line
        if match.group(4) is not None:
            records.append(("refused", int(match.group(4)), -1))
        else:
            records.append((match.group(1), int(match.group(2)), int(match.group(3))))
    assert len(records) == n
    return records


def book_here(handles: list[SharedPacer], keys: range) -> list[tuple[str, int, int]]:
    """First attempts of `keys` in this process, alternating between
    `handles` (admit_blocking, its sleep injected); records as
    `book_elsewhere`'s, each checked against the decision's time."""
    records = []
    for i, key in enumerate(keys):
        s = handles[i % len(handles)]
        t0 = shared_clock_ms()
        d = s.admit_blocking(key=key)
        t1 = shared_clock_ms()
        if isinstance(d, Admitted):
            assert d.path is AdmitPath.PACED and d.wait_ms <= BOUND_MS and d.ticket is not None
            records.append(("admitted", d.wait_ms, d.ticket._seq))
            continue
        booking = held(s, key)
        assert BOUND_MS < d.required_wait_ms <= HORIZON_MS and d.retry_after_s == hint(d.required_wait_ms)
        assert t0 <= booking.slot_ms - d.required_wait_ms <= t1  # slot = the decision's time + its wait
        records.append(("booked", booking.slot_ms, booking.ticket._seq))
    return records


@pytest.mark.parametrize("source", ["python", pytest.param("c", marks=needs_helper)])
def test_processes_booking_on_one_bucket_keep_one_line(shm_path: str, source: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Another process (a Python child, or the C helper) makes 200 first
    # attempts on a fresh bucket: at least 151 admitted, the rest booked.
    # Then this process (two handles, alternating) 10, the other process 10
    # more, this one 10 more: 230 debits in all, the last waiting at most
    # 229 · 100 = 22900 ms < the 90000 ms horizon, so nothing is refused.
    monkeypatch.setattr(pacer._pacer, "_blocking_sleep", BlockingSleep())
    a = open_quiet(shm_path, **BOOKCFG)
    b = open_quiet(shm_path, **BOOKCFG)
    try:
        records = book_elsewhere(source, shm_path, 200)
        records += book_here([a, b], range(0, 10))
        records += book_elsewhere(source, shm_path, 10)
        records += book_here([a, b], range(10, 20))
        kinds = [kind for kind, _, _ in records]
        assert "refused" not in kinds
        admitted, booked = kinds.count("admitted"), kinds.count("booked")
        assert admitted + booked == 230 and admitted >= 151 and booked >= 1
        # Every debit once, whichever process made it: the seqs are 230 consecutive numbers.
        seqs = sorted(seq for _, _, seq in records)
        assert seqs == list(range(seqs[0], seqs[0] + 230))
        # FIFO: in debit order the booked slots are 100 ms apart per debit between them.
        line = sorted((seq, slot) for kind, slot, seq in records if kind == "booked")
        for (seq_a, slot_a), (seq_b, slot_b) in zip(line, line[1:]):
            assert slot_b - slot_a == SLOT_MS * (seq_b - seq_a), (seq_a, slot_a, seq_b, slot_b)
        # SPEC §6.1 on the slots: at most rate·W/60000 + 1 in any window of W ms.
        slots = [slot for _, slot in line]
        for window in (0, 99, 999, 4999):
            worst = max(sum(1 for t in slots if start <= t <= start + window) for start in slots)
            assert worst <= 600 * window // 60000 + 1, (window, worst)
        # This process's bookings are its handles' to give back (the other
        # process left with its own held: their slots stay taken).
        ours = [(s, key) for s in (a, b) for key in list(s._pacer._pending)]
        assert len(ours) == a.pending_keys + b.pending_keys == sum(
            1 for kind, _, _ in records[200:210] + records[220:] if kind == "booked")
        for s, key in ours:
            assert s.forget(key) is True
        assert a.pending_keys == b.pending_keys == 0
        # The bucket's count, read the same through both handles (the other
        # process released nothing).
        assert a.counters().refunded == b.counters().refunded == len(ours)
    finally:
        a.close()
        b.close()


def test_another_buckets_booking_is_refused(shm_path: str) -> None:
    other_path = shm_path + "-other"
    a = open_quiet(shm_path, **BOOKCFG)
    a2 = open_quiet(shm_path, **BOOKCFG)
    o = open_quiet(other_path, **BOOKCFG)
    local = pacer.Pacer(clock=lambda: 0.0, notice_registry=pacer.NoticeRegistry(), **BOOKCFG)
    try:
        drain(a)
        key, _ = book_one(a, "mine-")
        booking = held(a, key)
        a_state, o_state, a_counters, o_counters = a.state(), o.state(), a.counters(), o.counters()

        # It is a's: another bucket, another handle on the same bucket and
        # an in-process pacer do not take it (as Pacer.redeem/release do
        # with another pacer's booking), before any library call.
        for p in (o._pacer, a2._pacer, local):
            with pytest.raises(ValueError, match="another pacer"):
                p.redeem(booking, 0)
        assert o.release(booking.ticket) is False and a2.release(booking.ticket) is False
        assert local.release(booking.ticket, 0) is False

        # The library's own check: the same booking passed off as o's (the
        # ticket keeps a's bucket's owner tag) is FOREIGN_TICKET for
        # redeeming, releasing, a keyed retry and forget, and changes nothing.
        def passed_off(p: pacer.Pacer) -> pacer.Booking:
            t = booking.ticket
            return pacer.Booking(pacer.Ticket(p, t._seq, t._debit_units, t._owner), booking.slot_ms)

        with pytest.raises(SharedPacerError, match="FOREIGN_TICKET") as caught:
            o._pacer.redeem(passed_off(o._pacer), 0)
        assert caught.value.status_name == "FOREIGN_TICKET" and caught.value.filename == other_path
        assert str(caught.value).startswith(f"pacer: pacer_shared_redeem {other_path!r}: FOREIGN_TICKET (")
        forged = passed_off(o._pacer)
        with pytest.raises(SharedPacerError, match=r"pacer_shared_release .*FOREIGN_TICKET"):
            forged.release()
        assert not forged.spent  # not released: it keeps its refund right
        entry = pacer._pacer._Pending()
        entry.booking = forged
        o._pacer._pending["stolen"] = entry
        with pytest.raises(SharedPacerError, match=r"pacer_shared_redeem .*FOREIGN_TICKET"):
            o.admit_blocking(key="stolen")
        with pytest.raises(SharedPacerError, match=r"pacer_shared_release .*FOREIGN_TICKET"):
            o.forget("stolen")
        assert o.pending_keys == 1 and held(o, "stolen") is forged and not forged.spent  # forget failed: kept
        del o._pacer._pending["stolen"]
        foreign = pacer._lib.PACER_STATUS_FOREIGN_TICKET
        with pytest.raises(pacer.PacerError, match=f"pacer_redeem failed with status {foreign} "):
            local.redeem(passed_off(local), 0)

        assert (a.state(), o.state(), a.counters()) == (a_state, o_state, a_counters)
        assert o.counters() == o_counters  # the refused calls counted nothing
        assert not booking.spent and a.pending_keys == 1
        assert a.forget(key) is True
    finally:
        a.close()
        a2.close()
        o.close()
        SharedPacer.unlink(other_path)


def test_keyed_calls_check_input_and_the_handle(shm_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacer._pacer, "_blocking_sleep", BlockingSleep())
    s = open_quiet(shm_path, **BOOKCFG)
    drain(s)
    key, _ = book_one(s, "k")
    state, counters = s.state(), s.counters()

    def bad_input() -> None:
        check_keyed_calls_refuse_bad_keys(s)
        with pytest.raises(ValueError, match="timeout"):
            s.admit_blocking(timeout=-1, key=key)
        # No clock: forget takes no time, on the object or the pacer under it.
        with pytest.raises(TypeError):
            s.forget(key, 0)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="takes no clock"):
            s._pacer.forget(key, 0)

    bad_input()
    assert (s.state(), s.counters(), s.pending_keys) == (state, counters, 1)
    s.close()
    # Bad input is still its own error after the close; every keyed call is refused.
    bad_input()
    for call in (lambda: run(s.admit(key=key)), lambda: s.admit_blocking(key=key),
                 lambda: s.admit_blocking(key="new"), lambda: s.forget(key), lambda: s.forget("new")):
        assert status_of(call) == "SHARED_NOT_OPEN"
    with pytest.raises(SharedPacerError, match=r"^pacer: pacer_shared_reserve_or_book after close\(\)"):
        s.admit_blocking(key="new")
    with pytest.raises(SharedPacerError, match=r"^pacer: pacer_shared_release after close\(\)"):
        s.forget(key)
    assert s.pending_keys == 1  # forget refused: the key keeps its booking
    # The booking was not given back: a new handle sees the bucket as it was.
    with open_quiet(shm_path, **BOOKCFG) as again:
        assert again.state() == state


@pytest.mark.parametrize("function", ["_shared_reserve_or_book", "_shared_redeem"])
def test_a_library_fault_in_a_keyed_call_is_a_shared_pacer_error(shm_path: str, monkeypatch: pytest.MonkeyPatch,
                                                                function: str) -> None:
    # PACER_STATUS_PANIC injected in the booking calls: the keyed attempt
    # raises SharedPacerError naming the call, and the key keeps what it had.
    monkeypatch.setattr(pacer._pacer, "_blocking_sleep", BlockingSleep())
    s = open_quiet(shm_path, **BOOKCFG)
    try:
        drain(s)
        key, _ = book_one(s, "k")
        booking = held(s, key)
        state = s.state()
        monkeypatch.setattr(pacer._shared, function, lambda *args: pacer._lib.PACER_STATUS_PANIC)
        name = "pacer" + function
        with pytest.raises(SharedPacerError, match=rf"^pacer: {name} .*: PANIC \(") as caught:
            s.admit_blocking(key=key if function == "_shared_redeem" else "new")
        assert caught.value.status_name == "PANIC"
        assert s.pending_keys == 1 and held(s, key) is booking and not booking.spent
        monkeypatch.undo()
        assert s.state() == state
        assert s.forget(key) is True
    finally:
        s.close()
