"""CRC-32C: known answers, compiled (both paths) against twin, and against other implementations.

Runs whatever FASTCOORD_NO_EXTENSIONS says: both modules are imported directly, and
fastcoord.storage.native.crc32c is whichever of them is selected.
"""

from __future__ import annotations

import array
import platform
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord import _accel
from fastcoord._ext import crc32c as compiled  # type: ignore[attr-defined]
from fastcoord.storage import crc32c as twin
from fastcoord.storage import native

Crc = Callable[..., int]

# Every way to compute it: the compiled module's own choice (SSE4.2 where the CPU has it), its
# table forced, and the twin.
IMPLS: dict[str, Crc] = {
    "compiled": compiled.crc32c,
    "compiled-table": compiled._crc32c_table,
    "twin": twin.crc32c,
}
NOGIL_BYTES = 65536  # _ext/crc32c.pyx's threshold for releasing the GIL

# RFC 3720 (iSCSI) appendix B.4, the CRC-32C check value of the CRC catalogues, and two more
# that aiokafka's and kafka-python's implementations agree with (test_independent_* below).
KNOWN: list[tuple[bytes, int]] = [
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (
        # B.4's iSCSI SCSI Read (10) command PDU
        bytes.fromhex(
            "01c00000000000000000000000000000140000000000040000000014000000182800000000000000"
            "0200000000000000"
        ),
        0xD9963A56,
    ),
    (b"123456789", 0xE3069283),
    (b"", 0),
    (b"a", 0xC1D04330),
    (b"The quick brown fox jumps over the lazy dog", 0x22620404),
]


def random_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def outcome(fn: Crc, *args: Any) -> tuple[str, Any]:
    """The result, or the error's type and text, so that two implementations can be compared."""
    try:
        return ("ok", fn(*args))
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


# --- (a) known answers -----------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS.values(), ids=IMPLS.keys())
@pytest.mark.parametrize(("data", "expected"), KNOWN)
def test_known_answers(impl: Crc, data: bytes, expected: int) -> None:
    assert impl(data) == expected
    assert impl(bytearray(data)) == expected
    assert impl(memoryview(data)) == expected
    assert impl(data, 0) == expected
    assert impl(data, crc=0) == expected
    assert impl(data=data) == expected


@pytest.mark.parametrize("impl", IMPLS.values(), ids=IMPLS.keys())
def test_continues_a_crc(impl: Crc) -> None:
    assert impl(b"56789", impl(b"1234")) == 0xE3069283
    assert impl(b"", 0xE3069283) == 0xE3069283
    data = random_bytes(3 * twin.CHUNK + 7, seed=1)
    whole = impl(data)
    for cut in [0, 1, 3, 4, 5, 31, 32, 33, twin.CHUNK - 1, twin.CHUNK, 2 * twin.CHUNK + 3]:
        assert impl(data[cut:], impl(data[:cut])) == whole
    crc = 0
    for start in range(0, len(data), 1000):
        crc = impl(data[start : start + 1000], crc)
    assert crc == whole


def test_selected_implementation() -> None:
    assert native.crc32c is (twin if _accel.NO_EXTENSIONS else compiled)
    for data, expected in KNOWN:
        assert native.crc32c.crc32c(data) == expected


def test_compiled_uses_sse42_where_the_cpu_has_it() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine() != "x86_64" or not cpuinfo.exists():
        pytest.skip("SSE4.2 detection is checked on x86-64 Linux")
    cpu_has_it = "sse4_2" in cpuinfo.read_text().split()
    assert cpu_has_it == compiled._SSE42


# --- (b) compiled and twin agree -------------------------------------------------------------


@settings(max_examples=500)
@given(data=st.binary(max_size=80), crc=st.integers(0, 2**32 - 1))
def test_compiled_and_twin_agree_on_short_inputs(data: bytes, crc: int) -> None:
    expected = twin.crc32c(data, crc)
    assert compiled.crc32c(data, crc) == expected
    assert compiled._crc32c_table(data, crc) == expected
    assert twin._update_chunks(crc ^ twin.MASK32, memoryview(data)) ^ twin.MASK32 == expected


# Lengths where something changes: the byte loops' tails, the twin's SHORT and CHUNK, the GIL.
EDGES = [0, 8, twin.SHORT, twin.CHUNK, NOGIL_BYTES]
lengths = st.one_of(
    st.integers(0, 16),
    st.sampled_from(EDGES).flatmap(lambda edge: st.integers(max(0, edge - 9), edge + 9)),
    st.integers(0, 3 * NOGIL_BYTES),
)


@settings(max_examples=150, deadline=None)
@given(n=lengths, seed=st.integers(0, 2**32), crc=st.integers(0, 2**32 - 1))
def test_compiled_and_twin_agree(n: int, seed: int, crc: int) -> None:
    data = random_bytes(n, seed)
    expected = twin.crc32c(data, crc)
    assert compiled.crc32c(data, crc) == expected
    assert compiled._crc32c_table(data, crc) == expected


@pytest.mark.parametrize("n", [(1 << 20) + 13, 3 * (1 << 20) + 5])
def test_compiled_and_twin_agree_on_large_inputs(n: int) -> None:
    data = random_bytes(n, seed=n)
    expected = twin.crc32c(data)
    assert compiled.crc32c(data) == expected
    assert compiled._crc32c_table(data) == expected
    assert compiled.crc32c(memoryview(data)[7:], compiled.crc32c(data[:7])) == expected


@settings(max_examples=100)
@given(data=st.binary(max_size=200), cut=st.integers(0, 200), crc=st.integers(0, 2**32 - 1))
def test_continuation(data: bytes, cut: int, crc: int) -> None:
    for impl in IMPLS.values():
        assert impl(data[cut:], impl(data[:cut], crc)) == impl(data, crc)


def test_threads_at_once() -> None:
    """Big inputs, checksummed without the GIL, from several threads at once."""
    buffers = [random_bytes(NOGIL_BYTES * 8 + i, seed=i) for i in range(4)]
    expected = [twin.crc32c(b) for b in buffers]
    results: dict[tuple[int, int], int] = {}

    def work(t: int) -> None:
        for i, b in enumerate(buffers):
            for _ in range(5):
                got = compiled.crc32c(bytearray(b)) if t % 2 else compiled._crc32c_table(b)
                results[(t, i)] = got

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {(t, i): expected[i] for t in range(4) for i in range(len(buffers))}


@pytest.mark.parametrize(
    "impl", [compiled.crc32c, compiled._crc32c_table], ids=["compiled", "compiled-table"]
)
def test_big_inputs_release_the_gil(impl: Crc) -> None:
    """While a thread checksums a bytearray of more than NOGIL_BYTES, this one can run: it finds
    the bytearray exported (so it cannot be resized), which it could never see if the GIL were
    held from taking the buffer to releasing it. Inputs up to NOGIL_BYTES keep the GIL, so they
    never show this (checked by hand: a 60,000-byte bytearray, 3 s, two million tries)."""
    buffer = bytearray(32 << 20)
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            impl(buffer)

    worker = threading.Thread(target=work)
    worker.start()
    seen_exported = False
    deadline = time.monotonic() + 30
    try:
        while not seen_exported and time.monotonic() < deadline:
            try:
                buffer.append(0)
                del buffer[-1]
            except BufferError:
                seen_exported = True
    finally:
        stop.set()
        worker.join()
    assert seen_exported


# --- (c) other implementations ---------------------------------------------------------------


def test_independent_aiokafka() -> None:
    """aiokafka's Cython CRC-32C (a test dependency), on many lengths and contents."""
    cutil = pytest.importorskip("aiokafka.record._crecords.cutil")
    for data, expected in KNOWN:
        assert cutil.crc32c_cython(data) == expected
    rng = random.Random(20261121)
    for n in [*range(0, 300), *range(NOGIL_BYTES - 20, NOGIL_BYTES + 20), 1 << 20, 5_000_003]:
        data = rng.randbytes(n)
        expected = cutil.crc32c_cython(data)
        assert compiled.crc32c(data) == expected
        assert compiled._crc32c_table(data) == expected
        if n <= 2 * NOGIL_BYTES:
            assert twin.crc32c(data) == expected


def test_independent_kafka_python() -> None:
    """kafka-python's pure-Python CRC-32C, written from another table (Google's)."""
    kafka_crc = pytest.importorskip("kafka.record._crc32c")
    for data, expected in KNOWN:
        assert kafka_crc.crc(data) == expected
    rng = random.Random(7)
    for n in [*range(0, 70), 4095, 4096, 4097, 20_000]:
        data = rng.randbytes(n)
        expected = kafka_crc.crc(data)
        for impl in IMPLS.values():
            assert impl(data) == expected


# --- (d) kinds of input ------------------------------------------------------------------------


class BytesSubclass(bytes):
    pass


class BytearraySubclass(bytearray):
    pass


def same_bytes(data: bytes) -> list[object]:
    """Objects that every implementation must read as exactly the bytes of data."""
    padded = b"xyz" + data + b"uvw"
    views: list[object] = [
        data,
        bytearray(data),
        BytesSubclass(data),
        BytearraySubclass(data),
        memoryview(data),
        memoryview(bytearray(data)),  # writable
        memoryview(bytearray(data)).toreadonly(),
        memoryview(padded)[3:-3],  # an unaligned slice
        memoryview(data).cast("b"),
        memoryview(data).cast("c"),
        memoryview(array.array("B", data)),
        memoryview(data)[::1],
    ]
    if len(data) % 2 == 0:
        views.append(memoryview(data).cast("B", (2, len(data) // 2)))  # C-contiguous 2-D
    return views


@pytest.mark.parametrize("impl", IMPLS.values(), ids=IMPLS.keys())
@pytest.mark.parametrize("n", [6, 9, 32, 64, twin.CHUNK + 10, NOGIL_BYTES + 2])
def test_kinds_of_input(impl: Crc, n: int) -> None:
    data = random_bytes(n, seed=n)
    expected = twin._update_bytes(twin.MASK32, memoryview(data)) ^ twin.MASK32
    for view in same_bytes(data):
        assert impl(view) == expected, view
        assert impl(view, 12345) == impl(data, 12345)


@pytest.mark.parametrize("impl", IMPLS.values(), ids=IMPLS.keys())
def test_odd_memoryviews(impl: Crc) -> None:
    zero_dim = memoryview(b"a").cast("B", ())
    assert impl(zero_dim) == impl(b"a") == 0xC1D04330
    assert impl(memoryview(b"")) == 0
    assert impl(memoryview(b"123456789")[3:3]) == 0
    assert impl(memoryview(b"123456789")[::-1][::-1]) == 0xE3069283  # strided twice: contiguous
    assert impl(memoryview(b"2")[::5], impl(b"1")) == impl(b"12")  # one item: contiguous


# --- (e) errors, the same from every implementation --------------------------------------------


def bad_inputs() -> dict[str, object]:
    released = memoryview(b"abc")
    released.release()
    grid = np.arange(12, dtype=np.uint8).reshape(3, 4)
    return {
        "str": "123456789",
        "None": None,
        "int": 12,
        "list": [1, 2, 3],
        "array": array.array("B", b"abc"),  # a buffer, but not bytes, bytearray or memoryview
        "ndarray": grid,
        "4-byte items": memoryview(array.array("I", [1, 2])),
        "empty 2-byte items": memoryview(array.array("H")),
        "every other byte": memoryview(b"abcdef")[::2],
        "reversed": memoryview(b"abcdef")[::-1],
        "empty strided": memoryview(b"abcdef")[6:][::2],  # not C-contiguous to memoryview
        "2-D strided": memoryview(grid[:, ::2]),
        "2-D Fortran order": memoryview(np.asfortranarray(grid)),
        "strided 4-byte items": memoryview(array.array("I", [1, 2, 3]))[::2],  # item size first
        "released": released,
    }


BAD_INPUTS = bad_inputs()


@pytest.mark.parametrize("bad", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_data_raises_the_same_error_everywhere(bad: object) -> None:
    results = {name: outcome(impl, bad) for name, impl in IMPLS.items()}
    assert results["twin"][0] in ("TypeError", "ValueError")
    assert results["compiled"] == results["twin"]
    assert results["compiled-table"] == results["twin"]


@pytest.mark.parametrize("impl", IMPLS.values(), ids=IMPLS.keys())
def test_errors(impl: Crc) -> None:
    with pytest.raises(TypeError, match="data must be bytes, bytearray or memoryview, not str"):
        impl("abc")
    with pytest.raises(TypeError, match="not a memoryview of format 'I'"):
        impl(memoryview(array.array("I", [1])))
    with pytest.raises(ValueError, match="data must be C-contiguous"):
        impl(memoryview(b"abcdef")[::2])
    with pytest.raises(ValueError, match="released memoryview"):
        released = memoryview(b"abc")
        released.release()
        impl(released)
    with pytest.raises(ValueError, match="crc must be between 0 and 4294967295, got -1"):
        impl(b"abc", -1)
    with pytest.raises(ValueError, match="crc must be between 0 and 4294967295, got 4294967296"):
        impl(b"abc", 2**32)
    with pytest.raises(TypeError):
        impl(b"abc", 1.0)
    with pytest.raises(TypeError):
        impl(b"abc", None)
    assert impl(b"abc", True) == impl(b"abc", 1)


@settings(max_examples=300)
@given(
    data=st.one_of(
        st.binary(max_size=8),
        st.text(max_size=3),
        st.integers(),
        st.none(),
        st.binary(max_size=8).map(bytearray),
        st.tuples(st.binary(min_size=1, max_size=8), st.integers(-3, 3)).map(
            lambda bs: memoryview(bs[0])[:: bs[1] or 1]
        ),
    ),
    crc=st.one_of(
        st.integers(-(2**64), 2**64), st.booleans(), st.floats(), st.none(), st.text(max_size=2)
    ),
)
def test_compiled_and_twin_agree_on_errors(data: object, crc: object) -> None:
    expected = outcome(twin.crc32c, data, crc)
    assert outcome(compiled.crc32c, data, crc) == expected
    assert outcome(compiled._crc32c_table, data, crc) == expected
