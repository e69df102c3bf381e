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

Both modules are built against CPython's stable ABI for 3.10, the lowest
version the package supports (``requires-python``): cffi builds its module
with ``Py_LIMITED_API`` on its own, ``_fast.c`` defines it for 3.10, and
``bdist_wheel`` tags the wheel ``cp310-abi3``, so one wheel serves every
CPython from 3.10 on. ``scripts/release-python.sh`` repairs it to a
``manylinux`` tag with auditwheel.

The sdist carries the Rust sources the build needs (``sdist_with_rust``
below): a wheel builds from it anywhere cargo is on PATH, with no checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pacer_build import BUNDLED_SOURCES, find_source_root  # noqa: E402

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

    def build_extension(self, ext) -> None:
        # An in-tree build/ may hold the same module under another suffix
        # from an earlier build (_fast.cpython-311-x86_64-linux-gnu.so next
        # to _fast.abi3.so): Python would import that one first, so it goes.
        target = Path(self.get_ext_fullpath(ext.name))
        stem = target.name.split(".", 1)[0]
        for stale in target.parent.glob(f"{stem}.*.so"):
            if stale != target:
                stale.unlink()
        super().build_extension(ext)

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


def bundle_rust_sources(root: Path, target: Path) -> None:
    """Writes into ``target`` what building the package needs from the
    repository ``root``: the ``core`` and ``ffi`` crates, a Cargo workspace
    of just those two (the root Cargo.toml with its members cut down, so the
    shared package settings and release profile stay the same), a Cargo.lock
    for it, ``include/pacer.h``, ``redis/pacer.lua`` and the LICENSE.

    The Cargo.lock is the repository's, pruned by cargo itself to the
    packages this smaller workspace uses (``cargo metadata`` without
    ``--locked`` drops unused entries and changes no version), then checked
    with ``--locked``, which is how setup.py's cargo build will read it."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for crate in ("core", "ffi"):
        shutil.copytree(root / crate, target / crate, ignore=shutil.ignore_patterns("target", "__pycache__"))
    for name in ("include/pacer.h", "redis/pacer.lua", "LICENSE", "Cargo.lock"):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target / name)
    manifest = (root / "Cargo.toml").read_text(encoding="utf-8")
    members = re.compile(r"^members\s*=\s*\[[^\]]*\]", re.MULTILINE)
    if len(members.findall(manifest)) != 1:
        raise RuntimeError("pacer: the root Cargo.toml has no single 'members = [...]' line to cut down")
    manifest = members.sub('members = ["core", "ffi"]', manifest)
    (target / "Cargo.toml").write_text("# Made by bindings/python/setup.py for the sdist: the repository's\n"
                                       "# workspace cut down to the crates the Python package builds.\n"
                                       + manifest, encoding="utf-8")
    metadata = [_cargo(), "metadata", "--format-version", "1"]
    _run(metadata, target, capture=True)  # resolves the workspace: prunes Cargo.lock
    _run([*metadata, "--locked"], target, capture=True)


class sdist_with_rust(sdist):
    """sdist that adds the Rust sources (``bundle_rust_sources``) under
    ``BUNDLED_SOURCES`` in the archive; ``pacer_build.find_source_root``
    looks there first. They are generated into the release tree only, never
    into bindings/python, so the checkout keeps one copy of each file."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        bundle_rust_sources(find_source_root(), Path(base_dir) / BUNDLED_SOURCES)


# The hot call in C (see the file's head), against the stable ABI: the
# file defines Py_LIMITED_API for 3.10; py_limited_api names it
# _fast.abi3.so. The source path is relative, as setuptools wants; the
# header comes from the sources' include/.
FAST = Extension(
    "pacer._fast",
    sources=["src/pacer/_fast.c"],
    include_dirs=[str(find_source_root() / "include")],
    depends=[str(find_source_root() / "include" / "pacer.h")],
    # libm for nearbyint. libc is named too though no symbol of it is used
    # (the linker would drop it as not needed): auditwheel reads a module's
    # libc from its DT_NEEDED entries and refuses a module that names none.
    libraries=["m"],
    extra_link_args=["-Wl,--no-as-needed", "-lc"] if sys.platform.startswith("linux") else [],
    py_limited_api=True,
)

setup(
    ext_modules=[FAST],
    cffi_modules=["pacer_build.py:ffibuilder"],
    cmdclass={"build_ext": build_ext_with_cargo, "build_py": build_py_with_script, "sdist": sdist_with_rust},
    # One wheel for CPython 3.10 and later: cp310-abi3.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
