"""Generated columns: values a SQL expression computes from the row.  Pure: no I/O.

PROTOCOL.md "Generated Columns": a column whose field metadata holds
``delta.generationExpression`` must satisfy ``(column <=> expression) IS TRUE`` in every row
written.  Spark computes the column when an INSERT leaves it out; a writer that skipped the
check would commit rows Spark's readers (partition pruning on ``year(ts)``, say) trust blindly.
So the write stage (``datafiles.conform_rows``) computes the column when the data lacks it and
compares it, NULL-safely, when the data supplies it.

Expressions are Spark SQL.  This module evaluates, column-wise with ``pyarrow.compute``, the
subset users write for generated columns: column references, literals, ``+ - * / %``,
``||``, ``CAST(x AS type)``, ``year/month/day/dayofmonth/hour/minute/second``, ``to_date``,
``date_format`` with numeric patterns (``yyyy-MM-dd HH:mm:ss`` and their parts),
``substring``/``substr``, ``concat``, ``lower``/``upper``, ``trim``, ``length``, ``abs``,
``coalesce``, ``date_trunc`` and ``trunc``,
and conditions (comparisons, ``<=>``, ``AND/OR/NOT``, ``IS [NOT] NULL``, ``IN``,
``BETWEEN``), with Spark's (non-ANSI) semantics: integer ``/`` divides as double, division by
zero gives NULL, ``%`` takes the sign of the dividend, a NULL argument gives NULL, and
conditions follow SQL's three-valued logic.  Conditions also serve CHECK constraints the
predicate parser cannot read (``constraints.py``: two columns, arithmetic, functions).
Timestamps are interpreted in UTC, as a Spark session with ``spark.sql.session.timeZone=UTC``
does.  Any other expression refuses the write, naming it: writing a value this module merely guessed
would corrupt the table for every reader that trusts it.

The tokenizer is the predicate parser's (``predicates.tokenize``), so quoting and literals
mean the same in a CHECK constraint and in a generation expression.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import (
    DeltaCommitError,
    GeneratedColumnMismatchError,
    InvalidArgumentError,
    UnsupportedProtocolError,
)
from deltacommit.predicates import Token, syntax_error, tokenize

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
Value: TypeAlias = Any  # a pa.ChunkedArray / pa.Array of the rows, or a pa.Scalar

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

_TYPES: dict[str, pa.DataType] = {
    "tinyint": pa.int8(), "byte": pa.int8(), "smallint": pa.int16(), "short": pa.int16(),
    "int": pa.int32(), "integer": pa.int32(), "bigint": pa.int64(), "long": pa.int64(),
    "float": pa.float32(), "real": pa.float32(), "double": pa.float64(),
    "string": pa.string(), "varchar": pa.string(), "char": pa.string(),
    "boolean": pa.bool_(), "binary": pa.binary(), "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
    "timestamp_ltz": pa.timestamp("us", tz="UTC"),
}
MAX_DEPTH = 100
_COMPARISONS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">",
                ">=": ">="}
_RESERVED = frozenset({"AND", "OR", "NOT", "IS", "IN", "BETWEEN", "AS"})


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
        found = "end of input" if tok.kind == "end" else repr(tok.text)
        return syntax_error(self.text, tok.pos, f"{message}, found {found}")

    def expect_op(self, op: str) -> None:
        if not self.is_op(op):
            raise self.fail(f"expected {op!r}")
        self.next()

    def parse(self) -> Node:
        if self.peek().kind == "end":
            raise syntax_error(self.text, 0, "empty expression")
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
            self._enter()
            inner = self.unary()
            self.depth -= 1
            if sign == "+":
                return inner
            if isinstance(inner, Const) and pa.types.is_integer(inner.type):
                return _int_const(-inner.value)
            if isinstance(inner, Const) and isinstance(inner.value, Decimal | float):
                return Const(-inner.value, inner.type)
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
            return _number(tok.text, self, tok)
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
                return Const(dt.date.fromisoformat(tok.text.strip()), pa.date32())
            value = dt.datetime.fromisoformat(tok.text.strip())
        except ValueError as e:
            raise syntax_error(self.text, tok.pos, f"invalid {kind.lower()} literal: {e}") from None
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return Const(value, pa.timestamp("us", tz="UTC"))

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
                precision = int(self._int_token())
                if self.is_op(","):
                    self.next()
                    scale = int(self._int_token())
                self.expect_op(")")
            to: pa.DataType = pa.decimal128(precision, scale)
        elif name in _TYPES:
            to = _TYPES[name]
            if name in ("varchar", "char") and self.is_op("("):
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
        if tok.kind != "number" or not tok.text.isdigit():
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


def _int_const(value: int) -> Const:
    """Spark's integer literal: INT when it fits, BIGINT otherwise."""
    return Const(value, pa.int32() if -2**31 <= value < 2**31 else pa.int64())


def _number(text: str, parser: _Parser, tok: Token) -> Const:
    if re.fullmatch(r"\d+", text):
        value = int(text)
        if value >= 2**63:
            raise parser.fail("integer literal out of range", tok)
        return _int_const(value)
    if "e" in text.lower():
        return Const(float(text), pa.float64())  # Spark: a literal with an exponent is DOUBLE
    try:
        d = Decimal(text)
    except InvalidOperation:
        raise parser.fail("invalid number", tok) from None
    digits = len(d.as_tuple().digits)
    scale = max(-int(d.as_tuple().exponent), 0)
    return Const(d, pa.decimal128(max(digits, scale, 1), scale))


@functools.lru_cache(maxsize=256)
def parse_expression(text: str) -> Node:
    """The syntax tree of a generation expression; InvalidArgumentError for what this module
    cannot parse (every node it can parse, it can evaluate)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"expression must be a string, got {type(text).__name__}")
    return _Parser(text).parse()


# --------------------------------------------------------------------------- evaluation


class _Unsupported(Exception):
    """An expression this module cannot evaluate with Spark's exact semantics."""


def _type(v: Value) -> pa.DataType:
    t: pa.DataType = v.type
    return t


def _is_int(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _cast(v: Value, t: pa.DataType) -> Value:
    if _type(v) == t:
        return v
    return v.cast(t)


def _widen(a: Value, b: Value) -> tuple[Value, Value]:
    """Spark's numeric widening of two operands: any double makes both double, any decimal
    makes integers decimal, integers widen to the larger."""
    ta, tb = _type(a), _type(b)
    if pa.types.is_null(ta):
        return _cast(a, tb), b
    if pa.types.is_null(tb):
        return a, _cast(b, ta)
    if not (_is_numeric(ta) and _is_numeric(tb)):
        raise _Unsupported(f"arithmetic on {ta} and {tb}")
    if pa.types.is_floating(ta) or pa.types.is_floating(tb):
        return _cast(a, pa.float64()), _cast(b, pa.float64())
    if pa.types.is_decimal(ta) or pa.types.is_decimal(tb):
        return _cast(a, _as_decimal(ta)), _cast(b, _as_decimal(tb))
    wide = ta if ta.bit_width >= tb.bit_width else tb
    return _cast(a, wide), _cast(b, wide)


def _as_decimal(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t):
        return t
    return pa.decimal128({8: 3, 16: 5, 32: 10, 64: 20}[t.bit_width], 0)


def _zero_to_null(divisor: Value) -> Value:
    """Spark (non-ANSI): dividing by zero gives NULL, not an error or infinity."""
    t = _type(divisor)
    return _pc.if_else(_pc.equal(divisor, pa.scalar(0, t) if not pa.types.is_decimal(t)
                                 else pa.scalar(Decimal(0)).cast(t)),
                       pa.scalar(None, t), divisor)


def _arith(op: str, a: Value, b: Value) -> Value:
    a, b = _widen(a, b)
    t = _type(a)
    if op == "+":
        return _pc.add(a, b)
    if op == "-":
        return _pc.subtract(a, b)
    if op == "*":
        return _pc.multiply(a, b)
    if op == "/":
        if pa.types.is_decimal(t):
            # Spark's result scale and rounding (HALF_UP) differ from Arrow's decimal division.
            raise _Unsupported("/ on decimals")
        if _is_int(t):
            a, b = _cast(a, pa.float64()), _cast(b, pa.float64())
        return _pc.divide(a, _zero_to_null(b))
    # %: the sign of the dividend (truncated division), NULL for a zero divisor
    if not _is_int(t):
        raise _Unsupported(f"% on {t}")
    b = _zero_to_null(b)
    return _pc.subtract(a, _pc.multiply(_pc.divide(a, b), b))


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


def _to_date(v: Value) -> Value:
    t = _type(v)
    if pa.types.is_date(t) or pa.types.is_null(t):
        return _cast(v, pa.date32())
    if pa.types.is_timestamp(t):
        return _cast(_utc(v), pa.date32())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _cast(v, pa.date32())
    raise _Unsupported(f"to_date of {t}")


def _utc(v: Value) -> Value:
    """A timestamp's wall-clock value in UTC, as a zone-less timestamp (what Spark's date parts
    see in a UTC session)."""
    t = _type(v)
    if getattr(t, "tz", None) is not None:
        return v.cast(pa.timestamp(t.unit))  # type: ignore[attr-defined]  # stored in UTC already
    return v


def _as_timestamp(v: Value) -> Value:
    t = _type(v)
    if pa.types.is_timestamp(t):
        return _utc(v)
    if pa.types.is_date(t):
        return _cast(v, pa.timestamp("us"))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _cast(v, pa.timestamp("us"))
    raise _Unsupported(f"a date part of {t}")


def _to_string(v: Value) -> Value:
    t = _type(v)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return v
    if _is_int(t) or pa.types.is_date(t) or pa.types.is_boolean(t) or pa.types.is_null(t) \
            or pa.types.is_decimal(t):
        return _cast(v, pa.string())
    raise _Unsupported(f"{t} as a string")


def _substring(args: Sequence[Node], values: list[Value]) -> Value:
    """Spark's ``substring(s, pos[, len])``: 1-based, 0 counts as 1, negative from the end."""
    consts = args[1:]
    if not all(isinstance(a, Const) and pa.types.is_integer(a.type) for a in consts):
        raise _Unsupported("substring with a position or length that is not an integer literal")
    pos = consts[0].value  # type: ignore[union-attr]
    length = consts[1].value if len(consts) > 1 else None  # type: ignore[union-attr]
    s = _to_string(values[0])
    if length is not None and length <= 0:
        return _pc.if_else(_pc.is_valid(s), pa.scalar("", _type(s)), pa.scalar(None, _type(s)))
    start = pos - 1 if pos > 0 else pos
    if length is None:
        stop = None
    elif pos > 0 or pos == 0:
        stop = start + length
    else:
        stop = None if pos + length >= 0 else pos + length
    return _pc.utf8_slice_codeunits(s, start=start, stop=stop)


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
        days = _cast(_to_date(value), pa.timestamp("us"))
        return _cast(_pc.floor_temporal(days, unit=unit, week_starts_monday=True), pa.date32())
    t = _type(value)
    floored = _pc.floor_temporal(_as_timestamp(value), unit=unit, week_starts_monday=True)
    zoned = pa.types.is_timestamp(t) and getattr(t, "tz", None) is None
    return floored if zoned else _cast(floored, pa.timestamp("us", tz="UTC"))


def _common_type(values: list[Value]) -> pa.DataType:
    types = [_type(v) for v in values if not pa.types.is_null(_type(v))]
    if not types:
        return pa.null()
    first = types[0]
    if all(t == first for t in types):
        return first
    if all(_is_numeric(t) for t in types):
        out = values[0]
        for v in values[1:]:
            out, _ = _widen(out, v)
        wide: pa.DataType = _type(out)
        return wide
    if all(pa.types.is_string(t) or pa.types.is_large_string(t) for t in types):
        return pa.string()
    if all(pa.types.is_timestamp(t) or pa.types.is_date(t) for t in types):
        return next((t for t in types if pa.types.is_timestamp(t)), first)
    raise _Unsupported(f"coalesce of {sorted(set(map(str, types)))}")


_ARROW_COMPARE = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
                  ">": "greater", ">=": "greater_equal"}


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def _comparable(a: Value, b: Value) -> tuple[Value, Value]:
    """Two operands in one type, as Spark coerces a comparison: numbers widen, a string meets
    a date or timestamp as one, a date meets a timestamp at midnight (UTC)."""
    ta, tb = _type(a), _type(b)
    if pa.types.is_null(ta) or pa.types.is_null(tb) or (_is_numeric(ta) and _is_numeric(tb)):
        return _widen(a, b) if not (pa.types.is_null(ta) and pa.types.is_null(tb)) else (a, b)
    if _is_string(ta) and _is_string(tb):
        return _cast(a, pa.string()), _cast(b, pa.string())
    if ta == tb:
        return a, b
    if pa.types.is_date(ta) and (pa.types.is_date(tb) or _is_string(tb)):
        return _cast(a, pa.date32()), _cast(b, pa.date32())
    if pa.types.is_date(tb) and _is_string(ta):
        return _cast(a, pa.date32()), _cast(b, pa.date32())
    if (_is_temporal(ta) or _is_string(ta)) and (_is_temporal(tb) or _is_string(tb)):
        return _as_timestamp(a), _as_timestamp(b)
    raise _Unsupported(f"comparing {ta} with {tb}")


def _boolean(v: Value, what: str) -> Value:
    t = _type(v)
    if pa.types.is_null(t):
        return _cast(v, pa.bool_())
    if not pa.types.is_boolean(t):
        raise _Unsupported(f"{what} of {t}, which is not a condition")
    return v


def _condition(node: Call, values: list[Value]) -> Value:
    """Comparisons and SQL's three-valued AND, OR, NOT, IS NULL, IN and BETWEEN."""
    name = node.name
    if name in _ARROW_COMPARE:
        a, b = _comparable(values[0], values[1])
        return getattr(pc, _ARROW_COMPARE[name])(a, b)
    if name == "<=>":
        a, b = _comparable(values[0], values[1])
        both_null = _pc.and_(_pc.is_null(a), _pc.is_null(b))
        return _pc.or_(both_null, _pc.fill_null(_pc.equal(a, b), False))
    if name in ("and", "or"):
        a, b = _boolean(values[0], name.upper()), _boolean(values[1], name.upper())
        return _pc.and_kleene(a, b) if name == "and" else _pc.or_kleene(a, b)
    if name == "not":
        return _pc.invert(_boolean(values[0], "NOT"))
    if name in ("isnull", "isnotnull"):
        return _pc.is_null(values[0]) if name == "isnull" else _pc.is_valid(values[0])
    if name == "between":
        lo = _condition(Call(">=", ()), [values[0], values[1]])
        hi = _condition(Call("<=", ()), [values[0], values[2]])
        return _pc.and_kleene(lo, hi)
    # IN: x = any item, with NULL where no item is equal and one is NULL (or x is NULL)
    found: Value = pa.scalar(False)
    for item in values[1:]:
        found = _pc.or_kleene(found, _condition(Call("=", ()), [values[0], item]))
    return found


def _call(node: Call, values: list[Value]) -> Value:
    name = node.name
    if name in _CONDITIONS:
        return _condition(node, values)
    if name in ("+", "-", "*", "/", "%"):
        return _arith(name, values[0], values[1])
    if name == "negate":
        if not _is_numeric(_type(values[0])):
            raise _Unsupported(f"negating {_type(values[0])}")
        return _pc.negate(values[0])
    if name == "abs":
        if not _is_numeric(_type(values[0])):
            raise _Unsupported(f"abs of {_type(values[0])}")
        return _pc.abs(values[0])
    if name in ("year", "month", "day", "hour", "minute", "second"):
        ts = _as_timestamp(values[0])
        return _cast(getattr(pc, name)(ts), pa.int32())
    if name == "to_date":
        return _to_date(values[0])
    if name == "date_format":
        fmt = node.args[1]
        if not isinstance(fmt, Const) or not isinstance(fmt.value, str):
            raise _Unsupported("date_format with a pattern that is not a string literal")
        # Whole seconds: Arrow's %S prints a microsecond timestamp's fraction as well.
        ts = _pc.floor_temporal(_as_timestamp(values[0]), unit="second").cast(pa.timestamp("s"))
        return _pc.strftime(ts, format=_strftime_pattern(fmt.value))
    if name == "substring":
        return _substring(node.args, values)
    if name in ("date_trunc", "trunc"):
        return _truncate(node, values)
    if name == "length":
        if not _is_string(_type(values[0])):
            raise _Unsupported(f"length of {_type(values[0])}")
        return _pc.utf8_length(values[0])
    if name == "concat":
        strings = [_to_string(v) for v in values]
        strings = [_cast(s, pa.string()) for s in strings]
        if len(strings) == 1:
            return strings[0]
        return _pc.binary_join_element_wise(*strings, "", null_handling="emit_null")
    if name in ("lower", "upper"):
        return getattr(pc, f"utf8_{name}")(_to_string(values[0]))
    if name in ("trim", "ltrim", "rtrim"):
        fn = {"trim": "utf8_trim", "ltrim": "utf8_ltrim", "rtrim": "utf8_rtrim"}[name]
        return getattr(pc, fn)(_to_string(values[0]), characters=" ")
    if name == "coalesce":
        t = _common_type(values)
        return _pc.coalesce(*[_cast(v, t) for v in values])
    raise _Unsupported(f"function {name}")  # pragma: no cover - the parser admits only FUNCTIONS


def _column(data: pa.Table, name: str) -> Value:
    """A column by Spark's case-insensitive name resolution."""
    if name in data.column_names:
        return data.column(name)
    found = [c for c in data.column_names if c.lower() == name.lower()]
    if len(found) == 1:
        return data.column(found[0])
    raise _Unsupported(f"column {name!r}, which is not among the columns {data.column_names}")


def _evaluate(node: Node, data: pa.Table) -> Value:
    if isinstance(node, Ref):
        return _column(data, node.name)
    if isinstance(node, Const):
        return pa.scalar(node.value, node.type)
    if isinstance(node, Cast):
        v = _evaluate(node.child, data)
        t = _type(v)
        if pa.types.is_timestamp(t) and node.to == pa.date32():
            return _to_date(v)
        if (pa.types.is_timestamp(t) or pa.types.is_floating(t)) and pa.types.is_string(node.to):
            raise _Unsupported(f"CAST of {t} to STRING (Spark's text differs from Arrow's)")
        if pa.types.is_string(node.to):
            return _to_string(v)
        if pa.types.is_integer(node.to) and pa.types.is_floating(t):
            return v.cast(node.to, safe=False)  # Spark truncates toward zero
        if pa.types.is_decimal(node.to) and _is_int(t):
            # Arrow wants room for any integer of the type; a value that does not fit the
            # target still fails the cast (refused, where Spark would write NULL).
            return v.cast(pa.decimal128(38, node.to.scale)).cast(node.to)
        return _cast(v, node.to)
    return _call(node, [_evaluate(a, data) for a in node.args])


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


def _values(expression: str, data: pa.Table, to: pa.DataType | None) -> pa.ChunkedArray[Any]:
    """The expression's value for each row of ``data`` (as ``to`` if given);
    InvalidArgumentError saying why if this module cannot evaluate it."""
    try:
        value = _evaluate(parse_expression(expression), data)
        if isinstance(value, pa.Scalar):
            value = pa.array([value.as_py()] * data.num_rows, value.type)
        if to is not None:
            value = _cast(value, to)
    except (_Unsupported, pa.ArrowInvalid, pa.ArrowNotImplementedError,
            pa.ArrowTypeError) as e:
        raise InvalidArgumentError(str(e)) from None
    if isinstance(value, pa.Array):
        value = pa.chunked_array([value])
    out: pa.ChunkedArray[Any] = value
    return out


def evaluate(column: GeneratedColumn, data: pa.Table, to: pa.DataType, table: str
             ) -> pa.ChunkedArray[Any]:
    """The column's values for the rows of ``data`` (columns in the table's types), as ``to``;
    UnsupportedProtocolError naming the expression if this module cannot evaluate it."""
    try:
        return _values(column.expression, data, to)
    except DeltaCommitError as e:
        raise UnsupportedProtocolError(
            f"{_describe(table, column)} cannot be evaluated by deltacommit ({e}); refusing "
            "to write rather than store a value that may differ from Spark's") from None


def evaluate_condition(expression: str, data: pa.Table) -> pa.ChunkedArray[Any]:
    """A boolean expression (a CHECK constraint beyond the predicate parser: arithmetic,
    functions, two columns) for each row: TRUE, FALSE or NULL; InvalidArgumentError if this
    module cannot evaluate it."""
    values = _values(expression, data, None)
    if not pa.types.is_boolean(values.type):
        raise InvalidArgumentError(f"{expression!r} is a {values.type} value, not a condition")
    return values


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
    NULL-safely (``(column <=> expression) IS TRUE``)."""
    if data.num_rows == 0:
        return
    for c in columns:
        supplied = data.column(c.name)
        expected = evaluate(c, data, supplied.type, table)
        same = _pc.equal(supplied, expected)
        if pa.types.is_floating(supplied.type):
            same = _pc.or_kleene(same, _pc.and_(_pc.is_nan(supplied), _pc.is_nan(expected)))
        both_null = _pc.and_(_pc.is_null(supplied), _pc.is_null(expected))
        ok = _pc.or_(_pc.fill_null(same, False), both_null)
        bad = _pc.invert(ok)
        count = int(_pc.sum(_pc.cast(bad, pa.int64())).as_py() or 0)
        if count:
            i = int(_pc.index(bad, True).as_py())
            raise GeneratedColumnMismatchError(
                f"{_describe(table, c)}: {count} row(s) supply a value other than the "
                f"expression's, for example {supplied[i].as_py()!r} where the expression gives "
                f"{expected[i].as_py()!r} (row {data.slice(i, 1).to_pylist()[0]!r}); leave the "
                "column out to have it computed. Nothing was written")


__all__ = ["GENERATION_KEY", "GeneratedColumn", "check_generated", "evaluate",
           "evaluate_condition", "fill_generated", "generated_columns", "parse_expression"]
