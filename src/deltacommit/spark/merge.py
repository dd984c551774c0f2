"""``merge()``: MERGE a Spark DataFrame into a Delta table, the join and the rewrite done by
Spark tasks; deltalake's ``TableMerger`` builder and metrics, as ``DeltaTable.merge``.

    (dcs.merge(updates_df, "s3://bucket/t", predicate="t.id = s.id", source_alias="s",
               target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())

How it runs (``SparkMerger.execute``):

1. The source is numbered (one number per row) and checkpointed, so every job below sees the
   same rows under the same numbers even if the DataFrame is not deterministic.
2. The driver opens a transaction through the one write driver and picks the target files
   that can hold a matching row: partition values and statistics against the condition's
   target-only conjuncts and the source's keys (collected when few, else their range), as
   ``DeltaTable.merge`` does (every file when a ``WHEN NOT MATCHED BY SOURCE`` clause may
   change rows no source row matches).
3. Each source row is joined (broadcast, by range) to the candidate files whose statistics
   admit its keys for each equality of the condition between a target and a source column;
   the rows are shuffled by file, and one task per share of files reads each file and runs
   ``plan.merge_file`` on it and the source rows that can match it: a file's rows meet every
   source row that can match them, so Spark's cardinality rule holds across tasks.  Tasks
   write and prove the rewrite (``rowlevel_tasks``).
4. The source rows no file matched (a Spark anti-join on the row numbers the tasks reported)
   go to insert tasks, which apply the ``WHEN NOT MATCHED`` clauses and write and prove the
   inserted rows.
5. The driver stages everything and commits; a task's error, a refused commit or a conflict
   deletes every file the jobs wrote.  On a table with deletion vectors and row tracking it
   first records, as ``DeltaTable.merge`` does, the rows the tasks changed and the rows
   they matched and left where the MERGE inserts, and the rows the MERGE acts on
   (``_reads``): concurrent commits are checked row by row, so appends of other keys and
   compactions do not abort it.

Not done in tasks: identity values for inserted rows (tasks cannot allocate them; a MERGE
whose inserts leave an identity column out is refused, run it with ``DeltaTable.merge``).
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltacommit.engine.commit.commit_info import json_text
from deltacommit.errors import InvalidArgumentError
from deltacommit.ops.merge.merger import (
    MERGE_COUNTS,
    TableMerger,
    merge_result,
    spark_merge_metrics,
)
from deltacommit.ops.merge.plan import MergePlan, conjuncts, side_of, without_alias
from deltacommit.ops.pruning import Bound, predicate_bounds
from deltacommit.ops.rowlevel import (
    Planned,
    Rewritten,
    RowRewrite,
    bound_condition,
    candidate_files,
    run_row_level,
)
from deltacommit.protocol.actions import Add
from deltacommit.protocol.expressions.ast import Column, Comparison, Expr, and_
from deltacommit.protocol.features.identity import identity_columns
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.schema.column_mapping import partition_physical_names
from deltacommit.spark.rowlevel import (
    SparkRowLevelJob,
    TaskResults,
    check_removes,
    check_rows_written,
    files_json,
    open_table,
    reported_rows,
    run_row_tasks,
    task_count,
)
from deltacommit.spark.rowlevel_tasks import (
    FILE_COLUMN,
    SOURCE_ROW_COLUMN,
    FileTask,
    InsertTask,
    MergeWork,
    RewriteSpec,
)
from deltacommit.spark.schema import arrow_to_spark_type, spark_to_arrow_schema

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.ops.driver import Attempt
    from deltacommit.table import DeltaTable

#: String maxima this long may be truncated prefixes: no upper bound from them.
_TRUNCATED_FROM = 32

#: A MERGE whose source has at most this many distinct keys prunes target files by the keys
#: themselves, else by their range.
KEYS_COLLECTED = 10_000



def _kind(t: pa.DataType) -> str | None:
    """The key types whose file ranges join source rows to files: compared in Spark exactly as
    the MERGE's hash join compares them (floats are left out: NaN keys match NaN, and
    statistics leave NaN out)."""
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_date32(t):
        return "date"
    return None


def _stat(raw: Any, kind: str) -> Any:
    if kind == "int":
        return raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    if kind == "string":
        return raw if isinstance(raw, str) else None
    if kind == "date" and isinstance(raw, str):
        try:
            return dt.date.fromisoformat(raw)
        except ValueError:
            return None
    return None


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class SparkMerger(TableMerger):
    """``TableMerger`` whose source is a Spark DataFrame and whose ``execute`` runs in Spark
    tasks (module docstring); the clauses are added exactly as on ``DeltaTable.merge``."""

    def __init__(self, table: DeltaTable, source: DataFrame, predicate: str,
                 source_alias: str | None = None, target_alias: str | None = None) -> None:
        self.source_schema = spark_to_arrow_schema(source.schema)
        reserved = [n for n in self.source_schema.names
                    if n in (FILE_COLUMN, SOURCE_ROW_COLUMN)]
        if reserved:
            raise InvalidArgumentError(
                f"MERGE into table {table.uri}: the source has column(s) {reserved}, names "
                "deltacommit's MERGE tasks use for their own columns; rename them")
        # The builder judges the clauses against the source's columns: its schema suffices.
        super().__init__(table, self.source_schema.empty_table(), predicate, source_alias,
                         target_alias)
        self.source_df = source
        self.spark = source.sparkSession
        self.delta_table = table

    # ------------------------------------------------------------------ execution

    def execute(self) -> dict[str, Any]:
        """Run the MERGE with Spark tasks; deltalake's metrics, and ``version``."""
        from pyspark.sql import functions as F

        table = self.delta_table
        if not (self.matched or self.not_matched or self.not_matched_by_source):
            raise InvalidArgumentError(f"{self.what}: add at least one clause (when_matched_*, "
                                       "when_not_matched_*) before execute()")
        table.update()
        self._check_inserts_need_no_identity()
        # Numbered once and materialised: every job sees the same rows under the same numbers.
        source = (self.source_df.withColumn(SOURCE_ROW_COLUMN, F.monotonically_increasing_id())
                  .localCheckpoint(eager=True))
        ns = source.count()
        params = {
            "predicate": json_text([self.on.to_sql()]),
            "matchedPredicates": json_text([c.describe() for c in self.matched]),
            "notMatchedPredicates": json_text([c.describe() for c in self.not_matched]),
            "notMatchedBySourcePredicates": json_text(
                [c.describe() for c in self.not_matched_by_source]),
        }

        def plan(rewrite: RowRewrite, txn: Transaction, attempt: Attempt
                 ) -> tuple[Planned, Rewritten]:
            return self._run(rewrite, txn, attempt, source)

        try:
            done = run_row_level(SparkRowLevelJob(table, "MERGE", params, self.what, plan,
                                                  functools.partial(spark_merge_metrics, ns)))
        finally:
            source.unpersist()
        return merge_result(ns, done)

    def _check_inserts_need_no_identity(self) -> None:

        identity = {c.name for c in identity_columns(self.table.schema, self.table.uri)}
        for clause in self.not_matched:
            lacking = identity - {name for name, _ in clause.assignments}
            if lacking:
                raise InvalidArgumentError(
                    f"{self.what}: WHEN NOT MATCHED INSERT leaves identity column(s) "
                    f"{sorted(lacking)} to be generated, which Spark tasks cannot allocate "
                    "(each task would take the same values); set them from the source, or "
                    "run the MERGE with DeltaTable.merge")

    def _run(self, rewrite: RowRewrite, txn: Transaction, attempt: Attempt,
             source: DataFrame) -> tuple[Planned, Rewritten]:
        started = time.monotonic()
        merge = self.plan_for(rewrite)
        merge.check(self.source_schema)
        target_only, keys = self._conditions(merge)
        bounds = self._key_bounds(source, keys) if not merge.not_matched_by_source else []
        if target_only:
            bounds += predicate_bounds(and_(*target_only), merge.schema)
        files, skipped = candidate_files(rewrite, txn, target_only, bounds)
        spec = RewriteSpec.of(rewrite, txn)
        results = TaskResults()
        if files:
            work = self._work_frame(source, merge, files, keys, txn)
            task = FileTask(spec, files_json(files), MergeWork(merge))
            results.absorb(run_row_tasks(work, task, self.table.uri, attempt))
        if merge.not_matched:
            unmatched = source
            if results.matched:
                numbers = self.spark.createDataFrame([(n,) for n in results.matched],
                                                     f"{SOURCE_ROW_COLUMN} long")
                unmatched = source.join(numbers, SOURCE_ROW_COLUMN, "left_anti")
            results.absorb(run_row_tasks(unmatched, InsertTask(spec, merge), self.table.uri,
                                         attempt))
        check_removes(files, results.written, self.what)
        counts = {k: results.counts.get(k, 0) for k in MERGE_COUNTS}
        rows = reported_rows(files, results, self.what) if spec.rows else None
        if rows is not None:
            check_rows_written(rewrite, rows, results.written)
        planned = Planned([], None, len(files), skipped,
                          int((time.monotonic() - started) * 1000), counts,
                          reads=self._reads(target_only, bounds) if rows is not None else None,
                          rows=rows)
        return planned, results.written

    @staticmethod
    def _reads(target_only: Sequence[Expr], bounds: Sequence[Bound]) -> Expr:
        """The target rows the MERGE acts on, recorded for the row-level conflict check: its
        condition's target-only conjuncts and the source's keys (every row with a ``WHEN NOT
        MATCHED BY SOURCE`` clause: neither is then given, TRUE).  A row a concurrent writer
        adds there might have matched a source row, or kept one from being inserted.

        ``DeltaTable.merge`` records every source key.  Here the driver has the keys only up
        to ``KEYS_COLLECTED`` distinct ones (``_key_bounds``); beyond, it records their range,
        and for a key of a type its files are not joined by (``_kind``), nothing.  Both are
        looser reads than the keys: every row the keys admit is admitted, so a concurrent
        append conflicts more often (a row between two keys), never less."""
        return and_(*target_only, *(bound_condition(b) for b in bounds))

    def _conditions(self, plan: MergePlan) -> tuple[list[Expr], list[tuple[str, str]]]:
        """The condition's conjuncts over target columns alone (aliases dropped), and its
        equalities between a top-level target column and a top-level source column of the
        same kind (``_kind``): (target column, source column)."""
        schema = plan.schema
        empty_t, empty_s = schema.empty_table(), self.source_schema.empty_table()
        target_only: list[Expr] = []
        keys: list[tuple[str, str]] = []
        for c in conjuncts(plan.on):
            sides = {side_of(col, plan, empty_t, empty_s) for col in c.walk()
                     if isinstance(col, Column)}
            if sides and all(s is not None and s[0] == "target" for s in sides):
                if not plan.not_matched_by_source:
                    target_only.append(without_alias(c, plan.target_alias))
                continue
            if not (isinstance(c, Comparison) and c.op == "=" and isinstance(c.left, Column)
                    and isinstance(c.right, Column)):
                continue
            a = side_of(c.left, plan, empty_t, empty_s)
            b = side_of(c.right, plan, empty_t, empty_s)
            if a is None or b is None or a[0] == b[0]:
                continue
            t, s = (a[1], b[1]) if a[0] == "target" else (b[1], a[1])
            if len(t) != 1 or len(s) != 1 or t[0] not in schema.names:
                continue
            names = self.source_schema.names
            found = s[0] if s[0] in names else next(
                (n for n in names if n.lower() == s[0].lower()), None)
            if found is None:
                continue
            kind = _kind(schema.field(t[0]).type)
            if kind is None or kind != _kind(self.source_schema.field(found).type):
                continue
            keys.append((t[0], found))
        return target_only, keys

    def _key_bounds(self, source: DataFrame, keys: Sequence[tuple[str, str]]) -> list[Bound]:
        """For each key equality, the source's keys (up to ``KEYS_COLLECTED`` distinct ones,
        else their range), one small job each: target rows holding none of them match no
        source row."""
        from pyspark.sql import functions as F

        out: list[Bound] = []
        for t, s in keys:
            column = F.col(_quote(s))
            present = source.select(column.alias("k")).where(column.isNotNull()).distinct()
            found = [r[0] for r in present.limit(KEYS_COLLECTED + 1).collect()]
            if len(found) <= KEYS_COLLECTED:
                values = tuple(sorted(found))
                out.append(Bound(t, values[0], True, values[-1], True, values) if values
                           else Bound(t, values=()))  # every key NULL: no row matches
                continue
            row = present.agg(F.min("k"), F.max("k")).collect()[0]
            out.append(Bound(t, row[0], True, row[1], True))
        return out

    def _work_frame(self, source: DataFrame, plan: MergePlan, files: Sequence[Add],
                    keys: Sequence[tuple[str, str]], txn: Transaction) -> DataFrame:
        """Each source row beside every candidate file whose statistics admit its keys,
        shuffled by file; with ``WHEN NOT MATCHED BY SOURCE`` clauses every file also gets a
        row without a source row, so that files no source row reaches are visited too."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType, StructField, StructType


        snap = txn.snapshot
        physical = partition_physical_names(snap.schema, snap.schema.names, snap.configuration)
        ranged = [(t, s) for t, s in keys if t not in snap.partition_columns]
        fields = [StructField(FILE_COLUMN, IntegerType(), False)]
        for i, (t, _) in enumerate(ranged):
            spark_type = arrow_to_spark_type(plan.schema.field(t).type, t)
            fields += [StructField(f"__dc_lo{i}", spark_type, True),
                       StructField(f"__dc_hi{i}", spark_type, True)]
        rows: list[tuple[Any, ...]] = []
        for n, add in enumerate(files):
            try:
                stats = loads(add.stats) if add.stats else None
            except ValueError:
                stats = None
            mins = stats.get("minValues") if isinstance(stats, dict) else None
            maxs = stats.get("maxValues") if isinstance(stats, dict) else None
            row: list[Any] = [n]
            for t, _ in ranged:
                kind = _kind(plan.schema.field(t).type) or ""
                key = physical.get(t, t)
                low = _stat(mins.get(key), kind) if isinstance(mins, dict) else None
                high = _stat(maxs.get(key), kind) if isinstance(maxs, dict) else None
                if kind == "string" and isinstance(high, str) and len(high) >= _TRUNCATED_FROM:
                    high = None
                row += [low, high]
            rows.append(tuple(row))
        listing = self.spark.createDataFrame(rows, StructType(fields))
        cond: SparkColumn = F.lit(True)
        for i, (_, s) in enumerate(ranged):
            key_col = source[_quote(s)]
            lo, hi = listing[f"__dc_lo{i}"], listing[f"__dc_hi{i}"]
            cond = cond & (lo.isNull() | (key_col >= lo)) & (hi.isNull() | (key_col <= hi))
        columns = [source[_quote(c)] for c in source.columns]
        frame = source.join(F.broadcast(listing), cond, "inner").select(
            listing[FILE_COLUMN], *columns)
        if plan.not_matched_by_source:
            markers = listing.select(listing[FILE_COLUMN], *[
                F.lit(None).cast(f.dataType).alias(f.name) for f in source.schema.fields])
            frame = frame.unionByName(markers)
        return frame.repartition(task_count(self.spark, len(files)), FILE_COLUMN)


def merge(source: DataFrame, table_or_uri: DeltaTable | str, predicate: str, *,
          source_alias: str | None = None, target_alias: str | None = None,
          storage_options: Mapping[str, str] | None = None) -> SparkMerger:
    """MERGE ``source`` into the table on ``predicate``: deltalake's ``TableMerger`` builder
    (add ``when_*`` clauses, then ``execute()``), run by Spark tasks (module docstring)."""
    table = open_table(table_or_uri, storage_options, "MERGE")
    return SparkMerger(table, source, predicate, source_alias, target_alias)


__all__ = ["SparkMerger", "merge"]
