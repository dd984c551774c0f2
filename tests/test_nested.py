"""Nested NOT NULL fields: defaults below null parents on write, visible nulls refused.  Pure."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltacommit.errors import SchemaMismatchError
from deltacommit.protocol.schema.nested import (
    conform,
    enforce_nested_not_null,
    has_nested_required,
)

INNER = pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.string())])
SCHEMA = pa.schema([
    pa.field("st", INNER),
    pa.field("deep", pa.struct([pa.field("inner", INNER, nullable=False)])),
    pa.field("items", pa.list_(pa.field("element", INNER, nullable=False))),
    pa.field("m", pa.map_(pa.field("key", pa.string(), nullable=False),  # type: ignore[call-overload]
                          pa.field("value", INNER, nullable=False))),
])


def spark_like(rows: list[dict[str, Any]]) -> pa.Table:
    """Arrays as Spark hands them over: children of null structs are null too."""
    loose = pa.schema([pa.field(f.name, _loosen(f.type)) for f in SCHEMA])
    table = pa.Table.from_pylist(rows, schema=loose)
    return pa.Table.from_arrays([conform(_null_children(table.column(f.name).combine_chunks()), f.type)
                                 for f in SCHEMA], schema=SCHEMA)


def _null_children(arr: Any) -> Any:
    """pyarrow fills children of null structs with zeros; Spark leaves them null."""
    if pa.types.is_struct(arr.type):
        children = [pc.if_else(arr.is_valid(), _null_children(arr.field(i)), None)
                    for i in range(arr.type.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(arr.type), mask=arr.is_null())
    if pa.types.is_list(arr.type) and not pa.types.is_map(arr.type):
        return pa.ListArray.from_arrays(arr.offsets, _null_children(arr.values), type=arr.type,
                                        mask=arr.is_null())
    if pa.types.is_map(arr.type):
        entries = _null_children(arr.values)
        return pa.MapArray.from_arrays(arr.offsets, entries.field(0), entries.field(1),
                                       type=arr.type, mask=arr.is_null())
    return arr


def _loosen(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _loosen(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(pa.field("element", _loosen(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_type, _loosen(t.item_type))
    return t


ROWS = [
    {"st": {"a": 1, "b": "x"}, "deep": {"inner": {"a": 2, "b": None}}, "items": [{"a": 3, "b": "y"}],
     "m": [("k", {"a": 4, "b": "z"})]},
    {"st": None, "deep": None, "items": None, "m": None},
    {"st": None, "deep": {"inner": {"a": 5, "b": None}}, "items": [], "m": []},
]


def test_schema_with_nested_required_fields_is_recognised() -> None:
    assert has_nested_required(SCHEMA)
    assert not has_nested_required(pa.schema([pa.field("x", pa.int64(), nullable=False),
                                              pa.field("s", pa.struct([pa.field("a", pa.int32())]))]))


def test_nulls_below_null_parents_become_defaults_and_files_read_back_in_the_table_schema() -> None:
    data = spark_like(ROWS)
    assert data.column("st").chunk(0).field(0).null_count == 2  # as Spark sends them
    assert data.column("deep").chunk(0).field(0).null_count == 1
    with pytest.raises(pa.ArrowInvalid, match="non-nullable"):
        pq.write_table(data, io.BytesIO())  # why the writer cannot store what Spark sends as is
    fixed = enforce_nested_not_null(data, SCHEMA)
    assert fixed.column("st").chunk(0).field(0).null_count == 0
    assert fixed.to_pylist() == data.to_pylist()
    sink = io.BytesIO()
    pq.write_table(fixed, sink)
    back = pq.read_table(io.BytesIO(sink.getvalue()))
    assert back.cast(SCHEMA).to_pylist() == data.to_pylist()


@pytest.mark.parametrize(("row", "column"), [
    ({"st": {"a": None, "b": "x"}}, "st.a"),
    ({"deep": {"inner": None}}, "deep.inner"),
    ({"deep": {"inner": {"a": None}}}, "deep.inner.a"),
    ({"items": [None]}, "items.element"),
    ({"items": [{"a": None}]}, "items.element.a"),
    ({"m": [("k", None)]}, "m.value"),
])
def test_a_visible_null_in_a_required_nested_field_is_refused(row: dict[str, Any], column: str) -> None:
    data = spark_like([ROWS[0], row])
    with pytest.raises(SchemaMismatchError, match=rf"column '{column}' is not nullable"):
        enforce_nested_not_null(data, SCHEMA)


def test_conform_relabels_optional_children_written_by_other_writers() -> None:
    loose = pa.StructArray.from_arrays([pa.array([1, None], pa.int32()), pa.array([None, None], pa.string())],
                                       fields=list(_loosen(INNER)), mask=pa.array([False, True]))
    out = conform(loose, INNER)
    assert out.type == INNER
    assert out.to_pylist() == [{"a": 1, "b": None}, None]
    assert conform(pa.array([1], pa.int32()), pa.int64()).type == pa.int64()


def test_a_table_with_nested_required_fields_writes_and_reads_spark_shaped_data(tmp_path: Any) -> None:
    import deltacommit as dc
    from deltacommit.protocol.actions import Add

    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA)
    dc.write(table, spark_like(ROWS))
    assert dc.DeltaTable(uri).to_arrow().to_pylist() == spark_like(ROWS).to_pylist()
    # A foreign writer's file with optional children holding nulls below null parents, as
    # Spark writes them, reads back in the table schema too.
    loose = pa.schema([pa.field(f.name, _loosen(f.type)) for f in SCHEMA])
    foreign = spark_like(ROWS).cast(loose)
    path = tmp_path / "t" / "foreign.parquet"
    pq.write_table(foreign, path)
    with table.transaction() as txn:
        txn.add([Add("foreign.parquet", {}, path.stat().st_size, 0)])
    rows = dc.DeltaTable(uri).to_arrow().to_pylist()
    assert rows == spark_like(ROWS).to_pylist() * 2
