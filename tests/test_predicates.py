"""Partition predicates: parser, partition filters, typed three-valued evaluation, SQL round trip."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.predicates import (
    FALSE,
    NULL,
    TRUE,
    And,
    Comparison,
    InList,
    IsNull,
    Literal,
    Not,
    Or,
    Predicate,
    and_,
    compare,
    from_partition_filters,
    lit,
    not_,
    or_,
    parse_predicate,
)
from deltacommit.protocol.partitions import parse_partition_value, serialize_partition_value

UTC = dt.UTC

TYPES: dict[str, pa.DataType] = {
    "s": pa.string(),
    "i": pa.int64(),
    "f": pa.float64(),
    "dec": pa.decimal128(10, 2),
    "d": pa.date32(),
    "ts": pa.timestamp("us", tz="UTC"),
    "tn": pa.timestamp("us"),
    "b": pa.bool_(),
    "date": pa.string(),  # a column named like a keyword
}


def ev(text: str, **values: str | None) -> bool:
    return parse_predicate(text).evaluate(values, TYPES)


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(("text", "expected"), [
    ("s = 'a'", Comparison("s", "=", Literal("string", "a"))),
    ("s == 'a'", Comparison("s", "=", Literal("string", "a"))),
    ("s <> 'it''s'", Comparison("s", "!=", Literal("string", "it's"))),
    ("i != -5", Comparison("i", "!=", Literal("int", -5))),
    ("i < +5", Comparison("i", "<", Literal("int", 5))),
    ("5 < i", Comparison("i", ">", Literal("int", 5))),
    ("f >= 1.50", Comparison("f", ">=", Literal("decimal", Decimal("1.50")))),
    ("f <= 1e3", Comparison("f", "<=", Literal("double", 1000.0))),  # a DOUBLE, as Spark types it
    ("f > .5", Comparison("f", ">", Literal("decimal", Decimal("0.5")))),
    ("b = true", Comparison("b", "=", Literal("bool", True))),
    ("FALSE = b", Comparison("b", "=", Literal("bool", False))),
    ("s = NULL", Comparison("s", "=", NULL)),
    ("d = DATE '2026-11-22'", Comparison("d", "=", Literal("date", dt.date(2026, 11, 22)))),
    ("ts = timestamp '2026-11-22 10:00:00'",
     Comparison("ts", "=", Literal("timestamp", dt.datetime(2026, 11, 22, 10)))),
    ("ts = TIMESTAMP '2026-11-22T12:00:00+02:00'",
     Comparison("ts", "=", Literal("timestamp", dt.datetime(2026, 11, 22, 10, tzinfo=UTC)))),
    ("date = '2026-11-22'", Comparison("date", "=", Literal("string", "2026-11-22"))),
    ('"my col" = 1', Comparison("my col", "=", Literal("int", 1))),
    ('"a""b" = 1', Comparison('a"b', "=", Literal("int", 1))),
    ("`a``b` = 1", Comparison("a`b", "=", Literal("int", 1))),
    ("`AND` = 1", Comparison("AND", "=", Literal("int", 1))),
    ("ünï = 1", Comparison("ünï", "=", Literal("int", 1))),
    ("s IN ('a', 'b')", InList("s", (Literal("string", "a"), Literal("string", "b")))),
    ("s not  in ('a')", InList("s", (Literal("string", "a"),), negated=True)),
    ("s IS NULL", IsNull("s")),
    ("s is not null", IsNull("s", negated=True)),
    ("NOT s IS NULL", Not(IsNull("s"))),
    ("NOT NOT s IS NULL", IsNull("s")),
    ("TRUE", TRUE),
    ("false", FALSE),
    ("(TRUE)", TRUE),
    ("i BETWEEN 1 AND 3",
     And((Comparison("i", ">=", Literal("int", 1)), Comparison("i", "<=", Literal("int", 3))))),
    ("i NOT BETWEEN 1 AND 3",
     Not(And((Comparison("i", ">=", Literal("int", 1)), Comparison("i", "<=", Literal("int", 3)))))),
    ("i = 1 AND i = 2 AND (i = 3 AND i = 4)",
     And(tuple(Comparison("i", "=", Literal("int", n)) for n in range(1, 5)))),
    ("i = 1 OR i = 2 AND i = 3", Or((Comparison("i", "=", Literal("int", 1)),
                                    And((Comparison("i", "=", Literal("int", 2)),
                                         Comparison("i", "=", Literal("int", 3))))))),
    ("i = 1 AND TRUE", Comparison("i", "=", Literal("int", 1))),
    ("i = 1 OR TRUE", TRUE),
    ("i = 1 AND FALSE", FALSE),
    ("NOT TRUE", FALSE),
])
def test_parse(text: str, expected: Predicate) -> None:
    assert parse_predicate(text) == expected
    assert parse_predicate(expected.to_sql()) == expected


@pytest.mark.parametrize(("text", "message", "position"), [
    ("", "empty predicate", 0),
    ("s = ", "expected a column or a literal", 4),
    ("s = = 1", "expected a column or a literal", 4),
    ("s = 'x", "unterminated string", 4),
    ('"s = 1', "unterminated quoted identifier", 0),
    ("(s = 1", "expected ')'", 6),
    ("s IN ()", "expected a literal", 6),
    ("s b", "expected a comparison, IN, IS NULL, BETWEEN or LIKE after column 's'", 2),
    ("1 = 2", "a comparison needs a column on one side", 0),
    ("a = b", "comparing two columns is not supported", 4),
    ("NOT", "expected a column or a literal", 3),
    ("a IS 5", "expected NULL", 5),
    ("d = DATE '2026-13-01'", "invalid date literal", 9),
    ("ts = TIMESTAMP 'soon'", "invalid timestamp literal", 15),
    ("a = 1e99999", "beyond the range of a DOUBLE", 4),
    ("a = 1.0000000000000000000000000000000000000001", "Spark's DECIMAL holds at most 38", 4),
    ("a = 100000000000000000000000000000000000000000", "Spark's DECIMAL holds at most 38", 4),
    ("a = 1 --2", "SQL comments are not supported", 6),
    ("a ! 1", "unexpected character '!'", 2),
    ('"" = 1', "empty quoted identifier", 0),
    ("a = 1 1", "expected AND, OR or the end of the predicate", 6),
    ("a = -'x'", "expected a number after the sign", 5),
    ("AND = 1", "expected a column or a literal", 0),
    ("a = 1 AND", "expected a column or a literal", 9),
])
def test_syntax_errors_name_the_position(text: str, message: str, position: int) -> None:
    with pytest.raises(InvalidArgumentError) as ei:
        parse_predicate(text)
    msg = str(ei.value)
    assert message in msg and f"at position {position}" in msg and repr(text) in msg


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(InvalidArgumentError, match="must be a string"):
        parse_predicate(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- partition filters


def test_partition_filters_conjunction() -> None:
    p = from_partition_filters([("s", "=", "a"), ("i", ">=", 3), ("d", "in", ["2026-11-22", "2026-11-23"]),
                                ("b", "!=", None), ("f", "==", 1.5), ("dec", "NOT IN", (Decimal("1.10"),))])
    assert p.to_sql() == ("s = 'a' AND i >= 3 AND d IN ('2026-11-22', '2026-11-23') AND b IS NOT NULL "
                          "AND f = 1.5 AND dec NOT IN (1.10)")
    assert p.columns() == frozenset({"s", "i", "d", "b", "f", "dec"})


def test_partition_filters_disjunction() -> None:
    p = from_partition_filters([[("s", "=", "a"), ("i", "<", 0)], [("s", "=", None)]])
    assert p == or_(and_(compare("s", "=", "a"), compare("i", "<", 0)), IsNull("s"))
    assert p.to_sql() == "(s = 'a' AND i < 0) OR s IS NULL"


def test_partition_filters_edge_cases() -> None:
    assert from_partition_filters(None) is TRUE
    assert from_partition_filters([]) is TRUE
    assert from_partition_filters([("s", "in", {"b", "a"})]).to_sql() == "s IN ('a', 'b')"
    plus_one = dt.timezone(dt.timedelta(hours=1))
    assert from_partition_filters([("ts", "<", dt.datetime(2026, 1, 1, 1, tzinfo=plus_one))]).to_sql() == (
        "ts < TIMESTAMP '2026-01-01 00:00:00Z'")
    assert from_partition_filters([("f", ">", float("nan"))]).to_sql() == "f > 'NaN'"
    assert from_partition_filters([("d", "<=", dt.date(2026, 1, 1))]).to_sql() == "d <= DATE '2026-01-01'"


@pytest.mark.parametrize(("filters", "message"), [
    ([("s", "~", "a")], "unknown operator '~'"),
    ([("s", "in", "abc")], "needs a list of values"),
    ([("s", "in", [])], "empty"),
    ([("s", "<", None)], "cannot compare with None"),
    ([("s", "=")], "list of (column, op, value) tuples"),
    ("s = 'a'", "pass a predicate string as predicate="),
    ([("s", "=", "a"), [("i", "=", 1)]], "list of (column, op, value) tuples"),
    ([("s", "=", object())], "unsupported literal"),
])
def test_partition_filter_errors(filters: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_partition_filters(filters)


# --------------------------------------------------------------------------- evaluation


@pytest.mark.parametrize(("text", "values", "expected"), [
    # integers compare numerically, not as text
    ("i > 9", {"i": "10"}, True),
    ("i < 10", {"i": "9"}, True),
    ("i = 10", {"i": "10"}, True),
    ("i != 10", {"i": "10"}, False),
    ("i <= -1", {"i": "-1"}, True),
    ("i >= 1.5", {"i": "1"}, False),
    ("i = '10'", {"i": "10"}, True),
    ("i IN (1, 2, 10)", {"i": "10"}, True),
    ("i NOT IN (1, 2)", {"i": "10"}, True),
    # strings compare by code point
    ("s > 'B'", {"s": "a"}, True),
    ("s < 'é'", {"s": "z"}, True),
    ("s = 10", {"s": "10"}, True),
    ("s = 'a b'", {"s": "a b"}, True),
    # floats, including Spark's NaN: equal to itself and above every number
    ("f > 1", {"f": "1.5"}, True),
    ("f = 100", {"f": "1e2"}, True),
    ("f = 0.8", {"f": "0.8"}, True),  # the literal compares as a double, as in Spark
    ("f > 1e300", {"f": "NaN"}, True),
    ("f = 'NaN'", {"f": "NaN"}, True),
    ("f < 'NaN'", {"f": "Infinity"}, True),
    ("f = 0", {"f": "-0.0"}, True),
    # decimals
    ("dec = 1.5", {"dec": "1.50"}, True),
    ("dec < 0.01", {"dec": "0.00"}, True),
    # dates and timestamps compare in time
    ("d = '2026-11-22'", {"d": "2026-11-22"}, True),
    ("d > DATE '2026-11-09'", {"d": "2026-11-10"}, True),
    ("d >= TIMESTAMP '2026-11-22 00:00:00'", {"d": "2026-11-22"}, True),
    ("d > TIMESTAMP '2026-11-22 00:00:01'", {"d": "2026-11-22"}, False),
    ("d < '2026-11-22 00:00:01'", {"d": "2026-11-22"}, True),
    ("d IN (TIMESTAMP '2026-11-22 00:00:00')", {"d": "2026-11-22"}, True),
    ("d IN (TIMESTAMP '2026-11-22 00:00:01')", {"d": "2026-11-22"}, False),
    ("ts = TIMESTAMP '2026-11-22T12:00:00+02:00'", {"ts": "2026-11-22 10:00:00.000000"}, True),
    ("ts = '2026-11-22 10:00:00'", {"ts": "2026-11-22T10:00:00Z"}, True),
    ("ts > DATE '2026-11-22'", {"ts": "2026-11-22 00:00:00.000001"}, True),
    ("ts < '2026-11-22 10:00:00.5'", {"ts": "2026-11-22 10:00:00.499999"}, True),
    ("tn = TIMESTAMP '2026-01-02 03:04:05.000006'", {"tn": "2026-01-02 03:04:05.000006"}, True),
    # booleans
    ("b = TRUE", {"b": "true"}, True),
    ("b = 'false'", {"b": "false"}, True),
    ("b > FALSE", {"b": "true"}, True),
    # nulls: three-valued logic
    ("s = 'a'", {"s": None}, False),
    ("s != 'a'", {"s": None}, False),
    ("NOT s = 'a'", {"s": None}, False),
    ("s IS NULL", {"s": None}, True),
    ("s IS NULL", {"s": ""}, True),
    ("s IS NULL", {}, True),
    ("s IS NOT NULL", {"s": "x"}, True),
    ("s = NULL", {"s": None}, False),
    ("s IN ('a', NULL)", {"s": "a"}, True),
    ("s IN ('a', NULL)", {"s": "b"}, False),
    ("NOT s IN ('a', NULL)", {"s": "b"}, False),
    ("s NOT IN ('a', NULL)", {"s": "b"}, False),
    ("s NOT IN ('a')", {"s": None}, False),
    ("s = 'a' OR i = 1", {"s": None, "i": "1"}, True),
    ("s = 'a' AND i = 1", {"s": None, "i": "1"}, False),
    ("NOT (s = 'a' AND i = 2)", {"s": None, "i": "1"}, True),
    ("NOT (s = 'a' OR i = 2)", {"s": None, "i": "1"}, False),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
])
def test_evaluate(text: str, values: dict[str, str | None], expected: bool) -> None:
    p = parse_predicate(text)
    assert p.evaluate(values, TYPES) is expected
    # the SQL form evaluates identically
    assert parse_predicate(p.to_sql()).evaluate(values, TYPES) is expected


def test_evaluate_errors() -> None:
    with pytest.raises(InvalidArgumentError, match=r"compares column 'i' of type int64 with 'abc'"):
        ev("i = 'abc'", i="1")
    with pytest.raises(InvalidArgumentError, match=r"column 'd' of type date32\[day\] with TRUE"):
        ev("d = TRUE", d="2026-01-01")
    with pytest.raises(InvalidArgumentError, match=r"value 'x1' of column 'i' is not a valid int64"):
        ev("i = 1", i="x1")
    with pytest.raises(InvalidArgumentError, match=r"references \['nope'\], for which no column type"):
        ev("nope = 1")
    with pytest.raises(InvalidArgumentError, match="which predicates cannot compare"):
        parse_predicate("l = 1").evaluate({"l": "x"}, {"l": pa.list_(pa.int32())})


def test_check_columns() -> None:
    p = parse_predicate("day = '2026-11-22' AND region = 'eu' AND x > 1")
    p.check_columns(["day", "region", "x"], "s3://b/t")
    with pytest.raises(InvalidArgumentError) as ei:
        p.check_columns(["day", "region"], "s3://b/t")
    msg = str(ei.value)
    assert "'x', which is not a partition column" in msg and "s3://b/t" in msg
    assert "partition columns are ['day', 'region']" in msg
    with pytest.raises(InvalidArgumentError, match="the table is not partitioned"):
        p.check_columns([], "t")
    TRUE.check_columns([], "t")


def test_predicates_are_immutable_and_hashable() -> None:
    a = parse_predicate("s = 'a' AND i IN (1, 2)")
    b = parse_predicate("s = 'a' and i in (1,2)")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    a.evaluate({"s": "a", "i": "1"}, TYPES)  # compiling does not change identity
    assert a == b and hash(a) == hash(b)
    with pytest.raises(AttributeError):
        a.children = ()  # type: ignore[misc]
    assert str(a) == a.to_sql()
    assert Literal("bool", True) == TRUE and TRUE is not FALSE


def test_pickle_and_deepcopy_after_compiling() -> None:
    import copy
    import pickle

    p = parse_predicate("s = 'a' AND (i IN (1, 2) OR NOT d IS NULL)")
    assert p.evaluate({"s": "a", "i": "2"}, TYPES)
    for again in (pickle.loads(pickle.dumps(p)), copy.deepcopy(p)):
        assert again == p and again.to_sql() == p.to_sql()
        assert again.evaluate({"s": "a", "i": "2"}, TYPES)
        assert not again.evaluate({"s": "a", "i": "3"}, TYPES)


def test_helpers() -> None:
    x, y, z = compare("i", "==", 1), compare("i", "<>", 2), IsNull("s")
    assert and_(x, and_(y, z)) == And((x, y, z))
    assert or_(or_(x, y), z) == Or((x, y, z))
    assert and_() is TRUE and or_() is FALSE
    assert and_(x) is x and or_(TRUE, x) is TRUE and and_(FALSE, x) is FALSE
    assert not_(not_(x)) is x and not_(TRUE) is FALSE
    assert lit(1.0) == Literal("int", 1) and lit(0.1) == Literal("decimal", Decimal("0.1"))
    assert lit(dt.date(2026, 1, 1)).kind == "date" and lit(dt.datetime(2026, 1, 1)).kind == "timestamp"
    with pytest.raises(InvalidArgumentError, match="unknown comparison"):
        Comparison("i", "~", lit(1))
    with pytest.raises(InvalidArgumentError, match="empty"):
        InList("i", ())


def test_compiled_once_per_types() -> None:
    p = from_partition_filters([("d", "in", ["2026-11-20", "2026-11-21"]), ("s", "=", "eu")])
    types = {"d": pa.date32(), "s": pa.string()}
    assert p.compile(types) is p.compile(types)
    assert p.compile(types) is p.compile(dict(types))  # same types, another mapping
    assert p.compile(types) is not p.compile({"d": pa.string(), "s": pa.string()})
    values = [{"d": f"2026-11-{day:02d}", "s": s} for day in range(1, 29) for s in ("eu", "us")]
    hits = sum(p.evaluate(v, types) for _ in range(500) for v in values)
    assert hits == 500 * 2


# --------------------------------------------------------------------------- properties


_VALUE_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "s": st.text(alphabet="ab'é ", max_size=3),
    "i": st.integers(min_value=-3, max_value=3),
    "f": st.one_of(st.sampled_from([float("nan"), float("inf"), -0.0]),
                   st.floats(-3, 3).map(lambda x: round(x, 1))),
    "dec": st.decimals(min_value=-2, max_value=2, places=2, allow_nan=False),
    "d": st.dates(min_value=dt.date(2026, 1, 1), max_value=dt.date(2026, 1, 4)),
    "ts": st.datetimes(min_value=dt.datetime(2026, 1, 1), max_value=dt.datetime(2026, 1, 1, 0, 0, 0, 3),
                       timezones=st.just(UTC)),
    "tn": st.datetimes(min_value=dt.datetime(2026, 1, 1), max_value=dt.datetime(2026, 1, 1, 0, 0, 0, 3)),
    "b": st.booleans(),
}
_COLUMNS = sorted(_VALUE_STRATEGIES)


@st.composite
def _literal(draw: st.DrawFn, column: str) -> Literal:
    if draw(st.integers(0, 9)) == 0:
        return NULL
    return lit(draw(_VALUE_STRATEGIES[column]))


@st.composite
def _leaf(draw: st.DrawFn) -> Predicate:
    column = draw(st.sampled_from(_COLUMNS))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "null", "const"]))
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">="]))
        return Comparison(column, op, draw(_literal(column)))
    if kind == "in":
        items = draw(st.lists(_literal(column), min_size=1, max_size=3))
        return InList(column, tuple(items), draw(st.booleans()))
    if kind == "null":
        return IsNull(column, draw(st.booleans()))
    return TRUE if draw(st.booleans()) else FALSE


_PREDICATES = st.recursive(
    _leaf(),
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda ps: and_(*ps)),
        st.lists(children, min_size=1, max_size=3).map(lambda ps: or_(*ps)),
        children.map(not_),
    ),
    max_leaves=8,
)

_RAW_PREDICATES = st.recursive(  # built with the constructors: no flattening or folding
    _leaf(),
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda ps: And(tuple(ps))),
        st.lists(children, min_size=1, max_size=3).map(lambda ps: Or(tuple(ps))),
        children.map(Not),
    ),
    max_leaves=8,
)


@st.composite
def _partition_values(draw: st.DrawFn) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for c in _COLUMNS:
        v = draw(st.one_of(st.none(), _VALUE_STRATEGIES[c]))
        out[c] = serialize_partition_value(v, TYPES[c])
    return out


def _order_key(v: Any) -> Any:
    if isinstance(v, float):
        return (1, 0.0) if v != v else (0, v)
    return v


def _ref_literal(literal: Literal, column: str) -> Any:
    """The literal as a value of the column's Python type (literals come from that type)."""
    if literal.kind == "null":
        return None
    if column == "f":
        return float(literal.value)  # ints/Decimals print exactly; 'NaN'/'Infinity' strings parse
    if column == "dec":
        return Decimal(literal.value)
    return literal.value


def _reference(p: Predicate, values: dict[str, str | None]) -> bool | None:
    """A direct three-valued evaluation over typed Python values."""
    if isinstance(p, Literal):  # TRUE or FALSE
        return bool(p.value)
    if isinstance(p, Not):
        r = _reference(p.child, values)
        return None if r is None else not r
    if isinstance(p, And | Or):
        rs = [_reference(c, values) for c in p.children]
        decisive = isinstance(p, Or)
        if decisive in rs:
            return decisive
        return None if None in rs else not decisive
    assert isinstance(p, Comparison | InList | IsNull)
    value = parse_partition_value(values.get(p.column), TYPES[p.column])
    if isinstance(p, IsNull):
        return (value is None) != p.negated
    if value is None:
        return None
    if isinstance(p, Comparison):
        other = _ref_literal(p.literal, p.column)
        if other is None:
            return None
        a, b = _order_key(value), _order_key(other)
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[p.op]
    items = [_ref_literal(x, p.column) for x in p.literals]
    if any(_order_key(value) == _order_key(x) for x in items if x is not None):
        return not p.negated
    return None if None in items else p.negated


@settings(max_examples=300, deadline=None)
@given(_RAW_PREDICATES, st.lists(_partition_values(), min_size=1, max_size=5))
def test_evaluate_agrees_with_reference(p: Predicate, rows: list[dict[str, str | None]]) -> None:
    for values in rows:
        assert p.evaluate(values, TYPES) is (_reference(p, values) is True), (p.to_sql(), values)


@settings(max_examples=300, deadline=None)
@given(_PREDICATES)
def test_to_sql_round_trip(p: Predicate) -> None:
    text = p.to_sql()
    again = parse_predicate(text)
    assert again == p, text
    assert again.to_sql() == text
    assert again.columns() == p.columns()


@settings(max_examples=150, deadline=None)
@given(_RAW_PREDICATES, st.lists(_partition_values(), min_size=1, max_size=3))
def test_to_sql_preserves_meaning_of_unnormalised_trees(p: Predicate,
                                                        rows: list[dict[str, str | None]]) -> None:
    again = parse_predicate(p.to_sql())
    for values in rows:
        assert again.evaluate(values, TYPES) is p.evaluate(values, TYPES), p.to_sql()
