"""Builds the ``pacer._pacer_cffi`` extension.

``build_ext`` first runs ``cargo build --release --locked -p pacer-ffi`` in
the repository root (found relative to this file, or ``PACER_SOURCE_DIR``),
then compiles the cffi module and links ``libpacer.a`` into it statically.
It also compiles ``pacer._fast`` (``src/pacer/_fast.c``, the C
``Pacer.reserve``), which links nothing: it takes pacer.h's types from the
header and calls pacer_reserve in the cffi module through its address.
Cargo's target folder is the one cargo itself uses: ``CARGO_TARGET_DIR``
when set, else ``target/`` in the repository root (read from
``cargo metadata`` so a cargo config is honoured too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pacer_build import find_source_root  # noqa: E402

# What libpacer.a (a Rust staticlib) needs from the system on Linux; the
# same list the C library's README gives for a static link.
LINUX_SYSTEM_LIBRARIES = ["gcc_s", "util", "rt", "pthread", "m", "dl", "c"]


def _cargo() -> str:
    return os.environ.get("CARGO", "cargo")


def _run(command: list[str], cwd: Path, capture: bool = False) -> str:
    print("pacer: running " + " ".join(command), flush=True)
    try:
        done = subprocess.run(command, cwd=cwd, check=False, text=True,
                              stdout=subprocess.PIPE if capture else None)
    except FileNotFoundError as error:
        raise RuntimeError(
            f"pacer: {command[0]!r} not found; building the Python package needs cargo "
            "(the Rust toolchain) to build libpacer.a"
        ) from error
    if done.returncode != 0:
        raise RuntimeError(f"pacer: {' '.join(command)} failed with exit code {done.returncode}")
    return done.stdout or ""


def build_static_library(root: Path) -> Path:
    """Runs cargo in ``root`` and returns the path of ``libpacer.a``."""
    _run([_cargo(), "build", "--release", "--locked", "-p", "pacer-ffi"], root)
    metadata = json.loads(_run([_cargo(), "metadata", "--format-version", "1", "--no-deps", "--locked"],
                               root, capture=True))
    library = Path(metadata["target_directory"]) / "release" / "libpacer.a"
    if not library.is_file():
        raise RuntimeError(f"pacer: cargo finished but {library} does not exist")
    return library


class build_ext_with_cargo(build_ext):
    """build_ext that builds libpacer.a with cargo and links it in."""

    def finalize_options(self) -> None:
        super().finalize_options()
        # The extension's own C file rarely changes while libpacer.a does:
        # always relink, so an in-tree rebuild never keeps a stale library.
        self.force = True

    def pre_run(self, ext, ffi) -> None:  # cffi's hook, called before the C source is written
        library = build_static_library(find_source_root())
        ext.extra_objects = [*ext.extra_objects, str(library)]
        ext.depends = [*ext.depends, str(library)]
        if sys.platform.startswith("linux"):
            ext.libraries = [*ext.libraries, *LINUX_SYSTEM_LIBRARIES]
            # Keep the Rust library's symbols private to the extension, and
            # ship no debug info (the Rust standard library's included).
            ext.extra_link_args = [*ext.extra_link_args, "-Wl,--exclude-libs,ALL", "-Wl,--strip-debug"]


class build_py_with_script(build_py):
    """build_py that puts the repository's ``redis/pacer.lua`` into the
    package as ``pacer/pacer.lua`` (the script RedisPacer runs): the one
    committed copy is ``redis/pacer.lua``, taken at build time."""

    def _script_target(self) -> Path:
        if getattr(self, "editable_mode", False):  # pip install -e: the package is src/pacer itself
            return Path(__file__).resolve().parent / "src" / "pacer" / "pacer.lua"
        return Path(self.build_lib) / "pacer" / "pacer.lua"

    def run(self) -> None:
        super().run()
        target = self._script_target()
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(find_source_root() / "redis" / "pacer.lua"), str(target))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(self._script_target())]


# The hot call in C (see the file's head). The source path is relative, as
# setuptools wants; the header comes from the repository's include/.
FAST = Extension(
    "pacer._fast",
    sources=["src/pacer/_fast.c"],
    include_dirs=[str(find_source_root() / "include")],
    depends=[str(find_source_root() / "include" / "pacer.h")],
)

setup(
    ext_modules=[FAST],
    cffi_modules=["pacer_build.py:ffibuilder"],
    cmdclass={"build_ext": build_ext_with_cargo, "build_py": build_py_with_script},
)
