"""The code that runs inside Spark tasks: Parquet data files out, Arrow batches in.

Both classes are plain picklable callables for ``DataFrame.mapInArrow``.  They import nothing from
the JVM side and reach storage through deltacommit's own object stores, so a task writes to and
reads from S3 without hadoop-aws or any Delta jar; each executor needs only pyarrow and
deltacommit.

Write tasks never commit.  They return their add actions as JSON strings in one Arrow column and
the driver commits the adds of the job's final result only, so the files of a failed or retried
task attempt are never referenced by the table (they are orphans that vacuum removes).  A task
that meets bad data (nulls in a non-nullable column, a value the table type cannot hold) does not
raise either, because Spark would only retry it: it returns an error row that the driver raises
as the deltacommit exception, after deleting every file the job wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.engine.rewrite_check import check_rewritten
from deltacommit.engine.scan import FileScan
from deltacommit.errors import (
    ConstraintViolationError,
    DeltaCommitError,
    InvalidArgumentError,
    SchemaMismatchError,
    UnsupportedProtocolError,
)
from deltacommit.io.datafiles import conform_rows, write_data_file, write_rows
from deltacommit.io.storage import open_store
from deltacommit.protocol.expressions.parser import parse_expression
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.protocol.partitions import serialize_partition_value, split_by_partition
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK

if TYPE_CHECKING:
    from deltacommit.io.datafiles import WriteTarget

#: Schema of what a write task returns: one JSON document per row, ``{"add": {...}}`` for a
#: written data file or ``{"error": {"type": ..., "message": ...}}`` for bad data.
RESULT_COLUMN = "action"
RESULT_SCHEMA = pa.schema([pa.field(RESULT_COLUMN, pa.string(), nullable=False)])
RESULT_DDL = f"{RESULT_COLUMN} string"

#: Batches are collected up to this many rows before being cast and split by partition, so the
#: per-batch work (dictionary encoding, sorting) is paid per large chunk, not per Arrow batch.
_SPLIT_ROWS = 131_072

#: Beyond this many runs of equal partition values per chunk, and runs shorter than
#: ``_MIN_RUN_ROWS`` on average, rows are grouped by sorting instead of sliced run by run.
_MAX_RUNS = 64
_MIN_RUN_ROWS = 256

#: A task's buffered rows (all partitions together) are flushed, largest partition first, once
#: they hold this many bytes, so a task with a huge input keeps bounded memory at the price of
#: more than one file per partition.
DEFAULT_BUFFER_BYTES = 512 * 1024 * 1024


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


class _Buffer:
    """The rows of one partition value waiting to be written."""

    __slots__ = ("nbytes", "parts", "rows", "values")

    def __init__(self, values: dict[str, str | None]) -> None:
        self.values = values
        self.parts: list[pa.Table] = []
        self.rows = 0
        self.nbytes = 0

    def append(self, part: pa.Table) -> None:
        self.parts.append(part)
        self.rows += part.num_rows
        self.nbytes += part.nbytes

    def take(self, rows: int | None) -> pa.Table:
        """Remove and return the first ``rows`` rows (all when None)."""
        data = pa.concat_tables(self.parts) if len(self.parts) != 1 else self.parts[0]
        if rows is None or rows >= data.num_rows:
            self.parts, self.rows, self.nbytes = [], 0, 0
            return data
        rest = data.slice(rows)
        self.parts, self.rows, self.nbytes = [rest], rest.num_rows, rest.nbytes
        return data.slice(0, rows)


class WriteTask:
    """``mapInArrow`` function: write a task's rows as Parquet files with Delta statistics.

    Rows are grouped by partition value and buffered, so a task writes one file per partition
    value it holds (several when ``target_file_rows`` or the memory bound splits them), never one
    per Arrow batch.
    """

    def __init__(self, target: WriteTarget, storage_options: Mapping[str, str],
                 target_file_rows: int | None, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        #: The table version written to: schema, partition columns, statistics, constraints.
        self.target = target
        self.table_uri = target.uri
        self.storage_options = dict(storage_options)
        self.schema = target.schema
        self.partition_columns = list(target.partition_columns)
        self.indexed_cols = target.indexed_cols
        self.target_file_rows = target_file_rows
        self.buffer_bytes = buffer_bytes

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        written: list[str] = []
        try:
            for add in self._write(batches):
                written.append(add)
        except (SchemaMismatchError, InvalidArgumentError, ConstraintViolationError,
                UnsupportedProtocolError) as e:
            # Data errors are the caller's to fix; a Spark retry would fail the same way.
            error = {"error": {"type": type(e).__name__, "message": str(e)}}
            written.append(json.dumps(error, separators=(",", ":")))
        if written:
            yield pa.RecordBatch.from_arrays([pa.array(written, pa.string())], schema=RESULT_SCHEMA)

    def _write(self, batches: Iterator[pa.RecordBatch]) -> Iterator[str]:
        store = open_store(self.table_uri, self.storage_options)
        index = _partition_id()
        buffers: dict[tuple[str | None, ...], _Buffer] = {}
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        for batch in batches:
            if not batch.num_rows:
                continue
            pending.append(batch)
            pending_rows += batch.num_rows
            if pending_rows >= _SPLIT_ROWS:
                yield from self._absorb(store, index, buffers, pending)
                pending, pending_rows = [], 0
        if pending:
            yield from self._absorb(store, index, buffers, pending)
        for buf in buffers.values():
            if buf.rows:
                yield self._write_file(store, index, buf.values, buf.take(None))

    def _absorb(self, store: Any, index: int, buffers: dict[tuple[str | None, ...], _Buffer],
                pending: list[pa.RecordBatch]) -> Iterator[str]:
        data = conform_rows(self.target, pa.Table.from_batches(pending))
        target = self.target_file_rows
        groups, clustered = self._groups(data)
        for values, part in groups:
            key = tuple(values.get(c) for c in self.partition_columns)
            buf = buffers.get(key)
            if buf is None:
                buf = buffers[key] = _Buffer(values)
            buf.append(part)
            while target and buf.rows >= target:
                yield self._write_file(store, index, values, buf.take(target))
        if clustered and groups:
            # Sorted input: a partition value that is not the last one seen is complete, so its
            # file is written now rather than held until the task ends.
            last = tuple(groups[-1][0].get(c) for c in self.partition_columns)
            for key in [k for k, b in buffers.items() if k != last and b.rows]:
                buf = buffers.pop(key)
                yield self._write_file(store, index, buf.values, buf.take(None))
        while sum(b.nbytes for b in buffers.values()) > self.buffer_bytes:
            largest = max(buffers.values(), key=lambda b: b.nbytes)
            yield self._write_file(store, index, largest.values, largest.take(None))

    def _groups(self, data: pa.Table) -> tuple[list[tuple[dict[str, str | None], pa.Table]], bool]:
        """Rows grouped by partition values (partition columns dropped), and whether the rows
        came clustered by partition value.

        The driver sorts each task's rows by the partition columns, so rows arrive in runs of
        equal values and each run is a zero-copy slice.  Rows that are not clustered (many short
        runs) are grouped by a vectorised sort instead; either way the result is correct.
        """

        pcols = self.partition_columns
        if not pcols:
            return [({}, data)], False
        n = data.num_rows
        ends: set[int] = set()
        columns = [data.column(c).combine_chunks() for c in pcols]
        for col in columns:
            ends.update(pc.run_end_encode(col).run_ends.to_pylist())  # type: ignore[attr-defined]
            if len(ends) > _MAX_RUNS and len(ends) * _MIN_RUN_ROWS > n:
                return split_by_partition(data, pcols), False
        body = data.drop_columns(pcols)
        types = [f.type for f in (self.schema.field(c) for c in pcols)]
        out: list[tuple[dict[str, str | None], pa.Table]] = []
        start = 0
        for end in sorted(ends):
            values = {c: serialize_partition_value(col[start], t)
                      for c, col, t in zip(pcols, columns, types, strict=True)}
            out.append((values, body.slice(start, end - start)))
            start = end
        # Runs are in sorted order only if no value repeats after another intervened.
        keys = [tuple(v.get(c) for c in pcols) for v, _ in out]
        return out, len(set(keys)) == len(keys)

    def _write_file(self, store: Any, index: int, values: dict[str, str | None],
                    data: pa.Table) -> str:
        add = write_data_file(store, values, self.partition_columns, data, index=index,
                              random=DEFAULT_RANDOM, clock=SYSTEM_CLOCK,
                              indexed_cols=self.indexed_cols,
                              column_mapping=self.target.column_mapping,
                              table_schema=self.schema,
                              delta_integers=self.target.delta_integers)
        return json.dumps({"add": add.to_json()}, separators=(",", ":"))


class ReadTask:
    """``mapInArrow`` function: read the data files named by its input rows, restoring
    partition columns from each file's ``partitionValues`` and casting to the table schema."""

    #: Input rows: the add path, the JSON of its partition values and of its deletion vector.
    INPUT_DDL = "path string, partition_values string, deletion_vector string"

    def __init__(self, table_uri: str, storage_options: Mapping[str, str], version: int,
                 out_schema: pa.Schema, partition_columns: Sequence[str],
                 batch_rows: int = 65_536, allow_external_paths: bool = False,
                 column_mapping: str = "none", row_filter: str | None = None,
                 read_schema: pa.Schema | None = None) -> None:

        #: SQL text of a filter: only rows where it is TRUE are returned (read in
        #: ``read_schema``, which adds the columns it needs, then cut to ``out_schema``).
        self.row_filter = row_filter
        self.out_names = list(out_schema.names)
        schema = read_schema if read_schema is not None else out_schema
        #: The one data-file reader (``scan.py``), streaming ``batch_rows`` at a time.
        self.scan = FileScan(table_uri, version, schema,
                             [c for c in partition_columns if c in schema.names],
                             storage_options=dict(storage_options),
                             allow_external_paths=allow_external_paths, batch_rows=batch_rows,
                             column_mapping=column_mapping)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        scan = self.scan
        matching = None
        if self.row_filter is not None:
            matching = row_filter(parse_expression(self.row_filter), scan.out_schema,
                                  f"filter of a read of table {scan.table_uri}",
                                  writes=False)
        for batch in batches:
            paths: list[Any] = batch.column(0).to_pylist()
            values: list[Any] = batch.column(1).to_pylist()
            dvs: list[Any] = (batch.column(2).to_pylist() if batch.num_columns > 2
                              else [None] * len(paths))
            for path, pv, dv in zip(paths, values, dvs, strict=True):
                out = scan.batches(str(path), json.loads(pv), json.loads(dv) if dv else None)
                if matching is None:
                    yield from out
                    continue
                for b in out:
                    t = pa.Table.from_batches([b])
                    yield from t.filter(matching.matches(t)).select(self.out_names).to_batches()


class CompactTask:
    """``mapInArrow`` function for compaction: each input row is one bin (its index and the
    JSON list of its files); the task reads the bin's files, applying their deletion vectors,
    and writes them as new data files.  It returns ``{"bin": i, "add": {...}}`` per file written
    (``dataChange`` false) or ``{"bin": i, "error": {...}}``; the driver commits."""

    INPUT_DDL = "bin int, files string"

    def __init__(self, target: WriteTarget, storage_options: Mapping[str, str], version: int,
                 allow_external_paths: bool = False) -> None:
        self.target = target
        self.storage_options = dict(storage_options)
        schema = target.schema
        self.scan = FileScan(target.uri, version, schema, list(target.partition_columns),
                             storage_options=self.storage_options,
                             allow_external_paths=allow_external_paths,
                             column_mapping=target.column_mapping)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            bins: list[Any] = batch.column(0).to_pylist()
            files: list[Any] = batch.column(1).to_pylist()
            out = [line for b, f in zip(bins, files, strict=True)
                   for line in self._rewrite(int(b), json.loads(f))]
            if out:
                yield pa.RecordBatch.from_arrays([pa.array(out, pa.string())],
                                                 schema=RESULT_SCHEMA)

    def _rewrite(self, index: int, files: list[list[Any]]) -> list[str]:
        from dataclasses import replace


        try:
            parts = [self.scan.read_file(path, values, dv) for path, values, dv in files]
            store = open_store(self.target.uri, self.storage_options)
            rows = pa.concat_tables(parts)
            adds = write_rows(store, self.target, rows, clock=SYSTEM_CLOCK,
                              random=DEFAULT_RANDOM)
            # The bin's output, read back, must hold exactly its input's rows.
            check_rewritten(self.scan, store, rows, adds,
                            what=f"compaction of table {self.target.uri}: bin {index}")
        except DeltaCommitError as e:
            return [json.dumps({"bin": index, "error": {"type": type(e).__name__,
                                                        "message": str(e)}})]
        return [json.dumps({"bin": index, "add": replace(a, data_change=False).to_json()},
                           separators=(",", ":")) for a in adds]
