"""Shared pacers: one bucket, in a shared-memory file, for every process on
the machine that opens the same name (``pacer_shared_*`` in the C ABI).

A ``SharedPacer`` is a ``Pacer`` underneath (the same decisions, tickets and
waiting) whose C calls go through the shared handle and whose clock is the
machine-wide one, ``shared_clock_ms()``: no call takes a clock."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno as _errno
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from . import _check
from ._native import aligned_struct, ffi, lib
from ._pacer import (
    _NO_CLOCK,
    DEFAULT_BURST,
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_RATE_PER_MINUTE,
    Counters,
    Decision,
    Key,
    NativeCalls,
    Outcome,
    Pacer,
    PacerState,
    ReleasePolicy,
    Ticket,
    _config_text,
    _PacerView,
    _settings,
)
from ._settings import NoticeRegistry, _check_registry

_OK = lib.PACER_STATUS_OK
_NOT_OPEN = lib.PACER_STATUS_SHARED_NOT_OPEN
_SHARED_OS = lib.PACER_STATUS_SHARED_OS
_PREFIX = "PACER_STATUS_"
#: Status number -> its name without the prefix (``SHARED_CONFIG_MISMATCH``), from the header.
_STATUS_NAMES: dict[int, str] = {
    int(getattr(lib, name)): name[len(_PREFIX):] for name in dir(lib) if name.startswith(_PREFIX)
}
# The C calls a shared pacer makes after opening (module globals, looked up
# at each call, so tests can inject a failing one).
_shared_reserve = lib.pacer_shared_reserve
_shared_release = lib.pacer_shared_release
_shared_reserve_or_book = lib.pacer_shared_reserve_or_book
_shared_redeem = lib.pacer_shared_redeem
_shared_observe = lib.pacer_shared_observe
_shared_rate_in_force = lib.pacer_shared_rate_in_force
_get_metrics = lib.pacer_get_metrics
_level_at = lib.pacer_level_at
_get_info = lib.pacer_get_info

#: The handles whose admissions the current task or thread is waiting in
#: (``_Handle.hold``): their calls still go through after a close.
_held: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("pacer_shared_held", default=())


def shared_clock_ms() -> int:
    """The machine-wide clock every process sharing a pacer reads:
    ``CLOCK_MONOTONIC`` in whole milliseconds (``pacer_clock_monotonic_ms``)."""
    return int(lib.pacer_clock_monotonic_ms())


def status_name(status: int) -> str:
    """The name of a ``pacer_status`` without its prefix, e.g.
    ``"SHARED_CONFIG_MISMATCH"`` (``"UNKNOWN_<n>"`` for a number the header
    does not define)."""
    return _STATUS_NAMES.get(status, f"UNKNOWN_{status}")


class SharedPacerError(OSError):
    """A shared-pacer call failed. ``status_name`` names the check that
    failed (``"SHARED_CONFIG_MISMATCH"``, ``"SHARED_SYMLINK"``,
    ``"SHARED_NOT_OPEN"``, ...; the ``PACER_STATUS_*`` names of
    include/pacer.h without the prefix), ``status`` is its number and
    ``filename`` the path or name. For ``SHARED_OS`` (a system call failed)
    ``errno`` and ``strerror`` are the system's error; otherwise ``errno`` is
    None. The message holds the status name."""

    status: int
    status_name: str

    def __init__(self, function: str, status: int, path: str | None = None, os_errno: int = 0) -> None:
        name = status_name(status)
        text = ffi.string(lib.pacer_status_str(status)).decode("utf-8", "replace")
        where = "" if path is None else f" {path!r}"
        message = f"pacer: {function}{where}: {name} ({text})"
        if status == _SHARED_OS and os_errno:
            message += f": {os.strerror(os_errno)} ({_errno.errorcode.get(os_errno, os_errno)})"
            super().__init__(os_errno, os.strerror(os_errno))
        else:
            os_errno = 0
            super().__init__(message)
        self.status = status
        self.status_name = name
        self.filename = path
        self._message = message
        self._made_with = (function, status, path, os_errno)

    def __str__(self) -> str:
        return self._message

    def __reduce__(self) -> Any:
        return (type(self), self._made_with)


def _path_text(path_or_name: Any) -> tuple[str, bytes]:
    """``path_or_name`` (str or os.PathLike of str) as text and as NUL-free UTF-8."""
    if isinstance(path_or_name, os.PathLike):
        path_or_name = os.fspath(path_or_name)
    if not isinstance(path_or_name, str):
        raise TypeError(f"pacer: path_or_name must be a str or path, got {_check.describe(path_or_name)}")
    if path_or_name == "":
        raise ValueError("pacer: path_or_name must not be empty")
    encoded = _check.text("path_or_name", path_or_name, optional=False)
    assert encoded is not None
    return path_or_name, encoded


def _close_handle(owner: object, handle: Any) -> None:
    """Unmaps an open handle (a closed one answers SHARED_NOT_OPEN: nothing to do)."""
    del owner  # kept alive until here by the finalizer's arguments
    lib.pacer_shared_close(handle)


class _Handle:
    """An open ``struct pacer_shared`` (caller-owned storage, aligned by
    hand) and the gate that keeps ``close`` from unmapping the pacer under a
    call still running in another thread: calls enter and leave it; close
    marks it closing and the last call out (or close itself, if none is in)
    unmaps. Calls after close raise SHARED_NOT_OPEN.

    An admission (``admit``, ``admit_blocking``) holds the gate from its
    reservation to the end of its wait (``hold``): a close during the wait
    leaves the mapping until the wait ends, so an admission cancelled then
    can still give its slot back. Its own calls (that release) go through;
    every other call after the close is refused at once.

    Every C call that fails raises ``SharedPacerError`` naming the function
    and the status (a shared pacer never raises the plain ``PacerError``)."""

    __slots__ = ("ptr", "pacer", "path", "_lock", "_active", "_closing", "_finalize", "calls", "__weakref__")

    def __init__(self, path: str, encoded: bytes, c_config: Any) -> None:
        owner, handle = aligned_struct("struct pacer_shared", lib.PACER_SHARED_STORAGE_SIZE,
                                       lib.PACER_SHARED_STORAGE_ALIGN)
        c_path = ffi.new("char[]", encoded)
        status = lib.pacer_shared_open(handle, c_path, c_config)
        if status != _OK:
            raise SharedPacerError("pacer_shared_open", status, path, ffi.errno)
        self.ptr = handle
        self.path = path
        self._lock = threading.Lock()
        self._active = 0
        self._closing = False
        # Unmaps when closed, or when the last reference (a pacer, a ticket) goes.
        self._finalize = weakref.finalize(self, _close_handle, owner, handle)
        out = ffi.new("const struct pacer **")
        status = lib.pacer_shared_pacer(handle, out)
        if status != _OK:  # pragma: no cover - the handle was just opened
            self._finalize()
            raise SharedPacerError("pacer_shared_pacer", status, path)
        self.pacer = out[0]
        self.calls = NativeCalls.named(self, "_", shared=True)

    @property
    def closed(self) -> bool:
        return self._closing

    def _enter(self, function: str) -> None:
        with self._lock:
            # Held: an admission's own calls during its wait, while it keeps
            # the mapping (a task that inherited the context and outlived
            # the hold finds the mapping gone and is refused too).
            if self._closing and (self not in _held.get() or not self._finalize.alive):
                raise SharedPacerError(f"{function} after close()", _NOT_OPEN, self.path)
            self._active += 1

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1
            if self._closing and self._active == 0:
                self._finalize()

    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
            if self._active == 0:
                self._finalize()

    @contextlib.contextmanager
    def hold(self, function: str) -> Iterator[None]:
        """Keeps the handle mapped for an admission and its wait; the calls
        the current task or thread makes meanwhile go through even after a
        close (SHARED_NOT_OPEN if it is closed already)."""
        self._enter(function)
        token = _held.set((*_held.get(), self))
        try:
            yield
        finally:
            _held.reset(token)
            self._leave()

    def _call(self, function: str, call: Callable[..., int], *args: Any) -> int:
        """``call(*args)`` inside the gate; a failed status raises SharedPacerError."""
        self._enter(function)
        try:
            status = call(*args)
        finally:
            self._leave()
        if status != _OK:
            raise SharedPacerError(function, status, self.path, ffi.errno if status == _SHARED_OS else 0)
        return status

    # The NativeCalls of a shared pacer: the signatures of lib.pacer_reserve,
    # ... (the storage and the clock arguments are the handle's business).

    def _reserve(self, _storage: Any, _now_ms: int, out: Any) -> int:
        return self._call("pacer_shared_reserve", _shared_reserve, self.ptr, out)

    def _release(self, _storage: Any, ticket: Any, _now_ms: int, refunded: Any) -> int:
        return self._call("pacer_shared_release", _shared_release, self.ptr, ticket, refunded)

    def _reserve_or_book(self, _storage: Any, _now_ms: int, retries_left: int, out: Any, booking: Any) -> int:
        return self._call("pacer_shared_reserve_or_book", _shared_reserve_or_book, self.ptr, retries_left, out,
                          booking)

    def _redeem(self, _storage: Any, booking: Any, _now_ms: int, out: Any) -> int:
        return self._call("pacer_shared_redeem", _shared_redeem, self.ptr, booking, out)

    def _observe(self, _storage: Any, outcome: int, _now_ms: int, out: Any) -> int:
        return self._call("pacer_shared_observe", _shared_observe, self.ptr, outcome, out)

    def _rate_in_force(self, _storage: Any, _now_ms: int, out: Any) -> int:
        return self._call("pacer_shared_rate_in_force", _shared_rate_in_force, self.ptr, out)

    def _get_metrics(self, _storage: Any, out: Any) -> int:
        return self._call("pacer_get_metrics", _get_metrics, self.pacer, out)

    def _level_at(self, _storage: Any, now_ms: int, out: Any) -> int:
        # now_ms is the shared clock, read by the pacer (``_clock_argument``).
        return self._call("pacer_level_at", _level_at, self.pacer, now_ms, out)

    def _get_info(self, _storage: Any, out: Any) -> int:
        return self._call("pacer_get_info", _get_info, self.pacer, out)


class _Unset:
    def __repr__(self) -> str:
        return "<no clock: a shared pacer reads shared_clock_ms()>"


_UNSET: Any = _Unset()
_OPEN_TOKEN = object()


class SharedPacer(_PacerView):
    """A pacer whose bucket lives in a shared-memory file: every process on
    the machine that opens the same name with the same settings paces
    against one bucket. Made by ``SharedPacer.open``.

    It decides, waits, refunds and books (``admit(key=...)``, ``forget``)
    as ``Pacer`` does, but no call takes a clock: every process sharing it
    reads the machine-wide clock, ``shared_clock_ms()``. Keys are this
    object's; the line of booked slots is the bucket's, machine-wide.
    Failed shared-pacer calls raise ``SharedPacerError`` (an ``OSError``)
    naming the status.
    Thread-safe; ``close()`` (or leaving a ``with`` block) unmaps this
    process's view, and the file stays until ``SharedPacer.unlink``."""

    __slots__ = ("_pacer", "_handle", "__weakref__")

    def __init__(self, token: object = None, pacer: Pacer | None = None, handle: _Handle | None = None) -> None:
        if token is not _OPEN_TOKEN or pacer is None or handle is None:
            raise TypeError("pacer: use SharedPacer.open(path_or_name, ...) to open a shared pacer")
        self._pacer = pacer
        self._handle = handle

    @classmethod
    def open(
        cls,
        path_or_name: str | os.PathLike[str],
        *,
        rate_per_minute: int = DEFAULT_RATE_PER_MINUTE,
        burst: int = DEFAULT_BURST,
        idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
        max_retries: int | None = None,
        release_policy: ReleasePolicy = "refund",
        adaptive_floor_per_min: int = 0,
        adaptive_ceiling_per_min: int = 0,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        notice_registry: NoticeRegistry | None = None,
        clock: Any = _UNSET,
    ) -> SharedPacer:
        """Opens the shared pacer ``path_or_name``, creating it (mode 0600,
        full: ``burst`` tokens) if it does not exist. A name without ``/``
        is the file ``/dev/shm/<name>``; anything with a ``/`` is a path.

        The settings are ``Pacer``'s and are checked the same way
        (TypeError/ValueError naming the field, before any file is touched);
        they must equal those of the processes already sharing the file
        (else ``SharedPacerError`` with ``status_name ==
        "SHARED_CONFIG_MISMATCH"``). An existing file is checked before use
        (a symlink, not a regular file, another owner, group/other
        permissions, a foreign file, another layout or ABI version, a wrong
        size, an incomplete file): each raises ``SharedPacerError`` naming
        its status and changes nothing. ``clock`` is refused (TypeError):
        a shared pacer always reads ``shared_clock_ms()``. The adaptive
        settings (``Pacer``'s, SPEC §14) are part of the file's
        configuration too: the rate in force lives in the file, so a
        throttle one process reports (``observe``) slows every process."""
        if clock is not _UNSET:
            raise TypeError(_NO_CLOCK)
        path, encoded = _path_text(path_or_name)
        config, c_config = _settings(rate_per_minute, burst, idle_timeout_ms, max_retries, release_policy,
                                     adaptive_floor_per_min, adaptive_ceiling_per_min)
        sleep = _check.callable_or("sleep", sleep, asyncio.sleep)
        registry = _check_registry(notice_registry)
        handle = _Handle(path, encoded, c_config)
        try:
            pacer = Pacer.__new__(Pacer)
            pacer._attach(config, c_config, handle, handle.pacer, shared_clock_ms, sleep, registry, handle.calls)
        except BaseException:
            # e.g. a SharedPacerError from reading the state: nothing stays mapped.
            handle.close()
            raise
        return cls(_OPEN_TOKEN, pacer, handle)

    @staticmethod
    def unlink(path_or_name: str | os.PathLike[str]) -> None:
        """Removes the shared pacer's name. Processes that have it open keep
        their bucket; the next ``open`` creates a new, full one.
        ``SharedPacerError`` (``SHARED_NOT_FOUND``) if there is no such file."""
        path, encoded = _path_text(path_or_name)
        status = lib.pacer_shared_unlink(ffi.new("char[]", encoded))
        if status != _OK:
            raise SharedPacerError("pacer_shared_unlink", status, path, ffi.errno)

    # ------------------------------------------------------------ properties

    @property
    def path(self) -> str:
        """The path or name it was opened with."""
        return self._handle.path

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def now_ms(self) -> int:
        """The shared clock, ``shared_clock_ms()``."""
        return shared_clock_ms()

    # ------------------------------------------------------------ decisions

    def reserve(self) -> Decision:
        """As ``Pacer.reserve``, now on the shared clock (read by the C call)."""
        # The time argument is not used: pacer_shared_reserve reads the clock itself.
        return self._pacer.reserve(0)

    def release(self, ticket: Ticket) -> bool:
        """As ``Pacer.release``, now on the shared clock: True when the policy
        refunded it; False for a ticket released already or issued by another
        handle (another ``SharedPacer``, even on the same file)."""
        return self._pacer.release(ticket)

    async def admit(self, *, key: Key | None = None) -> Decision:
        """As ``Pacer.admit``: waits the granted time (with ``sleep``);
        cancelled while waiting, it gives the slot back and re-raises.

        With ``key``, as ``Pacer.admit(key=...)`` (SPEC §11): a refusal
        whose wait fits the request's remaining retries books a place in the
        bucket's machine-wide line (``pacer_shared_reserve_or_book``),
        still answered as ``Refused``; the key's next attempt redeems it
        (``pacer_shared_redeem``). Keys are this object's: another handle
        or process does not see them. ``forget`` a key that ends unadmitted.

        A ``close()`` during the wait does not cut it short: the mapping
        stays until the wait ends, so a cancellation after the close still
        gives the slot back and raises the caller's own CancelledError (or
        its timeout); a wait that completes returns the admission."""
        if key is not None:
            _check.key("key", key)  # bad input: its error, before the closed check
        with self._handle.hold("pacer_shared_reserve" if key is None else "pacer_shared_reserve_or_book"):
            return await self._pacer.admit(key=key)

    def admit_blocking(self, timeout: float | None = None, *, key: Key | None = None) -> Decision:
        """As ``Pacer.admit_blocking``; ``key`` as for ``admit``. A
        ``close()`` during the wait behaves as for ``admit``."""
        if timeout is not None:
            _check.seconds("timeout", timeout)  # bad input: its error, before the closed check
        if key is not None:
            _check.key("key", key)
        with self._handle.hold("pacer_shared_reserve" if key is None else "pacer_shared_reserve_or_book"):
            return self._pacer.admit_blocking(timeout, key=key)

    def forget(self, key: Key) -> bool:
        """As ``Pacer.forget``, on the shared clock (no ``now_ms``): the
        keyed request ``key`` ended without being admitted; its booking goes
        back to the bucket (``pacer_shared_release``) and the key is
        forgotten. True when a booking was refunded; False when the key held
        none (or is unknown). After ``close()`` it raises
        ``SharedPacerError`` (``SHARED_NOT_OPEN``) and the key keeps its
        booking, which then holds its slot until the slot's time passes:
        forget the keys before closing."""
        _check.key("key", key)
        with self._handle.hold("pacer_shared_release"):
            return self._pacer.forget(key)

    def observe(self, outcome: Outcome | str) -> int:
        """As ``Pacer.observe``, now on the shared clock
        (``pacer_shared_observe``): the rate in force after it. The rate in
        force is the bucket's, machine-wide: a throttle reported through one
        handle, in any process, lowers it for every process on the file."""
        return self._pacer.observe(outcome)

    def rate_in_force(self) -> int:
        """The bucket's rate in force now, on the shared clock
        (``pacer_shared_rate_in_force``); see ``Pacer.rate_in_force``."""
        return self._pacer.rate_in_force()

    @property
    def pending_keys(self) -> int:
        """How many keyed requests (``admit(key=...)``) this object refused
        and has not yet admitted or forgotten."""
        return self._pacer.pending_keys

    # ------------------------------------------------------------ diagnostics

    def counters(self) -> Counters:
        """The bucket's counts (``Pacer.counters``): they live in the file,
        so every handle, in this process or another, counts into them and
        reads the same counts (layout 4, docs/shared-memory.md)."""
        return self._pacer.counters()

    def level_at(self) -> int:
        """The bucket's tokens now, on the shared clock, in units
        (``Pacer.level_at``). Reads only."""
        return self._pacer.level_at()

    def tokens(self) -> float:
        """``level_at`` in tokens (fractional; negative: debt)."""
        return self._pacer.tokens()

    def state(self) -> PacerState:
        """The machine-wide state of the bucket."""
        return self._pacer.state()

    # ------------------------------------------------------------ closing

    def close(self) -> None:
        """Unmaps this process's view (the file and the bucket stay). Calls
        after it raise ``SharedPacerError`` (``SHARED_NOT_OPEN``); a call
        running in another thread finishes first, and an ``admit`` or
        ``admit_blocking`` still in its wait counts as running (cancelled
        after the close, it gives its slot back). Idempotent."""
        self._handle.close()

    def __enter__(self) -> SharedPacer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self._pacer.config
        state = "closed" if self.closed else f"mode={self._pacer.mode.value}"
        return f"<pacer.SharedPacer {self.path!r} {_config_text(c)} {state}>"


__all__ = ["SharedPacer", "SharedPacerError", "shared_clock_ms", "status_name"]
