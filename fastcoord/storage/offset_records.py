"""The log's frames of an OffsetCommit's records: the pure-Python twin of
_ext/offset_records.pyx.

An OffsetCommits stands for one record per partition of its batch. The log holds those
records one by one, framed as storage/segment.py frames any record; the compiled module
writes the same bytes in one pass over the batch's arrays, and this twin is the reference:
build each Record and frame it.
"""

from __future__ import annotations

from fastcoord.core.records import OffsetCommits
from fastcoord.storage import segment


def frame_offset_commits(commits: OffsetCommits) -> bytes:
    """The log's frames of every record `commits` stands for, in order."""
    return segment.encode_all(commits.records())
