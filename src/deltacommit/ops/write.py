"""The write verbs: ``dc.write`` and ``dc.append`` (the ``Appender`` and Spark share their stages).

Every writer goes through the same stages, driven by the one write driver (``driver.run``):

1. ``conform_rows``: the rows in the table's schema, with every rule on them checked before any
   file is written (compatible types, NOT NULL columns, partition values, invariants and CHECK
   constraints);
2. ``write_rows``: Parquet files with Delta statistics, one per partition value (or per
   ``target_file_rows``), through ``datafiles``;
3. ``TableWrite.stage`` and ``commit`` (or a group committer for coalesced appends): one
   transaction commits the adds, with the app id that makes a pipeline stage exactly-once.

Data files are written before the commit and have unique names, so a writer that crashes
leaves at most unreferenced files (removed by vacuum), never a half-visible write; one whose
commit is refused deletes them (``engine.commit.outcome``).  Idempotent writes record
``(app_id, app_version)`` in a ``txn`` action in the same commit as the data, so "already
written" and "written now" can never both be true.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from deltacommit.engine.commit.table_log import TableLog
from deltacommit.errors import (
    ConcurrentModificationException,
    ConcurrentTransactionException,
    CoordinationMismatchError,
    DeltaCommitError,
    InvalidArgumentError,
    MetadataChangedException,
    TableExistsError,
    TableNotFoundError,
    TableReplacedError,
)
from deltacommit.io.datafiles import WriteTarget, conform_rows, write_rows
from deltacommit.ops.driver import Attempt, Decision, Finished, TableJob, run
from deltacommit.ops.tables import Tables, WriteTable
from deltacommit.protocol.actions import MAX_LONG
from deltacommit.protocol.features.identity import (
    allocate,
    identity_columns,
    only_marks_changed,
    with_high_water_marks,
)
from deltacommit.protocol.partitions import serialize_partition_value

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.protocol.expressions.predicates import Predicate

T = TypeVar("T", bound=WriteTable)

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


def open_or_create(tables: Tables[T], uri: str, schema: pa.Schema,
                   partition_by: Sequence[str] | None, configuration: Mapping[str, str] | None,
                   storage_options: Mapping[str, str] | None, *, blind: bool = False) -> T:
    """The table at ``uri``, created with ``schema`` if there is none (a concurrent creator
    winning is fine: its table is opened).  ``blind``: for a blind append, the process's
    cached state is taken without updating it (``DeltaTable._open_log``)."""
    try:
        return tables.open(uri, storage_options, blind=blind)
    except TableNotFoundError:
        pass
    try:
        return tables.create(uri, schema, partition_by=partition_by,
                             configuration=configuration, storage_options=storage_options)
    except TableExistsError:
        return tables.open(uri, storage_options)


def start_write(table: WriteTable, mode: str, predicate: str | None,
                partition_by: Sequence[str] | None) -> tuple[Transaction, Predicate | None]:
    """The transaction of a write, and its parsed overwrite predicate.

    The transaction starts before any data is written, so that the "already written?" check of
    an app id (``already_written``) and the conflict tracking of that app id read one snapshot.
    Were the check to read an older snapshot than the transaction (another thread sharing the
    table object may move it on), a commit of the same app id in between would be neither seen
    by the check nor reported as a conflict, and the data would be written twice.
    """
    uri = table.uri
    if partition_by is not None and list(partition_by) != table.partition_columns:
        raise InvalidArgumentError(
            f"table {uri} is partitioned by {table.partition_columns}, not {list(partition_by)}")
    pred = None
    if predicate is not None:
        # The parser loads for an overwrite with a predicate, not for an append.
        from deltacommit.protocol.expressions.predicates import parse_predicate

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


def recorded_concurrently(log: TableLog, app_id: str | None, app_version: int | None) -> bool:
    """After a ConcurrentTransactionException: did the winner record this app version?"""
    if app_id is None or app_version is None:
        return False
    log.refresh()
    done = log.snapshot.app_version(app_id)
    return done is not None and done >= app_version


def identity_raced(log: TableLog, txn: Transaction) -> bool:
    """After a MetadataChangedException of a write that generated identity values: was the
    only change since its snapshot another writer's high-water marks (so allocating again
    and retrying is correct)?"""
    log.refresh()
    return only_marks_changed(txn.snapshot.metadata, log.snapshot.metadata)


def _check_predicate_covers(pred: Predicate, data: pa.Table, table: WriteTable) -> None:
    """An overwrite with a predicate must only write rows the predicate selects."""
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


class TableWrite(TableJob[T]):
    """A write of rows to a table through the write driver (``driver.run``): the stages every
    writer shares; a writer adds how the files are written (``write``).

    Idempotent writes record ``(app_id, app_version)`` in a ``txn`` action in the same commit
    as the data, so "already written" and "written now" can never both be true: if another
    writer recorded this app id meanwhile with this version or a newer one, this write's data
    is already in the table, and it is reported as skipped (its files deleted); otherwise the
    ConcurrentTransactionException propagates (the caller must redo the write from a fresh
    read)."""

    #: Whether the files are durable once written (else the commit makes them so).
    durable = True

    def __init__(self, table: T, *, mode: str, predicate: str | None,
                 partition_by: Sequence[str] | None, app_id: str | None,
                 app_version: int | None) -> None:
        super().__init__(table)
        self.mode = mode
        self.predicate = predicate
        self.partition_by = partition_by
        self.app_id = app_id
        self.app_version = app_version
        self.num_rows = 0
        self.pred: Predicate | None = None

    def begin(self, attempt: Attempt) -> Transaction:
        self.num_rows = 0
        self._txn, self.pred = start_write(self.table, self.mode, self.predicate,
                                           self.partition_by)
        return self._txn

    def already_written(self) -> Finished[WriteResult] | None:
        """Finished if the app version is recorded in the transaction's snapshot, and that
        snapshot's newest commit is still in the log (``Transaction.check_still_in_log``,
        however recently it was read): a write skipped on the record of a commit an operator has
        rolled back would never be written, so a rolled-back record is TableReplacedError,
        nothing written, for one GET per skipped write."""
        if already_written(self.txn, self.app_id, self.app_version):
            self.txn.check_still_in_log()
            return Finished(WriteResult(self.txn.read_version, 0, skipped=True))
        return None

    def stage(self, attempt: Attempt) -> None:
        """The removes of an overwrite, the app id and the new files."""
        txn = self.txn
        if self.mode == "overwrite":
            txn.remove(txn.scan(predicate=self.pred))
        if self.app_id is not None and self.app_version is not None:
            txn.set_app_version(self.app_id, self.app_version)
        txn.add(attempt.written, durable=self.durable)
        txn.operation_metrics["numOutputRows"] = str(self.num_rows)

    def commit(self, attempt: Attempt) -> WriteResult:
        result = self.txn.commit()
        return WriteResult(result.version, result.attempts, num_files=len(attempt.written),
                           num_rows=self.num_rows, txn_id=result.txn_id, digest=result.digest)

    def refused(self, attempt: Attempt, error: Exception) -> Decision | Finished[WriteResult]:
        if isinstance(error, ConcurrentTransactionException):
            log = self.table.log
            if recorded_concurrently(log, self.app_id, self.app_version):
                return Finished(WriteResult(log.version, 0, skipped=True))
        return Decision.RAISE


class ArrowWrite(TableWrite[T]):
    """``dc.write``: rows in this process, identity values allocated here, files written
    unsynced (the commit loop makes them durable just before the version that names them,
    with the files of the rest of its group on a group-commit table)."""

    durable = False

    def __init__(self, table: T, data: pa.Table, *, mode: str, predicate: str | None,
                 partition_by: Sequence[str] | None, app_id: str | None,
                 app_version: int | None, target_file_rows: int | None,
                 reopen: Callable[[], T] | None) -> None:
        super().__init__(table, mode=mode, predicate=predicate, partition_by=partition_by,
                         app_id=app_id, app_version=app_version)
        self.data = data
        self.target_file_rows = target_file_rows
        self.reopen = reopen
        #: The table's state was taken from the process's cache without a read (a blind
        #: append): whatever fails on it is tried once more on a fresh read.
        self.unrefreshed = table.log.unconfirmed
        self.ids: dict[str, Any] = {}

    def begin(self, attempt: Attempt) -> Transaction:
        self.ids = {}
        return super().begin(attempt)

    def write(self, attempt: Attempt) -> Finished[WriteResult] | None:
        table, txn, data = self.table, self.txn, self.data
        target = WriteTarget.of(table.uri, txn.snapshot)
        self.ids = allocate(target.identity, data.column_names, data.num_rows, table.uri)
        rows = conform_rows(target, data, self.ids)
        if self.pred is not None and rows.num_rows:
            _check_predicate_covers(self.pred, rows, table)
        finished = self.already_written()
        if finished is not None:
            return finished
        if self.ids:
            txn.update_metadata(with_high_water_marks(txn.snapshot.metadata, self.ids.values()))
        self.num_rows = rows.num_rows
        attempt.written.extend(write_rows(self.store, target, rows, clock=table.clock,
                                          random=table.random,
                                          target_file_rows=self.target_file_rows,
                                          durable=False))
        return None

    def refused(self, attempt: Attempt, error: Exception) -> Decision | Finished[WriteResult]:
        decision = super().refused(attempt, error)
        if decision is not Decision.RAISE:
            return decision
        table = self.table
        if self.unrefreshed and self.reopen is not None and (
                isinstance(error, ConcurrentModificationException | TableReplacedError
                           | CoordinationMismatchError)
                or (isinstance(error, DeltaCommitError) and not attempt.written)):
            # A conflict, a table replaced, or a check failed (validation against an older
            # schema) on the cached state: tried once more on a fresh read.
            self.table = self.reopen()
            self.unrefreshed = False
            return Decision.REDO
        if isinstance(error, MetadataChangedException) and self.ids \
                and identity_raced(table.log, self.txn) \
                and attempt.number < table.policy.max_attempts:
            # A concurrent writer took identity values beyond the mark this write read: its
            # files hold values that may now be taken, so they are written again with values
            # allocated above the winner's mark, after a jittered pause (as the commit loop
            # pauses) so racing identity writers spread out.
            table.clock.sleep(table.policy.backoff(attempt.number,
                                                   table.random.uniform(0.0, 1.0)))
            return Decision.REDO
        return Decision.RAISE


class CoalescedAppend(TableWrite[T]):
    """``dc.append`` on a table opened with ``group_commit``: the rows are handed to the
    group's leader, which writes the rows of every append in its group into shared files and
    deletes them itself when they are not committed (``engine.group.threads``)."""

    def __init__(self, table: T, data: pa.Table, *, app_id: str | None,
                 app_version: int | None) -> None:
        super().__init__(table, mode="append", predicate=None, partition_by=None,
                         app_id=app_id, app_version=app_version)
        self.data = data
        self.rows = data

    def write(self, attempt: Attempt) -> Finished[WriteResult] | None:
        self.rows = conform_rows(WriteTarget.of(self.table.uri, self.txn.snapshot), self.data)
        self.num_rows = self.rows.num_rows
        return self.already_written()

    def commit(self, attempt: Attempt) -> WriteResult:
        result, files = self.txn.commit_rows(self.rows)
        return WriteResult(result.version, result.attempts, num_files=files,
                           num_rows=self.num_rows, txn_id=result.txn_id, digest=result.digest)


def write(table_or_uri: T | str, data: Any, *, tables: Tables[T], mode: str = "append",
          partition_by: Sequence[str] | None = None, predicate: str | None = None,
          app_id: str | None = None, app_version: int | None = None,
          storage_options: Mapping[str, str] | None = None,
          configuration: Mapping[str, str] | None = None,
          target_file_rows: int | None = None) -> WriteResult:
    """Append or overwrite; creates the table on first write (see README.md, "Python");
    ``tables`` opens and creates tables given by location (``deltacommit.write`` passes the
    facade's)."""
    check_write_arguments(mode, predicate, app_id, app_version, target_file_rows)
    table_data = to_arrow_table(data)
    reopen: Callable[[], T] | None = None
    if not isinstance(table_or_uri, str):
        table = table_or_uri
        if app_id is not None:
            table.update()
    else:
        uri = table_or_uri

        def reopen() -> T:
            return open_or_create(tables, uri, table_data.schema, partition_by, configuration,
                                  storage_options)

        # A blind append takes the process's last state of the table as it is: whatever was
        # committed since, its commit loop finds by losing a race.
        table = open_or_create(tables, uri, table_data.schema, partition_by, configuration,
                               storage_options, blind=mode == "append" and app_id is None)
    return run(ArrowWrite(table, table_data, mode=mode, predicate=predicate,
                          partition_by=partition_by, app_id=app_id, app_version=app_version,
                          target_file_rows=target_file_rows, reopen=reopen))


def append(table: T | str, data: Any, *, tables: Tables[T], app_id: str | None = None,
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
    if isinstance(table, str) or table.group_committer is None \
            or table.group_committer.shares_processes:
        # Across processes each append carries its own file (rows are not shipped between
        # processes); the commits are still shared.
        return write(table, data, tables=tables, mode="append", app_id=app_id,
                     app_version=app_version, storage_options=storage_options)
    data = to_arrow_table(data)
    if any(c.name not in data.column_names for c in identity_columns(table.schema, table.uri)):
        # Identity values are allocated by a writer that commits their high-water mark
        # itself (``write``), never by rows coalesced into another writer's files.
        return write(table, data, tables=tables, mode="append", app_id=app_id,
                     app_version=app_version, storage_options=storage_options)
    check_write_arguments("append", None, app_id, app_version)
    return run(CoalescedAppend(table, data, app_id=app_id, app_version=app_version))
