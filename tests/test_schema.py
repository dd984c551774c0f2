"""Arrow <-> Delta schemaString: every type, nesting, Spark/delta-rs schema strings, compatibility."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

from deltacommit.errors import SchemaMismatchError
from deltacommit.protocol.schema.arrow import (
    arrow_to_delta_type,
    cast_to_table_schema,
    check_write_compatible,
    delta_schema_dict,
    delta_to_arrow_type,
    needs_timestamp_ntz,
    schema_from_json,
    schema_to_json,
)

# (arrow type written, Delta type, arrow type read back)
PRIMITIVES: list[tuple[pa.DataType, str, pa.DataType]] = [
    (pa.bool_(), "boolean", pa.bool_()),
    (pa.int8(), "byte", pa.int8()),
    (pa.int16(), "short", pa.int16()),
    (pa.int32(), "integer", pa.int32()),
    (pa.int64(), "long", pa.int64()),
    (pa.uint8(), "short", pa.int16()),
    (pa.uint16(), "integer", pa.int32()),
    (pa.uint32(), "long", pa.int64()),
    (pa.float32(), "float", pa.float32()),
    (pa.float64(), "double", pa.float64()),
    (pa.decimal128(10, 2), "decimal(10,2)", pa.decimal128(10, 2)),
    (pa.decimal128(38, 0), "decimal(38,0)", pa.decimal128(38, 0)),
    (pa.decimal128(1, 1), "decimal(1,1)", pa.decimal128(1, 1)),
    (pa.decimal256(20, 5), "decimal(20,5)", pa.decimal128(20, 5)),
    (pa.string(), "string", pa.string()),
    (pa.large_string(), "string", pa.string()),
    (pa.string_view(), "string", pa.string()),
    (pa.binary(), "binary", pa.binary()),
    (pa.large_binary(), "binary", pa.binary()),
    (pa.binary(4), "binary", pa.binary()),
    (pa.date32(), "date", pa.date32()),
    (pa.date64(), "date", pa.date32()),
    (pa.timestamp("us", tz="UTC"), "timestamp", pa.timestamp("us", tz="UTC")),
    (pa.timestamp("ns", tz="UTC"), "timestamp", pa.timestamp("us", tz="UTC")),
    (pa.timestamp("s", tz="Europe/Berlin"), "timestamp", pa.timestamp("us", tz="UTC")),
    (pa.timestamp("ms", tz="+01:00"), "timestamp", pa.timestamp("us", tz="UTC")),
    (pa.timestamp("us"), "timestamp_ntz", pa.timestamp("us")),
    (pa.timestamp("ns"), "timestamp_ntz", pa.timestamp("us")),
]


@pytest.mark.parametrize(("arrow", "delta", "back"), PRIMITIVES, ids=lambda x: str(x))
def test_primitive_types(arrow: pa.DataType, delta: str, back: pa.DataType) -> None:
    assert arrow_to_delta_type(arrow, "c") == delta
    assert delta_to_arrow_type(delta, "c") == back
    # reading back and writing again is stable
    assert arrow_to_delta_type(back, "c") == delta


def test_nested_types() -> None:
    t = pa.list_(pa.field("item", pa.int32(), nullable=False))
    assert arrow_to_delta_type(t, "a") == {"type": "array", "elementType": "integer", "containsNull": False}
    assert arrow_to_delta_type(pa.large_list(pa.string()), "a") == {
        "type": "array", "elementType": "string", "containsNull": True}
    assert arrow_to_delta_type(pa.list_(pa.int64(), 3), "a") == {
        "type": "array", "elementType": "long", "containsNull": True}
    m = pa.map_(pa.large_string(), pa.field("v", pa.float64(), nullable=False))
    assert arrow_to_delta_type(m, "m") == {
        "type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": False}
    s = pa.struct([pa.field("x", pa.int32(), nullable=False, metadata={"comment": "x coordinate"}),
                   pa.field("y", pa.string())])
    assert arrow_to_delta_type(s, "s") == {"type": "struct", "fields": [
        {"name": "x", "type": "integer", "nullable": False, "metadata": {"comment": "x coordinate"}},
        {"name": "y", "type": "string", "nullable": True, "metadata": {}}]}
    back = delta_to_arrow_type(arrow_to_delta_type(m, "m"), "m")
    assert back == pa.map_(pa.string(), pa.field("value", pa.float64(), nullable=False))


def _deep_schema() -> pa.Schema:
    point = pa.struct([pa.field("x", pa.float64(), nullable=False), pa.field("y", pa.float64())])
    deep = pa.struct([
        pa.field("level2", pa.struct([
            pa.field("level3", pa.list_(pa.struct([
                pa.field("m", pa.map_(pa.string(), pa.list_(point))),
                pa.field("ts", pa.timestamp("us")),
            ]))),
        ])),
        pa.field("arr_of_arr", pa.list_(pa.field("element", pa.list_(pa.int64()), nullable=False))),
    ])
    fields = [pa.field(f"c_{i}", arrow, nullable=(i % 2 == 0)) for i, (arrow, _, _) in enumerate(PRIMITIVES)]
    fields += [
        pa.field("deep", deep, metadata={"comment": "nested all the way"}),
        pa.field("map_struct_key", pa.map_(pa.struct([pa.field("k", pa.int32())]), pa.string())),
        pa.field("ünïcödé name", pa.string(), nullable=False),
        pa.field("with space,and;punct", pa.int32()),
    ]
    return pa.schema(fields)


def _read_form(t: pa.DataType) -> pa.DataType:
    """What a written type reads back as."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _read_form(f.type), f.nullable, f.metadata) for f in t])
    if pa.types.is_map(t):
        return pa.map_(pa.field("key", _read_form(t.key_type), nullable=False),
                       pa.field("value", _read_form(t.item_type), t.item_field.nullable))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(pa.field("element", _read_form(t.value_type), t.value_field.nullable))
    return delta_to_arrow_type(arrow_to_delta_type(t, "x"), "x")


def test_round_trip_every_type_deeply_nested() -> None:
    schema = _deep_schema()
    text = schema_to_json(schema)
    back = schema_from_json(text)
    expected = pa.schema([pa.field(f.name, _read_form(f.type), f.nullable, f.metadata) for f in schema])
    assert back.equals(expected, check_metadata=True)
    # Delta -> Arrow -> Delta is the identity on the schemaString
    assert schema_to_json(back) == text
    assert needs_timestamp_ntz(schema)


def test_schema_string_is_compact_and_ordered_like_spark() -> None:
    s = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    assert schema_to_json(s) == (
        '{"type":"struct","fields":[{"name":"id","type":"long","nullable":false,"metadata":{}},'
        '{"name":"name","type":"string","nullable":true,"metadata":{}}]}')


SPARK_SCHEMA = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {
        "delta.identity.start": 1, "delta.identity.step": 1, "delta.identity.allowExplicitInsert": False,
        "comment": "surrogate key"}},
    {"name": "amount", "type": "decimal(12, 4)", "nullable": True, "metadata": {}},
    {"name": "name", "type": "string", "nullable": True, "metadata": {
        "__CHAR_VARCHAR_TYPE_STRING": "varchar(10)"}},
    {"name": "score", "type": "integer", "nullable": False, "metadata": {
        "delta.invariants": "{\"expression\":{\"expression\":\"score > 0\"}}"}},
    {"name": "tags", "type": {"type": "array", "elementType": "string", "containsNull": True},
     "nullable": True, "metadata": {}},
    {"name": "props", "type": {"type": "map", "keyType": "string", "valueType": {
        "type": "struct", "fields": [
            {"name": "v", "type": "double", "nullable": True, "metadata": {}},
            {"name": "when", "type": "timestamp", "nullable": True, "metadata": {}}]},
        "valueContainsNull": True}, "nullable": True, "metadata": {}},
    {"name": "day", "type": "date", "nullable": True, "metadata": {}},
    {"name": "raw", "type": "binary", "nullable": True, "metadata": {}},
    {"name": "flag", "type": "boolean", "nullable": True, "metadata": {}},
    {"name": "b", "type": "byte", "nullable": True, "metadata": {}},
    {"name": "s", "type": "short", "nullable": True, "metadata": {}},
    {"name": "f", "type": "float", "nullable": True, "metadata": {}},
    {"name": "local", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
]})


def test_parses_spark_schema_string() -> None:
    s = schema_from_json(SPARK_SCHEMA)
    assert s.names == ["id", "amount", "name", "score", "tags", "props", "day", "raw", "flag", "b", "s",
                       "f", "local"]
    assert s.field("amount").type == pa.decimal128(12, 4)
    assert s.field("score").nullable is False
    assert s.field("tags").type == pa.list_(pa.field("element", pa.string()))
    props = s.field("props").type
    assert pa.types.is_map(props)
    assert props.item_type == pa.struct([("v", pa.float64()), ("when", pa.timestamp("us", tz="UTC"))])
    assert s.field("local").type == pa.timestamp("us")
    md = s.field("id").metadata
    assert md[b"delta.identity.start"] == b"1"
    assert md[b"delta.identity.allowExplicitInsert"] == b"false"
    # Writing it back reproduces Spark's JSON types for Delta-defined keys, and keeps
    # JSON-in-a-string values as strings.
    again = delta_schema_dict(schema_to_json(s))
    original = delta_schema_dict(SPARK_SCHEMA)
    original["fields"][1]["type"] = "decimal(12,4)"  # we write Spark's canonical spelling
    assert again == original


DELTA_RS_SCHEMA = (
    '{"type":"struct","fields":[{"name":"value","type":"integer","nullable":true,"metadata":{}},'
    '{"name":"ts","type":"timestamp","nullable":true,"metadata":{}},'
    '{"name":"m","type":{"type":"map","keyType":"string","valueType":"long","valueContainsNull":true},'
    '"nullable":true,"metadata":{}}]}')


def test_parses_delta_rs_schema_string() -> None:
    s = schema_from_json(DELTA_RS_SCHEMA)
    assert s.types == [pa.int32(), pa.timestamp("us", tz="UTC"), pa.map_(pa.string(), pa.int64())]
    assert schema_to_json(s) == DELTA_RS_SCHEMA


def test_missing_nullable_and_metadata_default() -> None:
    s = schema_from_json('{"type":"struct","fields":[{"name":"a","type":"long"}]}')
    assert s.field("a").nullable and s.field("a").metadata is None


@pytest.mark.parametrize("arrow", [
    pa.uint64(), pa.time32("s"), pa.time64("us"), pa.duration("s"), pa.null(), pa.float16(),
    pa.dictionary(pa.int32(), pa.string()), pa.month_day_nano_interval(), pa.decimal128(5, -1),
    pa.decimal256(40, 2), pa.dense_union([pa.field("a", pa.int32())]),
])
def test_unsupported_arrow_types_name_the_column(arrow: pa.DataType) -> None:
    with pytest.raises(SchemaMismatchError) as ei:
        schema_to_json(pa.schema([pa.field("ok", pa.int32()),
                                  pa.field("outer", pa.struct([pa.field("bad", arrow)]))]))
    msg = str(ei.value)
    assert "'outer.bad'" in msg and str(arrow) in msg and "supported Arrow types" in msg


def test_unsupported_inside_list_and_map() -> None:
    with pytest.raises(SchemaMismatchError, match=r"'l\.element'.*uint64"):
        arrow_to_delta_type(pa.list_(pa.uint64()), "l")
    with pytest.raises(SchemaMismatchError, match=r"'m\.value'.*time64"):
        arrow_to_delta_type(pa.map_(pa.string(), pa.time64("us")), "m")


def test_duplicate_names_differing_in_case_are_refused() -> None:
    with pytest.raises(SchemaMismatchError, match="unique regardless of case"):
        schema_to_json(pa.schema([("Id", pa.int32()), ("id", pa.int64())]))


@pytest.mark.parametrize(("text", "needle"), [
    ("not json", "not valid JSON"),
    ('{"type":"array"}', "must be a JSON struct"),
    ('{"type":"struct","fields":[{"name":"v","type":"variant","nullable":true}]}', "'variant'"),
    ('{"type":"struct","fields":[{"name":"v","type":"decimal(39,0)"}]}', "out of range"),
    ('{"type":"struct","fields":[{"type":"long"}]}', "lacks 'name'"),
    ('{"type":"struct","fields":[{"name":"a","type":{"type":"array","elementType":"long"}}]}',
     "lacks 'containsNull'"),
    ('{"type":"struct","fields":[{"name":"a","type":{"type":"udt"}}]}', "'udt'"),
    ('{"type":"struct","fields":[{"name":"a","type":"long","nullable":"yes"}]}', "nullable"),
])
def test_malformed_schema_strings(text: str, needle: str) -> None:
    with pytest.raises(SchemaMismatchError, match=needle):
        schema_from_json(text)


def test_needs_timestamp_ntz() -> None:
    assert not needs_timestamp_ntz(pa.schema([("a", pa.timestamp("us", tz="UTC"))]))
    assert needs_timestamp_ntz(pa.schema([("a", pa.list_(pa.timestamp("ms")))]))
    assert needs_timestamp_ntz(pa.schema([("a", pa.map_(pa.timestamp("s"), pa.int32()))]))
    assert needs_timestamp_ntz(pa.schema([("a", pa.struct([("b", pa.timestamp("ns"))]))]))
    assert not needs_timestamp_ntz(pa.schema([("a", pa.int32())]))


# --------------------------------------------------------------------------- write compatibility


TABLE = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    pa.field("l", pa.list_(pa.field("element", pa.string()))),
])


def test_compatible_after_normalisation() -> None:
    data = pa.schema([
        pa.field("s", pa.struct([("b", pa.large_string()), ("a", pa.int32())])),
        pa.field("ts", pa.timestamp("ns", tz="America/New_York")),
        pa.field("name", pa.large_string(), nullable=False),
        pa.field("id", pa.int64()),  # nullability is the writer's business
        pa.field("l", pa.large_list(pa.field("item", pa.large_string(), nullable=False))),
    ])
    check_write_compatible(TABLE, data, "file:///t")


def test_incompatible_lists_everything() -> None:
    data = pa.schema([
        pa.field("ID", pa.int64()),
        pa.field("name", pa.int64()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("s", pa.struct([("a", pa.int64()), ("b", pa.string())])),
        pa.field("l", pa.list_(pa.string())),
        pa.field("extra", pa.uint64()),
    ])
    with pytest.raises(SchemaMismatchError) as ei:
        check_write_compatible(TABLE, data, "s3://bucket/t")
    msg = str(ei.value)
    assert "s3://bucket/t" in msg
    assert "missing columns: id (long)" in msg
    assert "extra columns: ID (long), extra (uint64 (unsupported))" in msg
    assert "name: table has string, data has long" in msg
    assert "ts: table has timestamp, data has timestamp_ntz" in msg
    assert "s: table has struct<a:integer,b:string>, data has struct<a:long,b:string>" in msg
    assert "'ID' vs 'id'" in msg
    assert "l:" not in msg


def test_cast_to_table_schema_reorders_and_casts() -> None:
    data = pa.table({
        "l": pa.array([["x"], None], pa.large_list(pa.large_string())),
        "s": pa.array([{"b": "q", "a": 1}, None], pa.struct([("b", pa.large_string()), ("a", pa.int32())])),
        "ts": pa.array([1_000_000_000, 2_000], pa.timestamp("ns", tz="Asia/Tokyo")),
        "name": pa.array(["n", None], pa.large_string()),
        "id": pa.array([1, 2], pa.int64()),
    })
    check_write_compatible(TABLE, data.schema, "t")
    out = cast_to_table_schema(data, TABLE)
    assert out.schema.equals(TABLE)
    assert out.column("ts").to_pylist() == [dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC),
                                           dt.datetime(1970, 1, 1, 0, 0, 0, 2, tzinfo=dt.UTC)]
    assert out.column("s").to_pylist() == [{"a": 1, "b": "q"}, None]
    assert out.column("l").to_pylist() == [["x"], None]


def test_cast_refuses_to_lose_nanoseconds_and_nulls() -> None:
    data = pa.table({"id": pa.array([1]), "name": pa.array(["a"]),
                     "s": pa.array([None], TABLE.field("s").type),
                     "l": pa.array([None], TABLE.field("l").type),
                     "ts": pa.array([1_000_000_001], pa.timestamp("ns", tz="UTC"))})
    with pytest.raises(SchemaMismatchError, match=r"'ts'.*truncate timestamps"):
        cast_to_table_schema(data, TABLE)
    nulls = data.set_column(0, "id", pa.array([None], pa.int64()))
    with pytest.raises(SchemaMismatchError, match="'id' is not nullable"):
        cast_to_table_schema(nulls, TABLE)
    with pytest.raises(SchemaMismatchError, match="lacks columns"):
        cast_to_table_schema(data.drop_columns(["name"]), TABLE)


def test_cast_widens_unsigned() -> None:
    schema = pa.schema([("a", pa.uint32()), ("b", pa.uint8())])
    table_schema = schema_from_json(schema_to_json(schema))
    data = pa.table({"a": pa.array([4_294_967_295], pa.uint32()), "b": pa.array([255], pa.uint8())})
    out = cast_to_table_schema(data, table_schema)
    assert out.to_pylist() == [{"a": 4_294_967_295, "b": 255}]
    assert out.schema.types == [pa.int64(), pa.int16()]


# --------------------------------------------------------------------------- delta-rs compatibility


def _deltalake_all_types() -> tuple[pa.Schema, list[dict[str, Any]]]:
    schema = pa.schema([
        pa.field("b", pa.bool_()), pa.field("i8", pa.int8()), pa.field("i16", pa.int16()),
        pa.field("i32", pa.int32(), nullable=False), pa.field("i64", pa.int64()),
        pa.field("f32", pa.float32()), pa.field("f64", pa.float64()),
        pa.field("dec", pa.decimal128(10, 2)), pa.field("dec38", pa.decimal128(38, 6)),
        pa.field("s", pa.string()), pa.field("ls", pa.large_string()),
        pa.field("bin", pa.binary()), pa.field("lbin", pa.large_binary()), pa.field("d", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")), pa.field("tsn", pa.timestamp("us")),
        pa.field("arr", pa.list_(pa.int32())),
        pa.field("arr_nn", pa.list_(pa.field("item", pa.string(), nullable=False))),
        pa.field("m", pa.map_(pa.string(), pa.int64())),
        pa.field("st", pa.struct([pa.field("x", pa.int32(), metadata={"comment": "x"}),
                                  pa.field("y", pa.struct([pa.field("z", pa.string(), nullable=False)]))])),
        pa.field("list_of_struct", pa.list_(pa.struct([("k", pa.string()), ("v", pa.float64())]))),
    ], metadata=None)
    rows = [{"i32": 1, "b": True, "dec": decimal.Decimal("1.25"), "d": dt.date(2026, 11, 22),
             "st": {"x": 1, "y": {"z": "q"}}, "arr_nn": ["a"], "m": [("k", 1)]}]
    return schema, rows


def _strip_metadata(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_metadata(v) for k, v in obj.items() if k != "metadata"}
    if isinstance(obj, list):
        return [_strip_metadata(v) for v in obj]
    return obj


def test_matches_deltalake_schema_string(tmp_path: Path) -> None:
    schema, rows = _deltalake_all_types()
    deltalake.write_deltalake(str(tmp_path), pa.Table.from_pylist(rows, schema=schema))
    log = (tmp_path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    theirs = next(json.loads(line)["metaData"]["schemaString"] for line in log if "metaData" in line)

    assert _strip_metadata(json.loads(schema_to_json(schema))) == _strip_metadata(json.loads(theirs))
    # metadata: delta-rs writes field metadata as strings, and so do we
    assert json.loads(schema_to_json(schema)) == json.loads(theirs)

    ours_read = schema_from_json(theirs)
    their_read = pa.schema(deltalake.DeltaTable(str(tmp_path)).schema().to_arrow())
    assert ours_read.names == their_read.names
    for ours_f, their_f in zip(ours_read, their_read, strict=True):
        assert ours_f.type == their_f.type, ours_f.name
        assert ours_f.nullable == their_f.nullable, ours_f.name


def test_unsigned_types_differ_from_deltalake_on_purpose(tmp_path: Path) -> None:
    """delta-rs maps uint8/16/32 to the signed type of the same width (byte/short/integer), which
    cannot hold the upper half of the values; deltacommit widens instead."""
    schema = pa.schema([("u8", pa.uint8()), ("u16", pa.uint16()), ("u32", pa.uint32())])
    deltalake.write_deltalake(str(tmp_path), pa.Table.from_pylist([{"u8": 1, "u16": 2, "u32": 3}],
                                                                  schema=schema))
    log = (tmp_path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    theirs = json.loads(next(json.loads(x)["metaData"]["schemaString"] for x in log if "metaData" in x))
    assert [f["type"] for f in theirs["fields"]] == ["byte", "short", "integer"]
    ours = json.loads(schema_to_json(schema))
    assert [f["type"] for f in ours["fields"]] == ["short", "integer", "long"]
