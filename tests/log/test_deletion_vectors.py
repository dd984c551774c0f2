"""Deletion vectors: Z85, descriptors, the RoaringBitmapArray format and DV files."""

from __future__ import annotations

import struct
import uuid
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.errors import CorruptLogError
from deltacommit.protocol.deletion_vectors import (
    MAGIC,
    DeletionVectorDescriptor,
    decode_bitmap_array,
    deleted_bits,
    deleted_mask,
    encode_bitmap_array,
    encode_file,
    extract_from_file,
    relative_dv_path_or_inline,
    z85_decode,
    z85_encode,
)

DATA = Path(__file__).resolve().parents[1] / "data"


def _runs_encoder(values: list[int]) -> bytes:
    """A test-only RoaringBitmapArray encoder that uses run containers for every container
    (cookie 12347 with its run flags, offsets only from 4 containers on), as Java's
    ``runOptimize`` writes them, so that the decoder's run path is exercised."""
    rows = sorted(set(values))
    buckets: dict[int, list[int]] = {}
    for r in rows:
        buckets.setdefault(r >> 32, []).append(r & 0xFFFFFFFF)
    out = bytearray(struct.pack("<iQ", MAGIC, len(buckets)))
    for key, lows in sorted(buckets.items()):
        out += struct.pack("<I", key)
        containers: dict[int, list[int]] = {}
        for v in lows:
            containers.setdefault(v >> 16, []).append(v & 0xFFFF)
        n = len(containers)
        out += struct.pack("<I", 12347 | ((n - 1) << 16))
        out += bytes([0xFF] * ((n + 7) // 8))
        bodies = []
        for ckey, cvals in sorted(containers.items()):
            out += struct.pack("<HH", ckey, len(cvals) - 1)
            runs: list[tuple[int, int]] = []
            for v in cvals:
                if runs and runs[-1][0] + runs[-1][1] + 1 == v:
                    runs[-1] = (runs[-1][0], runs[-1][1] + 1)
                else:
                    runs.append((v, 0))
            bodies.append(struct.pack("<H", len(runs)) + b"".join(struct.pack("<HH", *r) for r in runs))
        if n >= 4:
            offset = len(out) + 4 * n  # the decoder skips offsets; any values do
            for b in bodies:
                out += struct.pack("<I", offset)
                offset += len(b)
        out += b"".join(bodies)
    return bytes(out)


row_sets = st.one_of(
    st.sets(st.integers(0, 200_000), max_size=300),
    st.sets(st.integers(0, 2**40), max_size=50),
    st.builds(lambda start, n: set(range(start, start + n)), st.integers(0, 100_000),
              st.integers(0, 20_000)),
)


@settings(max_examples=60, deadline=None)
@given(row_sets)
def test_encoder_round_trips(rows: set[int]) -> None:
    assert decode_bitmap_array(encode_bitmap_array(list(rows)),
                               num_rows=max(rows, default=0) + 1).tolist() == sorted(rows)


@settings(max_examples=60, deadline=None)
@given(row_sets)
def test_run_containers_decode(rows: set[int]) -> None:
    if not rows:
        return
    assert decode_bitmap_array(_runs_encoder(list(rows)),
                               num_rows=max(rows) + 1).tolist() == sorted(rows)


small_row_sets = st.one_of(
    st.sets(st.integers(0, 200_000), max_size=300),
    st.builds(lambda start, n: set(range(start, start + n)), st.integers(0, 100_000),
              st.integers(0, 20_000)),          # bitmap containers, or long runs
)


@settings(max_examples=60, deadline=None)
@given(small_row_sets, st.integers(1, 70_000), st.booleans())
def test_deleted_bits_are_the_mask_of_the_decoded_rows(rows: set[int], extra: int,
                                                       runs: bool) -> None:
    # The scan's mask, made from the containers as they are, equals the mask of the rows
    # the decoder lists, for array, bitmap and run containers and any file length.
    data = _runs_encoder(list(rows)) if runs and rows else encode_bitmap_array(list(rows))
    num_rows = max(rows, default=0) + extra
    bits, count = deleted_bits(data, num_rows)
    expected = np.packbits(deleted_mask(decode_bitmap_array(data, num_rows=num_rows), num_rows),
                           bitorder="little")
    assert bits.tolist() == expected.tolist()
    assert count == len(rows)


@pytest.mark.parametrize("runs", [False, True])
def test_deleted_bits_refuse_a_row_past_the_end_of_the_file(runs: bool) -> None:
    for rows in ([3, 9], [3, 70_000], [3, 2**33], list(range(10_000, 20_001))):
        data = _runs_encoder(rows) if runs else encode_bitmap_array(rows)
        with pytest.raises(CorruptLogError, match=f"deletes row {max(rows)} of a file of "
                                                  f"{max(rows)} rows"):
            deleted_bits(data, max(rows))
    assert deleted_bits(encode_bitmap_array([]), 0)[1] == 0


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sets(st.integers(0, 70_000), max_size=100), min_size=1, max_size=4))
def test_file_format_holds_several_dvs_with_checksums(sets: list[set[int]]) -> None:
    blobs = [encode_bitmap_array(sorted(s)) for s in sets]
    content, offsets = encode_file(blobs)
    for s, blob, off in zip(sets, blobs, offsets, strict=True):
        dv = DeletionVectorDescriptor("u", "x" * 20, len(blob), len(s), off)
        assert decode_bitmap_array(extract_from_file(content, dv, "f"),
                                   num_rows=70_001).tolist() == sorted(s)


def test_file_checks_version_size_and_crc() -> None:
    blob = encode_bitmap_array([1, 5])
    content, [off] = encode_file([blob])
    dv = DeletionVectorDescriptor("u", "x" * 20, len(blob), 2, off)
    with pytest.raises(CorruptLogError, match="format version 2"):
        extract_from_file(b"\x02" + content[1:], dv, "f")
    with pytest.raises(CorruptLogError, match="its descriptor says 99"):
        extract_from_file(content, DeletionVectorDescriptor("u", "x" * 20, 99, 2, off), "f")
    bad = bytearray(content)
    bad[-5] ^= 1
    with pytest.raises(CorruptLogError, match="CRC-32"):
        extract_from_file(bytes(bad), dv, "f")
    with pytest.raises(CorruptLogError, match="magic number"):
        decode_bitmap_array(b"\0" * 12, num_rows=10)
    with pytest.raises(CorruptLogError, match="truncated"):
        decode_bitmap_array(blob[:-1], num_rows=10)


@given(st.binary(max_size=40).map(lambda b: b[: len(b) - len(b) % 4]))
def test_z85_round_trip(data: bytes) -> None:
    assert z85_decode(z85_encode(data)) == data


def test_z85_matches_the_specification_example() -> None:
    assert z85_encode(bytes.fromhex("864FD26FB559F75B")) == "HelloWorld"
    with pytest.raises(CorruptLogError, match="not a Z85 character"):
        z85_decode("Hello\"orld")


def test_protocol_examples() -> None:
    # PROTOCOL.md "Deletion Vector Descriptor Schema", JSON examples 1 and 3.
    u = DeletionVectorDescriptor.from_json({"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                                            "offset": 4, "sizeInBytes": 40, "cardinality": 6})
    assert u.relative_path() == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert u.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"
    i = DeletionVectorDescriptor.from_json({
        "storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        "sizeInBytes": 40, "cardinality": 6})
    assert decode_bitmap_array(i.inline_bytes(), num_rows=30).tolist() == [3, 4, 7, 11, 18, 29]
    bits, count = deleted_bits(i.inline_bytes(), 30)
    assert np.flatnonzero(np.unpackbits(bits, bitorder="little")).tolist() == [3, 4, 7, 11, 18, 29]
    assert count == 6
    assert i.unique_id == "iwi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"
    uid = uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    assert relative_dv_path_or_inline("ab", uid) == "ab^-aqEH.-t@S}K{vb[*k^"
    assert DeletionVectorDescriptor.from_json(u.to_json()) == u
    with pytest.raises(CorruptLogError, match="storageType 'x'"):
        DeletionVectorDescriptor.from_json({**u.to_json(), "storageType": "x"})


def test_mask() -> None:
    m = deleted_mask(np.array([0, 3], np.uint64), 5)
    assert m.tolist() == [True, False, False, True, False]
    with pytest.raises(CorruptLogError, match="row 9 of a file of 5 rows"):
        deleted_mask(np.array([9], np.uint64), 5)


@pytest.mark.parametrize("table", ["kernel/table-with-dv-small", "kernel/with-short-dv",
                                   "delta-golden/dv-partitioned-with-checkpoint"])
def test_real_dv_files_decode_to_their_cardinality_and_reencode_identically(table: str) -> None:
    import json

    root = DATA / table
    seen = 0
    for commit in sorted((root / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            if not add or not add.get("deletionVector"):
                continue
            dv = DeletionVectorDescriptor.from_json(add["deletionVector"])
            rel = dv.relative_path()
            assert rel is not None
            content = (root / rel).read_bytes()
            data = extract_from_file(content, dv, rel)
            assert zlib.crc32(data) == int.from_bytes(content[(dv.offset or 0) + 4 + len(data):][:4], "big")
            rows = decode_bitmap_array(data, num_rows=2**63)
            assert len(rows) == dv.cardinality
            assert encode_bitmap_array(rows) == data
            seen += 1
    assert seen
