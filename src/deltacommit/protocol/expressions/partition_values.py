"""Predicates decided over partition values: the second interpretation of the expression
AST.  Pure.

The conflict checker asks of every file a concurrent writer added "could this file's partition
values match?", and a scan asks it of every file of a snapshot, so the answer is computed from
the *serialized* values straight from ``add.partitionValues``, compared with the semantics of
the column's type (integers numerically, dates and timestamps in time, strings by code point,
floats in Spark's order: NaN equal to NaN and above every number).  NULL follows SQL's
three-valued logic: a comparison with NULL is unknown, ``NOT`` unknown is unknown, and a
predicate matches only when it is TRUE.

A predicate becomes, once per set of column types, a *program*: nested closures from a mapping of
partition values to TRUE, FALSE or None (unknown).  Each AST node builds its own program with a
``PartitionPrograms`` (the nodes know their shape, this module knows the values), so this module
needs none of the node classes.  A partition value string is parsed once per distinct string.

Only predicates over partition columns have such a program: comparisons of a column with a
literal, ``IN`` lists of literals, ``IS [NOT] NULL``, ``[NOT] LIKE`` on a STRING column,
``AND``/``OR``/``NOT`` and constants.
"""

from __future__ import annotations

import datetime as dt
import math
import operator
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn, Protocol, TypeAlias

import pyarrow as pa

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.like import Parts, matcher
from deltacommit.protocol.expressions.sql_semantics import float_order_key
from deltacommit.protocol.partitions import (
    format_timestamp_us,
    parse_partition_value,
    parse_timestamp_us,
    value_kind,
)

Truth: TypeAlias = bool | None  # None: SQL's unknown
Values: TypeAlias = Mapping[str, str | None]
Types: TypeAlias = Mapping[str, pa.DataType]
Program: TypeAlias = Callable[[Values], Truth]

_US_PER_DAY = 86_400_000_000
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)
_VALUE_CACHE_LIMIT = 10_000

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge}


class LiteralValue(Protocol):
    """What this module reads of a literal node."""

    @property
    def kind(self) -> str: ...

    @property
    def value(self) -> Any: ...

    def to_sql(self) -> str: ...


class Printable(Protocol):
    def to_sql(self) -> str: ...


def datetime_us(v: dt.datetime) -> int:
    """Microseconds since the epoch; a naive datetime is a wall clock in UTC."""
    delta = v - _EPOCH_UTC if v.tzinfo is not None else v - _EPOCH
    return delta // dt.timedelta(microseconds=1)


def exact_text(v: int | Decimal | float) -> str:
    """A number's exact value as plain text (``1000`` for ``1e3``, ``0.1`` for ``0.1``)."""
    d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    if d == d.to_integral_value():
        return str(int(d))
    return format(d, "f")


def literal_text(literal: LiteralValue) -> str:
    """A non-string literal as the text a string column compares it with."""
    k, v = literal.kind, literal.value
    if k == "int":
        return str(v)
    if k == "decimal":
        return format(v, "f")
    if k == "double":
        return exact_text(v)
    if k == "bool":
        return "true" if v else "false"
    if k == "date":
        return str(v.isoformat())
    return format_timestamp_us(datetime_us(v))


def in_type(v: float, t: pa.DataType) -> float:
    """``v`` as a value of the floating type ``t``: rounded to the nearest FLOAT for a FLOAT
    (infinity beyond its range)."""
    if t != pa.float32() or v != v:
        return v
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", v))[0]
        return rounded
    except OverflowError:
        return math.copysign(math.inf, v)


def _date_days(d: dt.date) -> int:
    return (d - _EPOCH_DATE).days


class _Incomparable(Exception):
    """A literal that cannot be compared with a column of some type."""


#: How a column's value meets a literal's key: as itself, in microseconds (a date beside a
#: timestamp, at midnight) or as a DOUBLE (an integer or decimal beside a DOUBLE literal).
_PLAIN, _MICROS, _DOUBLE = "plain", "micros", "double"


def _string_key(v: str, kind: str, t: pa.DataType) -> tuple[Any, str]:
    """The key of a string literal for a column of ``kind``: the text read as the column's
    type (a string literal takes the type of the column it meets)."""
    if kind == "int" or kind == "decimal":
        d = Decimal(v.strip())
        if not d.is_finite():
            raise _Incomparable
        return (int(d) if kind == "int" and d == d.to_integral_value() else d), _PLAIN
    if kind == "float":
        return float_order_key(in_type(float(v), t)), _PLAIN
    if kind == "bool":
        if v.strip().lower() in ("true", "false"):
            return v.strip().lower() == "true", _PLAIN
        raise _Incomparable
    if kind == "date":
        text = v.strip()
        if len(text) == 10:
            return _date_days(dt.date.fromisoformat(text)), _PLAIN
        return parse_timestamp_us(text)[0], _MICROS
    if kind == "timestamp":
        return parse_timestamp_us(v)[0], _PLAIN
    if kind == "binary":
        # The literal's text as UTF-8 bytes, as the evaluator casts it: not read as a
        # serialized partition value, whose ``\uXXXX`` escapes and empty text (NULL) would
        # make ``p = '\u0061'`` match b'a' and ``p <> ''`` match nothing.
        return v.encode("utf-8"), _PLAIN
    raise _Incomparable


def _literal_key(literal: LiteralValue, kind: str, t: pa.DataType) -> tuple[Any, str]:
    """The comparison key of ``literal`` against a column of kind ``kind``, and how the
    column's value must meet it; _Incomparable if it cannot."""
    k, v = literal.kind, literal.value
    if k == "null":
        return None, _PLAIN
    try:
        if kind == "string":
            return (v if k == "string" else literal_text(literal)), _PLAIN
        if k == "string":
            return _string_key(v, kind, t)
        if kind in ("int", "decimal") and k in ("int", "decimal"):
            return v, _PLAIN
        if kind in ("int", "decimal") and k == "double":
            return float(v), _DOUBLE  # as Spark: both sides as a DOUBLE
        if kind == "float" and k in ("int", "decimal", "double"):
            return (0, float(v)), _PLAIN  # a number meets a FLOAT or DOUBLE column as a DOUBLE
        if kind == "bool" and k == "bool":
            return v, _PLAIN
        if kind == "date" and k == "date":
            return _date_days(v), _PLAIN
        if kind == "date" and k == "timestamp":
            return datetime_us(v), _MICROS
        if kind == "timestamp" and k == "timestamp":
            return datetime_us(v), _PLAIN
        if kind == "timestamp" and k == "date":
            return _date_days(v) * _US_PER_DAY, _PLAIN
    except (ValueError, ArithmeticError, InvalidArgumentError):
        pass
    raise _Incomparable


def _parse_bool(s: str) -> bool:
    low = s.lower()
    if low not in ("true", "false"):
        raise ValueError("expected true or false")
    return low == "true"


def _value_parser(kind: str, t: pa.DataType, column: str) -> Callable[[str], Any]:
    """Serialized partition value -> comparison key, for a column of this kind."""
    if kind == "string":
        return lambda s: s
    if kind == "int":
        return int
    if kind == "float":
        # A FLOAT partition value is written as the shortest text that reads back as the
        # same FLOAT; its value, which Spark compares, is that FLOAT, not the DOUBLE of the text.
        return lambda s: float_order_key(in_type(float(s), t))
    if kind == "decimal":
        return Decimal
    if kind == "bool":
        return _parse_bool
    if kind == "date":
        return lambda s: _date_days(dt.date.fromisoformat(s.strip()[:10]))
    if kind == "timestamp":
        return lambda s: parse_timestamp_us(s, what="partition value")[0]
    if kind == "binary":
        return lambda s: parse_partition_value(s, t)
    raise InvalidArgumentError(f"column {column!r} has type {t}, which predicates cannot compare")


def _column_reader(column: str, t: pa.DataType) -> Callable[[Values], Any]:
    """values -> comparison key of the column's value, None for null; cached per distinct string."""
    parse = _value_parser(value_kind(t), t, column)
    cache: dict[str, Any] = {}

    def read(values: Values) -> Any:
        s = values.get(column)
        if s is None or s == "":
            return None
        try:
            return cache[s]
        except KeyError:
            pass
        try:
            key = parse(s)
        except (ValueError, ArithmeticError, InvalidOperation) as e:
            raise InvalidArgumentError(
                f"partition value {s!r} of column {column!r} is not a valid {t} value: {e}") from None
        if len(cache) >= _VALUE_CACHE_LIMIT:
            cache.clear()
        cache[s] = key
        return key

    return read


def _as_double(v: Any) -> float:
    """An integer or decimal value as the DOUBLE Spark converts it to (rounded to nearest)."""
    return float(v)


class PartitionPrograms:
    """Builds the program of each node of a predicate for one mapping of column types."""

    def __init__(self, types: Types) -> None:
        self.types = types

    def _type(self, column: str) -> pa.DataType:
        return self.types[column]

    @staticmethod
    def constant(value: Truth) -> Program:
        return lambda values: value

    @staticmethod
    def _incomparable(node: Printable, column: str, t: pa.DataType, literal: LiteralValue
                      ) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"predicate {node.to_sql()!r} compares column {column!r} of type {t} with "
            f"{literal.to_sql()}, which is not a value of that type")

    def comparison(self, node: Printable, column: str, op: str, literal: LiteralValue) -> Program:
        t = self._type(column)
        read = _column_reader(column, t)
        try:
            key, mode = _literal_key(literal, value_kind(t), t)
        except _Incomparable:
            raise self._incomparable(node, column, t, literal) from None
        if key is None:
            return self.constant(None)
        fn = OPERATORS[op]
        if mode == _MICROS:  # a date column against a timestamp: at midnight, in microseconds
            def compare_days(values: Values) -> Truth:
                v = read(values)
                return None if v is None else fn(v * _US_PER_DAY, key)
            return compare_days
        if mode == _DOUBLE:
            def compare_double(values: Values) -> Truth:
                v = read(values)
                return None if v is None else fn(_as_double(v), key)
            return compare_double

        def compare_value(values: Values) -> Truth:
            v = read(values)
            return None if v is None else fn(v, key)
        return compare_value

    def member(self, node: Printable, column: str, literals: Sequence[LiteralValue],
               negated: bool) -> Program:
        """``column [NOT] IN (literals)``: NULL when the column is NULL, or when no literal is
        equal and one is NULL."""
        t = self._type(column)
        read = _column_reader(column, t)
        keys: set[Any] = set()
        doubles: set[float] = set()
        has_null = False
        for literal in literals:
            try:
                key, mode = _literal_key(literal, value_kind(t), t)
            except _Incomparable:
                raise self._incomparable(node, column, t, literal) from None
            if key is None:
                has_null = True
            elif mode == _MICROS:
                if key % _US_PER_DAY == 0:  # a timestamp equals a date only at midnight
                    keys.add(key // _US_PER_DAY)
            elif mode == _DOUBLE:
                doubles.add(key)
            else:
                keys.add(key)
        frozen, frozen_doubles = frozenset(keys), frozenset(doubles)

        def member(values: Values) -> Truth:
            v = read(values)
            if v is None:
                return None
            if v in frozen or (frozen_doubles and _as_double(v) in frozen_doubles):
                return not negated
            return None if has_null else negated
        return member

    def like(self, node: Printable, column: str, parts: Parts | None, negated: bool) -> Program:
        """``column [NOT] LIKE pattern`` over a STRING column's values (NULL for a NULL value
        or pattern).  Spark casts another type's value to its text, which the serialized
        partition value need not be: such a column is not decided here."""
        t = self._type(column)
        if value_kind(t) != "string":
            self.unsupported(node, f"column {column!r} is of type {t}, not a string")
        if parts is None:
            return self.constant(None)
        match = matcher(parts)

        def like(values: Values) -> Truth:
            s = values.get(column)
            if s is None or s == "":  # an empty partition value is NULL
                return None
            return match(s) != negated
        return like

    @staticmethod
    def is_null(column: str, negated: bool) -> Program:
        def is_null(values: Values) -> Truth:
            s = values.get(column)
            return (s is None or s == "") != negated
        return is_null

    @staticmethod
    def negation(child: Program) -> Program:
        def negate(values: Values) -> Truth:
            r = child(values)
            return None if r is None else not r
        return negate

    @staticmethod
    def junction(children: Sequence[Program], decisive: bool) -> Program:
        """AND (``decisive`` FALSE: any FALSE child decides) or OR (any TRUE child decides),
        unknown when no child decides and one is unknown."""
        def junction(values: Values) -> Truth:
            unknown = False
            for child in children:
                r = child(values)
                if r is decisive:
                    return decisive
                if r is None:
                    unknown = True
            return None if unknown else not decisive
        return junction

    @staticmethod
    def unsupported(node: Printable, why: str) -> NoReturn:
        raise InvalidArgumentError(
            f"predicate {node.to_sql()!r} cannot be decided from partition values: {why}")


__all__ = ["OPERATORS", "LiteralValue", "PartitionPrograms", "Program", "Truth", "Types",
           "Values", "datetime_us", "exact_text", "in_type", "literal_text"]
