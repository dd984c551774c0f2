"""Every supported type written by Spark tasks and read back by Spark and by deltalake."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql import Row

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.errors import SchemaMismatchError
from deltacommit.spark.schema import arrow_to_spark_schema, as_nullable, spark_to_arrow_schema
from tests.spark.conftest import parquet_files
from tests.spark.test_schema_mapping import EVERY_TYPE

pytestmark = pytest.mark.spark

UTC = dt.UTC


def every_type_rows() -> list[tuple[Any, ...]]:
    """Three rows: ordinary values, extremes (Unicode, min/max, pre-epoch), and nulls."""
    return [
        (True, 1, 2, 3, 4, 1.5, 2.25, Decimal("12345678901234567890.0123456789"), Decimal("1.23"),
         "hello", b"\x00\x01", dt.date(2026, 11, 22), dt.datetime(2026, 11, 22, 10, 0, 0, 123456, UTC),
         dt.datetime(2026, 11, 22, 10, 0, 0, 654321), [1, None, 3], ["a", "b"], {"k": 1, "n": None},
         {1: (0.5,), 2: (None,)}, (7, ["x", None], (dt.datetime(2000, 1, 1, tzinfo=UTC),))),
        (False, -128, -32768, -(2**31), -(2**63), -3.4e38, -1.7e308,
         Decimal("-9999999999999999999999999999.9999999999"), Decimal("-999.99"),
         "ünïcödé \U0001F600 ''\"", b"", dt.date(1, 1, 1), dt.datetime(1900, 1, 1, tzinfo=UTC),
         dt.datetime(9999, 12, 31, 23, 59, 59, 999999), [], [], {}, {}, (0, [], (None,))),
        (None, None, None, 5, None, None, None, None, None, None, None, None, None, None, None, [],
         None, {}, None),
    ]


def collect_sorted(df: Any, key: str) -> list[Row]:
    return sorted(df.collect(), key=lambda r: r[key])


def nullable(schema: Any) -> Any:
    """What Delta on Spark makes of a DataFrame's schema when it creates a table from it."""
    return arrow_to_spark_schema(as_nullable(spark_to_arrow_schema(schema)))


def test_every_type_round_trips_through_spark_and_deltalake(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "types")
    # Created with the DataFrame's schema as declared, NOT NULL fields (nested ones too) included.
    dc.DeltaTable.create(uri, spark_to_arrow_schema(EVERY_TYPE))
    df = spark.createDataFrame(every_type_rows(), EVERY_TYPE)
    result = dcs.write(df, uri)
    assert (result.version, result.num_rows, result.skipped) == (1, 3, False)

    back = dcs.read(spark, uri)
    assert back.schema == EVERY_TYPE
    assert collect_sorted(back, "i32") == collect_sorted(df, "i32")

    # deltalake (delta-rs) reads the same rows from the table the Spark tasks wrote.
    theirs = deltalake.DeltaTable(uri).to_pyarrow_table().sort_by("i32")
    assert plain(theirs.to_pylist(maps_as_pydicts="strict")) == plain(
        [r.asDict(recursive=True) for r in collect_sorted(back, "i32")])
    assert theirs.column("i32").to_pylist() == sorted(r[3] for r in every_type_rows())


def plain(value: Any) -> Any:
    """Rows as PySpark and pyarrow give them, made comparable: aware datetimes as naive UTC
    (PySpark returns naive datetimes in the session's zone, which these tests keep at UTC)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def assert_same_columns(ours: pa.Table, theirs: pa.Table) -> None:
    assert theirs.column_names == ours.column_names
    for name in ours.column_names:
        assert theirs.column(name).to_pylist() == ours.column(name).to_pylist(), name


def test_timestamps_keep_their_instant_in_any_session_time_zone(
        spark: Any, spark_conf: Any, tmp_path: Path) -> None:
    spark_conf("spark.sql.session.timeZone", "America/Los_Angeles")
    uri = str(tmp_path / "tz")
    df = spark.sql("select 1 as id, timestamp'2026-11-22 10:00:00' as ts, "
                   "timestamp_ntz'2026-11-22 10:00:00' as ntz")
    before = df.selectExpr("unix_micros(ts) as us", "cast(ntz as string) as wall").collect()
    dcs.write(df, uri)
    after = dcs.read(spark, uri).selectExpr("unix_micros(ts) as us", "cast(ntz as string) as wall")
    assert after.collect() == before
    # 10:00 in Los Angeles is 18:00 UTC; the wall-clock timestamp_ntz stays 10:00.
    table = dc.DeltaTable(uri).to_arrow()
    assert table.column("ts").to_pylist() == [dt.datetime(2026, 11, 22, 18, 0, tzinfo=UTC)]
    assert table.column("ntz").to_pylist() == [dt.datetime(2026, 11, 22, 10, 0)]
    assert dc.DeltaTable(uri).protocol.writer_features == ["timestampNtz"]


def test_partition_columns_of_every_partition_type_are_restored(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "parts")
    df = spark.sql("""
        select id, cast(id % 2 as boolean) as flag, cast(id % 3 as int) as n,
               cast(id % 2 as decimal(5, 2)) + 0.5 as dec,
               date_add(date'2026-11-20', cast(id % 2 as int)) as day,
               timestamp'2026-11-22 10:00:00' + make_interval(0, 0, 0, 0, cast(id % 2 as int)) as hour,
               case when id % 4 = 0 then null else concat('s/', id % 2, ' x=y') end as label
        from range(40)""")
    pcols = ["flag", "n", "dec", "day", "hour", "label"]
    dcs.write(df, uri, partition_by=pcols)
    back = dcs.read(spark, uri)
    assert back.schema == nullable(df.schema)
    assert collect_sorted(back, "id") == collect_sorted(df, "id")
    theirs = deltalake.DeltaTable(uri).to_pyarrow_table().sort_by("id")
    assert_same_columns(dc.DeltaTable(uri).to_arrow().sort_by("id"), theirs)
    assert plain(theirs.to_pylist()) == plain([r.asDict() for r in collect_sorted(back, "id")])
    # Hive-style directories with Spark's escaping, and null as __HIVE_DEFAULT_PARTITION__.
    paths = {p.split("/part-")[0] for p in parquet_files(tmp_path / "parts")}
    assert any("label=__HIVE_DEFAULT_PARTITION__" in p for p in paths)
    assert any("label=s%2F1 x%3Dy" in p for p in paths)


def test_unsupported_spark_type_is_refused_before_any_file_is_written(
        spark: Any, tmp_path: Path) -> None:
    uri = tmp_path / "bad"
    df = spark.sql("select 1 as id, make_dt_interval(1, 2, 3, 4) as waited")
    with pytest.raises(SchemaMismatchError, match=r"column 'waited' has Spark type interval day to second"):
        dcs.write(df, str(uri))
    assert not uri.exists()


def test_data_that_does_not_match_the_table_schema_is_refused(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dcs.write(spark.sql("select 1L as id, 'a' as name"), uri)
    with pytest.raises(SchemaMismatchError, match=r"name: table has string, data has integer"):
        dcs.write(spark.sql("select 2L as id, 3 as name"), uri)
    with pytest.raises(SchemaMismatchError, match=r"missing columns: name"):
        dcs.write(spark.sql("select 2L as id"), uri)
    assert dc.DeltaTable(uri).version == 1


def test_nulls_in_a_non_nullable_column_fail_in_the_task_and_leave_no_files(
        spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "nn"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    dc.DeltaTable.create(str(root), schema)
    dcs.write(spark.range(10), str(root))
    files_before = parquet_files(root)
    bad = spark.sql("select id from values (1L), (null), (3L) as v(id)")
    with pytest.raises(SchemaMismatchError, match=r"column 'id' is not nullable"):
        dcs.write(bad, str(root))
    assert parquet_files(root) == files_before
    assert dc.DeltaTable(str(root)).version == 1


def test_empty_dataframe_creates_an_empty_table_with_the_schema(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "empty")
    df = spark.createDataFrame([], EVERY_TYPE)
    dcs.write(df, uri)
    back = dcs.read(spark, uri)
    # As Delta on Spark does, a table created from a DataFrame has nullable columns.
    assert back.schema == nullable(EVERY_TYPE)
    assert back.count() == 0
    assert dc.DeltaTable(uri).to_arrow().schema.names == EVERY_TYPE.names
    assert isinstance(dc.DeltaTable(uri).schema, pa.Schema)
