"""``DeltaTable.update(updates, predicate)``: UPDATE, with deltalake's names and metrics.

The rows where the predicate is TRUE (every row without one; NULL updates nothing) take the
new values of the columns ``updates`` sets, SQL expressions over the row evaluated with Spark
4's semantics and cast to the column's type as Spark's store assignment casts; generated
columns the update does not set are computed again from the new row, and the new rows are
checked against every rule of the table (NOT NULL, CHECK constraints, invariants) before any
file is written.  The rewrite (copy-on-write, or deletion vectors where the table allows
them), row tracking, change data and the proof before the commit are ``rowlevel``'s.

Only the files whose partition values and statistics admit a row the predicate matches are
opened (``pruning``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from deltacommit.engine.commit.commit_info import json_text
from deltacommit.errors import InvalidArgumentError
from deltacommit.io.datafiles import WriteTarget, conform_rows
from deltacommit.io.dictionary_columns import plain_columns, plain_schema, plain_table
from deltacommit.ops.merge.plan import parse_assignments
from deltacommit.ops.pruning import predicate_bounds
from deltacommit.ops.rowlevel import (
    FileChange,
    Planned,
    ReadBatch,
    Rewritten,
    RowLevelJob,
    RowLevelTable,
    RowRewrite,
    candidate_files,
    rewrite_spark_metrics,
    run_row_level,
)
from deltacommit.protocol.expressions.ast import TRUE, And, Expr
from deltacommit.protocol.expressions.evaluator import EvaluationFailed, evaluate
from deltacommit.protocol.expressions.parser import parse_expression
from deltacommit.protocol.expressions.row_filters import RowFilter, row_filter
from deltacommit.protocol.features.identity import identity_columns

Positions = npt.NDArray[np.int64]


def update_rows(target: WriteTarget, rows: pa.Table, predicate: Expr | RowFilter | None,
                assignments: tuple[tuple[str, Expr], ...], what: str
                ) -> tuple[Positions, pa.Table]:
    """The rows of ``rows`` (live rows of one file, the table's schema; string columns may be
    dictionaries of them, as a rewrite read them) the UPDATE changes, ascending, and their
    new values, conformed.  ``predicate`` may be given checked already (``row_filter``, once
    for every file) so each file evaluates it once.  Only the dictionary columns the
    predicate reads are decoded for it, and the others for the changed rows alone.  Pure
    (pyarrow and the expression language), so Spark tasks can call it."""
    if predicate is None:
        hit = np.arange(rows.num_rows, dtype=np.int64)
    else:
        checked = predicate if isinstance(predicate, RowFilter) else \
            row_filter(predicate, plain_schema(rows.schema), what)
        mask = checked.matches(plain_columns(rows, checked.predicate.columns()))
        hit = np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=np.bool_))
    if not len(hit):
        return hit.astype(np.int64), target.schema.empty_table()
    old = plain_table(rows.take(hit))
    sets = dict(assignments)
    generated = {g.name for g in target.generated}
    arrays: list[Any] = []
    fields: list[pa.Field[Any]] = []
    for f in target.schema:
        if f.name in sets:
            try:
                values = evaluate(sets[f.name], old, to=f.type)
            except EvaluationFailed as e:
                raise e.error(f"{what}: column {f.name!r} = {sets[f.name].to_sql()!r}") from None
        elif f.name in generated:
            continue  # computed again from the new row
        else:
            values = old.column(f.name)
        arrays.append(values)
        fields.append(f.with_nullable(True))
    new = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return hit.astype(np.int64), conform_rows(replace(target, identity=()), new)


def update(table: RowLevelTable, updates: Mapping[str, str],
           predicate: str | None = None) -> dict[str, Any]:
    """UPDATE (module docstring); deltalake's metrics, and ``version`` (the table's version
    when nothing matched: nothing is then committed)."""
    schema = table.schema
    uri = table.uri
    what = f"UPDATE of table {uri}"
    sets = parse_assignments(updates, schema, what,
                             identity=[c.name for c in identity_columns(schema, uri)])
    pred = parse_expression(predicate, what) if predicate is not None else None
    checked = None
    if pred is not None:
        what = f"UPDATE of table {uri} where {pred.to_sql()}"
        checked = row_filter(pred, schema, what)
    for name, expr in sets:
        try:
            evaluate(expr, schema.empty_table(), to=schema.field(name).type)
        except EvaluationFailed as e:
            raise InvalidArgumentError(f"{what}: column {name!r} = {expr.to_sql()!r}: "
                                       f"{e.message}") from None

    def plan(rewrite: RowRewrite, txn: Any) -> Planned:
        started = time.monotonic()
        conjuncts = list(pred.children) if isinstance(pred, And) else \
            [pred] if pred is not None else []
        files, skipped = candidate_files(rewrite, txn, conjuncts,
                                         predicate_bounds(pred, schema) if pred else [])

        def batch(b: ReadBatch) -> list[FileChange]:
            hit, new = update_rows(rewrite.target, b.as_read, checked, sets, what)
            return [FileChange(f, np.zeros(0, np.int64), rows, new.slice(start, stop - start))
                    for f, rows, start, stop in b.split(hit)]

        changes = [c for part in rewrite.each_batch(files, batch) for c in part]
        return Planned(changes, None, len(files), skipped,
                       int((time.monotonic() - started) * 1000),
                       {"updated": sum(len(c.updated) for c in changes)},
                       reads=pred if pred is not None else TRUE)

    def spark_metrics(planned: Planned, written: Rewritten) -> dict[str, str]:
        return rewrite_spark_metrics(planned, written, "numUpdatedRows", "updated")

    done = run_row_level(RowLevelJob(
        table, "UPDATE", {"predicate": json_text([pred.to_sql()] if pred else [])}, what,
        plan, spark_metrics))
    return {"num_added_files": done.written.files_added,
            "num_removed_files": done.written.files_removed,
            "num_updated_rows": done.planned.counts.get("updated", 0),
            "num_copied_rows": done.written.rows_copied,
            "execution_time_ms": done.execution_ms,
            "scan_time_ms": done.planned.scan_ms,
            "version": done.version}


__all__ = ["update", "update_rows"]
