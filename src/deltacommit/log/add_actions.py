"""The live file list as one Arrow table (``DeltaTable.get_add_actions``), built column by column.  Pure.

A table of a million files has a million ``add`` actions; a Python object for each costs more
than the whole list as Arrow, and a caller asking for the list as a table (to filter it, sum
sizes, find small files, look at statistics) wants columns anyway.  So the table is built from
the ``add`` rows as the checkpoint holds them (``log.lazy_files``: still Arrow, minus the keys
changed after the checkpoint) and the small tail of adds committed since, without one Python
object per file: statistics are parsed from their JSON text by Arrow's JSON reader in one pass,
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

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from deltacommit.column_mapping import mapping_mode, physical_name, physical_type
from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.log.checkpoint_format import DELETION_VECTOR
from deltacommit.log.parsed_stats import stats_struct_array
from deltacommit.partitions import parse_partition_value

#: Decides whether a file is listed from its partition values (keyed by logical name; None for
#: null), evaluated once per distinct combination of values.
PartitionFilter = Callable[[Mapping[str, str | None]], bool]

#: deltalake's default for ``delta.dataSkippingNumIndexedCols``.
DEFAULT_INDEXED_COLUMNS = 32


# --------------------------------------------------------------------------- the stats schema


def _has_min_max(t: pa.DataType) -> bool:
    types = pa.types
    return bool(types.is_integer(t) or types.is_floating(t) or types.is_boolean(t)
                or types.is_string(t) or types.is_large_string(t) or types.is_date(t)
                or types.is_timestamp(t) or types.is_decimal(t))


def _split_outside_backticks(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in text:
        if ch == "`":
            quoted = not quoted
            cur.append(ch)
        elif ch == sep and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def stats_columns(text: str) -> list[tuple[str, ...]]:
    """The column paths of ``delta.dataSkippingStatsColumns`` (comma-separated, nested names
    dotted, any name in backticks)."""
    out: list[tuple[str, ...]] = []
    for item in _split_outside_backticks(text, ","):
        item = item.strip()
        if not item:
            continue
        names = []
        for name in _split_outside_backticks(item, "."):
            name = name.strip()
            if len(name) >= 2 and name[0] == "`" and name[-1] == "`":
                name = name[1:-1].replace("``", "`")
            names.append(name)
        out.append(tuple(names))
    return out


class _Selection:
    """Which leaf columns carry statistics, walked in schema order (deltalake 1.6.0's rule)."""

    def __init__(self, configuration: Mapping[str, str | None]) -> None:
        listed = configuration.get("delta.dataSkippingStatsColumns")
        self.columns = stats_columns(listed) if listed is not None else None
        self.limit: int | None = None
        if self.columns is None:
            raw = configuration.get("delta.dataSkippingNumIndexedCols")
            try:
                n = DEFAULT_INDEXED_COLUMNS if raw is None else int(raw.strip())
            except ValueError:
                n = DEFAULT_INDEXED_COLUMNS
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


# --------------------------------------------------------------------------- parsing statistics


def _json_read_type(t: pa.DataType) -> pa.DataType:
    """``t`` as Arrow's JSON reader can fill it: it reads no dates from strings, so dates are
    read as text and cast afterwards."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _json_read_type(f.type)) for f in t])
    if pa.types.is_date(t):
        return pa.string()
    return t


def _retyped(arr: Any, t: pa.DataType) -> Any:
    """``arr`` (read with ``_json_read_type(t)``, or with physical names) as type ``t``:
    same shape, ``t``'s names, dates cast from their text."""
    if pa.types.is_struct(t):
        children = [_retyped(arr.field(i), t.field(i).type) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(
            children, fields=[pa.field(f.name, f.type) for f in t],
            mask=arr.is_null() if arr.null_count else None)
    if arr.type != t:
        if pa.types.is_date(t) and pa.types.is_string(arr.type):
            # Only the date part counts (a writer may add a time); a bad one fails the cast.
            arr = pc.utf8_slice_codeunits(arr, 0, 10)
        return arr.cast(t)
    return arr


#: Bytes of JSON text each task of the statistics parser gets: smaller parts cost more CPU
#: (each is a reader of its own) for no more parallelism on a few cores.
_PART_BYTES = 4 << 20


def _offsets(strings: Any) -> Any:
    """The offsets of a string array, as numpy, for its rows only (it may be a slice)."""
    return np.frombuffer(strings.buffers()[1], dtype=np.int32)[
        strings.offset:strings.offset + len(strings) + 1]


def _read_parts(data: pa.Buffer, offsets: Any, schema: pa.Schema) -> pa.Table:
    """The JSON objects of ``data`` (one after another, as the string array holds them), read
    in parts of about ``_PART_BYTES`` split at row boundaries, the parts on parallel threads.

    Arrow's JSON reader would split a text into blocks itself, but only at newlines: feeding it
    the string array's own character buffer, cut here, saves a copy of every text.
    """
    first, total = int(offsets[0]), int(offsets[-1]) - int(offsets[0])
    n_parts = max(1, min(total // _PART_BYTES, 256))
    cuts = np.searchsorted(offsets, first + np.arange(n_parts + 1) * total // n_parts)
    cuts[0], cuts[-1] = 0, len(offsets) - 1
    spans = [(int(offsets[a]), int(offsets[b])) for a, b in itertools.pairwise(cuts)
             if offsets[b] > offsets[a]]
    read_json: Any = pa_json.read_json
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def read(span: tuple[int, int]) -> pa.Table:
        part = data.slice(span[0], span[1] - span[0])
        options = pa_json.ReadOptions(use_threads=False, block_size=max(len(part) + 1, 1 << 16))
        table: pa.Table = read_json(pa.BufferReader(part), parse_options=parse,
                                    read_options=options)
        return table

    if len(spans) <= 1:
        tables = [read(span) for span in spans]
    else:
        with ThreadPoolExecutor(max_workers=min(len(spans), os.cpu_count() or 1)) as pool:
            tables = list(pool.map(read, spans))
    if not tables:
        return schema.empty_table()
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _parse_fast(texts: Any, read_type: Any) -> Any:
    """``parse_stats``'s fast path: None when Arrow's reader refuses a text (or finds more or
    fewer objects than rows with text)."""
    present: Any = np.diff(_offsets(texts)) > 0
    if texts.null_count:
        valid = texts.is_valid().to_numpy(zero_copy_only=False)
        if (present & ~valid).any():
            # Character data under null rows: start again from an array without any.
            texts = pc.if_else(valid, texts, pa.scalar("", pa.string()))
        present &= valid
    try:
        table = _read_parts(texts.buffers()[2], _offsets(texts), pa.schema(list(read_type)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    if table.num_rows != int(present.sum()):
        return None
    children: list[Any] = [c.combine_chunks() if c.num_chunks != 1 else c.chunk(0)
                           for c in table.columns]
    parsed = pa.StructArray.from_arrays(children, fields=list(read_type))
    if table.num_rows == len(texts):
        return parsed
    # Rows without statistics are null: pick each row's object by its rank among the others.
    rank = np.cumsum(present) - 1
    return parsed.take(pa.array(rank, pa.int64(), mask=~present))


def parse_stats(texts: Any, logical: pa.StructType, physical: pa.StructType) -> Any:
    """The JSON ``stats`` texts as structs of type ``logical`` (null where a file has none).

    ``physical`` is the same type keyed as the texts are.  Arrow's JSON reader parses them all
    at once; if it refuses any (a value that does not fit its column's type, such as ``"NaN"``
    for a float, a bound with more decimal places than its decimal type, a malformed text),
    every row is parsed by ``parsed_stats`` instead, which leaves just the misfits null.
    """
    if len(texts) == 0:
        return pa.array([], logical)
    read_type: Any = _json_read_type(physical)
    parsed = _parse_fast(texts, read_type)
    if parsed is not None:
        try:
            return _retyped(parsed, logical)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # a date that is not one
    return _retyped(stats_struct_array(texts.to_pylist(), physical), logical)


# --------------------------------------------------------------------------- partition values


def _same_keys(values: Any, keys: Sequence[str]) -> list[Any] | None:
    """``partition_strings`` when every row's map holds exactly ``keys`` in the same order (as
    every writer writes them): each key's values are every ``len(keys)``-th entry."""
    n, width = len(values), len(keys)
    if values.null_count or width == 0:
        return None
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset:values.offset + n + 1]
    first = int(offsets[0])
    if int(offsets[-1]) - first != n * width or not (np.diff(offsets) == width).all():
        return None
    flat_keys = values.keys.slice(first, n * width)
    items = values.items.slice(first, n * width)
    out = []
    for j, key in enumerate(keys):
        at = pa.array(np.arange(j, n * width, width, dtype=np.int64))
        if not pc.all(pc.equal(flat_keys.take(at), pa.scalar(key, pa.string()))).as_py():
            return None
        out.append(items.take(at).cast(pa.string()))
    return out


def partition_strings(values: Any, keys: Sequence[str]) -> list[Any]:
    """The ``partitionValues`` entry of each key, one string array per key (null where absent)."""
    if not len(values):
        return [pa.array([], pa.string()) for _ in keys]
    same = _same_keys(values, keys)
    if same is not None:
        return same
    return [pc.map_lookup(values, pa.scalar(k, pa.string()), "first").cast(pa.string())
            for k in keys]


def typed_partition(strings: Any, t: pa.DataType, column: str, paths: Any, table: str) -> Any:
    """Partition values of ``column`` as type ``t``: empty text is null (PROTOCOL.md), anything
    else is parsed once per distinct value, as every other reader of this library parses it."""
    if not len(strings):
        return pa.array([], t)
    empty = pc.equal(strings, pa.scalar("", pa.string()))
    if pc.any(empty).as_py():
        strings = pc.if_else(empty, pa.scalar(None, pa.string()), strings)
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


def add_actions_table(chunks: Sequence[Any], schema: pa.Schema, partition_columns: Sequence[str],
                      configuration: Mapping[str, str | None], *, flatten: bool = False,
                      deletion_vectors: bool = False, keep: PartitionFilter | None = None,
                      table: str = "") -> pa.Table:
    """The files of ``chunks`` (canonical ``add`` rows, see ``checkpoint_format.ADD``) as
    deltalake's ``get_add_actions`` table (see the module docstring).

    ``schema`` is the table's logical schema; ``deletion_vectors`` adds the
    ``deletion_vector`` column; ``keep`` lists only the files whose partition values it
    accepts; ``table`` names the table in errors.
    """
    mode = mapping_mode(configuration, table)
    pcols = list(partition_columns)
    pfields = [schema.field(c) for c in pcols]
    pkeys = [physical_name(f, mode) for f in pfields]
    expected = stats_type(schema, pcols, configuration)
    physical = _physical_stats_type(expected, mode)
    logical: Any = _plain(expected)
    ptype = pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in pfields])

    columns: dict[str, list[Any]] = {}
    for chunk in chunks:
        values = _struct_child(chunk, "partitionValues")
        strings = partition_strings(values, pkeys) if pcols else []
        if keep is not None and pcols and len(chunk):
            mask = partition_mask(strings, pcols, keep)
            if not pc.all(mask).as_py():
                chunk = chunk.filter(mask)
                strings = [s.filter(mask) for s in strings]
        paths = _struct_child(chunk, "path")
        stats = parse_stats(_struct_child(chunk, "stats"), logical, physical)
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
        out["data_change"] = pc.fill_null(_struct_child(chunk, "dataChange"), True)
        if deletion_vectors:
            out["deletion_vector"] = _struct_child(chunk, "deletionVector")
        for name, arr in out.items():
            columns.setdefault(name, []).append(arr)

    fields: list[pa.Field[Any]] = [
              pa.field("path", pa.string(), False), pa.field("size_bytes", pa.int64(), False),
              pa.field("modification_time", pa.int64(), False),
              pa.field("num_records", pa.int64())]
    fields += [pa.field(name, logical.field(src).type)
               for src, name in (("nullCount", "null_count"), ("minValues", "min"),
                                 ("maxValues", "max")) if logical.get_field_index(src) >= 0]
    if pcols:
        fields.append(pa.field("partition", ptype))
    fields.append(pa.field("data_change", pa.bool_()))
    if deletion_vectors:
        fields.append(pa.field("deletion_vector", DELETION_VECTOR))
    out_schema = pa.schema(fields)
    result = pa.Table.from_arrays(
        [_chunked(columns.get(f.name, []), f.type) for f in out_schema], schema=out_schema)
    return flattened(result) if flatten else result


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
