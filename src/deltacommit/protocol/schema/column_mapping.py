"""Column mapping (PROTOCOL.md, "Column Mapping"): display names <-> physical names and ids.  Pure.

With column mapping a table's schema names columns for people (the *logical* or display name)
while data files, ``add.partitionValues`` and ``stats`` name them by a *physical* name that
never changes, and Parquet carries each struct field's 32-bit id as its ``field_id``.  That is
what lets Spark rename or drop a column without rewriting data, and it is why a reader that
ignores the mapping finds no columns at all.

deltacommit keeps the mapping in the Arrow schema it reads from ``schemaString``: every field's
metadata holds ``delta.columnMapping.id`` and ``delta.columnMapping.physicalName`` exactly as the
log has them, so the schema a writer casts rows to is also the one that says how to name them
in a file.  Everything here translates between the two sides:

* ``physical_schema``/``to_physical``: rows in the table's schema -> the columns a data file
  holds (physical names at every struct level, ``PARQUET:field_id`` on every struct field);
* ``file_column``/``to_logical``: a data file's column -> the table's column, matching struct
  fields by id (``id`` mode, falling back to the physical name for files without ids) or by
  physical name (``name`` mode); a field the file lacks reads as nulls, and leaf values are cast
  to the table's type, which is also how files written before a type change (type widening)
  read in the current, wider type;
* ``assign_column_mapping``: ids ``1..n`` and ``col-<uuid>`` physical names for a new table;
* ``renamed_field``/``dropped_field``: the schema after a rename or a drop, which with column
  mapping rewrites no data file.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.protocol.schema.nested import conform
from deltacommit.protocol.schema.walk import rebuild_type, schema_fields
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import (
    COLUMN_MAPPING_MAX_ID,
    COLUMN_MAPPING_MODE,
    ColumnMappingMode,
)

MODE_KEY = COLUMN_MAPPING_MODE
MAX_COLUMN_ID_KEY = COLUMN_MAPPING_MAX_ID
ID_KEY = "delta.columnMapping.id"
PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
#: The field metadata key under which pyarrow reads and writes a Parquet field id.
PARQUET_FIELD_ID = b"PARQUET:field_id"

MODES = tuple(m.value for m in ColumnMappingMode)

_ID = ID_KEY.encode()
_PHYSICAL = PHYSICAL_NAME_KEY.encode()


def mapping_mode(configuration: Mapping[str, str | None], table: str = "") -> str:
    """``none``, ``name`` or ``id``: ``delta.columnMapping.mode`` of a configuration at hand
    (a snapshot has it as ``table_config.column_mapping_mode``)."""
    return TableConfig(configuration, table).column_mapping_mode.value


def field_id(f: pa.Field[Any]) -> int | None:
    """The column mapping id of a table field (None if it has none)."""
    raw = (f.metadata or {}).get(_ID)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise CorruptLogError(
            f"schemaString: column {f.name!r} has {ID_KEY}={raw.decode(errors='replace')!r}, "
            "expected an integer") from None


def _file_field_id(f: pa.Field[Any]) -> int | None:
    raw = (f.metadata or {}).get(PARQUET_FIELD_ID)
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


def physical_name(f: pa.Field[Any], mode: str) -> str:
    """The name a data file, ``partitionValues`` and ``stats`` use for a table field."""
    if mode == "none":
        return f.name
    raw = (f.metadata or {}).get(_PHYSICAL)
    if raw is None:
        raise CorruptLogError(
            f"schemaString: column {f.name!r} has no {PHYSICAL_NAME_KEY} although the table "
            f"uses column mapping mode {mode!r}")
    return raw.decode()


def physical_names(schema: pa.Schema, mode: str) -> dict[str, str]:
    """Logical -> physical name of each top-level column."""
    return {f.name: physical_name(f, mode) for f in schema}


def partition_physical_names(schema: pa.Schema, partition_columns: Sequence[str],
                             configuration: Mapping[str, str | None]) -> dict[str, str]:
    """Logical -> physical name of each partition column of a column-mapping table (the keys
    of its ``partitionValues``); empty for a table without column mapping."""
    mode = mapping_mode(configuration)
    if mode == "none":
        return {}
    names = physical_names(schema, mode)
    return {c: names[c] for c in partition_columns if c in names}


def logical_values(values: Mapping[str, str | None], physical: Mapping[str, str]
                   ) -> dict[str, str | None]:
    """``add.partitionValues`` (keyed by physical name) keyed by the logical names of
    ``physical`` (logical -> physical).  Without a mapping the values are returned as they are."""
    if not physical:
        return dict(values)
    return {logical: values.get(p) for logical, p in physical.items()}


def physical_values(values: Mapping[str, str | None], physical: Mapping[str, str]
                    ) -> dict[str, str | None]:
    """Partition values keyed by logical name, keyed by physical name instead."""
    if not physical:
        return dict(values)
    return {physical.get(k, k): v for k, v in values.items()}


def check_column_mapping(schema: pa.Schema, mode: str, table: str) -> None:
    """Refuse a column-mapping table whose schema lacks an id or a physical name on a field,
    up front and naming the table, rather than failing on the first file read or written."""
    if mode == "none":
        return
    for f, path in schema_fields(schema):
        md = f.metadata or {}
        for key in (_ID, _PHYSICAL):
            if key not in md:
                raise CorruptLogError(
                    f"table {table}: column {path!r} has no {key.decode()} in its metadata, "
                    f"although the table uses column mapping mode {mode!r}")
        try:
            field_id(f)
        except CorruptLogError as e:
            raise CorruptLogError(f"table {table}: {e}") from None
    check_unique_mapping(schema, mode, table)


def check_unique_mapping(schema: pa.Schema, mode: str, table: str) -> None:
    """Refuse a schema in which two fields share a column mapping id (anywhere in the
    schema) or a physical name (in the same struct, at any depth).

    A reader matches a file's columns to the table's by id or physical name: with two fields
    on one id or name, both read the same file column (one field's values shown as the
    other's), a writer cannot name the file's columns apart, and a merged file schema fails
    deep inside Arrow.  Spark refuses such a schema (``DeltaColumnMapping.
    checkColumnIdAndPhysicalNameAssignments``), and so does every reader and writer here.
    """
    if mode == "none":
        return
    ids: dict[int, str] = {}

    def visit(t: pa.DataType, logical: str) -> None:
        # Physical names compete within one struct only (``a.x`` and ``b.x`` are distinct, as
        # in Spark's check); ids across the whole schema.
        if pa.types.is_struct(t):
            seen: dict[str, str] = {}
            for i in range(t.num_fields):
                f = t.field(i)
                path = f"{logical}.{f.name}" if logical else f.name
                fid = field_id(f)
                if fid is not None:
                    first = ids.setdefault(fid, path)
                    if first != path:
                        raise CorruptLogError(
                            f"table {table}: columns {first!r} and {path!r} have the same "
                            f"column mapping id ({ID_KEY}={fid}); ids must be unique in the "
                            "schema, or one column reads the other's data")
                name = physical_name(f, mode)
                other = seen.setdefault(name, path)
                if other != path:
                    raise CorruptLogError(
                        f"table {table}: columns {other!r} and {path!r} have the same physical "
                        f"name ({PHYSICAL_NAME_KEY}={name!r}); physical names must be unique "
                        "among a struct's fields, or one column reads the other's data")
                visit(f.type, path)
        elif _is_list_type(t):
            visit(cast(Any, t).value_type, f"{logical}.element")
        elif pa.types.is_map(t):
            visit(t.key_type, f"{logical}.key")
            visit(t.item_type, f"{logical}.value")

    visit(pa.struct(list(schema)), "")


def _is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


# --------------------------------------------------------------------------- writing


def _physical_field(f: pa.Field[Any], mode: str) -> pa.Field[Any]:
    fid = field_id(f)
    metadata = {PARQUET_FIELD_ID: str(fid).encode()} if fid is not None else None
    return pa.field(physical_name(f, mode), physical_type(f.type, mode), nullable=f.nullable,
                    metadata=metadata)


def physical_type(t: pa.DataType, mode: str) -> pa.DataType:
    """``t`` with every struct field renamed to its physical name and given its field id."""
    return rebuild_type(t, lambda f: _physical_field(f, mode))


def physical_schema(schema: pa.Schema, mode: str) -> pa.Schema:
    """The schema of a data file holding rows of ``schema``: physical names, Parquet field
    ids, and none of the table's field metadata (it belongs in the log, not in every file)."""
    return pa.schema([_physical_field(f, mode) for f in schema])


def to_physical(data: pa.Table, schema: pa.Schema, mode: str) -> pa.Table:
    """Rows already cast to ``schema`` (the table's, or the part of it a file holds), under
    physical names: the same buffers relabelled, no copy."""
    target = physical_schema(schema, mode)
    columns = [pa.chunked_array([c.view(f.type) for c in data.column(i).chunks], type=f.type)
               for i, f in enumerate(target)]
    return pa.Table.from_arrays(columns, schema=target)


# --------------------------------------------------------------------------- reading


_FileIndex = tuple[dict[int, int], dict[str, int]]


def _index(candidates: pa.StructType | pa.Schema) -> _FileIndex:
    """A data file's fields (of its schema or of one struct) by Parquet field id and by name."""
    by_id: dict[int, int] = {}
    by_name: dict[str, int] = {}
    for i in range(len(candidates.names)):
        c = candidates.field(i)
        fid = _file_field_id(c)
        if fid is not None:
            by_id.setdefault(fid, i)
        by_name.setdefault(c.name, i)
    return by_id, by_name


def _match(index: _FileIndex, f: pa.Field[Any], mode: str) -> int | None:
    """Index of the file's field that holds table field ``f``: by field id in ``id`` mode (by
    physical name for a file written without ids), by physical name in ``name`` mode, by name
    otherwise."""
    by_id, by_name = index
    if mode == "id":
        fid = field_id(f)
        if fid is not None and by_id:
            return by_id.get(fid)
    return by_name.get(physical_name(f, mode))


def file_columns(file_schema: pa.Schema, fields: Iterable[pa.Field[Any]], mode: str
                 ) -> dict[str, str]:
    """Table column name -> the data file's top-level column holding it, for each of
    ``fields`` the file has (the others read as nulls)."""
    index = _index(file_schema)
    out: dict[str, str] = {}
    for f in fields:
        i = _match(index, f, mode)
        if i is not None:
            out[f.name] = file_schema.names[i]
    return out


def file_column(file_schema: pa.Schema, f: pa.Field[Any], mode: str) -> str | None:
    """The name of the data file's top-level column that holds table column ``f``, or None
    when the file has no such column (it then reads as nulls)."""
    return file_columns(file_schema, [f], mode).get(f.name)


def _mask(arr: pa.Array[Any]) -> pa.BooleanArray | None:
    return arr.is_null() if arr.null_count else None


def to_logical(arr: pa.Array[Any], target: pa.DataType, mode: str) -> pa.Array[Any]:
    """A data file's column in the table's type ``target``: struct fields matched (see
    ``_match``) and renamed, fields the file lacks as nulls, leaves cast to the table's type
    (other timestamp units, large strings, and the narrower types of files written before a
    type widening)."""
    t = arr.type
    if pa.types.is_struct(target) and pa.types.is_struct(t):
        s: Any = arr
        index = _index(t)
        children: list[pa.Array[Any]] = []
        fields: list[pa.Field[Any]] = []
        for i in range(target.num_fields):
            f = target.field(i)
            j = _match(index, f, mode)
            children.append(pa.nulls(len(arr), f.type) if j is None
                            else to_logical(s.field(j), f.type, mode))
            fields.append(f)
        return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(arr))
    if pa.types.is_list(target) and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        lst: Any = arr
        offsets = lst.offsets
        if offsets.type != pa.int32():
            offsets = offsets.cast(pa.int32())
        values = to_logical(lst.values, target.value_type, mode)
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=_mask(arr))
    if pa.types.is_map(target) and pa.types.is_map(t):
        m: Any = arr
        keys = to_logical(m.keys, target.key_type, mode)
        items = to_logical(m.items, target.item_type, mode)
        map_array: Any = pa.MapArray  # its stubs lack the (offsets, keys, items, type) form
        out: pa.Array[Any] = map_array.from_arrays(m.offsets, keys, items, type=target,
                                                   mask=_mask(arr))
        return out
    return conform(arr, target)


# --------------------------------------------------------------------------- new tables


def _schema_metadata(schema: pa.Schema) -> Any:
    return schema.metadata


def strip_column_mapping(schema: pa.Schema) -> pa.Schema:
    """``schema`` without column mapping ids and physical names (rows read from one table and
    written to a new one must not bring the old table's mapping)."""

    def clean_field(f: pa.Field[Any]) -> pa.Field[Any]:
        md = {k: v for k, v in (f.metadata or {}).items()
              if k not in (_ID, _PHYSICAL, PARQUET_FIELD_ID)}
        return pa.field(f.name, rebuild_type(f.type, clean_field), nullable=f.nullable,
                        metadata=md or None)

    return pa.schema([clean_field(f) for f in schema], metadata=_schema_metadata(schema))


def assign_column_mapping(schema: pa.Schema, max_id: int, new_uuid: Callable[[], str]
                          ) -> tuple[pa.Schema, int]:
    """``schema`` with an id and a ``col-<uuid>`` physical name on every struct field that has
    none (top level and nested, in schema order, ids counting up from ``max_id + 1``), and the
    new highest id for ``delta.columnMapping.maxColumnId``."""
    counter = [max_id]

    def assign_field(f: pa.Field[Any]) -> pa.Field[Any]:
        md = dict(f.metadata or {})
        if _ID not in md:
            counter[0] += 1
            md[_ID] = str(counter[0]).encode()
        if _PHYSICAL not in md:
            md[_PHYSICAL] = f"col-{new_uuid()}".encode()
        return pa.field(f.name, rebuild_type(f.type, assign_field), nullable=f.nullable,
                        metadata=md)

    out = pa.schema([assign_field(f) for f in schema], metadata=_schema_metadata(schema))
    return out, counter[0]


def mapped_schema_dict(schema: dict[str, Any], max_id: int) -> tuple[dict[str, Any], int]:
    """A ``schemaString`` dict of a table without column mapping, turned into one with it:
    every struct field gets the next id and, as its physical name, its current name, so the
    table's existing files (which name columns that way) read unchanged (Spark's upgrade of a
    table to ``name`` mode does the same)."""
    out = copy.deepcopy(schema)
    counter = [max_id]

    def visit(t: Any) -> None:
        if not isinstance(t, dict):
            return
        for f in t.get("fields", ()):
            md = f.setdefault("metadata", {})
            if ID_KEY not in md:
                counter[0] += 1
                md[ID_KEY] = counter[0]
            md.setdefault(PHYSICAL_NAME_KEY, f["name"])
            visit(f.get("type"))
        for key in ("elementType", "keyType", "valueType"):
            visit(t.get(key))

    visit(out)
    return out, counter[0]


# --------------------------------------------------------------------------- renames and drops
# With column mapping a rename or a drop changes only the schema: files keep their physical
# names, so the renamed column still finds its data and a dropped one is simply never read.


def _locate(schema: dict[str, Any], path: Sequence[str], table: str
            ) -> tuple[list[dict[str, Any]], int]:
    """The field list holding the struct field at ``path`` (names, outermost first) in a
    ``schemaString`` dict, and the field's index in it."""
    if not path:
        raise InvalidArgumentError(f"table {table}: empty column path")
    fields: list[dict[str, Any]] = schema["fields"]
    for depth, name in enumerate(path):
        index = next((i for i, f in enumerate(fields) if f.get("name") == name), None)
        if index is None:
            where = ".".join(path[:depth]) or "the table"
            names = [f.get("name") for f in fields]
            raise InvalidArgumentError(
                f"table {table}: {where} has no column {name!r}; its columns are {names}")
        if depth == len(path) - 1:
            return fields, index
        inner = fields[index].get("type")
        if not isinstance(inner, dict) or inner.get("type") != "struct":
            raise InvalidArgumentError(
                f"table {table}: column {'.'.join(path[:depth + 1])!r} is not a struct, so it "
                f"has no field {path[depth + 1]!r}")
        fields = inner["fields"]
    raise AssertionError("unreachable")


def renamed_field(schema: dict[str, Any], path: Sequence[str], new_name: str, table: str
                  ) -> dict[str, Any]:
    """A copy of ``schema`` with the field at ``path`` named ``new_name``; its metadata (id,
    physical name) stays, so its data is found as before."""
    out = copy.deepcopy(schema)
    fields, index = _locate(out, path, table)
    if not new_name:
        raise InvalidArgumentError(f"table {table}: a column cannot be renamed to ''")
    clash = [f["name"] for i, f in enumerate(fields)
             if i != index and f["name"].lower() == new_name.lower()]
    if clash:
        raise InvalidArgumentError(
            f"table {table}: cannot rename {'.'.join(path)!r} to {new_name!r}: column "
            f"{clash[0]!r} exists (names are unique regardless of case)")
    fields[index]["name"] = new_name
    return out


def dropped_field(schema: dict[str, Any], path: Sequence[str], table: str) -> dict[str, Any]:
    """A copy of ``schema`` without the field at ``path``."""
    out = copy.deepcopy(schema)
    fields, index = _locate(out, path, table)
    if len(fields) == 1:
        where = "the table" if len(path) == 1 else repr(".".join(path[:-1]))
        raise InvalidArgumentError(
            f"table {table}: cannot drop {'.'.join(path)!r}, the only column of {where}")
    del fields[index]
    return out
