"""Spark's rules that the expression evaluators once broke, each on a real table: the value
Spark computes, or the error Spark raises (ANSI mode, Spark 4's default), with nothing
committed; never a value Spark would not compute and never a raw exception."""

from __future__ import annotations

import datetime as dt
import math
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.protocol.expressions.generated import GeneratedColumn, evaluate, parse_expression
from deltacommit.protocol.expressions.predicates import parse_predicate

GEN = b"delta.generationExpression"


def _generated_table(tmp_path: Path, source: pa.Field, expression: str, to: pa.DataType,
                     ) -> str:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, pa.schema([source, pa.field("g", to, metadata={GEN: expression})]))
    return uri


def _values(expression: str, column: pa.Array, to: pa.DataType) -> list[Any]:
    data = pa.table({"x": column})
    return evaluate(GeneratedColumn("g", expression), data, to, "t").to_pylist()


# --------------------------------------------------------------------------- generated columns


def test_a_cast_that_overflows_fails_the_write_naming_table_column_expression_and_value(
        tmp_path: Path) -> None:
    """CAST(1e10 AS INT) wrapped to -2147483648 and was written; Spark (ANSI) fails it."""
    uri = _generated_table(tmp_path, pa.field("x", pa.float64()), "CAST(x AS INT)", pa.int32())
    dc.write(uri, pa.table({"x": [1.9, -2.9]}))
    with pytest.raises(dc.ExpressionValueError) as e:
        dc.write(uri, pa.table({"x": [1.0, 1e10]}))
    message = str(e.value)
    for part in (uri.split("/")[-1], "generated column 'g'", "CAST(x AS INT)", "10000000000.0",
                 "overflows", "Nothing was written"):
        assert part in message, (part, message)
    table = dc.DeltaTable(uri)
    assert table.version == 1
    assert table.to_arrow().column("g").to_pylist() == [1, -2]  # truncated toward zero


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf, 2147483648.0, -2147483649.0])
def test_a_double_beyond_int_fails(x: float) -> None:
    with pytest.raises(dc.ExpressionValueError, match="overflows"):
        _values("CAST(x AS INT)", pa.array([x]), pa.int32())


def test_a_double_at_two_to_the_63_becomes_bigint_max_as_java_saturates() -> None:
    assert _values("CAST(x AS BIGINT)", pa.array([2.0**63, -2.0**63]), pa.int64()) == \
        [2**63 - 1, -2**63]
    with pytest.raises(dc.ExpressionValueError):
        _values("CAST(x AS BIGINT)", pa.array([2.0**64]), pa.int64())


@pytest.mark.parametrize(("expression", "column", "expected"), [
    # A DOUBLE converts through its shortest decimal text (Double.toString), then HALF_UP.
    ("CAST(x AS DECIMAL(10, 2))", pa.array([0.125, 2.675, -0.125, 1.005, 0.135]),
     [Decimal("0.13"), Decimal("2.68"), Decimal("-0.13"), Decimal("1.01"), Decimal("0.14")]),
    ("CAST(x AS DECIMAL(2, 0))", pa.array([2.5, -2.5, 0.5]),
     [Decimal("3"), Decimal("-3"), Decimal("1")]),
    ("CAST(x AS DECIMAL(5, 2))", pa.array([Decimal("1.005"), Decimal("-2.345")], pa.decimal128(6, 3)),
     [Decimal("1.01"), Decimal("-2.35")]),
    ("CAST(x AS DECIMAL(5, 2))", pa.array(["2.345", " 1.005 ", "1e-2"]),
     [Decimal("2.35"), Decimal("1.01"), Decimal("0.01")]),
    ("CAST(2.5 AS DECIMAL(2, 0)) + x", pa.array([0], pa.int32()), [Decimal("3")]),
    # NaN and infinity give NULL: Spark catches Decimal's NumberFormatException.
    ("CAST(x AS DECIMAL(5, 2))", pa.array([math.nan, math.inf]), [None, None]),
])
def test_decimal_casts_round_half_up(expression: str, column: pa.Array, expected: list[Any]
                                     ) -> None:
    """Arrow rounded half to even (0.125 to 0.12); Spark rounds HALF_UP (0.13)."""
    got = _values(expression, column, pa.decimal128(10, 2))
    assert got == expected


def test_a_decimal_cast_that_overflows_fails() -> None:
    with pytest.raises(dc.ExpressionValueError, match=r"needs more than 3 digits"):
        _values("CAST(x AS DECIMAL(3, 1))", pa.array([99.96]), pa.decimal128(3, 1))


@pytest.mark.parametrize(("expression", "t", "value"), [
    ("x % -1", pa.int32(), -2**31), ("x % -1", pa.int64(), -2**63),
    ("x % 3", pa.int32(), -7), ("x % -3", pa.int64(), 7)])
def test_remainder_takes_the_sign_of_the_dividend_and_min_mod_minus_one_is_zero(
        expression: str, t: pa.DataType, value: int) -> None:
    divisor = int(expression.split("%")[1])
    expected = abs(value) % abs(divisor) * (1 if value >= 0 else -1)
    assert _values(expression, pa.array([value], t), t) == [expected]


@pytest.mark.parametrize(("expression", "t", "value"), [
    ("x + 1", pa.int32(), 2**31 - 1), ("x - 1", pa.int32(), -2**31), ("x * 2", pa.int64(), 2**62),
    ("-x", pa.int32(), -2**31), ("abs(x)", pa.int64(), -2**63), ("x + x", pa.int8(), 100),
    ("x * x", pa.int16(), 200), ("x + 2147483647", pa.int32(), 1),
    ("x - 9223372036854775807 - 2", pa.int64(), 0)])
def test_integer_overflow_fails_in_every_operator(expression: str, t: pa.DataType,
                                                  value: int) -> None:
    """Arrow's kernels wrap; Spark (ANSI) fails at the width of the operation's type."""
    with pytest.raises(dc.ExpressionValueError, match="integer overflow"):
        _values(expression, pa.array([value], t), pa.int64())


def test_signed_literals_are_typed_as_spark_types_them() -> None:
    """-2147483648 is one INT literal; -(-2147483648) negates an INT and overflows."""
    assert _values("x + -2147483648", pa.array([0], pa.int32()), pa.int64()) == [-2**31]
    with pytest.raises(dc.ExpressionValueError, match="integer overflow"):
        _values("x + -(-2147483648)", pa.array([0], pa.int32()), pa.int64())
    assert _values("x + -9223372036854775808", pa.array([0], pa.int64()), pa.int64()) == [-2**63]


@pytest.mark.parametrize("expression", ["x / 0", "x / 0e0", "x % 0", "CAST(x AS DOUBLE) / -0e0",
                                        "CAST(x AS DOUBLE) % 0e0"])
def test_division_by_zero_fails_even_for_doubles(expression: str) -> None:
    with pytest.raises(dc.ExpressionValueError, match="division by zero"):
        _values(expression, pa.array([1], pa.int32()), pa.float64())
    # A NULL dividend gives NULL first, as Spark checks it before the divisor.
    assert _values(expression, pa.array([None], pa.int32()), pa.float64()) == [None]


def test_operands_spark_does_not_evaluate_do_not_fail() -> None:
    """Spark evaluates row by row: AND, OR, coalesce and IN stop once the answer is known, an
    operation stops at a NULL operand, a division at a NULL divisor."""
    x = pa.array([0, 5, None], pa.int32())
    assert _values("x = 0 OR 10 / x > 1", x, pa.bool_()) == [True, True, None]
    assert _values("x <> 0 AND 10 / x > 1", x, pa.bool_()) == [False, True, None]
    assert _values("coalesce(x, 1 / 0)", pa.array([1], pa.int32()), pa.float64()) == [1.0]
    assert _values("x IN (0, 1 / x)", pa.array([0], pa.int32()), pa.bool_()) == [True]
    data = pa.table({"a": pa.array([None], pa.int64()), "x": pa.array([2**62], pa.int64())})
    assert evaluate(GeneratedColumn("g", "a + x * 4"), data, pa.int64(), "t").to_pylist() == [None]
    assert evaluate(GeneratedColumn("g", "(x * 4) / a"), data, pa.float64(),
                    "t").to_pylist() == [None]


def test_a_list_of_literals_is_read_as_dates_only_for_the_rows_that_reach_it() -> None:
    """``d IN ('2024-01-01', 'garbage')`` reads its items as dates (which fails on 'garbage')
    only for the rows Spark evaluates it for: not where an AND before it is FALSE, nor where
    a CASE takes another branch; a row that reaches it still fails (deltacommit refuses text
    it cannot read as a date)."""
    d = pa.array([None, dt.date(2024, 1, 1)], pa.date32())
    assert _values("x IS NOT NULL AND x < DATE '2000-01-01' AND x IN ('2024-01-01', 'garbage')",
                   d, pa.bool_()) == [False, False]
    assert _values("CASE WHEN x < DATE '2000-01-01' THEN x IN ('garbage') ELSE FALSE END",
                   d, pa.bool_()) == [False, False]
    with pytest.raises((dc.ExpressionValueError, dc.UnsupportedProtocolError), match="garbage"):
        _values("CASE WHEN x IS NOT NULL THEN x IN ('garbage') ELSE FALSE END", d, pa.bool_())


def test_null_beside_null_compares_as_spark_compares_it() -> None:
    """Two NULL literals have no type to compare in: Spark gives NULL for ``=``, ``<`` and
    ``IN``, TRUE for ``<=>``; neither is refused."""
    x = pa.array([1, None], pa.int32())
    assert _values("NULL = NULL", x, pa.bool_()) == [None, None]
    assert _values("NULL < NULL", x, pa.bool_()) == [None, None]
    assert _values("NULL IN (NULL)", x, pa.bool_()) == [None, None]
    assert _values("NULL IN (1, NULL)", x, pa.bool_()) == [None, None]
    assert _values("NULL <=> NULL", x, pa.bool_()) == [True, True]


def test_case_evaluates_a_branch_only_for_the_rows_that_reach_it() -> None:
    """CASE evaluates a WHEN only where no earlier WHEN holds and a THEN only where its WHEN is
    the first to hold, as Spark does row by row; a failing branch fails only its rows."""
    x = pa.array([0, 5, None], pa.int32())
    assert _values("CASE WHEN x = 0 THEN 0 ELSE 10 / x END", x, pa.float64()) == \
        [0.0, 2.0, None]
    assert _values("CASE WHEN x = 0 THEN -1 WHEN 10 / x > 1 THEN 1 END", x, pa.int32()) == \
        [-1, 1, None]
    assert _values("CASE x WHEN 0 THEN 0 WHEN 5 THEN 100 / x END", x, pa.float64()) == \
        [0.0, 20.0, None]
    with pytest.raises(dc.ExpressionValueError, match=r"division by zero.*|.*'x': 0"):
        _values("CASE WHEN x > 0 THEN 0 ELSE 10 / x END", x, pa.float64())


def test_coalesce_evaluates_an_argument_only_where_every_earlier_one_is_null() -> None:
    """The third argument of coalesce(a, b, c) is evaluated where a and b are both NULL, not
    merely where b is."""
    data = pa.table({"a": pa.array([1, None], pa.int64()), "b": pa.array([None, 2], pa.int64())})
    assert evaluate(GeneratedColumn("g", "coalesce(a, b, 1 / 0)"), data, pa.float64(),
                    "t").to_pylist() == [1.0, 2.0]
    with pytest.raises(dc.ExpressionValueError, match="division by zero"):
        evaluate(GeneratedColumn("g", "coalesce(a, b, 1 / 0)"),
                 pa.table({"a": pa.array([None], pa.int64()), "b": pa.array([None], pa.int64())}),
                 pa.float64(), "t")


@pytest.mark.parametrize(("expression", "text", "expected"), [
    ("upper(x)", "straße", "STRASSE"),
    ("upper(x)", "ﬁx", "FIX"),
    ("upper(x)", "\u0149", "\u02bcN"),  # ŉ
    ("upper(x)", "ǆ", "Ǆ"),
    ("lower(x)", "ΣΑΣ ΟΔΟΣ", "σας οδος"),  # final sigma
    ("lower(x)", "İ", "i̇"),
    ("upper(x)", "\u0390", "\u0399\u0308\u0301"),
    ("length(upper(x))", "ß", 2),
    ("lower(x)", "ABC", "abc"),
])
def test_case_mapping_is_unicode_full_case_mapping_as_spark_4_maps_it(
        expression: str, text: str, expected: Any) -> None:
    """Arrow maps one code point to one (upper('straße') = 'STRAẞE'); Spark 4 maps through ICU's
    root locale (spark.sql.icu.caseMappings.enabled), Unicode's full case mapping."""
    to = pa.int32() if expression.startswith("length") else pa.string()
    assert _values(expression, pa.array([text]), to) == [expected]


@pytest.mark.parametrize("text", ["ƛ", "ɤ", "\U000e0080"])
def test_case_mapping_refuses_characters_a_newer_unicode_may_map(text: str) -> None:
    """U+019B and U+0264 have no uppercase before Unicode 16 (ICU 76, in Spark 4, maps them);
    U+E0080 is not assigned: such text is refused rather than written unmapped."""
    with pytest.raises(dc.UnsupportedProtocolError, match="Unicode"):
        _values("upper(x)", pa.array([text]), pa.string())


def test_an_expression_deltacommit_cannot_evaluate_is_refused_when_the_table_is_created(
        tmp_path: Path) -> None:
    with pytest.raises(dc.InvalidArgumentError, match=r"generated column 'g'.*CAST of DOUBLE"):
        _generated_table(tmp_path, pa.field("x", pa.float64()), "upper(x)", pa.string())
    with pytest.raises(dc.InvalidArgumentError, match=r"generated column 'g'.*/ on decimals"):
        _generated_table(tmp_path, pa.field("x", pa.decimal128(5, 2)), "x / 3",
                         pa.decimal128(10, 2))


def test_sql_comments_are_refused_not_read_as_operators() -> None:
    """Spark reads ``x --5`` as ``x`` and a comment; read as x - (-5) it would be x + 5."""
    with pytest.raises(dc.InvalidArgumentError, match="comments are not supported"):
        parse_expression("x --5")
    with pytest.raises(dc.InvalidArgumentError, match="comments are not supported"):
        parse_predicate("x = 1 /* and more */")


# --------------------------------------------------------------------------- NaN


@pytest.fixture
def nan_rows() -> pa.Table:
    return pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()),
                     "x": pa.array([1.0, math.nan, math.inf, None, -0.0])})


@pytest.mark.parametrize(("check", "violators"), [
    ("NOT (x > 100)", {2, 3}),         # NaN is above every value, infinity included
    ("x != x", {1, 2, 3, 5}),          # NaN = NaN; only NULL ... and the non-NaN rows
    ("x = x", set()),
    ("x < 1e308", {2, 3}),
    ("x IN (1.0, 0.0)", {2, 3}),       # -0.0 is 0.0
    ("x <= 'NaN'", set()),
    ("x * 2 > 100", {1, 5}),           # through the expression evaluator: NaN * 2 is NaN
])
def test_nan_in_check_constraints_is_spark_s_nan(tmp_path: Path, nan_rows: pa.Table, check: str,
                                                 violators: set[int]) -> None:
    """A NaN row passed NOT (x > 100) and x != x: IEEE comparisons answer FALSE for NaN,
    where Spark orders NaN above everything and equal to itself."""
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, nan_rows.schema, configuration={"delta.constraints.c": check})
    rows = nan_rows.filter(pa.compute.is_valid(nan_rows.column("x")))  # NULL violates any
    bad = [r for r in rows.to_pylist() if r["id"] in violators]
    good = rows.filter(pa.compute.invert(pa.compute.is_in(
        rows.column("id"), value_set=pa.array(sorted(violators), pa.int64()))))
    dc.write(uri, good)
    for row in bad:
        with pytest.raises(dc.CheckConstraintViolationError, match="'c'"):
            dc.write(uri, pa.Table.from_pylist([row], schema=nan_rows.schema))
    assert dc.DeltaTable(uri).to_arrow().num_rows == good.num_rows


def test_a_delete_removes_nan_rows_where_spark_does(tmp_path: Path, nan_rows: pa.Table) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, nan_rows.schema,
                         configuration={"delta.enableDeletionVectors": "true"})
    dc.write(uri, nan_rows)
    dc.DeltaTable(uri).delete("x > 100")
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == [1, 4, 5]
    dc.DeltaTable(uri).delete("x = 0")  # -0.0
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == [1, 4]


def test_nan_and_float_partitions_are_pruned_as_spark_compares_them(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("p", pa.float64()), ("q", pa.float32())])
    dc.DeltaTable.create(uri, schema, partition_by=["p", "q"])
    dc.write(uri, pa.table({"id": [1, 2, 3], "p": [1.0, math.nan, math.inf],
                            "q": pa.array([1.1, 2.0, 3.0], pa.float32())}, schema=schema))
    table = dc.DeltaTable(uri)
    assert sorted(table.to_arrow(partition_filters=[("p", ">", 100)]).column("id").to_pylist()) \
        == [2, 3]
    assert table.to_arrow(partition_filters=[("p", "=", math.nan)]).column("id").to_pylist() \
        == [2]
    # A FLOAT partition value is a FLOAT: 1.1f is 1.100000023841858 as a DOUBLE, which is not
    # the DOUBLE 1.1, and a string literal takes the column's type.
    assert sorted(table.to_arrow(partition_filters=[("q", "=", 1.1)]).column("id").to_pylist()) \
        == []
    assert parse_predicate("q = '1.1'").evaluate({"q": "1.1"}, {"q": pa.float32()})
    assert parse_predicate("q > 1.1").evaluate({"q": "1.1"}, {"q": pa.float32()})


def test_a_float_column_compares_as_a_double_with_a_number(tmp_path: Path) -> None:
    """ANSI mode widens FLOAT beside any other number: f <= 1.1 is FALSE for f = 1.1f."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("f", pa.float32())])
    dc.DeltaTable.create(uri, schema, configuration={"delta.constraints.c": "f <= 1.1"})
    with pytest.raises(dc.CheckConstraintViolationError):
        dc.write(uri, pa.table({"f": pa.array([1.1], pa.float32())}))
    dc.write(uri, pa.table({"f": pa.array([1.0], pa.float32())}))


# --------------------------------------------------------------------------- NULL


def test_null_violates_a_check_constraint_as_delta_rules(tmp_path: Path) -> None:
    """Unlike SQL's CHECK, Delta fails a row whose expression is NULL: CheckDeltaInvariant
    throws when ``result == null || result == false`` (delta-io/delta,
    spark/src/main/scala/org/apache/spark/sql/delta/constraints/CheckDeltaInvariant.scala),
    and InvariantEnforcementSuite "CHECK constraint is enforced if somehow created" expects
    ``valueA < valueB`` to be violated by (100, NULL)."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("valueA", pa.int64()), ("valueB", pa.int64())])
    dc.DeltaTable.create(uri, schema, configuration={"delta.constraints.mychk": "valueA < valueB"})
    dc.write(uri, pa.table({"valueA": [50], "valueB": [100]}, schema=schema))
    for row in ({"valueA": 100, "valueB": 50}, {"valueA": 100, "valueB": None}):
        with pytest.raises(dc.CheckConstraintViolationError, match="mychk"):
            dc.write(uri, pa.Table.from_pylist([row], schema=schema))
    assert dc.DeltaTable(uri).version == 1


# --------------------------------------------------------------------------- literals


def test_a_wide_literal_in_a_constraint_does_not_break_later_writes(tmp_path: Path) -> None:
    """``x < 99999999999999999999`` was kept in the table's configuration and every later
    write raised OverflowError converting it to a BIGINT; Spark compares it as a DECIMAL."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("x", pa.int64()), ("i", pa.int32()), ("m", pa.decimal128(10, 2))])
    dc.DeltaTable.create(uri, schema, configuration={
        "delta.constraints.wide": "x < 99999999999999999999",
        "delta.constraints.half": "i < 2.5",
        "delta.constraints.fine": "m <= 10.005"})
    dc.write(uri, pa.table({"x": [2**63 - 1], "i": [2], "m": [Decimal("10.00")]}, schema=schema))
    for row, name in (({"x": 1, "i": 3, "m": Decimal("1")}, "half"),
                      ({"x": 1, "i": 1, "m": Decimal("10.01")}, "fine")):
        with pytest.raises(dc.CheckConstraintViolationError, match=f"'{name}'"):
            dc.write(uri, pa.Table.from_pylist([row], schema=schema))
    table = dc.DeltaTable(uri)
    table.set_properties({"delta.constraints.positive": "x < -99999999999999999999 OR x > 0"})
    with pytest.raises(dc.CheckConstraintViolationError, match="'positive'"):
        dc.write(uri, pa.table({"x": [-5], "i": [1], "m": [Decimal(1)]}, schema=schema))
    assert dc.DeltaTable(uri).to_arrow().num_rows == 1


def test_a_delete_compares_wide_and_fractional_literals_exactly(tmp_path: Path) -> None:
    """Row filters converted the literal to the column's type: 99999999999999999999 raised
    OverflowError, 2.5 could not be compared with an INT at all."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("x", pa.int64()), ("i", pa.int32()), ("m", pa.decimal128(4, 2))])
    dc.DeltaTable.create(uri, schema, configuration={"delta.enableDeletionVectors": "true"})
    dc.write(uri, pa.table({"x": [1, 2, 3, 2**63 - 1], "i": [1, 2, 3, 4],
                            "m": [Decimal("1.00"), Decimal("2.50"), Decimal("2.51"),
                                  Decimal("99.99")]}, schema=schema))
    table = dc.DeltaTable(uri)
    table.delete("i < 2.5 AND x < 99999999999999999999")
    assert sorted(dc.DeltaTable(uri).to_arrow().column("i").to_pylist()) == [3, 4]
    dc.DeltaTable(uri).delete("m IN (2.505, 2.51, 100) OR m > 99.985")
    assert dc.DeltaTable(uri).to_arrow().column("i").to_pylist() == []
    dc.DeltaTable(uri).delete("x > 99999999999999999999")  # nothing is
    assert dc.DeltaTable(uri).to_arrow().num_rows == 0


@pytest.mark.parametrize("literal", ["1" + "0" * 40, "1." + "0" * 38 + "1", "9" * 39])
def test_a_decimal_literal_beyond_38_digits_is_refused_where_it_is_written(
        tmp_path: Path, literal: str) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("x", pa.int64()), ("p", pa.string())])
    with pytest.raises(dc.InvalidArgumentError, match="DECIMAL holds at most 38"):
        parse_predicate(f"x < {literal}")
    with pytest.raises(dc.InvalidArgumentError, match="DECIMAL holds at most 38"):
        parse_expression(f"x + {literal}")
    with pytest.raises(dc.InvalidArgumentError, match="CHECK constraint"):
        dc.DeltaTable.create(uri, schema, configuration={"delta.constraints.c": f"x < {literal}"})
    with pytest.raises(dc.InvalidArgumentError, match="generated column 'g'"):
        dc.DeltaTable.create(uri, schema.append(pa.field("g", pa.float64(), metadata={
            GEN: f"x * {literal}"})))
    dc.DeltaTable.create(uri, schema, partition_by=["p"])
    dc.write(uri, pa.table({"x": [1], "p": ["a"]}))
    with pytest.raises(dc.InvalidArgumentError, match="DECIMAL holds at most 38"):
        dc.DeltaTable(uri).delete(f"x < {literal}")
    with pytest.raises(dc.InvalidArgumentError, match="DECIMAL holds at most 38"):
        dc.write(uri, pa.table({"x": [2], "p": ["a"]}), mode="overwrite",
                 predicate=f"p < {literal}")
    assert dc.DeltaTable(uri).to_arrow().column("x").to_pylist() == [1]


@pytest.mark.parametrize("literal", ["1" + "0" * 5000, "0." + "0" * 5000 + "1",
                                     "1e" + "9" * 5000, "9" * 5000 + ".5"])
@pytest.mark.parametrize("parse", [parse_expression, parse_predicate])
def test_a_literal_of_thousands_of_digits_is_a_short_clear_error(literal: str,
                                                                  parse: Any) -> None:
    """int() refuses more than 4,300 digits with a raw ValueError; the literal is refused
    first, and the message quotes only its ends."""
    with pytest.raises(dc.InvalidArgumentError, match=r"DECIMAL holds at most 38|range of a DOUBLE"
                       ) as e:
        parse(f"x < {literal}")
    assert len(str(e.value)) < 600


def test_a_partition_filter_of_a_huge_integer_is_a_clear_error() -> None:
    from deltacommit.protocol.expressions.predicates import from_partition_filters

    with pytest.raises(dc.InvalidArgumentError, match="out of range"):
        from_partition_filters([("x", "<", 10**5000)])
    assert "1E+900" in from_partition_filters([("x", "<", 10**900)]).to_sql()


# --------------------------------------------------------------------------- nesting


def test_a_long_operator_chain_is_evaluated_without_recursion(tmp_path: Path) -> None:
    """An operator chain is a tree as deep as it is long; the evaluator walks it without
    recursion, so 3,000 terms (ten times what a recursive walk reached) neither overflow the
    stack nor are refused."""
    chain = " + ".join(["x"] * 3_000)
    assert _values(chain, pa.array([1, None], pa.int64()), pa.int64()) == [3_000, None]
    uri = str(tmp_path / "t")
    schema = pa.schema([("x", pa.int64())])
    dc.DeltaTable.create(uri, schema, configuration={
        "delta.constraints.c": " OR ".join(f"x = {i}" for i in range(2_000)),
        "delta.constraints.d": " + ".join(["x"] * 2_000) + " < 20000"})
    dc.write(uri, pa.table({"x": [3]}))
    with pytest.raises(dc.CheckConstraintViolationError, match="'d'"):
        dc.write(uri, pa.table({"x": [10]}))


@pytest.mark.parametrize("parse", [parse_expression, parse_predicate])
def test_deep_nesting_is_a_clear_error_even_from_a_deep_stack(parse: Any) -> None:
    text = "(" * 5_000 + "x = 1" + ")" * 5_000
    with pytest.raises(dc.InvalidArgumentError, match="nests deeper than 100 levels"):
        parse(text)
    nested = "(" * 100 + "x = 1" + ")" * 100  # within the bound

    def deep(n: int) -> Any:
        return parse(nested + " " * (n % 2)) if n == 0 else deep(n - 1)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(600)
    try:
        with pytest.raises(dc.InvalidArgumentError, match="nests too deeply"):
            deep(300)
    finally:
        sys.setrecursionlimit(limit)


def test_timestamps_in_text_are_read_in_utc_with_or_without_a_zone() -> None:
    got = _values("CAST(x AS TIMESTAMP)",
                  pa.array(["2024-01-05", "2024-01-05 10:00", "2024-01-05T10:00:00+01:00",
                            "2024-01-05 10:00:00.5Z"]), pa.timestamp("us", tz="UTC"))
    utc = dt.UTC
    assert got == [dt.datetime(2024, 1, 5, tzinfo=utc), dt.datetime(2024, 1, 5, 10, tzinfo=utc),
                   dt.datetime(2024, 1, 5, 9, tzinfo=utc),
                   dt.datetime(2024, 1, 5, 10, 0, 0, 500000, tzinfo=utc)]
    with pytest.raises(dc.ExpressionValueError, match="not a valid TIMESTAMP"):
        _values("CAST(x AS TIMESTAMP)", pa.array(["2024-02-30"]), pa.timestamp("us", tz="UTC"))
    with pytest.raises(dc.UnsupportedProtocolError, match="deltacommit reads"):
        _values("CAST(x AS DATE)", pa.array(["2024-1-5"]), pa.date32())


def test_dates_and_times_are_read_in_utc_whatever_the_process_time_zone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluator reads a TIMESTAMP in UTC, the session time zone it follows, also in a
    process whose local zone changes its clocks that day (US daylight saving, 2024-03-10)."""
    import time

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        ts = pa.array([dt.datetime(2024, 3, 10, 6, 30, tzinfo=dt.UTC),
                       dt.datetime(2024, 3, 10, 23, 59, tzinfo=dt.UTC)],
                      pa.timestamp("us", tz="UTC"))
        assert _values("CAST(x AS DATE)", ts, pa.date32()) == [dt.date(2024, 3, 10)] * 2
        assert _values("hour(x)", ts, pa.int32()) == [6, 23]
        assert _values("date_trunc('DAY', x)", ts, pa.timestamp("us", tz="UTC")) == \
            [dt.datetime(2024, 3, 10, tzinfo=dt.UTC)] * 2
        assert _values("x < TIMESTAMP '2024-03-10 07:00:00'", ts, pa.bool_()) == [True, False]
        assert _values("date_format(x, 'yyyy-MM-dd HH:mm')", ts, pa.string()) == \
            ["2024-03-10 06:30", "2024-03-10 23:59"]
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize("parse", [parse_expression, parse_predicate])
def test_date_and_timestamp_literals_are_read_once_in_spark_s_forms(parse: Any) -> None:
    """Both parsers read DATE and TIMESTAMP literals with one function: yyyy-[m]m-[d]d as
    Spark does, and not the forms Python's fromisoformat adds (20240105, 2024-W01-1)."""
    parse("d = DATE '2024-1-5' AND t = TIMESTAMP '2024-01-05 10:00:00.1234567+01:00'")
    for text in ("20240105", "2024-W01-1", "2024-02-30"):
        with pytest.raises(dc.InvalidArgumentError, match="invalid date literal"):
            parse(f"d = DATE '{text}'")
    with pytest.raises(dc.InvalidArgumentError, match="invalid timestamp literal"):
        parse("t = TIMESTAMP '20240105T1000'")
    assert parse_predicate("d = DATE '2024-1-5'").evaluate({"d": "2024-01-05"},
                                                           {"d": pa.date32()})
