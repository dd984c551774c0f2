"""Which files a row-level operation opens: those its target-only conditions and a MERGE's
source keys leave possible, judged by partition values and file statistics before any file is
read, so that a MERGE of a few keys reads and rewrites a few files."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from deltacommit.engine.scan import decided_by_partition_values, prune_files
from deltacommit.ops.pruning import Bound
from deltacommit.protocol.actions import Add
from deltacommit.protocol.expressions.ast import (
    FALSE,
    TRUE,
    Column,
    Comparison,
    Expr,
    InList,
    and_,
    lit,
)

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.ops.rowlevel.rewrite import RowRewrite

#: A MERGE's source keys prune files as a list up to this many (``file_pruning`` judges the
#: list at once); beyond, by their range alone: a tree of 100,000 literals costs more to
#: build than the files it could skip, when keys spread over the table.
KEYS_PRUNED_BY = 10_000


def bound_condition(bound: Bound, every_key: bool = False) -> Expr:
    """``bound`` as a condition over its column: what ``file_pruning`` judges files by (the
    keys' range alone beyond ``KEYS_PRUNED_BY`` keys), and, ``every_key``, what a MERGE
    records it read: every source key, so that the row-level check finds a concurrent
    writer's new row between two keys no match."""
    column = Column((bound.column,))
    parts: list[Expr] = []
    if bound.values is not None:
        if not bound.values:
            return FALSE
        if every_key or len(bound.values) <= KEYS_PRUNED_BY:
            parts.append(InList(column, tuple(lit(v) for v in bound.values)))
    if bound.low is not None:
        parts.append(Comparison(column, ">=" if bound.low_inclusive else ">", lit(bound.low)))
    if bound.high is not None:
        parts.append(Comparison(column, "<=" if bound.high_inclusive else "<",
                                lit(bound.high)))
    return and_(*parts)


def read_partitions(txn: Transaction, target_only: Sequence[Expr]) -> list[Add]:
    """The files of the partitions that ``target_only`` (conjuncts over the table's columns)
    admits, recorded as read by ``txn``: the conjuncts over partition columns that partition
    values decide (``decided_by_partition_values``), the whole table without one.  A conjunct
    they cannot decide (``p % 2 = 0``) is left to the rows: recorded as a read predicate, the
    conflict checker could not ask it of a concurrent writer's files."""
    snap = txn.snapshot
    on_partitions = [c for c in target_only if c.columns()
                     and decided_by_partition_values(c, snap.schema, snap.partition_columns)]
    return txn.scan(predicate=and_(*on_partitions)) if on_partitions else txn.scan()


def candidate_files(rewrite: RowRewrite, txn: Transaction, target_only: Sequence[Expr],
                    bounds: Sequence[Bound], conditions: Sequence[Expr] | None = None
                    ) -> tuple[list[Add], int]:
    """The files a row-level operation opens, and how many it skipped: those of the partitions
    that ``target_only`` (conjuncts over the table's columns) admits, recorded as read by the
    transaction as Spark's conflict rules read them, less those whose partition values and
    statistics admit no row where every conjunct and every bound (a MERGE's source keys)
    holds (``engine.scan.prune_files``, ``file_pruning``: truncated strings, millisecond
    timestamps, NaN, bounds of files with deletion vectors).  ``conditions``: the bounds as
    ``bound_condition`` gives them, where the caller built them already (a MERGE of 100,000
    keys records them as its reads too)."""
    snap = txn.snapshot
    files = read_partitions(txn, target_only)
    if conditions is None:
        conditions = [bound_condition(b) for b in bounds]
    condition = and_(*target_only, *conditions)
    if condition is TRUE:
        return files, 0
    admits = {a.path for a in prune_files(snap, condition)}
    kept = [a for a in files if a.path in admits]
    return kept, len(files) - len(kept)
