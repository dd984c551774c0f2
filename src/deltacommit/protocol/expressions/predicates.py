"""Predicates over partition columns: a small SQL subset and deltalake's partition filters.  Pure.

A predicate says which partitions a transaction read or overwrites.  The conflict checker asks of
every file a concurrent writer added "could this file's partition values match?", so evaluation
takes the *serialized* partition values straight from ``add.partitionValues`` and compares them
with the semantics of the column's type (integers numerically, dates and timestamps in time,
strings by code point).  Nulls follow SQL's three-valued logic: a comparison with null is unknown,
``NOT`` unknown is unknown, and a predicate matches only when it is true.  Float NaN equals NaN
and sorts above every number, as in Spark.

A predicate is compiled once per set of column types into nested closures; partition value
strings are parsed once per distinct string.

Grammar (keywords are case-insensitive)::

    expr       := or
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | primary
    primary    := "(" expr ")" | TRUE | FALSE
                | operand ( cmp operand | ["NOT"] "IN" "(" literal ("," literal)* ")"
                          | "IS" ["NOT"] "NULL" | ["NOT"] "BETWEEN" literal "AND" literal )
    cmp        := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    operand    := identifier | literal        (exactly one side of a comparison is a column)
    literal    := 'string' (with '' for a quote) | [-+]number | TRUE | FALSE | NULL
                | DATE 'YYYY-MM-DD' | TIMESTAMP 'YYYY-MM-DD HH:MM:SS[.ffffff][Z|+hh:mm]'
    identifier := name | "double quoted" | `backticked`
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import operator
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar, TypeAlias

import pyarrow as pa

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.sql_semantics import (
    MAX_DECIMAL_PRECISION,
    LiteralError,
    float_order_key,
    parse_date_literal,
    parse_number,
    parse_timestamp_literal,
)
from deltacommit.protocol.partitions import (
    format_timestamp_us,
    parse_partition_value,
    parse_timestamp_us,
)

Truth: TypeAlias = bool | None  # None: SQL's unknown
Values: TypeAlias = Mapping[str, str | None]
Types: TypeAlias = Mapping[str, pa.DataType]
_Eval: TypeAlias = Callable[[Values], Truth]

_US_PER_DAY = 86_400_000_000
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)
_VALUE_CACHE_LIMIT = 10_000

KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "DATE", "TIMESTAMP",
                      "BETWEEN"})
COMPARISON_OPS = ("=", "!=", "<", "<=", ">", ">=")
_OP_ALIASES = {"==": "=", "<>": "!="}
_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_OP_FUNCS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge}


# --------------------------------------------------------------------------- literals


@dataclass(frozen=True, slots=True)
class Literal:
    """A typed SQL literal.  ``kind`` is one of null, bool, int, decimal, string, date, timestamp.

    Numbers are exact: integral values are ``int`` and others ``Decimal``, so a float from
    partition filters compares exactly as it was written.  A timestamp is a ``datetime``: naive, or
    aware in UTC.
    """

    kind: str
    value: Any

    KINDS: ClassVar[frozenset[str]] = frozenset(
        {"null", "bool", "int", "decimal", "string", "date", "timestamp"})

    def to_sql(self) -> str:
        k, v = self.kind, self.value
        if k == "null":
            return "NULL"
        if k == "bool":
            return "TRUE" if v else "FALSE"
        if k in ("int", "decimal"):
            text = str(v) if k == "int" else format(v, "f")
            if sum(c.isdigit() for c in text) <= MAX_DECIMAL_PRECISION:
                return text
            # Beyond a DECIMAL literal (which Spark's parser refuses): a DOUBLE literal, as
            # the value of a float from partition filters (1e300) was before it.
            return format(Decimal(v).normalize(), "E")
        if k == "string":
            return "'" + str(v).replace("'", "''") + "'"
        if k == "date":
            return f"DATE '{v.isoformat()}'"
        zone = "Z" if v.tzinfo is not None else ""
        return f"TIMESTAMP '{format_timestamp_us(_datetime_us(v))}{zone}'"


NULL = Literal("null", None)


def _datetime_us(v: dt.datetime) -> int:
    delta = v - _EPOCH_UTC if v.tzinfo is not None else v - _EPOCH
    return delta // dt.timedelta(microseconds=1)


_MAX_EXPONENT = 1000


def _number_literal(d: Decimal) -> Literal:
    if not d.is_finite():
        raise InvalidArgumentError(f"number {d} is not finite")
    if d and not -_MAX_EXPONENT <= d.adjusted() <= _MAX_EXPONENT:
        raise InvalidArgumentError(f"number {d} is out of range (exponent beyond +-{_MAX_EXPONENT})")
    if d == d.to_integral_value():
        return Literal("int", int(d))
    return Literal("decimal", d)


def lit(value: object) -> Literal:
    """The literal for a Python value (None, bool, int, float, Decimal, str, date, datetime)."""
    if isinstance(value, Literal):
        return value
    if value is None:
        return NULL
    if isinstance(value, bool):
        return Literal("bool", value)
    if isinstance(value, int):
        if value.bit_length() > 3 * _MAX_EXPONENT:  # str() of it fails past 4,300 digits
            raise InvalidArgumentError(
                f"integer of {value.bit_length()} bits is out of range (exponent beyond "
                f"+-{_MAX_EXPONENT})")
        return Literal("int", value)
    if isinstance(value, float):
        if value != value:
            return Literal("string", "NaN")  # coerced to NaN for float columns
        if value in (float("inf"), float("-inf")):
            return Literal("string", "Infinity" if value > 0 else "-Infinity")
        return _number_literal(Decimal(repr(value)))
    if isinstance(value, Decimal):
        return _number_literal(value)
    if isinstance(value, str):
        return Literal("string", value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return Literal("timestamp", value)
    if isinstance(value, dt.date):
        return Literal("date", value)
    raise InvalidArgumentError(f"unsupported literal {value!r} of type {type(value).__name__}; use None, "
                               "bool, int, float, Decimal, str, datetime.date or datetime.datetime")


# --------------------------------------------------------------------------- column domains


def _kind_of(t: pa.DataType) -> str:
    types = pa.types
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return "string"
    if types.is_boolean(t):
        return "bool"
    if types.is_integer(t):
        return "int"
    if types.is_floating(t):
        return "float"
    if types.is_decimal(t):
        return "decimal"
    if types.is_date(t):
        return "date"
    if types.is_timestamp(t):
        return "timestamp"
    if types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t):
        return "binary"
    return ""


def _in_type(v: float, t: pa.DataType) -> float:
    """``v`` as a value of the floating type ``t``: rounded to the nearest FLOAT for a FLOAT
    (infinity beyond its range)."""
    if t != pa.float32() or v != v:
        return v
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", v))[0]
        return rounded
    except OverflowError:
        return math.copysign(math.inf, v)


def _float_key(v: float | Decimal | int) -> tuple[int, Any]:
    """Spark's order of DOUBLE values (NaN equal to NaN, above everything else)."""
    return float_order_key(v)


class _Incomparable(Exception):
    """A literal that cannot be compared with a column of some type."""


def _date_days(d: dt.date) -> int:
    return (d - _EPOCH_DATE).days


def _literal_key(literal: Literal, kind: str, t: pa.DataType) -> tuple[Any, bool]:
    """The comparison key of ``literal`` against a column of kind ``kind``, and whether the
    comparison must happen in microseconds (a date column against a timestamp)."""
    k, v = literal.kind, literal.value
    if k == "null":
        return None, False
    try:
        if kind == "string":
            if k in ("string", "int"):
                return str(v), False
            if k == "decimal":
                return format(v, "f"), False
            if k == "bool":
                return ("true" if v else "false"), False
            if k == "date":
                return v.isoformat(), False
            return format_timestamp_us(_datetime_us(v)), False
        if kind == "int":
            if k in ("int", "decimal"):
                return v, False
            if k == "string":
                d = Decimal(v.strip())
                return (int(d) if d == d.to_integral_value() else d), False
        elif kind == "float":
            if k in ("int", "decimal"):
                # As Spark: a number meets a FLOAT or DOUBLE column as a DOUBLE.
                return (0, float(v)), False
            if k == "string":
                # A string literal takes the column's type: a FLOAT's is rounded to one.
                return _float_key(_in_type(float(v), t)), False
        elif kind == "decimal":
            if k in ("int", "decimal"):
                return Decimal(v), False
            if k == "string":
                d = Decimal(v.strip())
                if d.is_finite():
                    return d, False
        elif kind == "bool":
            if k == "bool":
                return v, False
            if k == "string" and v.strip().lower() in ("true", "false"):
                return v.strip().lower() == "true", False
        elif kind == "date":
            if k == "date":
                return _date_days(v), False
            if k == "timestamp":
                return _datetime_us(v), True
            if k == "string":
                text = v.strip()
                if len(text) == 10:
                    return _date_days(dt.date.fromisoformat(text)), False
                return parse_timestamp_us(text)[0], True
        elif kind == "timestamp":
            if k == "timestamp":
                return _datetime_us(v), False
            if k == "date":
                return _date_days(v) * _US_PER_DAY, False
            if k == "string":
                return parse_timestamp_us(v)[0], False
        elif kind == "binary" and k == "string":
            return parse_partition_value(v, t), False
    except (ValueError, ArithmeticError, InvalidArgumentError):
        pass
    raise _Incomparable


def _value_parser(kind: str, t: pa.DataType, column: str) -> Callable[[str], Any]:
    """Serialized partition value -> comparison key, for a column of this kind."""
    if kind == "string":
        return lambda s: s
    if kind == "int":
        return int
    if kind == "float":
        # A FLOAT partition value is written as the shortest text that reads back as the
        # same FLOAT; its value, which Spark compares, is that FLOAT, not the DOUBLE of the text.
        return lambda s: _float_key(_in_type(float(s), t))
    if kind == "decimal":
        return Decimal
    if kind == "bool":
        def parse_bool(s: str) -> bool:
            low = s.lower()
            if low not in ("true", "false"):
                raise ValueError("expected true or false")
            return low == "true"
        return parse_bool
    if kind == "date":
        return lambda s: _date_days(dt.date.fromisoformat(s.strip()[:10]))
    if kind == "timestamp":
        return lambda s: parse_timestamp_us(s, what="partition value")[0]
    if kind == "binary":
        return lambda s: parse_partition_value(s, t)
    raise InvalidArgumentError(f"column {column!r} has type {t}, which predicates cannot compare")


def _column_reader(column: str, t: pa.DataType) -> Callable[[Values], Any]:
    """values -> comparison key of the column's value, None for null; cached per distinct string."""
    kind = _kind_of(t)
    parse = _value_parser(kind, t, column)
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


# --------------------------------------------------------------------------- predicates


def _quote_ident(name: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and name.upper() not in KEYWORDS:
        return name
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class Predicate:
    """Base of all predicates: immutable, hashable, comparable by structure."""

    _compiled: dict[tuple[tuple[str, pa.DataType], ...], _Eval] = field(
        default_factory=dict, init=False, compare=False, hash=False, repr=False)
    # The last compilation and the exact mapping and type objects it was made for: callers pass
    # the same types mapping for every file, so identity checks skip hashing Arrow types.
    _last: list[Any] = field(default_factory=list, init=False, compare=False, hash=False, repr=False)

    def columns(self) -> frozenset[str]:
        """The columns the predicate references."""
        return self._columns

    @functools.cached_property
    def _columns(self) -> frozenset[str]:
        return frozenset(self._column_iter())

    def _column_iter(self) -> Iterable[str]:
        return ()

    def to_sql(self) -> str:
        raise NotImplementedError

    def _compile(self, types: Types) -> _Eval:
        raise NotImplementedError

    @functools.cached_property
    def _sorted_columns(self) -> tuple[str, ...]:
        return tuple(sorted(self.columns()))

    def compile(self, types: Types) -> _Eval:
        """A function of partition values giving True, False or None (unknown)."""
        last = self._last[0] if self._last else None  # one tuple: read atomically
        if last is not None and last[0] is types:
            for c, t in last[1]:
                if types.get(c) is not t:
                    break
            else:
                fn: _Eval = last[2]
                return fn
        cols = self._sorted_columns
        missing = [c for c in cols if c not in types]
        if missing:
            raise InvalidArgumentError(
                f"predicate {self.to_sql()!r} references {missing}, for which no column type is known "
                f"(known: {sorted(types)})")
        key = tuple((c, types[c]) for c in cols)
        found = self._compiled.get(key)
        if found is None:
            found = self._compile(types)
            self._compiled[key] = found
        self._last[:] = [(types, tuple((c, types[c]) for c in cols), found)]
        return found

    def evaluate(self, values: Values, types: Types) -> bool:
        """Whether partition values (serialized strings, None or '' for null) make it true."""
        return self.compile(types)(values) is True

    def check_columns(self, partition_columns: Sequence[str], table: str) -> None:
        """Refuse a predicate that references columns other than the partition columns."""
        unknown = sorted(self.columns() - set(partition_columns))
        if unknown:
            which = ", ".join(repr(c) for c in unknown)
            parts = (f"the partition columns are {list(partition_columns)}" if partition_columns
                     else "the table is not partitioned")
            raise InvalidArgumentError(
                f"predicate {self.to_sql()!r} on table {table} references {which}, which "
                f"{'is not a partition column' if len(unknown) == 1 else 'are not partition columns'}; "
                f"{parts}")

    def __str__(self) -> str:
        return self.to_sql()

    # Pickle (and deepcopy) the structure only: compiled closures are caches, not state.
    def __getstate__(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_compiled", {})
        object.__setattr__(self, "_last", [])


@dataclass(frozen=True)
class Constant(Predicate):
    value: bool

    def to_sql(self) -> str:
        return "TRUE" if self.value else "FALSE"

    def _compile(self, types: Types) -> _Eval:
        v = self.value
        return lambda values: v


TRUE = Constant(True)
FALSE = Constant(False)


def _compile_error(p: Predicate, column: str, t: pa.DataType, literal: Literal) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"predicate {p.to_sql()!r} compares column {column!r} of type {t} with {literal.to_sql()}, "
        "which is not a value of that type")


@dataclass(frozen=True)
class Comparison(Predicate):
    column: str
    op: str
    literal: Literal

    def __post_init__(self) -> None:
        if self.op not in _OP_FUNCS:
            raise InvalidArgumentError(f"unknown comparison {self.op!r}; use one of {list(COMPARISON_OPS)}")

    def _column_iter(self) -> Iterable[str]:
        return (self.column,)

    def to_sql(self) -> str:
        return f"{_quote_ident(self.column)} {self.op} {self.literal.to_sql()}"

    def _compile(self, types: Types) -> _Eval:
        t = types[self.column]
        kind = _kind_of(t)
        read = _column_reader(self.column, t)
        try:
            key, in_micros = _literal_key(self.literal, kind, t)
        except _Incomparable:
            raise _compile_error(self, self.column, t, self.literal) from None
        if key is None:
            return lambda values: None
        fn = _OP_FUNCS[self.op]

        if in_micros:  # date column against a timestamp: compare at midnight in microseconds
            def compare_days(values: Values) -> Truth:
                v = read(values)
                return None if v is None else fn(v * _US_PER_DAY, key)
            return compare_days

        def compare_value(values: Values) -> Truth:
            v = read(values)
            return None if v is None else fn(v, key)
        return compare_value


@dataclass(frozen=True)
class InList(Predicate):
    column: str
    literals: tuple[Literal, ...]
    negated: bool = False

    def __post_init__(self) -> None:
        if not self.literals:
            raise InvalidArgumentError(f"IN list for column {self.column!r} is empty")

    def _column_iter(self) -> Iterable[str]:
        return (self.column,)

    def to_sql(self) -> str:
        items = ", ".join(x.to_sql() for x in self.literals)
        return f"{_quote_ident(self.column)} {'NOT IN' if self.negated else 'IN'} ({items})"

    def _compile(self, types: Types) -> _Eval:
        t = types[self.column]
        kind = _kind_of(t)
        read = _column_reader(self.column, t)
        keys: set[Any] = set()
        has_null = False
        for literal in self.literals:
            try:
                key, in_micros = _literal_key(literal, kind, t)
            except _Incomparable:
                raise _compile_error(self, self.column, t, literal) from None
            if key is None:
                has_null = True
            elif in_micros:
                if key % _US_PER_DAY == 0:  # a timestamp equals a date only at midnight
                    keys.add(key // _US_PER_DAY)
            else:
                keys.add(key)
        frozen = frozenset(keys)
        negated = self.negated

        def member(values: Values) -> Truth:
            v = read(values)
            if v is None:
                return None
            if v in frozen:
                return not negated
            return None if has_null else negated
        return member


@dataclass(frozen=True)
class IsNull(Predicate):
    column: str
    negated: bool = False

    def _column_iter(self) -> Iterable[str]:
        return (self.column,)

    def to_sql(self) -> str:
        return f"{_quote_ident(self.column)} IS {'NOT NULL' if self.negated else 'NULL'}"

    def _compile(self, types: Types) -> _Eval:
        column, negated = self.column, self.negated

        def is_null(values: Values) -> Truth:
            s = values.get(column)
            return (s is None or s == "") != negated
        return is_null


@dataclass(frozen=True)
class Not(Predicate):
    child: Predicate

    def _column_iter(self) -> Iterable[str]:
        return self.child.columns()

    def to_sql(self) -> str:
        inner = self.child.to_sql()
        return f"NOT ({inner})" if isinstance(self.child, And | Or) else f"NOT {inner}"

    def _compile(self, types: Types) -> _Eval:
        child = self.child.compile(types)

        def negate(values: Values) -> Truth:
            r = child(values)
            return None if r is None else not r
        return negate


@dataclass(frozen=True)
class And(Predicate):
    children: tuple[Predicate, ...]

    def _column_iter(self) -> Iterable[str]:
        return (c for p in self.children for c in p.columns())

    def to_sql(self) -> str:
        return " AND ".join(f"({p.to_sql()})" if isinstance(p, And | Or) else p.to_sql()
                            for p in self.children)

    def _compile(self, types: Types) -> _Eval:
        children = [p.compile(types) for p in self.children]

        def all_of(values: Values) -> Truth:
            unknown = False
            for child in children:
                r = child(values)
                if r is False:
                    return False
                if r is None:
                    unknown = True
            return None if unknown else True
        return all_of


@dataclass(frozen=True)
class Or(Predicate):
    children: tuple[Predicate, ...]

    def _column_iter(self) -> Iterable[str]:
        return (c for p in self.children for c in p.columns())

    def to_sql(self) -> str:
        return " OR ".join(f"({p.to_sql()})" if isinstance(p, And | Or) else p.to_sql()
                           for p in self.children)

    def _compile(self, types: Types) -> _Eval:
        children = [p.compile(types) for p in self.children]

        def any_of(values: Values) -> Truth:
            unknown = False
            for child in children:
                r = child(values)
                if r is True:
                    return True
                if r is None:
                    unknown = True
            return None if unknown else False
        return any_of


def and_(*predicates: Predicate) -> Predicate:
    """Conjunction, flattened; TRUE operands dropped, any FALSE operand gives FALSE."""
    flat: list[Predicate] = []
    for p in predicates:
        if p == FALSE:
            return FALSE
        if p == TRUE:
            continue
        flat.extend(p.children if isinstance(p, And) else (p,))
    if not flat:
        return TRUE
    return flat[0] if len(flat) == 1 else And(tuple(flat))


def or_(*predicates: Predicate) -> Predicate:
    """Disjunction, flattened; FALSE operands dropped, any TRUE operand gives TRUE."""
    flat: list[Predicate] = []
    for p in predicates:
        if p == TRUE:
            return TRUE
        if p == FALSE:
            continue
        flat.extend(p.children if isinstance(p, Or) else (p,))
    if not flat:
        return FALSE
    return flat[0] if len(flat) == 1 else Or(tuple(flat))


def not_(p: Predicate) -> Predicate:
    """Negation; constants fold and a double negation cancels (sound in three-valued logic)."""
    if p == TRUE:
        return FALSE
    if p == FALSE:
        return TRUE
    if isinstance(p, Not):
        return p.child
    return Not(p)


def compare(column: str, op: str, value: object) -> Predicate:
    """``column op value`` with deltalake's operator spellings (``==``, ``<>`` accepted)."""
    op = _OP_ALIASES.get(op, op)
    return Comparison(column, op, lit(value))


# --------------------------------------------------------------------------- parser


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # word, ident (quoted), string, number, op, end
    text: str
    pos: int


#: A token of ``tokenize``: ``kind`` is word, ident (quoted), string, number, op or end.
Token = _Token

_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<word>[^\W\d]\w*)
  | (?P<op>==|!=|<>|<=|>=|\|\||=|<|>|\(|\)|,|-|\+|\*|/|%)
""", re.VERBOSE)


def _syntax_error(text: str, pos: int, message: str, what: str = "predicate"
                  ) -> InvalidArgumentError:
    if len(text) <= 200:
        caret = text[:pos] + " >>> " + text[pos:]
        return InvalidArgumentError(
            f"invalid {what} {text!r}: {message} at position {pos}: {caret!r}")
    around = text[max(0, pos - 40):pos] + " >>> " + text[pos:pos + 40]
    return InvalidArgumentError(f"invalid {what} of {len(text)} characters: {message} at "
                                f"position {pos}: ...{around!r}...")


def tokenize(text: str) -> list[_Token]:
    """The tokens of a SQL text; value expressions (``generated.py``) share this lexer, so a
    quoted identifier or string literal means the same in a predicate and in an expression.
    Arithmetic operators are tokens too: the predicate grammar refuses them where they appear."""
    return _tokenize(text)


def token_text(tok: _Token) -> str:
    """A token as an error message quotes it (its ends only, when it is long)."""
    if len(tok.text) <= 60:
        return repr(tok.text)
    return f"{tok.text[:25]!r}...{tok.text[-25:]!r} ({len(tok.text)} characters)"


def syntax_error(text: str, pos: int, message: str, what: str = "predicate"
                 ) -> InvalidArgumentError:
    """The error for a SQL text (a ``what``) that does not parse, pointing at ``pos``."""
    return _syntax_error(text, pos, message, what)


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            j = i + 1
            parts: list[str] = []
            while True:
                k = text.find(c, j)
                if k < 0:
                    what = "string" if c == "'" else "quoted identifier"
                    raise _syntax_error(text, i, f"unterminated {what}")
                parts.append(text[j:k])
                if k + 1 < n and text[k + 1] == c:
                    parts.append(c)
                    j = k + 2
                    continue
                break
            value = "".join(parts)
            if c != "'" and not value:
                raise _syntax_error(text, i, "empty quoted identifier")
            tokens.append(_Token("string" if c == "'" else "ident", value, i))
            i = k + 1
            continue
        if text.startswith("--", i) or text.startswith("/*", i):
            # Spark reads the rest of the line, or up to */, as a comment: reading it as
            # operators instead (x --5 as x - -5) would compute another value.
            raise _syntax_error(text, i, "SQL comments are not supported")
        m = _TOKEN_RE.match(text, i)
        if not m:
            raise _syntax_error(text, i, f"unexpected character {c!r}")
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append(_Token(kind, m.group(), i))
        i = m.end()
    tokens.append(_Token("end", "", n))
    return tokens


# Nesting (parentheses and NOT) a predicate may have: far beyond any written by hand, and far
# below Python's recursion limit, which the parser and the evaluator both recurse into.
MAX_PREDICATE_DEPTH = 100
MAX_PREDICATE_CHARS = 1_000_000


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_PREDICATE_DEPTH:
            raise _syntax_error(self.text, self.peek().pos,
                                f"the predicate nests deeper than {MAX_PREDICATE_DEPTH} levels "
                                "of parentheses and NOT")

    # ---- token helpers

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def next(self) -> _Token:
        tok = self.tokens[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def is_kw(self, word: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == "word" and tok.text.upper() == word

    def accept_kw(self, word: str) -> bool:
        if self.is_kw(word):
            self.i += 1
            return True
        return False

    def expect_kw(self, word: str) -> None:
        if not self.accept_kw(word):
            self.fail(f"expected {word}")

    def expect_op(self, op: str) -> _Token:
        tok = self.peek()
        if tok.kind != "op" or tok.text != op:
            self.fail(f"expected {op!r}")
        return self.next()

    def fail(self, message: str, tok: _Token | None = None) -> None:
        tok = tok or self.peek()
        found = "end of input" if tok.kind == "end" else token_text(tok)
        raise _syntax_error(self.text, tok.pos, f"{message}, found {found}")

    # ---- grammar

    def parse(self) -> Predicate:
        if self.peek().kind == "end":
            raise _syntax_error(self.text, 0, "empty predicate")
        p = self.parse_or()
        if self.peek().kind != "end":
            self.fail("expected AND, OR or the end of the predicate")
        return p

    def parse_or(self) -> Predicate:
        items = [self.parse_and()]
        while self.accept_kw("OR"):
            items.append(self.parse_and())
        return or_(*items)

    def parse_and(self) -> Predicate:
        items = [self.parse_not()]
        while self.accept_kw("AND"):
            items.append(self.parse_not())
        return and_(*items)

    def parse_not(self) -> Predicate:
        if self.accept_kw("NOT"):
            self._enter()
            inner = self.parse_not()
            self.depth -= 1
            return not_(inner)
        return self.parse_primary()

    def parse_primary(self) -> Predicate:
        tok = self.peek()
        if tok.kind == "op" and tok.text == "(":
            self.next()
            self._enter()
            p = self.parse_or()
            self.expect_op(")")
            self.depth -= 1
            return p
        if (self.is_kw("TRUE") or self.is_kw("FALSE")) and not self._starts_comparison(1):
            return TRUE if self.next().text.upper() == "TRUE" else FALSE
        left_tok = self.peek()
        left = self.parse_operand()
        if isinstance(left, str):
            return self.parse_tail(left)
        # literal on the left: only a comparison with a column can follow
        op_tok = self.peek()
        if op_tok.kind != "op" or _OP_ALIASES.get(op_tok.text, op_tok.text) not in _OP_FUNCS:
            self.fail("expected a comparison operator after a literal")
        self.next()
        op = _OP_ALIASES.get(op_tok.text, op_tok.text)
        right_tok = self.peek()
        right = self.parse_operand()
        if not isinstance(right, str):
            self.fail("a comparison needs a column on one side", left_tok)
            raise AssertionError  # unreachable
        del right_tok
        return Comparison(right, _FLIPPED[op], left)

    def _starts_comparison(self, ahead: int) -> bool:
        """Whether the token ``ahead`` continues an operand into a comparison, which makes a
        TRUE/FALSE before it a literal rather than a constant predicate."""
        tok = self.peek(ahead)
        if tok.kind == "op":
            return tok.text in _OP_FUNCS or tok.text in _OP_ALIASES
        if self.is_kw("NOT", ahead):
            return self.is_kw("IN", ahead + 1) or self.is_kw("BETWEEN", ahead + 1)
        return any(self.is_kw(w, ahead) for w in ("IN", "IS", "BETWEEN"))

    def parse_tail(self, column: str) -> Predicate:
        tok = self.peek()
        if tok.kind == "op" and _OP_ALIASES.get(tok.text, tok.text) in _OP_FUNCS:
            self.next()
            op = _OP_ALIASES.get(tok.text, tok.text)
            right_tok = self.peek()
            right = self.parse_operand()
            if isinstance(right, str):
                self.fail("comparing two columns is not supported; compare a column with a literal",
                          right_tok)
                raise AssertionError  # unreachable
            return Comparison(column, op, right)
        if self.accept_kw("IS"):
            negated = self.accept_kw("NOT")
            self.expect_kw("NULL")
            return IsNull(column, negated)
        negated = self.accept_kw("NOT")
        if self.accept_kw("IN"):
            self.expect_op("(")
            items = [self.parse_literal()]
            while self.peek().kind == "op" and self.peek().text == ",":
                self.next()
                items.append(self.parse_literal())
            self.expect_op(")")
            return InList(column, tuple(items), negated)
        if self.accept_kw("BETWEEN"):
            lo = self.parse_literal()
            self.expect_kw("AND")
            hi = self.parse_literal()
            between = And((Comparison(column, ">=", lo), Comparison(column, "<=", hi)))
            return not_(between) if negated else between
        self.fail("expected a comparison, IN, IS NULL or BETWEEN after column " + repr(column))
        raise AssertionError  # unreachable

    def parse_operand(self) -> str | Literal:
        tok = self.peek()
        if tok.kind == "end" or (tok.kind == "op" and tok.text not in ("-", "+")):
            self.fail("expected a column or a literal")
        if tok.kind == "ident":
            self.next()
            return tok.text
        if tok.kind == "word":
            upper = tok.text.upper()
            typed = upper in ("DATE", "TIMESTAMP") and self.peek(1).kind == "string"
            if typed or upper in ("TRUE", "FALSE", "NULL"):
                return self.parse_literal()
            if upper in KEYWORDS and upper not in ("DATE", "TIMESTAMP"):
                self.fail("expected a column or a literal")
            self.next()
            return tok.text
        return self.parse_literal()

    def parse_literal(self) -> Literal:
        tok = self.next()
        if tok.kind == "string":
            return Literal("string", tok.text)
        if tok.kind == "number":
            return self._number(tok.text, tok)
        if tok.kind == "op" and tok.text in ("-", "+"):
            num = self.next()
            if num.kind != "number":
                self.fail("expected a number after the sign", num)
            return self._number(tok.text + num.text, num)
        if tok.kind == "word":
            upper = tok.text.upper()
            if upper == "NULL":
                return NULL
            if upper in ("TRUE", "FALSE"):
                return Literal("bool", upper == "TRUE")
            if upper in ("DATE", "TIMESTAMP"):
                s = self.next()
                if s.kind != "string":
                    self.fail(f"expected a quoted {upper.lower()} after {upper}", s)
                return self._typed(upper, s)
        self.fail("expected a literal", tok)
        raise AssertionError  # unreachable

    def _number(self, text: str, tok: _Token) -> Literal:
        """A number literal: refused where Spark's parser refuses it (a DECIMAL beyond 38
        digits, a DOUBLE beyond its range), kept exact as written otherwise (a DOUBLE as the
        shortest text of its value, which is what was written unless it had more digits than a
        DOUBLE holds)."""
        negative = text.startswith("-")
        try:
            typed = parse_number(text.lstrip("+-"))
        except LiteralError as e:
            self.fail(str(e), tok)
            raise AssertionError from None  # unreachable
        exact = (Decimal(repr(typed.value)) if isinstance(typed.value, float) else typed.exact)
        try:
            return _number_literal(-exact if negative else exact)
        except (InvalidOperation, InvalidArgumentError):
            self.fail("invalid number", tok)
            raise AssertionError from None  # unreachable

    def _typed(self, kind: str, tok: _Token) -> Literal:
        try:
            if kind == "DATE":
                return Literal("date", parse_date_literal(tok.text))
            return Literal("timestamp", parse_timestamp_literal(tok.text))
        except LiteralError as e:
            raise _syntax_error(self.text, tok.pos, f"invalid {kind.lower()} literal: {e}") from None


def parse_predicate(text: str) -> Predicate:
    """Parse a SQL predicate over partition columns (see the module docstring for the grammar)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"predicate must be a string, got {type(text).__name__}")
    if len(text) > MAX_PREDICATE_CHARS:
        raise InvalidArgumentError(f"predicate is {len(text)} characters long; at most "
                                   f"{MAX_PREDICATE_CHARS} are accepted")
    try:
        return _Parser(text).parse()
    except RecursionError:  # only from a caller already deep in its stack: the depth is bounded
        raise _syntax_error(text, 0, "the predicate nests too deeply to parse") from None


# --------------------------------------------------------------------------- partition filters

_FILTER_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=",
               "in": "in", "not in": "not in"}


def _is_filter_tuple(f: object) -> bool:
    return (isinstance(f, tuple | list) and len(f) == 3 and isinstance(f[0], str)
            and isinstance(f[1], str))


def _from_filter(f: Sequence[Any]) -> Predicate:
    column, raw_op, value = f
    op = _FILTER_OPS.get(" ".join(raw_op.lower().split()))
    if op is None:
        raise InvalidArgumentError(f"partition filter {tuple(f)!r}: unknown operator {raw_op!r}; use one of "
                                   f"{sorted(set(_FILTER_OPS))}")
    if op in ("in", "not in"):
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise InvalidArgumentError(f"partition filter {tuple(f)!r}: {raw_op!r} needs a list of values")
        items = list(value)
        if isinstance(value, set | frozenset):
            items.sort(key=repr)
        if not items:
            raise InvalidArgumentError(f"partition filter {tuple(f)!r}: the list of values is empty")
        return InList(column, tuple(lit(v) for v in items), op == "not in")
    if value is None:
        if op in ("=", "!="):
            return IsNull(column, op == "!=")
        raise InvalidArgumentError(f"partition filter {tuple(f)!r}: {raw_op!r} cannot compare with None")
    return Comparison(column, op, lit(value))


def from_partition_filters(filters: Sequence[Any] | None) -> Predicate:
    """The predicate of deltalake/pyarrow DNF filters: a list of ``(column, op, value)`` tuples
    (all must hold), or a list of such lists (any list must hold).  ``("c", "=", None)`` means
    ``c IS NULL`` and ``("c", "!=", None)`` means ``c IS NOT NULL``."""
    if not filters:
        return TRUE
    if isinstance(filters, str | bytes):
        raise InvalidArgumentError("partition filters must be a list of (column, op, value) tuples, "
                                   f"got the string {filters!r}; pass a predicate string as predicate=")
    items = list(filters)
    if all(_is_filter_tuple(f) for f in items):
        return and_(*(_from_filter(f) for f in items))
    if all(isinstance(f, list | tuple) and all(_is_filter_tuple(g) for g in f) for f in items):
        return or_(*(and_(*(_from_filter(g) for g in f)) for f in items))
    raise InvalidArgumentError(
        f"partition filters must be a list of (column, op, value) tuples or a list of such lists, "
        f"got {filters!r}")
