"""Spark's read and write tasks on column-mapping tables: files under physical names, rows
under logical ones, as deltalake 1.6.0 reads them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from tests.delta_tables import DATA, peer_read

pytestmark = pytest.mark.spark



def _rows(t: pa.Table, columns: list[str]) -> list[str]:
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in t.select(columns).to_pylist())


@pytest.mark.parametrize("mode", ["name", "id"])
def test_spark_creates_appends_overwrites_and_reads_column_mapping_tables(
        spark: Any, tmp_path: Path, mode: str) -> None:
    uri = str(tmp_path / "t")
    df = spark.sql("select id, concat('v', id) as `odd name`, named_struct('x', id) as s, "
                   "cast(id % 2 as string) as day from range(0, 10)")
    dcs.write(df, uri, partition_by=["day"], configuration={"delta.columnMapping.mode": mode})
    dcs.write(df, uri, mode="append")
    dcs.write(df.where("day = '1'"), uri, mode="overwrite", predicate="day = '1'")
    table = dc.DeltaTable(uri)
    assert table.configuration["delta.columnMapping.mode"] == mode
    assert all(a.path.startswith("col-") for a in table.files())
    ours = table.to_arrow()
    assert ours.num_rows == 15
    names = ours.column_names
    assert names == ["id", "odd name", "s", "day"]
    assert _rows(peer_read(uri), names) == _rows(ours, names)
    spark_rows = pa.Table.from_pylist([r.asDict(recursive=True)
                                       for r in dcs.read(spark, uri).collect()])
    assert _rows(spark_rows, names) == _rows(ours, names)
    assert dcs.read(spark, uri, partition_filters=[("day", "=", "0")]).count() == 10


def test_spark_appends_to_a_column_mapping_table_spark_wrote(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    shutil.copytree(DATA / "delta-golden/dv-with-columnmapping", uri)
    before = dc.DeltaTable(uri).to_arrow()
    dcs.write(dcs.read(spark, uri), uri, mode="append")
    after = dc.DeltaTable(uri).to_arrow()
    assert after.num_rows == 2 * before.num_rows
    assert _rows(peer_read(uri), after.column_names) == _rows(after, after.column_names)


def test_spark_compaction_of_a_column_mapping_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(6):
        dc.write(uri, pa.table({"id": list(range(i * 10, i * 10 + 10)), "day": [f"d{i % 2}"] * 10}),
                 partition_by=["day"], configuration={"delta.columnMapping.mode": "name"})
    before = dc.DeltaTable(uri).to_arrow()
    metrics = dcs.optimize(spark, uri)
    assert metrics["numFilesRemoved"] == 6 and metrics["numFilesAdded"] == 2
    after = dc.DeltaTable(uri).to_arrow()
    assert _rows(after, after.column_names) == _rows(before, before.column_names)
    assert after.column("id").null_count == 0
    assert _rows(peer_read(uri), after.column_names) == _rows(after, after.column_names)
