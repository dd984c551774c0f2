"""Arrow schemas <-> Delta's ``schemaString`` (Spark's StructType JSON).  Pure: no I/O.

The Delta log stores a table's schema as Spark's JSON serialisation of a StructType
(PROTOCOL.md, "Schema Serialization Format").  Every reader of the table, Spark included,
trusts that string, so the mapping here is deliberately narrow: each Arrow type either has one
Delta type that holds every value of it, or it is refused with the column's name, instead of
being squeezed into a type that loses values.

Decisions worth knowing:

* Unsigned integers widen to the next signed type (uint8 -> short, uint16 -> integer,
  uint32 -> long), so every value survives.  delta-rs maps them to the signed type of the same
  width, where large values wrap around; uint64 has no lossless Delta type and is refused.
* Arrow's string/large_string/string_view are all Delta ``string``; binary variants are all
  ``binary``; list/large_list/fixed_size_list are all ``array``.  Reading gives the plain
  (32-bit offset) Arrow type.
* A timestamp with a time zone (any zone, any unit) is Delta ``timestamp`` and reads back as
  ``timestamp[us, tz=UTC]``; a timestamp without zone is ``timestamp_ntz`` and reads back as
  ``timestamp[us]``.  Delta timestamps have microsecond precision.
* Arrow field metadata becomes Delta field metadata with string values, as delta-rs writes it.
  The few Delta-defined keys whose values are numbers or booleans (column mapping ids,
  identity columns, type changes) keep their JSON type both ways so a schemaString read from
  Spark is written back unchanged.  Metadata that is not UTF-8 cannot be stored in JSON and is
  dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import pyarrow as pa

from deltacommit.errors import SchemaMismatchError, UnsupportedTypeError
from deltacommit.protocol.json_values import loads

DeltaType: TypeAlias = str | dict[str, Any]

MAX_DECIMAL_PRECISION = 38

SUPPORTED_ARROW_TYPES = (
    "bool, int8, int16, int32, int64, uint8, uint16, uint32, float32, float64, "
    f"decimal (precision <= {MAX_DECIMAL_PRECISION}, scale 0..precision), string, large_string, "
    "string_view, binary, large_binary, binary_view, fixed_size_binary, date32, date64, "
    "timestamp (any unit, with or without time zone), list, large_list, fixed_size_list, map, struct"
)

SUPPORTED_DELTA_TYPES = (
    "boolean, byte, short, integer, long, float, double, decimal(p,s), string, binary, date, "
    "timestamp, timestamp_ntz, void, array, map, struct"
)

_PRIMITIVE_TO_ARROW: dict[str, pa.DataType] = {
    # Spark's NullType, read as Arrow's null type (a column only ever null; Spark leaves it
    # out of its data files).  New columns of it are refused: it holds no values to type.
    "void": pa.null(),
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}

_DECIMAL_RE = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")

# Delta-defined field metadata keys whose values are JSON numbers, booleans or arrays rather
# than strings.  Everything else is written as a string, exactly as delta-rs does.
_JSON_VALUED_METADATA_KEYS = frozenset({
    "delta.columnMapping.id",
    "delta.identity.start",
    "delta.identity.step",
    "delta.identity.highWaterMark",
    "delta.identity.allowExplicitInsert",
    "delta.typeChanges",
})


# --------------------------------------------------------------------------- Arrow -> Delta


def _unsupported(column: str, what: str) -> UnsupportedTypeError:
    return UnsupportedTypeError(
        f"column {column!r} has Arrow type {what}, which Delta tables cannot store without losing "
        f"values; supported Arrow types: {SUPPORTED_ARROW_TYPES}")


def arrow_to_delta_type(t: pa.DataType, column: str) -> DeltaType:
    """The Delta type (a name, or a dict for nested types) that stores every value of ``t``.

    ``column`` is the column's dotted path, used only in the error for an unsupported type.
    """
    types = pa.types
    if types.is_boolean(t):
        return "boolean"
    if types.is_signed_integer(t):
        return {8: "byte", 16: "short", 32: "integer", 64: "long"}[t.bit_width]
    if types.is_unsigned_integer(t):
        widened = {8: "short", 16: "integer", 32: "long"}.get(t.bit_width)
        if widened is None:
            raise _unsupported(column, f"{t} (no signed Delta type holds every {t} value; cast to "
                                       "int64 or decimal(20,0) if the values allow)")
        return widened
    if types.is_float32(t):
        return "float"
    if types.is_float64(t):
        return "double"
    if types.is_decimal(t):
        if not 0 < t.precision <= MAX_DECIMAL_PRECISION or not 0 <= t.scale <= t.precision:
            raise _unsupported(column, f"{t} (Delta decimals have precision 1..{MAX_DECIMAL_PRECISION} "
                                       "and scale 0..precision)")
        return f"decimal({t.precision},{t.scale})"
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return "string"
    if (types.is_binary(t) or types.is_large_binary(t) or types.is_binary_view(t)
            or types.is_fixed_size_binary(t)):
        return "binary"
    if types.is_date(t):
        return "date"
    if types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        vf = t.value_field
        return {"type": "array",
                "elementType": arrow_to_delta_type(vf.type, f"{column}.element"),
                "containsNull": bool(vf.nullable)}
    if types.is_map(t):
        return {"type": "map",
                "keyType": arrow_to_delta_type(t.key_type, f"{column}.key"),
                "valueType": arrow_to_delta_type(t.item_type, f"{column}.value"),
                "valueContainsNull": bool(t.item_field.nullable)}
    if types.is_struct(t):
        return {"type": "struct", "fields": _fields_to_delta(
            (t.field(i) for i in range(t.num_fields)), column)}
    if types.is_dictionary(t):
        raise _unsupported(column, f"{t} (decode it first, e.g. with .cast({t.value_type}))")
    raise _unsupported(column, str(t))


def _metadata_to_delta(md: Mapping[bytes, bytes] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw_key, raw_value in (md or {}).items():
        try:
            key = raw_key.decode("utf-8")
            value = raw_value.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if key in _JSON_VALUED_METADATA_KEYS:
            try:
                out[key] = loads(value)
                continue
            except ValueError:
                pass
        out[key] = value
    return out


def _fields_to_delta(fields: Iterable[pa.Field[Any]], parent: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for f in fields:
        path = f.name if parent is None else f"{parent}.{f.name}"
        folded = f.name.lower()
        if folded in seen:
            where = "the schema" if parent is None else f"struct {parent!r}"
            raise SchemaMismatchError(
                f"{where} has columns {seen[folded]!r} and {f.name!r}; Delta column names must be "
                "unique regardless of case")
        seen[folded] = f.name
        out.append({"name": f.name, "type": arrow_to_delta_type(f.type, path),
                    "nullable": bool(f.nullable), "metadata": _metadata_to_delta(f.metadata)})
    return out


def schema_to_delta_dict(schema: pa.Schema) -> dict[str, Any]:
    """The Delta StructType of ``schema`` as a JSON-ready dict."""
    return {"type": "struct", "fields": _fields_to_delta(list(schema), None)}


def schema_to_json(schema: pa.Schema) -> str:
    """The ``schemaString`` for ``metaData``: compact JSON, key order as Spark writes it."""
    return json.dumps(schema_to_delta_dict(schema), separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- Delta -> Arrow


def _bad(column: str, detail: str) -> SchemaMismatchError:
    return SchemaMismatchError(f"schemaString: column {column!r}: {detail}")


#: The table features that allow a type deltacommit does not implement: a protocol naming one
#: is accepted where no column has the type (deltalake 1.6.6 names variantType in every
#: protocol it writes), so a column of it is refused here, naming the feature.
_TYPE_FEATURES = {"variant": "the variantType (or variantType-preview) table feature"}


def _unsupported_delta(column: str, delta_type: object) -> UnsupportedTypeError:
    feature = _TYPE_FEATURES.get(delta_type) if isinstance(delta_type, str) else None
    return UnsupportedTypeError(
        f"schemaString: column {column!r}: Delta type {delta_type!r}"
        f"{f' ({feature})' if feature else ''} is not supported by deltacommit "
        f"(supported: {SUPPORTED_DELTA_TYPES})")


def _get(d: Mapping[str, Any], key: str, column: str, kind: type | tuple[type, ...]) -> Any:
    if key not in d:
        raise _bad(column, f"{d.get('type', 'field')} lacks {key!r}")
    v = d[key]
    if not isinstance(v, kind):
        raise _bad(column, f"{key!r} has unexpected value {v!r}")
    return v


def delta_to_arrow_type(t: DeltaType, column: str) -> pa.DataType:
    """The Arrow type deltacommit reads a Delta type as."""
    if isinstance(t, str):
        name = t.strip()
        prim = _PRIMITIVE_TO_ARROW.get(name.lower())
        if prim is not None:
            return prim
        m = _DECIMAL_RE.match(name.lower())
        if m:
            p, s = int(m.group(1)), int(m.group(2))
            if not 0 < p <= MAX_DECIMAL_PRECISION or not 0 <= s <= p:
                raise _bad(column, f"type {name} is out of range (precision 1..{MAX_DECIMAL_PRECISION}, "
                                   "scale 0..precision)")
            return pa.decimal128(p, s)
        if name.lower() == "decimal":
            return pa.decimal128(10, 0)  # Spark's DecimalType.USER_DEFAULT
        raise _unsupported_delta(column, name)
    if not isinstance(t, dict):
        raise _bad(column, f"type must be a string or an object, got {t!r}")
    kind = t.get("type")
    if kind == "array":
        element = delta_to_arrow_type(_get(t, "elementType", column, (str, dict)), f"{column}.element")
        contains_null = _get(t, "containsNull", column, bool)
        return pa.list_(pa.field("element", element, nullable=contains_null))
    if kind == "map":
        key = delta_to_arrow_type(_get(t, "keyType", column, (str, dict)), f"{column}.key")
        value = delta_to_arrow_type(_get(t, "valueType", column, (str, dict)), f"{column}.value")
        value_null = _get(t, "valueContainsNull", column, bool)
        map_type: pa.DataType = pa.map_(pa.field("key", key, nullable=False),  # type: ignore[call-overload]
                                        pa.field("value", value, nullable=value_null))
        return map_type
    if kind == "struct":
        return pa.struct(_fields_from_delta(_get(t, "fields", column, list), column))
    raise _unsupported_delta(column, kind)


def _metadata_from_delta(md: Any, column: str) -> dict[str, str] | None:
    if md is None:
        return None
    if not isinstance(md, dict):
        raise _bad(column, f"metadata must be an object, got {md!r}")
    if not md:
        return None
    return {str(k): v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for k, v in md.items()}


def _fields_from_delta(fields: list[Any], parent: str | None) -> list[pa.Field[Any]]:
    out: list[pa.Field[Any]] = []
    for f in fields:
        where = parent or "<schema>"
        if not isinstance(f, dict):
            raise _bad(where, f"struct field must be an object, got {f!r}")
        name = _get(f, "name", where, str)
        path = name if parent is None else f"{parent}.{name}"
        arrow_type = delta_to_arrow_type(_get(f, "type", path, (str, dict)), path)
        nullable = f.get("nullable", True)
        if not isinstance(nullable, bool):
            raise _bad(path, f"'nullable' has unexpected value {nullable!r}")
        out.append(pa.field(name, arrow_type, nullable=nullable,
                            metadata=_metadata_from_delta(f.get("metadata"), path)))
    return out


def delta_schema_dict(schema_string: str) -> dict[str, Any]:
    """Parse a ``schemaString`` into its JSON object, checking that it is a struct."""
    try:
        d = loads(schema_string)
    except (TypeError, ValueError) as e:
        raise SchemaMismatchError(f"schemaString is not valid JSON: {e}") from None
    if not isinstance(d, dict) or d.get("type") != "struct" or not isinstance(d.get("fields"), list):
        raise SchemaMismatchError(
            f"schemaString must be a JSON struct type {{\"type\":\"struct\",\"fields\":[...]}}, "
            f"got {schema_string[:200]!r}")
    return d


def schema_from_json(s: str) -> pa.Schema:
    """The Arrow schema of a ``schemaString``; SchemaMismatchError if malformed or unsupported."""
    return pa.schema(_fields_from_delta(delta_schema_dict(s)["fields"], None))


def needs_timestamp_ntz(schema: pa.Schema) -> bool:
    """Whether the schema has a timestamp without time zone anywhere, which needs the
    ``timestampNtz`` table feature (reader 3 / writer 7)."""
    def walk(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return t.tz is None
        if pa.types.is_map(t):
            return walk(t.key_type) or walk(t.item_type)
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            return walk(t.value_type)
        if pa.types.is_struct(t):
            return any(walk(t.field(i).type) for i in range(t.num_fields))
        return False

    return any(walk(f.type) for f in schema)


# --------------------------------------------------------------------------- compatibility


def _normalized(t: DeltaType) -> Any:
    """A Delta type with nullability and metadata removed and struct fields keyed by name, so
    two types compare equal exactly when data of one can be written as the other."""
    if isinstance(t, str):
        return t
    kind = t["type"]
    if kind == "array":
        return ("array", _normalized(t["elementType"]))
    if kind == "map":
        return ("map", _normalized(t["keyType"]), _normalized(t["valueType"]))
    return ("struct", frozenset((f["name"], _normalized(f["type"])) for f in t["fields"]))


def delta_type_str(t: DeltaType) -> str:
    """A short human-readable form of a Delta type for error messages."""
    if isinstance(t, str):
        return t
    kind = t["type"]
    if kind == "array":
        return f"array<{delta_type_str(t['elementType'])}>"
    if kind == "map":
        return f"map<{delta_type_str(t['keyType'])},{delta_type_str(t['valueType'])}>"
    return "struct<" + ",".join(f"{f['name']}:{delta_type_str(f['type'])}" for f in t["fields"]) + ">"


def _delta_or_error(f: pa.Field[Any]) -> tuple[DeltaType | None, str]:
    if pa.types.is_null(f.type):
        return "void", "void"  # an existing table's void column; new ones are refused
    try:
        dt = arrow_to_delta_type(f.type, f.name)
        return dt, delta_type_str(dt)
    except SchemaMismatchError:
        return None, f"{f.type} (unsupported)"


def check_write_compatible(table_schema: pa.Schema, data_schema: pa.Schema, table: str) -> None:
    """Raise SchemaMismatchError unless data of ``data_schema`` can be written as the table's.

    Columns match by exact name in any order; types must be the same Delta type (so string and
    large_string match, as do timestamps of any unit or zone).  Nullability is not compared:
    whether a non-nullable column receives nulls depends on the data, which the writer checks.
    """
    table_fields = {f.name: f for f in table_schema}
    data_fields = {f.name: f for f in data_schema}
    if len(data_fields) != len(data_schema):
        dups = sorted({n for n in data_schema.names if data_schema.names.count(n) > 1})
        raise SchemaMismatchError(f"data for table {table} has duplicate columns {dups}")
    missing = [n for n in table_schema.names if n not in data_fields]
    extra = [n for n in data_schema.names if n not in table_fields]
    mismatched: list[str] = []
    for name in table_schema.names:
        if name not in data_fields:
            continue
        tt, tt_str = _delta_or_error(table_fields[name])
        dt, dt_str = _delta_or_error(data_fields[name])
        if tt is None or dt is None or _normalized(tt) != _normalized(dt):
            mismatched.append(f"{name}: table has {tt_str}, data has {dt_str}")
    if not (missing or extra or mismatched):
        return
    parts: list[str] = []
    if missing:
        parts.append("missing columns: " + ", ".join(
            f"{n} ({_delta_or_error(table_fields[n])[1]})" for n in missing))
    if extra:
        parts.append("extra columns: " + ", ".join(
            f"{n} ({_delta_or_error(data_fields[n])[1]})" for n in extra))
    if mismatched:
        parts.append("mismatched types: " + "; ".join(mismatched))
    hints = [f"{e!r} vs {m!r}" for e in extra for m in missing if e.lower() == m.lower()]
    if hints:
        parts.append("column names are case sensitive: " + ", ".join(hints))
    raise SchemaMismatchError(f"data does not match the schema of table {table}: " + "; ".join(parts)
                              + f". Table schema: {_schema_str(table_schema)}")


def _schema_str(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {_delta_or_error(f)[1]}" for f in schema)


def cast_to_table_schema(data: pa.Table, table_schema: pa.Schema) -> pa.Table:
    """Reorder and cast ``data`` to exactly ``table_schema`` for writing.

    Casts are safe: a value that the table type cannot hold (a nanosecond timestamp with a
    non-zero sub-microsecond part, say) raises SchemaMismatchError naming the column rather than
    being silently truncated.  Call check_write_compatible first for a full report of schema
    differences.
    """
    missing = [n for n in table_schema.names if n not in data.column_names]
    if missing:
        raise SchemaMismatchError(f"data lacks columns {missing} of the table schema "
                                  f"{_schema_str(table_schema)}")
    arrays: list[pa.ChunkedArray[Any]] = []
    for f in table_schema:
        col = data.column(f.name)
        if not f.nullable and col.null_count:
            raise SchemaMismatchError(
                f"column {f.name!r} is not nullable but the data has {col.null_count} null value(s)")
        if col.type != f.type:
            try:
                col = col.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatchError(
                    f"column {f.name!r}: cannot write {col.type} values as {f.type}: {e}"
                    + (" (truncate timestamps to microseconds first)"
                       if pa.types.is_timestamp(f.type) else "")) from None
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=table_schema)
