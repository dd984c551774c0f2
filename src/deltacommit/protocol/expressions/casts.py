"""``CAST`` with Spark's ANSI rules, and the implicit casts of Spark's type coercion.  Pure.

The rules, each with the Spark rule it follows (``Cast`` with ANSI evaluation, Spark 4's
default; the session time zone is UTC):

- integer to a narrower integer fails when out of range (CAST_OVERFLOW);
- FLOAT/DOUBLE to an integer truncates toward zero and fails for NaN, infinity and values
  out of range (``DoubleExactNumeric``: ``floor(x) <= MAX && ceil(x) >= MIN``, so a DOUBLE
  equal to 2^63 becomes BIGINT's maximum, where Java's conversion saturates);
- DECIMAL to an integer truncates toward zero and fails when out of range
  (``Decimal.roundTo*``); beyond 18 digits, where Spark may go through a DOUBLE, a value
  whose DOUBLE truncates differently is refused;
- to DECIMAL(p, s) rounds HALF_UP (away from zero, ``Decimal.changePrecision``) and fails
  when the value needs more than p digits.  A FLOAT/DOUBLE converts through its shortest
  decimal text (Scala's ``BigDecimal(double)`` is ``Double.toString``), so 0.125 gives 0.13
  and 2.675 gives 2.68 at scale 2; NaN and infinity give NULL (Spark catches the
  NumberFormatException even in ANSI mode);
- DOUBLE to FLOAT rounds to nearest (infinity beyond FLOAT's range); integers and DECIMAL to
  DOUBLE round to nearest; DECIMAL to FLOAT is refused (Java rounds it once, directly);
- to STRING: integers and booleans as Spark prints them, DECIMAL in plain notation
  (``toPlainString``, ANSI mode), DATE as ``yyyy-MM-dd`` for years 1 to 9999; FLOAT/DOUBLE,
  TIMESTAMP and BINARY text is refused;
- STRING to an integer, DECIMAL, BOOLEAN, DATE or TIMESTAMP fails for text that is not one;
  only the plain forms are read (optional sign and digits; Java's BigDecimal syntax;
  true/t/yes/y/1 and false/f/no/n/0; ``YYYY-MM-DD``; ``YYYY-MM-DD[ T]HH:MM[:SS[.ffffff]]``
  with an optional ``Z`` or ``+HH:MM`` for TIMESTAMP), after trimming control characters and
  spaces as Spark does; the other forms Spark also reads are refused.  STRING to FLOAT/DOUBLE
  (Java's number grammar) is refused;
- a date or timestamp is read in UTC: ``CAST(ts AS DATE)`` is the UTC day of a TIMESTAMP, a
  TIMESTAMP_NTZ's own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any

import numpy as np
import pyarrow as pa

from deltacommit.protocol.expressions.arrow_values import (
    RowFailure,
    Value,
    at,
    cast_plain,
    fail_where,
    is_scalar,
    pcx,
    python_map,
    type_of,
)
from deltacommit.protocol.expressions.spark_types import (
    INTEGER_AS_DECIMAL,
    TIMESTAMP_LTZ,
    TIMESTAMP_NTZ,
    Unsupported,
    is_int,
    is_numeric,
    is_string,
    is_temporal,
    precision_scale,
    sql_type,
)
from deltacommit.protocol.expressions.sql_semantics import INTEGER_RANGES, MAX_DECIMAL_PRECISION

#: The plain date and timestamp texts read (the forms Spark's ``stringToDate`` and
#: ``stringToTimestamp`` read the same way); other forms are refused.
_DATE_TEXT = r"\d{4}-\d{2}-\d{2}"
_TIME_TEXT = r"[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?"
_ZONE_TEXT = r"(?:Z|[+-]\d{2}:\d{2})"
_TIMESTAMP_TEXT = _DATE_TEXT + f"(?:{_TIME_TEXT})?"
_ZONED_TIMESTAMP_TEXT = _DATE_TEXT + f"(?:{_TIME_TEXT}{_ZONE_TEXT}?)?"


def to_double(v: Value) -> Value:
    """A number as DOUBLE, rounded to nearest as Java converts it (``BigDecimal.doubleValue``
    for a DECIMAL: correctly rounded, which Arrow's conversion is not for every value)."""
    t = type_of(v)
    if pa.types.is_decimal(t):
        return python_map(v, lambda d, _: float(d), pa.float64())
    return cast_plain(v, pa.float64(), safe=False)


def widen_decimal(v: Value, t: pa.DataType) -> Value:
    """An integer or DECIMAL as the DECIMAL ``t``, which holds each of its values exactly."""
    source = type_of(v)
    if source == t:
        return v
    if is_int(source):
        v = v.cast(INTEGER_AS_DECIMAL[source.bit_width])
    return cast_plain(v, t)


def ansi_cast(v: Value, to: pa.DataType) -> Value:
    """``CAST(v AS to)`` with Spark's ANSI rules (see the module docstring); RowFailure for
    a value Spark's cast fails on, Unsupported for a cast this module does not follow."""
    t = type_of(v)
    if t == to:
        return v
    if pa.types.is_null(t):
        return v.cast(to)
    if is_string(to):
        return to_string(v)
    if is_string(t) and t != pa.string():
        return ansi_cast(v.cast(pa.string()), to)
    if is_int(to):
        return _to_integer(v, to)
    if pa.types.is_decimal(to):
        return _to_decimal(v, to)
    if pa.types.is_floating(to):
        if is_int(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            return cast_plain(v, to, safe=False)  # rounds to nearest; beyond FLOAT: infinity
        if pa.types.is_decimal(t) and to == pa.float64():
            return to_double(v)
        raise Unsupported(f"CAST of {sql_type(t)} to {sql_type(to)}")
    if pa.types.is_boolean(to):
        if is_int(t):
            return pcx.not_equal(v, pa.scalar(0, t))
        if is_string(t):
            return python_map(v, _string_to_boolean, pa.bool_())
        raise Unsupported(f"CAST of {sql_type(t)} to BOOLEAN")
    if pa.types.is_date(to):
        if pa.types.is_timestamp(t):
            return utc(v).cast(pa.date32())  # the UTC day (floored before 1970)
        if is_string(t):
            return _parse_text(v, _DATE_TEXT, pa.date32(), "DATE", "YYYY-MM-DD")
        raise Unsupported(f"CAST of {sql_type(t)} to DATE")
    if pa.types.is_timestamp(to):
        if pa.types.is_date(t) or pa.types.is_timestamp(t):
            return utc(v).cast(to)  # the same instant, in UTC
        if is_string(t):
            zoned = getattr(to, "tz", None) is not None
            return _parse_text(v, _ZONED_TIMESTAMP_TEXT if zoned else _TIMESTAMP_TEXT, to,
                               sql_type(to), "YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]"
                               + ("[Z|+HH:MM]" if zoned else ""))
        raise Unsupported(f"CAST of {sql_type(t)} to {sql_type(to)}")
    if pa.types.is_binary(to) and is_string(t):
        return v.cast(to)
    raise Unsupported(f"CAST of {sql_type(t)} to {sql_type(to)}")


def _to_integer(v: Value, to: pa.DataType) -> Value:
    t = type_of(v)
    low, high = INTEGER_RANGES[to]
    name = sql_type(to)

    def overflow_text(value: Any) -> str:
        return f"CAST of {value!r} to {name} overflows ({low} to {high})"

    def overflow(i: int) -> str:
        return overflow_text(at(v, i))

    if pa.types.is_boolean(t):
        return v.cast(to)
    if is_int(t):
        if t.bit_width > to.bit_width:
            fail_where(pcx.or_(pcx.less(v, pa.scalar(low, t)), pcx.greater(v, pa.scalar(high, t))),
                        overflow)
        return v.cast(to)
    if pa.types.is_floating(t):
        x = cast_plain(v, pa.float64())
        # DoubleExactNumeric: floor(x) <= MAX && ceil(x) >= MIN, NaN failing both.
        ok = pcx.and_(pcx.less_equal(pcx.floor(x), float(high)),
                      pcx.greater_equal(pcx.ceil(x), float(low)))
        fail_where(pcx.invert(ok), overflow)
        # A DOUBLE equal to 2^63 passes (BIGINT's maximum is 2^63 as a DOUBLE) and Java's
        # conversion saturates it to the maximum.
        saturated = pcx.greater_equal(x, float(high) + 1.0) if to == pa.int64() else None
        out = pcx.trunc(x).cast(to, safe=False)
        if saturated is not None:
            out = pcx.if_else(saturated, pa.scalar(high, to), out)
        return out
    if pa.types.is_decimal(t):
        through_double = precision_scale(t)[0] > 18 and to != pa.int64()

        def from_decimal(d: Decimal, i: int | None) -> int:
            exact = int(d.to_integral_value(rounding=ROUND_DOWN))
            if not low <= exact <= high:
                raise RowFailure(overflow_text(d), i)
            if through_double and int(float(d)) != exact:
                # Spark may hold such a value as a BigDecimal and convert it through a DOUBLE.
                raise RowFailure(
                    f"CAST of {d} to {name}: Spark may convert it through a DOUBLE, which "
                    f"truncates to {int(float(d))}, not {exact}", i, refused=True)
            return exact
        return python_map(v, from_decimal, to)
    if is_string(t):
        return python_map(v, lambda s, i: _string_to_integer(s, i, to), to)
    raise Unsupported(f"CAST of {sql_type(t)} to {name}")


#: What Spark trims from text before reading a number, a boolean or a date from it
#: (``UTF8String.trimAll``: white space and ISO control characters of ASCII).
_TRIMMED = "".join(chr(c) for c in range(0x21)) + "\x7f"
_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _string_to_integer(s: str, i: int | None, to: pa.DataType) -> int:
    text = s.strip(_TRIMMED)
    low, high = INTEGER_RANGES[to]
    if not _INTEGER_TEXT.fullmatch(text):
        raise RowFailure(f"CAST of {s!r} to {sql_type(to)}: not an integer", i)
    value = int(text)
    if not low <= value <= high:
        raise RowFailure(f"CAST of {s!r} to {sql_type(to)} overflows ({low} to {high})", i)
    return value


def _string_to_boolean(s: str, i: int | None) -> bool:
    text = s.strip(_TRIMMED).lower()
    if text in ("t", "true", "y", "yes", "1"):
        return True
    if text in ("f", "false", "n", "no", "0"):
        return False
    raise RowFailure(f"CAST of {s!r} to BOOLEAN: not a boolean", i)


def _parse_text(v: Value, pattern: str, to: pa.DataType, name: str, form: str) -> Value:
    """Text as a DATE or TIMESTAMP: the plain forms only (``form``)."""
    trimmed = pcx.utf8_trim(v, characters=_TRIMMED)
    plain = pcx.match_substring_regex(trimmed, pattern=f"^(?:{pattern})$")
    fail_where(pcx.invert(plain), lambda i: (
        f"CAST of {at(v, i)!r} to {name}: deltacommit reads {form} (Spark's ANSI cast fails "
        "on text that is not one, and reads some other forms deltacommit does not)"),
        refused=True)
    try:
        if getattr(to, "tz", None) is None:
            return trimmed.cast(to)
        # Arrow reads a zone-less text only as a zone-less timestamp, and a zoned one only as
        # a zoned one: each kind of row is read as its kind (a zone-less text is UTC, the
        # session time zone).
        zoned = pcx.match_substring_regex(trimmed, pattern=_ZONE_TEXT + "$")
        null = pa.scalar(None, pa.string())
        with_zone = pcx.if_else(zoned, trimmed, null).cast(to)
        without = pcx.if_else(zoned, null, trimmed).cast(TIMESTAMP_NTZ).cast(to)
        return pcx.if_else(zoned, with_zone, without)
    except pa.ArrowInvalid:
        def check(s: str, i: int | None) -> None:
            zoned = re.search(_ZONE_TEXT + "$", s) is not None
            try:
                pa.scalar(s).cast(to if zoned or to == pa.date32() else TIMESTAMP_NTZ)
            except pa.ArrowInvalid:
                raise RowFailure(f"CAST of {s!r} to {name}: not a valid {name}", i) from None
        python_map(trimmed, check, pa.null())
        raise  # pragma: no cover - some row failed above


def _only_checked_decimal(v: Value, t: pa.DataType, to: pa.DataType) -> Value:
    """Integers already known to fit ``to`` as that DECIMAL (through one wide enough to
    hold them with ``to``'s scale, as Arrow's conversion asks)."""
    whole = cast_plain(v, INTEGER_AS_DECIMAL[t.bit_width])
    precision, scale = precision_scale(to)
    if precision - scale >= precision_scale(type_of(whole))[0]:
        return cast_plain(whole, to)
    wide = pa.decimal128(min(MAX_DECIMAL_PRECISION, precision_scale(type_of(whole))[0] + scale),
                         scale)
    return cast_plain(cast_plain(whole, wide), to)


#: DECIMAL values up to this precision have unscaled values that fit an int64, which the
#: vectorized conversions below compute with.
_FAST_PRECISION = 18


def _decimal_from_units(units: Any, valid: Any, to: pa.DataType) -> pa.Array[Any]:
    """A DECIMAL array of type ``to`` from unscaled int64 values (``valid``: not NULL)."""
    n = len(units)
    words = np.empty((n, 2), dtype=np.int64)
    words[:, 0] = units
    words[:, 1] = np.where(units < 0, -1, 0)  # two's complement, 128 bits little-endian
    validity = pa.array(valid, pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(to, n, [validity, pa.py_buffer(words.tobytes())],
                                 null_count=int(n - np.count_nonzero(valid)))


def _units(v: pa.Array[Any]) -> Any:
    """The unscaled values of a DECIMAL array of at most 18 digits, as int64."""
    if v.offset:
        v = pa.concat_arrays([v])
    data: Any = v.buffers()[1]
    words = np.frombuffer(memoryview(data), dtype=np.int64, count=2 * len(v)).reshape(-1, 2)
    return words[:, 0].copy()


def _overflow_row(units: Any, valid: Any, precision: int) -> int | None:
    bad = np.nonzero(valid & (np.abs(units) >= 10 ** precision))[0]
    return int(bad[0]) if len(bad) else None


def _rescaled(v: Value, to: pa.DataType) -> Value | None:
    """A DECIMAL of at most 18 digits as another, rounded HALF_UP, vectorized; None where
    the general path must do it."""
    (p0, s0), (precision, scale) = precision_scale(type_of(v)), precision_scale(to)
    if is_scalar(v) or p0 > _FAST_PRECISION or precision > _FAST_PRECISION:
        return None
    units = _units(v)
    valid = pcx.is_valid(v).to_numpy(zero_copy_only=False)
    if scale < s0:
        step = 10 ** (s0 - scale)
        q, r = np.divmod(np.abs(units), step)
        units = np.sign(units) * (q + (2 * r >= step))  # HALF_UP: away from zero
    elif scale - s0 + p0 > _FAST_PRECISION:
        return None
    else:
        units = units * 10 ** (scale - s0)
    row = _overflow_row(units, valid, precision)
    if row is not None:
        raise RowFailure(f"CAST of {at(v, row)} to {sql_type(to)} overflows: it needs more "
                          f"than {precision} digits", row)
    return _decimal_from_units(units, valid, to)


def _doubles_to_decimal(v: Value, to: pa.DataType,
                        exact: Callable[[float, int | None], Decimal | None]) -> Value | None:
    """FLOAT/DOUBLE values as a DECIMAL of at most 18 digits, vectorized: a value's shortest
    decimal text rounds HALF_UP as the value itself rounds to nearest unless the value lies
    within a few units of its last place of a midpoint; those values (and huge ones) go
    through ``exact``, Spark's rule written out.  None where the general path must do it."""
    precision, scale = precision_scale(to)
    if is_scalar(v) or precision > _FAST_PRECISION or scale > 15:
        return None
    x = pcx.fill_null(v.cast(pa.float64()), math.nan).to_numpy(zero_copy_only=False)
    valid = pcx.is_valid(v).to_numpy(zero_copy_only=False) & np.isfinite(x)
    with np.errstate(all="ignore"):
        y = np.abs(np.where(valid, x, 0.0)) * 10.0 ** scale  # within y * 2**-53 of exact
        whole = np.floor(y)
        fraction = y - whole
        # Within y * 2**-49 of a midpoint the text and the value may round apart; at 2**52
        # and beyond a DOUBLE holds no fraction digit to round.
        unsure = valid & ((np.abs(fraction - 0.5) <= y * 2.0 ** -49) | (y >= 2.0 ** 52))
        units = np.where(unsure, 0, np.sign(x) * (whole + (fraction > 0.5))).astype(np.int64)
    for i in np.nonzero(unsure)[0]:
        d = exact(float(x[i]), int(i))
        assert d is not None
        units[i] = int(d.scaleb(scale))
    row = _overflow_row(units, valid, precision)
    if row is not None:
        raise RowFailure(f"CAST of {float(x[row])!r} to {sql_type(to)} overflows: it needs "
                          f"more than {precision} digits", row)
    return _decimal_from_units(units, valid, to)


def _half_up(d: Decimal, scale: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 100
        return d.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)


def _to_decimal(v: Value, to: pa.DataType) -> Value:
    t = type_of(v)
    precision, scale = precision_scale(to)
    limit = Decimal(10) ** (precision - scale)

    def check(d: Decimal, i: int | None, source: Any) -> Decimal:
        # At least 10**(p - s) before rounding overflows however it rounds (and 1e300 would
        # need 300 digits to round).
        rounded = d if d and d.adjusted() >= precision - scale else _half_up(d, scale)
        if abs(rounded) >= limit:
            raise RowFailure(f"CAST of {source!r} to {sql_type(to)} overflows: it needs "
                              f"more than {precision} digits", i)
        return rounded

    if pa.types.is_boolean(t):
        v, t = v.cast(pa.int8()), pa.int8()
    if is_int(t):
        digits = precision - scale  # the integer digits the type holds
        high = INTEGER_RANGES[t][1]
        if 10 ** digits <= high:
            bound = 10 ** digits
            fail_where(pcx.or_(pcx.greater_equal(v, pa.scalar(bound, t)),
                                pcx.less_equal(v, pa.scalar(-bound, t))), lambda i: (
                f"CAST of {at(v, i)} to {sql_type(to)} overflows: it needs more than "
                f"{precision} digits"))
        return _only_checked_decimal(v, t, to)
    if pa.types.is_decimal(t):
        fast = _rescaled(v, to)
        if fast is not None:
            return fast
        return python_map(v, lambda d, i: check(d, i, d), to)
    if pa.types.is_floating(t):
        def from_double(x: float, i: int | None) -> Decimal | None:
            if math.isnan(x) or math.isinf(x):
                return None  # Decimal(NaN) throws NumberFormatException: NULL, even in ANSI
            return check(Decimal(repr(float(x))), i, x)
        fast = _doubles_to_decimal(v, to, from_double)
        if fast is not None:
            return fast
        return python_map(v, from_double, to)
    if is_string(t):
        def from_text(s: str, i: int | None) -> Decimal:
            text = s.strip(_TRIMMED)
            if not _DECIMAL_TEXT.fullmatch(text):
                raise RowFailure(f"CAST of {s!r} to {sql_type(to)}: not a number", i)
            try:
                return check(Decimal(text), i, s)
            except InvalidOperation:
                raise RowFailure(f"CAST of {s!r} to {sql_type(to)} overflows", i) from None
        return python_map(v, from_text, to)
    raise Unsupported(f"CAST of {sql_type(t)} to {sql_type(to)}")


_FIRST_DAY = -719162  # 0001-01-01, days from 1970-01-01
_LAST_DAY = 2932896  # 9999-12-31


def to_string(v: Value) -> Value:
    """A value as Spark's CAST to STRING writes it (ANSI mode)."""
    t = type_of(v)
    if t == pa.string():
        return v
    if is_string(t):
        return v.cast(pa.string())
    if is_int(t) or pa.types.is_boolean(t) or pa.types.is_null(t):
        return v.cast(pa.string())
    if pa.types.is_decimal(t):
        return python_map(v, lambda d, _: format(d, "f"), pa.string())  # toPlainString
    if pa.types.is_date(t):
        days = v.cast(pa.int32())
        fail_where(pcx.or_(pcx.less(days, _FIRST_DAY), pcx.greater(days, _LAST_DAY)),
                    lambda i: f"the date {at(v, i)} as text: deltacommit writes years 1 to "
                              "9999 only", refused=True)
        return v.cast(pa.string())
    raise Unsupported(f"CAST of {sql_type(t)} to STRING (Spark's text differs from Arrow's)")


def utc(v: Value) -> Value:
    """A date or timestamp's wall-clock value in UTC, as a zone-less microsecond timestamp
    (what Spark's date parts see in a UTC session)."""
    t = type_of(v)
    if pa.types.is_date(t):
        return v.cast(TIMESTAMP_NTZ)
    if getattr(t, "tz", None) is not None:
        return v.cast(pa.timestamp(t.unit)).cast(TIMESTAMP_NTZ)  # type: ignore[attr-defined]
    return cast_plain(v, TIMESTAMP_NTZ)


def to_date(v: Value) -> Value:
    t = type_of(v)
    if pa.types.is_null(t) or pa.types.is_date(t):
        return cast_plain(v, pa.date32())
    if pa.types.is_timestamp(t) or is_string(t):
        return ansi_cast(v, pa.date32())
    raise Unsupported(f"to_date of {sql_type(t)}")


def as_timestamp(v: Value) -> Value:
    """A date, timestamp or timestamp text as a zone-less timestamp in UTC."""
    t = type_of(v)
    if is_temporal(t):
        return utc(v)
    if is_string(t):
        return utc(ansi_cast(v, TIMESTAMP_LTZ))
    if pa.types.is_null(t):
        return v.cast(TIMESTAMP_NTZ)
    raise Unsupported(f"a date part of {sql_type(t)}")


def implicit_cast(v: Value, t: pa.DataType) -> Value:
    """``v`` as the common type ``t`` of its operation (Spark's implicit casts widen)."""
    source = type_of(v)
    if source == t:
        return v
    if pa.types.is_null(source):
        return v.cast(t)
    if pa.types.is_decimal(t) and (is_int(source) or pa.types.is_decimal(source)):
        return widen_decimal(v, t)
    if pa.types.is_floating(t) and is_numeric(source):
        return to_double(v) if t == pa.float64() else cast_plain(v, t, safe=False)
    if is_int(t) and is_int(source):
        return cast_plain(v, t)
    return ansi_cast(v, t)


__all__ = ["ansi_cast", "as_timestamp", "implicit_cast", "to_date", "to_double", "to_string",
           "utc", "widen_decimal"]
