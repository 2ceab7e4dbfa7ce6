"""Request header v0/v1/v2 and response header v0/v1.

Request header v1 adds the client id; v2 (flexible requests) adds tagged fields. The client
id keeps its int16 length even in v2 so that any broker can read the header of any
ApiVersions request (RequestHeader.json). Response header v1 (flexible responses) adds
tagged fields, except for ApiVersions, whose response header is always v0 so that a client
can read it before it knows which versions the server speaks.
"""

from __future__ import annotations

import msgspec

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.primitives import Reader, Writer


class RequestHeader(msgspec.Struct, gc=False):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def skip_tagged_fields(r: Reader) -> None:
    """Header tagged fields carry nothing fastcoord reads; skip them with bounds checks."""
    count = r.unsigned_varint()
    if count > r.remaining():
        raise ProtocolError(f"{count} tagged fields cannot fit in {r.remaining()} bytes")
    for _ in range(count):
        r.unsigned_varint()
        r.skip(r.unsigned_varint())


def read_request_header_rest(r: Reader, header_version: int) -> str | None:
    """Read what follows api key, version and correlation id: client id and tagged fields."""
    client_id = None
    if header_version >= 1:
        client_id = r.nullable_string()
    if header_version >= 2:
        skip_tagged_fields(r)
    return client_id


def write_request_header(w: Writer, header: RequestHeader, header_version: int) -> None:
    w.int16(header.api_key)
    w.int16(header.api_version)
    w.int32(header.correlation_id)
    if header_version >= 1:
        w.nullable_string(header.client_id)
    if header_version >= 2:
        w.unsigned_varint(0)


def request_header_version(flexible: bool) -> int:
    return 2 if flexible else 1


def response_header_version(api_key: int, flexible: bool) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if flexible else 0
