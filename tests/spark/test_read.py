"""deltacommit.spark.read: pruning before any file is opened, columns, versions, foreign tables."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.partitions import decode_add_path

pytestmark = pytest.mark.spark


def three_days(spark: Any, uri: str) -> None:
    df = spark.sql("select id, date_add(date'2026-11-20', cast(id % 3 as int)) as day, "
                   "concat('n', id) as name from range(30)")
    dcs.write(df, uri, partition_by=["day"])


def test_partition_filters_prune_files_before_any_is_opened(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "t"
    uri = str(root)
    three_days(spark, uri)
    # Take away the data of 2026-11-22: a read that opened its file would fail.
    (gone,) = [a for a in dc.DeltaTable(uri).files() if a.partition_values["day"] == "2026-11-22"]
    (root / decode_add_path(gone.path)).unlink()

    df = dcs.read(spark, uri, partition_filters=[("day", "in", ["2026-11-20", "2026-11-21"])])
    got = sorted((r["id"], r["day"]) for r in df.collect())
    assert got == sorted((i, dt.date(2026, 11, 20 + i % 3)) for i in range(30) if i % 3 != 2)
    assert dcs.read(spark, uri, partition_filters=[("day", "<", "2026-11-21")]).count() == 10

    with pytest.raises(Exception, match=r"data file of version 1 is missing"):
        dcs.read(spark, uri).collect()


def test_columns_are_selected_in_the_order_asked(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    three_days(spark, uri)
    df = dcs.read(spark, uri, columns=["name", "day"])
    assert df.columns == ["name", "day"]
    assert sorted(r["name"] for r in df.collect()) == sorted(f"n{i}" for i in range(30))
    only_partition = dcs.read(spark, uri, columns=["day"])
    assert only_partition.count() == 30
    assert only_partition.distinct().count() == 3
    with pytest.raises(InvalidArgumentError, match=r"no column\(s\) \['nope'\]"):
        dcs.read(spark, uri, columns=["nope"])


def test_earlier_versions_and_empty_selections(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    three_days(spark, uri)
    dcs.write(spark.sql("select 99L as id, date'2026-11-23' as day, 'late' as name"), uri)
    assert dcs.read(spark, uri).count() == 31
    assert dcs.read(spark, uri, version=1).count() == 30
    empty = dcs.read(spark, uri, version=0)
    assert empty.count() == 0
    assert empty.schema == dcs.read(spark, uri).schema
    assert dcs.read(spark, uri, partition_filters=[("day", "=", "2030-01-01")]).count() == 0


def test_reads_tables_written_by_deltalake(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "rs")
    data = pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "part": pa.array(["x", "y", None]),
        "when": pa.array([dt.datetime(2026, 11, 22, 10, tzinfo=dt.UTC)] * 3, pa.timestamp("us", tz="UTC")),
        "tags": pa.array([["a"], [], None], pa.list_(pa.string())),
    })
    deltalake.write_deltalake(uri, data, partition_by=["part"])
    deltalake.write_deltalake(uri, data.slice(0, 1), mode="append")
    rows = sorted(dcs.read(spark, uri).collect(), key=lambda r: (r["id"], r["part"] or ""))
    assert [(r["id"], r["part"], r["tags"]) for r in rows] == [
        (1, "x", ["a"]), (1, "x", ["a"]), (2, "y", []), (3, None, None)]
    assert rows[0]["when"] == dt.datetime(2026, 11, 22, 10)  # session time zone is UTC


@pytest.mark.parametrize("name", ["delta-golden/dv-partitioned-with-checkpoint",
                                  "kernel/with-short-dv", "kernel/table-with-dv-small"])
def test_deletion_vectors_are_applied_in_spark_tasks(spark: Any, name: str) -> None:
    # Spark and Databricks tables whose DELETEs wrote deletion vectors (tests/data).
    uri = str(Path(__file__).resolve().parents[1] / "data" / name)
    expected = dc.DeltaTable(uri).to_arrow()
    # Spark hands timestamps back without a zone: compare the other columns.
    cols = [f.name for f in expected.schema if not pa.types.is_timestamp(f.type)]
    got = sorted(tuple(r) for r in dcs.read(spark, uri, columns=cols).collect())
    assert got == sorted(tuple(r.values()) for r in expected.select(cols).to_pylist())
    assert len(got) == expected.num_rows
    names = [f.name for f in expected.schema if f.name not in dc.DeltaTable(uri).partition_columns]
    # Only partition columns asked for: rows are still counted after the deletions.
    if names != expected.column_names:
        assert dcs.read(spark, uri, columns=["part"]).count() == expected.num_rows


def test_a_filter_prunes_files_by_statistics_and_drops_rows_in_tasks(spark: Any,
                                                                     tmp_path: Path) -> None:
    root = tmp_path / "t"
    uri = str(root)
    dc.write(uri, pa.table({"id": pa.array(range(100), pa.int64()),
                            "name": [f"n{i}" for i in range(100)]}), target_file_rows=10)
    # Take away every file but the one holding ids 40..49: a read that opened another fails.
    for a in dc.DeltaTable(uri).files():
        if '"id":40' not in (a.stats or ""):
            (root / decode_add_path(a.path)).unlink()
    df = dcs.read(spark, uri, columns=["name"], filter="id >= 42 AND id < 45")
    assert sorted(r["name"] for r in df.collect()) == ["n42", "n43", "n44"]
    assert dcs.read(spark, uri, filter="id = 1000").count() == 0


def test_a_filter_reads_the_columns_it_names_beside_the_columns_asked_for(
        spark: Any, tmp_path: Path) -> None:
    """The filter names columns the read does not return, in another case and with dots."""
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1, 2], "x.y": [10, 20], "s": pa.array([{"B": 1}, {"B": 2}]),
                            "v": ["a", "b"]}))
    df = dcs.read(spark, uri, columns=["v"], filter="ID = 1 AND `x.y` = 10 AND S.b = 1")
    assert [r["v"] for r in df.collect()] == ["a"]
