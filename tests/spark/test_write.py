"""deltacommit.spark.write: partitioned appends and overwrites, file layout, task failures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import TaskContext

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.partitions import decode_add_path
from tests.spark.conftest import parquet_files

pytestmark = pytest.mark.spark


def events(spark: Any, day: str, start: int, n: int, tag: str = "v1") -> Any:
    return spark.sql(f"select id, date'{day}' as day, '{tag}' as tag, id * 0.5 as amount "
                     f"from range({start}, {start + n})")


def rows_by_day(spark: Any, uri: str) -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for r in dcs.read(spark, uri).collect():
        out.setdefault(r["day"].isoformat(), []).append((r["id"], r["tag"]))
    return {k: sorted(v) for k, v in sorted(out.items())}


def referenced(uri: str) -> set[str]:
    return {decode_add_path(a.path) for a in dc.DeltaTable(uri).files()}


def test_partitioned_append_then_overwrite_with_and_without_predicate(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    r1 = dcs.write(events(spark, "2026-11-20", 0, 30), uri, partition_by=["day"])
    r2 = dcs.write(events(spark, "2026-11-21", 100, 20), uri, mode="append")
    assert (r1.version, r2.version) == (1, 2)
    assert dc.DeltaTable(uri).partition_columns == ["day"]

    # Replace one day; the other is untouched.
    r3 = dcs.write(events(spark, "2026-11-20", 500, 5, "v2"), uri, mode="overwrite",
                   predicate="day = '2026-11-20'")
    assert (r3.version, r3.num_rows) == (3, 5)
    got = rows_by_day(spark, uri)
    assert got == {"2026-11-20": [(i, "v2") for i in range(500, 505)],
                   "2026-11-21": [(i, "v1") for i in range(100, 120)]}
    history = dc.DeltaTable(uri).history(1)[0]
    assert history["operationParameters"]["mode"] == "Overwrite"
    assert history["operationParameters"]["predicate"] == "day = '2026-11-20'"

    # An overwrite without predicate replaces the whole table.
    dcs.write(events(spark, "2026-11-22", 900, 3, "v3"), uri, mode="overwrite")
    assert rows_by_day(spark, uri) == {"2026-11-22": [(900, "v3"), (901, "v3"), (902, "v3")]}
    assert dc.DeltaTable(uri).version == 4


def test_overwrite_with_rows_outside_the_predicate_is_refused_and_leaves_no_files(
        spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "t"
    uri = str(root)
    dcs.write(events(spark, "2026-11-20", 0, 10), uri, partition_by=["day"])
    before = parquet_files(root)
    with pytest.raises(InvalidArgumentError, match=r"partition day='2026-11-21'.*does not select"):
        dcs.write(events(spark, "2026-11-21", 0, 10), uri, mode="overwrite",
                  predicate="day = '2026-11-20'")
    assert parquet_files(root) == before
    assert dc.DeltaTable(uri).version == 1


def test_bad_arguments_are_refused_before_any_spark_job(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = events(spark, "2026-11-20", 0, 1)
    with pytest.raises(InvalidArgumentError, match="mode must be one of"):
        dcs.write(df, uri, mode="upsert")
    with pytest.raises(InvalidArgumentError, match="only meaningful with mode='overwrite'"):
        dcs.write(df, uri, predicate="day = '2026-11-20'")
    with pytest.raises(InvalidArgumentError, match="given together"):
        dcs.write(df, uri, app_id="x")
    with pytest.raises(InvalidArgumentError, match="target_file_rows must be a positive integer"):
        dcs.write(df, uri, target_file_rows=0)
    assert not (tmp_path / "t").exists()
    dcs.write(df, uri, partition_by=["day"])
    with pytest.raises(InvalidArgumentError, match=r"partitioned by \['day'\], not \['tag'\]"):
        dcs.write(df, uri, partition_by=["tag"])
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        dcs.write(df, uri, mode="overwrite", predicate="nope = 1")


def test_each_partition_value_is_written_once_per_task_and_split_at_target_rows(
        spark: Any, spark_conf: Any, tmp_path: Path) -> None:
    spark_conf("spark.sql.execution.arrow.maxRecordsPerBatch", "50")  # many batches per task
    uri = str(tmp_path / "t")
    # Four input partitions, three days interleaved in each: 1200 rows, 400 per day.
    df = spark.range(0, 1200, 1, 4).selectExpr(
        "id", "date_add(date'2026-11-20', cast(id % 3 as int)) as day", "'v' as tag", "id * 1.0 as amount")
    dcs.write(df, uri, partition_by=["day"])
    files = dc.DeltaTable(uri).files()
    per_day = sorted(a.partition_values["day"] for a in files)
    # Rebalanced by day: one file per day, not one per batch, task or input partition.
    assert per_day == ["2026-11-20", "2026-11-21", "2026-11-22"]
    assert sorted(a.num_records() for a in files) == [400, 400, 400]

    uri2 = str(tmp_path / "t2")
    dcs.write(df, uri2, partition_by=["day"], target_file_rows=150)
    counts = sorted(a.num_records() or 0 for a in dc.DeltaTable(uri2).files())
    assert sum(counts) == 1200 and max(counts) <= 150
    assert len(counts) == 9  # 400 rows a day: 150 + 150 + 100

    uri3 = str(tmp_path / "t3")
    dcs.write(df, uri3, partition_by=["day"], repartition=False)
    files3 = dc.DeltaTable(uri3).files()
    # Without the shuffle each of the 4 tasks writes one file per day it holds, as Spark does.
    assert len(files3) == 12
    assert sum(a.num_records() or 0 for a in files3) == 1200

    stats = files[0].stats or ""
    assert '"numRecords":400' in stats and '"minValues":{"id":' in stats


def test_failed_task_attempt_leaves_orphans_that_the_table_never_references(
        spark: Any, tmp_path: Path) -> None:
    """A task fails after it wrote one data file; Spark retries it; only the retry's files are
    committed and the table content is exact."""
    root = tmp_path / "t"
    uri = str(root)
    df = spark.range(0, 200, 1, 1).selectExpr("id", "if(id < 100, 'a', 'b') as p")
    dcs.write(df.limit(0), uri, partition_by=["p"])
    # A plain file where the task will want the directory p=b: the first attempt writes p=a,
    # then fails creating p=b.  The retry clears the obstacle (in an upstream step of the same
    # task, which runs to completion before the sorted rows reach the writer) and succeeds.
    blocker = root / "p=b"
    blocker.write_text("not a directory")
    path = str(blocker)

    def clear_on_retry(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() > 0:
            import os

            if os.path.isfile(path):
                os.remove(path)
        yield from batches

    flaky = df.mapInArrow(clear_on_retry, df.schema)
    result = dcs.write(flaky, uri, repartition=False)

    on_disk = parquet_files(root)
    committed = referenced(uri)
    orphans = on_disk - committed
    assert len([f for f in orphans if f.startswith("p=a/")]) == 1, on_disk  # the failed attempt's
    assert committed <= on_disk
    assert sorted(f.split("/")[0] for f in committed) == ["p=a", "p=b"]
    assert result.num_files == 2 and result.num_rows == 200
    ids = sorted(r["id"] for r in dcs.read(spark, uri).collect())
    assert ids == list(range(200))


def test_spark_tasks_enforce_invariants_and_check_constraints(spark: Any, tmp_path: Path) -> None:
    import json

    uri = str(tmp_path / "t")
    meta = {"delta.invariants": json.dumps({"expression": {"expression": "id >= 0"}})}
    schema = pa.schema([pa.field("id", pa.int64(), metadata=meta), ("tag", pa.string())])
    dc.DeltaTable.create(uri, schema, configuration={"delta.constraints.short": "tag IN ('a', 'b')"})
    bad_id = spark.sql("select id - 5 as id, 'a' as tag from range(10)")
    with pytest.raises(dc.InvariantViolationError, match=r"column 'id' \(id >= 0\)"):
        dcs.write(bad_id, uri)
    bad_tag = spark.sql("select id, 'c' as tag from range(10)")
    with pytest.raises(dc.CheckConstraintViolationError, match="'short'"):
        dcs.write(bad_tag, uri)
    assert dc.DeltaTable(uri).version == 0 and referenced(uri) == set()
    r = dcs.write(spark.sql("select id, 'b' as tag from range(10)"), uri)
    assert r.version == 1 and dc.DeltaTable(uri).to_arrow().num_rows == 10


def test_spark_tasks_compute_and_verify_generated_columns(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([
        pa.field("id", pa.int64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("day", pa.date32(), metadata={"delta.generationExpression": "CAST(ts AS DATE)"}),
    ])
    dc.DeltaTable.create(uri, schema, partition_by=["day"])
    rows = spark.sql("select id, timestamp'2024-03-01 22:00:00' + make_interval(0, 0, 0, 0, "
                     "cast(id as int), 0, 0) as ts from range(4)")
    dcs.write(rows, uri)  # day computed by the tasks
    got = sorted((r["id"], r["day"].isoformat()) for r in dcs.read(spark, uri).collect())
    assert got == [(0, "2024-03-01"), (1, "2024-03-01"), (2, "2024-03-02"), (3, "2024-03-02")]
    wrong = rows.selectExpr("id", "ts", "date'2024-01-01' as day")
    with pytest.raises(dc.GeneratedColumnMismatchError, match=r"'day' \(CAST\(ts AS DATE\)\)"):
        dcs.write(wrong, uri)
    assert dc.DeltaTable(uri).version == 1


def test_spark_writes_refuse_to_allocate_identity_values(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    meta = {"delta.identity.start": "1", "delta.identity.step": "1",
            "delta.identity.allowExplicitInsert": "false"}
    dc.DeltaTable.create(uri, pa.schema([pa.field("id", pa.int64(), metadata=meta),
                                         pa.field("tag", pa.string())]))
    with pytest.raises(InvalidArgumentError, match="lacks identity column 'id'"):
        dcs.write(spark.sql("select 'a' as tag"), uri)
    with pytest.raises(InvalidArgumentError, match="GENERATED ALWAYS"):
        dcs.write(spark.sql("select 5L as id, 'a' as tag"), uri)
    assert dc.DeltaTable(uri).version == 0
