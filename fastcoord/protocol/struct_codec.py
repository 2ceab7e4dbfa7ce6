"""Pure-Python twin of _ext/struct_codec.pyx: run a compiled plan's own closures.

The reference answers for every message body: the compiled interpreter must return equal
objects and equal bytes, and it hands every input it finds irregular (an error, or a value
it does not convert itself) back to this module, so that errors read the same either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.primitives import Reader, Writer

if TYPE_CHECKING:
    from fastcoord.protocol.codec import Buffer, StructPlan


def decode_body(plan: StructPlan, data: Buffer, pos: int) -> Any:
    """Decode the struct that starts at `pos`; it must end the frame."""
    r = Reader(data, pos)
    obj = plan.read(r)
    if r.pos != r.end:
        raise ProtocolError(f"{r.end - r.pos} bytes left over after the message")
    return obj


def encode_body(plan: StructPlan, obj: Any) -> bytes:
    w = Writer()
    plan.write(w, obj)
    return w.getvalue()
