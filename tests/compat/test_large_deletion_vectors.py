"""Deletion vectors on files of many rows, read by the newest deltalake (1.6.6).

deltalake 1.6.0's query engine applies a file's deletion vector batch by batch, and when a
file's rows arrive in more than one batch (more than 8,192 rows) it may apply the mask to the
wrong rows: a deleted row comes back and a live one goes, differently from run to run
(delta-rs pull request 4692, "preserve row order in deletion vector scans", fixed by 1.6.6).
The tests that compare with 1.6.0 (``tests/delta_tables.peer_read``) keep their deletion
vectors on files of a few hundred rows; this one proves deltacommit's deletion vectors on
files of 20,000 rows, several batches each, with the peer that reads them right.  Their ``id``
column is DELTA_BINARY_PACKED (``io.integer_encodings``), so the newest peer reads that
encoding here too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow as pa

import deltacommit as dc
from deltacommit.io.integer_encodings import MIN_ROWS
from deltacommit.protocol.partitions import decode_add_path
from tests.test_integer_encodings import DELTA, encodings

READ = """
import json, sys
import deltalake, pyarrow as pa
t = deltalake.DeltaTable(sys.argv[1])
rows = pa.table(deltalake.QueryBuilder().register("t", t).execute("select id, s from t").read_all())
print(json.dumps(sorted(([r["id"], r["s"]] for r in rows.to_pylist()),
                        key=lambda r: (r[0], r[1] or ""))))
"""


def test_deletion_vectors_on_large_files_read_the_same_by_the_newest_deltalake(
        tmp_path: Path, deltalake_latest: Path) -> None:
    uri = str(tmp_path / "t")
    n = 20_000
    for k in range(3):
        ids = list(range(k * n, (k + 1) * n))
        dc.write(uri, pa.table({"id": pa.array(ids, pa.int64()),
                                "s": pa.array([None if i % 7 == 0 else f"s{i % 5}" for i in ids])}))
    t = dc.DeltaTable(uri)
    t.set_properties({"delta.enableDeletionVectors": "true"})
    dc.DeltaTable(uri).delete("s = 's1'")
    dc.DeltaTable(uri).delete("id % 11 = 3")  # a second vector over the first, per file
    dc.DeltaTable(uri).update({"s": "'u'"}, predicate="id % 13 = 0")
    files = dc.DeltaTable(uri).files()
    assert sum(1 for a in files if a.deletion_vector) >= 3
    large = [a for a in files if (a.num_records() or 0) >= MIN_ROWS]
    assert len(large) == 3
    assert all(DELTA in encodings(str(Path(uri) / decode_add_path(a.path)))["id"]
               for a in large)
    ours = sorted([r["id"], r["s"]] for r in dc.DeltaTable(uri).to_arrow().to_pylist())
    expected = sorted([i, "u" if i % 13 == 0 else None if i % 7 == 0 else f"s{i % 5}"]
                      for i in range(3 * n) if not ((i % 7 and i % 5 == 1) or i % 11 == 3))
    assert ours == expected
    done = subprocess.run([str(deltalake_latest), "-c", READ, uri], capture_output=True,
                          text=True, check=True)
    assert json.loads(done.stdout) == expected
