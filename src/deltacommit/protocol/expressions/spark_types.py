"""Spark's types as Arrow types, and the rules that decide the type an operation computes in.
Pure.

Every interpretation of an expression agrees on these rules, so they are written once:

- the type names ``CAST`` reads (``CAST_TYPES``) and the names error messages and SQL texts
  print (``sql_type``);
- the type two numbers meet in (``numeric_plan``, after ``AnsiTypeCoercion
  .findTightestCommonType`` and ``DecimalPrecision``): integers widen to the wider of the two;
  FLOAT with FLOAT stays FLOAT, FLOAT with any other number and DOUBLE with anything is DOUBLE;
  an integer meeting a DECIMAL becomes one (a literal just as wide as its digits,
  ``literalPickMinimumPrecision``; a column DECIMAL(3/5/10/20, 0)); a DECIMAL result wider than
  38 digits, where Spark drops fraction digits and rounds, is refused (``Unsupported``);
- the type the values of ``coalesce`` and ``CASE`` share (``common_type``,
  ``findWiderCommonType``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from deltacommit.protocol.expressions.sql_semantics import (
    MAX_DECIMAL_PRECISION,
    decimal_type_of_integer,
)

TIMESTAMP_LTZ = pa.timestamp("us", tz="UTC")
TIMESTAMP_NTZ = pa.timestamp("us")

#: The type names ``CAST(x AS name)`` reads (DECIMAL and NUMERIC take a precision and scale).
CAST_TYPES: dict[str, pa.DataType] = {
    "tinyint": pa.int8(), "byte": pa.int8(), "smallint": pa.int16(), "short": pa.int16(),
    "int": pa.int32(), "integer": pa.int32(), "bigint": pa.int64(), "long": pa.int64(),
    "float": pa.float32(), "real": pa.float32(), "double": pa.float64(),
    "string": pa.string(), "varchar": pa.string(), "char": pa.string(),
    "boolean": pa.bool_(), "binary": pa.binary(), "date": pa.date32(),
    "timestamp": TIMESTAMP_LTZ, "timestamp_ntz": TIMESTAMP_NTZ,
    "timestamp_ltz": TIMESTAMP_LTZ,
}

#: The DECIMAL an integer column becomes beside a DECIMAL (its widest value's digits).
INTEGER_AS_DECIMAL = {8: pa.decimal128(3, 0), 16: pa.decimal128(5, 0),
                      32: pa.decimal128(10, 0), 64: pa.decimal128(20, 0)}

_NAMES = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
          pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE",
          pa.string(): "STRING", pa.bool_(): "BOOLEAN", pa.date32(): "DATE",
          TIMESTAMP_LTZ: "TIMESTAMP", TIMESTAMP_NTZ: "TIMESTAMP_NTZ",
          pa.binary(): "BINARY", pa.null(): "NULL"}


class Unsupported(Exception):
    """An expression this package cannot evaluate with Spark's exact semantics (for the types
    it meets); the callers turn it into the error their context calls for."""


def is_int(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t))


def is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def is_zoned(t: pa.DataType) -> bool:
    """Whether ``t`` is a timestamp with a time zone (Spark's TIMESTAMP, not TIMESTAMP_NTZ)."""
    return pa.types.is_timestamp(t) and getattr(t, "tz", None) is not None


def precision_scale(t: pa.DataType) -> tuple[int, int]:
    return t.precision, t.scale  # type: ignore[attr-defined]


def sql_type(t: pa.DataType) -> str:
    """Spark's name of ``t`` (what ``CAST`` reads back), or Arrow's for a type Spark lacks."""
    if pa.types.is_decimal(t):
        p, s = precision_scale(t)
        return f"DECIMAL({p}, {s})"
    return _NAMES.get(t, str(t))


def decimal_of(t: pa.DataType, literal: int | None) -> pa.DataType:
    """The DECIMAL an operand becomes beside a DECIMAL: itself, an integer literal's digits,
    an integer column's DECIMAL(3/5/10/20, 0)."""
    if pa.types.is_decimal(t):
        return t
    if literal is not None:
        return decimal_type_of_integer(literal)
    return INTEGER_AS_DECIMAL[t.bit_width]


def numeric_type(ta: pa.DataType, tb: pa.DataType) -> pa.DataType | None:
    """The common type of two numbers when it is not a DECIMAL (None: a DECIMAL one)."""
    if is_int(ta) and is_int(tb):
        return ta if ta.bit_width >= tb.bit_width else tb
    if pa.types.is_floating(ta) or pa.types.is_floating(tb):
        if ta == tb == pa.float32():
            return pa.float32()
        return pa.float64()
    return None


def numeric_plan(ta: pa.DataType, tb: pa.DataType, literals: Sequence[int | None],
                 what: str, op: str | None) -> tuple[pa.DataType, pa.DataType, pa.DataType]:
    """The types two numbers take for an arithmetic operation (``op``) or a comparison or
    common type (``op`` None), and the result's type; ``literals`` holds the value of an
    operand that is an integer literal (which widens to a DECIMAL just as wide as its digits)."""
    if not (is_numeric(ta) and is_numeric(tb)):
        raise Unsupported(f"{what} of {sql_type(ta)} and {sql_type(tb)}")
    common = numeric_type(ta, tb)
    if common is not None:
        return common, common, common
    da, db = decimal_of(ta, literals[0]), decimal_of(tb, literals[1])
    (p1, s1), (p2, s2) = precision_scale(da), precision_scale(db)
    scale = max(s1, s2)
    if op == "*":
        precision, scale = p1 + p2 + 1, s1 + s2
    elif op in ("+", "-", "%"):
        precision = max(p1 - s1, p2 - s2) + scale + 1
    else:
        precision = max(p1 - s1, p2 - s2) + scale
    if precision > MAX_DECIMAL_PRECISION:
        raise Unsupported(
            f"{what} of {sql_type(da)} and {sql_type(db)}, whose exact result needs "
            f"DECIMAL({precision}, {scale}): Spark drops fraction digits and rounds beyond "
            f"{MAX_DECIMAL_PRECISION} digits")
    result = pa.decimal128(precision, scale)
    if op is None:
        return result, result, result
    return da, db, result


def common_type(types: Sequence[pa.DataType], what: str) -> pa.DataType:
    """The type values of ``types`` share as the result of ``what`` (``coalesce``, ``CASE``:
    Spark's ``findWiderCommonType``); NULL for none."""
    present = [t for t in types if not pa.types.is_null(t)]
    if not present:
        return pa.null()
    first = present[0]
    if all(t == first for t in present):
        return first
    if all(is_numeric(t) for t in present):
        common = first
        for t in present[1:]:
            common = numeric_plan(common, t, [None, None], what, None)[2]
        return common
    if all(is_string(t) for t in present):
        return pa.string()
    if all(is_temporal(t) for t in present):
        return next((t for t in present if pa.types.is_timestamp(t)), first)
    raise Unsupported(f"{what} of {sorted(set(map(sql_type, present)))}")


__all__ = ["CAST_TYPES", "INTEGER_AS_DECIMAL", "TIMESTAMP_LTZ", "TIMESTAMP_NTZ", "Unsupported",
           "common_type", "decimal_of", "is_int", "is_numeric", "is_string", "is_temporal",
           "is_zoned", "numeric_plan", "numeric_type", "precision_scale", "sql_type"]
