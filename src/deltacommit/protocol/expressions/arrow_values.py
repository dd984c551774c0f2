"""Values of the Arrow evaluator, and how an operation fails on a row.  Pure.

A value is an Arrow array (one value per row) or an Arrow scalar (the same value for every
row: a literal, or an operation of literals).  An operation that fails as Spark fails it (ANSI
mode) raises ``RowFailure`` naming the first row it fails on; one whose exact semantics this
package does not follow for the types it meets raises ``spark_types.Unsupported``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

Value: TypeAlias = Any  # a pa.Array of the rows, or a pa.Scalar
pcx: Any = pc  # pyarrow.compute's stubs do not cover every function used here


class RowFailure(Exception):
    """A row's values make the expression fail as Spark fails it (ANSI mode), or hold a value
    this package cannot evaluate as Spark does (``refused``); ``row`` is the row's index,
    None when a constant fails (for every row)."""

    def __init__(self, message: str, row: int | None, *, refused: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.row = row
        self.refused = refused


def type_of(v: Value) -> pa.DataType:
    t: pa.DataType = v.type
    return t


def is_scalar(v: Value) -> bool:
    return isinstance(v, pa.Scalar)


def at(v: Value, row: int | None) -> Any:
    """The Python value of ``v`` at ``row`` (a scalar's own value)."""
    if is_scalar(v):
        return v.as_py()
    return v[row].as_py() if row is not None else None


def slice_rows(v: Value, start: int, stop: int) -> Value:
    return v if is_scalar(v) else v.slice(start, stop - start)


def row_count(values: Sequence[Value]) -> int | None:
    """The number of rows of the first array among ``values``; None if all are scalars."""
    return next((len(v) for v in values if not is_scalar(v)), None)


def first_true(mask: Value) -> int | None:
    """The first row where ``mask`` is TRUE (0 for a TRUE scalar), None if there is none."""
    if is_scalar(mask):
        return 0 if mask.is_valid and mask.as_py() else None
    i = int(pcx.index(pcx.fill_null(mask, False), True).as_py())
    return i if i >= 0 else None


def fail_where(mask: Value, describe: Callable[[int], str], *, refused: bool = False) -> None:
    """RowFailure at the first row where ``mask`` is TRUE."""
    i = first_true(mask)
    if i is not None:
        row = None if is_scalar(mask) else i
        raise RowFailure(describe(i), row, refused=refused)


def cast_plain(v: Value, t: pa.DataType, *, safe: bool = True) -> Value:
    """An Arrow cast that cannot change a value (widening, or one already checked)."""
    if type_of(v) == t:
        return v
    return v.cast(t, safe=safe)


def checked(kernel: Callable[..., Value], args: list[Value],
            describe: Callable[[int], str]) -> Value:
    """``kernel(*args)`` for one of Arrow's overflow-checking kernels; on overflow,
    RowFailure at the first row that overflows (found by halving the rows)."""
    try:
        return kernel(*args)
    except pa.ArrowInvalid:
        pass
    n = row_count(args)
    if n is None:
        raise RowFailure(describe(0), None)
    lo, hi = 0, n  # the first failing row is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            kernel(*[slice_rows(a, lo, mid) for a in args])
            lo = mid
        except pa.ArrowInvalid:
            hi = mid
    raise RowFailure(describe(lo), lo)


def python_map(v: Value, fn: Callable[[Any, int | None], Any], to: pa.DataType) -> Value:
    """``fn(value, row)`` for each non-NULL value, in Python: the rules Arrow has no kernel
    for (shortest decimal text of a DOUBLE, full Unicode case mapping).  A scalar's row is
    None: it is every row."""
    if is_scalar(v):
        return pa.scalar(None if not v.is_valid else fn(v.as_py(), None), to)
    return pa.array([None if x is None else fn(x, i) for i, x in enumerate(v.to_pylist())], to)


def null_where_not(active: Value | None, v: Value) -> Value:
    """``v`` where ``active``, NULL elsewhere: an operation on rows Spark would not evaluate
    must not fail on them."""
    if active is None:
        return v
    return pcx.if_else(active, v, pa.scalar(None, type_of(v)))


def non_null(v: Value, answer: bool) -> Value:
    """``answer`` where ``v`` is not NULL, NULL where it is."""
    null = pa.scalar(None, pa.bool_())
    if is_scalar(v):
        return pa.scalar(answer if v.is_valid else None, pa.bool_())
    return pcx.if_else(pcx.is_valid(v), pa.scalar(answer), null)


__all__ = ["RowFailure", "Value", "at", "cast_plain", "checked", "fail_where", "first_true",
           "is_scalar", "non_null", "null_where_not", "pcx", "python_map", "row_count",
           "slice_rows", "type_of"]
