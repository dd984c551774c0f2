"""Arithmetic, comparisons and conditions over Arrow values, with Spark's semantics (ANSI mode).
Pure.

Arithmetic (``Add``, ``Subtract``, ``Multiply``, ``UnaryMinus``, ``Abs`` with failOnError)
  Integer ``+ - *``, unary minus and ``abs`` fail on overflow (ARITHMETIC_OVERFLOW), at the
  width of the operation's type: TINYINT + TINYINT overflows past 127.  FLOAT/DOUBLE follow
  IEEE 754 (no error).  DECIMAL ``+ - *`` are exact in Spark's result type.
``/`` and ``%`` (``Divide``, ``Remainder``: ``DivModLike``)
  ``/`` divides as DOUBLE (DECIMAL division, with its own scale rules, is refused).  A zero
  divisor fails the row (DIVIDE_BY_ZERO), for DOUBLE too (0.0 and -0.0); a NULL dividend or
  divisor gives NULL first.  ``%`` keeps the dividend's sign (Java's ``%``): ``-7 % 3`` is -1
  and ``INT_MIN % -1`` is 0; on FLOAT/DOUBLE it is ``fmod``; on DECIMAL it is refused.
Comparisons
  Numbers meet in their common type (``spark_types.numeric_plan``), a string meets a date or
  timestamp as one, a date meets a timestamp at midnight (UTC).  NaN equals NaN and is above
  every other value, -0.0 equals 0.0 (``SQLOrderingUtil.compareDoubles``;
  ``sql_semantics.compare``).  Beside a literal:

  - an integer or decimal value compares exactly with a number literal it cannot hold
    (``i < 2.5``, ``x < 99999999999999999999``), as Spark does by widening both to a DECIMAL
    (``sql_semantics.exact_comparison``), without converting the column;
  - a string literal takes the type of the number, boolean or binary value it meets (``f =
    'NaN'``, ``b = 'true'``), as the partition-value interpretation reads it;
  - a number, boolean, date or timestamp literal meets a string value as its text (as
    deltalake's DataFusion compares in a user's predicate) only where DataFusion writes that
    text: a BIGINT-range integer or a boolean, and not in ``IN``, which DataFusion refuses;
    anything else is refused, and so is every such literal of a text Spark wrote
    (``Literal.spark``), where Spark casts the string to the literal's type instead.
Conditions
  SQL's three-valued logic: ``AND``, ``OR``, ``NOT``, ``IS [NOT] NULL``, ``IN`` (NULL when no
  item is equal and one is NULL), ``BETWEEN``, ``<=>`` (never NULL).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, cast

import numpy as np
import pyarrow as pa

from deltacommit.protocol.expressions.arrow_values import (
    Value,
    at,
    cast_plain,
    checked,
    fail_where,
    is_scalar,
    non_null,
    pcx,
    row_count,
    type_of,
)
from deltacommit.protocol.expressions.ast import FLIPPED, Expr, InList, Literal
from deltacommit.protocol.expressions.casts import (
    as_timestamp,
    implicit_cast,
    to_date,
    to_double,
)
from deltacommit.protocol.expressions.partition_values import in_type, literal_text
from deltacommit.protocol.expressions.spark_types import (
    Unsupported,
    is_int,
    is_numeric,
    is_string,
    is_temporal,
    numeric_plan,
    sql_type,
)
from deltacommit.protocol.expressions.sql_semantics import (
    INTEGER_RANGES,
    MAX_DECIMAL_PRECISION,
    compare,
    exact_comparison,
    exact_range,
    null_safe_equal,
)

Nodes = Sequence[Expr | None]
#: A null boolean, taken from an array of nulls: ``pa.scalar(None)`` (as ``pa.array`` of a Python
#: list) makes pyarrow import pandas, 0.2 s that loading this module would cost every reader.
_NULL_BOOL = pa.nulls(1, pa.bool_())[0]


def _literal_int(node: Expr | None) -> int | None:
    """The value of an integer literal (typed INT or BIGINT), which widens to a DECIMAL just
    as wide as its digits."""
    if isinstance(node, Literal) and node.kind == "int" and is_int(node.type):
        value: int = node.value
        return value
    return None


def unify(a: Value, b: Value, nodes: Nodes, what: str, op: str | None = None
          ) -> tuple[Value, Value, pa.DataType]:
    """``a`` and ``b`` in Spark's types for an arithmetic operation (``op``) or a comparison
    (``op`` None), and the result's type."""
    ta, tb, result = numeric_plan(type_of(a), type_of(b),
                                  [_literal_int(nodes[0]), _literal_int(nodes[1])], what, op)
    return implicit_cast(a, ta), implicit_cast(b, tb), result


# --------------------------------------------------------------------------- arithmetic


def arithmetic(op: str, a: Value, b: Value, nodes: Nodes) -> Value:
    ta, tb = type_of(a), type_of(b)
    if pa.types.is_null(ta) or pa.types.is_null(tb):
        other = tb if pa.types.is_null(ta) else ta
        if not (pa.types.is_null(other) or is_numeric(other)):
            raise Unsupported(f"arithmetic on {sql_type(ta)} and {sql_type(tb)}")
        t = pa.float64() if op == "/" else other
        n = row_count([a, b])
        return pa.scalar(None, t) if n is None else pcx.cast(pa.nulls(n), t)
    if op == "/":
        if pa.types.is_decimal(ta) or pa.types.is_decimal(tb):
            raise Unsupported("/ on decimals (Spark's result scale and rounding)")
        if not (is_numeric(ta) and is_numeric(tb)):
            raise Unsupported(f"arithmetic on {sql_type(ta)} and {sql_type(tb)}")
        a, b = to_double(a), to_double(b)
        _fail_division_by_zero(a, b, "/")
        return pcx.divide(a, b)
    a, b, t = unify(a, b, nodes, "arithmetic", op)
    if op == "%":
        if pa.types.is_decimal(t):
            raise Unsupported("% on decimals")
        _fail_division_by_zero(a, b, "%")
        return _remainder(a, b, t)
    if is_int(t):
        kernel = {"+": pcx.add_checked, "-": pcx.subtract_checked,
                  "*": pcx.multiply_checked}[op]
        return checked(kernel, [a, b], lambda i: (
            f"integer overflow: {at(a, i)} {op} {at(b, i)} is beyond {sql_type(t)}"))
    kernel = {"+": pcx.add, "-": pcx.subtract, "*": pcx.multiply}[op]
    out = kernel(a, b)
    if pa.types.is_decimal(t):
        return cast_plain(out, t)
    return out


def _fail_division_by_zero(a: Value, b: Value, op: str) -> None:
    if is_scalar(b) and (not b.is_valid or b.as_py() != 0):
        return  # a divisor that is a NULL or nonzero literal (``id % 100``) divides every row
    t = type_of(b)
    zero = pa.scalar(0, t) if not pa.types.is_decimal(t) else pa.scalar(Decimal(0)).cast(t)
    mask = pcx.and_(pcx.equal(b, zero), pcx.is_valid(a))
    fail_where(mask, lambda i: f"division by zero: {at(a, i)} {op} {at(b, i)}")


def _remainder(a: Value, b: Value, t: pa.DataType) -> Value:
    """Java's ``%``: truncated, with the dividend's sign (C's ``fmod``), and 0 for
    ``MIN % -1``, which C leaves undefined; no zero divisor reaches here."""
    n = row_count([a, b])
    if n is None:
        x, y = a.as_py(), b.as_py()
        if x is None or y is None:
            return pa.scalar(None, t)
        if is_int(t):
            return pa.scalar(abs(x) % abs(y) * (1 if x >= 0 else -1), t)
        with np.errstate(all="ignore"):  # fmod is exact, so a FLOAT's stays a FLOAT
            return pa.scalar(float(np.fmod(np.float64(x), np.float64(y))), t)
    dtype = t.to_pandas_dtype()

    def values(v: Value, fill: int) -> tuple[Any, Any]:
        """``v`` as numbers (NULL as ``fill``) and where it is valid (None: everywhere)."""
        if is_scalar(v):  # a literal, as in ``id % 100``: a number numpy broadcasts, no array
            py = v.as_py()
            if py is not None:
                return np.dtype(dtype).type(py), None
            return np.full(n, fill, dtype), np.zeros(n, np.bool_)
        nums = pcx.fill_null(v, pa.scalar(fill, t)).to_numpy(zero_copy_only=False).astype(
            dtype, copy=False)
        nulls = v.null_count
        return nums, (None if not nulls else
                      np.asarray(pcx.is_valid(v).to_numpy(zero_copy_only=False), np.bool_))

    x, valid_a = values(a, 0)
    y, valid_b = values(b, 1)
    valid = valid_a if valid_b is None else valid_b if valid_a is None else valid_a & valid_b
    if is_int(t):
        y = np.where(y == -1, 1, y)  # x % -1 is 0, and MIN % -1 must not trap
    with np.errstate(all="ignore"):
        out = np.fmod(x, y)
    return pa.array(out, t, mask=None if valid is None else ~valid)


def _unary(v: Value, kernel: str, what: str, shown: str) -> Value:
    """``-v`` (``kernel`` negate) or ``abs(v)`` (abs), failing on integer overflow."""
    t = type_of(v)
    if pa.types.is_null(t):
        return v
    if not is_numeric(t):
        raise Unsupported(f"{what} {sql_type(t)}")
    if is_int(t):
        return checked(getattr(pcx, kernel + "_checked"), [v], lambda i: (
            f"integer overflow: {shown.format(at(v, i))} is beyond {sql_type(t)}"))
    return getattr(pcx, kernel)(v)


def negate(v: Value) -> Value:
    return _unary(v, "negate", "negating", "-({})")


def absolute(v: Value) -> Value:
    return _unary(v, "abs", "abs of", "abs({})")


# --------------------------------------------------------------------------- comparisons


def comparable(a: Value, b: Value, nodes: Nodes) -> tuple[Value, Value]:
    """Two operands in one type, as Spark coerces a comparison: numbers to their common type,
    a string meets a date or timestamp as one, a date meets a timestamp at midnight (UTC)."""
    ta, tb = type_of(a), type_of(b)
    if pa.types.is_null(ta) or pa.types.is_null(tb):
        other = tb if pa.types.is_null(ta) else ta
        if pa.types.is_null(other):
            # NULL beside NULL: any one type with a comparison kernel (every value is NULL).
            other = pa.bool_()
        return a.cast(other), b.cast(other)
    if is_numeric(ta) and is_numeric(tb):
        a, b, _ = unify(a, b, nodes, "comparing")
        return a, b
    if is_string(ta) and is_string(tb):
        return cast_plain(a, pa.string()), cast_plain(b, pa.string())
    if pa.types.is_nested(ta) or pa.types.is_nested(tb):
        # Spark orders and equates structs, arrays and maps field by field, NULL fields
        # equal; Arrow has no kernel for it, and a partial one would differ from Spark.
        raise Unsupported(f"comparing {sql_type(ta)} with {sql_type(tb)}: deltacommit compares "
                          "single values, not whole structs, arrays or maps; compare their "
                          "fields instead (such as t.s.f = s.s.f)")
    if ta == tb:
        return a, b
    if pa.types.is_date(ta) and (pa.types.is_date(tb) or is_string(tb)):
        return a, to_date(b)
    if pa.types.is_date(tb) and is_string(ta):
        return to_date(a), b
    if (is_temporal(ta) or is_string(ta)) and (is_temporal(tb) or is_string(tb)):
        return as_timestamp(a), as_timestamp(b)
    raise Unsupported(f"comparing {sql_type(ta)} with {sql_type(tb)}")


def _exactly(op: str, v: Value, t: pa.DataType, number: Decimal) -> Value:
    """``v op number`` for an integer or decimal ``v``, decided exactly."""
    bounds = exact_range(t)
    assert bounds is not None
    scale, low, high = bounds
    plan = exact_comparison(op, number, scale, low, high)
    if plan.constant is not None:
        return non_null(v, plan.constant)
    assert plan.op is not None and plan.value is not None
    return compare(plan.op, v, _held(plan.value, t, scale), False)


def _held(value: Decimal, t: pa.DataType, scale: int) -> pa.Scalar[Any]:
    """``value``, which ``t`` holds exactly, as a scalar of ``t``."""
    if pa.types.is_decimal(t):
        out: pa.Scalar[Any] = pa.scalar(value).cast(
            pa.decimal128(MAX_DECIMAL_PRECISION, scale)).cast(t)
        return out
    return pa.scalar(int(value), t)


def _text_number(text: str) -> Decimal | None:
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def _string_literal_as(t: pa.DataType, literal: Literal) -> pa.Scalar[Any] | Decimal:
    """A string literal as a value of the number, boolean or binary type ``t`` it meets: a
    Decimal for an integer or decimal type (compared exactly), else a scalar of ``t``."""
    text: str = literal.value
    if exact_range(t) is not None:
        number = _text_number(text)
        if number is not None:
            return number
    elif pa.types.is_floating(t):
        try:
            return pa.scalar(in_type(float(text), t), t)
        except ValueError:
            pass
    elif pa.types.is_boolean(t) and text.strip().lower() in ("true", "false"):
        return pa.scalar(text.strip().lower() == "true")
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.scalar(text.encode(), t)
    raise Unsupported(f"cannot compare a {sql_type(t)} value with {literal.to_sql()}, which is "
                      "not a value of that type")


def _against_literal(op: str, v: Value, literal: Literal) -> Value | None:
    """``v op literal`` by the rules for literals (module docstring); None where the general
    rules apply."""
    t = type_of(v)
    if literal.kind == "null" or pa.types.is_null(t):
        return None
    if literal.kind in ("int", "decimal") and exact_range(t) is not None:
        return _exactly(op, v, t, Decimal(literal.value))
    if literal.kind == "string" and not (is_string(t) or is_temporal(t)):
        value = _string_literal_as(t, literal)
        if isinstance(value, Decimal):
            return _exactly(op, v, t, value)
        return compare(op, v, value, pa.types.is_floating(t))
    if is_string(t) and literal.kind not in ("string", "null"):
        _check_text_comparison(literal)
        return compare(op, cast_plain(v, pa.string()), pa.scalar(literal_text(literal)), False)
    return None


def _check_text_comparison(literal: Literal) -> None:
    """Refuse comparing a string value with ``literal`` (a number, boolean, date or timestamp)
    as the literal's text where that is not what the text's engine does.  Spark (a text Spark
    wrote) casts the string to the literal's type instead, failing on text that is none (ANSI):
    ``c > 10`` is FALSE for '5' and fails for 'abc'.  deltalake (a user's predicate) compares
    with the literal's text as DataFusion writes it, which is this text only for an integer of
    BIGINT's range and a boolean: DataFusion reads ``1.50`` and ``1e20`` as DOUBLE and writes
    '1.5' and '1e20', and refuses a date.  Either way another answer would delete, update or
    enforce other rows than the peer does."""
    if literal.spark:
        raise Unsupported(
            f"comparing a STRING value with the {sql_type(literal.type)} literal "
            f"{literal.to_sql()}: Spark casts the string to {sql_type(literal.type)}, failing "
            "on text that is not a value of it, which deltacommit does not reproduce")
    if literal.kind == "bool" or (literal.kind == "int" and -2**63 <= literal.value < 2**63):
        return
    raise Unsupported(
        f"comparing a STRING value with the {sql_type(literal.type)} literal "
        f"{literal.to_sql()}: deltalake compares it with the literal's text as DataFusion "
        "writes it, which deltacommit does not reproduce for this literal; compare with a "
        "string literal")


def compare_values(op: str, a: Value, b: Value, nodes: Nodes) -> Value:
    """``a op b`` for ``= != < <= > >=`` with Spark's coercions and order."""
    left, right = nodes[0], nodes[1]
    if isinstance(right, Literal) and not isinstance(left, Literal):
        found = _against_literal(op, a, right)
        if found is not None:
            return found
    elif isinstance(left, Literal) and not isinstance(right, Literal):
        found = _against_literal(FLIPPED[op], b, left)
        if found is not None:
            return found
    a, b = comparable(a, b, nodes)
    return compare(op, a, b, pa.types.is_floating(type_of(a)))


def null_safe(a: Value, b: Value, nodes: Nodes) -> Value:
    """``a <=> b``: TRUE when both are NULL, FALSE when one is, else ``a = b``."""
    a, b = comparable(a, b, nodes)
    return null_safe_equal(a, b, pa.types.is_floating(type_of(a)))


def _value_set(t: pa.DataType, items: Sequence[Expr | None]) -> tuple[pa.Array[Any], bool] | None:
    """The values of type ``t`` that literal ``items`` equal exactly, and whether one is
    NULL; None unless every item is such a literal (integers and decimals beside a number,
    strings beside a string)."""
    present: list[Any] = []
    has_null = False
    bounds = exact_range(t)
    integers = INTEGER_RANGES.get(t)
    for item in items:
        if not isinstance(item, Literal):
            return None
        if item.kind == "null":
            has_null = True
        elif integers is not None and item.kind == "int":
            # An integer literal equals a value of an integer column exactly where it lies in
            # the column's range (``exact_comparison``'s answer, without its decimals).
            if integers[0] <= item.value <= integers[1]:
                present.append(item.value)
        elif bounds is not None and item.kind in ("int", "decimal"):
            plan = exact_comparison("=", Decimal(item.value), *bounds)
            if plan.value is not None:
                present.append(plan.value)
        elif is_string(t) and item.kind == "string":
            present.append(item.value)
        else:
            return None
    if bounds is not None and pa.types.is_decimal(t):
        wide = pa.array(present, pa.decimal128(MAX_DECIMAL_PRECISION, bounds[0]))
        return wide.cast(t), has_null
    if bounds is not None:
        return pa.array([int(v) for v in present], t), has_null
    return pa.array(present, t), has_null


def member(values: Sequence[Value], nodes: Nodes,
           literal: Callable[[Literal], Value] | None = None,
           listed: InList | None = None) -> Value:
    """``x IN (items)``: TRUE where an item equals x; NULL where x is NULL, or where none does
    and an item is NULL; FALSE otherwise.  ``values`` may hold x alone where every item is a
    literal: ``literal`` then gives an item's value, where the items are compared one by one.
    ``listed``, the IN node, keeps what is derived from its items for the next evaluation (a
    MERGE's key list, evaluated on the rows of every concurrent commit's files)."""
    x = values[0]
    t = type_of(x)
    if is_string(t) and (listed is None or listed.item_kinds() - {"string", "null"}):
        for node in nodes[1:]:
            if isinstance(node, Literal) and node.kind not in ("string", "null"):
                # deltalake refuses a number among strings in IN; Spark casts the strings.
                raise Unsupported(f"a STRING value IN a list holding the "
                                  f"{sql_type(node.type)} literal {node.to_sql()}")
    probe = None
    if not is_scalar(x):
        probe = (listed.remembered(("value set", t), lambda: _value_set(t, nodes[1:]))
                 if listed is not None else _value_set(t, nodes[1:]))
    if probe is not None:
        value_set, has_null = probe
        found = pcx.if_else(pcx.is_in(x, value_set=value_set), pa.scalar(True),
                            _NULL_BOOL if has_null else pa.scalar(False))
        return pcx.if_else(pcx.is_valid(x), found, _NULL_BOOL)
    items = values[1:]
    if len(values) == 1 and len(nodes) > 1:
        assert literal is not None, "an IN list's items need values or a literal evaluator"
        items = [literal(cast(Literal, node)) for node in nodes[1:]]
    out: Value = pa.scalar(False)
    for item, node in zip(items, nodes[1:], strict=True):
        out = pcx.or_kleene(out, compare_values("=", x, item, (nodes[0], node)))
    return out


def between(values: Sequence[Value], nodes: Nodes) -> Value:
    low = compare_values(">=", values[0], values[1], (nodes[0], nodes[1]))
    high = compare_values("<=", values[0], values[2], (nodes[0], nodes[2]))
    return pcx.and_kleene(low, high)


def boolean(v: Value, what: str) -> Value:
    """``v`` as a condition (NULL of no type is an unknown one)."""
    t = type_of(v)
    if pa.types.is_null(t):
        return v.cast(pa.bool_())
    if not pa.types.is_boolean(t):
        raise Unsupported(f"{what} of {sql_type(t)}, which is not a condition")
    return v


def all_of(values: Sequence[Value]) -> Value:
    out = boolean(values[0], "AND")
    for v in values[1:]:
        out = pcx.and_kleene(out, boolean(v, "AND"))
    return out


def any_of(values: Sequence[Value]) -> Value:
    out = boolean(values[0], "OR")
    for v in values[1:]:
        out = pcx.or_kleene(out, boolean(v, "OR"))
    return out


__all__ = ["absolute", "all_of", "any_of", "arithmetic", "between", "boolean", "comparable",
           "compare_values", "member", "negate", "null_safe", "unify"]
