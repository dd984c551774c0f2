"""Spark 4's expression semantics (ANSI mode, a UTC session), written plainly in Python, one
row at a time: the oracle of the property tests of deltacommit's three evaluators (value
expressions, row filters, partition predicates).

It is written from Spark's rules, not from deltacommit's code: a tree of tuples of its own,
its own SQL text, its own typing.  Each rule names the Spark behaviour it stands for:

- Types: ``AnsiTypeCoercion`` (integers widen; FLOAT with FLOAT stays FLOAT, FLOAT with any
  other number and DOUBLE with anything is DOUBLE; an integer with a DECIMAL is a DECIMAL: a
  literal as wide as its digits, a column DECIMAL(3/5/10/20, 0); DECIMAL with FLOAT/DOUBLE is
  DOUBLE) and ``DecimalPrecision`` (``+ -``: max scale, max integer digits + 1; ``*``: p1+p2+1,
  s1+s2; a comparison: max scale, max integer digits).
- Evaluation order: a binary operator evaluates its left operand, and its right only when the
  left is not NULL; ``/`` and ``%`` evaluate the divisor first and the dividend only when the
  divisor is not NULL; AND, OR, coalesce and IN stop as soon as the answer is known.
- ANSI errors (``SparkError``): integer overflow, division by zero (DOUBLE too), casts out of
  range or of text that is not a value.
- What deltacommit refuses (``Refused``, for the whole expression; ``RefusedRow``, for a value)
  is modelled too, so that the tests can require a refusal exactly where one is expected.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import struct
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_UP, Context, Decimal, localcontext
from fractions import Fraction
from typing import Any

UTC = dt.UTC
_CTX = Context(prec=200)


class SparkError(Exception):
    """Spark fails the row (ANSI mode)."""


class Refused(Exception):
    """deltacommit refuses the expression itself (it cannot follow Spark for these types)."""


class RefusedRow(Exception):
    """deltacommit refuses a value the expression meets (Spark may read or print it otherwise)."""


@dataclass(frozen=True)
class T:
    """A Spark type: ``name`` and, for a DECIMAL, precision and scale."""

    name: str
    p: int = 0
    s: int = 0

    def sql(self) -> str:
        if self.name == "decimal":
            return f"DECIMAL({self.p}, {self.s})"
        return self.name.upper()


TINYINT, SMALLINT, INT, BIGINT = T("tinyint"), T("smallint"), T("int"), T("bigint")
FLOAT, DOUBLE = T("float"), T("double")
STRING, BOOLEAN, DATE, TIMESTAMP, NULL = (T("string"), T("boolean"), T("date"),
                                          T("timestamp"), T("null"))
INTEGERS = {TINYINT: 8, SMALLINT: 16, INT: 32, BIGINT: 64}


def decimal(p: int, s: int) -> T:
    return T("decimal", p, s)


def is_int(t: T) -> bool:
    return t in INTEGERS


def is_numeric(t: T) -> bool:
    return is_int(t) or t in (FLOAT, DOUBLE) or t.name == "decimal"


def int_range(t: T) -> tuple[int, int]:
    bits = INTEGERS[t]
    return -2 ** (bits - 1), 2 ** (bits - 1) - 1


# --------------------------------------------------------------------------- trees
#
# ("col", name) | ("lit", text) | ("op", op, a, b) | ("cmp", op, a, b) | ("neg", a)
# | ("fn", name, *args)
# | ("cast", a, T) | ("not", a) | ("isnull", a, negated) | ("in", a, *items)
# | ("between", a, lo, hi) | ("and", a, b) | ("or", a, b) | ("nullsafe", a, b)


def sql(e: tuple[Any, ...], signed: bool = False) -> str:
    """The tree as Spark SQL text (``signed``: a negative literal without parentheses, as the
    predicate grammar reads it)."""
    if not signed:
        return _sql(e, False)
    return _sql(e, True)


def _sql(e: tuple[Any, ...], signed: bool) -> str:
    def sql(x: tuple[Any, ...]) -> str:
        return _sql(x, signed)

    kind = e[0]
    if kind == "col":
        return f"`{e[1]}`"
    if kind == "lit":
        return f"({e[1]})" if e[1].startswith("-") and not signed else e[1]
    if kind in ("op", "cmp"):
        return f"({sql(e[2])} {e[1]} {sql(e[3])})"
    if kind == "neg":
        return f"(- {sql(e[1])})"
    if kind == "fn":
        return f"{e[1]}({', '.join(sql(a) for a in e[2:])})"
    if kind == "cast":
        return f"CAST({sql(e[1])} AS {e[2].sql()})"
    if kind == "not":
        return f"(NOT {sql(e[1])})"
    if kind == "isnull":
        return f"({sql(e[1])} IS {'NOT ' if e[2] else ''}NULL)"
    if kind == "in":
        return f"({sql(e[1])} IN ({', '.join(sql(a) for a in e[2:])}))"
    if kind == "between":
        return f"({sql(e[1])} BETWEEN {sql(e[2])} AND {sql(e[3])})"
    if kind in ("and", "or"):
        return f"({sql(e[1])} {kind.upper()} {sql(e[2])})"
    if kind == "nullsafe":
        return f"({sql(e[1])} <=> {sql(e[2])})"
    raise AssertionError(kind)


# --------------------------------------------------------------------------- literals


def literal(text: str) -> tuple[Any, T]:
    """A literal's value and type, as Spark's parser gives them."""
    upper = text.upper()
    if upper == "NULL":
        return None, NULL
    if upper in ("TRUE", "FALSE"):
        return upper == "TRUE", BOOLEAN
    if text.startswith("'"):
        return text[1:-1].replace("''", "'"), STRING
    if upper.startswith("DATE "):
        return dt.date.fromisoformat(text[6:-1]), DATE
    if upper.startswith("TIMESTAMP "):
        return dt.datetime.fromisoformat(text[11:-1]).replace(tzinfo=UTC), TIMESTAMP
    if "e" in text.lower():
        return float(text), DOUBLE
    if "." in text:
        d = Decimal(text)
        digits = len(d.as_tuple().digits)
        scale = -int(d.as_tuple().exponent)
        return d, decimal(max(digits, scale, 1), scale)
    v = int(text)
    if -2**31 <= v < 2**31:
        return v, INT
    if -2**63 <= v < 2**63:
        return v, BIGINT
    return Decimal(v), decimal(len(str(abs(v))), 0)


def _integer_decimal(e: tuple[Any, ...], t: T) -> T:
    e = signed(e)
    if e[0] == "lit" and is_int(t):
        return decimal(max(len(str(abs(int(e[1])))), 1), 0)
    return {TINYINT: decimal(3, 0), SMALLINT: decimal(5, 0), INT: decimal(10, 0),
            BIGINT: decimal(20, 0)}.get(t, t)


# --------------------------------------------------------------------------- typing


@dataclass
class Typed:
    """A node's type and, for a numeric operation, the types its operands take."""

    type: T
    left: T | None = None
    right: T | None = None


def numeric_types(a: tuple[Any, ...], ta: T, b: tuple[Any, ...], tb: T, op: str | None
                  ) -> tuple[T, T, T]:
    """(left, right, result) types of an arithmetic operation ``op`` or a comparison (None)."""
    if not (is_numeric(ta) and is_numeric(tb)):
        raise Refused(f"{ta} {op} {tb}")
    if is_int(ta) and is_int(tb):
        wide = ta if INTEGERS[ta] >= INTEGERS[tb] else tb
        return wide, wide, wide
    if ta == FLOAT and tb == FLOAT:
        return FLOAT, FLOAT, FLOAT
    if ta in (FLOAT, DOUBLE) or tb in (FLOAT, DOUBLE):
        return DOUBLE, DOUBLE, DOUBLE
    da, db = _integer_decimal(a, ta), _integer_decimal(b, tb)
    scale = max(da.s, db.s)
    if op == "*":
        p, scale = da.p + db.p + 1, da.s + db.s
    elif op in ("+", "-", "%"):
        p = max(da.p - da.s, db.p - db.s) + scale + 1
    else:
        p = max(da.p - da.s, db.p - db.s) + scale
    if p > 38:
        raise Refused("a DECIMAL beyond 38 digits")
    if op is None:
        return decimal(p, scale), decimal(p, scale), decimal(p, scale)
    return da, db, decimal(p, scale)


def common(a: tuple[Any, ...], ta: T, b: tuple[Any, ...], tb: T) -> T:
    """The type two operands of a comparison meet in."""
    if ta == NULL:
        return tb
    if tb == NULL:
        return ta
    if is_numeric(ta) and is_numeric(tb):
        return numeric_types(a, ta, b, tb, None)[2]
    if ta == tb:
        return ta
    if {ta, tb} == {DATE, TIMESTAMP}:
        return TIMESTAMP
    if {ta, tb} == {DATE, STRING}:
        return DATE
    if {ta, tb} == {TIMESTAMP, STRING}:
        return TIMESTAMP
    raise Refused(f"comparing {ta} with {tb}")


def to_string_ok(t: T) -> bool:
    """Whether deltacommit writes ``t`` as text (FLOAT/DOUBLE and TIMESTAMP text is Java's)."""
    return t in (TINYINT, SMALLINT, INT, BIGINT, BOOLEAN, DATE, STRING, NULL) \
        or t.name == "decimal"


def signed(e: tuple[Any, ...]) -> tuple[Any, ...]:
    """``e``, with a minus right before a number made part of the literal, as Spark's grammar
    reads it (``number: MINUS? INTEGER_VALUE``): ``- 2147483648`` is the INT -2147483648."""
    if e[0] == "neg" and e[1][0] == "lit" and re.fullmatch(r"[\d.eE+-]+", e[1][1]) \
            and e[1][1][0].isdigit():
        return ("lit", "-" + e[1][1])
    return e


def type_of(e: tuple[Any, ...], schema: dict[str, T]) -> T:
    """The type of ``e``; Refused for what deltacommit does not evaluate."""
    e = signed(e)
    kind = e[0]
    if kind == "col":
        return schema[e[1]]
    if kind == "lit":
        return literal(e[1])[1]
    if kind == "op":
        ta, tb = type_of(e[2], schema), type_of(e[3], schema)
        if NULL in (ta, tb):
            other = tb if ta == NULL else ta
            if other != NULL and not is_numeric(other):
                raise Refused("arithmetic")
            return DOUBLE if e[1] == "/" else other
        if e[1] == "/":
            if not (is_numeric(ta) and is_numeric(tb)) or "decimal" in (ta.name, tb.name):
                raise Refused("/")
            return DOUBLE
        result = numeric_types(e[2], ta, e[3], tb, e[1])[2]
        if e[1] == "%" and result.name == "decimal":
            raise Refused("% on decimals")
        return result
    if kind == "neg":
        t = type_of(e[1], schema)
        if not (is_numeric(t) or t == NULL):
            raise Refused("negate")
        return t
    if kind == "cast":
        source, to = type_of(e[1], schema), e[2]
        _check_cast(source, to)
        return to
    if kind in ("not", "and", "or"):
        for a in e[1:]:
            if type_of(a, schema) not in (BOOLEAN, NULL):
                raise Refused("not a condition")
        return BOOLEAN
    if kind == "isnull":
        type_of(e[1], schema)
        return BOOLEAN
    if kind in ("in", "between", "nullsafe"):
        first = type_of(e[1], schema)
        for a in e[2:]:
            common(e[1], first, a, type_of(a, schema))
        return BOOLEAN
    if kind == "cmp":
        common(e[2], type_of(e[2], schema), e[3], type_of(e[3], schema))
        return BOOLEAN
    assert kind == "fn"
    name, args = e[1], e[2:]
    types = [type_of(a, schema) for a in args]
    if name in ("upper", "lower", "trim"):
        if not to_string_ok(types[0]):
            raise Refused(name)
        return STRING
    if name == "length":
        if types[0] != STRING:
            raise Refused(name)
        return INT
    if name == "substring":
        if not to_string_ok(types[0]) or any(a[0] != "lit" or literal(a[1])[1] != INT
                                             for a in args[1:]):
            raise Refused(name)
        return STRING
    if name == "concat":
        if not all(to_string_ok(t) for t in types):
            raise Refused(name)
        return STRING
    if name in ("year", "month", "day"):
        if types[0] not in (DATE, TIMESTAMP, NULL):
            raise Refused(name)
        return INT
    if name in ("hour", "minute", "second"):
        if types[0] not in (DATE, TIMESTAMP, NULL):
            raise Refused(name)
        return INT
    if name == "abs":
        if not (is_numeric(types[0]) or types[0] == NULL):
            raise Refused(name)
        return types[0]
    if name == "coalesce":
        out = NULL
        for a, t in zip(args, types, strict=True):
            if out == NULL:
                out = t
            elif t != NULL and t != out:
                if not (is_numeric(out) and is_numeric(t)):
                    raise Refused("coalesce")
                out = numeric_types(("col", ""), out, ("col", ""), t, None)[2]
            del a
        return out
    raise AssertionError(name)


def _check_cast(source: T, to: T) -> None:
    ok = (source in (to, NULL)
          or (to == STRING and to_string_ok(source))
          or (is_int(to) and (is_numeric(source) or source in (BOOLEAN, STRING)))
          or (to.name == "decimal" and (is_numeric(source) or source in (BOOLEAN, STRING)))
          or (to == DOUBLE and (is_numeric(source) or source == BOOLEAN))
          or (to == FLOAT and (is_int(source) or source in (FLOAT, DOUBLE, BOOLEAN)))
          or (to == BOOLEAN and (is_int(source) or source == STRING))
          or (to == DATE and source in (TIMESTAMP, STRING))
          or (to == TIMESTAMP and source in (DATE, STRING)))
    if not ok:
        raise Refused(f"CAST of {source} to {to}")


# --------------------------------------------------------------------------- values


def to_float32(x: float | int) -> float:
    """The FLOAT nearest to ``x`` (ties to even), as Java rounds a DOUBLE or a BIGINT to one."""
    if isinstance(x, int) and not isinstance(x, bool):
        if abs(x) < 2**24:
            return float(x)
        sign, m = (-1 if x < 0 else 1), abs(x)
        shift = m.bit_length() - 24
        q, r = divmod(m, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
        return sign * math.ldexp(q, shift)
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        return x
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def order_key(v: Any) -> Any:
    """Spark's order of DOUBLE values: NaN equal to NaN and above everything else."""
    if isinstance(v, float) and math.isnan(v):
        return (1, 0.0)
    if isinstance(v, float | int | Decimal) and not isinstance(v, bool):
        return (0, Fraction(v) if not (isinstance(v, float) and math.isinf(v)) else v)
    return (0, v)


def _as(v: Any, source: T, to: T) -> Any:
    """A numeric or temporal value in the wider type it meets another in (exact widening,
    DOUBLE rounding to nearest)."""
    if v is None or source == to:
        return v
    if to == DOUBLE:
        return float(v) if not isinstance(v, float) else v
    if to == FLOAT:
        return to_float32(v)
    if to.name == "decimal":  # exact, at the type's scale (CAST(0 AS DECIMAL(12, 2)) is 0.00)
        return Decimal(v).quantize(Decimal(1).scaleb(-to.s))
    if to == TIMESTAMP and source == DATE:
        return dt.datetime(v.year, v.month, v.day, tzinfo=UTC)
    if to == DATE and source == STRING:
        return _cast(v, STRING, DATE)
    if to == TIMESTAMP and source == STRING:
        return _cast(v, STRING, TIMESTAMP)
    return v


def _check_int(v: int, t: T) -> int:
    low, high = int_range(t)
    if not low <= v <= high:
        raise SparkError(f"integer overflow: {v} beyond {t.sql()}")
    return v


def _arith(op: str, a: Any, b: Any, t: T) -> Any:
    if is_int(t):
        if op == "%":
            return abs(a) % abs(b) * (1 if a >= 0 else -1)  # Java's %: the dividend's sign
        return _check_int({"+": a + b, "-": a - b, "*": a * b}[op], t)
    if t.name == "decimal":
        with localcontext(_CTX):
            return {"+": a + b, "-": a - b, "*": a * b}[op]
    if op == "%":
        if math.isnan(a) or math.isnan(b) or math.isinf(a):
            out = math.nan
        elif math.isinf(b):
            out = a
        else:
            out = math.fmod(a, b)
    else:
        out = {"+": a + b, "-": a - b, "*": a * b}[op]
    return to_float32(out) if t == FLOAT else out


_TRIM = "".join(chr(c) for c in range(0x21)) + "\x7f"


def _cast(v: Any, source: T, to: T) -> Any:
    """``CAST(v AS to)`` in ANSI mode (and what deltacommit refuses of it)."""
    if v is None:
        return None
    if source == to:
        return v
    if to == STRING:
        if source == BOOLEAN:
            return "true" if v else "false"
        if source.name == "decimal":
            # toPlainString in ANSI mode; Java's BigDecimal has no negative zero ("-0.05"
            # rounded to scale 0 is "0"), Python's Decimal keeps the sign.
            return format(v.copy_abs() if v.is_zero() else v, "f")
        if source == DATE:
            return v.isoformat()
        return str(v)
    if is_int(to):
        low, high = int_range(to)
        if source == BOOLEAN:
            return int(v)
        if is_int(source):
            return _check_int(v, to)
        if source in (FLOAT, DOUBLE):
            if math.isnan(v) or math.isinf(v) or not (math.floor(v) <= float(high)
                                                       and math.ceil(v) >= float(low)):
                raise SparkError(f"CAST of {v} overflows {to.sql()}")
            return min(int(v), high)  # Java's conversion saturates at 2^63
        if source.name == "decimal":
            exact = int(v.to_integral_value(rounding=ROUND_DOWN))
            _check_int(exact, to)
            if source.p > 18 and to != BIGINT and int(float(v)) != exact:
                raise RefusedRow("through a DOUBLE")
            return exact
        if source == STRING:
            text = v.strip(_TRIM)
            if not re.fullmatch(r"[+-]?\d+", text):
                raise SparkError(f"{v!r} is not an integer")
            return _check_int(int(text), to)
    if to.name == "decimal":
        if source in (FLOAT, DOUBLE):
            if math.isnan(v) or math.isinf(v):
                return None  # Spark: NULL even in ANSI mode
            d = Decimal(repr(float(v)))  # Double.toString's shortest text
        elif source == STRING:
            text = v.strip(_TRIM)
            if not re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", text):
                raise SparkError(f"{v!r} is not a number")
            d = Decimal(text)
        else:
            d = Decimal(int(v)) if source in (BOOLEAN, *INTEGERS) else v
        with localcontext(_CTX):
            try:
                rounded = d.quantize(Decimal(1).scaleb(-to.s), rounding=ROUND_HALF_UP)
            except ArithmeticError as e:  # an exponent beyond any DECIMAL
                raise SparkError(f"{v!r} overflows") from e
        if abs(rounded) >= Decimal(10) ** (to.p - to.s):
            raise SparkError(f"{v!r} overflows {to.sql()}")
        return rounded
    if to == DOUBLE:
        return float(v)
    if to == FLOAT:
        return to_float32(int(v) if source == BOOLEAN else v)
    if to == BOOLEAN:
        if is_int(source):
            return v != 0
        text = v.strip(_TRIM).lower()
        if text in ("t", "true", "y", "yes", "1"):
            return True
        if text in ("f", "false", "n", "no", "0"):
            return False
        raise SparkError(f"{v!r} is not a boolean")
    if to == DATE:
        if source == TIMESTAMP:
            return v.astimezone(UTC).date()
        text = v.strip(_TRIM)
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise RefusedRow(f"{v!r} is not a plain date")
        try:
            return dt.date.fromisoformat(text)
        except ValueError as e:
            raise SparkError(f"{v!r} is not a date") from e
    if to == TIMESTAMP:
        if source == DATE:
            return dt.datetime(v.year, v.month, v.day, tzinfo=UTC)
        text = v.strip(_TRIM)
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?"
                            r"(?:Z|[+-]\d{2}:\d{2})?)?", text):
            raise RefusedRow(f"{v!r} is not a plain timestamp")
        try:
            value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as e:
            raise SparkError(f"{v!r} is not a timestamp") from e
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    raise AssertionError((source, to))


def _string(v: Any, t: T) -> Any:
    return _cast(v, t, STRING)


def _substring(s: str, pos: int, length: int | None) -> str:
    """``UTF8String.substringSQL``."""
    n = len(s)
    start = pos - 1 if pos > 0 else (n + pos if pos < 0 else 0)
    end = n if length is None else start + length
    start = max(start, 0)
    return "" if start >= end else s[start:max(end, 0)]


def _case(s: str, upper: bool) -> str:
    import unicodedata

    for c in s:
        if c.isascii():
            continue
        category = unicodedata.category(c)
        mapped = c.upper() if upper else c.lower()
        if category == "Cn" or (category in ("Lu", "Ll", "Lt") and mapped == c
                                and category != ("Lu" if upper else "Ll")):
            raise RefusedRow(f"{c!r} may map otherwise in a newer Unicode")
    return s.upper() if upper else s.lower()


def _compare(op: str, a: Any, b: Any) -> bool:
    ka, kb = order_key(a), order_key(b)
    return {"=": ka == kb, "!=": ka != kb, "<": ka < kb, "<=": ka <= kb, ">": ka > kb,
            ">=": ka >= kb}[op]


class Evaluator:
    """Evaluates trees over rows of one schema."""

    def __init__(self, schema: dict[str, T]) -> None:
        self.schema = schema

    def type(self, e: tuple[Any, ...]) -> T:
        return type_of(e, self.schema)

    def value(self, e: tuple[Any, ...], row: dict[str, Any]) -> Any:
        """The value of ``e`` for ``row``; SparkError or RefusedRow where the row fails."""
        e = signed(e)
        kind = e[0]
        if kind == "col":
            return row[e[1]]
        if kind == "lit":
            return literal(e[1])[0]
        if kind == "op":
            return self._op(e, row)
        if kind == "cmp":
            return self._comparison(e[1], e[2], e[3], row)
        if kind == "neg":
            v = self.value(e[1], row)
            t = self.type(e[1])
            if v is None:
                return None
            return _check_int(-v, t) if is_int(t) else -v
        if kind == "cast":
            return _cast(self.value(e[1], row), self.type(e[1]), e[2])
        if kind == "not":
            v = self.value(e[1], row)
            return None if v is None else not v
        if kind in ("and", "or"):
            stop = kind == "or"  # OR stops at TRUE, AND at FALSE
            a = self.value(e[1], row)
            if a is stop:
                return stop
            b = self.value(e[2], row)
            if b is stop:
                return stop
            return None if a is None or b is None else not stop
        if kind == "isnull":
            return (self.value(e[1], row) is None) != e[2]
        if kind == "nullsafe":
            a, b = self._pair(e[1], e[2], row, both=True)
            if a is None or b is None:
                return a is None and b is None
            return _compare("=", a, b)
        if kind == "in":
            v = self.value(e[1], row)
            if v is None:
                return None
            has_null = False
            for item in e[2:]:
                iv = self.value(item, row)
                if iv is None:
                    has_null = True
                    continue
                t = common(e[1], self.type(e[1]), item, self.type(item))
                if _compare("=", _as(v, self.type(e[1]), t), _as(iv, self.type(item), t)):
                    return True
            return None if has_null else False
        if kind == "between":
            low = self._comparison(">=", e[1], e[2], row)
            if low is False:
                return False
            high = self._comparison("<=", e[1], e[3], row)
            if high is False:
                return False
            return None if low is None or high is None else True
        return self._function(e, row)

    def _pair(self, a: tuple[Any, ...], b: tuple[Any, ...], row: dict[str, Any],
              both: bool = False) -> tuple[Any, Any]:
        """Two operands in their common type, the right evaluated only when the left is not
        NULL (unless ``both``)."""
        va = self.value(a, row)
        if va is None and not both:
            return None, None
        vb = self.value(b, row)
        t = common(a, self.type(a), b, self.type(b))
        return _as(va, self.type(a), t), _as(vb, self.type(b), t)

    def _comparison(self, op: str, a: tuple[Any, ...], b: tuple[Any, ...],
                    row: dict[str, Any]) -> bool | None:
        va, vb = self._pair(a, b, row)
        if va is None or vb is None:
            return None
        return _compare(op, va, vb)

    def _op(self, e: tuple[Any, ...], row: dict[str, Any]) -> Any:
        op, a, b = e[1], e[2], e[3]
        ta, tb = self.type(a), self.type(b)
        if op in ("/", "%"):
            vb = self.value(b, row)  # the divisor first
            if vb is None:
                return None
            va = self.value(a, row)
            if va is None:
                return None
        else:
            va = self.value(a, row)
            if va is None:
                return None
            vb = self.value(b, row)
            if vb is None:
                return None
        if op == "/":
            x, y = float(va), float(vb)
            if y == 0:
                raise SparkError("division by zero")
            return x / y
        left, right, result = numeric_types(a, ta, b, tb, op)
        x, y = _as(va, ta, left), _as(vb, tb, right)
        if op == "%" and y == 0:
            raise SparkError("division by zero")
        return _arith(op, x, y, result)

    def _function(self, e: tuple[Any, ...], row: dict[str, Any]) -> Any:
        name, args = e[1], e[2:]
        if name == "coalesce":
            out_type = self.type(e)
            for a in args:
                v = self.value(a, row)
                if v is not None:
                    return _as(v, self.type(a), out_type)
            return None
        if name == "concat":
            parts = [self.value(a, row) for a in args]
            if any(p is None for p in parts):
                return None
            return "".join(_string(p, self.type(a)) for p, a in zip(parts, args, strict=True))
        v = self.value(args[0], row)
        if v is None:
            return None
        t = self.type(args[0])
        if name in ("upper", "lower"):
            return _case(_string(v, t), name == "upper")
        if name == "trim":
            return _string(v, t).strip(" ")
        if name == "length":
            return len(v)
        if name == "substring":
            pos = int(args[1][1])
            length = int(args[2][1]) if len(args) > 2 else None
            return _substring(_string(v, t), pos, length)
        if name in ("year", "month", "day"):
            d = v.astimezone(UTC).date() if t == TIMESTAMP else v
            return getattr(d, name)
        if name in ("hour", "minute", "second"):
            ts = v.astimezone(UTC) if t == TIMESTAMP else dt.datetime(v.year, v.month, v.day)
            return getattr(ts, name)
        if name == "abs":
            return _check_int(abs(v), t) if is_int(t) else abs(v)
        raise AssertionError(name)


def same(a: Any, b: Any) -> bool:
    """Values equal as stored: floats bit for bit (NaN as NaN, -0.0 apart from 0.0)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) and math.isnan(b):
            return True
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return a == b
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        return a.astimezone(UTC) == b.astimezone(UTC)
    return type(a) is type(b) and a == b
