"""Kafka's coordinator partition: known answers, compiled against twin, and against Java itself.

Runs whatever FASTCOORD_NO_EXTENSIONS says: both modules are imported directly, and
fastcoord.partition_for is whichever of them is selected.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastcoord
from fastcoord import _accel
from fastcoord._ext import partition as compiled  # type: ignore[attr-defined]
from fastcoord.core import partition as twin

IMPLS: list[ModuleType] = [compiled, twin]
MAX_PARTITIONS = 2**31 - 1

# (group id, String.hashCode, partition for 50). The first five are from the brief; the
# rest were printed by Java 17 (String.hashCode, then Utils.abs(h) % 50).
KNOWN: list[tuple[str, int, int]] = [
    ("polygenelubricants", -(2**31), 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    ("my-group", -1906497762, 12),
    ("console-consumer-1", 35782224, 24),
    ("\U0001f600", 1772899, 49),  # one emoji, a surrogate pair in Java
    ("", 0, 0),
    ("a", 97, 47),
    ("test-group", 627841412, 12),
    ("__consumer_offsets", -970371369, 19),
    ("connect-cluster", 1440343063, 13),
    ("my-group-\u00e9", 1806687738, 38),
    ("\u65e5\u672c\u8a9e\u30b0\u30eb\u30fc\u30d7", -305235731, 31),
    ("\ud800", 55296, 46),  # a lone high surrogate is one code unit
    ("x\udfff", 61063, 13),  # a lone low surrogate
    ("group-\U0001f680-1", -1358329515, 15),
    ("\uffff", 65535, 35),
    ("\x00", 0, 0),
    ("\ud83d\ude00", 1772899, 49),  # the emoji's pair as two code points: same code units
]

# (group id, partitions, partition), from the same Java run.
KNOWN_OTHER_COUNTS: list[tuple[str, int, int]] = [
    ("my-group", 1, 0),
    ("my-group", MAX_PARTITIONS, 1906497762),
    ("polygenelubricants", MAX_PARTITIONS, 0),
    ("test-group", 7, 2),
    ("__consumer_offsets", 1000, 369),
    ("\u65e5\u672c\u8a9e\u30b0\u30eb\u30fc\u30d7", MAX_PARTITIONS, 305235731),
    ("group-\U0001f680-1", 1000, 515),
    ("\U0001f600", 7, 2),
]


def impl_id(module: ModuleType) -> str:
    return "compiled" if module is compiled else "twin"


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """The result, or the error's type and text, so that two implementations can be compared."""
    try:
        result = fn(*args)
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))
    if isinstance(result, np.ndarray):
        return ("ok", (result.dtype.str, result.tolist()))
    return ("ok", result)


# --- (a) known answers ---------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS, ids=impl_id)
@pytest.mark.parametrize(("group_id", "hash_code", "partition"), KNOWN)
def test_known_answers(impl: ModuleType, group_id: str, hash_code: int, partition: int) -> None:
    assert impl.java_hash_code(group_id) == hash_code
    assert impl.partition_for(group_id) == partition
    assert impl.partition_for(group_id, 50) == partition


@pytest.mark.parametrize("impl", IMPLS, ids=impl_id)
@pytest.mark.parametrize(("group_id", "partitions", "partition"), KNOWN_OTHER_COUNTS)
def test_known_answers_other_counts(
    impl: ModuleType, group_id: str, partitions: int, partition: int
) -> None:
    assert impl.partition_for(group_id, partitions) == partition
    assert impl.partitions_for([group_id], partitions).tolist() == [partition]


@pytest.mark.parametrize("impl", IMPLS, ids=impl_id)
def test_known_answers_batch(impl: ModuleType) -> None:
    result = impl.partitions_for([group_id for group_id, _, _ in KNOWN])
    assert isinstance(result, np.ndarray)
    assert result.dtype == np.int32
    assert result.shape == (len(KNOWN),)
    assert result.tolist() == [partition for _, _, partition in KNOWN]


@pytest.mark.parametrize("impl", IMPLS, ids=impl_id)
def test_batch_of_nothing_and_of_other_iterables(impl: ModuleType) -> None:
    empty = impl.partitions_for([])
    assert empty.dtype == np.int32
    assert empty.shape == (0,)
    assert impl.partitions_for(("my-group", "a"), 50).tolist() == [12, 47]
    assert impl.partitions_for(iter(["my-group", "a"])).tolist() == [12, 47]


def test_package_exports_the_selected_implementation() -> None:
    assert "partition_for" in fastcoord.__all__
    expected = twin if _accel.NO_EXTENSIONS else compiled
    assert fastcoord.partition_for is expected.partition_for
    for group_id, _, partition in KNOWN:
        assert fastcoord.partition_for(group_id) == partition
    for group_id, partitions, partition in KNOWN_OTHER_COUNTS:
        assert fastcoord.partition_for(group_id, partitions) == partition


def test_str_subclass_hashes_as_its_text() -> None:
    class GroupId(str):
        pass

    for impl in IMPLS:
        assert impl.java_hash_code(GroupId("my-group")) == -1906497762
        assert impl.partition_for(GroupId("\U0001f600")) == 49
        assert impl.partitions_for([GroupId("my-group")]).tolist() == [12]


# --- (b) compiled and twin agree -------------------------------------------------------------

# st.text() leaves out surrogates; characters(codec=None, categories=None) draws them too, and
# sampled_from puts pairs of them (valid or not) side by side often enough to matter.
texts = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec=None, categories=None)),
    st.text(
        alphabet=st.one_of(
            st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
            st.characters(min_codepoint=0x10000),
            st.sampled_from("ab\u00e9\uffff"),
        )
    ),
)
partition_counts = st.integers(1, 1000)


@settings(max_examples=500)
@given(s=texts, partitions=partition_counts)
def test_compiled_and_twin_agree(s: str, partitions: int) -> None:
    assert compiled.java_hash_code(s) == twin.java_hash_code(s)
    assert compiled.partition_for(s, partitions) == twin.partition_for(s, partitions)
    assert fastcoord.partition_for(s, partitions) == twin.partition_for(s, partitions)
    assert compiled.partition_for(s) == twin.partition_for(s)


@settings(max_examples=200)
@given(ids=st.lists(texts, max_size=20), partitions=partition_counts)
def test_compiled_and_twin_agree_on_batches(ids: list[str], partitions: int) -> None:
    result = compiled.partitions_for(ids, partitions)
    assert result.dtype == np.int32
    assert result.tolist() == twin.partitions_for(ids, partitions).tolist()
    assert result.tolist() == [twin.partition_for(s, partitions) for s in ids]


@settings(max_examples=200)
@given(
    s=st.one_of(st.text(max_size=3), st.integers(), st.binary(max_size=3), st.none()),
    partitions=st.one_of(
        st.integers(-(2**64), 2**64), st.booleans(), st.floats(), st.text(max_size=2)
    ),
)
def test_compiled_and_twin_agree_on_errors(s: object, partitions: object) -> None:
    for name in ("partition_for", "partitions_for"):
        args = (s, partitions) if name == "partition_for" else ([s], partitions)
        assert outcome(getattr(compiled, name), *args) == outcome(getattr(twin, name), *args)
    assert outcome(compiled.java_hash_code, s) == outcome(twin.java_hash_code, s)


# --- (c) against Java itself -----------------------------------------------------------------

JAVA_SOURCE = """\
import java.nio.file.Files;
import java.nio.file.Paths;

public class KafkaPartition {
    // org.apache.kafka.common.utils.Utils.abs
    static int abs(int n) {
        return (n == Integer.MIN_VALUE) ? 0 : Math.abs(n);
    }

    // Each input line: the partition count, a space, then the string's UTF-16 code units as
    // four hex digits each. Each output line: hashCode(), a space, the coordinator partition.
    public static void main(String[] args) throws Exception {
        StringBuilder out = new StringBuilder();
        for (String line : Files.readAllLines(Paths.get(args[0]))) {
            int space = line.indexOf(' ');
            int partitions = Integer.parseInt(line.substring(0, space));
            String hex = line.substring(space + 1);
            char[] units = new char[hex.length() / 4];
            for (int i = 0; i < units.length; i++) {
                units[i] = (char) Integer.parseInt(hex.substring(4 * i, 4 * i + 4), 16);
            }
            int h = new String(units).hashCode();
            out.append(h).append(' ').append(abs(h) % partitions).append('\\n');
        }
        System.out.print(out);
    }
}
"""


def utf16_code_units(s: str) -> list[int]:
    """The code units Java holds for s, found from the code points (not by the twin's codec)."""
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp > 0xFFFF:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    return units


def random_strings(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabets: list[Callable[[], int]] = [
        lambda: rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789-_."),  # group-id-like
        lambda: rng.randrange(0x20, 0x7F),  # printable ASCII
        lambda: rng.randrange(0x00, 0x100),  # Latin-1, controls included
        lambda: rng.randrange(0x100, 0x10000),  # rest of the BMP, surrogates included
        lambda: rng.randrange(0xD800, 0xE000),  # lone surrogates, paired or not by chance
        lambda: rng.randrange(0x1F300, 0x1FB00),  # emoji
        lambda: rng.randrange(0x10000, 0x110000),  # any supplementary code point
    ]
    strings: list[str] = []
    for _ in range(count):
        length = rng.choice([rng.randrange(0, 8), rng.randrange(8, 40), rng.randrange(40, 300)])
        mix = rng.sample(alphabets, rng.randrange(1, len(alphabets) + 1))
        strings.append("".join(chr(rng.choice(mix)()) for _ in range(length)))
    return strings


def java_answers(tmp_path: Path, cases: list[tuple[str, int]]) -> list[tuple[int, int]]:
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.skip("javac and java are not on PATH: cannot compare with Java's String.hashCode")
    (tmp_path / "KafkaPartition.java").write_text(JAVA_SOURCE)
    subprocess.run([javac, "KafkaPartition.java"], cwd=tmp_path, check=True, timeout=120)
    lines = [
        f"{partitions} " + "".join(f"{unit:04x}" for unit in utf16_code_units(s))
        for s, partitions in cases
    ]
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n", encoding="ascii")
    run = subprocess.run(
        [java, "-cp", str(tmp_path), "KafkaPartition", "input.txt"],
        cwd=tmp_path,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    answers = [tuple(int(field) for field in line.split()) for line in run.stdout.splitlines()]
    assert len(answers) == len(cases)
    return [(h, p) for h, p in answers]


def test_agrees_with_java(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    strings = [group_id for group_id, _, _ in KNOWN] + random_strings(2500, seed=20261121)
    counts = [50, 1, 7, 1000, MAX_PARTITIONS]
    cases = [
        (s, rng.choice(counts) if rng.random() < 0.5 else rng.randint(1, 1000)) for s in strings
    ]
    cases += [(group_id, 50) for group_id, _, _ in KNOWN]
    cases += [(group_id, partitions) for group_id, partitions, _ in KNOWN_OTHER_COUNTS]
    assert sum(any(0xD800 <= ord(ch) < 0xE000 for ch in s) for s, _ in cases) > 100
    assert sum(any(ord(ch) > 0xFFFF for ch in s) for s, _ in cases) > 100

    answers = java_answers(tmp_path, cases)

    for group_id, hash_code, partition in KNOWN:
        assert (group_id, 50) in cases
        assert answers[cases.index((group_id, 50))] == (hash_code, partition)
    for impl in IMPLS:
        got = [
            (impl.java_hash_code(s), impl.partition_for(s, partitions)) for s, partitions in cases
        ]
        mismatches = [(c, g, a) for c, g, a in zip(cases, got, answers, strict=True) if g != a]
        assert not mismatches, f"{impl_id(impl)} disagrees with Java: {mismatches[:5]}"
        by_count: dict[int, list[int]] = {}
        for i, (_, partitions) in enumerate(cases):
            by_count.setdefault(partitions, []).append(i)
        for partitions, indexes in by_count.items():
            batch = impl.partitions_for([cases[i][0] for i in indexes], partitions)
            assert batch.tolist() == [answers[i][1] for i in indexes]
    assert [fastcoord.partition_for(s, p) for s, p in cases] == [p for _, p in answers]


# --- (d) partition counts ----------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS, ids=impl_id)
@pytest.mark.parametrize("partitions", [0, -1, -50, MAX_PARTITIONS + 1, 2**64])
def test_partitions_below_one_or_above_int_max_raise(impl: ModuleType, partitions: int) -> None:
    with pytest.raises(ValueError, match="partitions must be between 1 and 2147483647"):
        impl.partition_for("my-group", partitions)
    with pytest.raises(ValueError, match="partitions must be between 1 and 2147483647"):
        impl.partitions_for(["my-group"], partitions)
    with pytest.raises(ValueError, match="partitions must be between 1 and 2147483647"):
        impl.partitions_for([], partitions)


def test_package_export_rejects_partitions_below_one() -> None:
    with pytest.raises(ValueError):
        fastcoord.partition_for("my-group", 0)


@pytest.mark.parametrize("impl", IMPLS, ids=impl_id)
def test_non_strings_raise_type_error(impl: ModuleType) -> None:
    with pytest.raises(TypeError, match="group_id must be str, not bytes"):
        impl.partition_for(b"my-group")
    with pytest.raises(TypeError, match="s must be str, not NoneType"):
        impl.java_hash_code(None)
    with pytest.raises(TypeError, match=r"group_ids\[1\] must be str, not int"):
        impl.partitions_for(["my-group", 7])
    with pytest.raises(TypeError, match="not a str"):
        impl.partitions_for("my-group")
    with pytest.raises(TypeError):
        impl.partition_for("my-group", 50.0)
