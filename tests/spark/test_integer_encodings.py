"""Spark's own Parquet reader reads the DELTA_BINARY_PACKED integer columns deltacommit writes
(``io.integer_encodings``): Spark's Delta reader reads a table's data files through it, with
its vectorized path (which refused the encoding before Spark 3.3) and without."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.io.integer_encodings import MIN_ROWS, delta_encoded_columns
from deltacommit.protocol.partitions import decode_add_path
from tests.test_integer_encodings import DELTA, encodings, extremes_table, mixed_table

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("vectorized", ["true", "false"])
def test_spark_reads_delta_encoded_integers_as_written(
        spark: Any, spark_conf: Callable[[str, str], None], tmp_path: Path,
        vectorized: str) -> None:
    uri = str(tmp_path / "t")
    t = mixed_table()
    dc.write(uri, t)
    dc.DeltaTable(uri).update({"x": "x + 1"}, predicate="id % 10 = 3")
    paths = [str(Path(uri) / decode_add_path(a.path)) for a in dc.DeltaTable(uri).files()]
    assert all(DELTA in encodings(p)["id"] and DELTA in encodings(p)["at"] for p in paths)
    spark_conf("spark.sql.parquet.enableVectorizedReader", vectorized)
    got = spark.read.parquet(*paths).orderBy("id").collect()
    expected = pq.read_table(paths[0]).schema  # the file's own schema, as Spark reads it
    assert [f.name for f in expected] == t.column_names
    want = t.to_pylist()
    for r in want:
        if r["id"] % 10 == 3:
            r["x"] += 1
    assert len(got) == len(want)
    for row, w in zip(got, want, strict=True):
        assert row["id"] == w["id"] and row["gappy"] == w["gappy"] and row["x"] == w["x"]
        assert row["day"] == w["day"] and row["few"] == w["few"] and row["s"] == w["s"]
        assert row["at"].replace(tzinfo=None) == w["at"].replace(tzinfo=None)


@pytest.mark.parametrize("vectorized", ["true", "false"])
def test_spark_reads_extremes_beyond_the_sample(
        spark: Any, spark_conf: Callable[[str, str], None], tmp_path: Path,
        vectorized: str) -> None:
    """The widest, wrapping differences (each type's and the calendar's extremes), short
    columns read as Spark's ShortType included; times and dates compared as numbers, since
    Python's datetime cannot hold every instant of year 1 in every zone."""
    uri = str(tmp_path / "t")
    t = extremes_table()
    dc.write(uri, t)
    (add,) = dc.DeltaTable(uri).files()
    path = str(Path(uri) / decode_add_path(add.path))
    assert all(DELTA in e for e in encodings(path).values())
    spark_conf("spark.sql.parquet.enableVectorizedReader", vectorized)
    got = (spark.read.parquet(path)
           .selectExpr("id", "i64", "i32", "i16", "unix_date(day) as day",
                       "unix_micros(at) as at",
                       "unix_micros(cast(local as timestamp)) as local")
           .orderBy("id").collect())
    want = {c: (t.column(c).cast(pa.int32()) if c == "day" else t.column(c)).cast(pa.int64())
            .to_pylist() for c in t.column_names}
    assert [list(r) for r in got] == [list(v) for v in zip(*want.values(), strict=True)]


def test_spark_writes_and_rewrites_keep_plain_encodings_with_the_property_off(
        spark: Any, tmp_path: Path) -> None:
    """Spark's write tasks and row-level tasks take the setting from the table they ship."""
    uri = str(tmp_path / "t")
    df = spark.range(0, 3 * MIN_ROWS).selectExpr(
        "id", "id * 7 as v", "timestamp_micros(1700000000000000 + id * 1000) as at")
    dcs.write(df.coalesce(1), uri,
              configuration={"deltacommit.parquet.deltaEncodedIntegers": "false"})
    dcs.update(uri, {"v": "v + 1"}, "id % 3 = 0")
    written = [str(p) for p in Path(uri).rglob("*.parquet")]
    assert len(written) == 2
    for p in written:
        assert delta_encoded_columns(pq.read_table(p)) == ["id", "v", "at"]
        assert not any(DELTA in e for e in encodings(p).values()), p
    assert dc.DeltaTable(uri).to_arrow().num_rows == 3 * MIN_ROWS
