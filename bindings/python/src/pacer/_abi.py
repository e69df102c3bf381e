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


#: Where the compiled modules come from when the installed ones cannot load.
SOURCE_HINT = (
    "the binary wheels are for CPython 3.10+ on x86_64 Linux with glibc (manylinux); elsewhere "
    "install connpacer from the sdist, which builds them and needs cargo and a C compiler: "
    "'python -m pip install --force-reinstall --no-binary connpacer connpacer', or from a checkout "
    "'python -m pip install --force-reinstall --no-deps ./bindings/python'"
)


def missing_extension(error: BaseException, module: str = "pacer._pacer_cffi") -> ImportError:
    """The ImportError raised when a compiled module cannot be loaded (the
    file is missing, or the loader refuses it: another libc, another
    machine): one line, with the loader's own reason in it."""
    reason = " ".join(str(error).split()) or type(error).__name__
    return ImportError(f"pacer: cannot load the compiled module {module} ({reason}); {SOURCE_HINT}")
