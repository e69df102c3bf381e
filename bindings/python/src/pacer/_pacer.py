"""The pacer: the core's decision (through the C ABI) with the clock, the
waiting and the cancellation that belong to Python."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from . import _check
from ._native import aligned_struct, fast, ffi, lib
from ._settings import (
    ENV_NAMES,
    Budget,
    NoticeRegistry,
    PacerError,
    _check_registry,
    _ok,
    ladder_ceiling,
    notice_from_c,
    report,
    written_bytes,
)

DEFAULT_RATE_PER_MINUTE = 60
DEFAULT_BURST = 10
DEFAULT_IDLE_TIMEOUT_MS = 120_000
DEFAULT_MAX_RETRIES = 5

DEFAULT_MESSAGE_PREFIX = (
    "pacer is limiting how fast new upstream connections open to reduce the chance of an upstream rate limit"
)

ReleasePolicy = Literal["refund", "strict"]
_POLICIES = {"refund": lib.PACER_RELEASE_POLICY_REFUND, "strict": lib.PACER_RELEASE_POLICY_STRICT}

_ADMITTED = lib.PACER_DECISION_KIND_ADMITTED
_BOOKED = lib.PACER_DECISION_KIND_BOOKED
_LIVE = lib.PACER_TICKET_STATE_LIVE
_U64_MAX = _check.U64_MAX
_new = ffi.new

#: What admit_blocking sleeps with (looked up at each call, so tests can inject one).
_blocking_sleep = time.sleep


def _note(error: BaseException, failure: BaseException) -> None:
    """Attaches to ``error`` (the caller's own exception) a note that giving
    the admission back failed with ``failure``."""
    add_note = getattr(error, "add_note", None)  # Python 3.11+
    if add_note is not None:
        add_note(f"pacer: giving the admission back failed: {failure}")


def _give_back(release: Callable[[], Any], error: BaseException) -> None:
    """Releases (``release()``) an admission whose wait ended in ``error`` (a
    cancellation, a timeout, an interruption). The caller's own exception is
    what it sees: a release that fails (a library fault) is attached to it
    as a note, never raised in its place."""
    try:
        release()
    except Exception as failure:  # noqa: BLE001 - reported on the caller's exception
        _note(error, failure)


def _sleep_granted(decision: Any, limit: float | None, sleep: Callable[[float], Any]) -> Any:
    """The blocking wait of an admission with a wait (``admit_blocking``'s,
    a pacer's or a fleet pacer's): a wait longer than ``limit`` seconds is
    released at once and raises TimeoutError; else ``sleep`` sleeps it in
    this thread (interrupted, the admission is given back and the exception
    re-raised)."""
    if limit is not None and decision.wait_ms > limit * 1000:
        decision.release()
        raise TimeoutError(
            f"pacer: the granted wait of {decision.wait_ms}ms is longer than the timeout of {limit}s"
        )
    try:
        sleep(decision.wait_ms / 1000)
    except BaseException as error:
        _give_back(decision.release, error)
        raise
    return decision


async def _await_granted(decision: Any, sleep: Callable[[float], Awaitable[Any]]) -> Any:
    """The asyncio wait of an admission with a wait (``admit``'s, a pacer's
    or a fleet pacer's): ``await sleep(seconds)``; cancelled meanwhile, the
    admission is given back (its ``release()``, awaited when it is a
    coroutine) and the caller's own exception re-raised."""
    try:
        await sleep(decision.wait_ms / 1000)
    except BaseException as error:
        # A cancelled request opens no connection: give the slot back.
        try:
            released = decision.release()
            if inspect.isawaitable(released):
                await released
        except Exception as failure:  # noqa: BLE001 - reported on the caller's exception
            _note(error, failure)
        raise
    return decision


class AdmitPath(enum.Enum):
    """Which rule admitted a request."""

    DISABLED = "disabled"  #: pacing is off
    PACED = "paced"  #: a whole token, now or after a wait within the bound
    SHAPED = "shaped"  #: overflow shaped: debited down to the floor, waits the bound
    OVERFLOW = "overflow"  #: overflow past the floor while shaping: at once, nothing debited
    BOOKED = "booked"  #: a redeemed booking (SPEC §11): the token debited when it was booked


class Outcome(enum.Enum):
    """What the upstream answered to a new connection, reported with
    ``observe`` (adaptive pacing, SPEC §14). ``observe`` also takes the
    values as strings, ``"opened"`` and ``"throttled"``."""

    #: The upstream opened the connection. It changes nothing in the rate
    #: in force (the law learns from throttles only).
    OPENED = "opened"
    #: The upstream refused it with its own rate limit (not the pacer's
    #: refusal): lowers the rate in force, at most once a minute, never
    #: below the floor.
    THROTTLED = "throttled"


class Mode(enum.Enum):
    """What a pacer does with overflow."""

    DISABLED = "disabled"  #: rate 0 or no room to wait: everything admitted at once
    REFUSING = "refusing"  #: overflow refused with a retry-after hint
    SHAPING_LOW_RATE = "shaping-low-rate"  #: retries cannot outlast a slot wait: overflow shaped
    SHAPING_NO_RETRY = "shaping-no-retry"  #: no retries: overflow shaped


_PATHS = {
    lib.PACER_ADMIT_PATH_DISABLED: AdmitPath.DISABLED,
    lib.PACER_ADMIT_PATH_PACED: AdmitPath.PACED,
    lib.PACER_ADMIT_PATH_SHAPED: AdmitPath.SHAPED,
    lib.PACER_ADMIT_PATH_OVERFLOW: AdmitPath.OVERFLOW,
    lib.PACER_ADMIT_PATH_BOOKED: AdmitPath.BOOKED,
}
_OUTCOMES = {
    Outcome.OPENED: lib.PACER_OUTCOME_OPENED,
    Outcome.THROTTLED: lib.PACER_OUTCOME_THROTTLED,
}


def _outcome_code(outcome: Any) -> int:
    """The ``pacer_outcome`` of an ``Outcome`` or its value (``"opened"``,
    ``"throttled"``); anything else is a TypeError (not an Outcome or a
    str) or a ValueError (another str), before any C call."""
    if isinstance(outcome, Outcome):
        return int(_OUTCOMES[outcome])
    if not isinstance(outcome, str):
        raise TypeError(
            f"pacer: outcome must be an Outcome or 'opened' or 'throttled', got {_check.describe(outcome)}"
        )
    try:
        return int(_OUTCOMES[Outcome(outcome)])
    except ValueError:
        raise ValueError(f"pacer: outcome must be 'opened' or 'throttled', got {outcome!r}") from None


_MODES = {
    lib.PACER_MODE_DISABLED: Mode.DISABLED,
    lib.PACER_MODE_REFUSING: Mode.REFUSING,
    lib.PACER_MODE_SHAPING_LOW_RATE: Mode.SHAPING_LOW_RATE,
    lib.PACER_MODE_SHAPING_NO_RETRY: Mode.SHAPING_NO_RETRY,
}


#: The right to refund one admission's debit; released at most once, by the
#: pacer that issued it. Made by ``reserve``, not by hand. A C type
#: (``pacer._fast``): properties ``debit_units`` (in 1/60000 of a
#: connection) and ``spent``; the package reads ``_pacer``, ``_seq``,
#: ``_debit_units``, ``_owner`` (the C ticket's owner tag, ABI 2) and sets
#: ``_spent`` under the pacer's release lock.
Ticket = fast.Ticket


def _ticket_of(pacer: Any, c_ticket: Any) -> Ticket:
    """The Ticket for a live ``struct pacer_ticket`` issued by ``pacer``."""
    return Ticket(pacer, c_ticket.seq, c_ticket.debit_units, c_ticket.owner)


def _c_ticket_fields(ticket: Ticket) -> dict[str, int]:
    """The fields of a live ``struct pacer_ticket`` rebuilt from ``ticket``:
    its owner tag goes back too, or the library refuses it as foreign."""
    return {"seq": ticket._seq, "debit_units": ticket._debit_units, "state": _LIVE, "owner": ticket._owner}


@dataclass(frozen=True, slots=True)
class Admitted:
    """Open the connection after ``wait_ms`` (``admit`` has already waited).

    ``ticket`` is None when nothing was debited (pacing off, or overflow
    admitted past the floor). Call ``release()`` if the connection will not
    be opened after all; it refunds at most once."""

    wait_ms: int
    path: AdmitPath
    clock_regressed: bool
    ticket: Ticket | None

    @property
    def queued(self) -> bool:
        """Admitted with a wait."""
        return self.wait_ms > 0

    def release(self, now_ms: int | None = None) -> bool:
        """Gives the slot back (at ``now_ms``, default the pacer's clock).
        True when the policy refunded it; False if there is nothing to refund
        or it was released already. Thread-safe."""
        ticket = self.ticket
        if ticket is None:
            if now_ms is not None:
                _check.u64("now_ms", now_ms)
            return False
        return ticket._pacer.release(ticket, now_ms)


@dataclass(frozen=True, slots=True)
class Refused:
    """Do not open; answer the client with a retryable rate limit carrying
    ``retry_after_s`` (see ``response``). ``required_wait_ms`` is the wait the
    rate would have needed (diagnostics)."""

    required_wait_ms: int
    retry_after_s: int
    clock_regressed: bool

    def response(self, message_prefix: str = DEFAULT_MESSAGE_PREFIX) -> RefusalResponse:
        """The refusal as an HTTP answer (SPEC §9)."""
        return refusal_response(self.retry_after_s, message_prefix=message_prefix)


#: What ``reserve``, ``admit`` and ``admit_blocking`` return.
Decision = Admitted | Refused

#: A key naming one request across its client's retries (``admit(key=...)``).
Key = str | int | bytes


class Booking:
    """A place in line (SPEC §11): the token debited for one request's
    connection, which may open at ``slot_ms``. Made by ``reserve_or_book``,
    not by hand.

    Keep it under the request's own identity and present it with
    ``Pacer.redeem`` on the request's retry. If the request ends without
    redeeming it (aborted, failed, gave up), ``release()`` it, or its slot is
    lost to everyone. Redeeming moves its ticket into the admission; it can
    be redeemed or released at most once."""

    __slots__ = ("_ticket", "_slot_ms")

    def __init__(self, ticket: Ticket, slot_ms: int) -> None:
        self._ticket = ticket
        self._slot_ms = slot_ms

    @property
    def slot_ms(self) -> int:
        """When the connection may open, ms on the pacer's clock."""
        return self._slot_ms

    @property
    def ticket(self) -> Ticket:
        """The refund right of the booked token."""
        return self._ticket

    @property
    def spent(self) -> bool:
        """Whether it was redeemed (admitted) or released already."""
        return self._ticket._spent

    def release(self, now_ms: int | None = None) -> bool:
        """Gives the booked token back (at ``now_ms``, default the pacer's
        clock), as ``Pacer.release(booking.ticket)``. True when the policy
        refunded it; False if it was redeemed or released already."""
        return self._ticket._pacer.release(self._ticket, now_ms)

    def __repr__(self) -> str:
        return f"<pacer.Booking slot_ms={self._slot_ms} spent={self._ticket._spent}>"


@dataclass(frozen=True, slots=True)
class Booked:
    """Do not open yet: answer the client with a retryable rate limit
    carrying ``retry_after_s`` (see ``response``), exactly as for ``Refused``,
    and keep ``booking`` for the request's retry (``Pacer.redeem``).

    ``required_wait_ms`` is how far the slot is from the decision's time."""

    booking: Booking
    required_wait_ms: int
    retry_after_s: int
    clock_regressed: bool

    def response(self, message_prefix: str = DEFAULT_MESSAGE_PREFIX) -> RefusalResponse:
        """The answer for this attempt as HTTP (SPEC §9), the same as a refusal's."""
        return refusal_response(self.retry_after_s, message_prefix=message_prefix)

    def release(self, now_ms: int | None = None) -> bool:
        """``booking.release(now_ms)``: the request will not retry after all."""
        return self.booking.release(now_ms)


#: What ``reserve_or_book`` returns.
BookingDecision = Admitted | Booked | Refused
#: What ``redeem`` returns: admitted, or not yet (the same booking, the next hint).
Redemption = Admitted | Booked


class _Pending:
    """One keyed request refused so far: its refused attempts and its
    booking (a pacer's keys and a fleet pacer's)."""

    __slots__ = ("attempts", "booking")

    def __init__(self) -> None:
        self.attempts = 0
        self.booking: Booking | None = None

    def record(self, pending: dict[Any, _Pending], key: Any, outcome: Any) -> bool:
        """Files the outcome of the request's attempt in ``pending`` (under
        the pacer's keyed lock): True for an admission (the key is
        forgotten); else the refused attempt is counted and a booking kept."""
        if isinstance(outcome, Admitted):
            pending.pop(key, None)
            return True
        if isinstance(outcome, Booked):
            self.booking = outcome.booking
        self.attempts += 1
        pending[key] = self
        return False

    def retries_left(self, max_retries: int) -> int:
        """The retries the request has left: ``max_retries`` less its attempts refused so far."""
        return max(0, max_retries - self.attempts)


@dataclass(frozen=True, slots=True)
class PacerConfig:
    """The settings a pacer runs with (defaults filled in)."""

    rate_per_minute: int
    burst: int
    idle_timeout_ms: int
    max_retries: int
    release_policy: ReleasePolicy
    #: Adaptive pacing (SPEC §14): the lowest rate a throttle may lower the
    #: rate in force to; 0 = adaptation off.
    adaptive_floor_per_min: int = 0
    #: The highest rate the rate in force may reach (searching or probing); 0 = the rate.
    adaptive_ceiling_per_min: int = 0


#: The wait histogram's upper bounds, ms (``Counters.wait_buckets``): the
#: library's ``pacer_wait_bounds_ms``, read at import.
WAIT_BOUNDS_MS: tuple[int, ...] = tuple(int(bound) for bound in lib.pacer_wait_bounds_ms)
#: Units of a token in ``PacerState.tokens_units`` and ``level_at``.
UNITS_PER_TOKEN = 60_000
_NO_WAITS = (0,) * len(WAIT_BOUNDS_MS)


@dataclass(frozen=True, slots=True)
class Counters:
    """What a pacer decided so far (each counter read independently;
    docs/metrics.md derives the metrics from them). The fields after
    ``clock_regressions`` came later and have defaults, so a ``Counters``
    built with the first seven still works."""

    admitted: int
    admitted_after_wait: int
    refused: int
    shaped: int
    released: int
    refunded: int
    clock_regressions: int
    #: Refusals that booked a place in line (counted in ``refused`` too).
    booked: int = 0
    #: Upstream answers reported to ``observe``: opened, throttled.
    opened: int = 0
    throttled: int = 0
    #: The admissions' waits summed, ms.
    wait_ms_total: int = 0
    #: Admissions of a booking presented on its retry (``redeem``).
    redeemed: int = 0
    #: Admissions whose wait is in (``WAIT_BOUNDS_MS[i-1]``, ``WAIT_BOUNDS_MS[i]``]
    #: ms (0 before the first); immediate admissions are in none, nor waits
    #: above the last bound.
    wait_buckets: tuple[int, ...] = _NO_WAITS


@dataclass(frozen=True, slots=True)
class PacerState:
    """A pacer's current state, for diagnostics; units are 1/60000 of a connection."""

    mode: Mode
    wait_bound_ms: int
    capacity_units: int
    max_debt_units: int
    high_water_ms: int
    tokens_units: int


def _config_text(c: PacerConfig) -> str:
    """The settings for a pacer's repr (a plain, shared or fleet pacer's);
    the adaptive ones only when adaptation is on."""
    text = (f"rate_per_minute={c.rate_per_minute} burst={c.burst} idle_timeout_ms={c.idle_timeout_ms} "
            f"max_retries={c.max_retries} release_policy={c.release_policy!r}")
    if c.adaptive_floor_per_min == 0:
        return text
    return (f"{text} adaptive_floor_per_min={c.adaptive_floor_per_min}"
            f" adaptive_ceiling_per_min={c.adaptive_ceiling_per_min}")


class _PacerView:
    """The settings of a pacer that decides through a ``Pacer`` underneath
    (``_pacer``): a shared pacer's and a fleet pacer's (its local pacer,
    which checked and completed the configuration)."""

    __slots__ = ()

    _pacer: Pacer

    @property
    def config(self) -> PacerConfig:
        return self._pacer.config

    @property
    def mode(self) -> Mode:
        return self._pacer.mode

    @property
    def wait_bound_ms(self) -> int:
        """The longest wait an admission is given, ms."""
        return self._pacer.wait_bound_ms

    @property
    def can_refuse(self) -> bool:
        return self._pacer.can_refuse

    @property
    def enabled(self) -> bool:
        return self._pacer.enabled


class RefusalResponse(NamedTuple):
    """``(status, headers, body)`` of a refusal (SPEC §9)."""

    status: int
    headers: dict[str, str]
    body: bytes


#: A shared pacer reads the machine-wide clock itself (``shared_clock_ms``).
_NO_CLOCK = ("pacer: a shared pacer takes no clock: every process sharing it reads the "
             "machine-wide clock, shared_clock_ms()")


@dataclass(frozen=True, slots=True)
class NativeCalls:
    """The C calls a pacer decides and reports with, each with the signature
    of its ``lib.pacer_*`` function (the pacer's storage first). A plain
    pacer uses those functions; a shared pacer plugs in calls that go
    through its handle (``pacer_shared_reserve``, ...) and read the shared
    clock themselves (they ignore the time argument)."""

    reserve: Callable[[Any, int, Any], int]
    release: Callable[[Any, Any, int, Any], int]
    #: ``pacer_get_metrics(storage, out_metrics)``.
    get_metrics: Callable[[Any, Any], int]
    get_info: Callable[[Any, Any], int]
    #: ``pacer_reserve_or_book(storage, now_ms, retries_left, out_decision, out_booking)``.
    reserve_or_book: Callable[[Any, int, int, Any, Any], int]
    #: ``pacer_redeem(storage, booking, now_ms, out_decision)``.
    redeem: Callable[[Any, Any, int, Any], int]
    #: ``pacer_observe(storage, outcome, now_ms, out_rate_per_min)``.
    observe: Callable[[Any, int, int, Any], int]
    #: ``pacer_rate_in_force(storage, now_ms, out_rate_per_min)``.
    rate_in_force: Callable[[Any, int, Any], int]
    #: ``pacer_level_at(storage, now_ms, out_units)``.
    level_at: Callable[[Any, int, Any], int]
    #: Whether the pacer is shared: no clock argument anywhere.
    shared: bool


    @classmethod
    def named(cls, source: Any, prefix: str, *, shared: bool) -> NativeCalls:
        """Each call is ``source``'s attribute named ``prefix`` and the
        field's name: ``lib.pacer_reserve``, ... for a plain pacer; a shared
        handle's ``_reserve``, ... for a shared pacer."""
        calls = {field.name: getattr(source, prefix + field.name)
                 for field in dataclasses.fields(cls) if field.name != "shared"}
        return cls(**calls, shared=shared)


_LOCAL_CALLS = NativeCalls.named(lib, "pacer_", shared=False)
#: pacer_reserve's address in the cffi module, for the C ``reserve`` (pacer._fast).
_RESERVE_ADDRESS = int(ffi.cast("uintptr_t", ffi.addressof(lib, "pacer_reserve")))


def _settings(
    rate_per_minute: Any,
    burst: Any,
    idle_timeout_ms: Any,
    max_retries: Any,
    release_policy: Any,
    adaptive_floor_per_min: Any = 0,
    adaptive_ceiling_per_min: Any = 0,
) -> tuple[PacerConfig, Any]:
    """Checks a pacer's settings (TypeError/ValueError naming the field):
    the ``PacerConfig`` with the defaults filled in, and its
    ``struct pacer_config *``."""
    rate = _check.whole("rate_per_minute", rate_per_minute, 0, int(lib.PACER_MAX_RATE_PER_MIN))
    burst = _check.whole("burst", burst, 0, int(lib.PACER_MAX_BURST))
    idle = _check.u64("idle_timeout_ms", idle_timeout_ms)
    ceiling = ladder_ceiling(idle)
    if max_retries is None:
        retries = min(DEFAULT_MAX_RETRIES, ceiling)
    else:
        retries = _check.u32("max_retries", max_retries)
        if retries > ceiling:
            raise ValueError(
                f"pacer: max_retries must be at most {ceiling} (the ladder ceiling of an "
                f"idle_timeout_ms of {idle}), got {retries}"
            )
    if not isinstance(release_policy, str):
        raise TypeError(
            f"pacer: release_policy must be 'refund' or 'strict', got {_check.describe(release_policy)}"
        )
    if release_policy not in _POLICIES:
        raise ValueError(f"pacer: release_policy must be 'refund' or 'strict', got {release_policy!r}")
    floor = _check.whole("adaptive_floor_per_min", adaptive_floor_per_min, 0, int(lib.PACER_MAX_RATE_PER_MIN))
    if floor > rate:
        raise ValueError(f"pacer: adaptive_floor_per_min must be between 0 (adaptation off) and "
                         f"rate_per_minute ({rate}), got {floor}")
    top = _check.whole("adaptive_ceiling_per_min", adaptive_ceiling_per_min, 0, int(lib.PACER_MAX_RATE_PER_MIN))
    if floor > 0 and 0 < top < rate:
        raise ValueError(f"pacer: adaptive_ceiling_per_min must be 0 (the rate) or between rate_per_minute "
                         f"({rate}) and {int(lib.PACER_MAX_RATE_PER_MIN)}, got {top}")
    # ffi.new zeroes the struct: no field is left unset.
    c_config = ffi.new("struct pacer_config *", {
        "rate_per_min": rate,
        "burst": burst,
        "idle_timeout_ms": idle,
        "max_retries": retries,
        "release_policy": _POLICIES[release_policy],
        "adaptive_floor_per_min": floor,
        "adaptive_ceiling_per_min": top,
    })
    return PacerConfig(rate, burst, idle, retries, release_policy, floor, top), c_config


class Pacer(fast.Core):
    """One bucket pacing new upstream connections (SPEC §4).

    ``reserve`` decides without waiting; ``admit`` (asyncio) and
    ``admit_blocking`` (threads) wait the granted time. ``reserve`` and
    ``release`` are thread-safe and lock-free in the core.

    ``reserve`` is the C base type's (``pacer._fast.Core``): one C call that
    checks the clock, calls ``pacer_reserve`` and builds the ``Admitted`` or
    ``Refused``, keeping the GIL for the core's short lock-free call. A
    pacer whose calls go through a handle (a shared pacer) is not bound to
    it and reserves with ``_reserve_calls``, through cffi.

    Bookings (SPEC §11, opt-in): ``admit(key=...)`` lines a keyed request up
    across its client's retries (``forget``, ``pending_keys``);
    ``reserve_or_book`` and ``redeem`` are the same calls for callers that
    keep the bookings themselves.
    """

    __slots__ = ("_owner", "_storage", "_now", "_sleep", "_config", "_mode", "_wait_bound_ms",
                 "_c_reserve", "_c_release", "_c_metrics", "_c_info", "_c_reserve_or_book",
                 "_c_redeem", "_c_observe", "_c_rate_in_force", "_c_level_at", "_shared",
                 "_release_lock", "_keyed_lock", "_pending", "__weakref__")

    def __init__(
        self,
        *,
        rate_per_minute: int = DEFAULT_RATE_PER_MINUTE,
        burst: int = DEFAULT_BURST,
        idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
        max_retries: int | None = None,
        release_policy: ReleasePolicy = "refund",
        adaptive_floor_per_min: int = 0,
        adaptive_ceiling_per_min: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        notice_registry: NoticeRegistry | None = None,
    ) -> None:
        """
        :param rate_per_minute: new connections per minute, 0..600 (0 = pacing off)
        :param burst: connections admitted with no wait after an idle spell (0 means 1)
        :param idle_timeout_ms: the request's no-data deadline, ms; sizes the wait bound
        :param max_retries: the client's retry count; default min(5, ladder ceiling)
        :param release_policy: ``"refund"`` (always refund) or ``"strict"``
        :param adaptive_floor_per_min: adaptive pacing (SPEC §14, ``observe``): the lowest
            rate a throttle may lower the rate in force to, 1..rate_per_minute; 0 = off
        :param adaptive_ceiling_per_min: the highest rate it may reach (searching or probing),
            rate_per_minute..600; 0 = rate_per_minute (ignored when adaptation is off)
        :param clock: monotonic clock in seconds (float), like ``time.monotonic``
        :param sleep: the coroutine ``admit`` waits with; default ``asyncio.sleep``
        :param notice_registry: remembers the notices logged; default module-wide
        """
        config, c_config = _settings(rate_per_minute, burst, idle_timeout_ms, max_retries, release_policy,
                                     adaptive_floor_per_min, adaptive_ceiling_per_min)
        clock = _check.callable_or("clock", clock, time.monotonic)
        sleep = _check.callable_or("sleep", sleep, asyncio.sleep)
        registry = _check_registry(notice_registry)
        now_ms = _check.clock_ms(clock)
        owner, storage = aligned_struct("struct pacer", lib.PACER_STORAGE_SIZE, lib.PACER_STORAGE_ALIGN)
        status = lib.pacer_init(storage, c_config, now_ms)
        if status in (lib.PACER_STATUS_RATE_TOO_HIGH, lib.PACER_STATUS_BURST_TOO_LARGE,
                      lib.PACER_STATUS_RETRIES_EXCEED_LADDER):  # pragma: no cover - checked above
            raise ValueError(ffi.string(lib.pacer_status_str(status)).decode())
        _ok("pacer_init", status)
        self._attach(config, c_config, owner, storage, functools.partial(fast.clock_ms, clock), sleep,
                     registry, _LOCAL_CALLS)
        # reserve calls pacer_reserve on the storage from C from now on.
        self._bind(owner, int(ffi.cast("uintptr_t", storage)), _RESERVE_ADDRESS)

    def _attach(
        self,
        config: PacerConfig,
        c_config: Any,
        owner: object,
        storage: Any,
        now: Callable[[], int],
        sleep: Callable[[float], Awaitable[Any]],
        registry: NoticeRegistry,
        calls: NativeCalls,
    ) -> None:
        """Sets up a pacer on ``storage`` (an initialised ``struct pacer *``,
        kept alive by ``owner``) whose clock reads whole ms with ``now`` and
        whose C calls are ``calls`` (a plain pacer's or a shared pacer's)."""
        self._owner = owner
        self._storage = storage
        self._now = now
        self._sleep = sleep
        self._c_reserve = calls.reserve
        self._c_release = calls.release
        self._c_metrics = calls.get_metrics
        self._c_info = calls.get_info
        self._c_reserve_or_book = calls.reserve_or_book
        self._c_redeem = calls.redeem
        self._c_observe = calls.observe
        self._c_rate_in_force = calls.rate_in_force
        self._c_level_at = calls.level_at
        self._shared = calls.shared
        self._release_lock = threading.Lock()
        self._keyed_lock = threading.Lock()
        self._pending: dict[Key, _Pending] = {}
        self._config = config
        state = self.state()
        self._mode = state.mode
        self._wait_bound_ms = state.wait_bound_ms
        # The mode notice (pacing_disabled / norefuse), as settings resolution
        # would report it; the rule is the core's.
        mode_notice = ffi.new("struct pacer_notice *")
        present = ffi.new("bool *")
        _ok("pacer_mode_notice", lib.pacer_mode_notice(c_config, mode_notice, present))
        if present[0]:
            report(notice_from_c(mode_notice), registry)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        names: Mapping[str, str] = ENV_NAMES,
        burst: int = DEFAULT_BURST,
        release_policy: ReleasePolicy = "refund",
        adaptive_floor_per_min: int = 0,
        adaptive_ceiling_per_min: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        notice_registry: NoticeRegistry | None = None,
    ) -> Pacer:
        """A pacer configured by ``Budget.from_env(env, names=names)``."""
        budget = Budget.from_env(env, names=names, notice_registry=notice_registry)
        return cls(
            rate_per_minute=budget.rate_per_minute,
            burst=burst,
            idle_timeout_ms=budget.idle_timeout_ms,
            max_retries=budget.max_retries,
            release_policy=release_policy,
            adaptive_floor_per_min=adaptive_floor_per_min,
            adaptive_ceiling_per_min=adaptive_ceiling_per_min,
            clock=clock,
            sleep=sleep,
            notice_registry=notice_registry,
        )

    # ------------------------------------------------------------ properties

    @property
    def config(self) -> PacerConfig:
        return self._config

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def wait_bound_ms(self) -> int:
        """The longest wait an admission is given, ms."""
        return self._wait_bound_ms

    @property
    def can_refuse(self) -> bool:
        """Whether overflow is refused (otherwise shaped, or pacing is off)."""
        return self._mode is Mode.REFUSING

    @property
    def enabled(self) -> bool:
        return self._mode is not Mode.DISABLED

    def now_ms(self) -> int:
        """The pacer's clock, in whole milliseconds."""
        return self._now()

    # ------------------------------------------------------------ decisions

    if TYPE_CHECKING:
        def reserve(self, now_ms: int) -> Decision:
            """Decides at ``now_ms`` (whole ms on the pacer's clock) without
            waiting. The caller waits ``wait_ms`` itself and releases the
            admission if it will not open the connection.

            Implemented in C (``pacer._fast.Core.reserve``); a pacer that is
            not bound to it (a shared pacer) goes to ``_reserve_calls``."""

    def _reserve_calls(self, now_ms: int) -> Decision:
        """``reserve`` through the pacer's ``NativeCalls`` (cffi): what a
        shared pacer's reserve runs. The same checks and answers as the C
        ``reserve``."""
        if type(now_ms) is not int or now_ms < 0 or now_ms > _U64_MAX:
            now_ms = _check.u64("now_ms", now_ms)
        out = _new("struct pacer_decision *")
        _ok("pacer_reserve", self._c_reserve(self._storage, now_ms, out))
        return self._decided(out, None)  # type: ignore[return-value]

    def _decided(self, out: Any, c_booking: Any) -> BookingDecision:
        """The answer of a ``struct pacer_decision`` this pacer's core made
        (reserve's; reserve_or_book's, its ``struct pacer_booking`` filled
        when booked; redeem's when admitted)."""
        if out.kind == _ADMITTED:
            ticket = out.ticket
            return Admitted(
                out.wait_ms,
                _PATHS[out.path],
                out.clock_regressed,
                _ticket_of(self, ticket) if ticket.state == _LIVE else None,
            )
        if out.kind == _BOOKED:
            booking = Booking(_ticket_of(self, c_booking.ticket), int(c_booking.slot_ms))
            return Booked(booking, out.required_wait_ms, out.retry_after_s, out.clock_regressed)
        return Refused(out.required_wait_ms, out.retry_after_s, out.clock_regressed)

    def release(self, ticket: Ticket, now_ms: int | None = None) -> bool:
        """Refunds an admission that will not open a connection (at ``now_ms``,
        default the pacer's clock). True when the policy refunded it; False
        for a ticket already released or issued by another pacer (nothing
        changes then). Thread-safe: of concurrent releases of one ticket,
        exactly one goes through."""
        if not isinstance(ticket, Ticket):
            raise TypeError(f"pacer: ticket must be a Ticket from reserve(), got {_check.describe(ticket)}")
        now = self._clock_argument(now_ms)
        if ticket._pacer is not self:
            return False
        with self._release_lock:
            if ticket._spent:
                return False
            ticket._spent = True
        c_ticket = _new("struct pacer_ticket *", _c_ticket_fields(ticket))
        refunded = _new("bool *")
        try:
            _ok("pacer_release", self._c_release(self._storage, c_ticket, now, refunded))
        except BaseException:
            # Not released (a library fault, or a shared pacer closed): the
            # ticket keeps its refund right.
            with self._release_lock:
                ticket._spent = False
            raise
        return bool(refunded[0])

    def reserve_or_book(self, now_ms: int, retries_left: int) -> BookingDecision:
        """``reserve``, except that a refusal whose wait fits the horizon of
        the request's ``retries_left`` retries books a place in line (SPEC
        §11): one token is debited and the answer is ``Booked``. Answer the
        client as for a refusal (``Booked.response()``), keep the booking
        under the request's identity, and present it with ``redeem`` on its
        retry, or release it if the request ends.

        The horizon is ``wait_bound_ms + retries_left · hint cap · 1000`` ms
        (``retries_left`` counts above ``max_retries`` as ``max_retries``);
        beyond it the answer is a plain ``Refused`` and nothing is debited.
        Thread-safe and lock-free, like ``reserve``. (A shared pacer's call
        reads the shared clock itself: ``now_ms`` is checked, not used.)"""
        if type(now_ms) is not int or now_ms < 0 or now_ms > _U64_MAX:
            now_ms = _check.u64("now_ms", now_ms)
        retries_left = _check.u32("retries_left", retries_left)
        out = _new("struct pacer_decision *")
        c_booking = _new("struct pacer_booking *")
        _ok("pacer_reserve_or_book", self._c_reserve_or_book(self._storage, now_ms, retries_left, out, c_booking))
        return self._decided(out, c_booking)

    def redeem(self, booking: Booking, now_ms: int) -> Redemption:
        """Presents ``booking`` on the request's retry at ``now_ms``. Changes
        nothing in the pacer (only the counters count the attempt).

        When the slot is at most ``wait_bound_ms`` away: ``Admitted`` after
        ``max(0, slot_ms - now_ms)`` with path ``AdmitPath.BOOKED``; the
        booking's ticket moves into the admission (``Admitted.release()``
        refunds it from then on; the booking is spent). Otherwise ``Booked``
        again: the same booking, ``required_wait_ms`` the distance to the
        slot and ``retry_after_s`` the hint for the next retry.

        A booking redeemed or released already, or booked on another pacer,
        raises ValueError. Thread-safe: of concurrent redeems and releases of
        one booking, at most one takes it."""
        if not isinstance(booking, Booking):
            raise TypeError(
                f"pacer: booking must be a Booking from reserve_or_book(), got {_check.describe(booking)}"
            )
        now_ms = _check.u64("now_ms", now_ms)
        ticket = booking._ticket
        if ticket._pacer is not self:
            raise ValueError("pacer: this booking was made by another pacer")
        c_booking = _new("struct pacer_booking *", {
            "ticket": _c_ticket_fields(ticket),
            "slot_ms": booking._slot_ms,
        })
        out = _new("struct pacer_decision *")
        # Under the release lock, so a concurrent release or redeem of the
        # same booking sees it either before (and takes it) or after.
        with self._release_lock:
            if ticket._spent:
                raise ValueError("pacer: this booking was redeemed or released already")
            _ok("pacer_redeem", self._c_redeem(self._storage, c_booking, now_ms, out))
            admitted = out.kind == _ADMITTED
            if admitted:
                ticket._spent = True
        if admitted:
            return self._decided(out, None)  # type: ignore[return-value]
        return Booked(booking, out.required_wait_ms, out.retry_after_s, out.clock_regressed)

    # ------------------------------------------------------------ adaptive pacing

    def _clock_argument(self, now_ms: Any) -> int:
        """The time of a call that defaults to the pacer's clock: ``now_ms``
        checked, or the clock (a shared pacer takes none: its calls read the
        shared clock themselves)."""
        if now_ms is None:
            return self._now()
        if self._shared:
            raise TypeError(_NO_CLOCK)
        return _check.u64("now_ms", now_ms)

    def observe(self, outcome: Outcome | str, now_ms: int | None = None) -> int:
        """Reports what the upstream answered to a new connection (adaptive
        pacing, SPEC §14), at ``now_ms`` (default the pacer's clock), and
        returns the rate in force after it, new connections per minute.

        ``Outcome.OPENED`` (``"opened"``) is counted (per minute of the
        clock). ``Outcome.THROTTLED`` (``"throttled"``: the upstream's own
        rate limit) sets the rate to what got through (``L``: the count, at
        most the ceiling, when it ends the search or is below the rate in
        force; else the rate in force less 1/16), unless a throttle less than
        a minute before already did: then it changes nothing. Before the
        first throttle the rate doubles every 5 s up to the ceiling (the
        first throttle pauses at the lowest rate until a minute after the
        start); after one it holds at ``L``, then now and then probes a step
        above it; a minute's count well above ``L`` searches again. It
        stays within the floor (raised to the lowest rate that can refuse)
        and the ceiling; ``reserve`` refills at it. With
        adaptation off it changes nothing and returns ``rate_per_minute``.
        A bad outcome or time raises (TypeError/ValueError) and changes
        nothing. Thread-safe and lock-free."""
        code = _outcome_code(outcome)
        now = self._clock_argument(now_ms)
        out = _new("uint32_t *")
        _ok("pacer_observe", self._c_observe(self._storage, code, now, out))
        return int(out[0])

    def rate_in_force(self, now_ms: int | None = None) -> int:
        """The rate ``reserve`` decides at, at ``now_ms`` (default the
        pacer's clock), new connections per minute (SPEC §14):
        ``rate_per_minute`` unless adaptation is on. Reads only."""
        now = self._clock_argument(now_ms)
        out = _new("uint32_t *")
        _ok("pacer_rate_in_force", self._c_rate_in_force(self._storage, now, out))
        return int(out[0])

    # ------------------------------------------------------------ keyed bookings

    @property
    def pending_keys(self) -> int:
        """How many keyed requests (``admit(key=...)``) were refused and are
        not yet admitted or forgotten."""
        with self._keyed_lock:
            return len(self._pending)

    def forget(self, key: Key, now_ms: int | None = None) -> bool:
        """Gives back what the keyed request ``key`` holds (its booking) when
        it ends without opening: aborted, failed, or given up; the key is
        forgotten. True when a booking was refunded; False when the key held
        none (or is unknown). Call it for every key passed to ``admit`` that
        is not admitted. (A shared pacer takes no ``now_ms``: its release
        reads the shared clock.) If the release fails (a library fault, a
        closed shared pacer), the key keeps its booking and the error is
        raised."""
        _check.key("key", key)
        # A shared pacer's release reads the shared clock: no time to give it.
        now = None if now_ms is None and self._shared else self._clock_argument(now_ms)
        with self._keyed_lock:
            entry = self._pending.pop(key, None)
        if entry is None or entry.booking is None:
            return False
        try:
            return self.release(entry.booking._ticket, now)
        except BaseException:
            # Not released: the booking keeps its refund right, and the key keeps it.
            with self._keyed_lock:
                self._pending.setdefault(key, entry)
            raise

    def _attempt(self, key: Key, now_ms: int) -> Decision:
        """One attempt of the keyed request ``key`` at ``now_ms`` (SPEC §11):
        redeems the booking it holds, else reserves or books with the retries
        it has left (``max_retries`` minus its attempts refused so far). A
        booking or a not-yet redemption is returned as a ``Refused``."""
        with self._keyed_lock:
            entry = self._pending.get(key) or _Pending()
            outcome: BookingDecision
            if entry.booking is not None:
                outcome = self.redeem(entry.booking, now_ms)
            else:
                outcome = self.reserve_or_book(now_ms, entry.retries_left(self._config.max_retries))
            if entry.record(self._pending, key, outcome):
                return outcome  # type: ignore[return-value]
        if isinstance(outcome, Booked):
            return Refused(outcome.required_wait_ms, outcome.retry_after_s, outcome.clock_regressed)
        return outcome

    # ------------------------------------------------------------ waiting

    def _decide(self, key: Key | None) -> Decision:
        """The decision of an admission (``admit``, ``admit_blocking``) now:
        ``reserve``, or with ``key`` (checked) the keyed request's attempt."""
        if key is not None:
            _check.key("key", key)
        now_ms = self._now()
        return self.reserve(now_ms) if key is None else self._attempt(key, now_ms)

    async def admit(self, *, key: Key | None = None) -> Decision:
        """Waits (with ``sleep``, default ``asyncio.sleep``) for permission to
        open one new connection. Returns the ``Admitted`` after its wait, or
        the ``Refused``. Cancelled while waiting (``task.cancel()``,
        ``asyncio.timeout``), it gives the slot back and re-raises (the
        caller's own exception, even if giving back fails).

        With ``key`` (a str, int or bytes naming the request across its
        client's retries), a refusal whose wait fits the request's remaining
        retries books a place in line, still answered as ``Refused``; the
        key's next attempt redeems it. See ``forget`` for a keyed request
        that ends without being admitted."""
        decision = self._decide(key)
        if isinstance(decision, Refused) or decision.wait_ms == 0:
            return decision
        return await _await_granted(decision, self._sleep)  # type: ignore[no-any-return]

    def admit_blocking(self, timeout: float | None = None, *, key: Key | None = None) -> Decision:
        """``admit`` for threaded code: sleeps the granted wait in this thread.
        If the wait is longer than ``timeout`` seconds it gives the slot back at
        once and raises TimeoutError. Interrupted while sleeping (e.g.
        KeyboardInterrupt), it gives the slot back and re-raises. ``key`` as
        for ``admit``."""
        limit = None if timeout is None else _check.seconds("timeout", timeout)
        decision = self._decide(key)
        if isinstance(decision, Refused) or decision.wait_ms == 0:
            return decision
        return _sleep_granted(decision, limit, _blocking_sleep)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ diagnostics

    def counters(self) -> Counters:
        """Every count the pacer keeps (``pacer_get_metrics``), each read
        independently. Reads only."""
        out = ffi.new("struct pacer_metrics *")
        _ok("pacer_get_metrics", self._c_metrics(self._storage, out))
        return Counters(int(out.admitted), int(out.admitted_after_wait), int(out.refused), int(out.shaped),
                        int(out.released), int(out.refunded), int(out.clock_regressions), int(out.booked),
                        int(out.opened), int(out.throttled), int(out.wait_ms_total), int(out.redeemed),
                        tuple(int(count) for count in out.wait_buckets))

    def level_at(self, now_ms: int | None = None) -> int:
        """The tokens at ``now_ms`` (default the pacer's clock) in units
        (``UNITS_PER_TOKEN`` a token; negative: the debt of admissions still
        waiting): the state refilled at the rate in force, capped at the
        burst; a time behind the latest reading reads that reading
        (``pacer_level_at``). Reads only."""
        now = self._clock_argument(now_ms)
        out = _new("int64_t *")
        _ok("pacer_level_at", self._c_level_at(self._storage, now, out))
        return int(out[0])

    def tokens(self, now_ms: int | None = None) -> float:
        """``level_at`` in tokens (fractional; negative: debt)."""
        return self.level_at(now_ms) / UNITS_PER_TOKEN

    def state(self) -> PacerState:
        out = ffi.new("struct pacer_info *")
        _ok("pacer_get_info", self._c_info(self._storage, out))
        return PacerState(_MODES[out.mode], int(out.wait_bound_ms), int(out.capacity_units),
                          int(out.max_debt_units), int(out.high_water_ms), int(out.tokens_units))

    def __repr__(self) -> str:
        c = self._config
        return f"<pacer.Pacer {_config_text(c)} mode={self._mode.value}>"


def refusal_response(retry_after_s: int, *, message_prefix: str = DEFAULT_MESSAGE_PREFIX) -> RefusalResponse:
    """The refusal as an HTTP answer (SPEC §9): status 200, a
    ``content-type: text/event-stream`` and ``retry-after`` header, and one
    SSE error event as the body (UTF-8 bytes)."""
    retry_after_s = _check.u64("retry_after_s", retry_after_s)
    prefix = ffi.new("char[]", _check.text("message_prefix", message_prefix, optional=False))
    body = written_bytes("pacer_refusal_body", lambda b, n, w: lib.pacer_refusal_body(prefix, retry_after_s, b, n, w))
    headers = {
        "content-type": ffi.string(lib.pacer_refusal_content_type()).decode("ascii"),
        "retry-after": str(retry_after_s),
    }
    return RefusalResponse(int(lib.PACER_REFUSAL_STATUS), headers, body)


# The C reserve builds these classes' instances slot by slot (pacer._fast).
fast.setup(Admitted, Refused, _PATHS, PacerError, _check.u64, _check.reading_ms)
