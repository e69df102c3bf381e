"""cffi builder for ``pacer._pacer_cffi`` (compiled, out-of-line API mode).

The declarations handed to ``ffi.cdef`` are made from the committed
``include/pacer.h`` at build time, never copied by hand:

* the ``#define PACER_X <integer or integer expression>`` constants become
  ``#define PACER_X ...`` (cffi then takes each value from the compiled
  header);
* the rest goes through the C preprocessor (``cc -E -P``, C11) with its
  ``#include`` lines removed, which picks the C11 branch of every
  conditional, expands the macros, and leaves out the layout assertions;
* compiler attributes (``__attribute__((aligned(16)))``) are removed, since
  cffi's parser does not read them, and a struct that carried one gets a
  trailing ``...;`` so cffi takes its size and alignment from the compiler
  (for every other struct the compiled module checks cffi's layout against
  the compiler's).

``setup.py`` links the extension against ``libpacer.a`` (built by cargo
there); this file only describes the interface.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
MODULE_NAME = "pacer._pacer_cffi"

# Object-like macros with an integer value or integer expression
# (`#define PACER_X 256`, `#define PACER_Y (PACER_X + 256)`).
_CONSTANT = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+(PACER_[A-Z0-9_]+)[ \t]+([A-Za-z0-9_ \t()+\-*/<>|&~]+?)[ \t]*$", re.MULTILINE
)
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b.*$", re.MULTILINE)
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\)")
_ATTRIBUTED_STRUCT = re.compile(r"struct\s+" + _ATTRIBUTE.pattern + r"\s*(\w+)\s*\{([^{}]*)\}")
# The layout assertions use sizeof/_Alignof, which cffi's parser cannot read;
# pre-defining their guard leaves them out (the C compiler still checks them
# when the generated module includes the header).
_SKIP_LAYOUT_CHECK = "-DPACER_H_LAYOUT_CHECKED"


#: Where an sdist carries the Rust sources (setup.py's sdist_with_rust).
BUNDLED_SOURCES = "rust"


def find_source_root() -> Path:
    """The sources' root: ``PACER_SOURCE_DIR`` if set, else the Rust sources
    an sdist carries (``rust/`` next to this file), else the nearest folder
    above this file holding ``include/pacer.h`` and ``ffi/Cargo.toml`` (the
    repository root, in a checkout)."""
    configured = os.environ.get("PACER_SOURCE_DIR")
    candidates = [Path(configured).resolve()] if configured else [HERE / BUNDLED_SOURCES, *HERE.parents]
    for candidate in candidates:
        if (candidate / "include" / "pacer.h").is_file() and (candidate / "ffi" / "Cargo.toml").is_file():
            return candidate
    where = f"PACER_SOURCE_DIR={configured}" if configured else f"any folder above {HERE}"
    raise RuntimeError(
        f"pacer: cannot find the pacer sources (include/pacer.h and ffi/Cargo.toml) in {where}. "
        "Install from the sdist (it carries them), from a checkout of the repository "
        "(pip install ./bindings/python from its root), or set PACER_SOURCE_DIR to the repository root."
    )


def c_compiler() -> list[str]:
    """The C compiler command: ``CC`` if set, else the one Python was built with, else ``cc``."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(command)


def constants_of(header_text: str) -> list[tuple[str, str]]:
    """``#define PACER_X <integer expression>`` lines as (name, text), in order."""
    return list(_CONSTANT.findall(header_text))


def cdef_from_header(header_text: str, compiler: list[str] | None = None) -> str:
    """The ``ffi.cdef`` text for ``header_text`` (the contents of pacer.h)."""
    constants = constants_of(header_text)
    if not any(name == "PACER_ABI_VERSION" for name, _ in constants):
        raise RuntimeError("pacer: include/pacer.h defines no PACER_ABI_VERSION")
    body = _INCLUDE.sub("", header_text)
    command = [*(compiler or c_compiler()), "-E", "-P", "-x", "c", "-std=c11", _SKIP_LAYOUT_CHECK, "-"]
    try:
        done = subprocess.run(command, input=body, capture_output=True, text=True, check=False)
    except OSError as error:
        raise RuntimeError(f"pacer: cannot run the C preprocessor {command[0]!r}: {error}") from error
    if done.returncode != 0:
        raise RuntimeError(f"pacer: preprocessing include/pacer.h failed ({shlex.join(command)}):\n{done.stderr}")
    # A struct with an attribute (its alignment): let the compiler lay it out.
    declarations = _ATTRIBUTED_STRUCT.sub(lambda m: f"struct {m.group(1)} {{{m.group(2)}  ...;\n}}", done.stdout)
    if _ATTRIBUTE.search(declarations):
        raise RuntimeError("pacer: include/pacer.h has a compiler attribute outside a struct head; "
                           "pacer_build.py does not know how to declare it to cffi")
    defines = "\n".join(f"#define {name} ..." for name, _ in constants)
    return f"{defines}\n{declarations}"


def make_ffi() -> FFI:
    root = find_source_root()
    header = root / "include" / "pacer.h"
    builder = FFI()
    builder.cdef(cdef_from_header(header.read_text(encoding="utf-8")))
    builder.set_source(
        MODULE_NAME,
        '#include "pacer.h"\n',
        include_dirs=[str(root / "include")],
        # setup.py adds libpacer.a and its system libraries after cargo ran.
    )
    return builder


ffibuilder = make_ffi()

if __name__ == "__main__":  # pragma: no cover - a manual check of the cdef
    sys.stdout.write(cdef_from_header((find_source_root() / "include" / "pacer.h").read_text(encoding="utf-8")))
