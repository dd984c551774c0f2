"""Which files a row-level operation must open, by the min/max statistics of their adds.

An UPDATE or DELETE whose predicate bounds a column (``id = 5``, ``id IN (1, 2)``,
``id >= 10 AND id < 20``), and a MERGE whose condition joins a target column to the source's
keys (``t.id = s.id``: the target rows that can match are those holding one of the source's
keys), need not open a file whose bounds for that column admit none of those values.  This is
the one place that decides it for them (``admitted``), so the general statistics pruning
(partition values, every expression, checkpoint ``stats_parsed``) can replace it whole.

A file is skipped only when its statistics prove it holds no such row; anything unknown keeps
it: no statistics or no bound for the column, a type not handled here (only integers,
floating point numbers, strings and dates are), a string maximum that may have been truncated
(32 characters or more), a key that is NaN (NaN is left out of bounds).  Bounds cover a
file's physical rows, deleted ones too, so they stay bounds of its live rows.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltacommit.protocol.actions import Add
from deltacommit.protocol.expressions.ast import And, Column, Comparison, Expr, InList, Literal
from deltacommit.protocol.expressions.evaluator import literal_value
from deltacommit.protocol.json_values import loads

#: String bounds at least this long may be truncated prefixes (Spark's default prefix length).
_TRUNCATED_FROM = 32
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
    comparisons of a column with a literal and ``IN`` lists of literals.  ``column_of`` maps
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


def _stat(raw: Any, kind: str) -> Any:
    """A bound from the statistics as a value of ``kind``, None if unusable."""
    if raw is None:
        return None
    if kind == "int":
        return raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    if kind == "float":
        return raw if isinstance(raw, int | float) and not isinstance(raw, bool) \
            and math.isfinite(raw) else None
    if kind == "string":
        return raw if isinstance(raw, str) else None
    if kind == "date" and isinstance(raw, str):
        try:
            return dt.date.fromisoformat(raw)
        except ValueError:
            return None
    return None


def _admits(bound: Bound, low: Any, high: Any) -> bool:
    """Whether a file whose values lie in [low, high] (None: unknown) may hold a row of
    ``bound``."""
    try:
        if bound.values is not None and not bound.values:
            return False
        if low is not None and bound.high is not None and (
                bound.high < low or (bound.high == low and not bound.high_inclusive)):
            return False
        if high is not None and bound.low is not None and (
                bound.low > high or (bound.low == high and not bound.low_inclusive)):
            return False
        if bound.values is not None and low is not None and high is not None:
            i = bisect.bisect_left(bound.values, low)
            return i < len(bound.values) and bound.values[i] <= high
    except TypeError:  # values of another type than the statistics: no decision
        return True
    return True


def admitted(files: Sequence[Add], bounds: Sequence[Bound], schema: pa.Schema,
             physical: Mapping[str, str] | None = None) -> list[Add]:
    """The files whose statistics admit a row within every bound of ``bounds``.
    ``physical``: column -> the name statistics use (column mapping)."""
    usable = [(b, _kind(schema.field(b.column).type)) for b in bounds]
    checks = [(b, k, (physical or {}).get(b.column, b.column)) for b, k in usable
              if k is not None]
    if not checks:
        return list(files)
    out: list[Add] = []
    for a in files:
        if a.stats is None:
            out.append(a)
            continue
        try:
            stats = loads(a.stats)
        except ValueError:
            out.append(a)
            continue
        mins = stats.get("minValues") if isinstance(stats, dict) else None
        maxs = stats.get("maxValues") if isinstance(stats, dict) else None
        keep = True
        for b, kind, key in checks:
            low = _stat(mins.get(key) if isinstance(mins, dict) else None, kind)
            high = _stat(maxs.get(key) if isinstance(maxs, dict) else None, kind)
            if kind == "string" and isinstance(high, str) and len(high) >= _TRUNCATED_FROM:
                high = None
            if low is None and high is None and not _all_null(stats, key):
                continue
            if low is None and high is None:
                keep = False  # every value NULL: no bound matches
                break
            if not _admits(b, low, high):
                keep = False
                break
        if keep:
            out.append(a)
    return out


def _all_null(stats: Any, key: str) -> bool:
    nulls = stats.get("nullCount") if isinstance(stats, dict) else None
    n = stats.get("numRecords") if isinstance(stats, dict) else None
    count = nulls.get(key) if isinstance(nulls, dict) else None
    return isinstance(n, int) and isinstance(count, int) and n > 0 and count == n


__all__ = ["Bound", "admitted", "key_bound", "predicate_bounds"]
