"""Pure-Python twin of _ext/struct_codec.pyx: run a compiled plan's own closures.

The reference answers for every message body: the compiled interpreter must return equal
objects and equal bytes, and it hands every input it finds irregular (an error, or a value
it does not convert itself) back to this module, so that errors read the same either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastcoord.protocol.primitives import Reader, Writer

if TYPE_CHECKING:
    from fastcoord.protocol.codec import Buffer, StructPlan


def decode_body(plan: StructPlan, data: Buffer, pos: int) -> tuple[Any, int]:
    """Decode the struct that starts at `pos`: the object and the position after it."""
    r = Reader(data, pos)
    return plan.read(r), r.pos


def encode_body(plan: StructPlan, obj: Any) -> bytes:
    w = Writer()
    plan.write(w, obj)
    return w.getvalue()
