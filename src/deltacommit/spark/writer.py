"""``write()``: Spark tasks write the data files, the driver commits them through deltacommit.

The order of events is what makes a pipeline stage exactly-once:

1. The driver opens (or creates) the table and checks the stage's ``(app_id, app_version)``:
   a stage already committed is skipped before any Spark job runs.
2. One Spark job writes Parquet files with Delta statistics straight to the table location and
   returns their add actions.  Only the adds of the job's final result are used, so files of
   failed or retried task attempts stay unreferenced.
3. The driver commits the adds (and, for an overwrite, removes the files the predicate matched)
   with the ``txn`` action in the same commit, retrying past non-conflicting concurrent commits.

A crash before step 3 leaves only orphan files, so a re-run writes the stage once; a crash after
it leaves the ``txn`` action, so a re-run is skipped.  When a concurrent run of the same stage
commits first, this run's files are deleted and the write reports itself as skipped.

Files are deleted by the driver only when nothing can have been committed (bad data, a predicate
the rows do not fit, a conflict).  A Spark job that fails outright leaves the files of its
finished tasks behind, unreferenced, for vacuum: the driver never learned their names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from deltacommit import errors
from deltacommit.errors import DeltaCommitError, InvalidArgumentError
from deltacommit.io.datafiles import WriteTarget
from deltacommit.ops.driver import Attempt, Finished, discard, run
from deltacommit.ops.write import (
    TableWrite,
    WriteResult,
    check_write_arguments,
    open_or_create,
)
from deltacommit.protocol.actions import Add
from deltacommit.protocol.expressions.generated import generated_columns
from deltacommit.protocol.features.identity import check_explicit, identity_columns
from deltacommit.protocol.schema.arrow import check_write_compatible
from deltacommit.protocol.schema.column_mapping import logical_values, partition_physical_names
from deltacommit.spark.schema import as_nullable, spark_to_arrow_schema
from deltacommit.spark.shipping import run_tasks
from deltacommit.spark.tasks import DEFAULT_BUFFER_BYTES, RESULT_DDL, WriteTask
from deltacommit.table import TABLES, DeltaTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from deltacommit.protocol.expressions.predicates import Predicate


def write(df: DataFrame, table_or_uri: DeltaTable | str, *, mode: str = "append",
          partition_by: Sequence[str] | None = None, predicate: str | None = None,
          app_id: str | None = None, app_version: int | None = None,
          storage_options: Mapping[str, str] | None = None,
          target_file_rows: int | None = None,
          configuration: Mapping[str, str] | None = None,
          repartition: bool = True) -> WriteResult:
    """Write a DataFrame to a Delta table: append, or overwrite all or the partitions
    ``predicate`` matches.

    The table is created on first write with the DataFrame's schema made nullable, as Delta on
    Spark creates it (a later batch may then carry nulls the first one could not); create it
    with ``DeltaTable.create`` to declare NOT NULL columns, which writes then enforce, nested
    fields included.

    ``repartition`` (partitioned tables only) shuffles rows by the partition columns first, so
    each partition value is written by one task into one file (or one per ``target_file_rows``
    rows); without it every task writes one file per partition value it happens to hold, as
    ``DataFrame.write.partitionBy`` does.
    """
    check_write_arguments(mode, predicate, app_id, app_version, target_file_rows)
    arrow_schema = spark_to_arrow_schema(df.schema)
    if isinstance(table_or_uri, DeltaTable):
        table = table_or_uri
        table.update()
    else:
        table = open_or_create(TABLES, table_or_uri, as_nullable(arrow_schema), partition_by,
                               configuration, storage_options)
    return run(SparkWrite(table, df, arrow_schema, mode=mode, predicate=predicate,
                          partition_by=partition_by, app_id=app_id, app_version=app_version,
                          target_file_rows=target_file_rows, repartition=repartition))


class SparkWrite(TableWrite[DeltaTable]):
    """The write driver's stages for a DataFrame: the files are written by one Spark job
    (``write_files``), then committed by the driver as ``dc.write`` commits its own."""

    def __init__(self, table: DeltaTable, df: DataFrame, arrow_schema: pa.Schema, *, mode: str,
                 predicate: str | None, partition_by: Sequence[str] | None,
                 app_id: str | None, app_version: int | None, target_file_rows: int | None,
                 repartition: bool) -> None:
        super().__init__(table, mode=mode, predicate=predicate, partition_by=partition_by,
                         app_id=app_id, app_version=app_version)
        self.df = df
        self.arrow_schema = arrow_schema
        self.target_file_rows = target_file_rows
        self.repartition = repartition

    def write(self, attempt: Attempt) -> Finished[WriteResult] | None:
        table = self.table
        check_write_compatible(_expected_schema(table, self.arrow_schema), self.arrow_schema,
                               table.uri)
        finished = self.already_written()
        if finished is not None:
            return finished
        attempt.written.extend(write_files(self.df, table, target_file_rows=self.target_file_rows,
                                           repartition=self.repartition))
        self.num_rows = sum(a.num_records() or 0 for a in attempt.written)
        if self.pred is not None:
            _check_predicate_covers(self.pred, attempt.written, table)
        return None


def _expected_schema(table: DeltaTable, data: pa.Schema) -> pa.Schema:
    """The columns the DataFrame must have: generated columns it lacks are computed by the
    tasks; identity columns must be supplied (where allowed), as tasks cannot allocate values
    (``identity.py``)."""

    for c in identity_columns(table.schema, table.uri):
        if c.name not in data.names:
            raise InvalidArgumentError(
                f"table {table.uri}: the DataFrame lacks identity column {c.name!r}, and Spark "
                "write tasks cannot allocate identity values (each task would take the same "
                "ones); write these rows with deltacommit.write")
        check_explicit(c, table.uri)
    computed = {g.name for g in generated_columns(table.schema)} - set(data.names)
    return pa.schema([f for f in table.schema if f.name not in computed])


def write_files(df: DataFrame, table: DeltaTable, *, target_file_rows: int | None = None,
                repartition: bool = True, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> list[Add]:
    """Run the Spark job that writes ``df`` as data files of ``table``; return their adds.

    Nothing is committed: the caller commits the adds (or deletes the files).  Bad data found by
    a task is raised here as the deltacommit exception the task met, after the files of the
    whole job have been deleted.
    """
    from pyspark.sql import functions as F

    pcols = table.partition_columns
    task = WriteTask(WriteTarget.of(table.uri, table.snapshot), table.storage_options,
                     target_file_rows, buffer_bytes)
    source = df

    for g in generated_columns(table.schema):
        if g.name in pcols and g.name not in df.columns:
            # Rows are shuffled by partition value, so a generated partition column is
            # computed by Spark first; the tasks still verify each value (conform_rows).
            source = source.withColumn(g.name, F.expr(g.expression))
    if pcols:
        keys = [F.col(_quote(c)) for c in pcols]
        if repartition:
            # REBALANCE, not REPARTITION: adaptive execution keeps each partition value in one
            # task where it can, but splits a skewed value over several and merges small ones.
            source = source.hint("rebalance", *keys)
        # Rows of one partition value arrive together, so each task streams them into its files
        # as zero-copy slices (Spark's own partitioned writer sorts the same way).
        source = source.sortWithinPartitions(*keys)
    rows = run_tasks(source, task, RESULT_DDL, table.uri)
    adds: list[Add] = []
    failures: list[dict[str, str]] = []
    for row in rows:
        doc = json.loads(row[0])
        if "add" in doc:
            adds.append(Add.from_json(doc["add"]))
        else:
            failures.append(doc["error"])
    if failures:
        discard(table.log_store.store, adds)
        raise _task_error(failures[0], table.uri, len(failures))
    return adds


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _task_error(failure: dict[str, str], uri: str, count: int) -> DeltaCommitError:
    """Re-create in the driver the deltacommit exception a write task met."""
    kinds: dict[str, type[DeltaCommitError]] = {
        "SchemaMismatchError": errors.SchemaMismatchError,
        "InvalidArgumentError": errors.InvalidArgumentError,
        "InvariantViolationError": errors.InvariantViolationError,
        "CheckConstraintViolationError": errors.CheckConstraintViolationError,
        "GeneratedColumnMismatchError": errors.GeneratedColumnMismatchError,
        "UnsupportedProtocolError": errors.UnsupportedProtocolError,
    }
    cls = kinds.get(failure.get("type", ""), DeltaCommitError)
    more = f" (and {count - 1} more failed task(s))" if count > 1 else ""
    return cls(f"writing to table {uri}: {failure.get('message', '')}{more}")


def _check_predicate_covers(pred: Predicate, adds: Sequence[Add], table: DeltaTable) -> None:
    """An overwrite with a predicate must only write rows the predicate selects."""

    schema = table.schema
    types = {c: schema.field(c).type for c in table.partition_columns}
    physical = partition_physical_names(schema, table.partition_columns, table.configuration)
    for a in adds:
        values = logical_values(a.partition_values, physical)
        if not pred.evaluate(values, types):
            where = ", ".join(f"{k}={v!r}" for k, v in values.items())
            raise InvalidArgumentError(
                f"table {table.uri}: data has rows in partition {where}, which the overwrite "
                f"predicate {pred.to_sql()!r} does not select")


