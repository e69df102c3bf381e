"""Argument checks: a wrong type is a TypeError, a value out of range a
ValueError; both name the field. Checks run before any C call, so a bad
argument changes nothing."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def describe(value: Any) -> str:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def whole(field: str, value: Any, low: int, high: int) -> int:
    """A whole number in ``[low, high]``; bool and float are TypeErrors."""
    if isinstance(value, bool):
        raise TypeError(f"pacer: {field} must be an int, got {describe(value)}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"pacer: {field} must be an int, got {describe(value)}") from None
    if number < low or number > high:
        raise ValueError(f"pacer: {field} must be between {low} and {high}, got {number}")
    return number


def u64(field: str, value: Any) -> int:
    return whole(field, value, 0, U64_MAX)


def u32(field: str, value: Any) -> int:
    return whole(field, value, 0, U32_MAX)


def seconds(field: str, value: Any) -> float:
    """A finite, non-negative number of seconds (int or float, not bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"pacer: {field} must be a number of seconds, got {describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"pacer: {field} must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"pacer: {field} must not be negative, got {value!r}")
    return value


def clock_ms(clock: Callable[[], float]) -> int:
    """Reads ``clock`` (seconds, like time.monotonic) as whole milliseconds.

    A float is rounded to the microsecond before flooring to the
    millisecond, so readings such as 1.001 (1000.999… ms in binary) count
    as the millisecond they denote.
    """
    return reading_ms(clock())


def reading_ms(reading: Any) -> int:
    """A clock reading in seconds as whole milliseconds (see ``clock_ms``)."""
    if isinstance(reading, int) and not isinstance(reading, bool):
        ms = reading * 1000
    else:
        value = seconds("clock()", reading)
        ms = round(value * 1_000_000) // 1000
    if ms < 0:
        raise ValueError(f"pacer: clock() must not be negative, got {reading!r}")
    if ms > U64_MAX:
        raise ValueError(f"pacer: clock() is past the largest millisecond count (2**64 - 1), got {reading!r}")
    return ms


def text(field: str, value: Any, *, optional: bool) -> bytes | None:
    """A message or path string as NUL-free UTF-8 (None passes if optional);
    a NUL or a lone surrogate is a ValueError. Settings text goes through
    ``setting`` instead, which never fails."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        expected = "a str or None" if optional else "a str"
        raise TypeError(f"pacer: {field} must be {expected}, got {describe(value)}")
    if "\0" in value:
        raise ValueError(f"pacer: {field} must not contain a NUL character")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"pacer: {field} is not valid Unicode text (it holds a lone surrogate)") from None


def setting_bytes(value: str) -> bytes:
    """A settings string as the bytes ``pacer_resolve`` reads; never fails.

    C strings end at a NUL, so each NUL becomes U+FFFD first: ``"12\\0x"``
    must never read as ``12`` (it is a malformed setting instead). A lone
    surrogate is encoded as it is (``surrogatepass``): bytes that are not
    UTF-8, which the core reads as a malformed setting (default and a
    notice), never an error."""
    return value.replace("\0", "\ufffd").encode("utf-8", "surrogatepass")


def setting(field: str, value: Any) -> bytes | None:
    """Settings text (``Budget.resolve``): None passes; any str is accepted
    (see ``setting_bytes``); anything else is a TypeError naming the field."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"pacer: {field} must be a str or None, got {describe(value)}")
    return setting_bytes(value)


def key(field: str, value: Any) -> Any:
    """A request key: a str, int (not bool) or bytes."""
    if isinstance(value, bool) or not isinstance(value, (str, int, bytes)):
        raise TypeError(f"pacer: {field} must be a str, int or bytes, got {describe(value)}")
    return value


def callable_or(field: str, value: Any, fallback: Any) -> Any:
    if value is None:
        return fallback
    if not callable(value):
        raise TypeError(f"pacer: {field} must be callable, got {describe(value)}")
    return value
