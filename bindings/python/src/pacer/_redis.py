"""Fleet pacers: the ``Pacer`` interface over a bucket in Redis
(docs/fleet-clients.md, docs/redis.md).

The rule runs inside the server (the module, the function library or the
script ``pacer.lua`` this package carries), on the server's clock. This
module builds the commands, reads the replies and applies the failure
policy; ``RedisPacer`` (over ``redis.Redis``) and ``AsyncRedisPacer`` (over
``redis.asyncio.Redis``) add only the I/O and the waiting.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import os
import select
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from . import _check
from ._pacer import (
    DEFAULT_BURST,
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_RATE_PER_MINUTE,
    WAIT_BOUNDS_MS,
    AdmitPath,
    Admitted,
    Booked,
    Booking,
    Counters,
    Outcome,
    Pacer,
    Refused,
    ReleasePolicy,
    Ticket,
    _await_granted,
    _config_text,
    _outcome_code,
    _PacerView,
    _Pending,
    _sleep_granted,
)
from ._settings import NoticeRegistry, _check_registry, hint_cap_s, logger

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

Engine = Literal["auto", "module", "function", "script"]
FailurePolicy = Literal["local", "open", "closed"]
#: Which failure policy decided an answer (None: the server did).
Fallback = Literal["local", "open", "closed"]
BucketKey = str | bytes

_ENGINES = ("auto", "module", "function", "script")
_POLICIES = ("local", "open", "closed")
DEFAULT_RETRY_AFTER_MS = 1000
#: The timeout's default when the wait bound is longer.
DEFAULT_TIMEOUT_MS = 1000

#: What the synchronous ``admit`` sleeps with (looked up at each call, so
#: tests can inject one).
_blocking_sleep = time.sleep
#: The clock the outage timer reads (never a decision's clock).
_monotonic = time.monotonic
#: The clock a call's deadline is read on.
_deadline_clock = time.monotonic

#: The codes of the error replies that say the server cannot serve now
#: (docs/fleet-clients.md): an outage, answered by the failure policy.
_OUTAGE_CODES = frozenset(("LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "OOM",
                           "NOREPLICAS", "MISCONF"))
_UNKNOWN_COMMAND = "ERR unknown command '"
#: The classes of a failed call (docs/fleet-clients.md, "Which replies are failures").
FailureClass = Literal["outage", "engine", "pacer"]
#: A call of the core sans I/O (``_FleetCore._create_call`` ...): yields
#: ``(op, args)`` asks, is sent their replies, returns the call's answer.
_Call = Generator[tuple[str, tuple[Any, ...]], Any, Any]


class _OnPrimaries(tuple):  # type: ignore[type-arg]
    """A keyless command (``MODULE LIST``, ``FUNCTION LIST``, ``SCRIPT
    LOAD``) that a pacer on a Redis Cluster sends to every primary, one
    after the other: its reply is the list of theirs, in that order; the
    first error raises."""

    __slots__ = ()


class _OpCommand(tuple):  # type: ignore[type-arg]
    """A command of the engine in use (``PACER.<OP>``, ``FCALL`` or
    ``EVALSHA``, or ``EVAL`` on a retry) on the pacer's key, as opposed to
    the keyless commands that find the engine or load the script. Its
    reply goes to the pacer as the server sent it (redis-py keeps no reply
    callback for these commands), so a pacer may send it on a connection
    it holds (``_HeldConnection``)."""

    __slots__ = ()


class _RepeatedCommand(_OpCommand):
    """An ``_OpCommand`` whose arguments are the same at every call of its
    op (every op but release and redeem, whose ticket changes): its bytes
    on the wire are packed once and kept."""

    __slots__ = ()


#: The ops whose arguments carry a ticket (an ``_OpCommand`` packed each call).
_TICKET_OPS = frozenset(("release", "redeem"))


def script_text() -> bytes:
    """The text of ``pacer.lua`` this package carries (a copy of the
    repository's ``redis/pacer.lua``, byte for byte)."""
    return resources.files(__package__).joinpath("pacer.lua").read_bytes()


class RedisPacerError(RuntimeError):
    """The server answered with an error of the pacer (``ERR pacer: ...``:
    a configuration other than the bucket's, a spent or foreign ticket, a
    key that is not a bucket), or with an error that is neither an outage
    nor an engine change (``WRONGTYPE``, ``NOPERM``, ...), or with a reply
    of a shape the client does not know. A bug or a misconfiguration, never
    hidden by the failure policy. ``reply`` is the server's error reply as
    it was sent (or, for a reply of an unknown shape, the message showing
    it)."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        message = reply[len("ERR "):] if reply.startswith("ERR pacer:") else reply
        super().__init__(message if message.startswith("pacer:") else f"pacer: {message or 'an empty error reply'}")


@dataclass(frozen=True, slots=True)
class OutageNotice:
    """Logged (WARNING on the ``pacer`` logger, as ``record.pacer_outage``)
    once when Redis stops answering a fleet pacer and once when it answers
    again. ``error`` is the failure that started the outage ("" at its
    end)."""

    started: bool
    address: str
    key: BucketKey
    policy: FailurePolicy
    error: str
    text: str


class RedisTicket:
    """The right to refund one admission of a fleet pacer: the server's
    ticket string and the key it belongs to, or, for an answer of the
    ``local`` failure policy, the in-process pacer's ``Ticket`` (released
    there, never to Redis). Made by the fleet pacer, not by hand."""

    __slots__ = ("_pacer", "_key", "_text", "_local", "_spent")

    def __init__(self, pacer: Any, key: BucketKey, text: str | None, local: Ticket | None = None) -> None:
        self._pacer = pacer
        self._key = key
        self._text = text
        self._local = local
        self._spent = False

    @property
    def key(self) -> BucketKey:
        """The bucket's key."""
        return self._key

    @property
    def text(self) -> str | None:
        """The server's ticket string (None for a local fallback's ticket)."""
        return self._text

    @property
    def fallback(self) -> Fallback | None:
        """``"local"`` when the local failure policy issued it, else None."""
        return "local" if self._local is not None else None

    @property
    def debit_units(self) -> int:
        """The debit it refunds, in 1/60000 of a connection."""
        if self._local is not None:
            return int(self._local.debit_units)
        return int(str(self._text).split(".")[2])

    @property
    def spent(self) -> bool:
        """Whether it was released (or redeemed, for a booking) through this pacer."""
        if self._local is not None:
            return bool(self._local.spent)
        return self._spent

    def __repr__(self) -> str:
        where = "local" if self._local is not None else repr(self._text)
        return f"<pacer.RedisTicket key={self._key!r} {where} spent={self.spent}>"


class RedisBooking(Booking):
    """A place in line in the fleet's bucket (SPEC §11): ``slot_ms`` is on
    the server's clock (on the local pacer's for a booking the ``local``
    failure policy made). Present it with ``redeem`` on the request's retry
    or release it; ``release()`` returns what the pacer's ``release`` does
    (an awaitable for ``AsyncRedisPacer``)."""

    __slots__ = ("_local_booking",)

    def __init__(self, ticket: RedisTicket, slot_ms: int, local: Booking | None = None) -> None:
        super().__init__(ticket, slot_ms)  # type: ignore[arg-type]
        self._local_booking = local

    @property
    def spent(self) -> bool:
        """Whether it was redeemed (admitted) or released already."""
        ticket: RedisTicket = self._ticket  # type: ignore[assignment]
        return ticket.spent

    def release(self, now_ms: int | None = None) -> Any:  # type: ignore[override]
        """Gives the booked token back: ``pacer.release(booking.ticket)``."""
        ticket: RedisTicket = _without_clock(now_ms, self._ticket)
        return ticket._pacer.release(ticket)

    def __repr__(self) -> str:
        return f"<pacer.RedisBooking slot_ms={self._slot_ms} ticket={self._ticket!r}>"


_NO_CLOCK = "pacer: a fleet pacer takes no clock: the Redis server's clock decides"


def _without_clock(now_ms: int | None, ticket: Any) -> Any:
    """The ticket a fleet pacer's admission or booking releases (None:
    nothing was debited); a time given is a TypeError (the server's clock
    decides)."""
    if now_ms is not None:
        raise TypeError(_NO_CLOCK)
    return ticket


@dataclass(frozen=True, slots=True)
class RedisAdmitted(Admitted):
    """``Admitted`` from a fleet pacer. ``ticket`` is a ``RedisTicket`` (or
    None when nothing was debited); ``fallback`` names the failure policy
    that decided it, None when the server did. ``release()`` gives the slot
    back through the pacer (``RedisPacer.release``)."""

    fallback: Fallback | None = None

    def release(self, now_ms: int | None = None) -> bool:
        ticket = _without_clock(now_ms, self.ticket)
        return ticket is not None and bool(ticket._pacer.release(ticket))


@dataclass(frozen=True, slots=True)
class AsyncRedisAdmitted(RedisAdmitted):
    """``RedisAdmitted`` from an ``AsyncRedisPacer``: ``await
    outcome.release()``."""

    async def release(self, now_ms: int | None = None) -> bool:  # type: ignore[override]
        ticket = _without_clock(now_ms, self.ticket)
        return ticket is not None and bool(await ticket._pacer.release(ticket))


@dataclass(frozen=True, slots=True)
class RedisRefused(Refused):
    """``Refused`` from a fleet pacer; ``fallback`` names the failure policy
    that decided it, None when the server did. ``required_wait_ms`` is 0
    when it is not known (a booking answered as a refusal, the ``closed``
    policy)."""

    fallback: Fallback | None = None


@dataclass(frozen=True, slots=True)
class RedisBooked(Booked):
    """``Booked`` from a fleet pacer: ``booking`` is a ``RedisBooking``.
    ``required_wait_ms`` is 0 when the server's reply does not say it (a
    booking or a not-yet redemption by Redis); ``fallback`` as for
    ``RedisAdmitted``."""

    fallback: Fallback | None = None

    def release(self, now_ms: int | None = None) -> Any:
        return self.booking.release(now_ms)


class _Down(Exception):
    """A failure (docs/fleet-clients.md, "When Redis fails"): the call is
    answered by the policy."""


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _fields(entry: Any) -> dict[str, Any]:
    """A RESP2 flat list of name/value pairs or a RESP3 map, as a dict."""
    if isinstance(entry, dict):
        return {_text(name): value for name, value in entry.items()}
    if isinstance(entry, (list, tuple)):
        return {_text(entry[i]): entry[i + 1] for i in range(0, len(entry) - 1, 2)}
    return {}


def _module_listed(reply: Any) -> bool:
    return any(_text(_fields(entry).get("name", "")) == "pacer" for entry in reply or [])


def _function_listed(reply: Any) -> bool:
    return any(_text(_fields(entry).get("library_name", "")) == "pacer" for entry in reply or [])


def _reply_class(text: str) -> FailureClass:
    """The class of an error reply, from its text as the server sent it:
    the one rule every fleet client keeps (docs/fleet-clients.md).

    - ``outage``: the server cannot serve now (its code is one of
      ``_OUTAGE_CODES``, or ``ERR`` followed by one, as a script's
      ``redis.call`` reports it); the failure policy answers.
    - ``engine``: the engine in use is gone (``NOSCRIPT``, ``ERR Function
      not found``, ``ERR unknown command 'pacer.…'``); ask which engine
      there is, load the script if that is it, and retry once.
    - ``pacer``: anything else (``ERR pacer: …``, ``WRONGTYPE``,
      ``NOPERM``, an empty or unknown text): an error to the caller."""
    words = text.split(" ", 2)
    code = words[0]
    if code == "ERR" and len(words) > 1 and words[1] in _OUTAGE_CODES:
        code = words[1]
    if code in _OUTAGE_CODES:
        return "outage"
    command = text[len(_UNKNOWN_COMMAND):len(_UNKNOWN_COMMAND) + len("pacer.")]
    if (code == "NOSCRIPT" or text.startswith("ERR Function not found")
            or (text.startswith(_UNKNOWN_COMMAND) and command.lower() == "pacer.")):
        return "engine"
    return "pacer"


def _reply_text(error: BaseException) -> str | None:
    """The text of the error reply that ``error`` reports, as the server
    sent it; None when it reports none (a connection lost, a timeout).

    redis-py's parser takes the code off the replies it has a class for
    (``READONLY x`` is a ReadOnlyError "x", ``ERR x`` a ResponseError
    "x") and keeps it as ``status_code``. A redis-py without
    ``status_code`` tells the code by the class alone, and a plain
    ResponseError whose first word is not a code it keeps lost an ``ERR``."""
    import redis.exceptions as rex
    from redis._parsers.base import BaseParser

    if not isinstance(error, rex.RedisError):
        return None
    message, codes = str(error), BaseParser.EXCEPTION_CLASSES
    if hasattr(error, "status_code"):
        code = error.status_code
        if code is None:
            return message if isinstance(error, rex.ResponseError) else None
        return f"{code} {message}" if code in codes else message
    for code, kind in codes.items():
        if kind is type(error) or (isinstance(kind, dict) and kind.get(message) is type(error)):
            return f"{code} {message}"
    if type(error) is not rex.ResponseError:
        return None
    first = message.split(" ", 1)[0]
    return message if first.isupper() and first not in codes else f"ERR {message}"


def _failure_class(error: BaseException) -> FailureClass | None:
    """The class of a call that raised ``error``: an error reply's by
    ``_reply_class``; a connection refused or lost and no reply in time are
    outages; a reply redis-py cannot parse is the pacer's error. None for
    anything else (an error of the caller or of the client: raised as it
    is)."""
    import redis.exceptions as rex

    text = _reply_text(error)
    if text is not None:
        return _reply_class(text)
    if isinstance(error, (rex.ConnectionError, rex.TimeoutError, TimeoutError, asyncio.TimeoutError, OSError)):
        return "outage"
    # A cluster client's own: no node of the cluster reached, a slot no
    # primary serves, the redirections of one command past their number.
    if isinstance(error, _cluster_outages(rex)) or _unreachable(rex, error):
        return "outage"
    if isinstance(error, rex.InvalidResponse):
        return "pacer"
    return None


def _cluster_outages(rex: Any) -> tuple[type[BaseException], ...]:
    """The errors of redis-py's cluster clients that are outages: no node of
    the cluster reached (``RedisClusterUnreachableError``, redis-py 8.2;
    before it, a ``RedisClusterException`` raised from the connection's
    error: ``_unreachable``), a slot no primary serves now, one command's
    redirections past their number (``ClusterError``: a slot moving back
    and forth)."""
    names = ("RedisClusterUnreachableError", "SlotNotCoveredError", "ClusterError")
    return tuple(kind for kind in (getattr(rex, name, None) for name in names) if isinstance(kind, type))


def _unreachable(rex: Any, error: BaseException) -> bool:
    """A cluster client's error raised from a connection refused, lost or
    timed out (no seed answered), not from credentials refused."""
    cause = error.__cause__
    refused = tuple(getattr(rex, name) for name in ("AuthenticationError", "AuthorizationError") if hasattr(rex, name))
    return (isinstance(error, rex.RedisClusterException)
            and isinstance(cause, (rex.ConnectionError, rex.TimeoutError, OSError)) and not isinstance(cause, refused))


def _address(client: Any) -> str:
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        return "redis"
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


#: How many items each kind of decision reply has (docs/redis.md).
_REPLY_LENGTHS = {"admitted": 5, "refused": 4, "booked": 5, "notyet": 3}


def _shaped(parse: Callable[..., Any]) -> Callable[..., Any]:
    """A reply's parser (the reply its last argument) that raises
    ``RedisPacerError`` showing the reply when it is of a shape the parser
    does not know: never a silent answer."""

    @functools.wraps(parse)
    def parsed(*args: Any) -> Any:
        try:
            return parse(*args)
        except (ValueError, TypeError, IndexError, AttributeError) as error:
            raise RedisPacerError(f"pacer: unexpected reply {args[-1]!r}") from error

    return parsed


def _reply_kind(reply: Any, kinds: tuple[str, ...]) -> str:
    """A decision reply's kind, one of ``kinds``, with its number of items."""
    if isinstance(reply, (list, tuple)) and reply and isinstance(reply[0], (bytes, str)):
        kind = _text(reply[0])
        if kind in kinds and len(reply) == _REPLY_LENGTHS[kind]:
            return kind
    raise ValueError(reply)


def _whole(reply: Any, index: int) -> int:
    value = reply[index]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(value)
    return value


def _flag(reply: Any, index: int) -> bool:
    value = _whole(reply, index)
    if value > 1:
        raise ValueError(value)
    return value == 1


def _path(reply: Any) -> AdmitPath:
    if not isinstance(reply[3], (bytes, str)):
        raise ValueError(reply[3])
    return AdmitPath(_text(reply[3]))


@_shaped
def _bit_reply(reply: Any) -> bool:
    """create's and release's answer: 1 or 0."""
    return _flag([reply], 0)


@dataclass(frozen=True, slots=True)
class FleetCounters(Counters):
    """A fleet pacer's ``Counters``: the answers this object got (the
    server's, the failure policy's and, with pacing off, its own), counted
    in this process (docs/metrics.md, "Whose counts"), and ``fallbacks``."""

    #: Decisions (reserve, reserve_or_book, redeem) the failure policy
    #: gave (the answer's ``fallback`` is set).
    fallbacks: int = 0


class _Tally:
    """What a fleet pacer counts of the answers it got, under a lock (the
    calls may come from several threads). Only ``FleetCounters`` reads it."""

    __slots__ = ("_lock", "_counts", "_waits")

    _FIELDS = ("admitted", "admitted_after_wait", "refused", "shaped", "released", "refunded",
               "clock_regressions", "booked", "opened", "throttled", "wait_ms_total", "redeemed", "fallbacks")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self._FIELDS, 0)
        self._waits = [0] * len(WAIT_BOUNDS_MS)

    def decided(self, answer: Any, redemption: bool = False) -> Any:
        """Counts a decision (``answer``, returned as is): a ``Booked``
        answer to a redemption is its "not yet", a refusal and no booking."""
        with self._lock:
            counts = self._counts
            if isinstance(answer, Admitted):
                counts["admitted"] += 1
                wait_ms = answer.wait_ms
                if wait_ms > 0:
                    counts["admitted_after_wait"] += 1
                    counts["wait_ms_total"] += wait_ms
                    # Bucket i holds the waits in (WAIT_BOUNDS_MS[i-1], WAIT_BOUNDS_MS[i]].
                    index = bisect.bisect_left(WAIT_BOUNDS_MS, wait_ms)
                    if index < len(self._waits):
                        self._waits[index] += 1
                if answer.path is AdmitPath.SHAPED:
                    counts["shaped"] += 1
                elif answer.path is AdmitPath.BOOKED:
                    counts["redeemed"] += 1
            else:
                counts["refused"] += 1
                if isinstance(answer, Booked) and not redemption:
                    counts["booked"] += 1
            if answer.clock_regressed:
                counts["clock_regressions"] += 1
            if getattr(answer, "fallback", None) is not None:
                counts["fallbacks"] += 1
        return answer

    def released(self, refunded: bool) -> bool:
        with self._lock:
            self._counts["released"] += 1
            if refunded:
                self._counts["refunded"] += 1
        return refunded

    def observed(self, outcome: Outcome) -> None:
        with self._lock:
            self._counts[outcome.value] += 1

    def read(self) -> FleetCounters:
        with self._lock:
            return FleetCounters(**self._counts, wait_buckets=tuple(self._waits))


class _FleetCore(_PacerView):
    """What ``RedisPacer`` and ``AsyncRedisPacer`` share, sans I/O: the
    settings, every call as a generator of what it asks (``_create_call``
    ...), the commands of an ask (``_exchange``, the engine found and the
    script loaded), the reply parser, the failure policy and its state, the
    keyed bookings. The two shells only perform the asks (``_ask``): with
    blocking calls, or with awaits."""

    _pacer: Pacer
    _fallback_pacer: Pacer | None

    def _setup(
        self,
        *,
        key: Any,
        engine: Any,
        on_failure: Any,
        fleet_size: Any,
        timeout_ms: Any,
        retry_after_ms: Any,
        notice_registry: NoticeRegistry | None,
        **settings: Any,
    ) -> None:
        """Checks and keeps the fleet pacer's arguments; ``settings`` are
        the ``Pacer``'s (``rate_per_minute`` ... ``adaptive_ceiling_per_min``)."""
        if isinstance(key, str):
            key_bytes = key.encode("utf-8")
        elif isinstance(key, bytes):
            key_bytes = key
        else:
            raise TypeError(f"pacer: key must be a str or bytes, got {_check.describe(key)}")
        if not key_bytes:
            raise ValueError("pacer: key must not be empty")
        if not isinstance(engine, str) or engine not in _ENGINES:
            raise ValueError(f"pacer: engine must be one of {', '.join(_ENGINES)}, got {engine!r}")
        if not isinstance(on_failure, str) or on_failure not in _POLICIES:
            raise ValueError(f"pacer: on_failure must be one of {', '.join(_POLICIES)}, got {on_failure!r}")
        self._fleet_size = _check.whole("fleet_size", fleet_size, 1, _check.U32_MAX)
        self._retry_after_ms = _check.whole("retry_after_ms", retry_after_ms, 0, _check.U32_MAX)
        self._registry = _check_registry(notice_registry)
        # The configuration, checked and completed as a Pacer's (its mode
        # notice too). It answers locally when pacing is off.
        self._pacer = Pacer(**settings, notice_registry=self._registry)
        bound = self._pacer.wait_bound_ms
        if timeout_ms is None:
            timeout = min(bound, DEFAULT_TIMEOUT_MS) if bound > 0 else DEFAULT_TIMEOUT_MS
        else:
            timeout = _check.whole("timeout_ms", timeout_ms, 1, _check.U32_MAX)
            if bound > 0:
                timeout = min(timeout, bound)
        self._timeout_ms = timeout
        self._key: BucketKey = key
        self._engine_option: Engine = engine  # type: ignore[assignment]
        self._policy: FailurePolicy = on_failure  # type: ignore[assignment]
        config = self._pacer.config
        self._config_args = (
            str(config.rate_per_minute),
            str(config.burst),
            str(config.idle_timeout_ms),
            str(config.max_retries),
            config.release_policy,
        )
        # ADAPT floor ceiling (docs/redis.md) when adaptation is on, after the
        # configuration arguments (after BOOK's retries_left); the ceiling
        # as given, 0 for the rate.
        self._adapt_args: tuple[str, ...] = () if config.adaptive_floor_per_min == 0 else (
            "ADAPT", str(config.adaptive_floor_per_min), str(config.adaptive_ceiling_per_min))
        self._engine: str | None = None
        # A Redis Cluster: keyless commands go to every primary (_keyless).
        self._cluster = False
        self._script = script_text()
        self._sha: str | None = None
        self._fallback_pacer = None
        self._tally = _Tally()
        # The bucket's rate in force as the server last answered it
        # (observe, rate_in_force), for the metrics: no scrape asks Redis.
        self._rate_answered = config.rate_per_minute
        self._state_lock = threading.Lock()
        self._keyed_lock = threading.Lock()
        self._pending: dict[Any, _Pending] = {}
        self._down_until: float | None = None
        self._outage = False
        self._closed = False
        self._address = "redis"

    # ------------------------------------------------------------ properties

    @property
    def key(self) -> BucketKey:
        """The bucket's key."""
        return self._key

    @property
    def engine(self) -> str | None:
        """The engine in use (``module``, ``function``, ``script``), None
        until the server was asked (and again after a failure, with
        ``engine="auto"``)."""
        return self._engine

    @property
    def on_failure(self) -> FailurePolicy:
        return self._policy

    @property
    def fleet_size(self) -> int:
        return self._fleet_size

    @property
    def timeout_ms(self) -> int:
        """How long a call waits for Redis, ms."""
        return self._timeout_ms

    @property
    def retry_after_ms(self) -> int:
        return self._retry_after_ms

    @property
    def in_outage(self) -> bool:
        """Whether the last call to Redis failed (answers come from the policy)."""
        return self._outage

    @property
    def pending_keys(self) -> int:
        """How many keyed requests were refused and are not yet admitted or forgotten."""
        with self._keyed_lock:
            return len(self._pending)

    @property
    def fallback_pacer(self) -> Pacer | None:
        """The in-process pacer of the ``local`` policy, once an outage made it."""
        return self._fallback_pacer

    def counters(self) -> FleetCounters:
        """The answers this object got, counted in this process (never the
        bucket's, which ``info()`` reports): decisions (those of the failure
        policy among them, and ``fallbacks`` of them), waits, releases that
        reached the server or the local pacer, and outcomes reported to
        ``observe``. Reads only: no I/O."""
        return self._tally.read()

    # ------------------------------------------------------------ commands

    def _command(self, engine: str, op: str, args: tuple[Any, ...], carry: bool = False) -> _OpCommand:
        """The engine's command for ``op``: a ``_RepeatedCommand`` unless
        its arguments carry a ticket (release, redeem). With ``carry``, the
        script's is ``EVAL`` of the script itself, not ``EVALSHA`` of its
        SHA1 (``_exchange``'s retry)."""
        kind = _OpCommand if op in _TICKET_OPS else _RepeatedCommand
        if engine == "module":
            return kind((f"PACER.{op.upper()}", self._key, *args))
        if engine == "function":
            return kind(("FCALL", "pacer", 1, self._key, op, *args))
        if carry:
            return _OpCommand(("EVAL", self._script, 1, self._key, op, *args))
        return kind(("EVALSHA", self._sha, 1, self._key, op, *args))

    def _configured(self, *extra: str) -> tuple[str, ...]:
        """The configuration arguments of create, reserve and book: the
        five, then ``extra`` (book's retries_left), then ADAPT's three."""
        return (*self._config_args, *extra, *self._adapt_args)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("pacer: this fleet pacer is closed")

    def _auto(self) -> bool:
        return self._engine_option == "auto"

    def _forced_engine(self) -> str | None:
        return None if self._auto() else self._engine_option

    # ------------------------------------------------------------ errors and outages

    def _raise_surfaced(self, error: BaseException) -> NoReturn:
        """Raises what a call that raised ``error`` raises (``_surfaced``)."""
        surfaced = self._surfaced(error)
        if surfaced is error:
            raise error
        raise surfaced from error

    def _surfaced(self, error: BaseException) -> BaseException:
        """What a call that raised ``error`` raises: ``_Down`` for an outage
        (an engine still gone after the retry is one), after starting it;
        ``RedisPacerError`` for an error of the pacer; else the error itself."""
        kind = _failure_class(error)
        if kind in ("outage", "engine"):
            down = _Down(error)
            self._failed(down)
            return down
        self._answered()
        if kind == "pacer":
            return RedisPacerError(_reply_text(error) or f"unexpected reply ({error})")
        return error

    # ------------------------------------------------------------ the commands of an ask

    def _exchange(self, op: str, args: tuple[Any, ...]) -> Generator[tuple[Any, ...], Any, Any]:
        """The commands of one ask (``_ask``), as a generator that yields each command
        and is sent its reply (or thrown its error): the engine found (and
        the script loaded) if not known yet, then the op. A reply saying the
        engine is gone asks which engine there is again (``auto``), loads the
        script again and retries once; gone again, the error goes up (an
        outage). The script's retry is ``EVAL`` of the script: on a cluster
        the script was loaded on every primary the client knows, and a
        replica promoted a moment ago may not be among them yet (its
        ``EVALSHA`` would answer ``NOSCRIPT`` again). ``RedisPacer`` and
        ``AsyncRedisPacer`` run it on their connections (``_drive``,
        ``_adrive``)."""
        for retry in (False, True):
            if self._engine is None:
                self._engine = yield from self._detect()
            if self._engine == "script" and self._sha is None:
                self._sha = self._loaded((yield self._keyless("SCRIPT", "LOAD", self._script)))
            try:
                return (yield self._command(self._engine, op, args, carry=retry))
            except Exception as error:  # noqa: BLE001 - an engine gone is retried once, the rest go up
                if retry or _failure_class(error) != "engine":
                    raise
                if self._auto():
                    self._engine = None
                self._sha = None
        raise AssertionError("unreachable")  # pragma: no cover

    def _detect(self) -> Generator[tuple[Any, ...], Any, str]:
        """The engine ``auto`` finds: the module when the server lists it,
        else the function, else the script. On a cluster every primary is
        asked, and an engine is chosen only when every primary has it."""
        forced = self._forced_engine()
        if forced is not None:
            return forced
        if (yield from self._listed(_module_listed, "MODULE", "LIST")):
            return "module"
        if (yield from self._listed(_function_listed, "FUNCTION", "LIST", "LIBRARYNAME", "pacer")):
            return "function"
        return "script"

    def _keyless(self, *command: Any) -> tuple[Any, ...]:
        """A keyless command as it is sent: to the server, or, on a
        cluster, to every primary (``_OnPrimaries``)."""
        return _OnPrimaries(command) if self._cluster else command

    def _listed(self, listed: Callable[[Any], bool], *command: Any) -> Generator[tuple[Any, ...], Any, bool]:
        """Whether a listing command's reply names the engine (on a cluster:
        every primary's reply). A listing refused (managed services), by
        one primary or all, names nothing; an outage goes up."""
        try:
            reply = yield self._keyless(*command)
        except Exception as error:  # noqa: BLE001 - an outage goes up
            if _failure_class(error) == "pacer":
                return False
            raise
        if not self._cluster:
            return listed(reply)
        return bool(reply) and all(listed(each) for each in reply)

    def _loaded(self, reply: Any) -> str:
        """The script's SHA1 from ``SCRIPT LOAD``'s reply (on a cluster, from
        every primary's: the same text has the same digest)."""
        if self._cluster:
            digests = {_text(each) for each in reply}
            if len(digests) != 1:
                raise RedisPacerError(f"pacer: unexpected reply to SCRIPT LOAD from the primaries {reply!r}")
            return digests.pop()
        return _text(reply)

    def _may_ask(self) -> None:
        """Before each ask: a closed pacer raises; within ``retry_after_ms``
        of a failure, ``_Down`` (the policy answers without asking)."""
        self._check_open()
        if not self._asking():
            raise _Down()

    def _asking(self) -> bool:
        """Whether to ask Redis now: not within ``retry_after_ms`` of a failure."""
        down_until = self._down_until
        return down_until is None or _monotonic() >= down_until

    def _failed(self, failure: _Down) -> None:
        error = failure.args[0] if failure.args else failure
        with self._state_lock:
            self._down_until = _monotonic() + self._retry_after_ms / 1000
            if self._auto():
                self._engine = None  # asked again on the next reply
            if self._outage:
                return
            self._outage = True
        detail = _reply_text(error)
        if detail is None:
            detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        text = (f"pacer: Redis at {self._address} failed for the bucket {self._key!r} ({detail}); "
                f"answering by the {self._policy!r} failure policy, asking again every "
                f"{self._retry_after_ms} ms")
        self._notice(OutageNotice(True, self._address, self._key, self._policy, detail, text))

    def _answered(self) -> None:
        if not self._outage:
            return
        with self._state_lock:
            if not self._outage:
                return
            self._outage = False
            self._down_until = None
        text = f"pacer: Redis at {self._address} answers again for the bucket {self._key!r}"
        self._notice(OutageNotice(False, self._address, self._key, self._policy, "", text))

    @staticmethod
    def _notice(notice: OutageNotice) -> None:
        try:
            logger.warning("%s", notice.text, extra={"pacer_outage": notice})
        except Exception:  # noqa: BLE001 - a diagnostic must never fail a request
            pass

    # ------------------------------------------------------------ replies

    def _admitted(self, wait_ms: int, path: AdmitPath, regressed: bool, ticket: RedisTicket | None,
                  fallback: Fallback | None) -> RedisAdmitted:
        return RedisAdmitted(wait_ms, path, regressed, ticket, fallback)  # type: ignore[arg-type]

    @_shaped
    def _decision(self, reply: Any) -> RedisAdmitted | RedisRefused | RedisBooked:
        """An answer of reserve/book: admitted, refused or booked."""
        kind = _reply_kind(reply, ("admitted", "refused", "booked"))
        if kind == "admitted":
            return self._admitted(_whole(reply, 1), _path(reply), _flag(reply, 4), self._ticket(reply[2]), None)
        if kind == "refused":
            return RedisRefused(_whole(reply, 2), _whole(reply, 1), _flag(reply, 3))
        booking = RedisBooking(self._given_ticket(reply), _whole(reply, 3))
        return RedisBooked(booking, 0, _whole(reply, 1), _flag(reply, 4))

    @_shaped
    def _redemption(self, booking: RedisBooking, reply: Any) -> RedisAdmitted | RedisBooked:
        kind = _reply_kind(reply, ("admitted", "notyet"))
        if kind == "notyet":
            return RedisBooked(booking, 0, _whole(reply, 1), False)
        # The reply's ticket (item 3) is the admission's; the booking is spent.
        admission = self._admitted(_whole(reply, 1), _path(reply), _flag(reply, 4), self._given_ticket(reply), None)
        ticket: RedisTicket = booking._ticket  # type: ignore[assignment]
        ticket._spent = True
        return admission

    def _ticket(self, text: Any) -> RedisTicket | None:
        if text is None:
            return None
        if not isinstance(text, (bytes, str)) or not text:
            raise ValueError(text)
        return RedisTicket(self, self._key, _text(text))

    def _given_ticket(self, reply: Any) -> RedisTicket:
        """Item 3 of a reply that must carry a ticket."""
        ticket = self._ticket(reply[2])
        if ticket is None:
            raise ValueError(reply)
        return ticket

    @staticmethod
    @_shaped
    def _info(reply: Any) -> dict[str, int | str]:
        if not isinstance(reply, (list, tuple, dict)) or (not isinstance(reply, dict) and len(reply) % 2):
            raise ValueError(reply)
        info: dict[str, int | str] = {}
        for name, value in _fields(reply).items():
            info[name] = value if isinstance(value, int) else _text(value)
        return info

    # ------------------------------------------------------------ local answers

    def _disabled(self) -> RedisAdmitted:
        """Pacing is off: admitted at once, as the local pacer does, without Redis."""
        return self._admitted(0, AdmitPath.DISABLED, False, None, None)

    def _fallback(self) -> Pacer:
        """The ``local`` policy's in-process pacer, at ⌊rate/N⌋ and ⌊burst/N⌋
        (each at least 1), made on first use."""
        with self._state_lock:
            if self._fallback_pacer is None:
                config, n = self.config, self._fleet_size
                rate = config.rate_per_minute
                floor, ceiling = config.adaptive_floor_per_min, config.adaptive_ceiling_per_min
                # Adaptive between the bounds so divided (the ceiling 0 is
                # the rate), each at least 1.
                self._fallback_pacer = Pacer(
                    rate_per_minute=max(1, rate // n) if rate > 0 else 0,
                    burst=max(1, config.burst // n),
                    idle_timeout_ms=config.idle_timeout_ms,
                    max_retries=config.max_retries,
                    release_policy=config.release_policy,
                    adaptive_floor_per_min=max(1, floor // n) if floor > 0 else 0,
                    adaptive_ceiling_per_min=max(1, (ceiling or rate) // n) if floor > 0 else 0,
                    notice_registry=self._registry,
                )
            return self._fallback_pacer

    def _from_local(self, answer: Any, booking: RedisBooking | None = None) -> Any:
        """The local policy's answer as a fleet pacer's (fallback ``local``)."""
        if isinstance(answer, Admitted):
            ticket = None if answer.ticket is None else RedisTicket(self, self._key, None, answer.ticket)
            return self._admitted(answer.wait_ms, answer.path, answer.clock_regressed, ticket, "local")
        if isinstance(answer, Booked):
            local = answer.booking
            if booking is None:
                ticket = RedisTicket(self, self._key, None, local.ticket)
                booking = RedisBooking(ticket, local.slot_ms, local)
            return RedisBooked(booking, answer.required_wait_ms, answer.retry_after_s, answer.clock_regressed,
                               "local")
        return RedisRefused(answer.required_wait_ms, answer.retry_after_s, answer.clock_regressed, "local")

    def _closed_refusal(self) -> RedisRefused:
        return RedisRefused(0, hint_cap_s(self.wait_bound_ms), False, "closed")

    def _by_policy(self, retries_left: int | None) -> Any:
        """A reserve (``retries_left`` None) or reserve-or-book by the policy."""
        if self._policy == "open":
            return self._admitted(0, AdmitPath.DISABLED, False, None, "open")
        if self._policy == "closed":
            return self._closed_refusal()
        local = self._fallback()
        now = local.now_ms()
        answer = local.reserve(now) if retries_left is None else local.reserve_or_book(now, retries_left)
        return self._from_local(answer)

    def _redeem_by_policy(self, booking: RedisBooking) -> Any:
        """A booking in Redis presented while Redis fails: the policy decides
        as for a new request (the booked debit passes with time)."""
        if self._policy == "open":
            return self._admitted(0, AdmitPath.DISABLED, False, None, "open")
        if self._policy == "closed":
            refusal = self._closed_refusal()
            return RedisBooked(booking, 0, refusal.retry_after_s, False, "closed")
        local = self._fallback()
        answer = local.reserve(local.now_ms())
        if isinstance(answer, Admitted):
            return self._from_local(answer)
        return RedisBooked(booking, answer.required_wait_ms, answer.retry_after_s, answer.clock_regressed, "local")

    def _observes_locally(self) -> bool:
        """Adaptation off, or pacing disabled: observe asks nothing of Redis
        and answers the configured rate."""
        return self.config.adaptive_floor_per_min == 0 or not self.enabled

    def _observe_by_policy(self, outcome: Outcome | str) -> int:
        """An observation while Redis fails: the local pacer learns it and
        answers its rate in force; open and closed learn nothing."""
        if self._policy != "local":
            return self.config.rate_per_minute
        return self._fallback().observe(outcome)

    @staticmethod
    @_shaped
    def _rate_reply(reply: Any) -> int:
        return _whole([reply], 0)

    def _redeem_local(self, booking: RedisBooking) -> Any:
        local_booking = booking._local_booking
        assert local_booking is not None
        local = local_booking.ticket._pacer
        answer = local.redeem(local_booking, local.now_ms())
        return self._from_local(answer, booking)

    # ------------------------------------------------------------ checks

    def _own_ticket(self, ticket: Any) -> bool:
        if not isinstance(ticket, RedisTicket):
            raise TypeError(f"pacer: ticket must be a RedisTicket from this pacer, got {_check.describe(ticket)}")
        return ticket._pacer is self

    def _own_booking(self, booking: Any) -> RedisBooking:
        if not isinstance(booking, RedisBooking):
            raise TypeError(
                f"pacer: booking must be a RedisBooking from reserve_or_book(), got {_check.describe(booking)}"
            )
        if booking._ticket._pacer is not self:
            raise ValueError("pacer: this booking was made by another pacer")
        if booking.spent:
            raise ValueError("pacer: this booking was redeemed or released already")
        return booking

    def _settle(self, key: Any, entry: _Pending, outcome: Any) -> Any:
        """Files the outcome of one keyed attempt; a booking or a not-yet
        redemption is answered as a refusal."""
        with self._keyed_lock:
            if entry.record(self._pending, key, outcome):
                return outcome
        if isinstance(outcome, Booked):
            fallback = getattr(outcome, "fallback", None)
            return RedisRefused(outcome.required_wait_ms, outcome.retry_after_s, outcome.clock_regressed, fallback)
        return outcome

    def _entry(self, key: Any) -> _Pending:
        _check.key("key", key)
        with self._keyed_lock:
            return self._pending.get(key) or _Pending()

    # ------------------------------------------------------------ the calls, sans I/O
    #
    # Each call is a generator that yields what it asks of Redis, an
    # ``(op, args)`` pair, and is sent the reply (or thrown ``_Down`` when
    # Redis failed, or the error the ask raised); what it returns is the
    # call's answer. ``RedisPacer`` drives it with blocking asks (``_drive``),
    # ``AsyncRedisPacer`` with awaited ones (``_adrive``): the rule of every
    # call is written once, here.

    def _create_call(self) -> _Call:
        try:
            return _bit_reply((yield ("create", self._configured())))
        except _Down as down:
            raise _cause(down) from None

    def _decide_call(self, retries_left: int | None) -> _Call:
        """reserve (``retries_left`` None) or reserve_or_book (checked)."""
        self._check_open()
        if not self.enabled:
            return self._tally.decided(self._disabled())
        op, extra = ("reserve", ()) if retries_left is None else ("book", (str(retries_left),))
        try:
            reply = yield (op, self._configured(*extra))
        except _Down:
            return self._tally.decided(self._by_policy(retries_left))
        return self._tally.decided(self._decision(reply))

    def _redeem_call(self, booking: Any) -> _Call:
        booking = self._own_booking(booking)
        self._check_open()
        if booking._local_booking is not None:
            return self._tally.decided(self._redeem_local(booking), redemption=True)
        ticket: RedisTicket = booking._ticket  # type: ignore[assignment]
        try:
            reply = yield ("redeem", (ticket._text,))
        except _Down:
            return self._tally.decided(self._redeem_by_policy(booking), redemption=True)
        return self._tally.decided(self._redemption(booking, reply), redemption=True)

    def _release_call(self, ticket: Any) -> _Call:
        if not self._own_ticket(ticket):
            return False
        local = ticket._local
        if local is not None:
            # Under the lock, so that of two releases of one ticket only the
            # one that went through is counted.
            with self._state_lock:
                if local.spent:
                    return False
                return self._tally.released(bool(local._pacer.release(local)))
        with self._state_lock:
            if ticket._spent:
                return False
            ticket._spent = True
        try:
            refunded = yield ("release", (ticket._text,))
        except BaseException as error:
            ticket._spent = False  # not released: the ticket keeps its refund right
            if isinstance(error, _Down):
                return False
            raise
        return self._tally.released(_bit_reply(refunded))

    def _info_call(self) -> _Call:
        try:
            return self._info((yield ("info", ())))
        except _Down as down:
            raise _cause(down) from None

    def _observe_call(self, outcome: Outcome | str) -> _Call:
        _outcome_code(outcome)
        self._check_open()
        # What the upstream answered is counted whatever becomes of the report.
        self._tally.observed(Outcome(outcome))
        if self._observes_locally():
            return self._pacer.observe(outcome)
        try:
            reply = yield ("observe", (Outcome(outcome).value,))
        except _Down:
            return self._observe_by_policy(outcome)
        rate = self._rate_answered = self._rate_reply(reply)
        return rate

    def _rate_call(self) -> _Call:
        self._check_open()
        if self._observes_locally():
            return self._pacer.rate_in_force()
        rate = self._rate_answered = self._rate_reply((yield from self._info_call()).get("rate_in_force"))
        return rate

    def _last_rate_in_force(self) -> int:
        """The rate in force without asking: the configured rate when
        adaptation is off (or pacing disabled), else the bucket's as the
        server last answered it (``observe``, ``rate_in_force``), the
        configured rate until it has."""
        if self._observes_locally():
            return self.config.rate_per_minute
        return self._rate_answered

    def _next_attempt(self, key: Any) -> tuple[_Pending, Callable[[Any], Any], Any]:
        """A keyed attempt's entry and its call (the public one, so that an
        asyncio attempt cancelled keeps its booking): redeem the booking it
        holds, else reserve or book."""
        entry = self._entry(key)
        if entry.booking is not None:
            return entry, self.redeem, entry.booking  # type: ignore[attr-defined]
        return entry, self.reserve_or_book, entry.retries_left(self.config.max_retries)  # type: ignore[attr-defined]

    def _forgotten(self, key: Any) -> RedisTicket | None:
        """Forgets a keyed request: the ticket of its booking to release, if any."""
        _check.key("key", key)
        with self._keyed_lock:
            entry = self._pending.pop(key, None)
        if entry is None or entry.booking is None:
            return None
        return entry.booking._ticket  # type: ignore[return-value]

    def __repr__(self) -> str:
        c = self.config
        return (f"<pacer.{type(self).__name__} key={self._key!r} {_config_text(c)} "
                f"engine={self._engine or self._engine_option} on_failure={self._policy}>")


def _redis_py() -> Any:
    """redis-py, or an ImportError that says how to install it."""
    try:
        import redis
        import redis.asyncio
        import redis.asyncio.cluster
        import redis.cluster
    except ImportError as error:
        raise ImportError(
            "pacer: a fleet pacer needs redis-py: pip install 'connpacer[redis]' (or redis>=5)"
        ) from error
    return redis


def _own_client(module: Any, url: str | None, client: Any, kwargs: dict[str, Any]) -> Any:
    """The pacer's own client (``module`` is redis or redis.asyncio): made
    from ``url`` (in RESP2, which needs no HELLO on connecting, unless the
    URL names a protocol: the replies read the same in both, docs/redis.md),
    or with the settings of ``client`` (address, credentials, TLS, protocol)
    on a connection pool of the pacer's own; ``kwargs`` (``_client_kwargs``)
    replace the rest."""
    if url is not None:
        return module.Redis.from_url(url, **{"protocol": 2, **kwargs})
    if not isinstance(client, module.Redis):
        raise TypeError(f"pacer: client must be a {module.__name__}.Redis or a "
                        f"{module.__name__}.cluster.RedisCluster, got {_check.describe(client)}")
    pool = client.connection_pool
    return module.Redis(connection_pool=module.ConnectionPool(
        connection_class=pool.connection_class, **{**pool.connection_kwargs, **kwargs}))


#: The settings of a given cluster client that the pacer's own copies: the
#: credentials, TLS, the protocol and the replies' decoding (as ``client=``
#: does for a ``redis.Redis``), never its timeouts, retries or callbacks.
_CLUSTER_SETTINGS = frozenset((
    "username", "password", "credential_provider", "protocol", "client_name", "encoding", "encoding_errors",
    "decode_responses", "socket_keepalive", "socket_keepalive_options", "connection_class", "ssl", "ssl_keyfile",
    "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_path", "ssl_ca_data", "ssl_check_hostname",
    "ssl_password", "ssl_min_version", "ssl_ciphers", "ssl_include_verify_flags", "ssl_exclude_verify_flags",
    "ssl_validate_ocsp", "ssl_validate_ocsp_stapled", "ssl_ocsp_context", "ssl_ocsp_expected_cert",
))


def _startup_nodes(nodes: Any) -> list[tuple[str, int]]:
    """``startup_nodes`` checked: "host:port" strings or (host, port) pairs,
    at least one."""
    if isinstance(nodes, (str, bytes)) or not isinstance(nodes, (list, tuple)) or not nodes:
        raise TypeError("pacer: startup_nodes must be a non-empty list of 'host:port' strings or (host, port) "
                        f"pairs, got {_check.describe(nodes)}")
    seeds = []
    for node in nodes:
        if isinstance(node, str) and ":" in node:
            host, _, port = node.rpartition(":")
        elif isinstance(node, tuple) and len(node) == 2 and isinstance(node[0], str):
            host, port = node
        else:
            raise TypeError(f"pacer: a startup node must be 'host:port' or (host, port), got {node!r}")
        try:
            number = int(port)
        except (TypeError, ValueError):
            raise ValueError(f"pacer: a startup node's port must be a whole number, got {node!r}") from None
        if not host or not 0 < number < 65536:
            raise ValueError(f"pacer: not a startup node: {node!r}")
        seeds.append((host.strip("[]"), number))
    return seeds


def _cluster_source(cluster: Any, startup_nodes: Any,
                    client: Any) -> tuple[list[tuple[str, int]], dict[str, Any]] | None:
    """The seeds and settings of the pacer's own cluster client (``cluster``
    is redis.cluster or redis.asyncio.cluster): from ``startup_nodes``, or
    from a given ``RedisCluster`` (the nodes it knows, else its own seeds,
    and its settings, ``_CLUSTER_SETTINGS``); None when ``client`` is not a
    cluster client."""
    if startup_nodes is not None:
        return _startup_nodes(startup_nodes), {"protocol": 2}
    if not isinstance(client, cluster.RedisCluster):
        return None
    nodes = client.get_nodes() or list(getattr(client, "startup_nodes", None) or ())
    if isinstance(nodes, dict):
        nodes = list(nodes.values())
    seeds = [(node.host, int(node.port)) for node in nodes]
    given = getattr(client, "connection_kwargs", None)
    if given is None:  # the synchronous client keeps them in its nodes manager
        given = client.nodes_manager.connection_kwargs
    return seeds, {name: value for name, value in given.items() if name in _CLUSTER_SETTINGS}


def _own_cluster(cluster: Any, seeds: list[tuple[str, int]], settings: dict[str, Any],
                 kwargs: dict[str, Any]) -> Any:
    """The pacer's own ``RedisCluster`` (of ``cluster``, redis.cluster or
    redis.asyncio.cluster) on ``seeds``: the given settings, and
    ``kwargs`` (``_client_kwargs``: its timeouts, and no retries: redis-py
    follows MOVED and ASK, and a failure is answered by the policy)."""
    import inspect

    nodes = [cluster.ClusterNode(host, port) for host, port in seeds]
    given = {**settings, **kwargs}
    if not given.get("ssl"):
        given = {name: value for name, value in given.items() if not name.startswith("ssl_")}
    accepted = inspect.signature(cluster.RedisCluster.__init__).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        # redis.asyncio's names its settings (no connection_class: ssl=True
        # chooses TLS).
        given = {name: value for name, value in given.items() if name in accepted}
        return cluster.RedisCluster(startup_nodes=nodes, **given)
    # The synchronous one gives its nodes the connection class (``_bounded``,
    # TLS or not: ``ssl`` is then its choice) only through a connection
    # pool, which it makes (redis-py 8.1 too) for a cluster given by a URL:
    # the first seed, the others beside it.
    given.pop("ssl", None)
    host, port = seeds[0]
    url = f"redis://[{host}]:{port}" if ":" in host else f"redis://{host}:{port}"
    return cluster.RedisCluster(url=url, startup_nodes=nodes[1:], **given)


def _client_kwargs(timeout_s: float, *, asyncio_client: bool = False) -> dict[str, Any]:
    """What the pacer's own connections use: its timeout for connecting and
    for each reply, and no retries (a failure is answered by the policy),
    with the Retry of redis.asyncio for the asyncio client (given the
    synchronous one, redis-py 8 warns); and no CLIENT SETINFO on connecting,
    so that a new connection (after a failure, or beside a cancelled call
    still waiting for its reply) spends no round trip of the call's timeout
    before the call's own command (with ``url=``, see ``_own_client``)."""
    import inspect

    from redis.backoff import NoBackoff
    from redis.connection import AbstractConnection

    if asyncio_client:
        from redis.asyncio.retry import Retry
    else:
        from redis.retry import Retry  # type: ignore[assignment]

    kwargs = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s, "retry": Retry(NoBackoff(), 0)}
    settings = inspect.signature(AbstractConnection.__init__).parameters
    if "driver_info" in settings:  # redis-py 8: lib_name and lib_version are deprecated
        kwargs["driver_info"] = None
    elif "lib_name" in settings:
        kwargs.update(lib_name=None, lib_version=None)
    return kwargs


class _Deadline(threading.local):
    """The deadline of the call that the current thread is making through
    a ``RedisPacer`` (``_deadline_clock`` seconds), None between calls."""

    at: float | None = None


def _time_left(deadline: _Deadline) -> float | None:
    """Seconds left until the deadline of the thread's call (None outside a
    call); a deadline passed raises the socket timeout redis-py reports as
    its TimeoutError."""
    at = deadline.at
    if at is None:
        return None
    left = at - _deadline_clock()
    if left <= 0:
        raise socket.timeout("pacer: the call's timeout has passed")
    return left


class _DeadlineSocket:
    """A connected socket whose every send and receive ends by the deadline
    of the call that makes it, whatever timeout redis-py set on it (which
    bounds one read, not the call)."""

    __slots__ = ("_sock", "_deadline", "_timeout")

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self._sock = sock
        self._deadline = deadline
        self._timeout = sock.gettimeout()

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout
        self._sock.settimeout(timeout)

    def gettimeout(self) -> float | None:
        return self._timeout

    def _bounded(self) -> socket.socket:
        left = _time_left(self._deadline)
        if left is not None:
            self._sock.settimeout(left if self._timeout is None else min(self._timeout, left))
        return self._sock

    def recv(self, *args: Any) -> bytes:
        return self._bounded().recv(*args)

    def recv_into(self, *args: Any) -> int:
        return self._bounded().recv_into(*args)

    def send(self, *args: Any) -> int:
        return self._bounded().send(*args)

    def sendall(self, *args: Any) -> None:
        self._bounded().sendall(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _bound_to_calls(pool: Any, deadline: _Deadline, timeout_s: float) -> None:
    """Makes ``pool``'s connections connect and talk within the deadline of
    the call using them (``_bounded``)."""
    pool.connection_class = _bounded(pool.connection_class, deadline, timeout_s)


def _bounded(base: type, deadline: _Deadline, timeout_s: float) -> type:
    """``base``, a connection class (TCP, TLS or Unix socket, as the URL or
    the client chose), whose connections connect and talk within the
    deadline of the call using them: the connection timeout cut to the time
    left and the socket a ``_DeadlineSocket``."""

    def _connect(connection: Any) -> _DeadlineSocket:
        left = _time_left(deadline)
        connection.socket_connect_timeout = timeout_s if left is None else min(timeout_s, left)
        return _DeadlineSocket(super(bounded, connection)._connect(), deadline)

    bounded = type(base.__name__, (base,), {"_connect": _connect, "__module__": __name__})
    return bounded


#: What ``_HeldConnection.exchange`` returns when the held connection is
#: not free (another thread's call is on it, or the pacer closed it).
_BUSY = object()
#: The packed commands a held connection keeps at most (ops of one engine,
#: book's retries_left; an engine change or a script reload adds others).
_PACKED_KEPT = 64


def _pack(encode: Callable[[Any], bytes], command: tuple[Any, ...]) -> bytes:
    """``command`` in the protocol's request form: an array of bulk
    strings, each argument as ``encode`` (the pool's encoder) gives it."""
    parts = [b"*%d\r\n" % len(command)]
    for argument in command:
        data = encode(argument)
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Held:
    """What a fleet pacer's held connection keeps, sync or asyncio
    (``_HeldConnection``, ``_AsyncHeldConnection``): the client's pool, its
    encoder, the commands packed once, and the connection once taken."""

    __slots__ = ("_pool", "_encode", "_error_reply", "_get", "_connection", "_packed", "_closed")

    def __init__(self, redis_py: Any, pool: Any) -> None:
        import inspect

        self._pool = pool
        self._encode = pool.get_encoder().encode
        self._error_reply = redis_py.exceptions.ResponseError
        # redis-py before 5.1 wants a command name for a pooled connection.
        named = inspect.signature(pool.get_connection).parameters.get("command_name")
        needs_name = named is not None and named.default is inspect.Parameter.empty
        self._get = functools.partial(pool.get_connection, "PING") if needs_name else pool.get_connection
        self._connection: Any = None
        self._packed: dict[tuple[Any, ...], list[bytes]] = {}
        self._closed = False

    @classmethod
    def for_client(cls, module: Any, client: Any) -> Any:
        """A held connection of ``client`` (``module`` is redis or
        redis.asyncio) when it is a plain ``Redis`` (not a subclass, not a
        single-connection client) over a plain ``ConnectionPool`` without
        client-side caching, speaking RESP2 over TCP or a Unix socket (not
        TLS); None for anything else, whose commands all go through the
        client."""
        import redis

        pool = getattr(client, "connection_pool", None)
        if type(client) is not module.Redis or type(pool) is not module.ConnectionPool:
            return None
        if getattr(client, "connection", None) is not None or getattr(pool, "cache", None) is not None:
            return None
        if pool.connection_kwargs.get("protocol", 2) not in (None, 2, "2"):
            return None
        if issubclass(pool.connection_class, module.connection.SSLConnection):
            return None
        return cls(redis, pool)

    def _wire(self, command: _OpCommand) -> list[bytes]:
        """``command`` packed for ``send_packed_command``."""
        if type(command) is not _RepeatedCommand:
            return [_pack(self._encode, command)]
        packed = self._packed.get(command)
        if packed is None:
            if len(self._packed) >= _PACKED_KEPT:
                self._packed.clear()
            packed = self._packed[command] = [_pack(self._encode, command)]
        return packed


class _HeldConnection(_Held):
    """A connection that a ``RedisPacer`` over a plain client takes from
    the client's pool and keeps, for its engine's commands
    (``_OpCommand``): each is written packed (once, for a
    ``_RepeatedCommand``) and its reply read on it directly, without the
    client's work for each command (the pool's lock and check, packing, the
    reply callbacks, the connection given back).

    One thread at a time uses it (a lock tried without waiting): a call
    that finds it busy goes through the client. Between calls it is checked
    as the pool checks the connections it gives: readable (the server
    closed it, or sent what was not asked), it is connected again before
    the command. A send or a read that fails other than by an error reply
    (a lost connection, a timeout, an interruption) leaves its reply
    unread: the connection is disconnected and given back to the pool, and
    the next call takes another. In a child process the parent's
    connection is left alone."""

    __slots__ = ("_lock", "_pid", "_socket", "_poll")

    def __init__(self, redis_py: Any, pool: Any) -> None:
        super().__init__(redis_py, pool)
        self._lock = threading.Lock()
        self._pid = 0
        self._socket: Any = None
        self._poll: Any = None

    def exchange(self, command: _OpCommand) -> Any:
        """The server's reply to ``command``, sent on the held connection
        (an error reply raised as redis-py raises it); ``_BUSY`` when the
        connection is not free."""
        if not self._lock.acquire(False):
            return _BUSY
        try:
            if self._closed:
                return _BUSY
            connection = self._ready()
            try:
                connection.send_packed_command(self._wire(command))
                return connection.read_response()
            except self._error_reply:
                raise  # read whole: the connection is ready for the next command
            except BaseException:
                self._drop()
                raise
        finally:
            self._lock.release()

    def close(self) -> None:
        """Gives the connection back to the pool; the pacer sends no more on it."""
        with self._lock:
            self._closed = True
            connection, self._connection = self._connection, None
            if connection is not None and self._pid == os.getpid():
                self._pool.release(connection)

    def _ready(self) -> Any:
        """The held connection, taken from the pool when there is none (or
        it is the parent process's), connected again when it is readable."""
        connection = self._connection
        if connection is None or self._pid != os.getpid():
            self._connection = None
            connection = self._get()  # connected and checked by the pool
            self._connection, self._pid = connection, os.getpid()
            return connection
        sock = connection._sock
        if sock is None:
            return connection  # disconnected: sending connects it
        if sock is not self._socket:
            self._poll = select.poll()
            self._poll.register(sock.fileno(), select.POLLIN)
            self._socket = sock
        if self._poll.poll(0):
            connection.disconnect()
        return connection

    def _drop(self) -> None:
        """A call failed on the held connection: disconnected and given back."""
        connection, self._connection = self._connection, None
        self._socket = self._poll = None
        if connection is None:
            return
        connection.disconnect()
        if self._pid == os.getpid():
            self._pool.release(connection)


class _AsyncHeldConnection(_Held):
    """``_HeldConnection`` for an ``AsyncRedisPacer`` over a plain
    ``redis.asyncio.Redis``: one call at a time uses it (a call that finds
    it busy goes through the client); before each command the pool checks
    it as it checks the connections it gives (``ensure_connection``:
    connected, nothing unread). A send or a read that fails other than by
    an error reply, or that is cancelled (the call's timeout, the caller),
    leaves its reply unread: the connection is set aside at once, never
    used again, and disconnected and given back to the pool (a cancelled
    call's before the next call takes another, or at ``close``)."""

    __slots__ = ("_busy", "_failed")

    def __init__(self, redis_py: Any, pool: Any) -> None:
        super().__init__(redis_py, pool)
        self._busy = False
        self._failed: list[Any] = []

    @classmethod
    def for_client(cls, module: Any, client: Any) -> Any:
        """As ``_Held.for_client``, for a pool that checks a connection
        on its own (``ensure_connection``)."""
        held = super().for_client(module, client)
        return held if held is not None and hasattr(held._pool, "ensure_connection") else None

    async def exchange(self, command: _OpCommand) -> Any:
        """As ``_HeldConnection.exchange``."""
        if self._busy or self._closed:
            return _BUSY
        self._busy = True
        try:
            await self._give_back_failed()
            try:
                connection = self._connection
                if connection is None:
                    connection = self._connection = await self._get()  # connected and checked by the pool
                else:
                    await self._pool.ensure_connection(connection)
                await connection.send_packed_command(self._wire(command))
                return await connection.read_response()
            except self._error_reply:
                raise  # read whole: the connection is ready for the next command
            except BaseException as error:
                if self._connection is not None:
                    self._failed.append(self._connection)
                    self._connection = None
                if not isinstance(error, asyncio.CancelledError):
                    await self._give_back_failed()  # a cancelled call awaits nothing more
                raise
        finally:
            self._busy = False

    async def close(self) -> None:
        """Gives the connections back to the pool (one a call is still on
        stays with it: the pool disconnects it); the pacer sends no more on
        them."""
        self._closed = True
        if self._connection is not None and not self._busy:
            self._failed.append(self._connection)
            self._connection = None
        await self._give_back_failed()

    async def _give_back_failed(self) -> None:
        while self._failed:
            connection = self._failed.pop()
            try:
                await connection.disconnect()
            finally:
                await self._pool.release(connection)


def _cluster_address(seeds: list[tuple[str, int]]) -> str:
    """How notices name a cluster: by its seeds."""
    return "cluster " + ",".join(f"{host}:{port}" for host, port in seeds)


def _check_source(url: Any, client: Any, startup_nodes: Any = None) -> None:
    if sum(source is not None for source in (url, client, startup_nodes)) != 1:
        raise TypeError("pacer: pass exactly one of url=, client= and startup_nodes=")
    if url is not None and not isinstance(url, str):
        raise TypeError(f"pacer: url must be a str, got {_check.describe(url)}")


class RedisPacer(_FleetCore):
    """A fleet pacer over ``redis.Redis`` (docs/fleet-clients.md): the
    ``Pacer`` interface on one bucket in Redis, shared by every process of
    the fleet that uses the same key and configuration.

    ``url=`` makes the pacer's own client; ``client=`` takes the settings
    of an existing ``redis.Redis`` (address, credentials, TLS, protocol) for
    a connection pool of the pacer's own, with the pacer's timeout and no
    retries. Thread-safe.

    On a Redis Cluster: ``startup_nodes=["host:port", ...]`` (or (host,
    port) pairs) makes the pacer's own ``redis.cluster.RedisCluster``, and
    ``client=`` takes a ``RedisCluster``'s nodes and settings likewise.
    redis-py routes the key's commands to the primary that owns its slot
    and follows ``MOVED`` and ``ASK``; ``MODULE LIST``, ``FUNCTION LIST``
    and ``SCRIPT LOAD`` go to every primary, and ``auto`` picks an engine
    only when every primary has it. The cluster client is made (and learns
    the cluster's slots) on the first call, within its deadline.
    """

    def __init__(
        self,
        *,
        key: BucketKey,
        url: str | None = None,
        client: redis.Redis | redis.cluster.RedisCluster | None = None,
        startup_nodes: Sequence[str | tuple[str, int]] | None = None,
        rate_per_minute: int = DEFAULT_RATE_PER_MINUTE,
        burst: int = DEFAULT_BURST,
        idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
        max_retries: int | None = None,
        release_policy: ReleasePolicy = "refund",
        adaptive_floor_per_min: int = 0,
        adaptive_ceiling_per_min: int = 0,
        engine: Engine = "auto",
        on_failure: FailurePolicy = "local",
        fleet_size: int = 1,
        timeout_ms: int | None = None,
        retry_after_ms: int = DEFAULT_RETRY_AFTER_MS,
        notice_registry: NoticeRegistry | None = None,
    ) -> None:
        redis_py = _redis_py()
        _check_source(url, client, startup_nodes)
        self._setup(key=key, rate_per_minute=rate_per_minute, burst=burst, idle_timeout_ms=idle_timeout_ms,
                    max_retries=max_retries, release_policy=release_policy,
                    adaptive_floor_per_min=adaptive_floor_per_min,
                    adaptive_ceiling_per_min=adaptive_ceiling_per_min, engine=engine,
                    on_failure=on_failure, fleet_size=fleet_size, timeout_ms=timeout_ms,
                    retry_after_ms=retry_after_ms, notice_registry=notice_registry)
        # One deadline a call (connecting, finding the engine, loading the
        # script, the retry, the reply), not a timeout a read.
        self._deadline = _Deadline()
        kwargs = _client_kwargs(self._timeout_ms / 1000)
        source = _cluster_source(redis_py.cluster, startup_nodes, client)
        self._client: Any = None
        self._make_cluster: Callable[[], Any] | None = None
        # The engine's commands on a plain client go on a connection the
        # pacer holds (``_HeldConnection``).
        self._held: _HeldConnection | None = None
        if source is not None:
            seeds, settings = source
            # A RedisCluster connects when it is made: the first call makes it.
            connection = redis_py.connection
            base = connection.SSLConnection if settings.get("ssl") else settings.get(
                "connection_class", connection.Connection)
            settings = {**settings, "connection_class": _bounded(base, self._deadline, self._timeout_ms / 1000)}
            self._make_cluster = functools.partial(_own_cluster, redis_py.cluster, seeds, settings, kwargs)
            self._cluster = True
            self._address = _cluster_address(seeds)
            self._client_lock = threading.Lock()
        else:
            self._client = _own_client(redis_py, url, client, kwargs)
            self._address = _address(self._client)
            _bound_to_calls(self._client.connection_pool, self._deadline, self._timeout_ms / 1000)
            self._held = _HeldConnection.for_client(redis_py, self._client)

    # ------------------------------------------------------------ I/O

    def _ask(self, ask: tuple[str, tuple[Any, ...]]) -> Any:
        """The server's reply to ``ask``, an ``(op, args)`` pair: the call's
        exchange (``_FleetCore._exchange``) run on the client, within the
        call's deadline; raises ``_Down`` on a failure (after starting the
        outage), ``RedisPacerError`` for a pacer error."""
        self._may_ask()
        self._deadline.at = _deadline_clock() + self._timeout_ms / 1000
        try:
            reply = _drive(self._exchange(*ask), self._perform)
        except Exception as error:  # noqa: BLE001 - classified
            self._raise_surfaced(error)
        finally:
            self._deadline.at = None
        self._answered()
        return reply

    def _perform(self, command: tuple[Any, ...]) -> Any:
        """One command of an exchange: to the server (the engine's commands
        on the held connection when it is free), or, on a cluster, to the
        primary of the key's slot (redis-py finds it) or, for
        ``_OnPrimaries``, to every primary."""
        held = self._held
        if held is not None and isinstance(command, _OpCommand):
            reply = held.exchange(command)
            if reply is not _BUSY:
                return reply
        client = self._client
        if client is None:
            client = self._made_cluster()
        if isinstance(command, _OnPrimaries):
            return [client.execute_command(*command, target_nodes=node) for node in client.get_primaries()]
        return client.execute_command(*command)

    def _made_cluster(self) -> Any:
        """The pacer's own RedisCluster, made (connecting to a seed and
        reading the slots) on the first call that needs it."""
        assert self._make_cluster is not None
        with self._client_lock:
            if self._client is None:
                self._client = self._make_cluster()
            return self._client

    # ------------------------------------------------------------ decisions

    def create(self) -> bool:
        """Creates the bucket if the key is missing (checks the configuration
        at start-up): True when it created it, False when the same bucket
        was there. A failure raises ``redis.exceptions.RedisError``."""
        return _drive(self._create_call(), self._ask)  # type: ignore[no-any-return]

    def reserve(self) -> RedisAdmitted | RedisRefused:
        """Decides on the server's clock without waiting (``Pacer.reserve``)."""
        return _drive(self._decide_call(None), self._ask)  # type: ignore[no-any-return]

    def reserve_or_book(self, retries_left: int) -> RedisAdmitted | RedisBooked | RedisRefused:
        """``reserve``, except that a refusal within the horizon of
        ``retries_left`` retries books a place in line (``Pacer.reserve_or_book``)."""
        call = self._decide_call(_check.u32("retries_left", retries_left))
        return _drive(call, self._ask)  # type: ignore[no-any-return]

    def redeem(self, booking: RedisBooking) -> RedisAdmitted | RedisBooked:
        """Presents a booking on the request's retry (``Pacer.redeem``): admitted
        when its slot is within the wait bound, else booked again with the
        next hint. A booking the local policy made is redeemed there."""
        return _drive(self._redeem_call(booking), self._ask)  # type: ignore[no-any-return]

    def release(self, ticket: RedisTicket) -> bool:
        """Gives an admission's (or a booking's) debit back: to the server,
        or to the local pacer that issued it. True when refunded; False when
        released already through this pacer, from another pacer, refused
        by the ``strict`` policy, or when Redis fails (the debit then
        passes with time). A ticket the server says is spent raises
        ``RedisPacerError``."""
        return _drive(self._release_call(ticket), self._ask)  # type: ignore[no-any-return]

    def info(self) -> dict[str, int | str]:
        """The bucket as the server reports it (``PACER.INFO``: the
        configuration, mode, level, counters such as ``admitted``,
        ``released``, and ``now_ms``; the rate in force, ``rate_in_force``,
        and the adaptive state). A failure raises
        ``redis.exceptions.RedisError``; a missing bucket ``RedisPacerError``."""
        return _drive(self._info_call(), self._ask)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ adaptive pacing

    def observe(self, outcome: Outcome | str) -> int:
        """Reports what the upstream answered to a new connection to the
        fleet's bucket (adaptive pacing, SPEC §14; ``Pacer.observe``):
        ``PACER.OBSERVE key opened|throttled`` (the function's and the
        script's ``observe``) on the server's clock, so a throttle one proxy
        sees slows the whole fleet. Returns the bucket's rate in force after
        it. The bucket must exist (the first reserve or ``create`` makes
        it): a missing key raises ``RedisPacerError``. With adaptation off
        (or pacing disabled) nothing is sent and it returns
        ``rate_per_minute``. While Redis fails, ``local`` reports it to the
        fallback pacer and returns that pacer's rate in force; ``open`` and
        ``closed`` learn nothing and return ``rate_per_minute``. A bad
        outcome raises TypeError/ValueError and sends nothing."""
        return _drive(self._observe_call(outcome), self._ask)  # type: ignore[no-any-return]

    def rate_in_force(self) -> int:
        """The bucket's rate in force (``PACER.INFO``'s ``rate_in_force``),
        per minute; ``rate_per_minute`` without asking when adaptation is
        off. As ``info``: a failure raises ``redis.exceptions.RedisError``,
        a missing bucket ``RedisPacerError``."""
        return _drive(self._rate_call(), self._ask)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ keyed bookings

    def _attempt(self, key: Any) -> RedisAdmitted | RedisRefused:
        entry, call, argument = self._next_attempt(key)
        return self._settle(key, entry, call(argument))  # type: ignore[no-any-return]

    def forget(self, key: Any) -> bool:
        """The keyed request ended without being admitted: releases its
        booking (to Redis, or to the local pacer that made it) and forgets
        the key. True when a booking was refunded."""
        ticket = self._forgotten(key)
        return False if ticket is None else self.release(ticket)

    # ------------------------------------------------------------ waiting

    def admit(self, timeout: float | None = None, *, key: Any = None) -> RedisAdmitted | RedisRefused:
        """Reserves (with ``key``: redeems or books, as ``Pacer.admit``) and
        sleeps the granted wait in this thread. A wait longer than
        ``timeout`` seconds is released at once and raises TimeoutError;
        interrupted while sleeping, the admission is released and the
        exception re-raised."""
        limit = None if timeout is None else _check.seconds("timeout", timeout)
        decision = self.reserve() if key is None else self._attempt(key)
        if isinstance(decision, Refused) or decision.wait_ms == 0:
            return decision
        return _sleep_granted(decision, limit, _blocking_sleep)  # type: ignore[no-any-return]

    #: ``admit``, under the name the local ``Pacer`` gives its blocking call.
    admit_blocking = admit

    # ------------------------------------------------------------ closing

    def close(self) -> None:
        """Closes the pacer's connections. Keys still pending keep their
        bookings in Redis until their slots pass: forget them first."""
        if self._closed:
            return
        self._closed = True
        if self._cluster:
            if self._client is not None:
                self._client.close()  # the nodes' pools are the pacer's own
            return
        if self._held is not None:
            self._held.close()
        self._client.close()
        self._client.connection_pool.disconnect()  # the pool is the pacer's own

    def __enter__(self) -> RedisPacer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRedisPacer(_FleetCore):
    """A fleet pacer over ``redis.asyncio.Redis``: ``RedisPacer``'s
    interface with coroutines. Each call to Redis is bounded by the timeout
    as a whole (``asyncio.wait_for``). Answers that hold a ticket are
    ``AsyncRedisAdmitted`` (``await outcome.release()``)."""

    def __init__(
        self,
        *,
        key: BucketKey,
        url: str | None = None,
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | None = None,
        startup_nodes: Sequence[str | tuple[str, int]] | None = None,
        rate_per_minute: int = DEFAULT_RATE_PER_MINUTE,
        burst: int = DEFAULT_BURST,
        idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS,
        max_retries: int | None = None,
        release_policy: ReleasePolicy = "refund",
        adaptive_floor_per_min: int = 0,
        adaptive_ceiling_per_min: int = 0,
        engine: Engine = "auto",
        on_failure: FailurePolicy = "local",
        fleet_size: int = 1,
        timeout_ms: int | None = None,
        retry_after_ms: int = DEFAULT_RETRY_AFTER_MS,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
        notice_registry: NoticeRegistry | None = None,
    ) -> None:
        aioredis = _redis_py().asyncio
        _check_source(url, client, startup_nodes)
        self._setup(key=key, rate_per_minute=rate_per_minute, burst=burst, idle_timeout_ms=idle_timeout_ms,
                    max_retries=max_retries, release_policy=release_policy,
                    adaptive_floor_per_min=adaptive_floor_per_min,
                    adaptive_ceiling_per_min=adaptive_ceiling_per_min, engine=engine,
                    on_failure=on_failure, fleet_size=fleet_size, timeout_ms=timeout_ms,
                    retry_after_ms=retry_after_ms, notice_registry=notice_registry)
        self._sleep = _check.callable_or("sleep", sleep, asyncio.sleep)
        self._settling: set[asyncio.Future[None]] = set()
        self._held: _AsyncHeldConnection | None = None
        kwargs = _client_kwargs(self._timeout_ms / 1000, asyncio_client=True)
        source = _cluster_source(aioredis.cluster, startup_nodes, client)
        if source is not None:
            seeds, settings = source
            # Made now; it connects on the first call (``initialize``).
            self._client = _own_cluster(aioredis.cluster, seeds, settings, kwargs)
            self._cluster = True
            self._address = _cluster_address(seeds)
        else:
            self._client = _own_client(aioredis, url, client, kwargs)
            self._address = _address(self._client)
            self._held = _AsyncHeldConnection.for_client(aioredis, self._client)

    def _admitted(self, wait_ms: int, path: AdmitPath, regressed: bool, ticket: RedisTicket | None,
                  fallback: Fallback | None) -> RedisAdmitted:
        return AsyncRedisAdmitted(wait_ms, path, regressed, ticket, fallback)  # type: ignore[arg-type]

    # ------------------------------------------------------------ I/O

    async def _ask(self, ask: tuple[str, tuple[Any, ...]]) -> Any:
        """As ``RedisPacer._ask``; the call as a whole is bounded by the timeout."""
        self._may_ask()
        try:
            exchange = _adrive(self._exchange(*ask), self._perform)
            reply = await asyncio.wait_for(exchange, self._timeout_ms / 1000)
        except Exception as error:  # noqa: BLE001 - classified
            self._raise_surfaced(error)
        self._answered()
        return reply

    async def _perform(self, command: tuple[Any, ...]) -> Any:
        """As ``RedisPacer._perform``."""
        held = self._held
        if held is not None and isinstance(command, _OpCommand):
            reply = await held.exchange(command)
            if reply is not _BUSY:
                return reply
        client = self._client
        if isinstance(command, _OnPrimaries):
            await client.initialize()  # the primaries known (at once when they are)
            return [await client.execute_command(*command, target_nodes=node) for node in client.get_primaries()]
        return await client.execute_command(*command)

    # ------------------------------------------------------------ decisions

    async def create(self) -> bool:
        """As ``RedisPacer.create``."""
        return await _adrive(self._create_call(), self._ask)  # type: ignore[no-any-return]

    async def reserve(self) -> RedisAdmitted | RedisRefused:
        """As ``RedisPacer.reserve``. Cancelled before the answer, it gives
        back what the server issued once the reply arrives (``_kept``)."""
        return await self._kept(self._decide_call(None))  # type: ignore[no-any-return]

    async def reserve_or_book(self, retries_left: int) -> RedisAdmitted | RedisBooked | RedisRefused:
        """As ``RedisPacer.reserve_or_book``; cancelled, as ``reserve``."""
        call = self._decide_call(_check.u32("retries_left", retries_left))
        return await self._kept(call)  # type: ignore[no-any-return]

    async def redeem(self, booking: RedisBooking) -> RedisAdmitted | RedisBooked:
        """As ``RedisPacer.redeem``; cancelled, as ``reserve`` (the caller
        keeps its booking unless the redemption admitted)."""
        return await self._kept(self._redeem_call(booking), booking)  # type: ignore[no-any-return]

    async def _kept(self, call: _Call, presented: RedisBooking | None = None) -> Any:
        """Runs a call that can issue a ticket or a booking so that a caller
        cancelled meanwhile leaks nothing: its checks and local answers at
        once, then its asks (shielded) and, when its answer arrives, what it
        issued is released (``presented``, the booking the caller redeems,
        stays the caller's). ``close`` waits for those releases."""
        started = _exchanged(call, None, None)
        if started[0]:
            return started[1]
        task = asyncio.ensure_future(_adrive(call, self._ask, started))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            settling = asyncio.ensure_future(self._give_back_issued(task, presented))
            self._settling.add(settling)
            settling.add_done_callback(self._settling.discard)
            raise

    async def _give_back_issued(self, call: asyncio.Future[Any], presented: RedisBooking | None) -> None:
        try:
            outcome = await call
        except Exception:  # noqa: BLE001 - the call failed: it issued nothing to its caller
            return
        if isinstance(outcome, Booked) and outcome.booking is not presented:
            ticket = outcome.booking._ticket
        else:
            ticket = getattr(outcome, "ticket", None)
        if ticket is None:
            return
        try:
            await self.release(ticket)
        except Exception as error:  # noqa: BLE001 - nobody to raise to: logged
            logger.warning("pacer: giving back what a cancelled call was issued failed: %s", error)

    async def release(self, ticket: RedisTicket) -> bool:
        """As ``RedisPacer.release``."""
        return await _adrive(self._release_call(ticket), self._ask)  # type: ignore[no-any-return]

    async def info(self) -> dict[str, int | str]:
        """As ``RedisPacer.info``."""
        return await _adrive(self._info_call(), self._ask)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ adaptive pacing

    async def observe(self, outcome: Outcome | str) -> int:
        """As ``RedisPacer.observe``."""
        return await _adrive(self._observe_call(outcome), self._ask)  # type: ignore[no-any-return]

    async def rate_in_force(self) -> int:
        """As ``RedisPacer.rate_in_force``."""
        return await _adrive(self._rate_call(), self._ask)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ keyed bookings

    async def _attempt(self, key: Any) -> RedisAdmitted | RedisRefused:
        entry, call, argument = self._next_attempt(key)
        return self._settle(key, entry, await call(argument))  # type: ignore[no-any-return]

    async def forget(self, key: Any) -> bool:
        """As ``RedisPacer.forget``."""
        ticket = self._forgotten(key)
        return False if ticket is None else await self.release(ticket)

    # ------------------------------------------------------------ waiting

    async def admit(self, *, key: Any = None) -> RedisAdmitted | RedisRefused:
        """Reserves (with ``key``: redeems or books, as ``Pacer.admit``) and
        sleeps the granted wait. Cancelled while waiting (``task.cancel()``,
        ``asyncio.wait_for``), it releases the ticket and re-raises."""
        decision = await self.reserve() if key is None else await self._attempt(key)
        if isinstance(decision, Refused) or decision.wait_ms == 0:
            return decision
        return await _await_granted(decision, self._sleep)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ closing

    async def close(self) -> None:
        """Gives back what cancelled calls were issued (``_kept``), then
        closes the pacer's connections (see ``RedisPacer.close``)."""
        if self._closed:
            return
        while self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        self._closed = True
        if self._held is not None:
            await self._held.close()
        closer = getattr(self._client, "aclose", None) or self._client.close
        await closer()  # a cluster's: every node's connections, the pacer's own
        if not self._cluster:
            await self._client.connection_pool.disconnect()  # the pool is the pacer's own

    async def __aenter__(self) -> AsyncRedisPacer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _exchanged(steps: Generator[Any, Any, Any], answer: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Gives a generator of the core (a call, ``_FleetCore._exchange``) the
    last reply or error: (False, what it asks next) or (True, its answer)."""
    try:
        return False, (steps.send(answer) if error is None else steps.throw(error))
    except StopIteration as done:
        return True, done.value


def _drive(steps: Generator[Any, Any, Any], perform: Callable[[Any], Any]) -> Any:
    """Runs a generator of the core with blocking I/O: each thing it asks is
    ``perform``'s, and what ``perform`` returns or raises goes back to it."""
    done, value = _exchanged(steps, None, None)
    while not done:
        try:
            answer, error = perform(value), None
        except BaseException as failure:  # noqa: BLE001 - given to the generator
            answer, error = None, failure
        done, value = _exchanged(steps, answer, error)
    return value


async def _adrive(steps: Generator[Any, Any, Any], perform: Callable[[Any], Awaitable[Any]],
                  started: tuple[bool, Any] | None = None) -> Any:
    """``_drive`` with awaited I/O; ``started``: the generator's first step,
    taken already."""
    done, value = _exchanged(steps, None, None) if started is None else started
    while not done:
        try:
            answer, error = await perform(value), None
        except BaseException as failure:  # noqa: BLE001 - given to the generator
            answer, error = None, failure
        done, value = _exchanged(steps, answer, error)
    return value


def _cause(down: _Down) -> BaseException:
    """The failure under ``down``, for calls no policy answers (create,
    info); within ``retry_after_ms`` of a failure, a ConnectionError."""
    import redis.exceptions as rex

    if down.args and isinstance(down.args[0], BaseException):
        return down.args[0]
    return rex.ConnectionError("pacer: Redis failed less than retry_after_ms ago; not asking yet")


__all__ = [
    "AsyncRedisAdmitted",
    "AsyncRedisPacer",
    "FleetCounters",
    "OutageNotice",
    "RedisAdmitted",
    "RedisBooked",
    "RedisBooking",
    "RedisPacer",
    "RedisPacerError",
    "RedisRefused",
    "RedisTicket",
]
