"""The core's compiled modules, or their pure-Python twins with FASTCOORD_NO_EXTENSIONS=1."""

from __future__ import annotations

from types import ModuleType

from fastcoord import _accel

partition: ModuleType = _accel.load("partition", "fastcoord.core.partition")
timing_wheel: ModuleType = _accel.load("timing_wheel", "fastcoord.core.timing_wheel")
member_table: ModuleType = _accel.load("member_table", "fastcoord.core.member_table")
offset_table: ModuleType = _accel.load("offset_table", "fastcoord.core.offset_table")
