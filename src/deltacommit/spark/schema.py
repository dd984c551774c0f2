"""Spark SQL types <-> Arrow types, for the types Delta tables hold.  Pure: no I/O, no session.

The Arrow side is what ``deltacommit.protocol.schema.arrow`` turns into Delta's ``schemaString``, so a table
created from a DataFrame records exactly the Delta types Spark's own Delta writer would record
for it.  Each Spark type either maps to one Delta type that holds every value, or is refused
with the column's dotted path, rather than being written as something that changes its values.

Decisions worth knowing:

* ``timestamp`` is an instant: it becomes ``timestamp[us, tz=UTC]`` (Delta ``timestamp``) whatever
  the session time zone, and ``timestamp_ntz`` becomes ``timestamp[us]`` (Delta ``timestamp_ntz``,
  which needs the ``timestampNtz`` table feature; the table is created with it).
* ``char(n)`` and ``varchar(n)`` are refused.  Spark's DataFrames normally carry them as plain
  ``string`` already; when they survive (``spark.sql.preserveCharVarcharTypeInfo``), the length
  is a constraint that Delta-on-Spark enforces and deltacommit does not, so writing them as
  ``string`` would silently drop it.  Cast to ``string`` to write them unconstrained.
* Strings with a collation other than ``UTF8_BINARY`` are refused: Delta stores collations under
  a table feature deltacommit does not write, and a reader ignoring it would compare differently.
* Intervals, ``variant``, ``time``, geospatial types, ``void`` (NullType) and user-defined types
  are refused, naming the column and what to cast it to.
* Spark column metadata (comments and the like) is carried into Delta field metadata; values that
  are not strings are stored as their JSON text.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from deltacommit.errors import SchemaMismatchError
from deltacommit.protocol.schema.arrow import schema_from_json

MAX_DECIMAL_PRECISION = 38

SUPPORTED_SPARK_TYPES = (
    "boolean, tinyint, smallint, int, bigint, float, double, decimal(p,s), string (UTF8_BINARY), "
    "binary, date, timestamp, timestamp_ntz, array, map, struct"
)

_HINTS: dict[type, str] = {
    T.NullType: "a column of only NULLs has no type; cast it, e.g. F.lit(None).cast('string')",
    T.CalendarIntervalType: "Delta has no interval type; store e.g. the number of microseconds",
    T.DayTimeIntervalType: "Delta has no interval type; cast to bigint seconds or store micros",
    T.YearMonthIntervalType: "Delta has no interval type; cast to int months",
    T.VariantType: "the variantType table feature is not supported; store to_json(col) as string",
    T.CharType: "the length constraint would not be enforced; cast to string",
    T.VarcharType: "the length constraint would not be enforced; cast to string",
    T.TimeType: "Delta has no time-of-day type; cast to string or store micros since midnight",
}


def _unsupported(column: str, t: T.DataType) -> SchemaMismatchError:
    hint = next((h for k, h in _HINTS.items() if isinstance(t, k)), "")
    if isinstance(t, T.UserDefinedType):
        hint = f"convert the user-defined type to its SQL type {t.sqlType().simpleString()} first"
    name = getattr(t, "simpleString", lambda: repr(t))()
    return SchemaMismatchError(
        f"column {column!r} has Spark type {name}, which deltacommit cannot write to a Delta "
        f"table{': ' + hint if hint else ''}; supported Spark types: {SUPPORTED_SPARK_TYPES}")


def spark_to_arrow_type(t: T.DataType, column: str) -> pa.DataType:
    """The Arrow type a Spark column is written as; ``column`` names it in errors."""
    # CharType and VarcharType subclass StringType in some PySpark versions: test them first.
    if isinstance(t, T.CharType | T.VarcharType):
        raise _unsupported(column, t)
    if isinstance(t, T.BooleanType):
        return pa.bool_()
    if isinstance(t, T.ByteType):
        return pa.int8()
    if isinstance(t, T.ShortType):
        return pa.int16()
    if isinstance(t, T.IntegerType):
        return pa.int32()
    if isinstance(t, T.LongType):
        return pa.int64()
    if isinstance(t, T.FloatType):
        return pa.float32()
    if isinstance(t, T.DoubleType):
        return pa.float64()
    if isinstance(t, T.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, T.StringType):
        collation = getattr(t, "collation", "UTF8_BINARY")
        if collation not in ("UTF8_BINARY", None):
            raise SchemaMismatchError(
                f"column {column!r} has Spark type string collate {collation}: Delta stores "
                "collations under the collations table feature, which deltacommit does not "
                "write; use the default UTF8_BINARY collation (collate(col, 'UTF8_BINARY'))")
        return pa.string()
    if isinstance(t, T.BinaryType):
        return pa.binary()
    if isinstance(t, T.DateType):
        return pa.date32()
    if isinstance(t, T.TimestampNTZType):
        return pa.timestamp("us")
    if isinstance(t, T.TimestampType):
        return pa.timestamp("us", tz="UTC")
    if isinstance(t, T.ArrayType):
        element = spark_to_arrow_type(t.elementType, f"{column}.element")
        return pa.list_(pa.field("element", element, nullable=t.containsNull))
    if isinstance(t, T.MapType):
        key = spark_to_arrow_type(t.keyType, f"{column}.key")
        value = spark_to_arrow_type(t.valueType, f"{column}.value")
        map_type: pa.DataType = pa.map_(  # type: ignore[call-overload]
            pa.field("key", key, nullable=False),
            pa.field("value", value, nullable=t.valueContainsNull))
        return map_type
    if isinstance(t, T.StructType):
        return pa.struct([_field_to_arrow(f, column) for f in t.fields])
    raise _unsupported(column, t)


def _field_to_arrow(f: T.StructField, parent: str | None) -> pa.Field[Any]:
    path = f.name if parent is None else f"{parent}.{f.name}"
    metadata = {str(k): v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
                for k, v in (f.metadata or {}).items()}
    return pa.field(f.name, spark_to_arrow_type(f.dataType, path), nullable=f.nullable,
                    metadata=metadata or None)


def spark_to_arrow_schema(schema: T.StructType) -> pa.Schema:
    """The Arrow schema a DataFrame's rows are written with (and a new table is created with)."""
    return pa.schema([_field_to_arrow(f, None) for f in schema.fields])


def _nullable_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([_nullable_field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        nullable_map: pa.DataType = pa.map_(  # type: ignore[call-overload]
            t.key_field.with_type(_nullable_type(t.key_type)),
            _nullable_field(t.item_field))
        return nullable_map
    if pa.types.is_list(t):
        return pa.list_(_nullable_field(t.value_field))
    return t


def _nullable_field(f: pa.Field[Any]) -> pa.Field[Any]:
    return pa.field(f.name, _nullable_type(f.type), nullable=True, metadata=f.metadata)


def as_nullable(schema: pa.Schema) -> pa.Schema:
    """Every field, array element and map value nullable (map keys stay non-null), as Spark's
    ``StructType.asNullable``: the schema Delta on Spark gives a table created from a DataFrame."""
    return pa.schema([_nullable_field(f) for f in schema])


# --------------------------------------------------------------------------- Arrow -> Spark


def arrow_to_spark_type(t: pa.DataType, column: str) -> T.DataType:
    """The Spark type a Delta column (as deltacommit reads it into Arrow) is read as."""
    types = pa.types
    if types.is_boolean(t):
        return T.BooleanType()
    if types.is_int8(t):
        return T.ByteType()
    if types.is_int16(t) or types.is_uint8(t):
        return T.ShortType()
    if types.is_int32(t) or types.is_uint16(t):
        return T.IntegerType()
    if types.is_int64(t) or types.is_uint32(t):
        return T.LongType()
    if types.is_float32(t):
        return T.FloatType()
    if types.is_float64(t):
        return T.DoubleType()
    if types.is_decimal(t) and t.precision <= MAX_DECIMAL_PRECISION:
        return T.DecimalType(t.precision, t.scale)
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return T.StringType()
    if (types.is_binary(t) or types.is_large_binary(t) or types.is_binary_view(t)
            or types.is_fixed_size_binary(t)):
        return T.BinaryType()
    if types.is_date(t):
        return T.DateType()
    if types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        vf = t.value_field
        return T.ArrayType(arrow_to_spark_type(vf.type, f"{column}.element"), vf.nullable)
    if types.is_map(t):
        return T.MapType(arrow_to_spark_type(t.key_type, f"{column}.key"),
                         arrow_to_spark_type(t.item_type, f"{column}.value"),
                         t.item_field.nullable)
    if types.is_struct(t):
        return T.StructType([_field_to_spark(t.field(i), column) for i in range(t.num_fields)])
    raise SchemaMismatchError(
        f"column {column!r} has Arrow type {t}, which has no Spark SQL type; supported Spark "
        f"types: {SUPPORTED_SPARK_TYPES}")


def _field_to_spark(f: pa.Field[Any], parent: str | None) -> T.StructField:
    path = f.name if parent is None else f"{parent}.{f.name}"
    metadata: dict[str, Any] = {}
    for k, v in (f.metadata or {}).items():
        try:
            metadata[k.decode("utf-8")] = v.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return T.StructField(f.name, arrow_to_spark_type(f.type, path), f.nullable, metadata or None)


def arrow_to_spark_schema(schema: pa.Schema) -> T.StructType:
    """The DataFrame schema of a table read through ``deltacommit.spark.read``."""
    return T.StructType([_field_to_spark(f, None) for f in schema])


def delta_to_spark_schema(schema_string: str) -> T.StructType:
    """The Spark schema of a Delta ``schemaString`` (as deltacommit reads the table)."""

    return arrow_to_spark_schema(schema_from_json(schema_string))
