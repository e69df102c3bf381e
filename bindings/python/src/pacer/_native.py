"""The compiled modules: the cffi module (checked once at import) and the
C extension with the hot call (``pacer._fast``)."""

from __future__ import annotations

from ._abi import check_abi, missing_extension

# A module that cannot load is one ImportError saying what is missing and
# how to get it (``from None``: the loader's reason is in the message, and
# its traceback would only bury it).
try:
    from ._pacer_cffi import ffi, lib
except ImportError as error:  # tests/test_abi.py makes the import fail
    raise missing_extension(error) from None
try:
    from . import _fast as fast
except ImportError as error:  # tests/test_abi.py makes the import fail
    raise missing_extension(error, "pacer._fast") from None

check_abi(int(lib.pacer_abi_version()), int(lib.PACER_ABI_VERSION))

__all__ = ["aligned_new", "aligned_struct", "fast", "ffi", "lib"]


def aligned_new(ctype: str, size: int, align: int) -> tuple[object, object]:
    """Zeroed storage of ``size`` bytes aligned to ``align`` as a ``ctype``
    pointer: (owner, pointer). ffi.new promises no alignment beyond the
    platform's malloc, so this over-allocates and aligns by hand; the owner
    must be kept alive as long as the pointer is used."""
    owner = ffi.new("uint8_t[]", size + align - 1)
    offset = -int(ffi.cast("uintptr_t", owner)) % align
    return owner, ffi.cast(ctype, owner + offset)


def aligned_struct(struct: str, size: int, align: int = 1) -> tuple[object, object]:
    """Caller-owned storage for ``struct`` (e.g. ``"struct pacer"``) as a
    pointer to it (``aligned_new``): ``size`` and ``align`` are the header's
    (``PACER_STORAGE_SIZE``, ...), raised to the struct's own size and
    alignment as cffi sees them."""
    return aligned_new(f"{struct} *", max(int(size), ffi.sizeof(struct)), max(int(align), ffi.alignof(struct)))
