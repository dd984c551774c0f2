"""The live file list as one Arrow table (``DeltaTable.get_add_actions``), built column by column.  Pure.

A table of a million files has a million ``add`` actions; a Python object for each costs more
than the whole list as Arrow, and a caller asking for the list as a table (to filter it, sum
sizes, find small files, look at statistics) wants columns anyway.  So the table is built from
the ``add`` rows as the checkpoint holds them (``files.lazy_files``: still Arrow, minus the keys
changed after the checkpoint) and the small tail of adds committed since, without one Python
object per file: statistics come from the checkpoint's typed ``stats_parsed`` where it has them
and are otherwise parsed from their JSON text by Arrow's JSON reader (``log.stats_arrays``),
partition values are looked up column-wise and parsed once per distinct value.

The columns and their types are deltalake 1.6.0's, so code written against
``deltalake.DeltaTable.get_add_actions`` reads this table alike:

- ``path``, ``size_bytes``, ``modification_time`` (milliseconds since the epoch, int64);
- ``num_records``, ``null_count``, ``min``, ``max``: the file's statistics typed by the table
  schema (deltalake's stats schema: the first ``delta.dataSkippingNumIndexedCols`` leaf columns,
  32 unless set, or those ``delta.dataSkippingStatsColumns`` names; partition columns never;
  ``null_count`` for every such leaf, lists and maps included, ``min``/``max`` for numbers,
  booleans, strings, dates, timestamps and decimals).  Null where a file has no statistics;
  a column absent when the table has no column of its kind;
- ``partition``: the partition values typed by the schema (only for a partitioned table).

Two columns follow that deltalake 1.6.0 does not have: ``data_change`` (the add's
``dataChange`` flag) and, for tables whose protocol allows deletion vectors, ``deletion_vector``
(the descriptor, null for files without one).  Column-mapping tables are keyed by logical
names throughout (deltalake 1.6.0 shows the physical names in the statistics).  With
``flatten`` every struct is spread into dotted columns (``min.id``, ``partition.day``), as
deltalake does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.protocol.arrow_values import null_scalar, string_scalar, true_scalar
from deltacommit.protocol.checkpoint.schema import DELETION_VECTOR
from deltacommit.protocol.partitions import parse_partition_value
from deltacommit.protocol.schema.column_mapping import mapping_mode, physical_name, physical_type
from deltacommit.protocol.stats.arrays import parse_stats, stats_from_struct, struct_only_stats
from deltacommit.protocol.stats.parsed import partition_strings
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import DEFAULT_INDEXED_COLUMNS, stats_columns

#: Decides whether a file is listed from its partition values (keyed by logical name; None for
#: null), evaluated once per distinct combination of values.
PartitionFilter = Callable[[Mapping[str, str | None]], bool]



# --------------------------------------------------------------------------- the stats schema


def _has_min_max(t: pa.DataType) -> bool:
    types = pa.types
    return bool(types.is_integer(t) or types.is_floating(t) or types.is_boolean(t)
                or types.is_string(t) or types.is_large_string(t) or types.is_date(t)
                or types.is_timestamp(t) or types.is_decimal(t))


class _Selection:
    """Which leaf columns carry statistics, walked in schema order (deltalake 1.6.0's rule)."""

    def __init__(self, configuration: Mapping[str, str | None]) -> None:
        config = TableConfig(configuration)
        self.columns = config.data_skipping_stats_columns
        self.limit: int | None = None
        if self.columns is None:
            n = config.data_skipping_num_indexed_cols
            self.limit = None if n < 0 else n
        self.added = 0

    def _named(self, path: tuple[str, ...]) -> bool:
        assert self.columns is not None
        return any(c[:len(path)] == path or path[:len(c)] == c for c in self.columns)

    def fields(self, fields: Sequence[pa.Field[Any]], prefix: tuple[str, ...]
               ) -> list[pa.Field[Any]]:
        out: list[pa.Field[Any]] = []
        for f in fields:
            if self.limit is not None and self.added >= self.limit:
                break
            path = (*prefix, f.name)
            if pa.types.is_struct(f.type):
                children = self.fields(list(f.type), path)
                if children:
                    out.append(f.with_type(pa.struct(children)).with_nullable(True))
                continue
            if self.columns is not None and not self._named(path):
                continue
            self.added += 1
            out.append(f.with_nullable(True))
        return out


def _null_count_fields(fields: Sequence[pa.Field[Any]]) -> list[pa.Field[Any]]:
    return [f.with_type(pa.struct(_null_count_fields(list(f.type))) if pa.types.is_struct(f.type)
                        else pa.int64()) for f in fields]


def _min_max_fields(fields: Sequence[pa.Field[Any]]) -> list[pa.Field[Any]]:
    out: list[pa.Field[Any]] = []
    for f in fields:
        if pa.types.is_struct(f.type):
            children = _min_max_fields(list(f.type))
            if children:
                out.append(f.with_type(pa.struct(children)))
        elif _has_min_max(f.type):
            out.append(f)
    return out


def stats_type(schema: pa.Schema, partition_columns: Sequence[str],
               configuration: Mapping[str, str | None]) -> pa.StructType:
    """The statistics a file of the table is expected to have (``numRecords``, ``nullCount``,
    ``minValues``, ``maxValues``), with the table's logical names and field metadata."""
    parts = set(partition_columns)
    base = _Selection(configuration).fields([f for f in schema if f.name not in parts], ())
    out: list[pa.Field[Any]] = [pa.field("numRecords", pa.int64())]
    if base:
        out.append(pa.field("nullCount", pa.struct(_null_count_fields(base))))
        bounds = _min_max_fields(base)
        if bounds:
            out.append(pa.field("minValues", pa.struct(bounds)))
            out.append(pa.field("maxValues", pa.struct(bounds)))
    return pa.struct(out)


def _physical_stats_type(logical: pa.StructType, mode: str) -> pa.StructType:
    """``logical`` keyed as the JSON ``stats`` are: by physical name in a column-mapping table."""
    if mode == "none":
        return logical
    return pa.struct([f if f.name == "numRecords" else f.with_type(physical_type(f.type, mode))
                      for f in logical])


def _plain(t: pa.DataType) -> pa.DataType:
    """``t`` without field metadata (column-mapping ids and names are the log's business)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in t])
    return t


# --------------------------------------------------------------------------- partition values


def typed_partition(strings: Any, t: pa.DataType, column: str, paths: Any, table: str) -> Any:
    """Partition values of ``column`` as type ``t``: empty text is null (PROTOCOL.md), anything
    else is parsed once per distinct value, as every other reader of this library parses it."""
    if not len(strings):
        return pa.array([], t)
    empty = pc.equal(strings, string_scalar(""))
    if pc.any(empty).as_py():
        strings = pc.if_else(empty, null_scalar(pa.string()), strings)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return strings.cast(t)
    encoded: Any = pc.dictionary_encode(strings)
    distinct = encoded.dictionary.to_pylist()
    parsed: list[object] = []
    for text in distinct:
        try:
            parsed.append(parse_partition_value(text, t))
        except InvalidArgumentError as e:
            i = pc.index(strings, text).as_py()
            raise CorruptLogError(
                f"table {table}: file {paths[i].as_py()!r} has partition value {text!r} for "
                f"column {column!r}, which is not a {t}: {e}") from None
    return pa.array(parsed, t).take(encoded.indices)


def partition_mask(strings: Sequence[Any], names: Sequence[str], keep: PartitionFilter) -> Any:
    """Which rows ``keep`` accepts, asking it once per distinct combination of values."""
    if len(strings) == 1:
        key = strings[0]
    else:
        tagged = [pc.fill_null(pc.binary_join_element_wise("v", s, ""), "n") for s in strings]
        key = pc.binary_join_element_wise(*tagged, "\x00")
    encoded: Any = pc.dictionary_encode(key, null_encoding="encode")
    first = pc.index_in(encoded.dictionary, key)
    combos = [s.take(first).to_pylist() for s in strings]
    verdicts = [bool(keep(dict(zip(names, values, strict=True))))
                for values in zip(*combos, strict=True)]
    return pa.array(verdicts, pa.bool_()).take(encoded.indices)


# --------------------------------------------------------------------------- the table


def _struct_child(arr: Any, name: str) -> Any:
    return arr.field(name)


def _chunked(parts: list[Any], t: pa.DataType) -> Any:
    chunked: Any = pa.chunked_array
    return chunked(parts, type=t)


def flattened(table: pa.Table) -> pa.Table:
    """Every struct column spread into ``parent.child`` columns, however deep (a null parent
    makes its children null; each column keeps its field's nullability, as deltalake's)."""
    fields: list[pa.Field[Any]] = []
    columns: list[Any] = []

    def spread(f: pa.Field[Any], column: Any) -> None:
        if not pa.types.is_struct(f.type):
            fields.append(f)
            columns.append(column)
            return
        for child, values in zip(f.type, column.flatten(), strict=True):
            spread(child.with_name(f"{f.name}.{child.name}"), values)

    for f, column in zip(table.schema, table.columns, strict=True):
        spread(f, column)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


class TextsNeeded(Exception):
    """Rows without their JSON statistics (``ADD_LIGHT``) were given, and the typed ones do
    not answer for all of them: the caller gives the whole rows instead."""


def add_actions_table(chunks: Sequence[Any], schema: pa.Schema, partition_columns: Sequence[str],
                      configuration: Mapping[str, str | None], *, flatten: bool = False,
                      deletion_vectors: bool = False, keep: PartitionFilter | None = None,
                      table: str = "", stats_parsed: Sequence[Any | None] | None = None,
                      tight_bounds: bool = False) -> pa.Table:
    """The files of ``chunks`` (canonical ``add`` rows, see ``checkpoint.schema.ADD``) as
    deltalake's ``get_add_actions`` table (see the module docstring).

    ``schema`` is the table's logical schema; ``deletion_vectors`` adds the
    ``deletion_vector`` column; ``keep`` lists only the files whose partition values it
    accepts; ``table`` names the table in errors.  ``stats_parsed`` holds, for each chunk, the
    checkpoint's typed statistics of its rows (or None): where they give what the JSON text
    would, they are used instead of parsing it (``stats_arrays.stats_from_struct``).  A chunk
    of ``ADD_LIGHT`` rows (no texts) raises TextsNeeded unless they answer for every row.
    ``tight_bounds`` adds the ``tight_bounds`` column (the statistics' ``tightBounds``, null
    where a file does not say), which file pruning needs and deltalake does not list.
    """
    mode = mapping_mode(configuration, table)
    pcols = list(partition_columns)
    pfields = [schema.field(c) for c in pcols]
    pkeys = [physical_name(f, mode) for f in pfields]
    expected = stats_type(schema, pcols, configuration)
    physical = _physical_stats_type(expected, mode)
    logical: Any = _plain(expected)
    if tight_bounds:
        tight = pa.field("tightBounds", pa.bool_())
        physical = pa.struct([*physical, tight])
        logical = pa.struct([*logical, tight])
    ptype = pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in pfields])

    columns: dict[str, list[Any]] = {}
    parsed_chunks = list(stats_parsed) if stats_parsed is not None else [None] * len(chunks)
    for chunk, parsed in zip(chunks, parsed_chunks, strict=True):
        values = _struct_child(chunk, "partitionValues")
        strings = partition_strings(values, pkeys) if pcols else []
        if keep is not None and pcols and len(chunk):
            mask = partition_mask(strings, pcols, keep)
            if not pc.all(mask).as_py():
                chunk = chunk.filter(mask)
                strings = [s.filter(mask) for s in strings]
                parsed = None if parsed is None else parsed.filter(mask)
        paths = _struct_child(chunk, "path")
        if chunk.type.get_field_index("stats") >= 0:
            stats = stats_from_struct(parsed, _struct_child(chunk, "stats"), logical, physical)
        else:
            stats = struct_only_stats(parsed, logical, physical)
            if stats is None:
                raise TextsNeeded(table)
        out: dict[str, Any] = {
            "path": paths,
            "size_bytes": _struct_child(chunk, "size"),
            "modification_time": _struct_child(chunk, "modificationTime"),
            "num_records": stats.field("numRecords"),
        }
        for src, name in (("nullCount", "null_count"), ("minValues", "min"),
                          ("maxValues", "max")):
            if logical.get_field_index(src) >= 0:
                out[name] = stats.field(src)
        if pcols:
            typed = [typed_partition(s, f.type, f.name, paths, table)
                     for s, f in zip(strings, pfields, strict=True)]
            out["partition"] = pa.StructArray.from_arrays(typed, fields=list(ptype))
        out["data_change"] = pc.fill_null(_struct_child(chunk, "dataChange"), true_scalar())
        if deletion_vectors:
            out["deletion_vector"] = _struct_child(chunk, "deletionVector")
        if tight_bounds:
            out["tight_bounds"] = stats.field("tightBounds")
        for name, arr in out.items():
            columns.setdefault(name, []).append(arr)

    out_schema = _output_schema(logical, ptype if pcols else None, deletion_vectors,
                                tight_bounds)
    result = pa.Table.from_arrays(
        [_chunked(columns.get(f.name, []), f.type) for f in out_schema], schema=out_schema)
    return flattened(result) if flatten else result


def _output_schema(logical: Any, ptype: pa.StructType | None, deletion_vectors: bool,
                   tight_bounds: bool) -> pa.Schema:
    """The columns of ``add_actions_table`` in deltalake's order, statistics typed by
    ``logical``; ``partition`` only where the table is partitioned (``ptype``)."""
    fields: list[pa.Field[Any]] = [
              pa.field("path", pa.string(), False), pa.field("size_bytes", pa.int64(), False),
              pa.field("modification_time", pa.int64(), False),
              pa.field("num_records", pa.int64())]
    fields += [pa.field(name, logical.field(src).type)
               for src, name in (("nullCount", "null_count"), ("minValues", "min"),
                                 ("maxValues", "max")) if logical.get_field_index(src) >= 0]
    if ptype is not None:
        fields.append(pa.field("partition", ptype))
    fields.append(pa.field("data_change", pa.bool_()))
    if deletion_vectors:
        fields.append(pa.field("deletion_vector", DELETION_VECTOR))
    if tight_bounds:
        fields.append(pa.field("tight_bounds", pa.bool_()))
    return pa.schema(fields)


__all__ = [
    "DEFAULT_INDEXED_COLUMNS",
    "PartitionFilter",
    "add_actions_table",
    "flattened",
    "parse_stats",
    "partition_mask",
    "partition_strings",
    "stats_columns",
    "stats_type",
    "typed_partition",
]
