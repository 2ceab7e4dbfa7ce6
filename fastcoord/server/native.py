"""The server's compiled module, or its pure-Python twin with FASTCOORD_NO_EXTENSIONS=1."""

from __future__ import annotations

from types import ModuleType

from fastcoord import _accel

reactor: ModuleType = _accel.load("reactor", "fastcoord.server.reactor")
