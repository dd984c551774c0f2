"""Non-nullable fields inside structs, lists and maps: enforce on write, tolerate on read.  Pure.

Spark represents a null struct by a null bit on the struct alone; its non-nullable children keep
whatever is below (usually null).  Written as is, such a file is refused by Parquet writers
(a required column with nulls) or, written with optional children as Spark does, it is refused
by every Arrow-based reader of the table (deltalake, pyarrow casts to the table schema: "field
'a' has nulls").  So the writer stores a default value (0, "", empty list, ...) below null
parents, where no reader ever looks, and raises SchemaMismatchError for a null that is visible,
which is exactly Delta's NOT NULL rule for nested fields.

Files from other writers may still carry nulls below null parents; ``conform`` gives their
columns the table's type without the validation a cast would do.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import SchemaMismatchError


def has_nested_required(schema: pa.Schema) -> bool:
    """Whether any field below the top level is non-nullable (only then is work needed)."""
    def walk(t: pa.DataType) -> bool:
        if pa.types.is_struct(t):
            return any(not t.field(i).nullable or walk(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_map(t):
            return not t.item_field.nullable or walk(t.key_type) or walk(t.item_type)
        if pa.types.is_list(t):
            return not t.value_field.nullable or walk(t.value_type)
        return False

    return any(walk(f.type) for f in schema)


def _default(t: pa.DataType) -> Any:
    """A Python value of type ``t`` to store where nobody reads (below a null parent)."""
    types = pa.types
    if types.is_struct(t):
        return {t.field(i).name: None if t.field(i).nullable else _default(t.field(i).type)
                for i in range(t.num_fields)}
    if types.is_list(t) or types.is_map(t):
        return []
    if types.is_boolean(t):
        return False
    if types.is_string(t):
        return ""
    if types.is_binary(t):
        return b""
    if types.is_decimal(t):
        return Decimal(0)
    if types.is_date(t):
        return dt.date(1970, 1, 1)
    if types.is_timestamp(t):
        return 0
    return 0


def _offset_zero(arr: pa.Array[Any]) -> pa.Array[Any]:
    return pa.concat_arrays([arr]) if arr.offset else arr


def _fill_below_null_parents(arr: pa.Array[Any], target: pa.DataType, path: str) -> pa.Array[Any]:
    """``arr`` (offset 0) with its required descendants filled where an ancestor is null."""
    if pa.types.is_struct(target):
        s: Any = arr
        parent_valid = arr.is_valid()
        children = []
        for i in range(target.num_fields):
            f = target.field(i)
            child = _offset_zero(s.field(i))
            if not f.nullable and child.null_count:
                visible = pc.and_(child.is_null(), parent_valid)
                bad = pc.sum(pc.cast(visible, pa.int64())).as_py() or 0
                if bad:
                    raise SchemaMismatchError(
                        f"column {path + '.' + f.name!r} is not nullable but the data has {bad} "
                        "null value(s) in rows where its parent is not null")
                child = pc.if_else(child.is_null(), pa.scalar(_default(child.type), child.type), child)
            children.append(_fill_below_null_parents(_offset_zero(child), f.type, f"{path}.{f.name}"))
        return pa.Array.from_buffers(arr.type, len(arr), [arr.buffers()[0]], arr.null_count, 0,
                                     children)
    if pa.types.is_map(target):
        m: Any = arr
        entries_type = pa.struct([target.key_field, target.item_field])
        entries = _fill_below_null_parents(_offset_zero(m.values), entries_type, path)
        return pa.Array.from_buffers(arr.type, len(arr), arr.buffers()[:2], arr.null_count, 0,
                                     [entries])
    if pa.types.is_list(target):
        lst: Any = arr
        values = _offset_zero(lst.values)
        inner = f"{path}.element"
        if not target.value_field.nullable and values.null_count:
            visible = lst.flatten().null_count
            if visible:
                raise SchemaMismatchError(
                    f"column {inner!r} is not nullable but the data has {visible} null element(s)")
            # Nulls outside the referenced ranges of the values, where no reader looks.
            values = pc.if_else(values.is_null(), pa.scalar(_default(values.type), values.type),
                                values)
        values = _fill_below_null_parents(_offset_zero(values), target.value_type, inner)
        return pa.Array.from_buffers(arr.type, len(arr), arr.buffers()[:2], arr.null_count, 0,
                                     [values])
    return arr


def enforce_nested_not_null(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` (already in ``schema``) with defaults below null parents; SchemaMismatchError for
    a null in a non-nullable nested field whose parents are all present."""
    columns = []
    for f in schema:
        col = data.column(f.name)
        chunks = [_fill_below_null_parents(_offset_zero(c), f.type, f.name) for c in col.chunks]
        columns.append(pa.chunked_array(chunks, type=col.type))
    return pa.Table.from_arrays(columns, schema=data.schema)


# --------------------------------------------------------------------------- reading


def _shape(t: pa.DataType) -> pa.DataType:
    """``t`` with nested fields nullable and list fields named ``element``: two types with the
    same shape differ only in what their writers declared about nested nulls."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _shape(t.field(i).type))
                          for i in range(t.num_fields)])
    if pa.types.is_map(t):
        shaped: pa.DataType = pa.map_(_shape(t.key_type), _shape(t.item_type))
        return shaped
    if pa.types.is_list(t):
        return pa.list_(pa.field("element", _shape(t.value_type)))
    return t


def _retype(arr: pa.Array[Any], target: pa.DataType) -> pa.Array[Any]:
    """The same values under a type of the same shape, without validation."""
    if arr.type == target:
        return arr
    arr = _offset_zero(arr)
    if pa.types.is_struct(target):
        s: Any = arr
        children = [_retype(s.field(i), target.field(i).type) for i in range(target.num_fields)]
        return pa.Array.from_buffers(target, len(arr), [arr.buffers()[0]], arr.null_count, 0,
                                     children)
    if pa.types.is_map(target) or pa.types.is_list(target):
        lst: Any = arr
        value_type = (pa.struct([target.key_field, target.item_field]) if pa.types.is_map(target)
                      else target.value_type)
        return pa.Array.from_buffers(target, len(arr), arr.buffers()[:2], arr.null_count, 0,
                                     [_retype(lst.values, value_type)])
    return arr.cast(target)


def conform(col: pa.Array[Any], target: pa.DataType) -> pa.Array[Any]:
    """A column read from a data file, in the table's type: re-labelled when only nested
    nullability or list field names differ, cast otherwise (a foreign writer's nanosecond
    timestamps or large strings)."""
    if col.type == target:
        return col
    if _shape(col.type) == _shape(target):
        return _retype(col, target)
    return col.cast(target)
