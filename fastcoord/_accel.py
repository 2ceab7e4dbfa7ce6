"""Pick a compiled Cython module or its pure-Python twin.

Every module under fastcoord._ext has a twin written in plain Python with the same
interface. FASTCOORD_NO_EXTENSIONS=1 selects the twins everywhere; otherwise a missing
compiled module is an error, never a silent slow path, because a package installed without
its extensions would pass every test and then miss every speed aim.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

NO_EXTENSIONS: bool = os.environ.get("FASTCOORD_NO_EXTENSIONS", "") not in ("", "0")


def load(ext_name: str, twin: str) -> ModuleType:
    """Return fastcoord._ext.<ext_name>, or the module named `twin` if extensions are off."""
    if NO_EXTENSIONS:
        return importlib.import_module(twin)
    try:
        return importlib.import_module(f"fastcoord._ext.{ext_name}")
    except ImportError as exc:
        raise ImportError(
            f"fastcoord's compiled module {ext_name!r} is missing ({exc}). Reinstall the "
            "package so that setup.py builds _ext/, or set FASTCOORD_NO_EXTENSIONS=1 to run "
            "the pure-Python twins."
        ) from exc
