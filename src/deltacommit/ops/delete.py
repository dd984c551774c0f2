"""Row-level DELETE that writes deletion vectors instead of rewriting files.

Used by ``DeltaTable.delete`` when the table allows new deletion vectors
(``delta.enableDeletionVectors=true`` and the ``deletionVectors`` writer feature) and the
predicate references data columns.  Each file with matching rows keeps its Parquet file: its
``add`` is replaced by one whose DV marks the union of the old and the newly deleted rows, all
new DVs in one ``deletion_vector_<uuid>.bin`` at the table root (as Spark writes them); a file
left with no row is removed outright.  Rows are deleted where the predicate is TRUE (SQL logic:
NULL deletes nothing).

Before it commits, the delete proves its output (``check_output``): each touched file's rows
as the new deletion vector, read back from the file just written, leaves them must be exactly
the rows its old deletion vector left less those the predicate matches among them, computed
again from the live rows.  Otherwise the new deletion-vector file is deleted and
``RewriteCheckError`` says so; nothing is committed.  So is it when the commit fails in a way
that proves nothing was committed (a conflict with a concurrent writer).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from deltacommit.engine.commit.commit_info import json_text
from deltacommit.engine.commit.outcome import Outcome, outcome_of
from deltacommit.engine.commit.policy import CommitResult
from deltacommit.engine.scan import prune_files
from deltacommit.errors import UnsupportedProtocolError
from deltacommit.io.deletion_vectors import deleted_rows, keep_mask
from deltacommit.io.dictionary_columns import plain_columns
from deltacommit.ops.deletion_vectors import check_output, write_deletion_vectors
from deltacommit.ops.pruning import predicate_bounds
from deltacommit.ops.rowlevel import (
    FileChange,
    Planned,
    ReadFile,
    Rewritten,
    RowLevelJob,
    RowLevelTable,
    RowRewrite,
    candidate_files,
    rewrite_spark_metrics,
    run_row_level,
)
from deltacommit.protocol.actions import Add
from deltacommit.protocol.deletion_vectors import encode_bitmap_array
from deltacommit.protocol.expressions.ast import And
from deltacommit.protocol.expressions.predicates import Predicate
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.protocol.log.paths import parse_location

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction

log = logging.getLogger(__name__)


def deletes_write_dvs(table: RowLevelTable) -> bool:
    """Whether writers may add deletion vectors to ``table`` (PROTOCOL.md: only with the property)."""
    return table.table_config.deletion_vectors_enabled(table.protocol)


def delete_with_deletion_vectors(table: RowLevelTable, predicate: Predicate) -> CommitResult:
    where = f"delete from table {table.uri} where {predicate.to_sql()}"
    if table.table_config.change_data_feed_enabled(table.protocol):
        raise UnsupportedProtocolError(
            f"{where}: the table has change data feed enabled (delta.enableChangeDataFeed=true), "
            "so a DELETE of some rows of a file must also write change data files, which "
            "deltacommit does not write; delete whole partitions (a predicate on partition "
            "columns only) or run the DELETE with Spark")
    written: list[str] = []
    committing = False
    try:
        with table.transaction("DELETE", {"predicate": json_text([predicate.to_sql()])}
                               ) as txn:
            stage_dv_delete(table, txn, predicate, where, written)
            committing = True
    except Exception as e:
        # The deletion-vector file is deleted where the failure proves no version names it
        # (a conflict, a refused commit, a failure before the commit), as the write driver
        # deletes data files (``engine.commit.outcome``); else VACUUM removes it.
        if outcome_of(e, committing=committing) is Outcome.NOT_COMMITTED:
            for path in written:
                try:
                    table.log_store.store.delete(path)
                except Exception as gone:  # best effort: never hides ``e``
                    log.warning("could not delete %s, which no commit names: %s", path, gone)
        raise
    assert txn.result is not None
    return txn.result


def stage_dv_delete(table: RowLevelTable, txn: Transaction, predicate: Predicate,
                    where: str, written: list[str] | None = None) -> pa.Table:
    """Stage in ``txn`` the deletion of the rows where ``predicate`` is TRUE by deletion
    vectors (see the module docstring), proven before anything is staged; the live rows
    deleted, in the table's schema (what an UPDATE writes again, changed).

    Only the files whose statistics admit a matching row are opened.  On a table with row
    tracking the transaction records the rows it deletes (``Transaction.record_row_changes``),
    so concurrent commits are checked against them row by row.  The deletion-vector file
    written, if any, is appended to ``written``: the caller deletes it if nothing commits."""
    matching = row_filter(predicate, table.schema, where)
    # Read as Spark's file-level rules need it; only the files whose statistics admit a
    # matching row are opened.
    files = txn.scan()
    admitted = {a.path for a in prune_files(txn.snapshot, predicate)}
    files = [a for a in files if a.path in admitted]
    scan = replace(table.file_scan(table.schema), physical_rows=True)
    changes: list[tuple[Add, int, Any, Any]] = []
    removes: list[Add] = []
    kept: list[tuple[Add, bytes, int]] = []
    #: Each touched file's physical rows and the rows that should survive the delete.
    proofs: list[tuple[Add, pa.Table, pa.Table]] = []
    gone: list[pa.Table] = []
    deleted_now = 0
    for add in files:
        data = scan.read(add)
        n = data.num_rows
        hit = np.flatnonzero(matching.matches(data).to_numpy(zero_copy_only=False))
        old = (deleted_rows(table.log_store.store, parse_location(table.uri), table.uri,
                            add.deletion_vector, data_file=add.path, num_rows=n,
                            storage_options=table.storage_options,
                            allow_external=table.allow_external_paths)
               if add.deletion_vector else np.zeros(0, np.uint64)).astype(np.int64)
        rows = np.union1d(old, hit)
        if len(rows) == len(old):
            continue
        newly = np.setdiff1d(hit, old)
        deleted_now += len(newly)
        removes.append(add)
        changes.append((add, n, old, newly))
        gone.append(data.take(newly))
        live = data.filter(keep_mask(old.astype(np.uint64), n, f"{where}: {add.path}")) \
            if len(old) else data
        proofs.append((add, data, live.filter(matching.not_matching(live))))
        if len(rows) < n:
            kept.append((add, encode_bitmap_array(rows), len(rows)))
    adds, dv_file = write_deletion_vectors(table.log_store.store, kept)
    if dv_file is not None and written is not None:
        written.append(dv_file)
    check_output(table, proofs, adds, dv_file, where)
    # On a table with row tracking, concurrent commits are checked against these rows and
    # the predicate, not file by file.
    txn.record_row_changes(predicate, changes)
    txn.remove(removes)
    txn.add(adds)
    metrics = txn.operation_metrics
    metrics["numRemovedFiles"] = str(int(metrics.get("numRemovedFiles", 0))
                                     + len(removes) - len(adds))
    metrics["numDeletionVectorsAdded"] = str(int(metrics.get("numDeletionVectorsAdded", 0))
                                             + len(adds))
    metrics["numDeletionVectorsRemoved"] = str(
        int(metrics.get("numDeletionVectorsRemoved", 0))
        + sum(1 for a in removes if a.deletion_vector))
    metrics["numDeletedRows"] = str(int(metrics.get("numDeletedRows", 0)) + deleted_now)
    return pa.concat_tables(gone) if gone else table.schema.empty_table()


def delete_rows(table: RowLevelTable, predicate: Predicate) -> CommitResult:
    """DELETE the rows where ``predicate`` (over any columns) is TRUE through the row-level
    rewrite (``rowlevel``): copy-on-write on a table without deletion vectors, deletion
    vectors with change data files on one with change data feed.  Only the files whose
    partition values and statistics admit a matching row are opened; a commit is made only
    when a row is deleted (Spark commits an empty DELETE; its result is then the table's
    version, with ``attempts`` 0)."""
    schema = table.schema
    where = f"delete from table {table.uri} where {predicate.to_sql()}"
    matching = row_filter(predicate, schema, where)

    def plan(rewrite: RowRewrite, txn: Transaction) -> Planned:
        started = time.monotonic()
        conjuncts = list(predicate.children) if isinstance(predicate, And) else [predicate]
        files, skipped = candidate_files(rewrite, txn, conjuncts,
                                         predicate_bounds(predicate, schema))

        def one(f: ReadFile) -> FileChange:
            # Only the dictionary columns the predicate reads are decoded.
            rows = plain_columns(f.live_as_read(), predicate.columns())
            hit = np.flatnonzero(matching.matches(rows).to_numpy(zero_copy_only=False))
            return FileChange(f, f.live[hit], np.zeros(0, np.int64), schema.empty_table())

        changes = rewrite.each_file(files, one)
        return Planned(changes, None, len(files), skipped, int((time.monotonic() - started)
                                                               * 1000),
                       {"deleted": sum(len(c.deleted) for c in changes)}, reads=predicate)

    def spark_metrics(planned: Planned, written: Rewritten) -> dict[str, str]:
        return rewrite_spark_metrics(planned, written, "numDeletedRows", "deleted")

    done = run_row_level(RowLevelJob(table, "DELETE",
                                     {"predicate": json_text([predicate.to_sql()])}, where,
                                     plan, spark_metrics))
    if done.result is not None:
        return done.result
    return CommitResult(done.version, 0, read_version=done.version)


__all__ = ["delete_rows", "delete_with_deletion_vectors", "deletes_write_dvs",
           "stage_dv_delete"]
