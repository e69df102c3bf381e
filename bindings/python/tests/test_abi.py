"""The compiled module matches the committed include/pacer.h, and the
load-time ABI check refuses a mismatched library."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

import pacer
from pacer._abi import check_abi
from pacer._native import aligned_new, ffi, lib

HEADER = (REPO_ROOT / "include" / "pacer.h").read_text(encoding="utf-8")


def test_abi_check_accepts_equal_versions() -> None:
    check_abi(1, 1)
    check_abi(7, 7)


@pytest.mark.parametrize(("library", "header"), [(2, 1), (0, 1), (1, 2)])
def test_abi_check_refuses_a_mismatch(library: int, header: int) -> None:
    with pytest.raises(ImportError) as caught:
        check_abi(library, header)
    message = str(caught.value)
    assert f"ABI version {library}" in message and f"PACER_ABI_VERSION {header}" in message
    assert "pip install --force-reinstall" in message and "cargo build --release --locked -p pacer-ffi" in message


def test_loaded_library_matches_the_header() -> None:
    (header_abi,) = re.findall(r"^#define PACER_ABI_VERSION (\d+)$", HEADER, re.MULTILINE)
    assert lib.pacer_abi_version() == int(header_abi) == pacer.ABI_VERSION
    assert pacer.library_version() == pacer.__version__


def test_every_header_constant_and_function_is_bound() -> None:
    constants = re.findall(r"^#define (PACER_[A-Z0-9_]+) (.+)$", HEADER, re.MULTILINE)
    assert sum(value.isdigit() for _, value in constants) >= 8
    for name, value in constants:
        if value.isdigit():
            assert getattr(lib, name) == int(value), name
        else:  # an integer expression: the compiler's value
            assert isinstance(getattr(lib, name), int), name
    functions = re.findall(r"^(?:const\s+)?\w+\s+\*?(pacer_\w+)\(", HEADER, re.MULTILINE)
    assert len(functions) == len(set(functions)) >= 19
    for name in functions:
        assert callable(getattr(lib, name)), name
    for name, value in re.findall(r"^  (PACER_[A-Z_]+) = (\d+),$", HEADER, re.MULTILINE):
        assert getattr(lib, name) == int(value), name


@pytest.mark.parametrize("align", [8, 16, 64, 256])
def test_aligned_storage(align: int) -> None:
    # ffi.new promises only malloc's alignment; the helper must do better.
    for _ in range(32):
        owner, pointer = aligned_new("uint8_t *", 100, align)
        address = int(ffi.cast("uintptr_t", pointer))
        start = int(ffi.cast("uintptr_t", owner))
        assert address % align == 0
        assert start <= address and address + 100 <= start + ffi.sizeof(owner)


def test_storage_is_sized_and_aligned() -> None:
    # include/pacer.h: struct pacer is 256 bytes, 16-aligned.
    assert ffi.sizeof("struct pacer") == 256 and ffi.alignof("struct pacer") == 16
    pacers = [pacer.Pacer(clock=lambda: 0, notice_registry=pacer.NoticeRegistry()) for _ in range(64)]
    for p in pacers:
        assert int(ffi.cast("uintptr_t", p._storage)) % 16 == 0
    registries = [pacer.NoticeRegistry() for _ in range(64)]
    for r in registries:
        assert int(ffi.cast("uintptr_t", r._storage)) % 8 == 0


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)


def test_import_refuses_a_library_of_another_abi() -> None:
    # Simulate a header one ABI version ahead of the linked library: the
    # import must run the check with the library's own number and fail.
    (header_abi,) = re.findall(r"^#define PACER_ABI_VERSION (\d+)$", HEADER, re.MULTILINE)
    library_abi = int(header_abi)  # test_loaded_library_matches_the_header checks they are equal
    done = run_python(
        "import importlib.util, os, sys\n"
        "where = importlib.util.find_spec('pacer').submodule_search_locations[0]\n"
        "spec = importlib.util.spec_from_file_location('pacer._abi', os.path.join(where, '_abi.py'))\n"
        "abi = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(abi)\n"
        "real = abi.check_abi\n"
        "abi.check_abi = lambda library, header: real(library, header + 1)\n"
        "sys.modules['pacer._abi'] = abi\n"
        "import pacer\n"
    )
    assert done.returncode != 0
    assert f"ImportError: pacer: the linked pacer library has ABI version {library_abi}," in done.stderr
    assert f"PACER_ABI_VERSION {library_abi + 1};" in done.stderr
    assert "cargo build --release --locked -p pacer-ffi" in done.stderr


def test_import_without_the_compiled_module_says_how_to_build() -> None:
    done = run_python("import sys\nsys.modules['pacer._pacer_cffi'] = None\nimport pacer\n")
    assert done.returncode != 0
    assert "ImportError: pacer: cannot load the compiled module pacer._pacer_cffi" in done.stderr
    assert "pip install --force-reinstall --no-deps ./bindings/python" in done.stderr


# The advice every failed load of a compiled module ends with, written out
# by hand (src/pacer/_abi.py's SOURCE_HINT).
SOURCE_ADVICE = (
    "the binary wheels are for CPython 3.10+ on x86_64 Linux with glibc (manylinux); elsewhere "
    "install connpacer from the sdist, which builds them and needs cargo and a C compiler: "
    "'python -m pip install --force-reinstall --no-binary connpacer connpacer', or from a checkout "
    "'python -m pip install --force-reinstall --no-deps ./bindings/python'"
)


def last_line_of_failed_import(code: str) -> str:
    """Runs ``code`` (which ends importing pacer) in a fresh interpreter:
    the import must fail with one ImportError, not a chain of them, and its
    message must be one line (the traceback's last)."""
    done = run_python(code)
    assert done.returncode != 0, done.stdout
    assert "During handling of the above exception" not in done.stderr, done.stderr
    assert "The above exception was the direct cause" not in done.stderr, done.stderr
    assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr
    return done.stderr.rstrip("\n").splitlines()[-1]


@pytest.mark.parametrize("module", ["pacer._pacer_cffi", "pacer._fast"])
def test_a_missing_compiled_module_is_one_line_naming_it_and_the_sdist(module: str) -> None:
    line = last_line_of_failed_import(f"import sys\nsys.modules[{module!r}] = None\nimport pacer\n")
    assert line == (
        f"ImportError: pacer: cannot load the compiled module {module} "
        f"(import of {module} halted; None in sys.modules); {SOURCE_ADVICE}"
    )


def test_a_compiled_module_the_loader_refuses_is_one_line_with_its_reason() -> None:
    # What the loader says of a wheel built for a newer glibc than the
    # machine's, over two lines: the message keeps it, on one line.
    code = (
        "import sys\n"
        "class WrongLibc:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pacer._pacer_cffi':\n"
        "            raise ImportError(\"/lib/libc.so.6: version `GLIBC_2.99' not found\\n\"\n"
        "                              \"  (required by _pacer_cffi.abi3.so)\")\n"
        "sys.meta_path.insert(0, WrongLibc())\n"
        "import pacer\n"
    )
    assert last_line_of_failed_import(code) == (
        "ImportError: pacer: cannot load the compiled module pacer._pacer_cffi "
        "(/lib/libc.so.6: version `GLIBC_2.99' not found (required by _pacer_cffi.abi3.so)); " + SOURCE_ADVICE
    )


def test_import_on_python_older_than_3_10_says_which_python_it_needs() -> None:
    # The check reads sys.version_info before anything else is imported.
    code = "import sys\nsys.version_info = (3, 9, 18, 'final', 0)\nimport pacer\n"
    assert last_line_of_failed_import(code) == (
        "ImportError: pacer: connpacer needs Python 3.10 or later, and this is Python 3.9; "
        "install it with a Python 3.10+ interpreter ('python3.10 -m pip install connpacer')"
    )


def test_the_installed_package_is_under_test() -> None:
    # scripts/test-python.sh installs with pip (not editable): the tests must
    # import that copy, compiled module included, not the source tree.
    source = (REPO_ROOT / "bindings" / "python" / "src").resolve()
    for module in (pacer, sys.modules["pacer._pacer_cffi"]):
        assert module.__file__ is not None
        assert not Path(module.__file__).resolve().is_relative_to(source), module.__file__
