"""``update()`` and ``delete()`` whose file rewrites run in Spark tasks, and the driver side
every Spark row-level verb (MERGE too, ``spark/merge.py``) shares.

The driver does what ``DeltaTable.update``/``delete`` do up to reading files: it opens a
transaction through the one write driver (``ops.rowlevel.RowLevelJob``), picks the files whose
partition values and statistics admit a row the predicate matches (recorded as read, for the
conflict rules) and hands each file to a Spark task (``rowlevel_tasks.FileTask``).  Tasks
read, change, write and prove; the driver gathers what they wrote into the attempt at once
(so every file is deleted if nothing is committed: a task's error, a refused commit, a
conflict), stages their actions and commits.  The metrics are deltalake's.

On a table with deletion vectors and row tracking the tasks also report the rows of each file
they changed (and a MERGE's rows matched and left, where it inserts), and the driver records
them with the rows the verb acts on (its predicate, TRUE without one) as the Python verbs do
(``ops.rowlevel.record_rows``): concurrent commits are then checked row by row, so an append
of rows the verb does not match, or a compaction, does not abort it.  A DELETE whose predicate
partition values decide keeps Spark's file-level rules, as ``DeltaTable.delete`` (which
removes whole files without reading them) does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacommit import errors
from deltacommit.engine.commit.commit_info import json_text
from deltacommit.engine.scan import decided_by_partition_values
from deltacommit.errors import DeltaCommitError, InvalidArgumentError, RewriteCheckError
from deltacommit.io.deletion_vectors import deleted_rows
from deltacommit.ops.delete import deleted_metrics, parse_delete
from deltacommit.ops.driver import Attempt, Finished
from deltacommit.ops.merge.plan import parse_assignments
from deltacommit.ops.pruning import predicate_bounds
from deltacommit.ops.rowlevel import (
    FileRows,
    Planned,
    Rewritten,
    RowLevelJob,
    RowLevelTable,
    RowRewrite,
    candidate_files,
    rewrite_spark_metrics,
    run_row_level,
)
from deltacommit.protocol.actions import Add, AddCDCFile
from deltacommit.protocol.expressions.ast import TRUE, And, Expr
from deltacommit.protocol.expressions.evaluator import EvaluationFailed, evaluate
from deltacommit.protocol.expressions.parser import parse_expression
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.protocol.features.identity import identity_columns
from deltacommit.protocol.log.paths import parse_location
from deltacommit.runtime.threads import CallThreads
from deltacommit.spark.rowlevel_tasks import (
    FILE_COLUMN,
    DeleteWork,
    FileTask,
    FileWork,
    RewriteSpec,
    UpdateWork,
    text_positions,
)
from deltacommit.spark.shipping import run_tasks
from deltacommit.spark.tasks import RESULT_DDL
from deltacommit.table import DeltaTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from deltacommit.engine.transaction.transaction import Transaction


@dataclass(slots=True)
class TaskResults:
    """What a job's tasks reported, gathered: the rewrite to stage, the verb's counts, the
    source rows matched (MERGE), how many files were read, and the rows of each file changed
    or read as the tasks' documents give them (``reported_rows`` checks and decodes them)."""

    written: Rewritten = field(default_factory=Rewritten)
    counts: dict[str, int] = field(default_factory=dict)
    matched: list[int] = field(default_factory=list)
    scanned: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)

    def absorb(self, other: TaskResults) -> None:
        w, o = self.written, other.written
        w.removes += o.removes
        w.adds += o.adds
        w.cdc += o.cdc
        w.unsynced += o.unsynced
        for k in ("files_added", "files_removed", "rows_copied", "dvs_added", "dvs_removed",
                  "change_files", "bytes_added", "bytes_removed"):
            setattr(w, k, getattr(w, k) + getattr(o, k))
        w.rewrite_ms = max(w.rewrite_ms, o.rewrite_ms)
        for k, v in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        self.matched += other.matched
        self.scanned += other.scanned
        self.rows += other.rows


def task_error(failure: Mapping[str, str], uri: str, count: int) -> DeltaCommitError:
    """Re-create in the driver the deltacommit exception a task met (its own class where it is
    one of deltacommit's)."""
    kind = getattr(errors, str(failure.get("type", "")), None)
    cls = kind if isinstance(kind, type) and issubclass(kind, DeltaCommitError) \
        else DeltaCommitError
    more = f" (and {count - 1} more failed task(s))" if count > 1 else ""
    return cls(f"{failure.get('message', '')}{more}")


def run_row_tasks(frame: DataFrame, task: Any, uri: str, attempt: Attempt) -> TaskResults:
    """Run ``task`` over ``frame`` and gather its documents; every file a task wrote joins
    ``attempt.written`` before anything can raise, so the write driver deletes it if nothing
    is committed.  The first error a task met is raised here."""
    rows = run_tasks(frame, task, RESULT_DDL, uri)
    docs = [json.loads(r[0]) for r in rows]
    for d in docs:
        attempt.written.extend(Add.from_json(a) for a in d.get("written", []))
    failures = [d["error"] for d in docs if "error" in d]
    if failures:
        raise task_error(failures[0], uri, len(failures))
    out = TaskResults()
    for d in docs:
        w = Rewritten(removes=[Add.from_json(a) for a in d.get("removes", [])],
                      adds=[Add.from_json(a) for a in d.get("adds", [])],
                      cdc=[_cdc_file(c) for c in d.get("cdc", [])],
                      unsynced=list(d.get("unsynced", [])), **d.get("rewritten", {}))
        out.absorb(TaskResults(w, dict(d.get("counts", {})), list(d.get("matched", [])),
                               int(d.get("scanned", 0)), list(d.get("rows", []))))
    return out


def reported_rows(files: Sequence[Add], results: TaskResults, what: str) -> list[FileRows]:
    """The rows of each file the tasks changed or read, as they reported them (by the
    file's number in ``files``), checked before they reach the conflict check: each file
    given once, positions inside the file, no row changed that was deleted when read, and
    a report of changed rows for exactly the files the tasks removed (a file rewritten
    without one would escape the row-level check).  RewriteCheckError otherwise."""
    out: list[FileRows] = []
    seen: set[int] = set()

    def refuse(why: str) -> RewriteCheckError:
        return RewriteCheckError(f"{what}: the Spark tasks reported {why}; nothing was "
                                 "committed and the files they wrote were deleted")

    for doc in results.rows:
        number, num_rows = int(doc["file"]), int(doc["numRows"])
        if not 0 <= number < len(files) or number in seen:
            raise refuse(f"the rows of file number {number} "
                         f"{'twice' if number in seen else 'which they were not given'}")
        seen.add(number)
        add = files[number]
        where = f"{what}: rows of {add.path}"
        before, changed, read = (text_positions(str(doc.get(k, "")), num_rows, where)
                                 for k in ("deletedBefore", "changed", "read"))
        if len(np.intersect1d(before, np.union1d(changed, read))):
            raise refuse(f"changing or reading rows of {add.path} deleted when it was read")
        out.append(FileRows(add, num_rows, before, changed, read))
    changed_paths = {f.add.path for f in out if len(f.changed)}
    removed = {a.path for a in results.written.removes}
    if changed_paths != removed:
        odd = sorted(changed_paths ^ removed)[0]
        raise refuse(f"{'no changed rows' if odd in removed else 'changed rows'} of {odd}, "
                     f"which they {'removed' if odd in removed else 'did not remove'}")
    return out


def check_rows_written(rewrite: RowRewrite, rows: Sequence[FileRows], written: Rewritten
                       ) -> None:
    """RewriteCheckError unless the rows the tasks reported are those storage holds: each
    file's rows deleted when read are those of its deletion vector as the driver gave it,
    and the rows it changed are those its new deletion vector deletes besides (every live
    row, where the file was removed outright).

    A report is a record, and the conflict check and a retry's rebase work from it alone:
    a rebase deletes the reported rows from the files a winner replaced.  A report naming
    rows other than those the tasks rewrote would, after a compaction, delete rows nobody
    changed and leave the old copies of the rows updated; so it is compared with the
    deletion vectors before anything is committed on it (a read of each file's deletion
    vector, old and new; inline ones cost none).  The rows read and left cannot be checked
    so: only the task saw the source rows they matched."""
    table = rewrite.table
    store = table.log_store.store
    root = parse_location(table.uri)
    new = {a.path: a for a in written.adds}

    def deleted(add: Add, num_rows: int) -> Any:
        if not add.deletion_vector:
            return np.zeros(0, np.int64)
        return np.asarray(deleted_rows(store, root, table.uri, add.deletion_vector,
                                       data_file=add.path, num_rows=num_rows,
                                       storage_options=table.storage_options,
                                       allow_external=table.allow_external_paths),
                          dtype=np.int64)

    def problem(f: FileRows) -> str | None:
        again = new.get(f.add.path) if len(f.changed) else None
        try:
            before = deleted(f.add, f.num_rows)
            after = deleted(again, f.num_rows) if again is not None else None
        except (DeltaCommitError, OSError, ValueError) as e:
            return f"rows of {f.add.path} whose deletion vectors cannot be read ({e})"
        if not np.array_equal(before, f.deleted_before):
            return (f"rows of {f.add.path} deleted when it was read other than those its "
                    "deletion vector deletes")
        gone = np.union1d(before, f.changed)
        # Removed outright: every row gone (positions are distinct and inside the file).
        if len(f.changed) and not (np.array_equal(after, gone) if after is not None
                                   else len(gone) == f.num_rows):
            return (f"changed rows of {f.add.path} other than "
                    + ("those its new deletion vector deletes besides the rows deleted when "
                       "it was read" if again is not None
                       else "its live rows, though they removed it"))
        return None

    checked = [f for f in rows if f.add.deletion_vector or len(f.changed)]
    if len(checked) > 1 and store.local_path("") is None:
        # A request or two a file: in threads, as the rewrite reads files.
        with CallThreads(max_workers=min(len(checked), 16)) as pool:
            problems = list(pool.map(problem, checked))
    else:
        problems = [problem(f) for f in checked]
    first = next((p for p in problems if p is not None), None)
    if first is not None:
        raise RewriteCheckError(f"{rewrite.what}: the Spark tasks reported {first}; nothing "
                                "was committed and the files they wrote were deleted")


def check_removes(files: Sequence[Add], written: Rewritten, what: str) -> None:
    """RewriteCheckError unless the tasks removed only files the driver gave them, each once:
    a task's report is checked before it becomes a commit."""
    given = {a.path for a in files}
    removed = [a.path for a in written.removes]
    stray = sorted(set(removed) - given)
    if stray or len(set(removed)) != len(removed):
        raise RewriteCheckError(
            f"{what}: the Spark tasks reported removing "
            f"{'files they were not given (first ' + stray[0] + ')' if stray else 'a file twice'}"
            "; nothing was committed and the files they wrote were deleted")


def _cdc_file(doc: Mapping[str, Any]) -> AddCDCFile:
    """A ``cdc`` action a task wrote, from its JSON."""
    return AddCDCFile(str(doc["path"]), dict(doc["partitionValues"]), int(doc["size"]),
                      bool(doc.get("dataChange", False)), doc.get("tags"))


def file_listing(spark: SparkSession, files: Sequence[Add], partitions: int) -> DataFrame:
    """One row per candidate file (its number), spread over ``partitions`` tasks."""
    rows = [(i,) for i in range(len(files))]
    frame = spark.createDataFrame(rows, f"{FILE_COLUMN} int")
    return frame.repartition(max(1, partitions), FILE_COLUMN)


def task_count(spark: SparkSession, files: int) -> int:
    """How many tasks share ``files`` files: the session's shuffle partitions at most."""
    try:
        limit = int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    except ValueError:
        limit = 200
    return max(1, min(files, limit))


def files_json(files: Sequence[Add]) -> list[str]:
    return [json.dumps(a.to_json(), separators=(",", ":")) for a in files]


SparkPlan = Callable[[RowRewrite, "Transaction", Attempt], tuple[Planned, Rewritten]]


class SparkRowLevelJob(RowLevelJob):
    """``RowLevelJob`` whose reading and rewriting are Spark jobs: ``run`` plans and writes in
    tasks (``spark_plan``); staging, the commit and cleanup stay the write driver's."""

    def __init__(self, table: RowLevelTable, operation: str, parameters: Mapping[str, Any],
                 what: str, spark_plan: SparkPlan,
                 spark_metrics: Callable[[Planned, Rewritten], dict[str, str]]) -> None:
        super().__init__(table, operation, parameters, what, self._no_local_plan, spark_metrics)
        self.spark_plan = spark_plan

    @staticmethod
    def _no_local_plan(rewrite: RowRewrite, txn: Transaction) -> Planned:
        raise AssertionError("Spark row-level jobs plan in tasks")

    def write(self, attempt: Attempt) -> Finished[Any] | None:
        rewrite = RowRewrite(self.table, self.txn, self.what)
        self._rewrite = rewrite
        self._planned, self._written = self.spark_plan(rewrite, self.txn, attempt)
        if self._written.empty:
            return Finished(self._done(None))
        return None


def open_table(table_or_uri: DeltaTable | str, storage_options: Mapping[str, str] | None,
          operation: str) -> DeltaTable:
    table = (table_or_uri if isinstance(table_or_uri, DeltaTable)
             else DeltaTable(table_or_uri, storage_options=storage_options))
    table._check_writable(operation)
    table.update()
    return table


def _file_job(spark: SparkSession, work: FileWork, conjuncts: Sequence[Any],
              bounds: Sequence[Any], count_key: str, reads: Expr | None
              ) -> SparkPlan:
    """The Spark plan of a verb that reads candidate files only (UPDATE, DELETE); ``reads``:
    the rows it acts on, recorded with the rows the tasks report where the table checks
    concurrent commits row by row (None keeps the file-level rules)."""

    def plan(rewrite: RowRewrite, txn: Transaction, attempt: Attempt
             ) -> tuple[Planned, Rewritten]:
        started = time.monotonic()
        files, skipped = candidate_files(rewrite, txn, conjuncts, bounds)
        if not files:
            return Planned([], None, 0, skipped, 0, {count_key: 0}), Rewritten()
        spec = RewriteSpec.of(rewrite, txn)
        task = FileTask(spec, files_json(files), work)
        listing = file_listing(spark, files, task_count(spark, len(files)))
        results = run_row_tasks(listing, task, rewrite.table.uri, attempt)
        check_removes(files, results.written, rewrite.what)
        counts = {count_key: results.counts.get(count_key, 0)}
        rows = reported_rows(files, results, rewrite.what) if spec.rows else None
        if rows is not None:
            check_rows_written(rewrite, rows, results.written)
        planned = Planned([], None, len(files), skipped,
                          int((time.monotonic() - started) * 1000), counts,
                          reads=reads if rows is not None else None, rows=rows)
        return planned, results.written

    return plan


def _conjuncts(pred: Any) -> list[Any]:

    return list(pred.children) if isinstance(pred, And) else [pred] if pred is not None else []


def session(spark: SparkSession | None, what: str) -> SparkSession:
    """``spark``, else the active session; InvalidArgumentError naming ``what`` without one."""
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None:
        raise InvalidArgumentError(f"{what}: no active Spark session; pass spark=")
    return active


def update(table_or_uri: DeltaTable | str, updates: Mapping[str, str],
           predicate: str | None = None, *, spark: SparkSession | None = None,
           storage_options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """UPDATE the rows where ``predicate`` is TRUE (all without one) with Spark tasks; the
    same arguments, rules and metrics as ``DeltaTable.update(updates, predicate)``."""

    table = open_table(table_or_uri, storage_options, "UPDATE")
    spark = session(spark, f"UPDATE of table {table.uri}")
    schema, uri = table.schema, table.uri
    what = f"UPDATE of table {uri}"
    sets = parse_assignments(updates, schema, what,
                             identity=[c.name for c in identity_columns(schema, uri)])
    pred = parse_expression(predicate, what) if predicate is not None else None
    if pred is not None:
        what = f"UPDATE of table {uri} where {pred.to_sql()}"
        row_filter(pred, schema, what)
    for name, expr in sets:
        try:
            evaluate(expr, schema.empty_table(), to=schema.field(name).type)
        except EvaluationFailed as e:
            raise InvalidArgumentError(f"{what}: column {name!r} = {expr.to_sql()!r}: "
                                       f"{e.message}") from None

    def spark_metrics(planned: Planned, written: Rewritten) -> dict[str, str]:
        return rewrite_spark_metrics(planned, written, "numUpdatedRows", "updated")

    bounds = predicate_bounds(pred, schema) if pred is not None else []
    job = SparkRowLevelJob(
        table, "UPDATE", {"predicate": json_text([pred.to_sql()] if pred else [])}, what,
        _file_job(spark, UpdateWork(pred, sets, what), _conjuncts(pred), bounds, "updated",
                  pred if pred is not None else TRUE),
        spark_metrics)
    done = run_row_level(job)
    return {"num_added_files": done.written.files_added,
            "num_removed_files": done.written.files_removed,
            "num_updated_rows": done.planned.counts.get("updated", 0),
            "num_copied_rows": done.written.rows_copied,
            "execution_time_ms": done.execution_ms,
            "scan_time_ms": done.planned.scan_ms,
            "version": done.version}


def delete(table_or_uri: DeltaTable | str, predicate: str, *,
           spark: SparkSession | None = None,
           storage_options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """DELETE the rows where ``predicate`` is TRUE (NULL deletes nothing) with Spark tasks:
    copy-on-write, or deletion vectors where the table allows them; deltalake's metrics."""
    started = time.monotonic()

    table = open_table(table_or_uri, storage_options, "DELETE")
    spark = session(spark, f"DELETE from table {table.uri}")
    if not isinstance(predicate, str) or not predicate.strip():
        raise InvalidArgumentError(f"DELETE from table {table.uri}: give the predicate of the "
                                   f"rows to delete as SQL text, got {predicate!r}")
    pred, what = parse_delete(table, predicate)

    def spark_metrics(planned: Planned, written: Rewritten) -> dict[str, str]:
        return rewrite_spark_metrics(planned, written, "numDeletedRows", "deleted")

    job = SparkRowLevelJob(
        table, "DELETE", {"predicate": json_text([pred.to_sql()])}, what,
        _file_job(spark, DeleteWork(pred, what), _conjuncts(pred),
                  predicate_bounds(pred, table.schema), "deleted",
                  None if decided_by_partition_values(pred, table.schema,
                                                      table.partition_columns) else pred),
        spark_metrics)
    done = run_row_level(job)
    return deleted_metrics(done.version, started, added=done.written.files_added,
                           removed=done.written.files_removed,
                           deleted=done.planned.counts.get("deleted", 0),
                           copied=done.written.rows_copied, scan_ms=done.planned.scan_ms,
                           rewrite_ms=done.written.rewrite_ms)


__all__ = ["SparkRowLevelJob", "TaskResults", "check_removes", "check_rows_written", "delete",
           "file_listing", "files_json", "open_table", "reported_rows", "run_row_tasks",
           "session", "task_count", "task_error", "update"]
