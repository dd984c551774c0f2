"""Compaction (``DeltaTable.optimize.compact``) that never aborts a writer.

Group commit, the Appender and streaming make many small files; compaction rewrites the small
files of each partition into files of about ``target_size`` bytes.  It changes no data: its
adds and removes carry ``dataChange=false``, so the transaction runs at snapshot isolation
(``conflicts.TransactionSummary.effective_isolation``, Spark's rule) and a concurrent append,
blind or not, never conflicts with it, nor it with the append.  What can conflict is a
concurrent delete or overwrite removing a file compaction rewrote.  Then only the bins whose
files are all still live are committed (their rewritten files are valid as written); the bins
that lost a file have their new files deleted and are left for the next run.  Compaction never
makes a writer fail, and never rewrites the whole job because one bin lost.

Bins are formed per partition, greedily in the files' order, up to ``target_size``
(``delta.targetFileSize``, else 100 MiB as deltalake); files already that large are skipped,
unless a deletion vector marks rows of theirs deleted (rewriting applies it).  A bin of one
file without a deletion vector is left alone.  ``min_commit_interval`` commits the bins done
so far whenever that many seconds have passed, so a long compaction publishes progress and a
concurrent delete costs at most the bins of one interval.  The metrics are deltalake's.

Each bin proves its output before it is committed (``rewrite_check``): the files written are
read back and must hold exactly the rows read from the bin's files, deletion vectors applied,
or they are deleted and ``RewriteCheckError`` stops the compaction (bins committed before it
stay: each was proven).  A bin is committed only within ``staged_files.COMMIT_WINDOW_MS`` of
the start of its rewrite, so that a VACUUM with a short retention cannot have deleted what it
commits; the bins done are committed before the oldest is half that old, and a bin too old
(a rewriter stopped for that long) has its files deleted and is left for the next run.

On a table with row tracking enabled, rewritten rows get fresh ids like any new file, and keep
their stable row ids and row commit versions in the table's hidden materialized columns
(``delta.rowTracking.materialized*ColumnName``), as Spark's OPTIMIZE writes them.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from deltacommit.engine.rewrite_check import check_rewritten
from deltacommit.engine.scan import select_files
from deltacommit.errors import (
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    InvalidArgumentError,
)
from deltacommit.io.datafiles import WriteTarget, write_rows
from deltacommit.io.deletion_vectors import deleted_rows, keep_mask
from deltacommit.ops.driver import Attempt, Decision, Finished, TableJob, discard, run
from deltacommit.protocol.actions import Add
from deltacommit.protocol.commit_window import COMMIT_WINDOW_MS, may_commit
from deltacommit.protocol.expressions.predicates import (
    TRUE,
    Predicate,
    from_partition_filters,
    parse_predicate,
)
from deltacommit.protocol.features import row_tracking
from deltacommit.protocol.log.paths import parse_location
from deltacommit.protocol.replay import file_key
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.zorder import MAX_COLUMNS, unorderable_reason, z_sorted
from deltacommit.runtime.clock import Clock, RandomSource, now_ms
from deltacommit.runtime.threads import CallThreads

if TYPE_CHECKING:
    from deltacommit.engine.commit.policy import CommitResult
    from deltacommit.engine.scan import FileScan
    from deltacommit.engine.snapshot.snapshot import Snapshot
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.io.storage.base import ObjectStore


class OptimizableTable(Protocol):
    """What compaction needs of a table (``DeltaTable`` is one)."""

    clock: Clock
    random: RandomSource

    @property
    def uri(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def pinned(self) -> bool: ...

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def partition_columns(self) -> list[str]: ...

    @property
    def table_config(self) -> TableConfig: ...

    @property
    def store(self) -> ObjectStore: ...

    def update(self) -> int: ...

    def file_scan(self, out_schema: pa.Schema) -> FileScan: ...

    def transaction(self, operation: str = ..., operation_parameters: Any = ...,
                    isolation_level: Any = ...) -> Transaction: ...

#: deltalake's default target size (Spark's OPTIMIZE uses 1 GiB; small tables want smaller).
DEFAULT_TARGET_SIZE = 100 * 1024 * 1024


#: A commit replaces at most about this many files: beside a stream of small appends, a
#: commit of thousands of actions takes long enough to write that it would keep losing the
#: race for the next version.
MAX_FILES_PER_COMMIT = 1000

#: How many times a commit of the surviving bins is retried after concurrent removes.
_MAX_ROUNDS = 100


@dataclass
class CompactionBin:
    """Files of one partition to rewrite as one file (``added``: the files written)."""

    partition: tuple[tuple[str, str | None], ...]
    files: list[Add]
    added: list[Add] = field(default_factory=list)
    #: Whether the rewriter read ``added`` back and found exactly the rows of ``files``
    #: (``rewrite_check``); a bin not checked is checked before it is committed.
    checked: bool = False
    #: The rewriter's clock (ms) before it began writing ``added``: the bin is committed only
    #: within ``staged_files.COMMIT_WINDOW_MS`` of it, so that no VACUUM can have deleted them.
    started_ms: int | None = None

    def describe(self, uri: str) -> str:
        """The bin in an error message."""
        where = ", ".join(f"{k}={v}" for k, v in self.partition) or "the table"
        return (f"compaction of table {uri}: the bin of {len(self.files)} files of {where} "
                f"(first {self.files[0].path if self.files else None})")

    @property
    def size(self) -> int:
        return sum(a.size for a in self.files)


class BinRewriter(Protocol):
    """Rewrites bins (reads their files, writes ``added``), yielding each when done, in any
    order.  The default runs threads in this process; ``deltacommit.spark.optimize`` runs
    Spark tasks, for tables larger than one machine."""

    def __call__(self, bins: Sequence[CompactionBin], target: WriteTarget
                 ) -> Iterator[CompactionBin]: ...


def plan_bins(files: Iterable[Add], target_size: int) -> tuple[list[CompactionBin], int, int]:
    """Bins to rewrite, the files considered and the files skipped (pure)."""
    considered = 0
    skipped = 0
    by_partition: dict[tuple[tuple[str, str | None], ...], list[Add]] = {}
    for a in files:
        considered += 1
        if a.size >= target_size and not a.deletion_vector:
            skipped += 1
            continue
        by_partition.setdefault(tuple(sorted(a.partition_values.items())), []).append(a)
    bins: list[CompactionBin] = []
    for part, group in by_partition.items():
        current: list[Add] = []
        size = 0
        for a in group:
            if current and size + a.size > target_size:
                bins.append(CompactionBin(part, current))
                current, size = [], 0
            current.append(a)
            size += a.size
        if current:
            bins.append(CompactionBin(part, current))
    kept: list[CompactionBin] = []
    for b in bins:
        if len(b.files) == 1 and not b.files[0].deletion_vector:
            skipped += 1
        else:
            kept.append(b)
    return kept, considered, skipped


def partition_ordinals(files: Iterable[Add]) -> dict[str, int]:
    """Each file's place among the files of its partition, in the order given (pure)."""
    seen: dict[tuple[tuple[str, str | None], ...], int] = {}
    out: dict[str, int] = {}
    for a in files:
        key = tuple(sorted(a.partition_values.items()))
        out[a.path] = seen.get(key, 0)
        seen[key] = out[a.path] + 1
    return out


def bin_span(b: CompactionBin, ordinals: Mapping[str, int] | None) -> int:
    """How many of its partition's files, consecutive in the log's order, ``b`` spans
    (deltalake's ``maxBinSpanFiles`` per bin): the files between its first and its last,
    skipped large files included; its file count without ``ordinals`` (pure)."""
    places = [ordinals[a.path] for a in b.files if a.path in ordinals] if ordinals else []
    return max(places) - min(places) + 1 if places else len(b.files)


def _size_stats(sizes: Sequence[int]) -> str:
    if not sizes:
        return json.dumps({"avg": 0.0, "max": 0, "min": 0, "totalFiles": 0, "totalSize": 0},
                          separators=(",", ":"))
    return json.dumps({"avg": sum(sizes) / len(sizes), "max": max(sizes), "min": min(sizes),
                       "totalFiles": len(sizes), "totalSize": sum(sizes)},
                      separators=(",", ":"))


def _with_stable_ids(scan: FileScan, add: Add, names: tuple[str, str]) -> pa.Table:
    """A file's live rows with their stable row ids and row commit versions in the hidden
    columns ``names`` (read from the file where it has them, else its defaults)."""

    uri = scan.table_uri
    data = scan.read(add)
    ids, versions = row_tracking.stable_ids(add, data.column(names[0]), data.column(names[1]),
                                            uri)
    data = data.set_column(data.schema.get_field_index(names[0]), names[0], ids)
    data = data.set_column(data.schema.get_field_index(names[1]), names[1], versions)
    if add.deletion_vector:
        rows = deleted_rows(scan.store, parse_location(uri), uri, add.deletion_vector,
                            data_file=add.path, num_rows=data.num_rows,
                            storage_options=scan.storage_options,
                            allow_external=scan.allow_external_paths)
        data = data.filter(keep_mask(rows, data.num_rows, f"table {uri}: {add.path}"))
    return data


class TableOptimizer:
    """``DeltaTable.optimize``: deltalake's names."""

    def __init__(self, table: OptimizableTable) -> None:
        self.table = table
        #: Commit attempts the last compactions made (races lost to concurrent writers + 1).
        self.attempts = 0

    def compact(self, partition_filters: Sequence[Any] | None = None,
                target_size: int | None = None, max_concurrent_tasks: int | None = None,
                min_commit_interval: float | None = None, *,
                predicate: str | None = None,
                progress: Callable[[int, int], None] | None = None,
                rewriter: BinRewriter | None = None, auto: bool = False) -> dict[str, Any]:
        """Rewrite small files into files of about ``target_size`` bytes; deltalake's metrics
        plus ``versions`` (every version committed) and ``version`` (the last, or the table's
        version when nothing was committed).  ``auto`` marks the commits as auto-compaction's
        (``operationParameters.auto``)."""
        table = self.table
        uri = table.uri
        self._check(max_concurrent_tasks, min_commit_interval)
        table.update()
        self.attempts = 0
        snap = table.snapshot
        size = self._target_size(target_size)
        pred = self._predicate(partition_filters, predicate)
        files = select_files(snap, pred)
        bins, considered, skipped = plan_bins(files, size)
        hidden = row_tracking.rewrite_columns(snap.table_config, snap.protocol, snap.schema,
                                              f"compaction of {uri}")
        if rewriter is not None and hidden is not None:
            raise InvalidArgumentError(
                f"compaction of {uri}: the table tracks row ids, which only this process's "
                "rewriter keeps (t.optimize.compact); Spark tasks would give rows new ids")
        rewrite = rewriter or self._thread_rewriter(snap, max_concurrent_tasks, hidden=hidden)
        return self._execute(bins, considered, skipped, size, pred, WriteTarget.of(uri, snap),
                             rewrite, table.file_scan(snap.schema), progress=progress,
                             min_commit_interval=min_commit_interval, auto=auto, z_order_by=(),
                             measure_first=True, ordinals=partition_ordinals(files))

    def z_order(self, columns: Iterable[str], partition_filters: Sequence[Any] | None = None,
                target_size: int | None = None, max_concurrent_tasks: int | None = None,
                max_spill_size: int | None = None, min_commit_interval: float | None = None, *,
                predicate: str | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Rewrite each selected partition whole, its rows in Z-order over ``columns``
        (``zorder.py``), in files of about ``target_size`` bytes; deltalake's arguments and
        metrics.  ``max_spill_size`` is accepted for deltalake's signature: a partition is
        sorted in memory."""
        table = self.table
        uri = table.uri
        names = [columns] if isinstance(columns, str) else list(columns)
        self._check(max_concurrent_tasks, min_commit_interval)
        table.update()
        self.attempts = 0
        snap = table.snapshot
        schema_names = snap.schema.names
        problems = [c for c in names if c not in schema_names]
        if not names or problems or len(set(names)) != len(names) or len(names) > MAX_COLUMNS:
            raise InvalidArgumentError(
                f"Z-order of table {uri}: give 1 to {MAX_COLUMNS} distinct data columns of "
                f"{schema_names}, got {names}")
        partitioned = [c for c in names if c in table.partition_columns]
        if partitioned:
            raise InvalidArgumentError(
                f"Z-order of table {uri}: {partitioned} are partition columns, which are "
                "constant within a file; Z-order by data columns")
        for c in names:
            reason = unorderable_reason(snap.schema.field(c).type)
            if reason is not None:
                raise InvalidArgumentError(f"Z-order of table {uri}: column {c!r} cannot be "
                                           f"Z-ordered: {reason}")
        size = self._target_size(target_size)
        pred = self._predicate(partition_filters, predicate)
        bins: dict[tuple[tuple[str, str | None], ...], CompactionBin] = {}
        considered = 0
        for a in select_files(snap, pred):
            considered += 1
            key = tuple(sorted(a.partition_values.items()))
            bins.setdefault(key, CompactionBin(key, [])).files.append(a)
        rewrite = self._thread_rewriter(snap, max_concurrent_tasks, order_by=names,
                                        target_size=size,
                                        hidden=row_tracking.rewrite_columns(
                                            snap.table_config, snap.protocol, snap.schema,
                                            f"compaction of {uri}"))
        return self._execute(list(bins.values()), considered, 0, size, pred,
                             WriteTarget.of(uri, snap), rewrite, table.file_scan(snap.schema),
                             progress=progress,
                             min_commit_interval=min_commit_interval, auto=False,
                             z_order_by=tuple(names), measure_first=False)

    def _check(self, max_concurrent_tasks: int | None, min_commit_interval: float | None) -> None:
        uri = self.table.uri
        if self.table.pinned:
            raise InvalidArgumentError(
                f"table {uri} was opened at version {self.table.version}; compaction works on "
                "the latest version, so open the table without a version")
        if max_concurrent_tasks is not None and (isinstance(max_concurrent_tasks, bool)
                                                 or not isinstance(max_concurrent_tasks, int)
                                                 or max_concurrent_tasks < 1):
            raise InvalidArgumentError(f"compaction of {uri}: max_concurrent_tasks must be a "
                                       f"positive integer, got {max_concurrent_tasks!r}")
        if min_commit_interval is not None and (isinstance(min_commit_interval, bool)
                                                or not isinstance(min_commit_interval, int | float)
                                                or not min_commit_interval >= 0):
            raise InvalidArgumentError(f"compaction of {uri}: min_commit_interval must be a "
                                       f"number of seconds >= 0, got {min_commit_interval!r}")

    def _execute(self, bins: list[CompactionBin], considered: int, skipped: int, size: int,
                 pred: Predicate, target: WriteTarget, rewrite: BinRewriter, scan: FileScan, *,
                 progress: Callable[[int, int], None] | None, min_commit_interval: float | None,
                 auto: bool, z_order_by: tuple[str, ...], measure_first: bool,
                 ordinals: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Rewrite the bins and commit them in rounds; the metrics (deltalake's, and
        deltacommit's own after them).  ``ordinals``: each considered file's place among its
        partition's files (``partition_ordinals``), for ``maxBinSpanFiles``; without them
        (Z-order, which rewrites partitions whole) a bin spans its files.

        Whatever stops the compaction (a bin whose output fails its check, a rewriter's
        error) leaves no file of an uncommitted bin behind; bins committed before it stay."""
        table = self.table
        versions: list[int] = []
        done: list[CompactionBin] = []
        lost: list[CompactionBin] = []
        expired: list[CompactionBin] = []
        pending: list[CompactionBin] = []
        started = time.monotonic()
        ready: list[CompactionBin] = []
        params = (pred, size, versions, done, lost, expired, auto, z_order_by)
        stream: Iterator[CompactionBin] | None = None
        try:
            if measure_first and len(bins) > 1:
                # Many tiny files are mostly Parquet overhead, so a bin of target_size bytes
                # of them rewrites into a far smaller file.  The first bin measures how much
                # the rewrite shrinks the input; the rest are binned to that ratio, so the
                # files written come out near target_size instead of a fraction of it.
                first = list(self._proven(rewrite, bins[:1], target, scan))
                pending.extend(first)  # (its files are deleted if anything below fails)
                [one] = first
                out = sum(a.size for a in one.added)
                ratio = min(1.0, max(out / max(one.size, 1), 1 / 1024))
                more, _, lone = plan_bins([a for b in bins[1:] for a in b.files],
                                          max(size, int(size / ratio)))
                bins = [one, *more]
                ready = [one]
                pending = []
                skipped += lone
            rest = bins[len(ready):]
            stream = self._proven(rewrite, rest, target, scan) if rest else iter(())
            for n, b in enumerate(itertools.chain(ready, stream), 1):
                pending.append(b)
                if progress is not None:
                    progress(n, len(bins))
                oldest = min(x.started_ms or 0 for x in pending)
                if sum(len(x.files) for x in pending) >= MAX_FILES_PER_COMMIT or (
                        min_commit_interval is not None
                        and time.monotonic() - started >= min_commit_interval) or (
                        now_ms(table.clock) - oldest >= COMMIT_WINDOW_MS // 2):
                    batch, pending = pending, []
                    self._commit(batch, *params)
                    started = time.monotonic()
            if pending:
                batch, pending = pending, []
                self._commit(batch, *params)
        except BaseException:
            if stream is not None and hasattr(stream, "close"):
                stream.close()  # the rewriter's bins in flight: finished and their files deleted
            for b in pending:  # rewritten, never committed
                discard(table.store, b.added)
            raise
        removed = [a.size for b in done for a in b.files]
        added = [a.size for b in done for a in b.added]
        return {
            "numFilesAdded": len(added),
            "numFilesRemoved": len(removed),
            "filesAdded": _size_stats(added),
            "filesRemoved": _size_stats(removed),
            "partitionsOptimized": len({b.partition for b in done}),
            "numBatches": len(bins),
            "totalConsideredFiles": considered,
            "totalFilesSkipped": skipped + sum(len(b.files) for b in lost + expired),
            # deltalake 1.6's planner report: compaction bins files in the order the log
            # lists them within a partition (Z-order reorders rows), and the widest bin.
            "preserveInsertionOrder": not z_order_by,
            "plannerStrategy": "zOrder" if z_order_by else "preserveLocality",
            "preservedStableOrder": not z_order_by,
            "maxBinSpanFiles": max((bin_span(b, ordinals) for b in bins), default=0),
            "binsLostToConcurrentRemoves": len(lost),
            "binsExpiredBeforeCommit": len(expired),
            "commitAttempts": self.attempts,
            "versions": versions,
            "version": versions[-1] if versions else table.version,
        }

    def _proven(self, rewrite: BinRewriter, bins: Sequence[CompactionBin],
                target: WriteTarget, scan: FileScan) -> Iterator[CompactionBin]:
        """``rewrite``'s bins, each with a start time and its output proven: a rewriter that
        did not check its bins (``CompactionBin.checked``) has them checked here, reading
        both sides again; one that gave no start time gets the time before it was called."""
        table = self.table
        before = now_ms(table.clock)
        stream = rewrite(bins, target)
        try:
            for b in stream:
                if b.started_ms is None:
                    b.started_ms = before
                if not b.checked:
                    check_rewritten(scan, table.store, scan.read_many(b.files), b.added,
                                    what=b.describe(table.uri))
                    b.checked = True
                yield b
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _thread_rewriter(self, snap: Snapshot, max_concurrent_tasks: int | None, *,
                         order_by: Sequence[str] = (), target_size: int | None = None,
                         hidden: tuple[str, str] | None = None) -> BinRewriter:
        """Bins rewritten by threads of this process (in Z-order over ``order_by``, split
        into files of about ``target_size`` bytes, when given), each checked against its
        input before it is handed on."""
        table = self.table
        scan = table.file_scan(snap.schema)
        read: Callable[[Add], pa.Table] = scan.read
        read_back: Callable[[Sequence[Add]], pa.Table] | None = None
        if hidden is not None:
            # Physical rows with their stable ids and row commit versions, which the new
            # files keep in the table's hidden materialized columns (fresh ids change).
            names = hidden
            id_scan = replace(table.file_scan(pa.schema(
                list(snap.schema) + row_tracking.hidden_fields(
                    names, snap.table_config.column_mapping_mode.value))),
                physical_rows=True)

            def read(a: Add) -> pa.Table:
                return _with_stable_ids(id_scan, a, names)

            def read_back(adds: Sequence[Add]) -> pa.Table:
                # New files hold every id in the hidden columns, and no deletion vector.
                return pa.concat_tables([id_scan.read(a) for a in adds])
        workers = max_concurrent_tasks or (1 if table.store.local_path("") else 8)

        def rewrite_one(b: CompactionBin, target: WriteTarget,
                        readers: CallThreads) -> CompactionBin:
            b.started_ms = now_ms(table.clock)
            # Reading many small files waits on opening each; pyarrow releases the GIL, so
            # they are read a few at a time even on local disk.
            if hidden is None:
                rows = scan.read_many(b.files, readers.map)
            else:
                parts = list(readers.map(read, b.files)) if len(b.files) > 1 else \
                    [read(b.files[0])]
                rows = pa.concat_tables(parts)
            file_rows = None
            if order_by:
                rows = z_sorted(rows, order_by)
                per_byte = rows.num_rows / max(b.size, 1)
                file_rows = max(1, int(per_byte * (target_size or DEFAULT_TARGET_SIZE)))
            written = write_rows(table.store, target, rows, clock=table.clock,
                                 random=table.random, target_file_rows=file_rows)
            check_rewritten(scan, table.store, rows, written, what=b.describe(table.uri),
                            read_back=read_back)
            b.added = [replace(a, data_change=False,
                               stats=row_tracking.stats_without_columns(a.stats, hidden or ()))
                       for a in written]
            b.checked = True
            return b

        def rewrite(bins: Sequence[CompactionBin], target: WriteTarget
                    ) -> Iterator[CompactionBin]:
            with CallThreads(max_workers=8) as readers, \
                    CallThreads(max_workers=workers) as pool:
                futures = [pool.submit(rewrite_one, b, target, readers) for b in bins]
                handed = 0
                try:
                    for f in futures:
                        yield f.result()
                        handed += 1
                finally:
                    # Stopped early (a bin failed its check, the caller gave up): the bins
                    # not handed on are never committed, so their files go.
                    for f in futures[handed:]:
                        if f.cancel():
                            continue
                        try:
                            left = f.result()
                        except Exception:  # its own failure: nothing of it to undo
                            continue
                        discard(table.store, left.added)

        return rewrite

    def _target_size(self, target_size: int | None) -> int:
        uri = self.table.uri
        if target_size is not None:
            if isinstance(target_size, bool) or not isinstance(target_size, int) \
                    or target_size < 1:
                raise InvalidArgumentError(f"compaction of {uri}: target_size must be a "
                                           f"positive number of bytes, got {target_size!r}")
            return target_size
        return self.table.table_config.target_file_size or DEFAULT_TARGET_SIZE

    def _predicate(self, partition_filters: Sequence[Any] | None, where: str | None) -> Predicate:
        if partition_filters is not None and where is not None:
            raise InvalidArgumentError("give partition_filters or predicate, not both")
        pred = (parse_predicate(where) if where is not None
                else from_partition_filters(partition_filters) if partition_filters else TRUE)
        pred.check_columns(self.table.partition_columns, self.table.uri)
        return pred

    def _commit(self, bins: list[CompactionBin], pred: Predicate, size: int, versions: list[int],
                done: list[CompactionBin], lost: list[CompactionBin],
                expired: list[CompactionBin], auto: bool = False,
                z_order_by: tuple[str, ...] = ()) -> None:
        """Commit ``bins`` through the write driver (``_CommitBins``)."""
        job = _CommitBins(self.table, bins, lost, expired, {
            "predicate": json.dumps([] if pred is TRUE else [pred.to_sql()]),
            "zOrderBy": json.dumps(list(z_order_by)), "auto": "true" if auto else "false",
            "targetSize": str(size)})
        result = run(job)
        if result is not None:
            versions.append(result.version)
            self.attempts += result.attempts
            done.extend(job.live)


class _CommitBins(TableJob[OptimizableTable]):
    """One commit of rewritten bins, as the write driver runs it (``driver.run``): each
    attempt takes only the bins still within the commit window (``commit_window``) and whose
    files are all still live; the others' new files are deleted and the bins left for the
    next run.  After a concurrent remove (ConcurrentDeleteRead/DeleteDelete), the bins left
    intact are staged again in a new transaction with the files already written; any other
    refusal deletes them all (a metadata or protocol change: nothing of these bins is
    committed)."""

    def __init__(self, table: OptimizableTable, bins: list[CompactionBin],
                 lost: list[CompactionBin], expired: list[CompactionBin],
                 parameters: dict[str, str]) -> None:
        super().__init__(table)
        self.live = list(bins)
        self.lost = lost
        self.expired = expired
        self.parameters = parameters
        self.rounds = 0

    def begin(self, attempt: Attempt) -> Transaction:
        self._txn = self.table.transaction("OPTIMIZE", self.parameters)
        return self._txn

    def write(self, attempt: Attempt) -> Finished[CommitResult | None] | None:
        """The bins were rewritten already: their files, less those of bins no longer
        committable, which are dropped."""
        attempt.written.extend(a for b in self.live for a in b.added)
        attempt.started_ms = None  # each bin's window is checked here, from its own start
        now = now_ms(self.table.clock)
        fresh = [b for b in self.live if b.started_ms is None or may_commit(b.started_ms, now)]
        self._drop([b for b in self.live if b not in fresh], self.expired, attempt)
        current = {file_key(a.path, a.deletion_vector) for a in self.txn.snapshot.iter_files()}
        intact = [b for b in fresh if all(file_key(a.path, a.deletion_vector) in current
                                          for a in b.files)]
        self._drop([b for b in fresh if b not in intact], self.lost, attempt)
        self.live = intact
        return None if intact else Finished(None)

    def _drop(self, bins: list[CompactionBin], into: list[CompactionBin],
              attempt: Attempt) -> None:
        for b in bins:
            attempt.drop(b.added)
            into.append(b)

    def stage(self, attempt: Attempt) -> None:
        txn, live = self.txn, self.live
        txn.read_files([a for b in live for a in b.files])
        txn.remove([a for b in live for a in b.files], data_change=False)
        txn.add([a for b in live for a in b.added])
        txn.operation_metrics.update({
            "numAddedFiles": str(sum(len(b.added) for b in live)),
            "numRemovedFiles": str(sum(len(b.files) for b in live)),
            "numAddedBytes": str(sum(a.size for b in live for a in b.added)),
            "numRemovedBytes": str(sum(a.size for b in live for a in b.files))})

    def commit(self, attempt: Attempt) -> CommitResult | None:
        return self.txn.commit()

    def refused(self, attempt: Attempt, error: Exception
                ) -> Decision | Finished[CommitResult | None]:
        if not isinstance(error, ConcurrentDeleteReadException | ConcurrentDeleteDeleteException):
            return Decision.RAISE
        self.rounds += 1
        if self.rounds >= _MAX_ROUNDS:  # pragma: no cover - a hundred rounds of removes
            self.lost.extend(self.live)
            self.live = []
            return Finished(None)
        self.table.update()
        return Decision.RESTAGE
