"""Build fastcoord's Cython extensions from _ext/ into fastcoord._ext.

Compiler directives live here and nowhere else. FASTCOORD_DEBUG_BUILD=1 builds with line
tracing (for coverage and profilers) and with the invariant checks that release builds
compile out (the `FASTCOORD_DEBUG` compile-time macro, tested with `if FASTCOORD_DEBUG:`
in .pyx files through _ext/debug.h).
"""

from __future__ import annotations

import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

ROOT = Path(__file__).parent
DEBUG = os.environ.get("FASTCOORD_DEBUG_BUILD", "") not in ("", "0")

DIRECTIVES: dict[str, object] = {
    "language_level": 3,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "cdivision": True,
    "embedsignature": True,
    "binding": False,
}
macros: list[tuple[str, str | None]] = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
compile_args = ["-O3"]
if DEBUG:
    DIRECTIVES.update({"boundscheck": True, "wraparound": True, "linetrace": True, "binding": True})
    macros += [("CYTHON_TRACE_NOGIL", "1"), ("FASTCOORD_DEBUG", "1")]
    compile_args = ["-O0", "-g"]
else:
    macros.append(("FASTCOORD_DEBUG", "0"))


def extensions() -> list[Extension]:
    import numpy

    return [
        Extension(
            f"fastcoord._ext.{pyx.stem}",
            [str(pyx.relative_to(ROOT))],
            include_dirs=[numpy.get_include(), "_ext"],
            define_macros=macros,
            extra_compile_args=compile_args,
        )
        for pyx in sorted((ROOT / "_ext").glob("*.pyx"))
    ]


setup(
    ext_modules=cythonize(
        extensions(),
        compiler_directives=DIRECTIVES,
        build_dir="build/cython",
        annotate=DEBUG,
    ),
)
