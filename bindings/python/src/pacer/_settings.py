"""Settings text to a budget (SPEC §2), its notices, and the SPEC §3
formulas. Every number comes from the C library; this module only converts."""

from __future__ import annotations

import enum
import logging
import os
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import _check
from ._native import aligned_struct, ffi, lib

logger = logging.getLogger("pacer")

#: The environment variables ``Budget.from_env`` reads, by budget field.
ENV_NAMES: Mapping[str, str] = types.MappingProxyType({
    "rate_per_minute": "PACER_RATE_PER_MIN",
    "idle_timeout_ms": "PACER_IDLE_TIMEOUT_MS",
    "total_timeout_ms": "PACER_TOTAL_TIMEOUT_MS",
    "max_retries": "PACER_MAX_RETRIES",
})


class PacerError(RuntimeError):
    """A C call failed in a way the arguments cannot explain (a library fault)."""

    def __init__(self, function: str, status: int) -> None:
        self.status = status
        message = ffi.string(lib.pacer_status_str(status)).decode("utf-8", "replace")
        super().__init__(f"pacer: {function} failed with status {status} ({message})")


def _ok(function: str, status: int) -> None:
    if status != lib.PACER_STATUS_OK:
        raise PacerError(function, status)


class NoticeKind(enum.IntEnum):
    """What a notice reports; the numbers are the C ABI's. ``name.lower()`` is
    the kind's stable name (``rate_malformed``, …, ``norefuse``)."""

    RATE_MALFORMED = lib.PACER_NOTICE_KIND_RATE_MALFORMED
    RATE_CLAMPED = lib.PACER_NOTICE_KIND_RATE_CLAMPED
    IDLE_MALFORMED = lib.PACER_NOTICE_KIND_IDLE_MALFORMED
    IDLE_CLAMPED = lib.PACER_NOTICE_KIND_IDLE_CLAMPED
    TOTAL_MALFORMED = lib.PACER_NOTICE_KIND_TOTAL_MALFORMED
    TOTAL_CLAMPED = lib.PACER_NOTICE_KIND_TOTAL_CLAMPED
    RETRIES_MALFORMED = lib.PACER_NOTICE_KIND_RETRIES_MALFORMED
    RETRIES_CLAMPED = lib.PACER_NOTICE_KIND_RETRIES_CLAMPED
    IDLE_LOWERED = lib.PACER_NOTICE_KIND_IDLE_LOWERED
    TOTAL_RAISED = lib.PACER_NOTICE_KIND_TOTAL_RAISED
    PACING_DISABLED = lib.PACER_NOTICE_KIND_PACING_DISABLED
    NOREFUSE = lib.PACER_NOTICE_KIND_NO_REFUSE


@dataclass(frozen=True, slots=True)
class Notice:
    """A setting that was ignored or clamped, or a budget that switched
    pacing off or cannot refuse. ``raw`` is the offending setting text as the
    caller gave it ("" when the notice is about a combination of values);
    ``values`` as documented per kind in include/pacer.h; ``text`` the English
    rendering; ``key`` the dedupe key (``rate:<text>``,
    ``disabled:<r>:<idle>:<rate>``, …). ``text`` and ``key`` are the core's:
    setting text that was not valid (a NUL, a lone surrogate) shows there as
    U+FFFD (one per byte of the surrogate's encoding), while ``raw`` keeps
    the caller's own string."""

    kind: NoticeKind
    raw: str
    values: tuple[int, int, int]
    text: str
    key: str


class _CNotice:
    """A ``struct pacer_notice`` built from a Notice, with its text kept alive."""

    __slots__ = ("cdata", "_raw")

    def __init__(self, kind: int, raw: str, values: tuple[int, int, int]) -> None:
        self.cdata = ffi.new("struct pacer_notice *")
        self.cdata.kind = kind
        self.cdata.values = list(values)
        # The bytes pacer_resolve was given for this text, so the key is the one it made.
        encoded = _check.setting_bytes(raw)
        self._raw = ffi.new("char[]", encoded) if encoded else ffi.NULL
        self.cdata.raw = self._raw
        self.cdata.raw_len = len(encoded)


def written_bytes(function: str, call: Callable[[Any, int, Any], int]) -> bytes:
    """Runs a C call that writes into a caller buffer: measures (NULL, 0),
    then writes into a buffer of the needed length."""
    written = ffi.new("size_t *")
    status = call(ffi.NULL, 0, written)
    if status not in (lib.PACER_STATUS_OK, lib.PACER_STATUS_BUFFER_TOO_SHORT):
        raise PacerError(function, status)
    buffer = ffi.new("uint8_t[]", max(1, written[0]))
    _ok(function, call(buffer, len(buffer), written))
    return bytes(ffi.buffer(buffer, written[0]))


def notice_from_c(c_notice: Any, given: Mapping[int, str] | None = None) -> Notice:
    """A Notice from a ``struct pacer_notice *`` (its text and key rendered
    by the core). ``given`` maps the address of each settings string handed
    to ``pacer_resolve`` to the caller's own text: a notice quoting one of
    them (its ``raw`` points to the caller's bytes) carries that text."""
    if c_notice.raw == ffi.NULL:
        raw = ""
    else:
        address = int(ffi.cast("uintptr_t", c_notice.raw))
        original = None if given is None else given.get(address)
        if original is not None and len(_check.setting_bytes(original)) == c_notice.raw_len:
            raw = original
        else:
            # Bytes this package encoded from a str (setting_bytes) decode back;
            # anything else lossily, so a notice never fails a call.
            data = ffi.unpack(c_notice.raw, c_notice.raw_len)
            try:
                raw = data.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                raw = data.decode("utf-8", "replace")
    return Notice(
        kind=NoticeKind(c_notice.kind),
        raw=raw,
        values=(int(c_notice.values[0]), int(c_notice.values[1]), int(c_notice.values[2])),
        text=written_bytes("pacer_notice_render", lambda b, n, w: lib.pacer_notice_render(c_notice, b, n, w)).decode(),
        key=written_bytes("pacer_notice_key", lambda b, n, w: lib.pacer_notice_key(c_notice, b, n, w)).decode(),
    )


class NoticeRegistry:
    """Remembers which notices were shown, so each is logged once per dedupe
    key. The keys are the core's: namespaced by kind (``rate:<text>``,
    ``disabled:<numbers>``, …), so a hostile setting text cannot suppress a
    notice of another kind. It holds a fixed number of keys (32 in this
    library); once full, notices are shown again rather than lost.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner, self._storage = aligned_struct("struct pacer_notice_registry", lib.PACER_NOTICE_REGISTRY_SIZE)
        _ok("pacer_notice_registry_init", lib.pacer_notice_registry_init(self._storage))

    def first_time(self, notice: Notice) -> bool:
        """True the first time ``notice``'s key is seen (show it), False after."""
        if not isinstance(notice, Notice):
            raise TypeError(f"pacer: notice must be a Notice, got {_check.describe(notice)}")
        c = _CNotice(notice.kind, notice.raw, notice.values)
        first = ffi.new("bool *")
        with self._lock:
            _ok("pacer_notice_registry_first_time",
                lib.pacer_notice_registry_first_time(self._storage, c.cdata, first))
        return bool(first[0])

    def clear(self) -> None:
        """Forgets every key."""
        with self._lock:
            _ok("pacer_notice_registry_init", lib.pacer_notice_registry_init(self._storage))


#: The registry used when none is given.
default_notice_registry = NoticeRegistry()


def report(notice: Notice, registry: NoticeRegistry | None) -> None:
    """Logs ``notice`` (WARNING on the ``pacer`` logger) the first time its key
    is seen by ``registry``. A failing handler never fails the caller."""
    registry = default_notice_registry if registry is None else registry
    try:
        if registry.first_time(notice):
            logger.warning("%s", notice.text, extra={"pacer_notice": notice})
    except Exception:  # noqa: BLE001 - a diagnostic must never fail a request
        pass


def _check_registry(registry: Any) -> NoticeRegistry | None:
    if registry is not None and not isinstance(registry, NoticeRegistry):
        raise TypeError(f"pacer: notice_registry must be a NoticeRegistry or None, got {_check.describe(registry)}")
    return registry


@dataclass(frozen=True, slots=True)
class Budget:
    """A resolved budget (SPEC §2) and its derived quantities (SPEC §3)."""

    rate_per_minute: int
    idle_timeout_ms: int
    total_timeout_ms: int
    max_retries: int
    wait_bound_ms: int
    hint_cap_s: int
    refusal_schedule_ms: int
    can_refuse: bool
    enabled: bool
    notices: tuple[Notice, ...] = ()

    @classmethod
    def resolve(
        cls,
        rate_per_minute: str | None = None,
        idle_timeout_ms: str | None = None,
        total_timeout_ms: str | None = None,
        max_retries: str | None = None,
        *,
        notice_registry: NoticeRegistry | None = None,
    ) -> Budget:
        """Resolves settings text (None = unset). Malformed values keep the
        default and out-of-range ones clamp, each with a notice logged once;
        a bad setting never raises, whatever its text: one holding a NUL or a
        lone surrogate is malformed (the notice's ``raw`` is the text as
        given). A non-str is a TypeError."""
        texts = [rate_per_minute, idle_timeout_ms, total_timeout_ms, max_retries]
        encoded = [
            _check.setting(field, value)
            for field, value in zip(("rate_per_minute", "idle_timeout_ms", "total_timeout_ms", "max_retries"), texts)
        ]
        return cls._resolve(encoded, texts, _check_registry(notice_registry))

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        names: Mapping[str, str] = ENV_NAMES,
        notice_registry: NoticeRegistry | None = None,
    ) -> Budget:
        """Resolves the settings in ``env`` (default ``os.environ``) under
        ``names`` (default ``ENV_NAMES``: PACER_RATE_PER_MIN,
        PACER_IDLE_TIMEOUT_MS, PACER_TOTAL_TIMEOUT_MS, PACER_MAX_RETRIES)."""
        env = os.environ if env is None else env
        if not isinstance(env, Mapping):
            raise TypeError(f"pacer: env must be a mapping, got {_check.describe(env)}")
        if not isinstance(names, Mapping):
            raise TypeError(f"pacer: names must be a mapping, got {_check.describe(names)}")
        unknown = set(names) - set(ENV_NAMES)
        if unknown:
            raise ValueError(f"pacer: names has unknown fields {sorted(unknown)}; known: {sorted(ENV_NAMES)}")
        encoded: list[bytes | None] = []
        texts: list[str | None] = []
        for field, default_name in ENV_NAMES.items():
            name = names.get(field, default_name)
            if not isinstance(name, str):
                raise TypeError(f"pacer: names[{field!r}] must be a str, got {_check.describe(name)}")
            value = env.get(name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"pacer: {name} must be a str, got {_check.describe(value)}")
            # Text that is not valid (a NUL, or undecodable bytes of the
            # environment, which os.environ holds as lone surrogates) is a
            # malformed setting with a notice, like any other bad setting.
            encoded.append(None if value is None else _check.setting_bytes(value))
            texts.append(value)
        return cls._resolve(encoded, texts, _check_registry(notice_registry))

    @classmethod
    def _resolve(cls, encoded: list[bytes | None], texts: list[str | None],
                 registry: NoticeRegistry | None) -> Budget:
        keep = [ffi.NULL if value is None else ffi.new("char[]", value) for value in encoded]
        # A text notice's raw points to the bytes it quotes: map them back to the caller's text.
        given = {int(ffi.cast("uintptr_t", c_text)): text
                 for c_text, text in zip(keep, texts) if text is not None}
        out = ffi.new("struct pacer_budget *")
        notices = ffi.new("struct pacer_notices *")
        _ok("pacer_resolve", lib.pacer_resolve(keep[0], keep[1], keep[2], keep[3], out, notices))
        found = tuple(notice_from_c(notices.items + i, given) for i in range(notices.count))
        for notice in found:
            report(notice, registry)
        return cls(
            rate_per_minute=int(out.rate_per_min),
            idle_timeout_ms=int(out.idle_timeout_ms),
            total_timeout_ms=int(out.total_timeout_ms),
            max_retries=int(out.max_retries),
            wait_bound_ms=int(out.wait_bound_ms),
            hint_cap_s=int(out.hint_cap_s),
            refusal_schedule_ms=int(out.refusal_schedule_ms),
            can_refuse=bool(out.can_refuse),
            enabled=bool(out.enabled),
            notices=found,
        )


# ---------------------------------------------------------------- SPEC §3 formulas


def ladder_ceiling(idle_timeout_ms: int) -> int:
    """Largest retry count whose backoff ladder 2000·(2^r − 1) is below the idle timeout."""
    return int(lib.pacer_ladder_ceiling(_check.u64("idle_timeout_ms", idle_timeout_ms)))


def wait_bound_ms(idle_timeout_ms: int, max_retries: int) -> int:
    """min(15000, floor(max(0, idle − backoff(r)) / (2(r+1)))), ms."""
    return int(lib.pacer_wait_bound_ms(_check.u64("idle_timeout_ms", idle_timeout_ms),
                                       _check.u32("max_retries", max_retries)))


def hint_cap_s(wait_bound_ms: int) -> int:
    """max(1, floor(bound / 1000)), s."""
    return int(lib.pacer_hint_cap_s(_check.u64("wait_bound_ms", wait_bound_ms)))


def retry_after_s(required_wait_ms: int, wait_bound_ms: int) -> int:
    """min(max(1, ceil(required / 1000)), hint cap), s."""
    return int(lib.pacer_retry_after_s(_check.u64("required_wait_ms", required_wait_ms),
                                       _check.u64("wait_bound_ms", wait_bound_ms)))


def can_refuse(rate_per_minute: int, max_retries: int, wait_bound_ms: int) -> bool:
    """Whether refusals can outlast the wait for one slot at this rate."""
    return bool(lib.pacer_can_refuse(_check.u32("rate_per_minute", rate_per_minute),
                                     _check.u32("max_retries", max_retries),
                                     _check.u64("wait_bound_ms", wait_bound_ms)))
