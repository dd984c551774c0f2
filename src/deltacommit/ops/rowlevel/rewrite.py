"""The rewrite every row-level operation shares: UPDATE, MERGE and DELETE change some rows of
some files; this module reads those files, writes the change and proves it before it is staged.

Each verb works out, file by file, which live rows it deletes and which it updates (with their
new values, conformed to the table's rules), and which rows it inserts; ``RowRewrite`` turns
that into actions, as Spark does:

* **copy-on-write** (the table does not allow new deletion vectors): each touched file is
  removed, and its untouched live rows are written again with the updated and inserted rows;
* **deletion vectors** (``delta.enableDeletionVectors=true``): each touched file is committed
  again with a deletion vector marking the deleted and updated rows (removed when none is
  left), and only the updated and inserted rows are written (``delete.write_deletion_vectors``).

On a table with row tracking, rows keep their stable ids as Spark keeps them: copied rows keep
their ids and row commit versions, updated rows keep their ids and take the commit's version
(their materialized commit version is left NULL, so it is the new file's default), inserted
rows get fresh ids.  On a table with change data feed (``delta.enableChangeDataFeed=true``)
the changed rows are also written as change data files under ``_change_data/`` (``delete``,
``update_preimage``, ``update_postimage``, ``insert``), staged as ``cdc`` actions.

Before anything is staged the output is proven (``rewrite_check``): the new data files read
back must hold exactly the copied, updated and inserted rows (with their stable ids), and each
file's new deletion vector must leave exactly its live rows less those changed; otherwise what
was written is deleted and ``RewriteCheckError`` says so.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import wait
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast
from typing import Protocol as Interface

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.engine.rewrite_check import check_rewritten
from deltacommit.errors import InvalidArgumentError
from deltacommit.io.datafiles import (
    CHANGE_TYPE_COLUMN,
    PARQUET_OPTIONS,
    WriteTarget,
    write_data_file,
    write_data_files,
    write_rows,
)
from deltacommit.io.deletion_vectors import deleted_rows
from deltacommit.io.dictionary_columns import (
    concatenated,
    dictionaries_within,
    in_one_dictionary,
    joined,
    plain_table,
)
from deltacommit.ops.deletion_vectors import (
    ProvingTable,
    check_output,
    write_deletion_vectors,
)
from deltacommit.ops.driver import Attempt
from deltacommit.protocol.actions import Add, AddCDCFile
from deltacommit.protocol.deletion_vectors import encode_bitmap_array
from deltacommit.protocol.features import row_tracking
from deltacommit.protocol.fingerprint import same_values
from deltacommit.protocol.log.paths import parse_location
from deltacommit.protocol.partitions import decode_add_path
from deltacommit.runtime.threads import CallThreads

if TYPE_CHECKING:
    from deltacommit.engine.scan import FileScan
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.io.storage.base import ObjectStore
    from deltacommit.protocol.actions import Protocol
    from deltacommit.protocol.table_config.config import TableConfig
    from deltacommit.runtime.clock import Clock, RandomSource

Positions = npt.NDArray[np.int64]
T = TypeVar("T")
B = TypeVar("B")


class RowLevelTable(ProvingTable, Interface):
    """What a row-level operation needs of its table (``DeltaTable`` is one); a protocol, so
    the modules the table calls do not import the table back."""

    clock: Clock
    random: RandomSource

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def protocol(self) -> Protocol: ...

    @property
    def table_config(self) -> TableConfig: ...

    @property
    def store(self) -> ObjectStore:
        """The object store of the table's location (its log store's)."""
        ...

    def file_scan(self, out_schema: pa.Schema) -> FileScan: ...

    def transaction(self, operation: str = ..., operation_parameters: Any = ...,
                    isolation_level: Any = ...) -> Transaction: ...


@dataclass(slots=True)
class ReadFile:
    """A file a row-level operation read: every physical row (the table's columns, and on a
    row-tracking table the stable row ids and commit versions in the hidden columns) and
    which of them are live."""

    add: Add
    physical: pa.Table
    live: Positions
    #: The table's column names (``physical`` may have the hidden ones after them).
    columns: Sequence[str]

    def live_rows(self) -> pa.Table:
        """The live rows in the table's schema (dictionary columns decoded): what the verb
        judges."""
        return plain_table(self.live_as_read())

    def live_as_read(self) -> pa.Table:
        """The live rows in the table's schema, dictionary columns as read."""
        rows = self.physical.select(list(self.columns))
        return rows if len(self.live) == rows.num_rows else rows.take(self.live)


@dataclass(slots=True)
class ReadBatch:
    """Files read one after the other, judged together: the live rows of each in turn, so a
    verb evaluates its expressions once over many small files instead of once per file (the
    evaluation costs more per call than per row).  ``split`` turns positions into the batch
    back into each file's."""

    files: list[ReadFile]
    #: The live rows of every file (the table's schema), file after file, the dictionary
    #: columns as read (``plain_columns`` decodes those an expression reads).
    as_read: pa.Table
    #: Where each file's rows start in ``rows``, and the end (one more entry).
    starts: Positions
    decoded: pa.Table | None = None

    @classmethod
    def of(cls, files: Sequence[ReadFile]) -> ReadBatch:
        parts = [f.live_as_read() for f in files]
        counts = np.array([p.num_rows for p in parts], dtype=np.int64)
        rows = concatenated(parts)  # files of other encodings among them
        return cls(list(files), rows, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))

    @property
    def rows(self) -> pa.Table:
        """``as_read`` decoded (what a verb judges), once for the batch."""
        if self.decoded is None:
            self.decoded = plain_table(self.as_read)
        return self.decoded

    def split(self, positions: Positions) -> list[tuple[ReadFile, Positions, int, int]]:
        """For each file: the ascending ``positions`` (into ``rows``) of its rows as its own
        physical row numbers, and where they lie in ``positions`` (from, to)."""
        cuts = np.searchsorted(positions, self.starts, side="left")
        out = []
        for i, f in enumerate(self.files):
            a, b = int(cuts[i]), int(cuts[i + 1])
            out.append((f, f.live[positions[a:b] - self.starts[i]], a, b))
        return out


def _no_positions() -> Positions:
    return np.zeros(0, np.int64)


@dataclass(slots=True)
class FileChange:
    """What a verb does to one file: physical rows deleted and updated (ascending), and the
    updated rows' new values (the table's schema, conformed, in ``updated``'s order); and the
    physical rows it left as they were but whose existence decides its outcome (ascending, a
    MERGE's matched rows that keep their source rows from being inserted), which a concurrent
    commit must not delete or change (``Transaction.record_row_changes``)."""

    file: ReadFile
    deleted: Positions
    updated: Positions
    new_rows: pa.Table
    read: Positions = field(default_factory=_no_positions)

    @property
    def touched(self) -> bool:
        return bool(len(self.deleted) or len(self.updated))


@dataclass(slots=True)
class Rewritten:
    """The actions a rewrite stages, and what it did."""

    removes: list[Add] = field(default_factory=list)
    adds: list[Add] = field(default_factory=list)
    cdc: list[AddCDCFile] = field(default_factory=list)
    #: Store paths of the change data files (written unsynced, as the data files are).
    unsynced: list[str] = field(default_factory=list)
    files_added: int = 0
    files_removed: int = 0
    rows_copied: int = 0
    dvs_added: int = 0
    dvs_removed: int = 0
    change_files: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0
    rewrite_ms: int = 0

    @property
    def empty(self) -> bool:
        return not (self.removes or self.adds or self.cdc)


class RowRewrite:
    """One row-level operation's reads and writes on its transaction's snapshot."""

    def __init__(self, table: RowLevelTable, txn: Transaction, what: str) -> None:
        snap = txn.snapshot
        self.table = table
        self.what = what
        self.schema = snap.schema
        self.target = WriteTarget.of(table.uri, snap)
        self.hidden = row_tracking.rewrite_columns(snap.table_config, snap.protocol,
                                                   snap.schema, what)
        self.deletion_vectors = snap.table_config.deletion_vectors_enabled(snap.protocol)
        self.change_data = snap.table_config.change_data_feed_enabled(snap.protocol)
        fields = list(self.schema)
        if self.hidden is not None:
            fields += row_tracking.hidden_fields(self.hidden, self.target.column_mapping)
        self.wide_schema = pa.schema(fields)
        # The dictionaries of low-cardinality string columns are carried from the files read
        # to the files written (``dictionary_columns``); the verbs judge decoded rows.
        self.scan = replace(table.file_scan(self.wide_schema), physical_rows=True,
                            file_threads=False, keep_dictionaries=True)
        self.read_back_scan = table.file_scan(self.wide_schema)
        self.store = table.log_store.store

    # ------------------------------------------------------------------ reading

    def read(self, add: Add) -> ReadFile:
        """A file's physical rows, with stable ids where the table tracks rows."""
        table = self.table
        data = self.scan.read(add)
        n = data.num_rows
        if self.hidden is not None:
            rid, ver = self.hidden
            ids, versions = row_tracking.stable_ids(add, data.column(rid), data.column(ver),
                                                    table.uri)
            data = data.set_column(data.schema.get_field_index(rid), rid, ids)
            data = data.set_column(data.schema.get_field_index(ver), ver, versions)
        if add.deletion_vector:
            old = deleted_rows(self.store, parse_location(table.uri), table.uri,
                               add.deletion_vector, data_file=add.path, num_rows=n,
                               storage_options=table.storage_options,
                               allow_external=table.allow_external_paths).astype(np.int64)
            live = np.setdiff1d(np.arange(n, dtype=np.int64), old, assume_unique=True)
        else:
            live = every_row(n)
        return ReadFile(add, data, live, self.schema.names)

    def each_file(self, files: Sequence[Add], work: Callable[[ReadFile], T]) -> list[T]:
        """``work`` on each file as read, in threads (reading and Arrow's kernels release
        the interpreter), in the files' order."""
        def one(add: Add) -> T:
            return work(self.read(add))

        if len(files) <= 1:
            return [one(a) for a in files]
        local = self.store.local_path("") is not None
        if not local:
            with CallThreads(max_workers=min(len(files), 16)) as pool:
                return list(pool.map(one, files))
        # Local files are decoded, not waited for: runs of consecutive files to each thread,
        # so that the caller is woken once per run, not once per (small) file.
        workers = min(len(files), READ_THREADS_LOCAL)
        per = max(1, -(-len(files) // (workers * 4)))
        runs = [files[i:i + per] for i in range(0, len(files), per)]
        with CallThreads(max_workers=workers) as pool:
            return [r for run in pool.map(lambda run: [one(a) for a in run], runs) for r in run]

    def columns_of(self, files: Sequence[Add], columns: Sequence[str],
                   work: Callable[[pa.Table], T]) -> list[T]:
        """``work`` on the physical rows of each file, ``columns`` alone (top-level columns
        of the table), in threads, in the files' order: a first look at the columns that
        decide whether a file is touched at all, before reading the rest."""
        fields = [self.schema.field(c) for c in columns]
        scan = replace(self.table.file_scan(pa.schema(fields)), physical_rows=True,
                       file_threads=False)
        if len(files) <= 1:
            return [work(scan.read(a)) for a in files]
        local = self.store.local_path("") is not None
        with CallThreads(max_workers=min(len(files), READ_THREADS_LOCAL if local else 16)) as pool:
            return list(pool.map(lambda a: work(scan.read(a)), files))

    def each_batch(self, files: Sequence[Add], work: Callable[[ReadBatch], T]) -> list[T]:
        """``work`` on the files as read, a batch of consecutive files (up to
        ``BATCH_ROWS`` live rows) at a time; the files are read in threads, the batches
        judged in threads too, in the files' order.

        Local files are decoded, not waited for: each thread reads a batch's files and judges
        the batch at once, with no wait for every file to be read first.  Those batches are
        cut by the row counts the files' statistics give (a hint: a wrong one only makes a
        batch larger or smaller than meant)."""
        if len(files) > 1 and self.store.local_path("") is not None:
            planned = batches_of(files, _counted_rows)
            if len(planned) > 1:
                def judged(batch: Sequence[Add]) -> T:
                    return work(ReadBatch.of([self.read(a) for a in batch]))

                with CallThreads(max_workers=min(len(planned), READ_THREADS_LOCAL)) as pool:
                    return list(pool.map(judged, planned))
        batches = batches_of(self.each_file(files, lambda f: f), lambda f: len(f.live))
        if len(batches) <= 1:
            return [work(ReadBatch.of(b)) for b in batches]
        with CallThreads(max_workers=min(len(batches), 2)) as pool:
            return list(pool.map(lambda b: work(ReadBatch.of(b)), batches))

    # ------------------------------------------------------------------ writing

    def rewrite(self, attempt: Attempt, changes: Iterable[FileChange],
                inserted: pa.Table | None) -> Rewritten:
        """Write what ``changes`` and ``inserted`` (conformed rows) make of the table, proven
        (module docstring); every file written is in ``attempt.written`` as soon as it
        exists, so the write driver deletes it if nothing is committed."""
        started = time.monotonic()
        touched = [c for c in changes if c.touched]
        out = Rewritten()
        if not touched and (inserted is None or not inserted.num_rows):
            return out
        parts: list[pa.Table] = []
        marked: list[tuple[Add, bytes, int]] = []
        proofs: list[tuple[Add, pa.Table, pa.Table]] = []
        for c in touched:
            f = c.file
            out.removes.append(f.add)
            out.bytes_removed += f.add.size
            if f.add.deletion_vector:
                out.dvs_removed += 1
            if self.deletion_vectors:
                changed = np.union1d(c.deleted, c.updated)
                left = np.setdiff1d(f.live, changed, assume_unique=True)
                n = f.physical.num_rows
                gone = np.setdiff1d(np.arange(n, dtype=np.int64), left, assume_unique=True)
                rows = plain_table(f.physical.select(self.schema.names))
                proofs.append((f.add, rows, rows.take(left)))
                if len(left):
                    marked.append((f.add, encode_bitmap_array(gone), len(gone)))
                if len(c.updated):
                    parts.append(self._with_ids(c.new_rows, f.physical, c.updated))
        if inserted is not None and inserted.num_rows:
            parts.append(self._with_ids(inserted, None, None))
        if marked or proofs:
            adds, dv_file = write_deletion_vectors(self.store, marked)
            if dv_file is not None:
                # Deleted with the data files if nothing is committed.
                attempt.written.append(Add(dv_file, {}, 0, 0))
            check_output(self.table, proofs, adds, dv_file, self.what)
            out.adds.extend(adds)
            out.dvs_added += len(adds)
        out.files_removed = len(out.removes) - len(marked)
        copied = touched if not self.deletion_vectors else []
        written, out.rows_copied = self._write_proven(attempt, copied, parts)
        if written:
            hidden = self.hidden or ()
            new = [replace(a, stats=row_tracking.stats_without_columns(a.stats, hidden))
                   for a in written]
            out.adds.extend(new)
            out.files_added = len(new)
            out.bytes_added = sum(a.size for a in new)
        if self.change_data:
            self._change_files(attempt, touched, inserted, out)
        out.rewrite_ms = int((time.monotonic() - started) * 1000)
        return out

    def _copy_on_write(self, touched: Sequence[FileChange]) -> tuple[pa.Table | None, int]:
        """The rows copy-on-write writes for the ``touched`` files, and how many of them are
        copied unchanged: every live row neither deleted nor updated as it is, and each
        updated row with its new values, in its place, file after file (so a table's order,
        and with it the clustering its file statistics prune by, survives an UPDATE).  One
        ``take`` over all the files instead of one per file: most of the rows of most
        touched files are copied, and a call per file costs more than its rows."""
        physical = [c.file.physical for c in touched]
        rows = joined(physical)
        sizes = np.fromiter((p.num_rows for p in physical), np.int64, len(physical))
        starts = np.zeros(len(physical) + 1, np.int64)
        np.cumsum(sizes, out=starts[1:])
        total = int(starts[-1])
        keep = np.zeros(total, np.bool_)
        new_parts: list[pa.Table] = []
        updated_at: list[Positions] = []
        for c, start, size in zip(touched, starts[:-1].tolist(), sizes.tolist(), strict=True):
            live = c.file.live
            if len(live) == size:
                keep[start:start + size] = True
            else:
                keep[start + live] = True
            keep[start + c.deleted] = False
            if len(c.updated):
                updated_at.append(start + c.updated)
                new_parts.append(self._with_ids(c.new_rows, c.file.physical, c.updated))
        updated = sum(len(u) for u in updated_at)
        if updated and bool(keep.all()):
            # Every row stays (an UPDATE, a MERGE that deletes nothing): the updated rows'
            # new values replace the old in place, column by column, instead of taking every
            # row again.
            positions = np.concatenate(updated_at)
            if bool((np.diff(positions) > 0).all()):
                new_rows = new_parts[0] if len(new_parts) == 1 else pa.concat_tables(new_parts)
                return replaced(rows, positions, new_rows), total - updated
        picked = np.flatnonzero(keep)
        if not len(picked):
            return None, 0
        if updated:
            # Each updated row is taken from the new rows (after the files' rows), in its
            # place: ``picked`` is ascending, and so are the updated positions, file by file.
            positions = np.concatenate(updated_at)
            at = np.searchsorted(picked, positions)
            if not np.array_equal(picked[np.minimum(at, len(picked) - 1)], positions):
                raise InvalidArgumentError(
                    f"{self.what}: a row it updates is also deleted or not live; nothing was "
                    "written")
            picked[at] = np.arange(total, total + updated, dtype=picked.dtype)
        return taken(appended(rows, new_parts), picked), len(picked) - updated

    def _write_proven(self, attempt: Attempt, copied: Sequence[FileChange],
                      parts: Sequence[pa.Table]) -> tuple[list[Add], int]:
        """The copy-on-write rows of the ``copied`` files (``_copy_on_write``) and the rows
        of ``parts`` (conformed, the hidden row-tracking columns last) written as data files
        and proven: their adds, and how many rows were copied unchanged.  Each file written is
        in ``attempt.written``.

        On an unpartitioned table the files are cut into groups of consecutive files
        (``rewrite_groups``), ``parts`` going with the last, and each group's rows are made,
        written (statistics computed from the rows in memory) and read back and compared
        with them (``check_rewritten``) in a thread of its own: taking the rows, encoding,
        decoding and comparing run in Arrow without the interpreter, so the groups overlap on
        the machine's cores.  Every group is proven before this returns, each file read back
        from the store as any reader reads it, so together the files hold exactly the rows
        they should; a group that fails deletes its file, and the others are deleted by the
        write driver (``attempt.written``) when the failure is raised.  A partitioned table's
        rows are written by partition and proven at once, so that the partition values read
        back from the files' paths are compared with the values written."""
        target = self.target
        scan = replace(self.read_back_scan, physical_rows=True, file_threads=False,
                       keep_dictionaries=True)
        what = f"{self.what}: the files it wrote"

        def rows_of(files: Sequence[FileChange], extra: Sequence[pa.Table]
                    ) -> tuple[pa.Table | None, int]:
            made, count = self._copy_on_write(files) if files else (None, 0)
            more = [p for p in extra if p.num_rows]
            if made is None:
                return (None if not more else more[0] if len(more) == 1
                        else pa.concat_tables(more)), count
            # The rows written besides join the copied rows' dictionaries.
            return appended(made, more), count

        if target.partition_columns:
            rows, count = rows_of(copied, parts)
            if rows is None or not rows.num_rows:
                return [], count
            rows = plain_table(rows)
            written = write_rows(self.store, target, rows, clock=self.table.clock,
                                 random=self.table.random, durable=False)
            attempt.written.extend(written)
            check_rewritten(scan, self.store, rows, written, what=what)
            return written, count
        workers = max(1, min(os.cpu_count() or 1, REWRITE_THREADS))
        groups = rewrite_groups([c.file.physical.get_total_buffer_size() for c in copied],
                                sum(p.nbytes for p in parts), workers)
        jobs = [(copied[a:b], parts if i == len(groups) - 1 else [])
                for i, (a, b) in enumerate(groups)]

        def one(index: int, files: Sequence[FileChange], extra: Sequence[pa.Table]
                ) -> tuple[Add | None, int]:
            rows, count = rows_of(files, extra)
            if rows is None or not rows.num_rows:
                return None, count
            rows = dictionaries_within(rows, KEPT_DICTIONARY_BYTES)
            add = write_data_file(self.store, {}, [], rows, index=index,
                                  random=self.table.random, clock=self.table.clock,
                                  indexed_cols=target.indexed_cols,
                                  column_mapping=target.column_mapping,
                                  table_schema=target.schema, durable=False,
                                  delta_integers=target.delta_integers)
            check_rewritten(scan, self.store, rows, [add], what=what)  # deletes it if not
            return add, count

        if len(jobs) <= 1:
            results = [one(0, *jobs[0])] if jobs else []
        else:
            with CallThreads(max_workers=min(workers, len(jobs))) as pool:
                futures = [pool.submit(one, i, *j) for i, j in enumerate(jobs)]
                wait(futures)
            results = [f.result() for f in futures if f.exception() is None]
            attempt.written.extend(a for a, _ in results if a is not None)
            for f in futures:
                f.result()  # the first failure, raised
            return [a for a, _ in results if a is not None], sum(c for _, c in results)
        attempt.written.extend(a for a, _ in results if a is not None)
        return [a for a, _ in results if a is not None], sum(c for _, c in results)

    def _with_ids(self, rows: pa.Table, physical: pa.Table | None,
                  positions: Positions | None) -> pa.Table:
        """``rows`` with the hidden row-tracking columns: the stable ids of ``positions`` of
        ``physical`` (updated rows) or NULL (inserted rows: fresh ids), and a NULL commit
        version (the commit's, by the new file's default)."""
        if self.hidden is None:
            return rows
        rid, ver = self.hidden
        n = rows.num_rows
        ids = (physical.column(rid).take(positions)
               if physical is not None and positions is not None else pa.nulls(n, pa.int64()))
        return rows.append_column(pa.field(rid, pa.int64()), ids).append_column(
            pa.field(ver, pa.int64()), pa.nulls(n, pa.int64()))

    def _change_files(self, attempt: Attempt, touched: Sequence[FileChange],
                      inserted: pa.Table | None, out: Rewritten) -> None:
        """Change data files of every changed row, as Spark writes them."""
        names = self.schema.names
        parts: list[pa.Table] = []

        def typed(rows: pa.Table, kind: str) -> None:
            if rows.num_rows:
                parts.append(plain_table(rows.select(names)).append_column(
                    pa.field(CHANGE_TYPE_COLUMN, pa.string()),
                    pa.array([kind] * rows.num_rows, pa.string())))

        for c in touched:
            physical = c.file.physical
            typed(physical.take(c.deleted), "delete")
            typed(physical.take(c.updated), "update_preimage")
            typed(c.new_rows, "update_postimage")
        if inserted is not None:
            typed(inserted, "insert")
        if not parts:
            return
        rows = pa.concat_tables(parts)
        target = self.target
        written = write_data_files(self.store, rows, list(target.partition_columns),
                                   clock=self.table.clock, random=self.table.random,
                                   column_mapping=target.column_mapping,
                                   table_schema=target.schema, durable=False, change_data=True,
                                   delta_integers=target.delta_integers)
        attempt.written.extend(written)
        out.cdc.extend(AddCDCFile(a.path, dict(a.partition_values), a.size) for a in written)
        out.unsynced.extend(decode_add_path(a.path) for a in written)
        out.change_files = len(written)

    def stage(self, txn: Transaction, out: Rewritten) -> None:
        txn.remove(out.removes)
        txn.add(out.adds, durable=False)
        txn.add_cdc(out.cdc, unsynced=out.unsynced)




def every_row(n: int) -> Positions:
    """``0 .. n-1``, read-only, one array for each ``n`` in a row: the live rows of a file
    without a deletion vector.  A table's files mostly hold the same number of rows, and a
    rewrite of thousands of them would otherwise make an array as long as the table (80 MB
    for 10M rows) of the same numbers."""
    global _every_row
    known = _every_row
    if len(known) != n:
        known = np.arange(n, dtype=np.int64)
        known.flags.writeable = False
        _every_row = known
    return known


_every_row: Positions = np.zeros(0, np.int64)
_every_row.flags.writeable = False


#: Threads that read a row-level operation's local files: one per core (the rows of a local
#: file are decoded, not waited for; more threads only take turns).
READ_THREADS_LOCAL = max(1, min(os.cpu_count() or 1, 4))
#: Threads that write and prove a rewrite's pieces (at most the machine's cores).
REWRITE_THREADS = 4
#: Bytes (in memory) of the rows of one data file a rewrite writes: larger rewrites are cut
#: into files of about this size.
REWRITE_FILE_BYTES = 128 << 20
#: Bytes of values above which a rewrite writes a dictionary column decoded: the writer
#: keeps a dictionary page of at most the dictionary page limit, and would otherwise fall
#: back to plain encoding part way through the column.
KEPT_DICTIONARY_BYTES = int(PARQUET_OPTIONS["dictionary_pagesize_limit"]) // 2
#: Bytes below which a rewrite's rows are not cut for the threads' sake.
REWRITE_PIECE_MIN_BYTES = 8 << 20


#: At most one position in this many rows counts as few (``replaced``): taking them across a
#: column's chunks (each position's chunk found) costs less than joining the chunks first.
FEW_POSITIONS_PER_ROW = 16


def _variable_width(t: pa.DataType) -> bool:
    """Whether values of ``t`` are stored as bytes of varying length (strings, binary)."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t)
            or pa.types.is_binary_view(t))


def _one_array(column: pa.ChunkedArray[Any]) -> pa.Array[Any] | pa.ChunkedArray[Any]:
    """``column`` as one array, or as it is where it cannot be one (string offsets past
    2 GiB, dictionaries that differ)."""
    if column.num_chunks == 1:
        return column.chunk(0)
    try:
        return pa.concat_arrays(column.chunks) if column.num_chunks else column.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return column


def taken(rows: pa.Table, positions: Positions) -> pa.Table:
    """``rows.take(positions)``, each column made one array first: Arrow's ``take`` across a
    column of thousands of chunks (one per file read) resolves every position's chunk and
    costs several times the take of one array and the concatenation together.  A column that
    cannot be one array is taken across its chunks as before."""
    return pa.Table.from_arrays([_one_array(c).take(positions) for c in rows.columns],
                                schema=rows.schema)


def appended(rows: pa.Table, extra: Sequence[pa.Table]) -> pa.Table:
    """``rows`` followed by the rows of ``extra`` (of ``rows``' value types), whose values of
    each dictionary column of ``rows`` join its dictionary (``in_one_dictionary``)."""
    if not extra:
        return rows
    if not any(pa.types.is_dictionary(f.type) for f in rows.schema):
        return pa.concat_tables([rows, *extra])
    more = extra[0] if len(extra) == 1 else pa.concat_tables(extra)
    columns: list[pa.ChunkedArray[Any]] = []
    for i, f in enumerate(rows.schema):
        column, added = rows.column(i), more.column(i)
        if pa.types.is_dictionary(f.type):
            column, encoded = in_one_dictionary(column, added.combine_chunks())
            columns.append(pa.chunked_array([*column.chunks, encoded], type=cast(Any, f.type)))
        else:
            columns.append(pa.chunked_array([*column.chunks, *added.chunks], type=f.type))
    return pa.Table.from_arrays(columns, schema=rows.schema)


def batches_of(items: Sequence[B], rows: Callable[[B], int]) -> list[list[B]]:
    """``items`` cut into runs of consecutive items of at most ``BATCH_ROWS`` rows together
    (an item of more rows is a batch of its own); none for no items."""
    out: list[list[B]] = []
    total = 0
    for item in items:
        n = rows(item)
        if not out or total + n > BATCH_ROWS:
            out.append([])
            total = 0
        out[-1].append(item)
        total += n
    return out


def _counted_rows(add: Add) -> int:
    """The rows a file's statistics say it holds (a hint for cutting batches only); an
    unknown or impossible count stands for a full batch."""
    n = add.num_records()
    return n if n is not None and n >= 0 else BATCH_ROWS


def replaced(rows: pa.Table, positions: Positions, new_rows: pa.Table) -> pa.Table:
    """``rows`` with the rows at ``positions`` (ascending, distinct) replaced by ``new_rows``
    (in that order, ``rows``' schema): what ``taken`` makes of every row with the updated
    ones taken from after them, at a fraction of its cost when few rows change.  A column
    whose new values are its old ones is kept as it is (its chunks as they are).  Values of a
    fixed width are replaced in place; a column of variable-width values (strings, binary) is
    taken, which copies its values once instead of appending them one by one (a third of the
    time for 5M strings), as is a column Arrow cannot replace values of (nested types,
    dictionaries that differ)."""
    mask: pa.BooleanArray | None = None

    def at_positions() -> pa.BooleanArray:
        """TRUE at ``positions``: what ``replace_with_mask`` replaces, made once."""
        nonlocal mask
        if mask is None:
            flags = np.zeros(rows.num_rows, np.bool_)
            flags[positions] = True
            mask = pa.array(flags)
        return mask

    picked: Positions | None = None
    columns: list[pa.Array[Any] | pa.ChunkedArray[Any]] = []
    few = len(positions) * FEW_POSITIONS_PER_ROW <= rows.num_rows
    for i, column in enumerate(rows.columns):
        new = new_rows.column(i).combine_chunks()
        if pa.types.is_dictionary(column.type):
            column, new = in_one_dictionary(column, new)
        whole: pa.Array[Any] | pa.ChunkedArray[Any] | None = None
        # Unchanged only if every value is the same, a zero's sign too (``same_values``):
        # Arrow's equality takes -0.0 for 0.0, and ``SET x = -x`` must keep what it made.
        if few:
            # Taken across the chunks: a column of ids would otherwise be copied whole to
            # look at 1% of it.
            unchanged = same_values(column.take(positions), new)
        else:
            # One array, made once: Arrow's take across a column's chunks makes it anyway.
            whole = _one_array(column)
            unchanged = same_values(whole.take(positions), new)
        if unchanged:
            columns.append(column)  # its chunks as read: the writer takes them as they are
            continue
        if whole is None:
            # Numbers without nulls: copied once into place, the new values set there.
            made = _numbers_replaced(column, positions, new)
            if made is not None:
                columns.append(made)
                continue
        if pa.types.is_dictionary(column.type):
            encoded = [cast("pa.DictionaryArray[Any, Any]", c) for c in column.chunks]
            if whole is None and isinstance(new, pa.DictionaryArray) and all(
                    c.dictionary.equals(new.dictionary) for c in encoded):
                indices = _numbers_replaced(
                    pa.chunked_array([c.indices for c in encoded],
                                     type=cast(Any, new.indices.type)),
                    positions, new.indices)
                if indices is not None:
                    columns.append(pa.DictionaryArray.from_arrays(indices, new.dictionary))
                    continue
            whole = _one_array(column) if whole is None else whole
            if isinstance(whole, pa.DictionaryArray) and isinstance(new, pa.DictionaryArray):
                # The indices replaced, the (one) dictionary kept.
                columns.append(pa.DictionaryArray.from_arrays(
                    pc.replace_with_mask(whole.indices, at_positions(), new.indices),
                    whole.dictionary))
                continue
        elif not _variable_width(column.type):
            whole = _one_array(column) if whole is None else whole
            if isinstance(whole, pa.Array):
                try:
                    columns.append(pc.replace_with_mask(whole, at_positions(), new))
                    continue
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    pass
        if picked is None:
            # 32-bit positions where they fit: half the memory, fresh pages every time.
            width = np.int32 if rows.num_rows + len(positions) < 2**31 else np.int64
            picked = np.arange(rows.num_rows, dtype=width)
            picked[positions] = rows.num_rows + np.arange(len(positions), dtype=width)
        # The old values and the new ones after them joined once (not the old ones first).
        chunks = [whole] if isinstance(whole, pa.Array) else list(column.chunks)
        both = pa.chunked_array(chunks + [new], type=column.type)
        columns.append(_one_array(both).take(picked))
    return pa.Table.from_arrays(columns, schema=rows.schema)


def _numbers_replaced(column: pa.ChunkedArray[Any], positions: Positions,
                      new: pa.Array[Any]) -> pa.Array[Any] | None:
    """``column`` with ``new`` at ``positions``, made with one copy of its values (no array
    joined first and replaced after): where it holds integers or floating-point numbers and
    neither it nor ``new`` has a null; None otherwise."""
    t = column.type
    if (not (pa.types.is_integer(t) or pa.types.is_floating(t)) or column.null_count
            or new.null_count or new.type != t):
        return None
    out = np.empty(len(column), dtype=t.to_pandas_dtype())
    at = 0
    for chunk in column.chunks:
        n = len(chunk)
        out[at:at + n] = chunk.to_numpy(zero_copy_only=True)
        at += n
    out[positions] = new.to_numpy(zero_copy_only=True)
    return pa.array(out, type=t)


def rewrite_groups(file_bytes: Sequence[int], extra_bytes: int, workers: int
                   ) -> list[tuple[int, int]]:
    """The files a rewrite copies (bytes in memory of each, in order) cut into groups of
    consecutive files, ``(first, end)``, each written as one file: of at most about
    ``REWRITE_FILE_BYTES`` each, and one per worker where each would still hold
    ``REWRITE_PIECE_MIN_BYTES`` (so that the workers make, write and prove them together);
    ``extra_bytes`` (rows written besides) go with the last.  One group, possibly empty,
    when there is little to write."""
    total = sum(file_bytes) + extra_bytes
    count = max(-(-total // REWRITE_FILE_BYTES), min(workers, total // REWRITE_PIECE_MIN_BYTES),
                1)
    count = min(count, max(len(file_bytes), 1))
    if count == 1:
        return [(0, len(file_bytes))]
    ends = np.cumsum(np.asarray(file_bytes, dtype=np.int64))
    cuts = np.searchsorted(ends, [total * k / count for k in range(1, count)], side="left")
    bounds = [0] + sorted({min(int(c) + 1, len(file_bytes)) for c in cuts}) + [len(file_bytes)]
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a] or \
        [(0, len(file_bytes))]


#: Live rows judged at once by a row-level verb (``RowRewrite.each_batch``): enough that the
#: per-call cost of evaluating its expressions is spread over many rows.
BATCH_ROWS = 1 << 18
