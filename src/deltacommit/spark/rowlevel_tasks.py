"""The code Spark tasks run for MERGE, UPDATE and DELETE: read target files, apply the verb's
per-file work, write and prove the rewrite, and return what to commit.

Everything here is picklable and needs only pyarrow, numpy and the shipped deltacommit on the
executor.  A task's input rows carry a target file's number (``FILE_COLUMN``) and, for a MERGE,
the source rows that may match that file (the driver joined them by the files' key ranges) with
each source row's number (``SOURCE_ROW_COLUMN``; NULL on the one row that only names a file a
``WHEN NOT MATCHED BY SOURCE`` clause must visit).  All rows of a file reach one task, so a
task judges each of its files with every source row that can match it: the MERGE cardinality
rule (one source row per changed target row) holds across tasks.

The rewrite itself is ``ops.rowlevel.RowRewrite``'s, the one the Python verbs use
(copy-on-write or deletion vectors, row tracking, change data, and the proof that the files
written hold exactly the rows they should), run on the executor against a picklable
description of the snapshot (``RewriteSpec``).  Tasks never commit: each returns JSON
documents naming every file it wrote (so the driver deletes them all if nothing is committed),
the actions to stage, its counts and, for a MERGE, the source rows its files matched.

On a table whose concurrent commits are checked row by row (deletion vectors and row
tracking, ``RewriteSpec.rows``), a task also reports, for each file it changed or read, what
``Transaction.record_row_changes`` needs and only the task saw (``FileRows``): the file's
physical row count and the positions deleted when it was read, changed, and (a MERGE that
inserts) matched and left as they were.  Positions travel as a serialised RoaringBitmapArray
in base64 (``positions_text``), the deletion vectors' own format: two bytes a position where
they are few, a bit a row where they are many.  A task
that meets a deltacommit error (a source row matching two target rows, a value a column cannot
hold, a rewrite that does not prove) returns it as a document rather than raising, since a
Spark retry would meet it again; the driver raises it after deleting every file the job wrote.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any
from typing import Protocol as Interface

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from deltacommit.engine.scan import FileScan
from deltacommit.errors import DeltaCommitError, RewriteCheckError
from deltacommit.io.datafiles import conform_rows
from deltacommit.io.storage import open_store
from deltacommit.ops.driver import Attempt
from deltacommit.ops.merge.plan import insert_rows, merge_file
from deltacommit.ops.rowlevel import FileChange, FileRows, ReadFile, Rewritten, RowRewrite
from deltacommit.ops.update import update_rows
from deltacommit.protocol.actions import Add
from deltacommit.protocol.deletion_vectors import decode_bitmap_array, encode_bitmap_array
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.protocol.features import row_tracking
from deltacommit.protocol.partitions import decode_add_path
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK
from deltacommit.spark.tasks import RESULT_SCHEMA

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.io.datafiles import WriteTarget
    from deltacommit.io.storage.base import ObjectStore
    from deltacommit.ops.merge.plan import MergePlan
    from deltacommit.protocol.expressions.ast import Expr

#: The task's input column holding the target file's number (an index into the task's files).
FILE_COLUMN = "__deltacommit_file"
#: The task's input column holding a source row's number (MERGE).
SOURCE_ROW_COLUMN = "__deltacommit_source_row"

#: A task writes what it has gathered once its files hold this many physical rows, so its
#: memory stays bounded whatever share of the table it was given.
FLUSH_ROWS = 2_000_000

Positions = npt.NDArray[np.int64]

_COUNTED = tuple(f.name for f in fields(Rewritten)
                 if f.name not in ("removes", "adds", "cdc", "unsynced"))


@dataclass(frozen=True, slots=True)
class RewriteSpec:
    """What ``RowRewrite`` needs of a snapshot, small and picklable: the driver builds it from
    its ``RowRewrite`` and every task rebuilds the rewrite from it."""

    uri: str
    storage_options: dict[str, str]
    allow_external_paths: bool
    version: int
    what: str
    target: WriteTarget
    hidden: tuple[str, str] | None
    deletion_vectors: bool
    change_data: bool
    #: Whether tasks report the rows of each file they change or read (``FileRows``): where
    #: ``RowLevelJob.stage`` records them, the rewrite writing deletion vectors on a table
    #: whose concurrent commits are checked row by row (``Transaction.tracks_rows``).
    rows: bool = False

    @classmethod
    def of(cls, rewrite: RowRewrite, txn: Transaction) -> RewriteSpec:
        """The spec of ``rewrite`` on the snapshot ``txn`` read."""
        table = rewrite.table
        return cls(table.uri, dict(table.storage_options), table.allow_external_paths,
                   txn.read_version, rewrite.what, rewrite.target, rewrite.hidden,
                   rewrite.deletion_vectors, rewrite.change_data,
                   bool(rewrite.deletion_vectors and txn.tracks_rows))


def positions_text(positions: Positions) -> str:
    """Ascending row positions as JSON carries them: a serialised RoaringBitmapArray in
    base64, "" for none."""
    if not len(positions):
        return ""
    return base64.b64encode(encode_bitmap_array(positions)).decode("ascii")


def text_positions(text: str, num_rows: int, what: str) -> Positions:
    """The positions ``positions_text`` gave, checked to lie in a file of ``num_rows`` rows;
    RewriteCheckError for anything else."""
    if not text:
        return np.zeros(0, np.int64)
    try:
        values = decode_bitmap_array(base64.b64decode(text, validate=True), what,
                                     num_rows=num_rows)
    except (binascii.Error, ValueError, DeltaCommitError) as e:
        raise RewriteCheckError(f"{what}: a Spark task reported row positions that do not "
                                f"decode ({e}); nothing was committed") from None
    return values.astype(np.int64)


def rows_document(number: int, rows: FileRows) -> dict[str, Any]:
    """A file's ``FileRows`` in a task's document, the file by its number."""
    return {"file": number, "numRows": rows.num_rows,
            "deletedBefore": positions_text(rows.deleted_before),
            "changed": positions_text(rows.changed), "read": positions_text(rows.read)}


class _StoreHolder:
    """The ``log_store`` of a task's table: only its object store is used."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store


class _TaskTable:
    """The table as a task's rewrite sees it (``RowRewrite`` and ``check_output`` use these)."""

    def __init__(self, spec: RewriteSpec, store: ObjectStore) -> None:

        self.uri = spec.uri
        self.storage_options = spec.storage_options
        self.allow_external_paths = spec.allow_external_paths
        self.log_store = _StoreHolder(store)
        self.clock = SYSTEM_CLOCK
        self.random = DEFAULT_RANDOM


class TaskRewrite(RowRewrite):
    """``RowRewrite`` rebuilt on an executor from a ``RewriteSpec`` (no snapshot, no log)."""

    def __init__(self, spec: RewriteSpec) -> None:

        store = open_store(spec.uri, spec.storage_options)
        target = spec.target
        self.table = _TaskTable(spec, store)  # type: ignore[assignment]
        self.what = spec.what
        self.schema = target.schema
        self.target = target
        self.hidden = spec.hidden
        self.deletion_vectors = spec.deletion_vectors
        self.change_data = spec.change_data
        wide = list(target.schema)
        if spec.hidden is not None:
            wide += row_tracking.hidden_fields(spec.hidden, target.column_mapping)
        self.wide_schema = pa.schema(wide)
        scan = FileScan(spec.uri, spec.version, self.wide_schema,
                        list(target.partition_columns), storage_options=spec.storage_options,
                        allow_external_paths=spec.allow_external_paths,
                        column_mapping=target.column_mapping)
        self.scan = replace(scan, physical_rows=True, keep_dictionaries=True)
        self.read_back_scan = scan
        self.store = store


class FileWork(Interface):
    """A verb's work on one file: its change, its counts, and (MERGE) the numbers of the
    source rows the file's rows match."""

    def __call__(self, rewrite: RowRewrite, file: ReadFile, source: pa.Table | None
                 ) -> tuple[FileChange, dict[str, int], Positions]: ...


@dataclass(frozen=True, slots=True)
class DeleteWork:
    """DELETE: the live rows where the predicate is TRUE."""

    predicate: Expr
    what: str

    def __call__(self, rewrite: RowRewrite, file: ReadFile, source: pa.Table | None
                 ) -> tuple[FileChange, dict[str, int], Positions]:

        rows = file.live_rows()
        mask = row_filter(self.predicate, rows.schema, self.what).matches(rows)
        hit = np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=np.bool_))
        change = FileChange(file, file.live[hit].astype(np.int64), np.zeros(0, np.int64),
                            rewrite.schema.empty_table())
        return change, {"deleted": len(hit)}, np.zeros(0, np.int64)


@dataclass(frozen=True, slots=True)
class UpdateWork:
    """UPDATE: ``ops.update.update_rows`` on the file's live rows."""

    predicate: Expr | None
    assignments: tuple[tuple[str, Expr], ...]
    what: str

    def __call__(self, rewrite: RowRewrite, file: ReadFile, source: pa.Table | None
                 ) -> tuple[FileChange, dict[str, int], Positions]:

        hit, new = update_rows(rewrite.target, file.live_rows(), self.predicate,
                               self.assignments, self.what)
        change = FileChange(file, np.zeros(0, np.int64), file.live[hit], new)
        return change, {"updated": len(hit)}, np.zeros(0, np.int64)


@dataclass(frozen=True, slots=True)
class MergeWork:
    """MERGE: ``plan.merge_file`` on the file's live rows and the source rows that may match
    them; the matched source rows are reported by their numbers."""

    plan: MergePlan

    def __call__(self, rewrite: RowRewrite, file: ReadFile, source: pa.Table | None
                 ) -> tuple[FileChange, dict[str, int], Positions]:

        if source is None:
            raise AssertionError("a MERGE task has source rows")
        numbers = np.asarray(source.column(SOURCE_ROW_COLUMN).to_numpy(), dtype=np.int64)
        m = merge_file(self.plan, file.live_rows(), source.drop_columns([SOURCE_ROW_COLUMN]))
        change = FileChange(file, file.live[m.deleted], file.live[m.updated], m.new_rows,
                            file.live[m.read])
        counts = {"matched_updated": m.matched_updated, "matched_deleted": m.matched_deleted,
                  "nmbs_updated": m.not_matched_by_source_updated,
                  "nmbs_deleted": m.not_matched_by_source_deleted}
        return change, counts, numbers[m.matched_source]


def _error(e: Exception) -> dict[str, str]:
    return {"type": type(e).__name__, "message": str(e)}


def _document(attempt_written: Sequence[Any], out: Rewritten | None, counts: Mapping[str, int],
              matched: Sequence[Positions], scanned: int, error: Exception | None,
              rows: Sequence[dict[str, Any]] = ()) -> str:
    doc: dict[str, Any] = {"written": [a.to_json() for a in attempt_written],
                           "counts": dict(counts), "scanned": scanned}
    if rows:
        doc["rows"] = list(rows)
    if out is not None:
        doc["removes"] = [a.to_json() for a in out.removes]
        doc["adds"] = [a.to_json() for a in out.adds]
        doc["cdc"] = [c.to_json() for c in out.cdc]
        doc["unsynced"] = list(out.unsynced)
        doc["rewritten"] = {k: getattr(out, k) for k in _COUNTED}
    if matched:
        doc["matched"] = np.unique(np.concatenate(matched)).tolist()
    if error is not None:
        doc["error"] = _error(error)
    return json.dumps(doc, separators=(",", ":"))


def _result(lines: list[str]) -> Iterator[pa.RecordBatch]:

    if lines:
        yield pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], schema=RESULT_SCHEMA)


def _durable(rewrite: RowRewrite, written: Sequence[Any]) -> None:
    """The files a task wrote unsynced, made durable before it reports them: the driver's
    commit cannot sync files on an executor's disk or finish its uploads."""

    if written:
        rewrite.store.make_durable([decode_add_path(a.path) for a in written])


class FileTask:
    """``mapInArrow`` function: the verb's work on each target file its rows name, then one
    rewrite per ``FLUSH_ROWS`` of physical rows read."""

    def __init__(self, spec: RewriteSpec, files: Sequence[str], work: FileWork) -> None:
        #: The candidate files' add actions as JSON, by file number.
        self.spec = spec
        self.files = list(files)
        self.work = work

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        data = pa.Table.from_batches(parts)
        numbers = np.asarray(data.column(FILE_COLUMN).to_numpy(), dtype=np.int64)
        order = np.argsort(numbers, kind="stable")
        data, numbers = data.take(order), numbers[order]
        starts = np.flatnonzero(np.r_[True, numbers[1:] != numbers[:-1]])
        ends = np.r_[starts[1:], len(numbers)]
        body = data.drop_columns([FILE_COLUMN])
        rewrite = TaskRewrite(self.spec)
        attempt = Attempt(1, rewrite.store)
        lines: list[str] = []
        changes: list[FileChange] = []
        counts: dict[str, int] = {}
        matched: list[Positions] = []
        reported: list[dict[str, Any]] = []
        read_rows = scanned = 0
        try:
            for start, end in zip(starts, ends, strict=True):
                add = Add.from_json(json.loads(self.files[int(numbers[start])]))
                source = None
                if self.spec_has_source(body):
                    rows = body.slice(int(start), int(end - start))
                    rows = rows.filter(rows.column(SOURCE_ROW_COLUMN).is_valid())
                    source = rows
                file = rewrite.read(add)
                scanned += 1
                change, n, hit = self.work(rewrite, file, source)
                for k, v in n.items():
                    counts[k] = counts.get(k, 0) + v
                matched.append(hit)
                if change.touched:
                    changes.append(change)
                    read_rows += file.physical.num_rows
                if self.spec.rows and (change.touched or len(change.read)):
                    reported.append(rows_document(int(numbers[start]), FileRows.of(change)))
                if read_rows >= FLUSH_ROWS:
                    lines.append(self._flush(rewrite, attempt, changes, counts, matched,
                                             scanned, reported))
                    changes, counts, matched, reported = [], {}, [], []
                    read_rows = scanned = 0
            lines.append(self._flush(rewrite, attempt, changes, counts, matched, scanned,
                                     reported))
        except DeltaCommitError as e:
            lines.append(_document(attempt.written, None, {}, [], 0, e))
        yield from _result(lines)

    @staticmethod
    def spec_has_source(body: pa.Table) -> bool:
        return SOURCE_ROW_COLUMN in body.column_names

    @staticmethod
    def _flush(rewrite: RowRewrite, attempt: Any, changes: list[FileChange],
               counts: Mapping[str, int], matched: list[Positions], scanned: int,
               rows: Sequence[dict[str, Any]]) -> str:
        before = len(attempt.written)
        out = rewrite.rewrite(attempt, changes, None)
        _durable(rewrite, attempt.written[before:])
        written = attempt.written[before:]
        return _document(written, out, counts, matched, scanned, None, rows)


class InsertTask:
    """``mapInArrow`` function: the rows a MERGE's ``WHEN NOT MATCHED`` clauses insert for the
    source rows it is given (those no target row matched), written and proven."""

    def __init__(self, spec: RewriteSpec, plan: MergePlan) -> None:
        self.spec = spec
        self.plan = plan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        source = pa.Table.from_batches(parts)
        if SOURCE_ROW_COLUMN in source.column_names:
            source = source.drop_columns([SOURCE_ROW_COLUMN])
        rewrite = TaskRewrite(self.spec)
        attempt = Attempt(1, rewrite.store)
        try:
            rows = [conform_rows(self.plan.target, p) for p in
                    insert_rows(self.plan, source, np.zeros(source.num_rows, np.bool_))]
            inserted = pa.concat_tables(rows) if len(rows) > 1 else rows[0] if rows else None
            out = rewrite.rewrite(attempt, [], inserted)
            _durable(rewrite, attempt.written)
            line = _document(attempt.written, out,
                             {"inserted": inserted.num_rows if inserted is not None else 0},
                             [], 0, None)
        except DeltaCommitError as e:
            line = _document(attempt.written, None, {}, [], 0, e)
        yield from _result([line])


__all__ = ["FILE_COLUMN", "SOURCE_ROW_COLUMN", "DeleteWork", "FileTask", "FileWork",
           "InsertTask", "MergeWork", "RewriteSpec", "TaskRewrite", "UpdateWork",
           "positions_text", "rows_document", "text_positions"]
