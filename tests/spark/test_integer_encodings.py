"""Spark's own Parquet reader reads the DELTA_BINARY_PACKED integer columns deltacommit writes
(``io.integer_encodings``): Spark's Delta reader reads a table's data files through it, with
its vectorized path (which refused the encoding before Spark 3.3) and without."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.protocol.partitions import decode_add_path
from tests.test_integer_encodings import DELTA, encodings, mixed_table

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
