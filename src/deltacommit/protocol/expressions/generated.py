"""Generated columns: values a SQL expression computes from the row.  Pure: no I/O.

PROTOCOL.md "Generated Columns": a column whose field metadata holds
``delta.generationExpression`` must satisfy ``(column <=> expression) IS TRUE`` in every row
written.  Spark computes the column when an INSERT leaves it out; a writer that skipped the
check would commit rows Spark's readers (partition pruning on ``year(ts)``, say) trust blindly.
So the write stage (``datafiles.conform_rows``) computes the column when the data lacks it and
compares it, NULL-safely, when the data supplies it.  Conditions also serve CHECK constraints
the predicate parser cannot read (``constraints.py``: two columns, arithmetic, functions).

Expressions are Spark SQL, evaluated column-wise with ``pyarrow.compute``: column references,
literals, ``+ - * / %``, ``||``, ``CAST(x AS type)``, ``year/month/day/dayofmonth/hour/minute/
second``, ``to_date``, ``date_format`` with numeric patterns (``yyyy-MM-dd HH:mm:ss`` and their
parts), ``substring``/``substr``, ``concat``, ``lower``/``upper``, ``trim``, ``length``,
``abs``, ``coalesce``, ``date_trunc`` and ``trunc``, and conditions (comparisons, ``<=>``,
``AND/OR/NOT``, ``IS [NOT] NULL``, ``IN``, ``BETWEEN``).

The semantics are Spark 4's with ANSI mode on (``spark.sql.ansi.enabled``, its default) in a
session whose time zone is UTC.  Where this module cannot follow Spark exactly it refuses the
expression (UnsupportedProtocolError naming it); where Spark itself fails on a row's values it
fails the write (ExpressionValueError naming the table, the column, the expression and the
value).  It never writes a value Spark would not.  The rules, each with the Spark rule it
follows:

Types (``AnsiTypeCoercion.findTightestCommonType``, ``DecimalPrecision``)
  Integers widen to the wider of the two.  FLOAT with FLOAT stays FLOAT; FLOAT with any other
  number, and DOUBLE with anything, is DOUBLE.  An integer meeting a DECIMAL becomes one (a
  literal just as wide as its digits, ``literalPickMinimumPrecision``; a column DECIMAL(3/5/10/
  20, 0)); a DECIMAL meeting a FLOAT or DOUBLE becomes a DOUBLE (correctly rounded,
  ``BigDecimal.doubleValue``).  A DECIMAL result wider than 38 digits, where Spark drops
  fraction digits and rounds, is refused.
Arithmetic (``Add``, ``Subtract``, ``Multiply``, ``UnaryMinus``, ``Abs`` with failOnError)
  Integer ``+ - *``, unary minus and ``abs`` fail on overflow (ARITHMETIC_OVERFLOW), at the
  width of the operation's type: TINYINT + TINYINT overflows past 127.  FLOAT/DOUBLE follow
  IEEE 754 (no error).  DECIMAL ``+ - *`` are exact in Spark's result type.
``/`` and ``%`` (``Divide``, ``Remainder``: ``DivModLike``)
  ``/`` divides as DOUBLE (DECIMAL division, with its own scale rules, is refused).  A zero
  divisor fails the row (DIVIDE_BY_ZERO), for DOUBLE too (0.0 and -0.0); a NULL dividend or
  divisor gives NULL first.  ``%`` keeps the dividend's sign (Java's ``%``): ``-7 % 3`` is -1
  and ``INT_MIN % -1`` is 0; on FLOAT/DOUBLE it is ``fmod``; on DECIMAL it is refused.
CAST (``Cast`` with ANSI evaluation)
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
    (Java's number grammar) is refused.
Strings
  ``upper``/``lower`` apply Unicode's full case mapping, as Spark 4 does through ICU's root
  locale (``spark.sql.icu.caseMappings.enabled``, default true): ``upper('straße')`` is
  ``'STRASSE'``, a final sigma lowers to ``ς``.  Text holding a code point this Python's
  Unicode database does not know, or a cased letter it maps to itself (a newer Unicode, and so
  a newer ICU, may give it a partner), is refused.  ``length`` and ``substring`` count code
  points (``substring`` follows ``UTF8String.substringSQL``: 1-based, 0 counts as 1, negative
  from the end); ``trim`` removes spaces only; ``concat``/``||`` give NULL for any NULL.
Dates and times
  In UTC (the session time zone): ``CAST(ts AS DATE)``, ``year(ts)``, ``date_trunc`` and
  ``date_format`` read a TIMESTAMP's UTC wall clock, a TIMESTAMP_NTZ's own.  ``date_format``
  formats years 1 to 9999 only (Spark prints the year of the era).  Weeks start on Monday.
Conditions
  SQL's three-valued logic.  NaN equals NaN and is above every other value, -0.0 equals 0.0
  (``SQLOrderingUtil.compareDoubles``; ``sql_semantics.compare``).  ``AND``, ``OR`` and
  ``coalesce`` evaluate a later operand only for the rows whose result it decides, as Spark
  evaluates them row by row, so ``x = 0 OR 10 / x > 1`` does not fail where x is 0.

The tokenizer is the predicate parser's (``predicates.tokenize``) and number literals are typed
by ``sql_semantics.parse_number``, so quoting and literals mean the same in a CHECK constraint
and in a generation expression.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import (
    DeltaCommitError,
    ExpressionValueError,
    GeneratedColumnMismatchError,
    InvalidArgumentError,
    UnsupportedProtocolError,
)
from deltacommit.protocol.expressions.predicates import Token, syntax_error, token_text, tokenize
from deltacommit.protocol.expressions.sql_semantics import (
    INTEGER_RANGES,
    MAX_DECIMAL_PRECISION,
    LiteralError,
    compare,
    decimal_type_of_integer,
    null_safe_equal,
    parse_date_literal,
    parse_number,
    parse_timestamp_literal,
)

GENERATION_KEY = b"delta.generationExpression"
_pc: Any = pc  # pyarrow.compute's stubs do not cover every function used here

# --------------------------------------------------------------------------- syntax tree


@dataclass(frozen=True, slots=True)
class Ref:
    """A column of the row."""

    name: str


@dataclass(frozen=True, slots=True)
class Const:
    """A literal; ``value`` is a Python value of Arrow type ``type``."""

    value: Any
    type: pa.DataType


@dataclass(frozen=True, slots=True)
class Call:
    """A function or operator (``+``, ``negate``, ``year``...) applied to arguments."""

    name: str
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Cast:
    child: Node
    to: pa.DataType


Node: TypeAlias = Ref | Const | Call | Cast
Value: TypeAlias = Any  # a pa.Array of the rows, or a pa.Scalar

#: Functions and their argument counts (min, max).
FUNCTIONS: dict[str, tuple[int, int]] = {
    "year": (1, 1), "month": (1, 1), "day": (1, 1), "dayofmonth": (1, 1), "hour": (1, 1),
    "minute": (1, 1), "second": (1, 1), "to_date": (1, 1), "date": (1, 1),
    "date_format": (2, 2), "substring": (2, 3), "substr": (2, 3), "concat": (1, 64),
    "lower": (1, 1), "upper": (1, 1), "lcase": (1, 1), "ucase": (1, 1), "trim": (1, 1),
    "ltrim": (1, 1), "rtrim": (1, 1), "abs": (1, 1), "coalesce": (1, 64),
    "date_trunc": (2, 2), "trunc": (2, 2), "length": (1, 1), "char_length": (1, 1),
}
_CONDITIONS = frozenset({"=", "!=", "<", "<=", ">", ">=", "<=>", "and", "or", "not", "isnull",
                         "isnotnull", "in", "between"})
_ALIASES = {"dayofmonth": "day", "substr": "substring", "lcase": "lower", "ucase": "upper",
            "date": "to_date", "char_length": "length"}
#: Spark's truncation formats (``date_trunc``, ``trunc``) and Arrow's ``floor_temporal`` units.
_TRUNC_UNITS = {"YEAR": "year", "YYYY": "year", "YY": "year", "QUARTER": "quarter",
                "MONTH": "month", "MM": "month", "MON": "month", "WEEK": "week", "DAY": "day",
                "DD": "day", "HOUR": "hour", "MINUTE": "minute", "SECOND": "second",
                "MILLISECOND": "millisecond", "MICROSECOND": "microsecond"}
_DATE_UNITS = frozenset({"year", "quarter", "month", "week"})

_TIMESTAMP_LTZ = pa.timestamp("us", tz="UTC")
_TIMESTAMP_NTZ = pa.timestamp("us")
_TYPES: dict[str, pa.DataType] = {
    "tinyint": pa.int8(), "byte": pa.int8(), "smallint": pa.int16(), "short": pa.int16(),
    "int": pa.int32(), "integer": pa.int32(), "bigint": pa.int64(), "long": pa.int64(),
    "float": pa.float32(), "real": pa.float32(), "double": pa.float64(),
    "string": pa.string(), "varchar": pa.string(), "char": pa.string(),
    "boolean": pa.bool_(), "binary": pa.binary(), "date": pa.date32(),
    "timestamp": _TIMESTAMP_LTZ, "timestamp_ntz": _TIMESTAMP_NTZ,
    "timestamp_ltz": _TIMESTAMP_LTZ,
}
#: Nesting of parentheses, functions, NOT and signs the parser follows (it recurses into
#: each); operator chains (``a + b + ...``) do not nest and are not bounded by it.
MAX_DEPTH = 100
_COMPARISONS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">",
                ">=": ">="}
_RESERVED = frozenset({"AND", "OR", "NOT", "IS", "IN", "BETWEEN", "AS"})
#: The plain date and timestamp texts read (the forms Spark's ``stringToDate`` and
#: ``stringToTimestamp`` read the same way); other forms are refused.
_DATE_TEXT = r"\d{4}-\d{2}-\d{2}"
_TIME_TEXT = r"[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?"
_ZONE_TEXT = r"(?:Z|[+-]\d{2}:\d{2})"
_TIMESTAMP_TEXT = _DATE_TEXT + f"(?:{_TIME_TEXT})?"
_ZONED_TIMESTAMP_TEXT = _DATE_TEXT + f"(?:{_TIME_TEXT}{_ZONE_TEXT}?)?"


# --------------------------------------------------------------------------- parser


class _Parser:
    """Spark's precedence, tightest first: unary minus, ``* / %``, ``+ - ||``, comparisons
(and ``IS NULL``, ``IN``, ``BETWEEN``), ``NOT``, ``AND``, ``OR``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def is_op(self, *ops: str) -> bool:
        tok = self.peek()
        return tok.kind == "op" and tok.text in ops

    def fail(self, message: str, tok: Token | None = None) -> InvalidArgumentError:
        tok = tok or self.peek()
        found = "end of input" if tok.kind == "end" else token_text(tok)
        return syntax_error(self.text, tok.pos, f"{message}, found {found}", what="expression")

    def expect_op(self, op: str) -> None:
        if not self.is_op(op):
            raise self.fail(f"expected {op!r}")
        self.next()

    def parse(self) -> Node:
        if self.peek().kind == "end":
            raise syntax_error(self.text, 0, "empty expression", what="expression")
        node = self.disjunction()
        if self.peek().kind != "end":
            raise self.fail("expected an operator or the end of the expression")
        return node

    def is_kw(self, word: str, ahead: int = 0) -> bool:
        tok = self.tokens[min(self.i + ahead, len(self.tokens) - 1)]
        return tok.kind == "word" and tok.text.upper() == word

    def expect_kw(self, word: str) -> None:
        if not self.is_kw(word):
            raise self.fail(f"expected {word}")
        self.next()

    def disjunction(self) -> Node:
        node = self.conjunction()
        while self.is_kw("OR"):
            self.next()
            node = Call("or", (node, self.conjunction()))
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.is_kw("AND"):
            self.next()
            node = Call("and", (node, self.negation()))
        return node

    def negation(self) -> Node:
        if self.is_kw("NOT"):
            self.next()
            self._enter()
            inner = self.negation()
            self.depth -= 1
            return Call("not", (inner,))
        return self.comparison()

    def comparison(self) -> Node:
        left = self.additive()
        tok = self.peek()
        if tok.kind == "op" and tok.text in _COMPARISONS:
            self.next()
            op = _COMPARISONS[tok.text]
            nxt = self.peek()
            if op == "<=" and nxt.kind == "op" and nxt.text == ">" and nxt.pos == tok.pos + 2:
                self.next()
                op = "<=>"
            return Call(op, (left, self.additive()))
        if self.is_kw("IS"):
            self.next()
            negated = self.is_kw("NOT")
            if negated:
                self.next()
            self.expect_kw("NULL")
            return Call("isnotnull" if negated else "isnull", (left,))
        negated = self.is_kw("NOT") and (self.is_kw("IN", 1) or self.is_kw("BETWEEN", 1))
        if negated:
            self.next()
        if self.is_kw("IN"):
            self.next()
            self.expect_op("(")
            items = [self.additive()]
            while self.is_op(","):
                self.next()
                items.append(self.additive())
            self.expect_op(")")
            node: Node = Call("in", (left, *items))
        elif self.is_kw("BETWEEN"):
            self.next()
            lo = self.additive()
            self.expect_kw("AND")
            node = Call("between", (left, lo, self.additive()))
        else:
            return left
        return Call("not", (node,)) if negated else node

    def additive(self) -> Node:
        node = self.multiplicative()
        while self.is_op("+", "-", "||"):
            op = self.next().text
            node = Call("concat" if op == "||" else op, (node, self.multiplicative()))
        return node

    def multiplicative(self) -> Node:
        node = self.unary()
        while self.is_op("*", "/", "%"):
            op = self.next().text
            node = Call(op, (node, self.unary()))
        return node

    def unary(self) -> Node:
        if self.is_op("-", "+"):
            sign = self.next().text
            # Spark's grammar reads a sign right before a number as part of the literal
            # (``number: MINUS? INTEGER_VALUE``): -2147483648 is an INT.  Anything else is an
            # operator: -(2147483648) is a BIGINT, -(-2147483648) overflows.
            literal = self.peek().kind == "number"
            self._enter()
            inner = self.unary()
            self.depth -= 1
            if sign == "+":
                return inner
            if literal and isinstance(inner, Const):
                return _negated(inner)
            return Call("negate", (inner,))
        return self.primary()

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"the expression nests deeper than {MAX_DEPTH} levels")

    def primary(self) -> Node:
        tok = self.next()
        if tok.kind == "op" and tok.text == "(":
            self._enter()
            node = self.disjunction()
            self.expect_op(")")
            self.depth -= 1
            return node
        if tok.kind == "number":
            try:
                literal = parse_number(tok.text)
            except LiteralError as e:
                raise self.fail(str(e), tok) from None
            value = literal.value
            if pa.types.is_decimal(literal.type):
                value = Decimal(value)
            return Const(value, literal.type)
        if tok.kind == "string":
            return Const(tok.text, pa.string())
        if tok.kind == "ident":
            return Ref(tok.text)
        if tok.kind != "word":
            raise self.fail("expected a column, a literal or a function", tok)
        upper = tok.text.upper()
        if upper in _RESERVED:
            raise self.fail("expected a column, a literal or a function", tok)
        if upper in ("TRUE", "FALSE"):
            return Const(upper == "TRUE", pa.bool_())
        if upper == "NULL":
            return Const(None, pa.null())
        if upper in ("DATE", "TIMESTAMP") and self.peek().kind == "string":
            return self._typed_literal(upper, self.next())
        if self.is_op("("):
            self.next()
            self._enter()
            node = self._cast() if upper == "CAST" else self._call(tok)
            self.depth -= 1
            return node
        return Ref(tok.text)

    def _typed_literal(self, kind: str, tok: Token) -> Const:
        try:
            if kind == "DATE":
                return Const(parse_date_literal(tok.text), pa.date32())
            value = parse_timestamp_literal(tok.text)
        except LiteralError as e:
            raise syntax_error(self.text, tok.pos, f"invalid {kind.lower()} literal: {e}",
                               what="expression") from None
        if value.tzinfo is None:  # Spark: in the session time zone, UTC here
            value = value.replace(tzinfo=dt.UTC)
        return Const(value, _TIMESTAMP_LTZ)

    def _cast(self) -> Cast:
        child = self.disjunction()
        tok = self.next()
        if tok.kind != "word" or tok.text.upper() != "AS":
            raise self.fail("expected AS in CAST", tok)
        name_tok = self.next()
        if name_tok.kind != "word":
            raise self.fail("expected a type name", name_tok)
        name = name_tok.text.lower()
        if name == "decimal" or name == "numeric":
            precision, scale = 10, 0
            if self.is_op("("):
                self.next()
                precision_tok = self.peek()
                precision = int(self._int_token())
                if self.is_op(","):
                    self.next()
                    scale = int(self._int_token())
                if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
                    raise self.fail(f"DECIMAL({precision}, {scale}) is not a Spark type "
                                    f"(precision 1 to {MAX_DECIMAL_PRECISION}, scale at most "
                                    "the precision)", precision_tok)
                self.expect_op(")")
            to: pa.DataType = pa.decimal128(precision, scale)
        elif name in _TYPES:
            to = _TYPES[name]
            if name in ("varchar", "char") and self.is_op("("):
                # Spark 4 casts to CHAR(n)/VARCHAR(n) as to STRING
                # (spark.sql.preserveCharVarcharTypeInfo is off by default).
                self.next()
                self._int_token()
                self.expect_op(")")
        else:
            raise self.fail("expected a type deltacommit can cast to "
                            f"({', '.join(sorted([*_TYPES, 'decimal']))})", name_tok)
        self.expect_op(")")
        return Cast(child, to)

    def _int_token(self) -> str:
        tok = self.next()
        if tok.kind != "number" or not tok.text.isdigit() or len(tok.text) > 6:
            raise self.fail("expected an integer", tok)
        return tok.text

    def _call(self, name_tok: Token) -> Call:
        name = name_tok.text.lower()
        if name not in FUNCTIONS:
            raise self.fail("expected a function deltacommit evaluates "
                            f"({', '.join(sorted(FUNCTIONS))})", name_tok)
        args: list[Node] = []
        if not self.is_op(")"):
            args.append(self.disjunction())
            while self.is_op(","):
                self.next()
                args.append(self.disjunction())
        self.expect_op(")")
        lo, hi = FUNCTIONS[name]
        if not lo <= len(args) <= hi:
            raise self.fail(f"{name} takes {lo if lo == hi else f'{lo} to {hi}'} argument(s), "
                            f"not {len(args)}", name_tok)
        return Call(_ALIASES.get(name, name), tuple(args))


def _negated(const: Const) -> Const:
    """The literal ``-const`` as Spark's parser types a signed literal: an integer is an INT
    when it fits, a BIGINT when it fits that (-9223372036854775808 is one), else a DECIMAL."""
    if pa.types.is_integer(const.type) or (
            pa.types.is_decimal(const.type) and const.type.scale == 0
            and isinstance(const.value, Decimal)):
        value = -int(const.value)
        for t in (pa.int32(), pa.int64()):
            low, high = INTEGER_RANGES[t]
            if low <= value <= high:
                return Const(value, t)
        return Const(Decimal(value), const.type)
    return Const(-const.value, const.type)


@functools.lru_cache(maxsize=256)
def parse_expression(text: str) -> Node:
    """The syntax tree of a generation expression; InvalidArgumentError for what this module
    cannot parse (every node it can parse, it can evaluate)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"expression must be a string, got {type(text).__name__}")
    try:
        return _Parser(text).parse()
    except RecursionError:  # only from a caller already deep in its stack: MAX_DEPTH bounds it
        raise syntax_error(text, 0, "the expression nests too deeply to parse",
                           what="expression") from None


# --------------------------------------------------------------------------- evaluation


class _Unsupported(Exception):
    """An expression this module cannot evaluate with Spark's exact semantics."""


class _RowFailure(Exception):
    """A row's values make the expression fail as Spark fails it (ANSI mode), or hold a value
    this module cannot evaluate as Spark does (``refused``); ``row`` is the row's index, None
    when a constant fails."""

    def __init__(self, message: str, row: int | None, *, refused: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.row = row
        self.refused = refused


def _type(v: Value) -> pa.DataType:
    t: pa.DataType = v.type
    return t


def _is_int(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t))


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def _is_scalar(v: Value) -> bool:
    return isinstance(v, pa.Scalar)


def _at(v: Value, row: int | None) -> Any:
    """The Python value of ``v`` at ``row`` (a scalar's own value)."""
    if _is_scalar(v):
        return v.as_py()
    return v[row].as_py() if row is not None else None


def _slice(v: Value, start: int, stop: int) -> Value:
    return v if _is_scalar(v) else v.slice(start, stop - start)


def _length(values: Sequence[Value]) -> int | None:
    return next((len(v) for v in values if not _is_scalar(v)), None)


def _first_true(mask: Value) -> int | None:
    """The first row where ``mask`` is TRUE (0 for a TRUE scalar), None if there is none."""
    if _is_scalar(mask):
        return 0 if mask.is_valid and mask.as_py() else None
    i = int(_pc.index(_pc.fill_null(mask, False), True).as_py())
    return i if i >= 0 else None


def _fail_where(mask: Value, describe: Callable[[int], str], *, refused: bool = False) -> None:
    """_RowFailure at the first row where ``mask`` is TRUE."""
    i = _first_true(mask)
    if i is not None:
        row = None if _is_scalar(mask) else i
        raise _RowFailure(describe(i), row, refused=refused)


def _cast_plain(v: Value, t: pa.DataType, *, safe: bool = True) -> Value:
    """An Arrow cast that cannot change a value (widening, or one already checked)."""
    if _type(v) == t:
        return v
    return v.cast(t, safe=safe)


def _checked(kernel: Callable[..., Value], args: list[Value],
             describe: Callable[[int], str]) -> Value:
    """``kernel(*args)`` for one of Arrow's overflow-checking kernels; on overflow,
    _RowFailure at the first row that overflows (found by halving the rows)."""
    try:
        return kernel(*args)
    except pa.ArrowInvalid:
        pass
    n = _length(args)
    if n is None:
        raise _RowFailure(describe(0), None)
    lo, hi = 0, n  # the first failing row is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            kernel(*[_slice(a, lo, mid) for a in args])
            lo = mid
        except pa.ArrowInvalid:
            hi = mid
    raise _RowFailure(describe(lo), lo)


def _python_map(v: Value, fn: Callable[[Any, int | None], Any], to: pa.DataType) -> Value:
    """``fn(value, row)`` for each non-NULL value, in Python: the rules Arrow has no kernel
    for (shortest decimal text of a DOUBLE, full Unicode case mapping).  A scalar's row is
    None: it is every row."""
    if _is_scalar(v):
        return pa.scalar(None if not v.is_valid else fn(v.as_py(), None), to)
    return pa.array([None if x is None else fn(x, i) for i, x in enumerate(v.to_pylist())], to)


# ---- numeric types


_INTEGER_AS_DECIMAL = {8: pa.decimal128(3, 0), 16: pa.decimal128(5, 0),
                       32: pa.decimal128(10, 0), 64: pa.decimal128(20, 0)}


def _decimal_of(t: pa.DataType, literal: Any) -> pa.DataType:
    """The DECIMAL an operand becomes beside a DECIMAL: itself, an integer literal's digits,
    an integer column's DECIMAL(3/5/10/20, 0)."""
    if pa.types.is_decimal(t):
        return t
    if isinstance(literal, int) and not isinstance(literal, bool):
        return decimal_type_of_integer(literal)
    return _INTEGER_AS_DECIMAL[t.bit_width]


def _literal_int(node: Node | None) -> int | None:
    if isinstance(node, Const) and _is_int(node.type):
        value: int = node.value
        return value
    return None


def _numeric_type(ta: pa.DataType, tb: pa.DataType) -> pa.DataType | None:
    """The common type of two numbers when it is not a DECIMAL (None: a DECIMAL one)."""
    if _is_int(ta) and _is_int(tb):
        return ta if ta.bit_width >= tb.bit_width else tb
    if pa.types.is_floating(ta) or pa.types.is_floating(tb):
        if ta == tb == pa.float32():
            return pa.float32()
        return pa.float64()
    return None


def _precision_scale(t: pa.DataType) -> tuple[int, int]:
    return t.precision, t.scale  # type: ignore[attr-defined]


def _to_double(v: Value) -> Value:
    """A number as DOUBLE, rounded to nearest as Java converts it (``BigDecimal.doubleValue``
    for a DECIMAL: correctly rounded, which Arrow's conversion is not for every value)."""
    t = _type(v)
    if pa.types.is_decimal(t):
        return _python_map(v, lambda d, _: float(d), pa.float64())
    return _cast_plain(v, pa.float64(), safe=False)


def _numeric_plan(ta: pa.DataType, tb: pa.DataType, literals: Sequence[int | None],
                  what: str, op: str | None) -> tuple[pa.DataType, pa.DataType, pa.DataType]:
    """The types two numbers take for an arithmetic operation (``op``) or a comparison or
    common type (``op`` None), and the result's type."""
    if not (_is_numeric(ta) and _is_numeric(tb)):
        raise _Unsupported(f"{what} of {_sql_type(ta)} and {_sql_type(tb)}")
    common = _numeric_type(ta, tb)
    if common is not None:
        return common, common, common
    da, db = _decimal_of(ta, literals[0]), _decimal_of(tb, literals[1])
    (p1, s1), (p2, s2) = _precision_scale(da), _precision_scale(db)
    scale = max(s1, s2)
    if op == "*":
        precision, scale = p1 + p2 + 1, s1 + s2
    elif op in ("+", "-", "%"):
        precision = max(p1 - s1, p2 - s2) + scale + 1
    else:
        precision = max(p1 - s1, p2 - s2) + scale
    if precision > MAX_DECIMAL_PRECISION:
        raise _Unsupported(
            f"{what} of {_sql_type(da)} and {_sql_type(db)}, whose exact result needs "
            f"DECIMAL({precision}, {scale}): Spark drops fraction digits and rounds beyond "
            f"{MAX_DECIMAL_PRECISION} digits")
    result = pa.decimal128(precision, scale)
    if op is None:
        return result, result, result
    return da, db, result


def _unify(a: Value, b: Value, nodes: Sequence[Node | None], what: str,
           op: str | None = None) -> tuple[Value, Value, pa.DataType]:
    """``a`` and ``b`` in Spark's types for an arithmetic operation (``op``) or a comparison
    (``op`` None), and the result's type."""
    ta, tb, result = _numeric_plan(_type(a), _type(b),
                                   [_literal_int(nodes[0]), _literal_int(nodes[1])], what, op)
    return _implicit_cast(a, ta), _implicit_cast(b, tb), result


def _widen_decimal(v: Value, t: pa.DataType) -> Value:
    """An integer or DECIMAL as the DECIMAL ``t``, which holds each of its values exactly."""
    source = _type(v)
    if source == t:
        return v
    if _is_int(source):
        v = v.cast(_INTEGER_AS_DECIMAL[source.bit_width])
    return _cast_plain(v, t)


# ---- arithmetic


def _arith(op: str, a: Value, b: Value, nodes: Sequence[Node | None]) -> Value:
    ta, tb = _type(a), _type(b)
    if pa.types.is_null(ta) or pa.types.is_null(tb):
        other = tb if pa.types.is_null(ta) else ta
        if not (pa.types.is_null(other) or _is_numeric(other)):
            raise _Unsupported(f"arithmetic on {ta} and {tb}")
        t = pa.float64() if op == "/" else other
        n = _length([a, b])
        return pa.scalar(None, t) if n is None else _pc.cast(pa.nulls(n), t)
    if op == "/":
        if pa.types.is_decimal(ta) or pa.types.is_decimal(tb):
            raise _Unsupported("/ on decimals (Spark's result scale and rounding)")
        if not (_is_numeric(ta) and _is_numeric(tb)):
            raise _Unsupported(f"arithmetic on {ta} and {tb}")
        a, b = _to_double(a), _to_double(b)
        _fail_division_by_zero(a, b, "/")
        return _pc.divide(a, b)
    a, b, t = _unify(a, b, nodes, "arithmetic", op)
    if op == "%":
        if pa.types.is_decimal(t):
            raise _Unsupported("% on decimals")
        _fail_division_by_zero(a, b, "%")
        return _remainder(a, b, t)
    if _is_int(t):
        kernel = {"+": _pc.add_checked, "-": _pc.subtract_checked,
                  "*": _pc.multiply_checked}[op]
        return _checked(kernel, [a, b], lambda i: (
            f"integer overflow: {_at(a, i)} {op} {_at(b, i)} is beyond {_sql_type(t)}"))
    kernel = {"+": _pc.add, "-": _pc.subtract, "*": _pc.multiply}[op]
    out = kernel(a, b)
    if pa.types.is_decimal(t):
        return _cast_plain(out, t)
    return out


def _fail_division_by_zero(a: Value, b: Value, op: str) -> None:
    t = _type(b)
    zero = pa.scalar(0, t) if not pa.types.is_decimal(t) else pa.scalar(Decimal(0)).cast(t)
    mask = _pc.and_(_pc.equal(b, zero), _pc.is_valid(a))
    _fail_where(mask, lambda i: f"division by zero: {_at(a, i)} {op} {_at(b, i)}")


def _remainder(a: Value, b: Value, t: pa.DataType) -> Value:
    """Java's ``%``: truncated, with the dividend's sign (C's ``fmod``), and 0 for
    ``MIN % -1``, which C leaves undefined; no zero divisor reaches here."""
    n = _length([a, b])
    if n is None:
        x, y = a.as_py(), b.as_py()
        if x is None or y is None:
            return pa.scalar(None, t)
        if _is_int(t):
            return pa.scalar(abs(x) % abs(y) * (1 if x >= 0 else -1), t)
        with np.errstate(all="ignore"):  # fmod is exact, so a FLOAT's stays a FLOAT
            return pa.scalar(float(np.fmod(np.float64(x), np.float64(y))), t)
    arr_a = a if not _is_scalar(a) else pa.array([a.as_py()] * n, t)
    arr_b = b if not _is_scalar(b) else pa.array([b.as_py()] * n, t)
    valid = _pc.and_(_pc.is_valid(arr_a), _pc.is_valid(arr_b))
    dtype = t.to_pandas_dtype()
    x = _pc.fill_null(arr_a, pa.scalar(0, t)).to_numpy(zero_copy_only=False).astype(dtype)
    y = _pc.fill_null(arr_b, pa.scalar(1, t)).to_numpy(zero_copy_only=False).astype(dtype)
    if _is_int(t):
        y = np.where(y == -1, 1, y)  # x % -1 is 0, and MIN % -1 must not trap
    with np.errstate(all="ignore"):
        out = np.fmod(x, y)
    return pa.array(out, t, mask=_pc.invert(valid).to_numpy(zero_copy_only=False))


def _negate(v: Value) -> Value:
    t = _type(v)
    if pa.types.is_null(t):
        return v
    if not _is_numeric(t):
        raise _Unsupported(f"negating {t}")
    if _is_int(t):
        return _checked(_pc.negate_checked, [v], lambda i: (
            f"integer overflow: -({_at(v, i)}) is beyond {_sql_type(t)}"))
    return _pc.negate(v)


def _abs(v: Value) -> Value:
    t = _type(v)
    if pa.types.is_null(t):
        return v
    if not _is_numeric(t):
        raise _Unsupported(f"abs of {t}")
    if _is_int(t):
        return _checked(_pc.abs_checked, [v], lambda i: (
            f"integer overflow: abs({_at(v, i)}) is beyond {_sql_type(t)}"))
    return _pc.abs(v)


def _sql_type(t: pa.DataType) -> str:
    names = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INT",
             pa.int64(): "BIGINT", pa.float32(): "FLOAT", pa.float64(): "DOUBLE",
             pa.string(): "STRING", pa.bool_(): "BOOLEAN", pa.date32(): "DATE",
             _TIMESTAMP_LTZ: "TIMESTAMP", _TIMESTAMP_NTZ: "TIMESTAMP_NTZ",
             pa.binary(): "BINARY"}
    if pa.types.is_decimal(t):
        p, s = _precision_scale(t)
        return f"DECIMAL({p}, {s})"
    return names.get(t, str(t))


# ---- casts


def _ansi_cast(v: Value, to: pa.DataType) -> Value:
    """``CAST(v AS to)`` with Spark's ANSI rules (see the module docstring); _RowFailure for
    a value Spark's cast fails on, _Unsupported for a cast this module does not follow."""
    t = _type(v)
    if t == to:
        return v
    if pa.types.is_null(t):
        return v.cast(to)
    if _is_string(to):
        return _to_string(v)
    if _is_string(t) and t != pa.string():
        return _ansi_cast(v.cast(pa.string()), to)
    if _is_int(to):
        return _to_integer(v, to)
    if pa.types.is_decimal(to):
        return _to_decimal(v, to)
    if pa.types.is_floating(to):
        if _is_int(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            return _cast_plain(v, to, safe=False)  # rounds to nearest; beyond FLOAT: infinity
        if pa.types.is_decimal(t) and to == pa.float64():
            return _to_double(v)
        raise _Unsupported(f"CAST of {_sql_type(t)} to {_sql_type(to)}")
    if pa.types.is_boolean(to):
        if _is_int(t):
            return _pc.not_equal(v, pa.scalar(0, t))
        if _is_string(t):
            return _python_map(v, _string_to_boolean, pa.bool_())
        raise _Unsupported(f"CAST of {_sql_type(t)} to BOOLEAN")
    if pa.types.is_date(to):
        if pa.types.is_timestamp(t):
            return _utc(v).cast(pa.date32())  # the UTC day (floored before 1970)
        if _is_string(t):
            return _parse_text(v, _DATE_TEXT, pa.date32(), "DATE", "YYYY-MM-DD")
        raise _Unsupported(f"CAST of {_sql_type(t)} to DATE")
    if pa.types.is_timestamp(to):
        if pa.types.is_date(t) or pa.types.is_timestamp(t):
            return _utc(v).cast(to)  # the same instant, in UTC
        if _is_string(t):
            zoned = getattr(to, "tz", None) is not None
            return _parse_text(v, _ZONED_TIMESTAMP_TEXT if zoned else _TIMESTAMP_TEXT, to,
                               _sql_type(to), "YYYY-MM-DD[ HH:MM[:SS[.ffffff]]]"
                               + ("[Z|+HH:MM]" if zoned else ""))
        raise _Unsupported(f"CAST of {_sql_type(t)} to {_sql_type(to)}")
    if pa.types.is_binary(to) and _is_string(t):
        return v.cast(to)
    raise _Unsupported(f"CAST of {_sql_type(t)} to {_sql_type(to)}")


def _to_integer(v: Value, to: pa.DataType) -> Value:
    t = _type(v)
    low, high = INTEGER_RANGES[to]
    name = _sql_type(to)

    def overflow_text(value: Any) -> str:
        return f"CAST of {value!r} to {name} overflows ({low} to {high})"

    def overflow(i: int) -> str:
        return overflow_text(_at(v, i))

    if pa.types.is_boolean(t):
        return v.cast(to)
    if _is_int(t):
        if t.bit_width > to.bit_width:
            _fail_where(_pc.or_(_pc.less(v, pa.scalar(low, t)), _pc.greater(v, pa.scalar(high, t))),
                        overflow)
        return v.cast(to)
    if pa.types.is_floating(t):
        x = _cast_plain(v, pa.float64())
        # DoubleExactNumeric: floor(x) <= MAX && ceil(x) >= MIN, NaN failing both.
        ok = _pc.and_(_pc.less_equal(_pc.floor(x), float(high)),
                      _pc.greater_equal(_pc.ceil(x), float(low)))
        _fail_where(_pc.invert(ok), overflow)
        # A DOUBLE equal to 2^63 passes (BIGINT's maximum is 2^63 as a DOUBLE) and Java's
        # conversion saturates it to the maximum.
        saturated = _pc.greater_equal(x, float(high) + 1.0) if to == pa.int64() else None
        out = _pc.trunc(x).cast(to, safe=False)
        if saturated is not None:
            out = _pc.if_else(saturated, pa.scalar(high, to), out)
        return out
    if pa.types.is_decimal(t):
        through_double = _precision_scale(t)[0] > 18 and to != pa.int64()

        def from_decimal(d: Decimal, i: int | None) -> int:
            exact = int(d.to_integral_value(rounding=ROUND_DOWN))
            if not low <= exact <= high:
                raise _RowFailure(overflow_text(d), i)
            if through_double and int(float(d)) != exact:
                # Spark may hold such a value as a BigDecimal and convert it through a DOUBLE.
                raise _RowFailure(
                    f"CAST of {d} to {name}: Spark may convert it through a DOUBLE, which "
                    f"truncates to {int(float(d))}, not {exact}", i, refused=True)
            return exact
        return _python_map(v, from_decimal, to)
    if _is_string(t):
        return _python_map(v, lambda s, i: _string_to_integer(s, i, to), to)
    raise _Unsupported(f"CAST of {_sql_type(t)} to {name}")


#: What Spark trims from text before reading a number, a boolean or a date from it
#: (``UTF8String.trimAll``: white space and ISO control characters of ASCII).
_TRIMMED = "".join(chr(c) for c in range(0x21)) + "\x7f"
_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _string_to_integer(s: str, i: int | None, to: pa.DataType) -> int:
    text = s.strip(_TRIMMED)
    low, high = INTEGER_RANGES[to]
    if not _INTEGER_TEXT.fullmatch(text):
        raise _RowFailure(f"CAST of {s!r} to {_sql_type(to)}: not an integer", i)
    value = int(text)
    if not low <= value <= high:
        raise _RowFailure(f"CAST of {s!r} to {_sql_type(to)} overflows ({low} to {high})", i)
    return value


def _string_to_boolean(s: str, i: int | None) -> bool:
    text = s.strip(_TRIMMED).lower()
    if text in ("t", "true", "y", "yes", "1"):
        return True
    if text in ("f", "false", "n", "no", "0"):
        return False
    raise _RowFailure(f"CAST of {s!r} to BOOLEAN: not a boolean", i)


def _parse_text(v: Value, pattern: str, to: pa.DataType, name: str, form: str) -> Value:
    """Text as a DATE or TIMESTAMP: the plain forms only (``form``)."""
    trimmed = _pc.utf8_trim(v, characters=_TRIMMED)
    plain = _pc.match_substring_regex(trimmed, pattern=f"^(?:{pattern})$")
    _fail_where(_pc.invert(plain), lambda i: (
        f"CAST of {_at(v, i)!r} to {name}: deltacommit reads {form} (Spark's ANSI cast fails "
        "on text that is not one, and reads some other forms deltacommit does not)"),
        refused=True)
    try:
        if getattr(to, "tz", None) is None:
            return trimmed.cast(to)
        # Arrow reads a zone-less text only as a zone-less timestamp, and a zoned one only as
        # a zoned one: each kind of row is read as its kind (a zone-less text is UTC, the
        # session time zone).
        zoned = _pc.match_substring_regex(trimmed, pattern=_ZONE_TEXT + "$")
        null = pa.scalar(None, pa.string())
        with_zone = _pc.if_else(zoned, trimmed, null).cast(to)
        without = _pc.if_else(zoned, null, trimmed).cast(_TIMESTAMP_NTZ).cast(to)
        return _pc.if_else(zoned, with_zone, without)
    except pa.ArrowInvalid:
        def check(s: str, i: int | None) -> None:
            zoned = re.search(_ZONE_TEXT + "$", s) is not None
            try:
                pa.scalar(s).cast(to if zoned or to == pa.date32() else _TIMESTAMP_NTZ)
            except pa.ArrowInvalid:
                raise _RowFailure(f"CAST of {s!r} to {name}: not a valid {name}", i) from None
        _python_map(trimmed, check, pa.null())
        raise  # pragma: no cover - some row failed above


def _only_checked_decimal(v: Value, t: pa.DataType, to: pa.DataType) -> Value:
    """Integers already known to fit ``to`` as that DECIMAL (through one wide enough to
    hold them with ``to``'s scale, as Arrow's conversion asks)."""
    whole = _cast_plain(v, _INTEGER_AS_DECIMAL[t.bit_width])
    precision, scale = _precision_scale(to)
    if precision - scale >= _precision_scale(_type(whole))[0]:
        return _cast_plain(whole, to)
    wide = pa.decimal128(min(MAX_DECIMAL_PRECISION, _precision_scale(_type(whole))[0] + scale),
                         scale)
    return _cast_plain(_cast_plain(whole, wide), to)


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
    (p0, s0), (precision, scale) = _precision_scale(_type(v)), _precision_scale(to)
    if _is_scalar(v) or p0 > _FAST_PRECISION or precision > _FAST_PRECISION:
        return None
    units = _units(v)
    valid = _pc.is_valid(v).to_numpy(zero_copy_only=False)
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
        raise _RowFailure(f"CAST of {_at(v, row)} to {_sql_type(to)} overflows: it needs more "
                          f"than {precision} digits", row)
    return _decimal_from_units(units, valid, to)


def _doubles_to_decimal(v: Value, to: pa.DataType,
                        exact: Callable[[float, int | None], Decimal | None]) -> Value | None:
    """FLOAT/DOUBLE values as a DECIMAL of at most 18 digits, vectorized: a value's shortest
    decimal text rounds HALF_UP as the value itself rounds to nearest unless the value lies
    within a few units of its last place of a midpoint; those values (and huge ones) go
    through ``exact``, Spark's rule written out.  None where the general path must do it."""
    precision, scale = _precision_scale(to)
    if _is_scalar(v) or precision > _FAST_PRECISION or scale > 15:
        return None
    x = _pc.fill_null(v.cast(pa.float64()), math.nan).to_numpy(zero_copy_only=False)
    valid = _pc.is_valid(v).to_numpy(zero_copy_only=False) & np.isfinite(x)
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
        raise _RowFailure(f"CAST of {float(x[row])!r} to {_sql_type(to)} overflows: it needs "
                          f"more than {precision} digits", row)
    return _decimal_from_units(units, valid, to)


def _half_up(d: Decimal, scale: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 100
        return d.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)


def _to_decimal(v: Value, to: pa.DataType) -> Value:
    t = _type(v)
    precision, scale = _precision_scale(to)
    limit = Decimal(10) ** (precision - scale)

    def check(d: Decimal, i: int | None, source: Any) -> Decimal:
        # At least 10**(p - s) before rounding overflows however it rounds (and 1e300 would
        # need 300 digits to round).
        rounded = d if d and d.adjusted() >= precision - scale else _half_up(d, scale)
        if abs(rounded) >= limit:
            raise _RowFailure(f"CAST of {source!r} to {_sql_type(to)} overflows: it needs "
                              f"more than {precision} digits", i)
        return rounded

    if pa.types.is_boolean(t):
        v, t = v.cast(pa.int8()), pa.int8()
    if _is_int(t):
        digits = precision - scale  # the integer digits the type holds
        high = INTEGER_RANGES[t][1]
        if 10 ** digits <= high:
            bound = 10 ** digits
            _fail_where(_pc.or_(_pc.greater_equal(v, pa.scalar(bound, t)),
                                _pc.less_equal(v, pa.scalar(-bound, t))), lambda i: (
                f"CAST of {_at(v, i)} to {_sql_type(to)} overflows: it needs more than "
                f"{precision} digits"))
        return _only_checked_decimal(v, t, to)
    if pa.types.is_decimal(t):
        fast = _rescaled(v, to)
        if fast is not None:
            return fast
        return _python_map(v, lambda d, i: check(d, i, d), to)
    if pa.types.is_floating(t):
        def from_double(x: float, i: int | None) -> Decimal | None:
            if math.isnan(x) or math.isinf(x):
                return None  # Decimal(NaN) throws NumberFormatException: NULL, even in ANSI
            return check(Decimal(repr(float(x))), i, x)
        fast = _doubles_to_decimal(v, to, from_double)
        if fast is not None:
            return fast
        return _python_map(v, from_double, to)
    if _is_string(t):
        def from_text(s: str, i: int | None) -> Decimal:
            text = s.strip(_TRIMMED)
            if not _DECIMAL_TEXT.fullmatch(text):
                raise _RowFailure(f"CAST of {s!r} to {_sql_type(to)}: not a number", i)
            try:
                return check(Decimal(text), i, s)
            except InvalidOperation:
                raise _RowFailure(f"CAST of {s!r} to {_sql_type(to)} overflows", i) from None
        return _python_map(v, from_text, to)
    raise _Unsupported(f"CAST of {_sql_type(t)} to {_sql_type(to)}")


_FIRST_DAY = -719162  # 0001-01-01, days from 1970-01-01
_LAST_DAY = 2932896  # 9999-12-31


def _to_string(v: Value) -> Value:
    """A value as Spark's CAST to STRING writes it (ANSI mode)."""
    t = _type(v)
    if t == pa.string():
        return v
    if _is_string(t):
        return v.cast(pa.string())
    if _is_int(t) or pa.types.is_boolean(t) or pa.types.is_null(t):
        return v.cast(pa.string())
    if pa.types.is_decimal(t):
        return _python_map(v, lambda d, _: format(d, "f"), pa.string())  # toPlainString
    if pa.types.is_date(t):
        days = v.cast(pa.int32())
        _fail_where(_pc.or_(_pc.less(days, _FIRST_DAY), _pc.greater(days, _LAST_DAY)),
                    lambda i: f"the date {_at(v, i)} as text: deltacommit writes years 1 to "
                              "9999 only", refused=True)
        return v.cast(pa.string())
    raise _Unsupported(f"CAST of {_sql_type(t)} to STRING (Spark's text differs from Arrow's)")


# ---- dates and times


def _utc(v: Value) -> Value:
    """A date or timestamp's wall-clock value in UTC, as a zone-less microsecond timestamp
    (what Spark's date parts see in a UTC session)."""
    t = _type(v)
    if pa.types.is_date(t):
        return v.cast(_TIMESTAMP_NTZ)
    if getattr(t, "tz", None) is not None:
        return v.cast(pa.timestamp(t.unit)).cast(_TIMESTAMP_NTZ)  # type: ignore[attr-defined]
    return _cast_plain(v, _TIMESTAMP_NTZ)


def _to_date(v: Value) -> Value:
    t = _type(v)
    if pa.types.is_null(t) or pa.types.is_date(t):
        return _cast_plain(v, pa.date32())
    if pa.types.is_timestamp(t) or _is_string(t):
        return _ansi_cast(v, pa.date32())
    raise _Unsupported(f"to_date of {_sql_type(t)}")


def _as_timestamp(v: Value) -> Value:
    """A date, timestamp or timestamp text as a zone-less timestamp in UTC."""
    t = _type(v)
    if _is_temporal(t):
        return _utc(v)
    if _is_string(t):
        return _utc(_ansi_cast(v, _TIMESTAMP_LTZ))
    if pa.types.is_null(t):
        return v.cast(_TIMESTAMP_NTZ)
    raise _Unsupported(f"a date part of {_sql_type(t)}")


def _date_part(name: str, v: Value) -> Value:
    t = _type(v)
    if name in ("year", "month", "day") and (_is_string(t) or pa.types.is_date(t)):
        v = _to_date(v)  # Spark casts the argument to DATE
    return _cast_plain(getattr(pc, name)(_as_timestamp(v)), pa.int32())


_JAVA_PATTERN = {("y", 4): "%Y", ("M", 2): "%m", ("d", 2): "%d", ("H", 2): "%H", ("m", 2): "%M",
                 ("s", 2): "%S"}


def _strftime_pattern(pattern: str) -> str:
    """A Java ``DateTimeFormatter`` pattern as ``strftime``'s, for the zero-padded numeric
    fields whose output the two agree on; anything else is unsupported."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            j = pattern.find("'", i + 1)
            if j < 0:
                raise _Unsupported(f"date_format pattern {pattern!r} has an unterminated quote")
            out.append(pattern[i + 1:j].replace("%", "%%") if j > i + 1 else "'")
            i = j + 1
            continue
        if c.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == c:
                j += 1
            code = _JAVA_PATTERN.get((c, j - i))
            if code is None:
                raise _Unsupported(f"date_format pattern letter {pattern[i:j]!r} (supported: "
                                   "yyyy, MM, dd, HH, mm, ss)")
            out.append(code)
            i = j
            continue
        out.append("%%" if c == "%" else c)
        i += 1
    return "".join(out)


def _date_format(node: Call, values: list[Value]) -> Value:
    fmt = node.args[1]
    if not isinstance(fmt, Const) or not isinstance(fmt.value, str):
        raise _Unsupported("date_format with a pattern that is not a string literal")
    pattern = _strftime_pattern(fmt.value)
    ts = _as_timestamp(values[0])
    year = _pc.year(ts)
    _fail_where(_pc.or_(_pc.less(year, 1), _pc.greater(year, 9999)), lambda i: (
        f"date_format of {_at(values[0], i)}: deltacommit formats years 1 to 9999 only"),
        refused=True)
    # Whole seconds: Arrow's %S prints a microsecond timestamp's fraction as well.
    seconds = _pc.floor_temporal(ts, unit="second").cast(pa.timestamp("s"))
    return _pc.strftime(seconds, format=pattern)


def _truncate(node: Call, values: list[Value]) -> Value:
    """``date_trunc(fmt, ts)`` (a timestamp, weeks from Monday) and ``trunc(date, fmt)`` (a
    date, to a year, quarter, month or week)."""
    is_date = node.name == "trunc"
    fmt, value = (node.args[1], values[0]) if is_date else (node.args[0], values[1])
    if not isinstance(fmt, Const) or not isinstance(fmt.value, str):
        raise _Unsupported(f"{node.name} with a format that is not a string literal")
    unit = _TRUNC_UNITS.get(fmt.value.strip().upper())
    if unit is None or (is_date and unit not in _DATE_UNITS):
        raise _Unsupported(f"{node.name} to {fmt.value!r}")
    if is_date:
        days = _to_date(value).cast(_TIMESTAMP_NTZ)
        return _pc.floor_temporal(days, unit=unit, week_starts_monday=True).cast(pa.date32())
    t = _type(value)
    floored = _pc.floor_temporal(_as_timestamp(value), unit=unit, week_starts_monday=True)
    ntz = pa.types.is_timestamp(t) and getattr(t, "tz", None) is None
    return floored if ntz else floored.cast(_TIMESTAMP_LTZ)


# ---- strings


def _substring(args: Sequence[Node], values: list[Value]) -> Value:
    """Spark's ``substring(s, pos[, len])`` (``UTF8String.substringSQL``): 1-based, 0
    counts as 1, negative from the end; Arrow slices by code point, as Spark counts."""
    consts = args[1:]
    if not all(isinstance(a, Const) and a.type == pa.int32() for a in consts):
        raise _Unsupported("substring with a position or length that is not an INT literal")
    pos = consts[0].value  # type: ignore[union-attr]
    length = consts[1].value if len(consts) > 1 else None  # type: ignore[union-attr]
    s = _to_string(values[0])
    if length is not None and length <= 0:
        return _pc.if_else(_pc.is_valid(s), pa.scalar("", _type(s)), pa.scalar(None, _type(s)))
    start = pos - 1 if pos > 0 else pos
    if length is None:
        stop = None
    elif pos >= 0:
        stop = start + length
    else:
        stop = None if pos + length >= 0 else pos + length
    return _pc.utf8_slice_codeunits(s, start=start, stop=stop)


_CASED = frozenset({"Lu", "Ll", "Lt"})


def _case_map(v: Value, upper: bool) -> Value:
    """``upper``/``lower``: ASCII text through Arrow, other text through Python's full Unicode
    case mapping, the mapping ICU's root locale applies (module docstring)."""
    s = _to_string(v)
    ascii_text = _pc.string_is_ascii(s)
    if _first_true(_pc.invert(ascii_text)) is None:
        return _pc.ascii_upper(s) if upper else _pc.ascii_lower(s)

    def convert(text: str, i: int | None) -> str:
        if not text.isascii():
            for c in text:
                if c.isascii():
                    continue
                category = unicodedata.category(c)
                same = (c.upper() if upper else c.lower()) == c
                if category == "Cn" or (category in _CASED and same and category != (
                        "Lu" if upper else "Ll")):
                    raise _RowFailure(
                        f"{'upper' if upper else 'lower'} of {text!r}: {c!r} (U+{ord(c):04X}) "
                        f"{'is not in' if category == 'Cn' else 'has no case partner in'} the "
                        f"Unicode {unicodedata.unidata_version} this Python knows, and a newer "
                        "Unicode (ICU, which Spark uses) may map it", i, refused=True)
        return text.upper() if upper else text.lower()

    if _is_scalar(s):
        return _python_map(s, convert, pa.string())
    mapped = _pc.ascii_upper(s) if upper else _pc.ascii_lower(s)
    other = _pc.fill_null(_pc.invert(ascii_text), False)
    rows = np.nonzero(other.to_numpy(zero_copy_only=False))[0]
    texts = s.take(pa.array(rows, pa.int64())).to_pylist()
    return _pc.replace_with_mask(mapped, other, pa.array(
        [convert(text, int(i)) for text, i in zip(texts, rows, strict=True)], pa.string()))


def _concat(values: list[Value]) -> Value:
    strings = [_to_string(v) for v in values]
    if len(strings) == 1:
        return strings[0]
    return _pc.binary_join_element_wise(*strings, "", null_handling="emit_null")


def _common_type(values: list[Value]) -> pa.DataType:
    """The type coalesce's arguments share (``findWiderCommonType``)."""
    types = [_type(v) for v in values if not pa.types.is_null(_type(v))]
    if not types:
        return pa.null()
    first = types[0]
    if all(t == first for t in types):
        return first
    if all(_is_numeric(t) for t in types):
        common = first
        for t in types[1:]:
            common = _numeric_plan(common, t, [None, None], "coalesce", None)[2]
        return common
    if all(_is_string(t) for t in types):
        return pa.string()
    if all(_is_temporal(t) for t in types):
        return next((t for t in types if pa.types.is_timestamp(t)), first)
    raise _Unsupported(f"coalesce of {sorted(set(map(_sql_type, types)))}")


def _implicit_cast(v: Value, t: pa.DataType) -> Value:
    """``v`` as the common type ``t`` of its operation (Spark's implicit casts widen)."""
    source = _type(v)
    if source == t:
        return v
    if pa.types.is_null(source):
        return v.cast(t)
    if pa.types.is_decimal(t) and (_is_int(source) or pa.types.is_decimal(source)):
        return _widen_decimal(v, t)
    if pa.types.is_floating(t) and _is_numeric(source):
        return _to_double(v) if t == pa.float64() else _cast_plain(v, t, safe=False)
    if _is_int(t) and _is_int(source):
        return _cast_plain(v, t)
    return _ansi_cast(v, t)


# ---- conditions


def _comparable(a: Value, b: Value, nodes: Sequence[Node | None]) -> tuple[Value, Value]:
    """Two operands in one type, as Spark coerces a comparison: numbers to their common type,
    a string meets a date or timestamp as one, a date meets a timestamp at midnight (UTC)."""
    ta, tb = _type(a), _type(b)
    if pa.types.is_null(ta) or pa.types.is_null(tb):
        other = tb if pa.types.is_null(ta) else ta
        return a.cast(other), b.cast(other)
    if _is_numeric(ta) and _is_numeric(tb):
        a, b, _ = _unify(a, b, nodes, "comparing")
        return a, b
    if _is_string(ta) and _is_string(tb):
        return _cast_plain(a, pa.string()), _cast_plain(b, pa.string())
    if ta == tb:
        return a, b
    if pa.types.is_date(ta) and (pa.types.is_date(tb) or _is_string(tb)):
        return a, _to_date(b)
    if pa.types.is_date(tb) and _is_string(ta):
        return _to_date(a), b
    if (_is_temporal(ta) or _is_string(ta)) and (_is_temporal(tb) or _is_string(tb)):
        return _as_timestamp(a), _as_timestamp(b)
    raise _Unsupported(f"comparing {_sql_type(ta)} with {_sql_type(tb)}")


def _boolean(v: Value, what: str) -> Value:
    t = _type(v)
    if pa.types.is_null(t):
        return v.cast(pa.bool_())
    if not pa.types.is_boolean(t):
        raise _Unsupported(f"{what} of {_sql_type(t)}, which is not a condition")
    return v


def _compare(op: str, a: Value, b: Value, nodes: Sequence[Node | None]) -> Value:
    a, b = _comparable(a, b, nodes)
    return compare(op, a, b, pa.types.is_floating(_type(a)))


def _condition(node: Call, values: list[Value]) -> Value:
    """Comparisons and SQL's three-valued AND, OR, NOT, IS NULL, IN and BETWEEN."""
    name, nodes = node.name, node.args
    if name in ("=", "!=", "<", "<=", ">", ">="):
        return _compare(name, values[0], values[1], nodes)
    if name == "<=>":
        a, b = _comparable(values[0], values[1], nodes)
        return null_safe_equal(a, b, pa.types.is_floating(_type(a)))
    if name in ("and", "or"):
        a, b = _boolean(values[0], name.upper()), _boolean(values[1], name.upper())
        return _pc.and_kleene(a, b) if name == "and" else _pc.or_kleene(a, b)
    if name == "not":
        return _pc.invert(_boolean(values[0], "NOT"))
    if name in ("isnull", "isnotnull"):
        return _pc.is_null(values[0]) if name == "isnull" else _pc.is_valid(values[0])
    if name == "between":
        lo = _compare(">=", values[0], values[1], (nodes[0], nodes[1]))
        hi = _compare("<=", values[0], values[2], (nodes[0], nodes[2]))
        return _pc.and_kleene(lo, hi)
    # IN: x = any item, with NULL where no item is equal and one is NULL (or x is NULL)
    found: Value = pa.scalar(False)
    for item, item_node in zip(values[1:], nodes[1:], strict=True):
        found = _pc.or_kleene(found, _compare("=", values[0], item, (nodes[0], item_node)))
    return found


def _call(node: Call, values: list[Value]) -> Value:
    name = node.name
    if name in _CONDITIONS:
        return _condition(node, values)
    if name in ("+", "-", "*", "/", "%"):
        return _arith(name, values[0], values[1], node.args)
    if name == "negate":
        return _negate(values[0])
    if name == "abs":
        return _abs(values[0])
    if name in ("year", "month", "day", "hour", "minute", "second"):
        return _date_part(name, values[0])
    if name == "to_date":
        return _to_date(values[0])
    if name == "date_format":
        return _date_format(node, values)
    if name == "substring":
        return _substring(node.args, values)
    if name in ("date_trunc", "trunc"):
        return _truncate(node, values)
    if name == "length":
        if not _is_string(_type(values[0])):
            raise _Unsupported(f"length of {_sql_type(_type(values[0]))}")
        return _pc.utf8_length(values[0])
    if name == "concat":
        return _concat(values)
    if name in ("lower", "upper"):
        return _case_map(values[0], name == "upper")
    if name in ("trim", "ltrim", "rtrim"):
        fn = {"trim": "utf8_trim", "ltrim": "utf8_ltrim", "rtrim": "utf8_rtrim"}[name]
        return getattr(pc, fn)(_to_string(values[0]), characters=" ")
    if name == "coalesce":
        t = _common_type(values)
        return _pc.coalesce(*[_implicit_cast(v, t) for v in values])
    raise _Unsupported(f"function {name}")  # pragma: no cover - the parser admits only FUNCTIONS


def _column(data: pa.Table, name: str) -> Value:
    """A column by Spark's case-insensitive name resolution."""
    if name in data.column_names:
        return data.column(name).combine_chunks()
    found = [c for c in data.column_names if c.lower() == name.lower()]
    if len(found) == 1:
        return data.column(found[0]).combine_chunks()
    raise _Unsupported(f"column {name!r}, which is not among the columns {data.column_names}")


#: Operators Spark evaluates the second operand of only where the first is not NULL
#: (``BinaryExpression.nullSafeEval`` and its generated code).
_NULL_INTOLERANT = frozenset({"+", "-", "*", "=", "!=", "<", "<=", ">", ">=", "date_trunc",
                              "trunc", "date_format"})
#: Operators Spark evaluates the divisor of first, and the dividend only where the divisor is
#: not NULL (``DivModLike``).
_DIVISOR_FIRST = frozenset({"/", "%"})


def _order(node: Call | Cast) -> tuple[int, ...]:
    """The order Spark evaluates the operands of ``node`` in."""
    if isinstance(node, Cast):
        return (0,)
    if node.name in _DIVISOR_FIRST:
        return (1, 0)
    return tuple(range(len(node.args)))


def _open(mask: Value) -> Value | None:
    """``mask`` as the rows still to evaluate, None when that is every row (of at least one:
    over no rows, a constant operand is not evaluated either)."""
    if not _is_scalar(mask) and len(mask) == 0:
        return mask
    if _first_true(_pc.invert(_pc.fill_null(mask, False))) is None:
        return None
    return _pc.fill_null(mask, False)


def _gate(node: Call, done: list[Value]) -> Value | None:
    """The rows Spark evaluates ``node``'s next operand for, given the operands ``done`` (in
    evaluation order), as a mask; None for every row.  Spark evaluates row by row, and an
    operand it does not evaluate for a row cannot fail on it: AND stops at FALSE, OR at TRUE,
    coalesce at a value, IN at an equal item, an arithmetic operation or a comparison at a NULL
    operand, a division at a NULL divisor."""
    name, first = node.name, done[0]
    if name in _NULL_INTOLERANT or name in _DIVISOR_FIRST:
        return _open(_pc.is_valid(first))
    last = done[-1]
    if name in ("and", "or"):
        if not (pa.types.is_boolean(_type(last)) or pa.types.is_null(_type(last))):
            return None  # not a condition: the operation refuses it
        decided = pa.scalar(name == "or")
        return _open(_pc.fill_null(_pc.not_equal(last, decided), True))
    if name == "coalesce":
        return _open(_pc.is_null(last))
    if name == "in":
        found: Value = pa.scalar(False)
        for k in range(1, len(done)):
            found = _pc.or_kleene(found, _compare("=", first, done[k],
                                                  (node.args[0], node.args[k])))
        return _open(_pc.and_(_pc.is_valid(first),
                              _pc.invert(_pc.fill_null(found, False))))
    if name == "between":
        if len(done) == 1:
            return _open(_pc.is_valid(first))
        # x <= hi is evaluated where x >= lo is not FALSE, and it too stops at a NULL x.
        low = _compare(">=", first, done[1], (node.args[0], node.args[1]))
        return _open(_pc.and_(_pc.is_valid(first),
                              _pc.fill_null(_pc.not_equal(low, pa.scalar(False)), True)))
    return None


def _only(active: Value | None, v: Value) -> Value:
    """``v`` where ``active``, NULL elsewhere: an operation on rows Spark would not evaluate
    must not fail on them."""
    if active is None:
        return v
    return _pc.if_else(active, v, pa.scalar(None, _type(v)))


def _evaluate(root: Node, data: pa.Table) -> Value:
    """The value of ``root`` for every row of ``data``, evaluated without recursion (an
    operator chain thousands of terms long is a deep tree), operand by operand in Spark's
    order, each for the rows Spark evaluates it for (``_gate``)."""
    # A frame: the node, the values of its operands so far (in evaluation order), and the rows
    # it is evaluated for (None: all of them).
    stack: list[tuple[Node, list[Value], Value | None]] = [(root, [], None)]
    result: Value = None
    while stack:
        node, done, active = stack[-1]
        if isinstance(node, Ref):
            stack.pop()
            result = _column(data, node.name)
        elif isinstance(node, Const):
            stack.pop()
            result = pa.scalar(node.value, node.type)
        else:
            order = _order(node)
            if len(done) < len(order):
                child_active = active
                if done and isinstance(node, Call):
                    gate = _gate(node, done)
                    if gate is not None:
                        child_active = gate if active is None else _pc.and_(active, gate)
                child = node.child if isinstance(node, Cast) else node.args[order[len(done)]]
                stack.append((child, [], child_active))
                continue
            stack.pop()
            operands = [done[order.index(k)] for k in range(len(order))]
            if active is not None:
                operands = [_only(active, v) for v in operands]
            result = (_ansi_cast(operands[0], node.to) if isinstance(node, Cast)
                      else _call(node, operands))
        if stack:
            stack[-1][1].append(result)
    return result


# --------------------------------------------------------------------------- the write stage


@dataclass(frozen=True, slots=True)
class GeneratedColumn:
    """A top-level column and its ``delta.generationExpression``."""

    name: str
    expression: str


def generated_columns(schema: pa.Schema) -> list[GeneratedColumn]:
    """The generated columns of a table schema (Delta allows them at the top level only)."""
    out = []
    for f in schema:
        raw = (f.metadata or {}).get(GENERATION_KEY)
        if raw is not None:
            out.append(GeneratedColumn(f.name, raw.decode("utf-8")))
    return out


def _describe(table: str, column: GeneratedColumn) -> str:
    return f"table {table}: generated column {column.name!r} ({column.expression})"


class _Failed(Exception):
    """The evaluation failed on a row (``failure``) or cannot follow Spark (``message``)."""

    def __init__(self, message: str, failure: _RowFailure | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.failure = failure


def _values(expression: str, data: pa.Table, to: pa.DataType | None) -> pa.ChunkedArray[Any]:
    """The expression's value for each row of ``data`` (as ``to`` if given); _Failed saying
    why if it fails on a row or this module cannot evaluate it."""
    try:
        value = _evaluate(parse_expression(expression), data)
        if to is not None:
            value = _ansi_cast(value, to)
        if isinstance(value, pa.Scalar):
            value = pa.array([value.as_py()] * data.num_rows, value.type)
    except _RowFailure as e:
        raise _Failed(e.message, e) from None
    except InvalidArgumentError as e:
        raise _Failed(str(e)) from None
    except (_Unsupported, pa.ArrowInvalid, pa.ArrowNotImplementedError,
            pa.ArrowTypeError) as e:
        raise _Failed(str(e)) from None
    except (ArithmeticError, ValueError, TypeError, LookupError) as e:
        # A case no rule above foresaw: refused, never a raw exception or a guessed value.
        raise _Failed(f"{type(e).__name__}: {e}") from None
    if isinstance(value, pa.Array):
        value = pa.chunked_array([value])
    out: pa.ChunkedArray[Any] = value
    return out


def _row_text(data: pa.Table, row: int | None) -> str:
    if row is None:
        return "for every row"
    return f"in row {data.slice(row, 1).to_pylist()[0]!r}"


def failure_error(what: str, failed: _Failed, data: pa.Table) -> DeltaCommitError:
    """The error for ``what`` (naming the table and the expression) failing on ``data``."""
    f = failed.failure
    if f is None:
        return UnsupportedProtocolError(
            f"{what} cannot be evaluated by deltacommit ({failed.message}); refusing to write "
            "rather than store a value that may differ from Spark's")
    if f.refused:
        return UnsupportedProtocolError(
            f"{what}: {f.message} {_row_text(data, f.row)}; refusing to write rather than store "
            "a value that may differ from Spark's. Nothing was written")
    return ExpressionValueError(
        f"{what} fails {_row_text(data, f.row)}: {f.message}, an error in Spark's ANSI mode "
        "(Spark 4's default). Nothing was written")


def evaluate(column: GeneratedColumn, data: pa.Table, to: pa.DataType, table: str
             ) -> pa.ChunkedArray[Any]:
    """The column's values for the rows of ``data`` (columns in the table's types), as ``to``;
    UnsupportedProtocolError naming the expression if this module cannot evaluate it as Spark
    does, ExpressionValueError naming the row and the value where Spark fails on it."""
    try:
        return _values(column.expression, data, to)
    except _Failed as e:
        raise failure_error(_describe(table, column), e, data) from None


class ConditionFailed(InvalidArgumentError):
    """A condition failed on a row, or cannot be evaluated: ``error(what)`` is the error to
    raise, naming ``what`` (the constraint and its table)."""

    def __init__(self, failed: _Failed, data: pa.Table) -> None:
        super().__init__(failed.message)
        self._failed = failed
        self._data = data

    @property
    def failure_row_known(self) -> bool:
        """Whether it failed on the values of a row (rather than on the expression itself)."""
        return self._failed.failure is not None

    def error(self, what: str) -> DeltaCommitError:
        return failure_error(what, self._failed, self._data)


def evaluate_condition(expression: str, data: pa.Table) -> pa.ChunkedArray[Any]:
    """A boolean expression (a CHECK constraint beyond the predicate parser: arithmetic,
    functions, two columns) for each row: TRUE, FALSE or NULL; ConditionFailed (an
    InvalidArgumentError) if it fails on a row or this module cannot evaluate it."""
    try:
        values = _values(expression, data, None)
    except _Failed as e:
        raise ConditionFailed(e, data) from None
    if pa.types.is_null(values.type):
        values = values.cast(pa.bool_())
    if not pa.types.is_boolean(values.type):
        raise ConditionFailed(_Failed(f"{expression!r} is a {values.type} value, not a "
                                      "condition"), data)
    return values


def expression_type(expression: str, schema: pa.Schema) -> pa.DataType:
    """The type of an expression's values over columns of ``schema`` (Spark's type, which a
    generated column must have); InvalidArgumentError if it cannot be evaluated."""
    try:
        found: pa.DataType = _values(expression, schema.empty_table(), None).type
        return found
    except _Failed as e:
        raise InvalidArgumentError(f"{expression!r} cannot be evaluated: {e.message}") from None


def check_expressions(schema: pa.Schema, table: str) -> None:
    """Refuse, when a table is created, generation expressions this module cannot evaluate
    for the schema's types (InvalidArgumentError naming the column), rather than a table every
    later write refuses: each is evaluated over no rows."""
    empty = schema.empty_table()
    for c in generated_columns(schema):
        try:
            _values(c.expression, empty, schema.field(c.name).type)
        except _Failed as e:
            raise InvalidArgumentError(
                f"table {table}: generated column {c.name!r} has expression {c.expression!r}, "
                f"which deltacommit cannot evaluate: {e.message}") from None


def fill_generated(data: pa.Table, columns: Sequence[GeneratedColumn], schema: pa.Schema,
                   table: str) -> pa.Table:
    """``data`` (the table's other columns, in its types) with the missing generated
    ``columns`` computed and appended."""
    for c in columns:
        values = evaluate(c, data, schema.field(c.name).type, table)
        data = data.append_column(schema.field(c.name), values)
    return data


def check_generated(data: pa.Table, columns: Sequence[GeneratedColumn], table: str) -> None:
    """GeneratedColumnMismatchError unless every supplied value equals its expression's,
    NULL-safely (``(column <=> expression) IS TRUE``, NaN equal to NaN)."""
    if data.num_rows == 0:
        return
    for c in columns:
        supplied = data.column(c.name).combine_chunks()
        expected = evaluate(c, data, supplied.type, table).combine_chunks()
        ok = null_safe_equal(supplied, expected, pa.types.is_floating(supplied.type))
        bad = _pc.invert(ok)
        count = int(_pc.sum(_pc.cast(bad, pa.int64())).as_py() or 0)
        if count:
            i = int(_pc.index(bad, True).as_py())
            raise GeneratedColumnMismatchError(
                f"{_describe(table, c)}: {count} row(s) supply a value other than the "
                f"expression's, for example {supplied[i].as_py()!r} where the expression gives "
                f"{expected[i].as_py()!r} (row {data.slice(i, 1).to_pylist()[0]!r}); leave the "
                "column out to have it computed. Nothing was written")


__all__ = ["GENERATION_KEY", "ConditionFailed", "GeneratedColumn", "check_expressions",
           "check_generated", "evaluate", "evaluate_condition", "expression_type",
           "failure_error",
           "fill_generated", "generated_columns", "parse_expression"]
