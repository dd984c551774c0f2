"""Predicates over rows as Arrow expressions, with SQL's three-valued logic.  Pure: no I/O.

Two callers decide row by row with the same parsed predicates: a row-level DELETE (the rows
where the predicate is TRUE are deleted; NULL deletes nothing) and constraint checks (a row
passes only where the expression is TRUE).  Both get their answer from one translation, so a
comparison, an IN list or a NULL means the same to both.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import InvalidArgumentError
from deltacommit.predicates import (
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

_ARROW_OPS = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
              ">": "greater", ">=": "greater_equal"}
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
            TypeError) as e:
        raise InvalidArgumentError(f"{where}: cannot compare a {t} column with "
                                   f"{literal.to_sql()}: {e}") from None


def _expression(p: Predicate, schema: pa.Schema, where: str) -> Any:
    if isinstance(p, Constant):
        return _pc.scalar(bool(p.value))
    if isinstance(p, Comparison):
        ref, t = _column(schema, p.column, where)
        value = _literal(p.literal, t, where)
        if value is None:
            return _pc.scalar(_NULL_BOOL)
        fn: Any = getattr(pc, _ARROW_OPS[p.op])
        out: pc.Expression = fn(ref, _pc.scalar(value))
        return out
    if isinstance(p, InList):
        ref, t = _column(schema, p.column, where)
        values = [_literal(x, t, where) for x in p.literals]
        present = [v for v in values if v is not None]
        member: Any = _pc.is_in(ref, value_set=pa.array(present, t))
        # x IN (...) is NULL when x is NULL, or when x is not found and the list holds a NULL.
        found = _pc.if_else(member, _pc.scalar(True), _pc.scalar(
            _NULL_BOOL if len(present) < len(values) else False))
        found = _pc.if_else(_pc.is_valid(ref), found, _pc.scalar(_NULL_BOOL))
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
