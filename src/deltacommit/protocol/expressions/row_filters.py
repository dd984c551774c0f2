"""Predicates over rows as Arrow expressions, with SQL's three-valued logic.  Pure: no I/O.

Two callers decide row by row with the same parsed predicates: a row-level DELETE (the rows
where the predicate is TRUE are deleted; NULL deletes nothing) and constraint checks (a row
passes only where the expression is TRUE).  Both get their answer from one translation, so a
comparison, an IN list or a NULL means the same to both.

Comparisons are Spark's (``sql_semantics``): NaN equals NaN and is above every other value,
-0.0 equals 0.0; a FLOAT column compares as a DOUBLE; an integer or decimal column compares
exactly with a literal it cannot hold (``i < 2.5``, ``i < 99999999999999999999``), as Spark
does by widening both to a DECIMAL, instead of converting the literal (which would overflow
on every later write of a table whose CHECK constraint holds it).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.predicates import (
    And,
    Comparison,
    Constant,
    InList,
    IsNull,
    Literal,
    Not,
    Or,
    Predicate,
)
from deltacommit.protocol.expressions.sql_semantics import (
    MAX_DECIMAL_PRECISION,
    compare,
    exact_comparison,
    exact_range,
    is_floating,
)

_NULL_BOOL = pa.scalar(None, pa.bool_())
_pc: Any = pc  # pyarrow.compute's stubs do not cover functions applied to expressions


def to_expression(p: Predicate, schema: pa.Schema, where: str = "predicate") -> pc.Expression:
    """An Arrow expression of ``p`` over rows of ``schema``; InvalidArgumentError (naming
    ``where``) for a column the schema lacks, a literal its column cannot hold, or a
    predicate form with no row-level meaning.

    A column is a top-level name, or a dotted path into struct columns (``a.b``) when no
    top-level column has the dotted name itself.
    """
    expression: pc.Expression = _expression(p, schema, where)
    return expression


def not_true(expression: pc.Expression) -> pc.Expression:
    """Rows where ``expression`` is FALSE or NULL (the rows a constraint rejects)."""
    out: pc.Expression = _pc.invert(_pc.coalesce(expression, _pc.scalar(False)))
    return out


def _column(schema: pa.Schema, column: str, where: str) -> tuple[Any, pa.DataType]:
    """The field reference and type of ``column``."""
    if column in schema.names:
        found: pa.DataType = schema.field(column).type
        return _pc.field(column), found
    parts = column.split(".")
    if len(parts) > 1 and parts[0] in schema.names:
        t: pa.DataType = schema.field(parts[0]).type
        for part in parts[1:]:
            if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
                break
            t = t.field(part).type
        else:
            return _pc.field(*parts), t
    raise InvalidArgumentError(f"{where}: no column {column!r}; columns are {schema.names}")


def _literal(literal: Literal, t: pa.DataType, where: str) -> pa.Scalar[Any] | None:
    """``literal`` as a scalar of the column type ``t``; None for NULL."""
    if literal.kind == "null":
        return None
    value: Any = literal.value
    try:
        if pa.types.is_floating(t) and isinstance(value, Decimal | int | str):
            value = float(value)
        elif pa.types.is_timestamp(t) and isinstance(value, dt.datetime):
            tz = getattr(t, "tz", None)
            if tz is not None and value.tzinfo is None:
                value = value.replace(tzinfo=dt.UTC)
            elif tz is None and value.tzinfo is not None:
                value = value.astimezone(dt.UTC).replace(tzinfo=None)
        out: pa.Scalar[Any] = pa.scalar(value).cast(t)
        return out
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError,
            TypeError, ArithmeticError) as e:
        raise InvalidArgumentError(f"{where}: cannot compare a {t} column with "
                                   f"{literal.to_sql()}: {e}") from None


def _as_compared(ref: Any, t: pa.DataType, literal: Literal) -> tuple[Any, pa.DataType]:
    """The column as Spark compares it with ``literal``: a FLOAT beside a number as a DOUBLE
    (ANSI mode widens FLOAT beside any number other than a FLOAT, and SQL has no FLOAT
    literal); beside a string, which takes the column's type, as itself."""
    if t == pa.float32() and literal.kind in ("int", "decimal"):
        return ref.cast(pa.float64()), pa.float64()
    return ref, t


def _exact_number(literal: Literal) -> Decimal | None:
    """An integer or decimal literal's exact value (None for other kinds)."""
    if literal.kind in ("int", "decimal") and not isinstance(literal.value, bool):
        return Decimal(literal.value)
    return None


def _non_null(ref: Any, value: bool) -> Any:
    """``value`` where the column is not NULL, NULL where it is."""
    return _pc.if_else(_pc.is_valid(ref), _pc.scalar(value), _pc.scalar(_NULL_BOOL))


def _comparison(ref: Any, t: pa.DataType, op: str, literal: Literal, where: str) -> Any:
    """``column op literal`` with Spark's semantics: exact for integer and decimal columns
    (``sql_semantics.exact_comparison``), Spark's NaN order for floating ones."""
    bounds = exact_range(t)
    number = _exact_number(literal)
    if bounds is not None and number is not None:
        scale, low, high = bounds
        plan = exact_comparison(op, number, scale, low, high)
        if plan.constant is not None:
            return _non_null(ref, plan.constant)
        assert plan.op is not None and plan.value is not None
        value = pa.scalar(plan.value).cast(pa.decimal128(MAX_DECIMAL_PRECISION, scale)).cast(t) \
            if pa.types.is_decimal(t) else pa.scalar(int(plan.value), t)
        return compare(plan.op, ref, _pc.scalar(value), False)
    ref, t = _as_compared(ref, t, literal)
    scalar = _literal(literal, t, where)
    if scalar is None:
        return _pc.scalar(_NULL_BOOL)
    return compare(op, ref, _pc.scalar(scalar), is_floating(t))


def _member(ref: Any, t: pa.DataType, literals: tuple[Literal, ...], where: str) -> Any:
    """``column IN (literals)``: NULL when the column is NULL, or when no literal is equal and
    one is NULL; a literal the column cannot equal (2.5 beside integers) is never equal."""
    if is_floating(t):
        # Each literal meets the column as it would in ``=`` (NaN equal to NaN, -0.0 to 0.0,
        # a number as a DOUBLE); a hash set would tell -0.0 from 0.0.
        found: Any = _pc.scalar(False)
        for literal in literals:
            found = _pc.or_kleene(found, _comparison(ref, t, "=", literal, where))
        return _pc.if_else(_pc.is_valid(ref), found, _pc.scalar(_NULL_BOOL))
    bounds = exact_range(t)
    present: list[Any] = []
    has_null = False
    for literal in literals:
        if literal.kind == "null":
            has_null = True
            continue
        number = _exact_number(literal)
        if bounds is not None and number is not None:
            scale, low, high = bounds
            if exact_comparison("=", number, scale, low, high).value is not None:
                present.append(number)
            continue
        present.append(_literal(literal, t, where))
    array: Any = pa.array  # the stubs type the values by the first overload
    if bounds is not None and pa.types.is_decimal(t):
        value_set = array(present, pa.decimal128(MAX_DECIMAL_PRECISION, bounds[0])).cast(t)
    elif bounds is not None:
        value_set = array([int(v) for v in present], t)
    else:
        value_set = array(present, t)
    member: Any = _pc.is_in(ref, value_set=value_set)
    found = _pc.if_else(member, _pc.scalar(True), _pc.scalar(
        _NULL_BOOL if has_null else False))
    return _pc.if_else(_pc.is_valid(ref), found, _pc.scalar(_NULL_BOOL))


def _expression(p: Predicate, schema: pa.Schema, where: str) -> Any:
    if isinstance(p, Constant):
        return _pc.scalar(bool(p.value))
    if isinstance(p, Comparison):
        ref, t = _column(schema, p.column, where)
        return _comparison(ref, t, p.op, p.literal, where)
    if isinstance(p, InList):
        ref, t = _column(schema, p.column, where)
        found = _member(ref, t, p.literals, where)
        return _pc.invert(found) if p.negated else found
    if isinstance(p, IsNull):
        ref, _ = _column(schema, p.column, where)
        return _pc.is_valid(ref) if p.negated else _pc.is_null(ref)
    if isinstance(p, Not):
        return _pc.invert(_expression(p.child, schema, where))
    if isinstance(p, And | Or):
        parts = [_expression(c, schema, where) for c in p.children]
        combined = parts[0]
        for part in parts[1:]:
            combined = (_pc.and_kleene(combined, part) if isinstance(p, And)
                        else _pc.or_kleene(combined, part))
        return combined
    raise InvalidArgumentError(f"{where}: {type(p).__name__} has no row-level meaning")


__all__ = ["not_true", "to_expression"]
