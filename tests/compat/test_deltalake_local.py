"""Compatibility both ways with delta-rs (the ``deltalake`` package) on local tables."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc

ALL_TYPES = pa.schema([
    ("i8", pa.int8()),
    ("i16", pa.int16()),
    ("i32", pa.int32()),
    ("i64", pa.int64()),
    ("f32", pa.float32()),
    ("f64", pa.float64()),
    ("dec", pa.decimal128(10, 2)),
    ("s", pa.string()),
    ("b", pa.binary()),
    ("flag", pa.bool_()),
    ("d", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("tags", pa.list_(pa.int32())),
    ("attrs", pa.map_(pa.string(), pa.int64())),
    ("point", pa.struct([("x", pa.float64()), ("label", pa.string())])),
    ("part", pa.string()),
])


def sample(n: int, offset: int = 0, part_values: tuple[str, ...] = ("a", "b", "c")) -> pa.Table:
    rows = range(offset, offset + n)
    return pa.table({
        "i8": pa.array([i % 100 for i in rows], pa.int8()),
        "i16": pa.array([i * 3 for i in rows], pa.int16()),
        "i32": pa.array([i * 7 for i in rows], pa.int32()),
        "i64": pa.array([i * 1_000_003 if i % 5 else None for i in rows], pa.int64()),
        "f32": pa.array([i / 4 for i in rows], pa.float32()),
        "f64": pa.array([i / 3 for i in rows], pa.float64()),
        "dec": pa.array([decimal.Decimal(i) / 100 for i in rows], pa.decimal128(10, 2)),
        "s": pa.array([f"value {i} ü" if i % 7 else None for i in rows]),
        "b": pa.array([bytes([i % 256]) * 3 for i in rows], pa.binary()),
        "flag": pa.array([i % 2 == 0 for i in rows]),
        "d": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=i) for i in rows], pa.date32()),
        "ts": pa.array([dt.datetime(2026, 11, 22, tzinfo=dt.UTC) + dt.timedelta(seconds=i * 61)
                        for i in rows], pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[i, i + 1] if i % 3 else [] for i in rows], pa.list_(pa.int32())),
        "attrs": pa.array([[("k", i)] for i in rows], pa.map_(pa.string(), pa.int64())),
        "point": pa.array([{"x": float(i), "label": f"p{i}"} for i in rows],
                          pa.struct([("x", pa.float64()), ("label", pa.string())])),
        "part": pa.array([part_values[i % len(part_values)] for i in rows]),
    }, schema=ALL_TYPES)


def normalise(t: pa.Table) -> list[dict[str, object]]:
    """Rows as python values in our schema, sorted, so that two readers can be compared."""
    t = t.select(ALL_TYPES.names).cast(ALL_TYPES)
    rows = t.to_pylist()
    for r in rows:
        # Map order is not significant; pyarrow returns maps as lists of pairs.
        r["attrs"] = sorted(r["attrs"]) if r["attrs"] is not None else None
        # deltalake 1.6.0 reads some empty lists back as null (its Parquet files hold []); treat alike.
        r["tags"] = r["tags"] or None
    return sorted(rows, key=lambda r: (r["i32"], r["part"]))


@pytest.mark.parametrize("partition_by", [None, ["part"]])
def test_deltalake_reads_what_deltacommit_writes(tmp_path: Path, partition_by: list[str] | None) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, sample(30), partition_by=partition_by)
    dc.write(uri, sample(20, offset=100))
    dc.write(uri, sample(10, offset=200, part_values=("a",)), mode="overwrite",
             predicate="part = 'a'" if partition_by else None)
    dc.write(uri, sample(5, offset=300))
    ours = dc.DeltaTable(uri)
    theirs = deltalake.DeltaTable(uri)
    assert theirs.version() == ours.version == 4
    assert normalise(theirs.to_pyarrow_dataset().to_table()) == normalise(ours.to_arrow())
    assert theirs.metadata().partition_columns == (partition_by or [])
    if partition_by:
        kept = [p for t in (sample(30), sample(20, offset=100)) for p in t.column("part").to_pylist()
                if p != "a"]
        expected = len(kept) + 10 + 5
    else:
        expected = 10 + 5
    assert ours.to_arrow().num_rows == expected
    # deltalake understands our statistics: its file-level row counts add up.
    actions = pa.table(theirs.get_add_actions(flatten=True)).to_pydict()
    assert sum(actions["num_records"]) == expected


@pytest.mark.parametrize("partition_by", [None, ["part"]])
def test_deltacommit_reads_what_deltalake_writes(tmp_path: Path, partition_by: list[str] | None) -> None:
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, sample(40), partition_by=partition_by)
    deltalake.write_deltalake(uri, sample(10, offset=50), mode="append")
    # Partitioned, deltalake replaces the matching partition's files; unpartitioned, it rewrites
    # the files holding matching rows (a remove and an add of the survivors).
    deltalake.write_deltalake(uri, sample(5, offset=70, part_values=("b",)), mode="overwrite",
                              predicate="part = 'b'")
    theirs = deltalake.DeltaTable(uri)
    ours = dc.DeltaTable(uri)
    assert ours.version == theirs.version() == 2
    assert ours.partition_columns == (partition_by or [])
    kept = [p for t in (sample(40), sample(10, offset=50)) for p in t.column("part").to_pylist() if p != "b"]
    assert ours.to_arrow().num_rows == len(kept) + 5
    assert normalise(ours.to_arrow()) == normalise(theirs.to_pyarrow_dataset().to_table())
    if not partition_by:
        return
    # Partition pruning gives the same rows as deltalake's.
    ours_b = ours.to_arrow(partition_filters=[("part", "=", "b")])
    theirs_b = theirs.to_pyarrow_dataset(partitions=[("part", "=", "b")]).to_table()
    assert normalise(ours_b) == normalise(theirs_b)


def test_writers_of_both_kinds_append_to_one_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, sample(10), partition_by=["part"])
    deltalake.write_deltalake(uri, sample(10, offset=10), mode="append")
    dc.write(uri, sample(10, offset=20))
    deltalake.write_deltalake(uri, sample(10, offset=30), mode="append")
    ours = dc.DeltaTable(uri)
    theirs = deltalake.DeltaTable(uri)
    assert ours.version == theirs.version() == 4  # version 0 is our CREATE TABLE
    assert normalise(ours.to_arrow()) == normalise(theirs.to_pyarrow_dataset().to_table())
    assert ours.to_arrow().num_rows == 40


NTZ = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us")), ("day", pa.string())])


def ntz_rows(n: int, offset: int = 0) -> pa.Table:
    rows = range(offset, offset + n)
    return pa.table({
        "id": pa.array(list(rows), pa.int64()),
        "at": pa.array([dt.datetime(2026, 11, 22, 23, 59) + dt.timedelta(minutes=i) if i % 4 else None
                        for i in rows], pa.timestamp("us")),
        "day": pa.array([f"2026-11-{20 + i % 3}" for i in rows]),
    }, schema=NTZ)


def test_timestamp_without_time_zone_both_ways(tmp_path: Path) -> None:
    """``timestamp_ntz`` needs table features (protocol 3, 7): each library reads the other's."""
    ours_uri, theirs_uri = str(tmp_path / "ours"), str(tmp_path / "theirs")
    dc.write(ours_uri, ntz_rows(20), partition_by=["day"])
    dc.write(ours_uri, ntz_rows(10, offset=20))
    deltalake.write_deltalake(theirs_uri, ntz_rows(20), partition_by=["day"])
    deltalake.write_deltalake(theirs_uri, ntz_rows(10, offset=20), mode="append")
    expected = sorted(pa.concat_tables([ntz_rows(20), ntz_rows(10, offset=20)]).to_pylist(),
                      key=lambda r: r["id"])
    # dc.write on a new location commits the table's creation as version 0, then the data.
    for uri, version in ((ours_uri, 2), (theirs_uri, 1)):
        ours, theirs = dc.DeltaTable(uri), deltalake.DeltaTable(uri)
        assert ours.version == theirs.version() == version
        assert "timestampNtz" in (theirs.protocol().writer_features or [])
        assert ours.schema.field("at").type == pa.timestamp("us")
        for table in (ours.to_arrow(), theirs.to_pyarrow_dataset().to_table()):
            got = table.select(NTZ.names).cast(NTZ).to_pylist()
            assert sorted(got, key=lambda r: r["id"]) == expected


def test_binary_partition_column_both_ways(tmp_path: Path) -> None:
    # Spark writes a binary partition value as its bytes read as UTF-8 text.
    uri = str(tmp_path / "t")
    data = pa.table({"b": pa.array([b"ab", b"\x01\x02", b"ab", None], pa.binary()), "v": [1, 2, 3, 4]})
    dc.write(uri, data, partition_by=["b"])
    ours = dc.DeltaTable(uri)
    assert sorted(a.partition_values["b"] or "" for a in ours.files()) == ["", "\x01\x02", "ab"]
    dc.write(uri, pa.table({"b": pa.array([b"ab"], pa.binary()), "v": [5]}))
    expected = sorted([(b"ab", 1), (b"\x01\x02", 2), (b"ab", 3), (None, 4), (b"ab", 5)],
                      key=repr)
    for t in (dc.DeltaTable(uri).to_arrow(), deltalake.DeltaTable(uri).to_pyarrow_table()):
        assert sorted(zip(t.column("b").to_pylist(), t.column("v").to_pylist(), strict=True),
                      key=repr) == expected
