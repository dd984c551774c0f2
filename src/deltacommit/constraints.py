"""Column invariants and CHECK constraints, checked on the data before any file is written.

A table's constraints live in two places (PROTOCOL.md "Column Invariants" and "Check
Constraints"): ``delta.invariants`` in a column's metadata (``{"expression": {"expression":
"id > 0"}}``) and ``delta.constraints.<name>`` table properties.  A writer that skips them
commits rows every other engine refuses, so every write path (``dc.write``, group commit, the
Appender, the CLI, Spark) calls ``check_constraints`` before writing data.

Expressions are parsed by the predicate parser and evaluated column-wise with Arrow.  A row
satisfies a constraint only when the expression is TRUE: Delta's rule ("a specified Boolean
expression must be true for each input row"), so NULL violates it as FALSE does.  An
expression this evaluator cannot interpret refuses the write: skipping it would be a silent
violation.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import (
    CheckConstraintViolationError,
    DeltaCommitError,
    InvariantViolationError,
    UnsupportedProtocolError,
)
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
    parse_predicate,
)

CONSTRAINT_PREFIX = "delta.constraints."
INVARIANTS_KEY = b"delta.invariants"

_COMPARE = {"=": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
            ">": pc.greater, ">=": pc.greater_equal}


@dataclass(frozen=True, slots=True)
class Constraint:
    """One constraint: ``kind`` is ``invariant`` (named by its column) or ``check``."""

    kind: str
    name: str
    expression: str


def table_constraints(schema: pa.Schema, configuration: Mapping[str, str | None],
                      table: str) -> list[Constraint]:
    """Every invariant (top-level and nested columns) and CHECK constraint of a table."""
    out: list[Constraint] = []

    def visit(field: pa.Field[Any], path: str) -> None:
        meta = field.metadata or {}
        raw = meta.get(INVARIANTS_KEY)
        if raw is not None:
            out.append(Constraint("invariant", path, _invariant_expression(raw, path, table)))
        t = field.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                visit(t.field(i), f"{path}.{t.field(i).name}")

    for f in schema:
        visit(f, f.name)
    for key, value in sorted(configuration.items()):
        if key.lower().startswith(CONSTRAINT_PREFIX):
            if not value:
                raise UnsupportedProtocolError(
                    f"table {table}: CHECK constraint {key} has an empty expression")
            out.append(Constraint("check", key[len(CONSTRAINT_PREFIX):], value))
    return out


def _invariant_expression(raw: bytes, column: str, table: str) -> str:
    try:
        obj = json.loads(raw)
        expr = obj["expression"]["expression"]
    except (ValueError, KeyError, TypeError):
        raise UnsupportedProtocolError(
            f"table {table}: column {column!r} has delta.invariants {raw!r}, expected "
            '{"expression": {"expression": "<SQL>"}}') from None
    if not isinstance(expr, str) or not expr:
        raise UnsupportedProtocolError(
            f"table {table}: column {column!r} has an empty delta.invariants expression")
    return expr


def check_constraints(data: pa.Table, constraints: list[Constraint], table: str) -> None:
    """Raise InvariantViolationError / CheckConstraintViolationError naming the constraint and
    the first violating row; UnsupportedProtocolError if an expression cannot be evaluated."""
    if not constraints or data.num_rows == 0:
        return
    for c in constraints:
        try:
            pred = parse_predicate(c.expression)
            mask = _evaluate(pred, data)
        except (_Unsupported, DeltaCommitError) as e:
            raise UnsupportedProtocolError(
                f"table {table}: {_describe(c)} cannot be evaluated by deltacommit ({e}); "
                "refusing to write rather than skip it") from None
        ok = pc.fill_null(mask, False)
        if pc.all(ok).as_py() is False:
            bad = pc.invert(ok)
            count = pc.sum(bad).as_py()
            first = pc.index(bad, True).as_py()
            sample = data.slice(first, 1).to_pylist()[0]
            cls = InvariantViolationError if c.kind == "invariant" else CheckConstraintViolationError
            raise cls(f"table {table}: {_describe(c)} is violated by {count} row(s), for "
                      f"example {sample!r}; nothing was written")


def check_partition_not_null(data: pa.Table, schema: pa.Schema, partition_columns: list[str],
                             table: str) -> None:
    """An empty string in a partition column is stored as a null partition value (Delta and
    Hive write it as ``__HIVE_DEFAULT_PARTITION__``), so a NOT NULL partition column must refuse
    it like a null, or the table would hold a null where its schema forbids one."""
    from deltacommit.errors import SchemaMismatchError

    for c in partition_columns:
        f = schema.field(c)
        if f.nullable or c not in data.column_names:
            continue
        col = data.column(c)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            mask = pc.cast(pc.equal(col, pa.scalar("", col.type)), pa.int64())
            empty = int(pc.sum(mask).as_py() or 0)
            if empty:
                raise SchemaMismatchError(
                    f"table {table}: partition column {c!r} is not nullable but the data has "
                    f"{empty} empty string value(s), which a partition value stores as null")


def _describe(c: Constraint) -> str:
    if c.kind == "invariant":
        return f"the invariant of column {c.name!r} ({c.expression})"
    return f"CHECK constraint {c.name!r} ({c.expression})"


class _Unsupported(Exception):
    pass


def _column(data: pa.Table, name: str) -> Any:
    if name in data.column_names:
        return data.column(name)
    head, _, rest = name.partition(".")
    if rest and head in data.column_names:
        col: Any = data.column(head)
        for part in rest.split("."):
            if not pa.types.is_struct(col.type) or col.type.get_field_index(part) < 0:
                raise _Unsupported(f"no column {name!r}")
            col = pc.struct_field(col, part)
        return col
    raise _Unsupported(f"no column {name!r} in the data (columns: {data.column_names})")


def _scalar(literal: Literal, t: pa.DataType, column: str) -> pa.Scalar[Any]:
    v = literal.value
    if literal.kind == "null":
        return pa.scalar(None, t)
    try:
        if literal.kind == "decimal" and (pa.types.is_floating(t) or pa.types.is_decimal(t)):
            return pa.scalar(float(v) if pa.types.is_floating(t) else Decimal(v)).cast(t)
        if literal.kind == "timestamp" and pa.types.is_timestamp(t):
            value = v if (t.tz is None) == (v.tzinfo is None) else (
                v.replace(tzinfo=dt.UTC) if v.tzinfo is None else v.astimezone(dt.UTC).replace(tzinfo=None))
            out: pa.Scalar[Any] = pa.scalar(value, pa.timestamp("us", tz=t.tz)).cast(t)
            return out
        plain: pa.Scalar[Any] = pa.scalar(v).cast(t)
        return plain
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError) as e:
        raise _Unsupported(f"cannot compare column {column!r} of type {t} with "
                           f"{literal.to_sql()}: {e}") from None


def _evaluate(p: Predicate, data: pa.Table) -> Any:
    """A boolean array with SQL's three-valued logic (NULL where the answer is unknown)."""
    n = data.num_rows
    if isinstance(p, Constant):
        return pa.array([p.value] * n, pa.bool_())
    if isinstance(p, Comparison):
        col = _column(data, p.column)
        try:
            return _COMPARE[p.op](col, _scalar(p.literal, col.type, p.column))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid) as e:
            raise _Unsupported(str(e)) from None
    if isinstance(p, InList):
        col = _column(data, p.column)
        values = pa.array([_scalar(lit, col.type, p.column).as_py() for lit in p.literals
                           if lit.kind != "null"], col.type)
        has_null = any(lit.kind == "null" for lit in p.literals)
        found = pc.is_in(col, value_set=values)
        # x IN (...) is NULL when x is NULL, or when x is not found and the list holds a NULL.
        unknown = pc.is_null(col)
        if has_null:
            unknown = pc.or_(unknown, pc.invert(found))
        result = pc.if_else(unknown, pa.scalar(None, pa.bool_()), found)
        return pc.invert(result) if p.negated else result
    if isinstance(p, IsNull):
        col = _column(data, p.column)
        return pc.is_valid(col) if p.negated else pc.is_null(col)
    if isinstance(p, Not):
        return pc.invert(_evaluate(p.child, data))
    if isinstance(p, And):
        out = _evaluate(p.children[0], data)
        for c in p.children[1:]:
            out = pc.and_kleene(out, _evaluate(c, data))
        return out
    if isinstance(p, Or):
        out = _evaluate(p.children[0], data)
        for c in p.children[1:]:
            out = pc.or_kleene(out, _evaluate(c, data))
        return out
    raise _Unsupported(f"unsupported expression {p.to_sql()}")
