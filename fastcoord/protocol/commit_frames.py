"""Pure-Python twin of the compiled OffsetCommit codec (_ext/commit_frames.pyx).

An OffsetCommit request frame is decoded into an OffsetCommitBatch (columns, not a Struct
per partition), and an OffsetCommitAnswer is encoded as the OffsetCommitResponse it stands
for. This twin gives the reference answers: the schema-driven codec, then the conversion.
Differential property tests hold the compiled module to it for any input: equal batches,
equal bytes, the same errors.
"""

from __future__ import annotations

from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.framing import decode_request, encode_response
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import OffsetCommitRequest
from fastcoord.protocol.schema import Request

# A decoded request frame as the server takes it: an OffsetCommit's body is a batch.
Decoded = tuple[RequestHeader, Request | OffsetCommitBatch, int]


def decode_offset_commit(frame: bytes) -> Decoded:
    """Decode a request frame (without its size prefix) as decode_request would, except
    that an OffsetCommit body comes as an OffsetCommitBatch."""
    header, request, extra = decode_request(frame)
    if isinstance(request, OffsetCommitRequest):
        return header, OffsetCommitBatch.from_request(request, header.api_version), extra
    return header, request, extra


def encode_offset_commit_response(
    correlation_id: int, api_version: int, answer: OffsetCommitAnswer
) -> bytes:
    """Encode the OffsetCommit response frame of `answer`, size prefix and header included."""
    return encode_response(correlation_id, api_version, answer.to_response())
