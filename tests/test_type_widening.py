"""Type widening: files written before a column's type was widened read in the wider type.

The tables are Spark's (Delta's golden tables and delta-kernel-rs's copy), compared with the
rows Delta's Java kernel and delta-kernel-rs expect of them (``DeltaTableReadsSuite.scala``,
``read.rs::type_widening_*``); deltalake 1.6.0 refuses both ``typeWidening`` features, so it
cannot be the oracle here.  Appends to copies are read back and their files checked to hold the
widened Parquet types.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import UnsupportedProtocolError
from deltacommit.protocol.actions import Protocol, serialize_commit
from deltacommit.protocol.schema.type_widening import check_type_changes, is_supported_change

DATA = Path(__file__).resolve().parent / "data"
MAX, MIN = 2**63 - 1, -(2**63)

BASIC_COLUMNS = ["byte_long", "int_long", "float_double", "byte_double", "short_double",
                 "int_double", "date_timestamp_ntz"]
BASIC = [
    [1, 2, 3.4000000953674316, 5.0, 6.0, 7.0, dt.datetime(2024, 9, 9)],
    [MAX, MAX, 1.234567890123, 1.234567890123, 1.234567890123, 1.234567890123,
     dt.datetime(2024, 9, 9, 12, 34, 56, 123456)],
]
DECIMAL_COLUMNS = ["decimal_decimal_same_scale", "decimal_decimal_greater_scale",
                   "byte_decimal", "short_decimal", "int_decimal", "long_decimal"]
DECIMALS = [
    [Decimal("123.45"), Decimal("67.89000"), Decimal("1.0"), Decimal("2.0"), Decimal("3.0"),
     Decimal("4.0")],
    [Decimal("12345678901234.56"), Decimal("12345678901.23456"), Decimal("123.4"),
     Decimal("12345.6"), Decimal("1234567890.1"), Decimal("123456789012345678.9")],
]
NESTED = [
    {"struct": {"a": 1}, "map": [(2, 3)], "array": [4, 5]},
    {"struct": {"a": MAX}, "map": [(MAX, MAX)], "array": [MAX, MIN]},
]

TABLES = ["kernel/type-widening", "delta-golden/type-widening"]


def _rows(t: pa.Table, columns: list[str]) -> list[list[Any]]:
    return sorted(([r[c] for c in columns] for r in t.to_pylist()), key=repr)


def _file_types(uri: str, column: str) -> set[str]:
    """The Parquet types of ``column`` across the table's data files."""
    return {str(pq.read_schema(Path(uri) / unquote(a.path)).field(column).type)
            for a in dc.DeltaTable(uri).files()}


@pytest.mark.parametrize("name", TABLES)
def test_reads_widened_basic_and_decimal_columns(name: str) -> None:
    uri = str(DATA / name)
    table = dc.DeltaTable(uri)
    rows = table.to_arrow()
    assert _rows(rows, BASIC_COLUMNS) == sorted(BASIC, key=repr)
    assert _rows(rows, DECIMAL_COLUMNS) == sorted(DECIMALS, key=repr)
    # The files really hold the narrower types the table widened from.
    assert "int8" in _file_types(uri, "byte_long")
    assert "date32[day]" in _file_types(uri, "date_timestamp_ntz")
    assert rows.schema.field("byte_long").type == pa.int64()


def test_reads_widened_nested_fields() -> None:
    uri = str(DATA / "delta-golden/type-widening-nested")
    rows = dc.DeltaTable(uri).to_arrow()
    assert sorted(rows.to_pylist(), key=repr) == sorted(NESTED, key=repr)
    assert "struct<a: int32>" in _file_types(uri, "struct")


@pytest.mark.parametrize("name", [*TABLES, "delta-golden/type-widening-nested"])
def test_appends_keep_the_widened_types(name: str, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    shutil.copytree(DATA / name, uri)
    before = dc.DeltaTable(uri).to_arrow()
    old = {a.path for a in dc.DeltaTable(uri).files()}
    dc.write(uri, before, mode="append")
    after = dc.DeltaTable(uri).to_arrow()
    columns = after.column_names
    assert _rows(after, columns) == sorted(_rows(before, columns) * 2, key=repr)
    new = [a for a in dc.DeltaTable(uri).files() if a.path not in old]
    assert new
    for a in new:
        written = pq.read_schema(Path(uri) / unquote(a.path))
        for f in after.schema:
            assert written.field(f.name).type == f.type


def _widen(uri: str, changes: dict[str, tuple[str, str]], feature: str = "typeWidening") -> None:
    """Commit what Spark's ``ALTER TABLE ... CHANGE COLUMN ... TYPE`` commits: the wider types
    with their ``delta.typeChanges`` and the feature in the protocol."""
    table = dc.DeltaTable(uri)
    schema = json.loads(table.metadata.schema_string)
    for f in schema["fields"]:
        if f["name"] in changes:
            old, new = changes[f["name"]]
            f["type"] = new
            f["metadata"]["delta.typeChanges"] = [{"fromType": old, "toType": new}]
    metadata = dataclasses.replace(
        table.metadata, schema_string=json.dumps(schema),
        configuration={**table.metadata.configuration, "delta.enableTypeWidening": "true"})
    # Table features list every feature the table uses: column mapping, where it is on.
    features = [feature] + (["columnMapping"] if table.metadata.configuration.get(
        "delta.columnMapping.mode", "none") != "none" else [])
    with table.transaction("CHANGE COLUMN") as txn:
        txn.update_protocol(Protocol(3, 7, features, features))
        txn.update_metadata(metadata)


@pytest.mark.parametrize("mode", ["none", "name", "id"])
def test_widening_after_files_were_written(mode: str, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    config = {} if mode == "none" else {"delta.columnMapping.mode": mode}
    narrow = pa.table({"i": pa.array([1, None], pa.int16()),
                       "f": pa.array([1.5, 2.0], pa.float32()),
                       "d": pa.array([dt.date(2024, 1, 2), None], pa.date32()),
                       "m": pa.array([Decimal("1.25"), Decimal("-3.50")], pa.decimal128(5, 2))})
    dc.write(uri, narrow, configuration=config)
    _widen(uri, {"i": ("short", "long"), "f": ("float", "double"),
                 "d": ("date", "timestamp_ntz"), "m": ("decimal(5,2)", "decimal(12,4)")})
    wide = pa.table({"i": pa.array([2**40], pa.int64()), "f": pa.array([0.1], pa.float64()),
                     "d": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9)], pa.timestamp("us")),
                     "m": pa.array([Decimal("12345678.1234")], pa.decimal128(12, 4))})
    dc.write(uri, wide)
    got = dc.DeltaTable(uri).to_arrow()
    assert got.schema.types == [pa.int64(), pa.float64(), pa.timestamp("us"),
                                pa.decimal128(12, 4)]
    assert sorted(got.to_pylist(), key=repr) == sorted([
        {"i": 1, "f": 1.5, "d": dt.datetime(2024, 1, 2), "m": Decimal("1.2500")},
        {"i": None, "f": 2.0, "d": None, "m": Decimal("-3.5000")},
        {"i": 2**40, "f": 0.1, "d": dt.datetime(2024, 5, 6, 7, 8, 9),
         "m": Decimal("12345678.1234")}], key=repr)


def test_refuses_a_type_change_that_is_not_a_widening(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"a": pa.array([1], pa.int64())}))
    version = dc.DeltaTable(uri).version
    # Refused before it is committed...
    with pytest.raises(UnsupportedProtocolError, match="from long to integer"):
        _widen(uri, {"a": ("long", "integer")})
    assert dc.DeltaTable(uri).version == version
    # ...and on reading, when another writer committed it.
    table = dc.DeltaTable(uri)
    schema = json.loads(table.metadata.schema_string)
    schema["fields"][0].update(type="integer", metadata={
        **schema["fields"][0]["metadata"],
        "delta.typeChanges": [{"fromType": "long", "toType": "integer"}]})
    metadata = json.loads(serialize_commit([dataclasses.replace(
        table.metadata, schema_string=json.dumps(schema))]))
    protocol = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                             "readerFeatures": ["typeWidening"],
                             "writerFeatures": ["typeWidening"]}}
    (Path(uri) / "_delta_log" / f"{version + 1:020d}.json").write_text(
        json.dumps(protocol) + "\n" + json.dumps(metadata) + "\n")
    with pytest.raises(UnsupportedProtocolError, match="from long to integer"):
        dc.DeltaTable(uri)


@pytest.mark.parametrize(("old", "new", "ok"), [
    ("byte", "short", True), ("byte", "long", True), ("integer", "long", True),
    ("long", "integer", False), ("short", "short", False),
    ("float", "double", True), ("integer", "double", True), ("long", "double", False),
    ("date", "timestamp_ntz", True), ("date", "timestamp", False),
    ("decimal(10,2)", "decimal(12,4)", True), ("decimal(10,2)", "decimal(11,4)", False),
    ("decimal(10,2)", "decimal(10,1)", False),
    ("integer", "decimal(10,0)", True), ("integer", "decimal(11,2)", False),
    ("long", "decimal(20,0)", True), ("long", "decimal(18,0)", False),
    ("byte", "decimal(4,1)", True), ("string", "binary", False), ("double", "float", False),
])
def test_supported_changes(old: str, new: str, ok: bool) -> None:
    assert is_supported_change(old, new) is ok


def test_check_type_changes_names_nested_fields() -> None:
    inner = pa.field("x", pa.int32(), metadata={
        "delta.typeChanges": json.dumps([{"fromType": "string", "toType": "integer"}])})
    schema = pa.schema([pa.field("s", pa.list_(pa.struct([inner])))])
    with pytest.raises(UnsupportedProtocolError, match=r"t9: column 's\.element\.x'"):
        check_type_changes(schema, "t9")
    bad = pa.schema([pa.field("a", pa.int64(), metadata={"delta.typeChanges": "oops"})])
    with pytest.raises(UnsupportedProtocolError, match="fromType"):
        check_type_changes(bad, "t9")


_ARROW = {"byte": pa.int8(), "short": pa.int16(), "integer": pa.int32(), "long": pa.int64()}
_INT_RANGE = {"byte": 2**7, "short": 2**15, "integer": 2**31, "long": 2**63}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["byte", "short", "integer", "long"]),
       st.one_of(st.sampled_from(["short", "integer", "long", "double"]),
                 st.builds(lambda p, s: f"decimal({p},{s})", st.integers(1, 38),
                           st.integers(0, 10))),
       st.data())
def test_every_supported_integer_widening_reads_values_exactly(
        old: str, new: str, data: st.DataObject) -> None:
    """What the reader does to an old file's column (``to_logical``) loses no value of a
    change ``is_supported_change`` accepts."""
    from deltacommit.protocol.schema.arrow import delta_to_arrow_type
    from deltacommit.protocol.schema.column_mapping import to_logical

    if not is_supported_change(old, new):
        return
    bound = _INT_RANGE[old]
    values = data.draw(st.lists(st.one_of(st.none(), st.integers(-bound, bound - 1)),
                                max_size=20) | st.just([-bound, bound - 1]))
    target = delta_to_arrow_type(new, "c")
    got = to_logical(pa.array(values, _ARROW[old]), target, "none").to_pylist()
    assert [None if v is None else int(v) for v in got] == values
