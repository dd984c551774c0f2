"""Generated columns (``delta.generationExpression``): computed when the data lacks them,
verified when it supplies them, refused when the expression is beyond this writer.

Expected values are Spark 4's results (ANSI mode, its default), written out by hand or by a
reference of Spark's rule in Python (``substring``, integer arithmetic); deltalake 1.6.0 both
reads the tables and, for the expressions where its evaluator agrees with Spark, writes rows
whose generated values deltacommit then verifies.  ``tests/expressions`` holds the property
tests of the whole evaluator against a reference of Spark's semantics.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import (
    GeneratedColumnMismatchError,
    InvalidArgumentError,
    UnsupportedProtocolError,
)
from deltacommit.io.datafiles import WriteTarget, conform_rows
from deltacommit.protocol.expressions.generated import (
    GeneratedColumn,
    evaluate,
    generated_columns,
    parse_expression,
)

UTC = dt.UTC
TS = pa.timestamp("us", tz="UTC")
ROWS = pa.table({
    "ts": pa.array([dt.datetime(2020, 1, 2, 23, 30, 5, tzinfo=UTC), None,
                    dt.datetime(1969, 12, 31, 1, 2, 3, tzinfo=UTC)], TS),
    "ntz": pa.array([dt.datetime(2021, 6, 7, 8, 9, 10), dt.datetime(2000, 2, 29), None],
                    pa.timestamp("us")),
    "day": pa.array([dt.date(2024, 2, 29), None, dt.date(1999, 12, 31)], pa.date32()),
    "s": ["Hello World", None, "ÄbcDé"],
    "n": pa.array([7, -7, None], pa.int32()),
    "big": pa.array([2**40, -3, 0], pa.int64()),
    "x": pa.array([1.5, -2.25, None], pa.float64()),
    "dec": pa.array([Decimal("1.25"), None, Decimal("-3.50")], pa.decimal128(10, 2)),
    "Mixed": ["a", "b", "c"],
})

CASES: list[tuple[str, pa.DataType, list[Any]]] = [
    ("ts", TS, ROWS.column("ts").to_pylist()),
    ("year(ts)", pa.int32(), [2020, None, 1969]),
    ("month(ts)", pa.int32(), [1, None, 12]),
    ("day(ts)", pa.int32(), [2, None, 31]),
    ("dayofmonth(day)", pa.int32(), [29, None, 31]),
    ("hour(ts)", pa.int32(), [23, None, 1]),
    ("minute(ts) * 100 + second(ts)", pa.int32(), [3005, None, 203]),
    ("year(ntz) * 10000 + month(ntz) * 100 + day(ntz)", pa.int64(), [20210607, 20000229, None]),
    ("CAST(ts AS DATE)", pa.date32(), [dt.date(2020, 1, 2), None, dt.date(1969, 12, 31)]),
    ("to_date(ts)", pa.date32(), [dt.date(2020, 1, 2), None, dt.date(1969, 12, 31)]),
    ("to_date(ntz)", pa.date32(), [dt.date(2021, 6, 7), dt.date(2000, 2, 29), None]),
    ("date_format(ts, 'yyyy-MM-dd')", pa.string(), ["2020-01-02", None, "1969-12-31"]),
    ("date_format(ts, 'yyyyMMdd HH:mm:ss')", pa.string(),
     ["20200102 23:30:05", None, "19691231 01:02:03"]),
    ("date_format(day, 'yyyy/MM')", pa.string(), ["2024/02", None, "1999/12"]),
    ("date_format(ts, 'yyyy-MM-dd''T''HH')", pa.string(), ["2020-01-02T23", None, "1969-12-31T01"]),
    ("substring(s, 1, 5)", pa.string(), ["Hello", None, "ÄbcDé"]),
    ("substr(s, 7)", pa.string(), ["World", None, ""]),
    ("substring(s, -3, 2)", pa.string(), ["rl", None, "cD"]),
    ("substring(s, 0, 2)", pa.string(), ["He", None, "Äb"]),
    ("concat(s, '-', n)", pa.string(), ["Hello World-7", None, None]),
    ("s || '!'", pa.string(), ["Hello World!", None, "ÄbcDé!"]),
    ("lower(s)", pa.string(), ["hello world", None, "äbcdé"]),
    ("upper(s)", pa.string(), ["HELLO WORLD", None, "ÄBCDÉ"]),
    ("trim('  x ')", pa.string(), ["x", "x", "x"]),
    ("coalesce(s, 'none')", pa.string(), ["Hello World", "none", "ÄbcDé"]),
    ("coalesce(n, big)", pa.int64(), [7, -7, 0]),
    ("n + 1", pa.int32(), [8, -6, None]),
    ("n - big", pa.int64(), [7 - 2**40, -4, None]),
    ("-n * 3", pa.int32(), [-21, 21, None]),
    ("n / 2", pa.float64(), [3.5, -3.5, None]),
    ("n % 3", pa.int32(), [1, -1, None]),
    ("abs(n)", pa.int32(), [7, 7, None]),
    ("x * 2", pa.float64(), [3.0, -4.5, None]),
    ("n + x", pa.float64(), [8.5, -9.25, None]),
    ("dec * 2", pa.decimal128(12, 2), [Decimal("2.50"), None, Decimal("-7.00")]),
    ("n + 1.5", pa.decimal128(12, 1), [Decimal("8.5"), Decimal("-5.5"), None]),
    ("CAST(x AS INT)", pa.int32(), [1, -2, None]),
    ("CAST(n AS STRING)", pa.string(), ["7", "-7", None]),
    ("CAST(day AS STRING)", pa.string(), ["2024-02-29", None, "1999-12-31"]),
    ("CAST(n AS DECIMAL(5, 1))", pa.decimal128(5, 1), [Decimal("7.0"), Decimal("-7.0"), None]),
    ("CAST('2020-05-06' AS DATE)", pa.date32(), [dt.date(2020, 5, 6)] * 3),
    ("DATE '2020-05-06'", pa.date32(), [dt.date(2020, 5, 6)] * 3),
    ("mixed", pa.string(), ["a", "b", "c"]),  # Spark resolves names case-insensitively
    ("`Mixed`", pa.string(), ["a", "b", "c"]),
    ("NULL", pa.int32(), [None, None, None]),
    ("(n + 1) * (n - 1)", pa.int32(), [48, 48, None]),
    ("date_trunc('HOUR', ts)", TS, [dt.datetime(2020, 1, 2, 23, tzinfo=UTC), None,
                                    dt.datetime(1969, 12, 31, 1, tzinfo=UTC)]),
    ("date_trunc('month', ts)", TS, [dt.datetime(2020, 1, 1, tzinfo=UTC), None,
                                     dt.datetime(1969, 12, 1, tzinfo=UTC)]),
    ("date_trunc('WEEK', ntz)", pa.timestamp("us"), [dt.datetime(2021, 6, 7),
                                                     dt.datetime(2000, 2, 28), None]),
    ("date_trunc('QUARTER', day)", TS, [dt.datetime(2024, 1, 1, tzinfo=UTC), None,
                                        dt.datetime(1999, 10, 1, tzinfo=UTC)]),
    ("trunc(day, 'MM')", pa.date32(), [dt.date(2024, 2, 1), None, dt.date(1999, 12, 1)]),
    ("trunc(ts, 'year')", pa.date32(), [dt.date(2020, 1, 1), None, dt.date(1969, 1, 1)]),
    ("trunc(day, 'week')", pa.date32(), [dt.date(2024, 2, 26), None, dt.date(1999, 12, 27)]),
    ("length(s)", pa.int32(), [11, None, 5]),
    ("char_length(s) > 6", pa.bool_(), [True, None, False]),
    # CASE: the first WHEN that holds (NULL does not), its THEN in the branches' common type
    ("CASE WHEN n > 1 THEN 'big' WHEN n < 0 THEN 'negative' ELSE 'small' END", pa.string(),
     ["big", "negative", "small"]),
    ("CASE n WHEN 7 THEN big WHEN -7 THEN 1.5 END", pa.decimal128(21, 1),
     [Decimal(2**40), Decimal("1.5"), None]),
    ("CASE WHEN x IS NULL THEN 0 ELSE x END", pa.float64(), [1.5, -2.25, 0.0]),
]


@pytest.mark.parametrize("expression, to, expected", CASES, ids=[c[0] for c in CASES])
def test_expression_values(expression: str, to: pa.DataType, expected: list[Any]) -> None:
    got = evaluate(GeneratedColumn("g", expression), ROWS, to, "t").to_pylist()
    assert got == expected


UNSUPPORTED = [
    ("CAST(ts AS STRING)", "CAST of TIMESTAMP to STRING"),
    ("CAST(x AS STRING)", "CAST of DOUBLE to STRING"),
    ("date_format(ts, 'EEE')", "pattern letter 'EEE'"),
    ("date_format(ts, 'yyyy-M-d')", "pattern letter 'M'"),
    ("substring(s, n, 2)", "not an INT literal"),
    ("upper(x)", "CAST of DOUBLE to STRING"),
    ("s + 1", "arithmetic of STRING and INT"),
    ("nope + 1", "column 'nope'"),
    ("dec / 3", "/ on decimals"),
    ("dec % 2", "% on decimals"),
    ("trunc(day, 'DAY')", "trunc to 'DAY'"),
    ("date_trunc('fortnight', ts)", "date_trunc to 'fortnight'"),
    ("length(n)", "length of INT"),
    ("CASE WHEN n THEN 1 END", "not a condition"),
    ("CASE WHEN n > 0 THEN s ELSE day END", "CASE of"),
]


@pytest.mark.parametrize("expression, why", UNSUPPORTED, ids=[c[0] for c in UNSUPPORTED])
def test_expression_beyond_this_writer_is_refused(expression: str, why: str) -> None:
    with pytest.raises(UnsupportedProtocolError) as e:
        evaluate(GeneratedColumn("g", expression), ROWS, pa.string(), "t")
    message = str(e.value)
    assert "generated column 'g'" in message and expression in message and why in message


@pytest.mark.parametrize("expression", [
    "md5(s)", "rand()", "CAST(n AS interval)", "n +", "year(ts", "", "substring(s)",
    "CASE WHEN n > 1 END", "CASE n THEN 1 END", "CASE WHEN n > 1 THEN 1", "CASE END"])
def test_expression_that_does_not_parse(expression: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_expression(expression)


def _spark_substring(s: str, pos: int, length: int | None) -> str:
    """Spark's ``UTF8String.substringSQL``, transcribed from its rule."""
    n = len(s)
    start = pos - 1 if pos > 0 else (n + pos if pos < 0 else 0)
    end = n if length is None else start + length
    start = max(start, 0)
    return "" if start >= end else s[start:max(end, 0)]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12), st.integers(-15, 15), st.one_of(st.none(), st.integers(-3, 15)))
def test_substring_follows_spark(s: str, pos: int, length: int | None) -> None:
    expr = f"substring(s, {pos})" if length is None else f"substring(s, {pos}, {length})"
    got = evaluate(GeneratedColumn("g", expr), pa.table({"s": [s]}), pa.string(), "t")
    assert got.to_pylist() == [_spark_substring(s, pos, length)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)), min_size=1, max_size=8),
       st.integers(-50, 50).filter(lambda d: d != 0))
def test_integer_remainder_and_division_follow_spark(values: list[int | None], d: int) -> None:
    data = pa.table({"n": pa.array(values, pa.int64())})
    rem = evaluate(GeneratedColumn("g", f"n % {d}"), data, pa.int64(), "t").to_pylist()
    div = evaluate(GeneratedColumn("g", f"n / {d}"), data, pa.float64(), "t").to_pylist()
    for v, r, q in zip(values, rem, div, strict=True):
        if v is None:
            assert r is None and q is None
        else:
            assert r == v - int(v / d) * d if abs(v) < 2**52 else r == abs(v) % abs(d) * (
                1 if v >= 0 else -1)
            assert q == v / d


# --------------------------------------------------------------------------- tables


def _schema() -> pa.Schema:
    return pa.schema([
        pa.field("id", pa.int64()),
        pa.field("ts", TS),
        pa.field("name", pa.string()),
        pa.field("day", pa.date32(), metadata={"delta.generationExpression": "CAST(ts AS DATE)"}),
        pa.field("yr", pa.int32(), metadata={"delta.generationExpression": "year(ts)"}),
        pa.field("tag", pa.string(), metadata={
            "delta.generationExpression": "concat(upper(substring(name, 1, 2)), '-', id)"}),
    ])


def _rows(n: int, offset: int = 0) -> pa.Table:
    return pa.table({
        "id": pa.array(range(offset, offset + n), pa.int64()),
        "ts": pa.array([dt.datetime(2023, 12, 31, 22, tzinfo=UTC) + dt.timedelta(hours=i)
                        for i in range(offset, offset + n)], TS),
        "name": [f"name{i}" for i in range(offset, offset + n)],
    })


def _sorted(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.select(sorted(t.column_names)).to_pylist(), key=lambda r: r["id"])


def test_create_records_the_feature(tmp_path: Path) -> None:
    legacy = dc.DeltaTable.create(str(tmp_path / "a"), _schema(), partition_by=["day"])
    assert legacy.protocol.min_writer_version == 4
    v7 = dc.DeltaTable.create(str(tmp_path / "b"), _schema(),
                              configuration={"delta.minWriterVersion": "7"})
    assert "generatedColumns" in (v7.protocol.writer_features or [])
    assert [g.name for g in generated_columns(v7.schema)] == ["day", "yr", "tag"]
    with pytest.raises(InvalidArgumentError, match=r"generated column 'g'.*'md5\(x\)'"):
        dc.DeltaTable.create(str(tmp_path / "c"), pa.schema([
            pa.field("x", pa.string()),
            pa.field("g", pa.string(), metadata={"delta.generationExpression": "md5(x)"})]))


def test_write_computes_missing_generated_columns(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = dc.DeltaTable.create(path, _schema(), partition_by=["day"])
    dc.write(table, _rows(4))
    dc.append(table, _rows(2, offset=4))
    rows = _sorted(dc.DeltaTable(path).to_arrow())
    assert [(r["day"], r["yr"], r["tag"]) for r in rows[:3]] == [
        (dt.date(2023, 12, 31), 2023, "NA-0"), (dt.date(2023, 12, 31), 2023, "NA-1"),
        (dt.date(2024, 1, 1), 2024, "NA-2")]
    assert rows == _sorted(deltalake.DeltaTable(path).to_pyarrow_table())
    # The partition values are the generated ones.
    assert sorted(p.name for p in Path(path).iterdir() if p.name.startswith("day=")) == [
        "day=2023-12-31", "day=2024-01-01"]


def test_supplied_values_are_verified(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = dc.DeltaTable.create(path, _schema(), partition_by=["day"])
    good = dc.DeltaTable(path)
    computed = conform_rows(WriteTarget.of(path, good.snapshot), _rows(3))
    dc.write(table, computed)  # every generated value supplied, and right
    bad = computed.set_column(computed.schema.get_field_index("yr"), "yr",
                              pa.array([2023, 1999, 2024], pa.int32()))
    version = dc.DeltaTable(path).version
    with pytest.raises(GeneratedColumnMismatchError) as e:
        dc.write(table, bad)
    message = str(e.value)
    assert path in message and "generated column 'yr'" in message and "year(ts)" in message
    assert "1999" in message
    assert dc.DeltaTable(path).version == version
    # A NULL where the expression gives NULL is equal (<=>); a NULL elsewhere is not.
    nulls = _rows(1).set_column(1, "ts", pa.array([None], TS))
    dc.write(table, nulls.append_column("yr", pa.array([None], pa.int32())))
    with pytest.raises(GeneratedColumnMismatchError, match="'tag'"):
        dc.write(table, _rows(1).append_column("tag", pa.array([None], pa.string())))


def test_unsupported_expression_refuses_the_write(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([
        pa.field("ts", TS),
        pa.field("s", pa.string(), metadata={"delta.generationExpression": "CAST(ts AS STRING)"}),
    ])
    with pytest.raises(InvalidArgumentError, match="generated column 's' has expression"):
        dc.DeltaTable.create(path, schema)  # refused up front
    # A table another engine created with it: every write is refused.
    monkeypatch.setattr("deltacommit.protocol.expressions.generated.check_expressions",
                        lambda schema, table: None)
    table = dc.DeltaTable.create(path, schema)
    monkeypatch.undo()
    data = pa.table({"ts": pa.array([dt.datetime(2020, 1, 1, tzinfo=UTC)], TS)})
    with pytest.raises(UnsupportedProtocolError) as e:
        dc.write(table, data)
    assert "generated column 's' (CAST(ts AS STRING))" in str(e.value)
    with pytest.raises(UnsupportedProtocolError, match="CAST of TIMESTAMP"):
        dc.write(table, data.append_column("s", pa.array(["2020-01-01 00:00:00"])))
    assert dc.DeltaTable(path).version == 0


def test_deltalake_written_rows_verify(tmp_path: Path) -> None:
    """deltalake computes generated columns with DataFusion; where its functions agree with
    Spark's, deltacommit accepts the values it wrote, and computes the same for new rows."""
    path = str(tmp_path / "t")
    exprs = {"d": ("CAST(ts AS DATE)", pa.date32()), "up": ("upper(s)", pa.string()),
             "lo": ("lower(s)", pa.string()), "sub": ("substring(s, 2, 3)", pa.string()),
             "ar": ("n * 2 + 1", pa.int64()), "co": ("coalesce(s, 'none')", pa.string()),
             "md": ("n % 3", pa.int64())}
    schema = pa.schema([pa.field("ts", TS), pa.field("s", pa.string()), pa.field("n", pa.int64()),
                        *(pa.field(k, t, metadata={"delta.generationExpression": e})
                          for k, (e, t) in exprs.items())])
    dc.DeltaTable.create(path, schema)
    data = pa.table({"ts": pa.array([dt.datetime(2020, 1, 2, 23, 30, tzinfo=UTC), None,
                                     dt.datetime(1969, 12, 31, 1, tzinfo=UTC)], TS),
                     "s": ["Hello", None, "ÄbcDé"], "n": [7, -7, None]})
    deltalake.write_deltalake(path, data, mode="append")
    theirs = dc.DeltaTable(path).to_arrow()
    dc.write(path, theirs)  # verified against deltacommit's evaluation
    dc.write(path, data)  # computed by deltacommit
    rows = dc.DeltaTable(path).to_arrow().to_pylist()
    assert len(rows) == 9
    key = sorted(rows, key=repr)
    assert key[0::3] == key[1::3] == key[2::3]


class _Overflow(Exception):
    pass


def _bits(expr: Any) -> int:
    if isinstance(expr, str):
        return 64
    if isinstance(expr, int):
        return 32
    return max(_bits(expr[1]), _bits(expr[2]))


def _py_value(expr: Any, row: dict[str, int | None]) -> tuple[int | None, int]:
    """Spark's integer arithmetic (ANSI) and its type: a literal is an INT, a column a
    BIGINT, an operation the wider of its operands; NULL propagates (the right operand is not
    evaluated after a NULL left one, so cannot overflow), overflow fails."""
    if isinstance(expr, str):
        return row[expr], 64
    if isinstance(expr, int):
        return expr, 32
    op, left, right = expr
    bits = _bits(expr)
    a = _py_value(left, row)[0]
    if a is None:
        return None, bits
    b = _py_value(right, row)[0]
    if b is None:
        return None, bits
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    if not -2**(bits - 1) <= value < 2**(bits - 1):
        raise _Overflow
    return value, bits


def _sql_value(expr: Any) -> str:
    if isinstance(expr, str):
        return expr
    if isinstance(expr, int):
        return f"({expr})"
    return f"({_sql_value(expr[1])} {expr[0]} {_sql_value(expr[2])})"


_arith = st.recursive(
    st.one_of(st.sampled_from(["a", "b"]), st.integers(-1000, 1000)),
    lambda inner: st.tuples(st.sampled_from(["+", "-", "*"]), inner, inner), max_leaves=8)
_longs = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.integers(-100, 100))


@settings(max_examples=500, deadline=None)
@given(_arith, st.lists(st.fixed_dictionaries({"a": _longs, "b": _longs}), min_size=1,
                        max_size=6))
def test_integer_arithmetic_follows_spark(expr: Any, rows: list[dict[str, int | None]]) -> None:
    data = pa.Table.from_pylist(rows, schema=pa.schema([("a", pa.int64()), ("b", pa.int64())]))
    column = GeneratedColumn("g", _sql_value(expr))
    try:
        expected = [_py_value(expr, r)[0] for r in rows]
    except _Overflow:
        with pytest.raises(dc.ExpressionValueError, match="integer overflow"):
            evaluate(column, data, pa.int64(), "t")
        return
    assert evaluate(column, data, pa.int64(), "t").to_pylist() == expected
