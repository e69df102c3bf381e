"""The load-time compatibility check, kept apart from the compiled module so
it can be tested with any pair of numbers."""

from __future__ import annotations

REBUILD_HINT = (
    "rebuild and reinstall the package from the repository root with "
    "'python -m pip install --force-reinstall --no-deps ./bindings/python' "
    "(it runs 'cargo build --release --locked -p pacer-ffi' and needs cargo and a C compiler)"
)


def check_abi(library_abi: int, header_abi: int) -> None:
    """Raises ImportError unless the library's ``pacer_abi_version()`` equals
    the header's ``PACER_ABI_VERSION``."""
    if library_abi != header_abi:
        raise ImportError(
            f"pacer: the linked pacer library has ABI version {library_abi}, but this package "
            f"was built for include/pacer.h with PACER_ABI_VERSION {header_abi}; {REBUILD_HINT}"
        )


def missing_extension(error: BaseException, module: str = "pacer._pacer_cffi") -> ImportError:
    """The ImportError raised when a compiled module cannot be loaded."""
    return ImportError(f"pacer: cannot load the compiled module {module} ({error}); {REBUILD_HINT}")
