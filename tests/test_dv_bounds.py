"""A deletion vector costs a reader memory in proportion to its data file's rows, never to what
its bytes or its descriptor claim: run containers that overlap or lie past the end of the file,
a ``sizeInBytes`` of 2^40, a cardinality above the file's rows or a DV ending past the end of
its file are refused (a CorruptLogError naming the table, the data file and the DV) before
anything is expanded or read, by the scan, by row-level deletes and by the pure decoder."""

from __future__ import annotations

import base64
import json
import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import CorruptLogError
from deltacommit.protocol.deletion_vectors import (
    MAGIC,
    DeletionVectorDescriptor,
    check_descriptor,
    decode_bitmap_array,
    deleted_bits,
    encode_bitmap_array,
    max_serialized_size,
)

ROWS = 5
#: Memory a refusal may take; the unbounded decoder took hundreds of megabytes for these.
PEAK_LIMIT = 20 * 2**20


def _runs_bitmap(containers: list[tuple[int, list[tuple[int, int]]]]) -> bytes:
    """A RoaringBitmapArray of one bucket whose containers are run containers
    ``(key, [(start, length - 1), ...])``, written as given (overlaps and all)."""
    n = len(containers)
    out = bytearray(struct.pack("<iQI", MAGIC, 1, 0))
    out += struct.pack("<I", 12347 | ((n - 1) << 16)) + bytes([0xFF] * ((n + 7) // 8))
    bodies = []
    for key, runs in containers:
        card = min(65536, sum(length + 1 for _, length in runs))
        out += struct.pack("<HH", key, card - 1)
        bodies.append(struct.pack("<H", len(runs))
                      + b"".join(struct.pack("<HH", s, length) for s, length in runs))
    if n >= 4:
        offset = len(out) + 4 * n
        for b in bodies:
            out += struct.pack("<I", offset)
            offset += len(b)
    return bytes(out + b"".join(bodies))


#: Forged bitmaps and what the refusal says.
OVERLAPPING = _runs_bitmap([(0, [(0, 65535)] * 150)])            # 600 bytes, 9.8M rows
BEYOND = _runs_bitmap([(0, [(0, 3)])]                                   # 1.3 KB, 6.5M rows
                      + [(k, [(0, 65535)]) for k in range(1, 100)])
FOURTEEN_KB = _runs_bitmap([(k, [(0, 65535)]) for k in range(1000)])  # 14 KB, 65M rows


def _dv_table(tmp_path: Path) -> tuple[str, Path, dict[str, Any]]:
    """A table of one ``ROWS``-row file with a deletion vector; its last commit and the add."""
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": list(range(ROWS))}),
             configuration={"delta.enableDeletionVectors": "true"})
    dc.DeltaTable(uri).delete("id = 1")
    commit = sorted((Path(uri) / "_delta_log").glob("*.json"))[-1]
    add = next(json.loads(line)["add"] for line in commit.read_text().splitlines()
               if '"add"' in line)
    return uri, commit, add


def _forge(uri: str, commit: Path, change: Callable[[dict[str, Any]], None],
           bitmap: bytes | None = None) -> dict[str, Any]:
    """Rewrite the DV of ``commit``'s add: its descriptor through ``change`` and, with
    ``bitmap``, its DV file's content (size and CRC-32 made to match)."""
    lines = []
    dv: dict[str, Any] = {}
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        if "add" in action:
            dv = action["add"]["deletionVector"]
            if bitmap is not None:
                rel = DeletionVectorDescriptor.from_json(dv).relative_path()
                assert rel is not None
                (Path(uri) / rel).write_bytes(
                    b"\x01" + len(bitmap).to_bytes(4, "big") + bitmap
                    + zlib.crc32(bitmap).to_bytes(4, "big"))
                dv.update(offset=1, sizeInBytes=len(bitmap))
            change(dv)
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")
    return dv


CASES: list[tuple[str, bytes | None, dict[str, Any], str]] = [
    ("overlapping runs", OVERLAPPING, {"cardinality": 1}, "runs overlap"),
    ("containers past the end of the file", BEYOND, {"cardinality": 1},
     f"deletes row 131071 of a file of {ROWS} rows"),
    ("a 14 KB bitmap of run containers", FOURTEEN_KB, {"cardinality": 1},
     f"sizeInBytes {len(FOURTEEN_KB)} is more than a deletion vector of a file of {ROWS} rows"),
    ("sizeInBytes of 2^40", None, {"sizeInBytes": 2**40}, "sizeInBytes 1099511627776"),
    ("a cardinality above the file's rows", None, {"cardinality": 10**12},
     f"deletes 1000000000000 rows of a file of {ROWS} rows"),
    ("a DV ending past the end of its file", None, {"sizeInBytes": 4000},
     "ends past the end of the file"),
]


@pytest.mark.parametrize(("bitmap", "change", "refusal"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_forged_deletion_vector_is_refused_before_memory_is_spent(
        bitmap: bytes | None, change: dict[str, Any], refusal: str, tmp_path: Path) -> None:
    uri, commit, add = _dv_table(tmp_path)
    dv = _forge(uri, commit, lambda d: d.update(change), bitmap)
    name = (DeletionVectorDescriptor.from_json(dv).relative_path() or "")
    table = dc.DeltaTable(uri)
    for what in ("read", "delete"):
        error, message, peak = _traced_in_a_fresh_process(_ATTEMPT, uri, what)
        assert error == "CorruptLogError", (what, error, message)
        assert refusal in message, (what, message)
        assert f"table {table.uri}" in message and add["path"] in message, message
        assert "deletion vector" in message and name in message, message
        assert peak < PEAK_LIMIT, (what, peak)
    assert dc.DeltaTable(uri).version == table.version  # the delete committed nothing


#: Run in a fresh interpreter: tracemalloc traces the memory one attempt allocates, and must
#: not run beside other tests' threads (a Spark session's, pyarrow's), which it can crash.
#: Prints the error class (None), its message and the peak traced memory of ``attempt()``.
_TRACED = """
import json, tracemalloc
def traced(attempt):
    tracemalloc.start()
    try:
        attempt()
        error, message = None, ""
    except Exception as e:
        error, message = type(e).__name__, str(e)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(json.dumps([error, message, peak]))
"""

#: A read or a delete of a table, traced after one untraced attempt (the modules it loads
#: are not what it allocates).
_ATTEMPT = _TRACED + """
import sys
import deltacommit as dc
uri, what = sys.argv[1], sys.argv[2]
table = dc.DeltaTable(uri)
attempt = table.to_arrow if what == "read" else (lambda: table.delete("id = 3"))
try:
    attempt()
except Exception:
    pass
traced(attempt)
"""

#: A deletion vector's bitmap decoded, traced.
_DECODE = _TRACED + """
import base64, sys
from deltacommit.protocol.deletion_vectors import decode_bitmap_array, deleted_bits
bitmap, num_rows, decoder = base64.b64decode(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
traced(lambda: deleted_bits(bitmap, num_rows, "dv") if decoder == "deleted_bits"
       else decode_bitmap_array(bitmap, "dv", num_rows=num_rows))
"""


def _traced_in_a_fresh_process(script: str, *args: str) -> tuple[str | None, str, int]:
    """What ``script`` prints when run with ``args`` in a fresh interpreter: the error class
    (None), its message and the peak of memory tracemalloc traced."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                          text=True, timeout=120, check=True)
    error, message, peak = json.loads(done.stdout.strip().splitlines()[-1])
    return error, message, int(peak)


def test_check_descriptor_bounds_by_the_files_rows() -> None:
    dv = DeletionVectorDescriptor("u", "x" * 20, 40, 2)
    check_descriptor(dv, 2, "f")
    for bad, match in ((DeletionVectorDescriptor("u", "x" * 20, 40, 3), "deletes 3 rows"),
                       (DeletionVectorDescriptor("u", "x" * 20, 40, 1, max_row_index=2),
                        "maxRowIndex 2"),
                       (DeletionVectorDescriptor("u", "x" * 20, max_serialized_size(2) + 1, 1),
                        "sizeInBytes")):
        with pytest.raises(CorruptLogError, match=match):
            check_descriptor(bad, 2, "f")


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(0, 300_000), max_size=400), st.integers(1, 70_000),
       st.booleans())
def test_every_bitmap_of_a_files_rows_fits_the_size_bound(rows: set[int], extra: int,
                                                          bitmap_containers: bool) -> None:
    num_rows = max(rows, default=0) + extra
    if bitmap_containers:  # every container a bitmap: the largest a writer makes
        rows |= set(range(0, num_rows, 13))
    data = encode_bitmap_array(sorted(rows))
    assert len(data) <= max_serialized_size(num_rows)
    assert decode_bitmap_array(data, num_rows=num_rows).tolist() == sorted(rows)
    assert deleted_bits(data, num_rows)[1] == len(rows)


@pytest.mark.parametrize(("bitmap", "refusal"), [
    (OVERLAPPING, "runs overlap"), (BEYOND, "deletes row 131071 of a file of 5 rows"),
    (_runs_bitmap([(3, [(0, 1)]), (2, [(0, 1)])]), "out of order"),
    (_runs_bitmap([(0, [(10, 5), (4, 1)])]), "runs overlap or are out of order"),
])
def test_the_decoder_checks_every_container_before_expanding_any(bitmap: bytes,
                                                                 refusal: str) -> None:
    num_rows = 2**20 if "order" in refusal else ROWS
    for decoder in ("decode_bitmap_array", "deleted_bits"):
        error, message, peak = _traced_in_a_fresh_process(
            _DECODE, base64.b64encode(bitmap).decode(), str(num_rows), decoder)
        assert error == "CorruptLogError" and re.search(refusal, message), (decoder, message)
        assert peak < PEAK_LIMIT
    assert np.array_equal(decode_bitmap_array(_runs_bitmap([(0, [(1, 2)])]), num_rows=4),
                          np.array([1, 2, 3], np.uint64))
