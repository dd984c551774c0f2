"""Spark SQL's value rules that both interpretations of an expression share.  Pure.

An expression is decided over Arrow data (``evaluator``: generated columns, CHECK constraints,
DELETE's rows) and over partition values (``partition_values``: scans, overwrites, conflict
checks).  Where they must agree with Spark, and so with each other, the rule is written here
once:

- **Literals** are read once: DATE and TIMESTAMP texts (``parse_date_literal``,
  ``parse_timestamp_literal``) in the forms Spark reads the same way.
- **Number literals** are typed as Spark's parser types them (``parse_number``): an integer is
  an INT when it fits, a BIGINT when it fits that, else a DECIMAL(p, 0); a literal with a
  fraction is a DECIMAL of its own digits; one with an exponent is a DOUBLE.  A DECIMAL beyond
  38 digits or a DOUBLE beyond its range is refused, as Spark refuses it.
- **Floating-point order** is Spark's (``SQLOrderingUtil.compareDoubles``): NaN equals NaN and
  is greater than every other value, infinity included; -0.0 equals 0.0.  IEEE comparison,
  which Arrow implements, answers FALSE for every comparison with NaN, so a NaN row would pass
  ``NOT (x > 100)`` and ``x != x``.  ``compare`` (Arrow, for arrays and for expressions alike)
  and ``float_order_key`` (Python, for partition values) both apply Spark's order.
- **Integer ranges** (``INTEGER_RANGES``) bound Spark's ANSI overflow checks, and
  ``exact_comparison`` compares an integer or decimal column with a literal it cannot hold
  (``x < 99999999999999999999``, ``i < 2.5``) exactly, as Spark does by widening both sides to
  a common DECIMAL, instead of converting the literal to the column's type (which overflows).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.partitions import parse_timestamp_us

_pc: Any = pc  # pyarrow.compute's stubs do not cover every function applied to expressions

#: Spark's largest DECIMAL precision.
MAX_DECIMAL_PRECISION = 38

#: The values each Arrow integer type holds, as Spark's TINYINT..BIGINT hold them.
INTEGER_RANGES: dict[pa.DataType, tuple[int, int]] = {
    pa.int8(): (-2**7, 2**7 - 1), pa.int16(): (-2**15, 2**15 - 1),
    pa.int32(): (-2**31, 2**31 - 1), pa.int64(): (-2**63, 2**63 - 1),
}

_DOUBLE_MAX = Decimal("1.7976931348623157E+308")
#: Exact decimal arithmetic for literals and type bounds (the default context rounds to 28
#: digits, and a DECIMAL(38) bound has 38).
_EXACT = Context(prec=2000, Emax=10**6, Emin=-10**6)

# --------------------------------------------------------------------------- literals


class LiteralError(ValueError):
    """A number literal Spark's parser refuses; the parsers turn it into a syntax error that
    points at the literal."""


@dataclass(frozen=True, slots=True)
class NumberLiteral:
    """A number literal as Spark types it: ``value`` is an ``int`` (INT, BIGINT, or a
    DECIMAL(p, 0) beyond BIGINT), a ``Decimal`` (DECIMAL(p, s)) or a ``float`` (DOUBLE);
    ``exact`` is the value as written, for evaluators that compare exactly."""

    value: int | Decimal | float
    type: pa.DataType
    exact: Decimal


_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _shown(text: str) -> str:
    """A literal as an error message shows it: whole when short, else its ends and length."""
    return text if len(text) <= 60 else f"{text[:25]}...{text[-25:]} ({len(text)} characters)"


def parse_number(text: str) -> NumberLiteral:
    """The literal ``text`` (unsigned digits, an optional fraction and exponent; a sign is an
    operator, and ``-`` of a literal is folded by the parsers), typed as Spark types it;
    LiteralError for what Spark refuses."""
    if not _NUMBER.fullmatch(text):
        raise LiteralError(f"{_shown(text)!r} is not a number")
    mantissa = re.split("[eE]", text)[0]
    if "e" in text or "E" in text:
        # Spark: a literal with an exponent is a DOUBLE; one beyond its range is an error.
        try:
            exact = _EXACT.create_decimal(text)
            beyond = abs(exact) > _DOUBLE_MAX
        except ArithmeticError:  # an exponent beyond any context (Overflow, InvalidOperation)
            beyond = True
        if beyond or len(mantissa) > 1000:
            raise LiteralError(f"{_shown(text)} is beyond the range of a DOUBLE")
        return NumberLiteral(float(exact), pa.float64(), exact)
    if "." not in text:
        digits = len(text.lstrip("0")) or 1
        if digits > MAX_DECIMAL_PRECISION:  # counted before int(), which refuses 4300 digits
            raise LiteralError(f"the integer {_shown(text)} has {digits} digits; Spark's "
                               f"DECIMAL holds at most {MAX_DECIMAL_PRECISION}")
        value = int(text)
        exact = Decimal(value)
        if value < 2**31:
            return NumberLiteral(value, pa.int32(), exact)
        if value < 2**63:
            return NumberLiteral(value, pa.int64(), exact)
        return NumberLiteral(value, pa.decimal128(digits, 0), exact)
    if len(text) > 1000:
        raise LiteralError(f"the decimal {_shown(text)} has more than {MAX_DECIMAL_PRECISION} "
                           "digits; Spark's DECIMAL holds at most 38")
    exact = Decimal(text)
    _, digit_tuple, exponent = exact.as_tuple()
    assert isinstance(exponent, int)
    scale = max(-exponent, 0)
    precision = max(len(digit_tuple), scale, 1)
    if precision > MAX_DECIMAL_PRECISION:
        raise LiteralError(f"the decimal {_shown(text)} has {precision} digits; Spark's "
                           f"DECIMAL holds at most {MAX_DECIMAL_PRECISION}")
    return NumberLiteral(exact, pa.decimal128(precision, scale), exact)


_DATE_LITERAL = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def parse_date_literal(text: str) -> dt.date:
    """The value of ``DATE 'text'``: ``yyyy-[m]m-[d]d``, a form Spark's ``stringToDate`` reads
    the same way (Python's ``date.fromisoformat`` also reads ``20240105`` and ISO week dates,
    which Spark does not); LiteralError otherwise."""
    m = _DATE_LITERAL.fullmatch(text.strip())
    if not m:
        raise LiteralError(f"{text!r} is not a date of the form YYYY-MM-DD")
    try:
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError as e:
        raise LiteralError(f"{text!r} is not a valid date: {e}") from None


def parse_timestamp_literal(text: str) -> dt.datetime:
    """The value of ``TIMESTAMP 'text'`` (``YYYY-MM-DD[ HH:MM[:SS[.fraction]]][zone]``):
    aware, in UTC, when the text has a zone; naive (in the session time zone) otherwise.
    Digits beyond microseconds are dropped, as Spark drops them; LiteralError otherwise."""
    try:
        us, zoned = parse_timestamp_us(text)
        return (_EPOCH_UTC if zoned else _EPOCH) + dt.timedelta(microseconds=us)
    except (InvalidArgumentError, OverflowError) as e:
        raise LiteralError(f"{text!r} is not a timestamp: {e}") from None


def decimal_type_of_integer(value: int) -> pa.DataType:
    """The DECIMAL(p, 0) Spark gives an integer literal that meets a DECIMAL in arithmetic or
    a comparison (``literalPickMinimumPrecision``): just wide enough for its digits."""
    return pa.decimal128(max(len(str(abs(value))), 1), 0)


# --------------------------------------------------------------------------- float order


def float_order_key(value: float | int | Decimal) -> tuple[int, Any]:
    """A Python sort and equality key with Spark's order of DOUBLE values: NaN equal to NaN
    and above everything else, -0.0 equal to 0.0 (Python's ``==`` already equates them)."""
    if isinstance(value, float) and math.isnan(value):
        return (1, 0.0)
    return (0, value)


def is_floating(t: pa.DataType) -> bool:
    return bool(pa.types.is_floating(t))


def compare(op: str, a: Any, b: Any, floating: bool) -> Any:
    """``a op b`` for ``op`` in ``= != < <= > >=`` with SQL's NULL (a NULL operand gives NULL)
    and, when ``floating``, Spark's NaN order.  ``a`` and ``b`` are Arrow arrays, scalars or
    ``pyarrow.compute`` expressions of one type; so is the result."""
    ieee = {"=": _pc.equal, "!=": _pc.not_equal, "<": _pc.less, "<=": _pc.less_equal,
            ">": _pc.greater, ">=": _pc.greater_equal}[op](a, b)
    if not floating:
        return ieee
    if op == "!=":
        return _pc.invert(compare("=", a, b, True))
    # Only the Kleene forms of AND/OR apply to expressions; where both sides are present,
    # which is the only case the answer is taken from, they are the plain forms.
    nan_a, nan_b = _pc.is_nan(a), _pc.is_nan(b)
    when_nan = {"=": _pc.and_kleene(nan_a, nan_b),
                "<": _pc.and_kleene(_pc.invert(nan_a), nan_b),
                "<=": nan_b,
                ">": _pc.and_kleene(nan_a, _pc.invert(nan_b)),
                ">=": nan_a}[op]
    answer = _pc.if_else(_pc.or_kleene(nan_a, nan_b), when_nan, ieee)
    present = _pc.and_kleene(_pc.is_valid(a), _pc.is_valid(b))
    return _pc.if_else(present, answer, pa.scalar(None, pa.bool_()))


def null_safe_equal(a: Any, b: Any, floating: bool) -> Any:
    """``a <=> b``: TRUE when both are NULL, FALSE when one is, else ``a = b`` (NaN = NaN)."""
    both_null = _pc.and_kleene(_pc.is_null(a), _pc.is_null(b))
    return _pc.or_kleene(both_null, _pc.fill_null(compare("=", a, b, floating), False))


# --------------------------------------------------------------------------- exact comparison


@dataclass(frozen=True, slots=True)
class ExactComparison:
    """What ``column op literal`` comes to for an integer or decimal column: a constant for
    every non-NULL row (``constant`` set), or a comparison with a ``value`` the column's type
    holds exactly (``op`` and ``value`` set)."""

    constant: bool | None = None
    op: str | None = None
    value: Decimal | None = None


def exact_comparison(op: str, literal: Decimal, scale: int, low: Decimal, high: Decimal
                     ) -> ExactComparison:
    """``x op literal`` for a column whose values are multiples of ``10**-scale`` in
    ``[low, high]``, decided exactly.  Spark compares an INT with ``2.5`` or with
    ``99999999999999999999`` by widening both to a DECIMAL; converting the literal to the
    column's type instead either fails or rounds, and a rounded literal changes the answer."""
    with localcontext(_EXACT):
        # A literal far beyond the range compares with every value as the first step beyond
        # it does (a Python int from a partition filter may have thousands of digits).
        literal = min(max(literal, low - 1), high + 1)
        step = Decimal(1).scaleb(-scale)
        floor = literal.quantize(step, rounding=ROUND_FLOOR)
        ceiling = literal.quantize(step, rounding=ROUND_CEILING)
    on_grid = literal == floor
    if op in ("=", "!="):
        if on_grid and low <= literal <= high:
            return ExactComparison(op=op, value=literal)
        return ExactComparison(constant=op == "!=")
    if op in ("<", "<="):
        # x < L is x <= floor(L) off the grid, x < L on it; x <= L is always x <= floor(L).
        bound, strict = (literal, True) if op == "<" and on_grid else (floor, False)
        if bound > high or (bound == high and not strict):
            return ExactComparison(constant=True)
        if bound < low or (bound == low and strict):
            return ExactComparison(constant=False)
        return ExactComparison(op="<" if strict else "<=", value=bound)
    bound, strict = (literal, True) if op == ">" and on_grid else (ceiling, False)
    if bound < low or (bound == low and not strict):
        return ExactComparison(constant=True)
    if bound > high or (bound == high and strict):
        return ExactComparison(constant=False)
    return ExactComparison(op=">" if strict else ">=", value=bound)


def exact_range(t: pa.DataType) -> tuple[int, Decimal, Decimal] | None:
    """(scale, low, high) of an integer or decimal type, for ``exact_comparison``."""
    if t in INTEGER_RANGES:
        low, high = INTEGER_RANGES[t]
        return 0, Decimal(low), Decimal(high)
    if pa.types.is_decimal(t):
        precision, scale = t.precision, t.scale
        with localcontext(_EXACT):
            high = (Decimal(10) ** precision - 1).scaleb(-scale)
        return scale, -high, high
    return None


__all__ = ["INTEGER_RANGES", "MAX_DECIMAL_PRECISION", "ExactComparison", "LiteralError",
           "NumberLiteral", "compare", "decimal_type_of_integer", "exact_comparison",
           "exact_range", "float_order_key", "is_floating", "null_safe_equal",
           "parse_date_literal", "parse_number", "parse_timestamp_literal"]
