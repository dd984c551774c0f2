"""``DeltaTable.delete(predicate)``: DELETE the rows where a SQL predicate is TRUE.

The predicate is any expression UPDATE and MERGE accept (``parse_expression``: arithmetic,
functions, casts, two columns compared, ``CASE``), evaluated with SQL's logic: a row where it
is NULL is kept.  It is checked against the table's schema before anything is read, so a
column the table lacks, a value its column cannot be compared with or a syntax error is
refused naming the table and the predicate, and nothing is committed.  Then one of three
ways (``delete``):

- a predicate partition values decide (``engine.scan.decided_by_partition_values``: a
  comparison of partition columns with literals, ``IN``, ``IS NULL``, ``AND``/``OR``/``NOT``)
  removes whole files without reading them, and the transaction records it as the partitions
  it read;
- any other on a table that allows new deletion vectors (``delta.enableDeletionVectors=true``
  and the ``deletionVectors`` writer feature) and has no change data feed writes deletion
  vectors (below);
- else the row-level rewrite (``delete_rows``): copy-on-write, or deletion vectors with change
  data files on a change-data-feed table.

Either row path records as read the partitions its predicate's conjuncts decide and the whole
table without one (``rowlevel.read_partitions``), so a concurrent writer's new files are
checked against what the DELETE may have deleted; a predicate partition values cannot decide
(``p % 2 = 0``) widens the read to the whole table.  Only the files whose partition values and
statistics admit a matching row are opened (``prune_files``, ``predicate_bounds``).  The
commitInfo's ``predicate`` is the predicate's SQL text (``Expr.to_sql``, which parses back to
it).  On every path a DELETE that finds no row to delete commits no version
(``nothing_deleted``), as Spark and deltalake do.  Every path answers with deltalake's
metrics (``deleted_metrics``): ``num_added_files``, ``num_removed_files``, ``num_deleted_rows``,
``num_copied_rows``, ``execution_time_ms``, ``scan_time_ms``, ``rewrite_time_ms``, and the
``version`` the DELETE committed (the version it read where it committed none).

Deletion vectors: each file with matching rows keeps its Parquet file: its ``add`` is replaced
by one whose DV marks the union of the old and the newly deleted rows, all new DVs in one
``deletion_vector_<uuid>.bin`` at the table root (as Spark writes them); a file left with no row
is removed outright.  Before it commits, the delete proves its output (``check_output``): each
touched file's rows as the new deletion vector, read back from the file just written, leaves
them must be exactly the rows its old deletion vector left less those the predicate matches
among them, computed again from the live rows.  Otherwise the new deletion-vector file is
deleted and ``RewriteCheckError`` says so; nothing is committed.  So is it when the commit
fails in a way that proves nothing was committed (a conflict with a concurrent writer).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from typing import Protocol as Interface

import numpy as np
import pyarrow as pa

from deltacommit.engine.commit.commit_info import json_text
from deltacommit.engine.commit.outcome import Outcome, outcome_of
from deltacommit.engine.scan import decided_by_partition_values, prune_files
from deltacommit.errors import InvalidArgumentError
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
    read_partitions,
    rewrite_spark_metrics,
    run_row_level,
)
from deltacommit.protocol.actions import Add
from deltacommit.protocol.deletion_vectors import encode_bitmap_array
from deltacommit.protocol.expressions.ast import And, Expr
from deltacommit.protocol.expressions.parser import parse_expression
from deltacommit.protocol.expressions.predicates import Predicate
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.protocol.log.paths import parse_location

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction

log = logging.getLogger(__name__)


class DeleteTable(RowLevelTable, Interface):
    """What a DELETE needs of its table (``DeltaTable`` is one)."""

    @property
    def partition_columns(self) -> list[str]: ...


def _conjuncts(predicate: Predicate) -> list[Expr]:
    return list(predicate.children) if isinstance(predicate, And) else [predicate]


def _where(table: RowLevelTable, predicate: Predicate) -> str:
    """What a DELETE's errors name: the table and the predicate's SQL."""
    return f"DELETE from table {table.uri} where {predicate.to_sql()}"


def parse_delete(table: RowLevelTable, predicate: str) -> tuple[Predicate, str]:
    """The tree of a DELETE's ``predicate``, checked against the table's schema, and the
    ``where`` its errors name (the table and the predicate); InvalidArgumentError for text
    that does not parse or does not evaluate over the table's rows (a column the table lacks,
    a literal its column cannot be compared with, a non-boolean expression)."""
    if not isinstance(predicate, str):
        raise InvalidArgumentError(f"DELETE from table {table.uri}: the predicate must be SQL "
                                   f"text, got {predicate!r}")
    try:
        parsed = parse_expression(predicate)
    except InvalidArgumentError as e:  # its message quotes the text and points into it
        raise InvalidArgumentError(f"DELETE from table {table.uri}: {e}") from None
    where = _where(table, parsed)
    row_filter(parsed, table.schema, where)
    return parsed, where


def delete(table: DeleteTable, predicate: str | None) -> dict[str, Any]:
    """DELETE the rows where ``predicate`` is TRUE, every row without one (module
    docstring); deltalake's metrics and the version (``deleted_metrics``)."""
    started = time.monotonic()
    if predicate is None:
        return remove_files(table, None, started)
    parsed, _ = parse_delete(table, predicate)
    if decided_by_partition_values(parsed, table.schema, table.partition_columns):
        return remove_files(table, parsed, started)
    if deletes_write_dvs(table):  # which sends a change-data-feed table to delete_rows
        return delete_with_deletion_vectors(table, parsed, started)
    return delete_rows(table, parsed, started)


def deleted_metrics(version: int, started: float, *, added: int = 0, removed: int = 0,
                    deleted: int = 0, copied: int = 0, scan_ms: int = 0, rewrite_ms: int = 0,
                    **more: int) -> dict[str, Any]:
    """What a DELETE answers, whichever path it took: deltalake 1.6.0's metrics of
    ``DeltaTable.delete`` (``added`` and ``removed`` data files, rows ``deleted`` and rows
    ``copied`` into new files, times in ms from ``started``, a ``time.monotonic()``), then any
    ``more`` (the deletion-vector path's counts), and the ``version`` committed, or read
    where nothing was."""
    return {"num_added_files": added, "num_removed_files": removed,
            "num_deleted_rows": deleted, "num_copied_rows": copied,
            "execution_time_ms": int((time.monotonic() - started) * 1000),
            "scan_time_ms": scan_ms, "rewrite_time_ms": rewrite_ms, **more,
            "version": version}


def remove_files(table: RowLevelTable, predicate: Predicate | None,
                 started: float) -> dict[str, Any]:
    """Remove every file whose partition values make ``predicate`` TRUE (every file for None)
    without reading it: ``predicate`` must be one partition values decide.  Nothing is
    committed when no file matches (``nothing_deleted``)."""
    params = {"predicate": json_text([predicate.to_sql()] if predicate is not None else [])}
    txn = table.transaction("DELETE", params)
    files = txn.scan(predicate=predicate)
    scan_ms = int((time.monotonic() - started) * 1000)
    if not files:
        return nothing_deleted(txn.snapshot.version, started, scan_ms=scan_ms)
    txn.remove(files)
    deleted = sum((a.num_records() or 0) - int((a.deletion_vector or {}).get("cardinality") or 0)
                  for a in files)
    txn.operation_metrics["numRemovedFiles"] = str(len(files))
    txn.operation_metrics["numDeletedRows"] = str(deleted)
    return deleted_metrics(txn.commit().version, started, removed=len(files), deleted=deleted,
                           scan_ms=scan_ms)


def nothing_deleted(version: int, started: float, scan_ms: int = 0) -> dict[str, Any]:
    """The answer of a DELETE that found nothing to delete at the ``version`` it read: no
    version is committed, as neither Spark (``commitIfNeeded`` skips a commit without
    actions) nor deltalake commits one, whichever path the DELETE took; the metrics are
    zeros and the version the one read."""
    return deleted_metrics(version, started, scan_ms=scan_ms)


def deletes_write_dvs(table: RowLevelTable) -> bool:
    """Whether writers may add deletion vectors to ``table`` (PROTOCOL.md: only with the property)."""
    return table.table_config.deletion_vectors_enabled(table.protocol)


def delete_with_deletion_vectors(table: RowLevelTable, predicate: Predicate,
                                 started: float | None = None) -> dict[str, Any]:
    """DELETE by deletion vectors alone.  A table with change data feed also needs the
    deleted rows' change data files, which the row-level rewrite writes beside its deletion
    vectors: such a DELETE goes there (``delete_rows``).  No data file is written or copied:
    ``num_removed_files`` counts the files left with no row, ``num_deletion_vectors_added``
    the files given a new deletion vector."""
    started = time.monotonic() if started is None else started
    if table.table_config.change_data_feed_enabled(table.protocol):
        return delete_rows(table, predicate, started)
    where = _where(table, predicate)
    written: list[str] = []
    committing = False
    try:
        txn = table.transaction("DELETE", {"predicate": json_text([predicate.to_sql()])})
        stage_dv_delete(table, txn, predicate, where, written)
        scan_ms = int((time.monotonic() - started) * 1000)
        if not txn.staged_removes and not txn.staged_adds:
            return nothing_deleted(txn.snapshot.version, started, scan_ms)
        committing = True
        result = txn.commit()
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
    counts = txn.operation_metrics
    return deleted_metrics(result.version, started, removed=int(counts["numRemovedFiles"]),
                           deleted=int(counts["numDeletedRows"]), scan_ms=scan_ms,
                           num_deletion_vectors_added=int(counts["numDeletionVectorsAdded"]))


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
    files = read_partitions(txn, _conjuncts(predicate))
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


def delete_rows(table: RowLevelTable, predicate: Predicate,
                started: float | None = None) -> dict[str, Any]:
    """DELETE the rows where ``predicate`` (over any columns) is TRUE through the row-level
    rewrite (``rowlevel``): copy-on-write on a table without deletion vectors, deletion
    vectors with change data files on one with change data feed.  Only the files whose
    partition values and statistics admit a matching row are opened; a commit is made only
    when a row is deleted (``nothing_deleted``)."""
    schema = table.schema
    where = _where(table, predicate)
    matching = row_filter(predicate, schema, where)

    def plan(rewrite: RowRewrite, txn: Transaction) -> Planned:
        started = time.monotonic()
        files, skipped = candidate_files(rewrite, txn, _conjuncts(predicate),
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

    started = time.monotonic() if started is None else started
    done = run_row_level(RowLevelJob(table, "DELETE",
                                     {"predicate": json_text([predicate.to_sql()])}, where,
                                     plan, spark_metrics))
    return deleted_metrics(done.version, started, added=done.written.files_added,
                           removed=done.written.files_removed,
                           deleted=done.planned.counts.get("deleted", 0),
                           copied=done.written.rows_copied, scan_ms=done.planned.scan_ms,
                           rewrite_ms=done.written.rewrite_ms)


__all__ = ["DeleteTable", "delete", "delete_rows", "delete_with_deletion_vectors",
           "deleted_metrics", "deletes_write_dvs", "nothing_deleted", "parse_delete", "remove_files",
           "stage_dv_delete"]
