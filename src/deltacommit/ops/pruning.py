"""The bounds a row-level operation's predicate or a MERGE's source keys put on target columns.

An UPDATE or DELETE whose predicate bounds a column (``id = 5``, ``id IN (1, 2)``,
``id >= 10 AND id < 20``), and a MERGE whose condition joins a target column to the source's
keys (``t.id = s.id``: the target rows that can match are those holding one of the source's
keys), need not open a file whose statistics admit none of those values.  This module finds
the bounds (``predicate_bounds``, ``key_bound``); the files are judged by the one statistics
pruning every read uses (``ops.rowlevel.candidates``, ``protocol.file_pruning``: partition
values, checkpoint ``stats_parsed``, truncated strings, NaN).  A value this module cannot
bound (only integers, floating point numbers, strings and dates are; NaN is not) leaves the
column unbounded: a bound is never tighter than the predicate.  A literal is taken as the value
the evaluator compares the column with (a number or timestamp beside a string column as its
text, ``literal_text``; a timestamp beside a date only at midnight), and any other conjunct
(arithmetic, functions, two columns, ``OR``, ``NOT``) bounds nothing, leaving its files to
``file_pruning``, which errs towards reading them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltacommit.protocol.expressions.ast import And, Column, Comparison, Expr, InList, Literal
from deltacommit.protocol.expressions.evaluator import literal_value
from deltacommit.protocol.expressions.partition_values import literal_text

_FLIPPED = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True, slots=True)
class Bound:
    """Rows can match only where ``column`` lies in [``low``, ``high``] (None: unbounded) and,
    when ``values`` is given, equals one of them (sorted)."""

    column: str
    low: Any = None
    low_inclusive: bool = True
    high: Any = None
    high_inclusive: bool = True
    values: tuple[Any, ...] | None = None


def _kind(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_date32(t):
        return "date"
    return None


def _usable(value: Any, kind: str) -> bool:
    if value is None:
        return False
    if kind == "float":
        return isinstance(value, int | float) and not math.isnan(value)
    return True


def key_bound(column: str, values: pa.Array[Any] | pa.ChunkedArray[Any]) -> Bound | None:
    """The bound a MERGE's source keys put on the target column they are joined to (None
    where they cannot bound it: a type not handled, a NaN key)."""
    kind = _kind(values.type)
    if kind is None:
        return None
    present = [v for v in values.to_pylist() if v is not None]
    if any(not _usable(v, kind) for v in present):
        return None
    keys = tuple(sorted(set(present)))
    if not keys:
        return Bound(column, values=())
    return Bound(column, keys[0], True, keys[-1], True, keys)


def _conjuncts(e: Expr) -> Iterator[Expr]:
    if isinstance(e, And):
        for c in e.children:
            yield from _conjuncts(c)
    else:
        yield e


def predicate_bounds(predicate: Expr, schema: pa.Schema,
                     column_of: Any = None) -> list[Bound]:
    """The bounds the conjuncts of ``predicate`` put on top-level columns of ``schema``:
    comparisons of a column with a literal and ``IN`` lists of literals.  ``LIKE`` gives none
    here: the conjunct itself is judged against the statistics (``file_pruning``, which knows
    truncated string maxima), as every target-only conjunct is.  ``column_of`` maps
    a column of the predicate to the schema's name (None: not one of the table's, as a MERGE's
    source columns); by default its name."""
    out: list[Bound] = []

    def name(node: Expr) -> str | None:
        if not isinstance(node, Column):
            return None
        found = column_of(node) if column_of is not None else (
            node.path[0] if len(node.path) == 1 else None)
        if found is None or found not in schema.names:
            return None
        return str(found)

    def value(node: Expr, column: str) -> Any:
        if not isinstance(node, Literal) or node.kind == "null":
            return None
        t = schema.field(column).type
        kind = _kind(t)
        if kind is None:
            return None
        if kind == "string" and node.kind != "string":
            # A string column meets a number, date or timestamp literal as the literal's text
            # (``operators``), which Arrow's cast does not always write alike
            # (``TIMESTAMP '2024-01-01 00:00:00'``).
            return literal_text(node)
        if kind == "date" and node.kind == "timestamp" and node.value.time() != dt.time():
            return None  # a date meets a timestamp at midnight; Arrow's cast drops the time
        try:
            v = literal_value(node).cast(t).as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
            return None
        if kind == "float" and v != literal_value(node).as_py():
            return None  # a literal the column's type rounds: leave it to the rows
        return v if _usable(v, kind) else None

    for c in _conjuncts(predicate):
        if isinstance(c, Comparison) and c.op in _FLIPPED:
            col, op, lit = c.left, c.op, c.right
            if not isinstance(col, Column):
                col, op, lit = c.right, _FLIPPED[c.op], c.left
            column = name(col)
            if column is None:
                continue
            v = value(lit, column)
            if v is None:
                continue
            if op == "=":
                out.append(Bound(column, v, True, v, True, (v,)))
            elif op in ("<", "<="):
                out.append(Bound(column, high=v, high_inclusive=op == "<="))
            else:
                out.append(Bound(column, low=v, low_inclusive=op == ">="))
        elif isinstance(c, InList) and not c.negated:
            column = name(c.value)
            if column is None:
                continue
            items = [value(i, column) for i in c.items]
            present = [v for v, i in zip(items, c.items, strict=True)
                       if not (isinstance(i, Literal) and i.kind == "null")]
            if any(v is None for v in present):
                continue
            keys = tuple(sorted(set(present)))
            out.append(Bound(column, keys[0] if keys else None, True,
                             keys[-1] if keys else None, True, keys))
    return out


__all__ = ["Bound", "key_bound", "predicate_bounds"]
