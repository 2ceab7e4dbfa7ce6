"""Whole frames for every served API: size prefix, header and body, schema-driven.

A frame on the wire is an int32 size followed by that many bytes. `decode_request` takes the
bytes after the size (the server's connection layer splits the stream), reads the request
header whose version the API and version imply, and decodes the body. A request for an API
key or version that is not served raises UnsupportedVersion with what was read of the
header, so that the server can answer it. The encoders return complete frames, size first.

Bytes after a well-formed request body are ignored, as Kafka's broker ignores them (it
parses the header, then the body, and never looks at the rest; librdkafka 2.16 relies on
that): `decode_request` returns how many there were, for the server to log. Responses are
decoded strictly; fastcoord's own clients and tests want to hear of any disagreement.
"""

from __future__ import annotations

import struct

from fastcoord.protocol.codec import is_flexible, read_message, read_message_at, write_message
from fastcoord.protocol.errors import ProtocolError, UnsupportedVersion
from fastcoord.protocol.headers import (
    RequestHeader,
    read_request_header_rest,
    request_header_version,
    response_header_version,
    skip_tagged_fields,
    write_request_header,
)
from fastcoord.protocol.primitives import Reader, Writer
from fastcoord.protocol.schema import Request, Response
from fastcoord.protocol.versions import SERVED

_SIZE = struct.Struct(">i")
FrameBytes = bytes | bytearray | memoryview
# A decoded request frame: its header, its body, and how many bytes followed the body.
DecodedRequest = tuple[RequestHeader, Request, int]


def decode_request(frame: FrameBytes) -> DecodedRequest:
    """Decode one request frame (without its size prefix): header, body, and the count of
    bytes after the body, which are ignored."""
    r = Reader(frame)
    try:
        api_key = r.int16()
        api_version = r.int16()
        correlation_id = r.int32()
    except ProtocolError as exc:
        raise exc.at("request header") from None
    api = SERVED.get(api_key)
    if api is None:
        raise UnsupportedVersion(f"unknown API key {api_key}", api_key, api_version, correlation_id)
    name = api.request.__name__
    if not api.serves(api_version):
        raise UnsupportedVersion(
            f"{name} v{api_version} is not served (versions {api.min_version}-{api.max_version})",
            api_key,
            api_version,
            correlation_id,
        )
    flexible = is_flexible(api.request, api_version)
    try:
        client_id = read_request_header_rest(r, request_header_version(flexible))
    except ProtocolError as exc:
        raise exc.within("client_id").at(f"{name} v{api_version} header") from None
    body, end = read_message_at(api.request, api_version, r.data, r.pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), body, r.end - end


def encode_response(correlation_id: int, api_version: int, response: Response) -> bytes:
    """Encode a response frame, size prefix and header included."""
    w = Writer()
    w.raw(b"\0\0\0\0")
    flexible = is_flexible(type(response), api_version)
    w.int32(correlation_id)
    if response_header_version(response.API_KEY, flexible) >= 1:
        w.unsigned_varint(0)
    write_message(w, response, api_version)
    _SIZE.pack_into(w.buf, 0, len(w.buf) - 4)
    return bytes(w.buf)


def encode_request(header: RequestHeader, request: Request) -> bytes:
    """Encode a request frame, size prefix included (clients: loadtest, tests)."""
    w = Writer()
    w.raw(b"\0\0\0\0")
    flexible = is_flexible(type(request), header.api_version)
    write_request_header(w, header, request_header_version(flexible))
    write_message(w, request, header.api_version)
    _SIZE.pack_into(w.buf, 0, len(w.buf) - 4)
    return bytes(w.buf)


def decode_response(
    api_key: int, api_version: int, frame: FrameBytes, ignore_trailing: bool = False
) -> tuple[int, Response]:
    """Decode a response frame (without its size prefix): correlation id and body. Bytes
    after the body are an error unless `ignore_trailing` (what Kafka's clients do: they
    read the fields they know and stop)."""
    api = SERVED.get(api_key)
    if api is None:
        raise ProtocolError(f"unknown API key {api_key}")
    r = Reader(frame)
    flexible = is_flexible(api.response, api_version)
    try:
        correlation_id = r.int32()
        if response_header_version(api_key, flexible) >= 1:
            skip_tagged_fields(r)
    except ProtocolError as exc:
        raise exc.at(f"{api.response.__name__} v{api_version} header") from None
    if ignore_trailing:
        return correlation_id, read_message_at(api.response, api_version, r.data, r.pos)[0]
    return correlation_id, read_message(api.response, api_version, r.data, r.pos)
