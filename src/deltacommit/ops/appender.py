"""``Appender``: buffered, exactly-once appends for streaming ingestion.

The pattern of kafka-delta-ingest and Spark's streaming sink: a consumer reads records with
increasing offsets, buffers them, and every so often commits the buffer as one Delta version
that also records, in a ``txn`` action, the offset it reached.  The offset and the data land in
the same commit, so after any crash the table itself says how far ingestion got.

The contract.  Each ``append(data, offset)`` carries the source's offset (a Kafka offset, a
sequence number, a file index), strictly increasing within one appender.  A commit records the
offset of its last append as the ``txn`` version of ``app_id``.  On start, the appender reads
that version (``committed_offset``); the caller resumes its source from ``committed_offset + 1``,
or simply replays from wherever it likes: appends whose offset is not newer than the recorded
one are recognised as replays and skipped (``append`` returns False).  So every offset's data
is in the table exactly once, whenever the process dies: between flushes the buffer is lost
but its offsets were never recorded, and they are replayed.

Several appenders may write one table with different app ids (one per Kafka partition, say).
Two live appenders with the same app id (a "zombie" that did not know it was replaced) do not
duplicate data: a flush that loses the app id race re-reads the recorded offset, drops what the
other one already committed, and commits the rest.  This assumes, as Kafka does, that an offset
always carries the same data.

When a flush happens: when ``flush_rows`` rows are buffered, when the oldest buffered append
is ``flush_interval`` seconds old (checked on every append, and by a background thread unless
``background=False``), on ``flush()`` and on ``close()``.  A flush writes the buffer as one
Parquet file per partition, then commits it; appends may continue while it runs.  A failed
flush keeps its rows buffered for the next one; a failure in the background thread is raised by
the next ``append``, ``flush`` or ``close``.

What the appender remembers of the recorded offset is a hint, and the table is the truth.  An
operator who rolls the table back takes recorded offsets with the commits that recorded them.
A flush that finds the table records less than it remembers, and a replay about to be skipped
that finds the table rolled back (its newest commit read back where it was read more than the
commit policy's ``recheck_after`` ago, and the offset its table object holds), raise
``TableReplacedError``: the appender has then dropped its buffer
unrecorded and taken the table's offset, and the caller replays from ``committed_offset + 1``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any, ClassVar

import pyarrow as pa

from deltacommit.engine.transaction.transaction import CommitResult, Transaction
from deltacommit.errors import (
    ConcurrentTransactionException,
    InvalidArgumentError,
    MetadataChangedException,
    TableExistsError,
    TableNotFoundError,
    TableReplacedError,
)
from deltacommit.io.datafiles import WriteTarget, conform_rows, write_rows
from deltacommit.ops.driver import Attempt, Decision, Finished, TableJob, run
from deltacommit.ops.tables import Tables, WriteTable
from deltacommit.ops.write import identity_raced, to_arrow_table
from deltacommit.protocol.actions import MAX_LONG
from deltacommit.protocol.features.identity import Allocation, allocate, with_high_water_marks
from deltacommit.runtime.clock import SYSTEM_CLOCK, Clock

__all__ = ["STREAMING_OPERATION", "Appender"]

#: The operation streaming writers record (Spark's streaming sink, kafka-delta-ingest).
STREAMING_OPERATION = "STREAMING UPDATE"


class Appender:
    """Buffers appends to one table and flushes them as few commits with exactly-once offsets.

    ``table`` is a ``DeltaTable`` or a URI (the table is created on the first flush if it does
    not exist, with the first append's schema, ``partition_by`` and ``configuration``).
    Use as a context manager: leaving the block normally flushes; leaving it with an exception
    drops the buffer unflushed (its offsets were never recorded, so replaying restores it).

    ``tables`` opens and creates tables given by URI: ``deltacommit.Appender`` is this class
    with the facade's (``deltacommit.table``).
    """

    tables: ClassVar[Tables[WriteTable] | None] = None

    def __init__(self, table: WriteTable | str, app_id: str, *, flush_rows: int = 100_000,
                 flush_interval: float | None = 10.0,
                 storage_options: Mapping[str, str] | None = None,
                 partition_by: Sequence[str] | None = None,
                 configuration: Mapping[str, str] | None = None,
                 target_file_rows: int | None = None, background: bool = True) -> None:
        if not isinstance(app_id, str) or not app_id:
            raise InvalidArgumentError(f"Appender app_id must be a non-empty string, got {app_id!r}")
        if isinstance(flush_rows, bool) or not isinstance(flush_rows, int) or flush_rows < 1:
            raise InvalidArgumentError(f"Appender flush_rows must be a positive integer, got {flush_rows!r}")
        if flush_interval is not None and (isinstance(flush_interval, bool)
                                           or not isinstance(flush_interval, int | float)
                                           or flush_interval <= 0):
            raise InvalidArgumentError(
                "Appender flush_interval must be a positive number of seconds or None, got "
                f"{flush_interval!r}")
        self.app_id = app_id
        self.flush_rows = flush_rows
        self.flush_interval = None if flush_interval is None else float(flush_interval)
        self.partition_by = list(partition_by) if partition_by is not None else None
        self.configuration = dict(configuration or {})
        self.target_file_rows = target_file_rows
        self._storage_options = dict(storage_options or {})
        self._uri: str
        self._table: WriteTable | None
        if not isinstance(table, str):
            table.update()
            self._table = table
            self._uri = table.uri
        else:
            self._uri = table
            try:
                self._table = self._tables().open(table, self._storage_options)
            except TableNotFoundError:
                self._table = None
        self._clock: Clock | None = self._table.clock if self._table is not None else None
        self._committed = self._table.app_version(app_id) if self._table is not None else None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._flush_lock = threading.Lock()
        self._buffer: list[tuple[int, pa.Table]] = []
        self._rows = 0
        self._first_at: float | None = None
        self._last_offset: int | None = self._committed
        self._closed = False
        self._error: BaseException | None = None
        #: The rollback the timer reported itself, when it dropped the buffer (``_rolled_back``).
        self._reported: BaseException | None = None
        #: Buffers dropped on a rollback, and the error of the last drop: an append under way
        #: across a drop (by any thread's flush) raises it instead of buffering.
        self._drops = 0
        self._drop_error: TableReplacedError | None = None
        #: Commits made and replayed appends skipped, for monitoring.
        self.commits = 0
        self.skipped = 0
        self._thread: threading.Thread | None = None
        if background and self.flush_interval is not None:
            self._thread = threading.Thread(target=self._run_timer, daemon=True,
                                            name=f"deltacommit-appender-{app_id}")
            self._thread.start()

    def __repr__(self) -> str:
        return (f"Appender({self._uri!r}, app_id={self.app_id!r}, "
                f"committed_offset={self._committed}, pending_rows={self._rows})")

    # ----------------------------------------------------------------- state

    @property
    def table(self) -> WriteTable | None:
        return self._table

    @property
    def committed_offset(self) -> int | None:
        """The newest offset recorded in the table for ``app_id`` (None: nothing yet)."""
        with self._lock:
            return self._committed

    @property
    def pending_rows(self) -> int:
        with self._lock:
            return self._rows

    # ----------------------------------------------------------------- appending

    def append(self, data: Any, offset: int) -> bool:
        """Buffer ``data`` (Arrow table or batch, pandas, ...) as the records of ``offset``.

        Returns False, buffering nothing, if ``offset`` is already recorded in the table (a
        replay after a restart).  Flushes when a threshold is reached.
        """
        self._raise_background_error()
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_LONG:
            raise InvalidArgumentError(
                f"Appender {self.app_id!r} on {self._uri}: offset must be an integer from 0 to "
                f"2**63-1 (it is recorded as a txn version), got {offset!r}")
        with self._lock:
            drops = self._drops
        arrow = to_arrow_table(data)
        with self._lock:
            replay = self._committed is not None and offset <= self._committed
        if replay:
            self._check_recorded()
        with self._lock:
            if self._closed:
                raise InvalidArgumentError(f"Appender {self.app_id!r} on {self._uri} is closed")
            if self._error is not None:
                # The timer failed since this append began: it may have dropped the buffer on
                # a rollback, so this offset would follow ones the table no longer records.
                error, self._error = self._error, None
                raise error
            if self._drops != drops and self._drop_error is not None:
                # Another thread's flush dropped the buffer on a rollback since this append
                # began: buffered now, this offset would follow ones the table no longer records.
                raise self._drop_error
            if self._committed is not None and offset <= self._committed:
                self.skipped += 1
                return False
            if self._last_offset is not None and offset <= self._last_offset:
                raise InvalidArgumentError(
                    f"Appender {self.app_id!r} on {self._uri}: offset {offset} is not greater "
                    f"than the previous offset {self._last_offset}; offsets must increase")
            self._buffer.append((offset, arrow))
            self._last_offset = offset
            self._rows += arrow.num_rows
            if self._first_at is None:
                self._first_at = self._now()
                self._wake.notify()
            due = self._rows >= self.flush_rows or self._interval_elapsed()
        if due:
            self.flush()
        return True

    def poll(self) -> CommitResult | None:
        """Flush if the oldest buffered append is ``flush_interval`` old (for callers that
        run without the background thread)."""
        with self._lock:
            due = self._interval_elapsed()
        return self.flush() if due else None

    def flush(self) -> CommitResult | None:
        """Commit everything buffered; None if there was nothing new to commit."""
        self._raise_background_error()
        return self._flush()

    def close(self) -> None:
        """Flush and stop; further appends are refused."""
        with self._lock:
            already = self._closed
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if not already:
            self.flush()

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
            return
        with self._lock:
            self._closed = True
            self._buffer.clear()
            self._rows = 0
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # ----------------------------------------------------------------- flushing

    def _now(self) -> float:
        clock = self._clock or SYSTEM_CLOCK
        return clock.monotonic()

    def _interval_elapsed(self) -> bool:
        return (self.flush_interval is not None and self._first_at is not None
                and self._now() - self._first_at >= self.flush_interval)

    def _flush(self, background: bool = False) -> CommitResult | None:
        with self._flush_lock:
            with self._lock:
                batch, self._buffer = self._buffer, []
                rows, self._rows = self._rows, 0
                first_at, self._first_at = self._first_at, None
            if not batch:
                return None
            try:
                return self._commit(batch)
            except BaseException as e:
                with self._lock:
                    self._buffer = batch + self._buffer
                    self._rows += rows
                    self._first_at = first_at
                if isinstance(e, TableReplacedError):
                    raise self._rolled_back(e, background) from e
                raise

    def _commit(self, batch: list[tuple[int, pa.Table]]) -> CommitResult | None:
        return run(_Flush(self, self._open(batch[0][1]), batch))

    def _check_recorded(self) -> None:
        """Before a replay is skipped as recorded: the table's newest commit read back where
        this object last knew it more than ``recheck_after`` ago (``TableLog.recheck_if_stale``),
        so that an offset rolled back with its commit is not skipped as if the table held it;
        and the offset the table object now holds compared with the one remembered, since the
        object may have found the rollback itself on another operation, and read afresh, so
        that no read-back finds it again."""
        table = self._table
        if table is None:
            return
        try:
            table.log.recheck_if_stale(table.policy.recheck_after)
        except TableReplacedError as e:
            error = self._rolled_back(e)
            if error is not e:
                raise error from e
            # The table, read afresh, records the offset remembered (another appender of the
            # app id committed it again): the replay is one, and skipped.
        recorded = table.app_version(self.app_id)
        with self._lock:
            remembered = self._committed
        if remembered is not None and (recorded is None or recorded < remembered):
            below = TableReplacedError(
                f"table {table.uri}: version {table.version} records "
                f"{'no offset' if recorded is None else f'offset {recorded}'} for app id "
                f"{self.app_id!r}, below the offset {remembered} this appender committed")
            error = self._rolled_back(below)
            if error is not below:  # else the table, read afresh, holds the offset after all
                raise error from below

    def _rolled_back(self, cause: TableReplacedError,
                     background: bool = False) -> TableReplacedError:
        """What the appender raises when its table object finds the table rolled back or
        replaced (``cause``): where the table now records an offset lower than the one
        remembered, the appender takes the table's and drops its buffer unrecorded (its offsets
        follow ones the caller must replay first), and says so; otherwise ``cause``, the buffer
        kept for the next flush.  The timer (``background``) leaves the error for the next call
        in the same step as it drops the buffer, so that no append racing it is buffered
        after the drop unreported."""
        table = self._table
        if table is None:
            return cause
        table.update()
        recorded = table.app_version(self.app_id)
        with self._lock:
            remembered = self._committed
            if remembered is None or (recorded is not None and recorded >= remembered):
                return cause
            dropped = [o for o, _ in self._buffer]
            self._buffer, self._rows, self._first_at = [], 0, None
            self._committed = self._last_offset = recorded
            held = "no offset" if recorded is None else f"offset {recorded}"
            lost = ("" if not dropped else
                    f"; its buffered append of offset {dropped[0]} was dropped unrecorded"
                    if len(dropped) == 1 else
                    f"; its {len(dropped)} buffered appends, offset {dropped[0]} to offset "
                    f"{dropped[-1]}, were dropped unrecorded")
            error = TableReplacedError(
                f"Appender {self.app_id!r} on {self._uri}: the table records {held} for it, "
                f"but this appender had committed up to offset {remembered}: the commits "
                f"recording the offsets after that were rolled back, or the table replaced "
                f"({cause}){lost}. Replay the source from committed_offset + 1 "
                f"({0 if recorded is None else recorded + 1}).")
            self._drops += 1
            self._drop_error = error
            if background:
                self._error = self._reported = error
            return error

    def _advance(self, offset: int | None) -> None:
        if offset is None:
            return
        with self._lock:
            if self._committed is None or offset > self._committed:
                self._committed = offset

    def _tables(self) -> Tables[WriteTable]:
        if self.tables is None:
            raise InvalidArgumentError(
                f"Appender {self.app_id!r}: given the URI {self._uri}, it needs a way to open "
                "tables: use deltacommit.Appender, or pass a DeltaTable")
        return self.tables

    def _open(self, first: pa.Table) -> WriteTable:
        if self._table is not None:
            return self._table
        try:
            table = self._tables().create(self._uri, first.schema, partition_by=self.partition_by,
                                          configuration=self.configuration,
                                          storage_options=self._storage_options)
        except TableExistsError:
            table = self._tables().open(self._uri, self._storage_options)
        self._table = table
        self._clock = table.clock
        return table

    # ----------------------------------------------------------------- the timer

    def _run_timer(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                if self._first_at is None or self.flush_interval is None:
                    self._wake.wait()
                    continue
                left = self._first_at + self.flush_interval - self._now()
                if left > 0:
                    self._wake.wait(left)
                    continue
            try:
                self._flush(background=True)
            except BaseException as e:
                with self._lock:
                    if e is not self._reported:  # a drop's error is left by _rolled_back
                        self._error = e
                    self._reported = None
                    # Wait for the next append before trying again.
                    self._first_at = None

    def _raise_background_error(self) -> None:
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error


class _Flush(TableJob[WriteTable]):
    """One flush through the write driver (``driver.run``): the buffered appends not yet
    recorded, as one commit that records the newest offset.

    Two appenders with the same app id exclude each other through it: a flush that loses
    the app id race (ConcurrentTransactionException) re-reads the recorded offset and commits
    again only what the other did not; one whose identity values another writer took
    (``identity.py``) writes its rows again with values above the winner's."""

    def __init__(self, appender: Appender, table: WriteTable,
                 batch: list[tuple[int, pa.Table]]) -> None:
        super().__init__(table)
        self.appender = appender
        self.batch = batch
        self.pending = batch
        self.marks: list[Allocation] = []
        self.num_rows = 0

    def begin(self, attempt: Attempt) -> Transaction:
        self._txn = self.table.transaction(STREAMING_OPERATION, {
            "outputMode": "Append", "queryId": self.appender.app_id})
        return self._txn

    def write(self, attempt: Attempt) -> Finished[CommitResult | None] | None:
        txn, table = self.txn, self.table
        recorded = txn.app_version(self.appender.app_id)
        remembered = self.appender.committed_offset
        if remembered is not None and (recorded is None or recorded < remembered):
            raise TableReplacedError(
                f"table {table.uri}: version {txn.read_version} records "
                f"{'no offset' if recorded is None else f'offset {recorded}'} for app id "
                f"{self.appender.app_id!r}, below the offset {remembered} this appender "
                "committed; nothing was committed")
        self.pending = [(o, t) for o, t in self.batch if recorded is None or o > recorded]
        if not self.pending:
            # Another appender with this app id committed all of it (see the module
            # docstring); nothing is lost by dropping it.
            self.appender._advance(recorded)
            return Finished(None)
        target = WriteTarget.of(table.uri, txn.snapshot)
        parts, self.marks = _conform_batch(target, [t for _, t in self.pending])
        if self.marks:
            txn.update_metadata(with_high_water_marks(txn.snapshot.metadata, self.marks))
        data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        self.num_rows = data.num_rows
        if data.num_rows:
            attempt.written.extend(write_rows(
                self.store, target, data, clock=table.clock, random=table.random,
                target_file_rows=self.appender.target_file_rows))
        return None

    def stage(self, attempt: Attempt) -> None:
        txn = self.txn
        newest = self.pending[-1][0]
        txn.operation_parameters["epochId"] = str(newest)  # as Spark's streaming sink
        txn.set_app_version(self.appender.app_id, newest)
        txn.add(attempt.written)
        txn.operation_metrics["numOutputRows"] = str(self.num_rows)

    def commit(self, attempt: Attempt) -> CommitResult | None:
        result = self.txn.commit()
        self.appender._advance(self.pending[-1][0])
        self.appender.commits += 1
        return result

    def refused(self, attempt: Attempt, error: Exception
                ) -> Decision | Finished[CommitResult | None]:
        if isinstance(error, ConcurrentTransactionException):
            self.table.update()
            self.batch = self.pending
            return Decision.REDO
        if isinstance(error, MetadataChangedException) and self.marks \
                and identity_raced(self.table.log, self.txn):
            # Another writer took identity values above the mark this flush read.
            self.batch = self.pending
            return Decision.REDO
        return Decision.RAISE


def _conform_batch(target: WriteTarget, tables: list[pa.Table]
                   ) -> tuple[list[pa.Table], list[Allocation]]:
    """The buffered tables conformed, identity values allocated one table after another
    above the mark read; and the last allocation of each column (the new marks)."""
    columns = list(target.identity)
    last: dict[str, Allocation] = {}
    parts = []
    for t in tables:
        ids = allocate(columns, t.column_names, t.num_rows, target.uri)
        parts.append(conform_rows(target, t, ids))
        last.update(ids)
        columns = [replace(c, high_water_mark=ids[c.name].last) if c.name in ids else c
                   for c in columns]
    return parts, list(last.values())
