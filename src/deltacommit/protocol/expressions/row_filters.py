"""Predicates over rows: which rows a row-level DELETE removes.  Pure: no I/O.

A DELETE removes the rows where its predicate is TRUE (NULL removes nothing).  The predicate is
evaluated by the one evaluator (``evaluator``), so a comparison, an IN list or a NULL means
the same here as in a CHECK constraint, and compares as Spark does: NaN equals NaN and is above
every other value, -0.0 equals 0.0, an integer or decimal column compares exactly with a
literal it cannot hold (``i < 2.5``, ``i < 99999999999999999999``).

``row_filter`` checks the predicate against the table's schema once, before any file is read,
so that a column the table lacks or a literal its column cannot be compared with is refused
(InvalidArgumentError naming the DELETE) before anything is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.arrow_values import pcx
from deltacommit.protocol.expressions.ast import Expr
from deltacommit.protocol.expressions.evaluator import EvaluationFailed, predicate_mask


@dataclass(frozen=True)
class RowFilter:
    """A predicate checked against a schema, and what ``where`` its errors name."""

    predicate: Expr
    where: str
    #: Whether it decides what a write changes (its errors say nothing was written), rather
    #: than what a read returns.
    writes: bool = True

    def matches(self, data: pa.Table) -> pa.ChunkedArray[Any]:
        """Where the predicate is TRUE for the rows of ``data``; the error Spark's ANSI mode
        raises where it fails on a row (ExpressionValueError)."""
        try:
            return predicate_mask(self.predicate, data)
        except EvaluationFailed as e:
            raise e.error(self.where, writes=self.writes) from None

    def not_matching(self, data: pa.Table) -> pa.ChunkedArray[Any]:
        """Where the predicate is FALSE or NULL: the rows a DELETE keeps."""
        kept: pa.ChunkedArray[Any] = pcx.invert(self.matches(data))
        return kept


def row_filter(predicate: Expr, schema: pa.Schema, where: str = "predicate", *,
               writes: bool = True) -> RowFilter:
    """``predicate`` over rows of ``schema``; InvalidArgumentError (naming ``where``) for a
    column the schema lacks, a literal its column cannot be compared with, or a predicate
    that is not a condition deltacommit evaluates.  ``writes``: as ``RowFilter.writes``."""
    try:
        predicate_mask(predicate, schema.empty_table())
    except EvaluationFailed as e:
        raise InvalidArgumentError(f"{where}: {e.message}") from None
    return RowFilter(predicate, where, writes)


__all__ = ["RowFilter", "row_filter"]
