"""pacer: admission pacing for new upstream connections.

The decision is the Rust core's, called through its C ABI (libpacer, linked
into a compiled cffi module); the clock, the waiting (asyncio or threads),
cancellation and notices (the ``pacer`` logger) are this package's.

    pacer = Pacer.from_env()                    # PACER_RATE_PER_MIN, PACER_IDLE_TIMEOUT_MS, ...
    outcome = await pacer.admit()               # sleeps; cancellation gives the slot back
    if isinstance(outcome, Refused):
        status, headers, body = outcome.response()
    ...                                         # open the connection, or outcome.release()

With bookings (SPEC §11, opt-in), a keyed request lines up across its
client's retries instead of competing with fresh arrivals:

    outcome = await pacer.admit(key=request_id)  # refused: booked, answer 429 as usual
    ...                                          # pacer.forget(request_id) if it ends unadmitted

With adaptive pacing (SPEC §14, opt-in), the upstream's own answers move the
rate in force between a floor and a ceiling:

    pacer = Pacer(adaptive_floor_per_min=10)    # 60/min, down to 10/min when throttled
    pacer.observe("throttled")                  # the upstream answered its rate limit (429)
    pacer.observe("opened")                     # the connection opened

A shared pacer keeps its bucket in a shared-memory file, so every process on
the machine that opens the same name paces against one bucket:

    with SharedPacer.open("myproxy-openai") as shared:   # /dev/shm/myproxy-openai
        outcome = await shared.admit()                   # no clock anywhere: shared_clock_ms()

A fleet pacer keeps its bucket in Redis, so every proxy of a fleet, on any
machine, paces against one bucket on the server's clock (``connpacer[redis]``):

    pacer = AsyncRedisPacer(url="redis://redis:6379/0", key="pacer:openai", fleet_size=4)
    outcome = await pacer.admit()               # outcome.fallback: None, or the failure policy
"""

import sys as _sys

# Before anything else, and in syntax any Python 3 reads: the package's
# modules use 3.10 features, so an older Python would fail somewhere inside
# them. (The wheels are cp310-abi3 and requires-python says >=3.10, so pip
# does not install them there; this covers a copied or PYTHONPATH install.)
if _sys.version_info < (3, 10):
    raise ImportError(
        "pacer: connpacer needs Python 3.10 or later, and this is Python %d.%d; "
        "install it with a Python 3.10+ interpreter ('python3.10 -m pip install connpacer')"
        % (_sys.version_info[0], _sys.version_info[1])
    )

from ._abi import check_abi
from ._native import ffi as _ffi
from ._native import lib as _lib
from ._pacer import (
    DEFAULT_BURST,
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MESSAGE_PREFIX,
    DEFAULT_RATE_PER_MINUTE,
    UNITS_PER_TOKEN,
    WAIT_BOUNDS_MS,
    AdmitPath,
    Admitted,
    Booked,
    Booking,
    BookingDecision,
    Counters,
    Decision,
    Key,
    Mode,
    Outcome,
    Pacer,
    PacerConfig,
    PacerState,
    RefusalResponse,
    Redemption,
    Refused,
    ReleasePolicy,
    Ticket,
    refusal_response,
)
from . import _redis
from ._redis import (
    AsyncRedisAdmitted,
    AsyncRedisPacer,
    FleetCounters,
    OutageNotice,
    RedisAdmitted,
    RedisBooked,
    RedisBooking,
    RedisPacer,
    RedisPacerError,
    RedisRefused,
    RedisTicket,
)
from ._shared import SharedPacer, SharedPacerError, shared_clock_ms, status_name
from ._settings import (
    ENV_NAMES,
    Budget,
    Notice,
    NoticeKind,
    NoticeRegistry,
    PacerError,
    can_refuse,
    default_notice_registry,
    hint_cap_s,
    ladder_ceiling,
    retry_after_s,
    wait_bound_ms,
)

__version__ = "0.1.0"

#: The ABI version of include/pacer.h this package was compiled with.
ABI_VERSION: int = int(_lib.PACER_ABI_VERSION)


def library_version() -> str:
    """The linked pacer library's version, e.g. "0.1.0"."""
    return str(_ffi.string(_lib.pacer_version()).decode("ascii"))


__all__ = [
    "ABI_VERSION",
    "DEFAULT_BURST",
    "DEFAULT_IDLE_TIMEOUT_MS",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MESSAGE_PREFIX",
    "DEFAULT_RATE_PER_MINUTE",
    "ENV_NAMES",
    "UNITS_PER_TOKEN",
    "WAIT_BOUNDS_MS",
    "AdmitPath",
    "Admitted",
    "Booked",
    "Booking",
    "BookingDecision",
    "Budget",
    "Counters",
    "Decision",
    "Key",
    "Mode",
    "Notice",
    "NoticeKind",
    "NoticeRegistry",
    "Outcome",
    "Pacer",
    "PacerConfig",
    "PacerError",
    "PacerState",
    "RefusalResponse",
    "Redemption",
    "Refused",
    "ReleasePolicy",
    "SharedPacer",
    "SharedPacerError",
    "Ticket",
    "can_refuse",
    "check_abi",
    "default_notice_registry",
    "hint_cap_s",
    "ladder_ceiling",
    "library_version",
    "refusal_response",
    "retry_after_s",
    "shared_clock_ms",
    "status_name",
    "wait_bound_ms",
]
# The fleet pacers' names: those _redis exports.
__all__ += _redis.__all__
