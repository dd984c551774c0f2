"""A row-level operation as the one write driver runs it: plan on a fresh transaction, write
and prove the rewrite, stage, commit; and the metrics Spark records for it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from deltacommit.ops.driver import Attempt, Decision, Finished, TableJob, run
from deltacommit.ops.rowlevel.rewrite import (
    FileChange,
    Positions,
    Rewritten,
    RowLevelTable,
    RowRewrite,
)
from deltacommit.protocol.expressions.ast import Expr

if TYPE_CHECKING:
    from deltacommit.engine.commit.policy import CommitResult
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.protocol.actions import Add


@dataclass(frozen=True, slots=True)
class FileRows:
    """The rows of one file a row-level operation changed or read, as the row-level conflict
    check is told them (``Transaction.record_row_changes``): the file's add as read, its
    physical rows, the positions its deletion vector deleted when read, the positions the
    operation deleted or rewrote, and those it read and left as they were but whose existence
    decides its outcome (``FileChange.read``).  Positions ascending.  A verb that works the
    changes out where the driver cannot see them (Spark tasks) reports these instead of its
    ``FileChange`` (which holds the file's rows)."""

    add: Add
    num_rows: int
    deleted_before: Positions
    changed: Positions
    read: Positions

    @classmethod
    def of(cls, change: FileChange) -> FileRows:
        n = change.file.physical.num_rows
        return cls(change.file.add, n,
                   np.setdiff1d(np.arange(n, dtype=np.int64), change.file.live),
                   np.union1d(change.deleted, change.updated).astype(np.int64), change.read)


def record_rows(txn: Transaction, reads: Expr | Callable[[], Expr],
                files: Sequence[FileRows]) -> bool:
    """Declare ``txn`` a row-level operation acting on the rows where ``reads`` is TRUE, which
    changed and read the rows ``files`` name: concurrent commits are then checked row by row
    (``Transaction.record_row_changes``; False where the table keeps the file-level rules)."""
    return txn.record_row_changes(
        reads,
        [(f.add, f.num_rows, f.deleted_before, f.changed) for f in files if len(f.changed)],
        [(f.add, f.num_rows, f.deleted_before, f.read) for f in files if len(f.read)])


@dataclass(slots=True)
class Planned:
    """A verb's work on its snapshot, before anything is written: the changes of the files it
    read, the rows it inserts (conformed), and its counts."""

    changes: list[FileChange] = field(default_factory=list)
    inserted: pa.Table | None = None
    files_scanned: int = 0
    files_skipped: int = 0
    scan_ms: int = 0
    #: The verb's own counts (its metrics under deltalake's and Spark's names derive from them).
    counts: dict[str, int] = field(default_factory=dict)
    #: The condition of the target rows the verb acts on (UPDATE, DELETE: its predicate, TRUE
    #: without one; MERGE: its target rows' condition, covering every key it may insert).
    #: Given, a table with deletion vectors and row tracking checks concurrent commits row by
    #: row against it, the rows changed and the rows read that decide its outcome
    #: (``FileChange.read``, ``Transaction.record_row_changes``); None keeps Spark's
    #: file-level rules.  A function builds it where a concurrent commit is checked (a
    #: MERGE's list of 100,000 source keys).
    reads: Expr | Callable[[], Expr] | None = None
    #: The rows of each file the verb changed or read, where ``changes`` cannot say them
    #: (Spark tasks worked them out and reported them); None: those of ``changes``.
    rows: list[FileRows] | None = None

    def file_rows(self) -> list[FileRows]:
        """The rows of each file the verb changed or read (``rows``, else ``changes``')."""
        if self.rows is not None:
            return self.rows
        return [FileRows.of(c) for c in self.changes if c.touched or len(c.read)]


def rewrite_spark_metrics(planned: Planned, written: Rewritten, rows_metric: str,
                          count: str) -> dict[str, str]:
    """Spark's operationMetrics of an UPDATE or DELETE (its commitInfo, as Spark writes them):
    the rewrite's files, bytes, deletion vectors and times, and ``rows_metric``
    (``numUpdatedRows``, ``numDeletedRows``) the verb's ``count`` of the rows it changed."""
    return {"numAddedFiles": str(written.files_added),
            "numRemovedFiles": str(written.files_removed),
            rows_metric: str(planned.counts.get(count, 0)),
            "numCopiedRows": str(written.rows_copied),
            "numAddedChangeFiles": str(written.change_files),
            "numDeletionVectorsAdded": str(written.dvs_added),
            "numDeletionVectorsRemoved": str(written.dvs_removed),
            "numAddedBytes": str(written.bytes_added),
            "numRemovedBytes": str(written.bytes_removed),
            "scanTimeMs": str(planned.scan_ms),
            "rewriteTimeMs": str(written.rewrite_ms)}


@dataclass(slots=True)
class Done:
    """A row-level operation that ended: what it planned and wrote, and the commit (None
    when it changed nothing, so nothing was committed)."""

    planned: Planned
    written: Rewritten
    result: CommitResult | None
    version: int
    execution_ms: int


class RowLevelJob(TableJob[RowLevelTable]):
    """A row-level operation as the write driver runs it (``driver.run``): each attempt
    plans on a fresh transaction (``plan``: which files, which rows), writes and proves the
    rewrite, stages it and commits; a conflict raises, its files deleted, as Spark's and
    deltalake's row-level operations fail.  ``spark_metrics`` gives the ``operationMetrics``
    of the commit."""

    def __init__(self, table: RowLevelTable, operation: str, parameters: Mapping[str, Any],
                 what: str, plan: Callable[[RowRewrite, Transaction], Planned],
                 spark_metrics: Callable[[Planned, Rewritten], dict[str, str]]) -> None:
        super().__init__(table)
        self.operation = operation
        self.parameters = dict(parameters)
        self.what = what
        self.plan = plan
        self.spark_metrics = spark_metrics
        self.started = time.monotonic()
        self._rewrite: RowRewrite | None = None
        self._planned = Planned()
        self._written = Rewritten()

    def begin(self, attempt: Attempt) -> Transaction:
        self._txn = self.table.transaction(self.operation, self.parameters)
        self._txn.check_can_commit()
        return self._txn

    def _done(self, result: CommitResult | None) -> Done:
        return Done(self._planned, self._written, result,
                    result.version if result is not None else self.txn.read_version,
                    int((time.monotonic() - self.started) * 1000))

    def write(self, attempt: Attempt) -> Finished[Done] | None:
        self._rewrite = RowRewrite(self.table, self.txn, self.what)
        self._planned = self.plan(self._rewrite, self.txn)
        self._written = self._rewrite.rewrite(attempt, self._planned.changes,
                                              self._planned.inserted)
        if self._written.empty:
            return Finished(self._done(None))
        return None

    def stage(self, attempt: Attempt) -> None:
        assert self._rewrite is not None
        planned = self._planned
        if planned.reads is not None and self._rewrite.deletion_vectors:
            record_rows(self.txn, planned.reads, planned.file_rows())
        self._rewrite.stage(self.txn, self._written)
        self.txn.operation_metrics.update(self.spark_metrics(self._planned, self._written))

    def commit(self, attempt: Attempt) -> Done:
        return self._done(self.txn.commit())

    def refused(self, attempt: Attempt, error: Exception) -> Decision | Finished[Done]:
        return Decision.RAISE


def run_row_level(job: RowLevelJob) -> Done:
    """Run a row-level operation through the one write driver."""
    return run(job)
