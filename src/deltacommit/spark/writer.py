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
from typing import TYPE_CHECKING, Any

from deltacommit import errors
from deltacommit.datafiles import num_indexed_cols
from deltacommit.errors import (
    ConcurrentModificationException,
    ConcurrentTransactionException,
    DeltaCommitError,
    InvalidArgumentError,
    TableExistsError,
    TableNotFoundError,
)
from deltacommit.log.actions import Add
from deltacommit.spark.schema import as_nullable, spark_to_arrow_schema
from deltacommit.spark.tasks import DEFAULT_BUFFER_BYTES, RESULT_DDL, WriteTask
from deltacommit.table import DeltaTable
from deltacommit.writer import MODES, WriteResult

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from deltacommit.predicates import Predicate


def _check_arguments(mode: str, predicate: str | None, app_id: str | None,
                     app_version: int | None, target_file_rows: int | None) -> None:
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
    if (app_id is None) != (app_version is None):
        raise InvalidArgumentError("app_id and app_version must be given together")
    if app_version is not None and (isinstance(app_version, bool) or not isinstance(app_version, int)
                                    or app_version < 0):
        raise InvalidArgumentError(f"app_version must be a non-negative integer, got {app_version!r}")
    if predicate is not None and mode != "overwrite":
        raise InvalidArgumentError("a predicate is only meaningful with mode='overwrite'")
    if target_file_rows is not None and (isinstance(target_file_rows, bool)
                                         or not isinstance(target_file_rows, int)
                                         or target_file_rows < 1):
        raise InvalidArgumentError(
            f"target_file_rows must be a positive integer, got {target_file_rows!r}")


def _open_or_create(uri: str, schema: pa.Schema, partition_by: Sequence[str] | None,
                    configuration: Mapping[str, str] | None,
                    storage_options: Mapping[str, str] | None) -> DeltaTable:
    try:
        return DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError:
        pass
    try:
        return DeltaTable.create(uri, schema, partition_by=partition_by,
                                 configuration=configuration, storage_options=storage_options)
    except TableExistsError:
        return DeltaTable(uri, storage_options=storage_options)


def write(df: DataFrame, table_or_uri: DeltaTable | str, mode: str = "append",
          partition_by: Sequence[str] | None = None, predicate: str | None = None,
          app_id: str | None = None, app_version: int | None = None,
          storage_options: Mapping[str, str] | None = None,
          target_file_rows: int | None = None, *,
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
    from deltacommit.predicates import parse_predicate
    from deltacommit.schema import check_write_compatible

    _check_arguments(mode, predicate, app_id, app_version, target_file_rows)
    arrow_schema = spark_to_arrow_schema(df.schema)
    if isinstance(table_or_uri, DeltaTable):
        table = table_or_uri
        table.update()
    else:
        table = _open_or_create(table_or_uri, as_nullable(arrow_schema), partition_by,
                                configuration, storage_options)
    uri = table.uri
    if partition_by is not None and list(partition_by) != table.partition_columns:
        raise InvalidArgumentError(
            f"table {uri} is partitioned by {table.partition_columns}, not {list(partition_by)}")
    check_write_compatible(table.schema, arrow_schema, uri)
    pred = None
    if predicate is not None:
        pred = parse_predicate(predicate)
        pred.check_columns(table.partition_columns, uri)

    if app_id is not None and app_version is not None:
        done = table.app_version(app_id)
        if done is not None and done >= app_version:
            return WriteResult(table.version, 0, skipped=True)

    adds = write_files(df, table, target_file_rows=target_file_rows, repartition=repartition)
    store = table.log_store.store
    try:
        if pred is not None:
            _check_predicate_covers(pred, adds, table)
        params: dict[str, Any] = {
            "mode": "Overwrite" if mode == "overwrite" else "Append",
            "partitionBy": json.dumps(table.partition_columns, separators=(",", ":")),
        }
        if predicate is not None:
            params["predicate"] = predicate
        txn = table.transaction("WRITE", params)
        if mode == "overwrite":
            txn.remove(txn.scan(predicate=pred))
        if app_id is not None and app_version is not None:
            txn.app_version(app_id)
            txn.set_app_version(app_id, app_version)
        txn.add(adds)
        num_rows = sum(a.num_records() or 0 for a in adds)
        txn.operation_metrics["numOutputRows"] = str(num_rows)
        try:
            result = txn.commit()
        except ConcurrentTransactionException:
            if app_id is None or app_version is None:
                raise
            table.update()
            done = table.app_version(app_id)
            if done is None or done < app_version:
                raise
            # The same stage committed concurrently: this run's files are surplus.
            _delete_files(store, adds)
            return WriteResult(table.version, 0, skipped=True)
    except (ConcurrentModificationException, InvalidArgumentError):
        # Nothing was committed (a conflict or bad input is decided before or instead of the
        # commit), so the files are garbage.  Any other error may hide a commit that happened.
        _delete_files(store, adds)
        raise
    return WriteResult(result.version, result.attempts, num_files=len(adds), num_rows=num_rows,
                       txn_id=result.txn_id, digest=result.digest)


def write_files(df: DataFrame, table: DeltaTable, *, target_file_rows: int | None = None,
                repartition: bool = True, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> list[Add]:
    """Run the Spark job that writes ``df`` as data files of ``table``; return their adds.

    Nothing is committed: the caller commits the adds (or deletes the files).  Bad data found by
    a task is raised here as the deltacommit exception the task met, after the files of the
    whole job have been deleted.
    """
    from pyspark.sql import functions as F

    pcols = table.partition_columns
    task = WriteTask(table.uri, table.storage_options, table.schema, pcols,
                     num_indexed_cols(table.configuration), target_file_rows, buffer_bytes)
    source = df
    if pcols:
        keys = [F.col(_quote(c)) for c in pcols]
        if repartition:
            # REBALANCE, not REPARTITION: adaptive execution keeps each partition value in one
            # task where it can, but splits a skewed value over several and merges small ones.
            source = source.hint("rebalance", *keys)
        # Rows of one partition value arrive together, so each task streams them into its files
        # as zero-copy slices (Spark's own partitioned writer sorts the same way).
        source = source.sortWithinPartitions(*keys)
    rows = source.mapInArrow(task, RESULT_DDL).collect()
    adds: list[Add] = []
    failures: list[dict[str, str]] = []
    for row in rows:
        doc = json.loads(row[0])
        if "add" in doc:
            adds.append(Add.from_json(doc["add"]))
        else:
            failures.append(doc["error"])
    if failures:
        _delete_files(table.log_store.store, adds)
        raise _task_error(failures[0], table.uri, len(failures))
    return adds


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _task_error(failure: dict[str, str], uri: str, count: int) -> DeltaCommitError:
    """Re-create in the driver the deltacommit exception a write task met."""
    kinds: dict[str, type[DeltaCommitError]] = {
        "SchemaMismatchError": errors.SchemaMismatchError,
        "InvalidArgumentError": errors.InvalidArgumentError,
    }
    cls = kinds.get(failure.get("type", ""), DeltaCommitError)
    more = f" (and {count - 1} more failed task(s))" if count > 1 else ""
    return cls(f"writing to table {uri}: {failure.get('message', '')}{more}")


def _check_predicate_covers(pred: Predicate, adds: Sequence[Add], table: DeltaTable) -> None:
    """An overwrite with a predicate must only write rows the predicate selects."""
    schema = table.schema
    types = {c: schema.field(c).type for c in table.partition_columns}
    for a in adds:
        if not pred.evaluate(a.partition_values, types):
            where = ", ".join(f"{k}={v!r}" for k, v in a.partition_values.items())
            raise InvalidArgumentError(
                f"table {table.uri}: data has rows in partition {where}, which the overwrite "
                f"predicate {pred.to_sql()!r} does not select")


def _delete_files(store: Any, adds: Sequence[Add]) -> None:
    from deltacommit.partitions import decode_add_path

    for a in adds:
        store.delete(decode_add_path(a.path))
