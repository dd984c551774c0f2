"""``DeltaTable.merge(...)``: deltalake's ``TableMerger`` builder, and MERGE's execution.

The builder collects the clauses with deltalake's names; ``execute`` checks every expression
against the table's and the source's schemas before any file is read, then runs the MERGE
through the one write driver (``rowlevel.RowLevelJob``): the files that can hold a matching
row are read (pruned by the condition's conditions on target columns and by the source's keys
against file statistics, ``pruning``; every file when a ``WHEN NOT MATCHED BY SOURCE`` clause
may change rows no source row matches), each is merged with the whole source by the pure
``plan.merge_file``, the inserts follow from the source rows no file matched, and the
rewrite is written, proven and committed.  The metrics are deltalake's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from deltacommit.engine.commit.commit_info import json_text
from deltacommit.engine.scan import without_views
from deltacommit.errors import InvalidArgumentError
from deltacommit.io.datafiles import conform_rows
from deltacommit.io.dictionary_columns import plain_table
from deltacommit.ops.merge.plan import (
    Clause,
    FileMerge,
    MergePlan,
    SourceIndex,
    conjuncts,
    index_source,
    insert_rows,
    merge_file,
    parse_assignments,
    side_of,
    without_alias,
)
from deltacommit.ops.pruning import Bound, key_bound, predicate_bounds
from deltacommit.ops.rowlevel import (
    KEYS_PRUNED_BY,
    Done,
    FileChange,
    Planned,
    ReadBatch,
    Rewritten,
    RowLevelJob,
    RowLevelTable,
    RowRewrite,
    bound_condition,
    candidate_files,
    run_row_level,
)
from deltacommit.ops.write import to_arrow_table
from deltacommit.protocol.expressions.ast import Column, Comparison, Expr, and_
from deltacommit.protocol.expressions.parser import parse_expression
from deltacommit.protocol.features.identity import (
    Allocation,
    allocate,
    identity_columns,
    with_high_water_marks,
)

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.protocol.actions import Add

#: Aliases of the two sides when the caller names none.
SOURCE = "source"
TARGET = "target"


class TableMerger:
    """deltalake's ``TableMerger``: add clauses (each returns the builder), then ``execute``."""

    def __init__(self, table: RowLevelTable, source: Any, predicate: str,
                 source_alias: str | None = None, target_alias: str | None = None) -> None:
        self.table = table
        self.what = f"MERGE into table {table.uri}"
        for alias, side in ((source_alias, "source_alias"), (target_alias, "target_alias")):
            if alias is not None and (not isinstance(alias, str) or not alias.isidentifier()):
                raise InvalidArgumentError(f"{self.what}: {side} must be a name, got {alias!r}")
        if source_alias is not None and source_alias == target_alias:
            raise InvalidArgumentError(f"{self.what}: the source and the target need different "
                                       f"aliases, both are {source_alias!r}")
        # Views (deltalake 1.6.6's query engine and Polars hand them out) and dictionaries
        # (pandas categoricals) as the plain types the evaluator compares and casts, as a
        # write of the same rows takes them.
        self.source = plain_table(without_views(to_arrow_table(source)))
        self.source_alias = source_alias or SOURCE
        self.target_alias = target_alias or TARGET
        self.on = parse_expression(predicate, f"{self.what}: the merge condition")
        self.matched: list[Clause] = []
        self.not_matched: list[Clause] = []
        self.not_matched_by_source: list[Clause] = []

    # ------------------------------------------------------------------ clauses

    def _condition(self, predicate: str | None) -> Expr | None:
        return None if predicate is None else parse_expression(
            predicate, f"{self.what}: a clause's condition")

    def _sets(self, updates: Mapping[str, str], kind: str) -> tuple[tuple[str, Expr], ...]:
        schema = self.table.schema
        identity = [c.name for c in identity_columns(schema, self.table.uri)] \
            if kind != "insert" else []
        return parse_assignments(updates, schema, f"{self.what}: {kind}", self.target_alias,
                                 identity)

    def _all(self, except_cols: Sequence[str] | None, kind: str) -> dict[str, str]:
        """Every source column the target has, set from the source (deltalake's ``*_all``);
        a source column the target lacks is refused (no schema evolution)."""
        schema_names = self.table.schema.names
        skip = set(except_cols or [])
        lower = {n.lower(): n for n in schema_names}
        out: dict[str, str] = {}
        for name in self.source.column_names:
            if name in skip:
                continue
            target = name if name in schema_names else lower.get(name.lower())
            if target is None:
                raise InvalidArgumentError(
                    f"{self.what}: {kind} of every column: source column {name!r} is not a "
                    f"column of the table (columns are {schema_names}); leave it out with "
                    "except_cols, or select the source's columns")
            if kind == "update" and target in {
                    c.name for c in identity_columns(self.table.schema, self.table.uri)}:
                continue  # identity values are never updated
            quoted = "`" + name.replace("`", "``") + "`"
            out["`" + target.replace("`", "``") + "`"] = f"{self.source_alias}.{quoted}"
        if not out:
            raise InvalidArgumentError(f"{self.what}: {kind} of every column: the source has "
                                       "no column of the table")
        return out

    def when_matched_update(self, updates: Mapping[str, str],
                            predicate: str | None = None) -> TableMerger:
        """Update a matched target row: ``updates`` maps target columns to SQL expressions
        over both sides."""
        self.matched.append(Clause("update", self._condition(predicate),
                                   self._sets(updates, "update")))
        return self

    def when_matched_update_all(self, predicate: str | None = None,
                                except_cols: Sequence[str] | None = None) -> TableMerger:
        """Update a matched target row with every source column of the same name."""
        return self.when_matched_update(self._all(except_cols, "update"), predicate)

    def when_matched_delete(self, predicate: str | None = None) -> TableMerger:
        """Delete a matched target row."""
        self.matched.append(Clause("delete", self._condition(predicate)))
        return self

    def when_not_matched_insert(self, updates: Mapping[str, str],
                                predicate: str | None = None) -> TableMerger:
        """Insert a source row no target row matches: ``updates`` maps target columns to SQL
        expressions over the source (the others are NULL, or generated)."""
        self.not_matched.append(Clause("insert", self._condition(predicate),
                                       self._sets(updates, "insert")))
        return self

    def when_not_matched_insert_all(self, predicate: str | None = None,
                                    except_cols: Sequence[str] | None = None) -> TableMerger:
        """Insert a source row no target row matches, every column from the source."""
        return self.when_not_matched_insert(self._all(except_cols, "insert"), predicate)

    def when_not_matched_by_source_update(self, updates: Mapping[str, str],
                                          predicate: str | None = None) -> TableMerger:
        """Update a target row no source row matches (expressions over the target)."""
        self.not_matched_by_source.append(Clause("update", self._condition(predicate),
                                                 self._sets(updates, "update")))
        return self

    def when_not_matched_by_source_delete(self, predicate: str | None = None) -> TableMerger:
        """Delete a target row no source row matches."""
        self.not_matched_by_source.append(Clause("delete", self._condition(predicate)))
        return self

    # ------------------------------------------------------------------ execution

    def plan_for(self, rewrite: RowRewrite) -> MergePlan:
        """The MERGE against the write target of one snapshot."""
        updates = [c for c in (*self.matched, *self.not_matched_by_source)
                   if c.action == "update"]
        assigned = {name for c in updates for name, _ in c.assignments}
        recomputed = frozenset(g.name for g in rewrite.target.generated if g.name not in assigned)
        return MergePlan(self.table.uri, rewrite.target, self.on, self.source_alias,
                         self.target_alias, tuple(self.matched), tuple(self.not_matched),
                         tuple(self.not_matched_by_source), recomputed)

    def execute(self) -> dict[str, Any]:
        """Run the MERGE; deltalake's metrics, and ``version`` (the table's version when it
        changed nothing: nothing is then committed)."""
        table = self.table
        if not (self.matched or self.not_matched or self.not_matched_by_source):
            raise InvalidArgumentError(f"{self.what}: add at least one clause (when_matched_*, "
                                       "when_not_matched_*) before execute()")
        refresh = getattr(table, "update", None)
        if callable(refresh):
            refresh()
        source = self.source
        ns = source.num_rows
        params = {
            "predicate": json_text([self.on.to_sql()]),
            "matchedPredicates": json_text([c.describe() for c in self.matched]),
            "notMatchedPredicates": json_text([c.describe() for c in self.not_matched]),
            "notMatchedBySourcePredicates": json_text(
                [c.describe() for c in self.not_matched_by_source]),
        }

        def plan(rewrite: RowRewrite, txn: Transaction) -> Planned:
            started = time.monotonic()
            merge = self.plan_for(rewrite)
            merge.check(source.schema)
            target_only, bounds = self._pruning(merge, source)
            keys = [bound_condition(b) for b in bounds]
            files, skipped = candidate_files(rewrite, txn, target_only, bounds, keys)
            index = index_source(merge, source)
            scanned = len(files)
            files = self._holding_keys(merge, index, rewrite, files)

            def batch(b: ReadBatch) -> tuple[list[FileChange], FileMerge]:
                m = merge_file(merge, b.rows, source, index)
                deleted = b.split(m.deleted)
                updated = b.split(m.updated)
                read = b.split(m.read)
                return [FileChange(f, gone, rows, m.new_rows.slice(start, stop - start), kept)
                        for (f, gone, _, _), (_, rows, start, stop), (_, kept, _, _)
                        in zip(deleted, updated, read, strict=True)], m

            results = rewrite.each_batch(files, batch)
            matched = np.zeros(ns, np.bool_)
            for _, m in results:
                matched[m.matched_source] = True
            inserted = self._inserts(merge, source, matched, txn)
            counts = dict.fromkeys(MERGE_COUNTS, 0)
            counts["inserted"] = inserted.num_rows if inserted is not None else 0
            for _, m in results:
                counts["matched_updated"] += m.matched_updated
                counts["matched_deleted"] += m.matched_deleted
                counts["nmbs_updated"] += m.not_matched_by_source_updated
                counts["nmbs_deleted"] += m.not_matched_by_source_deleted
            # The target rows the MERGE may act on: every row matching a source row, every
            # key it inserts (a row added there concurrently would have matched), all rows
            # with a WHEN NOT MATCHED BY SOURCE clause (TRUE).  The rows it matched and left
            # as they were, where it inserts, are recorded as rows read (``FileChange.read``).
            reads: Expr | Callable[[], Expr] = and_(*target_only, *keys)
            if any(b.values is not None and len(b.values) > KEYS_PRUNED_BY for b in bounds):
                reads = functools.partial(_every_key_read, tuple(target_only), tuple(bounds))
            return Planned([c for cs, _ in results for c in cs], inserted, scanned, skipped,
                           int((time.monotonic() - started) * 1000), counts, reads=reads)

        done = run_row_level(RowLevelJob(table, "MERGE", params, self.what, plan,
                                         functools.partial(spark_merge_metrics, ns)))
        return merge_result(ns, done)

    def _holding_keys(self, plan: MergePlan, index: SourceIndex, rewrite: RowRewrite,
                      files: list[Add]) -> list[Add]:
        """The files some row of which has a source key, found by reading their key columns
        alone, when fewer than half the files can hold one (fewer distinct source keys than
        that): the others are then not read whole.  Every file when a WHEN NOT MATCHED BY
        SOURCE clause may change rows no source row matches, or when most files may hold a
        key (reading the keys first would then cost a second read of most files)."""
        if plan.not_matched_by_source or not index.equalities \
                or index.distinct_keys * 2 >= len(files):
            return files
        names = plan.schema.names
        columns: list[str] = []
        for path in index.key_columns:
            name = path[0] if path[0] in names else next(
                (n for n in names if n.lower() == path[0].lower()), None)
            if name is None:
                return files
            if name not in columns:
                columns.append(name)
        holding = rewrite.columns_of(files, columns, index.may_match)
        return [a for a, hit in zip(files, holding, strict=True) if hit]

    def _pruning(self, plan: MergePlan, source: pa.Table) -> tuple[list[Expr], list[Bound]]:
        """The merge condition's conjuncts over target columns alone (aliases dropped), and
        the bounds they and the source's keys put on target columns: the target rows outside
        them match no source row.  None of either when a WHEN NOT MATCHED BY SOURCE clause
        may change such rows."""
        if plan.not_matched_by_source:
            return [], []
        schema = plan.schema
        empty_t, empty_s = schema.empty_table(), source.schema.empty_table()
        target_only: list[Expr] = []
        bounds: list[Bound] = []
        for c in conjuncts(plan.on):
            sides = {side_of(col, plan, empty_t, empty_s) for col in c.walk()
                     if isinstance(col, Column)}
            if sides and all(s is not None and s[0] == "target" for s in sides):
                target_only.append(without_alias(c, plan.target_alias))
            elif isinstance(c, Comparison) and c.op == "=" and isinstance(c.left, Column) \
                    and isinstance(c.right, Column):
                a = side_of(c.left, plan, empty_t, empty_s)
                b = side_of(c.right, plan, empty_t, empty_s)
                if a is None or b is None or a[0] == b[0]:
                    continue
                t, s = (a[1], b[1]) if a[0] == "target" else (b[1], a[1])
                if len(t) != 1 or len(s) != 1 or t[0] not in schema.names:
                    continue
                keys = source.column(s[0] if s[0] in source.column_names else
                                     next(n for n in source.column_names
                                          if n.lower() == s[0].lower()))
                try:
                    keys = keys.cast(schema.field(t[0]).type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    continue
                bound = key_bound(t[0], keys)
                if bound is not None:
                    bounds.append(bound)
        bounds.extend(predicate_bounds(_and(target_only), schema) if target_only else [])
        return target_only, bounds

    def _inserts(self, plan: MergePlan, source: pa.Table, matched: np.ndarray[Any, Any],
                 txn: Transaction) -> pa.Table | None:
        """The inserted rows, conformed; identity values they lack are allocated above the
        marks the transaction read, and the new marks staged with the commit."""
        parts = insert_rows(plan, source, matched)
        if not parts:
            return None
        target = plan.target
        total = sum(p.num_rows for p in parts)
        names = set(parts[0].column_names)
        lacking = [c for c in target.identity if c.name not in names]
        allocations = allocate(lacking, list(names), total, self.table.uri) if lacking else {}
        offset = 0
        out: list[pa.Table] = []
        for p in parts:
            ids = {name: Allocation(a.column, a.first + a.step * offset, a.step, p.num_rows)
                   for name, a in allocations.items() if name not in p.column_names}
            out.append(conform_rows(target, p, ids))
            offset += p.num_rows
        if allocations:
            txn.update_metadata(with_high_water_marks(txn.snapshot.metadata,
                                                      allocations.values()))
        return pa.concat_tables(out) if len(out) > 1 else out[0]


def _every_key_read(target_only: Sequence[Expr], bounds: Sequence[Bound]) -> Expr:
    """What a MERGE of many keys read: its target-only conjuncts and every source key.  Its
    transaction records this function and its arguments, which build the IN list only where
    a concurrent commit is checked against it, and which pickle (a transaction travels to
    the host's committer in another process, ``engine.group.host``)."""
    return and_(*target_only, *(bound_condition(b, every_key=True) for b in bounds))


def _and(parts: Sequence[Expr]) -> Expr:
    return and_(*parts)


#: The counts a MERGE's plan reports (``Planned.counts``).
MERGE_COUNTS = ("inserted", "matched_updated", "matched_deleted", "nmbs_updated", "nmbs_deleted")

__all__ = ["MERGE_COUNTS", "SOURCE", "TARGET", "TableMerger", "merge_result",
           "spark_merge_metrics"]


def merge_result(ns: int, done: Done) -> dict[str, Any]:
    """What a MERGE returns to its caller, under deltalake's metric names (``ns``: source
    rows), for the Python MERGE and Spark's alike."""
    c = {k: done.planned.counts.get(k, 0) for k in MERGE_COUNTS}
    updated = c["matched_updated"] + c["nmbs_updated"]
    return {
        "num_source_rows": ns,
        "num_target_rows_inserted": c["inserted"],
        "num_target_rows_updated": updated,
        "num_target_rows_deleted": c["matched_deleted"] + c["nmbs_deleted"],
        "num_target_rows_copied": done.written.rows_copied,
        "num_output_rows": c["inserted"] + updated + done.written.rows_copied,
        "num_target_files_scanned": done.planned.files_scanned,
        "num_target_files_skipped_during_scan": done.planned.files_skipped,
        "num_target_files_added": done.written.files_added,
        "num_target_files_removed": done.written.files_removed,
        "execution_time_ms": done.execution_ms,
        "scan_time_ms": done.planned.scan_ms,
        "rewrite_time_ms": done.written.rewrite_ms,
        "version": done.version,
    }


def spark_merge_metrics(ns: int, planned: Planned, written: Rewritten) -> dict[str, str]:
    """Spark's MERGE metrics for ``commitInfo.operationMetrics`` (``ns``: source rows), for
    the Python MERGE and Spark's alike."""
    c = {k: planned.counts.get(k, 0) for k in MERGE_COUNTS}
    updated = c["matched_updated"] + c["nmbs_updated"]
    deleted = c["matched_deleted"] + c["nmbs_deleted"]
    return {k: str(v) for k, v in {
        "numSourceRows": ns,
        "numTargetRowsInserted": c["inserted"],
        "numTargetRowsUpdated": updated,
        "numTargetRowsMatchedUpdated": c["matched_updated"],
        "numTargetRowsNotMatchedBySourceUpdated": c["nmbs_updated"],
        "numTargetRowsDeleted": deleted,
        "numTargetRowsMatchedDeleted": c["matched_deleted"],
        "numTargetRowsNotMatchedBySourceDeleted": c["nmbs_deleted"],
        "numTargetRowsCopied": written.rows_copied,
        "numOutputRows": c["inserted"] + updated + written.rows_copied,
        "numTargetFilesAdded": written.files_added,
        "numTargetFilesRemoved": written.files_removed,
        "numTargetChangeFilesAdded": written.change_files,
        "numTargetDeletionVectorsAdded": written.dvs_added,
        "numTargetDeletionVectorsRemoved": written.dvs_removed,
        "numTargetBytesAdded": written.bytes_added,
        "numTargetBytesRemoved": written.bytes_removed,
        "scanTimeMs": planned.scan_ms,
        "rewriteTimeMs": written.rewrite_ms,
    }.items()}
