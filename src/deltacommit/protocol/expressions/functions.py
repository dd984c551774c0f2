"""The functions expressions may call, over Arrow values, with Spark 4's semantics (ANSI mode,
a UTC session).  Pure.

Strings
  ``upper``/``lower`` apply Unicode's full case mapping, as Spark 4 does through ICU's root
  locale (``spark.sql.icu.caseMappings.enabled``, default true): ``upper('straße')`` is
  ``'STRASSE'``, a final sigma lowers to ``ς``.  Text holding a code point this Python's
  Unicode database does not know, or a cased letter it maps to itself (a newer Unicode, and so
  a newer ICU, may give it a partner), is refused.  ``length`` and ``substring`` count code
  points (``substring`` follows ``UTF8String.substringSQL``: 1-based, 0 counts as 1, negative
  from the end); ``trim`` removes spaces only; ``concat``/``||`` give NULL for any NULL.
Dates and times
  In UTC (the session time zone): ``year(ts)``, ``date_trunc`` and ``date_format`` read a
  TIMESTAMP's UTC wall clock, a TIMESTAMP_NTZ's own.  ``date_format`` formats the numeric
  fields ``yyyy MM dd HH mm ss`` of years 1 to 9999 only (Spark prints the year of the era).
  Weeks start on Monday.
``coalesce``
  The first non-NULL argument, in the arguments' common type (``findWiderCommonType``).
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from deltacommit.protocol.expressions.arrow_values import (
    RowFailure,
    Value,
    at,
    cast_plain,
    fail_where,
    first_true,
    is_scalar,
    pcx,
    python_map,
    type_of,
)
from deltacommit.protocol.expressions.ast import Expr, Function, Literal
from deltacommit.protocol.expressions.casts import (
    as_timestamp,
    implicit_cast,
    to_date,
    to_string,
)
from deltacommit.protocol.expressions.operators import absolute
from deltacommit.protocol.expressions.spark_types import (
    TIMESTAMP_LTZ,
    TIMESTAMP_NTZ,
    Unsupported,
    common_type,
    is_string,
    sql_type,
)

#: Spark's truncation formats (``date_trunc``, ``trunc``) and Arrow's ``floor_temporal`` units.
_TRUNC_UNITS = {"YEAR": "year", "YYYY": "year", "YY": "year", "QUARTER": "quarter",
                "MONTH": "month", "MM": "month", "MON": "month", "WEEK": "week", "DAY": "day",
                "DD": "day", "HOUR": "hour", "MINUTE": "minute", "SECOND": "second",
                "MILLISECOND": "millisecond", "MICROSECOND": "microsecond"}
_DATE_UNITS = frozenset({"year", "quarter", "month", "week"})
#: The numeric fields of Java's ``DateTimeFormatter`` patterns deltacommit formats, with the
#: Arrow kernel of each field and its width.
_JAVA_FIELDS = {("y", 4): ("year", 4), ("M", 2): ("month", 2), ("d", 2): ("day", 2),
                ("H", 2): ("hour", 2), ("m", 2): ("minute", 2), ("s", 2): ("second", 2)}


def _string_literal(node: Expr, what: str) -> str:
    if not isinstance(node, Literal) or node.kind != "string":
        raise Unsupported(f"{what} that is not a string literal")
    text: str = node.value
    return text


# --------------------------------------------------------------------------- dates and times


def _date_part(name: str, v: Value) -> Value:
    t = type_of(v)
    if name in ("year", "month", "day") and (is_string(t) or pa.types.is_date(t)):
        v = to_date(v)  # Spark casts the argument to DATE
    return cast_plain(getattr(pcx, name)(as_timestamp(v)), pa.int32())


def _pattern_parts(pattern: str) -> list[str | tuple[str, int]]:
    """A Java ``DateTimeFormatter`` pattern as literal texts and (field, width) parts, for the
    zero-padded numeric fields; anything else is unsupported."""
    out: list[str | tuple[str, int]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            j = pattern.find("'", i + 1)
            if j < 0:
                raise Unsupported(f"date_format pattern {pattern!r} has an unterminated quote")
            out.append(pattern[i + 1:j] if j > i + 1 else "'")
            i = j + 1
            continue
        if c.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == c:
                j += 1
            part = _JAVA_FIELDS.get((c, j - i))
            if part is None:
                raise Unsupported(f"date_format pattern letter {pattern[i:j]!r} (supported: "
                                  "yyyy, MM, dd, HH, mm, ss)")
            out.append(part)
            i = j
            continue
        out.append(c)
        i += 1
    return out


def _date_format(node: Function, values: Sequence[Value]) -> Value:
    parts = _pattern_parts(_string_literal(node.args[1], "date_format with a pattern"))
    ts = as_timestamp(values[0])
    year = pcx.year(ts)
    fail_where(pcx.or_(pcx.less(year, 1), pcx.greater(year, 9999)), lambda i: (
        f"date_format of {at(values[0], i)}: deltacommit formats years 1 to 9999 only"),
        refused=True)
    texts: list[Any] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(pa.scalar(part))
            continue
        kernel, width = part
        digits = (year if kernel == "year" else getattr(pcx, kernel)(ts)).cast(pa.string())
        texts.append(pcx.utf8_lpad(digits, width=width, padding="0"))
    if not texts:
        return pcx.if_else(pcx.is_valid(ts), pa.scalar(""), pa.scalar(None, pa.string()))
    if len(texts) == 1:
        return texts[0] if not is_scalar(texts[0]) else pcx.if_else(
            pcx.is_valid(ts), texts[0], pa.scalar(None, pa.string()))
    return pcx.binary_join_element_wise(*texts, "", null_handling="emit_null")


def _truncate(node: Function, values: Sequence[Value]) -> Value:
    """``date_trunc(fmt, ts)`` (a timestamp, weeks from Monday) and ``trunc(date, fmt)`` (a
    date, to a year, quarter, month or week)."""
    is_date = node.name == "trunc"
    fmt, value = (node.args[1], values[0]) if is_date else (node.args[0], values[1])
    text = _string_literal(fmt, f"{node.name} with a format")
    unit = _TRUNC_UNITS.get(text.strip().upper())
    if unit is None or (is_date and unit not in _DATE_UNITS):
        raise Unsupported(f"{node.name} to {text!r}")
    if is_date:
        days = to_date(value).cast(TIMESTAMP_NTZ)
        return pcx.floor_temporal(days, unit=unit, week_starts_monday=True).cast(pa.date32())
    t = type_of(value)
    floored = pcx.floor_temporal(as_timestamp(value), unit=unit, week_starts_monday=True)
    ntz = pa.types.is_timestamp(t) and getattr(t, "tz", None) is None
    return floored if ntz else floored.cast(TIMESTAMP_LTZ)


# --------------------------------------------------------------------------- strings


def _substring(node: Function, values: Sequence[Value]) -> Value:
    """Spark's ``substring(s, pos[, len])`` (``UTF8String.substringSQL``): 1-based, 0
    counts as 1, negative from the end; Arrow slices by code point, as Spark counts."""
    numbers: list[int] = []
    for a in node.args[1:]:
        if not (isinstance(a, Literal) and a.kind == "int" and a.type == pa.int32()):
            raise Unsupported("substring with a position or length that is not an INT literal")
        numbers.append(a.value)
    pos, length = numbers[0], (numbers[1] if len(numbers) > 1 else None)
    s = to_string(values[0])
    if length is not None and length <= 0:
        return pcx.if_else(pcx.is_valid(s), pa.scalar("", type_of(s)), pa.scalar(None, type_of(s)))
    start = pos - 1 if pos > 0 else pos
    if length is None:
        stop = None
    elif pos >= 0:
        stop = start + length
    else:
        stop = None if pos + length >= 0 else pos + length
    return pcx.utf8_slice_codeunits(s, start=start, stop=stop)


_CASED = frozenset({"Lu", "Ll", "Lt"})


@functools.lru_cache(maxsize=4096)
def _unmappable(c: str, upper: bool) -> str | None:
    """Why ``c`` may map otherwise in the Unicode of Spark's ICU (None if it may not)."""
    category = unicodedata.category(c)
    if category == "Cn":
        return "is not in"
    same = (c.upper() if upper else c.lower()) == c
    if category in _CASED and same and category != ("Lu" if upper else "Ll"):
        return "has no case partner in"
    return None


def _case_mapped(text: str, upper: bool, row: int | None) -> str:
    for c in dict.fromkeys(text):
        if c.isascii():
            continue
        why = _unmappable(c, upper)
        if why is not None:
            raise RowFailure(
                f"{'upper' if upper else 'lower'} of {text!r}: {c!r} (U+{ord(c):04X}) {why} "
                f"the Unicode {unicodedata.unidata_version} this Python knows, and a newer "
                "Unicode (ICU, which Spark uses) may map it", row, refused=True)
    return text.upper() if upper else text.lower()


def _case_map(v: Value, upper: bool) -> Value:
    """``upper``/``lower``: ASCII text through Arrow, other text through Python's full Unicode
    case mapping (the mapping ICU's root locale applies), each distinct text once."""
    s = to_string(v)
    ascii_text = pcx.string_is_ascii(s)
    mapped = pcx.ascii_upper(s) if upper else pcx.ascii_lower(s)
    if first_true(pcx.invert(ascii_text)) is None:
        return mapped
    if is_scalar(s):
        return python_map(s, lambda text, i: _case_mapped(text, upper, i), pa.string())
    other = pcx.fill_null(pcx.invert(ascii_text), False)
    rows = np.nonzero(other.to_numpy(zero_copy_only=False))[0]
    encoded = pcx.dictionary_encode(s.take(pa.array(rows, pa.int64())))
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    # Distinct texts in the order they first appear, so the first to fail is the first row's.
    first = np.unique(indices, return_index=True)[1]
    converted = pa.array([_case_mapped(text, upper, int(rows[first[k]]))
                          for k, text in enumerate(encoded.dictionary.to_pylist())], pa.string())
    return pcx.replace_with_mask(mapped, other, converted.take(encoded.indices))


def lower(v: Value) -> Value:
    """Spark's ``lower`` of a value (ILIKE lowers what it matches with it)."""
    return _case_map(v, False)


def lower_text(text: str) -> str:
    """Spark's ``lower`` of a constant text (an ILIKE pattern); a refused text fails for every
    row."""
    return _case_mapped(text, False, None)


def _concat(values: Sequence[Value]) -> Value:
    strings = [to_string(v) for v in values]
    if len(strings) == 1:
        return strings[0]
    return pcx.binary_join_element_wise(*strings, "", null_handling="emit_null")


def _length(values: Sequence[Value]) -> Value:
    if not is_string(type_of(values[0])):
        raise Unsupported(f"length of {sql_type(type_of(values[0]))}")
    return pcx.utf8_length(values[0])


def _trim(kernel: str) -> Callable[[Function, Sequence[Value]], Value]:
    return lambda node, values: getattr(pcx, kernel)(to_string(values[0]), characters=" ")


def _coalesce(node: Function, values: Sequence[Value]) -> Value:
    t = common_type([type_of(v) for v in values], "coalesce")
    return pcx.coalesce(*[implicit_cast(v, t) for v in values])


def _part(name: str) -> Callable[[Function, Sequence[Value]], Value]:
    return lambda node, values: _date_part(name, values[0])


#: The implementation of each function (by its canonical name).
_IMPLEMENTATIONS: dict[str, Callable[[Function, Sequence[Value]], Value]] = {
    **{name: _part(name) for name in ("year", "month", "day", "hour", "minute", "second")},
    "abs": lambda node, values: absolute(values[0]),
    "to_date": lambda node, values: to_date(values[0]),
    "date_format": _date_format,
    "date_trunc": _truncate,
    "trunc": _truncate,
    "substring": _substring,
    "length": lambda node, values: _length(values),
    "concat": lambda node, values: _concat(values),
    "lower": lambda node, values: _case_map(values[0], False),
    "upper": lambda node, values: _case_map(values[0], True),
    "trim": _trim("utf8_trim"),
    "ltrim": _trim("utf8_ltrim"),
    "rtrim": _trim("utf8_rtrim"),
    "coalesce": _coalesce,
}

#: Functions Spark evaluates the later arguments of only where the first is not NULL
#: (``BinaryExpression.nullSafeEval`` and its generated code).
NULL_INTOLERANT = frozenset({"date_trunc", "trunc", "date_format"})


def call(node: Function, values: Sequence[Value]) -> Value:
    """The value of the function call ``node`` with its arguments' ``values``."""
    implementation = _IMPLEMENTATIONS.get(node.name)
    if implementation is None:
        raise Unsupported(f"function {node.name}")
    return implementation(node, values)


__all__ = ["NULL_INTOLERANT", "call", "lower", "lower_text"]
