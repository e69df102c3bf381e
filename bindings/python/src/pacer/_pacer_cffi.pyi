# The compiled cffi module (built from include/pacer.h by pacer_build.py).
from typing import Any

ffi: Any
lib: Any
