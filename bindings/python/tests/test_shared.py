"""Shared pacers: one bucket, in a shared-memory file, for every process that
opens the same name. Expected numbers come from SPEC §2-§7 at the defaults
(rate 60, burst 10, idle 120000 ms, 5 retries): the burst admits 10 at once
and the 11th waits one slot, 1000 ms, less the time since the bucket was
full; the wait bound is floor((120000 - 2000·(2^5 - 1)) / (2·6)) = 4833 ms.

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
from conftest import run

import pacer
from pacer import AdmitPath, Admitted, Mode, Refused, SharedPacer, SharedPacerError, shared_clock_ms

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


# ---------------------------------------------------------------- one process


def test_two_handles_share_one_bucket(shm_path: str) -> None:
    before = shared_clock_ms()
    old_umask = os.umask(0)  # the file is 0600 whatever the umask
    try:
        a = SharedPacer.open(shm_path, **QUIET)
    finally:
        os.umask(old_umask)
    b = SharedPacer.open(shm_path, **QUIET)
    try:
        decisions = [(a if i % 2 else b).reserve() for i in range(10)]
        assert all(isinstance(d, Admitted) and d.wait_ms == 0 and d.path is AdmitPath.PACED for d in decisions)
        eleventh = a.reserve()
        elapsed = shared_clock_ms() - before
        assert isinstance(eleventh, Admitted)
        # One slot (1000 ms) after the bucket was full, less the time gone since.
        assert 1000 - elapsed <= eleventh.wait_ms <= 1000
        assert eleventh.queued and eleventh.ticket is not None
        assert a.state() == b.state()
        assert a.state().tokens_units == b.state().tokens_units < 0
        assert a.wait_bound_ms == b.wait_bound_ms == 4833
        assert a.mode is Mode.REFUSING and a.can_refuse and a.enabled
        assert a.config == b.config == pacer.PacerConfig(60, 10, 120000, 5, "refund")
        # The other handle (same file, same process) did not issue the ticket.
        assert b.release(eleventh.ticket) is False
        assert not eleventh.ticket.spent
        assert a.release(eleventh.ticket) is True
        assert a.release(eleventh.ticket) is False
        # The refund is b's too: its next reservation waits about as long.
        again = b.reserve()
        assert isinstance(again, Admitted)
        assert 1000 - (shared_clock_ms() - before) <= again.wait_ms <= 1000
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
        assert low <= s.now_ms() <= shared_clock_ms()
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


def test_admit_waits_on_the_shared_clock(shm_path: str) -> None:
    # rate 600: slots 100 ms apart; burst 1: one at once.
    s = SharedPacer.open(shm_path, rate_per_minute=600, burst=1, idle_timeout_ms=3_600_000, **QUIET)
    try:
        first = run(s.admit())
        assert isinstance(first, Admitted) and not first.queued
        start = time.monotonic()
        second = run(s.admit())
        slept = time.monotonic() - start
        assert isinstance(second, Admitted) and second.queued
        assert 0 < second.wait_ms <= 100
        assert slept >= second.wait_ms / 1000 - 0.002
        # The next slot is up to 100 ms away: a 10 ms timeout gives it back.
        released_before = s.counters().refunded
        with pytest.raises(TimeoutError):
            s.admit_blocking(timeout=0.01)
        assert s.counters().refunded == released_before + 1
        third = s.admit_blocking(timeout=1)
        assert isinstance(third, Admitted) and 0 < third.wait_ms <= 100
    finally:
        s.close()


def test_cancelled_admit_gives_the_slot_back(shm_path: str) -> None:
    s = SharedPacer.open(shm_path, rate_per_minute=600, burst=1, idle_timeout_ms=3_600_000, **QUIET)

    async def scenario() -> None:
        assert isinstance(await s.admit(), Admitted)
        task = asyncio.ensure_future(s.admit())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run(scenario())
        counters = s.counters()
        assert (counters.admitted, counters.released, counters.refunded) == (2, 1, 1)
    finally:
        s.close()


def test_refusing_and_disabled_modes(shm_path: str) -> None:
    # Rate 0: pacing off, everything admitted at once with no ticket.
    with SharedPacer.open(shm_path, rate_per_minute=0, **QUIET) as off:
        assert off.mode is Mode.DISABLED and not off.enabled
        d = off.reserve()
        assert isinstance(d, Admitted) and d.path is AdmitPath.DISABLED and d.ticket is None
    SharedPacer.unlink(shm_path)
    # Burst 1 at rate 60: the k-th waits (k - 1) · 1000 ms (less the time
    # gone), so the 6th (5000 ms) is past the 4833 ms bound: refused.
    with SharedPacer.open(shm_path, burst=1, **QUIET) as slow:
        start = shared_clock_ms()
        waits = [slow.reserve() for _ in range(5)]
        refused = slow.reserve()
        if shared_clock_ms() - start >= 150:  # pragma: no cover - a stalled machine
            pytest.skip("the reservations took too long for the hand-computed waits")
        assert [d.wait_ms // 100 for d in waits] == [0, 9, 19, 29, 39] or \
            [d.wait_ms // 100 for d in waits] == [0, 10, 20, 30, 40]  # type: ignore[union-attr]
        assert isinstance(refused, Refused)
        assert refused.retry_after_s >= 1 and refused.required_wait_ms > 4833


# ---------------------------------------------------------------- other processes


def test_another_python_process_shares_the_bucket(shm_path: str) -> None:
    child = (
        "import sys, pacer\n"
        "with pacer.SharedPacer.open(sys.argv[1]) as s:\n"
        "    print(' '.join(str(s.reserve().wait_ms) for _ in range(10)))\n"
    )
    done = subprocess.run([sys.executable, "-c", child, shm_path], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.split() == ["0"] * 10
    with SharedPacer.open(shm_path, **QUIET) as s:
        d = s.reserve()
        assert isinstance(d, Admitted) and d.queued and 0 < d.wait_ms <= 1000


@needs_helper
def test_sees_the_debits_of_a_c_process_and_c_sees_ours(shm_path: str) -> None:
    assert debit(shm_path, 10) == ["admitted 0"] * 10
    with SharedPacer.open(shm_path, **QUIET) as s:
        d = s.reserve()
        # The burst is gone: the next slot is up to 1000 ms away.
        assert isinstance(d, Admitted) and d.queued and 500 < d.wait_ms <= 1000, d
        # And C sees this debit: its slot is one more second out.
        [line] = debit(shm_path, 1)
        assert d.wait_ms + 500 < waited(line) <= 2000, line
    # A plain Pacer is unaffected by the shared bucket.
    assert pacer.Pacer(**QUIET).reserve(0).wait_ms == 0  # type: ignore[union-attr]


@needs_helper
def test_a_pacer_python_created_is_one_c_attaches_to(shm_path: str) -> None:
    with SharedPacer.open(shm_path, **QUIET) as s:
        assert [s.reserve().wait_ms for _ in range(10)] == [0] * 10  # type: ignore[union-attr]
        # C attaches (it checks the header Python's library wrote) and finds
        # the burst spent: its request waits up to one slot, 1000 ms.
        [line] = debit(shm_path, 1)
        assert 500 < waited(line) <= 1000, line
