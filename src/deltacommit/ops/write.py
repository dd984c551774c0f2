"""The one write path: data in, Parquet data files and one commit out.

Every writer goes through the same stages: ``dc.write`` and ``dc.append``, the ``Appender``
and Spark (whose tasks run the first two stages on executors):

1. ``conform_rows``: the rows in the table's schema, with every rule on them checked before any
   file is written (compatible types, NOT NULL columns, partition values, invariants and CHECK
   constraints);
2. ``write_rows``: Parquet files with Delta statistics, one per partition value (or per
   ``target_file_rows``), through ``datafiles``;
3. ``finish_write`` (or a group committer for coalesced appends): one transaction commits the
   adds, with the app id that makes a pipeline stage exactly-once.

Data files are written before the commit and have unique names, so a writer that crashes or
loses a conflict leaves at most unreferenced files (removed by vacuum), never a half-visible
write.  Idempotent writes record ``(app_id, app_version)`` in a ``txn`` action in the same
commit as the data, so "already written" and "written now" can never both be true.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltacommit.engine.commit.table_log import TableLog
from deltacommit.errors import (
    ConcurrentModificationException,
    ConcurrentTransactionException,
    CoordinationMismatchError,
    DeltaCommitError,
    InvalidArgumentError,
    MetadataChangedException,
    StagedFilesExpiredError,
    TableExistsError,
    TableNotFoundError,
    TableReplacedError,
)
from deltacommit.io.datafiles import WriteTarget, conform_rows, delete_files, write_rows
from deltacommit.protocol.actions import MAX_LONG, Add
from deltacommit.protocol.commit_window import may_commit
from deltacommit.protocol.features.identity import (
    allocate,
    identity_columns,
    only_marks_changed,
    with_high_water_marks,
)
from deltacommit.protocol.partitions import decode_add_path
from deltacommit.runtime.clock import now_ms
from deltacommit.table import DeltaTable

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.protocol.expressions.predicates import Predicate

MODES = ("append", "overwrite")


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a write did: the version holding it, how many commit attempts it took, and
    whether it was skipped because its ``(app_id, app_version)`` was already committed."""

    version: int
    attempts: int
    skipped: bool = False
    num_files: int = 0
    num_rows: int = 0
    txn_id: str = ""
    digest: str = ""


def to_arrow_table(data: Any) -> pa.Table:
    """Accept what users hand us: Arrow tables, batches, readers, pandas, Arrow C streams."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, list) and data and all(isinstance(b, pa.RecordBatch) for b in data):
        return pa.Table.from_batches(data)
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, dict):
        return pa.table(data)
    raise InvalidArgumentError(
        f"cannot write data of type {type(data).__name__}: pass a pyarrow Table, RecordBatch, "
        "RecordBatchReader, pandas DataFrame or an object with __arrow_c_stream__")


def check_write_arguments(mode: str, predicate: str | None, app_id: str | None,
                          app_version: int | None, target_file_rows: int | None = None) -> None:
    """The arguments every writer (Arrow, Spark, coalesced) takes, checked before any I/O."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
    if (app_id is None) != (app_version is None):
        raise InvalidArgumentError("app_id and app_version must be given together")
    if app_version is not None and (isinstance(app_version, bool) or not isinstance(app_version, int)
                                    or not 0 <= app_version <= MAX_LONG):
        raise InvalidArgumentError(
            f"app_version of {app_id!r} must be an integer from 0 to 2**63-1 (a txn version is "
            f"a signed 64-bit number in every Delta engine), got {app_version!r}")
    if predicate is not None and mode != "overwrite":
        raise InvalidArgumentError("a predicate is only meaningful with mode='overwrite'")
    if target_file_rows is not None and (isinstance(target_file_rows, bool)
                                         or not isinstance(target_file_rows, int)
                                         or target_file_rows < 1):
        raise InvalidArgumentError(
            f"target_file_rows must be a positive integer, got {target_file_rows!r}")


def open_or_create(uri: str, schema: pa.Schema, partition_by: Sequence[str] | None,
                   configuration: Mapping[str, str] | None,
                   storage_options: Mapping[str, str] | None, *,
                   blind: bool = False) -> DeltaTable:
    """The table at ``uri``, created with ``schema`` if there is none (a concurrent creator
    winning is fine: its table is opened).  ``blind``: for a blind append, the process's
    cached state is taken without updating it (``DeltaTable._open_log``)."""
    try:
        return DeltaTable(uri, storage_options=storage_options, _blind=blind)
    except TableNotFoundError:
        pass
    try:
        return DeltaTable.create(uri, schema, partition_by=partition_by,
                                 configuration=configuration, storage_options=storage_options)
    except TableExistsError:
        return DeltaTable(uri, storage_options=storage_options)


def start_write(table: DeltaTable, mode: str, predicate: str | None,
                partition_by: Sequence[str] | None) -> tuple[Transaction, Predicate | None]:
    """The transaction of a write, and its parsed overwrite predicate.

    The transaction starts before any data is written, so that the "already written?" check of
    an app id (``already_written``) and the conflict tracking of that app id read one snapshot.
    Were the check to read an older snapshot than the transaction (another thread sharing the
    table object may move it on), a commit of the same app id in between would be neither seen
    by the check nor reported as a conflict, and the data would be written twice.
    """
    from deltacommit.protocol.expressions.predicates import parse_predicate

    uri = table.uri
    if partition_by is not None and list(partition_by) != table.partition_columns:
        raise InvalidArgumentError(
            f"table {uri} is partitioned by {table.partition_columns}, not {list(partition_by)}")
    pred = None
    if predicate is not None:
        pred = parse_predicate(predicate)
        pred.check_columns(table.partition_columns, uri)
    params: dict[str, Any] = {
        "mode": "Overwrite" if mode == "overwrite" else "Append",
        "partitionBy": json.dumps(table.partition_columns, separators=(",", ":")),
    }
    if predicate is not None:
        params["predicate"] = predicate
    txn = table.transaction("WRITE", params)
    txn.check_can_commit()
    return txn, pred


def already_written(txn: Transaction, app_id: str | None, app_version: int | None) -> bool:
    """Whether the transaction's snapshot records ``app_version`` (or newer) for ``app_id``;
    the read is tracked, so a concurrent commit of the same app id is a conflict."""
    if app_id is None or app_version is None:
        return False
    done = txn.app_version(app_id)
    return done is not None and done >= app_version


def finish_write(txn: Transaction, adds: Sequence[Add], *, overwrite: bool,
                 predicate: Predicate | None, app_id: str | None, app_version: int | None,
                 num_rows: int, durable: bool = True) -> WriteResult:
    """Stage the removes of an overwrite, the app id and the new files, and commit.
    ``durable=False``: the files were written unsynced, for the commit to sync.

    If another writer recorded this app id meanwhile with this version or a newer one, this
    write's data is already in the table: its files are deleted and the write is reported as
    skipped.  Otherwise the ConcurrentTransactionException propagates (the caller must redo the
    write from a fresh read).
    """
    log = txn.table.log
    if overwrite:
        txn.remove(txn.scan(predicate=predicate))
    if app_id is not None and app_version is not None:
        txn.set_app_version(app_id, app_version)
    txn.add(adds, durable=durable)
    txn.operation_metrics["numOutputRows"] = str(num_rows)
    try:
        result = txn.commit()
    except ConcurrentTransactionException:
        if not recorded_concurrently(log, app_id, app_version):
            raise
        delete_files(log.log_store.store, adds)
        return WriteResult(log.version, 0, skipped=True)
    return WriteResult(result.version, result.attempts, num_files=len(adds), num_rows=num_rows,
                       txn_id=result.txn_id, digest=result.digest)


def check_staged(table: DeltaTable, adds: Sequence[Add], started_ms: int) -> None:
    """Before committing files whose writing began at ``started_ms``: when that is longer ago
    than the window in which no VACUUM can have deleted them (``staged_files``), each must
    still exist; if one is gone, the rest are deleted too and StagedFilesExpiredError says
    so (nothing was committed).  A write cannot be redone silently as a compaction bin can,
    so an old one that is whole still commits: only a VACUUM whose retention the operator
    set below the write's duration can race it."""
    if may_commit(started_ms, now_ms(table.clock)):
        return
    store = table.log_store.store
    paths = [decode_add_path(a.path) for a in adds]
    store.await_puts(paths)
    missing = [p for p in paths if not store.exists(p)]
    if missing:
        delete_files(store, adds)
        raise StagedFilesExpiredError(
            f"write to table {table.uri}: {len(missing)} of the {len(paths)} files it wrote "
            f"(first {missing[0]}) were deleted before it could commit them, after "
            f"{(now_ms(table.clock) - started_ms) / 60_000:.0f} minutes (a VACUUM with a "
            "short retention?); the others were deleted too and nothing was committed")


def recorded_concurrently(log: TableLog, app_id: str | None, app_version: int | None) -> bool:
    """After a ConcurrentTransactionException: did the winner record this app version?"""
    if app_id is None or app_version is None:
        return False
    log.refresh()
    done = log.snapshot.app_version(app_id)
    return done is not None and done >= app_version


def _check_predicate_covers(pred: Predicate, data: pa.Table, table: DeltaTable) -> None:
    """An overwrite with a predicate must only write rows the predicate selects."""
    from deltacommit.protocol.partitions import serialize_partition_value

    pcols = table.partition_columns
    schema = table.schema
    types = {c: schema.field(c).type for c in pcols}
    distinct = data.select(pcols).group_by(pcols).aggregate([])
    for row in distinct.to_pylist():
        values = {c: serialize_partition_value(row[c], types[c]) for c in pcols}
        if not pred.evaluate(values, types):
            raise InvalidArgumentError(
                f"table {table.uri}: data has rows in partition "
                f"{', '.join(f'{k}={v!r}' for k, v in values.items())}, which the overwrite "
                f"predicate {pred.to_sql()!r} does not select")


def write(table_or_uri: DeltaTable | str, data: Any, *, mode: str = "append",
          partition_by: Sequence[str] | None = None, predicate: str | None = None,
          app_id: str | None = None, app_version: int | None = None,
          storage_options: Mapping[str, str] | None = None,
          configuration: Mapping[str, str] | None = None,
          target_file_rows: int | None = None) -> WriteResult:
    """Append or overwrite; creates the table on first write (see README.md, "Python")."""
    check_write_arguments(mode, predicate, app_id, app_version, target_file_rows)
    table_data = to_arrow_table(data)
    if isinstance(table_or_uri, DeltaTable):
        table = table_or_uri
        if app_id is not None:
            table.update()
    else:
        # A blind append takes the process's last state of the table as it is: whatever was
        # committed since, its commit loop finds by losing a race.
        table = open_or_create(table_or_uri, table_data.schema, partition_by, configuration,
                               storage_options, blind=mode == "append" and app_id is None)
    # Whatever fails on such a cached state (validation against an older schema, a change of
    # metadata or protocol, a table replaced meanwhile) is tried once more on a fresh read:
    # the write fails only if it fails there too.
    unrefreshed = table.log.unconfirmed
    attempt = 0
    while True:
        attempt += 1
        adds: list[Add] = []
        ids: dict[str, Any] = {}
        try:
            txn, pred = start_write(table, mode, predicate, partition_by)
            target = WriteTarget.of(table.uri, txn.snapshot)
            ids = allocate(target.identity, table_data.column_names, table_data.num_rows,
                           table.uri)
            rows = conform_rows(target, table_data, ids)
            if pred is not None and rows.num_rows:
                _check_predicate_covers(pred, rows, table)
            if already_written(txn, app_id, app_version):
                return WriteResult(txn.read_version, 0, skipped=True)
            if ids:
                txn.update_metadata(with_high_water_marks(txn.snapshot.metadata, ids.values()))
            # Written unsynced: the commit loop makes them durable just before the version
            # that names them (with the files of the rest of its group, on a group-commit table).
            started = now_ms(table.clock)
            adds = write_rows(table.log_store.store, target, rows, clock=table.clock,
                              random=table.random, target_file_rows=target_file_rows,
                              durable=False)
            check_staged(table, adds, started)
            return finish_write(txn, adds, overwrite=mode == "overwrite", predicate=pred,
                                app_id=app_id, app_version=app_version, num_rows=rows.num_rows,
                                durable=False)
        except (ConcurrentModificationException, TableReplacedError,
                CoordinationMismatchError) as e:
            # Refused before anything was committed: this write's files are unreferenced.
            delete_files(table.log_store.store, adds)
            if not unrefreshed:
                if not isinstance(e, MetadataChangedException) or not ids \
                        or not identity_raced(table.log, txn) \
                        or attempt >= table.policy.max_attempts:
                    raise
                # A concurrent writer took identity values beyond the mark this write read:
                # its files hold values that may now be taken, so they are written again with
                # values allocated above the winner's mark, after a jittered pause (as the
                # commit loop pauses) so racing identity writers spread out.
                table.clock.sleep(table.policy.backoff(attempt, table.random.uniform(0.0, 1.0)))
                continue
        except DeltaCommitError:
            # Files written and the commit failed otherwise: it may have happened (a lost
            # answer), so they stay, and so does the error.  A failed upload of one of them
            # need not be remembered: no later commit of this write will name it.
            if adds:
                store = table.log_store.store
                store.await_puts([decode_add_path(a.path) for a in adds], forget=True)
            if not unrefreshed or adds:
                raise
        assert isinstance(table_or_uri, str)
        table = open_or_create(table_or_uri, table_data.schema, partition_by, configuration,
                               storage_options)
        unrefreshed = False


def identity_raced(log: TableLog, txn: Transaction) -> bool:
    """After a MetadataChangedException of a write that generated identity values: was the
    only change since its snapshot another writer's high-water marks (so allocating again
    and retrying is correct)?"""
    log.refresh()
    return only_marks_changed(txn.snapshot.metadata, log.snapshot.metadata)


def append(table: DeltaTable | str, data: Any, *, app_id: str | None = None,
           app_version: int | None = None,
           storage_options: Mapping[str, str] | None = None) -> WriteResult:
    """Append ``data``; on a group-commit table, concurrent appends share files and a version.

    The same contract as ``write(table, data, mode="append", app_id=..., app_version=...)``:
    an ``(app_id, app_version)`` already recorded is skipped.  On a table opened with
    ``group_commit``, the rows are handed to the group's leader, which writes the rows of every
    append in its group as one file per partition before committing them together; each call
    still returns its own result (``num_files`` counts the files its group wrote).  On any
    other table, or given a URI, this is ``write``.
    """
    committer = table.group_committer if not isinstance(table, str) else None
    lacking: list[Any] = []
    if committer is not None and not committer.shares_processes:
        assert not isinstance(table, str)
        data = to_arrow_table(data)
        lacking = [c for c in identity_columns(table.schema, table.uri)
                   if c.name not in data.column_names]
    if committer is None or committer.shares_processes or lacking:
        # Identity values are allocated by a writer that commits their high-water mark
        # itself (``write``), never by rows coalesced into another writer's files.
        # Across processes each append carries its own file (rows are not shipped between
        # processes); the commits are still shared.
        return write(table, data, mode="append", app_id=app_id, app_version=app_version,
                     storage_options=storage_options)
    assert not isinstance(table, str)
    check_write_arguments("append", None, app_id, app_version)
    txn, _ = start_write(table, "append", None, None)
    rows = conform_rows(WriteTarget.of(table.uri, txn.snapshot), to_arrow_table(data))
    if already_written(txn, app_id, app_version):
        return WriteResult(txn.read_version, 0, skipped=True)
    if app_id is not None and app_version is not None:
        txn.set_app_version(app_id, app_version)
    txn.operation_metrics["numOutputRows"] = str(rows.num_rows)
    try:
        result, files = txn.commit_rows(rows)
    except ConcurrentTransactionException:
        # As in ``write``; these rows were left out of the group's files, so nothing to delete.
        if not recorded_concurrently(table.log, app_id, app_version):
            raise
        return WriteResult(table.version, 0, skipped=True)
    return WriteResult(result.version, result.attempts, num_files=files, num_rows=rows.num_rows,
                       txn_id=result.txn_id, digest=result.digest)
