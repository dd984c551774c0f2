"""deltacommit's expression evaluation against a plain-Python reference of Spark 4's semantics
(``reference.py``: ANSI mode, a UTC session), over random expressions and random Arrow data:
value expressions (generated columns), conditions (CHECK constraints), row filters (DELETE)
and partition predicates (the second interpretation of the same tree).  They agree on every value, on
every NULL and NaN, and on every row Spark fails; and whatever the input, they raise nothing
but deltacommit errors.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import DeltaCommitError
from deltacommit.protocol.expressions.constraints import Constraint, check_constraints
from deltacommit.protocol.expressions.generated import (
    GeneratedColumn,
    evaluate,
    evaluate_condition,
    expression_type,
)
from deltacommit.protocol.expressions.predicates import parse_predicate
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.protocol.partitions import serialize_partition_value

from . import reference as ref
from .reference import (
    BIGINT,
    BOOLEAN,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    STRING,
    TIMESTAMP,
    TINYINT,
    Evaluator,
    Refused,
    RefusedRow,
    SparkError,
    T,
    decimal,
    same,
    sql,
)

UTC = dt.UTC
SCHEMA: dict[str, T] = {"t": TINYINT, "i": INT, "l": BIGINT, "d": DOUBLE, "f": FLOAT,
                        "m": decimal(10, 2), "s": STRING, "dt": DATE, "ts": TIMESTAMP,
                        "b": BOOLEAN}


def arrow_type(t: T) -> pa.DataType:
    if t.name == "decimal":
        return pa.decimal128(t.p, t.s)
    return {"tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(),
            "bigint": pa.int64(), "float": pa.float32(), "double": pa.float64(),
            "string": pa.string(), "boolean": pa.bool_(), "date": pa.date32(),
            "timestamp": pa.timestamp("us", tz="UTC"), "null": pa.null()}[t.name]


ARROW_SCHEMA = pa.schema([(name, arrow_type(t)) for name, t in SCHEMA.items()])

# --------------------------------------------------------------------------- data

_F32_MAX = 3.4028234663852886e38
_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "t": st.one_of(st.integers(-128, 127), st.sampled_from([-128, 127, 0, -1])),
    "i": st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(-5, 5),
                   st.sampled_from([-2**31, 2**31 - 1, 0, -1])),
    "l": st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-5, 5),
                   st.sampled_from([-2**63, 2**63 - 1, 0, -1, 2**53 + 1])),
    # Mostly the values where IEEE and Spark part ways (NaN, infinities, -0.0) or ranges end.
    "d": st.one_of(st.floats(), st.sampled_from([math.nan, math.inf, -math.inf, -0.0]),
                   st.sampled_from([math.nan, 0.0, 0.125, 1.5, 2.675, 1e10, -1e19,
                                    9.223372036854775807e18, 2147483647.5, -2147483648.9])),
    "f": st.one_of(st.floats(width=32), st.sampled_from([math.nan, math.inf, -0.0]),
                   st.sampled_from([math.nan, 1.100000023841858, _F32_MAX, 16777216.0, 0.5])),
    "m": st.one_of(st.decimals(min_value=Decimal("-99999999.99"),
                               max_value=Decimal("99999999.99"), places=2),
                   st.sampled_from([Decimal("0.00"), Decimal("0.01"), Decimal("-0.05"),
                                    Decimal("99999999.99"), Decimal("2.50")])),
    "s": st.one_of(st.text(alphabet="aBz ßΣ\u03c3çé1-:İ", max_size=5),
                   st.sampled_from(["12", " 7 ", "-3", "1.5", "x", "2024-01-05", "2024-02-30",
                                    "2024-1-5", "2024-01-05 10:30:00", "2024-01-05T10:30Z", "",
                                    "true", "no", "99999999999", "ΣΑΣ"])),
    "dt": st.dates(min_value=dt.date(1, 1, 1), max_value=dt.date(9999, 12, 31)),
    "ts": st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                       timezones=st.just(UTC)),
    "b": st.booleans(),
}


@st.composite
def rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(0, 5))):
        row = {}
        for name, values in _VALUES.items():
            row[name] = None if draw(st.integers(0, 5)) == 0 else draw(values)
        out.append(row)
    return out


NULL_ROW: dict[str, Any] = dict.fromkeys(SCHEMA)


def table_of(rs: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rs, schema=ARROW_SCHEMA)


# --------------------------------------------------------------------------- expressions

_INT_LITS = ["0", "1", "-1", "3", "-7", "127", "2147483647", "-2147483648", "2147483648",
             "9223372036854775807", "-9223372036854775808", "99999999999999999999"]
_NUM_LITS = [*_INT_LITS, "1.5", "-2.5", "0.005", "2.675", "12345678.9", "1e0", "2.5e1",
             "-1e308", "1e-5", "0.0"]
_STR_LITS = ["'a'", "'ß'", "''", "' x '", "'12'", "'2024-01-05'", "'Σ'", "'İ'"]
_INT_TYPES = [T("tinyint"), T("smallint"), INT, BIGINT]
_CAST_TARGETS = [*_INT_TYPES, DOUBLE, FLOAT, decimal(5, 2), decimal(12, 4), decimal(20, 0),
                 decimal(3, 3)]


def _leaf(draw: st.DrawFn, kind: str) -> tuple[Any, ...]:
    if kind == "num":
        if draw(st.booleans()):
            return ("col", draw(st.sampled_from(["t", "i", "l", "d", "f", "m"])))
        return ("lit", draw(st.sampled_from([*_NUM_LITS, "NULL"])))
    if kind == "str":
        return ("col", "s") if draw(st.booleans()) else ("lit", draw(st.sampled_from(_STR_LITS)))
    if kind == "bool":
        return draw(st.sampled_from([("col", "b"), ("lit", "TRUE"), ("lit", "FALSE"),
                                     ("lit", "NULL")]))
    if kind == "date":
        return draw(st.sampled_from([("col", "dt"), ("lit", "DATE '2020-02-29'")]))
    return draw(st.sampled_from([("col", "ts"), ("lit", "TIMESTAMP '2020-01-01 10:00:00'")]))


def _expr(draw: st.DrawFn, kind: str, depth: int) -> tuple[Any, ...]:
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return _leaf(draw, kind)
    sub = depth - 1
    if kind == "num":
        choice = draw(st.integers(0, 9))
        if choice <= 2:
            return ("op", draw(st.sampled_from(["+", "-", "*", "/", "%"])),
                    _expr(draw, "num", sub), _expr(draw, "num", sub))
        if choice == 3:
            return draw(st.sampled_from([("neg", _expr(draw, "num", sub)),
                                         ("fn", "abs", _expr(draw, "num", sub))]))
        if choice == 4:
            source = draw(st.sampled_from(["num", "num", "str", "bool"]))
            return ("cast", _expr(draw, source, sub), draw(st.sampled_from(_CAST_TARGETS)))
        if choice == 5:
            return ("fn", "length", _expr(draw, "str", sub))
        if choice == 6:
            return ("fn", draw(st.sampled_from(["year", "month", "day"])),
                    _expr(draw, draw(st.sampled_from(["date", "ts"])), sub))
        if choice == 7:
            return ("fn", draw(st.sampled_from(["hour", "minute", "second"])),
                    _expr(draw, "ts", sub))
        return ("fn", "coalesce", _expr(draw, "num", sub), _expr(draw, "num", sub))
    if kind == "str":
        choice = draw(st.integers(0, 6))
        if choice == 0:
            return ("fn", draw(st.sampled_from(["upper", "lower", "trim"])),
                    _expr(draw, "str", sub))
        if choice == 1:
            args = [("lit", str(draw(st.integers(-6, 6))))]
            if draw(st.booleans()):
                args.append(("lit", str(draw(st.integers(-2, 6)))))
            return ("fn", "substring", _expr(draw, "str", sub), *args)
        if choice == 2:
            return ("fn", "concat", _expr(draw, "str", sub),
                    _expr(draw, draw(st.sampled_from(["str", "num"])), sub))
        if choice == 3:
            return ("cast", _expr(draw, draw(st.sampled_from(["num", "date", "bool"])), sub),
                    STRING)
        if choice == 4:
            return ("fn", "coalesce", _expr(draw, "str", sub), _expr(draw, "str", sub))
        return _leaf(draw, "str")
    if kind == "bool":
        choice = draw(st.integers(0, 9))
        ops = st.sampled_from(["=", "!=", "<", "<=", ">", ">="])
        if choice <= 2:
            left_kind = draw(st.sampled_from(["num", "num", "str", "date"]))
            right_kind = "ts" if left_kind == "date" and draw(st.booleans()) else left_kind
            return ("cmp", draw(ops), _expr(draw, left_kind, sub), _expr(draw, right_kind, sub))
        if choice == 3:
            return (draw(st.sampled_from(["and", "or"])), _expr(draw, "bool", sub),
                    _expr(draw, "bool", sub))
        if choice == 4:
            return ("not", _expr(draw, "bool", sub))
        if choice == 5:
            return ("isnull", _expr(draw, draw(st.sampled_from(["num", "str"])), sub),
                    draw(st.booleans()))
        if choice == 6:
            items = [_expr(draw, "num", sub) for _ in range(draw(st.integers(1, 3)))]
            return ("in", _expr(draw, "num", sub), *items)
        if choice == 7:
            return ("between", _expr(draw, "num", sub), _expr(draw, "num", sub),
                    _expr(draw, "num", sub))
        if choice == 8:
            return ("nullsafe", _expr(draw, "num", sub), _expr(draw, "num", sub))
        return ("cast", _expr(draw, draw(st.sampled_from(["num", "str"])), sub), BOOLEAN)
    if kind == "date":
        if draw(st.booleans()):
            return ("cast", _expr(draw, draw(st.sampled_from(["ts", "str"])), sub), DATE)
        return _leaf(draw, "date")
    if draw(st.booleans()):
        return ("cast", _expr(draw, draw(st.sampled_from(["date", "str"])), sub), TIMESTAMP)
    return _leaf(draw, "ts")


@st.composite
def expressions(draw: st.DrawFn, kind: str | None = None) -> tuple[Any, ...]:
    kind = kind or draw(st.sampled_from(["num", "num", "str", "bool", "date", "ts"]))
    return _expr(draw, kind, 4)


# --------------------------------------------------------------------------- the oracle


def expected(e: tuple[Any, ...], rs: list[dict[str, Any]]
             ) -> tuple[str, Any, list[int]]:
    """("refused", None, []) for an expression deltacommit refuses; else (outcome, values,
    failing rows) with outcome "ok", "error" (Spark fails a row) or "refused-row"."""
    spark = Evaluator(SCHEMA)
    try:
        spark.type(e)
    except Refused:
        return "refused", None, []
    values, errors, refused = [], [], []
    for i, r in enumerate(rs):
        try:
            values.append(spark.value(e, r))
        except SparkError:
            errors.append(i)
            values.append(None)
        except RefusedRow:
            refused.append(i)
            values.append(None)
    if errors:
        return ("error-or-refused" if refused else "error"), values, errors + refused
    if refused:
        return "refused-row", values, refused
    return "ok", values, []


def _row_named(message: str, data: pa.Table, failing: list[int]) -> bool:
    """Whether the message names a row the reference fails (or every row, all failing)."""
    if "for every row" in message:
        return sorted(set(failing)) == list(range(data.num_rows))
    return any(repr(data.slice(i, 1).to_pylist()[0]) in message for i in failing)


# --------------------------------------------------------------------------- properties


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e=expressions(), rs=rows())
def test_value_expressions_agree_with_spark(e: tuple[Any, ...], rs: list[dict[str, Any]]
                                            ) -> None:
    """A generated column's values are Spark's: same values (NaN, -0.0 and NULL included) and
    same type, an ExpressionValueError naming a failing row where Spark fails one, a refusal
    only where the reference expects one."""
    text, data = sql(e), table_of(rs)
    outcome, values, failing = expected(e, rs)
    if outcome == "refused":
        # Refused, unless a constant part fails first (evaluated before the rest is typed).
        with pytest.raises((dc.UnsupportedProtocolError, dc.ExpressionValueError)):
            evaluate(GeneratedColumn("g", text), data, pa.string(), "t")
        return
    spark_type = arrow_type(Evaluator(SCHEMA).type(e))
    constant_fails = expected(e, [NULL_ROW])[0] != "ok"
    try:
        assert expression_type(text, ARROW_SCHEMA) == spark_type, text
    except dc.InvalidArgumentError:
        # A constant that fails for every row (Spark folds constants, and fails then).
        assert constant_fails, text
    column = GeneratedColumn("g", text)
    if not rs:
        try:
            assert evaluate(column, data, spark_type, "t").to_pylist() == []
        except (dc.ExpressionValueError, dc.UnsupportedProtocolError):
            assert constant_fails, text
        return
    if outcome == "ok":
        got = evaluate(column, data, spark_type, "t").to_pylist()
        assert len(got) == len(values)
        for g, v in zip(got, values, strict=True):
            assert same(g, v), (text, got, values)
        return
    kinds: tuple[type[Exception], ...] = {
        "error": (dc.ExpressionValueError,), "refused-row": (dc.UnsupportedProtocolError,),
        "error-or-refused": (dc.ExpressionValueError, dc.UnsupportedProtocolError)}[outcome]
    with pytest.raises(kinds) as raised:
        evaluate(column, data, spark_type, "t")
    assert _row_named(str(raised.value), data, failing), (text, str(raised.value))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e=expressions("bool"), rs=rows())
def test_check_constraints_agree_with_spark(e: tuple[Any, ...], rs: list[dict[str, Any]]
                                            ) -> None:
    """A CHECK constraint passes exactly the rows Spark passes (TRUE; NULL and FALSE violate,
    as Delta rules), and fails the write where Spark fails a row."""
    text, data = sql(e), table_of(rs)
    outcome, values, _ = expected(e, rs)
    constraint = [Constraint("check", "c", text)]
    if not rs:
        check_constraints(data, constraint, "t")  # no rows: nothing to check
        return
    if outcome == "refused":
        with pytest.raises((dc.UnsupportedProtocolError, dc.ExpressionValueError)):
            check_constraints(data, constraint, "t")
        return
    violated = any(v is not True for v in values)
    if outcome == "ok":
        if violated:
            with pytest.raises(dc.CheckConstraintViolationError):
                check_constraints(data, constraint, "t")
        else:
            check_constraints(data, constraint, "t")
        return
    # Spark stops at the first failing row, a violation or an error: either fails the write.
    with pytest.raises((dc.ExpressionValueError, dc.UnsupportedProtocolError,
                        dc.CheckConstraintViolationError)):
        check_constraints(data, constraint, "t")


# ---- predicates: column op literal, over partition values and over rows

_PREDICATE_LITERALS: dict[str, list[str]] = {
    "t": ["0", "-1", "127", "128", "-129", "2.5", "-0.5", "99999999999999999999", "1e2"],
    "i": ["0", "5", "-1", "2147483647", "2147483648", "-2147483649", "2.5", "-2.5",
          "99999999999999999999", "-99999999999999999999", "1e0", "NULL"],
    "l": ["0", "-1", "9223372036854775807", "99999999999999999999", "-0.5", "1.5", "NULL"],
    "d": ["0", "0.0", "-1", "1.5", "1e308", "-1e308", "0.125", "99999999999999999999",
          "1e-300", "NULL"],
    "f": ["0", "1.1", "1.100000023841858", "16777217", "1e38", "1e39", "-0.5", "NULL"],
    "m": ["0", "0.005", "0.01", "-0.05", "99999999.99", "99999999.995", "100000000", "2.5",
          "1e0", "NULL"],
    "s": ["'a'", "''", "'ß'", "'12'", "NULL"],
    "dt": ["DATE '2020-02-29'", "DATE '0001-01-01'", "'2020-01-01'", "NULL"],
    "b": ["TRUE", "FALSE", "NULL"],
}
_PREDICATE_COLUMNS = sorted(_PREDICATE_LITERALS)


@st.composite
def _predicate_leaf(draw: st.DrawFn) -> tuple[Any, ...]:
    column = draw(st.sampled_from(_PREDICATE_COLUMNS))
    lits = st.sampled_from(_PREDICATE_LITERALS[column]).map(lambda t: ("lit", t))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "flip", "in", "null", "between"]))
    col = ("col", column)
    if kind == "cmp":
        return ("cmp", draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="])), col, draw(lits))
    if kind == "flip":
        return ("cmp", draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="])), draw(lits), col)
    if kind == "in":
        return ("in", col, *draw(st.lists(lits, min_size=1, max_size=3)))
    if kind == "null":
        return ("isnull", col, draw(st.booleans()))
    return ("between", col, draw(lits), draw(lits))


_PREDICATES = st.recursive(_predicate_leaf(), lambda inner: st.one_of(
    st.tuples(st.just("not"), inner),
    st.tuples(st.sampled_from(["and", "or"]), inner, inner)), max_leaves=5)


def _predicate_sql(e: tuple[Any, ...]) -> str:
    # Columns plain (the predicate grammar reads backticks too, but keep it readable).
    return sql(e, signed=True).replace("`", "")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e=_PREDICATES, rs=rows())
def test_predicates_agree_with_spark_on_rows_and_partition_values(
        e: tuple[Any, ...], rs: list[dict[str, Any]]) -> None:
    """A predicate selects the same rows whether it filters rows (DELETE, CHECK) or partition
    values (pruning, conflicts, overwrites), and they are the rows Spark's answer is TRUE for:
    NaN equal to NaN and above infinity, wide and fractional literals compared exactly."""
    text = _predicate_sql(e)
    outcome, values, _ = expected(e, rs)
    if outcome != "ok":
        return  # the literals are chosen so that Spark reads every one; see the reference
    predicate = parse_predicate(text)
    data = table_of(rs)
    wanted = [i for i, v in enumerate(values) if v is True]
    numbered = data.append_column("row", pa.array(range(data.num_rows), pa.int64()))
    rows_of = row_filter(predicate, ARROW_SCHEMA)
    selected = numbered.filter(rows_of.matches(numbered))
    assert selected.column("row").to_pylist() == wanted, text
    rejected = numbered.filter(rows_of.not_matching(numbered))
    assert rejected.column("row").to_pylist() == sorted(set(range(len(rs))) - set(wanted))
    types = {name: ARROW_SCHEMA.field(name).type for name in _PREDICATE_COLUMNS}
    for i, r in enumerate(rs):
        serialized = {c: serialize_partition_value(r[c], types[c]) for c in _PREDICATE_COLUMNS}
        if any(r[c] == "" for c in _PREDICATE_COLUMNS if isinstance(r[c], str)):
            continue  # an empty string is a NULL partition value
        assert predicate.evaluate(serialized, types) is (i in wanted), (text, r)


# ---- robustness: any text, any tree, any data

_TOKENS = ["x", "i", "l", "d", "f", "m", "s", "dt", "b", "(", ")", ",", "+", "-", "*", "/", "%",
           "||", "=", "<", ">", "<=", ">=", "<>", "!=", "<=>", "AND", "OR", "NOT", "IS", "NULL",
           "IN", "BETWEEN", "CAST", "AS", "INT", "DECIMAL(38, 38)", "DECIMAL(99, 0)", "DOUBLE",
           "STRING", "DATE", "TIMESTAMP", "upper", "substring", "coalesce", "abs", "year",
           "date_trunc", "'x'", "'2020-01-01'", "1", "0", "-1", "1e400", "1.5",
           "99999999999999999999", "1" + "0" * 40, "9" * 39 + ".5", "1" + "0" * 5000,
           "TRUE", "--", "/*", "`",
           "\"", "'", "€", "\x00"]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens=st.lists(st.sampled_from(_TOKENS), max_size=14), rs=rows())
def test_any_text_raises_only_deltacommit_errors(tokens: list[str],
                                                 rs: list[dict[str, Any]]) -> None:
    """Whatever the text and the data, parsing and evaluating it as a generation expression,
    a CHECK constraint or a predicate raises a deltacommit error or nothing."""
    text, data = " ".join(tokens), table_of(rs)
    for attempt in (
            lambda: evaluate(GeneratedColumn("g", text), data, pa.int64(), "t"),
            lambda: evaluate_condition(text, data),
            lambda: check_constraints(data, [Constraint("check", "c", text)], "t"),
            lambda: data.filter(row_filter(parse_predicate(text), ARROW_SCHEMA).matches(data)),
            lambda: parse_predicate(text).evaluate({"i": "1", "d": "NaN"},
                                                   {"i": pa.int32(), "d": pa.float64()})):
        with contextlib.suppress(DeltaCommitError):
            attempt()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e=expressions(), rs=rows(), to=st.sampled_from(list(ARROW_SCHEMA.types)))
def test_any_expression_into_any_column_raises_only_deltacommit_errors(
        e: tuple[Any, ...], rs: list[dict[str, Any]], to: pa.DataType) -> None:
    """An expression whose type differs from its column's (a table another engine made)
    is converted as Spark's CAST would, or refused; never a raw exception."""
    with contextlib.suppress(DeltaCommitError):
        evaluate(GeneratedColumn("g", sql(e)), table_of(rs), to, "t")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.one_of(st.none(), st.floats(), st.floats(-1e6, 1e6),
                                 st.integers(-10**6, 10**6).map(lambda i: i / 1000 + 0.0005)),
                       max_size=20),
       precision=st.integers(1, 18), scale=st.integers(0, 8), single=st.booleans())
def test_doubles_to_decimal_round_as_spark(values: list[float | None], precision: int,
                                           scale: int, single: bool) -> None:
    """The vectorized DOUBLE to DECIMAL conversion agrees, value by value, with Spark's rule:
    the shortest decimal text of the DOUBLE, rounded HALF_UP; failing where one overflows."""
    scale = min(scale, precision)
    to = decimal(precision, scale)
    column = pa.array(values, pa.float32() if single else pa.float64())
    spark: list[Any] = []
    for v in column.to_pylist():
        try:
            spark.append(ref._cast(v, FLOAT if single else DOUBLE, to))
        except SparkError:
            spark = ["error"]
            break
    data = pa.table({"x": column})
    if spark == ["error"]:
        with pytest.raises(dc.ExpressionValueError, match="overflows"):
            evaluate(GeneratedColumn("g", f"CAST(x AS {to.sql()})"), data, arrow_type(to), "t")
        return
    got = evaluate(GeneratedColumn("g", f"CAST(x AS {to.sql()})"), data, arrow_type(to), "t")
    assert got.to_pylist() == spark


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.one_of(st.none(), st.decimals(min_value=-10**6, max_value=10**6,
                                                        places=4)), max_size=20),
       precision=st.integers(1, 18), scale=st.integers(0, 6))
def test_decimals_rescale_as_spark(values: list[Decimal | None], precision: int,
                                   scale: int) -> None:
    scale = min(scale, precision)
    to = decimal(precision, scale)
    column = pa.array(values, pa.decimal128(11, 4))
    spark: list[Any] = []
    for v in column.to_pylist():
        try:
            spark.append(ref._cast(v, decimal(11, 4), to))
        except SparkError:
            spark = ["error"]
            break
    column_sql = f"CAST(x AS {to.sql()})"
    data = pa.table({"x": column})
    if spark == ["error"]:
        with pytest.raises(dc.ExpressionValueError, match="overflows"):
            evaluate(GeneratedColumn("g", column_sql), data, arrow_type(to), "t")
        return
    assert evaluate(GeneratedColumn("g", column_sql), data, arrow_type(to), "t").to_pylist() \
        == spark
