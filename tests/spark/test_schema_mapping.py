"""Spark <-> Arrow <-> Delta type mapping, without a Spark session (pure)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from deltacommit.errors import SchemaMismatchError
from deltacommit.protocol.schema.arrow import schema_from_json, schema_to_json
from deltacommit.spark import (
    arrow_to_spark_schema,
    as_nullable,
    delta_to_spark_schema,
    spark_to_arrow_schema,
    spark_to_arrow_type,
)

EVERY_TYPE = T.StructType([
    T.StructField("b", T.BooleanType()),
    T.StructField("i8", T.ByteType()),
    T.StructField("i16", T.ShortType()),
    T.StructField("i32", T.IntegerType(), False),
    T.StructField("i64", T.LongType()),
    T.StructField("f32", T.FloatType()),
    T.StructField("f64", T.DoubleType()),
    T.StructField("dec", T.DecimalType(38, 10)),
    T.StructField("dec_small", T.DecimalType(5, 2)),
    T.StructField("s", T.StringType(), True, {"comment": "free text"}),
    T.StructField("bin", T.BinaryType()),
    T.StructField("d", T.DateType()),
    T.StructField("ts", T.TimestampType()),
    T.StructField("ntz", T.TimestampNTZType()),
    T.StructField("arr", T.ArrayType(T.IntegerType(), True)),
    T.StructField("arr_nn", T.ArrayType(T.StringType(), False)),
    T.StructField("m", T.MapType(T.StringType(), T.LongType(), True)),
    T.StructField("m_struct", T.MapType(T.IntegerType(), T.StructType([
        T.StructField("x", T.DoubleType())]), False)),
    T.StructField("st", T.StructType([
        T.StructField("a", T.IntegerType(), False),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("inner", T.StructType([T.StructField("when", T.TimestampType())])),
    ])),
])

DELTA_TYPES = {
    "b": "boolean", "i8": "byte", "i16": "short", "i32": "integer", "i64": "long", "f32": "float",
    "f64": "double", "dec": "decimal(38,10)", "dec_small": "decimal(5,2)", "s": "string",
    "bin": "binary", "d": "date", "ts": "timestamp", "ntz": "timestamp_ntz",
}


def test_every_supported_type_maps_to_the_delta_type_spark_records() -> None:
    delta = json.loads(schema_to_json(spark_to_arrow_schema(EVERY_TYPE)))
    fields = {f["name"]: f for f in delta["fields"]}
    for name, expected in DELTA_TYPES.items():
        assert fields[name]["type"] == expected, name
    assert fields["i32"]["nullable"] is False
    assert fields["s"]["metadata"] == {"comment": "free text"}
    assert fields["arr"]["type"] == {"type": "array", "elementType": "integer", "containsNull": True}
    assert fields["arr_nn"]["type"]["containsNull"] is False
    assert fields["m"]["type"] == {"type": "map", "keyType": "string", "valueType": "long",
                                   "valueContainsNull": True}
    assert fields["m_struct"]["type"]["valueContainsNull"] is False
    st = fields["st"]["type"]
    assert [f["name"] for f in st["fields"]] == ["a", "tags", "inner"]
    assert st["fields"][2]["type"]["fields"][0]["type"] == "timestamp"


def test_spark_schema_survives_arrow_and_delta_round_trips() -> None:
    arrow = spark_to_arrow_schema(EVERY_TYPE)
    assert arrow_to_spark_schema(arrow) == EVERY_TYPE
    assert delta_to_spark_schema(schema_to_json(arrow)) == EVERY_TYPE
    assert schema_from_json(schema_to_json(arrow)).equals(arrow)


def test_as_nullable_relaxes_every_level_but_map_keys() -> None:
    relaxed = as_nullable(spark_to_arrow_schema(EVERY_TYPE))
    delta = json.loads(schema_to_json(relaxed))
    text = json.dumps(delta)
    assert '"nullable": false' not in text
    assert '"containsNull": false' not in text and '"valueContainsNull": false' not in text
    assert relaxed.field("s").metadata == {b"comment": b"free text"}
    assert not relaxed.field("m").type.key_field.nullable


def test_timestamps_are_instants_in_utc_and_ntz_has_no_zone() -> None:
    assert spark_to_arrow_type(T.TimestampType(), "c") == pa.timestamp("us", tz="UTC")
    assert spark_to_arrow_type(T.TimestampNTZType(), "c") == pa.timestamp("us")


@pytest.mark.parametrize(("spark_type", "needle"), [
    (T.DayTimeIntervalType(), "interval day to second"),
    (T.YearMonthIntervalType(), "interval year to month"),
    (T.CalendarIntervalType(), "interval"),
    (T.VariantType(), "variant"),
    (T.NullType(), "void"),
    (T.CharType(3), "char(3)"),
    (T.VarcharType(10), "varchar(10)"),
    (T.StringType("UTF8_LCASE"), "UTF8_LCASE"),
    (T.TimeType(), "time"),
])
def test_unsupported_types_are_refused_naming_the_column(spark_type: T.DataType, needle: str) -> None:
    schema = T.StructType([T.StructField("ok", T.LongType()), T.StructField("outer", T.StructType([
        T.StructField("items", T.ArrayType(spark_type))]))])
    with pytest.raises(SchemaMismatchError) as err:
        spark_to_arrow_schema(schema)
    message = str(err.value)
    assert "'outer.items.element'" in message
    assert needle in message


def test_unsupported_map_key_is_named() -> None:
    with pytest.raises(SchemaMismatchError, match=r"'m\.key'"):
        spark_to_arrow_type(T.MapType(T.DayTimeIntervalType(), T.LongType()), "m")
