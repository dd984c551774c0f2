"""The one data-file reader (``scan.FileScan``) and the one write path's stages (``datafiles``):
whole-file and streaming reads agree, a scan survives pickling (Spark ships it to executors),
and the write stages are what every writer applies."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.errors import CheckConstraintViolationError, SchemaMismatchError
from deltacommit.io.datafiles import WriteTarget, conform_rows, write_rows
from deltacommit.io.dictionary_columns import dictionary_columns, plain_pieces

DATA = Path(__file__).resolve().parent / "data"


def _sorted(t: pa.Table) -> list[tuple[object, ...]]:
    return sorted(tuple(r.values()) for r in t.to_pylist())


def test_streamed_batches_equal_whole_file_reads_with_deletion_vectors(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    shutil.copytree(DATA / "kernel/table-with-dv-small", uri)
    t = dc.DeltaTable(uri)
    scan = t.file_scan(t.schema)
    streamed = pickle.loads(pickle.dumps(scan))
    streamed.batch_rows = 3
    assert streamed.given_store is None  # opened again where it runs
    whole = pa.concat_tables(scan.read(a) for a in t.files())
    parts = [pa.Table.from_batches(list(streamed.batches(a.path, a.partition_values,
                                                         a.deletion_vector)), t.schema)
             for a in t.files()]
    assert _sorted(pa.concat_tables(parts)) == _sorted(whole) == _sorted(t.to_arrow())
    assert all(b.num_rows <= 3 for a in t.files()
               for b in streamed.batches(a.path, a.partition_values, a.deletion_vector))


def test_a_scan_restores_partition_columns_in_any_order(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    data = pa.table({"id": [1, 2, 3], "day": ["a", "b", "a"]})
    dc.write(uri, data, partition_by=["day"])
    t = dc.DeltaTable(uri)
    out = pa.schema([t.schema.field("day"), t.schema.field("id")])
    read = pa.concat_tables(t.file_scan(out).read(a) for a in t.files())
    assert read.schema == out
    assert _sorted(read) == [("a", 1), ("a", 3), ("b", 2)]


def test_the_write_stages_conform_check_and_write(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("day", pa.string())])
    t = dc.DeltaTable.create(str(tmp_path / "t"), schema, partition_by=["day"],
                             configuration={"delta.constraints.positive": "id > 0"})
    target = WriteTarget.of(t.uri, t.snapshot)
    assert pickle.loads(pickle.dumps(target)) == target  # shipped to Spark executors
    rows = conform_rows(target, pa.table({"day": pa.array(["x"], pa.large_string()), "id": [1]}))
    assert rows.schema == schema
    with pytest.raises(CheckConstraintViolationError, match="positive"):
        conform_rows(target, pa.table({"id": [0], "day": ["x"]}))
    with pytest.raises(SchemaMismatchError, match="'id' is not nullable"):
        conform_rows(target, pa.table({"id": pa.array([None], pa.int64()), "day": ["x"]}))
    with pytest.raises(SchemaMismatchError, match="extra columns"):
        conform_rows(target, pa.table({"id": [1], "day": ["x"], "other": [1]}))
    adds = write_rows(t.log_store.store, target, rows, clock=t.clock, random=t.random)
    assert [a.partition_values for a in adds] == [{"day": "x"}]
    with t.transaction() as txn:
        txn.add(adds)
    assert dc.DeltaTable(t.uri).to_arrow().to_pylist() == [{"id": 1, "day": "x"}]


def test_every_writer_refuses_the_same_bad_rows_before_writing_a_file(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, schema, configuration={"delta.constraints.positive": "id > 0"})
    bad = pa.table({"id": [1, -1]})
    grouped = dc.DeltaTable(uri, group_commit=True)
    with pytest.raises(CheckConstraintViolationError, match="positive"):
        dc.write(uri, bad)
    with pytest.raises(CheckConstraintViolationError, match="positive"):
        dc.append(grouped, bad)
    appender = dc.Appender(uri, app_id="stream")
    with pytest.raises(CheckConstraintViolationError, match="positive"):
        appender.append(bad, offset=1)
        appender.flush()
    assert [p.name for p in Path(uri).iterdir()] == ["_delta_log"]
    assert dc.DeltaTable(uri).version == 0


def test_write_and_append_take_their_options_by_keyword(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    data = pa.table({"id": [1]})
    with pytest.raises(TypeError):
        dc.write(uri, data, "overwrite")
    with pytest.raises(TypeError):
        dc.append(uri, data, "ingest")
    assert dc.write(uri, data, mode="overwrite").version == 1
    assert dc.append(uri, data, app_id="ingest", app_version=1).version == 2


def test_read_many_equals_reading_each_file(tmp_path: Path) -> None:
    """Compaction's multi-file read gives exactly the rows of reading file by file: also when
    the first file lacks a column or files store a column with different types."""
    import pyarrow.parquet as pq

    from deltacommit.engine.scan import FileScan
    from deltacommit.protocol.actions import Add

    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("p", pa.string())])
    files = {
        "same-0.parquet": pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}),
        "same-1.parquet": pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]}),
        "old.parquet": pa.table({"id": pa.array([4], pa.int64())}),  # before "name" existed
        "narrow.parquet": pa.table({"id": pa.array([5], pa.int32()), "name": ["e"]}),
    }
    for name, t in files.items():
        pq.write_table(t, tmp_path / name)

    def add(name: str) -> Add:
        return Add(path=name, partition_values={"p": "x"}, size=1, modification_time=0,
                   data_change=True)

    scan = FileScan(str(tmp_path), 0, schema, ["p"])
    for names in (["same-0.parquet", "same-1.parquet"],
                  ["old.parquet", "same-0.parquet"],
                  ["same-0.parquet", "old.parquet", "narrow.parquet"]):
        adds = [add(n) for n in names]
        expected = pa.concat_tables([scan.read(a) for a in adds])
        assert scan.read_many(adds).equals(expected), names


def test_dictionary_encoded_strings_read_as_written_with_deletion_vectors(tmp_path: Path) -> None:
    # Dictionary-encoded string and binary columns are read as dictionaries, filtered by the
    # deletion vector and decoded after; a column whose pages fell back to plain encoding
    # (distinct values beyond the dictionary page) is read as it is.  Both give the rows written.
    uri = str(tmp_path / "t")
    n = 120_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "m": pa.array([i % 3 for i in range(n)]),
                     "s": pa.array([None if i % 11 == 0 else f"k{i % 37}" for i in range(n)]),
                     "b": pa.array([bytes([i % 5]) * 3 for i in range(n)], pa.binary()),
                     "u": pa.array([f"unique-value-{i:08d}" for i in range(n)])})
    dc.write(uri, data, configuration={"delta.enableDeletionVectors": "true"})
    t = dc.DeltaTable(uri)
    [add] = t.files()
    written = pq.ParquetFile(str(tmp_path / "t" / add.path))
    assert set(dictionary_columns(written, ["id", "s", "b", "u"])) == {"s", "b"}
    t.delete("m = 0 OR s = 'k5'")
    ours = dc.DeltaTable(uri)
    assert all(a.deletion_vector for a in ours.files())
    kept = [r for r in data.to_pylist() if r["m"] and r["s"] != "k5"]
    got = ours.to_arrow()
    assert got.schema == ours.schema and got.to_pylist() == kept
    streamed = ours.file_scan(ours.schema)
    streamed.batch_rows = 7_000
    [add] = ours.files()
    parts = list(streamed.batches(add.path, add.partition_values, add.deletion_vector))
    assert pa.Table.from_batches(parts, ours.schema).to_pylist() == kept


def test_a_dictionary_is_decoded_in_pieces_below_the_offset_limit() -> None:
    chunk = pa.array(["abc", "de", None, "abc", "f"] * 3).dictionary_encode()
    pieces = plain_pieces(chunk, pa.string(), max_bytes=7)  # two values of 3 bytes a piece
    assert [len(p) for p in pieces] == [2] * 7 + [1]
    assert all(p.type == pa.string() for p in pieces)
    assert pa.chunked_array(pieces).to_pylist() == chunk.to_pylist()
    assert plain_pieces(chunk, pa.string()) == [chunk.cast(pa.string())]
