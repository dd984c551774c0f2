"""Tables with deletion vectors: Delta's golden and delta-kernel-rs test tables (written by
Spark and Databricks), read, appended to, overwritten, checkpointed and vacuumed, each result
compared with what deltalake 1.6.0 reads of the same table."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.errors import ConcurrentAppendException, CorruptLogError
from deltacommit.io.deletion_vectors import deleted_rows, keep_mask, kept_rows
from deltacommit.protocol.actions import Add, Protocol
from deltacommit.protocol.deletion_vectors import (
    encode_bitmap_array,
    encode_file,
    relative_dv_path_or_inline,
    z85_encode,
)
from deltacommit.protocol.log.paths import parse_location
from tests.delta_tables import DATA, copy_table, peer_read

DV_TABLES = ["delta-golden/dv-partitioned-with-checkpoint", "delta-golden/log-replay-dv-key-cases",
             "kernel/table-with-dv-small", "kernel/with-short-dv", "kernel/cdf-table-with-dv",
             "kernel/cdf-table-with-cdc-and-dvs"]


def _rows(t: pa.Table, columns: list[str] | None = None) -> list[str]:
    t = t.select(columns or sorted(t.column_names))
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in t.to_pylist())


@pytest.mark.parametrize("name", DV_TABLES)
def test_a_scans_mask_keeps_the_rows_the_deletion_vector_does_not_list(name: str) -> None:
    # The mask made from the bitmap's containers (kept_rows) against the one made from the
    # listed rows (deleted_rows), on DVs written by Spark and Databricks (of every version).
    t = dc.DeltaTable(str(DATA / name))
    root = parse_location(t.uri)
    seen = 0
    adds = {(a.path, json.dumps(a.deletion_vector, sort_keys=True)): a
            for v in range(t.version + 1) for a in dc.DeltaTable(t.uri, version=v).files()
            if a.deletion_vector}
    for a in adds.values():
        assert a.deletion_vector is not None
        num_rows = pq.ParquetFile(str(DATA / name / unquote(a.path))).metadata.num_rows
        for n in (num_rows, num_rows + 3):     # a length that ends inside a byte, too
            try:
                rows = deleted_rows(t.log_store.store, root, t.uri, a.deletion_vector,
                                    data_file=a.path, num_rows=n)
            except CorruptLogError:  # one refused as corrupt (compat/corpus.py, DIVERGENT)
                with pytest.raises(CorruptLogError):
                    kept_rows(t.log_store.store, root, t.uri, a.deletion_vector,
                              data_file=a.path, num_rows=n)
                continue
            got = kept_rows(t.log_store.store, root, t.uri, a.deletion_vector,
                            data_file=a.path, num_rows=n)
            assert got.equals(keep_mask(rows, n, a.path))
            padding = np.unpackbits(np.frombuffer(got.buffers()[1], np.uint8),
                                    bitorder="little")[n:]
            assert not padding.any()
        seen += 1
    assert seen


@pytest.mark.parametrize("name", DV_TABLES)
def test_reads_real_dv_tables_as_deltalake_does(name: str) -> None:
    uri = str(DATA / name)
    ours = dc.DeltaTable(uri).to_arrow()
    theirs = peer_read(uri)
    assert _rows(ours) == _rows(theirs, ours.column_names)
    assert ours.num_rows == theirs.num_rows


@pytest.mark.parametrize(("name", "column", "expected"), [
    ("kernel/table-with-dv-small", "value", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("kernel/with-short-dv", "id", [3, 4, 5, 6, 7, 8, 9]),
])
def test_matches_the_rows_the_kernel_expects(name: str, column: str, expected: list[int]) -> None:
    # The expected rows shipped with delta-kernel-rs (tests/data/kernel/expected/).
    text = (DATA / "kernel" / "expected" / f"{name.split('/')[1]}.expected").read_text()
    assert all(f"  {v}," in text or f"  {v}\n" in text for v in expected)
    assert sorted(dc.DeltaTable(str(DATA / name)).to_arrow().column(column).to_pylist()) == expected


def test_time_travel_before_the_dv_was_written() -> None:
    t = dc.DeltaTable(str(DATA / "kernel/table-with-dv-small"), version=0)
    assert sorted(t.to_arrow().column("value").to_pylist()) == list(range(10))


def test_append_partition_overwrite_and_checkpoint_on_a_copy(tmp_path: Path) -> None:
    uri = copy_table("delta-golden/dv-partitioned-with-checkpoint", tmp_path)
    before = dc.DeltaTable(uri).to_arrow()
    schema = before.schema
    appended = pa.table({"part": [1, 7], "col1": [1000, 1001], "col2": ["new", "new"]}).cast(schema)
    dc.write(uri, appended)
    part0 = pa.table({"part": [0, 0], "col1": [2000, 2001], "col2": ["o", "o"]}).cast(schema)
    dc.write(uri, part0, mode="overwrite", predicate="part = 0")
    kept = before.filter(pa.compute.not_equal(before.column("part"), 0))
    expected = _rows(pa.concat_tables([kept, appended, part0]))
    ours = dc.DeltaTable(uri)
    assert _rows(ours.to_arrow()) == expected
    assert _rows(peer_read(uri), schema.names) == expected
    # The removes of part 0 carry the DVs of the adds they remove, so no DV'd file survives.
    assert not [a for a in ours.files() if a.partition_values["part"] == "0" and a.deletion_vector]
    # Our checkpoint keeps the deletion vectors; both readers agree after it.
    ours.checkpoint()
    assert _rows(dc.DeltaTable(uri).to_arrow()) == expected
    assert _rows(peer_read(uri), schema.names) == expected


def test_vacuum_keeps_referenced_dv_files(tmp_path: Path) -> None:
    uri = copy_table("kernel/table-with-dv-small", tmp_path)
    stray = Path(uri) / f"deletion_vector_{uuid.uuid4()}.bin"
    stray.write_bytes(b"\x01")
    # An hour old: vacuum keeps files as new as its cut-off, which a file written in the same
    # millisecond as the vacuum would be.
    old = time.time() - 3600
    os.utime(stray, (old, old))
    t = dc.DeltaTable(uri)
    deleted = t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    assert deleted == [stray.name]
    assert (Path(uri) / "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin").exists()
    assert sorted(dc.DeltaTable(uri).to_arrow().column("value").to_pylist()) == list(range(1, 9))


def _dv_table(tmp_path: Path) -> tuple[str, Add]:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": list(range(100)), "p": ["a"] * 100}), partition_by=["p"])
    t = dc.DeltaTable(uri)
    [add] = t.files()
    return uri, add


@pytest.mark.parametrize("storage", ["u", "u-prefixed", "i", "p"])
def test_each_storage_type_is_applied_by_both_readers(tmp_path: Path, storage: str) -> None:
    uri, add = _dv_table(tmp_path)
    deleted = [0, 5, 6, 7, 50, 99]
    bitmap = encode_bitmap_array(deleted)
    dv: dict[str, Any] = {"sizeInBytes": len(bitmap), "cardinality": len(deleted)}
    if storage == "i":
        dv |= {"storageType": "i", "pathOrInlineDv": z85_encode(bitmap)}
    else:
        content, [offset] = encode_file([bitmap])
        uid = uuid.uuid4()
        prefix = "ab" if storage == "u-prefixed" else ""
        name = f"deletion_vector_{uid}.bin"
        (Path(uri) / prefix).mkdir(exist_ok=True)
        (Path(uri) / prefix / name).write_bytes(content)
        dv["offset"] = offset
        if storage == "p":
            dv |= {"storageType": "p", "pathOrInlineDv": (Path(uri) / name).as_uri()}
        else:
            dv |= {"storageType": "u", "pathOrInlineDv": relative_dv_path_or_inline(prefix, uid)}
    t = dc.DeltaTable(uri)
    with t.transaction("DELETE") as txn:
        txn.update_protocol(Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]))
        txn.remove([add])
        txn.add([Add(add.path, add.partition_values, add.size, add.modification_time,
                     stats=add.stats, deletion_vector=dv)])
    expected = [i for i in range(100) if i not in deleted]
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == expected
    assert sorted(peer_read(uri).column("id").to_pylist()) == expected


def test_a_dv_whose_checksum_fails_is_an_error_naming_the_file(tmp_path: Path) -> None:
    uri = copy_table("kernel/with-short-dv", tmp_path)
    path = next(Path(uri).glob("deletion_vector_*.bin"))
    content = bytearray(path.read_bytes())
    content[-1] ^= 0xFF
    path.write_bytes(bytes(content))
    with pytest.raises(dc.CorruptLogError, match=f"{path.name}.*CRC-32"):
        dc.DeltaTable(uri).to_arrow()


def _replace_dv(uri: str, add: Add, deleted: list[int]) -> Add:
    """Commit a new inline DV for ``add``'s file (what a concurrent Spark DELETE does)."""
    bitmap = encode_bitmap_array(deleted)
    new = Add(add.path, add.partition_values, add.size, add.modification_time, stats=add.stats,
              deletion_vector={"storageType": "i", "pathOrInlineDv": z85_encode(bitmap),
                               "sizeInBytes": len(bitmap), "cardinality": len(deleted)})
    with dc.DeltaTable(uri).transaction("DELETE") as txn:
        if dc.DeltaTable(uri).protocol.min_reader_version < 3:
            txn.update_protocol(Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]))
        txn.remove([add])
        txn.add([new])
    return new


@pytest.mark.parametrize("scanned", [True, False])
def test_a_concurrent_dv_update_conflicts_with_removing_the_file(tmp_path: Path,
                                                                 scanned: bool) -> None:
    uri, add = _dv_table(tmp_path)
    first = _replace_dv(uri, add, [1])
    loser = dc.DeltaTable(uri).transaction("DELETE")
    if scanned:
        [seen] = loser.scan()
        assert seen.deletion_vector == first.deletion_vector
    loser.remove([first])
    _replace_dv(uri, first, [1, 2])  # the winner: remove (file, DV 1), add (file, DV 2)
    # Read, the file is a concurrent append of what this transaction read (Spark checks that
    # first); unread, the winner removed the (file, DV) pair this transaction removes.
    expected = dc.ConcurrentAppendException if scanned else dc.ConcurrentDeleteDeleteException
    with pytest.raises(expected, match=first.path):
        loser.commit()
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == [
        i for i in range(100) if i not in (1, 2)]


def _enable_dvs(uri: str) -> None:
    t = dc.DeltaTable(uri)
    m = t.metadata
    with t.transaction("SET TBLPROPERTIES") as txn:
        txn.update_protocol(Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]))
        txn.update_metadata(type(m)(m.id, m.schema_string, list(m.partition_columns),
                                    {**m.configuration, "delta.enableDeletionVectors": "true"},
                                    format=m.format, name=m.name, description=m.description,
                                    created_time=m.created_time))


def test_delete_writes_deletion_vectors_when_enabled(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ids = list(range(200))
    dc.write(uri, pa.table({"id": ids, "v": [None if i % 7 == 0 else i % 10 for i in ids],
                            "p": ["a" if i < 100 else "b" for i in ids]}), partition_by=["p"])
    _enable_dvs(uri)
    t = dc.DeltaTable(uri)
    before = {a.path for a in t.files()}
    t.delete("v = 3 OR id < 5")
    t.delete("v IN (4, NULL) AND p = 'b'")       # NULL in the list deletes nothing more
    t.delete("NOT (v <> 9)")                     # v IS NULL rows stay: NOT NULL is NULL
    t.delete("id >= 190")
    gone = {i for i in ids if (i % 7 and i % 10 == 3) or i < 5
            or (i % 7 and i % 10 == 4 and i >= 100) or (i % 7 and i % 10 == 9) or i >= 190}
    expected = [i for i in ids if i not in gone]
    ours = dc.DeltaTable(uri)
    # No Parquet file was rewritten: the same paths, now with deletion vectors.
    assert {a.path for a in ours.files()} == before
    assert all(a.deletion_vector for a in ours.files())
    assert sorted(ours.to_arrow().column("id").to_pylist()) == expected
    assert sorted(peer_read(uri).column("id").to_pylist()) == expected
    # Rows 193, 194 and 199 were already deleted; the last delete counts the other seven.
    assert ours.history(1)[0]["operationMetrics"]["numDeletedRows"] == "7"
    # A file all of whose rows are deleted is removed outright.
    ours.delete("p = 'a' AND id >= 0")
    assert [a.partition_values["p"] for a in dc.DeltaTable(uri).files()] == ["b"]
    assert sorted(peer_read(uri).column("id").to_pylist()) == [i for i in expected if i >= 100]


def test_a_delete_losing_to_a_concurrent_append_leaves_no_deletion_vector_file(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": list(range(10))}),
             configuration={"delta.enableDeletionVectors": "true",
                            "delta.isolationLevel": "Serializable"})
    stale = dc.DeltaTable(uri)  # read before the append: its DELETE conflicts with it
    dc.write(uri, pa.table({"id": [2]}))
    before = sorted(os.listdir(uri))
    with pytest.raises(ConcurrentAppendException):
        stale.delete("id = 2")
    assert sorted(os.listdir(uri)) == before  # the deletion vector it wrote is deleted
    assert sorted(dc.DeltaTable(uri).to_arrow()["id"].to_pylist()) == sorted([*range(10), 2])


def test_a_table_created_with_dvs_enabled_deletes_rows_with_them(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": list(range(50))}),
             configuration={"delta.enableDeletionVectors": "true"})
    t = dc.DeltaTable(uri)
    assert t.protocol == Protocol(3, 7, ["deletionVectors"], ["deletionVectors"])
    t.delete("id > 40")
    [add] = dc.DeltaTable(uri).files()
    assert add.deletion_vector is not None and add.deletion_vector["cardinality"] == 9
    assert sorted(peer_read(uri).column("id").to_pylist()) == list(range(41))
    dc.write(uri, pa.table({"id": [100]}))
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == [*range(41), 100]


def test_delete_on_data_columns_without_dvs_enabled_rewrites_the_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1, 2, 3], "p": ["a", "b", "a"]}), partition_by=["p"])
    dc.DeltaTable(uri).delete("id = 1")  # copy-on-write: no deletion vector is written
    t = dc.DeltaTable(uri)
    assert not any(a.deletion_vector for a in t.files())
    assert sorted(t.to_arrow().column("id").to_pylist()) == [2, 3]
    assert sorted(peer_read(uri).column("id").to_pylist()) == [2, 3]
